"""CIFAR-10, verified and safely unpickled.

The official "python version" of CIFAR-10 (Krizhevsky, 2009): the archive ``cifar-10-python.tar.gz``
(170498071 bytes, md5 ``c58f30108f718f92721af3b95e74349a``, from :data:`CIFAR10_URL`) holding
``cifar-10-batches-py/`` with the pickled batch files ``data_batch_1`` .. ``data_batch_5`` (10000
training images each) and ``test_batch`` (10000 test images).

Where the data comes from (:func:`find_cifar10`), first match wins:

1. ``root=`` given to :func:`load_cifar10` (an error if nothing usable is there: no fall-back).
2. The environment variable ``ITERLIN_CIFAR10`` (the only one iterlin reads; an error if set but
   nothing usable is there). Like ``root=``, it may name

   * a directory that contains ``cifar-10-batches-py/``,
   * the ``cifar-10-batches-py/`` directory itself (any directory holding the batch files), or
   * the archive ``cifar-10-python.tar.gz`` itself, or a directory that contains it.

   A relative path is taken relative to the current directory; an empty value counts as unset.
3. The cache directory (``cache_dir=``, default the user cache folder
   :func:`user_cache_dir`: ``$XDG_CACHE_HOME/iterlin``, else ``~/.cache/iterlin``):
   its extracted ``cifar-10-batches-py/``, else its ``cifar-10-python.tar.gz``, which is verified
   and extracted there.
4. A download: the official archive is downloaded into the cache directory with a progress bar
   (stderr), verified, then extracted there. ``download=True`` asks for it, ``False`` forbids it;
   the default ``None`` downloads unless the environment variable ``ITERLIN_DOWNLOAD`` is ``0``
   (or ``off``/``false``/``no``), so a notebook run or ``iterlin run`` on a machine without the
   data fetches it, and the test suite (which sets ``ITERLIN_DOWNLOAD=0``) never touches the
   network. When an implicit download fails (offline), the error is the "not found" message
   below, with the download's failure added to the places looked in.

What is verified, per source (nothing is ever trusted blindly):

* **Archive** (given, cached or downloaded): its md5 must equal the official one before anything
  is read from it. Members must be regular files directly under ``cifar-10-batches-py/`` (no
  absolute paths, no ``..``, no links or devices, at most 64 MiB each); anything else is an error.
  Batch files read from a directory are capped at 64 MiB likewise, checked before they are read.
  A given archive (``root=``/``ITERLIN_CIFAR10``) is read in memory, never extracted; the cached
  one is extracted into a temporary directory that is renamed into place only when complete.
* **Extracted directory**: each batch file whose size equals its official size must have its
  official md5 (so a full copy is checked byte for byte); a file of any other size (a subset such
  as CI's, whose files are re-pickled) gets the structural check only.
* **Every batch file, whatever the source**: unpickled with :class:`RestrictedUnpickler` (never
  plain :func:`pickle.load`: it only lets numpy's array reconstruction through, so a crafted file
  cannot run code), then checked to be a dict with ``b"data"`` a ``uint8`` array of shape
  ``(n, 3072)``, ``1 <= n <= 10000``, and ``b"labels"`` a list of ``n`` ints in ``0..9``.
* **Downloads**: written to a temporary file in the cache directory, size and md5 checked, then
  moved into place with :func:`os.replace`; an interrupted or corrupt download leaves nothing
  that looks complete, and the ``.part`` file of a killed one is deleted by the next download
  (once untouched for ``STALE_PART_SECONDS``). A cached archive whose md5 is wrong is
  downloaded again; if that fails, the error names the mismatch too.

Any failure raises :class:`DataError` (a :class:`ValueError`) naming the file and, for checksums,
the expected and actual values; a missing dataset raises :class:`DatasetNotFoundError` listing
every place looked in, how to set ``ITERLIN_CIFAR10`` and where to get the official archive.

Subsets (:func:`read_cifar10`). ``n_train`` training images are taken as the first
``n_train // 5 + (1 if i < n_train % 5 else 0)`` images of ``data_batch_{i+1}``, ``i = 0..4``,
concatenated in file order; test images are the first ``n_test`` of ``test_batch``. Because every
file contributes a prefix, the full dataset and any copy made of a prefix of each file (CI's
932-per-file subset) give *identical* arrays for the same ``n_train``/``n_test``.

Images are returned NHWC, ``(N, 32, 32, 3)``, standardised per channel with the fixed constants
:data:`CIFAR10_MEAN` / :data:`CIFAR10_STD` (computed over the 50000 official training images), so
the same image gives the same input whichever copy it came from.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import pickle
import posixpath
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from ..checkpoint import new_file_mode
from ..validate import check_int
from .dataset import Dataset

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
    "TRAIN_FILE_SIZE",
    "Batches",
    "DataError",
    "DatasetNotFoundError",
    "FileRecord",
    "RestrictedUnpickler",
    "download_allowed",
    "download_archive",
    "extract_archive",
    "find_cifar10",
    "load_cifar10",
    "md5sum",
    "read_batches",
    "read_cifar10",
    "safe_unpickle",
    "standardise",
    "train_index",
    "user_cache_dir",
]


def user_cache_dir() -> Path:
    """The user's cache folder for iterlin outside a checkout: ``$XDG_CACHE_HOME/iterlin``, else
    ``~/.cache/iterlin`` (never inside site-packages)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path("~/.cache").expanduser()) / "iterlin"


# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------

ENV_VAR = "ITERLIN_CIFAR10"
#: ``ITERLIN_DOWNLOAD=0`` (or off/false/no) turns off the download that ``download=None`` allows.
DOWNLOAD_ENV_VAR = "ITERLIN_DOWNLOAD"
_OFF = ("0", "off", "false", "no")
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_SIZE = 170498071
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_DIRNAME = "cifar-10-batches-py"


class FileRecord(NamedTuple):
    """Official size (bytes) and md5 of one file of ``cifar-10-batches-py/``."""

    size: int
    md5: str


#: The official batch files, in the order used by the subset rule (train files, then test).
CIFAR10_FILES: Mapping[str, FileRecord] = {
    "data_batch_1": FileRecord(31035704, "c99cafc152244af753f735de768cd75f"),
    "data_batch_2": FileRecord(31035320, "d4bba439e000b95fd0a9bffe97cbabec"),
    "data_batch_3": FileRecord(31035999, "54ebc095f3ab1f0389bbae665268c751"),
    "data_batch_4": FileRecord(31035696, "634d18415352ddfa80567beed471001a"),
    "data_batch_5": FileRecord(31035623, "482c414d41f54cd18b22e5b47cb7c3cb"),
    "test_batch": FileRecord(31035526, "40351d587109b95175f43aff81a1287e"),
}
_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
_TEST_FILE = "test_batch"
_BATCH_FILES = (*_TRAIN_FILES, _TEST_FILE)

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip
#: Per-channel (R, G, B) mean and standard deviation of the 50000 official training images,
#: pixel values scaled to [0, 1] (population statistics over all pixels of the channel).
CIFAR10_MEAN = np.array([0.49139968, 0.48215841, 0.44653091], dtype=np.float32)
CIFAR10_STD = np.array([0.24703223, 0.24348513, 0.26158784], dtype=np.float32)
CIFAR10_MEAN.setflags(write=False)
CIFAR10_STD.setflags(write=False)

_MAX_PER_FILE = 10000
_IMAGE_BYTES = 3 * 32 * 32
_MAX_MEMBER_BYTES = 64 * 2**20
_CHUNK = 2**20


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class DataError(ValueError):
    """A data file failed verification (checksum, format, archive safety) or cannot be used."""


class DatasetNotFoundError(DataError, FileNotFoundError):
    """No copy of the dataset was found where it was looked for (the message lists where)."""


# --------------------------------------------------------------------------------------------
# Safe unpickling
# --------------------------------------------------------------------------------------------


def _numpy_reconstruct():
    try:  # NumPy >= 2
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # pragma: no cover - NumPy 1.x
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


