"""Fig. 5: early-stopped test accuracy against training-set size, for several K (Sec. 4.2).

The paper: every finite K scales with data like K = 1, while K = ∞ (the fixed NTK: no feature
learning) scales worse; K = ∞ was trained at a higher learning rate (1e-3 against 1e-5), and a
K = 1 control at that rate shows the rate is not the cause.

Config keys: ``n_train`` (list of training-set sizes; None: all installed; a single size n
expands to [n/4, n/2, n]), ``K`` (list of periods trained at ``lr``), ``lr``, ``lr_inf`` (the rate
of the K = ∞ run and of its K = 1 control), ``steps`` (per run, enough to fit the training set),
``batch_size`` (None: full batch), ``n_test``, ``n_val`` (training images held out to choose
each run's early-stopping point, :func:`load`; None: the best test accuracy, the paper's "optimal"
early stopping), ``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``, and ``n_sharpness``,
``sharpness_iters``, ``sharpness_every`` (the linear model's λ_max along every run, on the first
``n_sharpness`` images of each training set, the whole set where it is smaller:
:func:`~iterlin.experiments._common.sharpness_callback`).
``n_train=[None]``
("all") derives the sizes from the installed copy: six halvings of every installed image but the
held-out ones, n/32 … n (printed when loaded).

Results: :class:`Results`. The claims use :func:`stopped`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping, NamedTuple

import matplotlib.pyplot as plt
import numpy as np

from ..repro.claims import (
    EXCEEDS_RULE,
    NA,
    UNDECIDED,
    Claim,
    divergence_claim,
    exceeds,
    fmt_K,
    on_par,
    on_par_rule,
    pooled_runs,
    sharpness_claim,
    verdict,
)
from ..repro.config import Images, ImagesOrNone, Period, Positive, Rate, Steps, TestImages, halvings
from ..data import Dataset, load_cifar10
from ..repro.plotting import bound_panel, legend, panels, plot_sweep, set_log_ticks
from ..analysis.probes import heldout_tracker
from ..repro.stats import Difference, difference, num, pct, runs_of
from . import protocol
from ._common import (
    Experiment,
    Seeds,
    Sharpness,
    Sweep,
    check_batch,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    early_stopped,
    merge_callbacks,
    sharpness_callback,
)

__all__ = ["Config", "Results", "SCALES", "EXPERIMENT", "SizedData", "load", "compute", "claims", "runs",
           "stopped_at_best", "stopped", "by_size", "gain_difference", "plot"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds, Sharpness):
    """fig5's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "fig5"
    EXPAND: ClassVar[Mapping] = {"n_train": halvings}

    K: tuple[Period, ...]
    lr: Rate
    lr_inf: Positive
    steps: Steps
    batch_size: Images | None
    n_train: tuple[Images | None, ...]
    n_test: TestImages | None
    n_val: ImagesOrNone | None


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig5.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 4], lr=0.1, lr_inf=0.1, steps=10, batch_size=None, n_train=[16, 32, 64],
        n_test=100, n_val=32, seed=0, n_seeds=1, n_evals=2, n_eval_train=None,
        n_sharpness=8, sharpness_iters=4, sharpness_every=10,
    ),
    "cpu": dict(
        K=[1, 450], lr=0.0008, lr_inf=0.01, steps=4500, batch_size=32, n_train=[32, 128],
        n_test=None, n_val=500, seed=0, n_seeds=3, n_evals=25, n_eval_train=None,
        n_sharpness=128, sharpness_iters=20, sharpness_every=360,
    ),
    "gpu": dict(
        K=[1, 160], lr=0.002, lr_inf=0.01, steps=4000, batch_size=100,
        n_train=[128, 256, 512], n_test=None, n_val=500, seed=4, n_seeds=6, n_evals=40, n_eval_train=None,
        n_sharpness=128, sharpness_iters=20, sharpness_every=400,
    ),
    "paper": dict(
        K=[1, 1000, 100_000], lr=1e-5, lr_inf=1e-3, steps=2_000_000, batch_size=256,
        n_train=[1000, 2000, 5000, 10_000, 20_000, 50_000], n_test=10_000, n_val=None, seed=0, n_seeds=3,
        n_evals=200, n_eval_train=10_000, n_sharpness=1000, sharpness_iters=30, sharpness_every=100_000,
    ),
}


