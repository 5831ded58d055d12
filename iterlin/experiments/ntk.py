"""The empirical NTK over training, K = 1 against a large K (no figure in the paper; Sec. 1 and 5).

The empirical NTK Θ̂_θ(X_p, X_p) = ϕϕᵀ (Eq. 2) on ``n_probe`` fixed training images
(:func:`iterlin.ntk.kernel_tracker`): the kernel distance of the network's kernel from its initial
value, its velocity, and the change of the linear model's kernel Θ̂_{θ_s} made by the
re-linearisations between evaluation points (evaluated at every re-linearisation of the large K,
:func:`iterlin.ntk.relinearisation_steps`, so each is seen alone). Between re-linearisations θ_s,
hence the linear model's kernel, does not change at all: that distance is exactly 0.

Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
``n_train``, ``n_test``, ``n_probe`` (the first n_probe training images; kernels are
(10·n_probe)²), ``seed``, ``n_evals``.

Results: ``"runs"``: the sweep history, evaluated at :func:`eval_steps`, with (R, E) arrays
``kernel_distance_init`` (d(Θ_t, Θ_0) of the network's kernel), ``kernel_velocity``
(d(Θ_t, Θ_prev)/Δt; NaN at step 0) and ``kernel_distance_relin`` (the change of the linear model's
kernel Θ_s since the previous evaluation point; exactly 0 when θ_s did not change), d the kernel
distance of Fort et al. (:func:`iterlin.ntk.kernel_distance`); ``"n_probe"``.

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

from ..claims import Claim, divergence_claim, fmt_K, num, only_k1_rows, verdict
from ..data import Dataset
from ..ntk import kernel_tracker, relinearisation_steps
from ._common import Experiment, checkpoint_path, cnn_sweep, eval_points, index_of_K, load_with_probe

__all__ = [
    "SCALES", "EXPERIMENT", "load", "compute", "claims", "eval_steps", "relin_kernel_changes",
    "relin_steps", "relin_table",
]

SCALES = {
    "smoke": dict(
        K=[1, 6], lr=0.05, steps=24, batch_size=32, n_train=256, n_test=200, n_probe=8, seed=0,
        n_evals=8,
    ),
    "gpu": dict(  # ESTIMATE (not measured): 2 runs x 20 000 steps of 256, ~30 kernels 1000 x 1000
        K=[1, 2000], lr=1e-2, steps=20_000, batch_size=256, n_train=None, n_test=None, n_probe=100,
        seed=0, n_evals=20,
    ),
    "paper": dict(  # as our Fig. 3 paper settings (K = 5e6); probe set and evaluations ours
        K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, n_train=50_000, n_test=10_000,
        n_probe=100, seed=0, n_evals=30,
    ),
}

load = load_with_probe


def eval_steps(config: Mapping, max_points: int = 50) -> list[int]:
    """``eval_points(steps, n_evals)`` and every re-linearisation of every finite K > 1 (at most
    ``max_points`` per K, :func:`iterlin.ntk.relinearisation_steps`)."""
    pts = set(eval_points(config["steps"], config["n_evals"]))
    for k in config["K"]:
        if k > 1 and math.isfinite(k):
            pts |= set(relinearisation_steps(k, config["steps"], max_points=max_points))
    return sorted(pts)


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Every K in one program, the kernels measured at :func:`eval_steps` (module docstring)."""
    n = data.x_train.shape[0] if config.get("n_probe") is None else config["n_probe"]
    x_probe = data.x_train[:n]
    runs = cnn_sweep(config, data, callback=lambda f, p0: kernel_tracker(f, x_probe, params0=p0),
                     eval_steps=eval_steps(config), checkpoint=checkpoint_path(checkpoint_dir, "runs"),
                     progress=progress)
    return {"runs": runs, "n_probe": np.asarray(n)}


def relin_kernel_changes(history: Mapping, run: int) -> dict:
    """For run ``run``: which evaluation intervals contain a re-linearisation, and the kernel change.

    Returns ``{"step", "n_relin", "relinearised", "distance"}`` over evaluation points after step 0:
    ``relinearised`` is True where θ_s changed since the previous point (n_relin grew), and
    ``distance`` is ``kernel_distance_relin`` there.
    """
    steps = np.asarray(history["step"])[1:]
    nr = np.asarray(history["n_relin"])[run]
    d = np.asarray(history["kernel_distance_relin"], np.float64)[run, 1:]
    return {"step": steps, "n_relin": nr[1:], "relinearised": np.diff(nr) > 0, "distance": d}


