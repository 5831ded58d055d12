"""The paper's limit, computed exactly: iterated closed-form flow, Gauss–Newton and K = ∞ on CIFAR-10.

Sec. 3 of the paper: with a small enough rate η, each block of K steps of iterative linearisation
is gradient flow on the linearised model for the time τ = Kη. For the SQUARED loss that flow has a
closed form (Appendix B, Eq. 14, 18, 19), so the paper's regime (η = 1e-4, K = 5·10⁶) can be
computed exactly, without a single unstable step. Here the paper's CNN
(``iterlin.models.make_model("cnn", ...)``, float32) is trained on N CIFAR-10 images with the
summed squared loss ½‖f(θ, X) − Y‖² on one-hot targets Y, full batch. (The paper's CIFAR runs use
cross-entropy; this is the limit of its Sec. 3 for the squared loss.)

One re-linearisation at θ_s (:func:`linearise_at`): the Jacobian J = ∂f(θ_s, X)/∂θ (N·O × P),
the empirical NTK Θ = JJᵀ (N·O × N·O, Eq. 2), its eigendecomposition Θ = U diag(σ) Uᵀ and the
residual r₀ = f(θ_s, X) − Y. Every update here is a spectral filter φ applied to r₀
(:func:`update`, the maths of :mod:`iterlin.solvers.closed_form`):

    θ = θ_s − Jᵀ U diag(φ(σ)) Uᵀ r₀,

* gradient flow on the linearisation for time τ (Eq. 18):  φ(σ) = (1 − e^{−στ})/σ;
* Gauss–Newton, τ = ∞ (Eq. 5, 19):                            φ(σ) = 1/σ (minimum-norm step);
* damped Gauss–Newton (Eq. 6):                                 φ(σ) = 1/(σ + λ), with λ = 1/τ, the
  value at which both filters switch from "leave this direction" to "solve it" (book/method.md,
  :func:`iterlin.solvers.closed_form.equivalent_damping` with Kη = τ).

Runs (each from the same θ₀ per seed; the first linearisation at θ₀ is shared by every run):

* **iterated flow with period τ** = T/R for every R of ``relins``: R re-linearisations at the
  fixed total time T (``total_time``). The smallest τ (largest R) stands for gradient flow on the
  network (τ → 0; a literal full-batch GD run on the network is compared with it in the
  consistency checks, over a shorter time: at T it would need T·λ_max ≈ 10⁵ steps here);
* **Gauss–Newton** (τ = ∞) and **damped GN** (λ = 1/τ with τ = T/``n_relin``), ``n_relin`` steps each;
* **K = ∞**: kernel regression with the eNTK at θ₀, i.e. the linear model at θ₀ trained to
  convergence (τ = ∞, scored as the LINEAR model f_lin(θ_∞) = f(θ₀) + J(θ₀)(θ_∞ − θ₀));
* **data scaling**: K = ∞ and the iterated flow with R = ``n_relin`` at every N of ``n_train``
  (a doubling grid). The runs above use N = ``n_main`` (None: the largest), so that the grid can
  reach past the N that the whole R grid can afford;
* **R to the hundreds**: the iterated flow for every R of the doubling grid up to ``long_R`` at
  the smaller N = ``n_long``, for the first ``n_long_seeds`` seeds (:func:`long_grid`): whether the
  main grid's largest R already stands for τ → 0, and how few updates suffice against a finer τ.

The network f(θ) of every finite-τ run is scored on every installed test image (its linear model
too). Units: σ and τ are for the SUMMED loss with unit rate (τ = Kη/N for ``train``'s mean loss
with rate η).

Precision. J and Θ are computed in float32 (the model's dtype, every contraction and every product
inside the network at HIGHEST precision, never TF32 on a GPU: :func:`compute` runs whole inside
:func:`iterlin.precision.full_precision`); the eigendecomposition in float64 on the default device, the filters and the coefficients
U diag(φ) Uᵀ r₀ in float64 on the host: for τ → ∞ the filter is 1/σ over a spectrum that spans several decades, where a float32
eigensolver loses the small eigenvalues. Directions with
σ ≤ N·O·ε₃₂·max σ (below the rounding of a float32 Θ) are treated as null (the pseudo-inverse
semantics of :mod:`iterlin.analysis.jacobian`).

Cost. The kernel route (per-example Jacobians, JJᵀ, eigh) costs O(N·O·P) for J, O((N·O)²·P) for
Θ and O((N·O)³) for the eigendecomposition per re-linearisation, and then gives every filter at
θ_s for free. The matrix-free route (:func:`lanczos_apply`: Θv by one VJP and one JVP, O(N) per
product) needs about √(τ·max σ) products for the flow and about √(max σ / min σ) for τ = ∞. The
kernel route is used here (the notebook gives the measured costs of both and where they cross).
A run interrupted resumes from its last finished re-linearisation (one checkpoint per run, written
atomically after every re-linearisation); a finished run leaves only its :class:`Scores` (a few kB).
Several processes can share a device, and several machines one reference run: each computes some
seeds with :func:`precompute` into the checkpoint folder that :func:`compute` then reads, e.g. for
the reference run (:mod:`iterlin.experiments.reference`) at the ``gpu`` scale, seeds 1 and 5 in a
process of their own::

    c = limit.EXPERIMENT.get_config("gpu"); limit.precompute(c, limit.load(c), [1, 5], ".cache/reference/limit-gpu")

Config keys: ``n_train`` (list, doubling grid), ``n_test`` (None: every installed test image),
``total_time`` (T), ``relins`` (list of R), ``n_relin`` (R of GN, damped GN and the scaling runs),
``n_main`` (the N of the R grid, GN and damped GN: one of ``n_train``; None: the largest), ``seed``,
``n_seeds``, ``n_check`` (images of the consistency checks), ``gd_steps`` (steps of the literal GD
runs of the checks), ``n_long``, ``long_R``, ``n_long_seeds`` (the long R grid: all three, or all None).

Results: :class:`Results`.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from pathlib import Path
from typing import Any, Callable, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax.flatten_util import ravel_pytree

from ..checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ..repro.claims import NA, Claim, all_verdicts, exceeds, on_par, verdict
from ..solvers.closed_form import flow_filter, gn_filter
from ..columns import Record
from ..repro.config import (
    ExperimentConfig, GaussNewtonSteps, ImageSubset, Images, ImagesOrNone, Positive, Relins, RelinsOrNone,
    RunCount, RunCountOrNone, Seed, Steps, TestImages,
)
from ..data import Dataset, load_cifar10
from ..solvers.gauss_newton import gauss_newton_step
from ..analysis.jacobian import flat_jacobian, rcond
from ..linearise import linearised_apply, linearised_predict, transpose_apply
from ..models import make_model
from ..repro.plotting import band, legend, panels
from ..precision import full_precision, matmul, x64
from ..repro.stats import Difference, difference, num, pct, runs_where
from . import protocol
from ._common import Experiment, network_correct, seed_keys

__all__ = ["Config", "Results", "Runs", "RelinSeconds", "Checks", "SCALES", "EXPERIMENT", "load", "compute", "precompute", "Scores",
           "claims", "Linearisation", "linearise_at", "update", "flow_phi", "damped_phi", "lanczos_apply",
           "LanczosConvergenceWarning", "main_size",
           "ran_main_size", "LongGrid", "long_grid", "flow_relins", "flow_runs",
           "run_specs", "slopes", "few_updates", "few_updates_long", "inf_below", "inf_scales_worse", "gn_below",
           "damping_helps", "literal_check", "gn_step_check", "towards_gd", "plot"]

INF = math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(ExperimentConfig):
    """limit's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "limit"

    n_train: tuple[Images | None, ...]
    n_main: ImagesOrNone | None
    n_test: TestImages | None
    total_time: Positive
    relins: tuple[Relins, ...]
    n_relin: GaussNewtonSteps
    seed: Seed
    n_seeds: RunCount
    n_check: ImageSubset
    gd_steps: Steps
    n_long: ImagesOrNone | None
    long_R: RelinsOrNone | None
    n_long_seeds: RunCountOrNone | None


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/limit.py, "What each scale runs").
SCALES = {
    "smoke": dict(n_train=[8, 16], n_main=None, n_test=None, total_time=0.5, relins=[1, 2, 4], n_relin=2, seed=0,
                  n_seeds=1, n_check=8, gd_steps=40, n_long=8, long_R=8, n_long_seeds=1),
    "cpu": dict(n_train=[32, 64, 128, 256], n_main=128, n_test=None, total_time=0.5, relins=[1, 2, 4, 8, 16],
                n_relin=8, seed=0, n_seeds=32, n_check=32, gd_steps=200, n_long=64, long_R=128, n_long_seeds=6),
    "gpu": dict(n_train=[128, 256, 512], n_main=256, n_test=None, total_time=0.5,
                relins=[1, 2, 4, 8, 16, 32], n_relin=8, seed=0, n_seeds=8, n_check=64, gd_steps=2000,
                n_long=None, long_R=None, n_long_seeds=None),
    "paper": dict(n_train=[250, 500, 1000], n_main=None, n_test=None, total_time=0.5,
                  relins=[1, 2, 4, 8, 16, 32, 64, 128, 256], n_relin=8, seed=0, n_seeds=3, n_check=64, gd_steps=2000,
                  n_long=None, long_R=None, n_long_seeds=None),
}


