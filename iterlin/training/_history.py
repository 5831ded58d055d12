"""The history of a run (or of a sweep's runs): what :func:`iterlin.training.fit` records.

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple

import jax
import numpy as np

from ..columns import FlatColumns
from ..relin import RelinLog
from ._evaluation import MetricKey

__all__ = ["Metrics", "History", "MODELS", "SPLITS", "METRIC_NAMES"]

#: The models evaluated: the network f(θ_t) and its current linear model f_lin_s(θ_t).
MODELS = ("net", "lin")

#: The evaluation splits: a subset of the training data, and the held-out data when given.
SPLITS = ("train", "test")


#: Every evaluated quantity by its flat name (``net_test_acc`` → ``MetricKey("net", "test", "acc")``):
#: the vocabulary of a history's (and its checkpoint's) evaluation columns.
METRIC_NAMES = {k.name: k for k in (MetricKey(m, s, q) for s in SPLITS for m in MODELS for q in ("loss", "acc", "rmse"))}

#: A history's columns besides its evaluations and its log, each named as its field: the counters at
#: the evaluation points, then the per-run divergence record.
_COUNTERS = ("step", "n_relin")
_DIVERGENCE = ("diverged", "diverged_step")


class Metrics(NamedTuple):
    """One model's metrics on one split at the evaluation points: (E,) for a run, (R, E) for a sweep.

    ``loss`` is the mean loss; ``acc`` the fraction classified correctly (integer labels, with
    cross-entropy or the squared loss on one-hot targets) or ``rmse`` = √(mean squared error)
    (real targets): the other is None.
    """

    loss: np.ndarray
    acc: np.ndarray | None = None
    rmse: np.ndarray | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class History(FlatColumns):
    """What a run recorded at its E evaluation points (a sweep's R runs: leading axis R).

    Each model's metrics are a :class:`Metrics`: the network f(θ_t) (``net_*``) and its current
    linear model f_lin_s(θ_t) (``lin_*``) on the training subset (``*_train``) and on ``eval_data``
    (``*_test``, None without it).

    It is also a read-only mapping from the flat names ``<model>_<split>_<metric>``
    (``net_test_acc``, ``lin_train_loss``, …), ``step``, ``n_relin``, ``diverged``,
    ``diverged_step``, ``relin_<field>`` and the callback's names to the same arrays: the columns a
    result file stores (``dict(history)`` is the experiments' table, to which they add their own
    columns). A pytree (its fields are its children), so ``jax.tree.map`` applies to it.
    """

    step: np.ndarray  #: (E,) the steps t evaluated (0 and the last step included)
    n_relin: np.ndarray  #: the re-linearisations so far (T/K, Definition 1), (E,) or (R, E)
    net_train: Metrics  #: the network on the training subset
    lin_train: Metrics  #: the linear model on the training subset
    net_test: Metrics | None  #: the network on ``eval_data`` (None without it)
    lin_test: Metrics | None  #: the linear model on ``eval_data`` (None without it)
    diverged: np.ndarray  #: whether the run stopped at a non-finite or exploding loss, () or (R,) bool
    diverged_step: np.ndarray  #: the step at which it did (−1 if it did not)
    #: when the run re-linearised, and its policy's log (:func:`iterlin.relin.history`); None where
    #: the algorithm has no re-linearisation policy (Gauss–Newton)
    relin: RelinLog | None = None
    #: the values ``callback`` returned, by its names, stacked over evaluation points
    extra: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, columns: Mapping[str, np.ndarray], *, diverged, diverged_step) -> "History":
        """The history of the columns recorded at the evaluation points: ``step``, ``n_relin``, the
        evaluations (``<model>_<split>_<metric>``) and the callback's values (every other name)."""
        evaluations = {METRIC_NAMES[k]: v for k, v in columns.items() if k in METRIC_NAMES}
        extra = {k: v for k, v in columns.items() if k not in METRIC_NAMES and k not in _COUNTERS}

        def metrics(model: str, split: str) -> Metrics | None:
            got = {k.metric: v for k, v in evaluations.items() if (k.model, k.split) == (model, split)}
            return Metrics(**got) if got else None

        return cls(step=columns["step"], n_relin=columns["n_relin"],
                   net_train=metrics("net", "train"), lin_train=metrics("lin", "train"),
                   net_test=metrics("net", "test"), lin_test=metrics("lin", "test"),
                   diverged=diverged, diverged_step=diverged_step, extra=extra)

    @classmethod
    def from_columns(cls, columns: Mapping[str, np.ndarray]) -> "History":
        """The history whose flat columns (:meth:`as_dict`) are ``columns``, e.g. as a results file
        stores them: ``diverged`` and ``diverged_step``, the re-linearisation log ``relin_<field>``
        (:class:`iterlin.relin.RelinLog`) and the rest as :meth:`of` reads them."""
        log = RelinLog.from_columns(columns)
        rest = {k: v for k, v in columns.items() if not k.startswith(RelinLog.PREFIX) and k not in _DIVERGENCE}
        history = cls.of(rest, diverged=columns["diverged"], diverged_step=columns["diverged_step"])
        return history if log is None else dataclasses.replace(history, relin=log)

    @staticmethod
    def is_named_column(name: str) -> bool:
        """Whether ``name`` is one of the columns every history names the same way (an evaluation,
        ``step``, ``n_relin``, ``diverged``, ``diverged_step`` or ``relin_<field>``); a callback's
        names are the caller's."""
        return name in METRIC_NAMES or name in _COUNTERS or name in _DIVERGENCE or name.startswith(RelinLog.PREFIX)

    def metrics(self, model: str, split: str) -> Metrics | None:
        """The :class:`Metrics` of ``model`` ("net" or "lin") on ``split`` ("train" or "test")."""
        return getattr(self, f"{model}_{split}")

    def as_dict(self) -> dict[str, np.ndarray]:
        """The flat columns (class docstring), a new dict."""
        out: dict[str, np.ndarray] = {}
        for split in SPLITS:
            for model in MODELS:
                m = self.metrics(model, split)
                if m is not None:
                    out.update({MetricKey(model, split, name).name: v
                                for name, v in m._asdict().items() if v is not None})
        out.update({k: getattr(self, k) for k in _COUNTERS})
        out.update(self.extra)
        out.update({k: getattr(self, k) for k in _DIVERGENCE})
        if self.relin is not None:
            out.update(self.relin.as_dict())
        return out


jax.tree_util.register_dataclass(History, data_fields=[f.name for f in dataclasses.fields(History)], meta_fields=[])
