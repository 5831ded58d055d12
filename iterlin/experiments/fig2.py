"""Fig. 2: test accuracy against steps for several K, full batch (left) and mini-batch (centre).

Sec. 4.1 of the paper: large K performs on par with K = 1 (ordinary (S)GD), both with full-batch
gradient descent and with mini-batches. The mini-batch runs use lr / factor, K × factor and
steps × factor (the paper: factor 10), so that the right panel, mini-batch against
``step / factor``, compares equal amounts of training.

Config keys: ``K`` (list, full-batch periods), ``lr`` (full-batch rate), ``steps`` (full-batch
steps), ``factor``, ``batch_size`` (mini-batch size of the centre panel), ``n_train``, ``n_test``,
``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``. Conventions: :mod:`iterlin.experiments._common`.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..claims import Claim, divergence_claim, on_par_claim
from ..data import Dataset
from ._common import Experiment, checkpoint_path, cnn_sweep, load_data

__all__ = ["SCALES", "EXPERIMENT", "load", "compute", "claims", "minibatch_periods"]

INF = math.inf

SCALES = {
    "smoke": dict(
        K=[1, 4, INF], lr=0.05, steps=8, factor=2, batch_size=32, n_train=128, n_test=150,
        seed=0, n_seeds=1, n_evals=4, n_eval_train=None,
    ),
    # cpu: full-batch gradient descent costs a pass over the training set per step, so this scale
    # uses 1,024 of the installed images (every installed image would allow only a handful of
    # steps): 2 seeds x K in {1, 10, ∞}, 30 full-batch steps at 0.03 (below the GGN bound
    # 2/λ_max ≈ 0.054 at θ_0, iterlin.stability; 0.1 is above it); mini-batch panel: factor 4,
    # batches of 128, 120 steps at 0.0075 with K in {1, 40, ∞}; 500 test images, training metrics
    # on 500 training images. ESTIMATE ≈ 20 min: 2 × 30 × 1024 images plain (≈ 2 ms each) + 4 ×
    # 30 × 1024 linearised (≈ 4.8 ms) + the mini-batch panel's 2 × 120 plain and 4 × 120
    # linearised steps of 128 (≈ 0.26 s / 0.62 s), plus evaluations. K = 1 stays far below 35 %.
    "cpu": dict(
        K=[1, 10, INF], lr=0.03, steps=30, factor=4, batch_size=128, n_train=1024, n_test=500,
        seed=0, n_seeds=2, n_evals=4, n_eval_train=500,
    ),
    # gpu: an ESTIMATE (no GPU measured): ~0.17 GFLOP per image per linearised step; 3 seeds × 5 runs
    # × 100 full-batch steps × every installed image, plus the mini-batch panel.
    "gpu": dict(
        K=[1, 5, 20, 50, INF], lr=0.05, steps=100, factor=10, batch_size=256, n_train=None,
        n_test=None, seed=0, n_seeds=3, n_evals=20, n_eval_train=5000,
    ),
    # paper: lr 1e-3 full batch, 1e-4 mini-batch of 256, K x 10 (the paper); the K values and
    # T are ours (the paper's legend and step counts are not in the text).
    "paper": dict(
        K=[1, 100, 1000, 10_000, INF], lr=1e-3, steps=100_000, factor=10, batch_size=256,
        n_train=50_000, n_test=10_000, seed=0, n_seeds=3, n_evals=100, n_eval_train=10_000,
    ),
}

load = load_data


def minibatch_periods(K, factor: int) -> list:
    """The mini-batch panel's periods: K × factor, except K = 1 (plain SGD) which stays 1."""
    return [k if k == 1 else k * factor for k in K]


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Results: ``"full"`` and ``"mini"``, each a :func:`~iterlin.experiments._common.sweep`
    history (``K`` holds that panel's periods); ``"n_test"``. Plot ``mini`` against
    ``step / factor``."""
    f = config["factor"]
    full = cnn_sweep(config, data, batch_size=None, checkpoint=checkpoint_path(checkpoint_dir, "full"),
                     progress=progress)
    mini = cnn_sweep(config, data, K=minibatch_periods(config["K"], f), lr=config["lr"] / f,
                     steps=config["steps"] * f, checkpoint=checkpoint_path(checkpoint_dir, "mini"),
                     progress=progress)
    return {"full": full, "mini": mini, "n_test": np.asarray(data.x_test.shape[0])}


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