@dataclasses.dataclass(frozen=True, eq=False)
class Runs(Record):
    """One row per run (Q runs, :func:`run_specs`): (Q,) arrays unless said."""

    method: np.ndarray  #: "flow", "gn", "damped" or "kernel" (str)
    R: np.ndarray  #: the re-linearisations
    tau: np.ndarray  #: float64, the time τ of each linearisation's flow (∞ for Gauss–Newton, damped or not, and K = ∞)
    damping: np.ndarray  #: float64, λ of damped Gauss–Newton (0 for the others)
    n_train: np.ndarray  #: N, the training images
    seed: np.ndarray
    net_test_correct: np.ndarray  #: (Q, n_test) bool, whether the final network classifies each test image
    lin_test_correct: np.ndarray  #: (Q, n_test) bool, the same for the final linear model
    net_test_acc: np.ndarray
    lin_test_acc: np.ndarray
    net_train_acc: np.ndarray
    train_rmse: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class RelinSeconds(Record):
    """The median wall time of one re-linearisation per N, of the runs this process computed."""

    n_train: np.ndarray  #: (M,) the N
    seconds: np.ndarray  #: (M,) float64 (NaN for an N whose runs were all read from checkpoints)


@dataclasses.dataclass(frozen=True, eq=False)
class Checks(Record):
    """The consistency checks' numbers, () arrays (:func:`consistency_checks`)."""

    n_check: np.ndarray
    eta: np.ndarray
    gd_steps: np.ndarray
    tau: np.ndarray
    literal_vs_flow: np.ndarray
    network_gd_vs_flow: np.ndarray
    network_gd_vs_one_flow: np.ndarray
    gn_vs_flow_inf: np.ndarray


class Results(NamedTuple):
    """limit's results (:func:`compute`)."""

    runs: Runs
    relin_seconds: RelinSeconds
    checks: Checks
    n_test: np.ndarray  #: () int, the test images
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def load(config: Config) -> Dataset:
    """CIFAR-10: the largest N of ``n_train`` training images (each smaller N takes the first ones)
    and ``n_test`` test images (None: every installed one); ``n_check ≤ max N`` and ``n_main`` in
    ``n_train`` checked."""
    n_max = max(config.n_train)
    main_size(config)
    long_grid(config)
    data = load_cifar10(n_max, config.n_test)
    if config.n_check > data.x_train.shape[0]:
        raise ValueError(f"n_check={config.n_check} is not allowed: n_check must be <= max(n_train)={n_max}")
    return data


# ------------------------------------------------------------------------------------------------
# One linearisation and its spectral updates
# ------------------------------------------------------------------------------------------------


class Linearisation(NamedTuple):
    """The linearised least-squares problem at θ_s (module docstring), on the host.

    sigma (M,) float64 ascending, clipped at 0; U (M, M) float64; keep (M,) bool: σ above the
    rounding of Θ's dtype; r0 (M,) float64 = f(θ_s, X) − Y, example-major (M = N·O).
    """

    sigma: np.ndarray
    U: np.ndarray
    keep: np.ndarray
    r0: np.ndarray


