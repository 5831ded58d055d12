"""The paper's networks (Appendix C) in Flax linen, and a factory that returns what training needs.

Every model is exposed through ONE convention, ``apply_fn(params, x) -> outputs`` with outputs of
shape ``(N, O)`` (the last axis holds the outputs), so that the network f_θ(x) can be linearised
at θ_s (Sec. 3),

    f_lin_{s,t}(x) = f_{θ_s}(x) + ∇_θ f_{θ_s}(x)ᵀ (θ_t − θ_s),

with ``jax.jvp`` on ``apply_fn`` in its first argument.

Models
------
- :class:`CNN` -- the paper's LeNet variant for CIFAR-10 (two 5×5 convolutions with 50 channels,
  dense 120 and 84, 10 logits). The paper does not state the pooling: we use 2×2 max-pooling
  (stride 2) after each convolution and "VALID" padding, as LeNet.
- :class:`ResNet18` -- the usual CIFAR-10 variant of ResNet-18, with (``norm=True``) or without
  (``norm=False``) BatchNorm.
- :class:`MLP` -- 5 hidden layers of 50 ReLU units for the 1-d regression (Fig. 9).

Initialisation: Flax's default initialisers (kernels ``lecun_normal``, biases zeros, BatchNorm
scale ones and bias zeros). The paper does not state its initialisation. For the quintic MLP of
Figs. 1 and 9 this edition chooses PyTorch's default ``nn.Linear`` initialisation instead
(:func:`torch_default_init`, :func:`quintic_model`; see there why).

BatchNorm and linearisation
---------------------------
A network with BatchNorm is not a function of (θ, x) alone: it also depends on normalisation
statistics. :func:`make_model` offers two explicit modes for ``"resnet18_bn"``:

- ``bn_mode="batch"``: f(θ, x) normalises each BN layer's input with the batch's own mean and
  (biased) variance, computed inside the function. ``params`` is the Flax ``params`` collection;
  it is a pure function of (params, x) and is linearised as is (the statistics are linearised
  too). Outputs depend on the whole batch, so vmapping ``apply_fn`` over single examples changes
  its meaning (each example would be normalised by itself).
- ``bn_mode="frozen"``: statistics are frozen at the linearisation point θ_s and re-estimated at
  each re-linearisation. ``params`` is ``{"params": ..., "batch_stats": ...}``; ``apply_fn``
  normalises with the stored ``batch_stats`` wrapped in ``jax.lax.stop_gradient`` (zero gradient
  and zero tangent), and ``refresh(params, x)`` returns params whose ``batch_stats`` are exactly
  the batch mean and biased variance of every BN layer's input on the batch ``x`` at the given
  ``params`` (a forward pass in batch mode). After ``refresh(params, x)``, the frozen ``apply_fn``
  on ``x`` equals the batch-mode function on ``x``. The initial ``batch_stats`` are Flax's (mean 0,
  variance 1): call ``refresh`` before the first linearisation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from .conv import LOWERING_CHOICES, matmul_conv_general_dilated, max_pool_2x2, resolve_lowering
from .tree import tree_size, tree_stack
from .validate import MAX_SEED, check_choice, check_int

__all__ = [
    "CNN",
    "MLP",
    "BasicBlock",
    "ResNet18",
    "Model",
    "make_model",
    "cnn_features",
    "count_params",
    "torch_default_init",
    "quintic_model",
    "MODEL_NAMES",
    "BN_MODES",
    "CONV_CHOICES",
    "resolve_conv",
]

MODEL_NAMES = ("cnn", "resnet18", "resnet18_bn", "mlp")
BN_MODES = ("batch", "frozen")
#: ``make_model``'s ``conv`` values: a lowering of :data:`iterlin.conv.CONV_LOWERINGS`, or the rule "auto".
CONV_CHOICES = LOWERING_CHOICES

Dtype = Any


def resolve_conv(conv: str, name: str = "cnn") -> str:
    """The lowering ``make_model`` uses for ``conv`` (validated): ``"xla"``, ``"matmul"``, or the rule ``"auto"``.

    ``"auto"`` is ``"matmul"`` (:mod:`iterlin.conv`: slices and one matrix product) when JAX's
    default backend is the CPU, where XLA's convolutions run well below the matrix-product ceiling
    and its vmapped convolutions slower still (for the CNN and for ResNet-18 alike:
    ``benchmarks/bench_train.py`` measures it), and ``"xla"`` (``lax.conv_general_dilated``, cuDNN's
    convolutions on a GPU) on accelerators. The MLP has no convolution: its value is ``"xla"``.
    """
    lowering = resolve_lowering(conv)  # the one rule, shared with a user's networks (iterlin.conv)
    return "xla" if conv == "auto" and name == "mlp" else lowering


def _conv_layer(conv: str, *args, **kwargs) -> nn.Conv:
    """``nn.Conv(*args, **kwargs)`` lowered as ``conv`` says; the same parameters either way."""
    if conv == "matmul":
        kwargs["conv_general_dilated"] = matmul_conv_general_dilated
    return nn.Conv(*args, **kwargs)


def _max_pool(conv: str, h):
    """2×2 max-pooling with stride 2, as a reshape and a max under the ``"matmul"`` lowering."""
    if conv == "matmul":
        return max_pool_2x2(h)
    return nn.max_pool(h, (2, 2), strides=(2, 2), padding="VALID")


# ----------------------------------------------------------------------------------------------
# CNN (Appendix C)
# ----------------------------------------------------------------------------------------------


class CNN(nn.Module):
    """The paper's LeNet variant for CIFAR-10 (Appendix C).

    Architecture (shapes for a 32×32×3 input, NHWC)::

        x (N, 32, 32, 3)
        conv1 5×5, 50 channels, VALID -> ReLU -> max-pool 2×2 / 2      (N, 14, 14, 50)   "layer1"
        conv2 5×5, 50 channels, VALID -> ReLU -> max-pool 2×2 / 2      (N, 5, 5, 50)     "layer2"
        flatten                                                         (N, 1250)
        fc1 dense 120 -> ReLU -> fc2 dense 84 -> ReLU -> fc3 dense num_classes  (N, num_classes)

    The paper does not state the pooling: 2×2 max-pooling with stride 2 after each convolution and
    "VALID" padding (as LeNet, 32 → 28 → 14 → 10 → 5) is our choice. The outputs are logits (the
    softmax is part of the loss and is not linearised, Sec. 4).

    Parameters live at stable paths: ``params["conv1"]["kernel"]`` has shape (5, 5, 3, 50) (the
    first-layer filters of Fig. 7), then ``conv2``, ``fc1``, ``fc2``, ``fc3``.

    ``conv`` lowers the convolutions and poolings: ``"xla"`` (``lax.conv_general_dilated`` and
    ``lax.reduce_window``) or ``"matmul"`` (:mod:`iterlin.conv`: slices and one matrix product, a
    reshape and a max); the same parameters and, to rounding, the same function.

    Call: ``CNN().apply({"params": p}, x)`` returns logits (N, num_classes);
    ``apply(..., return_features=True)`` returns a dict with the features for the linear probes of
    Fig. 6: ``"layer1"`` (after conv1 + ReLU + pool, flattened, (N, 14·14·50) = (N, 9800)),
    ``"layer2"`` (after conv2 + ReLU + pool, flattened, (N, 1250)) and ``"logits"``.
    """

    num_classes: int = 10
    dtype: Dtype = jnp.float32
    conv: str = "xla"

    @nn.compact
    def __call__(self, x, return_features: bool = False):
        kw = dict(dtype=self.dtype, param_dtype=self.dtype)
        h = _conv_layer(self.conv, 50, (5, 5), padding="VALID", name="conv1", **kw)(x)
        h = _max_pool(self.conv, nn.relu(h))
        layer1 = h.reshape((h.shape[0], -1))
        h = _conv_layer(self.conv, 50, (5, 5), padding="VALID", name="conv2", **kw)(h)
        h = _max_pool(self.conv, nn.relu(h))
        layer2 = h.reshape((h.shape[0], -1))
        h = nn.relu(nn.Dense(120, name="fc1", **kw)(layer2))
        h = nn.relu(nn.Dense(84, name="fc2", **kw)(h))
        logits = nn.Dense(self.num_classes, name="fc3", **kw)(h)
        if return_features:
            return {"layer1": layer1, "layer2": layer2, "logits": logits}
        return logits


# ----------------------------------------------------------------------------------------------
# ResNet-18, CIFAR variant
# ----------------------------------------------------------------------------------------------


def _norm_layer(norm: bool, train: bool, dtype: Dtype, name: str) -> Callable:
    """BatchNorm over (N, H, W) per channel, or the identity when ``norm`` is False.

    momentum 0 makes the running statistics after one training-mode forward exactly the batch
    statistics (the running update is m·old + (1 − m)·batch); the exact two-pass variance
    (``use_fast_variance=False``) is used. Epsilon 1e-5 as PyTorch.
    """
    if not norm:
        return lambda h: h
    return nn.BatchNorm(
        use_running_average=not train,
        momentum=0.0,
        epsilon=1e-5,
        use_fast_variance=False,
        dtype=dtype,
        param_dtype=dtype,
        name=name,
    )


class BasicBlock(nn.Module):
    """ResNet basic block: conv3×3(stride) -> BN -> ReLU -> conv3×3 -> BN, plus the shortcut, -> ReLU.

    The shortcut is the identity, or conv1×1(stride) -> BN when the stride is not 1 or the width
    changes. Without BatchNorm (``norm=False``) the convolutions have biases and BN is the identity.
    Input (N, H, W, C_in) -> output (N, H/stride, W/stride, features).
    """

    features: int
    stride: int = 1
    norm: bool = True
    dtype: Dtype = jnp.float32
    conv: str = "xla"

    @nn.compact
    def __call__(self, x, train: bool = False):
        kw = dict(use_bias=not self.norm, dtype=self.dtype, param_dtype=self.dtype)
        s = (self.stride, self.stride)
        h = _conv_layer(self.conv, self.features, (3, 3), strides=s, padding=((1, 1), (1, 1)), name="conv1", **kw)(x)
        h = nn.relu(_norm_layer(self.norm, train, self.dtype, "bn1")(h))
        h = _conv_layer(self.conv, self.features, (3, 3), padding=((1, 1), (1, 1)), name="conv2", **kw)(h)
        h = _norm_layer(self.norm, train, self.dtype, "bn2")(h)
        if self.stride != 1 or x.shape[-1] != self.features:
            x = _conv_layer(self.conv, self.features, (1, 1), strides=s, padding="VALID", name="shortcut_conv",
                            **kw)(x)
            x = _norm_layer(self.norm, train, self.dtype, "shortcut_bn")(x)
        return nn.relu(h + x)


class ResNet18(nn.Module):
    """ResNet-18 for 32×32 CIFAR inputs (the usual CIFAR variant, He et al. 2016).

    Architecture (NHWC)::

        conv1 3×3, 64, stride 1, padding 1 -> bn1 -> ReLU          (N, 32, 32, 64)   no max-pool
        layer1: 2 BasicBlocks, width 64,  stride 1                 (N, 32, 32, 64)
        layer2: 2 BasicBlocks, width 128, stride 2                 (N, 16, 16, 128)
        layer3: 2 BasicBlocks, width 256, stride 2                 (N, 8, 8, 256)
        layer4: 2 BasicBlocks, width 512, stride 2                 (N, 4, 4, 512)
        global average pool                                         (N, 512)
        fc dense num_classes                                        (N, num_classes) logits

    ``norm=True``: BatchNorm after every convolution, convolutions without bias (11 173 962
    parameters for 10 classes). ``norm=False``: no BatchNorm, every convolution has a bias
    (11 169 162 parameters). Blocks are named ``layer{i}_{j}`` (i = 1..4, j = 0, 1), the stem
    ``conv1``/``bn1`` and the head ``fc``.

    ``train`` selects the BatchNorm statistics: True normalises with the batch's statistics (and,
    with ``mutable=["batch_stats"]``, writes them, exactly, to ``batch_stats``); False uses the
    stored ``batch_stats``. It has no effect when ``norm=False``. ``conv``: as :class:`CNN`'s.
    """

    num_classes: int = 10
    norm: bool = True
    dtype: Dtype = jnp.float32
    conv: str = "xla"

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = _conv_layer(
            self.conv,
            64,
            (3, 3),
            padding=((1, 1), (1, 1)),
            use_bias=not self.norm,
            dtype=self.dtype,
            param_dtype=self.dtype,
            name="conv1",
        )(x)
        h = nn.relu(_norm_layer(self.norm, train, self.dtype, "bn1")(h))
        for i, (width, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), start=1):
            for j in range(2):
                h = BasicBlock(
                    width,
                    stride=stride if j == 0 else 1,
                    norm=self.norm,
                    dtype=self.dtype,
                    conv=self.conv,
                    name=f"layer{i}_{j}",
                )(h, train=train)
        h = jnp.mean(h, axis=(1, 2))
        return nn.Dense(self.num_classes, dtype=self.dtype, param_dtype=self.dtype, name="fc")(h)


# ----------------------------------------------------------------------------------------------
# MLP (regression, Fig. 9)
# ----------------------------------------------------------------------------------------------


class MLP(nn.Module):
    """5 hidden layers of 50 ReLU units and a linear output (the regression model of Fig. 9).

    x (N, D) -> dense 50 -> ReLU (×5, named ``dense0`` .. ``dense4``) -> dense ``num_outputs``
    (``out``) -> (N, num_outputs). For the paper's scalar regression D = 1 and num_outputs = 1, so
    the output is (N, 1) (not (N,)): the training code treats the last axis as outputs.
    """

    num_outputs: int = 1
    width: int = 50
    depth: int = 5
    dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        kw = dict(dtype=self.dtype, param_dtype=self.dtype)
        h = x
        for i in range(self.depth):
            h = nn.relu(nn.Dense(self.width, name=f"dense{i}", **kw)(h))
        return nn.Dense(self.num_outputs, name="out", **kw)(h)


# ----------------------------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------------------------


class Model(NamedTuple):
    """What training needs.

    apply_fn: ``apply_fn(params, x) -> outputs`` of shape (N, O); a plain pure function, usable
        under jit / vmap / jvp.
    params: the initial parameter pytree (the Flax ``params`` collection dict, except for
        ``resnet18_bn`` with ``bn_mode="frozen"``: ``{"params": ..., "batch_stats": ...}``).
    refresh: ``refresh(params, x) -> params`` re-estimates the frozen BatchNorm statistics from the
        batch ``x`` at ``params``; only for ``resnet18_bn`` with ``bn_mode="frozen"``, else None.
    """

    apply_fn: Callable
    params: Any
    refresh: Callable | None = None


@functools.partial(jax.jit, static_argnums=0)
def _init(module: nn.Module, key, dummy):
    """``module.init(key, dummy)`` as one compiled program, cached by JAX on the module's fields and
    the shapes: the same variables, bit for bit, as Flax's op-by-op ``init`` (whose every initialiser
    and layer is a program of its own), compiled once instead of once per distinct shape."""
    return module.init(key, dummy)


def make_model(
    name: str,
    key,
    *,
    input_shape: tuple[int, ...] | None = None,
    num_classes: int | None = None,
    bn_mode: str | None = None,
    dtype: Dtype = jnp.float32,
    conv: str = "auto",
) -> Model:
    """Build one of the paper's models and return ``Model(apply_fn, params, refresh)``.

    Args:
        name: ``"cnn"`` (:class:`CNN`), ``"resnet18"`` (:class:`ResNet18` without BatchNorm),
            ``"resnet18_bn"`` (with BatchNorm; see ``bn_mode``) or ``"mlp"`` (:class:`MLP`).
        key: a JAX PRNG key (``jax.random.key`` or ``jax.random.PRNGKey``) for the initialisation
            (Flax default initialisers).
        input_shape: shape of one example, without the batch axis. Default (32, 32, 3) (NHWC) for
            the CIFAR models and (1,) for ``"mlp"``; must have 3 entries for the CIFAR models and
            1 for ``"mlp"``.
        num_classes: number of outputs O. Default 10 for the CIFAR models, 1 for ``"mlp"``.
        bn_mode: only for ``"resnet18_bn"``: ``"batch"`` (default) or ``"frozen"``; see the
            module docstring. Must be None for the other models.
        dtype: parameter and computation dtype (e.g. ``jnp.float64`` with x64 enabled).
        conv: how the convolutions and poolings are computed: ``"xla"``, ``"matmul"`` (slices and
            one matrix product, :mod:`iterlin.conv`) or ``"auto"`` (default: the rule of
            :func:`resolve_conv`, ``"matmul"`` for the CNN on the CPU). The parameters are the same
            either way, and the function too, to rounding.

    Returns:
        :class:`Model`. ``apply_fn(params, x)`` maps x of shape ``(N, *input_shape)`` to (N, O).

    Raises:
        ValueError: unknown ``name``, ``bn_mode`` or ``conv``, ``bn_mode`` given for a model without
            BatchNorm, bad ``input_shape`` / ``num_classes`` / ``dtype``.
    """
    check_choice(name, "name", MODEL_NAMES)
    conv = resolve_conv(conv, name)
    if name == "resnet18_bn":
        if bn_mode is None:
            bn_mode = "batch"
        check_choice(bn_mode, "bn_mode", BN_MODES)
    elif bn_mode is not None:
        raise ValueError(
            f"bn_mode={bn_mode!r} is not allowed with name={name!r}: bn_mode must be None unless "
            f"name='resnet18_bn' (then one of {', '.join(repr(m) for m in BN_MODES)})."
        )
    rank = 1 if name == "mlp" else 3
    if input_shape is None:
        input_shape = (1,) if name == "mlp" else (32, 32, 3)
    if (
        not isinstance(input_shape, (tuple, list))
        or len(input_shape) != rank
        or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in input_shape)
    ):
        what = "(features,)" if name == "mlp" else "(height, width, channels)"
        raise ValueError(
            f"input_shape={input_shape!r} is not allowed: for name={name!r} input_shape must be a "
            f"tuple of {rank} positive ints {what}."
        )
    input_shape = tuple(int(d) for d in input_shape)
    if num_classes is None:
        num_classes = 1 if name == "mlp" else 10
    num_classes = check_int(num_classes, "num_classes", minimum=1)
    try:
        is_float = jnp.issubdtype(jnp.dtype(dtype), jnp.floating)
    except TypeError:
        is_float = False
    if not is_float:
        raise ValueError(
            f"dtype={dtype!r} is not allowed: dtype must be a floating dtype such as jnp.float32 or jnp.float64."
        )

    dummy = jnp.zeros((1,) + input_shape, dtype)

    if name == "cnn":
        module = CNN(num_classes=num_classes, dtype=dtype, conv=conv)
    elif name == "mlp":
        module = MLP(num_outputs=num_classes, dtype=dtype)
    else:
        module = ResNet18(num_classes=num_classes, norm=(name == "resnet18_bn"), dtype=dtype, conv=conv)

    variables = _init(module, key, dummy)

    if name in ("cnn", "mlp", "resnet18"):

        def apply_fn(params, x):
            return module.apply({"params": params}, x)

        return Model(apply_fn, variables["params"])

    if bn_mode == "batch":

        def apply_fn(params, x):
            # Batch statistics computed from x inside the function; the updated stats are discarded.
            out, _ = module.apply({"params": params}, x, train=True, mutable=["batch_stats"])
            return out

        return Model(apply_fn, variables["params"])

    # bn_mode == "frozen"
    def _check_frozen(params, fn: str) -> None:
        if not isinstance(params, Mapping) or set(params.keys()) != {"params", "batch_stats"}:
            got = sorted(params.keys()) if isinstance(params, Mapping) else type(params).__name__
            raise TypeError(
                f"{fn}: params for bn_mode='frozen' must be a dict with keys "
                f"['batch_stats', 'params']; got {got}."
            )

    def apply_fn(params, x):
        _check_frozen(params, "apply_fn")
        frozen = {
            "params": params["params"],
            "batch_stats": jax.lax.stop_gradient(params["batch_stats"]),
        }
        return module.apply(frozen, x, train=False)

    def refresh(params, x):
        _check_frozen(params, "refresh")
        # momentum 0: the written running statistics are exactly the batch mean / biased variance.
        _, state = module.apply(params, x, train=True, mutable=["batch_stats"])
        return {"params": params["params"], "batch_stats": state["batch_stats"]}

    params = {"params": variables["params"], "batch_stats": variables["batch_stats"]}
    return Model(apply_fn, params, refresh)


def cnn_features(params, x, *, num_classes: int | None = None, conv: str = "auto") -> dict:
    """Layer-1 and layer-2 features of :class:`CNN` for the linear probes of Fig. 6.

    Args:
        params: the CNN's ``params`` collection (as from ``make_model("cnn", ...)``).
        x: images (N, H, W, 3).
        num_classes: number of logits; default: read from ``params["fc3"]["bias"]``.
        conv: the lowering, as :func:`make_model`'s.

    Returns:
        ``{"layer1": (N, 9800), "layer2": (N, 1250), "logits": (N, num_classes)}`` for 32×32 inputs.
    """
    if num_classes is None:
        num_classes = params["fc3"]["bias"].shape[-1]
    dtype = params["conv1"]["kernel"].dtype
    module = CNN(num_classes=num_classes, dtype=dtype, conv=resolve_conv(conv))
    return module.apply({"params": params}, x, return_features=True)


def count_params(params) -> int:
    """Total number of scalars in all array leaves of ``params`` (:func:`iterlin.tree.tree_size`).

    For ``bn_mode="frozen"`` pass ``params["params"]`` to leave out the BatchNorm statistics.
    """
    return tree_size(params)


# ----------------------------------------------------------------------------------------------
# The quintic model (Figs. 1 and 9): PyTorch's default initialisation
# ----------------------------------------------------------------------------------------------


def torch_default_init(key, params: Any) -> Any:
    """PyTorch's default ``nn.Linear`` initialisation for a tree of Dense layers.

    Every ``{"kernel": (fan_in, fan_out), "bias": (fan_out,)}`` layer gets kernel and bias drawn
    independently from U(−1/√fan_in, 1/√fan_in) (Kaiming-uniform with a = √5, PyTorch's default),
    in the dtype of the given arrays. Layers are visited in sorted order of their names; each gets
    its own ``fold_in`` of ``key``. Returns a new tree of the same structure.

    Why (this edition's choice; the paper does not state its initialisation): with Flax's default
    (zero biases) and a scalar input every ReLU of the quintic MLP has its kink at x = 0, so the
    network at initialisation is linear on each side of 0 and its empirical NTK on the 20 training
    points has rank 4: the linearisation at θ₀ can only fit two-piece linear functions. With this
    initialisation the kinks are spread over the data and the NTK has full rank 20.
    """
    if not isinstance(params, Mapping) or not params or not all(
        isinstance(v, Mapping) and set(v) == {"kernel", "bias"} for v in params.values()
    ):
        raise ValueError(
            "params is not allowed: torch_default_init needs a non-empty dict of Dense layers "
            "{'kernel': (fan_in, fan_out), 'bias': (fan_out,)}"
        )
    out = {}
    for i, name in enumerate(sorted(params)):
        layer = params[name]
        kernel, bias = jnp.asarray(layer["kernel"]), jnp.asarray(layer["bias"])
        if kernel.ndim != 2 or bias.shape != kernel.shape[1:] or kernel.shape[0] == 0:
            raise ValueError(
                f"params[{name!r}] is not allowed: its kernel must be (fan_in, fan_out) with fan_in >= 1 and "
                f"its bias (fan_out,); got kernel {tuple(kernel.shape)} and bias {tuple(bias.shape)}"
            )
        bound = 1.0 / math.sqrt(kernel.shape[0])
        k1, k2 = jax.random.split(jax.random.fold_in(key, i))
        out[name] = {
            "kernel": jax.random.uniform(k1, kernel.shape, kernel.dtype, -bound, bound),
            "bias": jax.random.uniform(k2, bias.shape, bias.dtype, -bound, bound),
        }
    return out


def quintic_model(seeds, dtype=jnp.float32):
    """The MLP 5×50 of Fig. 9 and one PyTorch-default initialisation per seed, stacked.

    Returns ``(apply_fn, params)`` with ``params`` stacked on a leading axis of ``len(seeds)``;
    seed s initialises with ``jax.random.PRNGKey(s)`` (:func:`torch_default_init`). ``apply_fn``
    maps (N, 1) inputs to (N, 1) outputs for ONE run (``jax.vmap`` it over the stacked params).
    ``dtype``: a floating dtype (``jnp.float64`` needs x64 enabled, see :func:`iterlin.precision.x64`).
    """
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__") or len(seeds) == 0 or any(
        isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s <= MAX_SEED for s in seeds
    ):
        raise ValueError(
            f"seeds={seeds!r} is not allowed: seeds must be a non-empty sequence of integers in [0, {MAX_SEED}] "
            "(jax.random.PRNGKey distinguishes exactly the seeds 0 .. 2**32 - 1)."
        )
    model = make_model("mlp", jax.random.PRNGKey(0), dtype=dtype)
    inits = [torch_default_init(jax.random.PRNGKey(int(s)), model.params) for s in seeds]
    return model.apply_fn, tree_stack(inits)
