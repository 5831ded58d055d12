"""The learning-rate bound of linearised training: why large K can diverge where K = 1 does not.

Training the linearisation around θ_s, f_lin_s(θ, x) = f(θ_s, x) + J_s (θ − θ_s) (Eq. 3), on the
mean loss L̄(θ) = (1/N) Σ_i ℓ(f_lin_s(θ, x_i), y_i) has the parameter Hessian

    ∇²_θ L̄(θ) = (1/N) J_sᵀ H(θ) J_s =: G(θ),      H = blockdiag_i ∂²ℓ/∂f² at f_lin_s(θ, x_i),

exactly (f_lin_s is affine in θ, so no second derivative of the network enters): the generalised
Gauss–Newton (GGN) matrix of the network at θ_s. Gradient descent on the linear model with rate η
multiplies the error along G's top eigenvector by (1 − η λ_max(G)) per step, so it is stable only
for η < 2 / λ_max(G):

* MSE (H = I): the loss is quadratic and G constant; full-batch GD on the linear model diverges
  exactly when η > 2/λ_max(G) (given any error along that direction), and converges below.
* Cross-entropy: H = diag(p) − ppᵀ shrinks as the softmax saturates, so 2/λ_max(G(θ_s)) is the
  rate at which the linear model can *start*; below it, training only makes it safer.

The network itself (K = 1) is not bound in the same way: its sharpness moves with θ and SGD can
self-stabilise ("edge of stability"), so a rate K = 1 trains at can make every long-K run diverge.
Measured on the paper's CNN at initialisation (512 CIFAR-10 training images, seed 0):
λ_max(G) ≈ 37, a bound of 0.054 (see ``iterlin/experiments/fig3.py``, its cpu scale).

:func:`ggn_matvec` is G·v by one JVP and one VJP (never materialising J); :func:`ggn_sharpness`
is λ_max(G) by power iteration (G is positive semi-definite, so the iteration converges to its
largest eigenvalue); :func:`max_stable_lr` is 2/λ_max(G); :func:`ggn_top_eig` also returns the
eigenvector (to warm-start the next measurement) and can stop early.

Along training: :func:`linear_model_sharpness` is λ_max of the linear model's Hessian at θ_t,
(1/N) J_sᵀ H(f_lin_s(θ_t)) J_s, and :func:`sharpness_recorder` a ``fit`` callback that records it
and η·λ/2 (the rate over the bound) at evaluation points. From such a history,
:func:`first_unstable_step` is where η first exceeded 2/λ_max(θ_s), and :func:`block_loss_rise`
whether the linear model's (convex) training loss rose inside a linearisation block.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..linearise import linearised_apply
from ..losses import Loss, get_loss
from ..tree import tree_index
from ..validate import check_int, check_xy

__all__ = ["ggn_matvec", "ggn_top_eig", "ggn_sharpness", "max_stable_lr", "linear_model_sharpness",
           "SharpnessRecorder", "sharpness_recorder", "first_unstable_step", "block_loss_rise", "BoundRecord",
           "bound_record", "STABLE_FRACTION"]


def _vdot(a, b):
    return sum(jnp.vdot(u, v) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def ggn_matvec(apply_fn: Callable, params: Any, x, y, loss: str | Loss = "ce", outputs=None) -> Callable:
    """Return ``v ↦ G v`` with G = (1/N) Jᵀ H J at θ_s = ``params`` (the module's maths).

    ``v`` and the result are pytrees shaped like ``params``; ``x`` (N, ...), ``y`` (N,) integer
    labels or (N, O) targets. H·u is the Hessian of the mean loss with respect to the outputs,
    applied by forward-over-reverse differentiation of the :class:`~iterlin.losses.Loss`, so any
    loss of that form works. H is taken at ``outputs`` (N, O), default f(θ_s, x): with
    ``outputs = f_lin_s(θ_t, x)`` G is the exact Hessian of the linear model's mean loss at θ_t
    (J stays J_s). Pure and traceable.
    """
    per_example = get_loss(loss).per_example
    out, jvp_fn = jax.linearize(lambda p: apply_fn(p, x), params)
    _, vjp_fn = jax.vjp(lambda p: apply_fn(p, x), params)
    out = out if outputs is None else outputs

    def mean_loss(o):
        return jnp.mean(per_example(o, y))

    def matvec(v):
        u = jvp_fn(v)
        hu = jax.jvp(jax.grad(mean_loss), (out,), (u,))[1]
        return vjp_fn(hu)[0]

    return matvec


def _unit(v):
    n = jnp.sqrt(_vdot(v, v))
    return jax.tree.map(lambda a: a / n, v)


@functools.lru_cache(maxsize=64)
def _power_step(apply_fn, loss):
    """One compiled power-iteration step per (apply_fn, loss): v ↦ (G v / ‖G v‖, vᵀ G v) for a
    unit v (the Rayleigh quotient of v). The iteration itself is a host loop: a compiled loop
    around the network's JVP and VJP took minutes to compile on CPU for the paper's CNN."""

    @jax.jit
    def step(params, outputs, x, y, v):
        gv = ggn_matvec(apply_fn, params, x, y, loss, outputs)(v)
        return _unit(gv), _vdot(v, gv)

    return step


@jax.jit
def _normal_like(params, key):
    """A standard normal draw shaped like ``params``, one key per leaf (one compiled program: the
    same draws, bit for bit, as drawing leaf by leaf)."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(treedef, [jax.random.normal(k, a.shape, a.dtype) for k, a in zip(keys, leaves)])


def ggn_top_eig(apply_fn: Callable, params: Any, x, y, *, loss: str | Loss = "ce", iters: int = 100,
                v0: Any = None, key=None, rtol: float | None = None, outputs=None) -> tuple[float, Any]:
    """``(λ, v)``: λ_max of the GGN G = (1/N) Jᵀ H J at ``params`` on (x, y) and its unit eigenvector
    (a pytree shaped like ``params``), by at most ``iters`` power iterations.

    λ is the Rayleigh quotient vᵀGv of the last iterate: an estimate from below, whose error falls
    like (λ₂/λ₁)^(2k) after k iterations. ``v0``: the start vector (any pytree shaped like
    ``params``; e.g. the ``v`` of the previous measurement along training, a warm start); default a
    normal draw from ``key`` (default ``jax.random.key(0)``). ``rtol``: stop early once the
    Rayleigh quotient changed by at most ``rtol`` (relative) in one iteration (None: all ``iters``).
    ``outputs``: where H is taken, as :func:`ggn_matvec`. Cost: one JVP and one VJP of ``apply_fn`` on all N inputs per iteration (about three forward
    passes), compiled once per (``apply_fn``, loss).
    """
    check_xy(x, y)
    iters = check_int(iters, "iters", minimum=1)
    if rtol is not None and not rtol >= 0:
        raise ValueError(f"rtol={rtol!r} is not allowed: rtol must be >= 0, or None for all iters")
    step = _power_step(apply_fn, get_loss(loss))
    v = _unit(_normal_like(params, jax.random.key(0) if key is None else key) if v0 is None else v0)
    x, y = jnp.asarray(x), jnp.asarray(y)
    prev = None
    for _ in range(iters):
        v, rayleigh = step(params, outputs, x, y, v)
        lam = float(rayleigh)
        if rtol is not None and prev is not None and abs(lam - prev) <= rtol * abs(lam):
            break
        prev = lam
    return lam, v


def ggn_sharpness(apply_fn: Callable, params: Any, x, y, *, loss: str | Loss = "ce", iters: int = 100,
                  key=None) -> float:
    """λ_max of the GGN G = (1/N) Jᵀ H J at ``params`` on (x, y), by ``iters`` power iterations.

    The Hessian of the linear model's mean loss (exactly, module docstring); an estimate from
    below that tightens with ``iters`` (the Rayleigh quotient of the last iterate). ``key``: the
    start vector's PRNG key (default ``jax.random.key(0)``). See :func:`ggn_top_eig`.
    """
    return ggn_top_eig(apply_fn, params, x, y, loss=loss, iters=iters, key=key)[0]


def max_stable_lr(apply_fn: Callable, params: Any, x, y, *, loss: str | Loss = "ce", iters: int = 100,
                  key=None) -> float:
    """2 / λ_max(G): the largest rate at which gradient descent on the linearisation at ``params``
    does not diverge from its start (exact for MSE, the starting bound for cross-entropy).

    Example:
      For a linear model f(θ, X) = Xw with the MSE, J = X and H = I, so G = XᵀX/N, whatever w:

      >>> import jax.numpy as jnp, numpy as np
      >>> from iterlin import ggn_sharpness, max_stable_lr
      >>> def f(params, x):  # (N, 2) -> (N, 1)
      ...     return x @ params["w"]
      >>> x, y = jnp.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]), jnp.zeros((3, 1))
      >>> params = {"w": jnp.zeros((2, 1))}
      >>> round(ggn_sharpness(f, params, x, y, loss="mse", iters=50), 4)  # power iteration
      1.7676
      >>> round(float(np.linalg.eigvalsh(np.asarray(x.T @ x) / 3).max()), 4)  # λ_max(XᵀX/N), directly
      1.7676
      >>> round(max_stable_lr(f, params, x, y, loss="mse", iters=50), 4)  # 2/λ_max
      1.1315
    """
    return 2.0 / ggn_sharpness(apply_fn, params, x, y, loss=loss, iters=iters, key=key)


def linear_model_sharpness(apply_fn: Callable, params_s: Any, params: Any, x, y, *, loss: str | Loss = "ce",
                           iters: int = 100, v0: Any = None, key=None, rtol: float | None = None) -> tuple[float, Any]:
    """``(λ, v)``: the top eigenpair of the linear model's Hessian at θ_t = ``params``, linearised at
    θ_s = ``params_s``: G = (1/N) J_sᵀ H(f_lin_s(θ_t, x)) J_s (the module's maths), the curvature
    that decides whether the step η at θ_t is stable (η < 2/λ). At θ_t = θ_s (K = 1, or right after
    a re-linearisation) it is the network's GGN at θ_t. As :func:`ggn_top_eig` (warm start ``v0``,
    ``rtol``), plus one linearised forward pass for f_lin_s(θ_t, x).
    """
    outputs = _lin_outputs(apply_fn)(params_s, params, jnp.asarray(x))
    return ggn_top_eig(apply_fn, params_s, x, y, loss=loss, iters=iters, v0=v0, key=key, rtol=rtol, outputs=outputs)


@functools.lru_cache(maxsize=64)
def _lin_outputs(apply_fn):
    return jax.jit(lambda params_s, params, x: linearised_apply(apply_fn, params_s, params, x))


class SharpnessRecorder(NamedTuple):
    """What :func:`sharpness_recorder` measures (its configuration; validated in the factory)."""

    x: Any  #: (M, ...) the fixed subset
    y: Any  #: (M,) labels or (M, O) targets
    lr: tuple  #: the rate η of each run, or one rate for every run
    loss: str
    iters: int
    rtol: float | None
    every: int | None


def sharpness_recorder(apply_fn: Callable, x, y, *, lr, loss: str | Loss = "ce", iters: int = 30,
                       rtol: float | None = 1e-3, every: int | None = None) -> Callable:
    """A ``callback(t, state) -> dict`` for :func:`iterlin.training.fit` (``train``/``train_sweep``'s
    ``callback=``) that records the linear model's sharpness into the history at evaluation points.

    At each evaluation point t (every one, or those with t % ``every`` == 0; NaN elsewhere), for
    each run: λ = λ_max of G = (1/M) J_sᵀ H(f_lin_s(θ_t)) J_s on the fixed subset (x, y) of M
    examples (:func:`linear_model_sharpness`; θ_s = ``state.params_s``: for K = 1 and right after a
    re-linearisation, the network's GGN at θ_t), and ``lr_over_bound`` = η λ / 2, the rate over the
    bound 2/λ: above 1, gradient descent on the current linearisation diverges along G's top
    eigenvector (exactly for MSE; from this point on, for cross-entropy). History keys:
    ``sharpness`` and ``lr_over_bound``, (E,) for one run or (R, E) for a sweep. A diverged run
    records NaN. ``lr``: one rate, or one per run of a sweep.

    To record at every re-linearisation, evaluate at the multiples of K (``eval_steps``); for K = 1,
    every N-th step: evaluation points at multiples of N, or ``every=N``.

    Warm start: each run's power iteration starts from its previous eigenvector (kept in the
    returned callback: use one recorder per training call; checkpointed with the run, its
    ``carry``, so a resumed run records the same values bit for bit), so that ``iters`` (at most; it stops
    once the estimate changes by under ``rtol``) can be small. Cost per recorded point and run: up
    to ``iters`` × (one JVP + one VJP of ``apply_fn`` on the M examples) ≈ 3·``iters`` forward
    passes of M examples, plus one linearised forward; compiled once per ``apply_fn``.
    """
    check_xy(x, y)
    lrs = tuple(float(v) for v in (lr if isinstance(lr, (list, tuple)) else [lr]))
    if not lrs or not all(v > 0 for v in lrs):
        raise ValueError(f"lr={lr!r} is not allowed: lr must be a rate > 0, or one per run")
    if every is not None:
        every = check_int(every, "every", minimum=1)
    cfg = SharpnessRecorder(jnp.asarray(x), jnp.asarray(y), lrs, get_loss(loss).name,
                            check_int(iters, "iters", minimum=1), rtol, every)
    return _Recorder(apply_fn, cfg, lr)


class _Recorder:
    """:func:`sharpness_recorder`'s callback, with each run's warm start (``warm``: run → its last
    eigenvector) as its checkpointed carry (:func:`iterlin.training.callback_carry`): ``(v, known)``,
    v shaped like ``state.params`` (zeros for a run not yet measured) and ``known`` (R,) bool (a
    scalar for one run), so that a resumed run starts each power iteration where the uninterrupted
    run would have, and records the same values bit for bit."""

    def __init__(self, apply_fn: Callable, cfg: SharpnessRecorder, lr):
        self.apply_fn, self.cfg, self.lr = apply_fn, cfg, lr
        self.warm: dict[int, Any] = {}

    def _one(self, i, state):
        if bool(state.diverged):
            return math.nan
        cfg = self.cfg
        lam, self.warm[i] = linear_model_sharpness(self.apply_fn, state.params_s, state.params, cfg.x, cfg.y,
                                                   loss=cfg.loss, iters=cfg.iters, v0=self.warm.get(i), rtol=cfg.rtol)
        return lam

    def __call__(self, t, state):
        cfg = self.cfg
        sweep = jnp.ndim(state.step) == 1
        runs = int(jnp.shape(state.step)[0]) if sweep else 1
        if len(cfg.lr) not in (1, runs):
            raise ValueError(f"lr={self.lr!r} is not allowed: one rate, or one per run ({runs} runs)")
        rates = np.broadcast_to(np.asarray(cfg.lr), (runs,))
        if cfg.every is not None and t % cfg.every:
            lam = np.full(runs, np.nan)
        else:
            lam = np.asarray([self._one(i, tree_index(state, i) if sweep else state) for i in range(runs)])
        ratio = rates * lam / 2.0
        return {"sharpness": lam if sweep else lam[0], "lr_over_bound": ratio if sweep else ratio[0]}

    def carry(self, state) -> tuple:
        if jnp.ndim(state.step) == 0:
            v = self.warm.get(0)
            return (jax.tree.map(np.zeros_like, state.params) if v is None else v), np.asarray(0 in self.warm)
        runs = int(jnp.shape(state.step)[0])
        vs = [self.warm.get(i) for i in range(runs)]
        zeros = jax.tree.map(lambda a: np.zeros_like(a[0]), state.params)
        return (jax.tree.map(lambda *a: np.stack([np.asarray(x) for x in a]), *[zeros if v is None else v for v in vs]),
                np.asarray([v is not None for v in vs]))

    def restore(self, carry) -> None:
        v, known = carry
        sweep = np.ndim(known) == 1
        self.warm = {i: (tree_index(v, i) if sweep else v) for i in range(np.size(known)) if np.ravel(known)[i]}


def first_unstable_step(history) -> np.ndarray:
    """(R,) int (or a scalar for one run): the first evaluation step at which ``lr_over_bound`` > 1
    (η above 2/λ_max(θ_s), :func:`sharpness_recorder`), −1 where it never was (or NaN throughout)."""
    ratio = np.asarray(history["lr_over_bound"], np.float64)
    steps = np.asarray(history["step"])
    over = np.atleast_2d(ratio) > 1.0  # NaN compares False
    first = np.where(over.any(axis=1), steps[np.argmax(over, axis=1)], -1)
    return first if ratio.ndim == 2 else first[0]


def block_loss_rise(history, rtol: float = 0.1):
    """``(rose, start, peak, at)``, each (R,) (scalars for one run): whether the linear model's
    training loss ``lin_train_loss`` rose inside a linearisation block by more than ``rtol``
    (relative) above its lowest value earlier in that block, and for the first such rise that low
    value, the risen value and its step (NaN, NaN, −1 where none).

    A block is the evaluation points with the same ``n_relin``. The linear model's loss is convex
    in θ, so a rise beyond SGD's noise means the step was too large for that linearisation (η above
    2/λ_max somewhere along the block); ``rtol`` is that noise allowance. A K = 1 run has one point
    per block and never rises. A non-finite loss after a finite one counts as a rise.
    """
    loss = np.atleast_2d(np.asarray(history["lin_train_loss"], np.float64))
    relin = np.atleast_2d(np.asarray(history["n_relin"]))
    steps = np.asarray(history["step"])
    R, E = loss.shape
    rose, start, peak, at = np.zeros(R, bool), np.full(R, np.nan), np.full(R, np.nan), np.full(R, -1)
    for r in range(R):
        low = math.inf
        for e in range(E):
            if e > 0 and relin[r, e] != relin[r, e - 1]:
                low = math.inf
            v = loss[r, e]
            if math.isfinite(low) and (not math.isfinite(v) or v > (1.0 + rtol) * low):
                rose[r], start[r], peak[r], at[r] = True, low, v, steps[e]
                break
            if math.isfinite(v):
                low = min(low, v)
    one = np.ndim(history["lin_train_loss"]) == 1
    return tuple(a[0] for a in (rose, start, peak, at)) if one else (rose, start, peak, at)


#: The share of the linear model's bound 2/λ_max(θ_s) that the rate of a reference run is meant to
#: stay under along training (:func:`iterlin.repro.claims.sharpness_claim` judges it,
#: :func:`iterlin.repro.plotting.plot_bound` draws it): a margin for the sharpening between records.
STABLE_FRACTION = 1 / 3


class BoundRecord(NamedTuple):
    """The bound along training of a sweep history (:func:`bound_record`), for a plot."""

    step: np.ndarray  #: (E,) evaluation steps
    bound: np.ndarray  #: (R, E) 2/λ_max(θ_s) at the recorded points, NaN elsewhere
    lr: np.ndarray  #: (R,) each run's rate η
    K: np.ndarray  #: (R,) each run's period
    rose_at: np.ndarray  #: (R,) the step at which the linear model's loss first rose inside a block, −1 if never


def bound_record(history) -> BoundRecord:
    """:class:`BoundRecord` of a sweep history with a sharpness record
    (:func:`sharpness_recorder`): the bound 2/λ_max = η / ``lr_over_bound`` at each recorded point,
    and :func:`block_loss_rise`'s step for each run (−1 without ``lin_train_loss``)."""
    ratio = np.atleast_2d(np.asarray(history["lr_over_bound"], np.float64))
    lr = np.broadcast_to(np.asarray(history["lr"], np.float64), ratio.shape[:1]).copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = np.where(ratio > 0, lr[:, None] / ratio, np.nan)
    rose_at = (np.atleast_1d(block_loss_rise(history)[3]) if "lin_train_loss" in history
               else np.full(ratio.shape[0], -1))
    K = np.broadcast_to(np.asarray(history["K"], np.float64), ratio.shape[:1]).copy()
    return BoundRecord(np.asarray(history["step"]), bound, lr, K, np.asarray(rose_at, int))