@jax.jit
def _gram(J):
    return matmul(J, J.T)


def linearise_at(apply_fn: Callable, params: Any, x, y) -> Linearisation:
    """Θ = JJᵀ at θ_s = ``params`` on ``x`` (N, ...), y (N,) labels (one-hot targets), eigendecomposed
    in float64 (J, Θ in the parameters' dtype)."""
    x = jnp.asarray(x)
    J = flat_jacobian(apply_fn, params, x)
    theta = np.asarray(_gram(J), np.float64)
    dtype = J.dtype
    del J
    out = np.asarray(apply_fn(params, x), np.float64)
    r0 = (out - np.eye(out.shape[1])[np.asarray(y)]).reshape(-1)
    with x64(True):  # on the default device (a GPU's eigensolver where there is one), in float64
        sigma, U = (np.asarray(a, np.float64) for a in jnp.linalg.eigh(jnp.asarray(0.5 * (theta + theta.T))))
    sigma = np.maximum(sigma, 0.0)
    keep = sigma > rcond(sigma.shape[0], dtype) * sigma[-1]
    return Linearisation(sigma, U, keep, r0)


def flow_phi(tau: float) -> Callable:
    """φ(σ) = (1 − e^{−στ})/σ (Eq. 18; τ = ∞: 1/σ, Eq. 19), in float64 (:func:`iterlin.solvers.closed_form.flow_filter`)."""
    return lambda s: np.asarray(flow_filter(jnp.asarray(s), tau, 1.0), np.float64)


def damped_phi(damping: float) -> Callable:
    """φ(σ) = 1/(σ + λ) (Eq. 6), in float64 (:func:`iterlin.solvers.closed_form.gn_filter`)."""
    return lambda s: np.asarray(gn_filter(jnp.asarray(s), damping), np.float64)


def _coefficients(lin: Linearisation, phi: Callable) -> np.ndarray:
    """a = U diag(φ(σ)) Uᵀ r₀ on the kept directions (float64): θ − θ_s = −Jᵀa."""
    with x64(True):
        filt = np.where(lin.keep, phi(np.where(lin.keep, lin.sigma, 1.0)), 0.0)
    return lin.U @ (filt * (lin.U.T @ lin.r0))


def update(apply_fn: Callable, params: Any, x, lin: Linearisation, phi: Callable) -> Any:
    """θ_s − Jᵀ U diag(φ(σ)) Uᵀ r₀ with θ_s = ``params`` (the linearisation ``lin`` taken there)."""
    a = _coefficients(lin, phi)
    delta = transpose_apply(apply_fn)(params, jnp.asarray(x), jnp.asarray(a))
    return jax.tree.map(lambda p, d: p - d.astype(p.dtype), params, delta)


class LanczosConvergenceWarning(RuntimeWarning):
    """:func:`lanczos_apply` stopped after ``iters`` steps with an estimate still changing by more than ``rtol``."""


def lanczos_apply(mv: Callable, r, phi: Callable, iters: int, *, rtol: float = 1e-6) -> np.ndarray:
    """f(Θ)r ≈ ‖r‖ V_m f(T_m) e₁ by ``iters`` Lanczos steps on Θ (the matrix-free route).

    ``mv(v) = Θv`` for v (M,) (:func:`iterlin.analysis.ntk.ntk_vector_product`: one VJP and one JVP), ``r``
    (M,), ``phi`` the filter f (float64). Full re-orthogonalisation (float64 on the host); stops early
    at an invariant subspace (then exact). With φ = :func:`flow_phi`, −Jᵀ of the result is the flow update.
    Stopped by ``iters`` instead, it checks convergence at no product's cost: the estimate of m
    steps against that of m − 1 (T_{m−1} is T_m's leading block); a relative change above ``rtol``
    warns (:class:`LanczosConvergenceWarning`, with the change): more ``iters`` are needed.
    """
    r = np.asarray(r, np.float64)
    beta0 = np.linalg.norm(r)
    if beta0 == 0:
        return np.zeros_like(r)
    V = [r / beta0]
    alphas, betas = [], []
    invariant = False
    for k in range(int(iters)):
        w = np.asarray(mv(jnp.asarray(V[-1])), np.float64).reshape(-1)
        alpha = float(V[-1] @ w)
        Vm = np.stack(V, 1)
        w = w - Vm @ (Vm.T @ w)
        w = w - Vm @ (Vm.T @ w)
        alphas.append(alpha)
        beta = float(np.linalg.norm(w))
        invariant = beta <= 1e-12 * beta0
        if k == iters - 1 or invariant:
            break
        betas.append(beta)
        V.append(w / beta)

    def estimate(m):
        Tm = np.diag(alphas[:m]) + np.diag(betas[: m - 1], 1) + np.diag(betas[: m - 1], -1)
        s, Q = np.linalg.eigh(Tm)
        with x64(True):
            f = phi(np.maximum(s, 1e-300))
        return beta0 * (np.stack(V[:m], 1) @ (Q @ (f * Q[0])))

    m = len(alphas)
    out = estimate(m)
    if not invariant and m > 1 and m < r.size:
        change = float(np.linalg.norm(out - estimate(m - 1)) / max(np.linalg.norm(out), 1e-300))
        if not change <= rtol:
            warnings.warn(LanczosConvergenceWarning(
                f"lanczos_apply: not converged after iters={iters} steps: the last step changed the estimate "
                f"by {change:.2e} (relative) > rtol={rtol:g}; give more iters"), stacklevel=2)
    return out


# ------------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------------


class Spec(NamedTuple):
    """One run: method ("flow", "gn", "damped", "kernel"), R re-linearisations, flow time τ per
    linearisation (∞ for GN and K = ∞), damping λ (0 unless "damped"), N, seed."""

    method: str
    R: int
    tau: float
    damping: float
    n_train: int
    seed: int

    def key(self) -> str:
        return f"{self.method}_R{self.R}_tau{self.tau:g}_lam{self.damping:g}_N{self.n_train}_s{self.seed}"

    def phi(self) -> Callable:
        return damped_phi(self.damping) if self.method == "damped" else flow_phi(self.tau)


