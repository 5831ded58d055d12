"""Tiny models and data shared by the library tests (not the paper's models: those are in iterlin.models)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn


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


def init_params(seed, d=5, out=3, width=16):
    model = TinyMLP(width=width, out=out)
    return _default_float(model.init(jax.random.PRNGKey(seed), jnp.zeros((1, d)))["params"])


def _default_float(params):
    """Flax initialises float32 even under x64: cast to the default float (float64 when enabled)."""
    return jax.tree.map(lambda a: a.astype(jnp.result_type(float)), params)
