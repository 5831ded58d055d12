"""iterlin.repro.failures: every way a run of a sweep failed, found once and worded for the claims."""

from __future__ import annotations

import math

import numpy as np
from _toy import fake_history

from iterlin.repro.claims import divergence_claim
from iterlin.repro.failures import failed_runs, failures


def test_failed_runs_report_the_first_failure():
    h = fake_history([1, 2], 0.1, 6, [0.4, 0.4], n_evals=3, diverged=[False, True], diverged_step=6)
    h["n_relin"] = np.array([[0, 2, 4, 6], [0, 1, 1, 3]])
    h["lin_train_loss"] = np.array([[2.3, 1.9, 1.6, 1.4], [2.3, 1.5, 2.2, 1.4]])  # rose at step 4, diverged at 6
    (step, why), = failed_runs(h).values()
    assert step == 4 and why == "K=2 seed 0: the linear model's loss rose inside a block, 1.5 → 2.2 at step 4"
    h["diverged_step"] = np.array([-1, 2])  # diverged first
    assert failed_runs(h)[1] == (2, "K=2 seed 0 diverged at step 2")
    assert failed_runs(dict(h, K=np.array([1.0, 1.0]))) == {}  # K = 1 is not judged


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
    got = [(f.run, f.kind, f.step) for f in failures(h)]
    assert got == [(0, "diverged", 5), (0, "rose", 4), (1, "exploded", 4), (2, "rose", 4), (3, "jumped", 4)]
    f = failures(h)[2]
    assert (f.low, f.high) == (2.3, 9e4)
    row = divergence_claim({"runs": h})
    assert row.measured.startswith("diverged: K=1, lr=0.1 at step 5; loss exploded")  # run 0's rise not repeated
    assert "K=2, lr=0.1: 1.5 → 2.2 at step 4" in row.measured and "K=3, lr=0.1: 1.6 → 2.4 at step 4" in row.measured


def test_a_network_loss_rise_inside_a_block_is_not_a_jump():
    """The network's loss rising between two evaluations of one block (n_relin unchanged: every pair
    of K = ∞) is the network leaving its linearisation while the trained linear model's loss falls:
    not a failure. The same rise across a re-linearisation is one ("jumped")."""
    h = fake_history([1, 2, math.inf], 0.1, 6, [0.4] * 3, n_evals=3)
    h["net_train_loss"] = np.array([[2.3, 1.9, 1.7, 1.4], [2.3, 1.6, 2.4, 1.9], [2.3, 2.1, 2.5, 2.9]])
    h["lin_train_loss"] = np.array([[2.3, 1.9, 1.7, 1.4], [2.3, 1.2, 0.9, 0.7], [2.3, 0.9, 0.4, 0.2]])
    h["n_relin"] = np.array([[0, 2, 4, 6], [0, 1, 1, 1], [0, 0, 0, 0]])
    assert failures(h) == [] and divergence_claim({"runs": h}).holds == "yes"
    h["n_relin"] = np.array([[0, 2, 4, 6], [0, 1, 2, 2], [0, 0, 0, 0]])  # K = 2 re-linearised before step 4
    assert [(f.run, f.kind, f.step) for f in failures(h)] == [(1, "jumped", 4)]
