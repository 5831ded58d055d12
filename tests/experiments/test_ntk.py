"""The NTK experiment (iterlin.experiments.ntk): evaluation steps, the probe set's size and memory
bound, one tiny real run with two seeds (the linear model's kernel is exactly fixed between
re-linearisations), and the claims' verdicts (an interval over seeds; consistency checks)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy import fake_cifar, fake_history

from iterlin.repro.claims import NA, UNDECIDED
from iterlin.experiments import ntk, resolve
from iterlin.experiments.ntk import kernel_bytes, probe_size, relin_steps, relin_table


def test_bad_parameters_named():
    with pytest.raises(ValueError, match="n_probe=0 is not allowed"):
        resolve("ntk", n_probe=0)
    assert resolve("ntk", n_probe="all").n_probe is None
    assert resolve("ntk").n_seeds == 1 and resolve("ntk", "cpu").n_seeds >= 3
    assert resolve("ntk", "gpu").n_seeds >= 3


def _config(**changes):
    """ntk's smoke config with ``changes`` (a typed, validated config)."""
    return ntk.EXPERIMENT.get_config("smoke").replace(**changes)


def test_eval_steps_add_every_relinearisation():
    assert ntk.eval_steps(_config(steps=12, n_evals=2, K=(1, 5))) == [0, 5, 6, 10, 12]
    assert ntk.eval_steps(_config(steps=12, n_evals=2, K=(1, math.inf))) == [0, 6, 12]
    assert ntk.eval_steps(_config(steps=4, n_evals=4, K=(1, 2))) == [0, 1, 2, 3, 4]
    assert len(ntk.eval_steps(_config(steps=10_000, n_evals=2, K=(1, 2)), max_points=7)) <= 3 + 7


