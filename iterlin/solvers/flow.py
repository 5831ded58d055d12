"""Gradient flow of the linearised model under a general loss, in function space (Sec. 3, Appendix A).

The linear model at θ_s, f_lin(θ, x) = f(θ_s, x) + J_s(x)(θ − θ_s), trained by full-batch gradient
descent exactly as :func:`iterlin.training.train` does it: rate η on the MEAN loss over the N
training examples, L(F) = (1/N) Σ_n ℓ(F_n, y_n), with the loss ℓ applied to the linearised outputs
(for ``"ce"`` the softmax and cross-entropy are not linearised, Sec. 4). One step moves θ by
−η J_sᵀ ∇_F L(F) and so the training outputs F = f_lin(θ, X) (N × C, example-major when flat) by

    F_{k+1} = F_k − η Θ_s ∇_F L(F_k),          Θ_s = J_s J_sᵀ   (N·C × N·C, the empirical NTK, Eq. 2).

For small η, K steps are the gradient flow dF/dt = −η Θ_s ∇_F L(F) over t ∈ [0, K], i.e. in the
time τ = ηK (the paper's "ηK"; a period of K steps at rate η)

    dF/dτ = −Θ_s ∇_F L(F),     F(0) = f(θ_s, X),
    c(τ)  = ∫₀^τ ∇_F L(F(τ')) dτ'     (N·C),
    F(τ)  = F(0) − Θ_s c(τ),   θ_τ = θ_s − J_sᵀ c(τ)   (exact for the linear model).

Everything here is in τ = ηK: the scale in θ_τ = θ_s − J_sᵀ c is 1. (For the squared loss
ℓ = ½‖F_n − y_n‖² this is the closed form of :mod:`iterlin.solvers.closed_form` with t = τ and
``lr = 1/N``, its summed loss: Eq. 14 and 18.)

The ODE is integrated for c (N·C numbers) with F = F(0) − Θ_s c substituted: the same flow as the
pair (F, c), with half the unknowns (an implicit solver factorises the ODE's Jacobian, so the pair
would cost eight times as much per step). It is solved by diffrax with a PID step-size controller,
error control on c with relative and absolute tolerances :attr:`FlowConfig.rtol` (default 1e-8) and
:attr:`FlowConfig.atol` (default 1e-10), in float64 whatever the model's dtype (Θ_s is computed in
the parameters' dtype, then cast). Its stiffness is the largest eigenvalue of ∇²_F L·Θ_s, at most
σ_max(Θ_s)/(2N) under the mean loss (∇²_F of the mean cross-entropy is at most 1/(2N)), against
the slowest rates near 0. :attr:`FlowConfig.solver` picks Tsit5 (default: explicit, order 5, each
step seven products with Θ_s, O((N·C)²); the controller keeps it stable on a stiff flow by taking
more steps) or Kvaerno5 (implicit, L-stable ESDIRK of order 5: steps not bounded by stiffness, but
each step one Jacobian of the vector field and one LU factorisation, O((N·C)³)). Either stops with
:class:`FlowSolveError` at :attr:`FlowConfig.max_steps`, never with a silent result.

τ = ∞ is refused: under cross-entropy a separable training set has no minimiser (c(τ) grows
without bound); for the squared loss use :func:`iterlin.solvers.closed_form.gradient_flow_limit`.

Cost of one re-linearisation: the kernel (:func:`iterlin.analysis.ntk.empirical_ntk`, O((N·C)²·P)), the
ODE (O((N·C)²) a step for Tsit5, O((N·C)³) for Kvaerno5), then one VJP for θ_τ (and, for held-out inputs, one JVP and one forward pass).
Memory: Θ_s in its dtype plus at most three float64 (N·C)² arrays (Θ_s's copy, and Kvaerno5's
Jacobian and LU factors), checked against :attr:`FlowConfig.max_bytes` before the kernel is built
(:func:`flow_memory_bytes`).

:func:`iterated_flow` runs R re-linearisations at a fixed total time T (τ = T/R each), with
per-round scores and a checkpoint after every round (:mod:`iterlin.checkpoint`).
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from ..checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ..analysis.jacobian import n_outputs
from ..linearise import linearised_predict, transpose_apply
from ..losses import Loss, get_loss
from ..memo import memoise
from ..analysis.ntk import empirical_ntk
from ..precision import full_precision, matmul, x64
from ..validate import check_choice, check_int, check_positive, check_xy

__all__ = [
    "FlowConfig",
    "FlowResult",
    "FlowSolveError",
    "FlowRounds",
    "IteratedFlow",
    "flow_memory_bytes",
    "flow_outputs",
    "linearised_flow",
    "iterated_flow",
    "classified",
]

#: The ODE solvers by name (:attr:`FlowConfig.solver`).
SOLVERS = {"kvaerno5": diffrax.Kvaerno5, "tsit5": diffrax.Tsit5}

#: The smallest relative tolerance allowed: a few float64 ulps (the ODE is solved in float64).
MIN_RTOL = 1e-13


class FlowConfig(NamedTuple):
    """How the flow is solved (diffrax, a PID step-size controller, float64).

    - ``rtol``: relative tolerance of the step-size control on c, in [1e-13, 1).
    - ``atol``: absolute tolerance on c, > 0 and finite (c's entries are of order τ·‖∇_F L‖ ≤ τ·√2/N).
    - ``max_steps``: the most ODE steps (accepted and rejected) before the solve is refused.
    - ``max_bytes``: the memory the flow may take (:func:`flow_memory_bytes`); None: the host's
      physical memory.
    - ``chunk_size``: examples per chunk of the kernel (:func:`iterlin.analysis.ntk.empirical_ntk`).
    - ``solver``: ``"tsit5"`` (default: explicit, order 5, O((N·C)²) a step; the number of steps grows
      with τ·λ_max(∇²_F L·Θ_s)) or ``"kvaerno5"`` (implicit, L-stable, order 5, for stiff flows:
      O((N·C)³) a step, an LU factorisation of the (N·C)² Jacobian of the vector field).
    """

    rtol: float = 1e-8
    atol: float = 1e-10
    max_steps: int = 100_000
    max_bytes: int | None = None
    chunk_size: int | None = None
    solver: str = "tsit5"


class FlowResult(NamedTuple):
    """One linearisation's flow for time τ (:func:`linearised_flow`).

    params: θ_τ = θ_s − J_sᵀ c(τ), the structure and dtype of θ_s.
    outputs: F(τ) (N, C) float64 NumPy, the linear model's training outputs.
    coeffs: c(τ) (N, C) float64 NumPy.
    outputs0: F(0) = f(θ_s, X) (N, C) float64 NumPy.
    num_steps: () int, the ODE steps taken (accepted and rejected).
    """

    params: Any
    outputs: np.ndarray
    coeffs: np.ndarray
    outputs0: np.ndarray
    num_steps: np.ndarray


class FlowSolveError(RuntimeError):
    """The ODE solve did not reach τ (its step limit, or a failure of the implicit solver)."""


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------


def _check_tau(tau) -> float:
    if isinstance(tau, (int, float, np.floating, np.integer)) and not isinstance(tau, bool) and math.isinf(tau) \
            and tau > 0:
        raise ValueError(
            f"tau={tau!r} is not allowed: tau must be a finite number > 0. The flow under cross-entropy has no "
            "limit (a separable training set has no minimiser); for the squared loss the limit is "
            "iterlin.solvers.closed_form.gradient_flow_limit."
        )
    return check_positive(tau, "tau")


def _check_config(config: FlowConfig) -> FlowConfig:
    if not isinstance(config, FlowConfig):
        raise TypeError(f"config={config!r} is not allowed: config must be a FlowConfig.")
    rtol = check_positive(config.rtol, "rtol")
    if not MIN_RTOL <= rtol < 1:
        raise ValueError(f"rtol={config.rtol!r} is not allowed: rtol must be in [{MIN_RTOL:g}, 1) (the ODE is solved "
                         "in float64).")
    atol = check_positive(config.atol, "atol")
    max_steps = check_int(config.max_steps, "max_steps", minimum=1)
    max_bytes = None if config.max_bytes is None else check_int(config.max_bytes, "max_bytes", minimum=1)
    chunk = None if config.chunk_size is None else check_int(config.chunk_size, "chunk_size", minimum=1)
    solver = check_choice(config.solver, "solver", tuple(SOLVERS))
    return FlowConfig(rtol, atol, max_steps, max_bytes, chunk, solver)


def _physical_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover (not POSIX)
        return None


def flow_memory_bytes(n: int, n_out: int, kernel_dtype=np.float32, solver: str = "tsit5") -> int:
    """Bytes the flow holds for N = ``n`` examples of C = ``n_out`` outputs: Θ_s ((N·C)², in
    ``kernel_dtype``) and its float64 copy, and for ``solver="kvaerno5"`` two more float64 (N·C)²
    arrays (the Jacobian of the vector field and its LU factors). The per-example Jacobians of the
    kernel add at most ``iterlin.analysis.ntk.PANEL_NUMBERS`` numbers on top (a panel)."""
    m = int(n) * int(n_out)
    copies = 3 if check_choice(solver, "solver", tuple(SOLVERS)) == "kvaerno5" else 1
    return m * m * (np.dtype(kernel_dtype).itemsize + copies * 8)


def _check_memory(n: int, n_out: int, dtype, config: FlowConfig) -> None:
    limit = _physical_memory() if config.max_bytes is None else config.max_bytes
    need = flow_memory_bytes(n, n_out, dtype, config.solver)
    if limit is not None and need > limit:
        m = n * n_out
        raise ValueError(
            f"N={n} is not allowed here: the flow needs about {need / 2**30:.2f} GiB (the kernel Θ_s is "
            f"{m} × {m}, {m * m * np.dtype(dtype).itemsize / 2**30:.2f} GiB in {np.dtype(dtype)}, plus "
            f"{(need - m * m * np.dtype(dtype).itemsize) // (8 * m * m)} float64 arrays of its size for the ODE with "
            f"solver={config.solver!r}), more than max_bytes = {limit / 2**30:.2f} GiB "
            f"({'the host memory' if config.max_bytes is None else 'FlowConfig.max_bytes'}); use fewer examples or "
            "raise FlowConfig.max_bytes."
        )


# ------------------------------------------------------------------------------------------------
# The ODE in function space
# ------------------------------------------------------------------------------------------------

#: diffrax's result codes that the solve reports by name (the first that matches), besides success.
_FAILURES = tuple(n for n in ("max_steps_reached", "singular", "breakdown", "nonlinear_max_steps_reached",
                              "nonlinear_divergence", "dt_min_reached") if hasattr(diffrax.RESULTS, n))


@memoise
def _solver(per_example: Callable, rtol: float, atol: float, max_steps: int, solver: str):
    """The jitted solve ``(theta, f0, y, tau) -> (c(τ), failure flags, steps)`` for one loss and config."""

    def grad_loss(f, y):  # ∇_F of the mean loss (N, C)
        return jax.grad(lambda g: jnp.mean(per_example(g, y)))(f)

    def field(t, c, args):
        theta, f0, y = args
        f = f0 - matmul(theta, c).reshape(f0.shape)
        return grad_loss(f, y).reshape(-1)

    @jax.jit
    def solve(theta, f0, y, tau):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field), SOLVERS[solver](), 0.0, tau, None, jnp.zeros(f0.size, f0.dtype),
            args=(theta, f0, y), saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol), max_steps=max_steps, throw=False)
        flags = jnp.stack([sol.result == getattr(diffrax.RESULTS, n) for n in _FAILURES])
        ok = sol.result == diffrax.RESULTS.successful
        return sol.ys[-1], ok, flags, sol.stats["num_steps"]

    return solve


def flow_outputs(theta_kernel, f0, y, tau, *, loss: str | Loss = "ce", config: FlowConfig = FlowConfig()):
    """Solve dF/dτ = −Θ ∇_F L(F), F(0) = ``f0``, for time ``tau`` (module docstring; L the mean loss).

    Args:
      theta_kernel: Θ (N·C × N·C), example-major, finite (cast to float64).
      f0: F(0) (N, C). y: labels (N,) int for ``"ce"``, or targets (N, C) / labels for ``"mse"``.
      tau: τ = ηK > 0, finite.
      loss: ``"ce"``, ``"mse"`` or a :class:`iterlin.losses.Loss`.
      config: :class:`FlowConfig`.

    Returns:
      ``(F(τ), c(τ), num_steps)``: (N, C) float64 NumPy arrays, and the ODE steps taken (() int).

    Raises:
      ValueError: naming the argument, for a bad ``tau``, tolerance or kernel.
      FlowSolveError: naming ``max_steps`` (or the solver's failure) when τ is not reached.
    """
    tau = _check_tau(tau)
    config = _check_config(config)
    loss = get_loss(loss)
    f0 = np.asarray(f0, np.float64)
    if f0.ndim == 1:
        f0 = f0[:, None]
    f0 = f0.reshape(f0.shape[0], -1)
    theta = np.asarray(theta_kernel, np.float64)
    m = f0.size
    if theta.shape != (m, m):
        raise ValueError(f"theta_kernel has shape {theta.shape}: it must be (N·C, N·C) = ({m}, {m}) for f0 of shape "
                         f"{f0.shape}.")
    if not np.all(np.isfinite(theta)):
        raise ValueError("theta_kernel is not allowed: it holds non-finite entries (NaN or inf); the kernel must be "
                         "finite (a diverged network, or parameters with NaN).")
    if not np.all(np.isfinite(f0)):
        raise ValueError("f0 is not allowed: it holds non-finite outputs; the network's outputs must be finite.")
    y = np.asarray(y)
    check_xy(f0, y, "f0", "y")
    solve = _solver(loss.per_example, config.rtol, config.atol, config.max_steps, config.solver)
    with x64(True):
        c, ok, flags, steps = solve(jnp.asarray(theta), jnp.asarray(f0), jnp.asarray(y), jnp.float64(tau))
        c = np.asarray(c)
        if not bool(ok):
            failed = [n for n, f in zip(_FAILURES, np.asarray(flags)) if f]
            if "max_steps_reached" in failed:
                raise FlowSolveError(
                    f"max_steps={config.max_steps} is not enough: the ODE solve stopped at its step limit before "
                    f"tau={tau!r} (rtol={config.rtol:g}, atol={config.atol:g}, solver={config.solver!r}); raise "
                    "FlowConfig.max_steps, loosen the tolerances, shorten tau, or take solver='kvaerno5' for a stiff flow.")
            raise FlowSolveError(
                f"the ODE solve failed before tau={tau!r} (diffrax: {', '.join(failed) or 'unsuccessful'}; "
                f"rtol={config.rtol:g}, atol={config.atol:g}, max_steps={config.max_steps}).")
        if not np.all(np.isfinite(c)):
            raise FlowSolveError(f"the ODE solve for tau={tau!r} returned non-finite coefficients c(tau).")
        f = f0 - (theta @ c).reshape(f0.shape)
    return f, c.reshape(f0.shape), np.asarray(steps)


# ------------------------------------------------------------------------------------------------
# One linearisation
# ------------------------------------------------------------------------------------------------


def linearised_flow(apply_fn: Callable, params_s: Any, x, y, tau, *, loss: str | Loss = "ce",
                    config: FlowConfig = FlowConfig()) -> FlowResult:
    """The linear model at θ_s trained by gradient flow for time τ = ηK under ``loss`` (module docstring).

    Builds Θ_s = J_s J_sᵀ on ``x`` (:func:`iterlin.analysis.ntk.empirical_ntk`), solves the flow in function
    space (:func:`flow_outputs`) and returns θ_τ = θ_s − J_sᵀ c(τ) by one VJP. Matches
    ``train(apply_fn, θ_s, (x, y), K=math.inf, steps=K, optimizer=optax.sgd(η), loss=loss)`` as
    η → 0 with ηK = τ (full batch).

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, C)``, examples processed independently.
      params_s: θ_s, the linearisation point (any pytree).
      x: (N, ...) training inputs. y: (N,) int labels (or targets for ``"mse"``).
      tau: τ > 0 finite (ValueError otherwise, naming ``tau``).
      loss, config: as :func:`flow_outputs`.

    Raises: ValueError before the kernel is built when N·C is too large for ``config.max_bytes``.
    """
    tau = _check_tau(tau)
    config = _check_config(config)
    loss = get_loss(loss)
    check_xy(x, y)
    x = jnp.asarray(x)
    n_out = n_outputs(apply_fn, params_s, x)
    dtype = jax.tree.leaves(params_s)[0].dtype
    _check_memory(x.shape[0], n_out, dtype, config)
    with full_precision():
        f0 = np.asarray(apply_fn(params_s, x), np.float64).reshape(x.shape[0], -1)
        theta = empirical_ntk(apply_fn, params_s, x, chunk_size=config.chunk_size)
    f, c, steps = flow_outputs(theta, f0, y, tau, loss=loss, config=config)
    with full_precision():
        delta = transpose_apply(apply_fn)(params_s, x, jnp.asarray(c, dtype))
    params = jax.tree.map(lambda p, d: p - d.astype(p.dtype), params_s, delta)
    return FlowResult(params, f, c, f0, steps)


# ------------------------------------------------------------------------------------------------
# Iterated flow: R re-linearisations at total time T
# ------------------------------------------------------------------------------------------------


class FlowRounds(NamedTuple):
    """Per-round scores of :func:`iterated_flow` (R rounds; M held-out examples), after each round's flow.

    - ``net_train_acc``, ``lin_train_acc``: (R,) float64, the network f(θ_r) and the linear model
      at θ_s (F(τ)) on the training set; ``net_test_acc``, ``lin_test_acc``: (R,) float64 on the
      held-out set.
    - ``net_test_correct``, ``lin_test_correct``: (R, M) bool, whether each held-out example is
      classified correctly (the per-image record that paired statistics need).
    - ``train_loss``: (R,) float64, the linear model's mean training loss L(F(τ)).
    - ``num_steps``: (R,) int64, the ODE steps of each round.
    """

    net_train_acc: np.ndarray
    lin_train_acc: np.ndarray
    net_test_acc: np.ndarray
    lin_test_acc: np.ndarray
    net_test_correct: np.ndarray
    lin_test_correct: np.ndarray
    train_loss: np.ndarray
    num_steps: np.ndarray

    @classmethod
    def empty(cls, rounds: int, m: int) -> "FlowRounds":
        z = lambda: np.zeros(rounds, np.float64)  # noqa: E731
        return cls(z(), z(), z(), z(), np.zeros((rounds, m), bool), np.zeros((rounds, m), bool), z(),
                   np.zeros(rounds, np.int64))


class IteratedFlow(NamedTuple):
    """:func:`iterated_flow`'s result: θ_R, the last linearisation point θ_s and the rounds' scores."""

    params: Any
    params_s: Any
    rounds: FlowRounds


@memoise
def _net_predict(apply_fn):
    """``(θ, x) -> argmax f(θ, x)`` (a forward pass), jitted once per ``apply_fn``."""
    return jax.jit(lambda p, xb: jnp.argmax(apply_fn(p, xb), -1))


def classified(apply_fn: Callable, params_s: Any, params: Any, x, y, *, linear: bool = True,
               batch: int = 500) -> tuple[np.ndarray, np.ndarray | None]:
    """Whether the network f(θ) and the linear model f_lin_s(θ) at θ_s classify each example of ``x``
    (M, ...) as its label ``y`` (M,): ``(net, lin)``, (M,) bool each (``lin`` None unless ``linear``),
    in chunks of ``batch`` examples (a forward pass and one JVP each)."""
    net_fn, lin_fn = _net_predict(apply_fn), linearised_predict(apply_fn)
    y = np.asarray(y)
    net, lin = [], []
    for i in range(0, len(x), batch):
        xb = jnp.asarray(x[i:i + batch])
        net.append(np.asarray(net_fn(params, xb)))
        if linear:
            lin.append(np.asarray(lin_fn(params_s, params, xb)))
    net = np.concatenate(net) == y if net else np.zeros(0, bool)
    return net, ((np.concatenate(lin) == y if lin else np.zeros(0, bool)) if linear else None)


def iterated_flow(apply_fn: Callable, params0: Any, train_data: tuple, held_out: tuple | None, *, total_time,
                  relins: int,
                  loss: str | Loss = "ce", config: FlowConfig = FlowConfig(),
                  checkpoint: str | os.PathLike | None = None) -> IteratedFlow:
    """R = ``relins`` re-linearisations at total time T = ``total_time``: τ = T/R per linearisation.

    Round r (0 … R − 1) linearises at θ_s = θ_r, flows the linear model for τ (:func:`linearised_flow`)
    to θ_{r+1}, and scores the network f(θ_{r+1}) and the linear model f_lin_s(θ_{r+1}) on the
    training set and on every held-out example (:class:`FlowRounds`). R = 1 is the linear model at
    θ₀ trained for T (K = ∞ at time T); large R approaches gradient flow on the network.

    Args:
      apply_fn, params0: the network and θ₀.
      train_data: (x, y), y (N,) int labels. held_out: (x_h, y_h), the examples scored per image
        after every round, or None (M = 0: the held-out fields are empty and their accuracies NaN;
        score the final θ with :func:`classified`, one pass instead of R).
      total_time: T > 0 finite (in ηK units). relins: R ≥ 1.
      loss, config: as :func:`linearised_flow`.
      checkpoint: a file path, or None. The state (θ, θ_s, the rounds so far) is written there
        atomically after every round (:func:`iterlin.checkpoint.save_checkpoint`); a rerun with the
        same arguments resumes after the last round written and ends exactly where an uninterrupted
        run does. A checkpoint of a different run (another T, R, loss, tolerances, solver, θ₀ or data)
        or an unreadable file is refused (ValueError naming ``checkpoint``), never overwritten.
    """
    T = check_positive(total_time, "total_time")
    R = check_int(relins, "relins", minimum=1)
    tau = _check_tau(T / R)
    config = _check_config(config)
    loss = get_loss(loss)
    x, y = train_data
    check_xy(x, y, "train_data[0]", "train_data[1]")
    if held_out is None:  # nothing scored per round: M = 0
        xh, yh = np.zeros((0, *np.shape(x)[1:]), np.asarray(x).dtype), np.zeros(0, np.asarray(y).dtype)
    else:
        xh, yh = held_out
        check_xy(xh, yh, "held_out[0]", "held_out[1]")
    x, y, xh, yh = jnp.asarray(x), np.asarray(y), np.asarray(xh), np.asarray(yh)
    digest = hashlib.sha256()  # θ₀ and the data: a checkpoint of another seed or subset is not resumed
    for a in (*jax.tree.leaves(params0), x, y, xh, yh):
        digest.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    key = (f"iterated_flow T={T!r} R={R} N={x.shape[0]} M={xh.shape[0]} loss={loss.name} rtol={config.rtol!r} "
           f"atol={config.atol!r} solver={config.solver} data+params0={digest.hexdigest()[:16]}")
    params, params_s, rounds, done = params0, params0, FlowRounds.empty(R, xh.shape[0]), 0
    path = None if checkpoint is None else Path(checkpoint)
    if path is not None and path.exists():
        try:  # writes are atomic, so an unreadable file is not an interrupted run: never overwrite it
            (params, params_s, rounds), meta = load_checkpoint(path, (params0, params0, rounds))
        except CheckpointError as e:
            raise ValueError(f"checkpoint={str(path)!r} is not allowed: it is not a checkpoint of this run ({e}); "
                             "pass another path or remove it.") from e
        if meta.get("run") != key:
            raise ValueError(f"checkpoint={str(path)!r} is not allowed: it holds another run ({meta.get('run')!r}), "
                             f"not this one ({key!r}); pass another path or remove it.")
        rounds = FlowRounds(*(np.array(a) for a in rounds))
        done = int(meta["done"])
    per_mean = lambda f: float(np.mean(np.asarray(loss.per_example(f, jnp.asarray(y)))))  # noqa: E731
    for r in range(done, R):
        res = linearised_flow(apply_fn, params, x, y, tau, loss=loss, config=config)
        params_s, params = params, res.params
        net_train, _ = classified(apply_fn, params_s, params, x, y, linear=False)
        net_h, lin_h = classified(apply_fn, params_s, params, xh, yh)
        with x64(True):
            train_loss = per_mean(jnp.asarray(res.outputs))
        held = (float(np.mean(net_h)), float(np.mean(lin_h))) if len(yh) else (math.nan, math.nan)
        row = (float(np.mean(net_train)), float(np.mean(np.argmax(np.asarray(res.outputs), -1) == y)),
               *held, net_h, lin_h, train_loss, int(res.num_steps))
        for field, value in zip(rounds, row):
            field[r] = value
        if path is not None:
            save_checkpoint(path, (params, params_s, rounds), {"run": key, "done": r + 1})
    return IteratedFlow(params, params_s, rounds)