def claims(results: Mapping) -> list[Claim]:
    """The kernel moves under SGD; it is exactly fixed between re-linearisations; each moves it."""
    h = results["runs"]
    if (rows := only_k1_rows("ntk", h)) is not None:
        return rows
    K = np.asarray(h["K"])
    i1, j = index_of_K(K, 1), index_of_K(K, K.max())
    d1 = float(np.asarray(h["kernel_distance_init"], np.float64)[i1, -1])
    dj = float(np.asarray(h["kernel_distance_init"], np.float64)[j, -1])
    moves = Claim(
        "the empirical NTK moves during SGD (K = 1)", "changes significantly (no number)",
        f"d(Θ_T, Θ_0): K=1 {num(d1, 3)}; K={fmt_K(K[j])} network {num(dj, 3)}",
        verdict(d1 > 0.01), "d > 0.01 (kernel distance of Fort et al., in [0, 1])",
    )
    c = relin_kernel_changes(h, j)
    still = c["distance"][~c["relinearised"]]
    fixed = Claim(
        "between re-linearisations the linear model's kernel is fixed", "constant for K steps (Eq. 4)",
        f"K={fmt_K(K[j])}: max d(Θ_s, Θ_s,prev) = {num(still.max(), 6) if still.size else 'n/a'} "
        f"over {still.size} intervals without re-linearisation",
        verdict(bool(np.all(still == 0.0)), applicable=still.size > 0),
        "exactly 0 at every such interval",
    )
    moved = c["distance"][c["relinearised"]]
    each = Claim(
        "each re-linearisation moves the kernel (feature learning)", "the kernel changes at re-linearisation",
        (f"K={fmt_K(K[j])}: {moved.size} intervals with re-linearisations, d from {num(moved.min(), 4)} "
         f"to {num(moved.max(), 4)}") if moved.size else f"K={fmt_K(K[j])}: no re-linearisation",
        verdict(bool(np.all(moved > 0)), applicable=moved.size > 0),
        "d > 0 at every interval containing a re-linearisation",
    )
    return [moves, fixed, each, divergence_claim({"runs": h})]


EXPERIMENT = Experiment("ntk", SCALES, load, compute, claims, __name__)


# ------------------------------------------------------------------------------------------------
# What the notebook draws and prints: pure functions of the results (nothing here is part of ``compute``).


def _largest(history: Mapping) -> tuple[int, int]:
    K = np.asarray(history["K"], np.float64)
    return index_of_K(K, 1), index_of_K(K, K.max())


def relin_steps(results: Mapping) -> np.ndarray:
    """The evaluation steps that end an interval containing a re-linearisation of the largest-K run
    (the dotted verticals); empty when the largest K is 1 (only K = 1 ran)."""
    h = results["runs"]
    i1, j = _largest(h)
    if j == i1:
        return np.zeros(0, np.asarray(h["step"]).dtype)
    c = relin_kernel_changes(h, j)
    return c["step"][c["relinearised"]]


def relin_table(results: Mapping) -> str:
    """:func:`relin_kernel_changes` of the largest-K run as a table: step, re-linearisations so far,
    whether θ_s changed since the previous evaluation point, and d(Θ_s, Θ_s,prev)."""
    h = results["runs"]
    _, j = _largest(h)
    c = relin_kernel_changes(h, j)
    lines = [f"K = {fmt_K(h['K'][j])}",
             f"{'step':>8}  {'re-linearisations so far':>24}  {'re-linearised since previous':>28}  "
             f"{'d(Θ_s, Θ_s,prev)':>17}"]
    for t, n, r, d in zip(c["step"], c["n_relin"], c["relinearised"], c["distance"]):
        lines.append(f"{int(t):>8}  {int(n):>24}  {'yes' if r else 'no':>28}  {float(d):>17.4f}")
    return "\n".join(lines)


