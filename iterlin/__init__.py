"""iterlin: iterative linearisation in JAX (Goldwaser & Ge), the executable edition."""

from .checkpoint import CheckpointError
from .linearise import linearise, linearised_apply
from .losses import get_loss
from .training import TrainState, fit, init_state, make_step, train, train_sweep
from .tree import tree_allclose, tree_stack

__all__ = [
    "CheckpointError",
    "TrainState",
    "fit",
    "get_loss",
    "init_state",
    "linearise",
    "linearised_apply",
    "make_step",
    "train",
    "train_sweep",
    "tree_allclose",
    "tree_stack",
]
__version__ = "0.1.0"
