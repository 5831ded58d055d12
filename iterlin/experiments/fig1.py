"""Fig. 1: the spectrum of K, from gradient descent to Gauss–Newton (Sec. 3.1, 3.3).

In the paper Fig. 1 is a schematic ("for small values of K, it is close enough to (stochastic)
gradient descent that it achieves comparable performance, and for very large K, it will train
until convergence for each linearisation giving the same results for all larger K"). Here it is
measured on the paper's 1-d regression of Fig. 9 (quintic, MLP 5×50, MSE, full batch), where the
K → ∞ end is exactly Gauss–Newton: final test RMSE against K on a log grid from 1 to ∞, every run
trained to convergence, with gradient descent (K = 1), Gauss–Newton (λ = 0, Eq. 5) and damped
Gauss–Newton runs (Eq. 6) at several λ, each drawn at K = 1/(λη), marked; plus the K ↔ λ bridge of Sec. 3.3 on the model's own NTK
spectrum (:func:`iterlin.solvers.closed_form.residual_spectrum`, ``gd_filter``, ``gn_filter``,
``equivalent_damping``). Every value of the setting is ours (the paper has no experiment for
this figure). The paper does not say how it initialised the MLP: this edition draws every weight
and bias from U(−1/√fan_in, 1/√fan_in) (:func:`iterlin.models.torch_default_init`, the scheme of
PyTorch's ``nn.Linear``; see there why not Flax's zero biases), and computes in float64 (see
:mod:`iterlin.experiments.fig9`).

Iterative linearisation in the small-learning-rate limit
---------------------------------------------------------
With MSE and full batch, K steps of gradient descent with step η on one linearisation act on the
NTK eigen-directions as the filter φ_K(σ) = (1 − (1 − ησ)^K)/σ (:func:`iterlin.solvers.closed_form.gd_filter`);
for ησ ≪ 1 this is gradient flow for the time τ = Kη, φ(σ) = (1 − e^{−στ})/σ (Eq. 18), and for
τ → ∞ the minimum-norm solution of the linearised problem, i.e. exactly the Gauss–Newton step
(Eq. 5, 19). :func:`iterlin.solvers.gauss_newton.gauss_newton_train` with ``filter="flow"`` performs one
such linearisation per step in closed form (one Jacobian and one N×N eigendecomposition, whatever
K), so "each linearisation trained for K steps" costs the same for K = 10 and K = 10⁷ and can
never overshoot. Literal gradient descent at a fixed learning rate is different at large K: the
NTK's top eigenvalue grows as the network moves (progressive sharpening; measured here from 30 at
initialisation to > 2000 within a few thousand steps), and once ησ_max > 2 the linear model
diverges within its K steps, while plain GD (K = 1) survives at the edge of stability. Small K,
where the closed form would need more than ``max_relin`` linearisations (:func:`plan`), is
trained literally with :func:`iterlin.training.train_sweep`.

The real algorithm beside the closed form (:func:`literal_runs`): at the K of the grid that are powers of ten
and at most T/2 (10, 100, 1000 at every scale but gpu/paper), literal full-batch GD on the linearisations for
T/2 steps at ``lr`` and ``lr``/4 (:data:`LITERAL_RATES`), every seed, next to the closed form at the same
τ = K·lr'/N and R = T/(2K) linearisations (the closed form's own runs, R ≥ n_relin linearisations of K steps,
are out of literal reach: 5·10⁵ steps at K = 1000). The stability bound 2/λ_max(G(θ_s)) of each run's current
linearisation (:func:`iterlin.analysis.stability.max_stable_lr`) is measured at every evaluation point, so the results
say which runs diverged, at which step, and on a linearisation with what bound.

Losses in the Gauss–Newton steps are summed over examples (Eq. 6 literally); the gradient-descent
learning rate ``lr`` is for the MEAN loss (as :func:`iterlin.training.train`), i.e. the summed-loss
step is η = lr / N.

Claims
------
Every comparison between runs is paired by seed (the runs of one seed share θ₀) and decided on the
95 % t interval over seeds of the mean difference (:func:`seed_difference`, then
:func:`iterlin.repro.claims.on_par` or :func:`iterlin.repro.claims.exceeds`; undecided with one seed). The
K ↔ λ row pairs each damped run with the K nearest 1/(λη) (:func:`damping_pairs`) and holds only
when the wrong pairings K = 10/(λη) and 1/(10λη) are refuted by the same rule: on a flat stretch of
the K curve no pairing can be told from another. Rows true by construction here (the closed form
with Kη·σ_min ≥ 10 IS the Gauss–Newton step; the filters of the bridge) are consistency checks
(``kind="check"``), listed apart.


Config keys: ``K`` (list of periods; ∞ = never re-linearise), ``lr`` (GD learning rate for the
mean loss; η = lr/N), ``steps`` (T, literal GD steps), ``n_relin`` (R, the least number of
linearisations of a closed-form run), ``max_relin`` (see :func:`plan`), ``damping`` (list: the λ
of the damped Gauss–Newton runs, :func:`gn_damping`), ``gn_steps`` (Gauss–Newton steps), ``seed`` and ``n_seeds``
(seeds ``seed, …, seed + n_seeds − 1``), ``n_train``, ``n_test``, ``n_evals``, ``x64``.

Results: :class:`Results` (NK periods K, S seeds). For K = ∞ the network row is f(θ_∞), the
linear row the converged linear model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from matplotlib.axes import Axes

from ..repro.claims import NA, UNDECIDED, Claim, all_verdicts, divergence_row, exceeds, fmt_K, on_par, verdict
from ..solvers.closed_form import equivalent_damping, gd_filter, gn_filter, gradient_flow_limit, residual_spectrum
from ..columns import Record
from ..repro.config import (
    Damping, Evals, ExperimentConfig, Flag, GaussNewtonSteps, Images, Period, Rate, RunCount, Seed, Steps,
    TestImages,
)
from ..data import Dataset
from ..solvers.gauss_newton import gauss_newton_step, gauss_newton_train
from ..linearise import linearised_apply
from ..models import quintic_model
from ..repro.plotting import (
    as_1d,
    band,
    check_axes,
    k1_and_largest,
    legend,
    mean_se,
    panels,
    plot_runs,
    real_array,
    rug,
    seed_points,
    set_K_axis,
)
from ..precision import x64
from ..analysis.stability import max_stable_lr
from ..repro.stats import Difference, num, pct
from ..training import train_sweep
from ..tree import tree_index
from . import protocol
from ._common import Experiment, checkpoint_path, eval_points, index_of_K, load_quintic, rmse

__all__ = [
    "Results", "GaussNewtonRuns", "Bridge", "LiteralRuns", "SCALES", "EXPERIMENT", "BRIDGE_K", "load", "compute", "claims", "RunPlan", "LiteralPlan", "plan",
    "converged", "Summary", "summary",
    "seed_rmse", "diverged_K", "BridgeCurves", "bridge_curves", "gn_damping", "seed_difference", "decide", "interval",
    "damping_pairs", "SMALL_K", "SOLVED", "ROUNDING", "first_steps", "SHIFT",
    "literal_plan", "literal_runs", "LITERAL_RATES", "LITERAL_STEPS", "SHARPNESS_ITERS",
    "literal_difference", "literal_stable", "literal_claim", "literal_bound", "small_k", "between", "inf_worse",
    "converged_rule", "finite", "literal_rule", "literal_bound_rule", "gauss_newton_check", "bridge_check", "damping_rule",
    "plot_literal", "plot_stability_bound", "plot",
]

INF = math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(ExperimentConfig):
    """fig1's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "fig1"

    K: tuple[Period, ...]
    lr: Rate
    steps: Steps
    n_relin: GaussNewtonSteps
    max_relin: GaussNewtonSteps
    damping: tuple[Damping, ...]
    gn_steps: Steps
    seed: Seed
    n_seeds: RunCount
    n_train: Images | None
    n_test: TestImages | None
    n_evals: Evals
    x64: Flag


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig1.py, "What each scale runs").
_CPU = dict(
    K=[1, 3, 10, 30, 100, 300, 1000, 3000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9, INF], lr=0.02,
    steps=10_000, n_relin=500, max_relin=1000, damping=[0.01, 0.1, 1.0, 10.0], gn_steps=500, seed=0,
    n_seeds=40, n_train=20, n_test=1000, n_evals=10, x64=True,
)
_LONGER = dict(_CPU, steps=20_000, n_relin=1000, max_relin=2000, gn_steps=2000, n_evals=20)
SCALES = {
    "smoke": dict(_CPU, K=[k for k in _CPU["K"] if k != 3000], n_seeds=1),
    "cpu": _CPU,
    "gpu": _LONGER,
    "paper": _LONGER,
}


