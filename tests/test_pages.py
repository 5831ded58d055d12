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
from iterlin.repro.stats import sweep_difference, runs_of

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


# ---- what makes an interval wide ---------------------------------------------------------------

#: prose that says the seeds make an interval wide, or the test images do
SEED_BLAME = re.compile(r"t\(2\)\s*=\s*4\.30\$?\)? leave|seeds disagree|seeds cannot narrow|three seeds \(\$t\(2\)")
TEST_BLAME = re.compile(r"test images, not the (?:\w+ )?seeds|mostly from the \d+ test images")


def seed_share(d) -> float:
    """The share of a Difference's variance that is the seed term (v_seed / (v_seed + v_test)):
    from its Welch–Satterthwaite df = (v_seed + v_test)² / (v_seed² / (S − 1))."""
    return 0.0 if not np.isfinite(d.df) else float(np.sqrt((d.n_seeds - 1) / d.df))


def differences(name: str) -> list:
    """The K = 1 against large-K differences a reference run's undecided rows rest on."""
    from iterlin.experiments import fig6
    from iterlin.repro.stats import difference

    res = reference.load(name, check_claims=False).results
    if name == "fig3":
        h = res.runs
        return [sweep_difference(h, runs_of(h, 1), runs_of(h, np.max(h["K"])), n_test=int(res.n_test))]
    if name == "fig6":
        h, n = res.runs, int(res.n_test)
        i1, j = runs_of(h, 1), runs_of(h, np.max(h["K"]))
        out = []
        for layer in fig6.PROBE_LAYERS:
            s, c = fig6.probe_summary(h, layer), fig6.probe_correct(h, layer)
            for a, ia, b, ib in (("initial", i1, "final", i1), ("final", j, "final", i1)):
                out.append(difference(getattr(s, a)[ia], getattr(s, b)[ib], n_test=n,
                                      correct_a=getattr(c, a)[ia], correct_b=getattr(c, b)[ib]))
        return out
    raise AssertionError(f"a page says what makes {name}'s intervals wide: add its differences here")


def blame_statements(text: str, default: list[str], notebook: bool = True):
    """(the seeds or the test images, the experiments, the sentence) of every sentence that says what
    makes an interval wide: of the notebook's own experiment, or on a book page of those it names."""
    for s in sentences(text):
        for pattern, who in ((SEED_BLAME, "seeds"), (TEST_BLAME, "test images")):
            if pattern.search(s):
                yield who, default if notebook else named(s) or default, s


@pytest.mark.parametrize("page, text, default", [p for p in pages() if p[0] in ("book/intro.md", "notebooks/fig3.py",
                                                                                "notebooks/fig6.py")],
                         ids=lambda x: x if isinstance(x, str) and len(x) < 40 and "/" in x else "")
def test_what_a_page_says_makes_an_interval_wide_does(page, text, default):
    wrong = []
    for who, names, s in blame_statements(text, default, page.startswith("notebooks/")):
        for name in names:
            shares = [seed_share(d) for d in differences(name)]
            # the seeds: every difference's seed term is the larger; the test images: one's test term is
            if not (all(x >= 0.5 for x in shares) if who == "seeds" else any(x < 0.5 for x in shares)):
                wrong.append(f"{name}: blames the {who}, but the seed term's share of the variance is "
                             f"{', '.join(f'{x:.0%}' for x in shares)}: “{s[:160]}…”")
    assert not wrong, f"{page}:\n" + "\n".join(wrong)


def test_the_blame_check_fails_on_the_old_text():
    old3 = "So it is undecided: three seeds ($t(2) = 4.30$) leave the interval reaching −1.7."
    old6 = "The rows that remain *undecided* do so because the seeds disagree (three seeds)."
    assert [w for w, _, _ in blame_statements(old3, ["fig3"])] == ["seeds"]
    assert seed_share(differences("fig3")[0]) < 0.1  # the test images are over 90 % of its variance
    assert [w for w, _, _ in blame_statements(old6, ["fig6"])] == ["seeds"]
    assert min(seed_share(d) for d in differences("fig6")) < 0.5


# ---- the front page's summaries and the verdicts they give -------------------------------------

