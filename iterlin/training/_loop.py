"""The one training loop, :func:`fit`: compiled chunks between evaluation points.

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from ..conv import contains_convolution, lower_convolutions
from ..losses import Loss, get_loss
from ..memo import memoise
from ..tree import tree_index, tree_size, tree_stack
from ..validate import check_int
from ._batching import batch_of, split_chunks
from ._checkpointing import RunIdentity, check_progress, data_fingerprint
from ._checks import check_pair, validate_common
from ._evaluation import Evaluation, default_evaluation, eval_points, eval_program, means
from ._history import History
from ._placement import Placement, pad_runs, resolve_placement, unpad_runs
from ._state import RunState

__all__ = ["fit", "callback_carry", "restore_callback"]


def callback_carry(callback: Callable | None, state) -> tuple:
    """What a stateful ``callback`` keeps from one evaluation point to the next (e.g. a power
    iteration's warm start), checkpointed with the state so that a resumed run records what an
    uninterrupted one does: ``callback.carry(state)``, a pytree of arrays whose structure, shapes
    and dtypes depend only on the run (not on the point reached), or ``()`` for a callback without
    ``carry`` (a plain function). :func:`restore_callback` gives it back on resume."""
    carry = getattr(callback, "carry", None)
    return () if carry is None else carry(state)


def restore_callback(callback: Callable | None, carry) -> None:
    """Give a resumed ``callback`` the :func:`callback_carry` read from the checkpoint
    (``callback.restore(carry)``; nothing for a callback without ``carry``)."""
    if getattr(callback, "carry", None) is not None:
        callback.restore(carry)


class _Programs(NamedTuple):
    """The compiled steps of one step function (:func:`_step_programs`)."""

    loop: Callable  #: ``loop(state, t0, t1, key, data)``: steps t0 … t1 − 1 in one ``fori_loop``
    step: Callable  #: ``step(state, t, key, data)``: step t


@memoise
def _step_programs(step_fn: Callable, batch_size, augment: bool, vmapped: bool, per_run_batches: bool,
                   batch_sharding) -> _Programs:
    """``step_fn``'s compiled programs: step t on the batch :func:`batch_of` ``(data, key, t,
    batch_size, augment)``, with the state, the step bounds, the key and the data as arguments.

    Memoised on the step function and the static options, so a second :func:`fit` with the same
    (memoised) step function and shapes compiles nothing (jit's own cache holds one executable per
    shape). ``vmapped``: the state has a leading run axis, ``step_fn`` is vmapped over it; the
    batch is shared, or drawn per run from a key per run (``per_run_batches``). ``batch_sharding``
    (data parallel): each batch is constrained to it. A step function with ``takes_data = True``
    is called ``step_fn(state, batch, data)`` (it reads the whole training set, e.g. the
    Adam-solved criterion); others ``step_fn(state, batch)``.
    """
    if getattr(step_fn, "takes_data", False):
        step3 = step_fn
    else:

        def step3(state, batch, data):
            return step_fn(state, batch)

    vstep = jax.vmap(step3, in_axes=(0, 0 if per_run_batches else None, None)) if vmapped else step3

    def draw(data, key, t):
        if vmapped and per_run_batches:
            batch = jax.vmap(lambda k: batch_of(data, k, t, batch_size, augment))(key)
        else:
            batch = batch_of(data, key, t, batch_size, augment)
        return batch if batch_sharding is None else jax.lax.with_sharding_constraint(batch, batch_sharding)

    def run_step(state, t, key, data):
        return vstep(state, draw(data, key, t), data)[0]

    def run_loop(state, t0, t1, key, data):
        return jax.lax.fori_loop(t0, t1, lambda t, st: run_step(st, t, key, data), state)

    return _Programs(loop=jax.jit(run_loop), step=jax.jit(run_step))


def _pays_loop_penalty(step_program: Callable, *args) -> bool:
    """Whether XLA:CPU would run ``step_program(*args)`` slower inside a ``fori_loop`` than step by
    step: on the CPU backend, when the step holds a convolution (``conv_general_dilated``, anywhere in
    its jaxpr; jax-ml/jax#12868). Read from the step's jaxpr (``jit(...).trace``: cached by JAX on the
    arguments' shapes, so a second call traces nothing)."""
    if jax.default_backend() != "cpu":
        return False
    return contains_convolution(step_program.trace(*args).jaxpr)


def _run(
    step_fn,
    state,
    data,
    key,
    evaluation: Evaluation,
    points,
    *,
    batch_size,
    augment: bool,
    sweep: bool,
    checkpoint,
    identity: RunIdentity | None,
    callback,
    progress,
    stop_when_diverged,
    compiled_loop=None,
    per_run_batches=False,
    vectorise: bool = True,
    placement: Placement | None = None,
):
    """Run the compiled chunks between evaluation points; evaluate, checkpoint, report.

    Step t's batch is ``batch_of(data, key, t, batch_size, augment)`` (:func:`make_batch_fn`);
    ``key`` is one key, or with ``per_run_batches`` one key per run (leading run axis). The
    programs are cached (:func:`_step_programs`, :func:`eval_program`) and take the data, the key,
    the evaluation splits and the state as arguments. A sweep's runs are ``vmap``-ed
    (``vectorise``, the default), or stepped one run after the other between evaluation points;
    the steps between evaluation points run in one ``fori_loop`` (``compiled_loop=True``) or one
    dispatch each (``False``); None (the default): the loop, unless the step pays XLA:CPU's
    convolution-in-a-loop penalty (:func:`_pays_loop_penalty`). Every way the results are the same
    (tests compare them in float64).
    A vmapped sweep on one device is evaluated one run after the other inside one program
    (``lax.map``: the memory of one run's evaluation); sharded over devices, vmapped.

    ``placement`` (:func:`resolve_placement`): with axis ``"runs"`` the R runs are padded to R' (the next
    multiple of the device count, repeating the last run and its key) and placed with
    ``P("runs")``; the compiled programs follow their inputs' shardings. Only the first R runs are
    evaluated, passed to ``callback``, checkpointed and returned. With axis ``"batch"`` the state is
    replicated and each batch is constrained to ``P("batch")``. The state is placed
    after a checkpoint is loaded (a checkpoint holds the unpadded state on the host).
    """
    history: dict[str, list] = {}
    done = 0
    if checkpoint is not None and os.path.exists(checkpoint):
        try:
            (state, carry), saved = load_checkpoint(checkpoint, (state, callback_carry(callback, state)))
        except CheckpointError as e:
            raise CheckpointError(f"{e}. Delete it to start this run afresh.") from e
        diff = identity.mismatches(saved.get("run") or {})
        if diff:
            raise CheckpointError(
                f"checkpoint {checkpoint} was written by a different run configuration ({'; '.join(diff)}); "
                "use another checkpoint path or delete it."
            )
        history, done = saved.get("history"), saved.get("done")
        check_progress(checkpoint, history, done, state, points)
        restore_callback(callback, carry)

    loop_runs = sweep and not vectorise
    runs = np.shape(jax.tree.leaves(state)[0])[0] if sweep else 1
    padded = runs  # R': the runs stepped, ≥ R (see ``placement``)

    # K = 1 runs take ``step_fn.k1`` (no Jacobian-vector product) wherever the choice is per run:
    # a lone run, runs stepped one by one, or a vmapped sweep whose every run has K = 1.
    k1_fn = getattr(step_fn, "k1", None)
    K_codes = np.ravel(np.asarray(jax.device_get(state.K)))
    if k1_fn is not None and (not sweep or vectorise) and np.all(K_codes == 1):
        step_fn = k1_fn
    run_step_fns = [k1_fn if k1_fn is not None and k == 1 else step_fn for k in K_codes]

    batch_sharding = None
    if placement is not None and placement.axis == "runs":
        padded = -(-runs // placement.size) * placement.size
        state = jax.device_put(pad_runs(state, runs, padded), placement.sharding("runs"))
        if per_run_batches:
            key = jax.device_put(pad_runs(key, runs, padded), placement.sharding("runs"))
        else:
            key = jax.device_put(key, placement.sharding())
    elif placement is not None:  # data parallel: θ replicated, each batch split over the devices
        state, key = jax.device_put((state, key), placement.sharding())
        batch_sharding = placement.sharding("batch")

    def view(state):
        """The R runs of the (possibly padded) state."""
        return unpad_runs(state, runs, padded)

    def run_key(i):
        return key[i] if per_run_batches else key

    vmapped = sweep and vectorise
    if loop_runs:  # one program per distinct step function, for one run at a time
        programs = {fn: _step_programs(fn, batch_size, augment, False, False, None) for fn in set(run_step_fns)}
    else:
        programs = _step_programs(step_fn, batch_size, augment, vmapped, bool(per_run_batches and vmapped),
                                  batch_sharding)
    chosen: list[bool] = []  # decided at the first chunk stepped (a finished run traces nothing)

    def use_loop(state) -> bool:
        if not chosen:
            if compiled_loop is not None:
                chosen.append(bool(compiled_loop))
            elif loop_runs:
                chosen.append(not any(_pays_loop_penalty(prog.step, tree_index(state, 0), jnp.int32(0), run_key(0), data)
                                      for prog in programs.values()))
            else:
                chosen.append(not _pays_loop_penalty(programs.step, state, jnp.int32(0), key, data))
        return chosen[0]
    veval = eval_program(evaluation.apply_fn, evaluation.loss,
                          ("vmap" if placement is not None and placement.axis == "runs" else "map") if vmapped
                          else None)

    def run_chunk(state, t0, t1):
        """Steps t0 … t1 − 1: one compiled ``fori_loop`` (:func:`use_loop`) or one jitted step per
        dispatch (the batch still drawn on device)."""
        if loop_runs:
            out = []
            for i in range(runs):
                st, k = tree_index(state, i), run_key(i)
                prog = programs[run_step_fns[i]]
                if use_loop(state):
                    st = prog.loop(st, jnp.int32(t0), jnp.int32(t1), k, data)
                else:
                    for t in range(t0, t1):
                        st = prog.step(st, jnp.int32(t), k, data)
                out.append(st)
            return tree_stack(out)
        if use_loop(state):
            return programs.loop(state, jnp.int32(t0), jnp.int32(t1), key, data)
        for t in range(t0, t1):
            state = programs.step(state, jnp.int32(t), key, data)
        return state

    def evaluate(state):
        if loop_runs:
            per_run = [jax.device_get(veval(tree_index(state, i), evaluation.splits)) for i in range(runs)]
            return {k: np.stack([np.asarray(v[k]) for v in per_run]) for k in per_run[0]}
        out = jax.device_get(veval(state, evaluation.splits))
        return {k: np.asarray(v)[:runs] for k, v in out.items()} if padded != runs else out

    bar = None
    if progress:
        from ..progress import progress_bar  # a bar on a terminal, plain lines elsewhere

        # ``done`` points are recorded, the last at step points[done - 1]: the state's step.
        bar = progress_bar(points[-1], initial=points[done - 1] if done > 0 else 0)

    def record(state, t):
        vals = means(evaluate(state), {name: c.n for name, c in evaluation.splits.items()})
        vals["step"] = t
        state = view(state)
        vals["n_relin"] = np.asarray(state.n_relin)
        if callback is not None:
            vals.update(callback(t, state) or {})
        for k, v in vals.items():
            history.setdefault(k, []).append(np.asarray(v).tolist())

    if done == 0:
        record(state, 0)
        done = 1
    for i in range(done, len(points)):
        if stop_when_diverged and bool(np.all(np.asarray(view(state).diverged))):
            break  # every run diverged (also when resuming a run that stopped so)
        t0, t1 = points[i - 1], points[i]
        state = run_chunk(state, t0, t1)
        record(state, t1)
        if checkpoint is not None:
            save_checkpoint(checkpoint, (view(state), callback_carry(callback, view(state))),
                            {"run": identity._asdict(), "history": history, "done": i + 1})
        if bar is not None:
            bar.update(t1 - t0)
    if bar is not None:
        bar.close()

    state = view(state)
    columns = {k: np.asarray(v) for k, v in history.items()}
    if sweep:  # per-point lists of per-run values (E, R, ...) → (R, E, ...); step stays (E,)
        columns = {k: (v if k == "step" else np.moveaxis(v, 0, 1)) for k, v in columns.items()}
    return state, History.of(columns, diverged=np.asarray(state.diverged),
                             diverged_step=np.asarray(state.diverged_step))


def fit(
    step_fn: Callable,
    state: RunState,
    apply_fn: Callable,
    data: tuple,
    *,
    steps: int,
    loss: str | Loss = "ce",
    batch_size: int | None = None,
    key=None,
    eval_data: tuple | None = None,
    eval_every: int | None = None,
    eval_steps: Sequence[int] | None = None,
    eval_batch_size: int = 1000,
    eval_train_size: int | None = None,
    augment: bool = False,
    callback: Callable | None = None,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = False,
    sweep: bool = False,
    config: dict | None = None,
    compiled_loop: bool | None = None,
    vectorise: bool | None = None,
    devices: Sequence[jax.Device] | None = None,
    shard_runs: bool | None = None,
    data_parallel: bool = False,
    conv: str = "auto",
) -> tuple[RunState, dict]:
    """The one training loop: run ``step_fn(state, batch) -> (state, metrics)`` for ``steps`` steps.

    Used by :func:`train`, :func:`train_sweep`, the Gauss–Newton loop and the Adam-solved loop.
    ``state`` is any :class:`RunState` (a :class:`TrainState` from :func:`init_state`, a
    :class:`iterlin.solvers.gauss_newton.GaussNewtonState` from
    :func:`iterlin.solvers.gauss_newton.init_gauss_newton_state`), ``step_fn`` a step for it that commits
    through :func:`commit_proposal`.
    Batches come from :func:`make_batch_fn` on device; at evaluation points the network and the
    current linear model are evaluated on the whole train (and test) split, ``callback`` is run, and
    with ``checkpoint`` set the state, the history and the callback's carry (:func:`callback_carry`)
    are saved atomically (a rerun resumes; a rerun with
    a different ``config`` or data is refused rather than silently mixed). With ``sweep=True`` the
    state has a leading run axis and ``step_fn`` is vmapped over it: batches are shared, unless
    ``key`` holds one key per run (raw keys of shape (R, 2), or typed keys of shape (R,)), when run i
    draws its batches (and augmentation) from ``key[i]`` exactly as a lone run with that key would
    (seeds trained side by side in one program). ``eval_train_size``: the training metrics are
    measured on the first ``eval_train_size`` training images (default: all of them when a schedule
    is given), so that evaluation stays a small share of a long run. Without ``eval_every`` and
    ``eval_steps`` the schedule is :func:`default_evaluation`'s (for ``eval_train_size`` when given,
    else with its subset): evaluation budgeted at a tenth of the images trained on, up to 21 points.
    ``compiled_loop``: run the steps between evaluation points in one compiled ``fori_loop``
    (True) or one jitted step per dispatch (False, the same results); None (the default): the
    ``fori_loop``, except on the CPU backend when the step's program holds a convolution
    (``lax.conv_general_dilated`` anywhere in its jaxpr), which XLA:CPU runs several times slower
    inside a loop (jax-ml/jax#12868): then one dispatch per step. :func:`train` and
    :func:`train_sweep` build their steps from ``apply_fn`` lowered by ``conv`` (below), which on the
    CPU leaves no convolution to pay it, so their steps run in the loop.
    ``conv``: how ``apply_fn``'s convolutions and poolings are computed in the evaluations
    (:func:`iterlin.conv.lower_convolutions`): ``"auto"`` (the default) as slices and matrix products
    (:func:`iterlin.conv.as_products`) on the CPU backend and as written elsewhere; ``"matmul"``
    always; ``"xla"`` as written. A model without convolutions or poolings (an MLP, the CNN of
    :func:`iterlin.models.make_model` on the CPU, already lowered) computes the same either way.
    ``vectorise``: a sweep's runs ``vmap``-ed together (True) or stepped one after the other
    between evaluation points (False); the same results up to the rounding of batched against
    single products (tests compare them in float64). None (the default): stepped where the sweep
    runs unsharded on a CPU and each run has at least
    :data:`iterlin.training.STEP_RUNS_MIN_PARAMS` parameters (a model bound by its products, which
    XLA:CPU computes more slowly batched over the runs), vmapped everywhere else (a small model, bound
    by dispatch; an accelerator; runs sharded over devices). ``benchmarks/bench_train.py``
    measures the routes (ratios 3, 3b, 3c).

    Several devices (one process; placement only, the results equal one device's up to the order
    of floating-point sums):

    * ``devices``: the devices to spread the work over, a non-empty list of distinct local devices;
      None: ``jax.local_devices()``.
    * ``shard_runs`` (sweeps): the state's leading run axis (every leaf (R, ...)) and, with one key
      per run, the keys (R, ...) are sharded over ``devices`` with ``NamedSharding(mesh,
      P("runs"))``; the data and a shared key are replicated. R is padded up to the next multiple
      R' of the device count by repeating the last run (its θ_0, K and key); the padding is computed
      and dropped: the history, ``callback``, the checkpoint and the returned state hold the R runs.
      None (default): shard when there is more than one device and ``vectorise`` is not False
      (the runs are then vmapped); True: shard (``vectorise=False`` is refused); False: never.
      Runs stepped one after the other stay on the default device.
    * ``data_parallel`` (a single run, ``sweep=False``): the state (θ, θ_s, optimizer state) and the
      data are replicated (``P()``) and each step's batch (B, ...) is split over ``devices`` on its
      example axis (``P("batch")``); the compiled step computes the same mean gradient, each device
      summing its B/n examples. B (``batch_size``, or N for the full batch) must be a multiple of
      the device count. Evaluation runs replicated.

    A checkpoint holds the unpadded state on the host, so a run resumes with any ``devices``.

    Compile once: the compiled programs are cached on ``step_fn`` (the same object: the step
    factories are memoised) and the static options (``batch_size``, ``augment``, the loss, how the
    runs are stepped and placed), and take the state, the key, the data and the evaluation splits as
    arguments; a second call with the same ``step_fn``, ``apply_fn``, loss and shapes compiles
    nothing, whatever the values of the data and the state.
    Returns the final state and its :class:`History` (see :func:`train`); ``History.relin`` is None
    (:func:`train` and :func:`train_sweep` add the re-linearisation policy's log).
    """
    x, y = (jnp.asarray(a) for a in check_pair(data, "data"))
    if eval_data is not None:
        eval_data = tuple(jnp.asarray(a) for a in check_pair(eval_data, "eval_data"))
    steps, batch_size = validate_common(x, y, steps, batch_size, eval_data)
    runs = np.shape(jax.tree.leaves(state.params)[0])[0] if sweep else 1
    placement, vectorise = resolve_placement(devices, shard_runs, data_parallel, sweep=sweep, vectorise=vectorise,
                                             batch_size=batch_size, n_train=x.shape[0],
                                             params_per_run=tree_size(state.params) // runs)
    loss = get_loss(loss)
    apply_fn = lower_convolutions(apply_fn, conv)
    if eval_train_size is not None:
        eval_train_size = check_int(eval_train_size, "eval_train_size")
        if eval_train_size > x.shape[0]:
            raise ValueError(f"eval_train_size={eval_train_size} is not allowed: it must be <= the {x.shape[0]} "
                             "training examples, or None for all of them")
    if eval_steps is None and eval_every is None:  # the default: budgeted (default_evaluation)
        n_test = 0 if eval_data is None else int(eval_data[0].shape[0])
        eval_every, eval_train_size = default_evaluation(
            steps, x.shape[0] if batch_size is None else batch_size, x.shape[0], n_test, eval_train_size)
    points = eval_points(steps, eval_every, eval_steps)
    eval_batch_size = check_int(eval_batch_size, "eval_batch_size")
    key = jax.random.PRNGKey(0) if key is None else jnp.asarray(key)
    key_data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    per_run = key_data.ndim == 2
    if per_run:
        runs = np.shape(jax.tree.leaves(state)[0])[0] if sweep else None
        if not sweep or key_data.shape[0] != runs:
            raise ValueError(
                f"key of shape {tuple(key_data.shape)} is not allowed: one key per run needs sweep=True and "
                f"a leading axis equal to the number of runs ({runs}); else pass one key"
            )
    n_eval_train = x.shape[0] if eval_train_size is None else eval_train_size
    splits = {"train": (x[:n_eval_train], y[:n_eval_train])}
    if eval_data is not None:
        splits["test"] = eval_data
    chunks = {name: split_chunks(a, b, eval_batch_size) for name, (a, b) in splits.items()}
    data = (x, y)
    if placement is not None:  # the data on every device: batches are drawn where the runs are
        data, chunks = jax.device_put((data, chunks), placement.sharding())
    evaluation = Evaluation(apply_fn, loss, chunks)
    identity = None
    if checkpoint is not None:  # the data and θ_0 identified too, so that a checkpoint is never mixed up
        identity = RunIdentity.of(
            config=config or {}, steps=steps, batch_size=batch_size, points=points, augment=bool(augment),
            loss=loss.name, n_train=int(x.shape[0]), key=np.asarray(key_data).ravel().tolist(),
            eval_train=int(n_eval_train), K=np.asarray(state.K).tolist(), data=data_fingerprint(x, y, eval_data),
            init=data_fingerprint(state))
    return _run(
        step_fn, state, data, key, evaluation, points, batch_size=batch_size, augment=bool(augment), sweep=sweep,
        checkpoint=checkpoint, identity=identity, callback=callback, progress=progress, stop_when_diverged=True,
        compiled_loop=compiled_loop, per_run_batches=per_run, vectorise=vectorise, placement=placement,
    )