def main_size(config: Config) -> int:
    """N of the R grid, GN and damped GN: ``n_main``, which must be one of ``n_train`` (None: the largest)."""
    sizes = sorted(config.n_train)
    n = config.n_main
    if n is None:
        return sizes[-1]
    if n not in sizes:
        raise ValueError(f"n_main={n!r} is not allowed: n_main must be one of n_train={sizes}, or None (the largest)")
    return int(n)


class LongGrid(NamedTuple):
    """The R grid continued to the hundreds at a smaller N (:func:`long_grid`)."""

    n_train: int  #: N of these runs (one of the config's ``n_train``)
    relins: tuple[int, ...]  #: 1, 2, 4, … up to ``long_R`` (and ``long_R``), with the config's ``relins`` below it
    n_seeds: int  #: the first this many of the config's seeds run it


def long_grid(config: Config) -> LongGrid | None:
    """The long R grid of ``n_long``, ``long_R`` and ``n_long_seeds`` (None when all three are None):
    the iterated flow at N = ``n_long`` for every R of the doubling grid up to ``long_R``, for the
    first ``n_long_seeds`` seeds. ValueError naming the knob when only some are given, ``n_long``
    is not one of ``n_train`` or is the main grid's N (:func:`main_size`), or ``n_long_seeds``
    exceeds ``n_seeds``."""
    knobs = {"n_long": config.n_long, "long_R": config.long_R, "n_long_seeds": config.n_long_seeds}
    given = [k for k, v in knobs.items() if v is not None]
    if not given:
        return None
    if len(given) < len(knobs):
        missing = next(k for k in knobs if k not in given)
        raise ValueError(f"{missing}=None is not allowed: n_long, long_R and n_long_seeds are given together "
                         f"(got {', '.join(f'{k}={knobs[k]!r}' for k in given)}), or all None for no long R grid")
    if config.n_long not in config.n_train or config.n_long == main_size(config):
        raise ValueError(f"n_long={config.n_long!r} is not allowed: n_long must be one of n_train={sorted(config.n_train)} "
                         f"other than the main grid's N={main_size(config)}")
    if config.n_long_seeds > config.n_seeds:
        raise ValueError(f"n_long_seeds={config.n_long_seeds!r} is not allowed: n_long_seeds must be <= "
                         f"n_seeds={config.n_seeds}")
    doublings = {2**k for k in range(int(config.long_R).bit_length())}
    Rs = sorted(doublings | {int(config.long_R)} | {R for R in config.relins if R <= config.long_R})
    return LongGrid(int(config.n_long), tuple(Rs), int(config.n_long_seeds))


def run_specs(config: Config) -> list[Spec]:
    """Every run of the config, seed-major (module docstring), each once."""
    T, Rn = float(config.total_time), int(config.n_relin)
    sizes = sorted(config.n_train)
    n = main_size(config)
    grid = long_grid(config)
    specs = []
    for seed in range(config.seed, config.seed + config.n_seeds):
        for R in sorted(set(config.relins) | {Rn}):
            specs.append(Spec("flow", R, T / R, 0.0, n, seed))
        specs.append(Spec("gn", Rn, INF, 0.0, n, seed))
        specs.append(Spec("damped", Rn, INF, Rn / T, n, seed))
        # n first: its kernel at θ₀ is still at hand; then the rest, largest first
        for m in [n] + [m for m in reversed(sizes) if m != n]:
            specs.append(Spec("kernel", 1, INF, 0.0, m, seed))
            if m != n:
                specs.append(Spec("flow", Rn, T / Rn, 0.0, m, seed))
            if grid is not None and m == grid.n_train and seed < config.seed + grid.n_seeds:
                specs += [Spec("flow", R, T / R, 0.0, m, seed) for R in grid.relins]
    return list(dict.fromkeys(specs))


def _lin_correct(apply_fn, params_s, params, x, y, batch: int = 500) -> np.ndarray:
    """Whether the linear model at θ_s evaluated at θ classifies each image correctly (N,) bool."""
    fn = linearised_predict(apply_fn)
    out = [np.asarray(fn(params_s, params, jnp.asarray(x[i:i + batch]))) for i in range(0, len(x), batch)]
    return np.concatenate(out) == np.asarray(y)


def _run(apply_fn, params0, x, y, spec: Spec, first: Callable, ckpt: Path | None, timings: list) -> tuple:
    """The run ``spec`` from θ₀: R linearisations, each followed by its spectral update. Returns
    (θ_R, θ_s of the last linearisation). Resumes from ``ckpt`` (θ, θ_s and the count done)."""
    params, params_s, done = params0, params0, 0
    if ckpt is not None and ckpt.exists():
        try:
            (params, params_s), meta = load_checkpoint(ckpt, (params0, params0))
            done = int(meta["done"])
        except (CheckpointError, KeyError, ValueError):
            params, params_s, done = params0, params0, 0
    for s in range(done, spec.R):
        if s == 0:
            lin = first()
        else:
            t0 = time.perf_counter()
            lin = linearise_at(apply_fn, params, x, y)
            timings.append(time.perf_counter() - t0)
        params_s, params = params, update(apply_fn, params, x, lin, spec.phi())
        if ckpt is not None:
            save_checkpoint(ckpt, (params, params_s), {"done": s + 1, "run": spec.key()})
    return params, params_s


def _train_stats(apply_fn, params, x, y) -> tuple[float, float]:
    out = np.asarray(apply_fn(params, jnp.asarray(x)), np.float64)
    target = np.eye(out.shape[1])[np.asarray(y)]
    return float(np.mean(out.argmax(-1) == np.asarray(y))), float(np.sqrt(np.mean((out - target) ** 2)))


