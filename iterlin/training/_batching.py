"""Batches drawn on device as a pure function of (key, t), and data in chunks.

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from ..augment import flip_and_crop
from ..validate import check_int, check_xy

__all__ = ["make_batch_fn", "batch_of", "Chunks", "chunked", "split_chunks"]


def make_batch_fn(x, y, batch_size: int | None, key, augment: bool = False) -> Callable:
    """Return ``batch_fn(t) -> (x_t, y_t)``, a pure function of the step index t.

    Mini-batches walk a fresh permutation each epoch, ``permutation(fold_in(key, epoch))``, dropping
    the last incomplete batch; ``batch_size=None`` is the full batch. ``augment`` applies a random
    flip and 4-pixel-padded crop keyed by ``fold_in(key, t)``.
    """
    data_key, aug_key = jax.random.split(key)

    def batch_fn(t):
        return _draw_batch(x, y, data_key, aug_key, t, batch_size, augment)

    return batch_fn


def _draw_batch(x, y, data_key, aug_key, t, batch_size: int | None, augment: bool):
    """Step t's batch of (x, y) (:func:`make_batch_fn`): pure in the arrays and keys, static in the rest."""
    n = x.shape[0]
    full = batch_size is None or batch_size == n
    steps_per_epoch = 1 if full else n // batch_size
    if full:
        xb, yb = x, y
    else:
        epoch, pos = t // steps_per_epoch, t % steps_per_epoch
        perm = jax.random.permutation(jax.random.fold_in(data_key, epoch), n)
        idx = jax.lax.dynamic_slice(perm, (pos * batch_size,), (batch_size,))
        xb, yb = x[idx], y[idx]
    if augment:
        xb = flip_and_crop(jax.random.fold_in(aug_key, t), xb)
    return xb, yb


def batch_of(data, key, t, batch_size: int | None, augment: bool):
    """Step t's batch of ``data = (x, y)`` drawn with ``key``: ``make_batch_fn(x, y, batch_size, key,
    augment)(t)``, with the data and the key as arguments (what :func:`fit`'s programs draw)."""
    data_key, aug_key = jax.random.split(key)
    return _draw_batch(*data, data_key, aug_key, t, batch_size, augment)


@functools.partial(jax.tree_util.register_dataclass, data_fields=("x", "y"), meta_fields=("n",))
@dataclasses.dataclass(frozen=True, eq=False)
class Chunks:
    """A set of N examples in chunks: ``x`` (C, B, ...), ``y`` (C, B, ...), zero-padded to C·B ≥ N.

    A pytree whose arrays are ``x`` and ``y`` and whose static part is N, so a compiled program
    takes the chunks as an argument while the weights (1 for the N examples, 0 for the padding)
    depend on shapes only and are a constant of the program.
    """

    x: Any
    y: Any
    n: int

    @property
    def weights(self):
        """(C, B): 1 for the N examples, 0 for the padding."""
        nc, bs = self.x.shape[:2]
        return jnp.concatenate([jnp.ones(self.n), jnp.zeros(nc * bs - self.n)]).reshape(nc, bs)


def chunked(x, y, batch_size) -> Chunks:
    """Pad (x, y) to a multiple of batch_size and reshape to (chunks, batch_size, ...) (:class:`Chunks`).

    No copy of the data is made when the chunks tile it exactly.
    """
    n = x.shape[0]
    bs = min(batch_size, n)
    nc = -(-n // bs)
    pad = nc * bs - n
    if pad:
        x = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)])
        y = jnp.concatenate([y, jnp.zeros((pad,) + y.shape[1:], y.dtype)])
    return Chunks(x.reshape((nc, bs) + x.shape[1:]), y.reshape((nc, bs) + y.shape[1:]), int(n))


def split_chunks(x, y, batch_size) -> Chunks:
    """``chunked(x, y, batch_size)``, the arguments checked (an evaluation split, made once)."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    check_xy(x, y)
    batch_size = check_int(batch_size, "eval_batch_size")
    return chunked(x, y, batch_size)
