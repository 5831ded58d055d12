"""Figs. 6 and 7 and the kernel's movement: what the features learn (Sec. 4.1, Sec. 1).

Three experiments, registered with :func:`iterlin.experiments.experiment` (run them with
``iterlin.experiments.run("fig6" | "fig7" | "ntk", scale=...)``). Each trains the paper's CNN on
CIFAR-10 by iterative linearisation (Algorithm 1) for every K of ``config["K"]`` (K = 1, ordinary
SGD, and a large K), in ONE compiled program (:func:`iterlin.training.train_sweep`; every run starts
from the same initialisation and sees the same batches), and records a quantity of the network
f(θ_t) at each evaluation point with a ``callback`` of :func:`iterlin.training.fit`:

* ``"fig6"`` (:func:`fig6`): linear probes (:func:`iterlin.probes.probe_tracker`) on the layer-1
  and layer-2 activations of the CNN (:func:`iterlin.models.cnn_features`): a ridge classifier
  fitted on the features of the first ``n_probe`` training images, scored on the test images.
* ``"fig7"`` (:func:`fig7`): the change of the first-layer filters from initialisation,
  ΔW_t = W_t − W_0 (:func:`iterlin.probes.filter_tracker`), all 50 filters (5 × 5 × 3 each); the
  notebook shows the first three mapped [−0.5, 0.5] → [0, 1]
  (:func:`iterlin.probes.filters_to_image`), and :func:`filter_match` measures how far the large-K
  filters got compared with K = 1's.
* ``"ntk"`` (:func:`ntk`): the empirical NTK Θ̂_θ(X_p, X_p) = ϕϕᵀ (Eq. 2) on ``n_probe`` fixed training
  images (:func:`iterlin.ntk.kernel_tracker`): the kernel distance of the network's kernel from
  its initial value, its velocity, and the change of the linear model's kernel Θ̂_{θ_s} made by the
  re-linearisations between evaluation points (evaluated at every re-linearisation of the large K,
  :func:`iterlin.ntk.relinearisation_steps`, so each is seen alone). Between re-linearisations
  θ_s, hence the linear model's kernel, does not change at all: that distance is exactly 0.

Shared conventions (as :mod:`iterlin.experiments`): softmax cross-entropy on the linearised logits,
plain SGD at ``lr`` (one rate for every K), float32, ``seed`` → ``split(PRNGKey(seed))`` = (init
key, batch key), evaluation at ``eval_points(steps, n_evals)`` (plus the re-linearisations for
``"ntk"``), optional ``augment`` (random flips and 4-pixel crops). A run that diverges (NaN loss) is
frozen at its last finite state and recorded (``diverged``, ``diverged_step``); its trackers keep
reporting the frozen state. Checkpoints resume: the trackers take θ_0 explicitly (``params0``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import numpy as np
import optax

from .claims import Claim, fmt_K, num, pct, verdict
from .data import Dataset
from .experiments import claims_for, divergence_claim, eval_points, experiment, load_data
from .models import cnn_features, make_model
from .ntk import kernel_tracker, relinearisation_steps
from .probes import filter_tracker, probe_tracker
from .training import train_sweep
from .tree import tree_stack

__all__ = [
    "cnn_sweep",
    "filter_match",
    "probe_summary",
    "relin_kernel_changes",
    "ntk_eval_steps",
    "fig6",
    "fig7",
    "ntk",
    "fig6_claims",
    "fig7_claims",
    "ntk_claims",
]

#: The probed layers of Fig. 6 (keys of :func:`iterlin.models.cnn_features`).
PROBE_LAYERS = ("layer1", "layer2")


def _ckpt(checkpoint_dir, name: str):
    return None if checkpoint_dir is None else Path(checkpoint_dir) / f"{name}.npz"


def _large(Ks) -> int:
    """Index of the largest K (the run compared with K = 1)."""
    Ks = np.asarray(Ks, np.float64)
    return int(np.flatnonzero(Ks == Ks.max())[0])


def _one(Ks) -> int:
    return int(np.flatnonzero(np.asarray(Ks, np.float64) == 1)[0])


def _only_k1(name: str, history: Mapping) -> list[Claim] | None:
    """The claims rows when no K > 1 was run (nothing to compare), else None."""
    if np.asarray(history["K"], np.float64).max() > 1:
        return None
    return [Claim(f"{name}: large K against K = 1", "see the notebook", "only K = 1 was run", verdict(None),
                  "needs a run with K > 1"), divergence_claim({"runs": history})]


def _load_with_probe(config: Mapping) -> Dataset:
    """CIFAR-10 as :func:`iterlin.experiments.load_data`, and ``n_probe <= n_train`` checked."""
    data = load_data(config)
    n, p = data.x_train.shape[0], config.get("n_probe")
    if p is not None and p > n:
        raise ValueError(
            f"n_probe={p} is not allowed: n_probe must be <= n_train={n} (the training images loaded), "
            "or None for all of them"
        )
    return data


def cnn_sweep(
    config: Mapping,
    data: Dataset,
    *,
    callback: Callable[[Callable, Any], Callable] | None = None,
    eval_steps=None,
    checkpoint=None,
    progress: bool = False,
) -> dict:
    """Train the CNN for every K of ``config["K"]`` in one program; return the history.

    Args:
      config: resolved config with ``K`` (list), ``lr``, ``steps``, ``batch_size``, ``seed``,
        ``n_evals`` and optionally ``augment``.
      data: the CIFAR-10 :class:`~iterlin.data.Dataset`.
      callback: ``callback(apply_fn, params0) -> fit callback``, given the CNN's ``apply_fn`` and the
        stacked initial parameters θ_0 (R, ...), so that trackers are correct after a resume from
        ``checkpoint``.
      eval_steps: evaluation steps (default ``eval_points(steps, n_evals)``; 0 and T always added).
      checkpoint, progress: as :func:`iterlin.training.fit`.

    Returns:
      The :func:`iterlin.training.train_sweep` history ((R, E) arrays, ``step`` (E,), the callback's
      values) with ``K`` (R,) float (∞ as ``inf``) and ``lr`` (R,) added.
    """
    init_key, data_key = jax.random.split(jax.random.PRNGKey(config["seed"]))
    model = make_model("cnn", init_key)
    Ks = list(config["K"])
    params0 = tree_stack([model.params] * len(Ks))
    if eval_steps is None:
        eval_steps = eval_points(config["steps"], config["n_evals"])
    _, history = train_sweep(
        model.apply_fn, params0, (data.x_train, data.y_train), K=Ks, steps=config["steps"],
        optimizer=optax.sgd(config["lr"]), loss="ce", batch_size=config["batch_size"], key=data_key,
        eval_data=(data.x_test, data.y_test), eval_steps=eval_steps, augment=bool(config.get("augment", False)),
        callback=None if callback is None else callback(model.apply_fn, params0), checkpoint=checkpoint, progress=progress,
        config=dict(config),
    )
    history["K"] = np.asarray([float(k) for k in Ks], np.float64)
    history["lr"] = np.full(len(Ks), float(config["lr"]))
    return history


# ------------------------------------------------------------------------------------------------
# Fig. 6: linear probes
# ------------------------------------------------------------------------------------------------


@experiment("fig6", load=_load_with_probe)
def fig6(config: Mapping, data: Dataset | None = None, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Fig. 6: linear-probe test accuracy of layer-1 and layer-2 features over training.

    Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
    ``augment``, ``n_train``, ``n_test``, ``n_probe`` (training images the probes are fitted on, the
    first ones; None: all), ``seed``, ``n_evals``.

    Results: ``"runs"``: the :func:`cnn_sweep` history with, besides the usual keys,
    ``probe_{layer1,layer2}_{train,test}_acc`` and ``probe_{layer}_lam`` (the chosen ridge penalty),
    each (R, E); ``"n_probe"``, ``"n_test"``: the numbers of images fitted and scored.
    """
    data = _load_with_probe(config) if data is None else data
    n = data.x_train.shape[0] if config.get("n_probe") is None else config["n_probe"]
    probe_train = (data.x_train[:n], data.y_train[:n])
    tracker = probe_tracker(cnn_features, probe_train, (data.x_test, data.y_test), layers=PROBE_LAYERS,
                            seed=config["seed"])
    runs = cnn_sweep(config, data, callback=lambda f, p0: tracker, checkpoint=_ckpt(checkpoint_dir, "runs"),
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


def _noise(p: float, n: int) -> float:
    """Two standard errors of an accuracy p measured on n images (binomial)."""
    p = min(max(float(p), 0.05), 0.95)
    return 2.0 * math.sqrt(p * (1.0 - p) / max(int(n), 1))


@claims_for("fig6")
def fig6_claims(results: Mapping) -> list[Claim]:
    """Fig. 6: large-K features improve slower and level off lower, per layer; divergence."""
    h = results["runs"]
    if (rows := _only_k1("fig6", h)) is not None:
        return rows
    K = np.asarray(h["K"])
    i1, j = _one(K), _large(K)
    n_test = int(results["n_test"])
    rows = []
    for layer in PROBE_LAYERS:
        s = probe_summary(h, layer)
        noise = _noise(s["initial"][i1], n_test)
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


# ------------------------------------------------------------------------------------------------
# Fig. 7: first-layer filters
# ------------------------------------------------------------------------------------------------


@experiment("fig7")
def fig7(config: Mapping, data: Dataset | None = None, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Fig. 7: the change of the first-layer filters from initialisation over training.

    Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
    ``augment``, ``n_train``, ``n_test``, ``seed``, ``n_evals`` (the columns of the figure).

    Results: ``"runs"``: the :func:`cnn_sweep` history with ``filters_delta`` (R, E, 5, 5, 3, 50):
    W_t − W_0 of the 50 first-layer filters at each evaluation point; ``"match"``:
    :func:`filter_match` of it.
    """
    data = load_data(config) if data is None else data
    runs = cnn_sweep(config, data, callback=lambda f, p0: filter_tracker(n=50, params0=p0),
                     checkpoint=_ckpt(checkpoint_dir, "runs"), progress=progress)
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
    i1, j = _one(K), _large(K)
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


@claims_for("fig7")
def fig7_claims(results: Mapping) -> list[Claim]:
    """Fig. 7: large-K filters evolve slower; its final filters ≈ K = 1's at ~10 % of training."""
    h, m = results["runs"], results["match"]
    if (rows := _only_k1("fig7", h)) is not None:
        return rows
    K = np.asarray(h["K"])
    j = _large(K)
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


# ------------------------------------------------------------------------------------------------
# The empirical NTK over training
# ------------------------------------------------------------------------------------------------


def ntk_eval_steps(config: Mapping, max_points: int = 50) -> list[int]:
    """``eval_points(steps, n_evals)`` and every re-linearisation of every finite K > 1 (at most
    ``max_points`` per K, :func:`iterlin.ntk.relinearisation_steps`)."""
    pts = set(eval_points(config["steps"], config["n_evals"]))
    for k in config["K"]:
        if k > 1 and math.isfinite(k):
            pts |= set(relinearisation_steps(k, config["steps"], max_points=max_points))
    return sorted(pts)


@experiment("ntk", load=_load_with_probe)
def ntk(config: Mapping, data: Dataset | None = None, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """The empirical NTK on a fixed probe set over training, K = 1 vs a large K.

    Config keys: ``K`` (list: 1 and the large period), ``lr``, ``steps``, ``batch_size``,
    ``n_train``, ``n_test``, ``n_probe`` (the first n_probe training images; kernels are
    (10·n_probe)²), ``seed``, ``n_evals``.

    Results: ``"runs"``: the :func:`cnn_sweep` history, evaluated at :func:`ntk_eval_steps`, with
    (R, E) arrays ``kernel_distance_init`` (d(Θ_t, Θ_0) of the network's kernel),
    ``kernel_velocity`` (d(Θ_t, Θ_prev)/Δt; NaN at step 0) and ``kernel_distance_relin`` (the change
    of the linear model's kernel Θ_s since the previous evaluation point; exactly 0 when θ_s did not
    change), d the kernel distance of Fort et al. (:func:`iterlin.ntk.kernel_distance`);
    ``"n_probe"``.
    """
    data = _load_with_probe(config) if data is None else data
    n = data.x_train.shape[0] if config.get("n_probe") is None else config["n_probe"]
    x_probe = data.x_train[:n]
    runs = cnn_sweep(config, data, callback=lambda f, p0: kernel_tracker(f, x_probe, params0=p0),
                     eval_steps=ntk_eval_steps(config), checkpoint=_ckpt(checkpoint_dir, "runs"),
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


@claims_for("ntk")
def ntk_claims(results: Mapping) -> list[Claim]:
    """The kernel moves under SGD; it is exactly fixed between re-linearisations; each moves it."""
    h = results["runs"]
    if (rows := _only_k1("ntk", h)) is not None:
        return rows
    K = np.asarray(h["K"])
    i1, j = _one(K), _large(K)
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
