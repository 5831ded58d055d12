"""Atomic, pickle-free checkpoints of pytrees and JSON metadata.

A checkpoint is one ``.npz`` file holding every leaf of a pytree as ``leaf_<i>`` and a JSON
string ``meta``. It is written to a temporary file in the same directory, flushed and fsynced, then
renamed over the target (``os.replace``), so a reader sees either the previous checkpoint or the new
one, never a partial file. Loading needs a template pytree of the same structure: shapes and dtypes
are checked leaf by leaf, and anything truncated or inconsistent raises :class:`CheckpointError`.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "atomic_write_bytes", "new_file_mode",
           "check_npz_sizes"]


class CheckpointError(RuntimeError):
    """A checkpoint or cache file is unreadable, truncated or does not match what was expected."""


def _umask() -> int:
    """The process's umask, read without changing it where the OS allows (Linux: /proc)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (the only portable way to read it)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode ``open(path, "w")`` would give a new file: ``0o666 & ~umask`` (0o644 under umask 022)."""
    return 0o666 & ~_umask()


def atomic_write_bytes(path: str | os.PathLike, write) -> None:
    """Call ``write(fileobj)`` on a temporary file beside ``path``, fsync, then rename into place.

    The file gets the mode a plainly created file would (:func:`new_file_mode`, the umask
    respected), not the 0o600 of the temporary file, so a cache shared by a group stays readable.
    The folder is resolved first (``os.path.realpath``): :func:`tempfile.mkstemp` normalises its
    ``dir`` lexically (``link/..`` → ``.``, where the system goes up from the link's target), so a
    path through a symlink and ``..`` would put the temporary file in another folder, or none.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path = Path(os.path.realpath(path.parent)) / path.name
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, new_file_mode())
        else:  # pragma: no cover (Windows)
            os.chmod(tmp, new_file_mode())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


#: The most an ``.npz`` member may expand on decompression (deflate's limit is about 1032:1).
_MAX_EXPANSION = 1100


def check_npz_sizes(path: str | os.PathLike) -> None:
    """Each array's size as its ``.npy`` header states it, checked against the bytes the archive
    holds before anything is allocated (a forged header claiming terabytes is refused here)."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if info.compress_type == zipfile.ZIP_STORED:
                limit = info.compress_size
            else:
                limit = info.compress_size * _MAX_EXPANSION + 4096
            if info.file_size > limit:
                raise ValueError(f"member {info.filename!r} claims {info.file_size} bytes from {info.compress_size}")
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(f)
            if dtype.hasobject:
                raise ValueError(f"member {info.filename!r} is an object array (would need pickle)")
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes > info.file_size:
                raise ValueError(f"member {info.filename!r} claims shape {shape} of {dtype} ({nbytes} bytes) in "
                                 f"{info.file_size} bytes")


def save_checkpoint(path: str | os.PathLike, tree: Any, meta: dict) -> None:
    """Atomically write the leaves of ``tree`` and the JSON-serialisable ``meta`` to ``path``."""
    leaves = [np.asarray(x) for x in jax.tree.leaves(tree)]
    arrays = {f"leaf_{i}": x for i, x in enumerate(leaves)}
    arrays["meta"] = np.asarray(json.dumps(meta))
    atomic_write_bytes(path, lambda f: np.savez(f, **arrays))


def load_checkpoint(path: str | os.PathLike, template: Any) -> tuple[Any, dict]:
    """Read a checkpoint written by :func:`save_checkpoint` into the structure of ``template``."""
    leaves_t, treedef = jax.tree.flatten(template)
    try:
        check_npz_sizes(path)
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            n_saved = len(z.files) - 1
            if n_saved != len(leaves_t):  # a different structure, not a damaged file: say so
                raise CheckpointError(f"checkpoint {path} holds {n_saved} leaves, expected {len(leaves_t)}")
            leaves = [z[f"leaf_{i}"] for i in range(n_saved)]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError, MemoryError) as e:
        raise CheckpointError(f"checkpoint {path} is unreadable or truncated ({type(e).__name__}: {e})") from e
    for i, (a, t) in enumerate(zip(leaves, leaves_t)):
        if np.shape(a) != np.shape(t) or np.asarray(a).dtype != np.asarray(t).dtype:
            raise CheckpointError(
                f"checkpoint {path}: leaf {i} has shape {np.shape(a)} dtype {a.dtype}, "
                f"expected shape {np.shape(t)} dtype {np.asarray(t).dtype}"
            )
    return jax.tree.unflatten(treedef, leaves), meta
