"""The entry points :func:`train` and :func:`train_sweep` (Algorithm 1).

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..conv import lower_convolutions
from ..losses import Loss
from ..relin import RelinPolicy, as_policy, log_size, one_rule
from ..relin import history as relin_history
from ..tree import tree_stack
from ..validate import check_int
from ._checks import check_hyperparams, check_microbatch, check_optimizer, check_reset, check_train_args
from ._loop import fit
from ._placement import resolve_placement
from ._state import K_code, fresh_state, init_state
from ._steps import build_step

__all__ = ["train", "train_sweep"]


def _check_placement_kwargs(fit_kwargs: dict, *, sweep: bool, data, batch_size) -> None:
    """:func:`fit`'s checks of ``devices``/``shard_runs``/``data_parallel``, made before any compute."""
    resolve_placement(fit_kwargs.get("devices"), fit_kwargs.get("shard_runs"), fit_kwargs.get("data_parallel", False),
               sweep=sweep, vectorise=fit_kwargs.get("vectorise"), batch_size=batch_size,
               n_train=int(np.shape(data[0])[0]))


def _evaluate_in_microbatches(microbatch: int | None, fit_kwargs: dict) -> dict:
    """``fit_kwargs`` with ``eval_batch_size=microbatch`` where a microbatch is given and no
    ``eval_batch_size``: the evaluations walk chunks of the same size as the steps' gradients."""
    if microbatch is None or "eval_batch_size" in fit_kwargs:
        return fit_kwargs
    return {**fit_kwargs, "eval_batch_size": microbatch}


def _prepare(apply_fn, optimizer, loss, policies: list, data, steps, batch_size, refresh, reset_optimizer, microbatch,
             fit_kwargs: dict, *, sweep: bool) -> tuple[list, Callable, Callable, dict]:
    """What :func:`train` and :func:`train_sweep` check and build alike, once, before any compute:
    the arguments (a ValueError naming the parameter), ``apply_fn`` lowered as ``conv`` says
    (:func:`iterlin.conv.lower_convolutions`), the evaluation chunked like the steps
    (:func:`_evaluate_in_microbatches`), the policies' checks (:func:`_policy_for_fit`) and the one
    step function (:func:`build_step`; a sweep's runs share the first policy's rule). Returns
    ``(policies, apply_fn, step_fn, fit_kwargs)``."""
    check_reset(reset_optimizer)
    check_train_args(data, steps, loss, batch_size, fit_kwargs.get("eval_data"))
    _check_placement_kwargs(fit_kwargs, sweep=sweep, data=data, batch_size=batch_size)
    microbatch = check_microbatch(microbatch)
    apply_fn = lower_convolutions(apply_fn, fit_kwargs.get("conv", "auto"))
    fit_kwargs = _evaluate_in_microbatches(microbatch, fit_kwargs)
    policies, fit_kwargs = _policy_for_fit(policies, fit_kwargs)
    step_fn = build_step(apply_fn, optimizer, loss, refresh=refresh, reset_optimizer=reset_optimizer,
                         policy=policies[0], microbatch=microbatch)
    return policies, apply_fn, step_fn, fit_kwargs


def _initial_refresh(refresh, params, data, batch_size):
    """θ_0's statistics (BatchNorm "frozen") from the first ``batch_size`` training images."""
    x = jnp.asarray(data[0])
    return refresh(params, x if batch_size is None else x[:batch_size])


