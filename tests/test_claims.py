"""iterlin.repro.claims: rows, verdicts and formatting, the tables, and the rows shared by every experiment
(test-set noise, on-par comparisons, divergence, a sweep without K > 1)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _toy import fake_history

from iterlin.repro import claims
from iterlin.repro.claims import (
    pooled_runs,
    COLUMNS,
    HOLDS,
    NA,
    ON_PAR,
    UNDECIDED,
    UNSTABLE,
    Claim,
    ClaimsTable,
    all_verdicts,
    claims_table,
    divergence_claim,
    divergence_row,
    exceeds,
    fmt_K,
    on_par,
    on_par_claim,
    only_k1_rows,
    publish_claims,
    sharpness_claim,
    verdict,
)
from iterlin.repro.failures import exploded_runs, unstable_runs
from iterlin.repro.stats import Difference, seed_interval

# ----------------------------------------------------------------------------------------------
# Rows, verdicts, formatting
# ----------------------------------------------------------------------------------------------


def test_constants():
    assert HOLDS == ("yes", "no", UNSTABLE, UNDECIDED, NA) and NA == "n/a at this scale"
    assert UNSTABLE == "no (unstable)"
    assert COLUMNS == ("claim", "paper", "this run", "holds", "rule")
    assert ON_PAR == 0.02


def test_verdict_and_check():
    assert (verdict(True), verdict(False), verdict(None), verdict(True, applicable=False)) == ("yes", "no", NA, NA)
    assert verdict(np.bool_(True)) == "yes"
    Claim("c", "p", "m", "yes").check()
    with pytest.raises(ValueError, match="Claim.holds='maybe' is not allowed"):
        Claim("c", "p", "m", "maybe").check()
    with pytest.raises(TypeError, match="Claim.measured=0.5 is not allowed"):
        Claim("c", "p", 0.5, "yes").check()
    with pytest.raises(ValueError, match="no newlines"):
        Claim("c\nd", "p", "m", "yes").check()


def test_formatting():
    assert [fmt_K(k) for k in (1, 100, 9999, 10_000, 5e6, 200_000, math.inf)] == [
        "1", "100", "9999", "1e4", "5e6", "2e5", "∞"]


# ----------------------------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------------------------

ROWS = [Claim("large K | on par", "82.3 %", "81.0 %", "yes", "|Δ| < 1"), Claim("b", "p", "m", NA)]


def test_claims_table():
    assert claims_table(ROWS) == (
        "claim             paper   this run  holds              rule\n"
        "----------------  ------  --------  -----------------  -------\n"
        "large K | on par  82.3 %  81.0 %    yes                |Δ| < 1\n"
        "b                 p       m         n/a at this scale"
    )
    assert claims_table([("c", "p", "m", "no")]).splitlines()[-1] == "c      p      m         no"  # tuples accepted
    with pytest.raises(ValueError, match="holds"):
        claims_table([Claim("c", "p", "m", "perhaps")])


def test_publish(tmp_path):
    table = publish_claims("fig3", ROWS, scale="smoke", directory=tmp_path)
    assert isinstance(table, ClaimsTable)
    assert str(table) == repr(table) == "Claims of fig3 at scale 'smoke':\n" + claims_table(ROWS)
    html = table._repr_html_()
    assert html.count("<tr>") == 1 + len(ROWS) and "\\|" not in html and "large K | on par" in html
    doc = json.loads((tmp_path / "fig3.json").read_text(encoding="utf-8"))
    assert doc == {"name": "fig3", "scale": "smoke", "rows": [r.asdict() for r in ROWS]}
    with pytest.raises(ValueError, match="name="):
        publish_claims("../x", ROWS, scale="smoke", directory=tmp_path)


# ----------------------------------------------------------------------------------------------
# Test-set noise
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# Divergence rows
# ----------------------------------------------------------------------------------------------


def test_divergence_row():
    ok = divergence_row([])
    assert ok.claim == "every run stays finite (no NaN or exploding loss)" and ok.paper == "no divergence reported"
    assert (ok.measured, ok.holds) == ("none diverged", "yes")
    bad = divergence_row(iter(["K=5 at step 12", "Adam at step 3"]))
    assert (bad.measured, bad.holds) == ("diverged: K=5 at step 12; Adam at step 3", "no")


def test_divergence_claim_names_runs():
    h = fake_history([1, 5, math.inf], [0.1, 0.0005, 0.2], 50, [0.4] * 3, diverged=[False, True, True],
                     diverged_step=7)
    assert divergence_claim({"runs": h}).measured == "diverged: K=5, lr=0.0005 at step 7; K=∞, lr=0.2 at step 7"
    ok = fake_history([1, 5], 0.1, 50, [0.4] * 2)
    row = divergence_claim({"full": ok, "mini": h})  # several panels: each run named with its panel
    assert row.measured == "diverged: mini: K=5, lr=0.0005 at step 7; mini: K=∞, lr=0.2 at step 7"
    assert row.holds == "no"
    assert divergence_claim({"full": ok, "mini": ok}) == divergence_row([])
    no_lr = {k: v for k, v in h.items() if k != "lr"}
    assert divergence_claim({"runs": no_lr}).measured == "diverged: K=5 at step 7; K=∞ at step 7"
    # a run that stays finite but whose training loss explodes counts too (EXPLODING × its start)
    boom = dict(ok, net_train_loss=np.array([[2.4, 2.0, 1.9], [2.4, 30.0, 8.2e4]]), step=np.array([0, 25, 50]))
    row = divergence_claim({"runs": boom})
    assert row.holds == "no" and row.measured == (
        "loss exploded (finite, above 10× its value at step 0): K=5, lr=0.1: training loss 2.4 → 8.2e+04 at step 50")
    assert exploded_runs(boom).tolist() == [False, True]
    mild = dict(boom, net_train_loss=np.array([[2.4, 2.0, 1.9], [2.4, 20.0, 23.9]]))  # just under 10×
    assert exploded_runs(mild).tolist() == [False, False] and exploded_runs(ok).tolist() == [False, False]
    stopped = dict(boom, diverged=np.array([False, True]))  # stopped by the guard: diverged, not "exploded"
    assert exploded_runs(stopped).tolist() == [False, False]
    mild_row = divergence_claim({"runs": mild})  # not exploded, but a network loss that rose across a re-linearisation
    assert mild_row.holds == "no" and "exploded" not in mild_row.measured and mild_row.measured.endswith(
        "rose across a re-linearisation (by over 10%): K=5, lr=0.1: 2.4 → 20 at step 25")
    both = divergence_claim({"a": h, "b": boom})
    assert both.measured.startswith("diverged: a: K=5, lr=0.0005 at step 7; a: K=∞, lr=0.2 at step 7; loss exploded")
    assert both.measured.endswith("b: K=5, lr=0.1: training loss 2.4 → 8.2e+04 at step 50")
    # a label of the caller's, and no panel prefix
    row = divergence_claim({"full": ok, "mini": h}, lambda panel, hist, i: f"{panel} run {i}", prefix=False)
    assert row.measured == "diverged: mini run 1 at step 7; mini run 2 at step 7"


def test_divergence_claim_block_rise_and_the_sharpness_record():
    # K = 1 and K = 2 over 4 evaluations; K = 2's linear model loss rises 1.5 → 2.2 inside block 1
    h = fake_history([1, 2], 0.1, 6, [0.4] * 2, n_evals=3)
    h["n_relin"] = np.array([[0, 2, 4, 6], [0, 1, 1, 3]])
    h["lin_train_loss"] = np.array([[2.3, 1.9, 1.6, 1.4], [2.3, 1.5, 2.2, 1.4]])
    row = divergence_claim({"runs": h})
    assert row.holds == "no" and row.measured == (
        "the linear model's training loss rose inside a block (by over 10%): K=2, lr=0.1: 1.5 → 2.2 at step 4")
    # with a sharpness record: the rise is called unstable when η crossed 2/λ_max before it
    rec = dict(h, lr_over_bound=np.array([[0.1, 0.5, 0.9, 1.2], [0.1, 0.7, 1.1, 0.9]]))
    assert divergence_claim({"runs": rec}).measured.endswith(
        "K=2, lr=0.1: 1.5 → 2.2 at step 4 (unstable: η above 2/λ_max(θ_s) from step 4)")
    under = dict(h, lr_over_bound=np.array([[0.1, 0.5, 0.9, 1.2], [0.1, 0.7, 0.8, 1.3]]))
    assert divergence_claim({"runs": under}).measured.endswith(
        "at step 4 (η under 2/λ_max(θ_s) at every recorded step up to 4)")
    # a diverged run is named once, with the record
    div = dict(rec, diverged=np.array([False, True]), diverged_step=np.array([-1, 5]))
    assert divergence_claim({"runs": div}).measured == (
        "diverged: K=2, lr=0.1 at step 5 (unstable: η above 2/λ_max(θ_s) from step 4)")
    # within the noise allowance (+10 %), and old histories without a record or a lin loss: unchanged
    small = dict(h, lin_train_loss=np.array([[2.3, 1.9, 1.6, 1.4], [2.3, 1.5, 1.6, 1.4]]))
    assert divergence_claim({"runs": small}) == divergence_row([])
    assert divergence_claim({"runs": fake_history([1, 2], 0.1, 6, [0.4] * 2)}) == divergence_row([])
    # one evaluation per block (as the committed runs): the network's loss rising between evaluations
    # of a K > 1 run counts (K = 1, the reference SGD, is not judged), with the record's note
    across = fake_history([1, 2], 0.1, 6, [0.4] * 2, n_evals=3)
    across["net_train_loss"] = np.array([[2.3, 1.9, 2.2, 1.4], [2.3, 1.7, 1.6, 2.9]])
    across["lr_over_bound"] = np.array([[0.1, 0.5, 0.9, 1.2], [0.1, 0.7, 1.1, 0.9]])
    row = divergence_claim({"runs": across})
    assert row.holds == "no" and row.measured == (
        "the network's training loss rose across a re-linearisation (by over 10%): "
        "K=2, lr=0.1: 1.6 → 2.9 at step 6 (unstable: η above 2/λ_max(θ_s) from step 4)")


def test_divergence_claim_prints_small_learning_rates():
    h = fake_history([1, 1000], [1e-5, 1e-5], 50, [0.4] * 2, diverged=[False, True])
    assert "lr=1e-05" in divergence_claim({"runs": h}).measured


# ----------------------------------------------------------------------------------------------
# on_par_claim: K = 1 against the largest finite K > 1
# ----------------------------------------------------------------------------------------------


def _on_par(acc, *, n_test=100_000, K=(1, 5, 20, math.inf), diverged=None, **kw):
    h = fake_history(list(K), 0.1, 100, acc, diverged=diverged)
    return on_par_claim("c", "p", h, n_test=n_test, **kw)


def test_on_par_yes_no():
    row = _on_par([0.40, 0.10, 0.395, 0.20])  # compares K = 20 (the largest finite K), not K = 5 or ∞
    assert row.holds == "yes" and (row.claim, row.paper) == ("c", "p")
    assert row.measured == ("K=1: 40.0 %; K=20 (5 re-linearisations): 39.5 %; Δ -0.5 pts, 2 s.e. interval "
                            "[-0.9, -0.1] (1 seed: test noise only, no seed spread, 100000 unpaired test images)")
    assert row.rule.startswith("on par: the 95 % t interval of Δ")
    assert _on_par([0.40, 0.40, 0.43, 0.40]).holds == "no"
    assert _on_par([0.40, 0.40, 0.37, 0.40]).holds == "no"
    assert _on_par([0.40, 0.40, 0.415, 0.40]).holds == "yes"
    assert _on_par([0.40, 0.40, 0.415, 0.40], tol=0.01).holds == "no"


def test_on_par_metric_and_last_point_only():
    h = fake_history([1, 5], 0.1, 100, [0.4, 0.4])
    h["net_test_acc"] = np.array([[0.1, 0.9, 0.40], [0.1, 0.1, 0.40]])  # only the last point counts
    h["lin_test_acc"] = np.array([[0.1, 0.1, 0.40], [0.1, 0.1, 0.30]])
    assert on_par_claim("c", "p", h, n_test=100_000).holds == "yes"
    assert on_par_claim("c", "p", h, n_test=100_000, metric="lin_test_acc").holds == "no"


def test_on_par_undecided_when_the_interval_is_wider_than_the_claim():
    # 2 s.e. of Δ near 0.4 on n unpaired images: 2·sqrt(0.48/n) < 0.02 needs n > 4800
    assert _on_par([0.40, 0.4, 0.40, 0.4], n_test=4700).holds == UNDECIDED
    assert _on_par([0.40, 0.4, 0.40, 0.4], n_test=4900).holds == "yes"
    assert _on_par([0.40, 0.4, 0.10, 0.4], n_test=200).holds == "no"  # a large gap is decided even so
    assert _on_par([0.40, 0.4, 0.35, 0.4], n_test=200).holds == UNDECIDED
    assert "200 unpaired test images" in _on_par([0.40, 0.4, 0.35, 0.4], n_test=200).measured


@pytest.mark.parametrize(("delta", "se", "par", "better"), [
    (0.000, 0.004, "yes", UNDECIDED),  # interval [-0.8, 0.8] pts inside ±2
    (0.015, 0.004, UNDECIDED, "yes"),  # [0.7, 2.3]: above 0, straddles +2
    (0.030, 0.004, "no", "yes"),  # [2.2, 3.8]: wholly outside ±2
    (-0.030, 0.004, "no", "no"),
    (0.000, 0.020, UNDECIDED, UNDECIDED),  # [-4, 4]: wider than the claim
    (float("nan"), 0.01, "no", "no"),
])
def test_on_par_is_an_equivalence_test_and_exceeds_needs_the_interval_off_zero(delta, se, par, better):
    d = Difference(delta, se, 2, 1000, True)
    assert on_par(d, 0.02) == par and exceeds(d) == better


def test_on_par_diverged_is_no_or_unstable_whatever_the_noise():
    # K = 1 diverged: "no"; the compared large K (K = 20) diverged: its linear model was unstable
    for div, holds in (([True, False, False, False], "no"), ([False, False, True, False], UNSTABLE)):
        assert _on_par([0.40, 0.4, 0.40, 0.4], diverged=div).holds == holds
        assert _on_par([0.40, 0.4, 0.40, 0.4], diverged=div, n_test=10).holds == holds
    row = _on_par([0.40, 0.4, 0.40, 0.4], diverged=[False, False, True, False])
    assert row.measured.endswith("; unstable: K=20 seed 0 diverged at step 3")
    # a run that is not compared (K = 5, K = ∞) does not decide it
    assert _on_par([0.40, 0.4, 0.40, 0.4], diverged=[False, True, False, True]).holds == "yes"


def test_on_par_unstable_from_a_block_rise_or_the_sharpness_record():
    h = fake_history([1, 2], 0.1, 6, [0.40, 0.40], n_evals=3)
    h["n_relin"] = np.array([[0, 2, 4, 6], [0, 1, 1, 3]])
    stable = dict(h, lin_train_loss=np.array([[2.3, 1.9, 1.6, 1.4], [2.3, 1.5, 1.4, 1.3]]))
    assert on_par_claim("c", "p", stable, n_test=100_000).holds == "yes"
    rose = dict(h, lin_train_loss=np.array([[2.3, 1.9, 1.6, 1.4], [2.3, 1.5, 2.2, 1.4]]))
    row = on_par_claim("c", "p", rose, n_test=100_000)
    assert row.holds == UNSTABLE and row.measured.endswith(
        "unstable: K=2 seed 0: the linear model's loss rose inside a block, 1.5 → 2.2 at step 4")
    # η over the bound without a rise is unstable too; K = 1 over the bound is SGD at its edge: not judged
    over = dict(stable, lr_over_bound=np.array([[0.1, 0.5, 1.5, 1.2], [0.1, 0.7, 1.1, 0.9]]))
    row = on_par_claim("c", "p", over, n_test=100_000)
    assert row.holds == UNSTABLE and row.measured.endswith("unstable: K=2 seed 0: η above 2/λ_max(θ_s) at step 4")
    k1_edge = dict(stable, lr_over_bound=np.array([[0.1, 0.5, 1.5, 1.2], [0.1, 0.7, 0.9, 0.9]]))
    assert on_par_claim("c", "p", k1_edge, n_test=100_000).holds == "yes"
    assert unstable_runs(k1_edge) == {} and list(unstable_runs(over)) == [1]


def test_sharpness_claim():
    h = fake_history([1, 2, 1, 2], 0.1, 6, [0.4] * 4, n_evals=3)
    h["seed_index"] = np.array([0, 0, 1, 1])
    nan = np.nan
    h["lr_over_bound"] = np.array([[0.1, nan, 0.3, 0.2], [0.1, nan, 0.25, 0.3], [0.1, nan, 0.2, 0.33],
                                   [0.1, nan, 0.2, 0.1]])
    row = sharpness_claim(h)
    assert row.holds == "yes" and row.measured == (
        "K>1: largest η·λ_max/2 0.30 (K=2, step 6); K=1 (not judged): largest η·λ_max/2 0.33 (K=1, step 6)")
    h["lr_over_bound"][2, 2] = 0.9  # K = 1 (SGD, re-linearised every step) is not judged
    assert sharpness_claim(h).holds == "yes"
    h["lr_over_bound"][3, 2] = 0.34
    assert sharpness_claim(h).holds == "no" and sharpness_claim(h, fraction=0.5).holds == "yes"
    assert sharpness_claim(fake_history([1, 2], 0.1, 6, [0.4] * 2)).holds == NA
    only_k1 = dict(h, lr_over_bound=np.where(np.asarray(h["K"])[:, None] == 1, h["lr_over_bound"], np.nan))
    assert sharpness_claim(only_k1).holds == NA


def test_pooled_runs_judge_every_run_of_several_sweeps_and_name_them_by_label():
    a = fake_history([1, 2], 0.1, 6, [0.4] * 2, n_evals=3)
    b = fake_history([math.inf], 0.1, 6, [0.4], n_evals=3)
    a["lr_over_bound"] = np.array([[0.1, 0.2, 0.3, 0.2], [0.1, 0.2, 0.25, 0.3]])
    assert "lr_over_bound" not in pooled_runs([a, b])  # one sweep without a record: no pooled record
    b["lr_over_bound"] = np.array([[0.1, 0.5, 0.2, 0.2]])
    h = pooled_runs([a, b])
    assert h["K"].tolist() == [1, 2, math.inf] and h["lr_over_bound"].shape == (3, 4)
    np.testing.assert_array_equal(h["step"], a["step"])
    row = sharpness_claim(h)
    assert row.holds == "no" and row.measured.startswith("K>1: largest η·λ_max/2 0.50 (K=∞, step 2)")
    h["label"] = np.array(["K=1", "K=2", "tol=0.01"])
    assert sharpness_claim(h).measured.startswith("K>1: largest η·λ_max/2 0.50 (tol=0.01, step 2)")


def test_on_par_without_a_finite_large_K():
    row = _on_par([0.40, 0.30], K=(1, math.inf))
    assert row.holds == NA and row.measured == "K=1: 40.0 % (no finite K > 1 run)"
    assert row.rule == "needs a run with finite K > 1"
    assert _on_par([0.40], K=(1,)).holds == NA


# ----------------------------------------------------------------------------------------------
# only_k1_rows
# ----------------------------------------------------------------------------------------------


def test_only_k1_rows():
    assert only_k1_rows("fig6", fake_history([1, 8], 0.1, 10, [0.3, 0.3])) is None
    assert only_k1_rows("fig6", fake_history([1, math.inf], 0.1, 10, [0.3, 0.3])) is None
    rows = only_k1_rows("fig7", fake_history([1], 0.1, 10, [0.3], diverged=[True]))
    assert [r.holds for r in rows] == [NA, "no"]
    assert rows[0] == Claim("fig7: large K against K = 1", "see the notebook", "only K = 1 was run", NA,
                            "needs a run with K > 1")
    assert rows[1].measured == "diverged: K=1, lr=0.1 at step 3"


@pytest.mark.parametrize("values, above, expected", [
    ([0.50, 0.52, 0.48], True, "yes"),     # interval [0.477, 0.523] above 0.3
    ([0.50, 0.52, 0.48], False, "no"),     # ... so not below it
    ([0.10, 0.12, 0.08], True, "no"),      # wholly below
    ([0.10, 0.60, 0.30], True, claims.UNDECIDED),  # straddles 0.3
    ([0.50], True, claims.UNDECIDED),      # one seed: no interval
    ([0.50, np.nan], True, "no"),          # a non-finite seed
])
def test_beyond_decides_by_the_interval(values, above, expected):
    assert claims.beyond(values, 0.3, above=above) == expected


def test_beyond_touching_the_threshold_is_the_other_side():
    # the interval's lower end exactly at the threshold: not "above"
    v = np.array([1.0, 3.0])
    _, se, lo, _ = seed_interval(v)
    assert claims.beyond(v, lo, above=True) != "yes"


@pytest.mark.parametrize(
    "verdicts, expected",
    [(["yes", "yes"], "yes"), (["yes", "no", UNDECIDED], "no"), (["yes", UNDECIDED], UNDECIDED), ([], NA),
     (["yes", UNSTABLE, UNDECIDED], UNSTABLE), ([UNSTABLE, "no"], "no")],
)
def test_all_verdicts(verdicts, expected):
    assert all_verdicts(iter(verdicts)) == expected


def test_a_tables_verdict_in_one_line():
    """ClaimsTable.verdict: the claims' verdicts counted (checks apart), in words; bold in HTML."""
    rows = [Claim("a", "p", "m", "yes"), Claim("b", "p", "m", "no"), Claim("c", "p", "m", "no"),
            Claim("d", "p", "m", NA), Claim("e", "p", "m", "yes", kind="check"), Claim("f", "p", "m", "no", kind="check")]
    v = ClaimsTable("fig3", "cpu", rows, reference=True).verdict()
    assert v == ("Verdict of the reference run of fig3 at scale 'cpu': of 4 claims, 1 holds, 2 do not, "
                 "1 not judged at this scale; consistency checks: 1 of 2 hold.")
    assert repr(v) == str(v) and v._repr_html_().startswith("<p class='iterlin-verdict'><strong>Verdict of")
    one = ClaimsTable("x", "smoke", [Claim("a", "p", "m", UNDECIDED)]).verdict()
    assert one == "Verdict of x at scale 'smoke': of 1 claim, 0 hold, 1 undecided."


