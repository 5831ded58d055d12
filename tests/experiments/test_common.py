"""iterlin.experiments._common: the sweep with per-run learning rates, the CNN sweep's arguments,
evaluation points, early stopping and the small helpers every experiment module shares."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _toy import FakeSweep, fake_cifar, fake_sweep, null_model, tiny_problem

from iterlin import relin
from iterlin.experiments import _common as C
from iterlin.experiments import fig3, fig9, ntk, resolve
from iterlin.training import History, train

# ----------------------------------------------------------------------------------------------
# sweep(): several (K, lr) in one program = separate runs
# ----------------------------------------------------------------------------------------------


def test_sweep_with_per_run_learning_rates_equals_separate_runs(x64):
    apply_fn, params, x, y = tiny_problem()
    key = jax.random.PRNGKey(3)
    runs = [(3, 0.1), (math.inf, 0.5)]
    h = C.sweep(apply_fn, params, (x, y), K=[k for k, _ in runs], lr=[lr for _, lr in runs], steps=9,
                batch_size=8, key=key, eval_data=(x, y), eval_steps=[0, 3, 6, 9])
    assert h["step"].tolist() == [0, 3, 6, 9]
    assert h["K"].tolist() == [3.0, math.inf] and h["lr"].tolist() == [0.1, 0.5]
    for i, (k, lr) in enumerate(runs):
        _, ref = train(apply_fn, params, (x, y), K=k, steps=9, optimizer=optax.sgd(lr), batch_size=8, key=key,
                       eval_data=(x, y), eval_steps=[0, 3, 6, 9])
        for name in ("net_train_loss", "lin_test_loss", "net_test_acc", "n_relin"):
            np.testing.assert_allclose(h[name][i], ref[name], rtol=1e-9, atol=1e-12, err_msg=name)


def test_sweep_reports_train_sweeps_errors_naming_the_run():
    """The experiments' configs validate K and lr; what still gets through is refused by train_sweep,
    naming the run's K or the rates it was given."""
    apply_fn, params, x, y = tiny_problem()
    kw = dict(steps=2, eval_steps=[0, 2])
    with pytest.raises(ValueError, match=r"K\[1\]=0 is not allowed"):
        C.sweep(apply_fn, params, (x, y), K=[1, 0], lr=0.1, **kw)
    with pytest.raises(ValueError, match=r"hyperparams=\{'learning_rate': \[0.1, 0.2, 0.3\]\} is not allowed: "
                                         r"hyperparams\['learning_rate'\] must be a sequence of 2 numbers"):
        C.sweep(apply_fn, params, (x, y), K=[1, 2], lr=[0.1, 0.2, 0.3], **kw)


def test_sweep_callback_gets_apply_fn_and_the_stacked_initial_params():
    """``callback(apply_fn, params0)``: θ_0 stacked over the runs, so trackers measure from it."""
    apply_fn, params, x, y = tiny_problem()
    seen = {}

    def callback(f, params0):
        seen["f"], seen["params0"] = f, params0

        def track(step, state):
            d = jax.tree.map(lambda a, b: jnp.sum((a - b) ** 2, axis=tuple(range(1, a.ndim))), state.params, params0)
            return {"dist": np.sqrt(np.asarray(sum(jax.tree.leaves(d))))}

        return track

    h = C.sweep(apply_fn, params, (x, y), K=[1, 2, 4], lr=0.1, steps=4, eval_steps=[0, 2, 4], callback=callback)
    assert seen["f"] is apply_fn
    for a, b in zip(jax.tree.leaves(seen["params0"]), jax.tree.leaves(params)):
        assert a.shape == (3, *b.shape) and np.array_equal(a[2], b)
    assert h["dist"].shape == (3, 3)
    assert np.all(h["dist"][:, 0] == 0) and np.all(h["dist"][:, 1:] > 0)


# ----------------------------------------------------------------------------------------------
# cnn_sweep(): the config's defaults and the keyword overrides reach the sweep
# ----------------------------------------------------------------------------------------------


