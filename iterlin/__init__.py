"""iterlin: iterative linearisation in JAX (Goldwaser & Ge), the executable edition."""

from . import data, models, precision, relin
from .analysis import jacobian
from .solvers.adam_solve import train_adam_solved
from .checkpoint import CheckpointError
from .solvers.closed_form import (
    equivalent_damping,
    flow_filter,
    gd_filter,
    gn_filter,
    gradient_flow_limit,
    gradient_flow_outputs,
    gradient_flow_params,
    k_step_gd,
    residual_spectrum,
)
from .data import DataError, Dataset, load_cifar10, quintic
from .solvers.gauss_newton import (
    GaussNewtonState,
    gauss_newton_step,
    gauss_newton_train,
    init_gauss_newton_state,
    make_gauss_newton_step,
)
from .analysis.jacobian import flat_jacobian
from .linearise import linearise, linearised_apply
from .losses import get_loss, mse_targets
from .models import CNN, MLP, Model, ResNet18, cnn_features, count_params, make_model, quintic_model, torch_default_init
from .analysis.ntk import (
    empirical_ntk,
    empirical_ntk_fn,
    kernel_distance,
    kernel_tracker,
    ntk_vector_product,
    relinearisation_steps,
)
from .precision import x64
from .analysis.probes import (
    ProbeResult,
    filter_tracker,
    filters_to_image,
    first_layer_filters,
    fit_linear_probe,
    probe_tracker,
)
from .solvers import (
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
from .analysis.stability import (
    BoundRecord,
    bound_record,
    ggn_matvec,
    ggn_sharpness,
    ggn_top_eig,
    linear_model_sharpness,
    max_stable_lr,
    sharpness_recorder,
)
from .training import History, Metrics, TrainState, commit_step, fit, init_state, make_step, train, train_sweep
from .tree import tree_allclose, tree_size, tree_stack

__all__ = [
    "ggn_matvec",
    "ggn_sharpness",
    "max_stable_lr",
    "ggn_top_eig",
    "linear_model_sharpness",
    "sharpness_recorder",
    "bound_record",
    "BoundRecord",
    "empirical_ntk",
    "empirical_ntk_fn",
    "kernel_distance",
    "kernel_tracker",
    "ntk_vector_product",
    "relinearisation_steps",
    "ProbeResult",
    "filter_tracker",
    "filters_to_image",
    "first_layer_filters",
    "fit_linear_probe",
    "probe_tracker",
    "equivalent_damping",
    "flow_filter",
    "gd_filter",
    "gn_filter",
    "gradient_flow_limit",
    "gradient_flow_outputs",
    "gradient_flow_params",
    "k_step_gd",
    "residual_spectrum",
    "flat_jacobian",
    "gauss_newton_step",
    "gauss_newton_train",
    "make_gauss_newton_step",
    "init_gauss_newton_state",
    "GaussNewtonState",
    "DataError",
    "Dataset",
    "CNN",
    "MLP",
    "Model",
    "ResNet18",
    "cnn_features",
    "count_params",
    "data",
    "load_cifar10",
    "make_model",
    "quintic_model",
    "torch_default_init",
    "models",
    "jacobian",
    "precision",
    "relin",
    "quintic",
    "CheckpointError",
    "TrainState",
    "History",
    "Metrics",
    "commit_step",
    "fit",
    "get_loss",
    "mse_targets",
    "init_state",
    "linearise",
    "linearised_apply",
    "make_step",
    "train",
    "train_adam_solved",
    "train_sweep",
    "tree_allclose",
    "tree_size",
    "tree_stack",
    "x64",
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
__version__ = "0.1.0"
