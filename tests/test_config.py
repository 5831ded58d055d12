"""iterlin.repro.config: the typed configs (:class:`~iterlin.repro.config.ExperimentConfig`, validated in
their constructor), the pure ``resolve(Config, scales, scale, overrides)``, every knob's validator,
and every bad parameter named up front.

The tables here are small stand-ins shaped like the experiments' (a sweep like Fig. 3's, a size
sweep like Fig. 5's, single values like Fig. 8's, a λ grid like Fig. 9's). That every real
experiment's defaults validate at every scale is tested with the registry
(tests/experiments/test_registry.py).
"""

from __future__ import annotations

import json
import math

import pytest

import dataclasses

from iterlin.repro.config import (
    format_value,
    MAX_RUNS,
    SCALE_NAMES,
    Damping,
    Evals,
    ExperimentConfig,
    Factor,
    Flag,
    GaussNewtonSteps,
    Images,
    ImagesOrNone,
    Period,
    Positive,
    Rate,
    RunCount,
    Seed,
    SharpnessImages,
    Steps,
    TestImages,
    describe,
    halvings,
    knob_check,
    resolve,
)

INF = math.inf

#: Like Fig. 3: a K sweep, mini-batches, augmentation.
SWEEP = {
    "smoke": dict(K=[1, 3], lr=0.05, steps=24, batch_size=32, augment=True, n_train=256, n_test=200, seed=0,
                  n_evals=6),
    "cpu": dict(K=[1, 50], lr=0.1, steps=500, batch_size=128, augment=True, n_train=None, n_test=None, seed=0,
                n_evals=8),
    "gpu": dict(K=[1, 4000], lr=1e-2, steps=40_000, batch_size=256, augment=True, n_train=None, n_test=None,
                seed=0, n_evals=40),
    "paper": dict(K=[1, 5_000_000], lr=1e-4, steps=60_000_000, batch_size=256, augment=True, n_train=50_000,
                  n_test=10_000, seed=0, n_evals=200),
}
#: Like Fig. 2: K = ∞ in the default sweep.
WITH_INF = {s: {**v, "K": [1, 4, INF]} for s, v in SWEEP.items()}
#: Like Fig. 5: a list of training-set sizes, a single size expanding to halvings.
SIZES = {s: {**v, "n_train": [16, 32, 64] if s == "smoke" else [None], "batch_size": None} for s, v in SWEEP.items()}
#: Like Fig. 8 and Fig. 9: one period, Adam's rate, a λ grid.
SINGLE = {s: dict(K=15, lr_adam=1e-3, damping=[0.0, 1.0], steps=30, batch_size=None, n_train=12, x64=True)
          for s in SCALE_NAMES}


#: The stand-ins' knob types, as the experiments' own ``Config`` classes declare them.
TYPES = {"K": Period, "lr": Rate, "lr_adam": Positive, "damping": Damping, "steps": Steps, "batch_size": Images | None,
         "augment": Flag, "n_train": Images | None, "n_test": TestImages | None, "seed": Seed, "n_evals": Evals,
         "x64": Flag, "n_sharpness": SharpnessImages, "n_seeds": RunCount, "n_functions": RunCount,
         "n_relin": GaussNewtonSteps, "max_relin": GaussNewtonSteps, "gn_steps": Steps, "factor": Factor,
         "n_probe": Images | None, "n_val": ImagesOrNone | None}


def config_type(name, scales, expand=None):
    """A stand-in experiment's typed config: one field per key of ``scales``, of its knob type
    (:data:`TYPES`), a tuple of them where the default is a list."""
    fields = [(k, tuple[TYPES[k], ...] if isinstance(v, list) else TYPES[k] | None)
              for k, v in scales["smoke"].items()]
    cls = dataclasses.make_dataclass("Config", fields, bases=(ExperimentConfig,), frozen=True, kw_only=True)
    cls.experiment, cls.EXPAND = name, dict(expand or {})
    return cls