def train(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    K,
    steps: int,
    optimizer: optax.GradientTransformation,
    loss: str | Loss = "ce",
    batch_size: int | None = None,
    key=None,
    refresh: Callable | None = None,
    reset_optimizer: bool = False,
    microbatch: int | None = None,
    **fit_kwargs,
) -> tuple[Any, dict]:
    """Train ``apply_fn`` by iterative linearisation with period K, or another policy (Algorithm 1).

    Args:
      apply_fn: ``apply_fn(params, x) -> (N, O)`` outputs (logits for ``"ce"``).
      params: initial parameters θ_0 (any pytree); the first linearisation point.
      data: ``(x, y)`` training set, held on device: x (N, ...), y (N,) int labels or (N, O) targets.
      K: when to re-linearise: a period (int ≥ 1, an integral float such as 5e6, or ``math.inf``),
        i.e. :func:`iterlin.relin.every` ``(K)``, or any policy of :mod:`iterlin.relin`
        (``K=relin.adaptive(0.1)``, ``K=relin.until_solved(...)``).
      steps: number of optimisation steps T.
      optimizer: any optax transformation (its state is kept across re-linearisations, unless
        ``reset_optimizer``).
      loss: ``"ce"`` (softmax cross-entropy on the linearised logits) or ``"mse"`` (½‖f − y‖²).
      batch_size: mini-batch size, or None for full batch.
      key: PRNG key for batch order and augmentation (default ``PRNGKey(0)``).
      refresh: ``refresh(params, x) -> params`` applied at each re-linearisation (BatchNorm "frozen").
      reset_optimizer: re-initialise the optimizer's state at each re-linearisation (each
        linearisation a fresh convex problem, as Fig. 8's Adam-solved runs); default False.
      microbatch: None (default), or c ≥ 1: each step's gradient accumulated over chunks of c
        examples of its batch, the same step to rounding (:func:`make_step`); on a CPU the paper's
        CNN trains about 1.5 times as fast with c = 16 at batch 256 (``benchmarks/bench_train.py``).
        Only for models that treat the examples of a batch independently. The evaluations then walk
        chunks of c examples too, unless ``eval_batch_size`` is given.
      **fit_kwargs: passed to :func:`fit`: ``eval_data=(x_test, y_test)``; ``eval_every`` or
        ``eval_steps`` (step 0 and the last step are always evaluated; default
        :func:`default_evaluation`: up to 21 points, budgeted at a tenth of the images trained on);
        ``eval_batch_size``; ``augment`` (random flip + 4-pixel crop on device, NHWC);
        ``callback(step, state) -> dict`` run on the host at evaluation points, its values appended
        to the history (kernel distances, probe accuracies); ``checkpoint`` (file path: saved
        atomically at evaluation points, resumed when rerun with the same configuration);
        ``progress`` (a progress bar); ``config`` (a dict identifying the run in the checkpoint);
        ``data_parallel=True`` (each batch split over ``devices``, default every local device, θ
        replicated; the batch size must be a multiple of the device count; see :func:`fit`);
        ``conv``: how ``apply_fn``'s convolutions and poolings are computed, in the steps and the
        evaluations (:func:`iterlin.conv.lower_convolutions`): ``"auto"`` (the default) rewrites
        them into slices and matrix products (:func:`iterlin.conv.as_products`, the same function to
        rounding) on the CPU backend, where XLA's convolutions run slowly and several times more
        slowly inside the compiled loop (jax-ml/jax#12868), and leaves them as written elsewhere;
        ``"matmul"`` rewrites them everywhere, ``"xla"`` never. A network without them (an MLP,
        :func:`iterlin.models.make_model`'s CNN on the CPU, already lowered) computes the same
        either way.

    Returns:
      ``(params, history)``: θ_T and its :class:`iterlin.training.History` over the evaluation
      points: ``step``, ``n_relin`` (T/K so far), ``net_train``, ``lin_train``, ``net_test``,
      ``lin_test`` (:class:`iterlin.training.Metrics`: ``loss`` and ``acc`` or ``rmse``) for the
      network f(θ_t) and the current linear model f_lin_s(θ_t); ``diverged`` and ``diverged_step``
      (−1 if finite); ``relin`` (:class:`iterlin.relin.RelinLog`), the steps at which the run
      re-linearised, ``relin.step`` (J,) (θ_s ← θ_t after t = ``relin.step[j]`` steps; at most
      :data:`iterlin.relin.MAX_LOG` of them), with the policy's log (``gap`` for ``adaptive``;
      ``inner_steps``, ``acc``, ``loss``, ``reason`` for ``until_solved``); and ``extra``, the
      callback's values. It also reads as a mapping of flat columns (``history["net_test_acc"]``,
      ``history["relin_step"]``, …), the form result files store.

    Example:
      Full-batch SGD on the MSE of 4 points, re-linearising every K = 10 steps. The network and its
      current linearisation coincide right after a re-linearisation (steps 0 and 50) and drift
      apart in between (step 25):

      >>> import jax.numpy as jnp, optax
      >>> from iterlin import train
      >>> def f(params, x):  # a two-layer MLP: (N, 1) -> (N, 1), P = 12
      ...     return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
      >>> params0 = {"w1": jnp.array([[1.0, -2.0, 0.5, 1.5]]), "b1": jnp.array([0.0, 0.5, -0.5, 0.2]),
      ...            "w2": jnp.array([[1.0], [0.5], [-1.0], [0.3]])}
      >>> x = jnp.array([[-1.0], [-0.3], [0.4], [1.0]])
      >>> y = jnp.sin(3 * x)
      >>> params, hist = train(f, params0, (x, y), K=10, steps=50, optimizer=optax.sgd(0.5),
      ...                      loss="mse", eval_every=25)
      >>> hist.step.tolist(), hist.n_relin.tolist()
      ([0, 25, 50], [0, 2, 5])
      >>> print(hist.net_train.loss.round(4), hist.lin_train.loss.round(4))
      [0.2898 0.0918 0.0513] [0.2898 0.0921 0.0513]
      >>> hist.relin.step.tolist()
      [10, 20, 30, 40, 50]

      The same network re-linearised when its linear model's loss on the batch is more than 1 % off
      the network's (:func:`iterlin.relin.adaptive`):

      >>> from iterlin import relin
      >>> params, hist = train(f, params0, (x, y), K=relin.adaptive(0.01), steps=50, optimizer=optax.sgd(0.5),
      ...                      loss="mse", eval_every=25)
      >>> hist.relin.step.tolist(), hist.n_relin.tolist()
      ([2, 13, 37, 46], [0, 2, 4])
    """
    check_optimizer(optimizer)
    policy = as_policy(K)
    (policy,), apply_fn, step_fn, fit_kwargs = _prepare(apply_fn, optimizer, loss, [policy], data, steps, batch_size,
                                              refresh, reset_optimizer, microbatch, fit_kwargs, sweep=False)
    if refresh is not None:  # statistics at θ_0 before the first linearisation
        params = _initial_refresh(refresh, params, data, batch_size)
    state = init_state(params, optimizer, policy, steps=steps)
    state, history = fit(step_fn, state, apply_fn, data, steps=steps, loss=loss, batch_size=batch_size, key=key,
                         **fit_kwargs)
    return state.params, dataclasses.replace(history, relin=relin_history(state))


