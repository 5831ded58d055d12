"""On-device data augmentation: random horizontal flip and random crop with 4-pixel padding.

Per example, keyed by ``(key, step)`` so that a resumed run sees exactly the same images.
Images are NHWC.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["flip_and_crop"]


def _one(key, img, pad):
    kf, kx, ky = jax.random.split(key, 3)
    img = jnp.where(jax.random.bernoulli(kf), img[:, ::-1, :], img)
    padded = jnp.pad(img, ((pad, pad), (pad, pad), (0, 0)))  # zero padding (after standardisation)
    i = jax.random.randint(kx, (), 0, 2 * pad + 1)
    j = jax.random.randint(ky, (), 0, 2 * pad + 1)
    return jax.lax.dynamic_slice(padded, (i, j, 0), img.shape)


def flip_and_crop(key, x, pad: int = 4):
    """Random horizontal flip, then a random crop of the 2·pad-padded image. x: (N, H, W, C)."""
    keys = jax.random.split(key, x.shape[0])
    return jax.vmap(_one, in_axes=(0, 0, None))(keys, x, pad)
