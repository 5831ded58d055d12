"""Checkpoints: atomic writes, round trips, corrupt or foreign files refused with a clear message.

The kill/resume behaviour of a real training run is in ``tests/test_resume.py``; here are the file
format (:mod:`iterlin.checkpoint`) and how :func:`iterlin.training.train` treats a checkpoint that is
truncated, written by a different configuration, or by a run that already finished.
"""

from __future__ import annotations

import json
import math
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from iterlin.checkpoint import CheckpointError, atomic_write_bytes, load_checkpoint, save_checkpoint
from iterlin.training import train, train_sweep
from iterlin.training._checkpointing import RunIdentity
from iterlin.tree import tree_stack


class Pair(NamedTuple):
    a: object
    b: object


def _tree():
    return {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "nested": Pair(np.float64(2.5), (np.int32(7), np.array([True, False]))),
        "empty": np.zeros((0, 2), np.float32),
    }


def _tmp_files(directory):
    return sorted(p for p in os.listdir(directory) if p.endswith(".tmp"))


# ----------------------------------------------------------------------------------------------
# The file format
# ----------------------------------------------------------------------------------------------


def test_round_trip_keeps_structure_values_dtypes_and_meta(tmp_path):
    path = tmp_path / "sub" / "c.npz"  # the directory is created
    meta = {"done": 3, "history": {"loss": [1.5, float("nan"), 0.25]}, "name": "é"}
    save_checkpoint(path, _tree(), meta)
    tree, meta_back = load_checkpoint(path, _tree())
    assert jax.tree.structure(tree) == jax.tree.structure(_tree())
    for got, want in zip(jax.tree.leaves(tree), jax.tree.leaves(_tree())):
        assert np.asarray(got).dtype == np.asarray(want).dtype
        assert np.array_equal(got, want)
    assert meta_back["done"] == 3 and meta_back["name"] == "é"
    assert meta_back["history"]["loss"][0] == 1.5 and math.isnan(meta_back["history"]["loss"][1])
    assert _tmp_files(path.parent) == []


def test_overwrite_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "c.npz"
    save_checkpoint(path, _tree(), {"done": 1})
    save_checkpoint(path, _tree(), {"done": 2})
    assert load_checkpoint(path, _tree())[1] == {"done": 2}
    assert os.listdir(tmp_path) == ["c.npz"]


def test_a_failed_write_keeps_the_previous_file_and_cleans_up(tmp_path):
    path = tmp_path / "c.bin"
    atomic_write_bytes(path, lambda f: f.write(b"old"))

    def broken(f):
        f.write(b"half of the new conte")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, broken)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["c.bin"]


def _flip_byte(data: bytes, pos: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]


@pytest.mark.parametrize("damage", ["half", "empty", "garbage", "flipped-byte"])
def test_truncated_or_corrupt_file_raises_checkpoint_error(tmp_path, damage):
    path = tmp_path / "c.npz"
    save_checkpoint(path, _tree(), {"done": 1})
    data = path.read_bytes()
    damaged = {
        "half": data[: len(data) // 2],
        "empty": b"",
        "garbage": b"not a checkpoint" * 10,
        "flipped-byte": _flip_byte(data, data.index(b"\x00\x00\x80?")),  # inside leaf "w" (1.0f): bad CRC
    }[damage]
    path.write_bytes(damaged)
    with pytest.raises(CheckpointError, match="unreadable or truncated") as info:
        load_checkpoint(path, _tree())
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "template, message",
    [
        ({"w": np.zeros((3, 4), np.float32)}, r"holds 5 leaves, expected 1"),  # fewer leaves
        ({**_tree(), "extra": np.zeros(2)}, r"holds 5 leaves, expected 6"),  # more leaves
        ({**_tree(), "w": np.zeros((4, 3), np.float32)}, r"shape \(3, 4\).*expected shape \(4, 3\)"),
        ({**_tree(), "w": np.zeros((3, 4), np.float64)}, r"dtype float32.*expected .*float64"),
    ],
    ids=["fewer-leaves", "more-leaves", "shape", "dtype"],
)
def test_template_of_another_structure_is_refused(tmp_path, template, message):
    path = tmp_path / "c.npz"
    save_checkpoint(path, _tree(), {})
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path, template)


