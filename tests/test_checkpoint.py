"""Checkpoints: atomic writes, round trips, corrupt or foreign files refused with a clear message.

The kill/resume behaviour of a real training run is in ``tests/test_resume.py``; here are the file
format (:mod:`iterlin.checkpoint`) and how :func:`iterlin.training.train` treats a checkpoint that is
truncated, written by a different configuration, or by a run that already finished.
"""

from __future__ import annotations

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
