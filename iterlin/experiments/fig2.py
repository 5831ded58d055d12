"""Fig. 2: test accuracy against steps for several K, full batch (left) and mini-batch (centre).

Sec. 4.1 of the paper: large K performs on par with K = 1 (ordinary (S)GD), both with full-batch
gradient descent and with mini-batches. The mini-batch runs use lr / factor, K × factor and
steps × factor (the paper: factor 10), so that the right panel, mini-batch against
``step / factor``, compares the same gradient-flow time τ = lr × steps.

A full-batch step is a pass over its training set, so ``n_train_full`` can give the full-batch
panel the first n of the ``n_train`` images loaded (None: all of them) while the mini-batch
panel trains on all of them: the cpu scale uses it (250 of 1,000: a full-batch step over all of
them costs as much as ten mini-batch steps of 100).

Config keys: ``K`` (list, full-batch periods), ``lr`` (full-batch rate), ``steps`` (full-batch
steps), ``factor``, ``batch_size`` (mini-batch size of the centre panel), ``n_train``,
``n_train_full``, ``n_test``, ``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``,
``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (the sharpness record of each panel,
:func:`~iterlin.experiments._common.sharpness_callback`; the mini-batch panel's every
``sharpness_every × factor`` steps). Conventions: :mod:`iterlin.experiments._common`.

Results: :class:`Results`. Plot ``mini`` against ``step / factor``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, NamedTuple

import matplotlib.pyplot as plt
import numpy as np

from ..repro.claims import Claim
from ..repro.config import Factor, Images, Period, Rate, Steps, TestImages
from ..data import Dataset
from ..repro.plotting import bound_panel, legend, panels, plot_sweep
from . import protocol
from ._common import Experiment, Seeds, Sharpness, Sweep, check_sharpness, checkpoint_path, cnn_sweep, load_data
from ._common import sharpness_callback

__all__ = ["Config", "Results", "SCALES", "EXPERIMENT", "load", "compute", "claims", "minibatch_periods",
           "full_batch_data", "plot"]

INF = math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(Seeds, Sharpness):
    """fig2's knobs (the module docstring says what each does; :mod:`iterlin.repro.config` checks them)."""

    experiment: ClassVar[str] = "fig2"

    K: tuple[Period, ...]
    lr: Rate
    steps: Steps
    factor: Factor
    batch_size: Images | None
    n_train: Images | None
    n_train_full: Images | None
    n_test: TestImages | None


#: Both panels where the linear model stays stable: the cpu scale (its comment below says why), and
#: the gpu scale with more seeds, K and bound records.
_STABLE = dict(
    K=[1, 200], lr=0.001, steps=2000, factor=1, batch_size=100, n_train=1000, n_train_full=250,
    n_test=None, seed=0, n_seeds=3, n_evals=20, n_eval_train=None, n_sharpness=250, sharpness_iters=30,
    sharpness_every=400,
)

# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig2.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 4, INF], lr=0.05, steps=8, factor=2, batch_size=32, n_train=128, n_train_full=None, n_test=150,
        seed=0, n_seeds=1, n_evals=4, n_eval_train=None, n_sharpness=32, sharpness_iters=10, sharpness_every=4,
    ),
    "cpu": dict(_STABLE),
    "gpu": dict(_STABLE, K=[1, 20, 200, INF], n_seeds=8, sharpness_every=200),
    "paper": dict(
        K=[1, 100, 1000, 10_000, INF], lr=1e-3, steps=100_000, factor=10, batch_size=256,
        n_train=50_000, n_train_full=None, n_test=10_000, seed=0, n_seeds=3, n_evals=100, n_eval_train=10_000,
        n_sharpness=1000, sharpness_iters=30, sharpness_every=1000,
    ),
}


class Results(NamedTuple):
    """fig2's results (:func:`compute`)."""

    #: the full-batch panel: a :func:`~iterlin.experiments._common.sweep` history (``K`` its
    #: periods) with the sharpness record ``sharpness`` and ``lr_over_bound`` (λ_max on the first
    #: ``n_sharpness`` training images, the same images for both panels)
    full: Sweep
    #: the mini-batch panel: the same (``K`` its periods, :func:`minibatch_periods`); plot it
    #: against ``step / factor``
    mini: Sweep
    n_test: np.ndarray  #: () int, the test images
    n_train: np.ndarray  #: (2,) int, the training images of each panel: full batch, mini-batch
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, and ``n_sharpness`` checked
    against the full-batch panel's images (:func:`full_batch_data`: λ_max is measured on the first
    ones, the same for both panels)."""
    data = load_data(config)
    check_sharpness(config, full_batch_data(config, data))
    return data


def minibatch_periods(K, factor: int) -> list:
    """The mini-batch panel's periods: K × factor, except K = 1 (plain SGD) which stays 1."""
    return [k if k == 1 else k * factor for k in K]


