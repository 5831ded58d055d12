"""iterlin.claims: rows, verdicts and formatting, the tables, and the rows shared by every experiment
(test-set noise, on-par comparisons, divergence, a sweep without K > 1)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from _toy import fake_history

from iterlin import claims
from iterlin.claims import (
    COLUMNS,
    HOLDS,
    NA,
    ON_PAR,
    UNDECIDED,
    UNSTABLE,
    Claim,
    ClaimsTable,
    Difference,
    all_verdicts,
    beyond_noise,
    claims_markdown,
    claims_table,
    collect_claims,
    difference,
    divergence_claim,
    divergence_row,
    exploded_runs,
    exceeds,
    final_difference,
    fmt_K,
    num,
    on_par,
    on_par_claim,
    only_k1_rows,
    pct,
    publish_claims,
    sharpness_claim,
    two_se,
    unstable_runs,
    verdict,
)

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
    assert pct(0.41234) == "41.2 %" and pct(-0.0001) == "0.0 %" and pct(float("nan")) == "nan"
    assert pct(0.5, 0) == "50 %" and pct(math.inf) == "inf"
    assert num(-0.001) == "0.00" and num(1.23456, 3) == "1.235" and num(-math.inf) == "-inf"
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


def test_claims_markdown():
    assert claims_markdown(ROWS) == (
        "| claim | paper | this run | holds | rule |\n"
        "|---|---|---|---|---|\n"
        "| large K \\| on par | 82.3 % | 81.0 % | yes | \\|Δ\\| < 1 |\n"
        "| b | p | m | n/a at this scale |  |"
    )


def test_publish_and_collect(tmp_path):
    table = publish_claims("fig3", ROWS, scale="smoke", directory=tmp_path)
    assert isinstance(table, ClaimsTable)
    assert str(table) == repr(table) == "Claims of fig3 at scale 'smoke':\n" + claims_table(ROWS)
    html = table._repr_html_()
    assert html.count("<tr>") == 1 + len(ROWS) and "\\|" not in html and "large K | on par" in html
    doc = json.loads((tmp_path / "fig3.json").read_text(encoding="utf-8"))
    assert doc == {"name": "fig3", "scale": "smoke", "rows": [r._asdict() for r in ROWS]}
    (tmp_path / "broken.json").write_text("{")
    md = collect_claims(tmp_path)
    assert md.index("## broken") < md.index("## fig3 (scale: smoke)")
    assert "unreadable: JSONDecodeError" in md and claims_markdown(ROWS) in md
    assert "no claims recorded yet" in collect_claims(tmp_path / "none")
    with pytest.raises(ValueError, match="name="):
        publish_claims("../x", ROWS, scale="smoke", directory=tmp_path)


# ----------------------------------------------------------------------------------------------
# Test-set noise
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("n", [1, 100, 10_000])
def test_two_se_formula(p, n):
    assert two_se(p, n) == pytest.approx(2 * math.sqrt(p * (1 - p) / n), rel=1e-12)
    assert two_se(p, n, diff=True) == pytest.approx(2 * math.sqrt(2 * p * (1 - p) / n), rel=1e-12)
    assert two_se(p, n, diff=True) == pytest.approx(math.sqrt(2) * two_se(p, n), rel=1e-12)


def test_two_se_clips_p_and_n():
    assert two_se(0.0, 100) == two_se(0.05, 100) > 0 and two_se(1.0, 100) == two_se(0.95, 100)
    assert two_se(0.5, 0) == two_se(0.5, 1) == 1.0
    assert two_se(0.5, 10_000) == pytest.approx(0.01)


def test_beyond_noise():
    # 2 s.e. of a difference near 0.5 on 10 000 images: 2·sqrt(2·0.25/10⁴) ≈ 1.41 points
    assert beyond_noise(0.50, 0.52, 10_000) and beyond_noise(0.52, 0.50, 10_000)
    assert not beyond_noise(0.50, 0.51, 10_000)
    assert not beyond_noise(0.3, 0.7, 0) and not beyond_noise(0.5, 0.5, 10**9)
    assert beyond_noise(0.0, 0.2, 100) and not beyond_noise(0.0, 0.05, 100)  # p clipped to 0.05


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
    mild_row = divergence_claim({"runs": mild})  # not exploded, but a large-K loss that rose between evaluations
    assert mild_row.holds == "no" and "exploded" not in mild_row.measured and mild_row.measured.endswith(
        "rose between evaluations (by over 10%, across re-linearisations): K=5, lr=0.1: 2.4 → 20 at step 25")
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
        "the training loss of a large-K run rose between evaluations (by over 10%, across re-linearisations): "
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


def test_difference_combines_seed_spread_and_test_noise():
    # unpaired, one seed: two binomials
    d = difference(0.4, 0.45, n_test=1000)
    p = 0.425
    assert d.delta == pytest.approx(0.05) and d.se == pytest.approx(math.sqrt(2 * p * (1 - p) / 1000))
    assert (d.n_seeds, d.n_test, d.paired) == (1, 1000, False) and d.lo == pytest.approx(d.delta - 2 * d.se)
    assert d.df is None and d.quantile == 2.0  # one seed: no seed term, ±2 s.e. of the test noise
    # seeds add Var_s(Δ_s)/S
    d2 = difference([0.40, 0.42, 0.44], [0.45, 0.45, 0.50], n_test=1000)
    deltas = np.array([0.05, 0.03, 0.06])
    p2 = np.mean([0.40, 0.42, 0.44, 0.45, 0.45, 0.50])
    assert d2.se == pytest.approx(math.sqrt(deltas.var(ddof=1) / 3 + 2 * p2 * (1 - p2) / 1000))
    v_seed, v_test = deltas.var(ddof=1) / 3, 2 * p2 * (1 - p2) / 1000
    assert d2.df == pytest.approx((v_seed + v_test) ** 2 / (v_seed**2 / 2))  # Welch–Satterthwaite
    # paired: the per-image differences, averaged over seeds: identical runs have no test noise
    rng = np.random.default_rng(0)
    c = rng.random((2, 500)) < 0.4
    same = difference(c.mean(1), c.mean(1), n_test=500, correct_a=c, correct_b=c)
    assert same.paired and same.delta == 0 and same.se == pytest.approx(math.sqrt(3) / 500)  # the floor
    flip = c.copy()
    flip[:, :10] = ~flip[:, :10]
    d3 = difference(c.mean(1), flip.mean(1), n_test=500, correct_a=c, correct_b=flip)
    per_image = (flip.astype(float) - c).mean(0)
    seed = (flip.mean(1) - c.mean(1)).var(ddof=1) / 2
    assert d3.se == pytest.approx(math.sqrt(seed + per_image.var(ddof=1) / 500))
    assert d3.se < difference(c.mean(1), flip.mean(1), n_test=500).se  # paired is tighter
    assert difference(0.4, 0.5, n_test=100, test_var=0.0).se == 0.0
    with pytest.raises(ValueError, match="n_test=0 is not allowed"):
        difference(0.4, 0.5, n_test=0)
    with pytest.raises(ValueError, match="one accuracy per seed each"):
        difference([0.4, 0.5], [0.4], n_test=10)


@pytest.mark.parametrize(("delta", "se", "par", "better"), [
    (0.000, 0.004, "yes", UNDECIDED),  # interval [-0.8, 0.8] pts inside ±2
    (0.015, 0.004, UNDECIDED, "yes"),  # [0.7, 2.3]: above 0, straddles +2
    (0.030, 0.004, "no", "yes"),  # [2.2, 3.8]: wholly outside ±2
    (-0.030, 0.004, "no", "no"),
    (0.000, 0.020, UNDECIDED, UNDECIDED),  # [-4, 4]: wider than the claim
    (float("nan"), 0.01, "no", "no"),
])
def test_on_par_is_an_equivalence_test_and_exceeds_needs_the_interval_off_zero(delta, se, par, better):
    from iterlin.claims import Difference

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


def test_seed_interval_is_students_t_over_seeds():
    m, se, lo, hi = claims.seed_interval([0.4, 0.6])
    assert m == pytest.approx(0.5) and se == pytest.approx(np.std([0.4, 0.6], ddof=1) / np.sqrt(2))
    assert (lo, hi) == pytest.approx((0.5 - 12.7062 * se, 0.5 + 12.7062 * se), rel=1e-5)  # t_0.975(1)
    _, se3, lo3, _ = claims.seed_interval([0.4, 0.5, 0.6])
    assert lo3 == pytest.approx(0.5 - 4.302653 * se3, rel=1e-6)  # t_0.975(2)
    assert all(np.isnan(v) for v in claims.seed_interval([0.3])[1:])


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
    _, se, lo, _ = claims.seed_interval(v)
    assert claims.beyond(v, lo, above=True) != "yes"


def test_difference_short_and_counts():
    d = Difference(0.004, 0.008, 3, 932, True, math.inf)  # df ∞: ±1.96 s.e.
    assert d.short() == "Δ +0.4 [-1.2, +2.0]" and d.counts() == "3 seeds, 932 paired test images"
    assert d.describe() == "Δ +0.4 pts, 95 % t interval [-1.2, +2.0] (3 seeds, 932 paired test images)"
    assert Difference(0.0, 0.01, 1, 200, False).counts() == "1 seed: test noise only, no seed spread, 200 unpaired test images"
    assert Difference(0.004, 0.008, 3, 932, True).describe().startswith("Δ +0.4 pts, 2 s.e. interval [-1.2, +2.0]")


def test_difference_interval_is_students_t_with_welch_satterthwaite_df():
    from scipy import stats

    # two seeds whose differences disagree far more than the test noise: df → 1, t(1) = 12.7
    d = difference([0.40, 0.40], [0.40, 0.50], n_test=10**9)
    assert d.df == pytest.approx(1.0, rel=1e-6) and d.quantile == pytest.approx(12.7062, rel=1e-5)
    assert (d.lo, d.hi) == pytest.approx((0.05 - 12.7062 * 0.05, 0.05 + 12.7062 * 0.05), rel=1e-4)
    assert on_par(d, 0.02) == UNDECIDED  # the same data, ±2 s.e. ([−0.05, 0.15]), would also not be "yes"
    # the seed term negligible against the test noise: df large, the interval ≈ ±1.96 s.e.
    big = difference([0.40, 0.40, 0.40], [0.40, 0.4001, 0.4002], n_test=1000)
    assert big.df > 1e4 and big.quantile == pytest.approx(stats.norm.ppf(0.975), rel=1e-3)
    # identical per-seed differences: no seed variance, df ∞
    assert difference([0.25, 0.5], [0.5, 0.75], n_test=1000).df == math.inf
    # a gap ±2 s.e. called "no" but t(1) leaves undecided: Δ = 5 ± 1 pts (se 1), two seeds
    two = difference([0.40, 0.40], [0.44, 0.46], n_test=10**9)
    assert two.hi - two.lo == pytest.approx(2 * 12.7062 * two.se, rel=1e-4)
    assert on_par(two, 0.02) == UNDECIDED and two.delta - 2 * two.se >= 0.02


@pytest.mark.parametrize(
    "verdicts, expected",
    [(["yes", "yes"], "yes"), (["yes", "no", UNDECIDED], "no"), (["yes", UNDECIDED], UNDECIDED), ([], NA),
     (["yes", UNSTABLE, UNDECIDED], UNSTABLE), ([UNSTABLE, "no"], "no")],
)
def test_all_verdicts(verdicts, expected):
    assert all_verdicts(iter(verdicts)) == expected


def test_final_difference_pairs_on_the_recorded_test_images():
    n = 1000
    correct = np.zeros((4, n), bool)
    for r, k in enumerate([400, 390, 410, 400]):  # runs: seed 0 (A, B), seed 1 (A, B)
        correct[r, :k] = True
    res = {"final_test_acc": correct.mean(1), "final_test_correct": correct, "n_test": np.asarray(n)}
    d = final_difference(res, [0, 2], [1, 3])
    assert d.paired and d.n_seeds == 2 and d.delta == pytest.approx(-0.01)
    assert d == difference(correct.mean(1)[[0, 2]], correct.mean(1)[[1, 3]], n_test=n, correct_a=correct[[0, 2]],
                           correct_b=correct[[1, 3]])
    del res["final_test_correct"]
    assert not final_difference(res, [0, 2], [1, 3]).paired


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


def test_failed_runs_report_the_first_failure():
    h = fake_history([1, 2], 0.1, 6, [0.4, 0.4], n_evals=3, diverged=[False, True], diverged_step=6)
    h["n_relin"] = np.array([[0, 2, 4, 6], [0, 1, 1, 3]])
    h["lin_train_loss"] = np.array([[2.3, 1.9, 1.6, 1.4], [2.3, 1.5, 2.2, 1.4]])  # rose at step 4, diverged at 6
    (step, why), = claims.failed_runs(h).values()
    assert step == 4 and why == "K=2 seed 0: the linear model's loss rose inside a block, 1.5 → 2.2 at step 4"
    h["diverged_step"] = np.array([-1, 2])  # diverged first
    assert claims.failed_runs(h)[1] == (2, "K=2 seed 0 diverged at step 2")
    assert claims.failed_runs(dict(h, K=np.array([1.0, 1.0]))) == {}  # K = 1 is not judged


def test_failures_lists_every_kind_by_run():
    """One history, each kind of failure once: run 0 (K = 1) diverged, run 1 exploded, run 2's linear
    model rose inside a block, run 3 (one evaluation per block) jumped between evaluations; a rise
    inside a block is kept beside a divergence (the row and failed_runs each choose what to report)."""
    h = fake_history([1, 2, 2, 3], 0.1, 6, [0.4] * 4, n_evals=3, diverged=[True, False, False, False],
                     diverged_step=5)
    h["net_train_loss"] = np.array([[2.3, 2.0, 1.8, 1.7], [2.3, 50.0, 9e4, 8.0], [2.3, 1.9, 1.8, 1.7],
                                    [2.3, 1.6, 2.4, 1.9]])
    h["n_relin"] = np.array([[0, 1, 1, 3], [0, 1, 2, 3], [0, 1, 1, 3], [0, 1, 2, 2]])
    h["lin_train_loss"] = np.array([[2.3, 1.9, 2.8, 1.4], [2.3, 2.0, 1.9, 1.8], [2.3, 1.5, 2.2, 1.4],
                                    [2.3, 1.6, 2.4, 1.9]])
    got = [(f.run, f.kind, f.step) for f in claims.failures(h)]
    assert got == [(0, "diverged", 5), (0, "rose", 4), (1, "exploded", 4), (2, "rose", 4), (3, "jumped", 4)]
    f = claims.failures(h)[2]
    assert (f.low, f.high) == (2.3, 9e4)
    row = claims.divergence_claim({"runs": h})
    assert row.measured.startswith("diverged: K=1, lr=0.1 at step 5; loss exploded")  # run 0's rise not repeated
    assert "K=2, lr=0.1: 1.5 → 2.2 at step 4" in row.measured and "K=3, lr=0.1: 1.6 → 2.4 at step 4" in row.measured