def test_cnn_sweep_passes_config_and_overrides(monkeypatch):
    fake = FakeSweep()
    monkeypatch.setattr(C, "sweep", fake)
    monkeypatch.setattr(C, "make_model", null_model)
    config = resolve("fig3", K=4, lr=0.2, steps=6, batch_size=4, n_train=16, n_evals=3, augment=False, seed=2)
    data = fake_cifar(16)
    C.cnn_sweep(config, data)
    C.cnn_sweep(config, data, K=[1, 8], lr=[0.1, 0.05], steps=12, batch_size=None, eval_steps=[0, 12])
    first, second = fake.calls
    assert first["K"] == [1, 4] and first["lr"] == 0.2 and first["steps"] == 6 and first["batch_size"] == 4
    assert first["eval_steps"] == [0, 2, 4, 6] and first["augment"] is False and first["n"] == 16
    assert np.array_equal(first["key"], C.seed_keys(2)[1])  # the batch key of the seed
    assert first["eval_data"][0].shape == (8, 32, 32, 3) and first["config"] == config.to_dict()
    assert second["K"] == [1, 8] and second["lr"] == [0.1, 0.05] and second["steps"] == 12
    assert second["batch_size"] is None and second["eval_steps"] == [0, 12]


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------


def test_eval_points_and_early_stopping():
    assert C.eval_points(10, 4) == [0, 2, 5, 8, 10]
    assert C.eval_points(2, 5) == [0, 1, 2]
    h = {"net_test_acc": np.array([[0.1, 0.5, 0.3], [0.2, np.nan, 0.4]])}
    assert C.early_stopped(h).tolist() == [0.5, 0.4]
    assert C.early_stopped({"x": np.array([[0.3, np.inf, 0.2]])}, "x").tolist() == [0.3]  # non-finite ignored


def test_seed_keys_and_checkpoint_path(tmp_path):
    init_key, data_key = C.seed_keys(5)
    ref = jax.random.split(jax.random.PRNGKey(5))
    assert np.array_equal(init_key, ref[0]) and np.array_equal(data_key, ref[1])
    assert C.checkpoint_path(None, "runs") is None
    assert C.checkpoint_path(tmp_path, "runs") == tmp_path / "runs.npz"


def test_seed_keys_allow_exactly_the_seeds_prngkey_distinguishes():
    # issue 10 item 3: seed 2**32 gave seed 0's keys (PRNGKey keeps the low 32 bits) under its own cache key
    top = 2**32 - 1
    keys = {s: np.asarray(C.seed_keys(s)[0]).tolist() for s in (0, 1, 2**31, top)}
    assert len({tuple(v) for v in keys.values()}) == 4, "distinct allowed seeds give distinct keys"
    for s in (0, 1, 2**31 - 1, 2**31, top):  # PRNGKey(s) = [0, s] on this whole range: one key per seed
        assert np.asarray(jax.random.key_data(jax.random.PRNGKey(s))).tolist() == [0, s]
    for bad in (2**32, 2**32 + 1, 1e20, -1):
        with pytest.raises(ValueError, match=r"seed=.* is not allowed: seed must be an integer >= 0 and <= 4294967295"):
            C.seed_keys(bad)
    from iterlin.models import quintic_model  # Figs. 1 and 9: seeds seed .. seed + n_seeds - 1

    with pytest.raises(ValueError, match=r"seeds=\[4294967295, 4294967296\] is not allowed: .*\[0, 4294967295\]"):
        quintic_model([top, top + 1])
    for name in ("fig3", "fig9"):
        with pytest.raises(ValueError, match="seed=4294967296 is not allowed"):
            resolve(name, seed=2**32)


def test_index_of_K_and_rmse():
    K = np.array([1.0, 8.0, math.inf, 8.0])
    assert C.index_of_K(K, 1) == 0 and C.index_of_K(K, 8) == 1 and C.index_of_K(K, math.inf) == 2
    assert C.index_of_K(K, K.max()) == 2
    with pytest.raises(IndexError):
        C.index_of_K(K, 3)
    pred = np.zeros((2, 4, 1))
    y = np.array([[1.0], [1.0], [-1.0], [-1.0]])
    np.testing.assert_allclose(C.rmse(pred, y), [1.0, 1.0])
    assert C.rmse(np.full((3, 1), np.inf), np.zeros((3, 1))) == np.inf  # no warning, no error