class Scores(NamedTuple):
    """What a finished run is scored by: all that :func:`compute` keeps of it."""

    net_correct: np.ndarray  #: (n_test,) bool, the network f(θ_R) on every test image
    lin_correct: np.ndarray  #: (n_test,) bool, its last linear model f_lin(θ_R) at θ_s
    train_acc: np.ndarray  #: () float64, the network's accuracy on its N training images
    train_rmse: np.ndarray  #: () float64, the network's RMSE against the one-hot targets

    @classmethod
    def of(cls, apply_fn, params, params_s, x, y, xt, yt) -> "Scores":
        acc, rmse = _train_stats(apply_fn, params, x, y)
        return cls(network_correct(apply_fn, params, xt, yt), _lin_correct(apply_fn, params_s, params, xt, yt),
                   np.float64(acc), np.float64(rmse))

    @classmethod
    def read(cls, path: Path, key: str, n_test: int) -> "Scores | None":
        """The scores stored at ``path`` for run ``key`` (None: absent, unreadable or another run's)."""
        if not path.exists():
            return None
        template = cls(np.zeros(n_test, bool), np.zeros(n_test, bool), np.float64(0), np.float64(0))
        try:
            scores, meta = load_checkpoint(path, template)
        except CheckpointError:
            return None
        return cls(*scores) if meta.get("run") == key else None


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every run of :func:`run_specs` and the consistency checks (module docstring for the results).

    Every product inside the network runs at full float32 precision
    (:func:`iterlin.precision.full_precision`), on a GPU too: the spectral filters read Θ's small
    eigenvalues, and the checks compare two routes to about 1e-3."""
    with full_precision():
        return _compute(config, data, checkpoint_dir, progress)


def precompute(config: Config, data: Dataset, seeds, checkpoint_dir, *, progress: bool = False) -> None:
    """Compute the runs of ``seeds`` (some of the config's) into ``checkpoint_dir``.

    So that several processes can share one device's time, each on its own seeds, and several
    machines or sessions one reference run: :func:`compute` with the same ``checkpoint_dir`` then
    finds those runs done, computes the rest (its re-linearisation timings are of the runs it
    computes itself) and collects every run's scores. A finished run leaves only its :class:`Scores`
    there (``<run>.scores.npz``, a few kB), an unfinished one its parameters, so the folder can be
    carried from one machine to another. The reference run's folder is
    ``<repo>/.cache/reference/limit-<scale>`` (:func:`iterlin.experiments.reference.write`). At full
    precision, as :func:`compute`."""
    own = list(range(config.seed, config.seed + config.n_seeds))
    if isinstance(seeds, (int, np.integer)) or not all(isinstance(s, (int, np.integer)) and s in own for s in seeds):
        raise ValueError(f"seeds={seeds!r} is not allowed: seeds must be a list of the config's seeds {own}")
    if checkpoint_dir is None:
        raise ValueError("checkpoint_dir=None is not allowed: precompute writes its runs there for compute to read")
    with full_precision():
        for _ in _runs(config, data, checkpoint_dir, {}, set(int(s) for s in seeds), progress):
            pass


def _runs(config: Config, data: Dataset, checkpoint_dir, timings: dict, seeds, progress: bool):
    """Yield (spec, :class:`Scores`) for every run of :func:`run_specs` (of ``seeds`` only, unless
    None). With ``checkpoint_dir``, a run whose scores are stored there is read, not computed; any
    other resumes from its checkpoint there, is saved after every re-linearisation, and when done
    its scores are written and its checkpoint removed. ``timings[N]`` collects the wall time of
    every re-linearisation computed."""
    x_all, y_all = np.asarray(data.x_train), np.asarray(data.y_train)
    xt, yt = np.asarray(data.x_test), np.asarray(data.y_test)
    ckdir = None if checkpoint_dir is None else Path(checkpoint_dir)
    if ckdir is not None:
        ckdir.mkdir(parents=True, exist_ok=True)
    models, firsts = {}, {}
    try:
        for spec in run_specs(config):
            if seeds is not None and spec.seed not in seeds:
                continue
            key = spec.key()
            stored = None if ckdir is None else ckdir / f"{key}.scores.npz"
            scores = None if stored is None else Scores.read(stored, key, len(yt))
            if scores is None:
                if spec.seed not in models:
                    models[spec.seed] = make_model("cnn", seed_keys(spec.seed)[0])
                model = models[spec.seed]
                x, y = x_all[: spec.n_train], y_all[: spec.n_train]
                tlist = timings.setdefault(spec.n_train, [])

                def first(spec=spec, x=x, y=y, model=model, tlist=tlist):
                    k = (spec.seed, spec.n_train)
                    if k not in firsts:
                        t0 = time.perf_counter()
                        firsts.clear()
                        firsts[k] = linearise_at(model.apply_fn, model.params, x, y)
                        tlist.append(time.perf_counter() - t0)
                    return firsts[k]

                ckpt = None if ckdir is None else ckdir / f"{key}.npz"
                params, params_s = _run(model.apply_fn, model.params, x, y, spec, first, ckpt, tlist)
                scores = Scores.of(model.apply_fn, params, params_s, x, y, xt, yt)
                if ckdir is not None:
                    save_checkpoint(stored, scores, {"run": key})
                    ckpt.unlink(missing_ok=True)
            if progress:
                print(f"limit: {key} done", flush=True)
            yield spec, scores
    finally:
        firsts.clear()


def _compute(config: Config, data: Dataset, checkpoint_dir, progress: bool) -> Results:
    timings: dict[int, list] = {}
    rows = list(_runs(config, data, checkpoint_dir, timings, None, progress))
    sizes = sorted(timings)
    return Results(
        runs=Runs(
            method=np.asarray([r[0].method for r in rows]),
            R=np.asarray([r[0].R for r in rows]),
            tau=np.asarray([r[0].tau for r in rows], np.float64),
            damping=np.asarray([r[0].damping for r in rows], np.float64),
            n_train=np.asarray([r[0].n_train for r in rows]),
            seed=np.asarray([r[0].seed for r in rows]),
            net_test_correct=np.stack([r[1].net_correct for r in rows]),
            lin_test_correct=np.stack([r[1].lin_correct for r in rows]),
            net_test_acc=np.asarray([r[1].net_correct.mean() for r in rows]),
            lin_test_acc=np.asarray([r[1].lin_correct.mean() for r in rows]),
            net_train_acc=np.asarray([float(r[1].train_acc) for r in rows]),
            train_rmse=np.asarray([float(r[1].train_rmse) for r in rows]),
        ),
        relin_seconds=RelinSeconds(
            n_train=np.asarray(sizes),
            seconds=np.asarray([np.median(timings[n]) if timings[n] else np.nan for n in sizes])),
        checks=consistency_checks(config, np.asarray(data.x_train), np.asarray(data.y_train)),
        n_test=np.asarray(len(np.asarray(data.y_test))),
    )


# ------------------------------------------------------------------------------------------------
# Consistency checks (small N): literal small-rate GD against the closed form, τ = ∞ against GN
# ------------------------------------------------------------------------------------------------


def _rel(a, b, ref) -> float:
    fa, fb, fr = (np.asarray(ravel_pytree(t)[0], np.float64) for t in (a, b, ref))
    return float(np.linalg.norm(fa - fb) / max(np.linalg.norm(fb - fr), 1e-300))


def _gd(apply_fn, params_s, x, y, eta: float, steps: int, linear: bool):
    """``steps`` full-batch GD steps of rate η on ½‖f − Y‖² (summed) of the linear model at θ_s
    (``linear``) or of the network, from θ_s."""
    target = jax.nn.one_hot(jnp.asarray(y), 10)

    def loss(p, ps):
        out = linearised_apply(apply_fn, ps, p, x) if linear else apply_fn(p, x)
        return 0.5 * jnp.sum((out - target.astype(out.dtype)) ** 2)

    step = jax.jit(lambda p, ps: jax.tree.map(lambda a, g: a - eta * g, p, jax.grad(loss)(p, ps)))
    p = params_s
    for _ in range(steps):
        p = step(p, params_s)
    return p


def consistency_checks(config: Config, x_all, y_all) -> Checks:
    """At N = ``n_check`` from seed ``seed``'s θ₀, with η = 0.1/max σ (well under 2/λ_max, measured
    from Θ at θ₀) and K = ``gd_steps`` steps per linearisation (τ = Kη):

    * ``literal_vs_flow``: 2 re-linearisations of K literal GD steps on each linearisation against the
      iterated closed-form flow with period τ: ‖θ_lit − θ_flow‖/‖θ_flow − θ₀‖;
    * ``network_gd_vs_flow``: 2K GD steps on the network (gradient flow for 2τ) against the same
      iterated flow (R = 2) and against one flow of 2τ (R = 1): the relative distances;
    * ``gn_vs_flow_inf``: the flow at τ = ∞ against :func:`iterlin.solvers.gauss_newton.gauss_newton_step`
      (λ = 0, kernel solver).
    """
    with full_precision():  # as compute: both routes at full precision
        return _consistency_checks(config, x_all, y_all)


def _consistency_checks(config: Config, x_all, y_all) -> Checks:
    n = config.n_check
    x, y = jnp.asarray(x_all[:n]), y_all[:n]
    model = make_model("cnn", seed_keys(config.seed)[0])
    f, p0 = model.apply_fn, model.params
    lin0 = linearise_at(f, p0, x, y)
    eta = 0.1 / lin0.sigma[-1]
    K = int(config.gd_steps)
    tau = K * eta
    # iterated closed-form flow, R = 2, and the literal version
    p1 = update(f, p0, x, lin0, flow_phi(tau))
    p2 = update(f, p1, x, linearise_at(f, p1, x, y), flow_phi(tau))
    q1 = _gd(f, p0, x, y, eta, K, linear=True)
    q2 = _gd(f, q1, x, y, eta, K, linear=True)
    one = update(f, p0, x, lin0, flow_phi(2 * tau))
    net = _gd(f, p0, x, y, eta, 2 * K, linear=False)
    gn = gauss_newton_step(f, p0, x, y, damping=0.0, solver="kernel")
    inf = update(f, p0, x, lin0, flow_phi(INF))
    return Checks(
        n_check=np.asarray(n), eta=np.asarray(eta), gd_steps=np.asarray(K), tau=np.asarray(tau),
        literal_vs_flow=np.asarray(_rel(q2, p2, p0)),
        network_gd_vs_flow=np.asarray(_rel(net, p2, p0)),
        network_gd_vs_one_flow=np.asarray(_rel(net, one, p0)),
        gn_vs_flow_inf=np.asarray(_rel(gn, inf, p0)),
    )


# ------------------------------------------------------------------------------------------------
# Claims
# ------------------------------------------------------------------------------------------------



def _select(results: Results, **where) -> np.ndarray:
    return runs_where(results.runs, **where)


def _diff(results: Results, ia, ib, net_a: bool = True, net_b: bool = True) -> Difference:
    runs = results.runs
    ka = "net" if net_a else "lin"
    kb = "net" if net_b else "lin"
    return difference(runs[f"{ka}_test_acc"][ia], runs[f"{kb}_test_acc"][ib], n_test=int(results.n_test),
                      correct_a=runs[f"{ka}_test_correct"][ia], correct_b=runs[f"{kb}_test_correct"][ib])


def slopes(results: Results, method: str, R: int | None = None, net: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, the least-squares slope of log₁₀(test error) against log₁₀ N (S,), and the
    test-set variance of each slope (S,) (binomial noise through the delta method)."""
    runs = results.runs
    where = {"method": method} if R is None else {"method": method, "R": R}
    idx = _select(results, **where)
    sizes = np.unique(np.asarray(runs.n_train)[idx])
    n_test = int(results.n_test)
    acc_key = "net_test_acc" if net else "lin_test_acc"
    out, var = [], []
    for seed in np.unique(np.asarray(runs.seed)[idx]):
        err = []
        for m in sizes:
            j = [i for i in idx if runs.seed[i] == seed and runs.n_train[i] == m]
            err.append(1.0 - float(runs[acc_key][j[0]]))
        err = np.clip(np.asarray(err), 1.0 / n_test, None)
        xs = np.log10(sizes.astype(np.float64))
        c = (xs - xs.mean()) / np.sum((xs - xs.mean()) ** 2)
        out.append(float(c @ np.log10(err)))
        var.append(float(np.sum(c**2 * (1 - err) / (n_test * err * np.log(10) ** 2))))
    return np.asarray(out), np.asarray(var)


