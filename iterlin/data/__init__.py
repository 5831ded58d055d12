"""Datasets: CIFAR-10 (verified, safely unpickled; ``iterlin.data.cifar10``) and the quintic
regression task of Fig. 9 (``iterlin.data.regression``), each returned as a :class:`Dataset`; a CIFAR-10
run's held-out pool, every installed image it neither trained nor early-stopped on
(``iterlin.data.heldout``).

Every public name of the submodules is re-exported here: ``from iterlin.data import load_cifar10``.
"""

from __future__ import annotations

from .cifar10 import (
    CIFAR10_ARCHIVE,
    CIFAR10_CLASSES,
    CIFAR10_DIRNAME,
    CIFAR10_FILES,
    CIFAR10_MD5,
    CIFAR10_MEAN,
    CIFAR10_SIZE,
    CIFAR10_STD,
    CIFAR10_URL,
    DOWNLOAD_ENV_VAR,
    ENV_VAR,
    TRAIN_FILE_SIZE,
    Batches,
    DataError,
    DatasetNotFoundError,
    FileRecord,
    RestrictedUnpickler,
    download_allowed,
    download_archive,
    extract_archive,
    find_cifar10,
    load_cifar10,
    md5sum,
    read_batches,
    read_cifar10,
    safe_unpickle,
    standardise,
    train_index,
    user_cache_dir,
)
from .dataset import Dataset
from .heldout import HeldOut, HeldOutImages, check_heldout, heldout_images, heldout_pool, load_heldout
from .regression import QUINTIC_HALF_WIDTH, quintic, quintic_fn

__all__ = [
    "CIFAR10_ARCHIVE",
    "CIFAR10_CLASSES",
    "CIFAR10_DIRNAME",
    "CIFAR10_FILES",
    "CIFAR10_MD5",
    "CIFAR10_MEAN",
    "CIFAR10_SIZE",
    "CIFAR10_STD",
    "CIFAR10_URL",
    "DOWNLOAD_ENV_VAR",
    "ENV_VAR",
    "QUINTIC_HALF_WIDTH",
    "TRAIN_FILE_SIZE",
    "Batches",
    "DataError",
    "Dataset",
    "DatasetNotFoundError",
    "FileRecord",
    "HeldOut",
    "HeldOutImages",
    "RestrictedUnpickler",
    "check_heldout",
    "download_allowed",
    "download_archive",
    "extract_archive",
    "find_cifar10",
    "heldout_images",
    "heldout_pool",
    "load_cifar10",
    "load_heldout",
    "md5sum",
    "quintic",
    "quintic_fn",
    "read_batches",
    "read_cifar10",
    "safe_unpickle",
    "standardise",
    "train_index",
    "user_cache_dir",
]
