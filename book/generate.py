"""The generated parts of the book: the claims page's tables, the reference runs and the runtimes.

Run by ``make pages`` (part of ``make book``) after the notebooks were executed into
``book/executed/`` by papermill, each publishing its claims table (``iterlin.repro.claims.publish_claims``)
to ``book/executed/claims/<name>.json`` (the Makefile sets ``ITERLIN_CLAIMS`` there, so these are
exactly the claims of the executed copies, never those of another run). It also reads the committed
reference runs, ``results/<name>/`` (:mod:`iterlin.experiments.reference`: ``claims.json`` and
``provenance.json``; ``--results`` or ``$ITERLIN_RESULTS`` name another folder). It writes

* ``book/executed/claims.md``: first the verdicts of the reference runs (a tally per notebook, then
  per notebook its reference run's provenance line and claims), then those of this build's runs
  (the executed notebooks, at the scale they ran at), each notebook in the order of ``_toc.yml``;
  included by ``book/claims.md``. Rows of kind ``"check"`` (consistency checks that hold by
  construction) are listed in a separate table under :data:`iterlin.repro.claims.CHECKS_HEADING` and
  never counted with the claims' verdicts;
* ``book/executed/references.md``: per notebook, its reference run's provenance (scale, device,
  seeds, date, commit, wall time, whether the library has changed since); included by
  ``book/reproducibility.md``;
* ``book/executed/runtimes.md``: per notebook, the scale, the parameters given to papermill,
  the wall time papermill measured, and whether the results were computed or read from the result
  cache; included by ``book/reproducibility.md``;
* ``book/executed/scales.md``: every experiment's defaults at every scale
  (:func:`iterlin.experiments.scales_table`); included by ``book/reproducibility.md``;
* ``book/executed/findings.md``: "What this edition found", the paper's claims
  (:data:`iterlin.experiments.findings.FINDINGS`), each with its decisive experiment's verdict and
  measurement read from that experiment's reference run, and the verdicts of the other experiments
  that measure it; included by ``book/intro.md``, so the front page prints the verdicts the figure
  pages print.
* ``book/executed/protocol.md``: the claims protocol (``iterlin/experiments/claims.toml``): every
  row with its status and date, the rows' hash beside what each reference run recorded, and every
  amendment with the verdict under the original row and the amended one; included by
  ``book/protocol.md``.

They live in the git-ignored ``book/executed/`` and are rewritten on every build, so nothing
generated is committed. Everything is read from local files: no network, no notebook execution.

Every notebook listed in ``_toc.yml`` must have been executed and must have published its claims,
and its page must show no progress bar and no local path (a warning naming a file of the build
machine, e.g. tqdm's ``TqdmWarning``): otherwise this exits non-zero naming what is wrong, rather
than building a claims page that silently lacks a notebook or pages that show the build machine.
A notebook without a reference run is listed as such (``make results NAMES=<name>`` computes one);
a reference run that cannot be read, or whose provenance or claims are not what its
``results.npz`` stores (:func:`iterlin.experiments.reference.load` checks them), is an error
naming the file.

Usage: ``python book/generate.py [--root .] [--results results]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import yaml

from iterlin.checkpoint import CheckpointError
from iterlin.repro.claims import CHECKS_HEADING, COLUMNS, HOLDS, KINDS
from iterlin.repro.config import format_value
from iterlin.experiments import protocol, reference, scales_table
from iterlin.experiments.findings import FINDINGS, NO_RATE, findings, shared_runs

EXECUTED = "book/executed"
#: What ``iterlin.repro.cache.cached`` prints (stdout) when it computes or loads an experiment's results.
COMPUTED, LOADED = "computed and cached", "loaded cached results"
# ASCII punctuation that Markdown/MyST could read as syntax inside a table cell (`$` would open
# maths, `{` a role, `|` a new cell): each is written with a backslash, which CommonMark allows
# before any ASCII punctuation.
_ESCAPE = set("\\`*_[]{}<>$|~#!")
#: A progress bar on stderr (tqdm's "42%|" or "[00:01<00:02"): a page must not show one.
_PROGRESS = re.compile(r"\d+%\||\[\d+:\d\d<")
#: What no output of a page may contain: tqdm's warning, an installed package's path (the local
#: paths of the build machine are added by :func:`leaks`).
_LEAKS = ((re.compile(r"TqdmWarning"), "tqdm's warning"), (re.compile(r"site-packages"), "a path of an installed package"))


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


def check_rows(rows, where: str) -> list[dict]:
    """Claims rows (dicts) checked and normalised: ``claim``, ``paper``, ``measured``, ``holds``
    strings, ``holds`` in :data:`iterlin.repro.claims.HOLDS`, ``rule`` (default ``""``), ``kind`` in
    :data:`iterlin.repro.claims.KINDS` (default ``"claim"``); GenerateError naming ``where`` and the row."""
    if not isinstance(rows, list):
        raise GenerateError(f"{where}: its rows are not a list")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("claim", "paper", "measured", "holds")):
            raise GenerateError(f"{where}: row {i} is not a claim (claim, paper, measured, holds strings)")
        if row["holds"] not in HOLDS:
            raise GenerateError(f"{where}: row {i} has holds={row['holds']!r}, expected one of {HOLDS}")
        kind, rule = row.get("kind", "claim"), row.get("rule", "")
        if kind not in KINDS:
            raise GenerateError(f"{where}: row {i} has kind={kind!r}, expected one of {KINDS}")
        if not isinstance(rule, str):
            raise GenerateError(f"{where}: row {i} has rule={rule!r}, expected a string")
        out.append({**row, "rule": rule, "kind": kind})
    return out


def read_claims(path: Path, name: str) -> dict:
    """A claims JSON written by ``publish_claims``: ``{"name", "scale", "rows": [...]}``, checked
    (:func:`check_rows`)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GenerateError(f"{path}: unreadable claims file ({type(e).__name__}: {e})") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list) or "scale" not in doc:
        raise GenerateError(f"{path}: not a claims file of iterlin.repro.claims.publish_claims")
    if doc.get("name") != name:
        raise GenerateError(f"{path}: holds the claims of {doc.get('name')!r}, expected {name!r}")
    return {**doc, "rows": check_rows(doc["rows"], str(path))}


