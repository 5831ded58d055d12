"""JAX's persistent compilation cache, per user, every entry signed by the user who wrote it.

A compiled XLA program is written to disk and read back by a later process that compiles the same
program (same computation, shapes, devices, JAX and XLA versions), so rerunning a notebook, the
CLI or the test suite on a warm machine skips XLA's compilation (tracing still happens).

Where: ``$ITERLIN_COMPILATION_CACHE`` if set to a folder; else ``jax/`` in the user's cache folder
(:func:`iterlin.data.user_cache_dir`: ``$XDG_CACHE_HOME/iterlin/jax`` or
``~/.cache/iterlin/jax``), never a checkout's ``.cache`` that other users may share.
``ITERLIN_COMPILATION_CACHE=0`` (or ``off``/``false``/``no``) turns it off. A folder already set
through JAX's own ``jax_compilation_cache_dir`` (e.g. ``JAX_COMPILATION_CACHE_DIR``) is used, with
the same signed entries.

Why signed: a cache entry is native code that JAX loads into the process, and JAX trusts whatever
file it finds under a key. So iterlin stores each entry as ``<key>-iterlin``: a header, an
HMAC-SHA256 of (key, program) under a secret key only this user can read
(``<user cache folder>/compilation-key``, mode 0600, created on first use), then the program. An
entry is handed to JAX only when its HMAC verifies: a truncated or half-written entry (a full
disk), an entry of another program copied under this key, or one written by anyone without the
secret is a miss: it is deleted (where allowed) and the program is compiled and stored again.
Entries are written atomically (a temporary file renamed into place), so a killed or failed write
leaves none. Where this cannot be set up (the folder or the secret cannot be made or is not this
user's, or this JAX lacks the internals it uses), a warning says why and the run goes on without
the cache: it is only a speed-up.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
import warnings
from pathlib import Path

from ..data import user_cache_dir

__all__ = ["ENV_VAR", "OFF", "MIN_COMPILE_SECONDS", "CompilationCacheWarning", "SignedCache", "compilation_cache_dir",
           "enable_compilation_cache"]

ENV_VAR = "ITERLIN_COMPILATION_CACHE"
#: Values of :data:`ENV_VAR` that turn the cache off.
OFF = ("0", "off", "false", "no")
#: Programs that compile faster than this are not written (JAX's default is 1 s; most of this
#: project's programs take 0.2–5 s on a CPU).
MIN_COMPILE_SECONDS = 0.2

#: The first bytes of every entry iterlin writes (then a 32-byte HMAC, then JAX's bytes).
MAGIC = b"iterlin-xla-1\n"
SUFFIX = "-iterlin"
KEY_FILE = "compilation-key"


class CompilationCacheWarning(UserWarning):
    """The compilation cache is off for this run, or an entry of it was refused."""


def _warn(message: str) -> None:
    warnings.warn(message, CompilationCacheWarning, stacklevel=3)


def compilation_cache_dir() -> Path | None:
    """The folder the cache uses (module docstring), or None when :data:`ENV_VAR` turns it off."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env.lower() in OFF:
        return None
    return Path(env).expanduser() if env else user_cache_dir() / "jax"


def _secret(path: Path) -> bytes:
    """The user's signing key at ``path``: created (0600) when missing; refused (OSError) when it is
    not a regular file of this user's that only this user can read and write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(path):  # a new key, complete before it appears (linked: a concurrent one wins)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()) \
                or st.st_mode & 0o077:
            raise PermissionError(f"{path} is not a private file of this user's (mode {oct(st.st_mode & 0o777)})")
        key = f.read()
    if len(key) != 32:
        raise OSError(f"{path} does not hold a 32-byte key")
    return key


def _jax_cache_interface():
    from jax._src import compilation_cache_interface

    return compilation_cache_interface.CacheInterface


class SignedCache:
    """A JAX cache (``get``/``put`` of bytes by key) whose entries are signed (module docstring).

    Built by :func:`enable_compilation_cache` as a subclass of JAX's ``CacheInterface``.
    """

    def __init__(self, path: str | os.PathLike, secret: bytes):
        self.path = self._path = Path(path)
        self._secret = secret

    def _file(self, key: str) -> Path:
        if not key or not all(c.isalnum() or c in "-_." for c in key):
            raise ValueError(f"compilation cache key {key!r} is not allowed")
        return self.path / f"{key}{SUFFIX}"

    def _mac(self, key: str, value: bytes) -> bytes:
        return hmac.new(self._secret, key.encode() + b"\0" + value, hashlib.sha256).digest()

    def get(self, key: str) -> bytes | None:
        path = self._file(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            _warn(f"compilation cache entry {path} is unreadable ({type(e).__name__}: {e}); compiling instead")
            return None
        head = len(MAGIC) + 32
        value = data[head:]
        if data[:len(MAGIC)] == MAGIC and hmac.compare_digest(data[len(MAGIC):head], self._mac(key, value)):
            return value
        try:
            path.unlink()
            done = "deleted it"
        except OSError as e:
            done = f"could not delete it ({type(e).__name__})"
        _warn(f"compilation cache entry {path} is not this program's as this user wrote it (truncated, altered or "
              f"copied from another key or user); {done} and compiling instead")
        return None

    def put(self, key: str, value: bytes) -> None:
        path = self._file(key)
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path, prefix=f".{key}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + self._mac(key, value) + value)
            os.replace(tmp, path)
        except OSError as e:  # a full or read-only folder: the program is simply not cached
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
            _warn(f"could not write compilation cache entry {path} ({type(e).__name__}: {e}); not cached")


def enable_compilation_cache() -> Path | None:
    """Turn the signed persistent compilation cache on (idempotent); return its folder, or None when
    off (by :data:`ENV_VAR`, or with a :class:`CompilationCacheWarning` when it cannot be set up).

    Call it before the first compilation that should be cached: the command line, notebook runs
    (:func:`iterlin.experiments.run`) and the test suite do.
    """
    import jax

    try:
        from jax._src import compilation_cache as jax_cache

        interface = _jax_cache_interface()
    except ImportError as e:
        _warn(f"this JAX has no compilation cache internals iterlin can check ({e}); running without the cache")
        return None
    current = jax.config.jax_compilation_cache_dir
    installed = getattr(jax_cache, "_cache", None)
    if current and isinstance(installed, SignedCache) and installed.path == Path(current):
        return Path(current)
    path = Path(current) if current else compilation_cache_dir()
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
        secret = _secret(user_cache_dir() / KEY_FILE)
    except OSError as e:
        _warn(f"the compilation cache in {path} cannot be used ({type(e).__name__}: {e}); running without it "
              f"(set {ENV_VAR} to a writable folder of yours, or to 0)")
        return None
    cache = type("SignedJaxCache", (SignedCache, interface), {})(path, secret)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    try:
        with jax_cache._cache_initialized_mutex:
            jax_cache._cache = cache
            jax_cache._cache_initialized = True
    except AttributeError as e:
        jax.config.update("jax_compilation_cache_dir", None)
        _warn(f"this JAX's compilation cache cannot be given signed entries ({e}); running without it")
        return None
    return path
