"""Beyond the paper: when to update features, a fixed period K against an adaptive rule.

The paper re-linearises on a fixed period, (t + 1) mod K = 0 (Algorithm 1, Eq. 4), and counts
feature updates as T/K (Definition 1). Here the same CNN is also trained with the adaptive rule
of :func:`iterlin.relin.adaptive`: re-linearise after step t when the linear model has drifted
from the network on the step's batch X_t,

    |L(f_lin_s(θ_t), X_t) − L(f(θ_t), X_t)| > tol · L(f(θ_t), X_t),

so that the features are updated where they have moved, not on a clock. The question: does
placing the updates adaptively reach K = 1's accuracy with fewer of them than the fixed period that
does, and where in training does the adaptive rule put them?

Two sweeps (:func:`~iterlin.experiments._common.cnn_sweep`), each ONE vmapped program: every seed
× fixed K of ``config.K`` (K = 1 always in), and every seed × tolerance of ``config.tol``
(``adaptive(tol)``, ``min_period = 1``, no cap). The runs of one seed, in both sweeps, share the
initialisation and the batches (:func:`~iterlin.experiments._common.seed_keys`), so every
comparison is paired by seed and by test image.

Scoring: the network f(θ_T) for every run (the linear model f_lin_0(θ_T) for a fixed K = ∞, the
model it trains: :func:`~iterlin.experiments._common.trained_final`). The number of feature
updates of a run is its final ``n_relin``: ⌊T/K⌋ for a fixed K, data-dependent for an adaptive one
(it may differ between seeds).

Config keys: ``K`` (list of periods, 1 always included), ``tol`` (list of tolerances, each a
finite number > 0: tol = 0 would be K = 1 and tol = ∞ K = ∞, both already fixed periods), ``lr``,
``steps`` (T), ``batch_size``, ``augment``, ``n_train``, ``n_test``, ``seed``, ``n_seeds``,
``n_evals``, ``n_eval_train``, and ``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (the
linear model's λ_max along every run of both sweeps:
:func:`~iterlin.experiments._common.sharpness_callback`; None: not recorded). Conventions:
:mod:`iterlin.experiments._common`.

Results: :class:`Results`. Its per-run arrays cover the R = R_f + R_a runs, fixed first then
adaptive.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, ClassVar, Mapping, NamedTuple, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from ..repro.claims import (
    NA,
    ON_PAR,
    UNDECIDED,
    Claim,
    all_verdicts,
    beyond,
    divergence_claim,
    fmt_K,
    on_par,
    on_par_rule,
    pooled_runs,
    sharpness_claim,
)
from ..repro.config import (
    Every, ExperimentConfig, Flag, Images, Period, PowerIterations, Rate, SharpnessImages, Steps, TestImages,
    Tolerance,
)
from ..data import Dataset
from ..repro.plotting import CROSS_SIZE, as_1d, bad_argument, bound_panel, check_axes, legend, mean_se, panels, real_array
from ..relin import adaptive
from ..repro.stats import Difference, final_difference, pct, runs_of, seed_interval
from . import protocol
from ._common import (
    Experiment,
    STABLE,
    Seeds,
    Sweep,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    load_data,
    sharpness_callback,
    trained_final,
)

__all__ = ["Config", "Results", "SCALES", "EXPERIMENT", "load", "compute", "claims", "per_policy", "fewer_updates",
           "Setting", "PolicyGrid", "by_policy", "Placement", "placement", "even_fraction", "raster", "timing", "EARLY", "accuracy_against_updates",
           "relin_raster", "placement_dots", "plot"]

INF = math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class _OptionalSharpness(ExperimentConfig):
    """:class:`~iterlin.experiments._common.Sharpness`'s knobs, None where a run from before the
    record existed is read back (not recorded)."""

    n_sharpness: SharpnessImages | None = None
    sharpness_iters: PowerIterations | None = None
    sharpness_every: Every | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds, _OptionalSharpness):
    """adaptive's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "adaptive"

    K: tuple[Period, ...]
    tol: tuple[Tolerance, ...]
    lr: Rate
    steps: Steps
    batch_size: Images | None
    augment: Flag
    n_train: Images | None
    n_test: TestImages | None


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/adaptive.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 3, 8], tol=[0.003, 0.01, 0.03], lr=0.05, steps=24, batch_size=16, augment=False, n_train=256,
        n_test=200, seed=0, n_seeds=1, n_evals=3, n_eval_train=128, n_sharpness=32, sharpness_iters=10,
        sharpness_every=24,
    ),
    "cpu": dict(
        STABLE, K=[1, 320], tol=[0.003, 0.01], n_seeds=3, n_evals=20,
    ),
    "gpu": dict(
        STABLE, K=[1, 80, 320, 800], tol=[0.0003, 0.001, 0.003, 0.01], n_seeds=8, n_evals=20,
    ),
    "paper": dict(
        K=[1, 100, 1000, 10_000, 100_000], tol=[0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0], lr=1e-4,
        steps=1_000_000, batch_size=256, augment=False, n_train=50_000, n_test=10_000, seed=0, n_seeds=3,
        n_evals=100, n_eval_train=10_000, n_sharpness=1000, sharpness_iters=30, sharpness_every=10_000,
    ),
}


