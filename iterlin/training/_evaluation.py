"""Evaluation: the network and its linearisation on chunked splits, and the schedule of points.

A private module of :mod:`iterlin.training` (see its docstring), which exports what users need.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..linearise import linearised_apply
from ..losses import Loss
from ..memo import memoise
from ..validate import MAX_STEPS, check_int
from ._batching import Chunks
from ._state import RunState

__all__ = ["MetricKey", "metric_sums", "means", "MAX_EVAL_POINTS", "DEFAULT_EVAL_BUDGET", "DEFAULT_EVAL_POINTS", "MIN_EVAL_TRAIN",
           "default_evaluation", "eval_points", "Evaluation", "eval_program"]


class MetricKey(NamedTuple):
    """One evaluated quantity: ``model`` ("net": f(θ_t), "lin": f_lin_s(θ_t)), ``split`` (the
    evaluation split: "train", "test", …) and ``metric`` ("loss", "acc", "sq_err"; the history's
    "rmse" is √(sq_err / n)). ``name`` is its key in the history, ``"<model>_<split>_<metric>"``."""

    model: str
    split: str
    metric: str

    @property
    def name(self) -> str:
        return f"{self.model}_{self.split}_{self.metric}"


def metric_sums(loss: Loss, models: dict, chunks: Chunks) -> dict:
    """``{(model, metric): sum over the chunks}`` for every model of ``models`` (a name to
    ``fn(x_chunk) -> outputs``), all on the same chunks in one ``lax.scan`` (memory O(chunk size)):
    THE evaluation loop, pure in ``chunks = chunked(x, y, batch_size)``, so a compiled program takes
    them as an argument."""
    xc, yc, wc = chunks.x, chunks.y, chunks.weights
    names = ("loss", "acc") if jnp.issubdtype(yc.dtype, jnp.integer) else ("loss", "sq_err")

    def body(acc, inp):
        xb, yb, wb = inp
        new = {(m, k): v for m, fn in models.items() for k, v in loss.metrics(fn(xb), yb, wb).items()}
        return jax.tree.map(lambda a, b: a + b.astype(a.dtype), acc, new), None

    init = {(m, k): jnp.zeros((), jnp.result_type(float)) for m in models for k in names}
    sums, _ = jax.lax.scan(body, init, (xc, yc, wc))
    return sums


def _eval_sums(apply_fn: Callable, loss: Loss, state: RunState, chunks: dict) -> dict:
    """``{MetricKey: sum}`` of the network f(θ_t) and the linear model f_lin_s(θ_t) on
    ``chunks = {split: chunked(x, y, batch_size)}`` (``fit``'s evaluation)."""
    models = {
        "net": lambda xb: apply_fn(state.params, xb),
        "lin": lambda xb: linearised_apply(apply_fn, state.params_s, state.params, xb),
    }
    return {MetricKey(model, split, metric): v
            for split, part in chunks.items() for (model, metric), v in metric_sums(loss, models, part).items()}


def means(sums: dict, sizes: dict) -> dict:
    """``{MetricKey: sum}`` → the history's ``{name: mean}``; ``acc`` as a fraction, ``sq_err`` →
    ``rmse``. Works on (R,)-batched values."""
    out = {}
    for key, v in sums.items():
        v = np.asarray(v, np.float64) / sizes[key.split]
        if key.metric == "sq_err":
            out[key._replace(metric="rmse").name] = np.sqrt(v)
        else:
            out[key.name] = v
    return out


#: The most evaluation points a run may have (each is a pass over the evaluation data and a row
#: of the history, and a checkpoint stores the whole history again at each of them).
MAX_EVAL_POINTS = 100_001


#: The default evaluation (:func:`default_evaluation`): the images it evaluates, summed over its
#: points, are at most this fraction of the images the run trains on (steps × batch).
DEFAULT_EVAL_BUDGET = 0.1


#: The most points of the default schedule (every ``steps // 20``: 0, T/20, …, T).
DEFAULT_EVAL_POINTS = 21


#: The smallest training subset the default evaluation measures the training metrics on.
MIN_EVAL_TRAIN = 256


def default_evaluation(steps: int, batch: int, n_train: int, n_test: int = 0,
                       n_eval_train: int | None = None) -> tuple[int, int]:
    """The default evaluation schedule and training subset of :func:`fit`: ``(eval_every, n_eval_train)``.

    Evaluation is budgeted at :data:`DEFAULT_EVAL_BUDGET` of the images trained on, I = steps ·
    batch: every point evaluates the network and the linear model on the first ``n_eval_train``
    training images and on the ``n_test`` evaluation images. The training subset is
    n_sub = min(n_train, max(:data:`MIN_EVAL_TRAIN`, ⌊0.1·I / 21⌋ − n_test)) (or ``n_eval_train``
    when given) and the number of points n_pts = min(21, max(2, ⌊0.1·I / (n_sub + n_test)⌋)),
    spaced every ⌈steps / (n_pts − 1)⌉ steps (the last step is always a point). A long run gets 21
    points on the whole training split, a shorter one a subset, a short one fewer points, so that
    evaluation stays a small share of the run. Only the two ends remain when even they exceed the
    budget (a run of a few steps).

      >>> default_evaluation(steps=100_000, batch=128, n_train=4660)   # 21 points, every image
      (5000, 4660)
      >>> default_evaluation(steps=10_000, batch=128, n_train=50_000)  # 21 points, 6,095 images
      (500, 6095)
      >>> default_evaluation(steps=40, batch=256, n_train=1024)        # 4 points, 256 images
      (14, 256)
    """
    budget = DEFAULT_EVAL_BUDGET * steps * batch
    if n_eval_train is None:
        n_sub = min(n_train, max(MIN_EVAL_TRAIN, int(budget // DEFAULT_EVAL_POINTS) - n_test))
    else:
        n_sub = n_eval_train
    n_pts = int(min(DEFAULT_EVAL_POINTS, max(2, budget // (n_sub + n_test))))
    return max(1, -(-steps // (n_pts - 1))), n_sub


def eval_points(steps: int, eval_every: int | None, eval_steps: Sequence[int] | None) -> list[int]:
    if eval_steps is not None:
        pts = sorted({check_int(s, "eval_steps[i]", minimum=0, maximum=steps) for s in eval_steps} | {0, steps})
        if len(pts) > MAX_EVAL_POINTS:
            raise ValueError(
                f"eval_steps of {len(pts)} distinct steps (0 and steps included) is not allowed: at most "
                f"{MAX_EVAL_POINTS} evaluation points are allowed."
            )
    else:
        every = check_int(eval_every, "eval_every", maximum=MAX_STEPS)
        n = -(-steps // every) + 1  # the points 0, every, 2·every, … below steps, and steps
        if n > MAX_EVAL_POINTS:
            raise ValueError(
                f"eval_every={eval_every!r} is not allowed: with steps={steps} it gives {n} evaluation points; "
                f"at most {MAX_EVAL_POINTS} are allowed (eval_every >= {-(-steps // (MAX_EVAL_POINTS - 1))})."
            )
        pts = sorted(set(range(0, steps, every)) | {steps})
    return pts


class Evaluation(NamedTuple):
    """What :func:`_run` evaluates at its points: the network ``apply_fn`` and its linearisation,
    with ``loss``, on ``splits = {name: chunked(x, y, batch_size)}``."""

    apply_fn: Callable
    loss: Loss
    splits: dict


@memoise
def eval_program(apply_fn: Callable, loss: Loss, over_runs: str | None) -> Callable:
    """The compiled ``evaluate(state, splits) -> sums`` (:func:`_eval_sums`). ``over_runs``: None
    (one run), ``"map"`` (the state's run axis evaluated one run after the other with ``lax.map``:
    one run's memory) or ``"vmap"`` (vmapped, for a run axis sharded over devices); the splits are
    shared. The splits are an argument: one program for every value of the data, compiled once per
    shape."""

    def evaluate(state, splits):
        return _eval_sums(apply_fn, loss, state, splits)

    if over_runs == "map":
        return jax.jit(lambda state, splits: jax.lax.map(lambda st: evaluate(st, splits), state))
    return jax.jit(jax.vmap(evaluate, in_axes=(0, None)) if over_runs == "vmap" else evaluate)
