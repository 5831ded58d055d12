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
  ``diverged_step`` (R,) (−1: finite throughout); :func:`sweep` returns it in a :class:`Sweep`
  with ``K`` (R,) float (∞ for K = ∞), ``lr`` (R,) and ``seed_index`` (R,). A diverged run is
  frozen at its last finite parameters and recorded.

Nothing here is about claims or plots: only what computes results (the result cache's code
fingerprint follows exactly the definitions a figure's computation uses, see
:mod:`iterlin.repro.fingerprint`).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import os
import typing
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import numpy as np
import optax

from ..columns import FlatColumns
from ..repro.config import (
    Evals, Every, ExperimentConfig, Flag, Images, Period, PowerIterations, Rate, RunCount, Seed,
    SharpnessImages, Steps, TestImages, resolve,
)
from ..data import Dataset, load_cifar10, quintic
from ..linearise import linearised_apply
from ..models import make_model
from ..relin import RelinPolicy
from ..analysis.stability import sharpness_recorder
from ..training import History, callback_carry, restore_callback, train_sweep
from ..tree import tree_stack
from ..repro.stats import runs_of
from ..validate import check_seed

__all__ = [
    "Experiment",
    "stored",
    "SweepConfig",
    "Seeds",
    "Sharpness",
    "network_correct",
    "load_data",
    "load_quintic",
    "check_batch",
    "eval_points",
    "seed_keys",
    "checkpoint_path",
    "sweep",
    "Sweep",
    "final_correct",
    "seeds",
    "cnn_sweep",
    "FROM_CONFIG",
    "early_stopped",
    "trained_final",
    "KGrid",
    "k_grid",
    "index_of_K",
    "rmse",
    "check_sharpness",
    "sharpness_callback",
    "merge_callbacks",
    "WindowScores",
    "STABLE",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Seeds(ExperimentConfig):
    """The knob group of every CIFAR-10 training experiment (a base of its ``Config``; its knobs
    follow the experiment's own): ``seed``/``n_seeds`` (the runs of seeds seed, …, seed + n_seeds − 1)
    and the evaluation schedule ``n_evals``, ``n_eval_train`` (None: every training image)."""

    seed: Seed
    n_seeds: RunCount
    n_evals: Evals
    n_eval_train: Images | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sharpness(ExperimentConfig):
    """The knob group of the sharpness record (:func:`sharpness_callback`): λ_max on the first
    ``n_sharpness`` training images, ``sharpness_iters`` power iterations, every ``sharpness_every``
    steps."""

    n_sharpness: SharpnessImages
    sharpness_iters: PowerIterations
    sharpness_every: Every


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepConfig(Seeds, Sharpness):
    """The knobs of a plain K sweep of the CNN with the sharpness record (Figs. 3 and 7, ksweep
    subclass it, each naming its experiment): the periods ``K`` and one rate ``lr``, ``steps``,
    ``batch_size`` (None: full batch), ``augment``, ``n_train``/``n_test`` (None: every installed
    image), ``seed``/``n_seeds``, ``n_evals``, ``n_eval_train`` and the sharpness record's
    ``n_sharpness``, ``sharpness_iters``, ``sharpness_every`` (:func:`sharpness_callback`)."""

    K: tuple[Period, ...]
    lr: Rate
    steps: Steps
    batch_size: Images | None
    augment: Flag
    n_train: Images | None
    n_test: TestImages | None


#: The CIFAR-10 setting where the linear model stays stable to the end: 1,000 training images and
#: every test image, batches of 100 at lr 0.001 with augmentation for T = 3,200 steps, K = 320
#: (10 re-linearisations), λ_max on 256 training images every 320 steps. The cpu and gpu scales of
#: Figs. 3 and 6, ksweep and adaptive are this setting with their own seeds, evaluation points and
#: K grid (``{**STABLE, ...}``); why this rate, and its pilots: the pages' "What each scale runs".
STABLE = dict(
    K=[1, 320], lr=0.001, steps=3200, batch_size=100, augment=True, n_train=1000, n_test=None, seed=0,
    n_eval_train=None, n_sharpness=256, sharpness_iters=30, sharpness_every=320,
)


class Experiment(NamedTuple):
    """One notebook's experiment, defined in ``iterlin/experiments/<name>.py``.

    name: the notebook's name (``"fig3"``). scales: ``{"smoke" | "cpu" | "gpu" | "paper": defaults}``.
    load: ``load(config) -> Dataset`` (or a dict of Datasets): the data the computation needs.
    compute: ``compute(config, data, *, checkpoint_dir=None, progress=False) -> Results``, the
    experiment's typed results (``results`` below) with ``config`` None; ``checkpoint_dir`` is a
    folder unique to the cache key.
    claims: ``claims(results) -> list[Claim]``, the rows of the notebook's claims cell
    (``results.config`` is the config).
    module: the defining module's name; the result cache fingerprints the code that ``load`` and
    ``compute`` reach from it.
    config: the experiment's typed config, an :class:`iterlin.repro.config.ExperimentConfig` subclass
    (``load`` and ``compute`` receive one, validated).
    results: the experiment's typed results, a NamedTuple of NumPy arrays, :class:`Sweep` s (or
    mappings of them) and mappings of arrays, whose last field is ``config`` (default None). A
    results file stores :func:`stored` of it (a sweep as its flat columns); :meth:`typed` reads one
    back, a field annotated as a :class:`Sweep` as one.
    """

    name: str
    scales: Mapping[str, Mapping[str, Any]]
    load: Callable
    compute: Callable
    claims: Callable
    module: str
    config: type
    results: type

    def get_config(self, scale: str = "smoke", /, **overrides: Any) -> ExperimentConfig:
        """The typed config at ``scale`` (:attr:`scales`) with ``overrides`` applied, every value
        checked (None keeps the scale's default; :func:`iterlin.repro.config.resolve`)."""
        return resolve(self.config, self.scales, scale, overrides)

    def typed(self, arrays: Mapping[str, Any], config: ExperimentConfig) -> Any:
        """``arrays`` (:func:`stored` results, e.g. as a results file holds them) as this
        experiment's ``results`` type with ``config``; ValueError naming the names that are not
        its fields, or the fields without a default that are missing."""
        fields = self.results._fields
        unknown = sorted(set(arrays) - set(fields) - {"config"})
        missing = sorted(f for f in fields if f not in arrays and f not in self.results._field_defaults)
        if unknown or missing:
            raise ValueError(f"results of {self.name} are not allowed: "
                             + "; ".join(([f"unknown {unknown}"] if unknown else [])
                                         + ([f"missing {missing}"] if missing else []))
                             + f" (the fields of {self.module}.{self.results.__name__} are {list(fields)})")
        hints = typing.get_type_hints(self.results)
        return self.results(**{k: _typed_field(hints.get(k), v) for k, v in arrays.items()}, config=config)


@dataclasses.dataclass(frozen=True, eq=False)
class Sweep(FlatColumns):
    """R runs trained side by side (the experiments' sweeps: ``iterlin.experiments._common.sweep``
    and the figures' own): every seed × setting, seed-major, each evaluated at the same E steps.

    Also a read-only mapping from flat names to arrays: the history's columns (``net_test_acc``
    (R, E), ``step`` (E,), ``diverged`` (R,), …: :class:`iterlin.training.History`), the fields
    below by name, and the settings by theirs: the columns a results file stores, which
    :meth:`from_columns` reads back.
    """

    history: History  #: what each run recorded at the evaluation points, (R, E) arrays
    K: np.ndarray  #: each run's period, (R,) float64 (∞ for never; a policy's cap)
    seed_index: np.ndarray  #: the position of each run's seed (its θ_0 and batches), (R,) int
    lr: np.ndarray | None = None  #: each run's learning rate, (R,) float64 (None for Gauss–Newton, which has none)
    seed: np.ndarray | None = None  #: each run's seed, (R,) int
    net_test_correct: np.ndarray | None = None  #: whether the final network classifies each test image, (R, n_test) bool
    lin_test_correct: np.ndarray | None = None  #: the same for the final linear model
    #: the other per-run values, (R,) each, such as a policy's kind (``policy``) and hyperparameters
    #: (``tol`` of :func:`iterlin.relin.adaptive`, …) or Gauss–Newton's ``damping``
    settings: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_columns(cls, columns: Mapping[str, np.ndarray]) -> "Sweep":
        """The sweep whose flat columns are ``columns`` (a results file's): the fields by name; a
        column with one axis (R,) that is neither a field nor the history's is a setting; the rest
        is the history (:meth:`iterlin.training.History.from_columns`; a callback's values have an
        evaluation axis)."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("history", "settings")]
        missing = [k for k in ("K", "seed_index") if k not in columns]
        if missing:
            raise ValueError(f"columns={sorted(columns)} are not allowed: a sweep's columns include {missing}")
        settings = {k: v for k, v in columns.items()
                    if k not in names and not History.is_named_column(k) and np.ndim(v) == 1}
        rest = {k: v for k, v in columns.items() if k not in names and k not in settings}
        return cls(history=History.from_columns(rest), settings=settings,
                   **{k: columns[k] for k in names if k in columns})

    def as_dict(self) -> dict[str, np.ndarray]:
        """The flat columns (class docstring), a new dict."""
        out = self.history.as_dict()
        out.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                    if f.name not in ("history", "settings") and getattr(self, f.name) is not None})
        out.update(self.settings)
        return out


def _typed_field(hint: Any, value: Any) -> Any:
    """A results file's mapping ``value`` of a field annotated ``hint`` as that type: a record of
    columns (a :class:`~iterlin.columns.FlatColumns` type such as :class:`Sweep` or a
    :class:`~iterlin.columns.Record`, alone or ``| None``), or a mapping of them
    (``Mapping[str, Sweep]``), read by its ``from_columns``."""
    if not isinstance(value, Mapping) or isinstance(value, FlatColumns):
        return value
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (collections.abc.Mapping, dict) and _is_record(args[-1]):
        return {k: args[-1].from_columns(v) for k, v in value.items()}
    for t in (hint, *args):
        if _is_record(t):
            return t.from_columns(value)
    return value


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, FlatColumns)


def stored(results: Any) -> dict[str, Any]:
    """What a results file stores of typed results (:attr:`Experiment.results`): every field but
    ``config`` and those that are None (a field that a config does not compute)."""
    return {k: v for k, v in results._asdict().items() if k != "config" and v is not None}


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


def check_batch(config: ExperimentConfig, n: int) -> None:
    """``batch_size <= n`` (the training images loaded), with a message naming batch_size."""
    bs = getattr(config, "batch_size", None)
    if bs is not None and bs > n:
        raise ValueError(
            f"batch_size={bs} is not allowed: batch_size must be <= n_train={n} (the training "
            "images loaded), or None for full batch"
        )


def check_sharpness(config: ExperimentConfig, data: Dataset) -> Dataset:
    """``n_sharpness <= n_train`` (the training images λ_max is measured on are the first ones)."""
    n, m = data.x_train.shape[0], config.n_sharpness
    if m > n:
        raise ValueError(f"n_sharpness={m} is not allowed: n_sharpness must be <= n_train={n} "
                         "(the training images loaded)")
    return data


def sharpness_callback(config: ExperimentConfig, data: Dataset, lr: float | Sequence[float]) -> Callable:
    """The ``callback`` of :func:`cnn_sweep` that records the linear model's sharpness along training
    (:func:`iterlin.analysis.stability.sharpness_recorder`): λ_max of (1/M) J_sᵀ H J_s on the first
    M = ``n_sharpness`` training images, at most ``sharpness_iters`` warm-started power iterations,
    at the evaluation points that are multiples of ``sharpness_every``; ``lr`` one rate, or one per
    setting of the sweep (its ``K``), which every seed runs (the runs are seed-major, :func:`sweep`).
    History keys ``sharpness`` and ``lr_over_bound`` (R, E), NaN at the other evaluation points."""
    m = config.n_sharpness
    x, y = data.x_train[:m], data.y_train[:m]
    rates = list(lr) * len(seeds(config)) if isinstance(lr, Sequence) else lr
    return lambda apply_fn, params0: sharpness_recorder(
        apply_fn, x, y, lr=rates, iters=config.sharpness_iters, every=config.sharpness_every)


class WindowScores:
    """A ``callback`` factory of :func:`cnn_sweep` that scores every image of ``x`` (N, ...) with
    labels ``y`` (N,) at each evaluation point t ≥ ``start``: the read window of a confirmatory
    row (the mean over the last part of training, which one evaluation cannot flip).

    At each such point every run's network f(θ_t) and linear model f_lin_s(θ_t) classify each
    image (:func:`final_correct`); the callback keeps the counts of correct classifications,
    (2, R, N) int32, and the number of points as its checkpointed carry
    (:func:`iterlin.training.callback_carry`), and records ``window_net_acc``/``window_lin_acc``
    (R,) on the images at each point (NaN before ``start``). After the sweep, :meth:`scores` gives
    each run's mean correctness over the window per image. One factory per sweep: it holds the
    callback it made."""

    def __init__(self, x, y, start: int):
        self.x, self.y, self.start = x, y, int(start)
        self.callback: _WindowScorer | None = None

    def __call__(self, apply_fn: Callable, params0) -> "_WindowScorer":
        self.callback = _WindowScorer(apply_fn, self.x, self.y, self.start)
        return self.callback

    def scores(self) -> tuple[np.ndarray, np.ndarray]:
        """``(net, lin)``, each (R, N) float32: the fraction of the window's evaluation points at which
        each run's network (linear model) classified each image correctly; a ValueError when the
        sweep reached no point of the window."""
        cb = self.callback
        if cb is None or cb.count == 0:
            raise ValueError(f"start={self.start} is not allowed: no evaluation point of the sweep is at or after it")
        net, lin = cb.sums.astype(np.float32) / np.float32(cb.count)
        return net, lin


class _WindowScorer:
    """The callback of :class:`WindowScores`."""

    def __init__(self, apply_fn: Callable, x, y, start: int):
        self.apply_fn, self.x, self.y, self.start = apply_fn, x, y, start
        self.sums: np.ndarray | None = None
        self.count = 0

    def _zeros(self, state) -> np.ndarray:
        return np.zeros((2, int(np.shape(state.step)[0]), self.x.shape[0]), np.int32)

    def __call__(self, t, state) -> dict:
        if self.sums is None:
            self.sums = self._zeros(state)
        if t < self.start:
            nan = np.full(self.sums.shape[1], np.nan)
            return {"window_net_acc": nan, "window_lin_acc": nan}
        c = final_correct(self.apply_fn, state, self.x, self.y)
        self.sums = self.sums + np.stack([c["net_test_correct"], c["lin_test_correct"]]).astype(np.int32)
        self.count += 1
        return {"window_net_acc": c["net_test_correct"].mean(1), "window_lin_acc": c["lin_test_correct"].mean(1)}

    def carry(self, state) -> tuple:
        return (self._zeros(state) if self.sums is None else self.sums), np.asarray(self.count, np.int32)

    def restore(self, carry) -> None:
        self.sums, self.count = np.asarray(carry[0]), int(carry[1])


def merge_callbacks(*factories: Callable) -> Callable:
    """One ``callback(apply_fn, params0)`` factory of :func:`cnn_sweep` from several: its callback
    runs each of theirs at every evaluation point and merges their values (the same key from two is
    a ValueError: one would hide the other); its checkpointed carry is theirs, one per callback
    (:func:`iterlin.training.callback_carry`)."""

    def factory(apply_fn, params0):
        return _Merged(factories, [f(apply_fn, params0) for f in factories])

    return factory


class _Merged(NamedTuple):
    """The callback of :func:`merge_callbacks`."""

    factories: tuple
    callbacks: list

    def __call__(self, step, state) -> dict:
        out: dict = {}
        for cb in self.callbacks:
            vals = cb(step, state) or {}
            if clash := sorted(set(out) & set(vals)):
                raise ValueError(f"callbacks={self.factories!r} is not allowed: two of them record {clash}")
            out.update(vals)
        return out

    def carry(self, state) -> tuple:
        return tuple(callback_carry(cb, state) for cb in self.callbacks)

    def restore(self, carry) -> None:
        for cb, c in zip(self.callbacks, carry):
            restore_callback(cb, c)


def load_data(config: ExperimentConfig) -> Dataset:
    """CIFAR-10 with ``config.n_train`` / ``config.n_test`` images (None: all installed)."""
    data = load_cifar10(config.n_train, config.n_test)
    check_batch(config, data.x_train.shape[0])
    return data


def load_quintic(config: ExperimentConfig) -> Dataset:
    """The 1-d regression of Fig. 9 (:func:`iterlin.data.quintic`), float64 when ``x64``."""
    dtype = np.float64 if config.x64 else np.float32
    return quintic(config.n_train, config.n_test, dtype=dtype)


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
    eval_train_size: int | None = None,
    augment: bool = False,
    callback: Callable | None = None,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = False,
    config: Mapping | None = None,
) -> Sweep:
    """R runs of iterative linearisation with SGD, one ``(seed, K[i], lr[i])`` each, in ONE program.

    :func:`iterlin.training.train_sweep` with ``optax.inject_hyperparams(optax.sgd)``, whose
    learning rate lives in each run's optimizer state (its ``hyperparams``), so that runs with
    different K and η are vmapped together (one compilation); this adds the experiments' columns.

    Seeds: ``params`` is one initialisation θ_0 and ``key`` one batch key, shared by every run; or
    ``params`` and ``key`` are lists of S of each (one per seed), and the runs are every seed ×
    every K, seed-major (R = S · len(K)): the runs of one seed share θ_0 and batches, so that they
    differ only in K and η (paired comparisons), and seed s draws its batches from ``key[s]``.

    Args:
      K: the periods (int ≥ 1, integral float, or ``math.inf``), or re-linearisation policies of
        ONE kind (:mod:`iterlin.relin`, e.g. ``[relin.adaptive(tol) for tol in tols]``: their
        parameters are arrays in the state, so the runs stay one program). lr: one rate or one
        per K (> 0), as the experiments' typed configs validate them (``train_sweep`` checks K
        again, and that the rates are finite, for library users).
      steps, batch_size (None: full batch), eval_data, eval_steps, eval_train_size, augment,
        checkpoint, progress, config: as :func:`iterlin.training.fit`.
      callback: ``callback(apply_fn, params0) -> fit callback``, given the stacked θ_0 (R, ...), so
        that trackers measured against θ_0 stay correct after a resume.

    Returns:
      A :class:`Sweep`: the history (module docstring), each run's ``K`` (R,) float64 (with
      policies other than :func:`iterlin.relin.every`, each policy's ``K``: its cap, ∞ for none),
      ``lr`` (R,) float64 and ``seed_index`` (R,) int; with ``eval_data``, ``net_test_correct`` and
      ``lin_test_correct`` (R, n_test) bool: whether each run's final network and linear model
      classify each test image correctly, for paired comparisons (:func:`iterlin.repro.stats.difference`).
      With such policies, the settings ``policy`` (R,) str (the kind) and one (R,) float64 array per
      hyperparameter (``tol``, ``min_period``, …), and the history the policy's log
      (:func:`iterlin.relin.history`: ``relin_step`` (R, J), padded with −1, …).
    """
    inits = list(params) if isinstance(params, list) else [params]
    keys = list(key) if isinstance(key, list) else [key]
    if len(inits) != len(keys):
        raise ValueError(f"params and key are not allowed: {len(inits)} initialisations but {len(keys)} keys; "
                         "pass one of each, or one of each per seed")
    K, S = list(K), len(inits)
    lrs = list(lr) if isinstance(lr, Sequence) else [lr] * len(K)
    params0 = tree_stack([theta0 for theta0 in inits for _ in K])
    optimizer = optax.inject_hyperparams(optax.sgd)(learning_rate=lrs[0])  # each run's rate: hyperparams
    final, history = train_sweep(
        apply_fn, params0, data, K=K * S, steps=steps, optimizer=optimizer, loss="ce", batch_size=batch_size,
        key=keys[0] if S == 1 else jax.numpy.stack([k for k in keys for _ in K]),
        hyperparams={"learning_rate": lrs * S}, return_state=True, eval_data=eval_data, eval_steps=eval_steps,
        eval_train_size=eval_train_size, augment=augment,
        callback=None if callback is None else callback(apply_fn, params0), checkpoint=checkpoint,
        progress=progress, config=dict(config or {}),
        vectorise=True,  # vmapped on every backend, as the reference runs were computed (fit: vectorise)
    )
    settings: dict[str, np.ndarray] = {}
    policies = [k for k in K if isinstance(k, RelinPolicy) and k.kind != "every"]  # train_sweep: one kind
    if policies:
        settings["policy"] = np.asarray([p.kind for p in policies] * S, dtype=str)
        for name, _ in policies[0].hyperparams:
            vals = [dict(p.hyperparams)[name] for p in policies]  # None (a disabled option): NaN
            settings[name] = np.tile(np.asarray([math.nan if v is None else float(v) for v in vals]), S)
    else:
        history = dataclasses.replace(history, relin=None)  # periods: every K-th step, no log kept
    codes = np.asarray(final.K, np.float64)  # the validated periods (policies' caps), 0 encoding ∞
    correct = final_correct(apply_fn, final, *eval_data) if eval_data is not None else {}
    return Sweep(history=history, K=np.where(codes == 0, math.inf, codes), seed_index=np.repeat(np.arange(S), len(K)),
                 lr=np.tile(np.asarray(lrs, np.float64), S), settings=settings, **correct)


def _in_chunks(fn: Callable, x, y, batch_size: int) -> list:
    """``fn(x_chunk, y_chunk)`` on host, for consecutive chunks of ``batch_size`` examples."""
    x, y = jax.numpy.asarray(x), jax.numpy.asarray(y)
    return [jax.device_get(fn(x[i:i + batch_size], y[i:i + batch_size])) for i in range(0, x.shape[0], batch_size)]


def network_correct(apply_fn: Callable, params, x, y, batch_size: int = 1000) -> np.ndarray:
    """Whether the network f(θ, ·) of one run classifies each image of ``x`` (N, ...) as its label
    ``y`` (N,): ``argmax f(θ, x_n) == y_n``, (N,) bool, in chunks of ``batch_size``."""
    correct = jax.jit(lambda p, xb, yb: jax.numpy.argmax(apply_fn(p, xb), -1) == yb)
    return np.concatenate(_in_chunks(lambda xb, yb: correct(params, xb, yb), x, y, batch_size)).astype(bool)


def final_correct(apply_fn: Callable, state, x, y, batch_size: int = 1000) -> dict:
    """``net_test_correct``, ``lin_test_correct``: (R, N) bool, whether f(θ_T) and f_lin_s(θ_T) of
    each run of a stacked (sweep) state classify each of ``x`` as its label ``y`` (N,) (chunks of
    ``batch_size``): the per-image record that paired comparisons need. The runs are taken one
    after the other (``lax.map``), so memory is one run's activations on a chunk, not R runs' (a
    vmap over the 14 runs of ksweep's cpu scale took 17 GB with 1,000-image chunks)."""

    @jax.jit
    def correct(params, params_s, xb, yb):
        def one(p, ps):
            return (jax.numpy.argmax(apply_fn(p, xb), -1) == yb,
                    jax.numpy.argmax(linearised_apply(apply_fn, ps, p, xb), -1) == yb)
        return jax.lax.map(lambda ps: one(*ps), (params, params_s))

    parts = _in_chunks(lambda xb, yb: correct(state.params, state.params_s, xb, yb), x, y, batch_size)
    return {"net_test_correct": np.concatenate([p[0] for p in parts], 1).astype(bool),
            "lin_test_correct": np.concatenate([p[1] for p in parts], 1).astype(bool)}


#: Default of :func:`cnn_sweep`'s ``batch_size``: the config's (``None`` there means full batch).
FROM_CONFIG = object()


def seeds(config: ExperimentConfig) -> list[int]:
    """The seeds of a config: ``seed, seed + 1, …, seed + n_seeds − 1``."""
    return [int(config.seed) + i for i in range(int(config.n_seeds))]


def cnn_sweep(
    config: ExperimentConfig,
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
) -> Sweep:
    """The paper's CNN trained for every seed × K in ONE program (:func:`sweep`); return its :class:`Sweep`.

    ``config`` gives ``seed`` and ``n_seeds`` (:func:`seeds`: each seed its own initialisation and
    batches, :func:`seed_keys`), ``n_evals``, ``n_eval_train`` (training images the training
    metrics are measured on; None: all), ``augment`` (False for a config without one) and the
    defaults of ``K`` (list), ``lr``, ``steps`` and ``batch_size``, which the keyword arguments
    override (Fig. 2's mini-batch panel, Fig. 5's extra runs; ``batch_size=None`` is full batch,
    the default :data:`FROM_CONFIG` the config's). ``eval_steps`` defaults to :func:`eval_points`
    of (steps, n_evals). ``callback(apply_fn, params0)`` as :func:`sweep`. The sweep's ``seed``
    (R,) holds each run's seed.
    """
    inits, keys = [], []
    for s in seeds(config):
        init_key, data_key = seed_keys(s)
        model = make_model("cnn", init_key)
        inits.append(model.params)
        keys.append(data_key)
    steps = config.steps if steps is None else steps
    n_eval_train = config.n_eval_train
    history = sweep(
        model.apply_fn, inits if len(inits) > 1 else inits[0], (data.x_train, data.y_train),
        K=list(config.K if K is None else K), lr=config.lr if lr is None else lr, steps=steps,
        batch_size=config.batch_size if batch_size is FROM_CONFIG else batch_size,
        key=keys if len(keys) > 1 else keys[0], eval_data=(data.x_test, data.y_test),
        eval_steps=eval_points(steps, config.n_evals) if eval_steps is None else eval_steps,
        eval_train_size=None if n_eval_train is None else min(n_eval_train, data.x_train.shape[0]),
        augment=bool(getattr(config, "augment", False)), callback=callback, checkpoint=checkpoint,
        progress=progress, config=config.to_dict(),
    )
    return dataclasses.replace(history, seed=np.asarray(seeds(config))[history.seed_index])


def index_of_K(K, value: float) -> int:
    """The index of the first run whose period is ``value`` (e.g. 1, or ``K.max()``)."""
    return int(np.flatnonzero(np.asarray(K, np.float64) == float(value))[0])


def early_stopped(history: Mapping, metric: str = "net_test_acc") -> np.ndarray:
    """Optimal early stopping (Fig. 5): the best value of ``metric`` over evaluation points, (R,)."""
    v = np.asarray(history[metric], np.float64)
    return np.nanmax(np.where(np.isfinite(v), v, np.nan), axis=-1) if v.size else v


def trained_final(history: Mapping) -> dict:
    """The final test accuracy of the model each run of a :func:`sweep` history trains: the network
    f(θ_T) for finite K, the linear model f_lin_0(θ_T) for K = ∞ (the fixed-NTK model: its network
    is never the model being trained; Figs. 1 and 5 score it so).

    Returns ``final_test_acc`` (R,) float64 and, when the history records per-image correctness,
    ``final_test_correct`` (R, n_test) bool (for paired comparisons, :func:`iterlin.repro.stats.difference`).
    """
    fixed = np.isinf(np.asarray(history["K"], np.float64))
    out = {"final_test_acc": np.where(fixed, np.asarray(history["lin_test_acc"], np.float64)[:, -1],
                                      np.asarray(history["net_test_acc"], np.float64)[:, -1])}
    if "net_test_correct" in history and "lin_test_correct" in history:
        out["final_test_correct"] = np.where(fixed[:, None], np.asarray(history["lin_test_correct"], bool),
                                             np.asarray(history["net_test_correct"], bool))
    return out


def rmse(pred, y) -> np.ndarray:
    """Root mean squared error over the last two axes (examples, outputs), in float64."""
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.sqrt(np.mean((pred - y) ** 2, axis=(-2, -1)))


class KGrid(NamedTuple):
    """A sweep's runs arranged by K for the plots of accuracy against K (:func:`k_grid`): N periods, S
    seeds."""

    K: np.ndarray  #: (N,) the grid, ∞ last
    acc: np.ndarray  #: (N, S) the final test accuracy of the model each run trains
    inf: np.ndarray  #: (N,) bool, which entry is K = ∞
    net_inf: np.ndarray  #: (1, S) the network f(θ_T) of the K = ∞ runs ((0, S) without them)
    relin: np.ndarray  #: (N,) the re-linearisations made (⌊T/K⌋, 0 for ∞)
    diverged: np.ndarray  #: (N,) bool, whether a seed diverged
    steps: int  #: T


def k_grid(runs: Mapping, final_test_acc) -> KGrid:
    """``runs`` (a sweep's columns ``K``, ``net_test_acc``, ``n_relin``, ``diverged``, ``step``) arranged by
    K, with ``final_test_acc`` (R,) the final test accuracy of the model each run trains."""
    grid = np.unique(np.asarray(runs["K"], np.float64))  # ascending, ∞ last
    acc = np.asarray(final_test_acc, np.float64)
    acc_K = np.stack([acc[runs_of(runs, k)] for k in grid])
    net = np.asarray(runs["net_test_acc"], np.float64)[:, -1]
    iinf = runs_of(runs, math.inf)
    return KGrid(
        K=grid, acc=acc_K, inf=np.isinf(grid),
        net_inf=net[iinf][None, :] if iinf.size else np.zeros((0, acc_K.shape[1])),
        relin=np.asarray([int(np.asarray(runs["n_relin"])[runs_of(runs, k)[0], -1]) for k in grid]),
        diverged=np.asarray([bool(np.asarray(runs["diverged"])[runs_of(runs, k)].any()) for k in grid]),
        steps=int(np.asarray(runs["step"])[-1]),
    )
