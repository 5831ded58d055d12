"""The iterative-linearisation step (Eq. 3–4): ``make_step`` and its update.

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import functools
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import optax

from ..linearise import linearised_apply
from ..losses import Loss, get_loss
from ..memo import memoise
from ..relin import RelinInfo, RelinPolicy, Rule, as_policy, check_state, every
from ..tree import tree_where
from ._batching import chunked
from ._checks import check_microbatch
from ._evaluation import metric_sums
from ._state import TrainState, commit_step

__all__ = ["make_linearised_update", "make_step", "mean_value_and_grad"]


def mean_value_and_grad(per_example: Callable, microbatch: int | None = None) -> Callable:
    """Return ``value_and_grad(params, *args, x, y) -> (L, ∇_θ L)`` of the batch mean
    L(θ) = (1/B) Σ_n ℓ_n(θ), where ``per_example(params, *args, x, y)`` returns (ℓ_1, …, ℓ_B).

    ``microbatch=None``: one pass over the whole batch. ``microbatch=c``: the same mean computed
    as (1/B) Σ_chunks Σ_{n in chunk} ℓ_n, the gradient of each chunk of c examples in turn
    (``jax.lax.scan``, the last ⌊B/c⌋·c … B − 1 examples as one more chunk; fewer than two chunks
    of c: the whole batch at once), summed: equal to
    rounding, since ∇ of a sum is the sum of the chunks' ∇ (gradient accumulation). Each chunk's
    activations and residuals are c examples' worth, so on a CPU they stay in cache (the paper's
    CNN: :mod:`iterlin.conv`'s products and copies are memory-bound on whole batches). Only for an
    ``apply_fn`` that treats the examples of a batch independently (not BatchNorm with batch
    statistics, whose outputs depend on the batch it sees).
    """

    def total(params, *args):
        return jnp.sum(per_example(params, *args))

    def whole(params, *args):
        return jax.value_and_grad(lambda p: jnp.mean(per_example(p, *args)))(params)

    def chunks(params, *args):
        *consts, x, y = args
        b = x.shape[0]
        n = b // microbatch
        if n <= 1:
            return whole(params, *args)
        head = n * microbatch
        xs = (x[:head].reshape((n, microbatch) + x.shape[1:]), y[:head].reshape((n, microbatch) + y.shape[1:]))
        vg = jax.value_and_grad(total)

        def body(carry, xy):
            return jax.tree.map(jnp.add, carry, vg(params, *consts, *xy)), None

        zero = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                            jax.eval_shape(vg, params, *consts, xs[0][0], xs[1][0]))
        acc, _ = jax.lax.scan(body, zero, xs)
        if head < b:
            acc = jax.tree.map(jnp.add, acc, vg(params, *consts, x[head:], y[head:]))
        return jax.tree.map(lambda a: a / b, acc)

    return whole if microbatch is None else chunks


def make_linearised_update(apply_fn: Callable, optimizer: optax.GradientTransformation, loss: str | Loss,
                           microbatch: int | None = None) -> Callable:
    """Return ``update(params, params_s, opt_state, x, y) -> (value, params, opt_state)`` (Eq. 3).

    One step of ``optimizer`` on the mean loss of the linear model at θ_s,
    value = (1/B) Σ_n ℓ(f_lin_s(θ_t, x_n), y_n), θ_{t+1} = θ_t + optimizer update of ∇_θ value,
    the gradient computed in chunks of ``microbatch`` examples when given (:func:`mean_value_and_grad`).
    A proposal only: the caller decides about re-linearisation and commits with :func:`commit_step`.
    """
    loss = get_loss(loss)

    def per_example(params, params_s, x, y):
        return loss.per_example(linearised_apply(apply_fn, params_s, params, x), y)

    value_and_grad = mean_value_and_grad(per_example, microbatch)

    def update(params, params_s, opt_state, x, y):
        value, grads = value_and_grad(params, params_s, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return value, optax.apply_updates(params, updates), opt_state

    return update


def _reinit_optimizer(optimizer: optax.GradientTransformation, params, opt_state):
    """``optimizer.init(params)``, a fresh state for the next linearisation (``reset_optimizer``),
    keeping ``opt_state``'s injected hyperparameters where the optimizer has them
    (``optax.inject_hyperparams``): a sweep's per-run values (:func:`iterlin.train_sweep`'s
    ``hyperparams``) outlive the reset, as each run alone keeps the rate it was made with."""
    fresh = optimizer.init(params)
    if isinstance(getattr(fresh, "hyperparams", None), Mapping):
        fresh = fresh._replace(hyperparams=opt_state.hyperparams)
    return fresh


def make_step(
    apply_fn: Callable,
    optimizer: optax.GradientTransformation,
    loss: str | Loss,
    *,
    refresh: Callable | None = None,
    reset_optimizer: bool = False,
    policy: RelinPolicy | None = None,
    microbatch: int | None = None,
) -> Callable:
    """Return ``step(state, (x, y)) -> (state, {"loss": L(f_lin(θ_t, x), y)})`` (Eq. 3–4).

    One step of ``optimizer`` on the linear model at θ_s (Eq. 3, :func:`make_linearised_update`),
    then the re-linearisation policy's decision (:mod:`iterlin.relin`): ``relin, policy_state =
    decide(state.policy, info)`` with ``info`` a :class:`iterlin.relin.RelinInfo` (the step count
    t + 1, ``state.K``, ``n_relin``, the loss); if ``relin``, θ_s ← θ_{t+1}. The proposal is committed
    once through :func:`commit_step`. ``policy``: None or :func:`iterlin.relin.every` (the period
    K = ``state.K``, (t + 1) mod K = 0), :func:`iterlin.relin.adaptive` (the step also computes the
    network's loss L(f(θ_t), x) on the batch: one more forward pass) or
    :func:`iterlin.relin.until_solved` (the step reads the whole training set:
    ``step(state, batch, (x_train, y_train))``, ``step.takes_data``; :func:`fit` passes its data).
    Only the policy's kind and static options matter here; its parameters are in the state
    (:func:`init_state` with the policy), so one step function serves every value of them.

    ``step.k1`` (for :func:`iterlin.relin.every` only) is the same step for a run with K = 1,
    computed without the linearisation (plain (S)GD's cost); :func:`fit` uses it for runs whose K
    is 1 where it can pick per run.

    ``refresh(params, x) -> params``, if given, runs at each re-linearisation on the current batch
    (BatchNorm statistics frozen at θ_s and re-estimated there, see :mod:`iterlin.models`).
    ``reset_optimizer`` re-initialises the optimizer state at each re-linearisation, so each
    linearisation is solved as a fresh convex problem (Fig 8); by default the state carries over.
    ``microbatch``: None (default), or an integer c ≥ 1: the gradient (of ``step`` and ``step.k1``)
    accumulated over chunks of c examples of the batch (:func:`mean_value_and_grad`; the same step
    to rounding, faster on a CPU for the paper's CNN; only for models that treat examples
    independently).

    Memoised: the same ``apply_fn``, ``optimizer`` (the same object), loss, ``refresh``,
    ``reset_optimizer``, ``microbatch`` and policy kind (:attr:`iterlin.relin.RelinPolicy.rule`) give the same function
    object, so :func:`fit` reuses its compiled programs.
    """
    return build_step(apply_fn, optimizer, loss, refresh=refresh, reset_optimizer=reset_optimizer, policy=policy,
                      microbatch=check_microbatch(microbatch))


def build_step(apply_fn: Callable, optimizer: optax.GradientTransformation, loss: str | Loss, *,
               refresh: Callable | None, reset_optimizer: bool, policy: RelinPolicy | None,
               microbatch: int | None) -> Callable:
    """:func:`make_step` for callers that have checked ``microbatch`` already (:func:`iterlin.training.train`
    and :func:`iterlin.training.train_sweep`, which derive their evaluation chunk from it): the same
    memoised step function, without checking it again."""
    rule = (every(1) if policy is None else as_policy(policy, "policy")).rule
    if rule.train_check and rule.check_batch_size is None:
        rule = rule._replace(check_batch_size=1000)  # fit's default eval_batch_size
    return _make_step(apply_fn, optimizer, get_loss(loss), refresh, bool(reset_optimizer), rule, microbatch)


@memoise
def _make_step(apply_fn, optimizer, loss_obj: Loss, refresh, reset_optimizer: bool, rule: Rule,
               microbatch: int | None) -> Callable:
    update = make_linearised_update(apply_fn, optimizer, loss_obj, microbatch)

    def per_example(params, x, y):
        return loss_obj.per_example(apply_fn(params, x), y)

    def plain_loss(params, x, y):
        return jnp.mean(per_example(params, x, y))

    plain_value_and_grad = mean_value_and_grad(per_example, microbatch)

    def k1_step(state: TrainState, batch):
        """K = 1 without the linearisation: θ_s = θ_t at every step, so f_lin_s(θ_t) = f(θ_t) and
        ∇_θ L(f_lin_s(θ_t)) = ∇_θ L(f(θ_t)): the same step as :func:`step` at K = 1 (equal up to
        rounding), at plain (S)GD's cost, with no Jacobian-vector product."""
        x, y = batch
        value, grads = plain_value_and_grad(state.params, x, y)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        if refresh is not None:
            params = refresh(params, x)
        if reset_optimizer:
            opt_state = _reinit_optimizer(optimizer, params, opt_state)
        new = commit_step(state, value, params, params, opt_state, jnp.asarray(True))
        return new, {"loss": value}

    def step(state: TrainState, batch, data=None):
        check_state(rule, state.policy)
        x, y = batch
        value, params, opt_state = update(state.params, state.params_s, state.opt_state, x, y)
        info = RelinInfo(
            step=state.step + 1,
            K=state.K,
            n_relin=state.n_relin,
            loss=value,
            net_loss=plain_loss(state.params, x, y) if rule.net_loss else None,  # one more forward pass
            check=(functools.partial(_train_check_on, apply_fn, loss_obj, data, rule.check_batch_size,
                                     state.params_s, params) if rule.train_check else None),
        )
        relin, policy = rule.decide(state.policy, info)
        if refresh is not None:  # a cond: the extra forward runs only when re-linearising (unless vmapped)
            params = jax.lax.cond(relin, lambda p: refresh(p, x), lambda p: p, params)
        params_s = tree_where(relin, params, state.params_s)
        if reset_optimizer:
            opt_state = tree_where(relin, _reinit_optimizer(optimizer, params, opt_state), opt_state)
        new = commit_step(state, value, params, params_s, opt_state, relin, policy)
        return new, {"loss": value}

    if rule.kind == "every":
        step.k1 = k1_step
    step.takes_data = rule.train_check
    return step


def _lin_means(apply_fn, metrics, n: int, classify: bool, params_s, params):
    """(loss, acc) of f_lin_s(θ) from ``metrics(models)`` sums over n examples (acc NaN unless ``classify``)."""
    sums = metrics({"lin": lambda xb: linearised_apply(apply_fn, params_s, params, xb)})
    acc = sums["lin", "acc"] / n if classify else jnp.asarray(jnp.nan, jnp.result_type(float))
    return sums["lin", "loss"] / n, acc


def _train_check_on(apply_fn, loss: Loss, data, batch_size: int, params_s, params):
    """(loss, acc) of the linear model f_lin_s(θ) on the whole training set ``data = (x, y)``, in chunks
    of ``batch_size`` (:func:`iterlin.relin.until_solved`'s check; accuracy NaN for real targets).
    The data is an argument, chunked here inside the caller's trace: a compiled step reads the data
    it is given."""
    x, y = data
    chunks = chunked(x, y, batch_size)
    classify = jnp.issubdtype(y.dtype, jnp.integer)
    metrics = lambda models: metric_sums(loss, models, chunks)  # noqa: E731
    return _lin_means(apply_fn, metrics, chunks.n, classify, params_s, params)