class Results(NamedTuple):
    """fig5's results (:func:`compute`). "The model the run trains" is the network f(θ) for finite
    K, the linear model f_lin_0(θ) for K = ∞ (the fixed-NTK model, as Fig. 1 scores it)."""

    n_train: np.ndarray  #: (N,) int, the training-set sizes, ascending
    K: np.ndarray  #: (R,) float64, the period of each run (every seed × :func:`runs`, seed-major)
    lr: np.ndarray  #: (R,) float64, the rate of each run
    seed_index: np.ndarray  #: (R,) int, the seed of each run (0, 1, …)
    #: (N, R) float64, the maximum test accuracy over evaluation points ("optimal early stopping")
    #: of the model the run trains
    best_test_acc: np.ndarray
    final_train_acc: np.ndarray  #: (N, R) float64, the final train accuracy of that same model
    diverged: np.ndarray  #: (N, R) bool, whether the run diverged
    n_test: np.ndarray  #: () int, the test images
    #: the sweep history of each size, keyed by the size as a string; it records ``sharpness`` and
    #: ``lr_over_bound`` (R, E) and, with ``n_val``, ``net_val_acc``/``lin_val_acc``
    histories: Mapping[str, Sweep]
    #: (N, R) float64, with ``n_val`` only: the test accuracy of the model the run trains at the
    #: evaluation point where its accuracy on the held-out images was highest (:func:`stopped_at_best`)
    stopped_test_acc: np.ndarray | None = None
    n_val: np.ndarray | None = None  #: () int, with ``n_val`` only: the held-out training images
    #: (N, R, n_test) bool: whether the model the run trains got each test image right at the
    #: evaluation point the run was stopped at (:func:`stopped`), so that the claims compare runs on
    #: the same images (None in runs made before it was recorded: the claims then treat the four
    #: accuracies of a difference of gains as independent)
    stopped_test_correct: np.ndarray | None = None
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


#: Sizes derived from the installed copy for ``n_train=[None]``: n / 2^i for i < DERIVED_SIZES.
DERIVED_SIZES = 6


class SizedData(NamedTuple):
    """What :func:`load` gives :func:`compute`: one :class:`~iterlin.data.Dataset` per
    training-set size (keyed by the size loaded, as a string), and the held-out training images that
    choose each run's early-stopping point (a Dataset whose ``x_train``/``y_train`` are those images;
    None without ``n_val``)."""

    by_size: Mapping[str, Dataset]
    heldout: Dataset | None = None


