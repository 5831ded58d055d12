"""What the hand-written pages say of the reference runs agrees with the runs (issue 61, item 9).

The pages are ``book/*.md`` and the markdown cells of ``notebooks/*.py``. Each test reads one kind
of statement from them and checks it against ``results/<name>/`` (provenance, stored results,
claims): the scale a run was computed at, the images it trained on, what makes an interval wide,
the verdicts a front-page summary gives. A statement names the experiments it is about ("Figures
2–6, the $K$ sweep and the adaptive rule", ``results/fig3/``); a general one ("each", "every",
"the reference runs") is about every notebook of its page (a chapter's sections, a notebook itself,
or every notebook for the pages above the chapters).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from iterlin.experiments import reference
from iterlin.stats import sweep_difference, runs_of

ROOT = Path(__file__).resolve().parents[1]
#: a scale where reference runs are computed, named in the singular ("the `cpu` scales" describe settings)
SCALE = re.compile(r"`(cpu|gpu)` scale\b(?!s)")
#: words that say a statement has exceptions (checked where they are said)
QUALIFIED = re.compile(r"^[^;.]{0,12}\b(except|unless|or `|otherwise)\b|^\s*\(or\b")
GENERAL = re.compile(r"\b(each|every|per page|reference runs|notebooks|figures|scales)\b", re.I)
RUN_STATEMENT = re.compile(r"reference run|committed run", re.I)
NAMES = [
    (re.compile(r"\bFig(?:ure|s?\.)s? ((?:\d(?:\s*[–-]\s*\d)?(?:,\s*|\s+and\s+)?)+)"), None),
    (re.compile(r"\$K\$ sweep|\bK sweep|\bksweep\b"), "ksweep"),
    (re.compile(r"adaptive rule|\badaptive\b"), "adaptive"),
    (re.compile(r"learning-rate study|\blr\b"), "lr"),
    (re.compile(r"exact limit|\blimit\b"), "limit"),
    (re.compile(r"`results/(fig\d|ksweep|adaptive|lr|gn|limit|ntk)/"), "$1"),
    (re.compile(r"\b(fig\d)\b"), "$1"),
]


def _provenance() -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted((ROOT / "results").glob("*/provenance.json"))}


PROVENANCE = _provenance()


def notebook_markdown(source: str) -> str:
    """The markdown cells of a jupytext percent-format notebook, without their ``# `` prefixes."""
    cells = re.split(r"^# %%.*$", source, flags=re.M)
    heads = re.findall(r"^# %%.*$", source, flags=re.M)
    return "\n\n".join("\n".join(re.sub(r"^# ?", "", line) for line in cell.strip("\n").splitlines())
                       for head, cell in zip(heads, cells[1:]) if "[markdown]" in head)