def full_batch_data(config: Config, data: Dataset) -> Dataset:
    """The full-batch panel's data: the first ``n_train_full`` training images (None, or more than
    loaded: all of them), the same test images."""
    n = config.n_train_full
    if n is None or n >= data.x_train.shape[0]:
        return data
    return data._replace(x_train=data.x_train[:n], y_train=data.y_train[:n])


def _mini_config(config: Config) -> Config:
    """The mini-batch panel's view of ``config`` for its sharpness record: λ_max every
    ``sharpness_every × factor`` steps (its periods are ``factor`` times longer)."""
    return config.replace(sharpness_every=config.sharpness_every * config.factor)


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """The full-batch and the mini-batch K sweep, each recording its sharpness (see :class:`Results`)."""
    f = config.factor
    full_data = full_batch_data(config, data)
    full = cnn_sweep(config, full_data, batch_size=None, callback=sharpness_callback(config, full_data, config.lr),
                     checkpoint=checkpoint_path(checkpoint_dir, "full"), progress=progress)
    mini = cnn_sweep(config, data, K=minibatch_periods(config.K, f), lr=config.lr / f,
                     steps=config.steps * f,
                     callback=sharpness_callback(_mini_config(config), data, config.lr / f),
                     checkpoint=checkpoint_path(checkpoint_dir, "mini"), progress=progress)
    return Results(full=full, mini=mini, n_test=np.asarray(data.x_test.shape[0]),
                   n_train=np.asarray([full_data.x_train.shape[0], data.x_train.shape[0]]))


def claims(results: Results) -> list[Claim]:
    """The rows of fig2 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): large K on par
    with K = 1, full batch and mini-batch; whether each panel's linear model stayed under its bound;
    divergence."""
    return protocol.claims("fig2", results)


EXPERIMENT = Experiment("fig2", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Network test accuracy over training, one line per K (the mini-batch K > 1 are ``factor``
    times the full-batch ones), the mean over seeds ± one standard error; a cross marks a run that
    diverged (its curve stays at its last finite state). Below (when the runs recorded it): each
    panel's bound 2/λ_max(θ_s) of the linear model along every run, each seed a line; dashed the
    panel's rate η, dotted 3η; a cross where a large-K run's linear model's loss rose inside a block."""
    c = results.config
    f = c.factor
    full, mini = results.full, results.mini
    recorded = "lr_over_bound" in full and "lr_over_bound" in mini
    fig, axes = panels(3, 2 if recorded else 1, panel_size=(5, 4), squeeze=False,
                       suptitle=f"CNN on CIFAR-10 ({c.scale} scale)")
    top = axes[0]
    for ax in top[1:]:
        ax.sharey(top[0])
    series = [
        (top[0], full, "full batch", {}),
        (top[1], mini, f"mini-batch ({c.batch_size})", {}),
        (top[2], full, "full batch", {}),
        (top[2], mini, "mini-batch", dict(step_scale=1 / f, linestyle=":")),  # against step / factor
    ]
    for ax, h, name, style in series:
        plot_sweep(ax, h, "net_test_acc", label=name + ", K = {K}", diverged_label=None, **style)
    n_full, n_mini = results.n_train
    top[0].set(title=f"full batch ({n_full} images), lr {c.lr:g}", xlabel="step", ylabel="test accuracy (%)")
    top[1].set(title=f"mini-batch ({n_mini} images), lr {c.lr / f:g}, K × {f}", xlabel="step")
    top[2].set(title=f"comparison (mini-batch steps ÷ {f})", xlabel="full-batch step")
    for ax in top:
        legend(ax)
    if recorded:
        for ax, h, name in ((axes[1, 0], full, "full batch"), (axes[1, 1], mini, "mini-batch")):
            bound_panel(ax, h, title=f"{name}: ")
        axes[1, 2].set_visible(False)
    plt.show()