def test_missing_file_raises_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(tmp_path / "nope.npz", _tree())


# ----------------------------------------------------------------------------------------------
# Checkpoints in training
# ----------------------------------------------------------------------------------------------


def _problem(n=8, seed=1):
    x = jax.random.normal(jax.random.PRNGKey(seed), (n, 3))
    return x, x @ jnp.array([[1.0], [-2.0], [0.5]])


class Recorder:
    """``apply_fn(params, x) = x @ w`` that counts its calls (traces included)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, params, x):
        self.calls += 1
        return x @ params["w"]


PARAMS = {"w": jnp.zeros((3, 1))}
BASE = dict(K=2, steps=4, optimizer=optax.sgd(0.1), loss="mse", eval_every=2, config={"lr": 0.1})


def _train(path, apply_fn=None, data=None, **overrides):
    kwargs = {**BASE, **overrides}
    return train(apply_fn or Recorder(), PARAMS, data or _problem(), checkpoint=path, **kwargs)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(checkpoint bytes, params, history) of one finished ``_train`` run (trained once per module)."""
    path = tmp_path_factory.mktemp("finished") / "run.npz"
    params, history = _train(path)
    return path.read_bytes(), params, history


def test_truncated_checkpoint_stops_training_and_says_delete_it(tmp_path, finished):
    path = tmp_path / "run.npz"
    data = finished[0]
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as info:
        _train(path)
    message = str(info.value)
    assert str(path) in message and "truncated" in message and "Delete it" in message
    assert path.read_bytes() == data[: len(data) // 2], "the file is left for the user to inspect"


@pytest.mark.parametrize(
    "change",
    [
        {"K": 3},
        {"K": math.inf},
        {"steps": 6},
        {"eval_every": 1},
        {"batch_size": 4},
        {"loss": "ce", "data": (_problem()[0], jnp.zeros(8, jnp.int32))},
        {"key": jax.random.PRNGKey(1)},
        {"config": {"lr": 0.2}},
        {"data": _problem(n=6)},
    ],
    ids=["K", "K-inf", "steps", "eval_every", "batch_size", "loss", "key", "config", "n_train"],
)
def test_checkpoint_of_another_configuration_is_refused(tmp_path, change, finished):
    path = tmp_path / "run.npz"
    path.write_bytes(finished[0])
    before = finished[0]
    recorder = Recorder()
    with pytest.raises(CheckpointError, match="different run configuration") as info:
        _train(path, apply_fn=recorder, **change)
    assert "delete it" in str(info.value) and str(path) in str(info.value)
    assert path.read_bytes() == before, "a refused checkpoint is not overwritten"
    assert recorder.calls == 0, "refused before any compute"


def test_the_checkpoint_stores_the_runs_identity_and_a_refusal_names_only_what_changed(tmp_path, finished):
    path = tmp_path / "run.npz"
    path.write_bytes(finished[0])
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
    identity = RunIdentity.of(**meta["run"])
    assert list(meta["run"]) == list(RunIdentity._fields) and identity._asdict() == meta["run"]
    assert identity.steps == 4 and identity.points == [0, 2, 4] and identity.config == {"lr": 0.1}
    assert identity.mismatches(meta["run"]) == []
    changed = identity._replace(steps=6).mismatches(meta["run"])
    assert changed == ["steps: saved 4, now 6"]
    with pytest.raises(CheckpointError) as info:
        _train(path, config={"lr": 0.2})
    assert 'config: saved {"lr": 0.1}, now {"lr": 0.2}' in str(info.value) and "steps:" not in str(info.value)


def test_checkpoint_of_other_data_or_initial_parameters_is_refused(tmp_path, finished):
    # fit's docstring: "a rerun with a different config or data is refused rather than silently mixed".
    path = tmp_path / "run.npz"
    path.write_bytes(finished[0])
    x, y = _problem()
    with pytest.raises(CheckpointError, match="different run configuration"):
        _train(path, data=(x, 2 * y))
    with pytest.raises(CheckpointError, match="different run configuration"):
        train(Recorder(), {"w": jnp.ones((3, 1))}, (x, y), checkpoint=path, **BASE)
    assert path.read_bytes() == finished[0]


def test_sweep_refuses_another_sweeps_or_a_single_runs_checkpoint(tmp_path, finished):
    path = tmp_path / "sweep.npz"
    x, y = _problem()
    stacked = tree_stack([PARAMS, PARAMS])
    kw = dict(steps=4, optimizer=optax.sgd(0.1), loss="mse", eval_every=2, checkpoint=path)
    train_sweep(Recorder(), stacked, (x, y), K=[1, 3], **kw)
    with pytest.raises(CheckpointError, match="different run configuration"):
        train_sweep(Recorder(), stacked, (x, y), K=[1, 4], **kw)
    single = tmp_path / "single.npz"
    single.write_bytes(finished[0])
    with pytest.raises(CheckpointError, match="Delete it"):  # a single run's state does not fit a sweep
        train_sweep(Recorder(), stacked, (x, y), K=[2, 2], **{**kw, "checkpoint": single})


def test_rerun_of_a_finished_run_returns_it_without_compute(tmp_path, finished):
    path = tmp_path / "run.npz"
    path.write_bytes(finished[0])
    _, params, history = finished
    recorder, calls = Recorder(), []
    params2, history2 = _train(path, apply_fn=recorder, callback=lambda t, s: calls.append(t))
    assert recorder.calls == 0 and calls == []
    assert np.array_equal(params2["w"], params["w"])
    assert sorted(history2) == sorted(history)
    for k in history:
        assert np.array_equal(history2[k], history[k]), k


@pytest.mark.parametrize(
    "config",
    [{"widths": (8, 8)}, {"dropout": float("nan")}, {"lr": np.float32(0.5), "n": np.int64(3)}],
    ids=["tuple", "nan", "numpy-scalars"],
)
def test_config_values_that_json_changes_still_resume(tmp_path, config):
    # The configuration goes through JSON in the checkpoint (tuples become lists, nan != nan,
    # NumPy scalars): a rerun with the very same config must resume, not be refused or crash.
    path = tmp_path / "run.npz"
    params, history = _train(path, config=config)
    params2, history2 = _train(path, config=config)
    assert np.array_equal(params2["w"], params["w"])
    assert np.array_equal(history2["step"], history["step"])


def test_config_that_cannot_be_saved_is_refused_before_any_compute(tmp_path):
    recorder = Recorder()
    with pytest.raises((TypeError, ValueError), match="config"):
        _train(tmp_path / "run.npz", apply_fn=recorder, config={"schedule": object()})
    assert recorder.calls == 0
    assert not (tmp_path / "run.npz").exists()


# ----------------------------------------------------------------------------------------------
# The whole state is saved: a Gauss–Newton run's damping (GaussNewtonState.h), an Adam-solved run's
# criterion) survives an interruption
# ----------------------------------------------------------------------------------------------


class _Interrupt(Exception):
    pass


def _interrupt_at(step):
    def callback(t, state):
        if t == step:  # before the checkpoint of this evaluation point is written
            raise _Interrupt
        return {}

    return callback


def _tanh_model(params, x):
    return jnp.tanh(x @ params["w"]) @ params["v"]


def _tanh_params(seed):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {"w": 0.5 * jax.random.normal(k1, (3, 5)), "v": 0.5 * jax.random.normal(k2, (5, 1))}


def test_interrupted_gauss_newton_sweep_resumes_with_its_damping(tmp_path):
    from iterlin.solvers.gauss_newton import gauss_newton_train, init_gauss_newton_state

    x, y = _problem()
    params = tree_stack([_tanh_params(0), _tanh_params(1)])
    kw = dict(steps=6, eval_every=2, step_size=0.7)
    ref, ref_hist = gauss_newton_train(_tanh_model, params, (x, y), damping=[0.1, 3.0], **kw)
    path = tmp_path / "gn.npz"
    with pytest.raises(_Interrupt):
        gauss_newton_train(_tanh_model, params, (x, y), damping=[0.1, 3.0], checkpoint=path,
                           callback=_interrupt_at(4), **kw)
    template = init_gauss_newton_state(params, [0.1, 3.0], stacked=True)
    (state, _), meta = load_checkpoint(path, (template, ()))
    assert meta["done"] == 2 and np.asarray(state.h).tolist() == pytest.approx([0.1, 3.0])
    got, hist = gauss_newton_train(_tanh_model, params, (x, y), damping=[0.1, 3.0], checkpoint=path, **kw)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(a, b)
    for k in ref_hist:
        np.testing.assert_array_equal(hist[k], ref_hist[k], err_msg=k)
    with pytest.raises(CheckpointError, match="different run configuration"):  # another damping
        gauss_newton_train(_tanh_model, params, (x, y), damping=[0.1, 2.0], checkpoint=path, **kw)
    with pytest.raises(CheckpointError, match="different run configuration"):  # another step size
        gauss_newton_train(_tanh_model, params, (x, y), damping=[0.1, 3.0], checkpoint=path,
                           **{**kw, "step_size": 0.5})


def test_interrupted_adam_solved_run_resumes_with_its_criterion_state(tmp_path):
    from iterlin.solvers.adam_solve import train_adam_solved

    x, _ = _problem(n=16)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(jnp.int32)
    params = {"w": 0.3 * jax.random.normal(jax.random.PRNGKey(2), (3, 2))}
    apply_fn = lambda p, x: x @ p["w"]  # noqa: E731
    kw = dict(lr=0.05, steps=12, K=4, target_acc=None, check_every=2, plateau_tol=0.0, batch_size=8, eval_every=3)
    ref, ref_hist = train_adam_solved(apply_fn, params, (x, y), **kw)
    path = tmp_path / "adam.npz"
    with pytest.raises(_Interrupt):
        train_adam_solved(apply_fn, params, (x, y), checkpoint=path, callback=_interrupt_at(9), **kw)
    got, hist = train_adam_solved(apply_fn, params, (x, y), checkpoint=path, **kw)
    np.testing.assert_array_equal(got["w"], ref["w"])
    assert sorted(hist) == sorted(ref_hist)
    for k in ref_hist:
        np.testing.assert_array_equal(hist[k], ref_hist[k], err_msg=k)
    assert list(hist["relin_step"]) == [4, 8, 12]  # the log lives in the policy and was resumed


# ----------------------------------------------------------------------------------------------
# The progress counter must agree with the checkpoint's contents (issue 10, item 7)
# ----------------------------------------------------------------------------------------------


def _edit_meta(path, edit):
    """Rewrite checkpoint ``path`` with ``edit(meta)`` applied to its JSON (the leaves kept)."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays.pop("meta")))
    edit(meta)
    np.savez(path, **arrays, meta=np.asarray(json.dumps(meta)))


def _killed(path, steps=6, at=4):
    """A run of ``steps`` steps (points every 2) interrupted at step ``at``: its checkpoint at ``path``."""
    with pytest.raises(_Interrupt):
        _train(path, steps=steps, callback=_interrupt_at(at))
    (_, _), meta = load_checkpoint(path, _template())
    return meta


def _template():
    from iterlin.training import init_state

    return (init_state(PARAMS, BASE["optimizer"], BASE["K"]), ())


def _set(key, value):
    def edit(meta):
        meta[key] = value

    return edit


def _history_rows(n):
    def edit(meta):
        meta["history"] = {k: (v + v)[:n] for k, v in meta["history"].items()}
        meta["history"]["step"] = [0, 2, 4, 6][:n]

    return edit


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (_set("done", 4), "done=4 evaluation points, but the history has other row counts"),  # "finished"
        (_set("done", 1), "done=1 evaluation points"),
        (_set("done", 0), "done=0 must be an integer in 1..4"),
        (_set("done", 9), "done=9 must be an integer in 1..4"),
        (_set("done", "2"), "done='2' must be"),
        (_set("done", None), "done=None must be"),
        (_history_rows(4), "done=2 evaluation points, but the history has other row counts"),
        ([_history_rows(4), _set("done", 4)], "done=4 means the state is at step 6, but its step counter is 2"),
        (lambda m: m["history"].update(step=[0, 3]), "the recorded steps [0, 3] are not the evaluation points [0, 2]"),
        (_set("history", []), "its history is list"),
    ],
    ids=["finished", "fewer", "zero", "beyond", "str", "none", "rows", "step-counter", "steps", "history-type"],
)
def test_a_checkpoint_whose_progress_disagrees_with_its_contents_is_refused(tmp_path, edit, fragment):
    path = tmp_path / "run.npz"
    meta = _killed(path)
    assert meta["done"] == 2 and meta["history"]["step"] == [0, 2]
    for e in edit if isinstance(edit, list) else [edit]:
        _edit_meta(path, e)
    recorder = Recorder()
    with pytest.raises(CheckpointError) as info:
        _train(path, apply_fn=recorder, steps=6)
    msg = str(info.value)
    assert f"checkpoint {path} is inconsistent" in msg and fragment in msg and "Delete it" in msg, msg
    assert recorder.calls == 0, "refused before any compute"


def test_an_edited_counter_is_not_returned_as_a_truncated_final_history(tmp_path):
    # The issue: done set to "finished" after a kill gave steps [0, 2] of 6 as the final result.
    # Through the result cache, the refused checkpoint is deleted and the run restarted from scratch.
    from iterlin.repro.cache import CacheWarning, cached

    ref_params, ref = _train(None, steps=6)
    cache_dir = tmp_path / "cache"

    def compute(ckpt):
        params, history = _train(ckpt / "run.npz", steps=6)
        return {"params": params["w"], "history": history}

    first = []

    def killed(ckpt):
        first.append(ckpt)
        _killed(ckpt / "run.npz")
        _edit_meta(ckpt / "run.npz", _set("done", 4))
        return compute(ckpt)

    with pytest.warns(CacheWarning, match="inconsistent.*recomputing from scratch"):
        out = cached("toy", lambda ckpt: killed(ckpt) if not first else compute(ckpt), {"run": 1},
                     data_fingerprint="d", cache_dir=cache_dir, verbose=False)
    assert out["history"]["step"].tolist() == [0, 2, 4, 6]
    np.testing.assert_array_equal(out["params"], ref_params["w"])
    for k in ref:
        np.testing.assert_array_equal(out["history"][k], ref[k], err_msg=k)


def test_a_consistent_checkpoint_still_resumes(tmp_path):
    path = tmp_path / "run.npz"
    _killed(path)
    _, ref = _train(None, steps=6)
    _, got = _train(path, steps=6)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


# ----------------------------------------------------------------------------------------------
# The progress bar of a resumed run (issue 10, smaller defects)
# ----------------------------------------------------------------------------------------------


class _Bar:
    bars: list = []

    def __init__(self, total, initial=0, **kwargs):
        self.total, self.initial, self.n = total, initial, initial
        _Bar.bars.append(self)

    def update(self, k):
        self.n += k

    def close(self):
        pass


@pytest.mark.parametrize("at", [4, 6], ids=["after-2", "after-4"])
def test_the_progress_bar_of_a_resumed_run_starts_where_it_stopped_and_ends_at_the_total(tmp_path, monkeypatch, at):
    import iterlin.progress

    path = tmp_path / "run.npz"
    _killed(path, at=at)  # the checkpoint holds the points before ``at``
    monkeypatch.setattr(iterlin.progress, "progress_bar", _Bar)
    _Bar.bars = []
    _train(path, steps=6, progress=True)
    (bar,) = _Bar.bars
    assert (bar.initial, bar.n, bar.total) == (at - 2, 6, 6)
    _Bar.bars = []
    _train(path, steps=6, progress=True)  # a finished run: full bar, nothing to do
    assert [(b.initial, b.n, b.total) for b in _Bar.bars] == [(6, 6, 6)]


# ----------------------------------------------------------------------------------------------
# File modes (issue 10, smaller defects): as a plainly created file, not mkstemp's 0600
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_checkpoints_and_atomic_writes_respect_the_umask(tmp_path, umask, mode):
    from iterlin.checkpoint import new_file_mode

    old = os.umask(umask)
    try:
        assert new_file_mode() == mode
        save_checkpoint(tmp_path / "c.npz", _tree(), {"done": 1})
        atomic_write_bytes(tmp_path / "b.bin", lambda f: f.write(b"x"))
        with open(tmp_path / "plain", "wb"):
            pass
    finally:
        os.umask(old)
    for name in ("c.npz", "b.bin", "plain"):
        assert (tmp_path / name).stat().st_mode & 0o777 == mode, name


def _forged_npz(path, header, data=b"\0" * 8, compress=True):
    """An .npz with one member ``leaf_0.npy``: ``header`` (an .npy header dict) then ``data``."""
    import io
    import zipfile

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        zf.writestr("leaf_0.npy", buf.getvalue() + data)
        zf.writestr("meta.npy", b"")


@pytest.mark.parametrize("header, compress, message", [
    ({"descr": "<f8", "fortran_order": False, "shape": (2**40,)}, True, "claims shape \\(1099511627776,\\)"),
    ({"descr": "<f8", "fortran_order": False, "shape": (2**40,)}, False, "claims shape"),
    ({"descr": "|O", "fortran_order": False, "shape": (1,)}, True, "is an object array"),
])
def test_a_forged_array_header_is_refused_before_allocating(tmp_path, header, compress, message):
    """A header claiming 8 TiB (the data is 8 bytes) is a CheckpointError, not a MemoryError."""
    path = tmp_path / "ckpt.npz"
    _forged_npz(path, header, compress=compress)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path, {"w": np.zeros(1)})


def test_a_member_claiming_more_bytes_than_the_archive_holds_is_refused(tmp_path):
    path = tmp_path / "ckpt.npz"
    save_checkpoint(path, {"w": np.zeros(3)}, {})
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")  # the first member's central directory entry
    data[at + 24:at + 28] = (2**32 - 2).to_bytes(4, "little")  # its uncompressed size: 4 GiB
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="claims 4294967294 bytes from"):
        load_checkpoint(path, {"w": np.zeros(3)})


def test_an_atomic_write_through_a_symlink_and_dotdot_lands_where_the_system_says(tmp_path):
    """``<tmp>/link/../d/f`` is ``<target's parent>/d/f`` to the system; tempfile.mkstemp reads its
    folder lexically (``<tmp>/d``, absent here): the temporary file must not go there."""
    from iterlin.checkpoint import atomic_write_bytes

    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "inner")
    atomic_write_bytes(str(tmp_path / "link") + "/../d/f", lambda f: f.write(b"x"))
    assert (tmp_path / "real" / "d" / "f").read_bytes() == b"x"
    assert not (tmp_path / "d").exists() and list((tmp_path / "real" / "d").iterdir()) == [
        tmp_path / "real" / "d" / "f"]
