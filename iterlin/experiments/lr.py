"""Beyond the paper: learning rates. Does large K take the learning rates K = 1 takes?

The paper's rates are small (1e-5 to 1e-3); its reviewers asked about larger ones. Training the
linearisation at θ_s by gradient descent is stable only below 2/λ_max of the Gauss–Newton matrix at
θ_s (:mod:`iterlin.analysis.stability`), while the network (K = 1) is not bound that way, so a large K may
need a smaller rate than K = 1. Here the paper's CNN is trained with K = 1 and one large K at each
rate of a grid spanning at least an order of magnitude, every (K, lr) and seed in ONE sweep (the
runs of one seed share the initialisation and the batches), and the bound 2/λ_max(θ_0) is measured
at each seed's initialisation on a small training subset.

Scoring: the network f(θ_T) for finite K, the linear model for K = ∞. A run that diverges (a
non-finite or exploding loss, :func:`iterlin.training.commit_step`) is frozen at its last finite
state and recorded; a run that blows up without tripping that guard shows in its accuracy and loss.

Config keys: ``K`` (list: 1 and the large K), ``lr`` (list of rates; a single rate η means
[η/10, 0.3 η, η]), ``steps``, ``batch_size``, ``augment``, ``n_train``, ``n_test``, ``seed``,
``n_seeds``, ``n_evals``, ``n_eval_train``, ``n_sharpness`` (training images λ_max is measured on,
the first ones), ``sharpness_iters`` (power iterations, :func:`iterlin.analysis.stability.ggn_sharpness`)
and ``sharpness_every`` (λ_max of the linear model recorded along every run every this many steps,
:func:`~iterlin.experiments._common.sharpness_callback`).

Results: :class:`Results`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar, Mapping, NamedTuple, Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..repro.claims import NA, UNDECIDED, Claim, all_verdicts, exceeds, fmt_K, on_par, on_par_rule
from ..repro.config import Flag, Images, Period, Rate, Steps, TestImages
from ..data import Dataset
from ..repro.failures import BLOCK_RISE, failed_runs
from ..models import make_model
from ..repro.plotting import legend, panels, plot_bound, plot_sweep, run_colors, seed_curve, set_log_ticks
from ..analysis.stability import bound_record, first_unstable_step, max_stable_lr
from ..repro.stats import Difference, final_difference, num, run_seeds, runs_of
from . import protocol
from ._common import (
    Experiment,
    Seeds,
    Sharpness,
    Sweep,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    load_data,
    seed_keys,
    seeds,
    sharpness_callback,
    trained_final,
)

__all__ = ["Config", "Results", "SCALES", "EXPERIMENT", "load", "compute", "claims", "decade", "plan", "large_K",
           "PerRate", "per_lr", "needs_smaller", "on_par_below", "on_par_above", "Crossing", "failures",
           "crossing", "crossing_rule", "RateGrid", "by_lr", "timing", "plot"]

# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/lr.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 3], lr=[0.01, 0.03, 0.1], steps=24, batch_size=16, augment=False, n_train=256, n_test=200,
        seed=0, n_seeds=1, n_evals=6, n_eval_train=128, n_sharpness=32, sharpness_iters=10, sharpness_every=12,
    ),
    "cpu": dict(
        K=[1, 50], lr=[0.01, 0.03, 0.1], steps=300, batch_size=128, augment=False, n_train=None, n_test=None,
        seed=0, n_seeds=3, n_evals=24, n_eval_train=500, n_sharpness=256, sharpness_iters=30, sharpness_every=50,
    ),
    "gpu": dict(
        K=[1, 50], lr=[0.003, 0.01, 0.03, 0.1], steps=300, batch_size=128, augment=False, n_train=None,
        n_test=None, seed=0, n_seeds=8, n_evals=24, n_eval_train=500, n_sharpness=256, sharpness_iters=30,
        sharpness_every=50,
    ),
    "paper": dict(
        K=[1, 100_000], lr=[1e-5, 1e-4, 1e-3, 1e-2], steps=1_000_000, batch_size=256, augment=False,
        n_train=50_000, n_test=10_000, seed=0, n_seeds=3, n_evals=100, n_eval_train=10_000, n_sharpness=1000,
        sharpness_iters=30, sharpness_every=100_000,
    ),
}


def decade(lr: float) -> list[float]:
    """A single rate η given for the list: ``[η/10, 0.3 η, η]`` (rounded to 12 significant digits)."""
    return sorted({float(f"{v:.12g}") for v in (lr / 10, 0.3 * lr, lr)})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds, Sharpness):
    """lr's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "lr"
    EXPAND: ClassVar[Mapping] = {"lr": decade}

    K: tuple[Period, ...]
    lr: tuple[Rate, ...]
    steps: Steps
    batch_size: Images | None
    augment: Flag
    n_train: Images | None
    n_test: TestImages | None