def ran_main_size(results: Results) -> int:
    """The N at which the results' R grid, GN and damped GN ran (:func:`main_size` of their config)."""
    runs = results.runs
    return int(np.max(np.asarray(runs.n_train)[np.asarray(runs.method) == "gn"]))


def flow_relins(results: Results, n: int) -> list[int]:
    """The R of the iterated-flow runs at N = ``n``, ascending."""
    runs = results.runs
    return sorted({int(r) for r, m, k in zip(runs.R, runs.method, runs.n_train) if m == "flow" and k == n})


def flow_runs(results: Results, n: int) -> dict[int, np.ndarray]:
    """``{R: indices}``: the iterated-flow runs at N = ``n`` per R (ascending), each ordered by seed and
    restricted to the seeds that ran the largest R there (an R that more seeds ran, such as the
    scaling runs' R along the long grid, is paired on those)."""
    runs = results.runs
    Rs = flow_relins(results, n)
    ran = np.asarray(runs.seed)[_select(results, method="flow", R=Rs[-1], n_train=n)]
    return {R: np.asarray([i for i in _select(results, method="flow", R=R, n_train=n) if runs.seed[i] in ran], int)
            for R in Rs}


def _few_updates(row, results: Results, n: int) -> tuple[str, str, str]:
    """"How few feature updates suffice" at N = ``n``: each R of the iterated flow against the
    largest R there (gradient flow, τ → 0), over the seeds that ran it, by
    :func:`iterlin.repro.claims.on_par` within the row's margin; "yes" if some R ≤ the row's
    ``max_relin`` is on par, "no" if every such R is not."""
    runs = results.runs
    flow = flow_runs(results, n)
    Rs = list(flow)
    gf = flow[Rs[-1]]
    few_R = row.max_relin
    rule = (f"on par: the 95 % t interval of Δ (paired test images, seeds) inside ±{pct(row.margin, 0)}; "
            f"gradient flow = the smallest τ (R = {Rs[-1]}); 'yes' if some R ≤ {few_R} is on par, 'no' if every "
            f"R ≤ {few_R} is not")
    verdicts, parts, smallest = [], [], None
    for R in Rs[:-1]:
        d = _diff(results, gf, flow[R])
        v = on_par(d, row.margin)
        verdicts.append((R, v))
        parts.append(f"R={R}: {d.short()} {v}")
        if v == "yes" and smallest is None:
            smallest = R
    few = [v for R, v in verdicts if R <= few_R]
    holds = "yes" if "yes" in few else ("no" if few and all(v == "no" for v in few) else
                                        (NA if not few else "undecided"))
    counts = _diff(results, gf, gf).counts()
    return (f"smallest R on par: {smallest if smallest is not None else 'none'}; " + "; ".join(parts)
            + f" (vs R={Rs[-1]}: {pct(runs.net_test_acc[gf].mean())}; {counts})", holds, rule)