_ALLOWED_GLOBALS = {
    # The array reconstruction used by ndarray.__reduce__ (protocols 0-4), under the module
    # name NumPy 1.x (and Python 2, which wrote the official files) and NumPy 2 use.
    ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that can build dicts, lists, bytes, ints and NumPy arrays, and nothing else.

    ``find_class`` (the only way a pickle can reach a Python callable) resolves exactly
    ``numpy.core.multiarray._reconstruct`` / ``numpy._core.multiarray._reconstruct``,
    ``numpy.ndarray`` and ``numpy.dtype``; any other global (``os.system``, ``builtins.eval``,
    ``_codecs.encode``, ...) raises :class:`pickle.UnpicklingError` before it is called.
    Built-in containers and scalars are made by pickle opcodes without ``find_class``.

    Readable: the official files (Python 2, protocol 2) and NumPy arrays pickled by Python 3
    with protocols 3 and 4. Refused: Python 3 protocols 0-2 with ``bytes`` (they need
    ``_codecs.encode``) and protocol 5 (``numpy._core.numeric._frombuffer``).
    """

    def find_class(self, module: str, name: str) -> Any:
        factory = _ALLOWED_GLOBALS.get((module, name))
        if factory is None:
            raise pickle.UnpicklingError(
                f"forbidden global {module}.{name} in pickle: only NumPy array reconstruction "
                f"({', '.join(sorted(f'{m}.{n}' for m, n in _ALLOWED_GLOBALS))}) is allowed"
            )
        return factory()


def safe_unpickle(data: bytes, *, name: str = "<bytes>") -> Any:
    """Unpickle ``data`` with :class:`RestrictedUnpickler` and ``encoding="bytes"``.

    ``name`` labels the file in errors. Raises :class:`DataError` for any forbidden global or
    malformed/truncated pickle; nothing in the pickle is executed beyond NumPy's array builder.
    """
    try:
        return RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load()
    except pickle.UnpicklingError as e:
        raise DataError(f"{name}: refused to unpickle: {e}") from e
    except Exception as e:  # truncated or garbage input: EOFError, ValueError, KeyError, ...
        raise DataError(
            f"{name}: not a valid CIFAR-10 python batch file (unpickling failed: "
            f"{type(e).__name__}: {e})"
        ) from e


# --------------------------------------------------------------------------------------------
# Checksums, download, extraction
# --------------------------------------------------------------------------------------------


def md5sum(path: str | os.PathLike) -> str:
    """md5 (hex) of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_md5(path: Path, expected_md5: str) -> None:
    actual = md5sum(path)
    if actual != expected_md5.lower():
        raise DataError(
            f"{path}: md5 mismatch: expected {expected_md5.lower()}, got {actual} "
            f"({path.stat().st_size} bytes). The file is corrupt, truncated or not the official "
            f"{CIFAR10_ARCHIVE} (official: {CIFAR10_SIZE} bytes, md5 {CIFAR10_MD5}, "
            f"{CIFAR10_URL}); nothing was read from it."
        )


def download_allowed(download: bool | None = None) -> bool:
    """``download`` if given, else whether ``$ITERLIN_DOWNLOAD`` leaves downloads on (default: on)."""
    if download is None:
        return os.environ.get(DOWNLOAD_ENV_VAR, "").strip().lower() not in _OFF
    if not isinstance(download, bool):
        raise TypeError(f"download={download!r} is not allowed: download must be True, False or None")
    return download


def download_archive(
    url: str = CIFAR10_URL,
    dest_dir: str | os.PathLike | None = None,
    *,
    filename: str | None = None,
    expected_md5: str = CIFAR10_MD5,
    expected_size: int | None = None,
    timeout: float = 60.0,
    progress: bool = False,
) -> Path:
    """Download ``url`` into ``dest_dir/filename`` (default: the URL's last path component;
    ``dest_dir`` default: :func:`user_cache_dir`), with a progress bar on stderr if
    ``progress``.

    The bytes go to a temporary file in ``dest_dir``; only when the size (if ``expected_size``)
    and md5 match is it moved into place with :func:`os.replace`. On any failure (network error,
    mismatch, interruption) the temporary file is removed, no file appears under the final name
    (an existing one is left untouched) and :class:`DataError` is raised. A file already at the
    final name with the expected md5 is reused without downloading. Any URL scheme urllib
    handles works (``file://`` in tests). Returns the final path.
    """
    dest_dir = Path(user_cache_dir() if dest_dir is None else dest_dir).expanduser()
    if filename is None:
        filename = posixpath.basename(urllib.request.urlparse(url).path)
    if not filename or "/" in filename or filename in (".", ".."):
        raise ValueError(f"filename={filename!r} is not allowed: must be a plain file name")
    final = dest_dir / filename
    stale: DataError | None = None
    if final.is_file():
        try:
            _check_md5(final, expected_md5)
            return final
        except DataError as e:
            stale = e  # corrupt or altered: download again and replace it once verified
    dest_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_parts(dest_dir, f".{filename}.")
    try:
        return _download(url, dest_dir, final, expected_md5, expected_size, timeout, progress)
    except DataError as e:
        if stale is None:
            raise
        raise DataError(f"{e} The file already in the cache was not used: {stale}") from e


#: A temporary ``.part`` file or folder untouched this long is a killed download's or extraction's.
STALE_PART_SECONDS = 600.0


def _remove_stale_parts(folder: Path, prefix: str) -> None:
    """Delete ``<prefix>*.part`` files and folders in ``folder`` not modified for
    ``STALE_PART_SECONDS`` (left by a killed process; a live one keeps writing to its own)."""
    now = time.time()
    for part in folder.glob(f"{glob.escape(prefix)}*.part"):
        try:
            if now - part.stat().st_mtime < STALE_PART_SECONDS:
                continue
            if part.is_dir() and not part.is_symlink():
                shutil.rmtree(part)
            else:
                part.unlink()
        except OSError:
            pass  # another process removed it, or it cannot be: it is only left-over space


def _download(url: str, dest_dir: Path, final: Path, expected_md5: str, expected_size: int | None, timeout: float,
              progress: bool) -> Path:
    """The download itself: a temporary ``.part`` file, checked, then renamed to ``final``."""
    filename = final.name
    fd, tmp_name = tempfile.mkstemp(dir=dest_dir, prefix=f".{filename}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        if hasattr(os, "fchmod"):  # the mode of a plainly created file (umask), not mkstemp's 0o600
            os.fchmod(fd, new_file_mode())
        h, size = hashlib.md5(), 0
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    total = response.headers.get("Content-Length") or expected_size
                    with tqdm(total=int(total) if total else None, unit="B", unit_scale=True, unit_divisor=1024,
                              desc=f"downloading {filename}", disable=not progress, file=sys.stderr,
                              mininterval=0.5) as bar:
                        for chunk in iter(lambda: response.read(_CHUNK), b""):
                            out.write(chunk)
                            h.update(chunk)
                            size += len(chunk)
                            bar.update(len(chunk))
            except (urllib.error.URLError, OSError) as e:
                raise DataError(
                    f"could not download {url}: {e}. Offline? Set {ENV_VAR} to a local copy."
                ) from e
        if expected_size is not None and size != expected_size:
            raise DataError(
                f"{url}: downloaded {size} bytes, expected {expected_size}; nothing was kept."
            )
        if h.hexdigest() != expected_md5.lower():
            raise DataError(
                f"{url}: md5 mismatch: expected {expected_md5.lower()}, got {h.hexdigest()} "
                f"({size} bytes); nothing was kept."
            )
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return final


def _member_basename(member: tarfile.TarInfo, archive: Path) -> str | None:
    """The file name of a safe archive member, ``None`` for the top directory; else raise."""
    name = member.name
    parts = Path(posixpath.normpath(name)).parts if name else ()
    unsafe = (
        not name
        or name.startswith(("/", "\\"))
        or "\\" in name
        or ".." in name.split("/")
        or not parts
        or parts[0] != CIFAR10_DIRNAME
        or len(parts) > 2
    )
    if not unsafe and len(parts) == 1 and member.isdir():
        return None
    if not unsafe and len(parts) == 2 and member.isreg() and not parts[1].startswith("."):
        if member.size > _MAX_MEMBER_BYTES:
            raise DataError(
                f"{archive}: member {name!r} is {member.size} bytes, over the "
                f"{_MAX_MEMBER_BYTES} byte limit"
            )
        return parts[1]
    raise DataError(
        f"{archive}: unsafe or unexpected member {name!r} (type {member.type!r}): only regular "
        f"files directly under {CIFAR10_DIRNAME}/ are allowed; nothing was extracted"
    )


def _iter_archive(archive: Path):
    """Yield ``(basename, bytes)`` of each safe member file; :class:`DataError` on any problem."""
    try:
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf:
                base = _member_basename(member, archive)
                if base is None:
                    continue
                f = tf.extractfile(member)
                data = f.read() if f is not None else b""
                if len(data) != member.size:
                    raise DataError(f"{archive}: member {member.name!r} is truncated")
                yield base, data
    except DataError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise DataError(
            f"{archive}: not a readable gzip'd tar archive (truncated or corrupt): "
            f"{type(e).__name__}: {e}"
        ) from e


def extract_archive(
    archive: str | os.PathLike,
    dest_dir: str | os.PathLike,
    *,
    expected_md5: str = CIFAR10_MD5,
) -> Path:
    """Verify ``archive``'s md5, then extract its ``cifar-10-batches-py/`` into ``dest_dir``.

    Safe extraction: members are checked (regular files directly under ``cifar-10-batches-py/``
    only, see the module docstring) and written by this function (never ``tarfile.extractall``)
    into a temporary directory inside ``dest_dir``, which is renamed to
    ``dest_dir/cifar-10-batches-py`` only once every member is written and all six batch files
    are present. On any failure nothing is left behind. If the target already exists it is
    returned unchanged. Returns ``dest_dir/cifar-10-batches-py``.
    """
    archive, dest_dir = Path(archive).expanduser(), Path(dest_dir).expanduser()
    target = dest_dir / CIFAR10_DIRNAME
    if target.is_dir():
        return target
    _check_md5(archive, expected_md5)
    dest_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_parts(dest_dir, f".{CIFAR10_DIRNAME}.")
    tmp = Path(tempfile.mkdtemp(dir=dest_dir, prefix=f".{CIFAR10_DIRNAME}.", suffix=".part"))
    try:
        staged = tmp / CIFAR10_DIRNAME
        staged.mkdir()
        for base, data in _iter_archive(archive):
            (staged / base).write_bytes(data)
        missing = [n for n in _BATCH_FILES if not (staged / n).is_file()]
        if missing:
            raise DataError(f"{archive}: missing {', '.join(missing)}; nothing was extracted")
        try:
            os.rename(staged, target)
        except OSError:
            if not target.is_dir():  # not a concurrent extraction that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# --------------------------------------------------------------------------------------------
# Finding the data
# --------------------------------------------------------------------------------------------


def _locate(path: Path) -> Path | None:
    """The batch directory or archive ``path`` designates, or ``None``."""
    if path.is_file():
        return path
    if path.is_dir():
        if (path / CIFAR10_DIRNAME).is_dir():
            return path / CIFAR10_DIRNAME
        if any((path / n).is_file() for n in _BATCH_FILES):
            return path
        if (path / CIFAR10_ARCHIVE).is_file():
            return path / CIFAR10_ARCHIVE
    return None


def _looked_in(path: Path) -> list[str]:
    return [
        f"{path / CIFAR10_DIRNAME}/ (a directory holding {CIFAR10_DIRNAME}/)",
        f"{path}/ (the batch files data_batch_1..5, test_batch themselves)",
        f"{path / CIFAR10_ARCHIVE} (the official archive; or {path} as the archive itself)",
    ]


def _not_found(
    what: str, looked: list[str], cache_dir: Path, download_hint: str | None = "pass"
) -> DatasetNotFoundError:
    lines = "\n".join(f"  - {p}" for p in looked)
    return DatasetNotFoundError(
        f"CIFAR-10 not found ({what}). Looked in:\n{lines}\n"
        f"To fix: set the environment variable {ENV_VAR} to a directory containing "
        f"{CIFAR10_DIRNAME}/, to that directory itself, or to {CIFAR10_ARCHIVE} (or pass root=); "
        f"the official archive is {CIFAR10_URL} ({CIFAR10_SIZE} bytes, md5 {CIFAR10_MD5})."
        + (f" Or {download_hint} download=True to download and verify it into {cache_dir}." if download_hint else "")
    )


def _make_cache(cache: Path, cache_dir) -> None:
    """Create the cache folder ``cache`` a download goes to, or raise :class:`DataError` naming
    where it comes from (``cache_dir=``, ``$XDG_CACHE_HOME`` or the home folder): a cache path
    through a file, or an unwritable one, is the user's to fix (the data cannot go anywhere else
    without downloading it again at every run)."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        xdg = os.environ.get("XDG_CACHE_HOME")
        what = (f"cache_dir={str(cache_dir)!r}" if cache_dir is not None
                else f"XDG_CACHE_HOME={xdg!r}" if xdg else "the user cache folder ~/.cache")
        raise DataError(
            f"{what} is not allowed: the CIFAR-10 cache folder {cache} cannot be created there "
            f"({type(e).__name__}: {e.strerror or e}); point it to a writable folder, or set {ENV_VAR} "
            "to a local copy of CIFAR-10"
        ) from None


def find_cifar10(
    root: str | os.PathLike | None = None,
    *,
    download: bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """Resolve where CIFAR-10 is: a ``cifar-10-batches-py`` directory or an archive path.

    Order: ``root``, then ``$ITERLIN_CIFAR10``, then ``cache_dir`` (extracting a cached archive
    after verifying it), then a download into ``cache_dir`` if :func:`download_allowed`
    (``download``: True, False, or None for ``$ITERLIN_DOWNLOAD``; see the module docstring).
    Raises :class:`DatasetNotFoundError` listing every path looked in.
    """
    explicit = download is not None
    download = download_allowed(download)
    cache = Path(user_cache_dir() if cache_dir is None else cache_dir).expanduser()
    if root is not None:
        path = Path(os.path.abspath(Path(root).expanduser()))
        found = _locate(path)
        if found is None:
            raise _not_found(f"root={str(root)!r}", _looked_in(path), cache, "pass root=None and")
        return found
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(os.path.abspath(Path(env).expanduser()))
        found = _locate(path)
        if found is None:
            raise _not_found(
                f"{ENV_VAR}={env!r}", _looked_in(path), cache, f"unset {ENV_VAR} and pass"
            )
        return found
    looked = [f"${ENV_VAR}: not set"]
    if (cache / CIFAR10_DIRNAME).is_dir():
        return cache / CIFAR10_DIRNAME
    looked.append(f"{cache / CIFAR10_DIRNAME}/ (cache: extracted copy)")
    archive = cache / CIFAR10_ARCHIVE
    if download:
        _make_cache(cache, cache_dir)
        # Module constants are read at call time (tests point them at a tiny local archive).
        try:
            archive = download_archive(
                CIFAR10_URL,
                cache,
                filename=CIFAR10_ARCHIVE,
                expected_md5=CIFAR10_MD5,
                expected_size=CIFAR10_SIZE,
                progress=True,
            )
        except DataError as e:
            if explicit:
                raise
            looked.append(f"{archive} (cache: archive)")
            looked.append(f"{CIFAR10_URL} (download, as {DOWNLOAD_ENV_VAR} allows: {e})")
            raise _not_found("the download failed", looked, cache, None) from e
    if archive.is_file():
        return extract_archive(archive, cache, expected_md5=CIFAR10_MD5)
    looked.append(f"{archive} (cache: archive)")
    if explicit:
        raise _not_found("download=False", looked, cache)
    raise _not_found(f"{DOWNLOAD_ENV_VAR}={os.environ.get(DOWNLOAD_ENV_VAR)!r}", looked, cache,
                     f"unset {DOWNLOAD_ENV_VAR} or pass")


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def _read_batch_file(path: Path) -> bytes:
    """The bytes of an extracted batch file, at most ``_MAX_MEMBER_BYTES`` (as archive members).

    The size is checked before anything is read, and the read itself stops one byte past the
    limit, so a file that grows meanwhile is refused too, never read whole.
    """
    limit = _MAX_MEMBER_BYTES  # read at call time (tests lower it)

    def too_big(size: str) -> DataError:
        return DataError(
            f"{path}: batch file is {size} bytes, over the {limit} byte limit (an official CIFAR-10 batch "
            "file is about 31 MB); it was not read"
        )

    try:
        size = path.stat().st_size
        if size > limit:
            raise too_big(str(size))
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise DataError(f"{path}: cannot read the batch file ({type(e).__name__}: {e})") from e
    if len(raw) > limit:
        raise too_big("more than " + str(limit))
    return raw


def _parse_batch(
    name: str, raw: bytes, where: str, files: Mapping[str, FileRecord]
) -> tuple[np.ndarray, np.ndarray]:
    """Verify and decode one batch file: ``(images uint8 (n, 32, 32, 3), labels int32 (n,))``."""
    label = f"{where}/{name}"
    record = files.get(name)
    if record is not None and len(raw) == record.size:
        actual = hashlib.md5(raw).hexdigest()
        if actual != record.md5.lower():
            raise DataError(
                f"{label}: has the official size ({record.size} bytes) but md5 {actual}, "
                f"expected the official {record.md5.lower()}: the file is corrupt or altered"
            )
    batch = safe_unpickle(raw, name=label)
    if not isinstance(batch, dict):
        raise DataError(f"{label}: expected a dict, got {type(batch).__name__}")
    if b"data" not in batch or b"labels" not in batch:
        raise DataError(
            f"{label}: expected keys b'data' and b'labels', found {sorted(map(repr, batch))}"
        )
    data, labels = batch[b"data"], batch[b"labels"]
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != _IMAGE_BYTES
        or not 1 <= data.shape[0] <= _MAX_PER_FILE
    ):
        got = (
            f"{data.dtype} array of shape {data.shape}"
            if isinstance(data, np.ndarray)
            else type(data).__name__
        )
        raise DataError(
            f"{label}: b'data' must be a uint8 array of shape (n, {_IMAGE_BYTES}) with "
            f"1 <= n <= {_MAX_PER_FILE}; got {got}"
        )
    n = data.shape[0]
    if not isinstance(labels, list) or len(labels) != n:
        got = f"list of length {len(labels)}" if isinstance(labels, list) else type(labels).__name__
        raise DataError(f"{label}: b'labels' must be a list of {n} ints (one per image); got {got}")
    if not all(type(v) is int for v in labels):
        raise DataError(f"{label}: b'labels' must contain only ints")
    y = np.asarray(labels, dtype=np.int64)
    if y.size and (y.min() < 0 or y.max() > 9):
        raise DataError(f"{label}: labels must lie in 0..9; found {y.min()}..{y.max()}")
    # Rows are channel-major: 1024 red, then 1024 green, then 1024 blue values, each row-major.
    x = data.reshape(n, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(x), y.astype(np.int32)


def _per_file_counts(n: int, n_files: int = 5) -> list[int]:
    return [n // n_files + (1 if i < n % n_files else 0) for i in range(n_files)]


def _check_count(value: Any, name: str) -> int | None:
    return None if value is None else check_int(value, name, minimum=0)


def read_cifar10(
    source: str | os.PathLike,
    n_train: int | None = None,
    n_test: int | None = None,
    *,
    archive_md5: str = CIFAR10_MD5,
    files: Mapping[str, FileRecord] = CIFAR10_FILES,
) -> Dataset:
    """Read, verify and subset CIFAR-10 from a batch directory or an archive; raw ``uint8``.

    ``source``: a ``cifar-10-batches-py`` directory, or an archive (md5 must be
    ``archive_md5``; read in memory). ``files`` gives the official size/md5 per batch file
    (a file of that size must have that md5). Subset rule (module docstring): file ``i`` gives its
    first ``n_train // 5 + (i < n_train % 5)`` images; test images are the first ``n_test``.
    ``None`` means every image available.

    Returns ``Dataset`` with ``x`` uint8 ``(N, 32, 32, 3)`` NHWC and ``y`` int32 ``(N,)``.
    Raises ``ValueError`` naming ``n_train``/``n_test`` if the copy holds too few images.
    """
    n_train = _check_count(n_train, "n_train")
    n_test = _check_count(n_test, "n_test")
    src = Path(source).expanduser()
    parsed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if src.is_file():
        _check_md5(src, archive_md5)
        for base, raw in _iter_archive(src):
            if base in _BATCH_FILES:
                parsed[base] = _parse_batch(base, raw, f"{src}:{CIFAR10_DIRNAME}", files)
        missing = [n for n in _BATCH_FILES if n not in parsed]
        if missing:
            raise DataError(
                f"{src}: archive lacks " + ", ".join(f"{CIFAR10_DIRNAME}/{n}" for n in missing)
            )
    elif src.is_dir():
        missing = [n for n in _BATCH_FILES if not (src / n).is_file()]
        if missing:
            raise DataError(f"{src}: missing batch file(s) {', '.join(missing)}")
        for name in _BATCH_FILES:
            parsed[name] = _parse_batch(name, _read_batch_file(src / name), str(src), files)
    else:
        raise DatasetNotFoundError(f"source={str(source)!r}: no such file or directory")

    counts = [parsed[n][0].shape[0] for n in _TRAIN_FILES]
    if n_train is None:
        take = counts
    else:
        take = _per_file_counts(n_train)
        if any(t > c for t, c in zip(take, counts, strict=True)):
            most = min(5 * c + i for i, c in enumerate(counts))
            raise ValueError(
                f"n_train={n_train} is not allowed: this copy ({src}) has "
                f"{'/'.join(map(str, counts))} images in data_batch_1..5, so n_train must be "
                f"<= {most} (the rule takes n_train // 5, plus one for the first n_train % 5 "
                "files, from each file)"
            )
    n_test_avail = parsed[_TEST_FILE][0].shape[0]
    if n_test is None:
        n_test = n_test_avail
    elif n_test > n_test_avail:
        raise ValueError(
            f"n_test={n_test} is not allowed: this copy ({src}) has {n_test_avail} images in "
            f"test_batch, so n_test must be <= {n_test_avail}"
        )
    x_train = np.concatenate([parsed[n][0][:t] for n, t in zip(_TRAIN_FILES, take, strict=True)])
    y_train = np.concatenate([parsed[n][1][:t] for n, t in zip(_TRAIN_FILES, take, strict=True)])
    x_test, y_test = parsed[_TEST_FILE][0][:n_test], parsed[_TEST_FILE][1][:n_test]
    return Dataset(x_train, y_train, np.ascontiguousarray(x_test), np.ascontiguousarray(y_test))


class Batches(NamedTuple):
    """The installed batch files, verified and decoded (:func:`read_batches`): ``train`` holds
    ``(x, y)`` of ``data_batch_1`` .. ``data_batch_5`` in order, ``test`` that of ``test_batch``; ``x``
    uint8 ``(n, 32, 32, 3)`` NHWC, ``y`` int32 ``(n,)``. Training image ``k`` of ``data_batch_{f+1}`` has
    the official index ``10000 f + k`` (the same on the full archive and on a per-file-prefix copy)."""

    train: tuple[tuple[np.ndarray, np.ndarray], ...]
    test: tuple[np.ndarray, np.ndarray]

    @property
    def counts(self) -> tuple[int, ...]:
        """The installed images of each training file."""
        return tuple(int(x.shape[0]) for x, _ in self.train)


def read_batches(
    source: str | os.PathLike,
    *,
    archive_md5: str = CIFAR10_MD5,
    files: Mapping[str, FileRecord] = CIFAR10_FILES,
) -> Batches:
    """Every installed image of a batch directory or an archive, per file (:class:`Batches`), verified
    as :func:`read_cifar10` verifies them (which reads the same files, then takes its subset)."""
    src = Path(source).expanduser()
    parsed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if src.is_file():
        _check_md5(src, archive_md5)
        for base, raw in _iter_archive(src):
            if base in _BATCH_FILES:
                parsed[base] = _parse_batch(base, raw, f"{src}:{CIFAR10_DIRNAME}", files)
        missing = [n for n in _BATCH_FILES if n not in parsed]
        if missing:
            raise DataError(f"{src}: archive lacks " + ", ".join(f"{CIFAR10_DIRNAME}/{n}" for n in missing))
    elif src.is_dir():
        missing = [n for n in _BATCH_FILES if not (src / n).is_file()]
        if missing:
            raise DataError(f"{src}: missing batch file(s) {', '.join(missing)}")
        for name in _BATCH_FILES:
            parsed[name] = _parse_batch(name, _read_batch_file(src / name), str(src), files)
    else:
        raise DatasetNotFoundError(f"source={str(source)!r}: no such file or directory")
    return Batches(tuple(parsed[n] for n in _TRAIN_FILES), parsed[_TEST_FILE])


#: The number of images in each official training file (training image k of data_batch_{f+1} has
#: the official index ``TRAIN_FILE_SIZE * f + k``).
TRAIN_FILE_SIZE = 10000


def train_index(n_train: int | None, counts) -> np.ndarray:
    """The official indices (``TRAIN_FILE_SIZE * f + k``) of the training images that
    :func:`read_cifar10` takes for ``n_train`` (the subset rule: the first ``n_train // 5`` (+1 for the
    first ``n_train % 5`` files) of each file, in file order; None: all), from a copy holding
    ``counts`` images per training file; int64 ``(n_train,)``, in the order of ``x_train``."""
    counts = [int(c) for c in counts]
    take = counts if n_train is None else _per_file_counts(check_int(n_train, "n_train", minimum=0))
    if any(t > c for t, c in zip(take, counts, strict=True)):
        raise ValueError(f"n_train={n_train} is not allowed: this copy holds {'/'.join(map(str, counts))} images in "
                         "data_batch_1..5, fewer than the subset rule takes from one of them")
    return np.concatenate([TRAIN_FILE_SIZE * f + np.arange(t, dtype=np.int64) for f, t in enumerate(take)])


def standardise(x: np.ndarray) -> np.ndarray:
    """``(x / 255 − CIFAR10_MEAN) / CIFAR10_STD`` per channel (last axis), as float32.

    x: ``(..., 3)`` uint8 images (NHWC). Returns float32 of the same shape.
    """
    x = np.asarray(x)
    if x.dtype != np.uint8 or x.ndim < 1 or x.shape[-1] != 3:
        raise ValueError(
            f"x of dtype {x.dtype} and shape {x.shape} is not allowed: x must be uint8 images "
            "with 3 channels last (NHWC)"
        )
    return (x.astype(np.float32) / np.float32(255.0) - CIFAR10_MEAN) / CIFAR10_STD


def load_cifar10(
    n_train: int | None = None,
    n_test: int | None = None,
    *,
    root: str | os.PathLike | None = None,
    download: bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Dataset:
    """CIFAR-10, verified and standardised.

    :func:`find_cifar10` → :func:`read_cifar10` → :func:`standardise`.

    Returns ``Dataset`` with ``x_train`` ``(n_train, 32, 32, 3)`` float32 NHWC (per-channel
    standardised with :data:`CIFAR10_MEAN`/:data:`CIFAR10_STD`), ``y_train`` ``(n_train,)``
    int32, and likewise ``x_test``/``y_test``. The same ``n_train``/``n_test`` give the same
    images from the full dataset and from a per-file-prefix subset such as CI's.
    """
    n_train = _check_count(n_train, "n_train")
    n_test = _check_count(n_test, "n_test")
    source = find_cifar10(root, download=download, cache_dir=cache_dir)
    raw = read_cifar10(source, n_train, n_test, archive_md5=CIFAR10_MD5, files=CIFAR10_FILES)
    return Dataset(standardise(raw.x_train), raw.y_train, standardise(raw.x_test), raw.y_test)

