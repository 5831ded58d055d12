"""Result cache: compute once, replot for free, never reuse a stale result.

``cached(name, compute, config, data_fingerprint=...)`` returns the results of ``compute`` for this
experiment, configuration, iterlin code and data, computing them only when no valid cached copy
exists. The cache key is

    sha256( name, canonical JSON of config, hash of every iterlin/*.py file, data fingerprint )

so changing any knob, any line of the library or any byte of the data gives a new key (and the
old entry is simply never read again); rerunning a notebook to replot reads the stored arrays.

Files, in the cache directory (:func:`default_cache_dir`: ``$ITERLIN_CACHE``, else
``<repo>/.cache/results`` beside the ``iterlin`` package, else ``~/.cache/iterlin/results``):

* ``<name>-<key[:20]>.npz``: the results, flattened to ``"a/b"`` keys (nested dicts are allowed),
  plus ``__key__`` (the full key) and ``__config__`` (canonical JSON); written atomically with
  :func:`iterlin.checkpoint.atomic_write_bytes` and read with ``allow_pickle=False``.
* ``<name>-<key[:20]>.json``: a human-readable sidecar (name, key, config, code and data hashes).
* ``checkpoints/<name>-<key[:20]>/``: a folder for the training checkpoints of a computation in
  progress (passed to ``compute``); an interrupted notebook resumes from it when rerun, and it is
  deleted once the results are stored.

A truncated or corrupt results file, or one whose stored key does not match, is reported with a
:class:`CacheWarning` naming the file, deleted, and recomputed: it never crashes the caller and is
never used. A corrupt training checkpoint (``CheckpointError`` from ``compute``) is likewise
reported, deleted, and the computation restarted once from scratch.

Results are a dict of NumPy arrays and scalars (numbers, bools, strings) and nested dicts of these;
object arrays are refused (they would need pickle). Loaded values come back as NumPy arrays
(0-d for scalars); :func:`cached` returns the same structure whether computed or loaded.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import sys
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from .checkpoint import CheckpointError, atomic_write_bytes

__all__ = [
    "CacheWarning",
    "cached",
    "cache_key",
    "cache_paths",
    "canonical_json",
    "code_fingerprint",
    "default_cache_dir",
    "load_results",
    "save_results",
    "flatten",
    "unflatten",
    "repo_root",
]

PACKAGE_DIR = Path(__file__).resolve().parent
_SEP = "/"
_RESERVED = ("__key__", "__config__")


class CacheWarning(UserWarning):
    """A cache file was unusable (truncated, corrupt or mismatched) and is being recomputed."""


# ------------------------------------------------------------------------------------------------
# Keys
# ------------------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """Plain Python values for JSON: numpy scalars/arrays → Python numbers/lists; tuples → lists."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"config key {k!r} is not allowed: config keys must be strings")
            out[k] = _jsonable(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"config value {value!r} of type {type(value).__name__} is not allowed: configs hold only "
        "numbers, bools, strings, None, lists and dicts"
    )


def canonical_json(config: Mapping) -> str:
    """Sorted keys, no whitespace; ``inf`` written ``Infinity`` (Python's json reads it back).

    NaN is refused: a NaN in a config is always a bug (and NaN ≠ NaN would break the key).
    """
    plain = _jsonable(config)

    def check(v):
        if isinstance(v, float) and math.isnan(v):
            raise ValueError("config contains nan: not allowed in a cache key")
        if isinstance(v, dict):
            for x in v.values():
                check(x)
        if isinstance(v, list):
            for x in v:
                check(x)

    check(plain)
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), allow_nan=True, ensure_ascii=True)


def code_fingerprint(package_dir: str | os.PathLike | None = None) -> str:
    """sha256 of every ``*.py`` file of the iterlin package (file name and bytes, sorted by name)."""
    root = Path(package_dir) if package_dir is not None else PACKAGE_DIR
    h = hashlib.sha256()
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        h.update(f"{path.name}:{len(data)};".encode())
        h.update(data)
    return h.hexdigest()


def cache_key(name: str, config: Mapping, *, data_fingerprint: str, code: str | None = None) -> str:
    """The sha256 (hex) of (name, canonical config, code fingerprint, data fingerprint)."""
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
        raise ValueError(f"name={name!r} is not allowed: name must be a non-empty string of letters, digits, _ - .")
    if not isinstance(data_fingerprint, str):
        raise TypeError(f"data_fingerprint={data_fingerprint!r} is not allowed: it must be a string (a hash)")
    code = code_fingerprint() if code is None else code
    h = hashlib.sha256()
    for part in (name, canonical_json(config), code, data_fingerprint):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------
# Where
# ------------------------------------------------------------------------------------------------


