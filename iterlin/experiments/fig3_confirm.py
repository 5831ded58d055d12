"""Fig. 3, confirmatory: K = 1, K = T/10 and K = ∞ trained until the network fits its training set,
decided on every held-out image by preregistered rows (Sec. 4.1).

The paper: with augmentation, K = 1 reaches 82.3 % and K = 5·10⁶ 81.4 % ("under one point"), and
"8–12 feature updates" suffice. This experiment is the run that the confirmatory rows of
``claims.toml`` (``fig3_confirm.*``) fix before it starts: their ``config`` is this module's
config at the scale they name, so a run with other knobs reads n/a.

What it runs: :func:`~iterlin.experiments._common.cnn_sweep` (the paper's CNN, plain SGD,
augmentation) for every seed × K, with the sharpness record; the curves are measured on the
official test images (``runs``). The rows read the WINDOW: the evaluation points in the last
``window`` of training (``n_window_evals`` of them, evenly spaced from step T − ⌊window·T⌉ to T),
at each of which every run scores every image of the held-out pool
(:func:`iterlin.data.heldout.load_heldout`: the official test images, then the training-batch
images the run never trains on); each run's per-image score is its mean correctness over those
points (:class:`~iterlin.experiments._common.WindowScores`). The model scored is the network
f(θ_t) for finite K and the linear model f_lin_0(θ_t) for K = ∞ (the model K = ∞ trains).

Config keys: ``K`` (1, one finite K > 1 and ∞), ``lr``, ``steps``, ``batch_size``, ``augment``,
``n_train``, ``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``, ``window``,
``n_window_evals``, ``n_pool``, ``n_sharpness``, ``sharpness_iters``, ``sharpness_every``.
Conventions: :mod:`iterlin.experiments._common`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import matplotlib.pyplot as plt
import numpy as np

from ..data import Dataset, HeldOut, load_cifar10, load_heldout
from ..repro.claims import UNDECIDED, UNSTABLE, Claim, exceeds, on_par, verdict
from ..repro.config import Evals, Flag, Images, Period, Rate, Steps, Window
from ..repro.failures import unstable_among
from ..repro.plotting import bound_panel, legend, panels, plot_sweep
from ..repro.stats import Difference, difference, pct, runs_of
from . import protocol
from ._common import (
    Experiment,
    Seeds,
    Sharpness,
    Sweep,
    WindowScores,
    check_batch,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    eval_points,
    merge_callbacks,
    sharpness_callback,
)

__all__ = ["Config", "Data", "Results", "SCALES", "EXPERIMENT", "window_points", "load", "compute",
           "claims", "plot"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds, Sharpness):
    """The confirmatory run's knobs: a K sweep's (``K``, ``lr``, ``steps``, ``batch_size``,
    ``augment``, ``n_train``), the seeds and evaluations, the read window (``window``, a fraction
    of the steps; ``n_window_evals`` points in it) and the sharpness record. Every held-out image
    is scored, so there is no ``n_test``."""

    experiment: ClassVar[str] = "fig3_confirm"
    K: tuple[Period, ...]
    lr: Rate
    steps: Steps
    batch_size: Images | None
    augment: Flag
    n_train: Images | None
    window: Window
    n_window_evals: Evals
    n_pool: Images | None


# The scales: what each runs, why, and what it changes is told on the page (notebooks/fig3_confirm.py).
_CPU = dict(
    K=[1, 6400, float("inf")], lr=0.0005, steps=64_000, batch_size=50, augment=True, n_train=250, window=0.1,
    n_window_evals=5, n_pool=None, seed=0, n_seeds=10, n_evals=200, n_eval_train=None, n_sharpness=250,
    sharpness_iters=30, sharpness_every=6400,
)
SCALES = {
    "smoke": dict(_CPU, K=[1, 4, float("inf")], lr=0.05, steps=40, batch_size=32, n_train=128, n_seeds=2, n_evals=4,
                  window=0.25, n_window_evals=2, n_pool=200, n_sharpness=32, sharpness_iters=10, sharpness_every=20),
    "cpu": _CPU,
    "gpu": _CPU,
    "paper": dict(_CPU, K=[1, 5_000_000, float("inf")], lr=1e-4, steps=60_000_000, batch_size=256, n_train=None,
                  n_seeds=3, n_evals=200, n_eval_train=10_000, n_sharpness=1000, sharpness_every=5_000_000),
}


class Data(NamedTuple):
    """What :func:`compute` reads: the training images and the official test images (``train``),
    and the held-out pool: its images (``pool``: ``x_test``/``y_test`` the official test images,
    ``x_train``/``y_train`` the unused training-batch images) and their indices (``index``)."""

    train: Dataset
    pool: Dataset
    index: HeldOut


class Results(NamedTuple):
    """fig3_confirm's results (:func:`compute`)."""

    #: the sweep (every seed × K, seed-major) on the official test images, with the sharpness record
    #: and ``window_net_acc``/``window_lin_acc`` (the pool accuracy at each window point, NaN before)
    runs: Sweep
    window_net: np.ndarray  #: (R, n_pool) float32: each run's network's mean correctness over the window
    window_lin: np.ndarray  #: (R, n_pool) float32: the same for its linear model f_lin_s(θ_t)
    n_test: np.ndarray  #: () int: the pool's first n_test images are the official test images
    pool_test_index: np.ndarray  #: (n_test,) int64: their positions in test_batch
    pool_train_index: np.ndarray  #: (n_pool − n_test,) int64: official indices of the unused training images
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def window_points(steps: int, window: float, n: int) -> list[int]:
    """The read window's ``n`` evaluation steps, evenly spaced from T − round(window·T) to T = ``steps``
    (fewer where they coincide)."""
    start = steps - int(round(window * steps))
    return sorted({int(round(t)) for t in np.linspace(start, steps, n)})


