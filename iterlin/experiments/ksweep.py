"""Beyond the paper: final test accuracy against K over a full log grid, from K = 1 to K = ∞.

The paper's reviewers asked for accuracy as a function of K over a log-spaced range that includes
K ≤ 100, not only K = 1 against one very large K. Here the paper's CNN is trained for a fixed
number of steps T for every K of a log grid 1, 3, 10, 30, 100, 300, … up to at least T, and for
K = ∞, every K and seed in ONE sweep (:func:`~iterlin.experiments._common.cnn_sweep`: the runs of
one seed share the initialisation and the batches, so they differ only in K). The number of
re-linearisations T/K (the paper's feature-learning proxy, Definition 1) goes from T to 0.

Scoring: the network f(θ_T) for finite K, the linear model f_lin_0(θ_T) for K = ∞ (the model it
trains; Figs. 1 and 5 score it so). A finite K ≥ T never re-linearises before the last step, so it
follows K = ∞'s trajectory exactly and differs from it only in being scored as the network
f(θ_T): the claims check that (a consistency check), and the claim "K = ∞ is below every finite K"
is judged over the K < T that re-linearise during training.

Config keys: ``K`` (list, 1 always included; ``inf`` allowed), ``lr``, ``steps`` (T),
``batch_size``, ``augment``, ``n_train``, ``n_test``, ``seed``, ``n_seeds``, ``n_evals``,
``n_eval_train``, ``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (the sharpness record,
:func:`~iterlin.experiments._common.sharpness_callback`). Conventions: :mod:`iterlin.experiments._common`.

Results: :class:`Results`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import ClassVar, NamedTuple

import matplotlib.pyplot as plt
import numpy as np

from ..repro.claims import (
    EXCEEDS_RULE,
    NA,
    ON_PAR,
    UNDECIDED,
    UNSTABLE,
    Claim,
    all_verdicts,
    exceeds,
    fmt_K,
    on_par,
    on_par_rule,
)
from ..data import Dataset
from ..repro.failures import unstable_among
from ..repro.plotting import accuracy_against_K, band, legend, panels, plot_sweep
from ..repro.stats import Difference, final_difference, pct, runs_of
from . import protocol
from ._common import (
    STABLE,
    Experiment,
    KGrid,
    Sweep,
    SweepConfig,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    k_grid,
    load_data,
    sharpness_callback,
    trained_final,
)

__all__ = ["Config", "Results", "SCALES", "EXPERIMENT", "load", "compute", "claims", "largest_on_par", "infinity_below", "late_same", "PerK", "per_K", "by_K",
           "timing", "plot"]

INF = math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(SweepConfig):
    """ksweep's knobs: a plain K sweep's (:class:`~iterlin.experiments._common.SweepConfig`)."""

    experiment: ClassVar[str] = "ksweep"


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/ksweep.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 3, 10, 30, INF], lr=0.05, steps=24, batch_size=16, augment=False, n_train=256, n_test=200,
        seed=0, n_seeds=1, n_evals=3, n_eval_train=128, n_sharpness=32, sharpness_iters=10, sharpness_every=24,
    ),
    "cpu": dict(STABLE, K=[1, 320, 800, INF], n_seeds=3, n_evals=20),
    "gpu": dict(STABLE, K=[1, 32, 80, 160, 320, 800, 3200, INF], n_seeds=8, n_evals=20),
    "paper": dict(
        K=[1, 10, 100, 1000, 10_000, 100_000, 1_000_000, INF], lr=1e-4, steps=1_000_000, batch_size=256,
        augment=False, n_train=50_000, n_test=10_000, seed=0, n_seeds=3, n_evals=100, n_eval_train=10_000,
        n_sharpness=1000, sharpness_iters=30, sharpness_every=10_000,
    ),
}


class Results(NamedTuple):
    """ksweep's results (:func:`compute`): R runs."""

    #: the :func:`~iterlin.experiments._common.sweep` history (every seed × K, seed-major), with the
    #: sharpness record ``sharpness`` and ``lr_over_bound`` (R, E)
    runs: Sweep
    #: (R,) float64, the final test accuracy of the model each run trains
    #: (:func:`~iterlin.experiments._common.trained_final`)
    final_test_acc: np.ndarray
    n_test: np.ndarray  #: () int, the test images
    n_runs: np.ndarray  #: () int, R
    wall_seconds: np.ndarray  #: () float, the sweep's wall time when it was computed (a cached result keeps it)
    #: (R, n_test) bool, whether that model classifies each test image correctly (None when the
    #: history records no per-image correctness)
    final_test_correct: np.ndarray | None = None
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, and ``n_sharpness <= n_train`` checked."""
    return check_sharpness(config, load_data(config))


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every seed × K of ``config.K`` in one sweep (see the module docstring for the results)."""
    started = time.perf_counter()
    runs = cnn_sweep(config, data, callback=sharpness_callback(config, data, config.lr),
                     checkpoint=checkpoint_path(checkpoint_dir, "runs"), progress=progress)
    wall = time.perf_counter() - started
    return Results(runs=runs, **trained_final(runs), n_test=np.asarray(data.x_test.shape[0]),
                   n_runs=np.asarray(len(runs.K)), wall_seconds=np.asarray(wall))


