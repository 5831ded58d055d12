"""Result cache: compute once, replot for free, never reuse a stale result.

``cached(name, compute, config, data_fingerprint=..., code=...)`` returns the results of
``compute`` for this experiment, configuration, iterlin code and data, computing them only when no
valid cached copy exists. The cache key is

    sha256( name, canonical JSON of config, code fingerprint, data fingerprint )

where the code fingerprint is given by the caller: for an experiment,
``iterlin.repro.fingerprint.code_fingerprint("iterlin.experiments.fig3", ("compute", "load"))``, a hash
of the code its computation can reach (and only that: a plot, a claim's wording or another figure
does not invalidate it); by default :func:`package_digest`, a hash of every ``.py`` file of the
package, subpackages included. So changing any knob, any line of the code that computes the
results or any byte of the data gives a new key (and the old entry is simply never read again);
rerunning a notebook to replot reads the stored arrays.

Files, in the cache directory (:func:`default_cache_dir`: ``$ITERLIN_CACHE``, else
``<repo>/.cache/results`` beside the ``iterlin`` package, else ``$XDG_CACHE_HOME/iterlin/results``
or ``~/.cache/iterlin/results``):

* ``<name>-<key[:20]>.npz``: the results, flattened to ``"a/b"`` keys (nested dicts are allowed),
  plus ``__key__`` (the full key), ``__config__`` (canonical JSON) and ``__digest__`` (the
  :func:`results_digest` of the results, key and config); written atomically with
  :func:`iterlin.checkpoint.atomic_write_bytes` (mode as any new file: the umask is respected) and
  read with ``allow_pickle=False``.
* ``<name>-<key[:20]>.json``: a human-readable sidecar (name, key, config, code and data hashes,
  the results' digest).
* ``checkpoints/<name>-<key[:20]>/``: a folder for the training checkpoints of a computation in
  progress (passed to ``compute``); an interrupted notebook resumes from it when rerun, and it is
  deleted once the results are stored.

A truncated or corrupt results file, one whose stored key does not match, or one whose arrays do
not match their stored digest (altered after they were written: other arrays under the same keys)
is reported with a :class:`CacheWarning` naming the file, deleted, and recomputed: it never crashes
the caller and is never used. (The digest detects accidental or careless changes; anyone who can
write the cache can also write a matching digest.) A corrupt training checkpoint
(``CheckpointError`` from ``compute``) is likewise reported, deleted, and the computation restarted
once from scratch.

A cache directory that cannot be written (read-only, full) never loses a computation: a file that
cannot be deleted is said so in the warning; checkpoints then go to a temporary folder, and results
that cannot be stored are returned uncached, each with a :class:`CacheWarning` saying so.

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
import tempfile
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..checkpoint import CheckpointError, atomic_write_bytes, check_npz_sizes
from ..data import user_cache_dir

__all__ = [
    "CacheWarning",
    "ResultsMismatch",
    "cached",
    "cache_root",
    "cache_key",
    "cache_paths",
    "canonical_json",
    "package_digest",
    "default_cache_dir",
    "load_results",
    "results_digest",
    "save_results",
    "flatten",
    "unflatten",
    "repo_root",
]

PACKAGE_DIR = Path(__file__).resolve().parent.parent
_SEP = "/"
_RESERVED = ("__key__", "__config__", "__digest__")


class ResultsMismatch(CheckpointError):
    """A results file is intact but holds another key or config than the one asked for."""


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


def package_digest(package_dir: str | os.PathLike | None = None) -> str:
    """sha256 of every ``*.py`` file of the iterlin package, subpackages included (recursively).

    Each file contributes its path relative to ``package_dir`` (POSIX form) and its bytes, sorted
    by path; ``__pycache__`` and hidden folders are skipped. The coarse default key for callers
    that give no per-experiment fingerprint (see :func:`iterlin.repro.fingerprint.code_fingerprint`).
    """
    root = Path(package_dir) if package_dir is not None else PACKAGE_DIR
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if path.is_file() and not any(p == "__pycache__" or p.startswith(".") for p in rel.parts[:-1]):
            files.append((rel.as_posix(), path))
    h = hashlib.sha256()
    for rel, path in sorted(files):
        data = path.read_bytes()
        h.update(f"{rel}:{len(data)};".encode())
        h.update(data)
    return h.hexdigest()


def cache_key(name: str, config: Mapping, *, data_fingerprint: str, code: str | None = None) -> str:
    """The sha256 (hex) of (name, canonical config, code fingerprint, data fingerprint).

    ``code``: the code fingerprint (a string); None: :func:`package_digest` of the package.
    """
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
        raise ValueError(f"name={name!r} is not allowed: name must be a non-empty string of letters, digits, _ - .")
    if not isinstance(data_fingerprint, str):
        raise TypeError(f"data_fingerprint={data_fingerprint!r} is not allowed: it must be a string (a hash)")
    if code is not None and not isinstance(code, str):
        raise TypeError(f"code={code!r} is not allowed: it must be a string (a hash) or None")
    code = package_digest() if code is None else code
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


def cache_root() -> Path:
    """The project's cache folder: ``<repo>/.cache`` inside a checkout, else :func:`iterlin.data.user_cache_dir`."""
    root = repo_root()
    return root / ".cache" if root is not None else user_cache_dir()


