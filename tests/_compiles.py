"""Counting JAX's traces and lowerings in a block (``with compilations() as seen``), through
``jax.monitoring``. Both events happen before the persistent compilation cache is consulted, so a
warm disk cache cannot hide a recompile. Shared by test_compile_once and test_relin."""

from __future__ import annotations

from contextlib import contextmanager

import jax

_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
}
_RECORDING: list[list] = []


def _listener(event, duration, **kwargs):
    if event in _EVENTS and _RECORDING:
        _RECORDING[-1].append((_EVENTS[event], kwargs.get("fun_name")))


jax.monitoring.register_event_duration_secs_listener(_listener)


@contextmanager
def compilations():
    """Yield a list that collects ``(kind, function name)`` for every trace and lowering inside."""
    seen: list = []
    _RECORDING.append(seen)
    try:
        yield seen
    finally:
        _RECORDING.pop()