def load(config: Config) -> Data:
    """CIFAR-10's first ``n_train`` images and every test image, and the run's held-out pool
    (:func:`iterlin.data.heldout.load_heldout`); ``batch_size`` and ``n_sharpness`` checked against
    ``n_train``."""
    train = check_sharpness(config, load_cifar10(config.n_train, None))
    check_batch(config, train.x_train.shape[0])
    index, images = load_heldout(config.n_train)
    if config.n_pool is not None:
        t, u = (config.n_pool + 1) // 2, config.n_pool // 2
        index = HeldOut(index.test_index[:t], index.train_index[:u])
        images = images._replace(x_test=images.x_test[:t], y_test=images.y_test[:t], x_unused=images.x_unused[:u],
                                 y_unused=images.y_unused[:u])
    return Data(train, Dataset(images.x_unused, images.y_unused, images.x_test, images.y_test), index)


def compute(config: Config, data: Data, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every seed × K in one program; the pool scored at the window's points (module docstring)."""
    points = window_points(config.steps, config.window, config.n_window_evals)
    pool = data.pool
    scores = WindowScores(np.concatenate([pool.x_test, pool.x_train]), np.concatenate([pool.y_test, pool.y_train]),
                          points[0])
    runs = cnn_sweep(config, data.train, eval_steps=sorted(set(eval_points(config.steps, config.n_evals)) | set(points)),
                     callback=merge_callbacks(sharpness_callback(config, data.train, config.lr), scores),
                     checkpoint=checkpoint_path(checkpoint_dir, "runs"), progress=progress)
    net, lin = scores.scores()
    return Results(runs=runs, window_net=net, window_lin=lin, n_test=np.asarray(pool.x_test.shape[0]),
                   pool_test_index=data.index.test_index, pool_train_index=data.index.train_index)


# ------------------------------------------------------------------------------------------------
# The rows' rules (claims.toml, kinds "fig3_confirm.*"): every comparison on the window's scores
# over the whole pool, paired by seed and image, the two-way seeds × images model
# ------------------------------------------------------------------------------------------------


class _Compared(NamedTuple):
    """The runs the rows compare, by K, with their window scores and clean train accuracies."""

    one: np.ndarray  #: K = 1's runs (one per seed)
    mid: np.ndarray  #: the finite K > 1's runs
    inf: np.ndarray  #: K = ∞'s runs
    Kmid: float
    relins: int  #: re-linearisations the K > 1 run made
    score: np.ndarray  #: (R, n_pool): the network's window score, the linear model's for K = ∞
    train_acc: np.ndarray  #: (R,) clean train accuracy, mean over the window's points
    n_test: int


def _compared(results: Results) -> _Compared:
    h = results.runs
    K = np.asarray(h["K"], np.float64)
    finite = np.unique(K[(K > 1) & np.isfinite(K)])
    if not (K == 1).any() or finite.size != 1 or not np.isinf(K).any():
        raise protocol.ProtocolError(f"K={sorted(set(K.tolist()))} is not allowed: fig3_confirm's rows compare "
                                     "K = 1, one finite K > 1 and K = ∞")
    steps = np.asarray(h["step"])
    window = steps >= window_points(int(steps[-1]), results.config.window, results.config.n_window_evals)[0]
    inf = np.flatnonzero(np.isinf(K))
    score = np.array(results.window_net, np.float64)
    score[inf] = results.window_lin[inf]
    return _Compared(runs_of(h, 1), runs_of(h, finite[0]), inf, float(finite[0]),
                     int(np.asarray(h["n_relin"])[runs_of(h, finite[0])[0], -1]), score,
                     np.asarray(h["net_train_acc"], np.float64)[:, window].mean(1), int(results.n_test))


def _diff(c: _Compared, a: np.ndarray, b: np.ndarray) -> Difference:
    """B − A on the pool's window scores (seed s of A with seed s of B; two-way model)."""
    s = c.score
    return difference(s[a].mean(1), s[b].mean(1), n_test=s.shape[1], correct_a=s[a], correct_b=s[b], model="two_way")


def _describe(d: Difference) -> str:
    """:meth:`~iterlin.repro.stats.Difference.describe`, naming the pool's images as held-out images."""
    return d.describe().replace("paired test images", "paired held-out images")


def _pool_parts(c: _Compared, a: np.ndarray, b: np.ndarray) -> str:
    """Δ on the official test images and on the unused training images, reported apart."""
    s, n = c.score, c.n_test
    part = lambda sl: 100 * float((s[b][:, sl] - s[a][:, sl]).mean())
    return f"test images ({n}): Δ {part(slice(0, n)):+.1f}; unused training images ({s.shape[1] - n}): " \
           f"Δ {part(slice(n, None)):+.1f}"


def _unstable(c: _Compared, h) -> str:
    """What made a large-K run of the comparison unstable (:func:`~iterlin.repro.failures.unstable_among`), or ``""``."""
    return "; ".join(unstable_among(h, np.concatenate([c.mid, c.inf])))


@protocol.rule("fig3_confirm.gap")
def _gap(row: protocol.Row, results: Results):
    """K = ∞ below K = 1: the effect the relative margins are fractions of."""
    c = _compared(results)
    d = _diff(c, c.one, c.inf)
    measured = (f"K=1 {pct(c.score[c.one].mean())}, K=∞ {pct(c.score[c.inf].mean())}: {_describe(d)}; "
                f"{_pool_parts(c, c.one, c.inf)}")
    holds = {"yes": "no", "no": "yes"}.get(exceeds(d), UNDECIDED)
    return measured, holds, ("'yes' when the 95 % interval of Δ(K=∞ − K=1) lies below 0, 'no' when above, else "
                             "undecided (two-way seeds × images model, every held-out image, the window's mean)")


def _on_par_row(row: protocol.Row, results: Results, margin_of: str):
    c = _compared(results)
    d = _diff(c, c.one, c.mid)
    gap = _diff(c, c.one, c.inf)
    if margin_of == "gap":
        margin = row.value * -gap.delta
        what = f"±{row.value:g} of the run's own K = 1 − K = ∞ gap (Δ of row {row.experiment}.gap)"
        given = f"; margin ±{100 * margin:.2f} pts ({row.value:g} × the gap, {100 * -gap.delta:.1f} pts)"
    else:
        margin, what, given = row.margin, f"±{100 * row.margin:g} pts", ""
    measured = (f"K=1 {pct(c.score[c.one].mean())}, K={c.Kmid:g} ({c.relins} re-linearisations) "
                f"{pct(c.score[c.mid].mean())}: {_describe(d)}; {_pool_parts(c, c.one, c.mid)}{given}")
    rule = (f"on par: the 95 % interval of Δ(K={c.Kmid:g} − K=1) inside {what}, 'no' when wholly outside, else "
            "undecided (two-way seeds × images model, every held-out image, the window's mean)")
    if row.max_relin is not None:
        rule += f"; and at most {row.max_relin} re-linearisations"
    if unstable := _unstable(c, results.runs):
        return f"{measured}; unstable: {unstable}", UNSTABLE, rule
    if margin <= 0:
        return f"{measured}; K=∞ is not below K=1, so there is no gap to take a fraction of", UNDECIDED, rule
    holds = on_par(d, margin)
    if row.max_relin is not None and holds == "yes" and c.relins > row.max_relin:
        holds = "no"
    return measured, holds, rule


@protocol.rule("fig3_confirm.on_par", needs=("margin",), takes=("max_relin",))
def _on_par_absolute(row: protocol.Row, results: Results):
    """The finite K > 1 on par with K = 1 within ±margin (points)."""
    return _on_par_row(row, results, "points")


@protocol.rule("fig3_confirm.on_par_gap", needs=("value",), takes=("max_relin",))
def _on_par_gap(row: protocol.Row, results: Results):
    """The finite K > 1 on par with K = 1 within ±value × (K = 1 − K = ∞), the run's own gap."""
    return _on_par_row(row, results, "gap")


@protocol.rule("fig3_confirm.converged", needs=("value",))
def _converged(row: protocol.Row, results: Results):
    """Every K = 1 and finite-K network's clean train accuracy, mean over the window, ≥ value."""
    c = _compared(results)
    acc = c.train_acc
    measured = "; ".join(f"K={k}: {pct(acc[i].min())}–{pct(acc[i].max())}" for k, i in
                         (("1", c.one), (f"{c.Kmid:g}", c.mid), ("∞ (network, not judged)", c.inf)))
    return (measured + " (clean train accuracy, mean over the window, least–greatest over seeds)",
            verdict(bool(acc[np.concatenate([c.one, c.mid])].min() >= row.value)),
            f"'yes' when every K = 1 and K = {c.Kmid:g} network's clean train accuracy over the window is ≥ "
            f"{pct(row.value)}")


def claims(results: Results) -> list[Claim]:
    """The rows of fig3_confirm in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`)."""
    return protocol.claims("fig3_confirm", results)


EXPERIMENT = Experiment("fig3_confirm", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Left: test accuracy over training on the official test images (solid: the network; dashed: the
    linear model being trained, for K > 1), mean over seeds ± one standard error, the read window
    shaded. Middle: clean train accuracy, the rows' convergence criterion dotted. Right: the
    linear model's bound 2/λ_max(θ_s) along every run beside η."""
    h = results.runs
    fig, axes = panels(3, panel_size=(5.2, 4), squeeze=False)
    start = window_points(results.config.steps, results.config.window, results.config.n_window_evals)[0]
    ax = axes[0, 0]
    lines = plot_sweep(ax, h, "net_test_acc", label="K = {K}: network")
    plot_sweep(ax, h, "lin_test_acc", linestyle="--", marker=None, color=lines, select=lambda K: K > 1,
               label="K = {K}: linear model", diverged_label=None)
    ax.set(xlabel="step", ylabel="test accuracy (%)", title=f"CNN, SGD + augmentation ({results.config.scale})")
    ax2 = axes[0, 1]
    plot_sweep(ax2, h, "net_train_acc", label="K = {K}: network")
    converged = [r for r in protocol.rows_of("fig3_confirm") if r.kind == "fig3_confirm.converged"]
    if converged:
        ax2.axhline(100 * converged[0].value, color="0.4", linestyle=":", label="the rows' criterion")
    ax2.set(xlabel="step", ylabel="clean train accuracy (%)", title="fitting the training set")
    for a in (ax, ax2):
        a.axvspan(start, results.config.steps, color="0.9", zorder=0)
        legend(a)
    bound_panel(axes[0, 2], h)
    plt.show()
