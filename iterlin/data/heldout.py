"""Every held-out image of a run: the installed CIFAR-10 images it neither trained nor early-stopped on.

A run trains on the subset :func:`~iterlin.data.read_cifar10` takes for its ``n_train`` (official
indices :func:`~iterlin.data.train_index`) and may choose its stopping point on other images
(``early_stop``, official training-batch indices, or ``early_stop_test``, positions in
``test_batch``). Its held-out pool (:class:`HeldOut`) is everything else that is installed, in two
parts reported separately: the official test images (``test_index``, positions in ``test_batch``)
and the training-batch images the run never used (``train_index``, official indices
``10000 f + k`` for image k of ``data_batch_{f+1}``: the same image on the full archive and on a
per-file-prefix copy such as CI's). The pool is fixed per run by these two index arrays, which a run
records; :func:`check_heldout` refuses a pool that holds a training or early-stopping image.

With the 5 × 932 + 932 images of the repository's subset, a 1,000-image run has 932 test images and
3,660 unused training-batch images; with the official archive, 10,000 and 49,000.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from ..validate import check_int
from .cifar10 import TRAIN_FILE_SIZE, Batches, find_cifar10, read_batches, standardise, train_index

__all__ = ["HeldOut", "HeldOutImages", "heldout_pool", "check_heldout", "heldout_images", "load_heldout"]


class HeldOut(NamedTuple):
    """A run's held-out pool, by index: ``test_index`` (int64, positions in ``test_batch``) and
    ``train_index`` (int64, official indices of unused training-batch images), each sorted."""

    test_index: np.ndarray
    train_index: np.ndarray

    @property
    def size(self) -> int:
        """Images in the pool, both parts."""
        return int(self.test_index.size + self.train_index.size)


class HeldOutImages(NamedTuple):
    """The images of a :class:`HeldOut` pool, in its index order: ``x_test``/``y_test`` those of
    ``test_index``, ``x_unused``/``y_unused`` those of ``train_index`` (x ``(n, 32, 32, 3)`` NHWC, uint8
    from :func:`heldout_images`, standardised float32 from :func:`load_heldout`; y int32)."""

    x_test: np.ndarray
    y_test: np.ndarray
    x_unused: np.ndarray
    y_unused: np.ndarray


def _indices(value, name: str, upper: int, what: str) -> np.ndarray:
    """``value`` as sorted unique int64 indices in [0, upper), or a ValueError naming ``name``."""
    a = np.asarray(value).reshape(-1)
    if a.size == 0:
        return np.zeros(0, np.int64)
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} of dtype {a.dtype} is not allowed: {name} must hold integer indices ({what})")
    a = a.astype(np.int64)
    bad = a[(a < 0) | (a >= upper)]
    if bad.size:
        raise ValueError(f"{name} holds {bad[0]}, which is not allowed: {name} must hold indices in [0, {upper}) ({what})")
    u = np.unique(a)
    if u.size != a.size:
        raise ValueError(f"{name} is not allowed with repeated indices: each image is used once ({what})")
    return u


def _installed_train(counts) -> np.ndarray:
    return np.concatenate([TRAIN_FILE_SIZE * f + np.arange(int(c), dtype=np.int64) for f, c in enumerate(counts)])


#: The official training indices lie in [0, _N_INDEX): 5 files of TRAIN_FILE_SIZE.
_N_INDEX = 5 * TRAIN_FILE_SIZE
_TRAIN_WHAT = "official training indices 10000 f + k for image k of data_batch_{f+1}"
_TEST_WHAT = "positions in test_batch"


def _overlap(a: np.ndarray, b: np.ndarray) -> str:
    both = np.intersect1d(a, b)
    return "" if both.size == 0 else f"{both.size} image(s) (e.g. {', '.join(map(str, both[:5]))})"


def check_heldout(pool: HeldOut, *, train, early_stop=(), early_stop_test=()) -> HeldOut:
    """``pool`` if it holds no image of ``train`` or ``early_stop`` (official training indices) or of
    ``early_stop_test`` (positions in ``test_batch``), else a ValueError naming the parameter and
    the images; returns it so that a recorded pool can be checked where it is read."""
    if not isinstance(pool, HeldOut):
        raise TypeError(f"pool of type {type(pool).__name__} is not allowed: pool must be a HeldOut")
    for name, used, part, bound, what in (("train", train, pool.train_index, _N_INDEX, _TRAIN_WHAT),
                                          ("early_stop", early_stop, pool.train_index, _N_INDEX, _TRAIN_WHAT),
                                          ("early_stop_test", early_stop_test, pool.test_index, TRAIN_FILE_SIZE,
                                           _TEST_WHAT)):
        if clash := _overlap(np.asarray(part), _indices(used, name, bound, what)):
            raise ValueError(f"pool is not allowed: {clash} of it are in {name}; a held-out image must be one the "
                             "run never trained or early-stopped on")
    return pool


def heldout_pool(counts, n_test: int, *, train, early_stop=(), early_stop_test=()) -> HeldOut:
    """The held-out pool of a run on a copy holding ``counts`` images per training file and
    ``n_test`` test images: every installed image but those it trains on (``train``, official
    indices: :func:`~iterlin.data.train_index` of its ``n_train``) and those it early-stops on
    (``early_stop``, official indices; ``early_stop_test``, positions in ``test_batch``). A
    ValueError names ``early_stop`` when it overlaps ``train`` (a run cannot stop on images it trains
    on), and ``train``/``early_stop`` when they hold an image that is not installed."""
    counts = tuple(int(c) for c in counts)
    if len(counts) != 5 or any(c < 0 or c > TRAIN_FILE_SIZE for c in counts):
        raise ValueError(f"counts={counts!r} is not allowed: counts must be 5 numbers of installed images in "
                         f"[0, {TRAIN_FILE_SIZE}], one per training file")
    n_test = check_int(n_test, "n_test", minimum=0, maximum=TRAIN_FILE_SIZE)
    installed = _installed_train(counts)
    used = _indices(train, "train", _N_INDEX, _TRAIN_WHAT)
    stop = _indices(early_stop, "early_stop", _N_INDEX, _TRAIN_WHAT)
    stop_test = _indices(early_stop_test, "early_stop_test", n_test, _TEST_WHAT)
    for name, idx in (("train", used), ("early_stop", stop)):
        if missing := _overlap(idx, np.setdiff1d(idx, installed)):
            raise ValueError(f"{name} is not allowed: {missing} of it are not installed (counts {counts})")
    if clash := _overlap(stop, used):
        raise ValueError(f"early_stop is not allowed: {clash} of it are in train, the run's training images")
    return HeldOut(np.setdiff1d(np.arange(n_test, dtype=np.int64), stop_test),
                   np.setdiff1d(installed, np.union1d(used, stop)))


def heldout_images(batches: Batches, pool: HeldOut) -> HeldOutImages:
    """The raw (uint8) images of ``pool`` from ``batches`` (:func:`~iterlin.data.read_batches`); a
    ValueError names ``pool`` when one of its images is not installed."""
    x_test, y_test = batches.test
    test = _indices(pool.test_index, "pool.test_index", x_test.shape[0], _TEST_WHAT)
    unused = _indices(pool.train_index, "pool.train_index", _N_INDEX, _TRAIN_WHAT)
    f, k = np.divmod(unused, TRAIN_FILE_SIZE)
    counts = np.asarray(batches.counts)
    if np.any(k >= counts[f]):
        raise ValueError(f"pool is not allowed: its training-batch image {unused[k >= counts[f]][0]} is not installed "
                         f"(counts {tuple(counts)})")
    x = np.concatenate([x for x, _ in batches.train])
    y = np.concatenate([y for _, y in batches.train])
    at = np.concatenate([[0], np.cumsum(counts)])[f] + k
    return HeldOutImages(x_test[test], y_test[test], x[at], y[at])


def load_heldout(n_train: int | None, *, early_stop=(), early_stop_test=(), root: str | os.PathLike | None = None,
                 download: bool | None = None, cache_dir: str | os.PathLike | None = None
                 ) -> tuple[HeldOut, HeldOutImages]:
    """The held-out pool of a run trained on :func:`~iterlin.data.load_cifar10`'s ``n_train`` images
    (None: all; :func:`heldout_pool` over every installed image), and its images standardised as
    :func:`~iterlin.data.load_cifar10` standardises them; the data is found as there."""
    batches = read_batches(find_cifar10(root, download=download, cache_dir=cache_dir))
    pool = heldout_pool(batches.counts, batches.test[0].shape[0], train=train_index(n_train, batches.counts),
                        early_stop=early_stop, early_stop_test=early_stop_test)
    raw = heldout_images(batches, pool)
    return pool, raw._replace(x_test=standardise(raw.x_test), x_unused=standardise(raw.x_unused))
