"""Beyond the paper: a damped (generalised) Gauss–Newton baseline against the large-K end of the K sweep.

Sec. 3.3 of the paper argues that iterative linearisation with a large K behaves like damped
Gauss–Newton (Eq. 6), more damping corresponding to a smaller K. Here the paper's CNN is trained
on CIFAR-10 (i) by iterative linearisation for K = 1, a few large K and K = ∞
(:func:`~iterlin.experiments._common.cnn_sweep`, exactly as :mod:`~iterlin.experiments.ksweep`),
and (ii) by mini-batch damped generalised Gauss–Newton (softmax cross-entropy, primal conjugate
gradients: N·O < P on a batch, and the CE kernel system is not symmetric) at the damping λ(K)
that corresponds to each finite K > 1 of the grid, with batches of the same size and the same
number of steps T, i.e. the same passes over the data. The GN runs of seed s start from the same
θ_0 and see the same batches as the K runs of seed s (paired comparisons), and every λ × seed is
ONE compiled program (:func:`~iterlin.solvers.gauss_newton.gauss_newton_train` with stacked parameters
and one batch key per run).

The λ ↔ K correspondence (our derivation, in our loss conventions)
---------------------------------------------------------------------
On one linearisation at θ_s, write δ = θ − θ_s, let A = JᵀHJ be the generalised Gauss–Newton
matrix of the SUMMED cross-entropy over a batch of B images (J the (B·O × P) Jacobian of the
logits, H the softmax Hessian) and g = Jᵀ∂L_sum/∂f its gradient. To second order in δ the
linearised loss is the quadratic q(δ) = gᵀδ + ½δᵀAδ (for MSE it is exact).

* The K runs take K SGD steps of size η on the MEAN cross-entropy, L_mean = L_sum/B, i.e. steps
  of size η/B on L_sum. In the small-step limit K steps are gradient flow on q for the time
  τ = Kη/B:  δ_K = −A⁻¹(I − e^{−τA}) g  (Eq. 18 of the paper, with its ϕ and z).
* The damped GN step (Eq. 6, summed loss as :mod:`iterlin.solvers.gauss_newton` uses) is
  δ_λ = −(A + λI)⁻¹ g.

In A's eigenbasis both filter the gradient: φ_K(σ) = (1 − e^{−στ})/σ and φ_λ(σ) = 1/(σ + λ). For
σ ≫ λ and σ ≫ 1/τ both are 1/σ (the direction is solved); for σ ≪ λ and σ ≪ 1/τ they are τ and
1/λ. They agree in both limits (and to first order in σ: τ(1 − στ/2) against (1/λ)(1 − σ/λ), the
same to within the factor 2 of the curvature correction) when

    λ = 1/τ = B/(Kη)   (summed loss),   i.e.   λ_mean = λ/B = 1/(Kη)   (mean loss),

the "λ ≈ 1/(Kη)" of the issue, read for the MEAN loss; this module passes the summed λ = B/(Kη) to
:func:`~iterlin.solvers.gauss_newton.gauss_newton_train` and draws a GN run at its equivalent
K(λ) = B/(λη). ``tests/experiments/test_gn.py`` checks it in float64 (many small linearised GD steps
on the mean CE against one damped GGN step at λ = B/(Kη), and that λ = 1/(Kη) does not match).

What the correspondence does NOT say. One damped GN step with λ(K) ≈ K linearised steps on ONE
batch; the K run spends its K steps on K DIFFERENT batches and re-linearises every K steps, while
GN re-linearises every step. At the same passes over the data (the same T and B, as here) GN makes
T re-linearisations and a K-step-sized move per batch, against T/K and one η-step per batch: in
optimisation progress per pass GN at λ(K) is closer to iterative linearisation run K times longer.
For cross-entropy K → ∞ (λ → 0) differ again: GD on the linearised CE keeps growing the margins
while the GGN step solves the quadratic model; so K = ∞ has no GN partner here (λ = 0 is also
singular for primal CG when B·(O − 1) < P). And CG is truncated at ``cg_maxiter`` iterations (a
Krylov regulariser of its own: one iteration is the GGN step restricted to the gradient direction,
δ = −(gᵀg / (gᵀAg + λgᵀg)) g, SGD with a step set by the damped curvature along g).

Scoring: K runs as :mod:`~iterlin.experiments.ksweep` (the network f(θ_T) for finite K, the linear
model for K = ∞); GN runs by the network f(θ_T) (its linearisation coincides with it after a step).

Config keys: ``K`` (list, 1 always included; ``inf`` allowed), ``lr`` (η of the K runs, and of the
correspondence), ``steps`` (T, both), ``batch_size`` (B, both), ``cg_maxiter``, ``augment`` (False:
GN runs do not augment), ``n_train``, ``n_test``, ``seed``, ``n_seeds``, ``n_evals``,
``n_eval_train``, ``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (the K runs' sharpness
record, :func:`~iterlin.experiments._common.sharpness_callback`: a K run whose linear model had η
above 2/λ_max(θ_s) is unstable, and its comparison reads so). Conventions: :mod:`iterlin.experiments._common`.

Results: :class:`Results` (the GN fields None when the grid has no finite K > 1).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, ClassVar, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from ..repro.claims import NA, UNSTABLE, Claim, all_verdicts, divergence_claim, fmt_K, on_par, on_par_rule
from ..repro.config import CGIterations, Flag, Images, Period, Rate, Steps, TestImages
from ..data import Dataset
from ..repro.failures import run_label, unstable_among
from ..solvers.gauss_newton import gauss_newton_train
from ..models import make_model
from ..repro.plotting import (
    accuracy_against_K,
    as_1d,
    bad_argument,
    check_axes,
    legend,
    panels,
    plot_sweep,
    real_array,
    seed_curve,
    seed_groups,
)
from ..repro.stats import Difference, num, pct, runs_difference, runs_of
from ..tree import tree_index, tree_stack
from . import protocol
from ._common import (
    Experiment,
    KGrid,
    Seeds,
    Sharpness,
    Sweep,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    eval_points,
    k_grid,
    load_data,
    network_correct,
    seed_keys,
    seeds,
    sharpness_callback,
    trained_final,
)

__all__ = ["Config", "Results", "SCALES", "EXPERIMENT", "load", "compute", "claims", "damping_for_K",
           "gn_K", "PerK", "per_K", "on_par_gn", "finite", "GNGrid", "by_K", "timing", "gn_baseline", "sweep_colors", "plot"]

INF = math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds, Sharpness):
    """gn's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "gn"

    K: tuple[Period, ...]
    lr: Rate
    steps: Steps
    batch_size: Images | None
    cg_maxiter: CGIterations
    augment: Flag
    n_train: Images | None
    n_test: TestImages | None


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/gn.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 8, INF], lr=0.05, steps=24, batch_size=16, cg_maxiter=2, augment=False, n_train=256, n_test=200,
        seed=0, n_seeds=1, n_evals=3, n_eval_train=128, n_sharpness=32, sharpness_iters=10, sharpness_every=8,
    ),
    "cpu": dict(
        K=[1, 10, 35, INF], lr=0.007, steps=100, batch_size=128, cg_maxiter=1, augment=False, n_train=None,
        n_test=None, seed=0, n_seeds=3, n_evals=5, n_eval_train=500, n_sharpness=256, sharpness_iters=20,
        sharpness_every=20,
    ),
    "gpu": dict(
        K=[1, 100, 300, 1000, INF], lr=1e-2, steps=2000, batch_size=256, cg_maxiter=10, augment=False,
        n_train=None, n_test=None, seed=0, n_seeds=3, n_evals=10, n_eval_train=5000, n_sharpness=256,
        sharpness_iters=20, sharpness_every=200,
    ),
    "paper": dict(
        K=[1, 10_000, 100_000, 1_000_000, INF], lr=1e-4, steps=1_000_000, batch_size=256, cg_maxiter=20,
        augment=False, n_train=50_000, n_test=10_000, seed=0, n_seeds=3, n_evals=100, n_eval_train=10_000,
        n_sharpness=1000, sharpness_iters=30, sharpness_every=100_000,
    ),
}


