"""Fig. 3: mini-batch SGD with data augmentation, K = 1 against a very large K (Sec. 4.1).

The paper: with augmentation (random flips and 4-pixel crops) the final test accuracies differ by
under one point, 82.3 % for K = 1 and 81.4 % for K = 5·10⁶; "8–12 feature updates" suffice.

Config keys: ``K`` (list; 1 and the large period), ``lr``, ``steps``, ``batch_size``,
``augment``, ``n_train``, ``n_test``, ``seed``, ``n_seeds``, ``n_evals``, ``n_eval_train``.
Conventions: :mod:`iterlin.experiments._common`.

Results: ``"runs"``: a :func:`~iterlin.experiments._common.sweep` history (every seed × K); ``"n_test"``. The
paper's curves are ``net_test_acc`` for every K and ``lin_test_acc`` (the linear model being
trained) for the large K.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..claims import Claim, divergence_claim, fmt_K, on_par_claim, pct, runs_of, verdict
from ..data import Dataset
from ._common import Experiment, checkpoint_path, cnn_sweep, load_data

__all__ = ["SCALES", "EXPERIMENT", "load", "compute", "claims"]

SCALES = {
    "smoke": dict(
        K=[1, 3], lr=0.05, steps=24, batch_size=32, augment=True, n_train=256, n_test=200,
        seed=0, n_seeds=1, n_evals=6, n_eval_train=None,
    ),
    # cpu: every installed image, 2 seeds x 2 K x 500 steps of 128 (about 14 epochs of the 4,660
    # images), K = 50: 10 re-linearisations, the paper's "8-12 feature updates"; training metrics on
    # 1,000 training images. lr 0.01, a rate at which large K stays stable: the linear
    # model's bound 2/λ_max(GGN) (iterlin.stability) is 0.054 at initialisation (512 training
    # images, seed 0), but at lr 0.1 both K = 50 runs diverged (steps 250, 251) and at lr 0.03 both
    # blew up after ~4 re-linearisations (test loss 1e3-1e4 by step 375; peak accuracy 32 % at
    # step 125) while K = 1 trained on (47 % at 0.1, 43 % at 0.03 by step 375): the bound at
    # initialisation does not hold at later θ_s (presumably the GGN sharpens; not measured there).
    # Measured: see results/fig3/provenance.json.
    "cpu": dict(
        K=[1, 50], lr=0.01, steps=500, batch_size=128, augment=True, n_train=None, n_test=None,
        seed=0, n_seeds=2, n_evals=8, n_eval_train=1000,
    ),
    # gpu: ESTIMATE 3 seeds x 2 runs x 40k steps x 256 ≈ 6e7 image-steps on an H100.
    "gpu": dict(
        K=[1, 4000], lr=1e-2, steps=40_000, batch_size=256, augment=True, n_train=None,
        n_test=None, seed=0, n_seeds=3, n_evals=40, n_eval_train=5000,
    ),
    # paper: K = 5e6 (the paper); lr and T ours: lr 1e-4 as Fig. 2's mini-batch runs, T = 12 K
    # so that the large-K run makes 12 feature updates (Sec. 4.1: 8-12 suffice).
    "paper": dict(
        K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True,
        n_train=50_000, n_test=10_000, seed=0, n_seeds=3, n_evals=200, n_eval_train=10_000,
    ),
}

load = load_data


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Every K of ``config["K"]`` in one program (see the module docstring for the results)."""
    runs = cnn_sweep(config, data, checkpoint=checkpoint_path(checkpoint_dir, "runs"), progress=progress)
    return {"runs": runs, "n_test": np.asarray(data.x_test.shape[0])}


def claims(results: Mapping) -> list[Claim]:
    """|Δ| < 1 point between K = 1 and large K (the shared noise rule, over seeds, paired on the
    test images); 82.3 % at paper scale; 8–12 updates suffice."""
    h = results["runs"]
    config = results.get("config", {})
    K, acc = np.asarray(h["K"]), np.asarray(h["net_test_acc"], np.float64)[:, -1]
    gap = on_par_claim("SGD + augmentation: large K ends under 1 point from K = 1", "82.3 % vs 81.4 % (Δ 0.9 pts)",
                       h, n_test=int(results["n_test"]), tol=0.01)
    k1 = acc[runs_of(h, 1)].mean()
    top = Claim(
        "K = 1 reaches 82.3 % test accuracy", "82.3 %", f"{pct(k1)} (mean over seeds)",
        verdict(abs(k1 - 0.823) <= 0.02, applicable=config.get("scale") == "paper"),
        "|Δ| ≤ 2 points; judged only at scale 'paper' (fewer images and steps here)",
    )
    j = runs_of(h, K.max())[0]
    relin = int(np.asarray(h["n_relin"])[j, -1])
    few = Claim(
        "8-12 feature updates suffice to match K = 1", "8-12 re-linearisations",
        f"{relin} re-linearisations (K={fmt_K(K[j])})",
        verdict(gap.holds == "yes" and relin <= 12, applicable=gap.holds in ("yes", "no")),
        "≤ 12 re-linearisations and the row above holds (n/a when the row above is n/a or undecided)",
    )
    return [gap, top, few, divergence_claim({"runs": h})]


EXPERIMENT = Experiment("fig3", SCALES, load, compute, claims, __name__)
