"""Fig. 4: ResNet-18 on CIFAR-10, without and with BatchNorm, K = 1 against a large K (Sec. 4.1).

One experiment, registered with :func:`iterlin.experiments.experiment` (run it with
``iterlin.experiments.run("fig4", scale=...)``), two panels as in the paper:

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
and a run that diverges (NaN loss) stops early without holding the others. A diverged run is
frozen at its last finite parameters; its history is padded to every evaluation point with that
frozen state's values (evaluating it again would give the same numbers) and ``diverged``,
``diverged_step`` record it. The paper reports that BatchNorm runs "are far more likely to diverge
due to linearising the BatchNorm layer".
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import jax
import numpy as np
import optax

from .claims import Claim, fmt_K, num, pct, verdict
from .data import Dataset
from .experiments import claims_for, divergence_claim, eval_points, experiment, load_data
from .models import make_model
from .training import train

__all__ = ["PANELS", "fig4", "fig4_claims", "stack_histories"]

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


def _ckpt(checkpoint_dir, name: str):
    return None if checkpoint_dir is None else Path(checkpoint_dir) / f"{name}.npz"


@experiment("fig4")
def fig4(config: Mapping, data: Dataset | None = None, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Fig. 4: ResNet-18 without BatchNorm (left) and with BatchNorm + augmentation (right).

    Config keys: ``K``, ``lr`` (no-BN panel: periods, including 1, and learning rate); ``K_bn``,
    ``lr_bn``, ``augment_bn`` (BN panel); ``bn_mode`` (``"batch"`` or ``"frozen"``, see the module
    docstring); ``steps``, ``batch_size``, ``n_train``, ``n_test``, ``seed``, ``n_evals`` (shared).

    Results: ``"no_bn"`` and ``"bn"``, each a sweep-like history (:func:`stack_histories`: ``step``
    (E,), ``n_relin`` and ``{net,lin}_{train,test}_{loss,acc}`` (R, E), ``diverged``,
    ``diverged_step`` (R,)) with ``K`` (R,) float (∞ as ``inf``) and ``lr`` (R,); ``"n_test"``.
    """
    data = load_data(config) if data is None else data
    init_key, data_key = jax.random.split(jax.random.PRNGKey(config["seed"]))
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
                checkpoint=_ckpt(checkpoint_dir, f"{panel}-run{i}"), progress=progress, config=dict(config),
            )
            histories.append(h)
        hist = stack_histories(histories, steps)
        hist["K"] = np.asarray([float(k) for k in config[k_key]], np.float64)
        hist["lr"] = np.full(len(histories), float(config[lr_key]))
        out[panel] = hist
    return out


#: |Δ| of final test accuracy below which large K counts as "≈ SGD" (the paper gives no number).
ON_PAR = 0.02


def _se_diff(p: float, n: int) -> float:
    """Two standard errors of the difference of two accuracies near p, each on n images."""
    p = min(max(float(p), 0.05), 0.95)
    return 2.0 * math.sqrt(2.0 * p * (1.0 - p) / max(int(n), 1))


def _par_claim(h: Mapping, label: str, paper: str, n_test: int) -> Claim:
    K = np.asarray(h["K"])
    acc = np.asarray(h["net_test_acc"], np.float64)[:, -1]
    i1 = int(np.flatnonzero(K == 1)[0])
    j = int(np.flatnonzero(K == K.max())[0])
    if j == i1:
        return Claim(f"{label}: large K ≈ SGD (K = 1)", paper, f"K=1 only: {pct(acc[i1])}", verdict(None),
                     "needs a run with K > 1")
    relin = int(np.asarray(h["n_relin"])[j, -1])
    delta = acc[j] - acc[i1]
    diverged = bool(np.asarray(h["diverged"])[[i1, j]].any())
    noise = _se_diff(acc[i1], n_test)
    measured = (f"K=1: {pct(acc[i1])}; K={fmt_K(K[j])} ({relin} re-linearisations): {pct(acc[j])} "
                f"(Δ {num(100 * delta, 1)} pts)")
    if diverged:
        holds = "no"
    else:
        holds = verdict(abs(delta) < ON_PAR, applicable=noise < ON_PAR)
    return Claim(
        f"{label}: large K ≈ SGD (K = 1)", paper, measured, holds,
        f"|Δ| < {num(100 * ON_PAR, 0)} pts at the last step, neither diverged; decided only when 2 s.e. of Δ "
        f"({num(100 * noise, 1)} pts on {n_test} test images) < {num(100 * ON_PAR, 0)} pts",
    )


@claims_for("fig4")
def fig4_claims(results: Mapping) -> list[Claim]:
    """Fig. 4: large K ≈ SGD without and with BatchNorm; BatchNorm runs diverge more easily."""
    n_test = int(results["n_test"])
    nb, b = results["no_bn"], results["bn"]
    rows = [
        _par_claim(nb, "no BatchNorm", "similar test accuracy (Fig. 4 left)", n_test),
        _par_claim(b, "BatchNorm + augmentation", "similar test accuracy (Fig. 4 right)", n_test),
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
