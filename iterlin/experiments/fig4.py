"""Fig. 4: ResNet-18 on CIFAR-10, without and with BatchNorm, K = 1 against a large K (Sec. 4.1).

Two panels as in the paper:

* ``"no_bn"``: the CIFAR ResNet-18 without BatchNorm (``make_model("resnet18")``), no data
  augmentation; periods ``K`` at learning rate ``lr`` (the paper: K = 10⁶, lr 7·10⁻⁷);
* ``"bn"``: with BatchNorm (``make_model("resnet18_bn", bn_mode=...)``) and, when ``augment_bn``,
  random flips and 4-pixel crops; periods ``K_bn`` at ``lr_bn`` (the paper: K = 10⁵, lr 10⁻⁵).

Each run is iterative linearisation (Algorithm 1) with plain SGD and softmax cross-entropy on the
linearised logits. BatchNorm is linearised as the paper does ("due to linearising the BatchNorm
layer"): with ``bn_mode="batch"`` (default) the network normalises every batch by its own
statistics inside f(θ, x), and those statistics are linearised with everything else; with
``bn_mode="frozen"`` the statistics are constants frozen at θ_s and re-estimated from the current
batch at each re-linearisation (``refresh`` of :func:`iterlin.models.make_model`). In batch mode the
evaluation normalises each evaluation chunk (up to 1000 images) by its own statistics.

Every run starts from the same initialisation (per panel) and sees the same batches; the runs
are trained one after the other (:func:`iterlin.training.train`), not vmapped together: on a CPU a
vmapped pair of ResNet-18 steps costs more than two separate steps (measured: about 2× to 4×),
and a run that diverges (a NaN or huge loss) stops early without holding the others. A diverged run is
frozen at its last finite parameters; its history is padded to every evaluation point with that
frozen state's values (evaluating it again would give the same numbers) and ``diverged``,
``diverged_step`` record it. The paper reports that BatchNorm runs "are far more likely to diverge
due to linearising the BatchNorm layer".

Config keys: ``K``, ``lr`` (no-BN panel: periods, including 1, and learning rate); ``K_bn``,
``lr_bn``, ``augment_bn`` (BN panel); ``bn_mode`` (``"batch"`` or ``"frozen"``); ``steps``,
``batch_size``, ``n_train``, ``n_test``, ``seed``, ``n_evals`` (shared).

Results: ``"no_bn"`` and ``"bn"``, each a sweep-like history (:func:`stack_histories`: ``step``
(E,), ``n_relin`` and ``{net,lin}_{train,test}_{loss,acc}`` (R, E), ``diverged``,
``diverged_step`` (R,)) with ``K`` (R,) float (∞ as ``inf``) and ``lr`` (R,); ``"n_test"``.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import optax

from ..claims import Claim, divergence_claim, on_par_claim, verdict
from ..data import Dataset
from ..models import make_model
from ..training import train
from ._common import Experiment, checkpoint_path, eval_points, load_data, seed_keys

__all__ = [
    "SCALES", "EXPERIMENT", "PANELS", "load", "compute", "claims", "stack_histories",
    "divergence_report",
]

INF = math.inf

SCALES = {
    "smoke": dict(
        K=[1, 2], lr=0.01, K_bn=[1, 2], lr_bn=0.01, augment_bn=True, bn_mode="batch", steps=4,
        batch_size=4, n_train=16, n_test=16, seed=0, n_evals=4,
    ),
    # gpu: ESTIMATE (not measured): ~0.3 TFLOP per linearised step of 128 images, 4 runs x
    # 4000 steps, plus 10 evaluations of network and linear model per run.
    "gpu": dict(
        K=[1, 400], lr=1e-3, K_bn=[1, 400], lr_bn=1e-2, augment_bn=True, bn_mode="batch", steps=4000,
        batch_size=128, n_train=None, n_test=None, seed=0, n_evals=10,
    ),
    "paper": dict(  # lr 7e-7, K = 1e6 (no BN); lr 1e-5, K = 1e5 (BN + augmentation): the paper's.
        # T, batch size and evaluation points ours (T = 10 K of the no-BN run).
        K=[1, 1_000_000], lr=7e-7, K_bn=[1, 100_000], lr_bn=1e-5, augment_bn=True, bn_mode="batch",
        steps=10_000_000, batch_size=256, n_train=50_000, n_test=10_000, seed=0, n_evals=100,
    ),
}

#: The panels of Fig. 4: results key → (model name, config key of K, of lr, of augmentation or None).
PANELS = {
    "no_bn": ("resnet18", "K", "lr", None),
    "bn": ("resnet18_bn", "K_bn", "lr_bn", "augment_bn"),
}


def stack_histories(histories: Sequence[Mapping], steps: Sequence[int]) -> dict:
    """Stack single-run histories of :func:`iterlin.training.train` into a sweep-like history.

    Args:
      histories: R histories; a run that diverged may have stopped before the last evaluation
        point: its values are padded with its last recorded values (its frozen state).
      steps: the E evaluation steps every run was scheduled for.

    Returns:
      ``step`` (E,), every per-point key as (R, E) (float), ``diverged`` (R,) bool and
      ``diverged_step`` (R,) int.
    """
    E = len(steps)
    out: dict = {"step": np.asarray(steps)}
    per_point = [k for k in histories[0] if k not in ("step", "diverged", "diverged_step")]
    for k in per_point:
        rows = []
        for h in histories:
            v = np.asarray(h[k], np.float64)
            if v.shape[0] < E:
                v = np.concatenate([v, np.repeat(v[-1:], E - v.shape[0], axis=0)])
            rows.append(v)
        out[k] = np.stack(rows)
    out["diverged"] = np.asarray([bool(h["diverged"]) for h in histories])
    out["diverged_step"] = np.asarray([int(h["diverged_step"]) for h in histories])
    return out


load = load_data


def compute(config: Mapping, data: Dataset, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Both panels, each run trained alone (see the module docstring)."""
    init_key, data_key = seed_keys(config["seed"])
    steps = eval_points(config["steps"], config["n_evals"])
    out: dict = {"n_test": np.asarray(data.x_test.shape[0])}
    for panel, (name, k_key, lr_key, aug_key) in PANELS.items():
        model = make_model(name, init_key, bn_mode=config["bn_mode"] if name == "resnet18_bn" else None)
        augment = bool(config[aug_key]) if aug_key else False
        histories = []
        for i, k in enumerate(config[k_key]):
            _, h = train(
                model.apply_fn, model.params, (data.x_train, data.y_train), K=k, steps=config["steps"],
                optimizer=optax.sgd(config[lr_key]), loss="ce", batch_size=config["batch_size"], key=data_key,
                refresh=model.refresh, eval_data=(data.x_test, data.y_test), eval_steps=steps, augment=augment,
                checkpoint=checkpoint_path(checkpoint_dir, f"{panel}-run{i}"), progress=progress, config=dict(config),
            )
            histories.append(h)
        hist = stack_histories(histories, steps)
        hist["K"] = np.asarray([float(k) for k in config[k_key]], np.float64)
        hist["lr"] = np.full(len(histories), float(config[lr_key]))
        out[panel] = hist
    return out


