"""ceflow's confirmatory run (iterlin.experiments.ceflow_confirm): the registered rows fix its cpu
config, and their rules (the run's own gap, the on-par margins as a fraction of it, the rows they
require) read yes, no and undecided on constructed results at that config."""

from __future__ import annotations

import numpy as np
import pytest

from iterlin.experiments import ceflow_confirm, protocol, resolve

from _toy import ceflow_results


def test_the_registered_rows_fix_the_cpu_config_and_refuse_any_other():
    rows = protocol.rows_of("ceflow_confirm")
    assert [r.id.split(".", 1)[1] for r in rows] == ["fits", "gap", "large_tau", "few_updates", "inf_scales_worse",
                                                      "solve_further"]
    cpu = resolve("ceflow_confirm", "cpu")
    assert all(r.status == "confirmatory" and r.seeds == cpu.n_seeds == 10 for r in rows)
    assert all(protocol.config_mismatch(r, cpu) == "" for r in rows)
    assert cpu.seed == 100 and sorted(cpu.relins) == [1, 4, 8, 32] and cpu.n_relin == 8
    smoke = resolve("ceflow_confirm", "smoke")
    assert "n_seeds=2 (the row's 10)" in protocol.config_mismatch(rows[0], smoke)
    # another seed range is another run: the pilot's seeds 0 and 1 do not count
    assert "seed=0 (the row's 100)" in protocol.config_mismatch(rows[0], resolve("ceflow_confirm", "cpu", seed=0))


def _constructed(acc, train: float = 1.0):
    """Results at the registered config (:func:`_toy.ceflow_results`)."""
    return ceflow_results(resolve("ceflow_confirm", "cpu"), acc, m=3000, train=train)


def _holds(results) -> dict:
    return {r.id.split(".", 1)[1]: r.holds for r in ceflow_confirm.claims(results)}


def _world(R8: float = 0.40, inf: float = 0.30, long_tau: float = 0.35):
    """Accuracies: R = 4 and 32 at 40 % (R = 8 at ``R8``), K = ∞ at ``inf`` gaining nothing from
    data while R = 8 gains a point per doubling, the longer τ at ``long_tau``."""
    def acc(s):
        if s.total_time > 500:
            return long_tau, inf
        if s.R == 1:
            return 0.2, inf
        if s.n_train != 64:
            return 0.40 + 0.01 * np.log2(s.n_train / 64), inf
        return (R8 if s.R == 8 else 0.40), inf
    return acc


def test_the_rules_read_yes_when_large_tau_keeps_the_gain_and_the_gap_is_clear():
    holds = _holds(_constructed(_world()))
    assert holds == {"fits": "yes", "gap": "yes", "large_tau": "yes", "few_updates": "yes",
                     "inf_scales_worse": "yes", "solve_further": "yes"}


def test_the_margin_is_a_quarter_of_the_runs_own_gap():
    # R = 8 five points below R = 32: outside a quarter of a 10-point gap (2.5 points), inside a
    # quarter of a 30-point gap (7.5 points)
    assert _holds(_constructed(_world(R8=0.35, inf=0.30)))["few_updates"] == "no"
    claims = {c.id.split(".", 1)[1]: c for c in ceflow_confirm.claims(_constructed(_world(R8=0.35, inf=0.10)))}
    assert claims["few_updates"].holds == "yes"
    assert "margin ±7.50 pts (0.25 × the gap, 30.0 pts)" in claims["few_updates"].measured


@pytest.mark.parametrize("world, train, failed", [
    (_world(inf=0.40), 1.0, "gap"),  # no gap to take a fraction of: the on-par rows are not decided
    (_world(), 0.9, "fits"),  # networks that do not fit: nothing is decided
])
def test_a_comparison_counts_only_when_the_rows_it_requires_read_yes(world, train, failed):
    holds = _holds(_constructed(world, train=train))
    assert holds[failed] != "yes"
    assert holds["large_tau"] == holds["few_updates"] == "undecided"
    if failed == "fits":  # (Fig. 8's rule checks the fit of its own runs too: n/a)
        assert holds["gap"] == holds["inf_scales_worse"] == "undecided"
        assert holds["solve_further"].startswith("n/a")


def test_a_run_at_another_config_reads_n_a_naming_the_knobs():
    results = _constructed(_world())
    results = results._replace(config=resolve("ceflow_confirm", "cpu", n_seeds=3))
    claims = ceflow_confirm.claims(results)
    assert all(c.holds.startswith("n/a") for c in claims)
    assert all("n_seeds=3 (the row's 10)" in c.rule for c in claims)
