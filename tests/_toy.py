"""Tiny models and data shared by the library tests (not the paper's models: those are in iterlin.models),
and the fakes shared by the experiment-layer tests (sweep histories, a recording sweep, CIFAR-shaped data)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from iterlin.experiments._common import Sweep


class TinyMLP(nn.Module):
    width: int = 16
    out: int = 3

    @nn.compact
    def __call__(self, x):
        x = jnp.tanh(nn.Dense(self.width)(x))
        x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(self.out)(x)


def tiny_problem(seed=0, n=24, d=5, out=3, width=16, classification=True):
    """(apply_fn, params, x, y) for a small MLP; dtypes follow jax_enable_x64."""
    model = TinyMLP(width=width, out=out)
    kx, ky, kp = jax.random.split(jax.random.PRNGKey(seed), 3)
    x = jax.random.normal(kx, (n, d))
    if classification:
        y = jax.random.randint(ky, (n,), 0, out)
    else:
        y = jax.random.normal(ky, (n, out))
    params = _default_float(model.init(kp, x)["params"])
    return (lambda p, x: model.apply({"params": p}, x)), params, x, y


class UserConvNet(nn.Module):
    """A user's own small Flax network (not make_model's): a strided SAME convolution, ReLU, a 2×2
    max-pool (``lax.conv_general_dilated`` and ``lax.reduce_window``), a dense layer of ``out``."""

    out: int = 4

    @nn.compact
    def __call__(self, x):
        h = nn.max_pool(nn.relu(nn.Conv(3, (3, 3), strides=(2, 1), padding="SAME")(x)), (2, 2), strides=(2, 2))
        return nn.Dense(self.out)(h.reshape(h.shape[0], -1))


def tiny_conv_problem(n=16, out=4):
    """(apply_fn, float64 params, x (n, 8, 6, 2), integer labels (n,)) of :class:`UserConvNet`."""
    net = UserConvNet(out)
    params = jax.tree.map(lambda a: a.astype(jnp.float64), net.init(jax.random.PRNGKey(0), jnp.ones((1, 8, 6, 2))))
    x = jax.random.normal(jax.random.PRNGKey(1), (n, 8, 6, 2), jnp.float64)
    return net.apply, params, x, jnp.arange(n) % out


def init_params(seed, d=5, out=3, width=16):
    model = TinyMLP(width=width, out=out)
    return _default_float(model.init(jax.random.PRNGKey(seed), jnp.zeros((1, d)))["params"])


def _default_float(params):
    """Flax initialises float32 even under x64: cast to the default float (float64 when enabled)."""
    return jax.tree.map(lambda a: a.astype(jnp.result_type(float)), params)


# ------------------------------------------------------------------------------------------------
# Experiment-layer helpers (tests/experiments/, tests/test_claims.py): fake sweep histories, a
# fake sweep that records its calls, tiny CIFAR-shaped datasets, a small stand-in for the CNN.
# ------------------------------------------------------------------------------------------------

def fake_history(K, lr, steps, acc_final, *, diverged=None, diverged_step=3, n_evals=2, train_acc=None):
    """A sweep history (:func:`iterlin.experiments._common.sweep`'s layout) with made-up numbers.

    R = len(K) runs, E = n_evals + 1 points; test accuracy rises linearly to ``acc_final[i]``;
    ``train_acc`` (R,) final train accuracies (default min(2 · test, 1)); ``n_relin`` = steps // K.
    """
    R, E = len(K), n_evals + 1
    acc = np.linspace(0.1, 1.0, E)[None, :] * np.asarray(acc_final, np.float64)[:, None]
    if train_acc is None:
        train = np.minimum(2 * acc, 1.0)
    else:
        train = np.linspace(0.1, 1.0, E)[None, :] * np.asarray(train_acc, np.float64)[:, None]
    div = np.zeros(R, bool) if diverged is None else np.asarray(diverged, bool)
    return {
        "step": np.linspace(0, steps, E).astype(int),
        "K": np.asarray([float(k) for k in K]),
        "lr": np.asarray(list(lr) if isinstance(lr, (list, tuple)) else [lr] * R, np.float64),
        "n_relin": np.stack([np.linspace(0, 0 if math.isinf(k) else steps // k, E).astype(int) for k in K]),
        "net_test_acc": acc, "lin_test_acc": acc, "net_train_acc": train,
        "diverged": div, "diverged_step": np.where(div, diverged_step, -1), "seed_index": np.zeros(R, int),
    }


def with_losses(columns: dict) -> dict:
    """``columns`` with a loss 1 − accuracy beside every ``<model>_<split>_acc`` that has none."""
    return {**{k.replace("_acc", "_loss"): 1.0 - v for k, v in columns.items() if k.endswith("_acc")}, **columns}


def fake_sweep(*args, **kwargs) -> Sweep:
    """:func:`fake_history` (the same arguments) as a :class:`~iterlin.experiments._common.Sweep`,
    with losses 1 − accuracy (:func:`with_losses`)."""
    return Sweep.from_columns(with_losses(fake_history(*args, **kwargs)))


class FakeSweep:
    """Stands in for ``iterlin.experiments._common.sweep``: records each call, returns a fake sweep
    (:func:`fake_sweep`).

    ``acc``: the final test accuracies returned (one per run), or a callable ``acc(call) -> list``
    of the recorded call (a dict of the arguments, ``n`` the number of training images).
    """

    def __init__(self, acc=None, train_acc=None):
        self.calls, self.acc, self.train_acc = [], acc, train_acc

    def __call__(self, apply_fn, params, data, *, K, lr, steps, batch_size=None, eval_steps, **kw):
        call = dict(K=list(K), lr=lr, steps=steps, batch_size=batch_size, n=data[0].shape[0],
                    eval_steps=list(eval_steps), **kw)
        self.calls.append(call)
        acc = self.acc(call) if callable(self.acc) else (self.acc if self.acc is not None else [0.30] * len(K))
        train = self.train_acc(call) if callable(self.train_acc) else self.train_acc
        return fake_sweep(K, lr, steps, acc, train_acc=train, n_evals=len(eval_steps) - 1)


def fake_cifar(n, n_test=8, seed=None):
    """A CIFAR-shaped :class:`iterlin.data.Dataset` of random numbers (n train, n_test test images)."""
    from iterlin.data import Dataset

    rng = np.random.default_rng(n if seed is None else seed)
    return Dataset(rng.normal(size=(n, 32, 32, 3)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32),
                   rng.normal(size=(n_test, 32, 32, 3)).astype(np.float32),
                   rng.integers(0, 10, n_test).astype(np.int32))


def flat_mlp(key):
    """A small MLP on flattened 32×32×3 images with 10 logits: a fast stand-in for the CNN / ResNet
    (same inputs and outputs), so that tests of an experiment's wiring compile in seconds."""
    from iterlin.models import Model, make_model

    mlp = make_model("mlp", key, input_shape=(32 * 32 * 3,), num_classes=10)
    return Model(lambda p, x: mlp.apply_fn(p, x.reshape(x.shape[0], -1)), mlp.params, None)


def null_model(*args, **kwargs):
    """A model that is never trained (for tests where the sweep itself is faked): no compilation."""
    from iterlin.models import Model

    return Model(lambda p, x: x, {"w": np.zeros(1, np.float32)}, None)


def ceflow_results(config, acc, *, m: int = 2000, train: float = 1.0):
    """:class:`iterlin.experiments.ceflow.Results` constructed for ``config``'s runs (ceflow's or
    ceflow_confirm's): run ``s`` has its network (its linear model) right on the first ``acc(s)[0]·m``
    (``acc(s)[1]·m``) held-out images, shifted by one image per seed after the first; every network
    at ``train`` train accuracy."""
    from iterlin.experiments import ceflow

    specs = ceflow.run_specs(config)
    net = np.zeros((len(specs), m), bool)
    lin = np.zeros((len(specs), m), bool)
    for i, s in enumerate(specs):
        a_net, a_lin = acc(s)
        net[i, : int(a_net * m) + s.seed - config.seed] = True
        lin[i, : int(a_lin * m) + s.seed - config.seed] = True
    col = lambda f, dt=np.float64: np.asarray([f(s) for s in specs], dt)  # noqa: E731
    runs = ceflow.Runs(
        R=col(lambda s: s.R, np.int64), total_time=col(lambda s: s.total_time), tau=col(lambda s: s.tau),
        n_train=col(lambda s: s.n_train, np.int64), seed=col(lambda s: s.seed, np.int64), net_correct=net,
        lin_correct=lin, net_heldout_acc=net.mean(1), lin_heldout_acc=lin.mean(1), net_test_acc=net.mean(1),
        lin_test_acc=lin.mean(1), net_train_acc=np.full(len(specs), train), lin_train_acc=np.ones(len(specs)),
        train_loss=np.zeros(len(specs)), ode_steps=np.ones(len(specs), np.int64), seconds=np.zeros(len(specs)))
    z = np.asarray(0.0)
    check = ceflow.Check(n_check=np.asarray(8), time=z + 0.5, relins=np.asarray(20), gd_steps=np.asarray(20),
                         lr=z + 0.025, gd_vs_flow=z + 0.1, gd_vs_one_flow=z + 0.8, agree=z + 1, agree_one=z + 0.9)
    return ceflow.Results(runs, check, np.asarray(m), np.arange(m), np.zeros(0, int), config=config)