@dataclasses.dataclass(frozen=True, eq=False)
class GaussNewtonRuns(Record):
    """The Gauss–Newton runs: L = 1 + the number of damped λ, S seeds."""

    damping: np.ndarray  #: (L,) [0, λ₁, …] (:func:`gn_damping`)
    #: (L,) [∞, 1/(λ₁η), …], the K whose GD filter switches where 1/(σ + λ) does (the scale rule of
    #: :func:`iterlin.solvers.closed_form.equivalent_damping`)
    equiv_K: np.ndarray
    net_train_rmse: np.ndarray  #: (L, S) the final train RMSE
    net_test_rmse: np.ndarray  #: (L, S) the final test RMSE
    net_train_rmse_mid: np.ndarray  #: (L, S) the train RMSE half-way (to judge convergence)
    diverged: np.ndarray  #: (L, S) bool


@dataclasses.dataclass(frozen=True, eq=False)
class Bridge(Record):
    """The K ↔ λ bridge of Sec. 3.3 on the NTK spectrum at θ₀ of the first seed: N eigenvalues, M
    periods (:data:`BRIDGE_K`), G grid points."""

    eta: np.ndarray  #: () the step η of the summed loss
    sigma: np.ndarray  #: (N,) the NTK's eigenvalues
    coeffs: np.ndarray  #: (N,) the residual's coordinates along them
    K: np.ndarray  #: (M,) the periods
    damping: np.ndarray  #: (M,) λ = 1/(Kη)
    #: (M,) the λ whose residual filter best matches K GD steps on this spectrum (weights c²)
    damping_fit: np.ndarray
    sigma_grid: np.ndarray  #: (G,)
    gd_filter: np.ndarray  #: (M, G) K steps of GD (:func:`iterlin.solvers.closed_form.gd_filter`)
    gn_filter: np.ndarray  #: (M, G) damped Gauss–Newton at λ = 1/(Kη)
    gn_filter_fit: np.ndarray  #: (M, G) damped Gauss–Newton at the fitted λ


@dataclasses.dataclass(frozen=True, eq=False)
class LiteralRuns(Record):
    """The literal GD runs at large K beside their closed form (:func:`literal_runs`): NR rates, NL
    periods, S seeds, E evaluation points. The runs' fields are None where the plan has no K."""

    K: np.ndarray  #: (NL,) the periods
    lr: np.ndarray  #: (NR,) the rates lr'
    steps: np.ndarray  #: () T', the steps of every run
    n_relin: np.ndarray  #: (NL,) R = ⌊T'/K⌋
    tau: np.ndarray  #: (NR, NL) τ = K·lr'/N
    net_test_rmse: np.ndarray | None = None  #: (NR, NL, S) at step T' (NaN where diverged)
    net_train_rmse: np.ndarray | None = None  #: (NR, NL, S)
    lin_test_rmse: np.ndarray | None = None  #: (NR, NL, S)
    diverged: np.ndarray | None = None  #: (NR, NL, S) bool
    diverged_step: np.ndarray | None = None  #: (NR, NL, S) (−1 if finite)
    bound_step: np.ndarray | None = None  #: (E,)
    bound: np.ndarray | None = None  #: (NR, NL, S, E) 2/λ_max(G(θ_s)) (0 where λ_max is not finite)
    flow_net_test_rmse: np.ndarray | None = None  #: (NR, NL, S) the closed form at the same (τ, R)
    flow_net_train_rmse: np.ndarray | None = None  #: (NR, NL, S)
    flow_diverged: np.ndarray | None = None  #: (NR, NL, S) bool


class Results(NamedTuple):
    """fig1's results (:func:`compute`): NK periods K (:func:`plan`), S seeds."""

    K: np.ndarray  #: (NK,) the periods (∞ = never re-linearise)
    method: np.ndarray  #: (NK,) str, how each K is trained: ``"gd"``, ``"flow"`` or ``"kernel"`` (:func:`plan`)
    n_relin: np.ndarray  #: (NK,) linearisations per run
    #: (NK,) training time in units of the summed-loss flow (Tη or Rτ; ∞ for ``"kernel"``)
    time: np.ndarray
    net_train_rmse: np.ndarray  #: (NK, S) the network's final train RMSE (f(θ_∞) for K = ∞)
    net_test_rmse: np.ndarray  #: (NK, S) the network's final test RMSE
    lin_train_rmse: np.ndarray  #: (NK, S) the linear model's final train RMSE (the converged one for K = ∞)
    lin_test_rmse: np.ndarray  #: (NK, S) the linear model's final test RMSE
    net_train_rmse_mid: np.ndarray  #: (NK, S) the network's train RMSE half-way (to judge convergence)
    diverged: np.ndarray  #: (NK, S) bool
    gn: GaussNewtonRuns
    bridge: Bridge
    x_test: np.ndarray  #: (n_test,) the test inputs
    y_test: np.ndarray  #: (n_test,) the test targets
    seeds: np.ndarray  #: (S,) the seeds
    literal: LiteralRuns | None = None  #: None in results computed before the literal runs existed
    #: (NK, S) the construction behind the Gauss–Newton check (:func:`first_steps`): from each seed's θ₀,
    #: ‖θ_τ − θ_GN‖ / ‖θ_GN − θ₀‖ after one linearisation, the closed form at τ = Kη against the
    #: Gauss–Newton step (λ = 0); NaN for the K not trained in closed form; None in results computed
    #: before it existed
    first_step: np.ndarray | None = None
    sigma_min: np.ndarray | None = None  #: (S,) the smallest non-zero NTK eigenvalue at each seed's θ₀
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


#: The periods K drawn in the K ↔ λ panel.
BRIDGE_K = (10, 100, 1000, 10_000)

load = load_quintic


class RunPlan(NamedTuple):
    """How one K of Fig. 1 is trained (:func:`plan`): ``method`` "gd", "flow" or "kernel", with
    ``n_relin`` linearisations over ``steps`` steps (K = ∞: 0 and 0)."""

    K: float
    method: str
    n_relin: int
    steps: int


class LiteralPlan(NamedTuple):
    """The literal gradient-descent runs at large K (:func:`literal_plan`): the periods ``K``, the
    mean-loss rates ``lr`` and the steps T' of each run."""

    K: list[float]
    lr: list[float]
    steps: int


