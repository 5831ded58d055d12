"""The generated parts of the book: the claims page's tables and the measured runtimes.

Run by ``make pages`` (part of ``make book``) after the notebooks were executed into
``book/executed/`` by papermill, each publishing its claims table (``iterlin.claims.publish_claims``)
to ``book/executed/claims/<name>.json`` (the Makefile sets ``ITERLIN_CLAIMS`` there, so these are
exactly the claims of the executed copies, never those of another run). It writes

* ``book/executed/claims.md``: a summary and, per notebook in the order of ``_toc.yml``, its
  claims as a Markdown table; included by ``book/claims.md``;
* ``book/executed/runtimes.md``: per notebook, the scale, the parameters given to papermill,
  the wall time papermill measured, and whether the results were computed or read from the result
  cache; included by ``book/reproducibility.md``;
* ``book/executed/scales.md``: every experiment's defaults at every scale
  (:func:`iterlin.experiments.scales_table`); included by ``book/reproducibility.md``.

Both live in the git-ignored ``book/executed/`` and are rewritten on every build, so nothing
generated is committed. Everything is read from local files: no network, no notebook execution.

Every notebook listed in ``_toc.yml`` must have been executed and must have published its claims:
otherwise this exits non-zero naming what is missing, rather than building a claims page that
silently lacks a notebook.

Usage: ``python book/generate.py [--root .]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import yaml

from iterlin.claims import COLUMNS, HOLDS
from iterlin.experiments import scales_table

EXECUTED = "book/executed"
#: What ``iterlin.cache.cached`` prints (stdout) when it computes or loads an experiment's results.
COMPUTED, LOADED = "computed and cached", "loaded cached results"
# ASCII punctuation that Markdown/MyST could read as syntax inside a table cell (`$` would open
# maths, `{` a role, `|` a new cell): each is written with a backslash, which CommonMark allows
# before any ASCII punctuation.
_ESCAPE = set("\\`*_[]{}<>$|~#!")


class GenerateError(RuntimeError):
    """Something the generated pages need is missing or malformed."""


def escape(text: str) -> str:
    """``text`` as literal Markdown inside a table cell (one line)."""
    text = " ".join(str(text).split())
    return "".join("\\" + c if c in _ESCAPE else c for c in text)


def toc_notebooks(toc_path: Path) -> list[str]:
    """Names of the executed notebooks listed in ``_toc.yml`` (``book/executed/<name>``), in order."""
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    names: list[str] = []

    def walk(entries):
        for entry in entries or []:
            f = entry.get("file")
            if f and f.startswith(EXECUTED + "/"):
                names.append(f[len(EXECUTED) + 1 :])
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key))

    walk(toc.get("parts"))
    walk(toc.get("chapters"))
    return names


def read_claims(path: Path, name: str) -> dict:
    """A claims JSON written by ``publish_claims``: ``{"name", "scale", "rows": [...]}``, checked."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GenerateError(f"{path}: unreadable claims file ({type(e).__name__}: {e})") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list) or "scale" not in doc:
        raise GenerateError(f"{path}: not a claims file of iterlin.claims.publish_claims")
    if doc.get("name") != name:
        raise GenerateError(f"{path}: holds the claims of {doc.get('name')!r}, expected {name!r}")
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("claim", "paper", "measured", "holds")):
            raise GenerateError(f"{path}: row {i} is not a claim (claim, paper, measured, holds strings)")
        if row["holds"] not in HOLDS:
            raise GenerateError(f"{path}: row {i} has holds={row['holds']!r}, expected one of {HOLDS}")
    return doc


def claims_table(rows: list[dict]) -> str:
    """The rows as a Markdown table, every cell escaped."""
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [r["claim"], r["paper"], r["measured"], r["holds"], r.get("rule", "")]
        out.append("| " + " | ".join(escape(c) for c in cells) + " |")
    return "\n".join(out)


