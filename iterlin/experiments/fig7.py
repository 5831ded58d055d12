"""Fig. 7: the change of the first-layer filters from initialisation over training (Sec. 4.1).

ΔW_t = W_t − W_0 of all 50 first-layer filters (5 × 5 × 3 each) at each evaluation point
(:func:`iterlin.probes.filter_tracker`), for K = 1 and a large K; the notebook shows the first
three, mapped [−0.5, 0.5] → [0, 1] (:func:`iterlin.probes.filters_to_image`), and
:func:`filter_match` measures how far the large-K filters got compared with K = 1's. The paper:
K = 1 evolves much faster, and the final large-K filters look like K = 1's at about 10 % of
training.

Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
``augment``, ``n_train``, ``n_test``, ``seed``, ``n_evals`` (the columns of the figure).

Results: ``"runs"``: the sweep history with ``filters_delta`` (R, E, 5, 5, 3, 50); ``"match"``:
:func:`filter_match` of it.

Conventions: :mod:`iterlin.experiments._common` (the paper's CNN, softmax cross-entropy on the
linearised logits, plain SGD at ``lr`` for every K, all runs from one initialisation on the same
batches, in one program). A run that diverges (a NaN or huge loss) is frozen at its last finite state and
recorded; its trackers keep reporting the frozen state. Checkpoints resume: the trackers take θ_0
explicitly.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..claims import Claim, divergence_claim, fmt_K, num, only_k1_rows, pct, verdict
from ..data import Dataset
from ..probes import filter_tracker
from ._common import Experiment, checkpoint_path, cnn_sweep, index_of_K, load_data

__all__ = ["SCALES", "EXPERIMENT", "load", "compute", "claims", "filter_match", "match_marks", "match_report"]

SCALES = {
    "smoke": dict(
        K=[1, 8], lr=0.05, steps=24, batch_size=32, augment=False, n_train=256, n_test=200, seed=0,
        n_evals=12,
    ),
    "gpu": dict(  # ESTIMATE (not measured): 2 runs x 20 000 steps of 256
        K=[1, 2000], lr=1e-2, steps=20_000, batch_size=256, augment=True, n_train=None, n_test=None,
        seed=0, n_evals=20,
    ),
    "paper": dict(  # K = 5e6 (the paper's); 6e7 steps of 256 = 30 columns of ~10 000 epochs
        K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True, n_train=50_000,
        n_test=10_000, seed=0, n_evals=30,
    ),
}

load = load_data


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Every K in one program, the filters recorded at each evaluation point (module docstring)."""
    runs = cnn_sweep(config, data, callback=lambda f, p0: filter_tracker(n=50, params0=p0),
                     checkpoint=checkpoint_path(checkpoint_dir, "runs"), progress=progress)
    return {"runs": runs, "match": filter_match(runs)}


def filter_match(history: Mapping) -> dict:
    """How far the large-K filters moved, measured against K = 1's trajectory (Fig. 7's claim).

    With ΔW_t = W_t − W_0 (all first-layer filters) and ‖·‖ the Frobenius norm:

    * ``norm`` (R, E): ‖ΔW_t‖ of each run at each evaluation point;
    * ``ratio``: ‖ΔW_T^{large}‖ / ‖ΔW_T^{K=1}‖ at the last step (< 1: the large-K filters moved less);
    * ``fraction``: the fraction t/T of training at which K = 1's ‖ΔW_t‖ first reaches the large-K
      run's final ‖ΔW_T‖ (linear interpolation between evaluation points; NaN if it never does);
    * ``cosine``: cos(ΔW_T^{large}, ΔW_t^{K=1}) at the evaluation point nearest that fraction: do
      the filters there also point the same way ("look like" them), not only have the same size?

    Returns a dict of NumPy values, ``K_large`` the period compared with K = 1.
    """
    d = np.asarray(history["filters_delta"], np.float64)  # (R, E, h, w, c, n)
    steps = np.asarray(history["step"], np.float64)
    K = np.asarray(history["K"])
    i1, j = index_of_K(K, 1), index_of_K(K, K.max())
    flat = d.reshape(d.shape[0], d.shape[1], -1)  # (R, E, D)
    norm = np.sqrt(np.sum(flat**2, axis=-1))  # (R, E)
    target = norm[j, -1]
    ratio = target / norm[i1, -1] if norm[i1, -1] > 0 else np.nan
    frac, e = np.nan, len(steps) - 1
    for k in range(1, len(steps)):
        if norm[i1, k] >= target:
            a, b = norm[i1, k - 1], norm[i1, k]
            w = 1.0 if b == a else (target - a) / (b - a)
            t = steps[k - 1] + w * (steps[k] - steps[k - 1])
            frac = t / steps[-1]
            e = k - 1 if w < 0.5 else k
            break
    u, v = flat[j, -1], flat[i1, e]
    den = np.linalg.norm(u) * np.linalg.norm(v)
    cosine = float(u @ v / den) if den > 0 else np.nan
    return {"norm": norm, "ratio": np.asarray(ratio), "fraction": np.asarray(frac),
            "cosine": np.asarray(cosine), "match_step": np.asarray(steps[e]), "K_large": np.asarray(float(K[j]))}