class Results(NamedTuple):
    """lr's results (:func:`compute`): R runs, S seeds."""

    #: the :func:`~iterlin.experiments._common.sweep` history (every seed × K × lr, seed-major,
    #: K-major within a seed), with the sharpness along training, ``sharpness`` and
    #: ``lr_over_bound`` (R, E)
    runs: Sweep
    #: (R,) float64, the final test accuracy of the model each run trains
    #: (:func:`~iterlin.experiments._common.trained_final`)
    final_test_acc: np.ndarray
    stable_lr: np.ndarray  #: (S,) float64, 2/λ_max(θ_0) per seed
    n_test: np.ndarray  #: () int, the test images
    n_runs: np.ndarray  #: () int, R
    wall_seconds: np.ndarray  #: () float, the sweep and the bound, when computed (a cached result keeps it)
    #: (R, n_test) bool, whether that model classifies each test image correctly (None when the
    #: history records no per-image correctness)
    final_test_correct: np.ndarray | None = None
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, and ``n_sharpness <= n_train`` checked."""
    return check_sharpness(config, load_data(config))


def plan(config: Config) -> tuple[list, list]:
    """The runs of one seed, K-major: ``(K, lr)`` lists of equal length (every K at every rate)."""
    pairs = [(k, eta) for k in config.K for eta in config.lr]
    return [k for k, _ in pairs], [eta for _, eta in pairs]


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every seed × K × lr in one sweep, and 2/λ_max(θ_0) per seed (module docstring)."""
    started = time.perf_counter()
    Ks, lrs = plan(config)
    runs = cnn_sweep(config, data, K=Ks, lr=lrs, callback=sharpness_callback(config, data, lrs),
                     checkpoint=checkpoint_path(checkpoint_dir, "runs"), progress=progress)
    m = config.n_sharpness
    x, y = data.x_train[:m], data.y_train[:m]
    bound = []
    for s in seeds(config):  # the same initialisation as the sweep's runs of seed s
        model = make_model("cnn", seed_keys(s)[0])
        bound.append(max_stable_lr(model.apply_fn, model.params, x, y, iters=config.sharpness_iters))
    wall = time.perf_counter() - started
    return Results(runs=runs, **trained_final(runs), stable_lr=np.asarray(bound, np.float64),
                   n_test=np.asarray(data.x_test.shape[0]), n_runs=np.asarray(len(runs.K)),
                   wall_seconds=np.asarray(wall))


# ------------------------------------------------------------------------------------------------
# Claims: the rows of lr in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`), their rules here


def large_K(results: Results) -> float | None:
    """The large K compared with K = 1: the largest K of the sweep (None when only K = 1 ran)."""
    K = np.asarray(results.runs["K"], np.float64)
    return float(K.max()) if K.max() > 1 else None


class PerRate(NamedTuple):
    """One rate: the large K against K = 1 (:func:`per_lr`)."""

    lr: float  #: the rate
    diff: Difference  #: large K minus K = 1, the shared noise rule, paired by seed and test image
    div1: bool  #: whether a seed of K = 1 diverged
    div_large: bool  #: whether a seed of the large K diverged
    #: :func:`~iterlin.repro.claims.on_par` within the row's margin ("no" when either diverged)
    par: str
    #: K = 1 better than large K beyond noise ("yes" also when only large K diverged, "no" when K = 1 diverged)
    worse: str


def per_lr(results: Results, tol: float) -> list[PerRate]:
    """Every rate of the sweep, in increasing order: the large K against K = 1, on par within ``tol``."""
    h = results.runs
    Kl = large_K(results)
    div = np.asarray(h["diverged"], bool)
    out = []
    for eta in np.unique(np.asarray(h["lr"], np.float64)):
        i1, j = runs_of(h, 1, eta), runs_of(h, Kl, eta)
        d = final_difference(results, i1, j)
        div1, divl = bool(div[i1].any()), bool(div[j].any())
        worse = "no" if div1 else "yes" if divl else exceeds(final_difference(results, j, i1))
        out.append(PerRate(float(eta), d, div1, divl, "no" if div1 or divl else on_par(d, tol), worse))
    return out


