"""Fig. 7: the change of the first-layer filters from initialisation over training (Sec. 4.1).

ΔW_t = W_t − W_0 of all 50 first-layer filters (5 × 5 × 3 each) at each evaluation point
(:func:`iterlin.analysis.probes.filter_tracker`), for K = 1 and a large K, every seed; the notebook shows
the first three of the first seed, mapped [−0.5, 0.5] → [0, 1]
(:func:`iterlin.analysis.probes.filters_to_image`), and :func:`filter_match` measures, seed by seed, how
far the large-K filters got compared with K = 1's. The paper: K = 1 evolves much faster, and the
final large-K filters look like K = 1's at about 10 % of training.

Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
``augment``, ``n_train``, ``n_test``, ``seed``, ``n_seeds``, ``n_evals`` (the columns of the
figure), ``n_eval_train``, ``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (the
sharpness record, :func:`~iterlin.experiments._common.sharpness_callback`).

Results: :class:`Results`.

Conventions: :mod:`iterlin.experiments._common` (the paper's CNN, softmax cross-entropy on the
linearised logits, plain SGD at ``lr`` for every K; the runs of one seed start from one
initialisation and see the same batches). A run that diverges (a NaN or huge loss) is frozen at its
last finite state and recorded; its trackers keep reporting the frozen state. Checkpoints resume:
the trackers take θ_0 explicitly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping, NamedTuple, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ..repro.claims import NA, UNDECIDED, UNSTABLE, Claim, beyond, fmt_K, only_k1_rows
from ..columns import Record
from ..data import Dataset
from ..repro.failures import unstable_among
from ..repro.plotting import (
    as_1d,
    bad_argument,
    bound_panel,
    k1_and_largest,
    legend,
    panels,
    per_run,
    plot_sweep,
    real_array,
)
from ..analysis.probes import filter_tracker, filters_to_image
from ..repro.stats import num, pct, runs_of, seed_interval
from . import protocol
from ._common import (
    Experiment,
    STABLE,
    Sweep,
    SweepConfig,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    load_data,
    merge_callbacks,
    sharpness_callback,
)

__all__ = [
    "Results", "FilterMatch", "MatchMarks", "SCALES", "EXPERIMENT", "load", "compute", "claims", "filters_slower", "filters_early",
    "filter_match", "match_marks",
    "match_report", "filter_grid", "plot",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(SweepConfig):
    """fig7's knobs: a plain K sweep's (:class:`~iterlin.experiments._common.SweepConfig`)."""

    experiment: ClassVar[str] = "fig7"


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig7.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 8], lr=0.05, steps=24, batch_size=32, augment=False, n_train=256, n_test=200, seed=0,
        n_seeds=1, n_evals=12, n_eval_train=None, n_sharpness=32, sharpness_iters=10, sharpness_every=8,
    ),
    "cpu": dict(STABLE, n_seeds=3, n_evals=10),
    "gpu": dict(STABLE, n_seeds=8, n_evals=10),
    "paper": dict(  # K = 5e6 (the paper's); 6e7 steps of 256 = 30 columns of ~10 000 epochs
        K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True, n_train=50_000,
        n_test=10_000, seed=0, n_seeds=3, n_evals=30, n_eval_train=10_000, n_sharpness=1000,
        sharpness_iters=30, sharpness_every=5_000_000,
    ),
}


@dataclasses.dataclass(frozen=True, eq=False)
class FilterMatch(Record):
    """How far the large-K filters moved against K = 1's trajectory (:func:`filter_match`): R runs,
    E evaluation points, S seeds."""

    norm: np.ndarray  #: (R, E) ‖ΔW_t‖ of each run
    ratio: np.ndarray  #: (S,) ‖ΔW_T^{large}‖ / ‖ΔW_T^{K=1}‖
    fraction: np.ndarray  #: (S,) the fraction of training at which K = 1 reaches the large K's final size
    cosine: np.ndarray  #: (S,) cos(ΔW_T^{large}, ΔW_t^{K=1}) there
    match_step: np.ndarray  #: (S,) that evaluation point's step
    K_large: np.ndarray  #: () the period compared with K = 1


class Results(NamedTuple):
    """fig7's results (:func:`compute`)."""

    #: the sweep history (every seed × K, seed-major: R = S·len(K) runs) with ``filters_delta``
    #: (R, E, 5, 5, 3, 50) and the sharpness record ``sharpness`` and ``lr_over_bound`` (R, E)
    runs: Sweep
    match: FilterMatch  #: :func:`filter_match` of ``runs``
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, and ``n_sharpness <= n_train`` checked."""
    return check_sharpness(config, load_data(config))


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every seed × K in one program, the filters and the sharpness recorded at each evaluation point
    (module docstring)."""
    callback = merge_callbacks(lambda f, p0: filter_tracker(n=50, params0=p0),
                               sharpness_callback(config, data, config.lr))
    runs = cnn_sweep(config, data, callback=callback, checkpoint=checkpoint_path(checkpoint_dir, "runs"),
                     progress=progress)
    return Results(runs=runs, match=filter_match(runs))