def test_check_batch_and_a_load_that_checks_n_probe(monkeypatch):
    cnn = fig3.EXPERIMENT.get_config("smoke")
    C.check_batch(cnn.replace(batch_size=None), 3)
    C.check_batch(cnn.replace(batch_size=3), 3)
    C.check_batch(fig9.EXPERIMENT.get_config("smoke"), 3)  # a config without batch_size
    with pytest.raises(ValueError, match=r"batch_size=4 is not allowed.*n_train=3"):
        C.check_batch(cnn.replace(batch_size=4), 3)
    monkeypatch.setattr(C, "load_cifar10", lambda n, n_test: fake_cifar(n or 20, n_test or 4))
    probe = ntk.EXPERIMENT.get_config("smoke").replace(n_train=10, n_test=4, batch_size=None)
    assert ntk.load(probe.replace(n_probe=10)).x_train.shape[0] == 10
    assert ntk.load(probe.replace(n_probe=None)).x_train.shape[0] == 10
    with pytest.raises(ValueError, match=r"n_probe=11 is not allowed.*n_train=10"):
        ntk.load(probe.replace(n_probe=11))
    # batch_size above the images loaded (a typed config refuses batch_size > n_train itself, so the
    # check at load time is reached with n_train='all' and only 10 images installed)
    monkeypatch.setattr(C, "load_cifar10", lambda n, n_test: fake_cifar(10, n_test or 4))
    with pytest.raises(ValueError, match=r"batch_size=11 is not allowed"):
        C.load_data(cnn.replace(n_train=None, n_test=4, batch_size=11))


def test_load_quintic_dtype():
    config = fig9.EXPERIMENT.get_config("smoke").replace(n_train=6, n_test=9)
    d = C.load_quintic(config.replace(x64=True))
    assert d.x_train.shape == (6, 1) and d.x_test.shape == (9, 1) and d.x_train.dtype == np.float64
    assert C.load_quintic(config.replace(x64=False)).y_test.dtype == np.float32


# ----------------------------------------------------------------------------------------------
# Seeds side by side: one program, each seed its own θ_0 and batches
# ----------------------------------------------------------------------------------------------


def test_sweep_over_seeds_equals_each_seed_alone(x64):
    """Seed-major runs (seed × K): run (s, K) equals the sweep of seed s alone, key and θ_0 its own;
    per-image correctness averages to the final accuracy."""
    apply_fn, params0, x, y = tiny_problem(seed=0)
    _, params1, _, _ = tiny_problem(seed=1)
    keys = [jax.random.PRNGKey(3), jax.random.PRNGKey(4)]
    kw = dict(K=[1, 4], lr=[0.1, 0.3], steps=9, batch_size=8, eval_data=(x, y), eval_steps=[0, 5, 9], augment=False)
    both = C.sweep(apply_fn, [params0, params1], (x, y), key=keys, **kw)
    assert both["K"].tolist() == [1, 4, 1, 4] and both["seed_index"].tolist() == [0, 0, 1, 1]
    assert both["lr"].tolist() == [0.1, 0.3, 0.1, 0.3]
    for s, (p, k) in enumerate(zip([params0, params1], keys)):
        alone = C.sweep(apply_fn, p, (x, y), key=k, **kw)
        for name in ("net_train_loss", "lin_test_acc", "n_relin", "net_test_correct"):
            np.testing.assert_allclose(both[name][2 * s:2 * s + 2], alone[name], rtol=1e-9, atol=1e-12,
                                       err_msg=name)
    np.testing.assert_allclose(both["net_test_correct"].mean(1), both["net_test_acc"][:, -1], atol=1e-12)
    np.testing.assert_allclose(both["lin_test_correct"].mean(1), both["lin_test_acc"][:, -1], atol=1e-12)
    # the seeds differ (θ_0 and batches), so the comparison over seeds is not one run counted twice
    assert not np.allclose(both["net_train_loss"][0], both["net_train_loss"][2])


def test_sweep_refuses_a_mismatch_of_initialisations_and_keys():
    apply_fn, params, x, y = tiny_problem()
    with pytest.raises(ValueError, match="2 initialisations but 1 keys"):
        C.sweep(apply_fn, [params, params], (x, y), K=[1], lr=0.1, steps=2, eval_steps=[0, 2],
                key=[jax.random.PRNGKey(0)])