class Results(NamedTuple):
    """adaptive's results (:func:`compute`)."""

    #: the fixed periods' :func:`~iterlin.experiments._common.sweep` history (every seed × K,
    #: seed-major; with the sharpness record when the config records it)
    fixed: Sweep
    #: the adaptive tolerances' sweep history (every seed × tolerance, seed-major), with ``tol``
    #: (R_a,) and ``relin_step`` (R_a, J), the steps of each run's re-linearisations padded with −1
    adaptive: Sweep
    #: (R,) float64, the final test accuracy of each run, fixed then adaptive
    #: (:func:`~iterlin.experiments._common.trained_final` for the fixed runs)
    final_test_acc: np.ndarray
    final_test_correct: np.ndarray  #: (R, n_test) bool, whether each run's final model classifies each test image
    n_relin: np.ndarray  #: (R,) int64, the re-linearisations each run made
    n_test: np.ndarray  #: () int, the test images
    n_runs: np.ndarray  #: () int, R
    wall_seconds: np.ndarray  #: () float, both sweeps' computation (a cached result keeps it)
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, and ``n_sharpness <= n_train``
    checked when the sharpness is recorded."""
    data = load_data(config)
    return data if config.n_sharpness is None else check_sharpness(config, data)

#: The fractions of training at which :func:`placement` counts the re-linearisations made so far;
#: the placement row asks about the first half.
EARLY = (0.25, 0.5)


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """The fixed-period sweep and the adaptive sweep, same seeds (see the module docstring)."""
    started = time.perf_counter()
    callback = None if config.n_sharpness is None else sharpness_callback(config, data, config.lr)
    fixed = cnn_sweep(config, data, K=list(config.K), callback=callback,
                      checkpoint=checkpoint_path(checkpoint_dir, "fixed"), progress=progress)
    adapt = cnn_sweep(config, data, K=[adaptive(t) for t in config.tol], callback=callback,
                      checkpoint=checkpoint_path(checkpoint_dir, "adaptive"), progress=progress)
    wall = time.perf_counter() - started
    scored = trained_final(fixed)
    acc = np.concatenate([scored["final_test_acc"], np.asarray(adapt.history.net_test.acc, np.float64)[:, -1]])
    correct = np.concatenate([scored["final_test_correct"], np.asarray(adapt.net_test_correct, bool)])
    n_relin = np.concatenate([np.asarray(fixed.history.n_relin)[:, -1], np.asarray(adapt.history.n_relin)[:, -1]])
    return Results(fixed=fixed, adaptive=adapt, final_test_acc=acc, final_test_correct=correct,
                   n_relin=n_relin.astype(np.int64), n_test=np.asarray(data.x_test.shape[0]),
                   n_runs=np.asarray(acc.shape[0]), wall_seconds=np.asarray(wall))


# ------------------------------------------------------------------------------------------------
# Claims


def _fixed_runs(results: Results, K: float) -> np.ndarray:
    """Indices (into the R runs, fixed first) of fixed period ``K``'s runs, one per seed, in seed order."""
    return runs_of(results.fixed, K)