def _reach(curve: np.ndarray, target: float, steps: np.ndarray) -> tuple[float, int]:
    """Where the increasing-ish ``curve`` (E,) first reaches ``target``: (t / T by linear
    interpolation between evaluation points, NaN if never; the index of the evaluation point nearest
    it, the last one if never)."""
    for k in range(1, len(steps)):
        if curve[k] >= target:
            a, b = curve[k - 1], curve[k]
            w = 1.0 if b == a else (target - a) / (b - a)
            t = steps[k - 1] + w * (steps[k] - steps[k - 1])
            return float(t / steps[-1]), (k - 1 if w < 0.5 else k)
    return math.nan, len(steps) - 1


def filter_match(history: Mapping) -> FilterMatch:
    """How far the large-K filters moved, measured against K = 1's trajectory, seed by seed (Fig. 7).

    With ΔW_t = W_t − W_0 (all first-layer filters) and ‖·‖ the Frobenius norm, for each seed s
    (its K = 1 run and its largest-K run, :func:`iterlin.repro.stats.runs_of`):

    * ``norm`` (R, E): ‖ΔW_t‖ of each run at each evaluation point;
    * ``ratio`` (S,): ‖ΔW_T^{large}‖ / ‖ΔW_T^{K=1}‖ at the last step (< 1: the large-K filters
      moved less; NaN when K = 1's did not move);
    * ``fraction`` (S,): the fraction t/T of training at which K = 1's ‖ΔW_t‖ first reaches the
      large-K run's final ‖ΔW_T‖ (linear interpolation between evaluation points; NaN if never);
    * ``cosine`` (S,): cos(ΔW_T^{large}, ΔW_t^{K=1}) at the evaluation point nearest that
      fraction (the last if never): do the filters there also point the same way ("look like"
      them), not only have the same size? ``match_step`` (S,): that evaluation point's step.

    Returns these as a :class:`FilterMatch`, ``K_large`` the period compared with K = 1.
    """
    d = np.asarray(history["filters_delta"], np.float64)  # (R, E, h, w, c, n)
    steps = np.asarray(history["step"], np.float64)
    K = np.asarray(history["K"], np.float64)
    ones, large = runs_of(history, 1), runs_of(history, K.max())
    flat = d.reshape(d.shape[0], d.shape[1], -1)  # (R, E, D)
    norm = np.sqrt(np.sum(flat**2, axis=-1))  # (R, E)
    ratio, frac, cosine, match_step = [], [], [], []
    for i1, j in zip(ones, large):
        target = norm[j, -1]
        ratio.append(target / norm[i1, -1] if norm[i1, -1] > 0 else math.nan)
        f, e = _reach(norm[i1], target, steps)
        frac.append(f)
        u, v = flat[j, -1], flat[i1, e]
        den = np.linalg.norm(u) * np.linalg.norm(v)
        cosine.append(float(u @ v / den) if den > 0 else math.nan)
        match_step.append(steps[e])
    return FilterMatch(norm=norm, ratio=np.asarray(ratio), fraction=np.asarray(frac), cosine=np.asarray(cosine),
                       match_step=np.asarray(match_step), K_large=np.asarray(float(K.max())))