def read_reference(name: str, results: Path) -> dict | None:
    """The reference run of ``name`` in ``results/<name>/`` (:func:`iterlin.experiments.reference.load`):
    ``{"scale", "seeds", "provenance", "caption", "rows"}``, or None when there is none;
    GenerateError when it cannot be read or is another notebook's."""
    where = results / name
    try:
        ref = reference.load(name, base=results)
        if ref is None:
            return None
        changed = ref.changed_since  # the code that computes the figure differs from the run's
        caption = reference.provenance_line(ref.provenance, changed=changed)
    except reference.ReferenceMismatch as e:
        raise GenerateError(f"{e} (the book would print what was not computed: recompute it with "
                            f"`make results NAMES={name}`)") from e
    except (OSError, ValueError, KeyError, TypeError, CheckpointError) as e:
        raise GenerateError(f"{where}: unreadable reference run ({type(e).__name__}: {e}); recompute it with "
                            f"`make results NAMES={name}`") from e
    prov = ref.provenance
    if prov.get("name", name) != name:
        raise GenerateError(f"{where}/provenance.json: is the reference run of {prov.get('name')!r}, expected {name!r}")
    rows = check_rows([r.asdict() for r in ref.rows], f"{where}/claims.json")
    return {"scale": str(prov["scale"]), "seeds": list(prov.get("seeds") or []), "provenance": prov,
            "caption": caption, "changed": changed, "rows": rows, "results": ref.results}


