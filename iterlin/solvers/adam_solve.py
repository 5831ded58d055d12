"""Iterative linearisation with each linearisation solved to convergence (Sec. 3.3 and 4.3, Fig. 8).

Section 3.3 connects iterative linearisation to second-order methods: with K → ∞ and each convex
problem solved exactly it becomes (generalised) Gauss–Newton. Section 4.3 implements this for the
softmax cross-entropy: the convex problem of linearisation i,

    min_θ  L_i(θ) = (1/N) Σ_n ℓ(f_lin_{s_i}(θ, x_n), y_n),
    f_lin_{s_i}(θ, x) = f(θ_{s_i}, x) + J(θ_{s_i}, x)(θ − θ_{s_i}),

is solved numerically by an inner optimiser (Adam in the paper, its moments fresh for every
linearisation), starting from θ_{s_i}; then θ_{s_{i+1}} ← θ (re-linearise, a "feature learning
step") and the next convex problem is solved. Each inner step is Eq. 3 with the inner optimiser;
only the re-linearisation rule (Eq. 4, ``(t + 1) mod K = 0``) is replaced by a convergence test.

Re-linearisation criterion (k = inner steps since the last re-linearisation, after the update):
the linear model is checked on the WHOLE training set when k is a multiple of ``check_every`` or
k = K, at the new parameters θ_{t+1} (the point that becomes θ_s), and we re-linearise when EITHER

1. ``target``:  its training accuracy is ≥ ``target_acc`` (default 1.0, "100 % train accuracy with
   each re-linearisation"; only for integer labels; ``target_acc=None`` disables it), OR
2. ``plateau``: its training loss L_i improved by less than ``plateau_tol`` relative to the previous
   check of the same linearisation, i.e. L_prev − L_now < plateau_tol · L_prev, one window of
   ``check_every`` steps back (the first check of a linearisation has no previous value and never
   plateaus; ``plateau_tol = 0`` disables this test), OR
3. ``K``:       k = K, the most steps one linearisation may take (the paper's K = 2·10⁵;
   ``math.inf`` for no limit).

Note: f_lin_s(θ_s) = f(θ_s), so once the network itself classifies the whole training set
correctly, every new linear model starts at 100 % and (1) fires at its first check: the run then
re-linearises every ``check_every`` steps, i.e. it becomes iterative linearisation with
K = ``check_every``. For the paper's "large constant K" use ``target_acc=None, plateau_tol=0``.

With the test never passing (unreachable target, ``plateau_tol = 0``) this is exactly
:func:`iterlin.training.train` with period K and the optimiser state reset at each
re-linearisation (``make_step(..., reset_optimizer=True)``). Mini-batches, ``"ce"`` and ``"mse"``
work as in :func:`iterlin.training.fit`; the check always uses the full, un-augmented training set.

Implementation: this is :func:`iterlin.training.train` with the re-linearisation policy
:func:`iterlin.relin.until_solved` and ``reset_optimizer=True``; :func:`train_adam_solved` is a thin
wrapper that builds Adam from ``lr`` and the policy from the criterion's arguments. The inner
update is Eq. 3 (:func:`iterlin.training.make_linearised_update`, as for every K), the criterion is
the policy's pure ``decide`` on its :class:`~iterlin.relin.SolveState` (in ``TrainState.policy``, its parameters
as arrays), and each step commits its proposal once through :func:`iterlin.training.commit_step`
(the divergence guard). The full-training-set check runs under ``jax.lax.cond`` so it costs one
pass over the training set (in chunks) every ``check_every`` steps, not every step. Each
re-linearisation is logged on device in fixed-size buffers (step, inner steps, training accuracy and
loss of the linear model just before it, and the reason), returned in the history.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import optax

from ..losses import Loss, get_loss
from ..relin import until_solved
from ..training import train
from ..validate import check_int, check_K, check_positive, check_steps, check_xy

__all__ = [
    "train_adam_solved",
]


@functools.lru_cache(maxsize=64)
def _adam(lr: float) -> optax.GradientTransformation:
    """``optax.adam(lr)``, one object per learning rate (so its steps and programs are reused)."""
    return optax.adam(lr)


def train_adam_solved(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    lr: float,
    steps: int,
    K=200_000,
    target_acc: float | None = 1.0,
    check_every: int = 100,
    plateau_tol: float = 1e-4,
    loss: str | Loss = "ce",
    batch_size: int | None = None,
    key=None,
    refresh: Callable | None = None,
    **fit_kwargs,
) -> tuple[Any, dict]:
    """Iterative linearisation with each linearisation solved by Adam until converged (Fig. 8).

    ``train(apply_fn, params, data, K=relin.until_solved(target_acc=target_acc,
    check_every=check_every, plateau_tol=plateau_tol, max_period=K), optimizer=optax.adam(lr),
    reset_optimizer=True, ...)`` (:func:`iterlin.training.train`, :func:`iterlin.relin.until_solved`),
    with the criterion's check chunked by ``eval_batch_size`` and ``inner_steps`` recorded at each
    evaluation point. Like ``train``, ``refresh`` is also applied at θ_0 before the first
    linearisation.

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)`` outputs (logits for ``"ce"``).
      params: initial parameters θ_0, the first linearisation point.
      data: ``(x, y)`` training set (x (N, ...), y (N,) int labels or (N, O) targets); the
        criterion is evaluated on all of it.
      lr: Adam learning rate (``optax.adam(lr)``, fresh moments at each linearisation).
      steps: total number of Adam steps T over all linearisations.
      K: the most steps per linearisation (paper: 2·10⁵); int ≥ 1 or ``math.inf``.
      target_acc: re-linearise once the linear model's training accuracy is ≥ this, in (0, 1];
        None disables the accuracy test (with ``plateau_tol=0`` too, every linearisation runs
        exactly K steps: the paper's constant K). Ignored for real-valued targets.
      check_every: check the criterion every this many steps of a linearisation (≥ 1).
      plateau_tol: re-linearise when the linear model's training loss improved by less than this
        fraction over the last ``check_every`` steps (≥ 0; 0 disables the plateau test).
      loss: ``"ce"`` or ``"mse"``.
      batch_size: mini-batch size for the Adam steps, or None for full batch.
      key: PRNG key for batch order and augmentation (default ``PRNGKey(0)``).
      refresh: ``refresh(params, x) -> params`` at each re-linearisation (frozen BatchNorm).
      **fit_kwargs: passed to :func:`iterlin.training.fit` (``eval_data``, ``eval_every``,
        ``eval_steps``, ``eval_batch_size`` (also the chunk size of the criterion's pass over the
        training set), ``augment``, ``callback``, ``checkpoint``, ``progress``, ``config``).

    Returns:
      ``(params, history)``: θ_T and its :class:`iterlin.training.History` (per evaluation point:
      ``step``, ``n_relin``, ``net_train``, …) with ``extra["inner_steps"]`` (steps into the
      current linearisation at each evaluation point) and, one entry per re-linearisation,
      ``relin`` (:class:`iterlin.relin.RelinLog`): ``step``, ``inner_steps``, ``acc``, ``loss``,
      ``reason``.
    """
    lr = check_positive(lr, "lr")
    steps = check_steps(steps)
    K_value = check_K(K)
    policy = until_solved(target_acc=target_acc, check_every=check_every, plateau_tol=plateau_tol, max_period=K_value)
    loss = get_loss(loss)
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(f"data must be a pair (x, y); got {type(data).__name__}")
    check_xy(*data)
    if fit_kwargs.pop("sweep", False):
        raise ValueError("sweep=True is not allowed: train_adam_solved runs one model (call it once per run)")
    eval_batch_size = check_int(fit_kwargs.get("eval_batch_size", 1000), "eval_batch_size")
    policy = policy._replace(check_batch_size=eval_batch_size)
    user_callback = fit_kwargs.pop("callback", None)
    config = dict(fit_kwargs.pop("config", None) or {})
    hyper = dict(policy.hyperparams)
    config["adam_solve"] = {
        "lr": lr,
        "K": -1 if math.isinf(K_value) else K_value,
        "target_acc": -1 if hyper["target_acc"] is None else hyper["target_acc"],
        "check_every": hyper["check_every"],
        "plateau_tol": hyper["plateau_tol"],
    }

    def callback(t, st):
        out = {"inner_steps": np.asarray(st.policy.inner_steps)}
        if user_callback is not None:
            out.update(user_callback(t, st) or {})
        return out

    return train(apply_fn, params, data, K=policy, steps=steps, optimizer=_adam(lr), loss=loss, batch_size=batch_size,
                 key=key, refresh=refresh, reset_optimizer=True, callback=callback, config=config, **fit_kwargs)
