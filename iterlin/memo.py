"""Memos of step factories: one Python function per setting, so that ``jax.jit`` reuses its programs.

``jax.jit`` caches compiled programs on the function it is given (and its static arguments). A
factory such as :func:`iterlin.training.make_step` returns a fresh closure at every call, which jit
would trace again; :func:`memoise` makes the factory return the same closure for the same
arguments. The memo is bounded (:data:`CACHE_SIZE` entries, least recently used dropped first), so
what it holds alive (``apply_fn``, optimizers, executables) is bounded too.
"""

from __future__ import annotations

import functools
from typing import Callable

__all__ = ["CACHE_SIZE", "memoise"]

#: How many entries each memo of step functions and of compiled programs keeps (the least recently
#: used is dropped first): what they hold alive (``apply_fn``, optimizers, executables) is bounded.
CACHE_SIZE = 64


def memoise(fn: Callable) -> Callable:
    """``fn`` memoised on its positional arguments (at most :data:`CACHE_SIZE` entries, LRU).

    Arguments are compared as Python compares them: functions (``apply_fn``, ``refresh``, the
    ``init``/``update`` functions of an optax transformation, which is a tuple of them) by identity,
    numbers (typed: 1 is not 1.0), strings, tuples and :class:`~iterlin.losses.Loss` by value; so a
    different optimizer object, loss or option never shares an entry. Unhashable arguments bypass the
    memo (a fresh result, as without it). ``fn.cache_clear()`` empties it.
    """
    cached = functools.lru_cache(maxsize=CACHE_SIZE, typed=True)(fn)

    @functools.wraps(fn)
    def memoised(*args):
        try:
            hash(args)
        except TypeError:
            return fn(*args)
        return cached(*args)

    memoised.cache_clear = cached.cache_clear
    memoised.cache_info = cached.cache_info
    return memoised