def repo_root() -> Path | None:
    """The checkout holding the iterlin package (the folder with ``pyproject.toml``), if any."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() else None


def default_cache_dir() -> Path:
    """``$ITERLIN_CACHE``, else ``<repo>/.cache/results``, else ``~/.cache/iterlin/results``."""
    env = os.environ.get("ITERLIN_CACHE")
    if env:
        return Path(env).expanduser()
    root = repo_root()
    if root is not None:
        return root / ".cache" / "results"
    return Path("~/.cache/iterlin/results").expanduser()


def cache_paths(name: str, key: str, cache_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """``{"results": .npz, "sidecar": .json, "checkpoints": folder}`` for this name and key."""
    d = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    stem = f"{name}-{key[:20]}"
    return {
        "results": d / f"{stem}.npz",
        "sidecar": d / f"{stem}.json",
        "checkpoints": d / "checkpoints" / stem,
    }


# ------------------------------------------------------------------------------------------------
# Reading and writing results
# ------------------------------------------------------------------------------------------------


def flatten(results: Mapping, prefix: str = "") -> dict[str, np.ndarray]:
    """Nested dict → ``{"a/b": array}``; values become NumPy arrays (object dtype refused)."""
    if not isinstance(results, Mapping):
        raise TypeError(f"results of type {type(results).__name__} is not allowed: results must be a dict")
    out: dict[str, np.ndarray] = {}
    for k, v in results.items():
        if not isinstance(k, str) or not k or _SEP in k or k in _RESERVED:
            raise ValueError(f"results key {k!r} is not allowed: keys are non-empty strings without '/'")
        full = prefix + k
        if isinstance(v, Mapping):
            out.update(flatten(v, full + _SEP))
            continue
        a = np.asarray(v)
        if a.dtype == object:
            raise TypeError(f"results[{full!r}] of type {type(v).__name__} is not allowed: use numbers, bools, strings or arrays")
        out[full] = a
    return out


def unflatten(flat: Mapping[str, Any]) -> dict:
    """Inverse of :func:`flatten`."""
    out: dict = {}
    for k, v in flat.items():
        node = out
        parts = k.split(_SEP)
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return out


def save_results(path: str | os.PathLike, results: Mapping, *, key: str, config: Mapping) -> None:
    """Atomically write ``results`` (flattened) with its key and config to an ``.npz``."""
    arrays = flatten(results)
    arrays["__key__"] = np.asarray(key)
    arrays["__config__"] = np.asarray(canonical_json(config))

    def write(f):
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        f.write(buf.getvalue())

    atomic_write_bytes(path, write)


def load_results(path: str | os.PathLike, *, key: str | None = None) -> dict:
    """Read an ``.npz`` written by :func:`save_results`; ``CheckpointError`` if unusable.

    Every array is read in full (so a truncated member is detected here, not later), and the
    stored key must equal ``key`` when given.
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            flat = {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise CheckpointError(f"cache file {path} is unreadable or truncated ({type(e).__name__}: {e})") from e
    stored = flat.pop("__key__", None)
    flat.pop("__config__", None)
    if stored is None:
        raise CheckpointError(f"cache file {path} has no stored key: not written by iterlin.cache")
    if key is not None and str(stored) != key:
        raise CheckpointError(f"cache file {path} holds key {str(stored)[:20]}..., expected {key[:20]}...")
    return unflatten(flat)


def _roundtrip(results: Mapping) -> dict:
    """What :func:`load_results` would return: the same structure with NumPy arrays."""
    return unflatten({k: np.asarray(v) for k, v in flatten(results).items()})


def _remove(path: Path) -> None:
    try:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    except OSError:
        pass


def _warn(message: str) -> None:
    warnings.warn(message, CacheWarning, stacklevel=3)


def cached(
    name: str,
    compute: Callable[[Path], Mapping],
    config: Mapping,
    *,
    data_fingerprint: str,
    cache_dir: str | os.PathLike | None = None,
    verbose: bool = True,
) -> dict:
    """Return ``compute(checkpoint_dir)``'s results for this key, computing only when not cached.

    Args:
      name: experiment name (file-name safe), e.g. ``"fig3"``.
      compute: ``compute(checkpoint_dir: Path) -> results`` (a dict of arrays/scalars, possibly
        nested). ``checkpoint_dir`` is a folder unique to this key for training checkpoints
        (e.g. ``iterlin.train(..., checkpoint=checkpoint_dir / "run.npz")``); it is created before
        the call and removed after the results are stored.
      config: the resolved config (JSON-able); part of the key, and stored beside the results.
      data_fingerprint: a hash of the data the computation reads (``Dataset.fingerprint``).
      cache_dir: default :func:`default_cache_dir`.
      verbose: print one line saying whether the results were loaded or computed (stdout).

    Returns:
      The results as NumPy arrays (the same structure whether computed now or loaded).
    """
    key = cache_key(name, config, data_fingerprint=data_fingerprint)
    paths = cache_paths(name, key, cache_dir)
    path = paths["results"]
    if path.exists():
        try:
            results = load_results(path, key=key)
        except CheckpointError as e:
            _warn(f"{e}; deleting {path} and recomputing")
            _remove(path)
            _remove(paths["sidecar"])
        else:
            if verbose:
                print(f"{name}: loaded cached results {path.name}")
            return results

    ckpt = paths["checkpoints"]
    ckpt.mkdir(parents=True, exist_ok=True)
    try:
        results = compute(ckpt)
    except CheckpointError as e:
        _warn(f"{e}; deleting the checkpoints in {ckpt} and recomputing from scratch")
        _remove(ckpt)
        ckpt.mkdir(parents=True, exist_ok=True)
        results = compute(ckpt)
    if not isinstance(results, Mapping):
        raise TypeError(f"compute returned {type(results).__name__}: it must return a dict of arrays")
    results = _roundtrip(results)
    save_results(path, results, key=key, config=config)
    sidecar = {
        "name": name,
        "key": key,
        "config": _jsonable(config),
        "code_fingerprint": code_fingerprint(),
        "data_fingerprint": data_fingerprint,
        "results": path.name,
    }
    text = json.dumps(sidecar, indent=1, sort_keys=True, allow_nan=True).encode()
    atomic_write_bytes(paths["sidecar"], lambda f: f.write(text))
    _remove(ckpt)
    if verbose:
        print(f"{name}: computed and cached {path.name}")
    sys.stdout.flush()
    return results
