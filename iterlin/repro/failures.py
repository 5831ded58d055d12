"""How a run failed: it diverged, its loss exploded, or its linear model's convex loss rose inside a block.

:func:`failures` is the one finder of these events in a sweep history (the histories of
:func:`iterlin.training.train_sweep`); the claims word them (:func:`iterlin.repro.claims.divergence_claim`)
and decide from them whether a large-K run's linear model was unstable (:func:`unstable_runs`), in
which case a comparison with K = 1 is not evidence about the paper's claim. Where a history records
the sharpness (``lr_over_bound``, :func:`iterlin.analysis.stability.sharpness_recorder`), each failure says
whether η was above the linear model's bound 2/λ_max(θ_s) before it (:func:`unstable_note`).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, NamedTuple

import numpy as np

from ..relin import fmt_K
from ..analysis.stability import block_loss_rise, first_unstable_step
from .stats import run_seeds

__all__ = ["EXPLODING", "BLOCK_RISE", "Failure", "failures", "exploded_runs", "failed_runs", "unstable_runs",
           "unstable_among", "unstable_note", "run_label"]


def _fmt_lr(v: float) -> str:
    return f"{float(v):g}"


#: A run whose training loss (``net_train_loss`` of its history) rises above this many times its value
#: at step 0 has an exploding loss although it stayed finite (:func:`~iterlin.repro.claims.divergence_claim`): the guard of
#: :func:`iterlin.training.commit_step` stops only NaN, ±∞ and losses near the float range.
EXPLODING = 10.0


#: The relative rise of the linear model's training loss inside one linearisation block beyond
#: which the block counts as unstable (:func:`iterlin.analysis.stability.block_loss_rise`): that loss is
#: convex in θ, so a rise beyond SGD's noise means the step was too large for that linearisation.
BLOCK_RISE = 0.1


def run_label(panel: str, h: Mapping, i: int) -> str:
    """The default name of run ``i`` of a sweep history in :func:`~iterlin.repro.claims.divergence_claim`: ``K=…`` and,
    when the history has one, ``lr=…``."""
    lr = f", lr={_fmt_lr(h['lr'][i])}" if "lr" in h else ""
    return f"K={fmt_K(h['K'][i])}{lr}"


def _loss_peaks(h: Mapping):
    """``(first, peak, at)``, each (R,): each run's ``net_train_loss`` at the first evaluation, its
    largest finite value and that value's evaluation index; None without a training loss recorded
    at two points or more."""
    loss = np.asarray(h.get("net_train_loss", np.zeros((0, 0))), np.float64)
    if loss.ndim != 2 or loss.shape[0] != np.size(h["diverged"]) or loss.shape[1] < 2:
        return None
    finite = np.where(np.isfinite(loss), loss, -np.inf)
    at = np.argmax(finite, axis=1)
    return loss[:, 0], finite[np.arange(loss.shape[0]), at], at


def exploded_runs(h: Mapping) -> np.ndarray:
    """(R,) bool: the runs of a sweep history that did not diverge but whose ``net_train_loss`` (R, E)
    rose above :data:`EXPLODING` times its value at the first evaluation (all False without a
    training loss recorded at two points or more)."""
    div = np.atleast_1d(np.asarray(h["diverged"], bool))
    peaks = _loss_peaks(h)
    if peaks is None:
        return np.zeros_like(div)
    first, peak, _ = peaks
    return ~div & (peak > EXPLODING * np.abs(first))


class Failure(NamedTuple):
    """One way run ``run`` of a sweep history failed (:func:`failures`)."""

    run: int
    kind: str  #: "diverged", "exploded", "rose" (inside a block) or "jumped" (across a re-linearisation)
    step: int  #: the step of the divergence, of the loss's peak, or of the top of the rise
    low: float = math.nan  #: the loss before (NaN for "diverged")
    high: float = math.nan  #: the loss at ``step`` (NaN for "diverged")

    def describe(self, name: str, *, headed: bool = False) -> str:
        """``name`` (the run) and what happened: the step, and the losses where there are some;
        ``headed``: under a heading that names the kind (:func:`~iterlin.repro.claims.divergence_row`), so without it."""
        if self.kind == "diverged":
            return f"{name} at step {self.step}" if headed else f"{name} diverged at step {self.step}"
        losses = f"{self.low:.3g} → {self.high:.3g} at step {self.step}"
        if self.kind == "exploded":
            return f"{name}: training loss {losses}"
        if headed:
            return f"{name}: {losses}"
        what = "the linear model's loss rose inside a block" if self.kind == "rose" else "the network's loss rose across a re-linearisation"
        return f"{name}: {what}, {losses}"


def failures(h: Mapping) -> list[Failure]:
    """Every failure of every run of a sweep history, by run: it diverged (``diverged`` /
    ``diverged_step``); it stayed finite but its ``net_train_loss`` rose above :data:`EXPLODING`
    times its value at the first evaluation ("exploded": its first and largest value, at the
    largest's step); its linear model's training loss (``lin_train_loss``, blocks by ``n_relin``)
    rose inside a block by over :data:`BLOCK_RISE` ("rose": :func:`iterlin.analysis.stability.block_loss_rise`);
    and, for K > 1 runs with none of these, its ``net_train_loss`` rose by over :data:`BLOCK_RISE`
    between two evaluations across a re-linearisation ("jumped": :func:`_net_rises`)."""
    div, at = np.atleast_1d(np.asarray(h["diverged"], bool)), np.atleast_1d(h["diverged_step"])
    out = [Failure(int(i), "diverged", int(at[i])) for i in np.flatnonzero(div)]
    boom = exploded_runs(h)
    if boom.any():
        first, peak, at_peak = _loss_peaks(h)
        steps = np.asarray(h["step"])
        out += [Failure(int(i), "exploded", int(steps[at_peak[i]]), float(first[i]), float(peak[i]))
                for i in np.flatnonzero(boom)]
    risen = _block_rises(h)
    done = div | boom
    if risen is not None:
        up, low, peak, t_up = risen
        out += [Failure(int(i), "rose", int(t_up[i]), float(low[i]), float(peak[i])) for i in np.flatnonzero(up)]
        done = done | up
    out += [Failure(i, "jumped", t, low, peak) for i, low, peak, t in _net_rises(h, done)]
    return sorted(out, key=lambda f: f.run)


def _net_rises(h: Mapping, skip) -> list:
    """``[(i, low, peak, step)]``: the runs with K > 1 (not in ``skip``) whose ``net_train_loss``
    rose by over :data:`BLOCK_RISE` from one evaluation to the next across a re-linearisation, the
    first such rise each: where :func:`_block_rises` cannot see inside the block (e.g. histories that
    evaluate at most once per block). Two evaluations inside one block (``n_relin`` unchanged
    between them, as every pair of K = ∞) are not compared: there the linear model's own loss, the
    model being trained, is what :func:`_block_rises` judges, and the network's may rise while it
    falls (the network leaving its linearisation, not an unstable step). Without ``n_relin`` (R, E)
    every pair counts. K = 1 (the reference SGD) is not judged."""
    loss = np.asarray(h.get("net_train_loss", ()), np.float64)
    K = np.asarray(h.get("K", ()), np.float64)
    if loss.ndim != 2 or loss.shape[1] < 2 or K.shape != (loss.shape[0],) or loss.shape[0] != np.size(skip):
        return []
    relin = np.asarray(h.get("n_relin", ()))
    across = np.diff(relin, axis=1) > 0 if relin.shape == loss.shape else np.ones_like(loss[:, 1:], bool)
    steps, out = np.asarray(h["step"]), []
    for i in np.flatnonzero((K > 1) & ~np.asarray(skip)):
        up = np.flatnonzero((loss[i, 1:] > (1.0 + BLOCK_RISE) * loss[i, :-1]) & across[i])
        if up.size:
            e = int(up[0]) + 1
            out.append((int(i), float(loss[i, e - 1]), float(loss[i, e]), int(steps[e])))
    return out


def _block_rises(h: Mapping):
    """:func:`iterlin.analysis.stability.block_loss_rise` of a sweep history, (R,) each; None without
    ``lin_train_loss`` and ``n_relin`` of shape (R, E)."""
    loss, relin = np.asarray(h.get("lin_train_loss", ())), np.asarray(h.get("n_relin", ()))
    if loss.ndim != 2 or loss.shape != relin.shape or loss.shape[0] != np.size(h["diverged"]):
        return None
    return block_loss_rise(h, rtol=BLOCK_RISE)


def unstable_note(h: Mapping) -> Callable[[int, int], str]:
    """``note(i, t)``: for run i failing at step t, ``" (unstable: η above 2/λ_max(θ_s) from step s)"``
    when the history's sharpness record (``lr_over_bound``) exceeded 1 at a step s ≤ t,
    ``" (η under 2/λ_max(θ_s) at every recorded step up to t)"`` when it did not; ``""`` without a record."""
    ratio = np.asarray(h.get("lr_over_bound", ()), np.float64)
    if ratio.ndim != 2 or ratio.shape[0] != np.size(h["diverged"]):
        return lambda i, t: ""
    first = first_unstable_step(h)

    def note(i: int, t: int) -> str:
        if 0 <= first[i] <= t:
            return f" (unstable: η above 2/λ_max(θ_s) from step {int(first[i])})"
        return f" (η under 2/λ_max(θ_s) at every recorded step up to {t})"

    return note


def _seed_label(h: Mapping) -> Callable[[int], str]:
    K, seed = np.atleast_1d(np.asarray(h["K"], np.float64)), run_seeds(h)
    return lambda i: f"K={fmt_K(K[i])} seed {int(seed[i])}"


def failed_runs(h: Mapping, label: Callable | None = None) -> dict[int, tuple[int, str]]:
    """``{i: (step, why)}``: the runs with K > 1 of a sweep history whose linear model's training
    failed, with the step and a description of the first failure (:func:`failures`: it diverged,
    its training loss exploded, or the linear model's training loss rose inside a block, whichever
    came first); the description says where the history's sharpness record put η against
    2/λ_max(θ_s). K = 1 is ordinary SGD and is not judged here (a network can train at the edge of
    stability). ``label`` names run i (default ``K=… seed …``)."""
    K = np.atleast_1d(np.asarray(h["K"], np.float64))
    name = label or _seed_label(h)
    note = unstable_note(h)
    out: dict[int, tuple[int, str]] = {}
    for f in failures(h):
        if K[f.run] <= 1 or f.kind == "jumped":
            continue
        if f.run not in out or f.step < out[f.run][0]:
            out[f.run] = (f.step, f.describe(name(f.run)) + note(f.run, f.step))
    return out


def unstable_runs(h: Mapping, label: Callable | None = None) -> dict[int, str]:
    """``{i: why}``: the runs with K > 1 of a sweep history whose linear model was unstable: those
    of :func:`failed_runs`, and, where the history records the sharpness, those with η above
    2/λ_max(θ_s) at a recorded point (:func:`iterlin.analysis.stability.first_unstable_step`)."""
    out = {i: why for i, (_, why) in failed_runs(h, label).items()}
    ratio = np.asarray(h.get("lr_over_bound", ()), np.float64)
    K = np.atleast_1d(np.asarray(h["K"], np.float64))
    if ratio.ndim == 2 and ratio.shape[0] == K.size:
        name = label or _seed_label(h)
        first = first_unstable_step(h)
        for i in np.flatnonzero((K > 1) & (first >= 0)):
            out.setdefault(int(i), f"{name(i)}: η above 2/λ_max(θ_s) at step {int(first[i])}")
    return dict(sorted(out.items()))


def unstable_among(h: Mapping, runs) -> list[str]:
    """What made each of ``runs`` (indices into the sweep history ``h``) unstable, in order
    (:func:`unstable_runs`); empty when none was."""
    chosen = {int(i) for i in np.atleast_1d(runs)}
    return [why for i, why in unstable_runs(h).items() if i in chosen]
