"""Linear probes on hidden features (Fig. 6) and first-layer filter snapshots (Fig. 7).

Linear probes (Alain & Bengio 2017) measure how linearly separable a layer's features are: a
linear classifier is fitted on the features of the training images and scored on the test images.
We use closed-form ridge regression onto one-hot targets (deterministic, no inner optimisation to
tune; the paper does not state its probe): with features standardised by the training mean and
standard deviation, Z = (X − μ)/σ, and one-hot targets Y (N × C), the probe minimises

    (1/n) ‖Z W + 1 bᵀ − Y‖²_F + λ ‖W‖²_F                    (b not penalised)

whose solution, with Z_c, Y_c centred over the n fitting examples, is

    W = (Z_cᵀZ_c + nλ I)⁻¹ Z_cᵀ Y_c        (primal, D × D, used when D ≤ n)
      = Z_cᵀ (Z_c Z_cᵀ + nλ I)⁻¹ Y_c       (dual, n × n, used when D > n),     b = ȳ − W ᵀ z̄,

and predicts argmax_c (z W + b)_c. λ is chosen from a log grid by accuracy on a held-out part of
the training features, then the probe is refitted on all of them.

Filters (Fig. 7): the change of the first-layer filters from initialisation, W_t − W_0, shown as
images with [−0.5, 0.5] mapped to [0, 1].

Both trackers are ``callback(step, state) -> dict`` factories for :func:`~iterlin.training.train`/``fit``;
they read the network's parameters θ_t (the hidden activations of the actual network, as in the
paper), and accept sweep states (a leading run axis) too.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .jacobian import eigh_psd
from ..linearise import linearised_apply
from ..precision import matmul
from ..tree import tree_index
from ..validate import check_int, check_positive, check_xy

__all__ = [
    "ProbeResult",
    "DEFAULT_LAMBDAS",
    "fit_linear_probe",
    "probe_tracker",
    "first_layer_filters",
    "filter_tracker",
    "filters_to_image",
    "heldout_tracker",
]

#: The ridge penalties tried by default (1e-4, 1e-3, ..., 1e2).
DEFAULT_LAMBDAS = tuple(float(v) for v in np.logspace(-4, 2, 7))


class ProbeResult(NamedTuple):
    """A fitted linear probe's accuracies (fractions in [0, 1]), the chosen ridge penalty λ, and
    whether it classifies each test example correctly ((M,) bool; ``test_acc`` is its mean), so that
    two probes scored on the same examples can be compared paired (:func:`iterlin.repro.stats.difference`)."""

    train_acc: float
    test_acc: float
    lam: float
    val_acc: float  # accuracy on the held-out part at the chosen λ (before refitting on all data)
    test_correct: np.ndarray | None = None


# ----------------------------------------------------------------------------------------------
# Ridge regression probe
# ----------------------------------------------------------------------------------------------


def _check_features(f, y, fname: str, yname: str):
    f = jnp.asarray(f)
    if f.ndim != 2:
        raise ValueError(f"{fname} must be a 2-d array (N, D) of features; got shape {tuple(f.shape)}.")
    check_xy(f, y, xname=fname, yname=yname)
    y = np.asarray(y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{yname} must be a 1-d array of integer class labels; got {y.dtype} of shape {y.shape}.")
    return f.astype(jnp.float32), y


def _ridge_scores(z, y1h, z_eval, lambdas):
    """Scores z_eval W + b of the ridge probes fitted on (z, y1h), one per λ: (L, M, C).

    One eigendecomposition of the Gram matrix (dual Z_cZ_cᵀ, n × n, when D > n; primal Z_cᵀZ_c,
    D × D, otherwise) serves the whole grid: (G + nλI)⁻¹ = U diag(1/(s + nλ)) Uᵀ.
    """
    n, d = z.shape
    mm = matmul  # full-precision products (iterlin.precision.KERNEL_PRECISION)
    z_mean, y_mean = z.mean(0), y1h.mean(0)
    zc, yc = z - z_mean, y1h - y_mean
    ze = z_eval - z_mean
    dual = d > n
    s, u, _ = eigh_psd(mm(zc, zc.T) if dual else mm(zc.T, zc))  # PSD: s clipped at 0
    if dual:  # W = Z_cᵀ U diag(1/(s + nλ)) Uᵀ Y_c, so z_e W = (z_e Z_cᵀ U) diag(·) (Uᵀ Y_c)
        left, right = mm(mm(ze, zc.T), u), mm(u.T, yc)
    else:  # W = U diag(1/(s + nλ)) Uᵀ Z_cᵀ Y_c
        left, right = mm(ze, u), mm(u.T, mm(zc.T, yc))

    def scores(lam):
        return mm(left, right / (s + n * lam)[:, None]) + y_mean

    return jax.lax.map(scores, lambdas)


@functools.partial(jax.jit, static_argnames="num_classes")
def _probe(z_tr, y_tr, z_te, y_te, fit_idx, val_idx, grid, num_classes):
    """The whole probe in one compiled program: standardise, choose λ on the held-out part, refit.

    Returns (train_acc, test_acc, index of the chosen λ in ``grid`` (ascending), held-out accuracy,
    (M,) whether each test example is classified correctly).
    """
    mu, sd = z_tr.mean(0), z_tr.std(0)
    sd = jnp.where(sd > 1e-6 * jnp.maximum(1.0, jnp.max(sd)), sd, 1.0)  # constant features → 0
    z_tr, z_te = (z_tr - mu) / sd, (z_te - mu) / sd
    y1h = jax.nn.one_hot(y_tr, num_classes, dtype=z_tr.dtype)
    acc = lambda scores, y: jnp.mean(jnp.argmax(scores, axis=-1) == y)  # noqa: E731
    val_scores = _ridge_scores(z_tr[fit_idx], y1h[fit_idx], z_tr[val_idx], grid)  # (L, n_val, C)
    val_accs = jax.vmap(acc, in_axes=(0, None))(val_scores, y_tr[val_idx])
    best = grid.shape[0] - 1 - jnp.argmax(val_accs[::-1])  # the best accuracy; ties: the larger λ
    scores = _ridge_scores(z_tr, y1h, jnp.concatenate([z_tr, z_te]), grid[best][None])[0]
    n = z_tr.shape[0]
    correct = jnp.argmax(scores[n:], axis=-1) == y_te
    return acc(scores[:n], y_tr), jnp.mean(correct), best, val_accs[best], correct


def fit_linear_probe(
    features_train,
    y_train,
    features_test,
    y_test,
    *,
    num_classes: int,
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    val_fraction: float = 0.2,
    seed: int = 0,
) -> ProbeResult:
    """Fit a ridge-regression linear probe on features and report its train and test accuracy.

    Deterministic: the held-out split is a fixed permutation drawn from ``seed`` (NumPy), the fit is
    closed form. Steps: standardise features with the training mean and standard deviation
    (constant features become 0); for each λ in ``lambdas`` fit on a fixed random (1 − val_fraction)
    part of the training set and score on the rest; keep the λ with the best held-out accuracy
    (ties: the larger λ, the simpler probe); refit on all training features with it. Each fit
    solves the ridge problem of the module docstring in the dual (n × n) when D > n and in the
    primal (D × D) otherwise, through one eigendecomposition (``jnp.linalg.eigh``) shared by the
    whole λ grid. Computation is float32 with full-precision matrix products, on the default device.

    Args:
      features_train: (N, D) training features; y_train: (N,) integer labels in [0, num_classes).
      features_test: (M, D) test features; y_test: (M,) labels.
      num_classes: C, the number of classes (one-hot width).
      lambdas: ridge penalties λ > 0 to choose from (default 1e-4, 1e-3, ..., 1e2).
      val_fraction: fraction of the training set held out to choose λ, in (0, 1).
      seed: seed of the held-out split.

    Returns:
      :class:`ProbeResult` ``(train_acc, test_acc, lam, val_acc, test_correct)``.
    """
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    z_tr, y_tr = _check_features(features_train, y_train, "features_train", "y_train")
    z_te, y_te = _check_features(features_test, y_test, "features_test", "y_test")
    if z_tr.shape[1] != z_te.shape[1]:
        raise ValueError(
            f"features_train has {z_tr.shape[1]} features per example but features_test has {z_te.shape[1]}: "
            "they must match."
        )
    for name, y in (("y_train", y_tr), ("y_test", y_te)):
        if y.min() < 0 or y.max() >= num_classes:
            raise ValueError(f"{name} holds labels in [{y.min()}, {y.max()}], outside [0, num_classes={num_classes}).")
    if isinstance(lambdas, (str, bytes)) or not hasattr(lambdas, "__len__") or len(lambdas) == 0:
        raise ValueError(f"lambdas={lambdas!r} is not allowed: lambdas must be a non-empty sequence of numbers > 0.")
    lambdas = [check_positive(lam, "lambdas[i]") for lam in lambdas]
    val_fraction = check_positive(val_fraction, "val_fraction")
    n = z_tr.shape[0]
    n_val = int(round(val_fraction * n))
    if val_fraction >= 1 or n_val < 1 or n - n_val < 1:
        raise ValueError(
            f"val_fraction={val_fraction!r} with {n} training examples leaves {n_val} held-out and {n - n_val} "
            "fitting examples: both must be at least 1 (val_fraction in (0, 1) and enough examples)."
        )
    seed = check_int(seed, "seed", minimum=0)

    perm = np.random.default_rng(seed).permutation(n)
    fit_idx, val_idx = np.sort(perm[n_val:]), np.sort(perm[:n_val])
    grid = sorted(lambdas)
    train_acc, test_acc, best, val_acc, correct = jax.device_get(
        _probe(z_tr, jnp.asarray(y_tr), z_te, jnp.asarray(y_te), jnp.asarray(fit_idx), jnp.asarray(val_idx),
               jnp.asarray(grid, z_tr.dtype), num_classes)
    )
    return ProbeResult(float(train_acc), float(test_acc), float(grid[int(best)]), float(val_acc),
                       np.asarray(correct, bool))


# ----------------------------------------------------------------------------------------------
# Trackers (callbacks for iterlin.train / fit)
# ----------------------------------------------------------------------------------------------


def _runs(state):
    """(is_sweep, number of runs, run(tree, r) -> that run's subtree)."""
    sweep = np.ndim(state.step) == 1
    runs = int(np.shape(state.step)[0]) if sweep else 1
    return sweep, runs, (lambda tree, r: tree_index(tree, r)) if sweep else (lambda tree, r: tree)


def _batched_features(feat, params, x, batch_size: int, layers) -> dict:
    """Run the jitted ``feat(params, x)`` over x in batches (last one padded), keep ``layers``: (N, D) each."""
    n = x.shape[0]
    bs = min(batch_size, n)
    nb = -(-n // bs)
    idx = np.minimum(np.arange(nb * bs), n - 1).reshape(nb, bs)
    parts = [feat(params, x[i]) for i in idx]
    missing = [layer for layer in layers if layer not in parts[0]]
    if missing:
        raise ValueError(
            f"layers={tuple(layers)!r} is not allowed: features_fn returned the layers {sorted(parts[0])}, "
            f"not {missing}."
        )
    return {layer: jnp.concatenate([p[layer].reshape(bs, -1) for p in parts])[:n] for layer in layers}


def probe_tracker(
    features_fn: Callable,
    train_xy: tuple,
    test_xy: tuple,
    *,
    num_classes: int = 10,
    layers: Sequence[str] = ("layer1", "layer2"),
    lambdas: Sequence[float] = DEFAULT_LAMBDAS,
    val_fraction: float = 0.2,
    seed: int = 0,
    batch_size: int = 500,
) -> Callable:
    """A ``callback`` for :func:`~iterlin.training.train` that fits linear probes on hidden features (Fig. 6).

    At each evaluation point the features of ``train_xy`` and ``test_xy`` are computed at the
    network's parameters θ_t (``state.params``), and a probe (:func:`fit_linear_probe`) is fitted on
    each requested layer.

    Args:
      features_fn: ``features_fn(params, x) -> {layer name: (N, ...)}`` (flattened to (N, D)); for the
        CNN, :func:`iterlin.models.cnn_features` (layers ``"layer1"``, ``"layer2"``).
      train_xy, test_xy: ``(x, y)`` images and integer labels to fit and to score the probes.
      num_classes: number of classes.
      layers: the layers to probe.
      lambdas, val_fraction, seed: as :func:`fit_linear_probe`.
      batch_size: examples per forward pass when computing features.

    Returns:
      ``callback(step, state) -> {"probe_<layer>_train_acc", "probe_<layer>_test_acc",
      "probe_<layer>_lam", "probe_<layer>_test_correct"}``: floats for one run, arrays (R,) for a
      sweep (a loop over runs); ``test_correct`` whether the probe classifies each test image
      correctly, (M,) bool for one run, (R, M) for a sweep (for paired comparisons of probes).

    Example::

        cb = probe_tracker(cnn_features, (x_train[:2000], y_train[:2000]), (x_test, y_test))
        params, hist = iterlin.train(model.apply_fn, model.params, (x_train, y_train), K=1, steps=...,
                                     optimizer=optax.sgd(1e-3), callback=cb)
        hist.extra["probe_layer1_test_acc"]
    """
    if not callable(features_fn):
        raise TypeError(f"features_fn={features_fn!r} is not allowed: it must be callable (params, x) -> dict.")
    x_tr, y_tr = train_xy
    x_te, y_te = test_xy
    check_xy(x_tr, y_tr, xname="train_xy x", yname="train_xy y")
    check_xy(x_te, y_te, xname="test_xy x", yname="test_xy y")
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    if isinstance(layers, str) or len(layers) == 0:
        raise ValueError(f"layers={layers!r} is not allowed: layers must be a non-empty sequence of layer names.")
    layers = tuple(layers)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    x_tr, x_te = jnp.asarray(x_tr), jnp.asarray(x_te)
    y_tr, y_te = np.asarray(y_tr), np.asarray(y_te)
    feat = jax.jit(features_fn)

    def callback(step, state):
        sweep, runs, run = _runs(state)
        out = {f"probe_{layer}_{k}": np.zeros(runs) for layer in layers for k in ("train_acc", "test_acc", "lam")}
        out.update({f"probe_{layer}_test_correct": np.zeros((runs, len(y_te)), bool) for layer in layers})
        for r in range(runs):
            p = run(state.params, r)
            f_tr = _batched_features(feat, p, x_tr, batch_size, layers)
            f_te = _batched_features(feat, p, x_te, batch_size, layers)
            for layer in layers:
                res = fit_linear_probe(f_tr[layer], y_tr, f_te[layer], y_te, num_classes=num_classes,
                                       lambdas=lambdas, val_fraction=val_fraction, seed=seed)
                out[f"probe_{layer}_train_acc"][r] = res.train_acc
                out[f"probe_{layer}_test_acc"][r] = res.test_acc
                out[f"probe_{layer}_lam"][r] = res.lam
                out[f"probe_{layer}_test_correct"][r] = res.test_correct
        if sweep:
            return out
        return {k: (v[0] if k.endswith("_correct") else float(v[0])) for k, v in out.items()}

    return callback


def first_layer_filters(params) -> jax.Array:
    """The CNN's first-layer filters ``params["conv1"]["kernel"]``, shape (5, 5, 3, 50)."""
    return params["conv1"]["kernel"]


def filter_tracker(get_filters: Callable = first_layer_filters, *, n: int = 3, params0: Any = None) -> Callable:
    """A ``callback`` for :func:`~iterlin.training.train` recording the change of filters from initialisation (Fig. 7).

    At each evaluation point it returns ``{"filters_delta": W_t[..., :n] − W_0[..., :n]}`` where
    W_t = ``get_filters(θ_t)`` has shape (h, w, c_in, C) (for the CNN (5, 5, 3, 50)), so each value is
    (h, w, c_in, n); (R, h, w, c_in, n) for a sweep. W_0 is taken at the first point the tracker sees,
    or from ``params0`` when given (needed when resuming from a checkpoint).

    In the history of ``train`` the values are stacked over evaluation points: (E, h, w, c_in, n);
    for a sweep, fit stacks runs first, then evaluation points: (R, E, h, w, c_in, n). Display with
    :func:`filters_to_image`. The paper shows the first 3 filters (its text says 5): ``n`` chooses.
    """
    if not callable(get_filters):
        raise TypeError(f"get_filters={get_filters!r} is not allowed: it must be callable params -> (h, w, c_in, C).")
    n = check_int(n, "n", minimum=1)
    mem: dict[str, Any] = {}

    def first_n(w, name):
        w = np.asarray(w)
        if w.ndim < 1 or w.shape[-1] < n:
            raise ValueError(f"{name} has shape {w.shape}: it needs at least n={n} filters on its last axis.")
        return w[..., :n]

    def callback(step, state):
        sweep, runs, run = _runs(state)
        w = np.stack([first_n(get_filters(run(state.params, r)), "get_filters(params)") for r in range(runs)])
        if "w0" not in mem:
            mem["w0"] = (w if params0 is None else
                         np.stack([first_n(get_filters(run(params0, r)), "get_filters(params0)") for r in range(runs)]))
        delta = w - mem["w0"]
        return {"filters_delta": delta if sweep else delta[0]}

    return callback


def heldout_tracker(apply_fn: Callable, x, y, *, batch_size: int = 1000, name: str = "val",
                    per_image: bool = False) -> Callable:
    """A ``callback`` for :func:`~iterlin.training.fit` scoring every run on held-out images, for
    early stopping chosen without the test set (Fig. 5).

    At each evaluation point, for θ_t = ``state.params`` and θ_s = ``state.params_s``: the accuracy
    on ``(x, y)`` (N held-out examples, integer labels) of the network f(θ_t) and of the current
    linear model f_lin_s(θ_t) = f(θ_s) + J(θ_s)(θ_t − θ_s) (for K = ∞, θ_s = θ_0: the fixed-NTK
    model). History keys ``net_<name>_acc`` and ``lin_<name>_acc``: floats for one run, (R,) for a
    sweep, stacked over evaluation points by ``fit``. With ``per_image``, also whether each model got
    each image right, ``net_<name>_per_image`` and ``lin_<name>_per_image``: (N,) bool for one run,
    (R, N) for a sweep, (R, E, N) once stacked, which a paired comparison of early-stopped runs on
    the same images needs (Fig. 5 on its test images). A diverged run is scored at its frozen
    state, as every tracker. ``batch_size``: examples per compiled forward pass (the
    last chunk padded with copies of the last example, which are dropped).
    """
    check_xy(x, y)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"name={name!r} is not allowed: name must be an identifier, such as 'val' or 'test'")
    x, y = jnp.asarray(x), jnp.asarray(y)
    n = int(x.shape[0])
    bs = min(batch_size, n)
    nb = -(-n // bs)
    idx = np.minimum(np.arange(nb * bs), n - 1).reshape(nb, bs)

    @jax.jit
    def correct(params, params_s, xb, yb):
        net = jnp.argmax(apply_fn(params, xb), axis=-1) == yb
        lin = jnp.argmax(linearised_apply(apply_fn, params_s, params, xb), axis=-1) == yb
        return jnp.stack([net, lin])

    def score(params, params_s) -> np.ndarray:  # (2, N) bool: the network's and the linear model's
        parts = [np.asarray(correct(params, params_s, x[idx[i]], y[idx[i]])) for i in range(nb)]
        return np.concatenate(parts, axis=-1)[:, :n]

    def callback(step, state):
        sweep, runs, run = _runs(state)
        hits = np.stack([score(run(state.params, r), run(state.params_s, r)) for r in range(runs)])  # (R, 2, N)
        acc = hits.sum(axis=-1, dtype=np.int64) / n  # (R, 2)
        out = {f"net_{name}_acc": acc[:, 0], f"lin_{name}_acc": acc[:, 1]}
        if per_image:
            out |= {f"net_{name}_per_image": hits[:, 0], f"lin_{name}_per_image": hits[:, 1]}
        return out if sweep else {k: (float(v[0]) if v.ndim == 1 else v[0]) for k, v in out.items()}

    return callback


def filters_to_image(delta, vrange: float = 0.5) -> np.ndarray:
    """Map filter values in [−vrange, vrange] linearly to [0, 1] (clipped), for ``imshow`` (Fig. 7).

    −vrange → 0, 0 → 0.5, +vrange → 1; values outside are clipped. Pure NumPy, any shape; e.g.
    ``filters_to_image(delta[..., i])`` is an (h, w, 3) RGB image of filter i.
    """
    vrange = check_positive(vrange, "vrange")
    return np.clip((np.asarray(delta, dtype=np.float64) + vrange) / (2.0 * vrange), 0.0, 1.0)