def _lr_list(rows: Sequence[PerRate]) -> str:
    return "; ".join(
        f"lr {r.lr:g}: {r.diff.short()} {r.par}" + (" (large K diverged)" if r.div_large else "")
        + (" (K=1 diverged)" if r.div1 else "") for r in rows)


_ONLY_K1 = ("only K = 1 was run", NA, "needs a run with K > 1")


@protocol.rule("lr.needs_smaller", needs=("margin",))
def needs_smaller(row, results: Results) -> tuple[str, str, str]:
    """Large K needs a smaller rate than K = 1: on par (within the row's margin) at some rate, and K = 1
    better beyond noise (or the large K diverged) at a larger one; 'no' when at every rate K = 1
    trains, the large K is on par or not worse; n/a with one rate."""
    Kl = large_K(results)
    if Kl is None:
        return _ONLY_K1
    rows = per_lr(results, row.margin)
    Ktxt = fmt_K(Kl)
    par_lrs = [r.lr for r in rows if r.par == "yes"]
    worse_lrs = [r.lr for r in rows if r.worse == "yes"]
    finite1 = [r for r in rows if not r.div1]
    if len(rows) < 2:
        holds = NA
    elif any(a < b for a in par_lrs for b in worse_lrs):
        holds = "yes"
    elif finite1 and all(r.par == "yes" or r.worse == "no" for r in finite1):
        holds = "no"
    else:
        holds = UNDECIDED
    top_par = max(par_lrs) if par_lrs else None
    # K = 1 ahead beyond noise at a rate where K is also on par (within the margin) is reported apart
    ahead_par = [b for b in worse_lrs if top_par is not None and b <= top_par]
    above = [b for b in worse_lrs if b not in ahead_par]
    measured = (f"K={Ktxt} on par up to lr {top_par:g}" if top_par is not None else f"K={Ktxt} on par at no rate")
    if ahead_par:
        measured += " (K=1 ahead beyond noise, within the margin, at " + ", ".join(f"{b:g}" for b in ahead_par) + ")"
    measured += (f"; K=1 better (or K={Ktxt} diverged) from lr {min(above):g}" if above
                 else "; K=1 better at no larger rate" if ahead_par else "; K=1 better at no rate")
    measured += "; K=1 finite at " + (", ".join(f"{r.lr:g}" for r in finite1) if finite1 else "no rate")
    return (measured, holds,
            f"'yes' when K={Ktxt} is on par with K = 1 at one rate and worse beyond noise (or diverged) at a larger "
            f"one; 'no' when at every rate K = 1 trains, K={Ktxt} is on par or not worse "
            f"({rows[0].diff.counts()}; {len(rows)} rates)")


def _on_par_at(row, results: Results, below: bool) -> tuple[str, str, str]:
    """The large K on par with K = 1 at every rate below (or at and above) the bound 2/λ_max(θ_0),
    the mean over seeds; n/a without such a rate."""
    Kl = large_K(results)
    if Kl is None:
        return _ONLY_K1
    rows = per_lr(results, row.margin)
    bound = float(np.mean(results.stable_lr))
    chosen = [r for r in rows if (r.lr < bound) == below]
    return (f"2/λ_max(θ_0) = {num(bound, 3)}: " + (_lr_list(chosen) if chosen else "no rate in the grid"),
            all_verdicts(r.par for r in chosen),
            f"per rate: final test acc. of K={fmt_K(Kl)} minus K = 1, {on_par_rule(row.margin)} "
            f"({rows[0].diff.counts()}; a diverged run is 'no'); 'yes' when every such rate is on par; n/a without one")


@protocol.rule("lr.on_par_below", needs=("margin",))
def on_par_below(row, results: Results) -> tuple[str, str, str]:
    """The large K on par with K = 1 at every rate below 2/λ_max(θ_0)."""
    return _on_par_at(row, results, below=True)


@protocol.rule("lr.on_par_above", needs=("margin",))
def on_par_above(row, results: Results) -> tuple[str, str, str]:
    """The large K on par with K = 1 at every rate at or above 2/λ_max(θ_0)."""
    return _on_par_at(row, results, below=False)


