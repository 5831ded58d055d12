"""The training state and the one divergence guard (Eq. 3–4's bookkeeping).

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import optax

from ..relin import RelinPolicy, log_size
from ..tree import tree_all_finite, tree_where
from ..validate import check_K, check_steps

__all__ = ["RunState", "TrainState", "K_code", "init_state", "fresh_state", "divergence_bound", "commit_proposal", "commit_step"]


class RunState(Protocol):
    """What the one training loop (:func:`iterlin.training.fit`: its steps, evaluation, history,
    checkpoints) and the one divergence guard (:func:`commit_proposal`) read from a run's state.

    An algorithm's state is a NamedTuple (a pytree; a sweep stacks runs on a leading axis of every
    leaf) with at least these attributes; each algorithm keeps its own state beside them:
    :class:`TrainState` (iterative linearisation, Eq. 3–4: θ_s, K, the optimizer's state, the
    re-linearisation policy's) or :class:`iterlin.solvers.gauss_newton.GaussNewtonState` (the damping λ or
    flow time τ; θ_s = θ, K = 1 and ``n_relin`` derived from its fields). The attributes are read,
    never set: each is a field or a property; ``step``, ``diverged`` and ``diverged_step`` must be
    fields (the guard replaces them with ``_replace``).
    """

    params: Any  #: θ_t (the network is evaluated at it)
    params_s: Any  #: θ_s (the linear model f_lin_s(θ_t) is evaluated too)
    step: jax.Array  #: int32 (): steps completed (a checkpoint's progress is checked against it)
    n_relin: jax.Array  #: int32 (): re-linearisations so far (T/K), recorded in the history
    K: jax.Array  #: int32 (): the re-linearisation period, 0 encodes ∞ (K = 1 selects a step's ``k1``)
    diverged: jax.Array  #: bool (): frozen by the guard
    diverged_step: jax.Array  #: int32 (): the step at which it diverged, −1 if it has not

    def _replace(self, **fields) -> RunState: ...


class TrainState(NamedTuple):
    """Everything a run of iterative linearisation needs to continue (one run; a sweep stacks runs on
    a leading axis). A :class:`RunState`.

    ``policy`` is the per-algorithm state that is neither θ nor the optimizer's: the
    re-linearisation policy's state for iterative linearisation (:func:`make_step`, see
    :mod:`iterlin.relin`): ``()`` for :func:`iterlin.relin.every` (K alone), an
    :class:`iterlin.relin.AdaptiveState` for :func:`iterlin.relin.adaptive`, a
    :class:`iterlin.relin.SolveState` for :func:`iterlin.relin.until_solved` (the Adam-solved
    linearisations). It is frozen with the rest of the run on divergence (:func:`commit_step`) and
    saved in checkpoints with the rest of the state. (Gauss–Newton runs have their own state,
    :class:`iterlin.solvers.gauss_newton.GaussNewtonState`.)
    """

    params: Any  #: θ_t
    params_s: Any  #: θ_s, the current linearisation point
    opt_state: Any  #: the optimizer's state (optax)
    step: jax.Array  #: int32 (): steps completed
    n_relin: jax.Array  #: int32 (): re-linearisations so far (T/K)
    K: jax.Array  #: int32 (): re-linearisation period (``every``) or the most steps per linearisation; 0 encodes ∞
    diverged: jax.Array  #: bool (): a non-finite or overflowing loss or update was met (commit_step); frozen
    diverged_step: jax.Array  #: int32 (): the step at which it diverged, −1 if it has not
    policy: Any = ()  #: per-algorithm state (see above); () for plain iterative linearisation


def K_code(K: int | float) -> int:
    """The int32 code of a period that :func:`iterlin.validate.check_K` has returned (an int ≥ 1 or
    ``math.inf``): K itself, 0 for ∞. Trusts its input: the entry points validate K."""
    return 0 if math.isinf(K) else int(K)


def init_state(params, optimizer: optax.GradientTransformation, K, policy=(), *, steps: int | None = None) -> TrainState:
    """A fresh run linearised at ``params`` (θ_s = θ_0), with ``optimizer.init(params)`` and ``policy``.

    ``K``: a period (int ≥ 1, integral float, ``math.inf``) with ``policy`` the per-algorithm state
    (default ``()``); or a :class:`iterlin.relin.RelinPolicy`, whose ``K`` and ``init`` give
    ``TrainState.K`` and ``TrainState.policy`` (then ``policy`` must be left out, and ``steps``, the
    run's length, sizes the policy's log: :func:`iterlin.relin.log_size`).
    """
    if isinstance(K, RelinPolicy):
        if not (isinstance(policy, tuple) and policy == ()):
            raise ValueError("policy is not allowed with K a RelinPolicy: the policy's own init makes the state")
        if K.shortest and steps is None:
            raise ValueError(f"steps=None is not allowed with K={K!r}: its log is sized by the run's length")
        policy = K.init(log_size([K], check_steps(steps)) if K.shortest else 0)
        K = K.K
    else:
        K = check_K(K)
    return fresh_state(params, optimizer, K_code(K), policy)


def fresh_state(params, optimizer: optax.GradientTransformation, K_code: Any, policy: Any = ()) -> TrainState:
    """:func:`init_state` for a period already coded (``K_code``: :func:`K_code` of a validated K, an
    int or an int32 array, traced under ``vmap`` in a sweep) and a policy state already made."""
    i32 = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
    return TrainState(
        params=params,
        params_s=params,
        opt_state=optimizer.init(params),
        step=i32(0),
        n_relin=i32(0),
        K=i32(K_code),
        diverged=jnp.asarray(False),
        diverged_step=i32(-1),
        policy=policy,
    )


def divergence_bound(dtype) -> float:
    """The largest loss magnitude a run may reach without counting as diverged: √(finfo(dtype).max).

    See :func:`commit_step`. A NaN compares False with it, so NaN and ±∞ count as diverged too.
    """
    return float(jnp.finfo(dtype).max) ** 0.5


def commit_proposal(state: RunState, value, proposed: RunState) -> RunState:
    """Advance ``state`` by one step to ``proposed``: THE divergence guard, through which every step
    function commits (:func:`commit_step` for :class:`TrainState`, the Gauss–Newton step for its own).

    ``value`` is the loss at θ_t; ``proposed`` the state after the step, of ``state``'s type and
    structure (its ``step``, ``diverged`` and ``diverged_step`` are set here).

    Divergence is any of:

    * a loss at θ_t that is not finite, or whose magnitude exceeds :func:`divergence_bound` of
      its dtype, √(largest finite value): √(1.8·10³⁰⁸) ≈ 1.3·10¹⁵⁴ in float64, √(3.4·10³⁸) ≈
      1.8·10¹⁹ in float32. Beyond it the square of the loss no longer fits the dtype: products of
      two numbers of that size (of residuals and Jacobians in gradients, Jᵀr and Gauss–Newton
      systems) overflow, so the run has left the range where its numbers mean anything, even
      while they are still finite (Fig. 9's float64 runs whose RMSE grows to 10¹²⁸ and beyond
      before ever reaching ∞: a squared-error loss of 10²⁵⁶);
    * an update that overflowed (``proposed.params``, θ_{t+1}, not finite).

    Either way the run keeps its whole state from before this step (every field but the three
    above), is marked ``diverged`` with ``diverged_step = t``, and stays frozen from then on (in a
    sweep, only that run). ``step`` counts on.
    """
    value = jnp.asarray(value)
    ok = (jnp.abs(value) <= divergence_bound(value.dtype)) & tree_all_finite(proposed.params) & ~state.diverged
    return tree_where(ok, proposed, state)._replace(
        step=state.step + 1,
        diverged=~ok,
        diverged_step=jnp.where(~ok & ~state.diverged, state.step, state.diverged_step),
    )


def commit_step(state: TrainState, value, params, params_s, opt_state, relin, policy=None) -> TrainState:
    """Advance ``state`` by one step through the divergence guard, :func:`commit_proposal`.

    ``value`` is the loss at θ_t; ``params``, ``params_s``, ``opt_state``, ``policy`` the proposed
    θ_{t+1}, θ_s, optimizer state and policy (``None``: keep ``state.policy``); ``relin`` (bool
    scalar) whether this step re-linearises (``n_relin`` + 1). On divergence the run keeps θ_t, θ_s,
    the optimizer state, the policy and ``n_relin`` from before this step.
    """
    policy = state.policy if policy is None else policy
    proposed = state._replace(params=params, params_s=params_s, opt_state=opt_state,
                              n_relin=jnp.where(relin, state.n_relin + 1, state.n_relin), policy=policy)
    return commit_proposal(state, value, proposed)