def load(config: Config) -> SizedData:
    """The training sets, each the first n installed images, and the held-out images.

    ``[None]`` ("all"): six halvings of every installed training image but the ``n_val`` held out,
    n/32 … n (printed). ``n_val``: the images right after the largest training set, ``[n_max,
    n_max + n_val)`` (the same images on every copy that holds them, the full archive or a subset);
    a ValueError names ``n_val`` when fewer are installed."""
    sizes = list(config.n_train)
    n_val = config.n_val or 0
    if sizes == [None]:
        n = load_cifar10(None, 1).x_train.shape[0] - n_val
        sizes = sorted({max(1, n // 2**i) for i in range(DERIVED_SIZES)})
        print(f"fig5: training-set sizes derived from the {n + n_val} installed training images"
              + (f" less {n_val} held out" if n_val else "") + f": {sizes}")
    out = {}
    for n in sizes:
        d = load_cifar10(n, config.n_test)
        out[str(d.x_train.shape[0])] = d
    smallest = min(out.values(), key=lambda d: d.x_train.shape[0])
    check_batch(config, smallest.x_train.shape[0])
    check_sharpness(config, max(out.values(), key=lambda d: d.x_train.shape[0]))  # a smaller set: all of it
    if not n_val:
        return SizedData(out)
    top = max(int(n) for n in out)
    pool = load_cifar10(top + n_val, 1)
    if pool.x_train.shape[0] < top + n_val:
        raise ValueError(f"n_val={n_val} is not allowed: {pool.x_train.shape[0]} training images are installed, "
                         f"and the largest training set takes {top}; n_val must be <= {pool.x_train.shape[0] - top}, "
                         "or None (early stopping on the test set)")
    test = out[str(top)]
    return SizedData(out, Dataset(pool.x_train[top:], pool.y_train[top:], test.x_test, test.y_test))


def runs(config: Config) -> list[tuple[float, float]]:
    """The (K, lr) pairs of Fig. 5: every K at ``lr``, then K = ∞ and a K = 1 control at ``lr_inf``.

    Duplicates (e.g. when ``lr_inf == lr``) are run once.
    """
    pairs = [(float(k), config.lr) for k in config.K] + [(math.inf, config.lr_inf), (1.0, config.lr_inf)]
    out = []
    for p in pairs:
        if p not in out:
            out.append(p)
    return out


def compute(config: Config, data: SizedData, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every seed × (K, lr) of :func:`runs` in one program per training-set size, each run scored on
    the held-out images at every evaluation point when ``data.heldout`` is given."""
    pairs = runs(config)
    Ks, lrs = [k for k, _ in pairs], [lr for _, lr in pairs]
    sizes = sorted(data.by_size, key=int)
    held = data.heldout

    def callback(n):  # the held-out accuracy (with n_val), each test image's correctness, the sharpness
        test = data.by_size[n]
        parts = [] if held is None else [lambda f, p0: heldout_tracker(f, held.x_train, held.y_train)]
        parts.append(lambda f, p0: heldout_tracker(f, test.x_test, test.y_test, name="test_set", per_image=True))
        parts.append(sharpness_callback(config, data.by_size[n], lrs))  # a set under n_sharpness: all of it
        return merge_callbacks(*parts)

    histories = {
        n: cnn_sweep(config, data.by_size[n], K=Ks, lr=lrs, callback=callback(n),
                     checkpoint=checkpoint_path(checkpoint_dir, f"n{n}"), progress=progress)
        for n in sizes
    }
    first = histories[sizes[0]]
    fixed = np.isinf(first.K)  # K = ∞: the linear model is the model trained

    def trained(h, metric):  # (R, E): the metric of the model each run trains
        return np.where(fixed[:, None], np.asarray(h[f"lin_{metric}"], np.float64),
                        np.asarray(h[f"net_{metric}"], np.float64))

    out = Results(
        n_train=np.asarray([int(n) for n in sizes]),
        K=first.K,
        lr=first.lr,
        seed_index=first.seed_index,
        best_test_acc=np.stack([np.where(fixed, early_stopped(histories[n], "lin_test_acc"),
                                         early_stopped(histories[n])) for n in sizes]),
        final_train_acc=np.stack([trained(histories[n], "train_acc")[:, -1] for n in sizes]),
        diverged=np.stack([histories[n].history.diverged for n in sizes]),
        n_test=np.asarray(data.by_size[sizes[0]].x_test.shape[0]),
        histories=histories,
    )
    if held is not None:
        out = out._replace(
            stopped_test_acc=np.stack([stopped_at_best(trained(histories[n], "val_acc"),
                                                       trained(histories[n], "test_acc")) for n in sizes]),
            n_val=np.asarray(held.x_train.shape[0]))

    def correct_at_stop(h):  # (R, n_test) bool, at the point stopped() reads the run's accuracy at
        hits = np.where(fixed[:, None, None], np.asarray(h["lin_test_set_per_image"]),
                        np.asarray(h["net_test_set_per_image"]))  # (R, E, n_test)
        at = best_point(trained(h, "val_acc" if held is not None else "test_acc"))
        return np.take_along_axis(hits, at[:, None, None], axis=1)[:, 0].astype(bool)

    if all("net_test_set_per_image" in histories[n] for n in sizes):  # recorded by compute's tracker
        out = out._replace(stopped_test_correct=np.stack([correct_at_stop(histories[n]) for n in sizes]))
    return out


def best_point(score: np.ndarray) -> np.ndarray:
    """Each run's evaluation point of highest ``score`` (R, E), the earliest on a tie, points where
    it is not finite skipped (0 for a run with none). (R,) int."""
    score = np.asarray(score, np.float64)
    return np.argmax(np.where(np.isfinite(score), score, -np.inf), axis=-1)


def stopped_at_best(val: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Early stopping chosen on held-out images: ``test`` (R, E) at each run's evaluation point of
    highest ``val`` (R, E) accuracy (:func:`best_point`); a run with no finite ``val`` gives NaN. (R,)."""
    val, test = np.asarray(val, np.float64), np.asarray(test, np.float64)
    picked = np.take_along_axis(test, best_point(val)[:, None], axis=-1)[:, 0]
    return np.where(np.isfinite(val).any(axis=-1), picked, np.nan)


def stopped(results: Results) -> tuple[np.ndarray, str]:
    """The early-stopped test accuracy (N, R) the claims and the plot use, and how it was stopped:
    on the held-out training images when the run had them (``stopped_test_acc``), else the best
    test accuracy over evaluation points (``best_test_acc``, the paper's "optimal" early stopping)."""
    if results.stopped_test_acc is not None:
        return (np.asarray(results.stopped_test_acc, np.float64),
                f"early stopping on {int(results.n_val)} held-out training images")
    return np.asarray(results.best_test_acc, np.float64), "optimal early stopping (the best test accuracy)"


def _gain(best: np.ndarray) -> np.ndarray:
    """Early-stopped accuracy gain from the smallest to the largest training set, per run."""
    return best[-1] - best[0]


def gain_difference(results: Results, ia, ib) -> Difference:
    """The shared noise rule (:func:`iterlin.repro.stats.difference`) for gain_B − gain_A, runs ``ia``
    and ``ib`` paired by seed: the seed spread of the per-seed differences, and the test-set noise.
    With ``stopped_test_correct`` the runs are paired on the test images too: each image's gain,
    right at the largest size minus right at the smallest (−1, 0 or 1), is compared as a paired
    per-image score. Without it (runs made before it was recorded) the four early-stopped
    accuracies involved (:func:`stopped`) count as independent, Σ p(1 − p)/n (two sizes × two
    settings)."""
    best, _ = stopped(results)
    n = int(results.n_test)
    ga, gb = _gain(best)[ia], _gain(best)[ib]
    if results.stopped_test_correct is not None:
        per_image = _gain(np.asarray(results.stopped_test_correct, np.int8))  # (R, n_test)
        return difference(ga, gb, n_test=n, correct_a=per_image[ia], correct_b=per_image[ib])
    accs = [best[0, ia].mean(), best[-1, ia].mean(), best[0, ib].mean(), best[-1, ib].mean()]
    test_var = sum(min(max(p, 0.05), 0.95) * (1 - min(max(p, 0.05), 0.95)) / n for p in accs)
    return difference(ga, gb, n_test=n, test_var=test_var)


class _Scaling(NamedTuple):
    """What fig5's rows read from the results: each run's K and rate (as a history), the early-stopped
    accuracies (N, R) and how they were stopped, the sizes, the gains, the final train accuracies."""

    h: dict
    best: np.ndarray
    how: str
    sizes: np.ndarray
    gain: np.ndarray
    span: str
    train: np.ndarray

    def fitted(self, threshold: float, *idx) -> bool:
        """Whether the runs ``idx`` end at ≥ ``threshold`` train accuracy at every size."""
        return bool(self.train[:, np.concatenate(idx)].min() >= threshold)


def _scaling(results: Results) -> _Scaling:
    best, how = stopped(results)  # (N, R)
    sizes = np.asarray(results.n_train)
    return _Scaling({"K": np.asarray(results.K), "lr": np.asarray(results.lr)}, best, how, sizes, _gain(best),
                    f"n={int(sizes[0])}→{int(sizes[-1])}", np.asarray(results.final_train_acc, np.float64))


#: the scaling rows' words when a run they compare did not fit its training set
_NOT_CONVERGED = "; not judged: a run it compares did not fit its training set (row 'trained to convergence')"


@protocol.rule("fig5.converged", needs=("value",), metrics=("final_train_acc",))
def converged(row, results: Results) -> tuple[str, str, str]:
    """Every run ends at ≥ ``row.value`` train accuracy (the paper trains to convergence)."""
    train = np.asarray(results.final_train_acc, np.float64)
    return (f"final train acc. ≥ {pct(train.min())}", verdict(bool(train.min() >= row.value)),
            f"every run ≥ {pct(row.value, 0)} train accuracy at its last step (of the model it trains)")


@protocol.rule("fig5.scales_like", needs=("margin", "value"), metrics=("stopped_test_acc",))
def scales_like(row, results: Results) -> tuple[str, str, str]:
    """Every finite K's gain from the smallest to the largest size on par with K = 1's within the
    row's margin; judged only when every run compared fitted its set (``row.value``)."""
    s, lr0 = _scaling(results), results.config.lr
    if len(s.sizes) < 2:
        return "one training-set size only", verdict(None), "needs ≥ 2 sizes"
    i1 = runs_of(s.h, 1, lr0)
    finite = [k for k in np.unique(s.h["K"][np.isfinite(s.h["K"]) & (s.h["K"] > 1)]) if runs_of(s.h, k, lr0).size]
    diffs = {k: gain_difference(results, i1, runs_of(s.h, k, lr0)) for k in finite}
    fits = s.fitted(row.value, i1, *(runs_of(s.h, k, lr0) for k in finite))
    verdicts = [on_par(d, row.margin) for d in diffs.values()]
    holds = ("no" if "no" in verdicts else UNDECIDED if UNDECIDED in verdicts else "yes") if finite else NA
    measured = f"gain {s.span}: K=1 {num(100 * s.gain[i1].mean(), 1)} pts; " + "; ".join(
        f"K={fmt_K(k)} {num(100 * s.gain[runs_of(s.h, k, lr0)].mean(), 1)} pts ({d.describe()})"
        for k, d in diffs.items())
    return (measured, holds if fits else NA,
            f"gain = early-stopped test acc. ({s.how}) at the largest n minus the smallest; "
            + on_par_rule(row.margin) + ", for every finite K" + ("" if fits else _NOT_CONVERGED))


@protocol.rule("fig5.inf_worse", needs=("value",), metrics=("stopped_test_acc",))
def infinity_worse(row, results: Results) -> tuple[str, str, str]:
    """K = ∞ gains less than K = 1 at the same rate (lr_inf), beyond noise; judged only when both
    fitted their sets (``row.value``)."""
    s, lr_inf = _scaling(results), results.config.lr_inf
    if len(s.sizes) < 2:
        return "one training-set size only", verdict(None), "needs ≥ 2 sizes"
    iinf, ic = runs_of(s.h, math.inf, lr_inf), runs_of(s.h, 1, lr_inf)
    d = gain_difference(results, iinf, ic)  # gain_1 − gain_∞
    fits = s.fitted(row.value, iinf, ic)
    return (f"gain {s.span}: K=∞ (linear model) {num(100 * s.gain[iinf].mean(), 1)} pts; K=1 (same lr) "
            f"{num(100 * s.gain[ic].mean(), 1)} pts; gain_1 − gain_∞: {d.describe()}",
            exceeds(d) if fits else NA,
            f"gain_1 − gain_∞ at the same learning rate (lr_inf), {s.how}: " + EXCEEDS_RULE
            + ("" if fits else _NOT_CONVERGED))


@protocol.rule("fig5.lr_control", needs=("margin",), metrics=("stopped_test_acc",))
def lr_control(row, results: Results) -> tuple[str, str, str]:
    """K = 1 at lr and at lr_inf on par at the largest size (the higher rate of K = ∞ is not the cause)."""
    s, lr0, lr_inf = _scaling(results), results.config.lr, results.config.lr_inf
    if lr_inf == lr0:
        return f"lr_inf = lr = {lr0:g}: no separate control", verdict(None), "needs lr_inf ≠ lr"
    i1, ic = runs_of(s.h, 1, lr0), runs_of(s.h, 1, lr_inf)
    hits = results.stopped_test_correct  # None: unpaired on the test images
    d = difference(s.best[-1, i1], s.best[-1, ic], n_test=int(results.n_test),
                   correct_a=None if hits is None else hits[-1, i1],
                   correct_b=None if hits is None else hits[-1, ic])
    return (f"K=1 at n={int(s.sizes[-1])}: {pct(s.best[-1, i1].mean())} (lr {lr0:g}) vs "
            f"{pct(s.best[-1, ic].mean())} (lr {lr_inf:g}); {d.describe()}",
            on_par(d, row.margin), on_par_rule(row.margin) + f" ({s.how}, at the largest n)")


@protocol.rule("fig5.stable", needs=("margin",))
def stable(row, results: Results) -> Claim:
    """The linear models of every size's K > 1 runs judged together (:func:`~iterlin.repro.claims.sharpness_claim`
    of :func:`~iterlin.repro.claims.pooled_runs`)."""
    return sharpness_claim(pooled_runs([results.histories[str(int(n))] for n in np.asarray(results.n_train)]),
                           row.margin)


@protocol.rule("fig5.finite")
def finite(row, results: Results) -> Claim:
    """No run of any size diverged (each size a panel ``n=<size>``)."""
    return divergence_claim({f"n={n}": results.histories[str(int(n))] for n in np.asarray(results.n_train)})


def claims(results: Results) -> list[Claim]:
    """The rows of fig5 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): finite K scale
    like K = 1 (:func:`scales_like`); K = ∞ scales worse (:func:`infinity_worse`); the higher lr is
    not the cause (:func:`lr_control`); the runs fit their sets (:func:`converged`); stability;
    divergence. Every comparison goes through the shared noise rule, over seeds; a scaling row is
    judged only when every run it compares fitted its training set at every size (the paper trains
    to convergence): else n/a."""
    return protocol.claims("fig5", results)


EXPERIMENT = Experiment("fig5", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure draws: pure functions of the results (nothing here is part of ``compute``).


def by_size(results: Results, values: np.ndarray, metric: str) -> dict:
    """``values`` (N sizes, R runs: e.g. ``results.final_train_acc``) as a sweep-like history over
    sizes, for :func:`iterlin.repro.plotting.plot_sweep`: ``step`` = the sizes (N,), ``metric`` (R, N),
    ``K``, ``lr``, ``seed_index`` of ``results``' runs, and ``diverged``/``diverged_step`` (R,):
    whether, and at which size first, each run diverged."""
    div = np.asarray(results.diverged, bool).T  # (R, N)
    sizes = np.asarray(results.n_train)
    first = np.where(div.any(1), sizes[np.argmax(div, axis=1)], -1)
    return {"step": sizes, metric: np.asarray(values, np.float64).T, "K": np.asarray(results.K),
            "lr": np.asarray(results.lr), "seed_index": np.asarray(results.seed_index),
            "diverged": div.any(1), "diverged_step": first}


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Left: early-stopped test accuracy (:func:`stopped`: on held-out training images where the
    run had them) against the number of training images (log scale), one line per (K, lr), the
    mean over seeds ± one standard error (K = ∞: its linear model). Right:
    the final training accuracy of the same runs, to see how close to convergence they are. A
    cross marks a run that diverged (at the first size where it did). Third, when the runs recorded
    the sharpness: the linear model's bound 2/λ_max(θ_s) along the runs of the largest training set
    (:func:`iterlin.repro.plotting.bound_panel`)."""
    n = results.n_train
    acc, how = stopped(results)
    largest = results.histories[str(int(n[-1]))]
    bound = "lr_over_bound" in largest
    fig, axes = panels(3 if bound else 2,
                       suptitle=f"Data scaling of the CNN on CIFAR-10 ({results.config.scale} scale)")
    left, right = axes[0], axes[1]
    if bound:
        bound_panel(axes[2], largest, title=f"n={int(n[-1])}: ", label="K = {K}, lr {lr}")
    for ax, values, metric, what in ((left, acc, "stopped", "early-stopped test accuracy (%)"),
                                     (right, results.final_train_acc, "final_train_acc", "final train accuracy (%)")):
        plot_sweep(ax, by_size(results, values, metric), metric, label="K = {K}, lr {lr:g}",
                   diverged_label=None if ax is left else "K = {K} diverged")
        set_log_ticks(ax, n)
        ax.set(xlabel="training images", ylabel=what)
        legend(ax)
    left.set_title(how, fontsize="medium")
    plt.show()
