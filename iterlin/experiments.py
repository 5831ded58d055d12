"""The paper's experiments as functions: ``config -> results``, and ``run`` that caches them.

A notebook resolves its parameters, makes ONE call per experiment, plots, and prints the claims::

    from iterlin.config import resolve
    from iterlin.experiments import claims, run

    config = resolve("fig3", scale, K=K, lr=lr, steps=steps, seed=seed, n_train=n_train,
                     n_test=n_test, batch_size=batch_size)   # every parameter checked here
    results = run(config)                                      # or run("fig3", scale, K=..., ...)
    ...                                                        # plots from results["runs"]
    print(claims(results))                                     # the final claims cell

:func:`run` = :func:`iterlin.config.resolve` (validate every parameter, before anything else) →
the experiment's data loader (``n_train`` larger than what is installed fails here, with a
message naming it) → :func:`iterlin.cache.cached` (keyed by config, iterlin code and data
fingerprint; an interrupted run resumes from its checkpoints) → the results, a dict of NumPy
arrays (nested dicts allowed) with the resolved ``config`` attached under ``"config"``.
:func:`claims` builds the experiment's :class:`iterlin.claims.Claim` rows, saves them as JSON for
the book and returns the fixed-width table.

Each experiment is registered in :data:`EXPERIMENTS` as ``Experiment(compute, load, claims)``:

* ``load(config) -> Dataset`` (or a dict of them) reads the data the computation needs
  (default :func:`load_data`: ``iterlin.data.load_cifar10(n_train, n_test)``);
* ``compute(config, data, *, checkpoint_dir=None, progress=False) -> results`` is the pure
  computation; ``checkpoint_dir`` (a folder unique to this cache key, or None) holds training
  checkpoints; ``progress`` shows a progress bar (on stderr);
* ``claims(results) -> list[Claim]`` the rows of the notebook's claims cell (registered with
  ``@claims_for(name)``); each row states its rule, and a diverged run is reported
  (:func:`divergence_claim`).

To add one (e.g. for another figure): write ``def figN(config, data=None, *, checkpoint_dir=None,
progress=False)``, decorate it with ``@experiment("figN")`` (optionally ``load=...``), write
``@claims_for("figN") def figN_claims(results)``, add its defaults to
:data:`iterlin.config.SCALES`, and document its config and results keys in its docstring, as
below. Use :func:`sweep` to train several runs (values of K and learning rates)
in one compiled program.

Conventions shared by every experiment here
-------------------------------------------
* Model: the paper's CNN (``iterlin.models.make_model("cnn", key)``), softmax cross-entropy on
  the linearised logits, plain SGD (``optax.sgd``; the paper names no momentum), float32.
* ``seed`` → ``key = PRNGKey(seed)``; ``split(key)`` gives the initialisation key and the batch
  key. Every run of a sweep starts from the SAME initialisation and sees the SAME batches, so
  the runs differ only in K (and learning rate).
* Evaluation at ``n_evals + 1`` evenly spaced steps (step 0 and the last step included), on the
  whole training subset and the test subset, for the network f(θ_t) (``net_*``) and the current
  linear model f_lin_s(θ_t) (``lin_*``).
* A history (see :func:`iterlin.training.train`) has ``step`` (E,), and ``(R, E)`` arrays
  ``n_relin``, ``{net,lin}_{train,test}_{loss,acc}`` over R runs, ``diverged`` (R,) bool and
  ``diverged_step`` (R,) (−1: finite throughout); :func:`sweep` adds ``K`` (R,) float (∞ for
  K = ∞) and ``lr`` (R,). A diverged run is frozen at its last finite parameters and recorded.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import numpy as np
import optax

from .cache import cached
from .claims import Claim, fmt_K, num, pct, publish_claims, verdict
from .config import describe, resolve, revalidate
from .data import Dataset, load_cifar10
from .models import make_model
from .training import fit, init_state, make_step
from .tree import tree_stack
from .validate import check_choice, check_K, check_positive

__all__ = [
    "Experiment",
    "EXPERIMENTS",
    "experiment",
    "claims_for",
    "run",
    "claims",
    "fig2_claims",
    "fig3_claims",
    "fig5_claims",
    "divergence_claim",
    "fig5_runs",
    "load_data",
    "data_fingerprint",
    "sweep",
    "eval_points",
    "early_stopped",
    "fig2",
    "fig3",
    "fig5",
]


class Experiment(NamedTuple):
    """A registered experiment.

    compute: ``compute(config, data, *, checkpoint_dir, progress) -> results``.
    load: ``load(config) -> Dataset`` (or a dict of Datasets).
    claims: ``claims(results) -> list[Claim]`` (the notebook's claims cell), or None.
    """

    compute: Callable
    load: Callable
    claims: Callable | None = None


#: Registered experiments by name (see :func:`experiment`).
EXPERIMENTS: dict[str, Experiment] = {}


def load_data(config: Mapping) -> Dataset:
    """CIFAR-10 with ``config["n_train"]`` / ``config["n_test"]`` images (None: all installed).

    Checks ``batch_size <= n_train`` once the number of images is known.
    """
    data = load_cifar10(config.get("n_train"), config.get("n_test"))
    _check_batch(config, data.x_train.shape[0])
    return data


def _check_batch(config: Mapping, n: int) -> None:
    bs = config.get("batch_size")
    if bs is not None and bs > n:
        raise ValueError(
            f"batch_size={bs} is not allowed: batch_size must be <= n_train={n} (the training "
            "images loaded), or None for full batch"
        )


def experiment(name: str, load: Callable = load_data) -> Callable:
    """Decorator registering ``compute`` under ``name`` in :data:`EXPERIMENTS`."""

    def register(compute: Callable) -> Callable:
        EXPERIMENTS[name] = Experiment(compute, load)
        return compute

    return register


def claims_for(name: str) -> Callable:
    """Decorator registering ``claims(results) -> list[Claim]`` for experiment ``name``."""

    def register(fn: Callable) -> Callable:
        EXPERIMENTS[name] = EXPERIMENTS[name]._replace(claims=fn)
        return fn

    return register


def data_fingerprint(data: Any) -> str:
    """sha256 of a Dataset's fingerprint, or of a dict/list of Datasets' fingerprints."""
    if isinstance(data, Dataset):
        return data.fingerprint
    h = hashlib.sha256()
    items = sorted(data.items()) if isinstance(data, Mapping) else enumerate(data)
    for k, d in items:
        h.update(f"{k}:{data_fingerprint(d)};".encode())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------
# Shared machinery
# ------------------------------------------------------------------------------------------------


def eval_points(steps: int, n_evals: int) -> list[int]:
    """``n_evals + 1`` evenly spaced steps in [0, steps] (fewer if steps < n_evals), both ends in."""
    return sorted({int(round(i * steps / n_evals)) for i in range(n_evals + 1)})


def sweep(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    K: Sequence,
    lr: float | Sequence[float],
    steps: int,
    batch_size: int | None = None,
    key=None,
    eval_data: tuple | None = None,
    n_evals: int = 10,
    augment: bool = False,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = False,
    config: Mapping | None = None,
) -> dict:
    """R runs of iterative linearisation with SGD, one ``(K[i], lr[i])`` each, in ONE program.

    Like :func:`iterlin.training.train_sweep`, but the learning rate may differ per run: the
    optimizer is ``optax.inject_hyperparams(optax.sgd)``, whose learning rate lives in each run's
    optimizer state, so runs with different K and η are vmapped together (one compilation).
    Every run starts from ``params`` (not stacked) and sees the same batches.

    Args:
      K: R periods (int ≥ 1, integral float, or ``math.inf``). lr: one rate or R rates (> 0).
      steps, batch_size (None: full batch), key, eval_data, augment, checkpoint, progress, config:
        as :func:`iterlin.training.fit`. n_evals: evaluation at :func:`eval_points`.

    Returns:
      The history (module docstring) with ``K`` (R,) float64 and ``lr`` (R,) float64 added.
    """
    if isinstance(K, (str, bytes)) or not isinstance(K, Sequence) or len(K) == 0:
        raise ValueError(f"K={K!r} is not allowed: K must be a non-empty sequence of periods, one per run")
    Ks = [check_K(k, f"K[{i}]") for i, k in enumerate(K)]
    lrs = list(lr) if isinstance(lr, Sequence) and not isinstance(lr, str) else [lr] * len(Ks)
    if len(lrs) != len(Ks):
        raise ValueError(f"lr={lr!r} is not allowed: lr must be one rate or {len(Ks)} rates (one per K)")
    lrs = [check_positive(v, f"lr[{i}]") for i, v in enumerate(lrs)]
    optimizer = optax.inject_hyperparams(optax.sgd)(learning_rate=lrs[0])
    states = []
    for k, eta in zip(Ks, lrs):
        st = init_state(params, optimizer, k)
        opt_state = optax.inject_hyperparams(optax.sgd)(learning_rate=eta).init(params)
        states.append(st._replace(opt_state=opt_state))
    state = tree_stack(states)
    step_fn = make_step(apply_fn, optimizer, "ce")
    _, history = fit(
        step_fn, state, apply_fn, data, steps=steps, loss="ce", batch_size=batch_size, key=key,
        eval_data=eval_data, eval_steps=eval_points(steps, n_evals), augment=augment,
        checkpoint=checkpoint, progress=progress, sweep=True, config=dict(config or {}),
    )
    history["K"] = np.asarray([float(k) for k in Ks], np.float64)
    history["lr"] = np.asarray(lrs, np.float64)
    return history


def early_stopped(history: Mapping, metric: str = "net_test_acc") -> np.ndarray:
    """Optimal early stopping (Fig. 5): the best value of ``metric`` over evaluation points, (R,)."""
    v = np.asarray(history[metric], np.float64)
    return np.nanmax(np.where(np.isfinite(v), v, np.nan), axis=-1) if v.size else v


def _keys(seed: int):
    init_key, data_key = jax.random.split(jax.random.PRNGKey(seed))
    return init_key, data_key


def _ckpt(checkpoint_dir, name: str):
    return None if checkpoint_dir is None else Path(checkpoint_dir) / f"{name}.npz"


def _cnn(seed: int):
    init_key, data_key = _keys(seed)
    return make_model("cnn", init_key), data_key


# ------------------------------------------------------------------------------------------------
# Fig. 2: K sweep, full batch and mini-batch
# ------------------------------------------------------------------------------------------------


@experiment("fig2")
def fig2(config: Mapping, data: Dataset | None = None, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Fig. 2: test accuracy vs steps for several K, full batch (left) and mini-batch (centre).

    Config keys: ``K`` (list, full-batch periods), ``lr`` (full-batch rate), ``steps`` (full-batch
    steps), ``factor`` (the mini-batch runs use lr / factor, K × factor and steps × factor; the
    paper: 10), ``batch_size`` (mini-batch size of the centre panel), ``n_train``, ``n_test``,
    ``seed``, ``n_evals``.

    Results: ``"full"`` and ``"mini"``, each a :func:`sweep` history (``K`` holds that panel's
    periods). For the right panel plot ``mini`` against ``step / factor``.
    """
    data = load_data(config) if data is None else data
    model, key = _cnn(config["seed"])
    train, test = (data.x_train, data.y_train), (data.x_test, data.y_test)
    f = config["factor"]
    common = dict(key=key, eval_data=test, n_evals=config["n_evals"], progress=progress, config=config)
    full = sweep(model.apply_fn, model.params, train, K=config["K"], lr=config["lr"], steps=config["steps"],
                 batch_size=None, checkpoint=_ckpt(checkpoint_dir, "full"), **common)
    mini = sweep(model.apply_fn, model.params, train, K=[k if k == 1 else k * f for k in config["K"]], lr=config["lr"] / f,
                 steps=config["steps"] * f, batch_size=config["batch_size"],
                 checkpoint=_ckpt(checkpoint_dir, "mini"), **common)
    return {"full": full, "mini": mini}


# ------------------------------------------------------------------------------------------------
# Fig. 3: SGD + augmentation, K = 1 vs large K
# ------------------------------------------------------------------------------------------------


@experiment("fig3")
def fig3(config: Mapping, data: Dataset | None = None, *, checkpoint_dir=None, progress: bool = False) -> dict:
    """Fig. 3: mini-batch SGD with data augmentation, K = 1 vs a large K.

    Config keys: ``K`` (list; 1 and the large period), ``lr``, ``steps``, ``batch_size``,
    ``augment`` (random flips and 4-pixel crops, on device), ``n_train``, ``n_test``, ``seed``,
    ``n_evals``.

    Results: ``"runs"``: a :func:`sweep` history. The paper's curves are ``net_test_acc`` for every
    K and ``lin_test_acc`` (the linear model being trained) for the large K.
    """
    data = load_data(config) if data is None else data
    model, key = _cnn(config["seed"])
    runs = sweep(model.apply_fn, model.params, (data.x_train, data.y_train), K=config["K"], lr=config["lr"],
                 steps=config["steps"], batch_size=config["batch_size"], key=key,
                 eval_data=(data.x_test, data.y_test), n_evals=config["n_evals"], augment=config["augment"],
                 checkpoint=_ckpt(checkpoint_dir, "runs"), progress=progress, config=config)
    return {"runs": runs}


# ------------------------------------------------------------------------------------------------
# Fig. 5: data scaling with optimal early stopping
# ------------------------------------------------------------------------------------------------


def _fig5_load(config: Mapping) -> dict:
    sizes = config["n_train"]
    out = {}
    for n in sizes:
        d = load_cifar10(n, config["n_test"])
        out[str(d.x_train.shape[0])] = d
    smallest = min(d.x_train.shape[0] for d in out.values())
    _check_batch(config, smallest)
    return out


def fig5_runs(config: Mapping) -> list[tuple[float, float]]:
    """The (K, lr) pairs of Fig. 5: every K at ``lr``, then K = ∞ and a K = 1 control at ``lr_inf``.

    Duplicates (e.g. when ``lr_inf == lr``) are run once.
    """
    pairs = [(float(k), config["lr"]) for k in config["K"]] + [(math.inf, config["lr_inf"]), (1.0, config["lr_inf"])]
    out = []
    for p in pairs:
        if p not in out:
            out.append(p)
    return out


@experiment("fig5", load=_fig5_load)
def fig5(config: Mapping, data: Mapping[str, Dataset] | None = None, *, checkpoint_dir=None,
         progress: bool = False) -> dict:
    """Fig. 5: optimally early-stopped test accuracy vs training-set size, for several K.

    Config keys: ``n_train`` (list of training-set sizes; None: all installed), ``K`` (list of
    periods trained at ``lr``), ``lr``, ``lr_inf`` (the rate of the K = ∞ run and of its K = 1
    control; the paper: 1e-3 against 1e-5), ``steps`` (per run, enough to fit the training set),
    ``batch_size`` (None: full batch), ``n_test``, ``seed``, ``n_evals``.

    Results: ``n_train`` (S,) sizes; ``K`` (R,) and ``lr`` (R,) of the runs (:func:`fig5_runs`);
    ``best_test_acc`` (S, R): the maximum network test accuracy over evaluation points ("optimal
    early stopping"); ``final_train_acc`` (S, R); ``diverged`` (S, R); and ``"histories"``: the
    :func:`sweep` history of each size, keyed by the size as a string.
    """
    data = _fig5_load(config) if data is None else data
    model, key = _cnn(config["seed"])
    pairs = fig5_runs(config)
    Ks, lrs = [k for k, _ in pairs], [lr for _, lr in pairs]
    sizes = sorted(data, key=int)
    histories = {}
    for n in sizes:
        d = data[n]
        histories[n] = sweep(model.apply_fn, model.params, (d.x_train, d.y_train), K=Ks, lr=lrs,
                             steps=config["steps"], batch_size=config["batch_size"], key=key,
                             eval_data=(d.x_test, d.y_test), n_evals=config["n_evals"],
                             checkpoint=_ckpt(checkpoint_dir, f"n{n}"), progress=progress, config=config)
    return {
        "n_train": np.asarray([int(n) for n in sizes]),
        "K": np.asarray(Ks, np.float64),
        "lr": np.asarray(lrs, np.float64),
        "best_test_acc": np.stack([early_stopped(histories[n]) for n in sizes]),
        "final_train_acc": np.stack([np.asarray(histories[n]["net_train_acc"])[:, -1] for n in sizes]),
        "diverged": np.stack([np.asarray(histories[n]["diverged"]) for n in sizes]),
        "histories": histories,
    }


# ------------------------------------------------------------------------------------------------
# Claims: the rows of each notebook's final cell
# ------------------------------------------------------------------------------------------------

#: |Δ| (fraction of test accuracy) below which two runs count as "on par" where the paper gives no
#: number (Fig. 2, Fig. 5); Fig. 3 uses the paper's own "under 1 point".
ON_PAR = 0.02


def _final(history: Mapping, metric: str = "net_test_acc") -> np.ndarray:
    return np.asarray(history[metric], np.float64)[:, -1]


def _run_label(history: Mapping, i: int) -> str:
    return f"K={fmt_K(history['K'][i])}"


def divergence_claim(histories: Mapping[str, Mapping]) -> Claim:
    """The row reporting every diverged run (NaN loss) of the given histories, by panel name."""
    bad = []
    for panel, h in histories.items():
        div, at = np.atleast_1d(h["diverged"]), np.atleast_1d(h["diverged_step"])
        for i in np.flatnonzero(div):
            where = f"{panel}: " if len(histories) > 1 else ""
            lr = f", lr={num(h['lr'][i], 4).rstrip('0').rstrip('.')}" if "lr" in h else ""
            bad.append(f"{where}{_run_label(h, i)}{lr} at step {int(at[i])}")
    return Claim(
        "every run stays finite (no NaN loss)", "no divergence reported",
        "none diverged" if not bad else "diverged: " + "; ".join(bad),
        verdict(not bad), "a diverged run is frozen at its last finite state and plotted with a cross",
    )


def _on_par_claim(claim: str, paper: str, h: Mapping, tol: float = ON_PAR, rule_paper: str = "") -> Claim:
    """Compare K = 1 with the largest finite K > 1 of a sweep history, at the last evaluation."""
    K = np.asarray(h["K"])
    acc = _final(h)
    i1 = int(np.flatnonzero(K == 1)[0])
    large = [i for i in np.flatnonzero((K > 1) & np.isfinite(K))]
    if not large:
        return Claim(claim, paper, f"K=1: {pct(acc[i1])} (no finite K > 1 run)", verdict(None), "needs a finite K > 1")
    j = int(large[-1])
    relin = int(np.asarray(h["n_relin"])[j, -1])
    delta = acc[j] - acc[i1]
    diverged = bool(np.asarray(h["diverged"])[j]) or bool(np.asarray(h["diverged"])[i1])
    measured = (
        f"K=1: {pct(acc[i1])}; K={fmt_K(K[j])} ({relin} re-linearisations): {pct(acc[j])} "
        f"(Δ {num(100 * delta, 1)} pts)"
    )
    rule = rule_paper or f"|Δ| < {num(100 * tol, 0)} points at the last step, neither run diverged"
    return Claim(claim, paper, measured, verdict(abs(delta) < tol and not diverged), rule)


@claims_for("fig2")
def fig2_claims(results: Mapping) -> list[Claim]:
    """Fig. 2: large K on par with K = 1, full batch and mini-batch; divergence."""
    return [
        _on_par_claim("full batch: large K performs on par with K = 1", "on par (Fig. 2 left)", results["full"]),
        _on_par_claim("mini-batch: large K performs on par with K = 1", "on par (Fig. 2 centre)", results["mini"]),
        divergence_claim({"full batch": results["full"], "mini-batch": results["mini"]}),
    ]


@claims_for("fig3")
def fig3_claims(results: Mapping) -> list[Claim]:
    """Fig. 3: |Δ| < 1 point between K = 1 and large K; 82.3 % at paper scale; 8–12 updates."""
    h = results["runs"]
    config = results.get("config", {})
    K, acc = np.asarray(h["K"]), _final(h)
    gap = _on_par_claim(
        "SGD + augmentation: large K ends under 1 point from K = 1", "82.3 % vs 81.4 % (Δ 0.9 pts)", h,
        tol=0.01, rule_paper="|Δ| < 1 point at the last step (the paper's), neither run diverged",
    )
    i1 = int(np.flatnonzero(K == 1)[0])
    at_paper = config.get("scale") == "paper"
    top = Claim(
        "K = 1 reaches 82.3 % test accuracy", "82.3 %", pct(acc[i1]),
        verdict(abs(acc[i1] - 0.823) <= 0.02, applicable=at_paper),
        "|Δ| ≤ 2 points; judged only at scale 'paper' (fewer images and steps here)",
    )
    j = int(np.flatnonzero(K == K.max())[0])
    relin = int(np.asarray(h["n_relin"])[j, -1])
    few = Claim(
        "8-12 feature updates suffice to match K = 1", "8-12 re-linearisations",
        f"{relin} re-linearisations (K={fmt_K(K[j])})",
        verdict(gap.holds == "yes" and relin <= 12) if gap.holds != "n/a at this scale" else gap.holds,
        "≤ 12 re-linearisations and the row above holds",
    )
    return [gap, top, few, divergence_claim({"runs": h})]


def _gain(best: np.ndarray) -> np.ndarray:
    """Early-stopped accuracy gain from the smallest to the largest training set, per run."""
    return best[-1] - best[0]


@claims_for("fig5")
def fig5_claims(results: Mapping) -> list[Claim]:
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


def claims(results: Mapping, *, directory=None) -> str:
    """The notebook's claims cell: build the rows, save them (JSON) and return the table.

    ``results`` as returned by :func:`run` (its ``config`` names the experiment and the scale).
    See :func:`iterlin.claims.publish_claims` for where the JSON goes.
    """
    config = results["config"]
    name = config["experiment"]
    fn = EXPERIMENTS[name].claims
    if fn is None:
        raise ValueError(f"experiment {name!r} has no claims function: register one with @claims_for({name!r})")
    return publish_claims(name, fn(results), scale=config["scale"], directory=directory)


# ------------------------------------------------------------------------------------------------
# The one call a notebook makes
# ------------------------------------------------------------------------------------------------


def run(experiment: str | Mapping, scale: str = "smoke", *, progress: bool = True, cache_dir=None,
        verbose: bool = True, **overrides: Any) -> dict:
    """Resolve, validate, load, compute (or load from the cache) and return an experiment's results.

    Args:
      experiment: a registered experiment name (``"fig2"``, ``"fig3"``, ``"fig5"``, ...), or a
        config from :func:`iterlin.config.resolve` (then ``scale`` and ``overrides`` must not be
        given; the config is validated again).
      scale: ``"smoke"`` (default), ``"gpu"`` or ``"paper"`` (see :mod:`iterlin.config`).
      progress: progress bars on stderr while training.
      cache_dir: default :func:`iterlin.cache.default_cache_dir`.
      verbose: print the resolved config and whether the results were computed or loaded.
      **overrides: the experiment's knobs (``K``, ``lr``, ``steps``, ``seed``, ``n_train``,
        ``n_test``, ``batch_size``, ...); ``None`` means the scale's default.

    Returns:
      The experiment's results (NumPy arrays, nested dicts) with ``"config"``: the resolved config.

    Raises:
      ValueError naming the offending parameter before any compute (see :func:`iterlin.config.resolve`).
    """
    if isinstance(experiment, Mapping):
        if overrides:
            raise ValueError(f"pass either a config or overrides, not both (got {sorted(overrides)})")
        config = revalidate(experiment)
    else:
        check_choice(experiment, "experiment", tuple(EXPERIMENTS))
        config = resolve(experiment, scale, **overrides)
    name = config["experiment"]
    check_choice(name, "experiment", tuple(EXPERIMENTS))
    exp = EXPERIMENTS[name]
    data = exp.load(config)
    if verbose:
        print(f"{name} ({config['scale']}): {describe({k: v for k, v in config.items() if k not in ('experiment', 'scale')})}")
    results = cached(
        name,
        lambda ckpt: exp.compute(config, data, checkpoint_dir=ckpt, progress=progress),
        config,
        data_fingerprint=data_fingerprint(data),
        cache_dir=cache_dir,
        verbose=verbose,
    )
    results["config"] = config
    return results


from . import second_order_experiments  # noqa: E402,F401  registers fig1, fig8, fig9
from . import feature_experiments  # noqa: E402,F401  registers fig6, fig7, ntk
from . import resnet_experiments  # noqa: E402,F401  registers fig4