def _policy_for_fit(policies: list, fit_kwargs: dict) -> tuple[list, dict]:
    """The policies with ``until_solved``'s check chunked like the evaluation (``eval_batch_size``,
    when it names no ``check_batch_size``), and ``fit_kwargs`` with the policies in ``config`` (so a
    checkpoint names them; :func:`iterlin.relin.every` adds nothing: K is already recorded)."""
    ebs = check_int(fit_kwargs.get("eval_batch_size", 1000), "eval_batch_size")
    policies = [p._replace(check_batch_size=ebs) if p.train_check and p.check_batch_size is None else p
                for p in policies]
    one_rule(policies)
    if any(p.kind != "every" for p in policies):
        config = dict(fit_kwargs.get("config") or {})
        config["relin"] = [p.describe() for p in policies]
        fit_kwargs = {**fit_kwargs, "config": config}
    return policies, fit_kwargs


def train_sweep(
    apply_fn: Callable,
    params: Any,
    data: tuple,
    *,
    K: Sequence,
    steps: int,
    optimizer: optax.GradientTransformation,
    loss: str | Loss = "ce",
    batch_size: int | None = None,
    key=None,
    refresh: Callable | None = None,
    reset_optimizer: bool = False,
    hyperparams: Mapping[str, Sequence[float]] | None = None,
    return_state: bool = False,
    microbatch: int | None = None,
    **fit_kwargs,
) -> tuple[Any, dict]:
    """Several runs (values of K and/or initial parameters) trained in ONE compiled program.

    ``params`` is stacked on a leading run axis of size R (see :func:`iterlin.tree.tree_stack`, e.g.
    one initialisation per seed, or the same one repeated); ``K`` is a sequence of R periods, or of R
    re-linearisation policies of ONE kind (:mod:`iterlin.relin`) whose parameters may differ, e.g.
    ``K=[relin.adaptive(tol) for tol in (0.01, 0.1, 1.0)]``: the parameters are arrays in the state,
    so the runs are still one program. All runs see the same batch sequence (the same ``key``), so
    they differ only in K and θ_0; or ``key`` holds one key per run (raw keys (R, 2) or typed keys
    (R,)) and run i draws its batches from ``key[i]``. Run i equals ``train`` of run i alone (with
    its key and hyperparameters). A diverged run is frozen while the others continue.

    ``hyperparams``: per-run values of the optimizer's hyperparameters, ``{name: R numbers}`` (e.g.
    ``{"learning_rate": [0.1, 0.05, 0.01]}``), for an optimizer made with
    ``optax.inject_hyperparams``, whose hyperparameters are arrays in its state (η in
    θ_{t+1} = θ_t − η ∇_θ L(f_lin_s(θ_t)) for SGD): run i's state holds ``values[i]`` in
    ``opt_state.hyperparams[name]``, a scalar of the dtype the optimizer's ``init`` gives it (the
    highest float dtype of θ_0 unless ``hyperparam_dtype`` says otherwise), so runs with different
    rates are still one program. Each value overrides the one the optimizer was made with, which
    then serves only its inner state's ``init`` (whose leaves optax's own optimizers do not derive
    from their hyperparameters).
    ``return_state``: return the final :class:`TrainState` (stacked (R, ...): θ_T, θ_s, the
    optimizer's and the policy's states) in place of θ_T.

    On a CPU with one device a model of at least :data:`iterlin.training.STEP_RUNS_MIN_PARAMS`
    parameters (the CNN, ResNet-18) steps its runs one after the other (``vectorise=None``, see
    :func:`fit`: XLA:CPU's products batched over the runs cost more than the runs one by one);
    pass ``vectorise=True`` to vmap them anyway. With more than one local device the runs are
    vmapped and the run axis is sharded over the devices (``NamedSharding(mesh, P("runs"))``; R
    padded to a multiple of the device count by repeating the last run, the padding dropped from
    the results);
    ``devices=[...]`` picks the devices, ``shard_runs=True/False`` forces it on/off (see :func:`fit`).

    Returns ``(params, history)`` (``(state, history)`` with ``return_state``) with params stacked
    (R, ...) and the :class:`iterlin.training.History`'s arrays of shape (R, E) (``step`` is (E,),
    ``diverged``/``diverged_step`` are (R,); ``relin``, the re-linearisation steps and the policy's
    log, is (R, J), padded with −1 or NaN, see :func:`iterlin.relin.history`). Other arguments as
    :func:`train`.

    Example:
      K = 1 (gradient descent), K = 10 and K = ∞ (the linearisation at θ_0) from the same θ_0:

      >>> import math
      >>> import jax.numpy as jnp, optax
      >>> from iterlin import train_sweep, tree_stack
      >>> def f(params, x):  # a two-layer MLP: (N, 1) -> (N, 1), P = 12
      ...     return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"]
      >>> params0 = {"w1": jnp.array([[1.0, -2.0, 0.5, 1.5]]), "b1": jnp.array([0.0, 0.5, -0.5, 0.2]),
      ...            "w2": jnp.array([[1.0], [0.5], [-1.0], [0.3]])}
      >>> x = jnp.array([[-1.0], [-0.3], [0.4], [1.0]])
      >>> y = jnp.sin(3 * x)
      >>> params, hist = train_sweep(f, tree_stack([params0] * 3), (x, y), K=[1, 10, math.inf], steps=50,
      ...                            optimizer=optax.sgd(0.5), loss="mse", eval_every=50)
      >>> hist.n_relin[:, -1].tolist()  # T/K re-linearisations per run
      [50, 5, 0]
      >>> print(hist.net_train.loss.round(4))  # (R, E): runs × evaluation points
      [[0.2898 0.0449]
       [0.2898 0.0513]
       [0.2898 0.1414]]
    """
    if isinstance(K, (str, bytes, RelinPolicy)) or not hasattr(K, "__len__") or len(K) == 0:
        raise ValueError(f"K={K!r} is not allowed: K must be a non-empty sequence of periods (or policies), "
                         "one per run")
    policies = [as_policy(k, f"K[{i}]") for i, k in enumerate(K)]
    Ks = [K_code(p.K) for p in policies]
    leaves = jax.tree.leaves(params)
    if not leaves or any(np.shape(leaf)[:1] != (len(Ks),) for leaf in leaves):
        raise ValueError(
            f"params must be stacked on a leading run axis of size len(K)={len(Ks)}; got leading shapes "
            f"{sorted({np.shape(leaf)[:1] for leaf in leaves})}"
        )
    check_optimizer(optimizer)
    hyperparams = check_hyperparams(hyperparams, optimizer, params, len(Ks))
    policies, apply_fn, step_fn, fit_kwargs = _prepare(apply_fn, optimizer, loss, policies, data, steps, batch_size, refresh,
                                             reset_optimizer, microbatch, fit_kwargs, sweep=True)
    if refresh is not None:
        params = jax.vmap(lambda p: _initial_refresh(refresh, p, data, batch_size))(params)
    size = log_size(policies, steps)  # one log size for every run, so that their states stack
    policy_states = tree_stack([p.init(size) for p in policies])
    state = jax.vmap(lambda p, k, ps: fresh_state(p, optimizer, k, ps))(params, jnp.asarray(Ks, jnp.int32), policy_states)
    if hyperparams:
        state = state._replace(opt_state=_with_hyperparams(state.opt_state, hyperparams))
    state, history = fit(step_fn, state, apply_fn, data, steps=steps, loss=loss, batch_size=batch_size, key=key,
                         sweep=True, **fit_kwargs)
    history = dataclasses.replace(history, relin=relin_history(state, sweep=True))
    return state if return_state else state.params, history


def _with_hyperparams(opt_state, hyperparams: dict):
    """A sweep's ``opt_state`` (an ``optax.inject_hyperparams`` state, every leaf (R, ...)) with
    ``hyperparams[name]`` (R floats, :func:`check_hyperparams`) in place of each named
    hyperparameter: (R,) of the dtype the optimizer's ``init`` gave it."""
    values = dict(opt_state.hyperparams)
    for name, vals in hyperparams.items():
        values[name] = jnp.asarray(vals, values[name].dtype)
    return opt_state._replace(hyperparams=values)
