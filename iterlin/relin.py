"""When to re-linearise: Algorithm 1's rule (Eq. 4) as a first-class, pure, traceable policy.

Algorithm 1 takes a step on the current linear model and then decides whether θ_{t+1} becomes the
new linearisation point:

    θ_{t+1} = θ_t − η ∇_θ L(f_lin_s(θ_t, X_t))                  (Eq. 3, any optax transformation)
    if decide(...):  θ_s ← θ_{t+1}                                (Eq. 4: re-linearise)

where f_lin_s(θ, x) = f(θ_s, x) + J(θ_s, x)(θ − θ_s). The paper's rule is a fixed period,
``(t + 1) mod K = 0``; this module makes the rule a parameter. A policy is a :class:`RelinPolicy`,
a NamedTuple of pure functions in the style of an optax transformation:

* ``init(log_size) -> state``: the policy's state, kept in :attr:`iterlin.training.TrainState.policy`
  (its parameters as arrays, its counters and a fixed-size log of its re-linearisations);
* ``decide(state, info) -> (relin, state)``: a bool scalar, whether this step re-linearises, and
  the new state, from a :class:`RelinInfo` (the step count, the period or cap K, the losses).

Both are pure in arrays, so a policy runs inside ``jit``, ``lax.fori_loop`` and ``vmap``. The
period (``every``) or the most steps one linearisation may take (``adaptive``, ``until_solved``) is
``RelinPolicy.K``, stored in ``TrainState.K`` (0 encodes ∞), and every other parameter is an array
in the state, never a constant of the program: runs of one kind with different parameters (periods,
tolerances, targets) are one vmapped program (:func:`iterlin.training.train_sweep`), and a second
call with other values compiles nothing. Divergence (:func:`iterlin.training.commit_step`) freezes
the policy's state with the rest of the run, and checkpoints save and resume it with the rest.

The policies:

* :func:`every` ``(K)``: the paper's period; ``train(..., K=3)`` means ``every(3)``. K = 1 is (S)GD,
  K = ∞ never re-linearises. Costs nothing: no state, no extra computation.
* :func:`adaptive` ``(tol, min_period, max_period)``: re-linearise when the linear model has drifted
  from the network on the current batch, ``|L(f_lin_s(θ_t)) − L(f(θ_t))| > tol · L(f(θ_t))``. Costs
  one more forward pass of the network on the batch per step, f(θ_t, X_t).
* :func:`until_solved` ``(target_acc, check_every, plateau_tol, max_period)``: Fig. 8's criterion,
  each linearisation trained until the linear model reaches a training accuracy, plateaus, or a step
  cap. Costs one pass over the whole training set every ``check_every`` steps.

What a step must compute for its policy is static (``net_loss``, ``train_check``,
:attr:`RelinPolicy.rule`), so :func:`every` costs exactly what Algorithm 1 costs.

Recording the re-linearisation steps (bounded memory, inside jit/vmap): a policy whose decisions
depend on the data (``adaptive``, ``until_solved``) writes the step of its j-th re-linearisation
into entry j of a fixed-size buffer in its state, ``relin_step`` of shape (L,), L = :func:`log_size`
= ⌊T / (its shortest possible period)⌋ + 1 ≤ :data:`MAX_LOG` (a scatter with ``mode="drop"``: past
L entries the count ``TrainState.n_relin`` still counts, only the log entry is dropped). For
``every(K)`` the steps are K, 2K, …, ``n_relin``·K: nothing is stored on device. :func:`history`
reads them back on the host (a :class:`RelinLog`); :func:`iterlin.training.train` and ``train_sweep``
add it to the history as ``History.relin`` (``step`` (J,) for a run, (R, J) padded with −1 for a sweep).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .tree import tree_index
from .validate import MAX_STEPS, check_int, check_K, check_nonnegative, check_positive

__all__ = [
    "RelinPolicy",
    "RelinInfo",
    "AdaptiveState",
    "SolveState",
    "every",
    "adaptive",
    "until_solved",
    "as_policy",
    "log_size",
    "history",
    "RelinLog",
    "MAX_LOG",
    "RELIN_REASONS",
    "fmt_K",
]

#: The most re-linearisations a run logs (a :func:`log_size` is capped here; further ones are still
#: counted in ``TrainState.n_relin``, only their log entry is dropped).
MAX_LOG = 100_000

#: Reason codes of :func:`until_solved` (``SolveState.relin_reason`` indexes this tuple; 0 = no entry).
RELIN_REASONS = ("", "target", "plateau", "K")


def _float():
    return jnp.result_type(float)


class RelinInfo(NamedTuple):
    """What a step tells its policy's ``decide`` (one run: scalars; under ``vmap`` one per run).

    * ``step``: int32, t + 1, the steps completed once this one is (θ_{t+1} becomes θ_s if it
      re-linearises).
    * ``K``: int32, ``TrainState.K``: the period (:func:`every`) or the most steps one linearisation
      may take (0 encodes ∞).
    * ``n_relin``: int32, the re-linearisations before this step (the index of the next log entry).
    * ``loss``: L(f_lin_s(θ_t), X_t), the mean loss of the linear model on the step's batch (the
      step's loss).
    * ``net_loss``: L(f(θ_t), X_t), the network's mean loss on the same batch, or None where the
      policy's ``net_loss`` flag is off (it is then not computed).
    * ``check``: ``check() -> (loss, acc)`` of the proposal's linear model f_lin_s(θ_{t+1}) on the
      WHOLE training set (accuracy NaN for real targets), or None where the policy's ``train_check``
      flag is off; a function, so the policy decides when to pay for it (``lax.cond``).
    """

    step: jax.Array
    K: jax.Array
    n_relin: jax.Array
    loss: jax.Array
    net_loss: Any = None
    check: Callable | None = None


class Rule(NamedTuple):
    """The static part of a policy (what the compiled step depends on): hashable, one per kind and options."""

    kind: str
    decide: Callable
    net_loss: bool
    train_check: bool
    check_batch_size: int | None


class RelinPolicy(NamedTuple):
    """A re-linearisation policy (made by :func:`every`, :func:`adaptive`, :func:`until_solved`).

    * ``kind``: ``"every"``, ``"adaptive"`` or ``"until_solved"``.
    * ``K``: the period (``every``) or the most steps one linearisation may take (``math.inf``:
      none); stored in ``TrainState.K``.
    * ``hyperparams``: ``((name, value), …)``, the other parameters as given (validated), for
      display and for the checkpoint's configuration.
    * ``init``: ``init(log_size) -> state``, the state kept in ``TrainState.policy`` (``()`` for
      ``every``).
    * ``decide``: ``decide(state, info: RelinInfo) -> (relin, state)``: pure; one function per kind.
    * ``shortest``: the shortest period it can produce (it sizes the log, :func:`log_size`); 0:
      nothing is logged on device.
    * ``net_loss`` (static): the step computes the network's loss on the batch for ``decide`` (one
      forward pass).
    * ``train_check`` (static): the step offers ``info.check``, the linear model on the whole
      training set.
    * ``check_batch_size`` (static): the chunk size of that check (None: the loop's
      ``eval_batch_size``).
    """

    kind: str
    K: int | float
    hyperparams: tuple
    init: Callable
    decide: Callable
    shortest: int = 0
    net_loss: bool = False
    train_check: bool = False
    check_batch_size: int | None = None

    @property
    def rule(self) -> Rule:
        """Its static part (kind, ``decide``, flags): policies with the same rule share one compiled step."""
        return Rule(self.kind, self.decide, self.net_loss, self.train_check, self.check_batch_size)

    def describe(self) -> dict:
        """``{"kind": …, "K": …, <hyperparams>}``, JSON-serialisable (∞ as ``math.inf``, disabled as None)."""
        return {"kind": self.kind, "K": float(self.K) if math.isinf(self.K) else self.K, **dict(self.hyperparams)}

    def __repr__(self) -> str:
        args = {"K": self.K} if self.kind == "every" else {**dict(self.hyperparams), "max_period": self.K}
        if self.kind == "until_solved" and self.check_batch_size is not None:
            args["check_batch_size"] = self.check_batch_size
        return f"{self.kind}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


# --------------------------------------------------------------------------------------------
# every(K)
# --------------------------------------------------------------------------------------------


def _every_decide(state, info: RelinInfo):
    """(t + 1) mod K = 0, K = ``info.K`` (0: never). The state (``()``) is passed through."""
    relin = (info.K > 0) & (info.step % jnp.maximum(info.K, 1) == 0)
    return relin, state


def _every_init(log_size: int = 0):
    return ()


def _every(K, name: str) -> RelinPolicy:
    return RelinPolicy("every", check_K(K, name), (), _every_init, _every_decide)


def every(K) -> RelinPolicy:
    """Re-linearise every K steps: θ_s ← θ_{t+1} when (t + 1) mod K = 0 (Algorithm 1, Eq. 4).

    K: an integer ≥ 1, an integral float (5e6) or ``math.inf`` (never: the linearisation at θ_0, a
    fixed empirical NTK), validated like ``iterlin.validate.check_K``. K = 1 is (S)GD.
    ``train(..., K=3)`` is ``train(..., K=every(3))`` (the same program, bitwise the same results).
    Its state is ``()``: K lives in ``TrainState.K``; it costs nothing beyond the step.

    Example:
      >>> import math
      >>> from iterlin import relin
      >>> relin.every(3), relin.every(math.inf).K
      (every(K=3), inf)
    """
    return _every(K, "K")


# --------------------------------------------------------------------------------------------
# adaptive(tol, min_period, max_period)
# --------------------------------------------------------------------------------------------


class AdaptiveState(NamedTuple):
    """:func:`adaptive`'s state (``TrainState.policy``); scalars unless noted, float dtype ``float``'s.

    * ``tol``: the tolerance on the relative gap (an array, so runs with different tolerances are
      one program).
    * ``min_period``: int32, the fewest steps one linearisation takes before the gap may end it.
    * ``inner_steps``: int32, steps taken on the current linearisation (0 just after re-linearising).
    * ``gap``: the relative gap ``|L(f_lin_s(θ_t)) − L(f(θ_t))| / L(f(θ_t))`` measured at the last
      step (NaN before the first).
    * ``relin_step``: (L,) int32, the step t + 1 of the j-th re-linearisation (−1: none yet).
    * ``relin_gap``: (L,) the gap that step measured (it may be ≤ tol where ``max_period`` forced it).
    """

    tol: jax.Array
    min_period: jax.Array
    inner_steps: jax.Array
    gap: jax.Array
    relin_step: jax.Array
    relin_gap: jax.Array


def _log(buf, j, v):
    """``buf`` with entry j set to v; j out of range (no re-linearisation, or past the log) is dropped."""
    return buf.at[j].set(jnp.asarray(v, buf.dtype), mode="drop")


def _adaptive_decide(s: AdaptiveState, info: RelinInfo):
    """Re-linearise iff (k ≥ min_period and the linear model drifted) or k ≥ K (K > 0), k = steps on
    this linearisation after this one, drifted = tol = 0 or |L_lin − L_net| > tol·|L_net| (the
    step's batch, at θ_t)."""
    diff = jnp.abs(info.loss - info.net_loss)
    scale = jnp.abs(info.net_loss)
    drifted = (s.tol == 0) | (diff > s.tol * scale)
    k = s.inner_steps + 1
    capped = (info.K > 0) & (k >= info.K)
    relin = (drifted & (k >= s.min_period)) | capped
    gap = (diff / scale).astype(s.gap.dtype)
    j = jnp.where(relin, info.n_relin, s.relin_step.shape[0])
    new = AdaptiveState(
        tol=s.tol,
        min_period=s.min_period,
        inner_steps=jnp.where(relin, 0, k),
        gap=gap,
        relin_step=_log(s.relin_step, j, info.step),
        relin_gap=_log(s.relin_gap, j, gap),
    )
    return relin, new


def adaptive(tol, *, min_period=1, max_period=math.inf) -> RelinPolicy:
    """Re-linearise when the linear model has drifted from the network on the current batch.

    At step t (batch X_t, linearisation point θ_s) with the linear model's loss L_lin = L(f_lin_s(θ_t),
    X_t) (the loss the step's gradient is taken of) and the network's L_net = L(f(θ_t), X_t), the
    step re-linearises, θ_s ← θ_{t+1}, when k (the steps taken on this linearisation, this one
    included) satisfies

        (k ≥ min_period  and  abs(L_lin − L_net) > tol · abs(L_net))   or   k ≥ max_period,

    i.e. the relative gap ``|L_lin − L_net| / L_net`` exceeds ``tol`` (written as a product: a zero network
    loss needs no special case). ``tol = 0`` re-linearises at every allowed step, whatever the gap
    (a gap of exactly 0 included): ``adaptive(0)`` is K = 1, ``adaptive(0, min_period=m)`` is K = m.
    ``tol = math.inf`` never re-linearises on the gap: ``adaptive(math.inf)`` is K = ∞,
    ``adaptive(math.inf, max_period=M)`` is K = M. The gap is measured at θ_t, where the step
    already evaluates the linear model, so the decision follows the drift by one step; right after
    a re-linearisation the gap is 0 (f_lin_s(θ_s) = f(θ_s), up to rounding), so for 0 < tol the
    shortest period the gap produces is 2.

    Cost: one more forward pass of the network on the batch per step, f(θ_t, X_t) (and its loss),
    beside the step's Jacobian-vector and vector-Jacobian products; nothing else (no backward pass).

    Args:
      tol: the tolerance on the relative gap: a number ≥ 0 or ``math.inf``.
      min_period: the fewest steps per linearisation before the gap may end it (integer ≥ 1).
      max_period: the most steps per linearisation (integer ≥ min_period, or ``math.inf``: none);
        stored in ``TrainState.K``.

    The state is an :class:`AdaptiveState` (``tol`` and ``min_period`` as arrays: one program for
    every tolerance); the history's ``relin_step`` and ``relin_gap`` come from its log.

    Example:
      >>> import math
      >>> from iterlin import relin
      >>> relin.adaptive(0.1, max_period=50)
      adaptive(tol=0.1, min_period=1, max_period=50)
      >>> relin.adaptive(-1)
      Traceback (most recent call last):
      ...
      ValueError: tol=-1 is not allowed: tol must be a number >= 0 or math.inf.
    """
    tol = check_nonnegative(tol, "tol", allow_inf=True)
    min_period = check_int(min_period, "min_period", maximum=MAX_STEPS, why="step counters are int32")
    max_period = check_K(max_period, "max_period")
    if min_period > max_period:
        raise ValueError(f"min_period={min_period!r} is not allowed: min_period must be <= max_period={max_period!r}.")

    def init(log_size: int) -> AdaptiveState:
        f, i32 = _float(), jnp.int32
        return AdaptiveState(
            tol=jnp.asarray(tol, f),
            min_period=jnp.asarray(min_period, i32),
            inner_steps=jnp.zeros((), i32),
            gap=jnp.asarray(jnp.nan, f),
            relin_step=jnp.full((log_size,), -1, i32),
            relin_gap=jnp.full((log_size,), jnp.nan, f),
        )

    return RelinPolicy("adaptive", max_period, (("tol", tol), ("min_period", min_period)), init, _adaptive_decide,
                       shortest=min_period, net_loss=True)


# --------------------------------------------------------------------------------------------
# until_solved(target_acc, check_every, plateau_tol, max_period)
# --------------------------------------------------------------------------------------------


class SolveState(NamedTuple):
    """:func:`until_solved`'s state (``TrainState.policy``): its parameters, the criterion, the log.

    Parameters (arrays, so runs with different values are one program):
      target_acc: the training accuracy that ends a linearisation (NaN: the accuracy test is off).
      plateau_tol: the relative improvement below which a linearisation has plateaued (0: off).
      check_every: int32, the criterion is checked every this many steps of a linearisation.
    Scalars:
      inner_steps: int32, steps taken on the current linearisation (k; 0 just after re-linearising).
      prev_loss: L_i at the previous check of this linearisation (+inf before the first check).
      check_loss, check_acc: training loss / accuracy of the linear model at the last check (NaN
      before any; accuracy NaN for real-valued targets).
    Log, shape (L,), entry j for the j-th re-linearisation (j < ``TrainState.n_relin``):
      relin_step: int32, the step t + 1 after which it happened (θ_s ← θ_{t+1}); −1: none yet.
      relin_inner_steps: int32, steps spent on the linearisation it ended.
      relin_acc, relin_loss: training accuracy / loss of that linear model at θ_{t+1}.
      relin_reason: int32 index into :data:`RELIN_REASONS` (priority target > plateau > K).
    """

    target_acc: jax.Array
    plateau_tol: jax.Array
    check_every: jax.Array
    inner_steps: jax.Array
    prev_loss: jax.Array
    check_loss: jax.Array
    check_acc: jax.Array
    relin_step: jax.Array
    relin_inner_steps: jax.Array
    relin_acc: jax.Array
    relin_loss: jax.Array
    relin_reason: jax.Array


def _solve_init(log_size: int, target_acc, plateau_tol, check_every) -> SolveState:
    """A fresh :class:`SolveState` with a log of ``log_size`` entries (parameters validated by the caller)."""
    f, i32 = _float(), jnp.int32
    return SolveState(
        target_acc=jnp.asarray(jnp.nan if target_acc is None else target_acc, f),
        plateau_tol=jnp.asarray(plateau_tol, f),
        check_every=jnp.asarray(check_every, i32),
        inner_steps=jnp.zeros((), i32),
        prev_loss=jnp.asarray(jnp.inf, f),
        check_loss=jnp.asarray(jnp.nan, f),
        check_acc=jnp.asarray(jnp.nan, f),
        relin_step=jnp.full((log_size,), -1, i32),
        relin_inner_steps=jnp.full((log_size,), -1, i32),
        relin_acc=jnp.full((log_size,), jnp.nan, f),
        relin_loss=jnp.full((log_size,), jnp.nan, f),
        relin_reason=jnp.zeros((log_size,), i32),
    )


def _until_solved_decide(s: SolveState, info: RelinInfo):
    """Fig. 8's criterion at θ_{t+1} (see :func:`until_solved`); the check runs under ``lax.cond``."""
    f = _float()
    k = s.inner_steps + 1
    at_K = (info.K > 0) & (k >= info.K)
    do_check = ((k % s.check_every) == 0) | at_K
    nan = jnp.asarray(jnp.nan, f)
    lin_loss, lin_acc = jax.lax.cond(do_check, lambda: tuple(v.astype(f) for v in info.check()), lambda: (nan, nan))
    hit_target = do_check & (lin_acc >= s.target_acc)  # False for a NaN target (off) or accuracy (real targets)
    plateau = do_check & (s.prev_loss - lin_loss < s.plateau_tol * s.prev_loss) & (s.plateau_tol > 0)
    relin = hit_target | plateau | at_K
    reason = jnp.where(hit_target, 1, jnp.where(plateau, 2, 3)).astype(jnp.int32)
    j = jnp.where(relin, info.n_relin, s.relin_step.shape[0])  # out of range → dropped
    checked = jnp.where(do_check, lin_loss, s.prev_loss)
    new = SolveState(
        target_acc=s.target_acc,
        plateau_tol=s.plateau_tol,
        check_every=s.check_every,
        inner_steps=jnp.where(relin, 0, k),
        prev_loss=jnp.where(relin, jnp.inf, checked).astype(f),
        check_loss=jnp.where(do_check, lin_loss, s.check_loss),
        check_acc=jnp.where(do_check, lin_acc, s.check_acc),
        relin_step=_log(s.relin_step, j, info.step),
        relin_inner_steps=_log(s.relin_inner_steps, j, k),
        relin_acc=_log(s.relin_acc, j, lin_acc),
        relin_loss=_log(s.relin_loss, j, lin_loss),
        relin_reason=_log(s.relin_reason, j, reason),
    )
    return relin, new


def _check_target_acc(target_acc) -> float | None:
    """``target_acc``: a number in (0, 1] (a training accuracy), or None (the accuracy test off)."""
    if target_acc is None:
        return None
    v = check_positive(target_acc, "target_acc")
    if v > 1:
        raise ValueError(
            f"target_acc={target_acc!r} is not allowed: target_acc must be a number in (0, 1] "
            "(a training accuracy; 1.0 = 100 %), or None to disable the accuracy test."
        )
    return v


def until_solved(*, target_acc=1.0, check_every=100, plateau_tol=1e-4, max_period=math.inf,
                 check_batch_size=None) -> RelinPolicy:
    """Train each linearisation until it is solved (Sec. 4.3, Fig. 8), then re-linearise.

    Linearisation i is the convex problem min_θ L_i(θ) = (1/N) Σ_n ℓ(f_lin_{s_i}(θ, x_n), y_n). With
    k the steps taken on it (this one included), the linear model at θ_{t+1} (the point that becomes
    θ_s) is checked on the WHOLE training set when k is a multiple of ``check_every`` or k =
    ``max_period``, and the step re-linearises when EITHER

    1. ``target``: its training accuracy is ≥ ``target_acc`` (integer labels only; None: off), OR
    2. ``plateau``: its training loss improved by less than ``plateau_tol`` relative to the previous
       check of the same linearisation, L_prev − L_now < plateau_tol · L_prev (the first check of a
       linearisation never plateaus; 0: off), OR
    3. ``K``: k = ``max_period``, the most steps one linearisation may take (``math.inf``: no limit).

    Used with ``reset_optimizer=True`` (a fresh optimizer, e.g. Adam's moments, for each convex
    problem) it is :func:`iterlin.solvers.adam_solve.train_adam_solved`. With the test never passing
    (``target_acc=None, plateau_tol=0``) it is ``every(max_period)``. Once the network itself fits
    the training set every new linear model starts at 100 % (f_lin_s(θ_s) = f(θ_s)) and test 1
    fires at its first check: the run re-linearises every ``check_every`` steps.

    Cost: one pass of the linear model over the training set (in chunks of ``check_batch_size``,
    None: the loop's ``eval_batch_size``) every ``check_every`` steps, under ``lax.cond``; under
    ``vmap`` (a vmapped sweep) a ``cond`` evaluates both branches, so the pass runs at EVERY step.

    The state is a :class:`SolveState` (``target_acc``, ``plateau_tol``, ``check_every`` as arrays);
    the history's ``relin_step``, ``relin_inner_steps``, ``relin_acc``, ``relin_loss`` and
    ``relin_reason`` come from its log.

    Example:
      >>> from iterlin import relin
      >>> relin.until_solved(target_acc=None, plateau_tol=0, max_period=200_000)
      until_solved(target_acc=None, check_every=100, plateau_tol=0.0, max_period=200000)
    """
    target_acc = _check_target_acc(target_acc)
    check_every = check_int(check_every, "check_every", maximum=MAX_STEPS, why="step counters are int32")
    plateau_tol = check_nonnegative(plateau_tol, "plateau_tol")
    max_period = check_K(max_period, "max_period")
    if check_batch_size is not None:
        check_batch_size = check_int(check_batch_size, "check_batch_size")

    def init(log_size: int) -> SolveState:
        return _solve_init(log_size, target_acc, plateau_tol, check_every)

    shortest = check_every if math.isinf(max_period) else min(check_every, max_period)
    hyper = (("target_acc", target_acc), ("check_every", check_every), ("plateau_tol", plateau_tol))
    return RelinPolicy("until_solved", max_period, hyper, init, _until_solved_decide, shortest=shortest,
                       train_check=True, check_batch_size=check_batch_size)


# --------------------------------------------------------------------------------------------
# Helpers for the training loop
# --------------------------------------------------------------------------------------------

_STATE_TYPES = {"adaptive": AdaptiveState, "until_solved": SolveState}


def as_policy(K, name: str = "K") -> RelinPolicy:
    """``K`` as a policy: a :class:`RelinPolicy` as is, a period (int, integral float, ``math.inf``)
    as :func:`every` ``(K)``; anything else is refused with a ValueError naming ``name``."""
    if isinstance(K, RelinPolicy):
        return K
    try:
        return _every(K, name)
    except ValueError as e:
        raise ValueError(f"{e} (Or a re-linearisation policy: iterlin.relin.every, adaptive or until_solved.)") \
            from None


def one_rule(policies: Sequence[RelinPolicy], name: str = "K") -> Rule:
    """The one static rule of a sweep's policies, or a ValueError: a vmapped sweep is one program, so
    its runs' policies must be of one kind with the same static options (their parameters may differ)."""
    rules = {p.rule for p in policies}
    if len(rules) > 1:
        shown = ", ".join(sorted({repr(p) for p in policies}))[:300]
        raise ValueError(
            f"{name}=[{shown}] is not allowed: the policies of one sweep must be of one kind (every, adaptive or "
            "until_solved) with the same check_batch_size; their parameters (periods, tolerances, …) may differ."
        )
    return rules.pop()


def check_state(rule: Rule, state) -> None:
    """Raise a TypeError (at trace time) if ``state`` is not the state ``rule``'s kind decides on."""
    want = _STATE_TYPES.get(rule.kind)
    if want is not None and not isinstance(state, want):
        raise TypeError(
            f"state.policy is a {type(state).__name__}, but a {rule.kind} policy needs a {want.__name__}: make the "
            f"state with iterlin.training.init_state(params, optimizer, policy, steps=steps) (or train/train_sweep)."
        )


def fmt_K(K: float) -> str:
    """``1``, ``100``, ``5e6``, ``∞``: K as the paper writes it."""
    K = float(K)
    if math.isinf(K):
        return "∞"
    if K >= 10_000:
        mant, exp = f"{K:.0e}".split("e")
        return f"{mant}e{int(exp)}"
    return str(int(K))


def log_size(policies: Sequence[RelinPolicy], steps: int) -> int:
    """How many re-linearisations a run of ``steps`` steps may log: ⌊steps / s⌋ + 1, s the shortest
    period any of ``policies`` can produce, capped at :data:`MAX_LOG` (with a warning); 0 when none
    logs on device (:func:`every`). One size for a sweep, so that its states stack."""
    shortest = [p.shortest for p in policies if p.shortest > 0]
    if not shortest:
        return 0
    n = int(steps) // min(shortest) + 1
    if n > MAX_LOG:
        warnings.warn(f"up to {n} re-linearisations possible; only the first {MAX_LOG} are logged", stacklevel=3)
        n = MAX_LOG
    return n


class RelinLog(NamedTuple):
    """When a run re-linearised, and its policy's log: entry j is its j-th re-linearisation
    (θ_s ← θ_t after t = ``step[j]`` steps). Shapes (J,) for one run; (R, J) for a sweep, J the
    longest log, padded with −1 (steps), NaN (floats) or ``""``. A field the policy does not log
    is None.

    ``step`` (int32) for every policy; ``gap`` (:func:`adaptive`: the gap that step measured);
    ``inner_steps``, ``acc``, ``loss`` and ``reason`` (strings of :data:`RELIN_REASONS`;
    :func:`until_solved`).
    """

    step: np.ndarray
    gap: np.ndarray | None = None
    inner_steps: np.ndarray | None = None
    acc: np.ndarray | None = None
    loss: np.ndarray | None = None
    reason: np.ndarray | None = None

    #: The prefix of the log's columns in a history or a result file (:meth:`as_dict`).
    PREFIX = "relin_"

    def as_dict(self) -> dict:
        """``{"relin_<field>": array}`` for the fields logged: a result file's columns."""
        return {f"{self.PREFIX}{k}": v for k, v in self._asdict().items() if v is not None}

    @classmethod
    def from_columns(cls, columns) -> "RelinLog | None":
        """The log whose columns (:meth:`as_dict`) are among ``columns`` (None: there are none)."""
        log = {k[len(cls.PREFIX):]: v for k, v in columns.items() if k.startswith(cls.PREFIX)}
        return cls(**log) if log else None


#: Padding of a sweep's per-run logs (the runs re-linearise different numbers of times).
_PAD = {"step": -1, "inner_steps": -1, "acc": math.nan, "loss": math.nan, "reason": "", "gap": math.nan}


def _run_history(policy, n_relin: int, K: int) -> RelinLog:
    """One run's log on the host (see :func:`history`)."""
    if isinstance(policy, SolveState):
        n = min(n_relin, int(policy.relin_step.shape[0]))
        reasons = np.asarray([RELIN_REASONS[r] for r in np.asarray(policy.relin_reason)[:n]], dtype=str)
        return RelinLog(np.asarray(policy.relin_step)[:n], inner_steps=np.asarray(policy.relin_inner_steps)[:n],
                        acc=np.asarray(policy.relin_acc)[:n], loss=np.asarray(policy.relin_loss)[:n], reason=reasons)
    if isinstance(policy, AdaptiveState):
        n = min(n_relin, int(policy.relin_step.shape[0]))
        return RelinLog(np.asarray(policy.relin_step)[:n], gap=np.asarray(policy.relin_gap)[:n])
    n = min(n_relin, MAX_LOG) if K > 0 else 0  # every(K): the steps K, 2K, …, n_relin·K
    return RelinLog((K * np.arange(1, n + 1)).astype(np.int32))


def history(state, sweep: bool = False) -> RelinLog:
    """The steps at which a run re-linearised (and its policy's log), as host arrays
    (:class:`RelinLog`).

    ``state`` is a final :class:`iterlin.training.TrainState` (``sweep``: stacked over R runs).
    Entry j is the run's j-th re-linearisation, for j below ``n_relin`` and :data:`MAX_LOG`.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> from iterlin import relin, train
      >>> f = lambda p, x: x @ p  # a linear model: (N, 1) -> (N, 1)
      >>> x = jnp.array([[1.0], [2.0]]); y = 3 * x
      >>> _, hist = train(f, jnp.zeros((1, 1)), (x, y), K=relin.every(3), steps=10, optimizer=optax.sgd(0.1),
      ...                 loss="mse")
      >>> hist.relin.step.tolist()
      [3, 6, 9]
    """
    state = jax.device_get(state)
    if not sweep:
        return _run_history(state.policy, int(state.n_relin), int(state.K))
    runs = int(np.shape(state.n_relin)[0])
    logs = [_run_history(tree_index(state.policy, i), int(state.n_relin[i]), int(state.K[i])) for i in range(runs)]
    out = {}
    for key, first in logs[0]._asdict().items():
        if first is None:
            continue
        fill = _PAD[key]
        J = max(len(getattr(log, key)) for log in logs)
        dtype = str if isinstance(fill, str) else first.dtype
        out[key] = np.asarray([list(getattr(log, key)) + [fill] * (J - len(getattr(log, key))) for log in logs],
                              dtype=dtype).reshape(runs, J)
    return RelinLog(**out)
