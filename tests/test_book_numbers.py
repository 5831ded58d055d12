"""The intervals the book's hand-written prose quotes are ones the committed reference runs measured.

The verdict tables are generated from ``results/<name>/claims.json`` (``book/generate.py``), but the
prose around them (``book/*.md`` and the notebooks' markdown cells) is written by hand and quotes
intervals from those runs ("0.7 points below, 95 % interval [−1.2, −0.1]"). Each such interval must be
one that a reference run's claims print, so that a rerun which changes the numbers makes every stale
sentence fail here until it is rewritten. Prose that describes another run names it, by its commit
(one that is not a reference run's commit of that page) or by saying that it is not committed: what
follows that name in its block (a paragraph or a list item) is that run's, and is not checked.

An interval, as the claims print one: two decimals in brackets, the upper bound signed or ≤ 0
(``[-2.0, +0.1]``, ``[-3.9, 0.0]``, ``[1.9 %, 9.9 %]`` with a sign or unit written alike); a range of
inputs such as ``[-0.5, 0.5]`` or ``[-4, 4]`` is not one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_NUMBER = r"([−+-]?\d+\.\d+)\s*%?"
INTERVAL = re.compile(r"\[\s*" + _NUMBER + r"\s*,\s*" + _NUMBER + r"\s*\]")
#: A commit named in prose: 7 to 40 hexadecimal characters with a digit and a letter.
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
NOT_COMMITTED = "not committed"


def _float(text: str) -> float:
    return float(text.replace("−", "-"))


def _intervals(text: str) -> list[tuple[str, tuple[float, float], str]]:
    """Every bracketed pair of decimals in ``text``: (text, (lower, upper), the upper bound as written)."""
    return [(m.group(0), (_float(m.group(1)), _float(m.group(2))), m.group(2)) for m in INTERVAL.finditer(text)]


def quoted_intervals(block: str) -> list[tuple[str, tuple[float, float]]]:
    """The intervals ``block`` quotes, as (text, (lower, upper)), in the claims' format (module docstring)."""
    return [(text, value) for text, value, upper in _intervals(block) if upper[0] in "+-−" or value[1] <= 0]


def blocks(markdown: str) -> list[str]:
    """Paragraphs and list items (a list item ends where the next one starts)."""
    out = []
    for paragraph in re.split(r"\n\s*\n", markdown):
        out += [b for b in re.split(r"\n(?=\s*(?:[*-]|\d+\.)\s)", paragraph) if b.strip()]
    return out


def notebook_markdown(source: str) -> str:
    """The markdown cells of a jupytext percent-format notebook, without their ``# `` prefixes."""
    cells = re.split(r"^# %%.*$", source, flags=re.M)
    heads = re.findall(r"^# %%.*$", source, flags=re.M)
    text = []
    for head, cell in zip(heads, cells[1:]):
        if "[markdown]" in head:
            text.append("\n".join(re.sub(r"^# ?", "", line) for line in cell.strip("\n").splitlines()))
    return "\n\n".join(text)


def reference_part(block: str, reference_commits: set[str]) -> str:
    """``block`` up to where it first names a run other than the page's reference runs (module
    docstring): the part whose numbers are the reference runs'."""
    ends = [m.start() for m in COMMIT.finditer(block) if not any(c.startswith(m.group(0)) for c in reference_commits)]
    ends += [i for i in [block.find(NOT_COMMITTED)] if i >= 0]
    return block[:min(ends, default=len(block))]


def unmatched(markdown: str, measured: set[tuple[float, float]], reference_commits: set[str]) -> list[str]:
    """The intervals of ``markdown`` that no reference run measured, outside what describes other runs
    (as "<interval> after “…<the text before it>”")."""
    out = []
    for block in blocks(markdown):
        part = reference_part(block, reference_commits)
        out += [f"{text} after “…{part[max(0, part.find(text) - 80):part.find(text)].strip()}”"
                for text, value in quoted_intervals(part) if value not in measured]
    return out


@pytest.fixture(scope="module")
def reference_runs() -> dict[str, tuple[set, str]]:
    """Per reference run: the intervals its claims print (``claims.json``'s rows), and its commit."""
    runs = {}
    for claims in sorted((ROOT / "results").glob("*/claims.json")):
        rows = json.loads(claims.read_text())["rows"]
        measured = {value for row in rows for _, value, _ in _intervals(row["measured"])}
        commit = json.loads((claims.parent / "provenance.json").read_text())["iterlin_commit"]
        runs[claims.parent.name] = (measured, commit)
    return runs


def _pages() -> list[Path]:
    return sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "notebooks").glob("*.py"))


def test_the_checker_finds_a_stale_interval_and_passes_a_measured_one():
    measured = {(-1.2, -0.1), (1.9, 9.9)}
    page = ("K = 160 ends 0.7 points below (95 % interval $[-1.2, -0.1]$); the adaptive rule 54 % "
            "([+1.9 %, +9.9 %] above).\n\n* An input range $[-0.5, 0.5]$ is not an interval.\n"
            "* The earlier run (commit 0d219c2) gave [−2.2, 0.0].\n\n"
            "A rerun that is not committed showed $[-4.0, -0.8]$.\n\nNow stale: $[-1.3, -0.1]$, while the "
            "earlier run (ab12cd3) gave $[-5.0, -1.0]$.")
    assert unmatched(page, measured, {"abcdef0123"}) == ["[-1.3, -0.1] after “…Now stale: $”"]
    # the same commit is a reference run's: its numbers are checked
    assert [m.split()[:2] for m in unmatched(page, measured, {"0d219c2ffff"})] == [["[−2.2,", "0.0]"],
                                                                                   ["[-1.3,", "-0.1]"]]


def test_notebook_markdown_reads_the_markdown_cells_only():
    source = "# %% [markdown]\n# Text [-1.0, +2.0]\n#\n# more\n\n# %%\nx = [-1.0, +3.0]\n"
    assert notebook_markdown(source) == "Text [-1.0, +2.0]\n\nmore"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_interval_the_prose_quotes_was_measured_by_a_reference_run(page, reference_runs):
    runs = reference_runs
    measured = set().union(*(m for m, _ in runs.values()))
    name = page.stem
    # a notebook's page: its own reference run's commit; a page of the book: any reference run's
    commits = {runs[name][1]} if page.suffix == ".py" and name in runs else {c for _, c in runs.values()}
    text = notebook_markdown(page.read_text()) if page.suffix == ".py" else page.read_text()
    assert unmatched(text, measured, commits) == []
