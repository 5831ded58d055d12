"""Several devices: a sweep's runs sharded over them, a single run's batches split over them.

The multi-device checks run in ONE subprocess on CPU with four host devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``, which must be set before JAX starts) in
float64; it writes its measurements as JSON and the tests below assert on them:

* ``train_sweep`` with its defaults, R = 4 runs (shared key) and R = 3 runs (one key per run: R is
  padded to 4), sharded over the four devices equals the same sweep on one device (``devices=[jax.devices()[0]]``)
  and with sharding off (``shard_runs=False``): parameters and every history entry;
* the state really is spread over four devices (the callback sees it; padding is not visible);
* data-parallel ``train`` equals ``train`` on one device, and each step's batch really is split
  (``jax.debug.inspect_array_sharding`` inside the compiled step);
* a sharded sweep interrupted after a checkpoint resumes, on four devices or on one, to the
  uninterrupted result (the checkpoint holds the R unpadded runs);
* a batch the device count does not divide is refused, naming batch_size.

Argument checks that need no second device run in this process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import optax
import pytest
from _toy import init_params, tiny_problem

import iterlin
from iterlin.training import STEP_RUNS_MIN_PARAMS
from iterlin.training import _loop as training_loop
from iterlin.training._placement import resolve_placement
from iterlin.tree import tree_allclose, tree_size, tree_stack

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TIMEOUT = 600  # seconds (generous: CI machines can be heavily loaded)
TOL = 1e-12  # float64; the sharded programs may sum in another order than the single-device ones

SCRIPT = textwrap.dedent(
    r'''
    import json, math, sys, traceback
    import jax, jax.numpy as jnp, numpy as np, optax
    from _toy import init_params, tiny_problem
    from iterlin.checkpoint import load_checkpoint
    from iterlin.training import fit, make_step, init_state, train, train_sweep
    from iterlin.tree import tree_allclose, tree_stack

    out = {"n_devices": len(jax.devices()), "x64": bool(jax.config.jax_enable_x64)}
    apply_fn, _, x, y = tiny_problem(n=24)
    xt, yt = x[:8] + 0.5, y[:8]
    opt = optax.sgd(0.3, momentum=0.9)
    one = [jax.devices()[0]]
    common = dict(steps=6, optimizer=opt, batch_size=8, eval_every=2, eval_data=(xt, yt))

    def max_diff(a, b):
        """The largest |a − b| over two pytrees (params) or two history dicts."""
        if isinstance(a, dict) and isinstance(b, dict) and set(a) != set(b):
            return float("inf")
        leaves = jax.tree.leaves(jax.tree.map(
            lambda u, v: float(np.max(np.abs(np.asarray(u, np.float64) - np.asarray(v, np.float64)), initial=0.0)),
            a, b))
        return max(leaves)

    def part(name):
        def wrap(fn):
            try:
                out[name] = fn()
            except Exception:
                out[name] = {"error": traceback.format_exc()}
        return wrap

    def sweep_case(Ks, key):
        params = tree_stack([init_params(s) for s in range(len(Ks))])
        seen = []

        def cb(t, st):
            leaf = st.params["Dense_0"]["kernel"]
            seen.append([int(leaf.shape[0]), len(leaf.sharding.device_set)])

        kw = dict(K=Ks, key=key, **common)  # train_sweep's defaults: vmapped, sharded over the 4 devices
        p4, h4 = train_sweep(apply_fn, params, (x, y), callback=cb, **kw)
        p1, h1 = train_sweep(apply_fn, params, (x, y), devices=one, **kw)
        p0, h0 = train_sweep(apply_fn, params, (x, y), shard_runs=False, **kw)
        return {
            "seen": seen,
            "final_devices": sorted({len(a.sharding.device_set) for a in jax.tree.leaves(p4)}),
            "final_shape": list(p4["Dense_0"]["kernel"].shape),
            "one_device_set": sorted({len(a.sharding.device_set) for a in jax.tree.leaves(p1)}),
            "params_vs_1": max_diff(p4, p1), "hist_vs_1": max_diff(h4, h1),
            "params_vs_off": max_diff(p4, p0), "hist_vs_off": max_diff(h4, h0),
            "hist_shape": list(np.shape(h4["net_test_loss"])),
            "moved": max_diff(p4, params),
        }

    @part("sweep_R4")
    def _():
        return sweep_case([1, 2, 3, math.inf], jax.random.PRNGKey(5))

    @part("sweep_R3")
    def _():
        return sweep_case([1, 3, math.inf], jax.random.split(jax.random.PRNGKey(5), 3))

    @part("data_parallel")
    def _():
        res = {}
        p = init_params(0)
        for bs in (8, None):
            kw = dict(common, batch_size=bs)
            pd, hd = train(apply_fn, p, (x, y), K=3, data_parallel=True, **kw)
            ps, hs = train(apply_fn, p, (x, y), K=3, **kw)
            res[str(bs)] = {"params": max_diff(pd, ps), "hist": max_diff(hd, hs), "moved": max_diff(pd, p),
                            "final_devices": sorted({len(a.sharding.device_set) for a in jax.tree.leaves(pd)})}
        # the batch inside the compiled step: split 4 ways on its example axis
        shardings = []
        step = make_step(apply_fn, opt, "ce")

        def inspected(state, batch):
            jax.debug.inspect_array_sharding(batch[0], callback=shardings.append)
            return step(state, batch)

        fit(inspected, init_state(p, opt, 3), apply_fn, (x, y), steps=2, batch_size=8, data_parallel=True)
        res["batch_shardings"] = [[len(s.device_set), list(s.shard_shape(x[:8].shape))] for s in shardings]
        return res

    @part("resume")
    def _():
        import os, tempfile
        Ks = [1, 3, math.inf]
        params = tree_stack([init_params(s) for s in range(3)])
        kw = dict(K=Ks, vectorise=True, config={"case": "resume"}, **common)
        ref_p, ref_h = train_sweep(apply_fn, params, (x, y), shard_runs=False, **kw)

        class Stop(Exception):
            pass

        def stop_at_4(t, st):
            if t == 4:
                raise Stop

        res = {}
        for name, devices in (("on_4", None), ("on_1", one)):
            path = os.path.join(tempfile.mkdtemp(), "ckpt.npz")
            try:
                train_sweep(apply_fn, params, (x, y), callback=stop_at_4, checkpoint=path, **kw)
            except Stop:
                pass
            template = jax.vmap(lambda p: init_state(p, opt, 1))(params)
            (state, _), saved = load_checkpoint(path, (template, ()))
            p, h = train_sweep(apply_fn, params, (x, y), checkpoint=path, devices=devices, **kw)
            res[name] = {"saved_done": saved["done"], "saved_runs": int(state.step.shape[0]),
                         "saved_steps": np.asarray(state.step).tolist(),
                         "params": max_diff(p, ref_p), "hist": max_diff(h, ref_h)}
        return res

    @part("bad_batch")
    def _():
        msgs = []
        for bs in (6, None):
            data = (x, y) if bs is not None else (x[:22], y[:22])
            try:
                train(apply_fn, init_params(0), data, K=3, steps=2, optimizer=opt, batch_size=bs, data_parallel=True)
                msgs.append(None)
            except ValueError as e:
                msgs.append(str(e))
        return msgs

    json.dump(out, open(sys.argv[1], "w"))
    '''
)


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    """Run SCRIPT on four host CPU devices in float64; return its measurements."""
    tmp = tmp_path_factory.mktemp("devices")
    script, result = tmp / "script.py", tmp / "result.json"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu", JAX_ENABLE_X64="1",
               # the runs compile the same programs again and again (fresh closures): cache them
               JAX_COMPILATION_CACHE_DIR=str(tmp / "jax_cache"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
    proc = subprocess.run([sys.executable, str(script), str(result)], env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=tmp)
    assert proc.returncode == 0, f"script failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    out = json.loads(result.read_text())
    assert out["n_devices"] == 4 and out["x64"], out
    return out


def _part(out, name):
    res = out[name]
    assert not (isinstance(res, dict) and "error" in res), res.get("error")
    return res


@pytest.mark.parametrize("case", ["sweep_R4", "sweep_R3"])
def test_sharded_sweep_equals_one_device(four_devices, case):
    res = _part(four_devices, case)
    R = 4 if case == "sweep_R4" else 3
    assert res["moved"] > 1e-3  # training changed the parameters: the comparison means something
    assert res["params_vs_1"] <= TOL and res["hist_vs_1"] <= TOL
    assert res["params_vs_off"] <= TOL and res["hist_vs_off"] <= TOL
    assert res["final_shape"][0] == R and res["hist_shape"] == [R, 4]  # the padding is dropped
    assert res["one_device_set"] == [1]


@pytest.mark.parametrize("case", ["sweep_R4", "sweep_R3"])
def test_sharded_sweep_lives_on_four_devices(four_devices, case):
    res = _part(four_devices, case)
    R = 4 if case == "sweep_R4" else 3
    assert res["seen"] == [[R, 4]] * 4  # at every evaluation point, the callback's state spans 4 devices
    if R == 4:
        assert res["final_devices"] == [4]


def test_data_parallel_train_equals_one_device(four_devices):
    res = _part(four_devices, "data_parallel")
    for bs in ("8", "None"):
        assert res[bs]["moved"] > 1e-3
        assert res[bs]["params"] <= TOL and res[bs]["hist"] <= TOL, (bs, res[bs])
        assert res[bs]["final_devices"] == [4]  # θ replicated on all four
    # each step's batch of 8 (5 features) is split into four shards of 2 examples
    assert res["batch_shardings"] and all(s == [4, [2, 5]] for s in res["batch_shardings"])


@pytest.mark.parametrize("where", ["on_4", "on_1"])
def test_sharded_sweep_resumes_from_checkpoint(four_devices, where):
    res = _part(four_devices, "resume")[where]
    assert res["saved_done"] == 2 and res["saved_runs"] == 3 and res["saved_steps"] == [2, 2, 2]
    assert res["params"] <= TOL and res["hist"] <= TOL, res


def test_data_parallel_batch_not_divisible_is_refused(four_devices):
    msgs = _part(four_devices, "bad_batch")
    assert msgs[0] is not None and "batch_size=6" in msgs[0] and "4 devices" in msgs[0], msgs[0]
    assert msgs[1] is not None and "batch_size=None" in msgs[1] and "22 examples" in msgs[1], msgs[1]


# --- argument checks (no second device needed) -------------------------------------------------------------


def _sweep_args():
    apply_fn, _, x, y = tiny_problem(n=8)
    return apply_fn, tree_stack([init_params(0), init_params(1)]), (x, y)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(shard_runs=True, vectorise=False), "shard_runs=True is not allowed with vectorise=False"),
        (dict(data_parallel=True), "data_parallel=True is not allowed for a sweep"),
        (dict(shard_runs="yes"), "shard_runs='yes' is not allowed"),
        (dict(devices="cpu"), "devices='cpu' is not allowed"),
        (dict(devices=[]), r"devices=\[\] is not allowed"),
        (dict(devices=[jax.devices()[0]] * 2), "must be distinct"),
    ],
)
def test_sweep_device_arguments_are_checked(kwargs, match):
    apply_fn, params, data = _sweep_args()
    with pytest.raises(ValueError, match=match):
        iterlin.train_sweep(apply_fn, params, data, K=[1, math.inf], steps=2, optimizer=optax.sgd(0.1), **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(shard_runs=True), "shard_runs=True is not allowed for a single run"),
        (dict(data_parallel=1), "data_parallel=1 is not allowed"),
    ],
)
def test_train_device_arguments_are_checked(kwargs, match):
    apply_fn, params, x, y = tiny_problem(n=8)
    with pytest.raises(ValueError, match=match):
        iterlin.train(apply_fn, params, (x, y), K=1, steps=2, optimizer=optax.sgd(0.1), **kwargs)


def test_one_device_sharding_options_change_nothing(x64):
    """On one device, sharding the runs over ``devices=[that device]`` gives the default's results."""
    apply_fn, params, data = _sweep_args()
    kw = dict(K=[1, 3], steps=4, optimizer=optax.sgd(0.3), batch_size=4, eval_every=2, vectorise=True)
    ref_p, ref_h = iterlin.train_sweep(apply_fn, params, data, **kw)
    got_p, got_h = iterlin.train_sweep(apply_fn, params, data, devices=jax.devices()[:1], shard_runs=True, **kw)
    assert tree_allclose(got_p, ref_p, rtol=0, atol=1e-14)
    assert set(got_h) == set(ref_h)
    for k in ref_h:
        np.testing.assert_allclose(np.asarray(got_h[k], float), np.asarray(ref_h[k], float), rtol=0, atol=1e-14)