def test_cpu_scale_sees_intervals_with_and_without_relinearisation():
    config = resolve("ntk", "cpu")
    pts = np.asarray(ntk.eval_steps(config))
    K = max(config.K)
    relin = (pts[1:] // K) > (pts[:-1] // K)  # an interval (t_prev, t] holds a multiple of K
    assert relin.any() and (~relin).any()


# ------------------------------------------------------------------------------------------------
# the probe set: derived from what is installed, memory bounded


def test_probe_size_none_is_every_image_up_to_the_cap():
    config = _config(K=(1, 6), seed=0, n_seeds=2)
    assert probe_size(config.replace(n_probe=None), 16) == 16
    assert probe_size(config.replace(n_probe=None), 4660) == ntk.PROBE_CAP
    assert probe_size(config.replace(n_probe=12), 16) == 12
    with pytest.raises(ValueError, match=r"n_probe=17 is not allowed: n_probe must be <= n_train=16 .*up to 100"):
        probe_size(config.replace(n_probe=17), 16)


def test_probe_size_memory_bound():
    """The largest n_probe the error names fits KERNEL_BYTES, one more does not, and more runs
    allow fewer probe images."""
    config = _config(K=(1, 6), seed=0, n_seeds=2, n_probe=50_000)
    with pytest.raises(ValueError, match=r"n_probe=50000 is not allowed: the kernel tracker would hold .* GiB .* "
                                         r"for 4 runs") as err:
        probe_size(config, 50_000)
    largest = int(str(err.value).split("n_probe <= ")[1].split()[0])
    assert kernel_bytes(largest, 4) <= ntk.KERNEL_BYTES < kernel_bytes(largest + 1, 4)
    assert probe_size(config.replace(n_probe=largest), 50_000) == largest
    with pytest.raises(ValueError, match=f"n_probe={largest} is not allowed"):
        probe_size(config.replace(n_probe=largest, n_seeds=3), 50_000)
    assert kernel_bytes(100, 1) == 5 * 1000**2 * 4


@pytest.mark.parametrize("scale", ["smoke", "cpu", "gpu", "paper"])
def test_every_scale_fits_the_memory_bound(scale):
    config = resolve("ntk", scale)
    installed = 4660 if config.n_train is None else config.n_train
    assert probe_size(config, installed) <= installed


def test_load_refuses_more_probe_images_than_loaded(monkeypatch):
    monkeypatch.setattr("iterlin.experiments._common.load_cifar10", lambda n, n_test: fake_cifar(n, n_test))
    with pytest.raises(ValueError, match="n_probe=17 is not allowed"):
        ntk.load(resolve("ntk", n_train=16, n_test=8, batch_size=8, n_probe=17))
    assert ntk.load(resolve("ntk", n_train=16, n_test=8, batch_size=8, n_probe=16)).x_train.shape[0] == 16


# ------------------------------------------------------------------------------------------------
# one tiny real run


def test_ntk_tiny_kernel_fixed_between_relinearisations(tiny_cifar):
    config = resolve("ntk", K=2, steps=4, batch_size=8, n_train=16, n_test=8, n_probe=2, n_evals=4, n_seeds=2)
    assert ntk.eval_steps(config) == [0, 1, 2, 3, 4]
    r = ntk.compute(config, tiny_cifar)
    assert isinstance(r, ntk.Results) and r.config is None
    h = r.runs
    assert int(r.n_probe) == 2 and h["K"].tolist() == [1.0, 2.0, 1.0, 2.0]
    for k in ("kernel_distance_init", "kernel_velocity", "kernel_distance_relin"):
        assert np.asarray(h[k]).shape == (4, 5)
    d = np.asarray(h["kernel_distance_relin"])
    for i1, j in ((0, 1), (2, 3)):  # each seed's K = 1 and K = 2 runs
        assert d[j, 1] == 0.0 and d[j, 3] == 0.0  # K = 2: θ_s unchanged over steps 0→1, 2→3
        assert d[j, 2] > 0 and d[j, 4] > 0 and np.all(d[i1, 1:] > 0)  # re-linearisations move the kernel
        assert ntk.relin_kernel_changes(h, j).relinearised.tolist() == [False, True, False, True]
    assert np.all(np.isnan(h["kernel_velocity"][:, 0]))
    rows = ntk.claims(r._replace(config=config))
    assert [(r.kind, r.holds) for r in rows[2:]] == [("check", "yes"), ("check", "yes")]
    assert rows[0].kind == "claim" and "2 seeds" in rows[0].measured


# ------------------------------------------------------------------------------------------------
# claims on constructed histories


def _history(d_init_k1=(0.2,), relin=((0.0, 0.1, 0.0, 0.2),), K=(1, 2), diverged=None):
    """Steps 0..4; per seed s a K = 1 run whose kernel ends d_init_k1[s] from its initial one and a
    K = 2 run re-linearising at steps 2 and 4 (intervals 1→2 and 3→4) whose linear model's kernel
    changes by relin[s] over the four intervals. Runs seed-major in the order of ``K``."""
    S = len(d_init_k1)
    h = fake_history(list(K) * S, 0.05, 4, [0.3] * (len(K) * S), n_evals=4, diverged=diverged)
    h["step"] = np.arange(5)
    h["seed_index"] = np.repeat(np.arange(S), len(K))
    n_relin, d_init, d_relin = [], [], []
    for s in range(S):
        for k in K:
            if k == 1:
                n_relin.append(np.arange(5))
                d_init.append(np.linspace(0, d_init_k1[s], 5))
                d_relin.append(np.full(5, 0.1))
            else:
                n_relin.append(np.array([0, 0, 1, 1, 2]))
                d_init.append(np.linspace(0, 0.05, 5))
                d_relin.append(np.array([0.0, *relin[s]]))
    h["n_relin"], h["kernel_distance_init"], h["kernel_distance_relin"] = map(np.stack, (n_relin, d_init, d_relin))
    return ntk.Results(runs=h, n_probe=np.asarray(4))


def test_relin_kernel_changes():
    c = ntk.relin_kernel_changes(_history().runs, 1)
    assert c.step.tolist() == [1, 2, 3, 4] and c.n_relin.tolist() == [0, 1, 1, 2]
    assert c.relinearised.tolist() == [False, True, False, True]
    assert c.distance.tolist() == [0.0, 0.1, 0.0, 0.2]


def test_claims_hold_over_seeds():
    rows = ntk.claims(_history(d_init_k1=(0.2, 0.202), relin=((0.0, 0.1, 0.0, 0.2), (0.0, 0.15, 0.0, 0.12))))
    assert [(r.kind, r.holds) for r in rows] == [("claim", "yes"), ("claim", "yes"), ("check", "yes"),
                                                 ("check", "yes")]
    assert rows[0].measured == ("d(Θ_T, Θ_0): K=1 0.201, 95 % t interval [0.188, 0.214] (2 seeds); "
                                "K=2 network 0.050")
    assert rows[2].measured == ("K=2: max d(Θ_s, Θ_s,prev) = 0.000000 over 4 intervals without re-linearisation "
                                "(2 seeds)")
    assert rows[3].measured == "K=2: 4 intervals with re-linearisations, d from 0.1000 to 0.2000"


def test_claims_fail():
    rows = ntk.claims(_history(d_init_k1=(0.004, 0.0041), relin=((1e-9, 0.1, 0.0, 0.2), (0.0, 0.1, 0.0, 0.0)),
                               diverged=[False, True, False, False]))
    assert [r.holds for r in rows] == ["no", "no", "no", "no"]


def test_claims_undecided():
    # the seeds straddle 0.01 (mean 0.0275, t(1) interval ±0.29); one seed has no spread to estimate
    assert ntk.claims(_history(d_init_k1=(0.005, 0.05), relin=((0.0, 0.1, 0.0, 0.2),) * 2))[0].holds == UNDECIDED
    rows = ntk.claims(_history(d_init_k1=(0.2,)))
    assert rows[0].holds == UNDECIDED and rows[0].measured.startswith("d(Θ_T, Θ_0): K=1 0.200 (1 seed)")


def test_runs_are_found_by_K_not_by_position():
    a = ntk.claims(_history(d_init_k1=(0.2, 0.25), relin=((0.0, 0.1, 0.0, 0.2),) * 2))
    b = ntk.claims(_history(d_init_k1=(0.2, 0.25), relin=((0.0, 0.1, 0.0, 0.2),) * 2, K=(2, 1)))
    assert [(r.holds, r.measured) for r in a] == [(r.holds, r.measured) for r in b]


def test_checks_not_applicable():
    # every interval holds a re-linearisation (K = 1 as the "large" K's schedule): nothing to hold fixed
    res = _history(relin=((0.05, 0.1, 0.05, 0.2),))
    res.runs["n_relin"][1] = np.arange(5)
    rows = ntk.claims(res)
    assert rows[2].holds == NA and rows[3].holds == "yes"
    # the large K never re-linearised within the run
    res = _history()
    res.runs["n_relin"][1] = 0
    rows = ntk.claims(res)
    assert rows[2].holds == "no" and rows[3].holds == NA  # 0.1, 0.2 measured where θ_s did not change
    assert rows[3].measured == "K=2: no re-linearisation"
    rows = ntk.claims(_history(K=(1,)))
    assert [r.holds for r in rows] == [NA, "yes"] and rows[0].claim == "ntk: large K against K = 1"


@pytest.mark.parametrize("k", [1, math.inf])
def test_eval_steps_without_finite_large_K(k):
    assert ntk.eval_steps(_config(steps=10, n_evals=5, K=(1, k))) == [0, 2, 4, 6, 8, 10]


# The notebook's summary functions (pure functions of the results; no training).


def _results(K=(1.0, 6.0), seeds=1):
    R = len(K)
    n_relin = np.array([[0, 3, 6, 9], [0, 0, 1, 1]])[:R]
    d = np.array([[0.0, 0.2, 0.1, 0.3], [0.0, 0.0, 0.1683, 0.0]])[:R]
    return ntk.Results(runs={"K": np.array(list(K) * seeds), "step": np.array([0, 3, 6, 9]),
                             "n_relin": np.concatenate([n_relin] * seeds),
                             "kernel_distance_relin": np.concatenate([d * (s + 1) for s in range(seeds)]),
                             "seed_index": np.repeat(np.arange(seeds), R), "seed": np.repeat(np.arange(seeds) + 5, R)},
                       n_probe=np.asarray(4))


def test_relin_steps_of_the_largest_k():
    np.testing.assert_array_equal(relin_steps(_results()), [6])
    np.testing.assert_array_equal(relin_steps(_results(seeds=2)), [6])


def test_relin_steps_empty_when_only_k1_ran():
    assert relin_steps(_results(K=(1.0,))).size == 0


def test_relin_table_rows():
    lines = relin_table(_results()).split("\n")
    assert lines[0] == "K = 6; d(Θ_s, Θ_s,prev) by seed" and "re-linearisations so far" in lines[1]
    assert lines[1].split()[-2:] == ["seed", "5"]
    assert len(lines) == 2 + 3
    assert lines[3].split() == ["6", "1", "yes", "0.1683"]
    assert lines[2].split() == ["3", "0", "no", "0.0000"]


def test_relin_table_a_column_per_seed():
    lines = relin_table(_results(seeds=2)).split("\n")
    assert lines[1].split()[-4:] == ["seed", "5", "seed", "6"]
    assert lines[3].split() == ["6", "1", "yes", "0.1683", "0.3366"]