def test_cnn_sweep_trains_every_seed_and_records_it(monkeypatch):
    captured = {}

    def recording_sweep(apply_fn, params, data, **kw):
        captured.update(params=params, **kw)
        n = len(params) * len(kw["K"])
        h = fake_sweep(list(kw["K"]) * len(params), 0.1, 6, [0.3] * n)
        return dataclasses.replace(h, seed_index=np.repeat(np.arange(len(params)), len(kw["K"])))

    monkeypatch.setattr(C, "sweep", recording_sweep)
    monkeypatch.setattr(C, "make_model", null_model)
    data = fake_cifar(40)
    config = fig3.EXPERIMENT.get_config("smoke").replace(seed=7, n_seeds=3, K=(1, 5), lr=0.1, steps=6, batch_size=8, n_evals=3,
                                              n_eval_train=30)
    h = C.cnn_sweep(config, data)
    assert h["seed"].tolist() == [7, 7, 8, 8, 9, 9]
    assert len(captured["params"]) == 3 and len(captured["key"]) == 3
    assert captured["eval_train_size"] == 30
    assert C.seeds(config) == [7, 8, 9] and C.seeds(fig3.EXPERIMENT.get_config("smoke", seed=2, n_seeds=1)) == [2]


def test_network_correct_in_chunks_equals_one_pass():
    apply_fn, params, x, y = tiny_problem()
    whole = np.asarray(jnp.argmax(apply_fn(params, x), -1) == y)
    got = C.network_correct(apply_fn, params, np.asarray(x), np.asarray(y), batch_size=7)  # 24 = 7+7+7+3
    assert got.dtype == bool and got.shape == (x.shape[0],)
    np.testing.assert_array_equal(got, whole)
    assert 0 < got.sum() < got.size  # both outcomes occur, so a constant answer would fail


def test_merge_callbacks_runs_each_and_refuses_a_shared_key():
    seen = []

    def first(apply_fn, params0):
        seen.append(("first", apply_fn, params0))
        return lambda step, state: {"a": step}

    def second(apply_fn, params0):
        seen.append(("second", apply_fn, params0))
        return lambda step, state: {"b": state}

    cb = C.merge_callbacks(first, second)("f", "p0")
    assert seen == [("first", "f", "p0"), ("second", "f", "p0")]  # each factory gets the sweep's arguments
    assert cb(3, "s") == {"a": 3, "b": "s"}
    clash = C.merge_callbacks(first, first)("f", "p0")
    with pytest.raises(ValueError, match=r"callbacks=.* is not allowed: two of them record \['a'\]"):
        clash(0, None)


# ----------------------------------------------------------------------------------------------
# Sweep: the typed runs of a sweep, and the columns a results file stores
# ----------------------------------------------------------------------------------------------


def test_a_sweep_is_typed_and_its_columns_are_its_fields(x64):
    """``sweep`` returns a :class:`Sweep`: K, lr, seed_index, the per-image correctness and the
    history as fields; as a mapping, the history's columns and the fields by name."""
    apply_fn, params, x, y = tiny_problem(n=16)
    s = C.sweep(apply_fn, params, (x, y), K=[1, 2, math.inf], lr=[0.1, 0.05, 0.2], steps=4, batch_size=4,
                key=jax.random.PRNGKey(0), eval_data=(x[:6], y[:6]), eval_steps=[0, 2, 4])
    assert isinstance(s, C.Sweep) and isinstance(s.history, History)
    assert s.K.tolist() == [1.0, 2.0, math.inf] and s.lr.tolist() == [0.1, 0.05, 0.2]
    assert s.seed_index.tolist() == [0, 0, 0] and s.seed is None and s.settings == {}
    assert s.net_test_correct.shape == s.lin_test_correct.shape == (3, 6) and s.net_test_correct.dtype == bool
    assert s.history.relin is None  # periods: no log kept (every K-th step)
    assert s["K"] is s.K and s["net_test_acc"] is s.history.net_test.acc and s["step"] is s.history.step
    assert set(s) == set(s.history) | {"K", "lr", "seed_index", "net_test_correct", "lin_test_correct"}
    with pytest.raises(TypeError):
        s["K"] = s.K  # read-only