def r(overrides=None, scale="smoke", scales=SWEEP, name="fig3", expand=None):
    """The resolved config as its dict (:meth:`~iterlin.repro.config.ExperimentConfig.to_dict`)."""
    return resolve(config_type(name, scales, expand), scales, scale, overrides).to_dict()


def test_a_config_is_typed_frozen_and_validated_in_its_constructor():
    cls = config_type("fig3", WITH_INF)
    c = resolve(cls, WITH_INF, "smoke", {"K": "inf", "lr": None})
    assert c.K == (1, INF) and c.lr == 0.05 and c.scale == "smoke" and isinstance(c.K, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.lr = 1.0
    assert cls.from_dict(c.to_dict()) == c and c.replace(lr=0.1).lr == 0.1
    with pytest.raises(ValueError, match="lr=-1 is not allowed"):
        c.replace(lr=-1)  # a copy is validated as the original was
    with pytest.raises(ValueError, match=r"lr=0 is not allowed"):
        cls(**{**WITH_INF["smoke"], "lr": 0})  # the constructor itself checks
    with pytest.raises(ValueError, match=r"it lacks steps; its parameters are: K, augment, batch_size"):
        cls.from_dict({k: v for k, v in c.to_dict().items() if k != "steps"})
    with pytest.raises(ValueError, match="it must be a fig3 config"):
        cls.from_dict({**c.to_dict(), "experiment": "fig5"})


def test_a_knob_added_later_reads_as_off_in_a_config_stored_before_it():
    """A knob with a default (None: off) may be absent from a stored config; None is refused where
    the field's type does not allow it."""
    scales = {s: {**d, "n_sharpness": 16} for s, d in SWEEP.items()}
    fields = [("K", tuple[Period, ...]), ("lr", Rate), ("steps", Steps), ("batch_size", Images | None),
              ("augment", Flag), ("n_train", Images | None), ("n_test", TestImages | None), ("seed", Seed),
              ("n_evals", Evals), ("n_sharpness", SharpnessImages | None, dataclasses.field(default=None))]
    cls = dataclasses.make_dataclass("Config", fields, bases=(ExperimentConfig,), frozen=True, kw_only=True)
    cls.experiment = "toy"
    c = resolve(cls, scales, "smoke", {})
    assert c.n_sharpness == 16
    old = {k: v for k, v in c.to_dict().items() if k != "n_sharpness"}
    assert cls.from_dict(old).n_sharpness is None and cls.from_dict(c.to_dict()) == c
    strict = config_type("toy", scales)  # n_sharpness: SharpnessImages | None, no default
    with pytest.raises(ValueError, match="it lacks n_sharpness"):
        strict.from_dict(old)
    typed = dataclasses.make_dataclass("Config", [(n, t) for n, t, *_ in fields[:-1]] + [("n_sharpness", SharpnessImages)],
                                       bases=(ExperimentConfig,), frozen=True, kw_only=True)
    typed.experiment = "toy"
    with pytest.raises(ValueError, match=r"n_sharpness=None is not allowed: n_sharpness must be given \(int\)"):
        typed.from_dict({**old, "n_sharpness": None})


@pytest.mark.parametrize("scales", [SWEEP, WITH_INF, SIZES, SINGLE])
@pytest.mark.parametrize("scale", SCALE_NAMES)
def test_defaults_validate_and_are_json(scales, scale):
    config = r(scales=scales, scale=scale, name="toy")
    assert config["experiment"] == "toy" and config["scale"] == scale
    assert set(config) == set(scales[scale]) | {"experiment", "scale"}
    assert all(knob_check(TYPES[k]) is not None for k in scales[scale])
    # JSON round trip (K = inf is written Infinity and read back as inf)
    assert json.loads(json.dumps(config)) == config
    # resolving a resolved config again changes nothing
    assert r({k: v for k, v in config.items() if k not in ("experiment", "scale")}, scale=scale, scales=scales,
             name="toy") == config


def test_none_keeps_default_and_values_override():
    base = r()
    assert r(dict(lr=None, steps=None, K=None)) == base
    c = r(dict(lr=0.3, steps=7, seed=4))
    assert (c["lr"], c["steps"], c["seed"]) == (0.3, 7, 4)
    assert r(scale="paper")["K"] == [1, 5_000_000]
    assert r()["K"] == [1, 3] and r(scale="gpu")["n_train"] is None


def test_papermill_floats_are_accepted():
    c = r(dict(K=5e6, steps=1e3, n_train=512.0))
    assert c["K"] == [1, 5_000_000] and isinstance(c["K"][1], int)
    assert c["steps"] == 1000 and isinstance(c["steps"], int)
    assert c["n_train"] == 512


def test_K_scalar_becomes_sweep_with_reference_and_inf():
    assert r(dict(K=10), scales=WITH_INF)["K"] == [1, 10]
    assert r(dict(K=1), scales=WITH_INF)["K"] == [1]
    assert r(dict(K=math.inf), scales=WITH_INF)["K"] == [1, math.inf]
    assert r(dict(K="inf"), scales=WITH_INF)["K"] == [1, math.inf]
    assert r(dict(K=[math.inf, 100, 10, 10]), scales=WITH_INF)["K"] == [1, 10, 100, math.inf]
    assert r(dict(K=2**40))["K"] == [1, math.inf]  # beyond any step count
    assert r(scales=WITH_INF)["K"] == [1, 4, math.inf]


def test_single_values_stay_single():
    c = r(dict(K=5e6), scales=SINGLE)
    assert c["K"] == 5_000_000
    with pytest.raises(ValueError, match=r"K=\[1, 5\] is not allowed: K must be a single period here"):
        r(dict(K=[1, 5]), scales=SINGLE)
    with pytest.raises(ValueError, match=r"lr_adam=\[0.1\] is not allowed: lr_adam must be a single value"):
        r(dict(lr_adam=[0.1]), scales=SINGLE)
    with pytest.raises(ValueError, match=r"n_test=\[10, 20\] is not allowed: n_test must be a single value here"):
        r(dict(n_test=[10, 20]))


def test_list_valued_reals_and_counts():
    assert r(dict(damping=0.5), scales=SINGLE)["damping"] == [0.5]
    assert r(dict(damping=[1, 0, 1]), scales=SINGLE)["damping"] == [0.0, 1.0]
    with pytest.raises(ValueError, match=r"damping\[1\]=-1.0 is not allowed"):
        r(dict(damping=[0.1, -1.0]), scales=SINGLE)
    with pytest.raises(ValueError, match=r"damping=\[\] is not allowed: damping must list at least one value"):
        r(dict(damping=[]), scales=SINGLE)
    with pytest.raises(ValueError, match="x64='yes' is not allowed"):
        r(dict(x64="yes"), scales=SINGLE)
    assert r(dict(n_train=[64, 16, 16]), scales=SIZES)["n_train"] == [16, 64]
    assert r(dict(n_train=["all"]), scales=SIZES)["n_train"] == [None]
    with pytest.raises(ValueError, match=r"n_train\[1\]=0 is not allowed"):
        r(dict(n_train=[16, 0]), scales=SIZES)


def test_expand_rule_for_a_single_value():
    expand = {"n_train": halvings}
    assert r(dict(n_train=400), scales=SIZES, expand=expand)["n_train"] == [100, 200, 400]
    assert r(dict(n_train=[300, 100]), scales=SIZES, expand=expand)["n_train"] == [100, 300]
    assert r(dict(n_train="all"), scale="gpu", scales=SIZES, expand=expand)["n_train"] == [None]
    assert r(dict(n_train=400), scales=SIZES)["n_train"] == [400]  # no rule: [v]
    assert r(scales=SIZES, expand=expand)["n_train"] == [16, 32, 64]  # a list default is kept
    assert halvings(400) == [100, 200, 400] and halvings(2) == [1, 2] and halvings(None) == [None]
    assert halvings(1000, count=2) == [500, 1000]


@pytest.mark.parametrize(
    "kwargs, names",
    [
        (dict(K=0), "K=0"),
        (dict(K=-3), "K=-3"),
        (dict(K=2.5), "K=2.5"),
        (dict(K="abc"), "K='abc'"),
        (dict(K=math.nan), "K=nan"),
        (dict(K=-math.inf), "K=-inf"),
        (dict(K=True), "K=True"),
        (dict(K=[1, 0]), "K[1]=0"),
        (dict(K=[]), "K=[]"),
        (dict(lr=0), "lr=0"),
        (dict(lr=-1e-3), "lr=-0.001"),
        (dict(lr=math.nan), "lr=nan"),
        (dict(lr=math.inf), "lr=inf"),
        (dict(lr="fast"), "lr='fast'"),
        (dict(steps=0), "steps=0"),
        (dict(steps=2.5), "steps=2.5"),
        (dict(seed=-1), "seed=-1"),
        (dict(n_train=0), "n_train=0"),
        (dict(batch_size=0), "batch_size=0"),
        (dict(batch_size=5000), "batch_size=5000"),
        (dict(n_test=-5), "n_test=-5"),
        (dict(augment="yes"), "augment='yes'"),
        (dict(damping=0.1), "damping=0.1"),  # no damping in this experiment: unknown parameter, named
    ],
)
def test_bad_values_are_named(kwargs, names):
    with pytest.raises(ValueError) as e:
        r(kwargs)
    msg = str(e.value)
    assert names in msg, msg
    assert "not allowed" in msg


def test_unknown_scale_and_parameter_are_named():
    with pytest.raises(ValueError, match=r"scale='foo' is not allowed.*'smoke', 'cpu', 'gpu', 'paper'"):
        r(scale="foo")
    with pytest.raises(ValueError, match=r"damping=0.1 is not allowed: fig3 has no parameter 'damping'; "
                                         r"its parameters are: K, augment, batch_size"):
        r(dict(damping=0.1))


def test_a_knob_whose_type_carries_no_check_is_a_programming_error():
    cls = dataclasses.make_dataclass("Config", [("colour", str)], bases=(ExperimentConfig,), frozen=True, kw_only=True)
    cls.experiment = "toy"
    with pytest.raises(KeyError, match="config key 'colour' of toy has no check: its type must carry one"):
        cls(colour="red")


def test_a_knob_type_carries_its_check_through_none_and_tuples():
    """``Images | None`` and ``tuple[Period, ...]`` carry the check of ``Images`` and ``Period``."""
    assert knob_check(Images | None) is knob_check(Images) is not None
    assert knob_check(tuple[Period, ...]) is knob_check(Period) is not None
    assert knob_check(int) is None and knob_check(tuple[int, ...]) is None


def test_batch_size_larger_than_n_train_is_named():
    with pytest.raises(ValueError, match=r"batch_size=300 is not allowed.*n_train=200"):
        r(dict(n_train=200, batch_size=300))
    with pytest.raises(ValueError, match=r"batch_size=50 is not allowed.*n_train=32"):
        r(dict(n_train=[32, 64], batch_size=50), scales=SIZES)  # the smallest size counts
    assert r(dict(n_train="all", batch_size=50_000))["batch_size"] == 50_000  # checked when the data is loaded
    with pytest.raises(ValueError, match=r"batch_size=1000000 is not allowed: .*<= 50000"):
        r(dict(n_train="all", batch_size=10**6))


def test_resolve_returns_a_fresh_copy():
    c = r(scales=WITH_INF)
    c["K"].append(12345)
    assert 12345 not in r(scales=WITH_INF)["K"] and WITH_INF["smoke"]["K"] == [1, 4, INF]


def test_describe():
    assert describe({"K": [1, math.inf], "lr": 0.001, "n": None}) == "K=[1, inf], lr=0.001, n=None"


def test_format_value_spells_infinity_and_none_as_asked():
    """One formatter for the command line's ``describe`` and the book's scales table."""
    assert format_value([1, 5e6, math.inf]) == "[1, 5e+06, inf]"
    assert format_value([None, 1000], inf="∞", none="all") == "[all, 1000]"
    assert format_value(math.inf, inf="∞") == "∞" and format_value(0.0008) == "0.0008" and format_value(3) == "3"


def test_held_out_images_or_none():
    """n_val (Fig. 5's early stopping): a count, or None / "none" for none ("all" is no count of
    held-out images: refused with the others, naming what is allowed)."""
    held = {s: {**v, "n_val": 32} for s, v in SWEEP.items()}
    assert r(dict(n_val="none"), scales=held)["n_val"] is None
    assert r(dict(n_val=100.0), scales=held)["n_val"] == 100 and r(scales=held)["n_val"] == 32
    for bad in (0, "all", True, 2.5, 50_001):
        with pytest.raises(ValueError, match=rf"n_val={bad!r} is not allowed: .* or None / 'none' for none"):
            r(dict(n_val=bad), scales=held)


def test_all_images():
    assert r(dict(n_train="all"))["n_train"] is None
    assert r(dict(n_train="all"), scales=SIZES, expand={"n_train": halvings})["n_train"] == [None]


# ----------------------------------------------------------------------------------------------
# Upper bounds of every count (issue 10, items 1-3): stated in the message, before any compute
# ----------------------------------------------------------------------------------------------

#: Like Figs. 1 and 9: seeds seed .. seed + n_seeds - 1, a λ grid; and Fig. 2's factor.
SEEDS = {s: dict(damping=[0.0, 1.0], steps=200, seed=0, n_seeds=10, n_functions=10, n_train=20, n_test=1000,
                 n_evals=10, n_relin=5, max_relin=10, gn_steps=20, factor=2, n_probe=8)
         for s in SCALE_NAMES}

#: (key, the largest allowed value, what the message says about the bound)
BOUNDS = [
    ("steps", 2**31 - 1, "step counters are int32"),
    ("gn_steps", 2**31 - 1, "step counters are int32"),
    ("n_relin", 2**31 - 1, "step counters are int32"),
    ("max_relin", 2**31 - 1, "step counters are int32"),
    ("seed", 2**32 - 10, "jax.random.PRNGKey distinguishes exactly the seeds 0 .. 2**32 - 1"),
    ("n_seeds", 5000, "10000"),  # 5000 seeds x 2 λ = MAX_RUNS: above it, the runs cross-check speaks
    ("n_functions", 10_000, "at most 10000 runs"),
    ("n_evals", 10_000, "each evaluation point"),
    ("n_train", 50_000, "CIFAR-10 has 50000 training images"),
    ("n_test", 10_000, "CIFAR-10 has 10000 test images"),
    ("n_probe", 50_000, "CIFAR-10 has 50000 training images"),
]


@pytest.mark.parametrize("key, top, why", BOUNDS, ids=[b[0] for b in BOUNDS])
def test_every_count_has_an_upper_bound_stated_in_the_message(key, top, why):
    scales = SEEDS
    if key in ("steps",):  # a step count x factor must fit too: check it without factor
        scales = {s: {k: v for k, v in d.items() if k != "factor"} for s, d in SEEDS.items()}
    assert r({key: top}, scales=scales, name="toy")[key] == top
    for bad in (top + 1, 1e20, 3e9 if top < 3e9 else 1e10, 10**400):
        if key == "seed" and bad == top + 1:
            continue  # allowed alone; seed + n_seeds - 1 is the cross-check below
        with pytest.raises(ValueError) as e:
            r({key: bad}, scales=scales, name="toy")
        msg = str(e.value)
        assert msg.startswith(f"{key}=") and "is not allowed" in msg and why in msg, msg


def test_papermills_huge_values_are_refused_naming_the_parameter():
    # the issue: -p steps 1e20 / 3e9 trained until killed; -p seed 1e20 crashed with OverflowError later
    for kwargs, fragment in [
        (dict(steps=1e20), "steps=1e+20 is not allowed: steps must be an integer >= 1 and <= 2147483647"),
        (dict(steps=3e9), "steps=3000000000.0 is not allowed"),
        (dict(seed=1e20), "seed=1e+20 is not allowed: seed must be an integer >= 0 and <= 4294967295"),
        (dict(n_evals=1e9), "n_evals=1000000000.0 is not allowed"),
        (dict(n_train=1e9), "n_train=1000000000.0 is not allowed"),
        (dict(n_test=60_000), "n_test=60000 is not allowed"),
        (dict(batch_size=10**9), "batch_size=1000000000 is not allowed"),
    ]:
        with pytest.raises(ValueError) as e:
            r(kwargs)
        assert fragment in str(e.value), str(e.value)


def test_K_beyond_every_step_count_is_never_relinearising():
    # K is stored in an int32 counter too: a finite K is at most 2**31 - 1, larger means K = inf
    assert r(dict(K=2**31 - 1))["K"] == [1, 2**31 - 1]
    assert r(dict(K=2**31))["K"] == [1, INF]
    assert r(dict(K=1e20))["K"] == [1, INF]
    assert r(dict(K=10**400))["K"] == [1, INF]


def test_seeds_are_exactly_the_ones_prngkey_distinguishes():
    assert r(dict(seed=2**32 - 1))["seed"] == 2**32 - 1
    for bad in (2**32, 2**32 + 5, 2**64):
        with pytest.raises(ValueError, match=rf"seed={bad} is not allowed: seed must be an integer >= 0 and "
                                             r"<= 4294967295 \(jax.random.PRNGKey"):
            r(dict(seed=bad))
    # with n_seeds, the largest seed used, seed + n_seeds - 1, must be in range too
    assert r(dict(seed=2**32 - 10, n_seeds=10), scales=SEEDS, name="toy")["seed"] == 2**32 - 10
    with pytest.raises(ValueError, match=r"seed=4294967287, n_seeds=10 is not allowed: .*"
                                         r"seed \+ n_seeds - 1 = 4294967296 must be <= 4294967295"):
        r(dict(seed=2**32 - 9, n_seeds=10), scales=SEEDS, name="toy")


def test_mini_batch_steps_times_factor_fit_the_step_counter():
    base = {k: v for k, v in SEEDS["smoke"].items() if k != "n_seeds"}
    scales = {s: base for s in SCALE_NAMES}
    assert r(dict(steps=2**30 - 1, factor=2), scales=scales, name="toy")["factor"] == 2
    with pytest.raises(ValueError, match=r"steps=1073741824, factor=2 is not allowed: .* steps x factor = "
                                         r"2147483648 steps, which must be <= 2147483647"):
        r(dict(steps=2**30, factor=2), scales=scales, name="toy")


def test_runs_of_a_sweep_are_capped():
    assert r(dict(n_seeds=MAX_RUNS // 2), scales=SEEDS, name="toy")["n_seeds"] == MAX_RUNS // 2  # 2 λ values
    with pytest.raises(ValueError, match=r"n_seeds=5001, len\(damping\)=2 is not allowed: .* = 10002 runs; "
                                         r"the most allowed is MAX_RUNS=10000"):
        r(dict(n_seeds=MAX_RUNS // 2 + 1), scales=SEEDS, name="toy")
    with pytest.raises(ValueError, match=r"len\(K\)=10001 is not allowed"):
        r(dict(K=list(range(1, 10_002))))