# ------------------------------------------------------------------------------------------------
# Claims


class PerK(NamedTuple):
    """One finite K > 1 against K = 1 (:func:`per_K`)."""

    K: float  #: the period
    relin: int  #: its re-linearisations at the end (seed 0's run)
    diff: Difference  #: its final test accuracy minus K = 1's, paired by seed and test image
    #: :func:`~iterlin.repro.claims.on_par` within :data:`~iterlin.repro.claims.ON_PAR`; "no" when a run of K = 1
    #: diverged, :data:`~iterlin.repro.claims.UNSTABLE` when a run of K was unstable
    #: (:func:`~iterlin.repro.failures.unstable_runs`)
    par: str


def per_K(results: Results, tol: float = ON_PAR) -> list[PerK]:
    """Every finite K > 1 of the sweep against K = 1, in increasing K, on par within ``tol``."""
    h = results.runs
    K = np.asarray(h["K"], np.float64)
    div1 = bool(np.asarray(h["diverged"], bool)[runs_of(h, 1)].any())
    i1 = runs_of(h, 1)
    out = []
    for k in np.unique(K[np.isfinite(K) & (K > 1)]):
        j = runs_of(h, k)
        d = final_difference(results, i1, j)
        par = "no" if div1 else UNSTABLE if unstable_among(h, j) else on_par(d, tol)
        out.append(PerK(float(k), int(np.asarray(h["n_relin"])[j[0], -1]), d, par))
    return out


@protocol.rule("ksweep.largest_on_par", needs=("margin", "max_relin"))
def largest_on_par(row, results: Results) -> tuple[str, str, str]:
    """The largest K within noise of K = 1 (:func:`per_K` within the row's margin), and whether a K
    with at most ``row.max_relin`` re-linearisations is on par."""
    T = int(np.asarray(results.runs["step"])[-1])
    rows = per_K(results, row.margin)
    noise = rows[0].diff.counts() if rows else ""
    on = [r for r in rows if r.par == "yes"]
    kstar = on[-1] if on else None
    few = [r for r in rows if r.relin <= row.max_relin]
    if not rows:
        holds, measured = NA, "no finite K > 1 was run"
    else:
        if not few:
            holds = NA
        elif any(r.par == "yes" for r in few):
            holds = "yes"
        elif all(r.par == "no" for r in few):
            holds = "no"
        elif all(r.par in ("no", UNSTABLE) for r in few):
            holds = UNSTABLE
        else:
            holds = UNDECIDED
        head = (f"largest K on par: K={fmt_K(kstar.K)} ({kstar.relin} re-linearisations)" if kstar
                else "no K > 1 on par")
        measured = head + "; " + "; ".join(f"K={fmt_K(r.K)} ({r.relin}): {r.diff.short()} {r.par}" for r in rows)
    return (measured, holds,
            f"per K: final test acc. of K minus K = 1, {on_par_rule(row.margin)} ({noise}; '{UNSTABLE}' when a run "
            "of K diverged, exploded, rose inside a block or had η above 2/λ_max(θ_s)); "
            f"'yes' when a K with ≤ {row.max_relin} re-linearisations is on par; 'no' when every K with "
            f"≤ {row.max_relin} is not; T = {T} steps")


def _grid(results: Results):
    """The sweep's history, each run's K, the steps T and the runs of K = ∞."""
    h = results.runs
    return h, np.asarray(h["K"], np.float64), int(np.asarray(h["step"])[-1]), runs_of(h, INF)


@protocol.rule("ksweep.inf_below")
def infinity_below(row, results: Results) -> tuple[str, str, str]:
    """K = ∞ ends below every finite K that re-linearises during training (K < T), each beyond noise."""
    h, K, T, iinf = _grid(results)
    learning = [k for k in np.unique(K[np.isfinite(K)]) if k < T]
    if iinf.size == 0 or not learning:
        return "needs K = ∞ and a finite K < T", NA, "needs K = ∞ and a finite K < T in the grid"
    verdicts, parts = [], []
    for k in learning:
        j = runs_of(h, k)
        d = final_difference(results, iinf, j)  # K minus ∞
        v = UNSTABLE if unstable_among(h, j) else exceeds(d)
        verdicts.append(v)
        parts.append(f"K={fmt_K(k)}: {d.short()} {v}")
    acc = np.asarray(results.final_test_acc, np.float64)
    return (f"K=∞ (linear model): {pct(acc[iinf].mean())}; K minus ∞: " + "; ".join(parts), all_verdicts(verdicts),
            f"per K < T = {T}: " + EXCEEDS_RULE + f" ({final_difference(results, iinf, runs_of(h, learning[0])).counts()}); "
            f"'yes' when every K is better; '{UNSTABLE}' for a K whose run was unstable")