def default_cache_dir() -> Path:
    """``$ITERLIN_CACHE``, else :func:`cache_root` ``/results`` (``<repo>/.cache/results`` inside a
    checkout, else the user cache folder's ``results``)."""
    env = os.environ.get("ITERLIN_CACHE")
    if env:
        return Path(env).expanduser()
    return cache_root() / "results"


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


def results_digest(flat: Mapping[str, Any]) -> str:
    """sha256 (hex) of flattened arrays: for each key, sorted, its name, dtype, shape and C-order bytes.

    ``flat`` as :func:`flatten` gives it (the reserved ``__key__`` and ``__config__`` included when
    present; ``__digest__`` itself never).
    """
    h = hashlib.sha256()
    for k in sorted(flat):
        if k == "__digest__":
            continue
        a = np.ascontiguousarray(np.asarray(flat[k]))
        h.update(f"{len(k)}:{k};{a.dtype.str};{a.shape};{a.nbytes};".encode())
        h.update(a.reshape(-1).view(np.uint8).tobytes())
    return h.hexdigest()


def save_results(path: str | os.PathLike, results: Mapping, *, key: str, config: Mapping) -> str:
    """Atomically write ``results`` (flattened) with its key, config and digest to an ``.npz``.

    Returns the digest (:func:`results_digest` of everything stored but the digest).
    """
    arrays = flatten(results)
    arrays["__key__"] = np.asarray(key)
    arrays["__config__"] = np.asarray(canonical_json(config))
    digest = results_digest(arrays)
    arrays["__digest__"] = np.asarray(digest)

    def write(f):
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        f.write(buf.getvalue())

    atomic_write_bytes(path, write)
    return digest


def load_results(path: str | os.PathLike, *, key: str | None = None, config: Mapping | None = None) -> dict:
    """Read an ``.npz`` written by :func:`save_results`; ``CheckpointError`` if unusable.

    Every array's header is checked against the archive's size before it is allocated, every array
    is read in full (so a truncated member is detected here, not later), the stored digest must
    match the arrays (:func:`results_digest`), the stored key must equal ``key`` and the stored
    config must equal ``config`` (as :func:`canonical_json`) when given (else
    :class:`ResultsMismatch`, a ``CheckpointError``).
    """
    try:
        check_npz_sizes(path)
        with np.load(path, allow_pickle=False) as z:
            flat = {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error, MemoryError) as e:
        raise CheckpointError(f"cache file {path} is unreadable or truncated ({type(e).__name__}: {e})") from e
    if "__key__" not in flat:
        raise CheckpointError(f"cache file {path} has no stored key: not written by iterlin.repro.cache")
    digest = flat.pop("__digest__", None)
    if digest is None:
        raise CheckpointError(f"cache file {path} has no stored digest of its results: written by an older "
                              "iterlin, or altered")
    actual = results_digest(flat)
    if str(digest) != actual:
        raise CheckpointError(
            f"cache file {path} does not match its stored digest (stored {str(digest)[:16]}..., its arrays give "
            f"{actual[:16]}...): the results were altered after they were written"
        )
    stored = flat.pop("__key__")
    stored_config = str(flat.pop("__config__", ""))
    if key is not None and str(stored) != key:
        raise ResultsMismatch(f"cache file {path} holds key {str(stored)[:40]}..., expected {key[:40]}...")
    if config is not None and stored_config != canonical_json(config):
        raise ResultsMismatch(f"cache file {path} holds the results of config {stored_config[:300]}, expected "
                              f"{canonical_json(config)[:300]}")
    return unflatten(flat)


def _roundtrip(results: Mapping) -> dict:
    """What :func:`load_results` would return: the same structure with NumPy arrays."""
    return unflatten({k: np.asarray(v) for k, v in flatten(results).items()})


