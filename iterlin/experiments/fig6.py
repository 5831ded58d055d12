"""Fig. 6: linear probes on the CNN's layer-1 and layer-2 features over training (Sec. 4.1).

A ridge classifier (:func:`iterlin.probes.probe_tracker`) is fitted on the activations
(:func:`iterlin.models.cnn_features`) of the first ``n_probe`` training images at each evaluation
point and scored on the test images, for K = 1 and a large K. The paper: the large-K features
improve slower and level off lower.

Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
``augment``, ``n_train``, ``n_test``, ``n_probe`` (None: all training images), ``seed``,
``n_evals``.

Results: ``"runs"``: the sweep history with, besides the usual keys,
``probe_{layer1,layer2}_{train,test}_acc`` and ``probe_{layer}_lam`` (the chosen ridge penalty),
each (R, E); ``"n_probe"``, ``"n_test"``: the numbers of images fitted and scored.

Conventions: :mod:`iterlin.experiments._common` (the paper's CNN, softmax cross-entropy on the
linearised logits, plain SGD at ``lr`` for every K, all runs from one initialisation on the same
batches, in one program). A run that diverges (a NaN or huge loss) is frozen at its last finite state and
recorded; its trackers keep reporting the frozen state. Checkpoints resume: the trackers take θ_0
explicitly.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..claims import Claim, divergence_claim, fmt_K, num, only_k1_rows, pct, two_se, verdict
from ..data import Dataset
from ..models import cnn_features
from ..probes import probe_tracker
from ._common import Experiment, checkpoint_path, cnn_sweep, index_of_K, load_with_probe

__all__ = [
    "SCALES", "EXPERIMENT", "PROBE_LAYERS", "load", "compute", "claims", "probe_summary",
    "probe_table",
]

SCALES = {
    "smoke": dict(
        K=[1, 8], lr=0.05, steps=24, batch_size=32, augment=False, n_train=256, n_test=200, n_probe=None,
        seed=0, n_evals=6,
    ),
    # gpu: ESTIMATE (not measured): 2 runs x 10 000 steps of 256, and 20 x 2 x 2 ridge probes
    # (eigendecompositions of n_probe x n_probe Gram matrices).
    "gpu": dict(
        K=[1, 1000], lr=1e-2, steps=10_000, batch_size=256, augment=True, n_train=None, n_test=None,
        n_probe=5000, seed=0, n_evals=20,
    ),
    "paper": dict(  # K = 5e6 (the paper's); lr, T, augmentation as our Fig. 3 paper settings
        K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True, n_train=50_000,
        n_test=10_000, n_probe=10_000, seed=0, n_evals=30,
    ),
}

#: The probed layers (keys of :func:`iterlin.models.cnn_features`).
PROBE_LAYERS = ("layer1", "layer2")

load = load_with_probe


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Every K in one program, the probes fitted at each evaluation point (module docstring)."""
    n = data.x_train.shape[0] if config.get("n_probe") is None else config["n_probe"]
    tracker = probe_tracker(cnn_features, (data.x_train[:n], data.y_train[:n]), (data.x_test, data.y_test),
                            layers=PROBE_LAYERS, seed=config["seed"])
    runs = cnn_sweep(config, data, callback=lambda f, p0: tracker, checkpoint=checkpoint_path(checkpoint_dir, "runs"),
                     progress=progress)
    return {"runs": runs, "n_probe": np.asarray(n), "n_test": np.asarray(data.x_test.shape[0])}


def probe_summary(history: Mapping, layer: str) -> dict:
    """Per run: the probe's test accuracy at the start and the end, and its mean over training.

    ``mean`` averages the evaluation points after step 0 (the area under the curve divided by the
    number of points: "improves slower" means a lower mean for the same final value).
    Returns ``{"initial", "final", "mean", "gain"}``, each (R,).
    """
    acc = np.asarray(history[f"probe_{layer}_test_acc"], np.float64)
    later = acc[:, 1:] if acc.shape[1] > 1 else acc
    return {"initial": acc[:, 0], "final": acc[:, -1], "mean": later.mean(axis=1), "gain": acc[:, -1] - acc[:, 0]}


def claims(results: Mapping) -> list[Claim]:
    """Large-K features improve slower and level off lower, per layer; divergence."""
    h = results["runs"]
    if (rows := only_k1_rows("fig6", h)) is not None:
        return rows
    K = np.asarray(h["K"])
    i1, j = index_of_K(K, 1), index_of_K(K, K.max())
    n_test = int(results["n_test"])
    rows = []
    for layer in PROBE_LAYERS:
        s = probe_summary(h, layer)
        noise = two_se(s["initial"][i1], n_test)
        learned = s["gain"][i1] > noise
        pre = f"K=1 probe {pct(s['initial'][i1])} → {pct(s['final'][i1])}"
        why = f"decided only if K=1's probe gains > 2 s.e. ({num(100 * noise, 1)} pts) on {n_test} test images"
        rows.append(Claim(
            f"{layer}: large-K features improve slower", "slower than K = 1 (Fig. 6)",
            f"{pre}; mean over training K=1 {pct(s['mean'][i1])} vs K={fmt_K(K[j])} {pct(s['mean'][j])}",
            verdict(s["mean"][j] < s["mean"][i1], applicable=learned),
            f"mean probe acc. (steps > 0) lower for large K; {why}",
        ))
        rows.append(Claim(
            f"{layer}: large-K features level off lower", "lower than K = 1 (Fig. 6)",
            f"final K=1 {pct(s['final'][i1])} vs K={fmt_K(K[j])} {pct(s['final'][j])}",
            verdict(s["final"][j] < s["final"][i1], applicable=learned),
            f"final probe acc. lower for large K; {why}",
        ))
    return [*rows, divergence_claim({"runs": h})]


EXPERIMENT = Experiment("fig6", SCALES, load, compute, claims, __name__)


# ------------------------------------------------------------------------------------------------
# What the notebook prints: pure functions of the results (nothing here is part of ``compute``).


def probe_table(results: Mapping) -> str:
    """:func:`probe_summary` of every probed layer and run, one line each, in percent."""
    h = results["runs"]
    lines = []
    for layer in PROBE_LAYERS:
        s = probe_summary(h, layer)
        for i, k in enumerate(np.asarray(h["K"], np.float64)):
            lines.append(f"{layer}  K = {fmt_K(k):>4}: initial {100 * s['initial'][i]:5.1f} %, "
                         f"final {100 * s['final'][i]:5.1f} %, mean over training {100 * s['mean'][i]:5.1f} %")
    return "\n".join(lines)