def _title(nb: dict, name: str) -> str:
    """The notebook's first Markdown heading (its page title), else its name."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        for line in src.splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return name


def _outputs_text(nb: dict) -> str:
    parts = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            text = out.get("text")
            if text is None:
                text = (out.get("data") or {}).get("text/plain", "")
            parts.append("".join(text) if isinstance(text, list) else str(text))
    return "\n".join(parts)


def results_origin(nb: dict) -> str:
    """Whether the notebook computed its results or read them from the cache (from its output)."""
    text = _outputs_text(nb)
    computed, loaded = COMPUTED in text, LOADED in text
    if computed and loaded:
        return "computed (part), cache (part)"
    if computed:
        return "computed"
    if loaded:
        return "read from the result cache"
    return "not reported"


def _params(nb: dict) -> str:
    given = ((nb.get("metadata") or {}).get("papermill") or {}).get("parameters") or {}
    return ", ".join(f"{k}={v!r}" for k, v in sorted(given.items())) or "none (defaults)"


def _seconds(nb: dict) -> str:
    d = ((nb.get("metadata") or {}).get("papermill") or {}).get("duration")
    if not isinstance(d, (int, float)) or not math.isfinite(d):
        return "not recorded"
    return f"{d:.0f}"


def load(root: Path) -> list[dict]:
    """Per toc notebook: name, title, executed notebook and claims; GenerateError if any is missing."""
    executed = root / EXECUTED
    names = toc_notebooks(root / "_toc.yml")
    problems, items = [], []
    for name in names:
        nb_path, claims_path = executed / f"{name}.ipynb", executed / "claims" / f"{name}.json"
        if not nb_path.is_file():
            problems.append(f"{nb_path} is missing: run `make notebooks` (notebooks/{name}.ipynb executed by papermill)")
            continue
        if not claims_path.is_file():
            problems.append(
                f"{claims_path} is missing: notebooks/{name}.ipynb ran but published no claims under the name "
                f"{name!r} (its last cell must call iterlin.claims.publish_claims({name!r}, rows, scale=scale))"
            )
            continue
        try:
            nb = json.loads(nb_path.read_text(encoding="utf-8"))
            items.append({"name": name, "nb": nb, "title": _title(nb, name), "claims": read_claims(claims_path, name)})
        except GenerateError as e:
            problems.append(str(e))
        except (OSError, ValueError) as e:
            problems.append(f"{nb_path}: unreadable notebook ({type(e).__name__}: {e})")
    if problems:
        raise GenerateError("cannot generate the book's claims and runtime pages:\n  " + "\n  ".join(problems))
    return items


def claims_page(items: list[dict]) -> str:
    """Markdown: a summary table, then one section per notebook with its claims table."""
    lines = [
        "| notebook | scale | claims | holds | does not hold | n/a at this scale |",
        "|---|---|---|---|---|---|",
    ]
    totals = [0, 0, 0, 0]
    for it in items:
        rows = it["claims"]["rows"]
        counts = [len(rows)] + [sum(r["holds"] == h for r in rows) for h in HOLDS]
        totals = [a + b for a, b in zip(totals, counts)]
        lines.append(
            f"| {{doc}}`{it['name']} <executed/{it['name']}>` | {escape(it['claims']['scale'])} | "
            + " | ".join(str(c) for c in counts)
            + " |"
        )
    lines.append("| **all** | | " + " | ".join(f"**{c}**" for c in totals) + " |")
    out = ["\n".join(lines), ""]
    for it in items:
        c = it["claims"]
        out += [
            f"## {escape(it['title'])}",
            "",
            f"From {{doc}}`executed/{it['name']}`, executed at scale `{c['scale']}`.",
            "",
            claims_table(c["rows"]) if c["rows"] else "*(this notebook published an empty claims table)*",
            "",
        ]
    return "\n".join(out)


def runtimes_page(items: list[dict]) -> str:
    """Markdown table of the papermill wall times of the executed notebooks."""
    lines = [
        "| notebook | scale | parameters given | wall time (s) | results |",
        "|---|---|---|---|---|",
    ]
    total = 0.0
    for it in items:
        nb = it["nb"]
        secs = _seconds(nb)
        total += float(secs) if secs.isdigit() else 0.0
        lines.append(
            f"| {{doc}}`{it['name']} <executed/{it['name']}>` | {escape(it['claims']['scale'])} | "
            f"{escape(_params(nb))} | {secs} | {results_origin(nb)} |"
        )
    lines.append(f"| **all** | | | **{total:.0f}** | |")
    cores = os.cpu_count()
    return "\n".join(lines) + (
        f"\n\nWall time as papermill measured it, kernel start-up and JAX compilation included, on the "
        f"machine that built this copy of the book ({cores} CPU cores). A notebook whose results were "
        "read from the result cache only replotted them.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the repository root")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        items = load(root)
    except GenerateError as e:
        print(f"book/generate.py: {e}", file=sys.stderr)
        return 1
    executed = root / EXECUTED
    pages = (("claims.md", claims_page(items)), ("runtimes.md", runtimes_page(items)), ("scales.md", scales_table()))
    for name, text in pages:
        tmp = executed / f".{name}.partial"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, executed / name)
    print(f"book/generate.py: wrote {EXECUTED}/claims.md, runtimes.md and scales.md for {len(items)} notebooks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