def plan(config: Config) -> list[RunPlan]:
    """How each K of Fig. 1 is trained: one :class:`RunPlan` per K of ``config.K``.

    With T = ``steps``, R = ``n_relin`` and R_max = ``max_relin``:

    * ``"gd"``: literal gradient descent (Algorithm 1, :func:`iterlin.training.train_sweep`) for T
      steps at ``lr``, for every finite K with ⌈T/K⌉ > R_max (the closed form would need more than
      R_max linearisations to cover the same time);
    * ``"flow"``: max(R, ⌈T/K⌉) linearisations, each trained for K steps at η = lr/N in the
      small-learning-rate limit (gradient flow for time τ = Kη, in closed form), so the total
      training time is at least that of the literal runs, Tη;
    * ``"kernel"``: K = ∞, never re-linearise: the linearisation at θ₀ trained to convergence,
      exactly (its minimum-norm solution, Eq. 19 = one Gauss–Newton step from θ₀).
    """
    T, R, R_max = config.steps, config.n_relin, config.max_relin
    plan = []
    for K in config.K:
        if math.isinf(K):
            plan.append(RunPlan(math.inf, "kernel", 0, 0))
        elif math.ceil(T / K) > R_max:
            plan.append(RunPlan(float(K), "gd", int(T // K), T))
        else:
            r = max(R, math.ceil(T / K))
            plan.append(RunPlan(float(K), "flow", r, r))
    return plan


def gn_damping(config: Config) -> list[float]:
    """The λ of the Gauss–Newton runs: 0 (Gauss–Newton, Eq. 5), then every λ > 0 of ``damping``
    (damped Gauss–Newton, Eq. 6), increasing, without repeats."""
    return [0.0] + sorted({float(v) for v in config.damping if v > 0})


#: The literal runs at large K (:func:`literal_plan`): full-batch gradient descent on the linearisations at these
#: multiples of ``lr``: the figure's own rate (1), at which literal GD at K ≥ 10 diverges once the NTK has sharpened
#: (measured: every seed at K = 10 by step ~2500, most at K = 100 and half at K = 1000 by step 5000, on the cpu
#: scale's 10 seeds), and a quarter of it, stable over the same steps for every seed (measured likewise).
LITERAL_RATES = (1.0, 0.25)
#: ... for this fraction of ``steps`` (T/2: 5000 steps at every scale but gpu/paper). The closed form's own runs
#: (R ≥ n_relin linearisations of K steps: 5·10⁵ steps at K = 1000) are out of reach literally (about 0.5 ms per
#: run and step on the 2-core CPU, vmapped); 2 rates × 3 K × 10 seeds × 5000 steps is about 4 minutes there. The
#: comparison is with the closed form at the literal runs' own (τ = K·lr'/N, R = T'/K), computed beside them.
LITERAL_STEPS = 0.5
#: Power iterations for λ_max of the linear model's Hessian (:func:`iterlin.analysis.stability.max_stable_lr`).
SHARPNESS_ITERS = 50


def literal_plan(config: Config) -> LiteralPlan:
    """The literal gradient-descent runs at large K: a :class:`LiteralPlan` (K, lr, steps T').

    T' = ⌊``LITERAL_STEPS`` · ``steps``⌋; K: every K of the grid trained by the closed form
    (:func:`plan`'s ``"flow"``), K > 1, that is a power of ten and at most T' (at least one re-linearisation);
    rates: ``LITERAL_RATES`` × ``lr`` (mean-loss rates; η' = lr'/N for the summed loss).
    """
    T = max(1, int(LITERAL_STEPS * config.steps))
    Ks = [p.K for p in plan(config) if p.method == "flow" and 1 < p.K <= T
          and abs(math.log10(p.K) - round(math.log10(p.K))) < 1e-9]
    return LiteralPlan(Ks, [f * config.lr for f in LITERAL_RATES], T)


def literal_runs(apply_fn, params, data, config: Config, *, checkpoint_dir=None, progress: bool = False) -> LiteralRuns:
    """Literal iterative linearisation (Algorithm 1) at large K beside its closed form (the small-lr limit).

    For every rate lr' and K of :func:`literal_plan` and every seed (``params`` stacked (S, ...)):
    T' steps of full-batch gradient descent at lr' on the mean loss of the linearisation at θ_s,
    re-linearising every K steps (:func:`iterlin.training.train_sweep`, one program per rate, K-major
    then seeds), and the same R = ⌊T'/K⌋ linearisations each trained by gradient flow for
    τ = K·lr'/N in closed form (Eq. 18, :func:`iterlin.solvers.gauss_newton.gauss_newton_train` with
    ``filter="flow"``): the limit lr' → 0 of the literal run at the same (τ, R), from which it differs
    by O(lr') while it is stable.

    Stability: with MSE each linearisation is a quadratic whose Hessian is G(θ_s) = J_sᵀJ_s/N (the
    GGN, :mod:`iterlin.analysis.stability`); gradient descent on it diverges iff lr' > 2/λ_max(G(θ_s)) (along
    the top direction, given error there), by a factor |1 − lr'λ_max| per step. The bound is measured
    at the linearisation point θ_s of every run at each evaluation point (``SHARPNESS_ITERS`` power
    iterations); a diverged run is frozen (:func:`iterlin.training.commit_step`) with the θ_s on which
    it diverged, so its last value is the bound there.

    ``data``: a :class:`iterlin.data.Dataset` (N training points). Returns the :class:`LiteralRuns` record
    of these runs.
    """
    Ks, rates, T = literal_plan(config)
    S = jax.tree.leaves(params)[0].shape[0]
    NR, NL = len(rates), len(Ks)
    x, y = data.x_train, data.y_train
    N = x.shape[0]
    test_d = (data.x_test, data.y_test)
    out = {"K": np.asarray(Ks, np.float64), "lr": np.asarray(rates, np.float64), "steps": np.asarray(T),
           "n_relin": np.asarray([int(T // k) for k in Ks]),
           "tau": np.asarray([[k * r / N for k in Ks] for r in rates], np.float64)}
    if not Ks:
        return LiteralRuns(**out)
    stacked = jax.tree.map(lambda a: jnp.concatenate([a] * NL), params)  # K-major, then seeds

    def bound(t, state):  # 2/λ_max(G(θ_s)) of every run (R,), at the evaluation points
        b = [max_stable_lr(apply_fn, tree_index(state.params_s, i), x, y, loss="mse", iters=SHARPNESS_ITERS)
             for i in range(NL * S)]
        return {"bound": np.nan_to_num(np.asarray(b, np.float64), nan=0.0, posinf=0.0, neginf=0.0)}

    keys = ("net_test_rmse", "net_train_rmse", "lin_test_rmse")
    lit = {k: np.full((NR, NL, S), np.nan) for k in keys}
    div = np.zeros((NR, NL, S), bool)
    div_step = np.full((NR, NL, S), -1)
    bounds = None
    for r, rate in enumerate(rates):
        _, h = train_sweep(apply_fn, stacked, (x, y), K=[k for k in Ks for _ in range(S)], steps=T,
                           optimizer=optax.sgd(rate), loss="mse", eval_data=test_d,
                           eval_steps=eval_points(T, config.n_evals), callback=bound, progress=progress,
                           config={**config.to_dict(), "literal_lr": rate},
                           checkpoint=checkpoint_path(checkpoint_dir, f"literal{r}"))
        E = len(h.step)
        div[r] = np.asarray(h.diverged).reshape(NL, S)
        div_step[r] = np.asarray(h.diverged_step).reshape(NL, S)
        for k in keys:
            lit[k][r] = np.where(div[r], np.nan, np.asarray(h[k]).reshape(NL, S, E)[..., -1])
        if bounds is None:
            bounds = np.full((NR, NL, S, E), np.nan)
            out["bound_step"] = np.asarray(h.step)
        bounds[r] = np.asarray(h.extra["bound"]).reshape(NL, S, E)
    out.update(lit, diverged=div, diverged_step=div_step, bound=bounds)

    # The closed form at the same (τ, R): one program per distinct R (every rate and seed).
    flow = {k: np.full((NR, NL, S), np.nan) for k in ("flow_net_test_rmse", "flow_net_train_rmse")}
    fdiv = np.zeros((NR, NL, S), bool)
    for R in sorted(set(out["n_relin"].tolist())):
        idx = [j for j in range(NL) if out["n_relin"][j] == R]
        taus = [out["tau"][r, j] for r in range(NR) for j in idx for _ in range(S)]
        reps = NR * len(idx)
        _, h = gauss_newton_train(apply_fn, jax.tree.map(lambda a: jnp.concatenate([a] * reps), params), (x, y),
                                  damping=taus, filter="flow", steps=R, loss="mse", solver="kernel",
                                  eval_data=test_d, eval_steps=[0, R], progress=progress, config=config.to_dict(),
                                  checkpoint=checkpoint_path(checkpoint_dir, f"literal_flow{R}"))
        for key in flow:
            vals = np.asarray(h[key[5:]])[:, -1].reshape(NR, len(idx), S)
            flow[key][:, idx] = vals
        fdiv[:, idx] = np.asarray(h["diverged"]).reshape(NR, len(idx), S)
    out.update(flow, flow_diverged=fdiv)
    return LiteralRuns(**out)


def _bridge(apply_fn, params0, data, config) -> Bridge:
    """The K ↔ λ bridge of Sec. 3.3 on the NTK spectrum of the first seed at θ₀."""
    eta = config.lr / data.x_train.shape[0]
    sigma, coeffs = (np.asarray(a, np.float64) for a in residual_spectrum(
        apply_fn, params0, data.x_train, data.y_train))
    pos = sigma[sigma > sigma.max() * 1e-12]
    grid = np.logspace(np.log10(pos.min()) - 1, np.log10(sigma.max()) + 0.5, 200)
    Ks = list(BRIDGE_K)
    lam = np.asarray([equivalent_damping(k, eta) for k in Ks])
    lam_fit = np.asarray([equivalent_damping(k, eta, sigma, weights=coeffs**2) for k in Ks])
    return Bridge(
        eta=np.asarray(eta),
        sigma=sigma,
        coeffs=coeffs,
        K=np.asarray(Ks, np.float64),
        damping=lam,
        damping_fit=lam_fit,
        sigma_grid=grid,
        gd_filter=np.stack([np.asarray(gd_filter(grid, k, eta)) for k in Ks]),
        gn_filter=np.stack([np.asarray(gn_filter(grid, v)) for v in lam]),
        gn_filter_fit=np.stack([np.asarray(gn_filter(grid, v)) for v in lam_fit]),
    )


def _sigma_min(sigma) -> float:
    """The smallest non-zero of the NTK eigenvalues ``sigma`` (those below N·ε·σ_max count as zero)."""
    sigma = np.asarray(sigma, np.float64)
    return float(sigma[sigma > sigma.max() * len(sigma) * np.finfo(np.float64).eps].min())


def first_steps(apply_fn, params, data, taus: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    """``(distance (NK, S), σ_min (S,))``: from each seed's θ₀ (``params`` stacked (S, ...)), the relative
    distance ‖θ_τ − θ_GN‖ / ‖θ_GN − θ₀‖ between one linearisation trained by gradient flow for τ in
    closed form (Eq. 18) and the Gauss–Newton step (λ = 0, Eq. 5), for each τ of ``taus`` (NaN where
    None), and the smallest non-zero NTK eigenvalue σ_min at θ₀ (eigenvalues below N·ε·σ_max count as
    zero).

    With J = Σ s_k u_k v_kᵀ (σ_k = s_k²) and the residual's coordinates c_k, θ_GN − θ₀ = Σ (c_k/s_k) v_k
    and θ_τ − θ_GN = −Σ e^{−σ_k τ} (c_k/s_k) v_k, so the distance is at most e^{−σ_min τ}: the
    construction that makes large K Gauss–Newton, checked one linearisation at a time (after many, the
    two trajectories may part: λ = 0 Gauss–Newton amplifies rounding).
    """
    x, y = data.x_train, data.y_train
    S = jax.tree.leaves(params)[0].shape[0]
    dist = np.full((len(taus), S), np.nan)
    sigma_min = np.zeros(S)
    for j in range(S):
        p0 = tree_index(params, j)
        sigma_min[j] = _sigma_min(residual_spectrum(apply_fn, p0, x, y)[0])
        base = np.asarray(ravel_pytree(p0)[0], np.float64)
        gn = np.asarray(ravel_pytree(gauss_newton_step(apply_fn, p0, x, y, damping=0.0, loss="mse",
                                                        solver="kernel"))[0], np.float64)
        for i, tau in enumerate(taus):
            if tau is not None:
                flow = np.asarray(ravel_pytree(gauss_newton_step(apply_fn, p0, x, y, damping=tau, filter="flow",
                                                                  loss="mse", solver="kernel"))[0], np.float64)
                dist[i, j] = np.linalg.norm(flow - gn) / np.linalg.norm(gn - base)
    return dist, sigma_min


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every K of :func:`plan`, the Gauss–Newton runs, the bridge and the literal runs (see :class:`Results`)."""
    seeds = list(range(config.seed, config.seed + config.n_seeds))
    S = len(seeds)
    runs = plan(config)
    with x64(config.x64):
        dtype = jnp.float64 if config.x64 else jnp.float32
        apply_fn, params = quintic_model(seeds, dtype)
        train_d, test_d = (data.x_train, data.y_train), (data.x_test, data.y_test)
        N = data.x_train.shape[0]
        eta = config.lr / N
        NK = len(runs)
        rows = {k: np.full((NK, S), np.nan) for k in (
            "net_train_rmse", "net_test_rmse", "lin_train_rmse", "lin_test_rmse", "net_train_rmse_mid")}
        diverged = np.zeros((NK, S), bool)
        common = dict(eval_data=test_d, progress=progress, config=config.to_dict())

        def store(idx, history, reps):
            # history arrays (len(idx)·S, E), run order: K-major, then seeds
            E = len(history.step)
            mid = int(np.searchsorted(history.step, history.step[-1] / 2))
            for model in ("net", "lin"):
                for split in ("train", "test"):
                    rmse_ = np.asarray(history.metrics(model, split).rmse).reshape(reps, S, E)
                    rows[f"{model}_{split}_rmse"][idx] = rmse_[..., -1]
            rows["net_train_rmse_mid"][idx] = np.asarray(history.net_train.rmse).reshape(reps, S, E)[..., mid]
            diverged[idx] = np.asarray(history.diverged).reshape(reps, S)

        def repeat(n):  # params for n values × S seeds, K-major
            return jax.tree.map(lambda a: jnp.concatenate([a] * n), params)

        # Literal gradient descent: one train_sweep over every "gd" K and every seed.
        gd = [i for i, p in enumerate(runs) if p.method == "gd"]
        if gd:
            Ks = [runs[i].K for i in gd for _ in seeds]
            _, h = train_sweep(apply_fn, repeat(len(gd)), train_d, K=Ks, steps=config.steps,
                               optimizer=optax.sgd(config.lr), loss="mse",
                               eval_steps=eval_points(config.steps, config.n_evals),
                               checkpoint=checkpoint_path(checkpoint_dir, "gd"), **common)
            store(gd, h, len(gd))

        # Closed-form linearisations (small-lr limit): one fit per distinct number of linearisations.
        flow = [i for i, p in enumerate(runs) if p.method == "flow"]
        for r in sorted({runs[i].n_relin for i in flow}):
            idx = [i for i in flow if runs[i].n_relin == r]
            taus = [runs[i].K * eta for i in idx for _ in seeds]
            _, h = gauss_newton_train(apply_fn, repeat(len(idx)), train_d, damping=taus, filter="flow", steps=r,
                                      loss="mse", solver="kernel", eval_steps=eval_points(r, config.n_evals),
                                      checkpoint=checkpoint_path(checkpoint_dir, f"flow{r}"), **common)
            store(idx, h, len(idx))

        # K = ∞: the linearisation at θ₀ solved exactly (minimum-norm solution, Eq. 19).
        for i, p in enumerate(runs):
            if p.method != "kernel":
                continue
            for j in range(S):
                p0 = tree_index(params, j)
                p_inf = gradient_flow_limit(apply_fn, p0, *train_d)
                rows["net_train_rmse"][i, j] = rmse(apply_fn(p_inf, train_d[0]), train_d[1])
                rows["net_test_rmse"][i, j] = rmse(apply_fn(p_inf, test_d[0]), test_d[1])
                rows["lin_train_rmse"][i, j] = rmse(linearised_apply(apply_fn, p0, p_inf, train_d[0]), train_d[1])
                rows["lin_test_rmse"][i, j] = rmse(linearised_apply(apply_fn, p0, p_inf, test_d[0]), test_d[1])
                diverged[i, j] = not np.isfinite(rows["lin_test_rmse"][i, j])

        # The Gauss–Newton end (λ = 0, Eq. 5) and the damped runs (Eq. 6), by the library's step:
        # every λ × seed in one program (λ-major, then seeds).
        gn_lams = gn_damping(config)
        L = len(gn_lams)
        _, h = gauss_newton_train(apply_fn, repeat(L), train_d, damping=[lam for lam in gn_lams for _ in seeds],
                                  steps=config.gn_steps, loss="mse",
                                  eval_steps=eval_points(config.gn_steps, config.n_evals),
                                  checkpoint=checkpoint_path(checkpoint_dir, "gn"), **common)
        E = len(h.step)
        mid = int(np.searchsorted(h.step, h.step[-1] / 2))
        train_c = np.asarray(h.net_train.rmse).reshape(L, S, E)
        gn = GaussNewtonRuns(
            damping=np.asarray(gn_lams),
            equiv_K=np.asarray([math.inf if lam == 0 else 1.0 / (lam * eta) for lam in gn_lams]),
            net_train_rmse=train_c[..., -1],
            net_test_rmse=np.asarray(h.net_test.rmse).reshape(L, S, E)[..., -1],
            net_train_rmse_mid=train_c[..., mid],
            diverged=np.asarray(h.diverged).reshape(L, S),
        )

        bridge = _bridge(apply_fn, tree_index(params, 0), data, config)
        first_step, sigma_min = first_steps(apply_fn, params, data, [p.K * eta if p.method == "flow" else None
                                                                      for p in runs])
        literal = literal_runs(apply_fn, params, data, config, checkpoint_dir=checkpoint_dir, progress=progress)

    time_ = [p.steps * eta if p.method == "gd" else (p.n_relin * p.K * eta if p.method == "flow"
             else math.inf) for p in runs]
    return Results(
        K=np.asarray([p.K for p in runs], np.float64),
        method=np.asarray([p.method for p in runs]),
        n_relin=np.asarray([p.n_relin for p in runs]),
        time=np.asarray(time_, np.float64),
        **rows,
        diverged=diverged,
        gn=gn,
        bridge=bridge,
        literal=literal,
        first_step=first_step,
        sigma_min=sigma_min,
        x_test=np.asarray(data.x_test, np.float64).ravel(),
        y_test=np.asarray(data.y_test, np.float64).ravel(),
        seeds=np.asarray(seeds),
    )


#: A run counts as converged when its final train RMSE is at most this (about 1.5 % of the spread
#: of the quintic's values) ...
CONVERGED_RMSE = 0.02
#: ... or when it changed by at most this fraction over the second half of its training (a plateau).
PLATEAU_REL = 0.1


class Summary(NamedTuple):
    """The numbers the figure draws beside the runs (:func:`summary`)."""

    #: the smallest non-zero NTK eigenvalue at θ₀ (first seed; eigenvalues below N·ε·σ_max count as zero)
    sigma_min: float
    solved_from: float  #: 10/(η σ_min), the K from which every linearisation is solved (Kη·σ_min ≥ 10)
    net_mean: np.ndarray  #: (NK,) mean final test RMSE over seeds of the network (the linear model for K = ∞)
    gn_mean: np.ndarray  #: (L,) the same of the Gauss–Newton runs [λ = 0, λ₁, …]


def summary(results: Results) -> Summary:
    """The numbers the figure draws beside the runs (:class:`Summary`)."""
    b = results.bridge
    sigma_min = _sigma_min(b.sigma)
    kernel = np.asarray(results.method).astype(str) == "kernel"
    net = np.where(kernel[:, None], np.asarray(results.lin_test_rmse, np.float64),
                   np.asarray(results.net_test_rmse, np.float64))
    with np.errstate(invalid="ignore"):
        return Summary(sigma_min=sigma_min, solved_from=10.0 / (float(b.eta) * sigma_min),
                       net_mean=np.nanmean(net, axis=1),
                       gn_mean=np.nanmean(np.asarray(results.gn.net_test_rmse, np.float64), axis=1))


def converged(final, mid) -> np.ndarray:
    """(…) bool: final train RMSE ≤ :data:`CONVERGED_RMSE`, or changed by ≤ :data:`PLATEAU_REL` of
    it over the second half: ``final`` (…) against ``mid`` (…, the same shape), e.g.
    ``net_train_rmse`` and ``net_train_rmse_mid`` of :class:`Results` or of its ``gn``."""
    final = np.asarray(final, np.float64)
    mid = np.asarray(mid, np.float64)
    with np.errstate(invalid="ignore"):
        return (final <= CONVERGED_RMSE) | (np.abs(mid - final) <= PLATEAU_REL * final)


#: "Small K ≈ gradient descent": every 1 < K ≤ SMALL_K is compared with K = 1 (within the row's margin,
#: a fraction of K = 1's mean test RMSE).
SMALL_K = 10
#: A linearisation counts as solved when Kη·σ_min(θ₀) ≥ this (its slowest direction is fitted to e^(−10)).
SOLVED = 10.0
#: The Gauss–Newton consistency check: float64 rounding allowed beside the bound e^(−σ_min τ).
ROUNDING = 1e-12
#: The K ↔ λ row: the wrong pairings K = SHIFT/(λη) and K = 1/(SHIFT·λη) must be refuted.
SHIFT = 10.0


def literal_stable(lit: LiteralRuns) -> np.ndarray:
    """(NR, NL, S) bool: the literal runs of :attr:`Results.literal` that stand for the small-lr limit: not
    diverged, with a finite final test RMSE, and ending at a rate at or under the stability bound
    2/λ_max(G(θ_s)) of their last linearisation (a run above it was blowing up, by |1 − lr·λ_max| per
    step, when it ended)."""
    rates = np.asarray(lit.lr, np.float64)[:, None, None]
    last = np.asarray(lit.bound, np.float64)[..., -1]
    net = np.asarray(lit.net_test_rmse, np.float64)
    return ~np.asarray(lit.diverged, bool) & (rates <= last) & np.isfinite(net)


def literal_difference(lit: LiteralRuns, r: int, j: int) -> Difference:
    """Δ = literal − closed-form final test RMSE of rate r and period j (:attr:`Results.literal`), paired by
    seed over the seeds whose literal run was stable (:func:`literal_stable`, :func:`seed_difference`)."""
    a = np.asarray(lit.flow_net_test_rmse, np.float64)[r, j]
    b = np.where(literal_stable(lit)[r, j], np.asarray(lit.net_test_rmse, np.float64)[r, j], np.nan)
    return seed_difference(a, b)


_NO_LITERAL = ("no literal runs in these results (computed before they were added, or no K of the grid "
               "qualifies: literal_plan)")


def literal_claim(lit: LiteralRuns | None, tol: float) -> tuple[str, str, str]:
    """Literal GD at large K on par with its closed form (the same τ and R) where stable, within ``tol`` of
    the closed form's mean test RMSE (:func:`literal_difference`), from :attr:`Results.literal` (None in
    results from before the literal runs): ``(measured, holds, rule)``."""
    if lit is None or lit.bound is None or np.asarray(lit.K).size == 0:
        return _NO_LITERAL, verdict(None), "needs results.literal"
    Ks, rates = np.asarray(lit.K, np.float64), np.asarray(lit.lr, np.float64)
    div = np.asarray(lit.diverged, bool)
    flow = np.asarray(lit.flow_net_test_rmse, np.float64)
    net = np.asarray(lit.net_test_rmse, np.float64)
    stable = literal_stable(lit)
    S = div.shape[-1]
    parts, verdicts = [], []
    for r, rate in enumerate(rates):
        for j, K in enumerate(Ks):
            name = f"lr={rate:g} K={fmt_K(K)}"
            n_div, n_unstable = int(div[r, j].sum()), int((~div[r, j] & ~stable[r, j]).sum())
            left_out = ", ".join([f"{n_div}/{S} diverged"] * bool(n_div)
                                 + [f"{n_unstable}/{S} ended above their bound"] * bool(n_unstable))
            kept = stable[r, j] & np.isfinite(flow[r, j])
            if not kept.any():
                parts.append(f"{name}: no stable run ({left_out})")
                continue
            d = literal_difference(lit, r, j)
            verdicts.append(decide(d, on_par, tol * float(flow[r, j][kept].mean())))
            parts.append(f"{name}: {num(net[r, j][kept].mean(), 3)} vs {num(flow[r, j][kept].mean(), 3)}, "
                         f"{interval(d)}" + (f" ({left_out}, left out)" if left_out else ""))
    return ("literal vs closed form, final test RMSE over the stable seeds: " + "; ".join(parts),
            all_verdicts(verdicts),
            f"for every rate and K with a stable seed (not diverged, ending at a rate at or under 2/λ_max of its last "
            f"linearisation): the 95 % t interval over those seeds of Δ = literal − closed form (the same τ = K·lr/N and "
            f"number of linearisations, paired by seed) inside ±{tol:.0%} of the closed form's mean over them "
            "(the flow's O(lr) discretisation error); 'no' when one lies wholly outside; else undecided (always with one "
            "seed); n/a when no run is stable")


def literal_bound(lit: LiteralRuns | None) -> tuple[str, str, str]:
    """Check: every diverged literal run had its rate above the stability bound 2/λ_max(G(θ_s)) of the
    linearisation it diverged on: ``(measured, holds, rule)``; n/a when none diverged."""
    rule = ("by construction: each linearisation is a quadratic with Hessian G(θ_s) = J_sᵀJ_s/N, on which GD "
            "diverges iff lr > 2/λ_max(G); every diverged run must have lr above the bound at the θ_s it "
            "diverged on (the last one measured: a diverged run is frozen there); n/a when none diverged")
    if lit is None or lit.bound is None or np.asarray(lit.K).size == 0:
        return _NO_LITERAL, verdict(None), rule
    Ks, rates = np.asarray(lit.K, np.float64), np.asarray(lit.lr, np.float64)
    div = np.asarray(lit.diverged, bool)
    S = div.shape[-1]
    bound = np.asarray(lit.bound, np.float64)  # (NR, NL, S, E)
    last = bound[..., -1]
    above = rates[:, None, None] > last
    first = bound[..., 0]
    parts = []
    for r, rate in enumerate(rates):
        for j, K in enumerate(Ks):
            if div[r, j].any():
                steps = np.asarray(lit.diverged_step)[r, j][div[r, j]]
                parts.append(f"lr={rate:g} K={fmt_K(K)}: {int(div[r, j].sum())}/{S} diverged (steps "
                             f"{int(steps.min())}–{int(steps.max())}), bound there ≤ {float(last[r, j][div[r, j]].max()):.2g}")
    finite_above = int((above & ~div).sum())
    measured = ("; ".join(parts) if parts else "none diverged") + (
        f"; bound at θ₀ {float(first.min()):.3g}–{float(first.max()):.3g}; finite runs ending above their last "
        f"bound: {finite_above}/{int((~div).sum())} (K steps too few to blow up, growth |1 − lr·λ_max|^K)")
    return measured, verdict(bool(np.all(above[div])) if div.any() else None), rule


def seed_difference(a, b) -> Difference:
    """Δ = mean over seeds of (b_s − a_s), paired by seed, and its standard error.

    ``a``, ``b``: (S,) one value per seed (a test RMSE, a distance), seed s of ``a`` paired with
    seed s of ``b`` (the same initialisation). Seeds where either is non-finite are left out. The
    s.e. is std_s(b_s − a_s)/√n over the n seeds left (ddof 1; :func:`iterlin.repro.plotting.mean_se`),
    NaN for n < 2, with n − 1 degrees of freedom (the interval is Student's t); there is no
    test-sampling term: the test grid is fixed (evenly spaced points).
    Returns a :class:`iterlin.repro.stats.Difference` (``n_test`` 0, ``paired``) for
    :func:`iterlin.repro.claims.on_par` and :func:`iterlin.repro.claims.exceeds` (through :func:`decide`).
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"a and b of shapes {a.shape} and {b.shape} are not allowed: one value per seed each, (S,)")
    d = b - a
    mean, se = mean_se(d, axis=0)
    n = int(np.isfinite(d).sum())
    return Difference(float(mean), float(se), n, 0, True, float(n - 1) if n >= 2 else None)


def decide(diff: Difference, test, *args) -> str:
    """``test(diff, *args)`` (:func:`~iterlin.repro.claims.on_par` or :func:`~iterlin.repro.claims.exceeds`)
    when at least 2 seeds give the difference; :data:`~iterlin.repro.claims.UNDECIDED` otherwise (one
    seed has no spread to estimate the noise from)."""
    return test(diff, *args) if diff.n_seeds >= 2 else UNDECIDED


def _signed(x: float, digits: int = 3) -> str:
    return ("+" if round(x, digits) > 0 else "") + num(x, digits)


def interval(diff: Difference, digits: int = 3) -> str:
    """``Δ +0.012 [−0.004, +0.028]``: Δ and its 95 % t interval (``Δ +0.012 (1 seed)`` without one)."""
    if diff.n_seeds < 2 or not math.isfinite(diff.se):
        return f"Δ {_signed(diff.delta, digits)} ({diff.n_seeds} seed{'s' if diff.n_seeds != 1 else ''})"
    return f"Δ {_signed(diff.delta, digits)} [{_signed(diff.lo, digits)}, {_signed(diff.hi, digits)}]"


def _fmt_K(results: Results, i: int) -> str:
    return f"K={fmt_K(np.asarray(results.K, np.float64)[i])}"


def _net(results: Results) -> np.ndarray:
    return np.asarray(results.net_test_rmse, np.float64)


def _mean(results: Results) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.nanmean(_net(results), axis=1)


def _solved(results: Results) -> list[int]:
    """The finite K of the grid that solve their linearisations (Kη·σ_min(θ₀) ≥ :data:`SOLVED`)."""
    K = np.asarray(results.K, np.float64)
    sigma_min = summary(results).sigma_min
    return [i for i in range(len(K)) if np.isfinite(K[i]) and K[i] * float(results.bridge.eta) * sigma_min >= SOLVED]


@protocol.rule("fig1.small_k", needs=("margin",), metrics=("test_rmse",))
def small_k(row, results: Results) -> tuple[str, str, str]:
    """Small K ≈ gradient descent: every 1 < K ≤ :data:`SMALL_K` on par with K = 1 within the row's
    margin (a fraction of K = 1's mean test RMSE), over seeds (:func:`seed_difference`, :func:`decide`)."""
    K = np.asarray(results.K, np.float64)
    net, mean = _net(results), _mean(results)
    i1 = index_of_K(K, 1)
    small = [i for i in range(len(K)) if 1 < K[i] <= SMALL_K]
    if not small:
        return f"no 1 < K ≤ {SMALL_K} in the grid", NA, f"needs a K with 1 < K ≤ {SMALL_K}"
    tol = row.margin * float(np.nanmean(net[i1]))
    diffs = {i: seed_difference(net[i1], net[i]) for i in small}
    return (f"test RMSE K=1: {num(mean[i1], 3)}; "
            + "; ".join(f"{_fmt_K(results, i)}: {num(mean[i], 3)}, {interval(d)}" for i, d in diffs.items()),
            all_verdicts(decide(d, on_par, tol) for d in diffs.values()),
            f"on par: for every 1 < K ≤ {SMALL_K}, the 95 % t interval over seeds of Δ = RMSE_K − RMSE_1 (paired by "
            f"seed) inside ±{row.margin:.0%} of K = 1's mean ({num(tol, 3)}); 'no' when one lies wholly outside; "
            "else undecided (always with one seed)")


@protocol.rule("fig1.between", metrics=("test_rmse",))
def between(row, results: Results) -> tuple[str, str, str]:
    """The K between small and solved (partially solved linearisations): reported only."""
    K = np.asarray(results.K, np.float64)
    solved = _solved(results)
    mid = [i for i in range(len(K)) if np.isfinite(K[i]) and SMALL_K < K[i] and i not in solved]
    mean = _mean(results)
    return ("; ".join(f"{_fmt_K(results, i)}: {num(mean[i], 3)}" for i in mid) if mid
            else "no partially solved K in the grid", verdict(None),
            f"reported only: partially solved linearisations ({SMALL_K} < K, Kη·σ_min < {SOLVED:g})")


@protocol.rule("fig1.inf_worse", metrics=("test_rmse",))
def inf_worse(row, results: Results) -> tuple[str, str, str]:
    """K = ∞ (the converged linearisation at θ₀) generalises worse than K = 1, over seeds."""
    K = np.asarray(results.K, np.float64)
    rule = ("worse: the 95 % t interval over seeds of Δ = RMSE_∞ − RMSE_1 (the converged linearisation at θ₀ "
            "against K = 1, paired by seed) above 0; 'no' when below; else undecided (always with one seed)")
    kinf = np.flatnonzero(np.asarray(results.method).astype(str) == "kernel")
    if not kinf.size:
        return "no K = ∞ run", NA, rule
    i1, j = index_of_K(K, 1), int(kinf[0])
    rmse_ = seed_rmse(results)  # (NK, S): the network; the converged linear model at K = ∞
    d = seed_difference(_net(results)[i1], rmse_[j])
    return (f"K=∞ linear model: {num(np.nanmean(rmse_[j]), 3)}; K=1: {num(_mean(results)[i1], 3)}; {interval(d)}",
            decide(d, exceeds), rule)


@protocol.rule("fig1.converged", metrics=("train_rmse",))
def converged_rule(row, results: Results) -> tuple[str, str, str]:
    """Every trained run and every Gauss–Newton run converged (:func:`converged`)."""
    K = np.asarray(results.K, np.float64)
    gn = results.gn
    conv = converged(results.net_train_rmse, results.net_train_rmse_mid)
    trained = np.asarray(results.method).astype(str) != "kernel"
    gn_conv = converged(gn.net_train_rmse, gn.net_train_rmse_mid)
    bad = [f"K={fmt_K(K[i])}" for i in np.flatnonzero(trained) if not conv[i].all()]
    bad += [f"GN λ={v:g}" for v, c in zip(gn.damping, gn_conv) if not c.all()]
    return (f"{int(conv[trained].sum()) + int(gn_conv.sum())}/{int(trained.sum()) * conv.shape[1] + gn_conv.size} "
            "runs converged" + (f" (not: {', '.join(bad)})" if bad else ""),
            verdict(not bad), f"final train RMSE ≤ {CONVERGED_RMSE:g}, or changed by ≤ {PLATEAU_REL:.0%} over the "
            "second half")


@protocol.rule("fig1.finite")
def finite(row, results: Results) -> Claim:
    """Every run finite (:func:`~iterlin.repro.claims.divergence_row`), each diverged one by its K or λ and seed."""
    K, seeds, gn = np.asarray(results.K, np.float64), np.asarray(results.seeds), results.gn
    bad = [f"K={fmt_K(K[i])} seed {int(seeds[j])}" for i, j in zip(*np.nonzero(np.asarray(results.diverged, bool)))]
    bad += [f"GN λ={gn.damping[i]:g} seed {int(seeds[j])}" for i, j in zip(*np.nonzero(np.asarray(gn.diverged, bool)))]
    return divergence_row(bad)


@protocol.rule("fig1.literal", needs=("margin",), metrics=("test_rmse",))
def literal_rule(row, results: Results) -> tuple[str, str, str]:
    """:func:`literal_claim` within the row's margin."""
    return literal_claim(results.literal, row.margin)


@protocol.rule("fig1.literal_bound")
def literal_bound_rule(row, results: Results) -> tuple[str, str, str]:
    """:func:`literal_bound` (a check)."""
    return literal_bound(results.literal)


def claims(results: Results) -> list[Claim]:
    """The rows of fig1 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): small K ≈ GD; K = ∞
    worse than K = 1; damping λ ↔ K = 1/(λη) (each against seed noise); convergence and divergence;
    literal GD ≈ its closed form; and, as consistency checks (true by construction here), large K →
    Gauss–Newton, the K ↔ λ filters on the spectrum and literal GD's divergence above its bound."""
    return protocol.claims("fig1", results)


def damping_pairs(results: Results, factor: float = 1.0) -> list[tuple[int, int]]:
    """``(m, i)`` pairs: damped Gauss–Newton run m (``gn.damping[m] > 0``) with the K-run i whose K
    is nearest ``factor``/(λ_m η) on a log scale, when one lies within a factor √10 of it (else λ_m
    is left out). ``factor = 1`` is Sec. 3.3's pairing; 10 and 1/10 are the wrong pairings the
    K ↔ λ row must refute."""
    K = np.asarray(results.K, np.float64)
    finite = np.flatnonzero(np.isfinite(K))
    eta = float(results.bridge.eta)
    out = []
    for m, lam in enumerate(np.asarray(results.gn.damping, np.float64)):
        if lam <= 0 or finite.size == 0:
            continue
        target = math.log10(factor / (lam * eta))
        gap = np.abs(np.log10(K[finite]) - target)
        if gap.min() <= 0.5 + 1e-9:
            out.append((m, int(finite[np.argmin(gap)])))
    return out


@protocol.rule("fig1.gauss_newton", metrics=("test_rmse",))
def gauss_newton_check(row, results: Results) -> tuple[str, str, str]:
    """The check "large K → Gauss–Newton": at every solved K (Kη·σ_min ≥ :data:`SOLVED`), one
    linearisation's closed form at τ = Kη within e^{−σ_min τ} of the Gauss–Newton step in every seed
    (:func:`first_steps`; plus float64 rounding, :data:`ROUNDING`). Beside it, reported only, how far
    those K's final test RMSE ends from λ = 0 Gauss–Newton's after all their linearisations."""
    rule = (f"by construction: for every K with Kη·σ_min(θ₀) ≥ {SOLVED:g}, from each seed's θ₀, one linearisation "
            "trained by gradient flow for τ = Kη in closed form lies within e^(−σ_min τ) of the Gauss–Newton step "
            f"(λ = 0), relative to that step (+ {ROUNDING:g} of rounding)")
    solved = _solved(results)
    if not solved:
        return (f"no K in the grid solves a linearisation (Kη·σ_min ≥ {SOLVED:g})", NA,
                f"needs K ≥ {SOLVED:g} / (η σ_min)")
    if results.first_step is None:
        return "not recorded in this run", NA, rule
    net = _net(results)
    gn_rmse = np.asarray(results.gn.net_test_rmse, np.float64)
    K = np.asarray(results.K, np.float64)[solved]
    dist = np.asarray(results.first_step, np.float64)[solved]  # (n, S)
    bound = np.exp(-np.outer(K * float(results.bridge.eta), np.asarray(results.sigma_min, np.float64)))
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.abs(net[solved] - gn_rmse[0][None]) / gn_rmse[0][None]
    worst = float(np.max(rel)) if np.all(np.isfinite(rel)) else math.inf
    S = dist.shape[1]
    measured = (f"one linearisation, largest distance over {S} seed{'s' if S != 1 else ''}: "
                + "; ".join(f"K={fmt_K(k)}: {d.max():.1e} (bound {b.max():.1e})" for k, d, b in zip(K, dist, bound))
                + "; after all their linearisations (reported only: λ = 0 Gauss–Newton amplifies rounding), final "
                "test RMSE " + ", ".join(f"K={fmt_K(k)}: {num(float(np.nanmean(v)), 3)}" for k, v in zip(K, net[solved]))
                + f", GN (λ = 0): {num(float(np.nanmean(gn_rmse[0])), 3)}, largest deviation of a seed {pct(worst)}")
    return measured, verdict(bool(np.all(dist <= bound + ROUNDING))), rule


@protocol.rule("fig1.bridge")
def bridge_check(row, results: Results) -> tuple[str, str, str]:
    """The check "K GD steps act on the residual like damping λ = 1/(Kη)": the best-fit λ of the
    filters on the NTK spectrum at θ₀ within a factor 3 of 1/(Kη) for every K drawn."""
    b = results.bridge
    ratio = np.asarray(b.damping_fit, np.float64) / np.asarray(b.damping, np.float64)
    return ("best-fit λ / (1/(Kη)) on the NTK spectrum at θ₀: "
            + ", ".join(f"K={fmt_K(k)}: {num(r)}" for k, r in zip(b.K, ratio)),
            verdict(bool(np.all((ratio > 1 / 3) & (ratio < 3)))),
            "by construction: both filters switch at σ ≈ 1/(Kη) for any spectrum; the best-fit λ within a factor 3 of "
            "1/(Kη) for every K drawn")


@protocol.rule("fig1.damping", needs=("margin",), metrics=("test_rmse",))
def damping_rule(row, results: Results) -> tuple[str, str, str]:
    """Damped GN at λ ends where iterative linearisation at K = 1/(λη) does (on par within the row's
    margin, a fraction of that K's mean test RMSE), and not where K = 10/(λη) or 1/(10λη) do
    (:func:`damping_pairs`); n/a without a damped run paired with a K of the grid."""
    K = np.asarray(results.K, np.float64)
    lams = np.asarray(results.gn.damping, np.float64)
    net = _net(results)
    gn = np.asarray(results.gn.net_test_rmse, np.float64)

    def judge(pairs):
        out = []
        for m, i in pairs:
            d = seed_difference(net[i], gn[m])
            out.append((m, i, d, decide(d, on_par, row.margin * float(np.nanmean(net[i])))))
        return out

    paired = judge(damping_pairs(results))
    if not paired:
        return ("no damped run has a K within a factor √10 of 1/(λη) in the grid", verdict(None),
                "needs λ > 0 and K ≈ 1/(λη) in the grid")
    holds = all_verdicts(v for *_, v in paired)
    refuted = {}
    for f, name in ((SHIFT, f"K = {SHIFT:g}/(λη)"), (1 / SHIFT, f"K = 1/({SHIFT:g}λη)")):
        refuted[name] = [f"{lams[m]:g}" for m, _, _, v in judge(damping_pairs(results, f)) if v == "no"]
    if holds == "yes" and not all(refuted.values()):
        holds = UNDECIDED  # the data cannot tell the pairing from a wrong one
    measured = "; ".join(
        f"λ={lams[m]:g} ↔ K={fmt_K(K[i])}: {num(np.nanmean(gn[m]), 3)} vs {num(np.nanmean(net[i]), 3)}, {interval(d)}"
        for m, i, d, _ in paired)
    measured += "; wrong pairings: " + "; ".join(
        f"{name} {'refuted by λ = ' + ', '.join(by) if by else 'not refuted'}" for name, by in refuted.items())
    return (measured, holds,
            f"for each damped λ, Δ = its test RMSE − that of the K nearest 1/(λη), over seeds (paired): on par when the "
            f"95 % t interval lies inside ±{row.margin:.0%} of that K's mean. 'yes' when every λ is on par and the wrong "
            f"pairings K = {SHIFT:g}/(λη) and 1/({SHIFT:g}λη) are each refuted (some λ wholly outside); 'no' when a λ "
            "lies wholly outside; else undecided (always with one seed)")


EXPERIMENT = Experiment("fig1", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws: pure functions of the results (nothing here is part of ``compute``).


def seed_rmse(results: Results) -> np.ndarray:
    """(NK, S) the final test RMSE drawn at each K, per seed.

    The network's, except for K = ∞ (``method == "kernel"``): the converged linear model at θ₀
    (the values whose mean over seeds is :func:`summary`'s ``net_mean``).
    """
    kernel = np.asarray(results.method).astype(str) == "kernel"
    return np.where(kernel[:, None], np.asarray(results.lin_test_rmse, np.float64),
                    np.asarray(results.net_test_rmse, np.float64))


def diverged_K(results: Results) -> np.ndarray:
    """(NK,) bool: at least one seed of this K diverged."""
    return np.asarray(results.diverged, bool).any(axis=1)


class BridgeCurves(NamedTuple):
    """The K ↔ λ panels' curves on the bridge's ``sigma_grid`` (G,), for the M periods ``K``
    (:func:`bridge_curves`): the spectral filters φ(σ) (as in :attr:`Results.bridge`), (M, G), and
    the fraction of the residual each removes along an eigen-direction, σ·φ(σ), (M, G)."""

    sigma_grid: np.ndarray  #: (G,) the eigenvalues σ
    gn0_filter: np.ndarray  #: (G,) 1/σ, the Gauss–Newton filter (λ = 0)
    gd_filter: np.ndarray  #: K steps of GD
    gn_filter: np.ndarray  #: damped GN at λ = 1/(Kη)
    gn_filter_fit: np.ndarray  #: damped GN at the best-fit λ
    gd_fraction: np.ndarray
    gn_fraction: np.ndarray
    gn_fraction_fit: np.ndarray


def bridge_curves(results: Results) -> BridgeCurves:
    """The K ↔ λ panels' curves (:class:`BridgeCurves`) from :attr:`Results.bridge`."""
    b = results.bridge
    grid = np.asarray(b.sigma_grid, np.float64)
    gd, gn, fit = (np.asarray(phi, np.float64) for phi in (b.gd_filter, b.gn_filter, b.gn_filter_fit))
    return BridgeCurves(grid, 1.0 / grid, gd, gn, fit, grid * gd, grid * gn, grid * fit)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot_literal(ax: Axes, literal: LiteralRuns | None, *, colors: Sequence[Any] = ("C4", "C5"),
                 marker: str = "^") -> list:
    """Literal GD at large K (:attr:`Results.literal`, of :func:`literal_runs`) on a K axis.

    For each rate lr' (``literal.lr`` (NR,), colour ``colors[r]``): the literal runs' final test RMSE
    (``net_test_rmse`` (NR, NL, S)), mean over the seeds that stayed finite ± one standard error, filled
    ``marker`` at K (``literal.K`` (NL,)), joined by a solid line; the closed form at the same
    (τ = K·lr'/N, R linearisations), ``flow_net_test_rmse``, open markers joined by a dashed line; and
    where seeds diverged (``diverged`` (NR, NL, S)) a red cross at the closed form's mean with
    "d/S diverged". Draws nothing for ``literal`` None or without K (results from before these runs).
    Returns the line handles drawn.
    """
    check_axes(ax)
    if literal is None or np.asarray(literal.get("K", [])).size == 0:
        return []
    Ks = as_1d(literal.K, "literal.K")
    rates = as_1d(literal.lr, "literal.lr")
    div = np.asarray(literal.diverged, bool)
    net = np.where(div, np.nan, real_array(literal.net_test_rmse, "literal.net_test_rmse"))
    flow = real_array(literal.flow_net_test_rmse, "literal.flow_net_test_rmse")
    S = div.shape[-1]
    handles = []
    for r, rate in enumerate(rates):
        c = colors[r % len(colors)]
        m, se = mean_se(net[r], axis=-1)
        fm, _ = mean_se(flow[r], axis=-1)
        handles.append(ax.errorbar(Ks, m, yerr=np.nan_to_num(se), fmt=marker + "-", ms=7, color=c, capsize=2,
                                   label=f"literal GD, lr = {rate:g}")[0])
        handles += ax.plot(Ks, fm, marker, ls="--", ms=7, color=c, mfc="white",
                           label=f"its closed form (same τ = K·lr/N, T/K linearisations), lr = {rate:g}")
        for j in np.flatnonzero(div[r].any(axis=-1)):
            ax.plot(Ks[j], fm[j], "x", ms=12, mew=2, color="red")
            ax.annotate(f"{int(div[r, j].sum())}/{S} diverged", (Ks[j], fm[j]), textcoords="offset points",
                        xytext=(6, -12 - 10 * r), fontsize=7, color=c)
    return handles


def plot_stability_bound(ax: Axes, literal: LiteralRuns | None, *, colors: Sequence[Any] = ("C4", "C5"),
                         linestyles: Sequence[str] = ("-", "--", ":", "-.")) -> list:
    """The stability bound 2/λ_max(G(θ_s)) of the literal runs' current linearisation against the step.

    ``literal.bound`` (NR, NL, S, E) at ``bound_step`` (E,): the median over seeds per rate (colour) and
    K (line style), with each rate lr' as a horizontal line of its colour: GD on a linearisation diverges
    where the bound falls below its rate. Red crosses: each diverged run, at (``diverged_step``, lr').
    Log y axis. Draws nothing for ``literal`` None or without a bound. Returns the line handles drawn.
    """
    check_axes(ax)
    if literal is None or "bound" not in literal or np.asarray(literal.get("K", [])).size == 0:
        return []
    Ks = as_1d(literal.K, "literal.K")
    rates = as_1d(literal.lr, "literal.lr")
    steps = as_1d(literal.bound_step, "literal.bound_step")
    bound = real_array(literal.bound, "literal.bound")
    div = np.asarray(literal.diverged, bool)
    div_step = np.asarray(literal.diverged_step)
    handles = []
    with np.errstate(invalid="ignore"):
        med = np.nanmedian(np.where(bound > 0, bound, np.nan), axis=2)  # (NR, NL, E)
    for r, rate in enumerate(rates):
        c = colors[r % len(colors)]
        for j, K in enumerate(Ks):
            handles += ax.plot(steps, med[r, j], color=c, ls=linestyles[j % len(linestyles)], lw=1.5,
                               label=f"lr = {rate:g}, K = {fmt_K(K)}")
        ax.axhline(rate, color=c, lw=0.8, alpha=0.7)
        d = div_step[r][div[r]]
        if d.size:
            ax.plot(d, np.full(d.shape, rate), "x", color="red", ms=8, mew=1.5, linestyle="none")
    top = np.nanmax(med) if np.isfinite(med).any() else rates.max()
    # a diverged run's last linearisation lies far out (bound ~0): clip the axis to 2 decades under the rates
    ax.set(yscale="log", xlabel="step", ylabel="2/λ_max(G(θ_s)) (median over seeds)",
           ylim=(rates.min() / 100, max(top, rates.max()) * 3))
    return handles


def plot(results: Results):
    """Two figures. (1) Final test RMSE against K (log scale; K = ∞ at the right edge). Circles:
    the network at the end of training, mean over seeds (± one standard error: the band), seeds as
    dots; filled for literal GD, open for closed-form linearisations. Square: K = ∞, the converged
    linear model at θ₀. Dashed line: Gauss–Newton (λ = 0). Stars: damped Gauss–Newton at
    K = 1/(λη) (± one standard error). Shaded: the K for which each linearisation is solved
    (Kη·σ_min(θ₀) ≥ 10). A cross marks a diverged run. Triangles: literal GD at large K (filled, solid)
    beside its closed form at the same τ and number of linearisations (open, dashed), one colour per
    rate; a red cross where seeds diverged. (1b) The stability bound 2/λ_max(G(θ_s)) of the literal
    runs' current linearisation against the step, the rates as horizontal lines (absent from results
    computed before the literal runs). (2) The K ↔ λ bridge: spectral filters of
    K GD steps and of damped GN on the NTK spectrum at θ₀ (left), and the fraction of the residual
    they remove (right)."""
    Ks, method, gn = results.K, results.method, results.gn
    s = summary(results)
    rmse = seed_rmse(results)  # (K, seeds): the network; for K = ∞ the converged linear model
    finite = np.isfinite(Ks)

    fig, ax = panels(panel_size=(8, 4.5))
    xs = set_K_axis(ax, Ks)  # K = ∞ at the right edge
    seed_points(ax, xs, rmse, size=10, alpha=0.6)
    band(ax, xs[finite], rmse[finite], axis=1, color="C0", lw=1)
    for how, marker, face in (("gd", "o", "C0"), ("flow", "o", "white"), ("kernel", "s", "white")):
        ax.plot(xs[method == how], s.net_mean[method == how], marker, ms=8, color="C0", mfc=face)
    bad = diverged_K(results)
    ax.plot(xs[bad], s.net_mean[bad], "x", ms=14, color="red", linestyle="none")
    ax.axhline(s.gn_mean[0], ls="--", color="C3", label="Gauss–Newton (λ = 0)")
    damped = np.asarray(gn.damping) > 0
    gn_mean, gn_se = mean_se(gn.net_test_rmse, axis=1)
    ax.errorbar(gn.equiv_K[damped], gn_mean[damped], yerr=np.nan_to_num(gn_se[damped]), fmt="*", ms=14,
                color="C2", label="damped GN, λ = " + ", ".join(f"{v:g}" for v in gn.damping[damped])
                + " (at K = 1/(λη))")
    ax.axhline(s.net_mean[k1_and_largest(Ks)[0]], ls=":", color="C1", label="gradient descent (K = 1)")
    ax.axvspan(s.solved_from, xs.max(), color="C3", alpha=0.08, label="each linearisation solved")
    literal = results.literal  # None in results computed before the literal runs
    plot_literal(ax, literal)
    ax.set(yscale="log", ylabel="final test RMSE",
           title=f"Quintic, MLP 5×50: test RMSE against K ({results.config.scale} scale, "
                 f"{rmse.shape[1]} seed{'s' if rmse.shape[1] != 1 else ''})")
    legend(ax, loc="upper left", fontsize=7, bbox_to_anchor=(1.01, 1))
    plt.show()

    if literal is not None:
        fig, ax = panels(panel_size=(8, 3.5))
        plot_stability_bound(ax, literal)
        ax.set(title="literal GD: stability bound of the current linearisation (lines: the rates; ×: divergence)")
        legend(ax, fontsize=7)
        plt.show()

    b, c = results.bridge, bridge_curves(results)
    grid = c.sigma_grid
    fig, (left, right) = panels(2)
    lines = plot_runs(left, grid, c.gd_filter, b.K, scale=1, marker=None, lw=2, alpha=0.5,
                      label="K = {K} GD steps")
    plot_runs(left, grid, c.gn_filter, b.K, scale=1, marker=None, lw=1, color=lines,
              label="λ = 1/(Kη) = {lam:.3g}", label_args={"lam": b.damping})
    plot_runs(left, grid, c.gn_filter_fit, b.K, scale=1, marker=None, linestyle=":", lw=1.5, color=lines,
              label=None)
    left.plot(grid, c.gn0_filter, "k--", lw=1, label="1/σ (Gauss–Newton)")
    plot_runs(right, grid, c.gd_fraction, b.K, scale=1, marker=None, lw=2, alpha=0.5, color=lines)
    plot_runs(right, grid, c.gn_fraction, b.K, scale=1, marker=None, lw=1, color=lines, label=None)
    plot_runs(right, grid, c.gn_fraction_fit, b.K, scale=1, marker=None, linestyle=":", lw=1.5, color=lines,
              label="best λ = {lam:.3g}", label_args={"lam": b.damping_fit})
    rug(left, b.sigma, y=1e-3)  # ticks: the NTK's eigenvalues
    rug(right, b.sigma)
    left.set(xscale="log", yscale="log", xlabel="NTK eigenvalue σ", ylabel="filter φ(σ)", ylim=(1e-3, None),
             title="spectral filters: K GD steps vs damped GN")
    right.set(xscale="log", xlabel="NTK eigenvalue σ", ylabel="σ φ(σ): fraction of the residual removed",
              title="the same as residual fractions")
    legend(left, fontsize=7)
    legend(right, fontsize=7)
    plt.show()
