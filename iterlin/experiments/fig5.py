"""Fig. 5: optimally early-stopped test accuracy against training-set size, for several K (Sec. 4.2).

The paper: every finite K scales with data like K = 1, while K = ∞ (the fixed NTK: no feature
learning) scales worse; K = ∞ was trained at a higher learning rate (1e-3 against 1e-5), and a
K = 1 control at that rate shows the rate is not the cause.

Config keys: ``n_train`` (list of training-set sizes; None: all installed; a single size n
expands to [n/4, n/2, n]), ``K`` (list of periods trained at ``lr``), ``lr``, ``lr_inf`` (the rate
of the K = ∞ run and of its K = 1 control), ``steps`` (per run, enough to fit the training set),
``batch_size`` (None: full batch), ``n_test``, ``seed``, ``n_evals``.

Results: ``n_train`` (S,) sizes; ``K`` (R,) and ``lr`` (R,) of the runs (:func:`runs`);
``best_test_acc`` (S, R): the maximum network test accuracy over evaluation points ("optimal
early stopping"); ``final_train_acc`` (S, R); ``diverged`` (S, R); and ``"histories"``: the
sweep history of each size, keyed by the size as a string.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from ..claims import ON_PAR, Claim, divergence_claim, fmt_K, num, pct, verdict
from ..config import halvings
from ..data import Dataset, load_cifar10
from ._common import Experiment, check_batch, checkpoint_path, cnn_sweep, early_stopped

__all__ = ["SCALES", "EXPERIMENT", "load", "compute", "claims", "runs", "off_lr"]

SCALES = {
    "smoke": dict(
        K=[1, 4], lr=0.1, lr_inf=0.1, steps=10, batch_size=None, n_train=[16, 32, 64],
        n_test=100, seed=0, n_evals=2,
    ),
    # gpu: ESTIMATE 6 sizes × 5 runs × 4000 steps × 256 ≈ 3e7 image-steps ≈ 5-7 min.
    "gpu": dict(
        K=[1, 100, 1000], lr=1e-2, lr_inf=5e-2, steps=4000, batch_size=256,
        n_train=[1250, 2500, 5000, 10_000, 20_000, 40_000], n_test=None, seed=0, n_evals=40,
    ),
    # paper: lr 1e-5, K = inf at 1e-3 with a K = 1 control (the paper); K, sizes, T ours.
    "paper": dict(
        K=[1, 1000, 100_000], lr=1e-5, lr_inf=1e-3, steps=2_000_000, batch_size=256,
        n_train=[1000, 2000, 5000, 10_000, 20_000, 50_000], n_test=10_000, seed=0, n_evals=200,
    ),
}


def load(config: Mapping) -> dict:
    """One :class:`~iterlin.data.Dataset` per training-set size, keyed by the size as a string."""
    out = {}
    for n in config["n_train"]:
        d = load_cifar10(n, config["n_test"])
        out[str(d.x_train.shape[0])] = d
    check_batch(config, min(d.x_train.shape[0] for d in out.values()))
    return out


def runs(config: Mapping) -> list[tuple[float, float]]:
    """The (K, lr) pairs of Fig. 5: every K at ``lr``, then K = ∞ and a K = 1 control at ``lr_inf``.

    Duplicates (e.g. when ``lr_inf == lr``) are run once.
    """
    pairs = [(float(k), config["lr"]) for k in config["K"]] + [(math.inf, config["lr_inf"]), (1.0, config["lr_inf"])]
    out = []
    for p in pairs:
        if p not in out:
            out.append(p)
    return out


def compute(config: Mapping, data: Mapping[str, Dataset], *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Every (K, lr) of :func:`runs` in one program per training-set size."""
    pairs = runs(config)
    Ks, lrs = [k for k, _ in pairs], [lr for _, lr in pairs]
    sizes = sorted(data, key=int)
    histories = {
        n: cnn_sweep(config, data[n], K=Ks, lr=lrs, checkpoint=checkpoint_path(checkpoint_dir, f"n{n}"),
                     progress=progress)
        for n in sizes
    }
    return {
        "n_train": np.asarray([int(n) for n in sizes]),
        "K": np.asarray(Ks, np.float64),
        "lr": np.asarray(lrs, np.float64),
        "best_test_acc": np.stack([early_stopped(histories[n]) for n in sizes]),
        "final_train_acc": np.stack([np.asarray(histories[n]["net_train_acc"])[:, -1] for n in sizes]),
        "diverged": np.stack([np.asarray(histories[n]["diverged"]) for n in sizes]),
        "histories": histories,
    }


