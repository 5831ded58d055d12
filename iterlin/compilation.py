"""JAX's persistent compilation cache, in the project's cache folder.

A compiled XLA program is written to disk and read back by a later process that compiles the same
program (same computation, shapes, devices, JAX and XLA versions), so rerunning a notebook, the
CLI or the test suite on a warm machine skips XLA's compilation (tracing still happens).

Where: ``$ITERLIN_COMPILATION_CACHE`` if set to a folder; else ``jax/`` in
:func:`iterlin.cache.cache_root` (``<checkout>/.cache/jax`` inside a checkout, else
``$XDG_CACHE_HOME/iterlin/jax`` or ``~/.cache/iterlin/jax``). ``ITERLIN_COMPILATION_CACHE=0`` (or
``off``/``false``/``no``) turns it off. A folder already set through JAX's own
``jax_compilation_cache_dir`` (e.g. ``JAX_COMPILATION_CACHE_DIR``) is left as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from .cache import cache_root

__all__ = ["ENV_VAR", "OFF", "MIN_COMPILE_SECONDS", "compilation_cache_dir", "enable_compilation_cache"]

ENV_VAR = "ITERLIN_COMPILATION_CACHE"
#: Values of :data:`ENV_VAR` that turn the cache off.
OFF = ("0", "off", "false", "no")
#: Programs that compile faster than this are not written (JAX's default is 1 s; most of this
#: project's programs take 0.2–5 s on a CPU).
MIN_COMPILE_SECONDS = 0.2


def compilation_cache_dir() -> Path | None:
    """The folder the cache uses (module docstring), or None when :data:`ENV_VAR` turns it off."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env.lower() in OFF:
        return None
    return Path(env).expanduser() if env else cache_root() / "jax"


def enable_compilation_cache() -> Path | None:
    """Turn JAX's persistent compilation cache on (idempotent); return its folder, or None when off.

    Call it before the first compilation that should be cached: the command line, notebook runs
    (:func:`iterlin.experiments.run`) and the test suite do.
    """
    import jax

    current = jax.config.jax_compilation_cache_dir
    if current:
        return Path(current)
    path = compilation_cache_dir()
    if path is None:
        return None
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