def _remove(path: Path) -> OSError | None:
    """Delete a file or folder if it exists; the error if that failed (read-only cache), else None."""
    try:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    except OSError as e:
        return e
    return None


def _deleted(path: Path, err: OSError | None) -> str:
    """What happened to ``path``, for a warning: deleted, or why it could not be."""
    if err is None:
        return f"deleted {path}"
    return f"could not delete {path} ({type(err).__name__}: {err}; is the cache directory read-only?)"


def _temporary_checkpoints(ckpt: Path) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"iterlin-{ckpt.name}-"))


def _checkpoint_dir(ckpt: Path) -> Path:
    """``ckpt``, created if needed and checked to be writable; else a temporary folder (with a warning)."""
    try:
        ckpt.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=ckpt, prefix=".write-test-")  # unique: concurrent runs share ckpt
        os.close(fd)
        os.unlink(probe)
        return ckpt
    except OSError as e:
        tmp = _temporary_checkpoints(ckpt)
        _warn(f"cannot write checkpoints to {ckpt} ({type(e).__name__}: {e}); using the temporary folder {tmp} "
              "instead (an interrupted run will not resume from it)")
        return tmp


def _warn(message: str) -> None:
    warnings.warn(message, CacheWarning, stacklevel=3)


def cached(
    name: str,
    compute: Callable[[Path], Mapping],
    config: Mapping,
    *,
    data_fingerprint: str,
    code: str | None = None,
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
      code: a hash of the code that computes the results, e.g.
        ``iterlin.repro.fingerprint.code_fingerprint("iterlin.experiments.fig3", ("compute", "load"))``;
        default (None): :func:`package_digest`, every ``.py`` file of the package. Recorded in
        the sidecar.
      cache_dir: default :func:`default_cache_dir`.
      verbose: print one line saying whether the results were loaded or computed (stdout).

    Returns:
      The results as NumPy arrays (the same structure whether computed now or loaded).
    """
    code = package_digest() if code is None else code
    key = cache_key(name, config, data_fingerprint=data_fingerprint, code=code)
    paths = cache_paths(name, key, cache_dir)
    path = paths["results"]
    if path.exists():
        try:
            results = load_results(path, key=key)
        except CheckpointError as e:
            err = _remove(path)
            _remove(paths["sidecar"])
            if err is None:
                _warn(f"{e}; {_deleted(path, err)} and recomputing")
            else:
                _warn(f"{e}; {_deleted(path, err)}; recomputing without it (the new results replace it only if "
                      "the cache directory is writable, else they are returned uncached)")
        else:
            if verbose:
                print(f"{name}: loaded cached results {path.name}")
            return results

    ckpt = _checkpoint_dir(paths["checkpoints"])
    try:
        results = compute(ckpt)
    except CheckpointError as e:
        err = _remove(ckpt)
        if err is None:
            _warn(f"{e}; deleted the checkpoints in {ckpt} and recomputing from scratch")
            ckpt = _checkpoint_dir(ckpt)
        else:  # the corrupt checkpoints stay there: restart elsewhere rather than meet them again
            tmp = _temporary_checkpoints(ckpt)
            _warn(f"{e}; could not delete the checkpoints in {ckpt} ({type(err).__name__}: {err}); recomputing "
                  f"from scratch with checkpoints in the temporary folder {tmp}")
            ckpt = tmp
        results = compute(ckpt)
    if not isinstance(results, Mapping):
        raise TypeError(f"compute returned {type(results).__name__}: it must return a dict of arrays")
    results = _roundtrip(results)
    try:
        digest = save_results(path, results, key=key, config=config)
    except OSError as e:
        _warn(f"could not store the results in {path} ({type(e).__name__}: {e}); returning them uncached")
        stored = False
    else:
        stored = True
        sidecar = {
            "name": name,
            "key": key,
            "config": _jsonable(config),
            "code_fingerprint": code,
            "data_fingerprint": data_fingerprint,
            "results": path.name,
            "results_digest": digest,
        }
        text = json.dumps(sidecar, indent=1, sort_keys=True, allow_nan=True).encode()
        try:
            atomic_write_bytes(paths["sidecar"], lambda f: f.write(text))
        except OSError as e:
            _warn(f"could not write the sidecar {paths['sidecar']} ({type(e).__name__}: {e}); the results are "
                  "cached without it")
    _remove(ckpt)
    if verbose:
        print(f"{name}: computed " + (f"and cached {path.name}" if stored else "(not cached)"))
    sys.stdout.flush()
    return results