def _toc_sections() -> dict[str, list[str]]:
    """Each book page's notebooks (its sections in ``_toc.yml``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    out = {}
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            out[Path(chapter["file"]).name] = [Path(s["file"]).name for s in chapter.get("sections", ())]
    return out


SECTIONS = _toc_sections()
ALL = sorted(PROVENANCE)


def pages() -> list[tuple[str, str, list[str]]]:
    """(page, its prose, its notebooks)."""
    out = []
    for p in sorted((ROOT / "book").glob("*.md")):
        out.append((f"book/{p.name}", p.read_text(), SECTIONS.get(p.stem) or ALL))
    for p in sorted((ROOT / "notebooks").glob("*.py")):
        out.append((f"notebooks/{p.name}", notebook_markdown(p.read_text()), [p.stem]))
    return out


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (a table row is its own)."""
    out = []
    for part in re.split(r"\n(?=\|)", text):
        part = re.sub(r"\s+", " ", part)
        out += [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*{(])", part) if s]
    return out


def named(text: str) -> list[str]:
    """The experiments ``text`` names (module docstring)."""
    out = []
    for pattern, name in NAMES:
        for m in pattern.finditer(text):
            if name is None:  # Figures 2–6, 8 and 9
                for a, b in re.findall(r"(\d)(?:\s*[–-]\s*(\d))?", m.group(1)):
                    out += [f"fig{i}" for i in range(int(a), int(b or a) + 1)]
            else:
                out.append(m.group(1) if name == "$1" else name)
    return [n for n in dict.fromkeys(out) if n in PROVENANCE]


def scale_statements(text: str, default: list[str], notebook: bool):
    """(scale, the experiments said to have run at it, the sentence) of every statement about
    reference runs: a sentence whose words before a scale speak of a reference (or committed) run.
    The experiments are those named since the previous scale or ``;``; else, unless the words after
    the scale qualify it (``except``, ``unless``, ``(or``), a notebook's own, or the page's when
    the subject is general (``each``, ``the reference runs``)."""
    for s in sentences(text):
        start = 0
        for m in SCALE.finditer(s):
            prefix = s[:m.start()]
            segment = s[max(start, prefix.rfind(";") + 1):m.start()]
            start = m.end()
            if not RUN_STATEMENT.search(prefix) or "this build" in segment:
                continue
            names = named(segment)
            if not names:
                if QUALIFIED.search(s[m.end():]) or not (notebook or GENERAL.search(prefix)):
                    continue
                names = default
            yield m.group(1), names, s


@pytest.mark.parametrize("page, text, default", pages(), ids=lambda x: x if isinstance(x, str) and "/" in x and
                         len(x) < 40 else "")
def test_every_scale_a_page_gives_a_reference_run_is_its_provenance_scale(page, text, default):
    wrong = [f"{name} ran at `{PROVENANCE[name]['scale']}`, not `{scale}`: “{s[:160]}…”"
             for scale, names, s in scale_statements(text, default, page.startswith("notebooks/"))
             for name in names if PROVENANCE[name]["scale"] != scale]
    assert not wrong, f"{page}:\n" + "\n".join(wrong)


def test_the_scale_check_fails_on_the_old_front_page():
    old = ("* **Two runs per page.** First the **reference run**, committed with the book (`results/<name>/`, "
           "computed at the `cpu` scale: real CIFAR-10 images, at least two seeds; Figures 2–6, the $K$ sweep "
           "and the adaptive rule at the `gpu` scale, minutes of one H100; {doc}`reproducibility` gives each.")
    got = {(scale, tuple(names)) for scale, names, _ in scale_statements(old, ALL, False)}
    assert got == {("cpu", tuple(ALL)), ("gpu", ("fig2", "fig3", "fig4", "fig5", "fig6", "ksweep", "adaptive"))}


# ---- the images a run trained on ---------------------------------------------------------------

EVERY_IMAGE = re.compile(r"every installed image|every image (?:of the|installed)", re.I)


#: the experiments on CIFAR-10 (the others fit a quintic: their "images" are not installed ones)
CIFAR = sorted(n for n in PROVENANCE if any(k.endswith("test_correct") for k in np.load(ROOT / "results" / n / "results.npz")))


def _subset(name: str) -> int | None:
    """The training images of the reference run of ``name`` where it used fewer than every one."""
    if name not in CIFAR:
        return None
    c = PROVENANCE[name]["config"]
    sizes = [v for k in ("n_train", "n_train_full", "sizes") for v in np.atleast_1d(c.get(k)) if v is not None]
    return min(sizes) if sizes else None


def image_statements(text: str, default: list[str]):
    for s in sentences(text):
        if not EVERY_IMAGE.search(s) or not (RUN_STATEMENT.search(s) or SCALE.search(s)):
            continue
        rest = EVERY_IMAGE.sub("", s)
        names = named(s)
        if GENERAL.search(rest):
            names = list(dict.fromkeys(names + default))
        yield names, s


@pytest.mark.parametrize("page, text, default", [p for p in pages() if p[0].startswith("book/")],
                         ids=lambda x: x if isinstance(x, str) and x.startswith("book/") else "")
def test_a_page_says_every_installed_image_only_of_runs_that_used_every_one(page, text, default):
    wrong = []
    for names, s in image_statements(text, default):
        for name in names:
            n = _subset(name)
            if n is not None and not (name in named(s) and f"{n:,}" in s):
                wrong.append(f"{name} trained on {n:,} images: “{s[:200]}…”")
    assert not wrong, f"{page}:\n" + "\n".join(wrong)


def test_the_image_check_fails_on_the_old_chapter_text():
    old = ("Each shows first its reference run (the `cpu` scale: at least two seeds and every installed image) "
           "and then this build's `smoke` run.")
    assert [names for names, _ in image_statements(old, ["fig2", "fig3", "fig4"])] == [["fig2", "fig3", "fig4"]]
    assert _subset("fig2") == 250 and _subset("fig3") == 1000 and _subset("fig4") is None