def split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(claims, consistency checks) of checked rows, each in its original order."""
    return [r for r in rows if r["kind"] == "claim"], [r for r in rows if r["kind"] == "check"]


def claims_table(rows: list[dict]) -> str:
    """The rows as a Markdown table, every cell escaped."""
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [r["claim"], r["paper"], r["measured"], r["holds"], r.get("rule", "")]
        out.append("| " + " | ".join(escape(c) for c in cells) + " |")
    return "\n".join(out)


def claims_tables(rows: list[dict], empty: str) -> str:
    """The claims as a Markdown table, then the consistency checks in their own table under
    :data:`iterlin.repro.claims.CHECKS_HEADING`; ``empty`` when there is neither."""
    claims, checks = split(rows)
    parts = [claims_table(claims)] if claims else []
    if checks:
        parts += [f"*{escape(CHECKS_HEADING)}*", claims_table(checks)]
    return "\n\n".join(parts) if parts else empty


def tally(rows: list[dict]) -> list[int]:
    """[number of claims, then how many of them have each verdict of HOLDS]: consistency checks
    are not counted."""
    claims, _ = split(rows)
    return [len(claims)] + [sum(r["holds"] == h for r in claims) for h in HOLDS]


def checks_cell(rows: list[dict]) -> str:
    """The consistency checks in words: ``"none"``, ``"2, all hold"`` or ``"3: 2 yes, 1 no"``."""
    _, checks = split(rows)
    if not checks:
        return "none"
    counts = [(h, sum(r["holds"] == h for r in checks)) for h in HOLDS]
    if counts[0][1] == len(checks):
        return f"{len(checks)}, all hold"
    return f"{len(checks)}: " + ", ".join(f"{c} {h}" for h, c in counts if c)


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


def leaks(nb: dict, local: tuple[str, ...] = ()) -> list[str]:
    """What the notebook's outputs show that a page must not: a progress bar on stderr, tqdm's
    warning, an installed package's path, or one of the ``local`` paths (the build machine's
    checkout, environment, home). One description per combination of these that some outputs show,
    naming the cells, the number of outputs and the first such line; ``[]`` when there is none.

    Only text outputs are read (never images, whose base64 may hold any string).
    """
    local_rx = [re.compile(re.escape(p)) for p in sorted(local, key=len, reverse=True) if len(p) > 1]
    found: dict[str, dict] = {}
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []) or []:
            texts = [out.get("text"), out.get("traceback")]
            texts += [v for k, v in (out.get("data") or {}).items() if k.startswith("text/")]
            text = "\n".join("".join(t) if isinstance(t, list) else str(t) for t in texts if t is not None)
            hits = [(rx, what) for rx, what in _LEAKS if rx.search(text)]
            path = next((rx for rx in local_rx if rx.search(text)), None)
            if path is not None:
                hits.append((path, "a local path of the build machine"))
            if out.get("name") == "stderr" and _PROGRESS.search(text):
                hits.append((_PROGRESS, "a progress bar"))
            if not hits:
                continue
            # outputs that show the same things are reported together
            entry = found.setdefault(" and ".join(what for _, what in hits), {"cells": [], "n": 0, "example": ""})
            entry["n"] += 1
            if i not in entry["cells"]:
                entry["cells"].append(i)
            if not entry["example"]:
                rx = hits[0][0]
                entry["example"] = next((ln for ln in text.splitlines() if rx.search(ln)), text).strip()[:120]
    return [f"{what} in cell{'s' if len(e['cells']) > 1 else ''} {', '.join(map(str, e['cells']))} "
            f"({e['n']} output{'s' if e['n'] > 1 else ''}; e.g. {e['example']!r})" for what, e in found.items()]


def local_paths(root: Path) -> tuple[str, ...]:
    """The build machine's paths a page must not show: the checkout, the Python environment, the home."""
    paths = {str(root), sys.prefix}
    home = os.path.expanduser("~")
    if home not in ("~", "/"):
        paths.add(home)
    return tuple(sorted(p for p in paths if len(p) > 1))


def results_folder(root: Path, results: Path | None = None) -> Path:
    """The reference runs' folder: ``results``, else ``$ITERLIN_RESULTS``, else ``<root>/results``."""
    if results is not None:
        return Path(results)
    env = os.environ.get("ITERLIN_RESULTS")
    return Path(env).expanduser() if env else root / "results"