class Results(NamedTuple):
    """gn's results (:func:`compute`)."""

    runs: Sweep  #: the K sweep's history (every seed × K, seed-major), as ksweep's
    #: (R,) float64, each K run's final test accuracy (:func:`~iterlin.experiments._common.trained_final`)
    final_test_acc: np.ndarray
    n_test: np.ndarray  #: () int, the test images
    n_runs: np.ndarray  #: () int, R + G (the K runs and the GN runs)
    wall_seconds: np.ndarray  #: () float, the K sweep's computation (a cached result keeps it)
    final_test_correct: np.ndarray | None = None  #: (R, n_test) bool, each K run's final model on each test image
    #: the GN history (:func:`~iterlin.training.fit`'s layout, (G, E) arrays) with ``damping`` (G,) λ
    #: (summed loss), ``K`` (G,) the equivalent K(λ), ``seed_index`` and ``seed`` (G,), seed-major
    #: (G = S · L), and ``net_test_correct`` (G, n_test); None without a finite K > 1
    gn: Sweep | None = None
    gn_final_test_acc: np.ndarray | None = None  #: (G,) float64, each GN run's final test accuracy (its network)
    gn_final_test_correct: np.ndarray | None = None  #: (G, n_test) bool, each GN run's network on each test image
    gn_wall_seconds: np.ndarray | None = None  #: () float, the GN runs' computation
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, ``n_sharpness <= n_train`` checked;
    mini-batches are required (GN here is the mini-batch method: ``batch_size=None`` is refused,
    naming it)."""
    if config.batch_size is None:
        raise ValueError("batch_size=None is not allowed: the Gauss–Newton baseline is mini-batch (the same "
                         "batches as the K runs); give batch_size, e.g. 128")
    return check_sharpness(config, load_data(config))


def damping_for_K(K: float, lr: float, batch_size: int) -> float:
    """λ(K) = B/(Kη): the damping of the SUMMED-loss GN step (Eq. 6) equivalent to K SGD steps of
    size η on the MEAN loss over batches of B (module docstring; λ_mean = 1/(Kη)). K = ∞ → 0."""
    return 0.0 if math.isinf(K) else float(batch_size) / (float(K) * float(lr))


def gn_K(config: Config) -> list[float]:
    """The K of the grid that get a GN partner: every finite K > 1 (K = ∞ ↔ λ = 0 has none)."""
    return [float(k) for k in config.K if math.isfinite(k) and k > 1]


def _gauss_newton_runs(config: Config, data: Dataset, *, checkpoint=None, progress: bool = False) -> Sweep:
    """Every seed × λ(K) of :func:`gn_K` in ONE program: the GN history with ``K``, ``seed_index``,
    ``seed`` (G,), ``net_test_correct`` (G, n_test) and the setting ``damping`` (G,)."""
    Ks = gn_K(config)
    lams = [damping_for_K(k, config.lr, config.batch_size) for k in Ks]
    inits, keys = [], []
    for s in seeds(config):
        init_key, data_key = seed_keys(s)  # the K runs' θ_0 and batch key of seed s
        model = make_model("cnn", init_key)
        inits += [model.params] * len(Ks)
        keys += [data_key] * len(Ks)
    S, T = len(seeds(config)), config.steps
    n_eval_train = config.n_eval_train
    params, history = gauss_newton_train(
        model.apply_fn, tree_stack(inits), (data.x_train, data.y_train), damping=lams * S, steps=T, loss="ce",
        solver="primal_cg", cg_maxiter=config.cg_maxiter, batch_size=config.batch_size, key=jnp.stack(keys),
        eval_data=(data.x_test, data.y_test), eval_steps=eval_points(T, config.n_evals),
        eval_train_size=None if n_eval_train is None else min(n_eval_train, data.x_train.shape[0]),
        checkpoint=checkpoint, progress=progress, config=config.to_dict(),
        vectorise=True,  # vmapped on every backend, as the reference runs were computed (fit: vectorise)
    )
    seed_index = np.repeat(np.arange(S), len(Ks))
    return Sweep(history=history, K=np.tile(np.asarray(Ks, np.float64), S), seed_index=seed_index,
                 seed=np.asarray(seeds(config))[seed_index],
                 net_test_correct=np.stack([
                     network_correct(model.apply_fn, jax.device_get(tree_index(params, i)), data.x_test, data.y_test)
                     for i in range(len(lams) * S)]),
                 settings={"damping": np.tile(np.asarray(lams, np.float64), S)})


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """The K sweep (one program, the sharpness recorded along every run) and the GN runs (one
    program); see the module docstring."""
    started = time.perf_counter()
    runs = cnn_sweep(config, data, callback=sharpness_callback(config, data, config.lr),
                     checkpoint=checkpoint_path(checkpoint_dir, "runs"), progress=progress)
    wall = time.perf_counter() - started
    scored = trained_final(runs)
    out = {}
    G = 0
    if gn_K(config):
        started = time.perf_counter()
        gn = _gauss_newton_runs(config, data, checkpoint=checkpoint_path(checkpoint_dir, "gn"), progress=progress)
        out.update(gn=gn, gn_final_test_acc=np.asarray(gn.history.net_test.acc, np.float64)[:, -1],
                   gn_final_test_correct=gn.net_test_correct, gn_wall_seconds=np.asarray(time.perf_counter() - started))
        G = len(gn.K)
    return Results(runs=runs, final_test_acc=scored["final_test_acc"], n_test=np.asarray(data.x_test.shape[0]),
                   n_runs=np.asarray(len(runs.K) + G), wall_seconds=np.asarray(wall),
                   final_test_correct=scored.get("final_test_correct"), **out)


# ------------------------------------------------------------------------------------------------
# Claims


def _combined(results: Results) -> tuple[np.ndarray, np.ndarray | None, int]:
    """K runs then GN runs: the final test accuracies (R + G,) float64 and, when both record it,
    the per-image correctness (R + G, n_test), else None (for :func:`~iterlin.repro.stats.runs_difference`);
    and the offset R of the GN runs."""
    R = len(np.asarray(results.final_test_acc))
    gn_acc = np.zeros(0) if results.gn_final_test_acc is None else results.gn_final_test_acc
    acc = np.concatenate([np.asarray(results.final_test_acc, np.float64), np.asarray(gn_acc, np.float64)])
    correct = None
    if results.final_test_correct is not None and results.gn_final_test_correct is not None:
        correct = np.concatenate([np.asarray(results.final_test_correct, bool),
                                  np.asarray(results.gn_final_test_correct, bool)])
    return acc, correct, R


class PerK(NamedTuple):
    """One finite K > 1 of the sweep against its damped Gauss–Newton partner (:func:`per_K`)."""

    K: float  #: the period
    relin: int  #: its re-linearisations at the end, ⌊T/K⌋
    damping: float | None  #: λ(K) on the summed loss (None without a GN partner)
    diff: Difference | None  #: GN at λ(K) minus K, paired by seed and test image (None without a partner)
    #: :func:`~iterlin.repro.claims.on_par` within the row's margin; "no" when a run of either
    #: diverged, :data:`~iterlin.repro.claims.UNSTABLE` when a K run's linear model was unstable
    #: (:func:`~iterlin.repro.failures.unstable_among`), :data:`~iterlin.repro.claims.NA` without a partner
    par: str


def per_K(results: Results, tol: float) -> list[PerK]:
    """Every finite K > 1 of the sweep against GN at λ(K), in increasing K, on par within ``tol``."""
    h, g = results.runs, results.gn
    K = np.asarray(h["K"], np.float64)
    div = np.asarray(h["diverged"], bool)
    acc, correct, R = _combined(results)
    out = []
    for k in np.unique(K[np.isfinite(K) & (K > 1)]):
        i = runs_of(h, k)
        j = np.zeros(0, int) if g is None else runs_of(g, k)
        row = PerK(float(k), int(np.asarray(h["n_relin"])[i[0], -1]), None, None, NA)
        if j.size == i.size and j.size:
            d = runs_difference(acc, correct, i, R + j, n_test=int(results.n_test))
            bad = div[i].any() or np.asarray(g["diverged"], bool)[j].any()
            par = UNSTABLE if unstable_among(h, i) else "no" if bad else on_par(d, tol)
            row = row._replace(damping=float(np.asarray(g["damping"])[j[0]]), diff=d, par=par)
        out.append(row)
    return out


@protocol.rule("gn.on_par", needs=("margin",))
def on_par_gn(row, results: Results) -> tuple[str, str, str]:
    """Every finite K > 1 ends on par (within the row's margin) with damped GN at λ = B/(Kη) by the
    shared noise rule (GN minus K, paired over seeds and test images; a diverged run of either is
    'no', a K run that was unstable, :func:`~iterlin.repro.failures.unstable_among`, 'no (unstable)'),
    over every K (:func:`~iterlin.repro.claims.all_verdicts`); n/a when a K has no GN run."""
    h = results.runs
    T = int(np.asarray(h["step"])[-1])
    lr, B = results.config.lr, results.config.batch_size
    cg = results.config.cg_maxiter
    gn = f"damped GN ({cg} CG iteration{'s' * (cg != 1)} per step)"  # a truncated solve: say how truncated
    found = per_K(results, row.margin)
    if not found:
        return "no finite K > 1 was run", NA, "needs a finite K > 1 and its GN run"
    parts = []
    for r in found:
        head = f"K={fmt_K(r.K)} ({r.relin} re-linearisations)"
        if r.diff is None:
            parts.append(f"{head}: no GN run at this K")
            continue
        acc = np.asarray(results.final_test_acc, np.float64)[runs_of(h, r.K)]
        gacc = np.asarray(results.gn_final_test_acc, np.float64)[runs_of(results.gn, r.K)]
        parts.append(f"{head}: {pct(acc.mean())}, GN λ={num(r.damping, 1)}: {pct(gacc.mean())}, GN minus K: "
                     f"{r.diff.describe()} {r.par}")
    holds = NA if any(r.diff is None for r in found) else all_verdicts(r.par for r in found)
    where = f"λ = B/(Kη) on the summed loss (B={B}, η={lr:g}), " if lr is not None and B is not None else ""
    return ("; ".join(parts), holds,
            f"{gn}, {where}same θ_0, batches and T = {T} steps; per K: final test acc. of GN minus K, "
            f"{on_par_rule(row.margin)}; a diverged GN run is 'no'; '{UNSTABLE}' when the K run diverged, exploded, "
            "rose inside a block or had η above 2/λ_max(θ_s); 'yes' when every K is; n/a when a K has no GN run "
            "at λ(K) for every seed")


@protocol.rule("gn.finite")
def finite(row, results: Results) -> Claim:
    """Divergence of the K sweep's and the GN runs (:func:`~iterlin.repro.claims.divergence_claim`)."""
    runs = {"K": results.runs} if results.gn is None else {"K": results.runs, "GN": results.gn}
    return divergence_claim(runs, _run_label, prefix=False)


def claims(results: Results) -> list[Claim]:
    """The rows of gn in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): every finite K > 1
    ends on par with damped GN at λ = B/(Kη) (:func:`on_par_gn`); the sharpness record; divergence
    (:func:`finite`)."""
    return protocol.claims("gn", results)


def _run_label(panel: str, h: Mapping, i: int) -> str:
    """A run of the K sweep as ``K=…, lr=…``, a Gauss–Newton run as ``GN λ=… (K=…)``."""
    if panel == "K":
        return run_label(panel, h, i)
    return f"GN λ={num(h['damping'][i], 1)} (K={fmt_K(h['K'][i])})"


EXPERIMENT = Experiment("gn", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws: pure functions of the results (nothing here is part of ``compute``).


class GNGrid(NamedTuple):
    """The runs arranged for the plot (:func:`by_K`): L damped Gauss–Newton settings, S seeds."""

    sweep: KGrid  #: the K sweep by K
    gn_K: np.ndarray  #: (L,) the equivalent K(λ) = B/(λη)
    gn_damping: np.ndarray  #: (L,) λ
    gn_acc: np.ndarray  #: (L, S) the final test accuracy per seed
    gn_diverged: np.ndarray  #: (L,) bool, whether a seed diverged


def by_K(results: Results) -> GNGrid:
    """The runs arranged for the plot (:class:`GNGrid`)."""
    sweep = k_grid(results.runs, results.final_test_acc)
    g = results.gn
    gK = np.asarray(sorted(set(np.asarray(g["K"], np.float64).tolist()))) if g is not None else np.zeros(0)
    gacc = np.asarray(np.zeros(0) if results.gn_final_test_acc is None else results.gn_final_test_acc, np.float64)
    return GNGrid(
        sweep=sweep,
        gn_K=gK,
        gn_damping=np.asarray([float(np.asarray(g["damping"])[runs_of(g, k)[0]]) for k in gK]),
        gn_acc=np.stack([gacc[runs_of(g, k)] for k in gK]) if gK.size else np.zeros((0, sweep.acc.shape[1])),
        gn_diverged=np.asarray([bool(np.asarray(g["diverged"])[runs_of(g, k)].any()) for k in gK], bool),
    )


def timing(results: Results) -> str:
    """``8 runs (4 K × 2 seeds, 4 GN) in two programs, 265 s (K sweep) + 1010 s (GN) of computation``."""
    h = results.runs
    n_K, n_seeds = len(set(np.asarray(h["K"]).tolist())), len(set(np.asarray(h["seed_index"]).tolist()))
    G = len(np.asarray(results.gn.K)) if results.gn is not None else 0
    gn = f" + {float(results.gn_wall_seconds):.0f} s (GN)" if results.gn_wall_seconds is not None else ""
    return (f"{int(results.n_runs)} runs ({n_K} K × {n_seeds} seed{'s' if n_seeds != 1 else ''}, {G} GN), "
            f"{float(results.wall_seconds):.0f} s (K sweep){gn} of computation")


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def gn_baseline(ax: Axes, K_equiv: Any, acc: Any, *, damping: Any = None, diverged: Any = None,
                offset: float = 1.12, color: Any = "C2",
                label: str | None = "damped Gauss–Newton at K(λ) = B/(λη)") -> Line2D | None:
    """Damped Gauss–Newton runs on a K axis (:func:`iterlin.repro.plotting.set_K_axis`): at their
    equivalent K(λ) = B/(λη) ``K_equiv`` ``(L,)`` finite > 0, × ``offset`` (drawn just right of the K
    run they match), the final test accuracy ``acc`` ``(L, S)`` (fractions) as
    :func:`iterlin.repro.plotting.seed_curve` (mean ± one s.e. over seeds, each seed a dot, diamonds), each
    point labelled ``λ=…`` when ``damping`` ``(L,)`` is given; ``diverged`` ``(L,)`` marks points
    where a seed diverged. Returns the mean's Line2D, or None when L = 0 (nothing drawn)."""
    check_axes(ax)
    Ks = as_1d(K_equiv, "K_equiv")
    if Ks.size == 0:
        return None
    if not np.all(np.isfinite(Ks)) or np.any(Ks <= 0):
        raise bad_argument("K_equiv", f"= {Ks.tolist()}", "finite and > 0 (λ > 0)")
    values = real_array(acc, "acc")
    if values.ndim != 2 or values.shape[0] != Ks.size:
        raise bad_argument("acc", f"of shape {values.shape}", f"(L, S) with L = len(K_equiv) = {Ks.size}")
    xs = Ks * float(offset)
    line = seed_curve(ax, xs, values, diverged=diverged, color=color, marker="D", ms=7, label=label,
                      diverged_label=None)
    if damping is not None:
        lam = as_1d(damping, "damping", Ks.size)
        for x, y, v in zip(xs, 100.0 * np.nanmean(values, axis=1), lam):
            ax.annotate(f"λ={v:.3g}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7, color=color)
    return line


def sweep_colors(h: Mapping[str, Any], lines: Sequence[Any], K: Any) -> list[Any]:
    """The colours of :func:`iterlin.repro.plotting.plot_sweep`'s ``lines`` (one per group of the sweep
    history ``h``, :func:`iterlin.repro.plotting.seed_groups`) at each period of ``K`` ``(M,)``, so that
    another method's lines match the K run they correspond to; a K the sweep does not have gets
    ``"gray"``."""
    groups = seed_groups(h)
    gK = np.asarray(h["K"], np.float64)[[g[0] for g in groups]]
    out = []
    for k in as_1d(K, "K"):
        i = np.flatnonzero(gK == k)
        line = lines[i[0]] if i.size and i[0] < len(lines) else None
        out.append(line.get_color() if isinstance(line, Line2D) else "gray")
    return out


def plot(results: Results):
    """Left: final test accuracy against K (log axis, K = ∞ at the right edge), the mean over seeds
    ± one standard error, each seed a dot: the K runs (circles; K = ∞ by its linear model, the red
    square) and the damped Gauss–Newton runs drawn at their equivalent K(λ) = B/(λη) (diamonds,
    slightly to the right); the top axis gives the re-linearisations T/K of the K runs. A cross marks a
    point where a seed diverged. Right: test accuracy over training (solid: the K runs' networks;
    dotted: Gauss–Newton)."""
    s = by_K(results)
    fig, (left, right) = panels(2, panel_size=(6.2, 4.2),
                                suptitle=f"CNN on CIFAR-10: large K against damped Gauss–Newton "
                                         f"({results.config.scale} scale, T = {s.sweep.steps} steps)")
    accuracy_against_K(left, s.sweep.K, s.sweep.acc, s.sweep.diverged, s.sweep.relin,
                       finite_label="iterative linearisation, K",
                       inf_label="K = ∞: the linear model")
    gn_baseline(left, s.gn_K, s.gn_acc, damping=s.gn_damping, diverged=s.gn_diverged)
    legend(left)
    lines = plot_sweep(right, results.runs, "net_test_acc", label="K = {K}", diverged_label=None, marker=None)
    if results.gn is not None:
        gn_groups = sorted(set(results.gn.K.tolist()))
        plot_sweep(right, results.gn, "net_test_acc", linestyle=":", marker=None,
                   color=sweep_colors(results.runs, lines, gn_groups),
                   label="GN at λ(K = {K})", diverged_label=None)
    right.set(xlabel="step", ylabel="test accuracy (%)", title="over training")
    legend(right)
    plt.show()