QUOTE = re.compile(r"[\"“]([^\"”]{3,160})[\"”]")
VERDICT_WORD = re.compile(r"\b(holds|undecided)\b|\*(yes|no|n/a)\*")
_LATEX = {r"\lambda": "λ", r"\theta": "θ", r"\eta": "η", r"\tau": "τ", r"\infty": "∞", r"\max": "max"}


def _words(text: str) -> set[str]:
    for k, v in _LATEX.items():
        text = text.replace(k, v)
    text = re.sub(r"[${}\\]", "", text).lower().replace("–", "-")
    return {w for w in re.findall(r"\w+", text) if len(w) >= 3}


def front_page_bullets() -> list[tuple[str, str]]:
    """(experiment, bullet) of each bullet of the front page's "What this edition found"."""
    text = (ROOT / "book" / "intro.md").read_text()
    found = text[text.index("## What this edition found"):text.index("## The paper in brief")]
    out = []
    for bullet in re.split(r"\n(?=\* \*\*)", found)[1:]:
        head = re.match(r"\* \*\*(.+?)\*\*", bullet).group(1)
        names = named(head)
        assert len(names) == 1, f"the front page's bullet “{head}” names {names}, not one experiment"
        out.append((names[0], re.sub(r"\s+", " ", bullet)))
    return out


def _rows(name: str) -> list[dict]:
    return json.loads((ROOT / "results" / name / "claims.json").read_text())["rows"]


def summary_problems(name: str, bullet: str) -> list[str]:
    rows = _rows(name)
    quotes = [(q, m.end()) for m in QUOTE.finditer(bullet) if (q := _words(m.group(1)))]
    out = []
    for r in rows:
        if r["holds"] not in ("no", "no (unstable)"):
            continue
        kind = ("stability row" if "stays stable" in r["claim"] else
                "convergence row" if "convergence" in r["claim"] else None)
        if not any(q <= _words(r["claim"]) for q, _ in quotes) and not (kind and kind in bullet):
            out.append(f"the row “{r['claim']}” reads {r['holds']!r} and the summary does not say so")
    for q, end in quotes:
        hits = [r for r in rows if q <= _words(r["claim"])]
        said = VERDICT_WORD.search(bullet[end:end + 40])
        if len(hits) == 1 and said:
            word = said.group(1) or said.group(2)
            verdict = {"holds": "yes", "n/a": "n/a at this scale"}.get(word, word)
            if not hits[0]["holds"].startswith(verdict):
                out.append(f"“…{bullet[max(0, end - 60):end + 40]}…” gives {verdict!r}, the row reads {hits[0]['holds']!r}")
    return out


@pytest.mark.parametrize("name, bullet", front_page_bullets(), ids=lambda x: x if len(x) < 12 else "")
def test_a_front_page_summary_gives_the_rows_verdicts_and_every_no(name, bullet):
    problems = summary_problems(name, bullet)
    assert not problems, f"book/intro.md, the bullet on {name}:\n" + "\n".join(problems)


def test_the_summary_check_fails_on_the_old_learning_rate_bullet():
    old = ("* **The learning-rate study** ({doc}`executed/lr`, eight seeds on the H100) finds $K = 50$ on par with "
           "$K = 1$ at $\\eta = 0.003$ and falling apart from 0.03 while $K = 1$ trains on: large $K$ needs a smaller "
           "rate, and each of its 17 failures came after $\\eta$ crossed $2/\\lambda_{\\max}(\\theta_s)$.")
    assert len(summary_problems("lr", old)) == 4  # the four rows that read no, none said
    wrong = 'Its row "large K fails where $\\eta$ crosses the linear model\'s bound" holds.'
    assert any("gives 'yes', the row reads 'no'" in p for p in summary_problems("lr", wrong))


def test_a_row_comparing_with_damped_gauss_newton_says_how_many_cg_iterations_it_took():
    """"damped GN" in gn's rows is a Gauss–Newton step truncated to the config's CG iterations (one
    at `cpu`): a row that names it says how many in its rule, as the run's config has it (the claim's
    words are declared before the run, claims.toml)."""
    cg = PROVENANCE["gn"]["config"]["cg_maxiter"]
    rows = [r["rule"] for r in _rows("gn") if "damped GN" in r["claim"]]
    assert rows and all(f"damped GN ({cg} CG iteration{'s' * (cg != 1)} per step)" in c for c in rows), rows