def _tolerances(results: Results) -> list[float]:
    """The adaptive sweep's tolerances, ascending."""
    return np.unique(np.asarray(results.adaptive["tol"], np.float64)).tolist()


def _adaptive_runs(results: Results, tol: float) -> np.ndarray:
    """Indices (into the R runs) of tolerance ``tol``'s adaptive runs, one per seed, in seed order."""
    offset = len(np.asarray(results.fixed["K"]))
    return offset + np.flatnonzero(np.asarray(results.adaptive["tol"], np.float64) == float(tol))


def _diverged(results: Results) -> np.ndarray:
    return np.concatenate([np.asarray(results.fixed["diverged"], bool),
                           np.asarray(results.adaptive["diverged"], bool)])


class Setting(NamedTuple):
    """One fixed period or tolerance against K = 1 (:func:`per_policy`)."""

    K: float | None  #: the fixed period (∞ as 0 re-linearisations), None for a tolerance
    tol: float | None  #: the adaptive tolerance, None for a fixed period
    #: the most re-linearisations any of its seeds made (a setting "uses fewer" only if it does in every seed)
    relin: int
    diff: Difference  #: its final test accuracy minus K = 1's, paired by seed and test image
    #: :func:`~iterlin.repro.claims.on_par` within :data:`~iterlin.repro.claims.ON_PAR` ("no" when a run of it or
    #: of K = 1 diverged)
    par: str


def per_policy(results: Results, margin: float = ON_PAR) -> tuple[list[Setting], list[Setting]]:
    """Each setting against K = 1, paired by seed and test image (:func:`~iterlin.repro.stats.final_difference`
    of the final test accuracies), on par within ``margin``: ``(fixed, adaptive)``, every fixed K > 1
    (∞ included) in increasing K and every tolerance in increasing order; ``([], [])`` without a K = 1 run.
    """
    hf = results.fixed
    i1 = _fixed_runs(results, 1)
    if i1.size == 0:
        return [], []
    div = _diverged(results)
    n = np.asarray(results.n_relin)
    K = np.asarray(hf["K"], np.float64)

    def row(j, K=None, tol=None):
        d = final_difference(results, i1, j)
        return Setting(K, tol, int(n[j].max()), d,
                       "no" if div[np.concatenate([i1, j])].any() else on_par(d, margin))

    fixed = [row(_fixed_runs(results, k), K=float(k)) for k in sorted(set(K[K > 1].tolist()))]
    return fixed, [row(_adaptive_runs(results, t), tol=float(t)) for t in _tolerances(results)]


def fewer_updates(fixed: Sequence[Setting], adapt: Sequence[Setting]) -> str:
    """The verdict of "adaptive placement reaches K = 1's accuracy with fewer feature updates than
    the fixed period that does", from :func:`per_policy`'s rows (their ``relin`` and ``par``).

    With par(·) the on-par verdict against K = 1 and n(·) the re-linearisations (the most over seeds):

    * ``"yes"`` when some tolerance a has par(a) = yes and n(a) < n(K) for every fixed K > 1 whose
      par(K) is yes or undecided (it beats every fixed period that is, or may be, on par; with no
      such K, an adaptive run on par is enough);
    * ``"no"`` when every tolerance a either has par(a) = no, or some fixed K with par(K) = yes has
      n(K) ≤ n(a) (decided: no adaptive run on par uses fewer updates than a fixed period on par);
    * :data:`~iterlin.repro.claims.UNDECIDED` otherwise (the noise rule left a relevant row undecided);
    * :data:`~iterlin.repro.claims.NA` without a fixed K > 1 or without a tolerance.
    """
    if not fixed or not adapt:
        return NA
    maybe = [f.relin for f in fixed if f.par in ("yes", UNDECIDED)]
    on = [f.relin for f in fixed if f.par == "yes"]
    if any(a.par == "yes" and all(a.relin < m for m in maybe) for a in adapt):
        return "yes"
    if all(a.par == "no" or any(m <= a.relin for m in on) for a in adapt):
        return "no"
    return UNDECIDED


