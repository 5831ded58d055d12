"""Iterative linearisation (Eq. 3–4, Algorithm 1): the one training loop shared by every figure.

For t = 0, 1, …, steps − 1, with θ_s the current linearisation point:

    θ_{t+1} = θ_t − η ∇_θ L(f_lin_s(θ_t, X_t))       (Eq. 3; any optax transformation, not only SGD)
    if (t + 1) mod K = 0:  θ_s ← θ_{t+1}              (Eq. 4: re-linearise, "feature learning step")

where f_lin_s(θ, x) = f(θ_s, x) + J(θ_s, x)(θ − θ_s). The loss (softmax cross-entropy or MSE) is
applied to the linearised outputs, never linearised itself (Appendix A). K = 1 is ordinary (S)GD,
K = ∞ trains the linearisation at initialisation (fixed empirical NTK). The number of
re-linearisations so far, ⌊t/K⌋, is the paper's feature-learning proxy T/K (Definition 1).

Design:

* ``make_step`` returns a pure ``step(state, batch) -> (state, metrics)``. θ_s and K live in the
  :class:`TrainState`, so re-linearising never re-compiles and a sweep can ``vmap`` over K.
* When to re-linearise is a policy (:mod:`iterlin.relin`): ``K=3`` is ``relin.every(3)``, the rule
  above; ``relin.adaptive(tol)`` re-linearises when the linear model drifts from the network,
  ``relin.until_solved(...)`` when each linearisation is solved (Fig. 8). A policy's parameters
  live in ``TrainState.K`` and ``TrainState.policy`` (arrays), its decision is a pure function of
  them, so policies of one kind with different parameters are one (vmapped) program.
* The dataset is held on device; batches are drawn inside the compiled loop from a per-epoch
  permutation keyed by ``fold_in(key, epoch)``, and augmented on device keyed by ``fold_in(key, t)``.
  Batches are therefore a pure function of (key, t): every run of a sweep sees the same batches,
  and a resumed run sees exactly the batches it would have seen.
* Between evaluation points the steps run in one ``lax.fori_loop`` with traced bounds (one
  compilation for every chunk length), on every backend, unless on the CPU the step holds a
  convolution (``lax.conv_general_dilated``), which XLA:CPU runs several times slower inside a loop
  (jax-ml/jax#12868): then one dispatch per step (``fit``'s ``compiled_loop=None``).
* A user's network is lowered by ``conv="auto"`` (``train``, ``train_sweep``, ``fit``): on the CPU
  its convolutions and poolings are rewritten into slices and matrix products
  (:func:`iterlin.conv.as_products`, a jaxpr interpreter; the same function to rounding), so its
  step holds no convolution and runs in the loop at the products' speed; ``conv="xla"`` keeps them.
* ``microbatch=c`` (``train``, ``train_sweep``, ``make_step``): each step's gradient is the sum of
  the gradients of chunks of c examples of its batch, divided by the batch size
  (:func:`mean_value_and_grad`, a ``lax.scan`` over the chunks), and the evaluations walk chunks of c:
  the same training to rounding, with c examples' activations alive at a time. On a CPU the paper's
  CNN, whose convolutions are memory-bound products on whole batches, trains about 1.5 times as fast
  with c = 16 at batch 256 (``benchmarks/bench_train.py``). The default (None) is the whole batch, as
  every committed reference run was computed. Not for BatchNorm with batch statistics.
* Compile once: the step factories (``make_step``, the Gauss–Newton and Adam-solved steps) are
  memoised on what their steps close over (``apply_fn``, the optimizer, the loss, the static
  options), and the compiled programs of the loop and of evaluation are cached on their step
  function and static options, with the data, the evaluation splits, the key and the state as
  ARGUMENTS (never closed over: no array is baked into a program). A second call with the same
  ``apply_fn``, optimizer, loss and shapes, whatever the data and θ_0, compiles nothing.
* A non-finite loss or update, or a loss beyond √(largest finite value) of its dtype, freezes that
  run (its whole state stays at the one before that step) and records the step
  (:func:`commit_proposal`, the one guard every step function commits through; :func:`commit_step`
  for a :class:`TrainState`): divergence is a result, not a crash; in a sweep the other runs continue.
* The loop is generic over the state: it reads only the fields of :class:`RunState` (θ, θ_s, the
  step, ``n_relin``, K, the divergence flags). Each algorithm has its own typed state:
  :class:`TrainState` for iterative linearisation, whose per-algorithm state (the re-linearisation
  policy's) rides in ``TrainState.policy``, beside the optimizer state, never inside it; and
  :class:`iterlin.solvers.gauss_newton.GaussNewtonState` for Gauss–Newton (its damping λ or flow time τ,
  no optimizer).
* With ``checkpoint=path`` the whole state (every field: for a :class:`TrainState` θ, θ_s, the
  optimizer state, the policy, the step), the history and the key are saved atomically at
  evaluation points, and a rerun with the same arguments resumes from it.
* A sweep's runs are vmapped into one program, or, on a CPU for a model of at least
  :data:`STEP_RUNS_MIN_PARAMS` parameters, stepped one after the other (``vectorise``, see
  :func:`fit`).
* Several devices (``fit``'s ``devices``, ``shard_runs``, ``data_parallel``): a vmapped sweep's run
  axis is sharded over the local devices (``NamedSharding(mesh, P("runs"))``, padded to a multiple of
  the device count), or a single run's batches are (data parallel, ``P("batch")``, parameters
  replicated). Placement only: the step functions are unchanged and the results equal one device's
  (up to the order of floating-point sums). Checkpoints hold the unpadded state on the host, so a run
  resumes on any number of devices.

The package, one concern per module: ``_state`` (:class:`RunState`, :class:`TrainState`,
:func:`commit_proposal`, :func:`commit_step`), ``_steps`` (:func:`make_step`), ``_batching``,
``_evaluation``, ``_history`` (:class:`History`, :class:`Metrics`), ``_checks``, ``_checkpointing``,
``_placement``, ``_loop`` (:func:`fit`) and ``_api``
(:func:`train`, :func:`train_sweep`).
"""

from __future__ import annotations

from ._api import train, train_sweep
from ._batching import make_batch_fn
from ._checks import check_train_args
from ._evaluation import DEFAULT_EVAL_BUDGET, DEFAULT_EVAL_POINTS, MAX_EVAL_POINTS, MIN_EVAL_TRAIN, default_evaluation
from ._history import METRIC_NAMES, History, Metrics
from ._loop import callback_carry, fit, restore_callback
from ._placement import STEP_RUNS_MIN_PARAMS
from ._state import RunState, TrainState, commit_proposal, commit_step, divergence_bound, init_state
from ._steps import make_linearised_update, make_step, mean_value_and_grad

__all__ = [
    "RunState",
    "TrainState",
    "History",
    "Metrics",
    "METRIC_NAMES",
    "init_state",
    "commit_proposal",
    "commit_step",
    "divergence_bound",
    "make_linearised_update",
    "make_step",
    "mean_value_and_grad",
    "make_batch_fn",
    "fit",
    "callback_carry",
    "restore_callback",
    "check_train_args",
    "default_evaluation",
    "DEFAULT_EVAL_BUDGET",
    "DEFAULT_EVAL_POINTS",
    "MIN_EVAL_TRAIN",
    "MAX_EVAL_POINTS",
    "STEP_RUNS_MIN_PARAMS",
    "train",
    "train_sweep",
]
