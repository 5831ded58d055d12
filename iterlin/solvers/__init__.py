"""Solvers of the linearised problems: damped Gauss–Newton (Sec. 4), the closed-form
gradient flow of a linear model under the squared loss, the Adam-solved route of Fig. 8,
and the function-space flow under a general loss."""


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