@protocol.rule("limit.few_updates", needs=("margin", "max_relin"))
def few_updates(row, results: Results) -> tuple[str, str, str]:
    """:func:`_few_updates` on the R grid at the main size."""
    return _few_updates(row, results, ran_main_size(results))


@protocol.rule("limit.long_grid", needs=("margin", "max_relin"))
def few_updates_long(row, results: Results) -> tuple[str, str, str]:
    """:func:`_few_updates` on the long R grid (R to the hundreds, :func:`long_grid`), on its own seeds;
    n/a at a scale without one."""
    grid = long_grid(results.config)
    if grid is None:
        return "no long R grid at this scale", NA, "needs the long R grid (n_long)"
    measured, holds, rule = _few_updates(row, results, grid.n_train)
    return (f"N = {grid.n_train}, {grid.n_seeds} seed{'s' if grid.n_seeds > 1 else ''}, gradient flow R = "
            f"{max(flow_relins(results, grid.n_train))}: {measured}", holds, rule)


@protocol.rule("limit.inf_below")
def inf_below(row, results: Results) -> tuple[str, str, str]:
    """K = ∞ (the linear model at θ₀) below the iterated flow at every R ≥ 2, beyond noise."""
    runs = results.runs
    n_main = ran_main_size(results)
    flow = flow_runs(results, n_main)
    kern = _select(results, method="kernel", n_train=n_main)
    below, parts = [], []
    for R in list(flow)[1:]:
        d = _diff(results, kern, flow[R], net_a=False)
        below.append(exceeds(d))
        parts.append(f"R={R}: {d.short()}")
    return (f"K=∞ {pct(runs.lin_test_acc[kern].mean())}; finite τ − K=∞: " + "; ".join(parts),
            all_verdicts(below), "'yes' when every R ≥ 2 is better than K = ∞ beyond noise (interval above 0)")


@protocol.rule("limit.inf_scales_worse")
def inf_scales_worse(row, results: Results) -> tuple[str, str, str]:
    """K = ∞'s test error falls more slowly with N than the iterated flow's at R = ``n_relin``:
    the per-seed slopes of log₁₀ test error against log₁₀ N (:func:`slopes`), paired by seed."""
    runs = results.runs
    Rn = results.config.n_relin
    s_k, v_k = slopes(results, "kernel", net=False)
    s_f, v_f = slopes(results, "flow", Rn)
    rule = ("Δ = slope(K=∞) − slope(finite τ), paired by seed; 'yes' when its 95 % t interval "
            "(seed spread + test noise by the delta method) lies above 0")
    if not (len(s_k) and len(s_k) == len(s_f) and len(np.unique(runs.n_train)) >= 2):
        return "needs ≥ 2 sizes", NA, rule
    d = difference(s_f, s_k, n_test=int(results.n_test), test_var=float(np.mean(v_k + v_f)) / len(s_k))
    return (f"slope of log₁₀ test error vs log₁₀ N: K=∞ {num(s_k.mean(), 3)}, R={Rn} {num(s_f.mean(), 3)}; "
            f"Δ {num(d.delta, 3)} [{num(d.lo, 3)}, {num(d.hi, 3)}] ({d.n_seeds} paired seeds)", exceeds(d), rule)


@protocol.rule("limit.gn_below")
def gn_below(row, results: Results) -> tuple[str, str, str]:
    """GN (τ = ∞) below the iterated flow at τ = T/R and the same R = ``n_relin``, beyond noise."""
    runs = results.runs
    n_main, Rn = ran_main_size(results), results.config.n_relin
    gn = _select(results, method="gn", n_train=n_main)
    flow = flow_runs(results, n_main)[Rn]
    d = _diff(results, gn, flow)
    return (f"GN {pct(runs.net_test_acc[gn].mean())}, τ=T/{Rn} {pct(runs.net_test_acc[flow].mean())}; " + d.describe(),
            exceeds(d), "'yes' when finite τ beats GN beyond noise (interval above 0)")