# --- vectorise=None: how a sweep's runs are stepped (the rule of resolve_placement) -------------------------


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (dict(params_per_run=STEP_RUNS_MIN_PARAMS), False),  # one CPU device, a large model: stepped
        (dict(params_per_run=STEP_RUNS_MIN_PARAMS - 1), True),  # a small model: vmapped
        (dict(params_per_run=None), True),  # size unknown: vmapped
        (dict(params_per_run=10**7, vectorise=True), True),  # asked for: kept
        (dict(params_per_run=1, vectorise=False), False),
        (dict(params_per_run=10**7, shard_runs=True), True),  # sharded runs are vmapped
        (dict(params_per_run=10**7, shard_runs=False), False),
        (dict(params_per_run=10**7, sweep=False), True),  # one run: nothing to step
    ],
)
def test_vectorise_none_steps_large_models_on_one_cpu(kwargs, expected):
    assert jax.default_backend() == "cpu"
    args = dict(devices=jax.devices()[:1], shard_runs=None, data_parallel=False, sweep=True, vectorise=None,
                batch_size=None, n_train=8)
    _, vectorise = resolve_placement(**{**args, **kwargs})
    assert vectorise is expected


@pytest.mark.parametrize("width, stepped", [(16, False), (320, True)])  # P = 403 and 105,603
def test_train_sweep_default_route_follows_the_model_size(x64, monkeypatch, width, stepped):
    """``train_sweep``'s default passes each run's parameter count to the rule: the TinyMLP of width
    320 (P ≥ STEP_RUNS_MIN_PARAMS) is stepped on this CPU, and its results are the stepped route's bit
    for bit; width 16 is vmapped, the vmapped route's bit for bit."""
    apply_fn, _, x, y = tiny_problem(n=8, width=width)
    params = tree_stack([init_params(0, width=width), init_params(1, width=width)])
    seen = []

    def spy(*a, **k):
        out = resolve_placement(*a, **k)
        seen.append((k["params_per_run"], out[1]))
        return out

    monkeypatch.setattr(training_loop, "resolve_placement", spy)
    kw = dict(K=[1, 3], steps=4, optimizer=optax.sgd(0.1), batch_size=4, eval_every=2)
    got_p, got_h = iterlin.train_sweep(apply_fn, params, (x, y), **kw)
    ref_p, ref_h = iterlin.train_sweep(apply_fn, params, (x, y), vectorise=not stepped, **kw)
    P = tree_size(init_params(0, width=width))
    assert seen[0] == (P, not stepped) and (P >= STEP_RUNS_MIN_PARAMS) is stepped
    assert tree_allclose(got_p, ref_p, rtol=0, atol=0)
    for k in ref_h:
        np.testing.assert_array_equal(np.asarray(got_h[k]), np.asarray(ref_h[k]), err_msg=k)