@protocol.rule("ksweep.late_same")
def late_same(row, results: Results) -> tuple[str, str, str]:
    """Check: a finite K ≥ T follows K = ∞'s trajectory (the same θ_T, every test image alike)."""
    h, K, T, iinf = _grid(results)
    late = [k for k in np.unique(K[np.isfinite(K)]) if k >= T]
    if iinf.size == 0 or not late:
        return "no finite K ≥ T (or no K = ∞) in the grid", NA, "needs K = ∞ and a finite K ≥ T"
    net = np.asarray(h["net_test_acc"], np.float64)[:, -1]
    correct = h.get("net_test_correct")
    agree = []
    for k in late:
        j = runs_of(h, k)
        if correct is not None:
            c = np.asarray(correct)
            agree.append(bool(np.array_equal(c[j], c[iinf])))
        else:
            agree.append(bool(np.allclose(net[j], net[iinf], atol=0.5 / int(results.n_test))))
    return (f"network f(θ_T): K=∞ {pct(net[iinf].mean())}; "
            + "; ".join(f"K={fmt_K(k)} {pct(net[runs_of(h, k)].mean())}" for k in late),
            "yes" if all(agree) else "no",
            "the networks of K ≥ T and of K = ∞ classify every test image alike, seed by seed")


def claims(results: Results) -> list[Claim]:
    """The rows of ksweep in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): the largest K
    within noise of K = 1 and its T/K (:func:`largest_on_par`); K = ∞ below every finite K < T
    (:func:`infinity_below`); K ≥ T trains as K = ∞ (a check, :func:`late_same`); stability;
    divergence. Every comparison through the shared noise rule."""
    return protocol.claims("ksweep", results)


EXPERIMENT = Experiment("ksweep", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws: pure functions of the results (nothing here is part of ``compute``).


def by_K(results: Results) -> KGrid:
    """The sweep arranged by K for the plot (:class:`~iterlin.experiments._common.KGrid`)."""
    return k_grid(results.runs, results.final_test_acc)


def timing(results: Results) -> str:
    """``14 runs (7 K × 2 seeds) in one sweep, 1869 s of computation`` (when it was computed)."""
    h = results.runs
    n_K, n_seeds = len(set(np.asarray(h["K"]).tolist())), len(set(np.asarray(h["seed_index"]).tolist()))
    return (f"{int(results.n_runs)} runs ({n_K} K × {n_seeds} seed{'s' if n_seeds != 1 else ''}) in one sweep, "
            f"{float(results.wall_seconds):.0f} s of computation")


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Left: final test accuracy against K (log axis, K = ∞ at the right edge), the mean over seeds
    ± one standard error, each seed a dot: the network f(θ_T) for finite K (circles), the linear
    model for K = ∞ (the red square), and K = ∞'s network (the open square); the top axis gives
    the number of re-linearisations T/K. A cross marks a K at which a seed diverged. Right: test accuracy over
    training for every K (solid: the network; dashed: K = ∞'s linear model)."""
    s = by_K(results)
    h = results.runs
    fig, (left, right) = panels(2, panel_size=(6.2, 4.2),
                                suptitle=f"CNN on CIFAR-10: final test accuracy against K ({results.config.scale} "
                                         f"scale, T = {s.steps} steps, {int(results.n_runs)} runs)")
    xs = accuracy_against_K(left, s.K, s.acc, s.diverged, s.relin,
                            finite_label="finite K: the network f(θ_T)",
                            inf_label="K = ∞: the linear model (the model trained)")
    inf = s.inf
    if inf.any():
        band(left, xs[inf], s.net_inf, axis=1, scale=100, color="C0", marker="s", mfc="white",
             linestyle="none", ms=8, label="K = ∞: its network f(θ_T) (≡ any K ≥ T)")
    legend(left)
    lines = plot_sweep(right, h, "net_test_acc", label="K = {K}", diverged_label=None, marker=None)
    plot_sweep(right, h, "lin_test_acc", linestyle="--", marker=None, color=lines, select=lambda k: k == float("inf"),
               label="K = {K}: linear model", diverged_label=None)
    right.set(xlabel="step", ylabel="test accuracy (%)", title="over training")
    legend(right)
    plt.show()