def test_a_policy_sweeps_settings_and_log_survive_the_columns():
    apply_fn, params, x, y = tiny_problem(n=16)
    s = C.sweep(apply_fn, params, (x, y), K=[relin.adaptive(0.0), relin.adaptive(0.5, min_period=2)], lr=0.1, steps=4,
                batch_size=4, key=jax.random.PRNGKey(0), eval_steps=[0, 2, 4],
                callback=lambda f, p0: lambda t, state: {"probe": np.zeros(np.shape(state.n_relin) + (3,))})
    assert s.settings["policy"].tolist() == ["adaptive", "adaptive"] and s.settings["tol"].tolist() == [0.0, 0.5]
    assert s.history.relin is not None and s.history.extra["probe"].shape == (2, 3, 3)
    back = C.Sweep.from_columns(dict(s))  # as a results file stores it and reads it back
    assert set(back.settings) == set(s.settings) and sorted(back) == sorted(s)
    assert set(back.history.extra) == {"probe"}  # a callback's values keep their evaluation axis
    for k in s:
        np.testing.assert_array_equal(back[k], s[k], err_msg=k)
    assert back.lr.tolist() == [0.1, 0.1] and back.net_test_correct is None


def test_a_sweeps_columns_must_name_its_runs():
    with pytest.raises(ValueError, match=r"columns=\['step'\] are not allowed: .*\['K', 'seed_index'\]"):
        C.Sweep.from_columns({"step": np.arange(3)})


def test_typed_results_read_sweeps_and_mappings_of_sweeps_back():
    """``Experiment.typed`` makes a Sweep of a field annotated ``Sweep`` (fig3's ``runs``) or
    ``Sweep | None`` (gn's ``gn``), a dict of Sweeps of one annotated ``Mapping[str, Sweep]``
    (fig5's ``histories``) and a record of one annotated with a ``Record`` type (fig7's ``match``,
    fig1's ``literal``, ``LiteralRuns | None``)."""
    from iterlin.experiments import fig1, fig5, fig7, gn, registry

    cols = dict(fake_sweep([1, 4], 0.1, 8, [0.3, 0.3]))
    r3 = registry.get("fig3").typed({"runs": cols, "n_test": np.asarray(8)}, fig3.EXPERIMENT.get_config("smoke"))
    assert isinstance(r3.runs, C.Sweep) and r3.runs.K.tolist() == [1.0, 4.0]
    fields5 = {f: np.zeros(2) for f in fig5.Results._fields if f not in ("histories", "config")}
    r5 = registry.get("fig5").typed({**fields5, "histories": {"8": cols, "16": cols}}, fig5.EXPERIMENT.get_config("smoke"))
    assert set(r5.histories) == {"8", "16"} and all(isinstance(v, C.Sweep) for v in r5.histories.values())
    fields_gn = {f: np.zeros(2) for f in gn.Results._fields if f not in ("runs", "gn", "config")}
    rg = registry.get("gn").typed({**fields_gn, "runs": cols, "gn": cols}, gn.EXPERIMENT.get_config("smoke"))
    assert isinstance(rg.gn, C.Sweep) and isinstance(rg.runs, C.Sweep)
    match = {k: np.zeros(2) for k in ("norm", "ratio", "fraction", "cosine", "match_step", "K_large")}
    r7 = registry.get("fig7").typed({"runs": cols, "match": match}, fig7.EXPERIMENT.get_config("smoke"))
    assert isinstance(r7.match, fig7.FilterMatch) and isinstance(r7.runs, C.Sweep)
    assert r7.match.ratio is match["ratio"] and dict(r7.match) == match
    fields1 = {f: np.zeros(2) for f in fig1.Results._fields if f not in ("gn", "bridge", "literal", "config")}
    gn1 = {f.name: np.zeros(2) for f in dataclasses.fields(fig1.GaussNewtonRuns)}
    bridge = {f.name: np.zeros(2) for f in dataclasses.fields(fig1.Bridge)}
    literal = {k: np.zeros(2) for k in ("K", "lr", "steps", "n_relin", "tau")}  # a plan without K: no runs
    r1 = registry.get("fig1").typed({**fields1, "gn": gn1, "bridge": bridge, "literal": literal},
                                    fig1.EXPERIMENT.get_config("smoke"))
    assert isinstance(r1.gn, fig1.GaussNewtonRuns) and isinstance(r1.bridge, fig1.Bridge)
    assert isinstance(r1.literal, fig1.LiteralRuns) and r1.literal.bound is None and set(r1.literal) == set(literal)
    with pytest.raises(ValueError, match=r"^columns=\['norm'\] are not allowed: missing \['ratio'"):
        registry.get("fig7").typed({"runs": cols, "match": {"norm": np.zeros(2)}}, fig7.EXPERIMENT.get_config("smoke"))
