"""Fig. 6: linear probes on the CNN's layer-1 and layer-2 features over training (Sec. 4.1).

A ridge classifier (:func:`iterlin.analysis.probes.probe_tracker`) is fitted on the activations
(:func:`iterlin.models.cnn_features`) of the first ``n_probe`` training images at each evaluation
point and scored on the test images, for K = 1 and a large K, every seed. The paper: the probes'
accuracy improves over training, the large-K features improving slower and levelling off lower.

Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
``augment``, ``n_train``, ``n_test``, ``n_probe`` (None: every training image loaded, at most
:data:`PROBE_CAP`; :func:`probe_size`), ``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``,
``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (the sharpness record,
:func:`~iterlin.experiments._common.sharpness_callback`).

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
from typing import ClassVar, Mapping, NamedTuple

import matplotlib.pyplot as plt
import numpy as np

from ..repro.claims import EXCEEDS_RULE, NA, UNSTABLE, Claim, exceeds, fmt_K, only_k1_rows
from ..repro.config import Flag, Images, Period, Rate, Steps, TestImages
from ..data import Dataset
from ..repro.failures import unstable_among
from ..models import cnn_features
from ..repro.plotting import legend, panels, plot_sweep
from ..analysis.probes import probe_tracker
from ..repro.stats import difference, pct, runs_of
from . import protocol
from ._common import (
    Experiment,
    STABLE,
    Seeds,
    Sharpness,
    Sweep,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    load_data,
    merge_callbacks,
    sharpness_callback,
)

__all__ = [
    "Results", "SCALES", "EXPERIMENT", "PROBE_LAYERS", "PROBE_CAP", "load", "compute", "claims", "probe_size",
    "OverPoints", "probe_summary", "probe_correct", "probe_table", "plot",
]

#: ``n_probe=None`` fits the probes on every training image loaded, but at most this many: the
#: layer-1 probe (9800 features) is solved in the dual, two eigendecompositions of an n × n Gram
#: matrix (cubic in n) at every evaluation point of every run: on this project's 2-core CPU about
#: 13 s at n = 2000 but 135 s at n = 4660.
PROBE_CAP = 2000


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds, Sharpness):
    """fig6's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "fig6"

    K: tuple[Period, ...]
    lr: Rate
    steps: Steps
    batch_size: Images | None
    augment: Flag
    n_train: Images | None
    n_test: TestImages | None
    n_probe: Images | None


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig6.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 8], lr=0.05, steps=24, batch_size=32, augment=False, n_train=256, n_test=200, n_probe=None,
        seed=0, n_seeds=1, n_evals=6, n_eval_train=None, n_sharpness=32, sharpness_iters=10, sharpness_every=8,
    ),
    "cpu": dict(STABLE, n_probe=None, n_seeds=3, n_evals=10),
    "gpu": dict(STABLE, n_probe=None, n_seeds=8, n_evals=10),
    "paper": dict(  # K = 5e6 (the paper's); lr, T, augmentation as our Fig. 3 paper settings
        K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True, n_train=50_000,
        n_test=10_000, n_probe=10_000, seed=0, n_seeds=3, n_evals=30, n_eval_train=10_000, n_sharpness=1000,
        sharpness_iters=30, sharpness_every=5_000_000,
    ),
}


class Results(NamedTuple):
    """fig6's results (:func:`compute`)."""

    #: the sweep history (every seed × K, seed-major: R = S·len(K) runs) with, besides the usual
    #: keys, ``probe_{layer1,layer2}_{train,test}_acc`` and ``probe_{layer}_lam`` (the chosen ridge
    #: penalty), each (R, E), ``probe_{layer}_test_correct`` (R, E, n_test) bool (absent from runs
    #: made before it was recorded: :func:`probe_correct`), and the sharpness record ``sharpness``
    #: and ``lr_over_bound`` (R, E)
    runs: Sweep
    n_probe: np.ndarray  #: () int, the training images the probes were fitted on
    n_test: np.ndarray  #: () int, the test images they were scored on
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


#: The probed layers (keys of :func:`iterlin.models.cnn_features`).
PROBE_LAYERS = ("layer1", "layer2")


