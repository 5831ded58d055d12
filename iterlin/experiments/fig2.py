"""Fig. 2: test accuracy against steps for several K, full batch (left) and mini-batch (centre).

Sec. 4.1 of the paper: large K performs on par with K = 1 (ordinary (S)GD), both with full-batch
gradient descent and with mini-batches. The mini-batch runs use lr / factor, K × factor and
steps × factor (the paper: factor 10), so that the right panel, mini-batch against
``step / factor``, compares the same gradient-flow time τ = lr × steps.

A full-batch step is a pass over its training set, so ``n_train_full`` can give the full-batch
panel the first n of the ``n_train`` images loaded (None: all of them) while the mini-batch
panel trains on all of them: the cpu scale uses it (a full-batch step over every installed image
costs as much as 36 mini-batch steps of 128).

Config keys: ``K`` (list, full-batch periods), ``lr`` (full-batch rate), ``steps`` (full-batch
steps), ``factor``, ``batch_size`` (mini-batch size of the centre panel), ``n_train``,
``n_train_full``, ``n_test``, ``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``. Conventions:
:mod:`iterlin.experiments._common`.
"""

from __future__ import annotations

import math
from typing import Mapping

import matplotlib.pyplot as plt
import numpy as np

from ..claims import Claim, divergence_claim, on_par_claim
from ..data import Dataset
from ..plotting import legend, panels, plot_sweep
from ._common import Experiment, checkpoint_path, cnn_sweep, load_data

__all__ = ["SCALES", "EXPERIMENT", "load", "compute", "claims", "minibatch_periods", "full_batch_data", "plot"]

INF = math.inf

SCALES = {
    "smoke": dict(
        K=[1, 4, INF], lr=0.05, steps=8, factor=2, batch_size=32, n_train=128, n_train_full=None, n_test=150,
        seed=0, n_seeds=1, n_evals=4, n_eval_train=None,
    ),
    # cpu: a full-batch step is a pass over its training set, so the full-batch panel uses 1,024
    # of the installed images (n_train_full) and the mini-batch panel all of them (4,660 with the
    # shared subset), every test image, 2 seeds × K in {1, 10, ∞}. Full batch: 100 steps at 0.03
    # (below the linear model's stability bound 2/λ_max ≈ 0.054 at θ_0, iterlin.stability);
    # mini-batch: factor 3, so 300 steps of 128 at 0.01 with K in {1, 30, ∞} (the ksweep and lr
    # runs' setting, where K = 1 passes 35 %). Measured on this 2-core CPU: 2.2 ms per image for
    # a plain step, 3.2 ms linearised, so ESTIMATE ≈ 2 × (225 + 2 × 330) s full batch + 2 × (85 +
    # 2 × 125) s mini-batch ≈ 40 min, plus 6 evaluations of each run. Measured (results/fig2):
    # 4,242 s with other jobs beside it; K = 1 31.6 % / 37.8 %, large K's loss exploded.
    "cpu": dict(
        K=[1, 10, INF], lr=0.03, steps=100, factor=3, batch_size=128, n_train=None, n_train_full=1024,
        n_test=None, seed=0, n_seeds=2, n_evals=5, n_eval_train=500,
    ),
    # gpu: an ESTIMATE (no GPU measured): ~0.17 GFLOP per image per linearised step; 3 seeds × 5 runs
    # × 100 full-batch steps × every installed image, plus the mini-batch panel.
    "gpu": dict(
        K=[1, 5, 20, 50, INF], lr=0.05, steps=100, factor=10, batch_size=256, n_train=None,
        n_train_full=None, n_test=None, seed=0, n_seeds=3, n_evals=20, n_eval_train=5000,
    ),
    # paper: lr 1e-3 full batch, 1e-4 mini-batch of 256, K x 10 (the paper); the K values and
    # T are ours (the paper's legend and step counts are not in the text).
    "paper": dict(
        K=[1, 100, 1000, 10_000, INF], lr=1e-3, steps=100_000, factor=10, batch_size=256,
        n_train=50_000, n_train_full=None, n_test=10_000, seed=0, n_seeds=3, n_evals=100, n_eval_train=10_000,
    ),
}