class Placement(NamedTuple):
    """Where the adaptive runs re-linearised, against an even placement (:func:`placement`); N
    tolerances, S seeds, F fractions of training."""

    tol: np.ndarray  #: (N,) float64, the tolerances in increasing order
    n: np.ndarray  #: (N, S) int, each run's re-linearisations
    early: np.ndarray  #: (N, S, F) float64, the share of them made by step f·T (NaN where n = 0)
    even: np.ndarray  #: (N, S, F) float64, the same share for n updates spread evenly
    excess: np.ndarray  #: (N, S, F) float64, early − even (positive where earlier than even)
    fractions: np.ndarray  #: (F,) float64, the fractions f
    steps: int  #: T


def placement(results: Results, fractions: Sequence[float] = EARLY) -> Placement:
    """Where the adaptive runs put their re-linearisations over training, against an even placement.

    For each adaptive run (tolerance × seed) with n re-linearisations at steps t_1 < … < t_n and each
    fraction f of training: ``early`` = |{j : t_j ≤ f·T}| / n, the share made by step f·T, and
    ``even`` = :func:`even_fraction` (n, f) = ⌊f·n⌋ / n, the same share for n updates spread evenly
    (at T/n, 2T/n, …, as a fixed period K = T/n places them); ``excess`` = early − even (> 0: earlier
    than even). NaN where n = 0.

    """
    h = results.adaptive
    T = int(np.asarray(h["step"])[-1])
    tol = np.asarray(h["tol"], np.float64)
    grid = np.asarray(sorted(set(tol.tolist())), np.float64)
    f = np.asarray(fractions, np.float64)
    steps = np.asarray(h["relin_step"]).reshape(len(tol), -1)
    idx = [np.flatnonzero(tol == t) for t in grid]
    n = np.asarray([[int((steps[i] >= 0).sum()) for i in ii] for ii in idx])
    made = np.asarray([[[int(((steps[i] >= 0) & (steps[i] <= fr * T)).sum()) for fr in f] for i in ii] for ii in idx],
                      np.float64).reshape(len(grid), -1, f.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        early = np.where(n[..., None] > 0, made / n[..., None], np.nan)
    even = even_fraction(n[..., None], f)
    return Placement(grid, n, early, even, early - even, f, T)


def even_fraction(n, f) -> np.ndarray:
    """⌊f·n⌋ / n: the share of n evenly spaced re-linearisations (steps jT/n, j = 1 … n) made by step
    f·T (NaN for n = 0); broadcasts over ``n`` and ``f``."""
    n, f = np.asarray(n, np.float64), np.asarray(f, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.floor(f * n + 1e-9) / n, np.nan)


@protocol.rule("adaptive.finite")
def runs_finite(row, results: Results) -> Claim:
    """The divergence row, runs named ``K=10`` (fixed) or ``tol=0.01`` (adaptive), with their seed."""

    def label(name: str, h: Mapping, i: int) -> str:
        v = fmt_K(h["K"][i]) if name == "K" else f"{float(h['tol'][i]):g}"
        return f"{name}={v} (seed {int(h['seed'][i]) if 'seed' in h else int(h['seed_index'][i])})"

    return divergence_claim({"K": results.fixed, "tol": results.adaptive}, label, prefix=False)


@protocol.rule("adaptive.fewer_updates", needs=("margin",))
def fewer(row, results: Results) -> tuple[str, str, str]:
    """Adaptive placement reaches K = 1 within the row's margin with fewer updates than the fixed
    period that does (:func:`fewer_updates` of :func:`per_policy`)."""
    fixed, adapt = per_policy(results, row.margin)
    T = int(np.asarray(results.fixed["step"])[-1])
    noise = (fixed or adapt)[0].diff.counts() if (fixed or adapt) else ""
    on_f = [f for f in fixed if f.par == "yes"]
    on_a = [a for a in adapt if a.par == "yes"]
    if not fixed or not adapt:
        measured = "needs K = 1, a fixed K > 1 and an adaptive tolerance"
    else:
        F = f"F = {min(f.relin for f in on_f)}" if on_f else "F: no fixed K > 1 on par"
        A = f"A = {min(a.relin for a in on_a)}" if on_a else "A: no tolerance on par"
        measured = f"{F}, {A}; " + "; ".join(
            [f"K={fmt_K(f.K)} ({f.relin}): {f.diff.short()} {f.par}" for f in fixed]
            + [f"tol={a.tol:g} ({a.relin}): {a.diff.short()} {a.par}" for a in adapt])
    return (measured, fewer_updates(fixed, adapt),
            f"per setting: final test acc. minus K = 1, {on_par_rule(row.margin)} ({noise}; a diverged run is 'no'); "
            "updates n = the most re-linearisations over seeds; F, A = the fewest n on par among fixed K > 1, "
            "among tolerances; 'yes' when a tolerance on par has n below every fixed K on par or undecided; "
            f"'no' when each tolerance is not on par or uses ≥ n of a fixed K on par; else undecided; T = {T} steps")


@protocol.rule("adaptive.early")
def early(row, results: Results) -> tuple[str, str, str]:
    """Where the adaptive runs put their updates (:func:`placement`): the excess of their share by
    T/2 over an even period's, above 0 beyond noise over seeds for every tolerance."""
    rule = ("per tolerance that re-linearised in every seed: excess = share of its re-linearisations made by T/2 "
            "minus ⌊n/2⌋/n (n spread evenly, as a fixed period); 'yes' when the 95 % t interval over seeds lies "
            "above 0, 'no' when wholly at or below; undecided with one seed; 'yes' overall when every tolerance is")
    p = placement(results)
    half = int(np.flatnonzero(p.fractions == 0.5)[0]) if (p.fractions == 0.5).any() else -1
    usable = [i for i in range(len(p.tol)) if (p.n[i] > 0).all()]
    if half < 0 or not usable:
        return "no adaptive run re-linearised in every seed", NA, "needs a tolerance that re-linearised in every seed"
    verdicts, parts = [], []
    for i in usable:
        ex = p.excess[i, :, half]
        v = beyond(ex, 0.0, above=True)
        verdicts.append(v)
        m, _, lo, hi = seed_interval(ex)
        interval = "" if not math.isfinite(lo) else f" [{pct(lo)}, {pct(hi)}]"
        parts.append(f"tol={p.tol[i]:g}: first half {pct(np.nanmean(p.early[i, :, half]))} of "
                     f"{np.mean(p.n[i]):.0f} (even {pct(np.nanmean(p.even[i, :, half]))}), "
                     f"excess {pct(m)}{interval} {v}")
    return "; ".join(parts), all_verdicts(verdicts), rule


@protocol.rule("adaptive.stable", needs=("margin",))
def stable(row, results: Results) -> Claim:
    """The stability row over both sweeps (an adaptive run's history records K = ∞, no fixed
    period; it is named by its tolerance)."""
    fixed, adapt = results.fixed, results.adaptive
    h = pooled_runs([fixed, adapt])
    h["label"] = ([f"K={fmt_K(k)}" for k in np.asarray(fixed["K"], np.float64)]
                  + [f"tol={float(t):g}" for t in np.asarray(adapt["tol"], np.float64)])
    return sharpness_claim(h, row.margin)


def claims(results: Results) -> list[Claim]:
    """The rows of adaptive in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): adaptive
    placement reaches K = 1 with fewer updates than the fixed period that does (:func:`fewer`);
    adaptive runs place their updates early (:func:`early`); stability (:func:`stable`);
    divergence (:func:`runs_finite`). Every accuracy comparison through the shared noise rule."""
    return protocol.claims("adaptive", results)


EXPERIMENT = Experiment("adaptive", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws: pure functions of the results (nothing here is part of ``compute``).


class PolicyGrid(NamedTuple):
    """The two sweeps arranged for the plot of accuracy against feature updates (:func:`by_policy`):
    N_K fixed periods and N_t tolerances, S seeds."""

    K: np.ndarray  #: (N_K,) the fixed periods, increasing, ∞ last
    K_relin: np.ndarray  #: (N_K, S) the re-linearisations each seed's run made
    K_acc: np.ndarray  #: (N_K, S) its final test accuracy
    K_diverged: np.ndarray  #: (N_K,) bool, whether any seed diverged
    tol: np.ndarray  #: (N_t,) the tolerances, increasing
    tol_relin: np.ndarray  #: (N_t, S), as ``K_relin``
    tol_acc: np.ndarray  #: (N_t, S), as ``K_acc``
    tol_diverged: np.ndarray  #: (N_t,) bool, as ``K_diverged``
    steps: int  #: T


def by_policy(results: Results) -> PolicyGrid:
    """The two sweeps arranged by setting and seed for the plot (:class:`PolicyGrid`)."""
    acc = np.asarray(results.final_test_acc, np.float64)
    n = np.asarray(results.n_relin)
    div = _diverged(results)
    K = np.unique(np.asarray(results.fixed["K"], np.float64)).tolist()  # ascending, ∞ last
    tol = _tolerances(results)
    fk = [_fixed_runs(results, k) for k in K]
    ft = [_adaptive_runs(results, t) for t in tol]
    return PolicyGrid(
        np.asarray(K), np.stack([n[j] for j in fk]), np.stack([acc[j] for j in fk]),
        np.asarray([bool(div[j].any()) for j in fk]),
        np.asarray(tol), np.stack([n[j] for j in ft]), np.stack([acc[j] for j in ft]),
        np.asarray([bool(div[j].any()) for j in ft]), int(np.asarray(results.fixed["step"])[-1]),
    )


def raster(results: Results, K: Sequence[float] | None = None) -> tuple[list[str], list[np.ndarray]]:
    """The re-linearisation steps of every adaptive run (labelled ``tol=0.01, seed 0``) and, for
    comparison, of the first seed's fixed periods ``K`` (default: every finite K > 1 of the sweep;
    steps K, 2K, …, ⌊T/K⌋·K). Returns ``(labels, steps)``, one (n,) int array per row."""
    ha, hf = results.adaptive, results.fixed
    T = int(np.asarray(hf["step"])[-1])
    Ks = np.asarray(hf["K"], np.float64)
    if K is None:
        K = sorted(set(Ks[np.isfinite(Ks) & (Ks > 1)].tolist()))
    labels, rows = [], []
    for k in K:
        labels.append(f"K={fmt_K(k)}")
        rows.append((np.arange(1, T // int(k) + 1) * int(k)).astype(int))
    steps = np.asarray(ha["relin_step"]).reshape(len(np.asarray(ha["tol"])), -1)
    seed = np.asarray(ha["seed"] if "seed" in ha else ha["seed_index"])
    for i in np.lexsort((seed, np.asarray(ha["tol"], np.float64))):
        labels.append(f"tol={float(ha['tol'][i]):g}, seed {int(seed[i])}")
        rows.append(steps[i][steps[i] >= 0].astype(int))
    return labels, rows


def timing(results: Results) -> str:
    """``14 runs (4 K + 3 tolerances × 2 seeds) in two sweeps, 1930 s of computation``."""
    hf, ha = results.fixed, results.adaptive
    nK, nt = len(set(np.asarray(hf["K"]).tolist())), len(set(np.asarray(ha["tol"]).tolist()))
    S = len(set(np.asarray(hf["seed_index"]).tolist()))
    return (f"{int(results.n_runs)} runs ({nK} K + {nt} tolerance{'s' if nt != 1 else ''} × {S} "
            f"seed{'s' if S != 1 else ''}) in two sweeps, {float(results.wall_seconds):.0f} s of computation")


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def accuracy_against_updates(
    ax: Axes,
    relin: Any,
    acc: Any,
    *,
    names: Sequence[str] | None = None,
    diverged: Any = None,
    label: str | None = None,
    color: Any = None,
    marker: str = "o",
    scale: float = 100.0,
    **plot_kwargs,
) -> Line2D:
    """Final accuracy against the number of feature updates (re-linearisations), one point per setting.

    Args:
      relin, acc: ``(N, S)``: per setting (a fixed K, a tolerance) and seed, the re-linearisations
        made and the final accuracy (a fraction; drawn × ``scale``).
      names: optional ``(N,)`` strings written next to each setting's mean (``"K=10"``, ``"tol=0.01"``).
      diverged: optional ``(N,)`` bool: a cross on the settings where a seed diverged.
      label, color, marker, plot_kwargs: of the line of means.

    Each seed is a dot at its own (updates, accuracy); each setting's mean over seeds
    (:func:`iterlin.repro.plotting.mean_se`) a marker at its mean number of updates, with ± one standard
    error of the accuracy, joined in order of updates. The x axis is symlog (0 updates allowed).
    Returns the Line2D of the means.
    """
    check_axes(ax)
    n = real_array(relin, "relin")
    v = real_array(acc, "acc")
    if v.ndim != 2 or n.shape != v.shape:
        raise bad_argument("acc", f"of shape {v.shape}", f"(N, S), the shape of relin {n.shape}")
    x, _ = mean_se(n, axis=1)
    y, se = mean_se(v, axis=1)
    order = np.argsort(x, kind="stable")
    (line,) = ax.plot(x[order], scale * y[order], marker=marker, color=color, label=label, **plot_kwargs)
    c = line.get_color()
    ax.errorbar(x, scale * y, yerr=scale * se, linestyle="none", color=c, capsize=2)
    ok = np.isfinite(v)
    ax.scatter(n[ok], scale * v[ok], s=10, color=c, alpha=0.5)
    if names is not None:
        if len(names) != x.shape[0]:
            raise bad_argument("names", f"of length {len(names)}", f"one name per setting ({x.shape[0]})")
        for xi, yi, name in zip(x, y, names):
            ax.annotate(name, (xi, scale * yi), textcoords="offset points", xytext=(4, 4), fontsize=7, color=c)
    if diverged is not None:
        d = as_1d(np.asarray(diverged, dtype=bool), "diverged", x.shape[0], "one flag per setting").astype(bool)
        if d.any():
            ax.plot(x[d], scale * y[d], linestyle="none", marker="x", ms=CROSS_SIZE, color=c)
    ax.set_xscale("symlog", linthresh=1.0)
    return line


def relin_raster(
    ax: Axes,
    steps: Sequence[Any],
    labels: Sequence[str],
    *,
    T: int,
    colors: Sequence[Any] | None = None,
    marks: Sequence[float] = (0.25, 0.5),
) -> Axes:
    """When each run re-linearised: one row per run (top to bottom), a tick ``|`` at each step.

    Args:
      steps: R arrays ``(n_r,)``: the steps at which run r re-linearised (e.g. ``relin_step``
        without its −1 padding). labels: R row labels. T: the number of steps (the x range [0, T]).
      colors: optional R colours (default black). marks: fractions of T drawn as dotted lines.
    """
    check_axes(ax)
    if len(steps) != len(labels):
        raise bad_argument("labels", f"of length {len(labels)}", f"one label per row of steps ({len(steps)})")
    rows = [np.asarray(s, np.float64).ravel() for s in steps]
    offsets = np.arange(len(rows))[::-1]
    if rows:
        ax.eventplot(rows, lineoffsets=offsets, linelengths=0.7, linewidths=1.0,
                     colors=list(colors) if colors is not None else "k")
    for f in marks:
        ax.axvline(f * T, color="gray", linestyle=":", linewidth=0.8)
    ax.set_xlim(0, T)
    ax.set_yticks(offsets, list(labels), fontsize=7)
    ax.set_xlabel("step")
    return ax


def placement_dots(
    ax: Axes,
    early: Any,
    even: Any,
    fractions: Sequence[float],
    names: Sequence[str],
    *,
    scale: float = 100.0,
) -> Axes:
    """Where runs put their updates: for each fraction f of training (a group on the x axis) and
    each setting i (a column in the group, colour ``C{i+2}``), the share of its updates made by f·T,
    one filled dot per seed (``early``), beside the share an even placement of the same number of
    updates makes (``even``, open circles).

    Args:
      early, even: ``(N, S, F)`` shares (fractions; drawn × ``scale``): N settings, S seeds, F fractions.
      fractions: ``(F,)``. names: N labels of the settings (the legend).
    """
    check_axes(ax)
    e, v = real_array(early, "early"), real_array(even, "even")
    if e.ndim != 3 or v.shape != e.shape:
        raise bad_argument("even", f"of shape {v.shape}", f"(N, S, F), the shape of early {e.shape}")
    N, S, F = e.shape
    if len(fractions) != F or len(names) != N:
        raise bad_argument("fractions, names", f"of lengths {len(fractions)}, {len(names)}", f"{F} and {N}")
    for j in range(F):
        for i in range(N):
            x = np.full(S, j * (N + 1) + i, np.float64)
            ax.plot(x, scale * e[i, :, j], "o", color=f"C{i + 2}", label=names[i] if j == 0 else None)
            ax.plot(x, scale * v[i, :, j], "o", mfc="none", color=f"C{i + 2}")
    ax.set_xticks([j * (N + 1) + (N - 1) / 2 for j in range(F)], [f"by {f:g}·T" for f in fractions])
    return ax


def plot(results: Results):
    """Left: final test accuracy against the number of feature updates (re-linearisations, symlog
    axis), each setting's mean over seeds ± one standard error, each seed a dot: the fixed periods
    K (blue circles) and the adaptive tolerances (orange triangles); a cross marks a diverged
    seed. Middle: when each run re-linearised (a tick per update), the fixed periods on top, then
    every adaptive run; dotted lines at T/4 and T/2. Right: the share of each adaptive run's
    updates made by T/4 and T/2 (dots, per seed) against the even placement of the same number
    of updates (open circles). Fourth, when the runs recorded the sharpness: the linear model's
    bound 2/λ_max(θ_s) along the fixed periods' runs (:func:`iterlin.repro.plotting.bound_panel`)."""
    s = by_policy(results)  # per setting and seed: updates made and final test accuracy
    labels, rows = raster(results)  # the steps of each run's re-linearisations
    p = placement(results)  # the shares made early, and the even placement's
    bound = "lr_over_bound" in results.fixed
    fig, axes = panels(4 if bound else 3, panel_size=(5.2, 4.2),
                       suptitle=f"CNN on CIFAR-10: when to update features ({results.config.scale} "
                                f"scale, T = {s.steps} steps, {int(results.n_runs)} runs)")
    left, mid, right = axes[:3]
    if bound:
        bound_panel(axes[3], results.fixed, title="fixed K: ")
    accuracy_against_updates(left, s.K_relin, s.K_acc, names=[f"K={k:g}" for k in s.K],
                             diverged=s.K_diverged, label="fixed period K", color="C0")
    accuracy_against_updates(left, s.tol_relin, s.tol_acc, names=[f"tol={t:g}" for t in s.tol],
                             diverged=s.tol_diverged, label="adaptive (tol)", color="C1", marker="^")
    left.set(xlabel="feature updates (re-linearisations)", ylabel="final test accuracy (%)")
    legend(left)
    colors = ["C0" if label.startswith("K=") else "C1" for label in labels]
    relin_raster(mid, rows, labels, T=p.steps, colors=colors)
    mid.set(title="when each run re-linearised")
    placement_dots(right, p.early, p.even, p.fractions, [f"tol={t:g}" for t in p.tol])
    right.set(ylabel="share of the run's updates (%)", title="made early (dots) vs evenly (circles)")
    legend(right)
    plt.show()