def probe_size(config: Config, n_train: int) -> int:
    """The number of training images the probes of ``config`` are fitted on (the first ones).

    ``config.n_probe`` None: every one of the ``n_train`` images loaded, at most
    :data:`PROBE_CAP`, i.e. ``min(n_train, PROBE_CAP)``; an explicit ``n_probe`` must be ≤
    ``n_train`` (a ValueError names both otherwise).
    """
    n_train, n_probe = int(n_train), config.n_probe
    if n_probe is None:
        return min(n_train, PROBE_CAP)
    if int(n_probe) > n_train:
        raise ValueError(
            f"n_probe={n_probe} is not allowed: n_probe must be <= n_train={n_train} (the training images "
            f"loaded), or None for all of them up to {PROBE_CAP}"
        )
    return int(n_probe)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, ``n_probe`` checked against it
    (:func:`probe_size`)."""
    data = check_sharpness(config, load_data(config))
    probe_size(config, data.x_train.shape[0])
    return data


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every seed × K in one program, the probes fitted and the sharpness recorded at each evaluation
    point (module docstring)."""
    n = probe_size(config, data.x_train.shape[0])
    tracker = probe_tracker(cnn_features, (data.x_train[:n], data.y_train[:n]), (data.x_test, data.y_test),
                            layers=PROBE_LAYERS, seed=config.seed)
    callback = merge_callbacks(lambda f, p0: tracker, sharpness_callback(config, data, config.lr))
    runs = cnn_sweep(config, data, callback=callback, checkpoint=checkpoint_path(checkpoint_dir, "runs"),
                     progress=progress)
    return Results(runs=runs, n_probe=np.asarray(n), n_test=np.asarray(data.x_test.shape[0]))


class OverPoints(NamedTuple):
    """Per run, a value at the start and at the end of training and its mean over the evaluation
    points after step 0: (R, ...) each."""

    initial: np.ndarray  #: at step 0
    final: np.ndarray  #: at the end
    #: averaged over the evaluation points after step 0 (a single point is its own mean): the area
    #: under the curve divided by the number of points, so that "improves slower" means a lower
    #: mean for the same final value
    mean: np.ndarray


def probe_summary(history: Mapping, layer: str) -> OverPoints:
    """Per run, the probe's test accuracy (R,) at the start and the end and its mean over training."""
    return _over_points(np.asarray(history[f"probe_{layer}_test_acc"], np.float64))


def _over_points(v: np.ndarray) -> OverPoints:
    """:class:`OverPoints` along axis 1 of per-run, per-point values v (R, E, ...)."""
    later = v[:, 1:] if v.shape[1] > 1 else v
    return OverPoints(v[:, 0], v[:, -1], later.mean(axis=1))


def probe_correct(history: Mapping, layer: str) -> OverPoints | None:
    """Per run and test image, the probe's correctness matching :func:`probe_summary`: ``initial``
    and ``final`` (R, M) bool, ``mean`` (R, M) the fraction of the evaluation points after step 0 at
    which the image was right (its mean over images is ``probe_summary``'s ``mean``); None when the
    history does not record ``probe_<layer>_test_correct`` (R, E, M) (runs made before it did)."""
    key = f"probe_{layer}_test_correct"
    if key not in history:
        return None
    return _over_points(np.asarray(history[key], np.float64))


def _diverged(h: Mapping, *idx) -> bool:
    return bool(np.asarray(h["diverged"], bool)[np.concatenate(idx)].any())


def _probe_rows(row, results: Results):
    """What a probe row compares: the layer (the row's panel), K = 1's and the large K's runs, the
    probes' summary and ``diff(what_a, runs_a, what_b, runs_b)`` (B − A, paired on the images when
    recorded), the note naming unstable large-K runs and the n/a / unstable verdict of a comparison."""
    h = results.runs
    layer = row.panels[0]
    Kj = np.asarray(h["K"], np.float64).max()
    i1, j = runs_of(h, 1), runs_of(h, Kj)
    n_test = int(results.n_test)
    s, c = probe_summary(h, layer), probe_correct(h, layer)

    def diff(what_a, ia, what_b, ib):
        pair = {} if c is None else {"correct_a": getattr(c, what_a)[ia], "correct_b": getattr(c, what_b)[ib]}
        return difference(getattr(s, what_a)[ia], getattr(s, what_b)[ib], n_test=n_test, **pair)

    unstable = unstable_among(h, j)
    note = "; unstable: " + "; ".join(unstable) if unstable else ""
    where = f"probes on {int(results.n_probe)} training images, scored on {n_test} test images"
    k1_diverged = _diverged(h, i1)
    return h, Kj, i1, j, s, diff, note, where, k1_diverged, bool(unstable)


_AGAINST_K1 = f"n/a when K = 1 diverged, '{UNSTABLE}' when a large-K run's linear model was unstable"


@protocol.rule("fig6.improves", metrics=("probe_acc",))
def probe_improves(row, results: Results) -> tuple[str, str, str]:
    """K = 1's probe improves over training: final − initial of K = 1, better beyond noise."""
    h, Kj, i1, j, s, diff, note, where, k1_diverged, unstable = _probe_rows(row, results)
    rise = diff("initial", i1, "final", i1)
    return (f"K=1 probe {pct(s.initial[i1].mean())} → {pct(s.final[i1].mean())} (mean over seeds; {where}); "
            f"{rise.describe()}", NA if k1_diverged else exceeds(rise),
            "Δ = final − initial of K = 1; " + EXCEEDS_RULE + "; n/a when the run diverged")


