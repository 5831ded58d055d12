"""Solvers of the linearised problem: the gradient flow of the linear model under a general loss
(:mod:`iterlin.solvers.flow`)."""

from .flow import (
    FlowConfig,
    FlowResult,
    FlowRounds,
    FlowSolveError,
    IteratedFlow,
    flow_memory_bytes,
    flow_outputs,
    iterated_flow,
    linearised_flow,
)

__all__ = [
    "FlowConfig",
    "FlowResult",
    "FlowRounds",
    "FlowSolveError",
    "IteratedFlow",
    "flow_memory_bytes",
    "flow_outputs",
    "iterated_flow",
    "linearised_flow",
]
