"""What several experiment modules share: the :class:`Experiment` record, data loaders, the CNN sweep.

Conventions shared by the CIFAR-10 experiments
----------------------------------------------
* Model: the paper's CNN (``iterlin.models.make_model("cnn", key)``), softmax cross-entropy on
  the linearised logits, plain SGD (``optax.sgd``; the paper names no momentum), float32.
* ``seed`` → ``key = PRNGKey(seed)``; ``split(key)`` gives the initialisation key and the batch
  key (:func:`seed_keys`). Every run of a sweep starts from the SAME initialisation and sees the
  SAME batches, so the runs differ only in K (and learning rate).
* Evaluation at ``n_evals + 1`` evenly spaced steps (:func:`eval_points`; step 0 and the last step
  included), on the whole training subset and the test subset, for the network f(θ_t) (``net_*``)
  and the current linear model f_lin_s(θ_t) (``lin_*``).
* A history (see :func:`iterlin.training.train`) has ``step`` (E,), and ``(R, E)`` arrays
  ``n_relin``, ``{net,lin}_{train,test}_{loss,acc}`` over R runs, ``diverged`` (R,) bool and
  ``diverged_step`` (R,) (−1: finite throughout); :func:`sweep` adds ``K`` (R,) float (∞ for
  K = ∞) and ``lr`` (R,). A diverged run is frozen at its last finite parameters and recorded.

Nothing here is about claims or plots: only what computes results (the result cache's code
fingerprint follows exactly the definitions a figure's computation uses, see
:mod:`iterlin.fingerprint`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import numpy as np
import optax

from ..data import Dataset, load_cifar10, quintic
from ..models import make_model
from ..training import fit, init_state, make_step
from ..tree import tree_stack
from ..validate import check_K, check_positive, check_seed

__all__ = [
    "Experiment",
    "load_data",
    "load_with_probe",
    "load_quintic",
    "check_batch",
    "eval_points",
    "seed_keys",
    "checkpoint_path",
    "sweep",
    "cnn_sweep",
    "FROM_CONFIG",
    "early_stopped",
    "index_of_K",
    "rmse",
]


class Experiment(NamedTuple):
    """One notebook's experiment, defined in ``iterlin/experiments/<name>.py``.

    name: the notebook's name (``"fig3"``). scales: ``{"smoke" | "gpu" | "paper": defaults}``.
    load: ``load(config) -> Dataset`` (or a dict of Datasets): the data the computation needs.
    compute: ``compute(config, data, *, checkpoint_dir=None, progress=False) -> results``, a dict
      of NumPy arrays (nested dicts allowed); ``checkpoint_dir`` is a folder unique to the cache key.
    claims: ``claims(results) -> list[Claim]``, the rows of the notebook's claims cell.
    expand: ``{key: rule}`` for :func:`iterlin.config.resolve` (a single value given for a
      list-valued key), e.g. Fig. 5's ``{"n_train": halvings}``.
    module: the defining module's name; the result cache fingerprints the code that ``load`` and
      ``compute`` reach from it.
    """

    name: str
    scales: Mapping[str, Mapping[str, Any]]
    load: Callable
    compute: Callable
    claims: Callable
    module: str
    expand: Mapping[str, Callable] = {}


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


def check_batch(config: Mapping, n: int) -> None:
    """``batch_size <= n`` (the training images loaded), with a message naming batch_size."""
    bs = config.get("batch_size")
    if bs is not None and bs > n:
        raise ValueError(
            f"batch_size={bs} is not allowed: batch_size must be <= n_train={n} (the training "
            "images loaded), or None for full batch"
        )


def load_data(config: Mapping) -> Dataset:
    """CIFAR-10 with ``config["n_train"]`` / ``config["n_test"]`` images (None: all installed)."""
    data = load_cifar10(config.get("n_train"), config.get("n_test"))
    check_batch(config, data.x_train.shape[0])
    return data


def load_with_probe(config: Mapping) -> Dataset:
    """CIFAR-10 as :func:`load_data`, and ``n_probe <= n_train`` checked."""
    data = load_data(config)
    n, p = data.x_train.shape[0], config.get("n_probe")
    if p is not None and p > n:
        raise ValueError(
            f"n_probe={p} is not allowed: n_probe must be <= n_train={n} (the training images loaded), "
            "or None for all of them"
        )
    return data


def load_quintic(config: Mapping) -> Dataset:
    """The 1-d regression of Fig. 9 (:func:`iterlin.data.quintic`), float64 when ``x64``."""
    dtype = np.float64 if config["x64"] else np.float32
    return quintic(config["n_train"], config["n_test"], dtype=dtype)


# ------------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------------


def eval_points(steps: int, n_evals: int) -> list[int]:
    """``n_evals + 1`` evenly spaced steps in [0, steps] (fewer if steps < n_evals), both ends in."""
    return sorted({int(round(i * steps / n_evals)) for i in range(n_evals + 1)})


def seed_keys(seed: int):
    """``(init_key, data_key) = split(PRNGKey(seed))``.

    ``seed``: an integer in [0, 2³² − 1] (:func:`iterlin.validate.check_seed`): exactly the seeds
    that give distinct keys; a larger one would repeat a smaller one's keys, so it is refused.
    """
    seed = check_seed(seed)
    init_key, data_key = jax.random.split(jax.random.PRNGKey(seed))
    return init_key, data_key


def checkpoint_path(checkpoint_dir, name: str) -> Path | None:
    """``<checkpoint_dir>/<name>.npz``, or None when the computation is not checkpointed."""
    return None if checkpoint_dir is None else Path(checkpoint_dir) / f"{name}.npz"


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
    eval_steps: Sequence[int],
    augment: bool = False,
    callback: Callable | None = None,
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
      steps, batch_size (None: full batch), key, eval_data, eval_steps, augment, checkpoint,
        progress, config: as :func:`iterlin.training.fit`.
      callback: ``callback(apply_fn, params0) -> fit callback``, given the stacked θ_0 (R, ...), so
        that trackers measured against θ_0 stay correct after a resume.

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
        eval_data=eval_data, eval_steps=eval_steps, augment=augment,
        callback=None if callback is None else callback(apply_fn, state.params), checkpoint=checkpoint,
        progress=progress, sweep=True, config=dict(config or {}),
    )
    history["K"] = np.asarray([float(k) for k in Ks], np.float64)
    history["lr"] = np.asarray(lrs, np.float64)
    return history


#: Default of :func:`cnn_sweep`'s ``batch_size``: the config's (``None`` there means full batch).
FROM_CONFIG = object()


def cnn_sweep(
    config: Mapping,
    data: Dataset,
    *,
    K: Sequence | None = None,
    lr: float | Sequence[float] | None = None,
    steps: int | None = None,
    batch_size: Any = FROM_CONFIG,
    callback: Callable | None = None,
    eval_steps: Sequence[int] | None = None,
    checkpoint=None,
    progress: bool = False,
) -> dict:
    """The paper's CNN trained for every K in ONE program (:func:`sweep`); return the history.

    ``config`` gives ``seed`` (initialisation and batches), ``n_evals``, ``augment`` (default
    False) and the defaults of ``K`` (list), ``lr``, ``steps`` and ``batch_size``, which the keyword
    arguments override (Fig. 2's mini-batch panel, Fig. 5's extra runs; ``batch_size=None`` is
    full batch, the default :data:`FROM_CONFIG` the config's). ``eval_steps`` defaults to
    :func:`eval_points` of (steps, n_evals). ``callback(apply_fn, params0)`` as :func:`sweep`.
    """
    init_key, data_key = seed_keys(config["seed"])
    model = make_model("cnn", init_key)
    steps = config["steps"] if steps is None else steps
    return sweep(
        model.apply_fn, model.params, (data.x_train, data.y_train),
        K=list(config["K"] if K is None else K), lr=config["lr"] if lr is None else lr, steps=steps,
        batch_size=config["batch_size"] if batch_size is FROM_CONFIG else batch_size, key=data_key,
        eval_data=(data.x_test, data.y_test),
        eval_steps=eval_points(steps, config["n_evals"]) if eval_steps is None else eval_steps,
        augment=bool(config.get("augment", False)), callback=callback, checkpoint=checkpoint,
        progress=progress, config=config,
    )


def index_of_K(K, value: float) -> int:
    """The index of the first run whose period is ``value`` (e.g. 1, or ``K.max()``)."""
    return int(np.flatnonzero(np.asarray(K, np.float64) == float(value))[0])


def early_stopped(history: Mapping, metric: str = "net_test_acc") -> np.ndarray:
    """Optimal early stopping (Fig. 5): the best value of ``metric`` over evaluation points, (R,)."""
    v = np.asarray(history[metric], np.float64)
    return np.nanmax(np.where(np.isfinite(v), v, np.nan), axis=-1) if v.size else v


def rmse(pred, y) -> np.ndarray:
    """Root mean squared error over the last two axes (examples, outputs), in float64."""
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.sqrt(np.mean((pred - y) ** 2, axis=(-2, -1)))