load = load_data


def minibatch_periods(K, factor: int) -> list:
    """The mini-batch panel's periods: K × factor, except K = 1 (plain SGD) which stays 1."""
    return [k if k == 1 else k * factor for k in K]


def full_batch_data(config: Mapping, data: Dataset) -> Dataset:
    """The full-batch panel's data: the first ``n_train_full`` training images (None, or more than
    loaded: all of them), the same test images."""
    n = config.get("n_train_full")
    if n is None or n >= data.x_train.shape[0]:
        return data
    return data._replace(x_train=data.x_train[:n], y_train=data.y_train[:n])


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Results: ``"full"`` and ``"mini"``, each a :func:`~iterlin.experiments._common.sweep`
    history (``K`` holds that panel's periods); ``"n_test"``; ``"n_train"`` (training images of
    each panel, (2,): full batch, mini-batch). Plot ``mini`` against ``step / factor``."""
    f = config["factor"]
    full_data = full_batch_data(config, data)
    full = cnn_sweep(config, full_data, batch_size=None, checkpoint=checkpoint_path(checkpoint_dir, "full"),
                     progress=progress)
    mini = cnn_sweep(config, data, K=minibatch_periods(config["K"], f), lr=config["lr"] / f,
                     steps=config["steps"] * f, checkpoint=checkpoint_path(checkpoint_dir, "mini"),
                     progress=progress)
    return {"full": full, "mini": mini, "n_test": np.asarray(data.x_test.shape[0]),
            "n_train": np.asarray([full_data.x_train.shape[0], data.x_train.shape[0]])}


def claims(results: Mapping) -> list[Claim]:
    """Large K on par with K = 1, full batch and mini-batch; divergence."""
    n = int(results["n_test"])
    return [
        on_par_claim("full batch: large K performs on par with K = 1", "on par (Fig. 2 left)", results["full"],
                     n_test=n),
        on_par_claim("mini-batch: large K performs on par with K = 1", "on par (Fig. 2 centre)", results["mini"],
                     n_test=n),
        divergence_claim({"full batch": results["full"], "mini-batch": results["mini"]}),
    ]


EXPERIMENT = Experiment("fig2", SCALES, load, compute, claims, __name__)


# ------------------------------------------------------------------------------------------------
# The plot: drawing only (not part of ``compute``: a change here recomputes nothing)


def plot(results):
    """Network test accuracy over training, one line per K (the mini-batch K > 1 are ``factor``
    times the full-batch ones), the mean over seeds ± one standard error; a cross marks a run that
    diverged (its curve stays at its last finite state)."""
    c = results["config"]
    f = c["factor"]
    full, mini = results["full"], results["mini"]
    fig, axes = panels(3, panel_size=(5, 4), sharey=True, suptitle=f"CNN on CIFAR-10 ({c['scale']} scale)")
    series = [
        (axes[0], full, "full batch", {}),
        (axes[1], mini, f"mini-batch ({c['batch_size']})", {}),
        (axes[2], full, "full batch", {}),
        (axes[2], mini, "mini-batch", dict(step_scale=1 / f, linestyle=":")),  # against step / factor
    ]
    for ax, h, name, style in series:
        plot_sweep(ax, h, "net_test_acc", label=name + ", K = {K}", diverged_label=None, **style)
    n_full, n_mini = results["n_train"]
    axes[0].set(title=f"full batch ({n_full} images), lr {c['lr']:g}", xlabel="step", ylabel="test accuracy (%)")
    axes[1].set(title=f"mini-batch ({n_mini} images), lr {c['lr'] / f:g}, K × {f}", xlabel="step")
    axes[2].set(title=f"comparison (mini-batch steps ÷ {f})", xlabel="full-batch step")
    for ax in axes:
        legend(ax)
    plt.show()