def _interval_text(values, fmt) -> tuple[str, str]:
    """(the mean over seeds, "95 % t interval [lo, hi], S seeds" or "1 seed"), formatted by ``fmt``."""
    m, se, lo, hi = seed_interval(values)
    if not math.isfinite(se):
        return fmt(m), "1 seed"
    return fmt(m), f"95 % t interval [{fmt(lo)}, {fmt(hi)}], {np.size(values)} seeds"


@protocol.rule("fig7.slower", needs=("margin",), metrics=("filter_change",))
def filters_slower(row, results: Results) -> tuple[str, str, str]:
    """Large-K filters evolve slower: the ratio of the final filter changes (large K over K = 1),
    its 95 % t interval over seeds below the row's margin ("much" slower)."""
    h, m = results.runs, results.match
    Kj = float(np.asarray(h["K"], np.float64).max())
    ratio = np.atleast_1d(np.asarray(m.ratio, np.float64))
    unstable = unstable_among(h, runs_of(h, Kj))
    if unstable:
        holds = UNSTABLE  # a diverged or unstable linear model's filters say nothing about feature learning
    elif not np.all(np.isfinite(ratio)):
        holds = NA  # K = 1's filters did not move (or a ratio is not a number): nothing to compare
    else:
        holds = beyond(ratio, row.margin, above=False)
    return (
        "‖ΔW_T‖ K={} / K=1 = {} ({})".format(fmt_K(Kj), *_interval_text(ratio, num))
        + ("; unstable: " + "; ".join(unstable) if unstable else ""), holds,
        f"the ratio of the final filter changes (all 50 filters): yes when its 95 % t interval over seeds lies "
        f"below {num(row.margin, 1)} (\"much\" slower: at least 10 % less), no when wholly at or above it, else "
        "undecided (also with one seed: no spread to estimate); n/a when K = 1's filters did not move; "
        f"'{UNSTABLE}' when a large-K run's linear model was unstable (iterlin.repro.failures.unstable_runs)",
    )


@protocol.rule("fig7.early", needs=("judged_at",), metrics=("filter_change",))
def filters_early(row, results: Results) -> tuple[str, str, str]:
    """The final large-K filters look like K = 1's early in training: the fraction of training at
    which K = 1's filter change reaches the large K's final one, its 95 % t interval over seeds
    inside [5 %, 20 %] (the paper's "about 10 %"), judged only at scale ``row.judged_at``."""
    m = results.match
    frac = np.atleast_1d(np.asarray(m.fraction, np.float64))
    cos = np.atleast_1d(np.asarray(m.cosine, np.float64))
    if not np.any(np.isfinite(frac)):
        where, reached = "never (within this run)", "no"
    else:
        mean, spread = _interval_text(frac, pct)
        where = f"at {mean} of training ({spread}; cos {num(np.nanmean(cos))})"
        if not np.all(np.isfinite(frac)):
            reached = UNDECIDED  # some seeds reach it, some do not
        else:
            _, se, lo, hi = seed_interval(frac)
            reached = (UNDECIDED if not math.isfinite(se) else "yes" if 0.05 <= lo and hi <= 0.2
                       else "no" if hi < 0.05 or lo > 0.2 else UNDECIDED)
    return (f"K=1 reaches the final large-K ‖ΔW‖ {where}",
            reached if results.config.scale == row.judged_at else NA,
            "the fraction's 95 % t interval over seeds inside [5 %, 20 %]: yes; wholly outside: no; else (or one "
            "seed, or a seed that never reaches it) undecided; judged only at scale "
            f"'{row.judged_at}' (it depends on the training length)")


def claims(results: Results) -> list[Claim]:
    """The rows of fig7 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): large-K filters
    evolve slower (:func:`filters_slower`); its final filters ≈ K = 1's at ~10 % of training
    (:func:`filters_early`, judged at scale 'paper' only); stability; divergence."""
    rows = only_k1_rows("fig7", results.runs)
    return rows if rows is not None else protocol.claims("fig7", results)


