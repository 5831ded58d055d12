"""Local Sphinx extension of the iterlin book (``sphinx: local_extensions`` in ``_config.yml``).

One fix to the HTML that jupyter-book 1.x writes with Sphinx 7: sphinx-thebe registers its inline
configuration script (``const THEBE_JS_URL = ...``) after the HTML builder is initialised, so the
script ends up twice in every page (once with filename ``None``, once with ``""``, which Sphinx's
de-duplication treats as different), and the second ``const`` declaration throws a JavaScript
error on every page. Here each page's scripts are de-duplicated by (file, priority, attributes),
keeping the first of each, before the page is rendered. The browser check (tests/test_site.py)
fails on any uncaught JavaScript error, so it would notice if this stopped working.
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


def setup(app):
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
