"""Experiment configs: defaults per scale, overrides, and every bad parameter named up front."""

from __future__ import annotations

import json
import math

import pytest

from iterlin.config import SCALE_NAMES, SCALES, VALIDATORS, describe, resolve, revalidate


@pytest.mark.parametrize("experiment", sorted(SCALES))
@pytest.mark.parametrize("scale", SCALE_NAMES)
def test_every_default_validates_and_is_json(experiment, scale):
    config = resolve(experiment, scale)
    assert config["experiment"] == experiment and config["scale"] == scale
    assert set(config) == set(SCALES[experiment][scale]) | {"experiment", "scale"}
    assert all(k in VALIDATORS for k in SCALES[experiment][scale])
    # JSON round trip (K = inf is written Infinity and read back as inf)
    assert json.loads(json.dumps(config)) == config


@pytest.mark.parametrize("experiment", sorted(SCALES))
def test_same_keys_at_every_scale(experiment):
    keys = [set(SCALES[experiment][s]) for s in SCALE_NAMES]
    assert keys[0] == keys[1] == keys[2]


def test_none_keeps_default_and_values_override():
    base = resolve("fig3")
    assert resolve("fig3", lr=None, steps=None, K=None) == base
    c = resolve("fig3", lr=0.3, steps=7, seed=4)
    assert (c["lr"], c["steps"], c["seed"]) == (0.3, 7, 4)
    assert resolve("fig3", "paper")["K"] == [1, 5_000_000]


def test_papermill_floats_are_accepted():
    c = resolve("fig3", K=5e6, steps=1e3, n_train=512.0)
    assert c["K"] == [1, 5_000_000] and isinstance(c["K"][1], int)
    assert c["steps"] == 1000 and isinstance(c["steps"], int)
    assert c["n_train"] == 512


def test_K_scalar_becomes_sweep_with_reference_and_inf():
    assert resolve("fig2", K=10)["K"] == [1, 10]
    assert resolve("fig2", K=1)["K"] == [1]
    assert resolve("fig2", K=math.inf)["K"] == [1, math.inf]
    assert resolve("fig2", K="inf")["K"] == [1, math.inf]
    assert resolve("fig2", K=[math.inf, 100, 10, 10])["K"] == [1, 10, 100, math.inf]
    assert resolve("fig3", K=2**40)["K"] == [1, math.inf]  # beyond any step count


def test_fig5_single_size_expands_to_halvings():
    assert resolve("fig5", n_train=400)["n_train"] == [100, 200, 400]
    assert resolve("fig5", n_train=[300, 100])["n_train"] == [100, 300]
    assert resolve("fig5", "gpu", n_train="all")["n_train"] == [None]


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
        (dict(damping=0.1), "damping=0.1"),  # fig3 has no damping: unknown parameter, named
    ],
)
def test_bad_values_are_named(kwargs, names):
    with pytest.raises(ValueError) as e:
        resolve("fig3", **kwargs)
    msg = str(e.value)
    assert names in msg, msg
    assert "not allowed" in msg


def test_unknown_scale_and_experiment_are_named():
    with pytest.raises(ValueError, match=r"scale='foo' is not allowed.*'smoke', 'gpu', 'paper'"):
        resolve("fig3", scale="foo")
    with pytest.raises(ValueError, match=r"experiment='fig99' is not allowed"):
        resolve("fig99")


def test_batch_size_larger_than_n_train_is_named():
    with pytest.raises(ValueError, match=r"batch_size=300 is not allowed.*n_train=200"):
        resolve("fig3", n_train=200, batch_size=300)
    with pytest.raises(ValueError, match=r"batch_size=50 is not allowed.*n_train=32"):
        resolve("fig5", n_train=[32, 64], batch_size=50)


def test_resolve_returns_a_fresh_copy():
    c = resolve("fig2")
    c["K"].append(12345)
    assert 12345 not in resolve("fig2")["K"]


def test_describe():
    assert describe({"K": [1, math.inf], "lr": 0.001, "n": None}) == "K=[1, inf], lr=0.001, n=None"


@pytest.mark.parametrize("experiment", sorted(SCALES))
@pytest.mark.parametrize("scale", SCALE_NAMES)
def test_revalidate_is_idempotent(experiment, scale):
    c = resolve(experiment, scale)
    assert revalidate(c) == c
    with pytest.raises(ValueError, match="config=.*is not allowed"):
        revalidate({"K": 1})


def test_all_images():
    assert resolve("fig3", n_train="all")["n_train"] is None
    assert revalidate(resolve("fig5", n_train="all"))["n_train"] == [None]