def _gain(best: np.ndarray) -> np.ndarray:
    """Early-stopped accuracy gain from the smallest to the largest training set, per run."""
    return best[-1] - best[0]


def claims(results: Mapping) -> list[Claim]:
    """Fig. 5: finite K scale like K = 1; K = ∞ scales worse; the higher lr is not the cause."""
    K, lr = np.asarray(results["K"]), np.asarray(results["lr"])
    best = np.asarray(results["best_test_acc"], np.float64)  # (S, R)
    sizes = np.asarray(results["n_train"])
    config = results.get("config", {})
    lr0, lr_inf = config.get("lr", lr[0]), config.get("lr_inf", lr[np.flatnonzero(np.isinf(K))[0]])
    gain = _gain(best)
    span = f"n={int(sizes[0])}→{int(sizes[-1])}"
    i1 = int(np.flatnonzero((K == 1) & (lr == lr0))[0])
    finite = [i for i in range(len(K)) if np.isfinite(K[i]) and K[i] > 1 and lr[i] == lr0]
    if len(sizes) < 2:
        scale_rows = [Claim("data scaling", "Fig. 5", "one training-set size only", verdict(None), "needs ≥ 2 sizes")]
    else:
        worst = max((abs(gain[i] - gain[i1]) for i in finite), default=0.0)
        measured = f"gain {span}: K=1 {num(100 * gain[i1], 1)} pts; " + "; ".join(
            f"K={fmt_K(K[i])} {num(100 * gain[i], 1)} pts" for i in finite
        )
        scale_rows = [Claim(
            "every finite K scales with data like K = 1", "same rate for all finite K", measured,
            verdict(worst < 0.03 if finite else None),
            "|gain_K − gain_1| < 3 points for every finite K (gain: early-stopped test acc., smallest → largest n)",
        )]
        iinf = int(np.flatnonzero(np.isinf(K) & (lr == lr_inf))[0])
        ic = int(np.flatnonzero((K == 1) & (lr == lr_inf))[0])
        scale_rows.append(Claim(
            "K = ∞ (no feature learning) scales worse", "worse than every finite K",
            f"gain {span}: K=∞ {num(100 * gain[iinf], 1)} pts; K=1 (same lr) {num(100 * gain[ic], 1)} pts",
            verdict(gain[iinf] < gain[ic]), "gain_∞ < gain_1 at the same learning rate (lr_inf)",
        ))
    ic = int(np.flatnonzero((K == 1) & (lr == lr_inf))[0])
    if lr_inf == lr0:
        control = Claim("the higher lr of K = ∞ does not explain the gap", "K = 1 at 1e-3 ≈ K = 1 at 1e-5",
                        f"lr_inf = lr = {lr0:g}: no separate control", verdict(None), "needs lr_inf ≠ lr")
    else:
        d = best[-1, ic] - best[-1, i1]
        control = Claim(
            "the higher lr of K = ∞ does not explain the gap", "K = 1 at 1e-3 ≈ K = 1 at 1e-5",
            f"K=1 at n={int(sizes[-1])}: {pct(best[-1, i1])} (lr {lr0:g}) vs {pct(best[-1, ic])} (lr {lr_inf:g})",
            verdict(abs(d) < ON_PAR), "|Δ| < 2 points at the largest n",
        )
    train = np.asarray(results["final_train_acc"], np.float64)
    conv = Claim(
        "runs are trained to convergence", "100 % train accuracy", f"final train acc. ≥ {pct(train.min())}",
        verdict(train.min() >= 0.99), "every run ≥ 99 % train accuracy at its last step",
    )
    div = {f"n={n}": results["histories"][str(int(n))] for n in sizes}
    return [*scale_rows, control, conv, divergence_claim(div)]


EXPERIMENT = Experiment("fig5", SCALES, load, compute, claims, __name__, expand={"n_train": halvings})


# ------------------------------------------------------------------------------------------------
# What the notebook draws: pure functions of the results (nothing here is part of ``compute``).


def off_lr(results: Mapping) -> np.ndarray:
    """(R,) bool: the runs trained at a learning rate other than ``lr`` (the K = ∞ run and its K = 1
    control when ``lr_inf`` ≠ ``lr``; drawn dashed). ``results["config"]["lr"]`` is ``lr``."""
    return np.asarray(results["lr"], np.float64) != float(results["config"]["lr"])


