"""Experiment configurations: per-figure defaults at three scales, and up-front validation.

Every notebook resolves its parameters here, before any data is read or anything is compiled::

    config = resolve("fig3", scale="smoke", K=5e6, lr=None)   # None means "the scale's default"

Scales
------
``"smoke"``
    The default: the paper's CNN on REAL CIFAR-10 images (the copy named by ``ITERLIN_CIFAR10``;
    CI uses the 4,660 + 932-image subset), tens to hundreds of images and tens of steps, so that a
    notebook runs in minutes on a 2-core CPU, JAX start-up and compilation included (measured
    times: ``notebooks/README.md``). Compilation is a large share: about 15 s of CPU per
    training program (one per sweep, i.e. per panel or per training-set size).
    Learning rates are larger than the paper's (its 1e-3…1e-5 would show nothing in 50 steps) and
    K is scaled with the number of steps so that the number of re-linearisations T/K (the paper's
    feature-learning proxy, Definition 1) stays comparable. Every notebook says what it changes.
``"gpu"``
    Every installed image (``n_train=None``) and a step count estimated (from FLOPs, not measured)
    to fit about ten minutes of one H100.
``"paper"``
    The paper's settings where it states them (SPEC.md, Sec. 4, Appendix C); where it does not (most
    step counts), our choice, written next to the value. Far beyond a CPU (the paper used about
    1500 GPU-hours in total).

Knobs
-----
The same name means the same thing in every experiment (:data:`VALIDATORS` checks each):

========== ================================================================================
``K``      re-linearisation period(s) (Algorithm 1): an integer ≥ 1, an integral float such as
           ``5e6`` (papermill passes ``-p K 5e6`` as a float), or ``inf`` (never re-linearise).
           In the sweep experiments (a list by default) ``K`` is the list of periods run. A
           single value ``K`` given for a list means the sweep ``[1, K]``: the K = 1 (plain
           SGD) reference is always kept. Lists are sorted, de-duplicated, and 1 is added.
           K = ∞ is stored as the float ``math.inf``; JSON writes it ``Infinity``.
``lr``     learning rate η of (S)GD: a finite number > 0.
``steps``  optimisation steps T: an integer ≥ 1.
``epochs`` (where an experiment counts epochs instead of steps) an integer ≥ 1.
``seed``   seed of the initialisation and the batch order: an integer ≥ 0.
``n_train`` training images: an integer ≥ 1, or ``"all"`` (stored as ``None``) for every image
           installed; checked against what is installed when the data is loaded, with a
           message naming n_train.
``n_test`` test images, likewise.
``batch_size`` mini-batch size, an integer in [1, n_train]; ``None`` means full batch.
``damping`` damping λ ≥ 0 of the Gauss–Newton step (Eq. 6).
========== ================================================================================

Experiment-specific keys (``lr_inf``, ``factor``, ``n_evals``, ``augment``, ...) are documented with
each experiment in :mod:`iterlin.experiments`.

Adding an experiment (e.g. for a new notebook): add ``SCALES["name"] = {"smoke": {...}, "gpu":
{...}, "paper": {...}}`` with the same keys at every scale; every key needs an entry in
:data:`VALIDATORS` (a test checks that every default validates), and if a list-valued key should
expand a single value other than by the rules above, add a rule to :data:`EXPAND`.

The resolved config is a plain JSON-able ``dict`` (ints, floats incl. ``math.inf``, bools,
strings, ``None`` and lists of these) holding ``experiment`` and ``scale`` and every key of the
experiment; it is what :mod:`iterlin.cache` hashes, so equal configs mean equal computations.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Mapping

from .validate import check_choice, check_int, check_K, check_nonnegative, check_positive

__all__ = ["SCALE_NAMES", "SCALES", "VALIDATORS", "EXPAND", "resolve", "revalidate", "experiments", "describe"]

INF = math.inf

#: The three scales, in order of cost.
SCALE_NAMES = ("smoke", "gpu", "paper")

# ------------------------------------------------------------------------------------------------
# Defaults per experiment and scale
# ------------------------------------------------------------------------------------------------

#: ``SCALES[experiment][scale]`` → default config (same keys at every scale).
SCALES: dict[str, dict[str, dict[str, Any]]] = {
    # Fig. 2: test accuracy vs steps for several K, full batch (left) and mini-batch (centre); the
    # mini-batch runs use lr / factor, K × factor and steps × factor (the paper: factor 10).
    "fig2": {
        "smoke": dict(
            K=[1, 4, INF], lr=0.05, steps=8, factor=2, batch_size=32, n_train=128, n_test=150,
            seed=0, n_evals=4,
        ),
        # gpu: an ESTIMATE (no GPU measured): ~0.17 GFLOP per image per linearised step; 5 runs ×
        # 100 full-batch steps × 50k images + 5 × 1000 steps × 256 ≈ 2.6e7 image-steps ≈ 5 min.
        "gpu": dict(
            K=[1, 5, 20, 50, INF], lr=0.05, steps=100, factor=10, batch_size=256, n_train=None,
            n_test=None, seed=0, n_evals=20,
        ),
        # paper: lr 1e-3 full batch, 1e-4 mini-batch of 256, K x 10 (the paper); the K values and
        # T are ours (the paper's legend and step counts are not in the text).
        "paper": dict(
            K=[1, 100, 1000, 10_000, INF], lr=1e-3, steps=100_000, factor=10, batch_size=256,
            n_train=50_000, n_test=10_000, seed=0, n_evals=100,
        ),
    },
    # Fig. 3: mini-batch SGD with augmentation (flips, crops), K = 1 vs a large K; network and
    # linearised-model test accuracy. The large K is chosen so that T/K ≈ 8 re-linearisations.
    "fig3": {
        "smoke": dict(
            K=[1, 3], lr=0.05, steps=24, batch_size=32, augment=True, n_train=256, n_test=200,
            seed=0, n_evals=6,
        ),
        # gpu: ESTIMATE 2 runs × 40k steps × 256 ≈ 2e7 image-steps ≈ 3-5 min on an H100.
        "gpu": dict(
            K=[1, 4000], lr=1e-2, steps=40_000, batch_size=256, augment=True, n_train=None,
            n_test=None, seed=0, n_evals=40,
        ),
        # paper: K = 5e6 (the paper); lr and T ours: lr 1e-4 as Fig. 2's mini-batch runs, T = 12 K
        # so that the large-K run makes 12 feature updates (Sec. 4.1: 8-12 suffice).
        "paper": dict(
            K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True,
            n_train=50_000, n_test=10_000, seed=0, n_evals=200,
        ),
    },
    # Fig. 5: optimally early-stopped test accuracy vs training-set size. The runs of ``K`` use
    # ``lr``; K = inf uses ``lr_inf``, with a K = 1 control at ``lr_inf`` (the paper: 1e-5 / 1e-3).
    "fig5": {
        "smoke": dict(
            K=[1, 4], lr=0.1, lr_inf=0.1, steps=10, batch_size=None, n_train=[16, 32, 64],
            n_test=100, seed=0, n_evals=2,
        ),
        # gpu: ESTIMATE 6 sizes × 5 runs × 4000 steps × 256 ≈ 3e7 image-steps ≈ 5-7 min.
        "gpu": dict(
            K=[1, 100, 1000], lr=1e-2, lr_inf=5e-2, steps=4000, batch_size=256,
            n_train=[1250, 2500, 5000, 10_000, 20_000, 40_000], n_test=None, seed=0, n_evals=40,
        ),
        # paper: lr 1e-5, K = inf at 1e-3 with a K = 1 control (the paper); K, sizes, T ours.
        "paper": dict(
            K=[1, 1000, 100_000], lr=1e-5, lr_inf=1e-3, steps=2_000_000, batch_size=256,
            n_train=[1000, 2000, 5000, 10_000, 20_000, 50_000], n_test=10_000, seed=0, n_evals=200,
        ),
    },
    # Fig. 1: final test RMSE vs K, trained to convergence, on the quintic (MLP 5x50, MSE, full
    # batch; see iterlin.second_order_experiments.fig1_plan for how each K is trained). The paper's
    # Fig. 1 is a schematic: every value here is ours. n_train/n_test are the paper's Fig. 9 data.
    "fig1": {
        "smoke": dict(
            K=[1, 3, 10, 30, 100, 300, 1000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9, INF], lr=0.02,
            steps=10_000, n_relin=500, max_relin=1000, damping=10.0, gn_steps=500, seed=0, n_seeds=1,
            n_train=20, n_test=1000, n_evals=10, x64=True,
        ),
        "gpu": dict(
            K=[1, 3, 10, 30, 100, 300, 1000, 3000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9, INF], lr=0.02,
            steps=20_000, n_relin=1000, max_relin=2000, damping=10.0, gn_steps=2000, seed=0, n_seeds=10,
            n_train=20, n_test=1000, n_evals=20, x64=True,
        ),
        "paper": dict(
            K=[1, 3, 10, 30, 100, 300, 1000, 3000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9, INF], lr=0.02,
            steps=20_000, n_relin=1000, max_relin=2000, damping=10.0, gn_steps=2000, seed=0, n_seeds=30,
            n_train=20, n_test=1000, n_evals=20, x64=True,
        ),
    },
    # Fig. 8: each linearisation solved by Adam (a constant K; the paper: 2e5) vs K = 1 with SGD
    # (lr) and K = 1 with Adam (lr_adam). The paper states neither learning rates nor T.
    "fig8": {
        "smoke": dict(
            K=15, lr_adam=1e-3, lr=0.05, steps=30, batch_size=None, n_train=12, n_test=60, seed=0,
            n_evals=4,
        ),
        "gpu": dict(
            K=2000, lr_adam=1e-3, lr=1e-2, steps=20_000, batch_size=256, n_train=None, n_test=None,
            seed=0, n_evals=40,
        ),
        "paper": dict(  # K = 2e5 (the paper); lr_adam Adam's default, lr as Fig. 2; T = 10 K ours
            K=200_000, lr_adam=1e-3, lr=1e-3, steps=2_000_000, batch_size=256, n_train=50_000,
            n_test=10_000, seed=0, n_evals=100,
        ),
    },
    # Fig. 9: damped Gauss-Newton on the quintic (20 / 1000 points, MLP 5x50, full batch: the
    # paper's setting). The lambda grid, steps, step size and seeds are ours (the paper names none).
    "fig9": {
        "smoke": dict(
            damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0], steps=200, step_size=1.0, seed=0, n_seeds=10,
            n_functions=10, n_train=20, n_test=1000, n_evals=10, x64=True,
        ),
        "gpu": dict(
            damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0], steps=2000, step_size=1.0, seed=0,
            n_seeds=50, n_functions=10, n_train=20, n_test=1000, n_evals=20, x64=True,
        ),
        "paper": dict(
            damping=[0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0], steps=2000, step_size=1.0, seed=0,
            n_seeds=100, n_functions=10, n_train=20, n_test=1000, n_evals=20, x64=True,
        ),
    },
    # Fig. 4: ResNet-18 without BatchNorm and augmentation (K, lr) and with both (K_bn, lr_bn,
    # augment_bn; BatchNorm statistics per bn_mode, see iterlin.models). Each run is trained alone
    # (iterlin.resnet_experiments). smoke: the pipeline only (ResNet-18 on a 2-core CPU).
    "fig4": {
        "smoke": dict(
            K=[1, 2], lr=0.01, K_bn=[1, 2], lr_bn=0.01, augment_bn=True, bn_mode="batch", steps=4,
            batch_size=4, n_train=16, n_test=16, seed=0, n_evals=4,
        ),
        # gpu: ESTIMATE (not measured): ~0.3 TFLOP per linearised step of 128 images, 4 runs x
        # 4000 steps, plus 10 evaluations of network and linear model per run.
        "gpu": dict(
            K=[1, 400], lr=1e-3, K_bn=[1, 400], lr_bn=1e-2, augment_bn=True, bn_mode="batch", steps=4000,
            batch_size=128, n_train=None, n_test=None, seed=0, n_evals=10,
        ),
        "paper": dict(  # lr 7e-7, K = 1e6 (no BN); lr 1e-5, K = 1e5 (BN + augmentation): the paper's.
            # T, batch size and evaluation points ours (T = 10 K of the no-BN run).
            K=[1, 1_000_000], lr=7e-7, K_bn=[1, 100_000], lr_bn=1e-5, augment_bn=True, bn_mode="batch",
            steps=10_000_000, batch_size=256, n_train=50_000, n_test=10_000, seed=0, n_evals=100,
        ),
    },
    # Fig. 6: linear probes on the CNN's layer-1 and layer-2 features over training, K = 1 vs a
    # large K (iterlin.feature_experiments). Probes are fitted on the first n_probe training images
    # (None: all) and scored on the test images.
    "fig6": {
        "smoke": dict(
            K=[1, 8], lr=0.05, steps=24, batch_size=32, augment=False, n_train=256, n_test=200, n_probe=None,
            seed=0, n_evals=6,
        ),
        # gpu: ESTIMATE (not measured): 2 runs x 10 000 steps of 256, and 20 x 2 x 2 ridge probes
        # (eigendecompositions of n_probe x n_probe Gram matrices).
        "gpu": dict(
            K=[1, 1000], lr=1e-2, steps=10_000, batch_size=256, augment=True, n_train=None, n_test=None,
            n_probe=5000, seed=0, n_evals=20,
        ),
        "paper": dict(  # K = 5e6 (the paper's); lr, T, augmentation as our Fig. 3 paper settings
            K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True, n_train=50_000,
            n_test=10_000, n_probe=10_000, seed=0, n_evals=30,
        ),
    },
    # Fig. 7: change of the first-layer filters from initialisation, a column per evaluation point
    # (the paper: one per 10 000 epochs), K = 1 vs a large K.
    "fig7": {
        "smoke": dict(
            K=[1, 8], lr=0.05, steps=24, batch_size=32, augment=False, n_train=256, n_test=200, seed=0,
            n_evals=12,
        ),
        "gpu": dict(  # ESTIMATE (not measured): 2 runs x 20 000 steps of 256
            K=[1, 2000], lr=1e-2, steps=20_000, batch_size=256, augment=True, n_train=None, n_test=None,
            seed=0, n_evals=20,
        ),
        "paper": dict(  # K = 5e6 (the paper's); 6e7 steps of 256 = 30 columns of ~10 000 epochs
            K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True, n_train=50_000,
            n_test=10_000, seed=0, n_evals=30,
        ),
    },
    # Kernel movement (no figure in the paper; Sec. 1 and 5): the empirical NTK on n_probe fixed
    # training images over training, K = 1 vs a large K, evaluated at every re-linearisation too.
    "ntk": {
        "smoke": dict(
            K=[1, 6], lr=0.05, steps=24, batch_size=32, n_train=256, n_test=200, n_probe=8, seed=0,
            n_evals=8,
        ),
        "gpu": dict(  # ESTIMATE (not measured): 2 runs x 20 000 steps of 256, ~30 kernels 1000 x 1000
            K=[1, 2000], lr=1e-2, steps=20_000, batch_size=256, n_train=None, n_test=None, n_probe=100,
            seed=0, n_evals=20,
        ),
        "paper": dict(  # as our Fig. 3 paper settings (K = 5e6); probe set and evaluations ours
            K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, n_train=50_000, n_test=10_000,
            n_probe=100, seed=0, n_evals=30,
        ),
    },
}


# ------------------------------------------------------------------------------------------------
# Validation of each knob
# ------------------------------------------------------------------------------------------------


def _K_one(value: Any, name: str) -> int | float:
    if isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "infinity", "∞"):
        return INF
    return check_K(value, name)


def _is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _check_list(value: list, name: str, default: Any) -> None:
    """A list is allowed only where the default is one (a sweep), and must not be empty."""
    if not _is_list(default):
        raise ValueError(f"{name}={value!r} is not allowed: {name} must be a single value here, not a list")
    if len(value) == 0:
        raise ValueError(f"{name}={value!r} is not allowed: {name} must list at least one value")


def _sorted_K(values: list) -> list:
    return sorted(set(values), key=lambda k: (math.isinf(k), k))


def _v_K(value: Any, name: str, default: Any) -> Any:
    """A period, or (for sweeps) a sorted list of periods that always contains 1."""
    if not _is_list(default):
        if _is_list(value):
            raise ValueError(f"{name}={value!r} is not allowed: {name} must be a single period here, not a list")
        return _K_one(value, name)
    if _is_list(value):
        if len(value) == 0:
            raise ValueError(f"{name}={value!r} is not allowed: {name} must list at least one period")
        ks = [_K_one(v, f"{name}[{i}]") for i, v in enumerate(value)]
    else:
        ks = [_K_one(value, name)]
    return _sorted_K([1, *ks])


def _scalar(check: Callable[[Any, str], Any]) -> Callable:
    def validator(value: Any, name: str, default: Any) -> Any:
        if _is_list(value):
            raise ValueError(f"{name}={value!r} is not allowed: {name} must be a single value, not a list")
        return check(value, name)

    return validator


def _count(minimum: int, none_ok: bool) -> Callable:
    """Validate an integer count ≥ minimum (``None`` = all, where allowed), or a list of them."""

    def one(value: Any, name: str) -> int | None:
        if none_ok and (value is None or (isinstance(value, str) and value.strip().lower() == "all")):
            return None
        return check_int(value, name, minimum=minimum)

    def validator(value: Any, name: str, default: Any) -> Any:
        if _is_list(value):
            _check_list(value, name, default)
            if none_ok and len(value) == 1 and one(value[0], f"{name}[0]") is None:
                return [None]  # ["all"]: every image installed
            return sorted({check_int(v, f"{name}[{i}]", minimum=minimum) for i, v in enumerate(value)})
        return one(value, name)

    return validator


def _bool(value: Any, name: str, default: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not allowed: {name} must be True or False")
    return value


def _reals(check: Callable[[Any, str], Any]) -> Callable:
    """A single number, or (where the default is a list, e.g. Fig. 9's λ grid) a sorted list of them."""

    def validator(value: Any, name: str, default: Any) -> Any:
        if _is_list(value):
            _check_list(value, name, default)
            return sorted({check(v, f"{name}[{i}]") for i, v in enumerate(value)})
        return check(value, name)

    return validator


#: ``VALIDATORS[key](value, name, default) -> normalised value`` (raises ValueError naming the key).
VALIDATORS: dict[str, Callable[[Any, str, Any], Any]] = {
    "K": _v_K,
    "lr": _scalar(check_positive),
    "lr_inf": _scalar(check_positive),
    "damping": _reals(check_nonnegative),  # a list for Fig. 9's λ grid
    "steps": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "epochs": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "seed": _scalar(lambda v, n: check_int(v, n, minimum=0)),
    "n_train": _count(1, none_ok=True),
    "n_test": _count(1, none_ok=True),
    "batch_size": _count(1, none_ok=True),
    "factor": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "n_evals": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "augment": _bool,
    # Figs. 1, 8, 9 (iterlin.second_order_experiments)
    "lr_adam": _scalar(check_positive),
    "step_size": _scalar(check_positive),
    "n_seeds": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "n_functions": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "n_relin": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "max_relin": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "gn_steps": _scalar(lambda v, n: check_int(v, n, minimum=1)),
    "x64": _bool,
    # Figs. 4, 6, 7 and ntk (iterlin.resnet_experiments, iterlin.feature_experiments)
    "K_bn": _v_K,
    "lr_bn": _scalar(check_positive),
    "augment_bn": _bool,
    "bn_mode": _scalar(lambda v, n: check_choice(v, n, ("batch", "frozen"))),
    "n_probe": _count(1, none_ok=True),
}


def _halvings(n: Any, count: int = 3) -> list:
    """``n`` → ``[n/4, n/2, n]`` (rounded down): a single size given for a data-size sweep."""
    if n is None:
        return [None]
    return sorted({max(1, n // 2**i) for i in range(count)})


#: ``EXPAND[experiment][key](value)``: how a single value given for a list-valued key becomes a
#: list (after validation). Keys not listed: ``K`` → ``[1, K]`` (by :func:`_v_K`), others ``[v]``.
EXPAND: dict[str, dict[str, Callable[[Any], list]]] = {
    "fig5": {"n_train": _halvings},
}


# ------------------------------------------------------------------------------------------------
# Resolution
# ------------------------------------------------------------------------------------------------


def experiments() -> tuple[str, ...]:
    """Names of the experiments that have configurations."""
    return tuple(SCALES)


def _min_count(value: Any) -> int | None:
    if _is_list(value):
        vals = [v for v in value if v is not None]
        return min(vals) if vals else None
    return value


def resolve(experiment: str, scale: str = "smoke", **overrides: Any) -> dict:
    """The config of ``experiment`` at ``scale``, with ``overrides`` applied and every value checked.

    Args:
      experiment: a key of :data:`SCALES` (``"fig2"``, ``"fig3"``, ``"fig5"``, ...).
      scale: ``"smoke"`` (default), ``"gpu"`` or ``"paper"``.
      **overrides: knob values; ``None`` keeps the scale's default (so a notebook can pass every
        parameter through unchanged). A name the experiment does not use is an error.

    Returns:
      A new JSON-able dict: ``{"experiment": ..., "scale": ..., <every key of the experiment>}``.

    Raises:
      ValueError naming the parameter, the value given and what is allowed, before any compute:
      unknown experiment or scale, unknown parameter, K = 0 / −3 / 2.5 / "abc" / nan, lr ≤ 0 or nan,
      steps < 1, batch_size < 1 or > n_train, and so on.
    """
    check_choice(experiment, "experiment", tuple(SCALES))
    check_choice(scale, "scale", SCALE_NAMES)
    defaults = copy.deepcopy(SCALES[experiment][scale])
    unknown = sorted(k for k in overrides if k not in defaults)
    if unknown:
        raise ValueError(
            f"{unknown[0]}={overrides[unknown[0]]!r} is not allowed: {experiment} has no parameter "
            f"{unknown[0]!r}; its parameters are: " + ", ".join(sorted(defaults))
        )
    config: dict[str, Any] = {"experiment": experiment, "scale": scale}
    for key, default in defaults.items():
        value = overrides.get(key)
        if value is None:
            value = default
        validator = VALIDATORS.get(key)
        if validator is None:  # a programming error in SCALES, not a user error
            raise KeyError(f"config key {key!r} of {experiment} has no validator in iterlin.config.VALIDATORS")
        value = validator(value, key, default)
        if _is_list(default) and not _is_list(value):
            value = EXPAND.get(experiment, {}).get(key, lambda v: [v])(value)
        config[key] = value

    # Cross-checks that need several knobs.
    bs, n = config.get("batch_size"), _min_count(config.get("n_train"))
    if bs is not None and n is not None and bs > n:
        raise ValueError(
            f"batch_size={bs} is not allowed: batch_size must be <= n_train={n} "
            "(or None for full batch)"
        )
    return config


def revalidate(config: Mapping) -> dict:
    """``resolve`` again from a resolved config (idempotent: ``revalidate(c) == c`` for a valid one)."""
    if not isinstance(config, Mapping) or "experiment" not in config or "scale" not in config:
        raise ValueError(
            f"config={config!r} is not allowed: a config must be a dict from iterlin.config.resolve "
            "(with 'experiment' and 'scale')"
        )
    rest = {k: v for k, v in config.items() if k not in ("experiment", "scale")}
    return resolve(config["experiment"], config["scale"], **rest)


def describe(config: dict) -> str:
    """One line ``key=value, ...`` (K = ∞ written ``inf``) for printing a resolved config."""

    def fmt(v: Any) -> str:
        if isinstance(v, float) and math.isinf(v):
            return "inf"
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        if isinstance(v, float):
            return f"{v:g}"
        return str(v)

    return ", ".join(f"{k}={fmt(v)}" for k, v in config.items())