def load(root: Path, results: Path | None = None) -> list[dict]:
    """Per toc notebook: name, title, executed notebook, its claims and its reference run (None
    when it has none); GenerateError listing every notebook that is missing, malformed or whose
    page would show a progress bar or a local path (:func:`leaks`)."""
    executed = root / EXECUTED
    results = results_folder(root, results)
    names = toc_notebooks(root / "_toc.yml")
    local = local_paths(root)
    problems, items = [], []
    for name in names:
        nb_path, claims_path = executed / f"{name}.ipynb", executed / "claims" / f"{name}.json"
        try:
            ref = read_reference(name, results)
        except GenerateError as e:
            problems.append(str(e))
            ref = None
        if not nb_path.is_file():
            problems.append(f"{nb_path} is missing: run `make notebooks` (notebooks/{name}.ipynb executed by papermill)")
            continue
        if not claims_path.is_file():
            problems.append(
                f"{claims_path} is missing: notebooks/{name}.ipynb ran but published no claims under the name "
                f"{name!r} (its last expression must be iterlin.experiments.claims(results), which publishes them)"
            )
            continue
        try:
            nb = json.loads(nb_path.read_text(encoding="utf-8"))
            shown = leaks(nb, local)
            if shown:
                problems.append(
                    f"{nb_path}: its page would show what it must not: " + "; ".join(shown) + ". Progress bars: "
                    "iterlin.experiments.run(progress=None) draws none outside a terminal; a warning naming a "
                    "local file: remove its cause (or filter it where it is raised)"
                )
            items.append({"name": name, "nb": nb, "title": _title(nb, name), "claims": read_claims(claims_path, name),
                          "reference": ref})
        except GenerateError as e:
            problems.append(str(e))
        except (OSError, ValueError) as e:
            problems.append(f"{nb_path}: unreadable notebook ({type(e).__name__}: {e})")
    if problems:
        raise GenerateError("cannot generate the book's claims and runtime pages:\n  " + "\n  ".join(problems))
    return items


def _link(name: str) -> str:
    return f"{{doc}}`{name} <executed/{name}>`"


_TALLY_HEAD = "claims | " + " | ".join(HOLDS) + " | consistency checks (not counted) |"


def _tally_rows(entries: list[tuple[str, str, list[dict] | None]]) -> list[str]:
    """Summary rows ``| notebook | scale | claims | yes | no | undecided | n/a | checks |`` and the
    total over the notebooks that have rows (``None``: no run, listed as such)."""
    lines = [f"| notebook | scale | {_TALLY_HEAD}", "|---|---|---|" + "---|" * len(HOLDS) + "---|"]
    totals = [0] * (1 + len(HOLDS))
    for name, scale, rows in entries:
        if rows is None:
            lines.append(f"| {_link(name)} | {escape(scale)} |" + " |" * (len(HOLDS) + 2))
            continue
        counts = tally(rows)
        totals = [a + b for a, b in zip(totals, counts)]
        lines.append(f"| {_link(name)} | {escape(scale)} | " + " | ".join(map(str, counts))
                     + f" | {escape(checks_cell(rows))} |")
    lines.append("| **all** | | " + " | ".join(f"**{c}**" for c in totals) + " | |")
    return lines


