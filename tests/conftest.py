"""Fixtures shared by the whole test suite.

- ``x64``: float64 enabled for one test, the previous setting restored afterwards.
- ``ITERLIN_CIFAR10`` and ``cifar_subset_path``: the repository's ``conftest.py`` (shared with
  the notebooks' nbval run).
- ``ITERLIN_DOWNLOAD=0`` for the session: no test downloads CIFAR-10 from the network.
- JAX's persistent compilation cache (:mod:`iterlin.repro.compilation`) is on for the whole suite, so a
  rerun on a warm machine skips XLA's compilations; ``ITERLIN_COMPILATION_CACHE=0`` turns it off.
- After a test module, JAX's in-memory caches are cleared (``jax.clear_caches``) when the process
  holds over half the kernel's memory maps per process. Every executable XLA compiles on the CPU
  stays mapped into the process while a cache holds it (about three maps each); a pytest-xdist
  worker runs about a thousand tests, which passed Linux's limit (``vm.max_map_count``, 65,530
  here), and LLVM then failed with "Cannot allocate memory". Clearing frees them; the next module
  recompiles what it uses (or loads it from the persistent cache), so it is done only when needed
  (after every module where the count cannot be read).
- XLA compiles the suite's programs at its backend optimisation level 0 in the test processes,
  not in the subprocesses they start (``XLA_FLAGS`` that already name
  ``--xla_backend_optimization_level`` keep theirs): the suite's time is mostly XLA compiling
  programs that run a few tiny steps, which that level compiles faster (the README gives the
  measurement). It changes the machine code XLA emits, and so the rounding of float32 results,
  not what a program computes: a test compares two routes computed at the same level. The book,
  ``make test``'s nbval and the doctests run at XLA's default.
"""

from __future__ import annotations

import os

import jax
import pytest


def _compile_at_level_0() -> None:
    """This process's XLA compiles at backend optimisation level 0, its subprocesses at theirs.

    XLA reads ``XLA_FLAGS`` once per process, by its first compilation; so the flag is set, one
    program compiled, and ``XLA_FLAGS`` put back as it was. The notebooks, CLI runs and benchmarks
    that tests start as subprocesses then compile as a user's do (and reuse the programs that CI's
    book phase stored in the compilation cache at the default level)."""
    before = os.environ.get("XLA_FLAGS")
    if "xla_backend_optimization_level" in (before or ""):
        return
    os.environ["XLA_FLAGS"] = ((before or "") + " --xla_backend_optimization_level=0").strip()
    try:
        jax.jit(lambda x: x + 1)(0.0).block_until_ready()
    finally:
        if before is None:
            del os.environ["XLA_FLAGS"]
        else:
            os.environ["XLA_FLAGS"] = before


_compile_at_level_0()  # before iterlin is imported: nothing may compile before it

from iterlin import precision  # noqa: E402
from iterlin.repro.compilation import enable_compilation_cache  # noqa: E402

enable_compilation_cache()


def _read_int(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _memory_maps() -> int | None:
    """The memory maps this process holds (Linux: lines of /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


#: Clear JAX's caches once a process holds more maps than this (half the kernel's limit).
MAP_BUDGET = (_read_int("/proc/sys/vm/max_map_count") or 65_530) // 2


@pytest.fixture(scope="module", autouse=True)
def _clear_jax_caches_after_module():
    """Free the executables compiled so far once they hold half the allowed maps (module docstring)."""
    yield
    maps = _memory_maps()
    if maps is None or maps > MAP_BUDGET:
        jax.clear_caches()


@pytest.fixture
def x64():
    """Enable ``jax_enable_x64`` for the duration of one test, then restore the previous value."""
    with precision.x64(True):
        yield


@pytest.fixture(scope="session", autouse=True)
def _no_downloads():
    """``ITERLIN_DOWNLOAD=0`` for the session: no test touches the network (tests of the download
    route turn it back on against a local stand-in for the server)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ITERLIN_DOWNLOAD", "0")
        yield