def claims(results: Mapping) -> list[Claim]:
    """Large K ≈ SGD without and with BatchNorm; BatchNorm runs diverge more easily."""
    n_test = int(results["n_test"])
    nb, b = results["no_bn"], results["bn"]
    rows = [
        on_par_claim("no BatchNorm: large K ≈ SGD (K = 1)", "similar test accuracy (Fig. 4 left)", nb, n_test=n_test),
        on_par_claim("BatchNorm + augmentation: large K ≈ SGD (K = 1)", "similar test accuracy (Fig. 4 right)", b,
                     n_test=n_test),
    ]
    d_nb, d_b = np.asarray(nb["diverged"]), np.asarray(b["diverged"])
    any_div = bool(d_nb.any() or d_b.any())
    rows.append(Claim(
        "BatchNorm runs diverge more easily", "far more likely to diverge",
        f"diverged: BN {int(d_b.sum())}/{d_b.size}, no BN {int(d_nb.sum())}/{d_nb.size}",
        verdict(d_b.mean() > d_nb.mean(), applicable=any_div),
        "a larger fraction of BN runs diverged; decided only when some run diverged",
    ))
    rows.append(divergence_claim({"no BN": nb, "BN": b}))
    return rows


EXPERIMENT = Experiment("fig4", SCALES, load, compute, claims, __name__)


# ------------------------------------------------------------------------------------------------
# What the notebook prints: pure functions of the results (nothing here is part of ``compute``).


def divergence_report(results: Mapping, titles: Mapping[str, str]) -> str:
    """One line per run of each panel (``titles``: panel key → its title, in the order printed).

    ``"ResNet-18, <title>: K = <K>: diverged at step <t>"`` (or ``finite throughout``), with the
    final network test accuracy in percent.
    """
    from ..claims import fmt_K

    lines = []
    for key, title in titles.items():
        h = results[key]
        acc = np.asarray(h["net_test_acc"], np.float64)
        for i, k in enumerate(np.asarray(h["K"], np.float64)):
            state = (f"diverged at step {int(h['diverged_step'][i])}" if bool(h["diverged"][i])
                     else "finite throughout")
            lines.append(f"ResNet-18, {title}: K = {fmt_K(k)}: {state}; "
                         f"final test accuracy {100 * acc[i][-1]:.1f} %")
    return "\n".join(lines)