def claims(results: Mapping) -> list[Claim]:
    """Large-K filters evolve slower; its final filters ≈ K = 1's at ~10 % of training."""
    h, m = results["runs"], results["match"]
    if (rows := only_k1_rows("fig7", h)) is not None:
        return rows
    K = np.asarray(h["K"])
    j = index_of_K(K, K.max())
    config = results.get("config", {})
    frac, ratio, cos = float(m["fraction"]), float(m["ratio"]), float(m["cosine"])
    slower = Claim(
        "large-K first-layer filters evolve slower", "K = 1 evolves much faster",
        f"‖ΔW_T‖ K={fmt_K(K[j])} / K=1 = {num(ratio)}", verdict(ratio < 0.9 if math.isfinite(ratio) else None),
        "ratio of the final filter changes (all 50 filters) < 0.9 (\"much\" slower: at least 10 % less)",
    )
    where = "never (within this run)" if not math.isfinite(frac) else f"at {pct(frac, 0)} of training (cos {num(cos)})"
    similar = Claim(
        "final large-K filters look like K = 1's early in training", "at about 10 % of training",
        f"K=1 reaches the final large-K ‖ΔW‖ {where}",
        verdict(math.isfinite(frac) and 0.05 <= frac <= 0.2, applicable=config.get("scale") == "paper"),
        "fraction within [5 %, 20 %]; judged only at scale 'paper' (it depends on the training length)",
    )
    return [slower, similar, divergence_claim({"runs": h})]


EXPERIMENT = Experiment("fig7", SCALES, load, compute, claims, __name__)


# ------------------------------------------------------------------------------------------------
# What the notebook draws and prints: pure functions of the results (nothing here is part of ``compute``).


def match_marks(results: Mapping) -> dict:
    """The marks of the filter-norm panel, from ``results["match"]`` (:func:`filter_match`).

    ``target``: the large-K run's final ‖ΔW_T‖ (the dotted line); ``step``: the step at which
    K = 1's ‖ΔW_t‖ first reaches it, ``fraction`` · T (the dot; NaN if it never does);
    ``fraction``: that fraction of training.
    """
    h, m = results["runs"], results["match"]
    j = index_of_K(h["K"], np.asarray(h["K"], np.float64).max())
    frac = float(m["fraction"])
    return {"target": float(np.asarray(m["norm"], np.float64)[j, -1]),
            "step": frac * float(np.asarray(h["step"])[-1]) if math.isfinite(frac) else math.nan,
            "fraction": frac}


def match_report(results: Mapping) -> str:
    """One line: the final ratio of the filter changes and where K = 1 reaches the large-K final size."""
    m = results["match"]
    frac = float(m["fraction"])
    reached = (f"at {100 * frac:.0f} % of training (cosine there: {float(m['cosine']):.2f})"
               if math.isfinite(frac) else "never in this run")
    return f"final ratio (large K / K = 1): {float(m['ratio']):.2f}; K = 1 reaches the large-K final size {reached}"


