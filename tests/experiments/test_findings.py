"""findings (iterlin.experiments.findings): the front page's table names rows that exist in the
committed reference runs, exactly one each, and reads their verdicts rather than stating them."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from iterlin.repro.claims import HOLDS
from iterlin.experiments import names, reference
from iterlin.experiments.findings import (
    FINDINGS, STABILITY_ROW, Evidence, Finding, describe_shared, findings, shared_runs,
)

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _committed() -> dict:
    return {n: json.loads((RESULTS / n / "claims.json").read_text())["rows"]
            for n in names() if (RESULTS / n / "claims.json").is_file()}


def test_every_named_row_is_one_row_of_a_committed_reference_run():
    rows = _committed()
    found = findings(rows)
    assert [f.finding for f in found] == list(FINDINGS)
    figures = [f.figure for f in FINDINGS]
    assert figures[0] == "Fig. 2" and figures[-1] == "Fig. 9"  # SPEC's table, Figs. 2-9
    for f in found:
        assert f.finding.decisive.experiment in names()
        assert f.decisive is not None and f.decisive["holds"] in HOLDS
        row = f.finding.decisive.row  # an id, or the opening words of an experiment not yet declared as rows
        assert f.decisive.get("id") == row or f.decisive["claim"].startswith(row)
        assert all(r is not None and r["holds"] in HOLDS for r in f.also)


def test_the_verdict_is_read_not_stated():
    rows = {"fig3": [{"claim": "8-12 feature updates suffice to match K = 1", "holds": "no", "measured": "m"},
                     {"claim": STABILITY_ROW + ": η under 0.33", "holds": "yes", "measured": "0.25"}],
            "ksweep": [{"claim": "the largest K within noise of K = 1 makes few", "holds": "yes", "measured": "m"}]}
    table = (Finding("Sec. 4.1", "c", "p", Evidence("fig3", "8-12 feature"), (Evidence("ksweep", "the largest K"),
                                                                                Evidence("limit", "few"))),)
    (f,) = findings(rows, table)
    assert f.decisive["holds"] == "no" and f.also[0]["holds"] == "yes" and f.also[1] is None  # no limit run
    assert f.stability["measured"] == "0.25" and f.also_stability == (None, None)
    rows["fig3"][1]["holds"] = "n/a at this scale"  # a stability row without a record is no record
    assert findings(rows, table)[0].stability is None
    rows["fig3"][1]["holds"] = "yes"
    rows["fig3"][0]["holds"] = "yes"
    assert findings(rows, table)[0].decisive["holds"] == "yes"


@pytest.mark.parametrize("start", ["nothing starts so", "8-12"])
def test_a_missing_or_ambiguous_row_is_refused(start):
    rows = {"fig3": [{"claim": "8-12 feature updates suffice", "holds": "no", "measured": "m"},
                     {"claim": "8-12 again", "holds": "no", "measured": "m"}]}
    table = (Finding("Fig. 3", "c", "p", Evidence("fig3", start)),)
    with pytest.raises(ValueError, match=r"fig3: [02] claims rows start with .* update iterlin.experiments.findings"):
        findings(rows, table)


def test_a_panel_s_evidence_reads_that_panel_s_stability_row():
    rows = {"fig2": [{"claim": "full batch: large K on par", "holds": "no", "measured": "a"},
                     {"claim": "mini-batch: large K on par", "holds": "yes", "measured": "b"},
                     {"claim": "full batch: " + STABILITY_ROW + ": η under 0.33", "holds": "no", "measured": "0.9"},
                     {"claim": "mini-batch: " + STABILITY_ROW + ": η under 0.33", "holds": "yes", "measured": "0.2"}]}
    table = (Finding("Fig. 2", "c", "p", Evidence("fig2", "mini-batch: large K"), (Evidence("fig2", "full batch: large K"),)),)
    (f,) = findings(rows, table)
    assert f.stability["measured"] == "0.2" and f.also_stability[0]["measured"] == "0.9"
    # a run with one stability row (no panels) gives it to every row, whatever its prefix
    rows = {"fig3": [{"claim": "SGD + augmentation: large K", "holds": "yes", "measured": "m"},
                     {"claim": STABILITY_ROW + ": η under 0.33", "holds": "yes", "measured": "0.3"}]}
    (f,) = findings(rows, (Finding("Fig. 3", "c", "p", Evidence("fig3", "SGD + augmentation")),))
    assert f.stability["measured"] == "0.3"



ROOT = Path(__file__).resolve().parents[2]


def _sweep(correct, loss, K=(1, 320), seed=(0, 0)):
    correct = np.asarray(correct, bool)
    return {"net_test_correct": correct, "net_test_loss": np.asarray(loss, np.float64)[:, None] * np.ones((1, 3)),
            "K": np.asarray(K, np.float64), "seed": np.asarray(seed)}


def test_shared_runs_need_equal_correctness_and_equal_loss():
    a = _sweep([[1, 0, 1], [0, 0, 1]], [1.5, 1.7])
    b = {"runs": _sweep([[1, 0, 1], [0, 0, 1]], [1.5, 1.9], K=(1, 50))}  # run 1: same correctness, other loss
    shared = shared_runs({"x": {"runs": a}, "y": b, "z": None})
    assert list(shared) == [("x", "y")] and len(shared[("x", "y")]) == 1
    run_x, run_y = shared[("x", "y")][0]
    assert (run_x.experiment, run_x.sweep, run_x.index, run_y.experiment) == ("x", "runs", 0, "y")
    assert describe_shared(shared[("x", "y")]) == "K = 1 (seed 0)"


def test_the_reference_runs_of_fig3_ksweep_fig6_and_adaptive_are_the_same_runs():
    names = ("fig3", "ksweep", "fig6", "adaptive", "fig5", "lr", "fig2")
    shared = shared_runs({n: reference.load(n, check_claims=False).results for n in names})
    assert set(shared) == {("fig3", "ksweep"), ("fig3", "fig6"), ("fig6", "ksweep"), ("adaptive", "fig3"),
                           ("adaptive", "ksweep"), ("adaptive", "fig6")}
    assert describe_shared(shared[("fig3", "ksweep")]) == "K = 1, 320 (seeds 0, 1, 2)"
    # fig5's and lr's runs that predict one class score alike on every image, but are different runs
    assert ("fig5", "lr") not in shared


def _front_page():
    """book/generate.py as a module, and the reference runs of every experiment FINDINGS names, as
    generate.load gives them (rows, scale, typed results)."""
    spec = importlib.util.spec_from_file_location("book_generate_findings", ROOT / "book" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    names = dict.fromkeys(e.experiment for f in FINDINGS for e in (f.decisive, *f.also))
    refs = {n: reference.load(n, check_claims=False) for n in names}
    return generate, [{"name": n, "reference": {"rows": [r.asdict() for r in ref.rows], "scale": ref.provenance["scale"],
                                                "results": ref.results}} for n, ref in refs.items()]


def test_the_front_page_names_a_shared_run_as_the_same_run():
    generate, items = _front_page()
    page = generate.findings_page(items)
    line = next(x for x in page.splitlines() if x.startswith("| Sec. 4.1") and "ksweep" in x)  # the details table
    assert ("{doc}`ksweep <executed/ksweep>` (the largest K within noise of K = 1 makes few feature updates (T/K)): "
            "**yes** (stable: yes), the same runs as {doc}`fig3 <executed/fig3>` for K = 1, 320 (seeds 0, 1, 2): not "
            "independent evidence") in line
    assert "not independent" not in line.split("{doc}`limit")[1]  # the limit's runs are its own
    rows = {it["name"]: it["reference"]["rows"] for it in items}
    assert all(s == "" for f in findings(rows) for s in f.also_shared)  # without the runs, nothing is claimed shared


def _words(text: str) -> set[str]:
    text = re.sub(r"\([^)]*\)", "", text.lower())  # a parenthesis explains, it does not claim
    return {w for w in re.findall(r"[\w∞≈=+-]+", text) if len(w) >= 3} - {"with", "and", "the", "than", "from"}


def _decisive_claim(f) -> str:
    rows = json.loads((ROOT / "results" / f.decisive.experiment / "claims.json").read_text())["rows"]
    return next(r["claim"] for r in rows if r.get("id") == f.decisive.row or r["claim"].startswith(f.decisive.row))


@pytest.mark.parametrize("finding", FINDINGS, ids=lambda f: f"{f.figure}: {f.claim}")
def test_a_finding_claims_no_more_than_its_decisive_row_tests(finding):
    """The front page prints the decisive row's verdict beside the finding's words, so every word of
    the finding must be the row's: "ResNet-18: large K ≈ SGD, and BatchNorm runs diverge more easily"
    beside the verdict of "large K ≈ SGD" alone read *yes* for a claim half undecided."""
    extra = _words(finding.claim) - _words(_decisive_claim(finding))
    assert not extra, f"{finding.claim!r} says {sorted(extra)}, which its row {_decisive_claim(finding)!r} does not test"


def test_the_word_check_fails_on_the_old_figure_4_finding():
    old = FINDINGS[3]._replace(claim="ResNet-18: large K ≈ SGD, and BatchNorm runs diverge more easily")
    assert _words(old.claim) - _words(_decisive_claim(old)) == {"resnet-18", "runs", "diverge", "more", "easily"}


def test_the_front_page_opens_with_the_forest_plot_and_a_short_table(tmp_path):
    generate, items = _front_page()
    page = generate.findings_page(items, figure=tmp_path / "findings.svg")
    head, details = page.split("<details>")
    assert head.startswith("![") and (tmp_path / "findings.svg").read_text().lstrip().startswith("<?xml")
    short = [x for x in head.splitlines() if x.startswith("| ")]
    assert short[0] == "| the paper's claim | the paper | this edition | verdict | preregistered test |"
    assert len(short) == len(FINDINGS) + 1
    fig3 = next(x for x in short if x.startswith("| Fig. 3: with augmentation"))
    assert fig3.startswith("| Fig. 3: with augmentation, large K ends under 1 point from K = 1 | 82.3 % vs 81.4 % | "
                           "Δ -0.6 \\[-1.7, +0.4\\] pts ({doc}`fig3 <executed/fig3>`) | **undecided** | ")
    # the registered row's test beside it: its margin, seeds, read rule, date and amendments; its run pending
    assert ("`fig3_confirm.under_one_point`: ±1 pts, 10 seeds, every held-out image" in fig3
            and "registered 2026-12-06, amended 1×: its run is not committed yet" in fig3)
    registered = [f for f in FINDINGS if f.registered]  # Figs. 2, 3, 5, 8 and Sec. 4.1 have registered rows
    assert len(registered) == 5
    assert sum("none yet" in x for x in short[1:]) == len(FINDINGS) - len(registered)
    # the plot's lines: every finding whose row compares accuracies, Fig. 3's with its ±1 point and the paper's -0.9
    found = findings({it["name"]: it["reference"]["rows"] for it in items})
    lines = generate.forest(found)
    fig3 = next(x for x in lines if x.label.startswith("Fig. 3"))
    assert (fig3.delta, fig3.lo, fig3.hi, fig3.margin, fig3.paper) == (-0.6, -1.7, 0.4, 1.0, -0.9)
    assert {x.label.split(":")[0] for x in lines} >= {"Fig. 2", "Fig. 3", "Sec. 4.1", "Fig. 4", "Fig. 5", "Fig. 8"}
    assert "| also measured by |" in details  # the full table a click away


def test_a_registered_rows_verdict_comes_from_its_runs_claims():
    generate, _ = _front_page()
    rows = {"fig3_confirm": [{"id": "fig3_confirm.few_updates", "holds": "yes", "measured": "K=1 40.0 %; the rest"}]}
    cell = generate.registered_test(("fig3_confirm.few_updates",), rows)
    assert "±0.25 of the run's own gap (row `fig3_confirm.gap`), 10 seeds" in cell and cell.endswith(": **yes** (K=1 40.0 %)")
    assert generate.registered_test((), rows) == "none yet"
    # a verdict that a required row turned undecided says so
    rows["fig3_confirm"][0].update(holds="undecided", measured="K=1 40.0 %; the rest; not counted: row x.fits reads 'no'")
    cell = generate.registered_test(("fig3_confirm.few_updates",), rows)
    assert cell.endswith(": **undecided** (K=1 40.0 %; not counted: row x.fits reads 'no')")
