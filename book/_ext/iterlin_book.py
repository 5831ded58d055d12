"""Local Sphinx extension of the iterlin book (``sphinx: local_extensions`` in ``_config.yml``).

One fix to the HTML that jupyter-book 1.x writes with Sphinx 7: sphinx-thebe registers its inline
configuration script (``const THEBE_JS_URL = ...``) after the HTML builder is initialised, so the
script ends up twice in every page (once with filename ``None``, once with ``""``, which Sphinx's
de-duplication treats as different), and the second ``const`` declaration throws a JavaScript
error on every page. Here each page's scripts are de-duplicated by (file, priority, attributes),
keeping the first of each, before the page is rendered. The browser check (tests/test_site.py)
fails on any uncaught JavaScript error, so it would notice if this stopped working.

Two touches to the API page (``book/api.md``): autosummary cuts a one-line summary at the first
". " unless it ends a known abbreviation, so the paper's "(Eq. 3)", "(Fig. 8)", "(Sec. 3.3)" are
added to its list; and a NamedTuple field without a ``#:`` comment would show Python's generated
"Alias for field number N", which says nothing, so that text is dropped.

And one for the packages that re-export names defined in their submodules (``iterlin.training``,
``iterlin.data``): autodoc reads a constant's ``#:`` comment only from the module it documents, so
the comments of the re-exported constants are copied from the submodules that define them into that
module's source analysis (:data:`REEXPORTING`); without it they would go undocumented.
"""

from __future__ import annotations


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return None
    seen, kept = set(), []
    for js in scripts:
        key = (
            getattr(js, "filename", js) or "",
            getattr(js, "priority", None),
            tuple(sorted((getattr(js, "attributes", None) or {}).items())),
        )
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept
    return None


#: Abbreviations after which autosummary must not end a summary line.
ABBREVIATIONS = ("Eq.", "Eqs.", "Fig.", "Figs.", "Sec.", "Alg.")


def _drop_field_aliases(app, what, name, obj, options, lines):
    if len(lines) <= 2 and lines and lines[0].startswith("Alias for field number"):
        lines[:] = []


#: Packages whose ``__all__`` re-exports constants documented by ``#:`` comments in their submodules.
REEXPORTING = ("iterlin.training", "iterlin.data")


def _reexported_attr_docs(app):
    import importlib
    import pkgutil

    from sphinx.pycode import ModuleAnalyzer

    for name in REEXPORTING:
        package = importlib.import_module(name)
        analyzer = ModuleAnalyzer.for_module(name)
        docs = analyzer.find_attr_docs()
        for info in pkgutil.iter_modules(package.__path__, name + "."):
            for (namespace, attr), lines in ModuleAnalyzer.for_module(info.name).find_attr_docs().items():
                if namespace == "" and attr in package.__all__ and ("", attr) not in docs:
                    docs["", attr] = lines


def setup(app):
    from sphinx.ext import autosummary

    autosummary.WELL_KNOWN_ABBREVIATIONS = tuple(dict.fromkeys(autosummary.WELL_KNOWN_ABBREVIATIONS + ABBREVIATIONS))
    app.setup_extension("sphinx.ext.autodoc")
    app.connect("autodoc-process-docstring", _drop_field_aliases)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("builder-inited", _reexported_attr_docs)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