def claims_page(items: list[dict]) -> str:
    """Markdown: the reference runs' tally, this build's runs' tally, then per notebook its
    reference run (provenance line and claims) and this build's run (claims)."""
    refs = [it for it in items if it["reference"] is not None]
    out = [
        "## Summary",
        "",
        f"**Reference runs** ({len(refs)} of {len(items)} notebooks; committed in `results/<name>/`, "
        "computed by `make results`): the largest runs made for this edition, at the scale each names.",
        "",
        "\n".join(_tally_rows([(it["name"], it["reference"]["scale"], it["reference"]["rows"]) if it["reference"]
                               else (it["name"], "no reference run yet", None) for it in items])),
        "",
        "**This build's runs** (the notebooks executed for these pages, at the scale they ran at; at "
        "`smoke` a check that the pipeline works, not evidence):",
        "",
        "\n".join(_tally_rows([(it["name"], it["claims"]["scale"], it["claims"]["rows"]) for it in items])),
        "",
        f"Each tally counts the paper's claims by verdict ({', '.join(HOLDS)}); consistency checks hold by "
        "construction, are listed apart and are not counted with them.",
        "",
    ]
    for it in items:
        ref, c = it["reference"], it["claims"]
        out += [f"## {escape(it['title'])}", ""]
        if ref is None:
            out += [f"**Reference run.** None yet: `make results NAMES={it['name']}` computes one.", ""]
        else:
            caption = ref["caption"].removeprefix("Reference run: ")
            out += [f"**Reference run** (`results/{it['name']}/`): {escape(caption)}", "",
                    claims_tables(ref["rows"], "*(this reference run has an empty claims table)*"), ""]
        out += [
            f"**This build's run** ({{doc}}`executed/{it['name']}`), executed at scale `{c['scale']}`.",
            "",
            claims_tables(c["rows"], "*(this notebook published an empty claims table)*"),
            "",
        ]
    return "\n".join(out)


def _seeds(seeds: list) -> str:
    if not seeds:
        return "none"
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}–{seeds[-1]} ({len(seeds)})"
    return ", ".join(map(str, seeds))