@protocol.rule("limit.damping_helps")
def damping_helps(row, results: Results) -> tuple[str, str, str]:
    """Damped GN (λ = 1/τ) above GN at the same R = ``n_relin``, beyond noise."""
    runs = results.runs
    n_main, Rn = ran_main_size(results), results.config.n_relin
    gn = _select(results, method="gn", n_train=n_main)
    damped = _select(results, method="damped", n_train=n_main)
    d = _diff(results, gn, damped)
    return (f"λ = 1/τ = {num(float(runs.damping[damped][0]), 2)}, R = {Rn}: damped "
            f"{pct(runs.net_test_acc[damped].mean())}, GN {pct(runs.net_test_acc[gn].mean())}; " + d.describe(),
            exceeds(d), "'yes' when damped GN beats GN beyond noise (interval above 0)")


@protocol.rule("limit.literal_vs_flow", needs=("margin",))
def literal_check(row, results: Results) -> tuple[str, str, str]:
    """Check: the iterated closed-form flow against literal small-rate gradient descent on the linear
    models (:func:`consistency_checks`), relative distance under the row's margin."""
    c = results.checks
    return (f"relative distance {num(float(c.literal_vs_flow), 4)} (N={int(c.n_check)}, R=2, K={int(c.gd_steps)} steps "
            f"of η={float(c.eta):.2g}, τ={float(c.tau):.2g})",
            verdict(float(c.literal_vs_flow) < row.margin), f"< {row.margin:g}")


@protocol.rule("limit.gn_vs_flow_inf", needs=("margin",))
def gn_step_check(row, results: Results) -> tuple[str, str, str]:
    """Check: the flow at τ → ∞ against the Gauss–Newton step, relative distance under the row's margin."""
    c = results.checks
    return (f"relative distance {num(float(c.gn_vs_flow_inf), 4)}", verdict(float(c.gn_vs_flow_inf) < row.margin),
            f"< {row.margin:g}")


@protocol.rule("limit.towards_gd")
def towards_gd(row, results: Results) -> tuple[str, str, str]:
    """Check: two re-linearisations bring the flow closer to 2K GD steps on the network than one."""
    c = results.checks
    return (f"relative distance to 2K GD steps on the network: R = 2 {num(float(c.network_gd_vs_flow), 4)}, "
            f"R = 1 {num(float(c.network_gd_vs_one_flow), 4)} (time 2τ)",
            verdict(float(c.network_gd_vs_flow) < float(c.network_gd_vs_one_flow)), "R = 2 closer than R = 1")


def claims(results: Results) -> list[Claim]:
    """The rows of limit in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`), stated before the
    run, decided by the shared noise rule (:func:`iterlin.repro.stats.difference`: a 95 % t interval
    of Δ, paired on the test images); three consistency checks of the closed forms."""
    return protocol.claims("limit", results)


EXPERIMENT = Experiment("limit", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws (not part of ``compute``)


class ByR(NamedTuple):
    """The iterated flow at one N, by R (:func:`accuracy_by_R`)."""

    R: np.ndarray  #: (L,) the numbers of re-linearisations, increasing
    acc: np.ndarray  #: (L, S) the network's test accuracy, over the seeds that ran the largest R


def accuracy_by_R(results: Results, n: int | None = None) -> ByR:
    """The iterated flow's network test accuracy by R at N = ``n`` (None: ``n_main``, where GN ran)."""
    flow = flow_runs(results, ran_main_size(results) if n is None else n)
    return ByR(np.asarray(list(flow)), np.stack([results.runs.net_test_acc[i] for i in flow.values()]))


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Left: test accuracy of the network against R at fixed total time (seeds as dots, mean ± s.e.),
    at N = ``n_main`` and, where it ran, along the long R grid at its N; Gauss–Newton, damped GN and
    K = ∞ (at ``n_main``) as horizontal lines. Right: test error against N (log-log)
    for K = ∞ and the iterated flow at R = n_relin."""
    runs = results.runs
    n_main = ran_main_size(results)
    fig, (ax, ax2) = panels(2, panel_size=(5.5, 4))
    grid = long_grid(results.config)
    series = [(n_main, "C0")] + ([(grid.n_train, "C1")] if grid is not None and grid.n_train != n_main else [])
    for n, color in series:
        by = accuracy_by_R(results, n)
        band(ax, by.R, by.acc, axis=1, color=color, marker="o",
             label=f"iterated flow, τ = T/R, N = {n} ({by.acc.shape[1]} seeds)")
        for i, R in enumerate(by.R):
            ax.scatter(np.full(by.acc.shape[1], R), by.acc[i], color=color, s=10, alpha=0.5)
    for method, key, color, label in (("gn", "net_test_acc", "C3", "Gauss–Newton (τ = ∞)"),
                                      ("damped", "net_test_acc", "C2", "damped GN (λ = 1/τ)"),
                                      ("kernel", "lin_test_acc", "k", "K = ∞ (eNTK at θ₀)")):
        sel = (runs.method == method) & (runs.n_train == n_main)
        ax.axhline(runs[key][sel].mean(), color=color, linestyle="--", label=f"{label}, N = {n_main}")
    ax.set(xscale="log", xlabel="re-linearisations R (total time fixed)", ylabel="test accuracy",
           title=f"{results.config.scale} scale")
    legend(ax)
    Rn = results.config.n_relin
    for method, R, net, color, label in (("kernel", None, False, "k", "K = ∞"),
                                         ("flow", Rn, True, "C0", f"iterated flow, R = {Rn}")):
        sel = (runs.method == method) & ((runs.R == R) if R else True)
        sizes = np.unique(runs.n_train[sel])
        err = np.stack([1 - runs["net_test_acc" if net else "lin_test_acc"][sel & (runs.n_train == m)]
                        for m in sizes])
        band(ax2, sizes, err, axis=1, color=color, marker="o",
             label=f"{label} (slope {slopes(results, method, R, net)[0].mean():.3f})")
    ax2.set(xscale="log", yscale="log", xlabel="training images N", ylabel="test error", title="data scaling")
    legend(ax2)
    plt.show()
    t = results.relin_seconds
    print("seconds per re-linearisation (median, this run): "
          + ", ".join(f"N={n}: {s:.1f} s" for n, s in zip(t.n_train, t.seconds)))
