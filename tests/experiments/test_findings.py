"""findings (iterlin.experiments.findings): the front page's table names rows that exist in the
committed reference runs, exactly one each, and reads their verdicts rather than stating them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from iterlin.repro.claims import HOLDS
from iterlin.experiments import names
from iterlin.experiments.findings import FINDINGS, STABILITY_ROW, Evidence, Finding, findings

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
        assert f.decisive["claim"].startswith(f.finding.decisive.row)
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