class Crossing(NamedTuple):
    """One large-K run's failure and crossing of its bound (:func:`failures`)."""

    run: int  #: its index in the history
    lr: float  #: its rate
    seed: int  #: its seed
    #: the step its linear model's training failed (:func:`~iterlin.repro.failures.failed_runs`), −1 if never
    failed: int
    #: the first recorded step with η above 2/λ_max(θ_s) (:func:`iterlin.analysis.stability.first_unstable_step`), −1 if never
    crossed: int


def failures(h: Mapping) -> list[Crossing]:
    """Every large-K run of the history ``h`` (:attr:`Results.runs`) with a sharpness record, in
    run order; empty without a record."""
    if "lr_over_bound" not in h:
        return []
    K = np.asarray(h["K"], np.float64)
    crossed = np.atleast_1d(first_unstable_step(h))
    failed = failed_runs(h)
    seed = run_seeds(h)
    lrs = np.asarray(h["lr"], np.float64)
    return [Crossing(int(i), float(lrs[i]), int(seed[i]), failed.get(int(i), (-1, ""))[0], int(crossed[i]))
            for i in np.flatnonzero(K > 1)]


def crossing(h: Mapping) -> tuple[str, str, str]:
    """"Large K fails where η crosses 2/λ_max(θ_s)", ``(measured, holds, rule)`` from the sharpness
    record along every large-K run of the history ``h`` (:attr:`Results.runs`). 'yes' when some run
    failed, every failed run had η above 2/λ_max(θ_s) at a recorded step at or before its failure,
    and every run that crossed failed; 'no' when a run failed with η under the bound at every
    recorded step up to its failure, or crossed and never failed; n/a without a record or when no
    run failed or crossed."""
    rows = failures(h)
    rule = ("per large-K run: failed = diverged, loss exploded, or the linear model's loss rose inside a block by over "
            f"{BLOCK_RISE:.0%}; crossed = η·λ_max(θ_s)/2 > 1 at a recorded step; 'yes' when some run failed, every "
            "failure came at or after its crossing and every crossing run failed; 'no' when one failed uncrossed or "
            "crossed and never failed")
    if not rows:
        return "no sharpness record", NA, rule
    fail = [r for r in rows if r.failed >= 0]
    cross = [r for r in rows if r.crossed >= 0]
    early = [r for r in fail if not 0 <= r.crossed <= r.failed]
    idle = [r for r in cross if r.failed < 0]

    def name(r):
        return f"lr {r.lr:g} seed {r.seed}"

    parts = [f"{len(fail)} of {len(rows)} runs failed, {len(cross)} crossed"]
    parts += [f"{name(r)}: crossed at step {r.crossed}, failed at {r.failed}" for r in fail if r not in early]
    parts += [f"{name(r)}: failed at step {r.failed} with η under the bound" +
              (f" (crossed only at {r.crossed})" if r.crossed >= 0 else "") for r in early]
    parts += [f"{name(r)}: crossed at step {r.crossed}, never failed" for r in idle]
    holds = NA if not fail and not cross else "no" if early or idle else "yes"
    return "; ".join(parts), holds, rule


@protocol.rule("lr.crossing", metrics=("lr_over_bound",))
def crossing_rule(row, results: Results) -> tuple[str, str, str]:
    """:func:`crossing` of the sweep."""
    return crossing(results.runs)


def claims(results: Results) -> list[Claim]:
    """The rows of lr in ``claims.toml``: large K needs a smaller rate than K = 1
    (:func:`needs_smaller`); on par below the bound 2/λ_max(θ_0), and above it (:func:`on_par_below`,
    :func:`on_par_above`); large K fails where η crosses 2/λ_max(θ_s) (:func:`crossing`); divergence.
    Every comparison through the shared noise rule (paired by seed and test image)."""
    return protocol.claims("lr", results)


