"""Fig. 3: mini-batch SGD with data augmentation, K = 1 against a very large K (Sec. 4.1).

The paper: with augmentation (random flips and 4-pixel crops) the final test accuracies differ by
under one point, 82.3 % for K = 1 and 81.4 % for K = 5·10⁶; "8–12 feature updates" suffice.

Config keys: ``K`` (list; 1 and the large period), ``lr``, ``steps``, ``batch_size``,
``augment``, ``n_train``, ``n_test``, ``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``,
``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (the sharpness record,
:func:`~iterlin.experiments._common.sharpness_callback`).
Conventions: :mod:`iterlin.experiments._common`.

Results: :class:`Results`. The paper's curves are ``runs["net_test_acc"]`` for every K and
``runs["lin_test_acc"]`` (the linear model being trained) for the large K.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import matplotlib.pyplot as plt
import numpy as np

from ..repro.claims import Claim
from ..data import Dataset
from ..repro.plotting import bound_panel, legend, panels, plot_sweep
from . import protocol
from ._common import (
    STABLE,
    Experiment,
    Sweep,
    SweepConfig,
    check_sharpness,
    checkpoint_path,
    cnn_sweep,
    load_data,
    sharpness_callback,
)

__all__ = ["Config", "Results", "SCALES", "EXPERIMENT", "load", "compute", "claims", "plot"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(SweepConfig):
    """fig3's knobs: a plain K sweep's (:class:`~iterlin.experiments._common.SweepConfig`)."""

    experiment: ClassVar[str] = "fig3"


# The scales (smoke, cpu, gpu, paper): what each runs, why, and what it changes is told on the page
# (notebooks/fig3.py, "What each scale runs").
SCALES = {
    "smoke": dict(
        K=[1, 3], lr=0.05, steps=24, batch_size=32, augment=True, n_train=256, n_test=200,
        seed=0, n_seeds=1, n_evals=6, n_eval_train=None, n_sharpness=32, sharpness_iters=10, sharpness_every=12,
    ),
    "cpu": dict(STABLE, n_seeds=3, n_evals=40),
    "gpu": dict(STABLE, n_seeds=24, n_evals=40),
    "paper": dict(
        K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True,
        n_train=50_000, n_test=10_000, seed=0, n_seeds=3, n_evals=200, n_eval_train=10_000,
        n_sharpness=1000, sharpness_iters=30, sharpness_every=5_000_000,
    ),
}


class Results(NamedTuple):
    """fig3's results (:func:`compute`)."""

    #: a :func:`~iterlin.experiments._common.sweep` history (every seed × K, seed-major) with the
    #: sharpness record ``sharpness`` and ``lr_over_bound``
    runs: Sweep
    n_test: np.ndarray  #: () int, the test images
    config: Config | None = None  #: the resolved config (set by :func:`~iterlin.experiments.run`)


def load(config: Config) -> Dataset:
    """CIFAR-10 as :func:`~iterlin.experiments._common.load_data`, and ``n_sharpness <= n_train`` checked."""
    return check_sharpness(config, load_data(config))


def compute(config: Config, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> Results:
    """Every K of ``config.K`` in one program, the sharpness recorded along every run (see the
    module docstring for the results)."""
    runs = cnn_sweep(config, data, callback=sharpness_callback(config, data, config.lr),
                     checkpoint=checkpoint_path(checkpoint_dir, "runs"), progress=progress)
    return Results(runs=runs, n_test=np.asarray(data.x_test.shape[0]))


def claims(results: Results) -> list[Claim]:
    """The rows of fig3 in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`): |Δ| < 1 point
    between K = 1 and large K; 82.3 % at paper scale; 8–12 updates suffice; stability; divergence."""
    return protocol.claims("fig3", results)


EXPERIMENT = Experiment("fig3", SCALES, load, compute, claims, __name__, Config, Results)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results: Results):
    """Left: test accuracy over training: solid lines are the network, the dashed line the linear
    model trained between re-linearisations (large K); the mean over seeds ± one standard error; a
    cross marks a run that diverged (its curve stays at its last finite state). Right (when the run
    recorded it): the linear model's bound 2/λ_max(θ_s) along every run, each seed a line; the
    dashed line is the rate η, the dotted one 3η (the bound this scale keeps η under a third of); a
    cross where a large-K run's linear model's loss rose inside a block."""
    h = results.runs
    recorded = "lr_over_bound" in h
    fig, axes = panels(2 if recorded else 1, panel_size=(6.4, 4), squeeze=False)
    ax = axes[0, 0]
    lines = plot_sweep(ax, h, "net_test_acc", label="K = {K}: network")
    plot_sweep(ax, h, "lin_test_acc", linestyle="--", marker=None, color=lines, select=lambda K: K > 1,
               label="K = {K}: linearised model", diverged_label=None)
    ax.set(xlabel="step", ylabel="test accuracy (%)",
           title=f"CNN, SGD + augmentation ({results.config.scale} scale)")
    legend(ax)
    if recorded:
        bound_panel(axes[0, 1], h)
    plt.show()
