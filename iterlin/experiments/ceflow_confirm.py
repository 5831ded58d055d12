"""Figs. 2, 3, 5 and 8 in the paper's regime for its loss, confirmatory: ceflow's iterated linearised
gradient flow under cross-entropy, at a config that preregistered rows fix before the run.

The runs, the model and every computation are :mod:`iterlin.experiments.ceflow`'s (its
:func:`~iterlin.experiments.ceflow.load` and :func:`~iterlin.experiments.ceflow.compute`): the
paper's CNN on N CIFAR-10 images, full batch, mean cross-entropy on the linearised logits, R
re-linearisations at total time T (τ = T/R each, in the paper's ηK units), every held-out image
scored per image. Only the config differs, and with it the rows that read it: ``claims.toml``'s
``ceflow_confirm.*`` (status confirmatory) name this module's registered config (:data:`REGISTERED`)
as their ``config``, so a run with other knobs reads n/a. Its seeds start at 100, apart from the
exploratory ceflow runs (seeds 0 and 1) that served as its pilot.

The rows: the networks fit their training set (``fits``); K = ∞ below the smallest τ (``gap``,
the effect the on-par margins are fractions of); the largest τ that re-linearises (the smallest
R ≥ 2) and R of 8–12 each on par with the smallest τ within a quarter of that gap (Figs. 2 and 3);
K = ∞'s gain from N = 32 to 128 below R's (Fig. 5); at fixed R, τ = T/R above a much longer τ
(Fig. 8). Config keys and results: ceflow's.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..repro.claims import Claim
from . import ceflow, protocol
from ._common import Experiment
from .ceflow import compute, load

__all__ = ["Config", "REGISTERED", "SCALES", "RULES", "EXPERIMENT", "load", "compute", "claims", "plot"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(ceflow.Config):
    """ceflow's knobs (:class:`iterlin.experiments.ceflow.Config`), under this experiment's name."""

    experiment: ClassVar[str] = "ceflow_confirm"


#: The registered run (the rows' ``config``): ceflow's cpu scale with the R grid 1, 4, 8, 32 at
#: N = 64, R = 8 for the scaling and Fig. 8 runs (τ = 62.5 against τ = 2000), 10 seeds from 100.
REGISTERED = dict(ceflow.SCALES["cpu"], relins=[1, 4, 8, 32], n_relin=8, long_taus=[2000.0], seed=100, n_seeds=10)
# The scales: what each runs, and why, is told on the page (notebooks/ceflow_confirm.py).
SCALES = {
    "smoke": dict(REGISTERED, n_train=[8, 16], n_grid=8, relins=[1, 2, 4, 8], n_relin=2, long_taus=[1000.0],
                  n_heldout=200, n_seeds=2, n_check=8, check_relins=20, gd_steps=20),
    "cpu": REGISTERED,
    "gpu": REGISTERED,
    "paper": dict(ceflow.SCALES["paper"], seed=100, n_seeds=10),
}


#: ceflow's rules that the rows read, registered as this experiment's own kinds (a row's kind is
#: shared or its experiment's): ``ceflow_confirm.<rule>`` is ``ceflow.<rule>``.
RULES = ("fits", "gap", "large_tau_gap", "few_updates_gap", "inf_scales_worse", "solve_further")
for _name in RULES:
    _kind = protocol.KINDS[f"ceflow.{_name}"]
    protocol.rule(f"ceflow_confirm.{_name}", _kind.needs, _kind.metrics, _kind.takes)(_kind.evaluate)


def claims(results: ceflow.Results) -> list[Claim]:
    """The rows of ceflow_confirm in ``claims.toml`` (:mod:`~iterlin.experiments.protocol`), by
    ceflow's rules."""
    return protocol.claims("ceflow_confirm", results)


EXPERIMENT = Experiment("ceflow_confirm", SCALES, load, compute, claims, __name__, Config, ceflow.Results)

#: The figure: ceflow's (accuracy against R and against N, the paper's numbers marked).
plot = ceflow.plot
