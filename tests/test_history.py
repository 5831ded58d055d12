"""iterlin.training.History: the typed record of a run, and the flat columns a result file stores.

The typed fields and the mapping are two views of one record: each column is the field's array
(the same object), for a run, a sweep, both losses, with and without held-out data, a policy's log
and a callback's values; a history read back from a finished run's checkpoint equals the computed one
(interrupted runs: tests/test_resume.py).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import optax
import pytest
from _toy import tiny_problem

from iterlin import relin
from iterlin.training import History, Metrics, train, train_sweep
from iterlin.tree import tree_stack


def _columns_are_fields(h: History) -> None:
    """Every flat column is the typed field it names, and nothing else is a column."""
    expect = {"step": h.step, "n_relin": h.n_relin, "diverged": h.diverged, "diverged_step": h.diverged_step}
    for model in ("net", "lin"):
        for split in ("train", "test"):
            m = h.metrics(model, split)
            assert m is getattr(h, f"{model}_{split}")
            if m is not None:
                expect.update({f"{model}_{split}_{k}": v for k, v in m._asdict().items() if v is not None})
    if h.relin is not None:
        expect.update({f"relin_{k}": v for k, v in h.relin._asdict().items() if v is not None})
    expect.update(h.extra)
    assert set(h) == set(expect) and len(h) == len(expect)
    for k, v in expect.items():
        assert h[k] is v, k


def test_a_run_with_held_out_data_records_both_models_on_both_splits():
    f, p, x, y = tiny_problem(n=12)
    _, h = train(f, p, (x, y), K=3, steps=6, optimizer=optax.sgd(0.1), eval_data=(x[:5], y[:5]), eval_every=3)
    assert isinstance(h, History)
    assert h.step.tolist() == [0, 3, 6] and h.n_relin.tolist() == [0, 1, 2]
    for m in (h.net_train, h.lin_train, h.net_test, h.lin_test):
        assert isinstance(m, Metrics) and m.rmse is None and m.loss.shape == m.acc.shape == (3,)
    assert h.relin.step.tolist() == [3, 6] and h.relin.gap is None
    assert h.extra == {} and not bool(h.diverged) and int(h.diverged_step) == -1
    # right after a re-linearisation the linear model is the network
    np.testing.assert_allclose(h.lin_train.loss[1:], h.net_train.loss[1:], rtol=1e-6)
    _columns_are_fields(h)


def test_real_targets_give_rmse_and_no_test_split_gives_none():
    f, p, x, y = tiny_problem(n=12, classification=False)
    _, h = train(f, p, (x, y), K=2, steps=4, optimizer=optax.sgd(0.05), loss="mse", eval_every=2)
    assert h.net_test is None and h.lin_test is None
    assert h.net_train.acc is None and h.net_train.rmse.shape == (3,)
    assert "net_train_rmse" in h and "net_train_acc" not in h and "net_test_loss" not in h
    _columns_are_fields(h)


def test_a_sweep_stacks_runs_first_and_keeps_the_policy_log_and_the_callback():
    f, p, x, y = tiny_problem(n=12)

    def callback(t, state):
        return {"theta_s_step": np.full(np.shape(state.n_relin), t)}

    policies = [relin.adaptive(0.0), relin.adaptive(math.inf)]
    _, h = train_sweep(f, tree_stack([p, p]), (x, y), K=policies, steps=4, optimizer=optax.sgd(0.1),
                       eval_every=2, callback=callback)
    assert h.step.shape == (3,) and h.n_relin.shape == (2, 3) and h.net_train.acc.shape == (2, 3)
    assert h.diverged.shape == (2,)
    # adaptive(0) re-linearises after every step, adaptive(∞) never: its log is all padding
    assert h.relin.step.tolist() == [[1, 2, 3, 4], [-1, -1, -1, -1]]
    assert h.relin.gap.shape == (2, 4) and np.isnan(h.relin.gap[1]).all()
    assert h.n_relin[:, -1].tolist() == [4, 0]
    assert h.extra["theta_s_step"].tolist() == [[0, 2, 4], [0, 2, 4]]
    _columns_are_fields(h)


def test_the_history_is_immutable_and_dict_gives_a_table_to_extend():
    f, p, x, y = tiny_problem(n=8)
    _, h = train(f, p, (x, y), K=1, steps=2, optimizer=optax.sgd(0.1), eval_every=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.step = np.zeros(3)
    with pytest.raises(TypeError):
        h["seed"] = np.zeros(1)
    table = dict(h)
    table["seed"] = np.zeros(1)
    assert "seed" not in h and set(table) == set(h) | {"seed"}


def test_a_history_read_back_from_its_checkpoint_is_the_computed_one(tmp_path):
    f, p, x, y = tiny_problem(n=12)
    kw = dict(K=2, optimizer=optax.sgd(0.1), eval_every=2, eval_data=(x[:4], y[:4]))
    _, whole = train(f, p, (x, y), steps=6, **kw)
    ckpt = tmp_path / "run.npz"
    train(f, p, (x, y), steps=6, checkpoint=ckpt, **kw)
    _, again = train(f, p, (x, y), steps=6, checkpoint=ckpt, **kw)  # every point done: read back
    assert set(again) == set(whole)
    for k in whole:
        np.testing.assert_array_equal(np.asarray(again[k]), np.asarray(whole[k]), err_msg=k)
    for name in ("net_train", "lin_test"):
        np.testing.assert_array_equal(getattr(again, name).acc, getattr(whole, name).acc)


def test_the_history_is_a_pytree_of_its_fields():
    f, p, x, y = tiny_problem(n=8)
    _, h = train(f, p, (x, y), K=2, steps=4, optimizer=optax.sgd(0.1), eval_every=2, eval_data=(x, y))
    doubled = jax.tree.map(lambda a: 2 * a, h)
    assert isinstance(doubled, History)
    np.testing.assert_array_equal(doubled.net_test.loss, 2 * h.net_test.loss)
    np.testing.assert_array_equal(doubled["relin_step"], 2 * h.relin.step)
    assert len(jax.tree.leaves(h)) == len(h)  # one leaf per column: nothing hidden, nothing twice


def test_from_columns_reads_a_results_files_columns_back_into_the_same_history():
    """``History.from_columns(dict(h))``: every field again (the log as a RelinLog, the callback's
    values as extras), for a run with a test split and a sweep with a policy's log."""
    f, p, x, y = tiny_problem(n=12)
    _, run = train(f, p, (x, y), K=2, steps=4, optimizer=optax.sgd(0.1), eval_every=2, eval_data=(x[:4], y[:4]))
    _, sweep = train_sweep(f, tree_stack([p, p]), (x, y), K=[relin.adaptive(0.0), relin.adaptive(math.inf)], steps=4,
                           optimizer=optax.sgd(0.1), eval_every=2,
                           callback=lambda t, state: {"theta_s_step": np.full(np.shape(state.n_relin), t)})
    for h in (run, sweep):
        back = History.from_columns(dict(h))
        assert isinstance(back, History) and set(back) == set(h)
        for k in h:
            assert back[k] is h[k], k
        assert back.relin._fields == h.relin._fields and back.relin.step is h.relin.step
        assert back.extra == h.extra and back.net_train.acc is h.net_train.acc
        _columns_are_fields(back)
    assert History.from_columns(dict(sweep)).relin.gap is sweep.relin.gap
    # every column but the callback's is one every history names alike
    assert [k for k in run if not History.is_named_column(k)] == []
    assert [k for k in sweep if not History.is_named_column(k)] == ["theta_s_step"]
    no_log = {k: v for k, v in run.items() if not k.startswith("relin_")}
    assert History.from_columns(no_log).relin is None