EXPERIMENT = Experiment("lr", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws: pure functions of the results (nothing here is part of ``compute``).


class RateGrid(NamedTuple):
    """The runs arranged by K and rate for the plot (:func:`by_lr`): N rates, M periods, S seeds."""

    lr: np.ndarray  #: (N,) the rates, increasing
    K: np.ndarray  #: (M,) the periods, increasing
    values: np.ndarray  #: (M, N, S) the metric per seed
    diverged: np.ndarray  #: (M, N) bool, whether any seed of (K, lr) diverged
    bound: float  #: 2/λ_max(θ_0), the mean over seeds


def by_lr(results: Results, metric: str = "final_test_acc") -> RateGrid:
    """The runs arranged by K and rate (:class:`RateGrid`). ``metric``: ``final_test_acc`` (the
    model each run trains) or a history key such as ``net_test_loss`` (its value at the last step)."""
    h = results.runs
    K, lr, seed = (np.asarray(h[k], np.float64) for k in ("K", "lr", "seed_index"))
    rates, periods, seed_ids = np.unique(lr), np.unique(K), np.unique(seed)
    values = (np.asarray(results.final_test_acc, np.float64) if metric == "final_test_acc"
              else np.asarray(h[metric], np.float64)[:, -1])
    div = np.asarray(h["diverged"], bool)
    idx = np.asarray([[[int(np.flatnonzero((K == k) & (lr == eta) & (seed == s))[0]) for s in seed_ids]
                       for eta in rates] for k in periods])  # (M, N, S)
    return RateGrid(rates, periods, values[idx], div[idx].any(-1), float(np.mean(results.stable_lr)))


def timing(results: Results) -> str:
    """``12 runs (2 K × 3 rates × 2 seeds) in one sweep; 1910 s of computation (with 2/λ_max)``."""
    h = results.runs
    n = [len(set(np.asarray(h[k]).tolist())) for k in ("K", "lr", "seed_index")]
    return (f"{int(results.n_runs)} runs ({n[0]} K × {n[1]} rates × {n[2]} seed{'s' if n[2] != 1 else ''}) "
            f"in one sweep; {float(results.wall_seconds):.0f} s of computation (with 2/λ_max)")


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Top: final test accuracy (left) and final test loss (right, log scale) against the learning
    rate, one line per K: the mean over seeds ± one standard error, each seed a dot, a cross where a
    seed diverged (frozen at its last finite state); the dotted line is the linear model's stability
    bound 2/λ_max at initialisation. Middle: test accuracy over training at each rate, for K = 1
    (left) and the large K (right); a cross marks a run that diverged. Bottom (when the run recorded
    it): the linear model's bound 2/λ_max(θ_s) along training, each seed a line, one colour per rate;
    dashed: the rates η; a cross where a large-K run's linear model's loss rose inside a block."""
    acc, loss = by_lr(results), by_lr(results, "net_test_loss")  # (K, lr, seed) arrays and the bound
    h = results.runs
    recorded = "lr_over_bound" in h
    fig, axes = panels(2, 3 if recorded else 2, panel_size=(6, 4), squeeze=False,
                       suptitle=f"CNN on CIFAR-10: learning rates ({results.config.scale} scale, "
                                f"T = {results.config.steps} steps, {int(results.n_runs)} runs)")
    for ax, s, scale_, what in ((axes[0, 0], acc, 100, "final test accuracy (%)"),
                                (axes[0, 1], loss, 1, "final test loss")):
        for i, k in enumerate(s.K):
            seed_curve(ax, s.lr, s.values[i], diverged=s.diverged[i], scale=scale_, color=f"C{i}",
                       label=f"K = {fmt_K(k)}", diverged_label=f"K = {fmt_K(k)}: a seed diverged")
        ax.axvline(s.bound, color="k", linestyle=":", label=f"2/λ_max(θ_0) = {s.bound:.3g}")
        set_log_ticks(ax, s.lr)  # a tick at every rate of the grid
        ax.set(xlabel="learning rate", ylabel=what)
        legend(ax)
    axes[0, 1].set_yscale("log")
    colors = run_colors(len(acc.lr)) * len(acc.K)  # one colour per rate, the same for every K
    for ax, k in ((axes[1, 0], acc.K[0]), (axes[1, 1], acc.K[-1])):
        plot_sweep(ax, h, "net_test_acc", select=lambda kk, k=k: kk == k, color=colors, marker=None,
                   label="lr {lr:g}", diverged_label="lr {lr:g} diverged")
        ax.set(xlabel="step", ylabel="test accuracy (%)", title=f"K = {fmt_K(k)} over training")
        legend(ax)
    if recorded:
        record = bound_record(h)
        for ax, k in ((axes[2, 0], acc.K[0]), (axes[2, 1], acc.K[-1])):
            plot_bound(ax, record, select=lambda kk, k=k: kk == k, fraction=None, label="lr {lr}")
            ax.set(xlabel="step", ylabel="2 / λ_max(θ_s)", title=f"K = {fmt_K(k)}: the linear model's bound")
            legend(ax)
    plt.show()