@protocol.rule("fig6.slower", metrics=("probe_acc",))
def probe_slower(row, results: Results) -> tuple[str, str, str]:
    """The large K's probe improves slower: K = 1 − large K of the probe accuracy averaged over training."""
    h, Kj, i1, j, s, diff, note, where, k1_diverged, unstable = _probe_rows(row, results)
    d = diff("mean", j, "mean", i1)
    return (f"probe acc. averaged over training (steps > 0): K=1 {pct(s.mean[i1].mean())} vs "
            f"K={fmt_K(Kj)} {pct(s.mean[j].mean())}; {d.describe()}{note}",
            NA if k1_diverged else UNSTABLE if unstable else exceeds(d),
            "Δ = K = 1 − large K, averaged over steps > 0; " + EXCEEDS_RULE + "; " + _AGAINST_K1)


@protocol.rule("fig6.lower", metrics=("probe_acc",))
def probe_lower(row, results: Results) -> tuple[str, str, str]:
    """The large K's probe levels off lower: K = 1 − large K of the final probe accuracy."""
    h, Kj, i1, j, s, diff, note, where, k1_diverged, unstable = _probe_rows(row, results)
    d = diff("final", j, "final", i1)
    return (f"final probe acc.: K=1 {pct(s.final[i1].mean())} vs K={fmt_K(Kj)} {pct(s.final[j].mean())}; "
            f"{d.describe()}{note}", NA if k1_diverged else UNSTABLE if unstable else exceeds(d),
            "Δ = K = 1 − large K, final; " + EXCEEDS_RULE + "; " + _AGAINST_K1)


def claims(results: Results) -> list[Claim]:
    """The rows of fig6 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`), per layer: K = 1's
    probe improves over training (:func:`probe_improves`); the large K's improves slower
    (:func:`probe_slower`) and levels off lower (:func:`probe_lower`); stability; divergence. Each is
    the shared noise rule (:func:`iterlin.repro.stats.difference` then
    :func:`~iterlin.repro.claims.exceeds`) over the seeds (paired by seed) and the test images,
    paired on the images where the history records each probe's per-image correctness
    (:func:`probe_correct`), else two independent binomials (runs made before it was recorded)."""
    rows = only_k1_rows("fig6", results.runs)
    return rows if rows is not None else protocol.claims("fig6", results)


EXPERIMENT = Experiment("fig6", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# What the figure prints: pure functions of the results (nothing here is part of ``compute``).


def _mean_se(v: np.ndarray) -> tuple[float, float]:
    """Mean and standard error (ddof 1) of (S,) values; the s.e. is NaN for one value."""
    v = np.asarray(v, np.float64)
    se = float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    return float(v.mean()), se


def probe_table(results: Results) -> str:
    """:func:`probe_summary` of every probed layer and K, the mean over seeds (± one standard error
    with several seeds), one line each, in percent, under a line giving the probe's images."""
    h = results.runs
    K = np.asarray(h["K"], np.float64)
    seeds = int(np.max(h["seed_index"])) + 1 if "seed_index" in h else 1
    lines = [f"probes fitted on {int(results.n_probe)} training images, scored on {int(results.n_test)} "
             f"test images; mean over {seeds} seed{'s' if seeds != 1 else ''}"
             + (" ± one standard error" if seeds > 1 else "")]
    for layer in PROBE_LAYERS:
        s = probe_summary(h, layer)
        for k in np.unique(K):
            idx = runs_of(h, k)
            cells = []
            for what, name in (("initial", "initial"), ("final", "final"), ("mean", "mean over training")):
                m, se = _mean_se(getattr(s, what)[idx])
                cells.append(f"{name} {100 * m:5.1f}" + (f" ± {100 * se:.1f}" if math.isfinite(se) else "") + " %")
            lines.append(f"{layer}  K = {fmt_K(k):>4}: " + ", ".join(cells))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Test accuracy of the linear probes over training, left layer 1, right layer 2: the mean over
    seeds ± one standard error; a cross marks a setting with a diverged run (its probes then read its
    last finite state). Chance is 10 %. Then the probes' accuracy at the start, at the end and
    averaged over the evaluation points after step 0 (a lower average for the same end point means
    slower improvement), per K, the mean over seeds."""
    h = results.runs
    fig, axes = panels(2, sharey=True,
                       suptitle=f"CNN on CIFAR-10, probes on {int(results.n_probe)} training images, scored on "
                                f"{int(results.n_test)} test images ({results.config.scale} scale)")
    for ax, layer, title in zip(axes, PROBE_LAYERS, ("first-layer features", "second-layer features")):
        plot_sweep(ax, h, f"probe_{layer}_test_acc")
        ax.set(xlabel="step", title=f"linear probe on {title}")
        legend(ax)
    axes[0].set_ylabel("probe test accuracy (%)")
    plt.show()
    print(probe_table(results))