EXPERIMENT = Experiment("fig7", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws and prints: pure functions of the results (nothing here is part of ``compute``).


class MatchMarks(NamedTuple):
    """The marks of the filter-norm panel (:func:`match_marks`)."""

    target: float  #: the large-K runs' mean final ‖ΔW_T‖
    step: float  #: the step at which K = 1's mean ‖ΔW_t‖ first reaches it (NaN if never)
    fraction: float  #: that step as a fraction of training


def match_marks(results: Results) -> MatchMarks:
    """The marks of the filter-norm panel, on the curves it draws (the means over seeds of
    ``results.match.norm``, :func:`filter_match`).

    ``target``: the large-K runs' mean final ‖ΔW_T‖ (the dotted line); ``step``: the step at which
    K = 1's mean ‖ΔW_t‖ first reaches it, ``fraction`` · T (the dot; NaN if it never does);
    ``fraction``: that fraction of training.
    """
    h = results.runs
    norm = np.asarray(results.match.norm, np.float64)
    steps = np.asarray(h["step"], np.float64)
    ones, large = runs_of(h, 1), runs_of(h, np.asarray(h["K"], np.float64).max())
    target = float(norm[large, -1].mean())
    frac, _ = _reach(norm[ones].mean(axis=0), target, steps)
    return MatchMarks(target=target, step=frac * float(steps[-1]) if math.isfinite(frac) else math.nan,
                      fraction=frac)


def match_report(results: Results) -> str:
    """One line: the final ratio of the filter changes and where K = 1 reaches the large-K final
    size, each the mean over seeds (± one standard error with several seeds)."""
    m = results.match

    def pm(values, factor=1.0, digits=2):
        mean, se, _, _ = seed_interval(values)
        return f"{factor * mean:.{digits}f}" + (f" ± {factor * se:.{digits}f}" if math.isfinite(se) else "")

    ratio = np.atleast_1d(np.asarray(m.ratio, np.float64))
    frac = np.atleast_1d(np.asarray(m.fraction, np.float64))
    n = ratio.size
    seeds = f"{n} seed{'s' if n != 1 else ''}" + (" (mean ± s.e.)" if n > 1 else "")
    if np.all(np.isfinite(frac)):
        reached = (f"at {pm(frac, 100, 0)} % of training (cosine there: "
                   f"{pm(np.asarray(m.cosine, np.float64))})")
    elif np.any(np.isfinite(frac)):
        reached = f"in {int(np.isfinite(frac).sum())} of {n} seeds"
    else:
        reached = "never in this run"
    return f"{seeds}: final ratio (large K / K = 1): {pm(ratio)}; K = 1 reaches the large-K final size {reached}"


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def filter_grid(
    delta: Any,
    step: Any,
    K: Any,
    *,
    runs: Sequence[int] | None = None,
    filters: int | Sequence[int] = 3,
    vrange: float | str = 0.5,
    title: str | None = None,
    cell_size: float = 0.8,
    fontsize: float = 7,
) -> tuple[Figure, np.ndarray]:
    """Filter changes as images: a column per evaluation point, a row per (filter, run).

    Args:
      delta: ``(R, E, h, w, C, F)``: R runs × E evaluation points of F filters of ``h × w × C``
        (C = 3 RGB or 1 grey), e.g. Fig. 7's ``filters_delta`` ``W_t − W_0``.
      step: ``(E,)`` the evaluation steps (the bottom row's labels).
      K: ``(R,)`` the runs' periods (row labels, ``fmt_K``).
      runs: the runs to show, in order (default all): for each filter one row per run.
      filters: how many of the first filters (an int), or their indices.
      vrange: ``[−vrange, vrange] → [0, 1]`` (:func:`iterlin.analysis.probes.filters_to_image`; grey = no
        change); ``"max"``: the largest ``|change|`` among the drawn images (at least 1e-12).
      title: the figure's title; may use ``{vrange}`` (e.g. ``"range ±{vrange:.3g}"``).

    Returns:
      ``(fig, axes)`` with ``axes`` ``(len(filters) · len(runs), E)``.
    """
    d = real_array(delta, "delta")
    if d.ndim != 6 or d.shape[4] not in (1, 3):
        raise bad_argument("delta", f"of shape {d.shape}", "(R, E, h, w, C, F) with C = 3 (RGB) or 1")
    R, E, F = d.shape[0], d.shape[1], d.shape[5]
    st = as_1d(step, "step", E, "one step per evaluation point of delta")
    Ks = per_run(K, "K", R)
    run_idx = list(range(R)) if runs is None else [int(r) for r in runs]
    if not run_idx or any(not 0 <= r < R for r in run_idx):
        raise bad_argument("runs", f"= {runs!r}", f"non-empty run indices in [0, {R})")
    if isinstance(filters, (int, np.integer)) and not isinstance(filters, bool):
        if not 1 <= filters <= F:
            raise bad_argument("filters", f"= {filters!r}", f"a count in [1, {F}] or filter indices")
        f_idx = list(range(int(filters)))
    else:
        f_idx = [int(f) for f in filters]
        if not f_idx or any(not 0 <= f < F for f in f_idx):
            raise bad_argument("filters", f"= {filters!r}", f"a count in [1, {F}] or filter indices in [0, {F})")
    shown = d[run_idx][..., f_idx]
    if isinstance(vrange, str):
        if vrange != "max":
            raise bad_argument("vrange", f"= {vrange!r}", "a number > 0 or 'max'")
        vr = max(float(np.nanmax(np.abs(shown))) if shown.size else 0.0, 1e-12)
    else:
        vr = float(vrange)
        if not math.isfinite(vr) or vr <= 0:
            raise bad_argument("vrange", f"= {vrange!r}", "a number > 0 or 'max'")
    n_rows = len(f_idx) * len(run_idx)
    fig, axes = plt.subplots(n_rows, E, figsize=(cell_size * E + 1.5, 0.9 * n_rows), squeeze=False)
    for a, f in enumerate(f_idx):
        for b, i in enumerate(run_idx):
            row = a * len(run_idx) + b
            for e in range(E):
                ax = axes[row, e]
                img = filters_to_image(d[i, e, :, :, :, f], vrange=vr)
                if img.shape[-1] == 1:
                    ax.imshow(img[..., 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
                else:
                    ax.imshow(img, interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if row == n_rows - 1:
                    ax.set_xlabel(f"{st[e]:g}", fontsize=fontsize)
            axes[row, 0].set_ylabel(f"filter {f + 1}\nK = {fmt_K(Ks[i])}", fontsize=fontsize, rotation=0,
                                    ha="right", va="center")
    if title is not None:
        fig.suptitle(title.format(vrange=vr), fontsize=fontsize + 2)
    return fig, axes


def plot(results: Results):
    """The first three filters' change from initialisation of the first seed, a column per
    evaluation point: for each filter, the K = 1 row above the large-K row; first at the paper's
    scale, [−0.5, 0.5] → [0, 1], then with the range stretched to the run's largest change. Then
    the size of the change, ‖W_t − W_0‖ over all 50 filters: the mean over seeds ± one standard
    error; the dotted line is the large K's mean final size, the dot where K = 1's mean first
    reaches it; beside it (when the run recorded it) the linear model's bound 2/λ_max(θ_s) along
    every run, with η dashed and 3η dotted; and the per-seed summary (match_report)."""
    h = results.runs
    scale = results.config.scale
    first = k1_and_largest(h["K"])  # the first seed's K = 1 and large-K runs (runs are seed-major)
    for vrange, what in ((0.5, "the paper's range ±0.5"), ("max", "range ±{vrange:.3g} (this run's largest change)")):
        filter_grid(h["filters_delta"], h["step"], h["K"], runs=first, vrange=vrange,
                    title=f"first-layer filter change from initialisation (first seed), {what}; columns: step "
                          f"({scale} scale)")
        plt.show()
    m = match_marks(results)
    recorded = "lr_over_bound" in h
    fig, axes = panels(2 if recorded else 1, panel_size=(6.4, 4), squeeze=False)
    ax = axes[0, 0]
    plot_sweep(ax, {**h, "filter_change": results.match.norm}, "filter_change", scale=1)
    ax.axhline(m.target, ls=":", color="gray")
    if np.isfinite(m.step):
        ax.plot(m.step, m.target, "o", color="k", ms=8,
                label=f"K = 1 reaches it at {pct(m.fraction, 0)} of training")
    ax.set(xlabel="step", ylabel="‖W_t − W_0‖ (all first-layer filters)", title=f"size of the filter change ({scale} scale)")
    legend(ax)
    if recorded:
        bound_panel(axes[0, 1], h)
    plt.show()
    print(match_report(results))