def references_page(items: list[dict]) -> str:
    """Markdown table of the reference runs' provenance, one row per notebook."""
    lines = [
        "| notebook | scale | device | seeds | date (UTC) | iterlin commit | JAX | wall time (s) | library changed since |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    total = 0.0
    for it in items:
        ref = it["reference"]
        if ref is None:
            lines.append(f"| {_link(it['name'])} | no reference run yet | | | | | | | |")
            continue
        p = ref["provenance"]
        wall = p.get("wall_seconds")
        ok = isinstance(wall, (int, float)) and math.isfinite(wall)
        total += float(wall) if ok else 0.0
        commit = str(p.get("iterlin_commit", "?"))
        short = commit[:10] + ("+dirty" if commit.endswith("+dirty") else "")
        resumed = " (resumed)" if p.get("resumed") else ""
        cells = [ref["scale"], str(p.get("device", "?")), _seeds(ref["seeds"]), str(p.get("date", "?")),
                 short, str(p.get("jax_version", "?")), (f"{wall:.0f}" if ok else "not recorded") + resumed,
                 "yes" if ref["changed"] else "no"]
        lines.append(f"| {_link(it['name'])} | " + " | ".join(escape(c) for c in cells) + " |")
    lines.append(f"| **all** | | | | | | | **{total:.0f}** | |")
    return "\n".join(lines) + (
        "\n\nWall time of the computation as `python -m iterlin.experiments.reference` measured it (data "
        "loading and plotting excluded; JAX compilation included); *resumed* marks a run that continued "
        "from the checkpoints of an interrupted one, whose wall time covers only its last part. "
        "*Library changed since*: the code that computes the figure differs from the code that ran it "
        "(`code_fingerprint` in `provenance.json`), so rerunning it could give other numbers.\n"
    )


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


def _stability(experiment: str, row) -> str:
    """What the front page says of a run's stability record (``row``: its stability row or None)."""
    if experiment in NO_RATE:
        return "solved in closed form: no rate"
    return "stability not recorded" if row is None else f"stable: {escape(row['holds'])}"


#: A difference of accuracies as a claims row prints it: ``Δ -0.6 pts, 95 % t interval [-1.7, +0.4]``.
_DELTA = re.compile(r"Δ ([+\-−]?\d+(?:\.\d+)?) pts,? (?:95 % t interval |2 s\.e\. interval )?"
                    r"\[([+\-−]?\d+(?:\.\d+)?), ([+\-−]?\d+(?:\.\d+)?)\]")
#: An on-par rule's margin: ``inside ±2 pts``.
_MARGIN = re.compile(r"inside ±(\d+(?:\.\d+)?) pts")


class Forest(NamedTuple):
    """One line of the front page's forest plot: a finding's measured difference (points, as its
    decisive row defines Δ) and 95 % interval, its margin (±, None for a "better" rule read
    against 0), the paper's difference where it gives one, and the verdict."""

    label: str
    delta: float
    lo: float
    hi: float
    margin: float | None
    paper: float | None
    verdict: str


def forest(found) -> list[Forest]:
    """The :class:`Forest` lines of the findings whose decisive row compares two accuracies (a
    ``Δ … pts`` with an interval); the others are in the table only."""
    out = []
    for f in found:
        m = _DELTA.search(f.decisive["measured"]) if f.decisive is not None else None
        if m is None:
            continue
        delta, lo, hi = (float(x.replace("−", "-")) for x in m.groups())
        margin = _MARGIN.search(f.decisive["rule"])
        out.append(Forest(f"{f.finding.figure}: {f.finding.claim}", delta, lo, hi,
                          float(margin.group(1)) if margin else None, f.finding.paper_delta, f.decisive["holds"]))
    return out


def forest_plot(lines: list[Forest], path: Path) -> None:
    """The forest plot of ``lines`` as an SVG at ``path``: per line the interval and Δ, the margin
    band (grey, ±margin) or the line at 0 for a "better" rule, the paper's difference (a red cross)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.45 * len(lines) + 1.4))
    for y, f in enumerate(reversed(lines)):
        if f.margin is not None:
            ax.fill_betweenx([y - 0.35, y + 0.35], -f.margin, f.margin, color="0.85", lw=0)
        ax.plot([f.lo, f.hi], [y, y], color="k", lw=1.5)
        ax.plot([f.delta], [y], "o", color={"yes": "tab:green", "no": "tab:red"}.get(f.verdict, "tab:orange"))
        if f.paper is not None:
            ax.plot([f.paper], [y], "x", color="tab:red", ms=8)
    ax.axvline(0, color="k", lw=0.6, ls=":")
    ax.set_yticks(range(len(lines)), [f.label for f in reversed(lines)], fontsize=8)
    ax.set_xlabel("Δ in accuracy points (as each claim's row defines it) and its 95 % interval\n"
                  "grey: the margin of 'on par'; ×: the paper's; dot: green yes, red no, orange undecided", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.partial")
    fig.savefig(tmp, format="svg")
    plt.close(fig)
    os.replace(tmp, path)


def findings_page(items: list[dict], table=None, figure: Path | None = None) -> str:
    """The front page (:func:`iterlin.experiments.findings.findings` of the reference runs' rows,
    for ``table``, default :data:`~iterlin.experiments.findings.FINDINGS`): the forest plot
    (:func:`forest_plot`, written to ``figure`` when given), a short table (claim, paper, this
    edition, verdict), and the full table in a collapsed block; GenerateError when a row it names
    is missing or ambiguous."""
    rows = {it["name"]: (it["reference"] or {}).get("rows") for it in items}
    try:
        found = findings(rows, FINDINGS if table is None else table,
                         shared_runs({it["name"]: (it["reference"] or {}).get("results") for it in items}))
    except ValueError as e:
        raise GenerateError(str(e)) from e
    scale = {it["name"]: (it["reference"] or {}).get("scale") for it in items}
    out = []
    if figure is not None:
        forest_plot(forest(found), figure)
        out += [f"![Each claim's measured difference and 95 % interval against its margin](/{EXECUTED}/{figure.name})",
                ""]
    out += ["| the paper's claim | the paper | this edition | verdict | preregistered test |", "|---|---|---|---|---|"]
    for f in found:
        d = f.finding.decisive
        m = _DELTA.search(f.decisive["measured"]) if f.decisive is not None else None
        this = ("no reference run yet" if f.decisive is None else
                f"Δ {m.group(1)} [{m.group(2)}, {m.group(3)}] pts" if m else f.decisive["measured"].split(";")[0])
        out.append(f"| {escape(f.finding.figure)}: {escape(f.finding.claim)} | {escape(f.finding.paper)} | "
                   f"{escape(this)} ({_link(d.experiment)}) | **{escape(f.decisive['holds'] if f.decisive else '')}** | "
                   f"{registered_test(f.finding.registered, rows)} |")
    out += ["", "<details><summary>Details: each claim's deciding experiment, what it measured, whether its linear "
            "model stayed stable, and the other experiments that measure it</summary>", ""]
    out += ["| the paper's claim | the paper | decided by | verdict | what it measured | linear model stable? "
            "| also measured by |", "|---|---|---|---|---|---|---|"]
    for f in found:
        d = f.finding.decisive
        if f.decisive is None:
            verdict, measured = "no reference run yet", ""
        else:
            verdict, measured = f.decisive["holds"], f.decisive["measured"]
        stable = (_stability(d.experiment, f.stability) if d.experiment in NO_RATE or f.stability is None
                  else f"{f.stability['holds']}: {f.stability['measured']}")
        also = "; ".join(
            f"{_link(e.experiment)} ({escape(e.row if r is None else r['claim'])}): "
            + ("no reference run" if r is None else f"**{escape(r['holds'])}** ({_stability(e.experiment, st)})")
            + (f", the same runs as {_link(d.experiment)} for {escape(same)}: not independent evidence" if same else "")
            for e, r, st, same in zip(f.finding.also, f.also, f.also_stability, f.also_shared))
        out.append(f"| {escape(f.finding.figure)}: {escape(f.finding.claim)} | {escape(f.finding.paper)} | "
                   f"{_link(d.experiment)} ({escape(scale.get(d.experiment) or '')}) | **{escape(verdict)}** | "
                   f"{escape(measured)} | {escape(stable)} | {also} |")
    out += ["", "</details>"]
    return "\n".join(out) + "\n"


def registered_test(ids: Sequence[str], rows: Mapping[str, Any], source=None) -> str:
    """The front page's cell for a claim's confirmatory rows (``ids``): each row's test (its margin,
    seeds, pool, read rule, registration date, amendments) and its verdict from its run's claims
    (``rows``: each experiment's reference rows, None without a run), or that the run is pending;
    "none yet" without one."""
    p = source or protocol.protocol()
    cells = []
    for rid in ids:
        r = p.row(rid)
        margin = (f"±{100 * r.margin:g} pts" if r.margin is not None else
                  f"±{r.value:g} of the run's own gap (row `{r.experiment}.gap`)" if r.kind.endswith("_gap") else
                  "its 95 % interval above 0")
        amended = sum(a.id == rid for a in p.amendments)
        test = (f"{_link(r.experiment)} `{rid}`: {margin}, {r.seeds} seeds, every held-out image, {r.read}; "
                f"registered {r.registered}" + (f", amended {amended}×" if amended else ""))
        got = next((c for c in rows.get(r.experiment) or () if c.get("id") == rid), None)
        if got is None:
            cells.append(test + ": its run is not committed yet")
            continue
        parts = [x.strip() for x in got["measured"].split(";")]
        why = [x for x in parts[1:] if x.startswith("not counted")]  # a required row that did not read yes
        cells.append(test + f": **{escape(got['holds'])}** ({escape('; '.join(parts[:1] + why))})")
    return "; ".join(cells) or "none yet"


def _amendment_row(p, a, refs: dict) -> str:
    now = p.row(a.id)
    then = protocol.original(now, a)
    changed = "; ".join(f"{f}: {escape(repr(v))} → {escape(repr(getattr(now, f)))}" for f, v in a.original.items())
    ref = refs.get(now.experiment)
    if ref is None:
        before = after = "no reference run"
    else:  # each evaluated beside its experiment's other rows (a row may require them)
        rows = protocol.rows_of(now.experiment, p)
        before, after = (f"**{escape(c.holds)}** ({escape(c.measured)})" for c in (
            next(c for c in protocol.evaluate(version, ref["results"]) if c.id == a.id)
            for version in (tuple(then if r.id == a.id else r for r in rows), rows)))
    return (f"| {escape(a.id)} | {escape(a.date)} | {escape(a.reason)} | {changed} | {before} | {after} |")


def protocol_page(items: list[dict], source=None) -> str:
    """The claims protocol (:mod:`iterlin.experiments.protocol`, default the project's
    ``claims.toml``): every row with its status and date, each experiment's rows hash beside what
    its reference run recorded, and every amendment with the verdict under the original row and
    under the amended one (on the reference run's results)."""
    p = source or protocol.protocol()
    refs = {it["name"]: it["reference"] for it in items}
    out = ["| id | status | the claim | the paper | the test | margin (why that size) | seeds | conditions |",
           "|---|---|---|---|---|---|---|---|"]
    for r in p.rows:
        status = r.status + (f", registered {r.registered}" if r.registered else "")
        test = f"{r.kind}: {r.runs}; {r.metric} at {r.read}" + (
            f"; at most {r.max_relin} re-linearisations" if r.max_relin else "") + (
            "" if r.value is None else f"; the paper's {r.value:g}" if r.kind == "paper_value" else
            f"; value {r.value:g} (the rule's threshold or fraction)") + (
            f", judged at scale '{r.judged_at}' only" if r.judged_at is not None else "")
        if r.config:
            test += "; decided only on the run with " + ", ".join(f"{k}={format_value(v)}" for k, v in r.config.items())
        margin = ("none" if r.margin is None else f"{r.margin:.3g}") + (f" ({r.margin_why})" if r.margin_why else "")
        seeds = ("the scale's" if r.seeds is None else str(r.seeds)) + (f" ({r.seeds_why})" if r.seeds_why else "")
        cond = "; ".join(c for c in (r.stability, r.convergence) if c) or "none stated"
        if r.requires:
            cond += "; counted only when rows " + ", ".join(r.requires) + " read yes"
        out.append("| " + " | ".join(escape(c) for c in (r.id, status, r.claim, r.paper, test, margin, seeds, cond))
                   + " |")
    out += ["", "Each experiment's rows and what its reference run recorded of them:", "",
            "| experiment | rows | SHA-256 of its rows today | its reference run tested |", "|---|---|---|---|"]
    for name in sorted({r.experiment for r in p.rows}):
        rows = protocol.rows_of(name, p)
        ref = refs.get(name)
        record = (ref or {}).get("provenance", {}).get("protocol")
        tested = ("no reference run" if ref is None else "run before the protocol (no record)" if record is None
                  else f"rows {record['rows_sha256'][:12]} at commit {record['commit'][:10]}")
        out.append(f"| {_link(name)} | {len(rows)} | {protocol.rows_hash(rows)[:12]} | {escape(tested)} |")
    missing = [it["name"] for it in items if not protocol.rows_of(it["name"], p)]
    if missing:
        out += ["", "Claims still built in code, not yet declared as rows: " + ", ".join(_link(n) for n in missing) + "."]
    out += ["", "## Amendments", ""]
    if not p.amendments:
        out.append("None: no row has changed since it was registered.")
    else:
        out += ["| row | date | reason | changed (original → now) | verdict under the original row "
                "| verdict under the amended row |", "|---|---|---|---|---|---|"]
        out += [_amendment_row(p, a, refs) for a in p.amendments]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the repository root")
    parser.add_argument("--results", type=Path, default=None,
                        help="the reference runs (default: $ITERLIN_RESULTS, else <root>/results)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        items = load(root, args.results)
    except GenerateError as e:
        print(f"book/generate.py: {e}", file=sys.stderr)
        return 1
    executed = root / EXECUTED
    try:
        front = findings_page(items, figure=executed / "findings.svg")
    except GenerateError as e:
        print(f"book/generate.py: {e}", file=sys.stderr)
        return 1
    pages = (("claims.md", claims_page(items)), ("references.md", references_page(items)),
             ("runtimes.md", runtimes_page(items)), ("scales.md", scales_table()), ("findings.md", front),
             ("protocol.md", protocol_page(items)))
    for name, text in pages:
        tmp = executed / f".{name}.partial"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, executed / name)
    n_ref = sum(it["reference"] is not None for it in items)
    print(f"book/generate.py: wrote {EXECUTED}/claims.md, references.md, runtimes.md, scales.md, findings.md and "
          f"protocol.md for "
          f"{len(items)} notebooks ({n_ref} with a reference run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
