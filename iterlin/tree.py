"""Small pytree algebra used across iterlin (parameters are arbitrary pytrees)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "tree_add",
    "tree_sub",
    "tree_scale",
    "tree_where",
    "tree_all_finite",
    "tree_size",
    "tree_stack",
    "tree_index",
    "tree_allclose",
]


def tree_add(a, b):
    return jax.tree.map(jnp.add, a, b)


def tree_sub(a, b):
    return jax.tree.map(jnp.subtract, a, b)


def tree_scale(s, a):
    return jax.tree.map(lambda x: s * x, a)


def tree_where(cond, a, b):
    """Leafwise ``jnp.where(cond, a, b)`` for a scalar condition."""
    return jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)


def tree_all_finite(a):
    """A scalar bool: every entry of every leaf is finite (no NaN, no ±inf)."""
    leaves = jax.tree.leaves(a)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves])) if leaves else jnp.asarray(True)


def tree_size(a) -> int:
    """Total number of scalars P in a pytree (from the leaves' shapes: arrays, tracers, ShapeDtypeStructs)."""
    return int(sum(int(np.prod(np.shape(x), dtype=np.int64)) for x in jax.tree.leaves(a)))


def tree_stack(trees):
    """Stack a list of identically structured pytrees along a new leading (run) axis."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def tree_index(tree, i):
    """Run ``i`` of a stacked pytree (inverse of :func:`tree_stack`)."""
    return jax.tree.map(lambda x: x[i], tree)


def tree_allclose(a: Any, b: Any, rtol: float = 1e-6, atol: float = 1e-6) -> bool:
    """True when both pytrees have the same structure and every leaf is allclose."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    if ta != tb:
        return False
    return all(
        np.shape(x) == np.shape(y) and np.allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)
        for x, y in zip(la, lb)
    )
