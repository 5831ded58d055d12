"""iterlin.experiments.registry: every experiment registered and its defaults valid at every scale,
bad names and parameters named before any data is read, the scales table, one cached real run, and
the package's import graph (no cycle; the core never imports the experiments)."""

from __future__ import annotations

import ast
import importlib
import json
import math
import typing
from pathlib import Path

import numpy as np
import pytest
from _toy import fake_cifar, fake_sweep

import iterlin
import iterlin.experiments as ex
from iterlin.repro.claims import HOLDS, UNDECIDED
from iterlin.repro.config import SCALE_NAMES, knob_check
from iterlin.experiments import fig3, registry
from iterlin.experiments._common import Sweep

PACKAGE_DIR = Path(iterlin.__file__).resolve().parent
EXPERIMENTS_DIR = PACKAGE_DIR / "experiments"
NOT_EXPERIMENTS = {"__init__", "_common", "_probe", "registry", "reference", "findings", "protocol"}
MODULES = sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.py") if p.stem not in NOT_EXPERIMENTS)


# ----------------------------------------------------------------------------------------------
# Registration
# ----------------------------------------------------------------------------------------------


def test_every_experiment_module_is_registered():
    assert MODULES, "no experiment modules found"
    assert sorted(ex.names()) == MODULES and ex.names() == tuple(ex.EXPERIMENTS)
    for name in ("EXPERIMENTS", "get", "resolve", "revalidate", "run", "claims", "scales_table", "data_fingerprint",
                 "resolve_notebook", "notebook_parameters"):
        assert getattr(ex, name) is getattr(registry, name), name  # re-exported by the package
    for stem in MODULES:
        module = importlib.import_module(f"iterlin.experiments.{stem}")
        exp = module.EXPERIMENT
        assert ex.EXPERIMENTS[stem] is exp and ex.get(stem) is exp
        assert exp.name == stem and exp.module == f"iterlin.experiments.{stem}" == module.__name__
        assert exp.scales is module.SCALES and list(exp.scales) == list(SCALE_NAMES)
        assert (exp.load, exp.compute, exp.claims) == (module.load, module.compute, module.claims)
        assert exp.config is module.Config and module.Config.experiment == stem
        assert list(module.Config.knobs()) == list(exp.scales["smoke"])  # fields in the order of SCALES
        cpu = ex.resolve(stem, "cpu")  # the one way to a config: Experiment.get_config
        assert type(cpu) is module.Config and cpu.scale == "cpu" and cpu == exp.get_config("cpu")
        assert callable(exp.load) and callable(exp.compute) and callable(exp.claims)


@pytest.mark.parametrize("name", MODULES)
def test_same_keys_at_every_scale_and_each_has_a_validator(name):
    scales = ex.get(name).scales
    keys = [set(scales[s]) for s in SCALE_NAMES]
    assert keys[0] == keys[1] == keys[2]
    hints = typing.get_type_hints(ex.get(name).config, include_extras=True)
    assert all(knob_check(hints[k]) is not None for k in keys[0])


@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize("scale", SCALE_NAMES)
def test_every_default_validates_is_json_and_revalidates(name, scale):
    config = ex.resolve(name, scale)
    assert config.experiment == name and config.scale == scale
    d = config.to_dict()
    assert list(d) == ["experiment", "scale", *ex.get(name).config.knobs()]
    assert set(d) == {"experiment", "scale", *ex.get(name).scales[scale]}
    assert ex.revalidate(config) == config and ex.revalidate(d) == config
    # JSON round trip (K = inf is written Infinity and read back as inf)
    assert json.loads(json.dumps(d)) == d and ex.revalidate(json.loads(json.dumps(d))) == config


def test_a_config_is_frozen_and_its_lists_are_tuples():
    import dataclasses

    c = ex.resolve("fig2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.K = (1,)
    assert isinstance(c.K, tuple) and ex.get("fig2").scales["smoke"]["K"] == list(c.K)


# ----------------------------------------------------------------------------------------------
# Names and parameters checked first
# ----------------------------------------------------------------------------------------------


def test_unknown_experiment_is_named():
    for call in (ex.get, ex.resolve, ex.run):
        with pytest.raises(ValueError, match=r"experiment='fig42' is not allowed.*'fig1'"):
            call("fig42")


def test_unknown_scale_and_parameter_are_named():
    with pytest.raises(ValueError, match=r"scale='foo' is not allowed.*'smoke', 'cpu', 'gpu', 'paper'"):
        ex.resolve("fig3", "foo")
    with pytest.raises(ValueError, match=r"damping=0.1 is not allowed: fig3 has no parameter 'damping'"):
        ex.resolve("fig3", damping=0.1)
    with pytest.raises(ValueError, match=r"bn_mode='x' is not allowed: ntk has no parameter 'bn_mode'"):
        ex.resolve("ntk", bn_mode="x")


def test_revalidate_needs_a_resolved_config():
    for bad in ({"K": 1}, {"experiment": "fig3"}, [("experiment", "fig3")], None):
        with pytest.raises(ValueError, match="config=.*is not allowed"):
            ex.revalidate(bad)
    c = ex.resolve("fig3")
    with pytest.raises(ValueError, match="K=0 is not allowed"):
        ex.revalidate({**c.to_dict(), "K": 0})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(K="abc"), "K='abc' is not allowed"),
        (dict(K=0), "K=0 is not allowed"),
        (dict(lr=float("nan")), "lr=nan is not allowed"),
        (dict(steps=0), "steps=0 is not allowed"),
        (dict(scale="foo"), "scale='foo' is not allowed"),
        (dict(batch_size=0), "batch_size=0 is not allowed"),
        (dict(damping=1.0), "damping=1.0 is not allowed"),
    ],
)
def test_run_validates_before_loading(monkeypatch, kwargs, message):
    def no_load(config):
        raise AssertionError("data loaded before the parameters were checked")

    monkeypatch.setitem(ex.EXPERIMENTS, "fig3", ex.EXPERIMENTS["fig3"]._replace(load=no_load))
    with pytest.raises(ValueError, match=message):
        ex.run("fig3", **kwargs)
    with pytest.raises(ValueError, match=message):  # a config is validated again, before loading too
        ex.run({**ex.resolve("fig3").to_dict(), **kwargs})


def test_run_refuses_a_config_with_overrides():
    with pytest.raises(ValueError, match="either a config or overrides"):
        ex.run(ex.resolve("fig3"), lr=0.1)


def test_n_train_and_batch_size_checked_against_installed_data(cifar_subset_path):
    with pytest.raises(ValueError, match=r"n_train=49999 is not allowed.*n_train must be <= 4660"):
        ex.run("fig3", n_train=49999, progress=False)
    with pytest.raises(ValueError, match=r"n_train=99999 is not allowed.*<= 50000 \(CIFAR-10 has 50000"):
        ex.run("fig3", n_train=99999, progress=False)  # beyond CIFAR-10 itself: refused before loading
    with pytest.raises(ValueError, match=r"batch_size=4661 is not allowed.*n_train=4660"):
        ex.run("fig3", n_train="all", n_test=10, batch_size=4661, progress=False)


# ----------------------------------------------------------------------------------------------
# run() end to end, claims(), data_fingerprint(), scales_table()
# ----------------------------------------------------------------------------------------------


def test_run_wires_load_compute_cache_and_config(monkeypatch, tmp_path, capsys):
    """run() = resolve → load → cached(compute) → results with the config; computed once."""
    calls = []

    def compute(config, data, *, checkpoint_dir=None, progress=False):
        calls.append((config, data.x_train.shape[0], checkpoint_dir, progress))
        return fig3.Results(runs=fake_sweep([1, 3], 0.05, 24, [0.3, 0.3]), n_test=np.asarray(8))

    fake = ex.EXPERIMENTS["fig3"]._replace(load=lambda config: fake_cifar(config.n_train), compute=compute)
    monkeypatch.setitem(ex.EXPERIMENTS, "fig3", fake)
    r = ex.run("fig3", n_train=12, batch_size=4, cache_dir=tmp_path, progress=False)
    assert isinstance(r, fig3.Results) and int(r.n_test) == 8
    assert r.config == ex.resolve("fig3", n_train=12, batch_size=4) and r.runs["K"].tolist() == [1.0, 3.0]
    (config, n, ckpt, progress), = calls
    assert config == r.config and n == 12 and ckpt is not None and progress is False
    out = capsys.readouterr().out
    assert out.startswith("fig3 (smoke): K=[1, 3], lr=0.05") and "computed" in out
    again = ex.run(r.config, cache_dir=tmp_path, verbose=False)
    assert len(calls) == 1 and isinstance(again, fig3.Results) and again.config == r.config
    np.testing.assert_array_equal(again.runs["net_test_acc"], r.runs["net_test_acc"])


def test_typed_results_store_their_arrays_and_read_back():
    """``stored`` keeps every field but the config and the unset ones; ``Experiment.typed`` reads them
    back with the config, and refuses names that are not the type's fields or that it lacks."""
    exp, config = ex.get("fig3"), ex.resolve("fig3")
    r = fig3.Results(runs=fake_sweep([1, 3], 0.05, 24, [0.3, 0.3]), n_test=np.asarray(5), config=config)
    assert sorted(ex.stored(r)) == ["n_test", "runs"]
    back = exp.typed({"runs": dict(r.runs), "n_test": r.n_test}, config)  # the sweep as a file's columns
    assert isinstance(back.runs, Sweep) and back.config == config and int(back.n_test) == 5
    assert back.runs.K.tolist() == [1.0, 3.0] and sorted(back.runs) == sorted(r.runs)
    assert all(np.array_equal(back.runs[k], r.runs[k]) for k in r.runs)
    with pytest.raises(ValueError, match=r"unknown \['extra'\]"):
        exp.typed({**ex.stored(r), "extra": np.zeros(1)}, config)
    with pytest.raises(ValueError, match=r"missing \['n_test'\]"):
        exp.typed({"runs": r.runs}, config)


def test_claims_cell_publishes(tmp_path):
    h = fake_sweep([1, 5], 0.1, 50, [0.40, 0.395])
    text = ex.claims(fig3.Results(runs=h, n_test=np.asarray(100), config=ex.resolve("fig3")), directory=tmp_path)
    assert str(text).startswith("Claims of fig3 at scale 'smoke':")
    doc = json.loads((tmp_path / "fig3.json").read_text())
    assert doc["name"] == "fig3" and doc["scale"] == "smoke" and len(doc["rows"]) == 5
    assert doc["rows"][0]["holds"] == UNDECIDED  # 100 test images cannot decide "under 1 point"


def test_data_fingerprint():
    a, b = fake_cifar(4, seed=1), fake_cifar(4, seed=2)
    assert ex.data_fingerprint(a) == a.fingerprint != b.fingerprint
    assert ex.data_fingerprint({"4": a, "8": b}) == ex.data_fingerprint({"8": b, "4": a})  # order-free
    assert ex.data_fingerprint({"4": a, "8": b}) != ex.data_fingerprint({"4": b, "8": a})
    assert ex.data_fingerprint([a, b]) != ex.data_fingerprint([b, a])


def test_scales_table_lists_every_experiment_and_scale():
    table = ex.scales_table()
    for name in MODULES:
        assert f"### {name}\n" in table
        exp = ex.get(name)
        for key in exp.scales["smoke"]:
            assert f"| `{key}` |" in ex.scales_table(name)
    assert table.count("| parameter | smoke | cpu | gpu | paper |") == len(MODULES)
    fig3 = ex.scales_table("fig3")
    assert fig3.startswith("### fig3") and "### fig2" not in fig3
    grid = [ex.get("fig3").scales[scale]["K"] for scale in ("smoke", "cpu", "gpu", "paper")]  # ints: as repr
    assert "| `K` | " + " | ".join(map(str, grid)) + " |" in fig3
    assert "| `n_train` | 256 | 1000 | 1000 | 50000 |" in fig3  # None: every installed image
    assert "| `K` | [1, 4, ∞] |" in ex.scales_table("fig2")
    with pytest.raises(ValueError, match="experiment='nope' is not allowed"):
        ex.scales_table("nope")


# ----------------------------------------------------------------------------------------------
# A real tiny run, cached (the CIFAR-10 subset)
# ----------------------------------------------------------------------------------------------


def test_tiny_real_run_is_cached(cifar_subset_path, tmp_path, capsys):
    kw = dict(K=2, lr=0.005, steps=2, batch_size=8, n_train=16, n_test=16, n_evals=1, n_sharpness=8,
              sharpness_every=2, progress=False, cache_dir=tmp_path)
    res = ex.run("fig3", **kw)
    h = res.runs
    assert res.config.K == (1, 2) and res.config.n_train == 16
    assert h["step"].tolist() == [0, 2] and h["net_test_acc"].shape == (2, 2)
    assert h["n_relin"][:, -1].tolist() == [2, 1] and not h["diverged"].any()
    assert np.all((h["net_test_acc"] >= 0) & (h["net_test_acc"] <= 1))
    assert int(res.n_test) == 16
    assert "computed and cached" in capsys.readouterr().out
    again = ex.run("fig3", **kw)  # replotting reruns nothing
    assert "loaded cached results" in capsys.readouterr().out
    for name in ("net_test_acc", "lin_test_acc", "n_relin"):
        np.testing.assert_array_equal(again.runs[name], h[name])
    assert ex.run(res.config, progress=False, cache_dir=tmp_path).config == res.config
    rows = ex.get("fig3").claims(res)
    assert len(rows) == 5 and all(r.holds in HOLDS for r in rows)
    assert np.isfinite(h["sharpness"]).all() and h["lr_over_bound"].shape == (2, 2)  # recorded at steps 0 and 2
    assert rows[0].holds == UNDECIDED  # 16 test images decide nothing at 1 point


# ----------------------------------------------------------------------------------------------
# The import graph of iterlin/
# ----------------------------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """``{module: {iterlin modules it imports}}`` from the sources: every import statement (module
    level or inside functions), absolute or relative; ``from pkg import sub`` counts as importing
    ``pkg.sub`` when that is a module, else ``pkg``."""
    files = {_module_name(p): p for p in PACKAGE_DIR.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for t in targets:
                # `import iterlin.a.b` imports iterlin.a.b (the longest known prefix)
                while t and t not in files:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(u):
        colour[u] = GREY
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if colour.get(v, BLACK) == GREY:
                return stack[stack.index(v):] + [v]
            if colour.get(v) == WHITE and (cycle := visit(v)):
                return cycle
        stack.pop()
        colour[u] = BLACK
        return None

    for u in sorted(graph):
        if colour[u] == WHITE and (cycle := visit(u)):
            return cycle
    return None


def test_import_graph_parser_sees_relative_and_function_level_imports():
    g = _import_graph()
    assert {f"iterlin.experiments.{m}" for m in MODULES} <= g["iterlin.experiments.registry"]  # from . import fig1
    assert {"iterlin.repro.config", "iterlin.repro.cache", "iterlin.experiments._common"} <= g["iterlin.experiments.registry"]
    assert "iterlin.experiments.registry" in g["iterlin.experiments"]
    assert "iterlin.training" in g["iterlin.experiments._common"]  # from ..training import fit
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle_in_iterlin():
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle)


#: Entry points above the experiments: they drive the experiments and nothing in the library imports them.
ENTRY_POINTS = ("iterlin.cli", "iterlin.__main__")


def test_core_modules_do_not_import_the_experiments():
    g = _import_graph()
    core = [m for m in g if not m.startswith("iterlin.experiments") and m not in ENTRY_POINTS]
    assert "iterlin.training" in core and "iterlin" in core
    assert not [m for m in g if m not in ENTRY_POINTS and any(t in ENTRY_POINTS for t in g[m])], \
        "a module imports the command line"
    offenders = {m: sorted(t for t in g[m] if t.startswith("iterlin.experiments")) for m in core}
    assert not {m: t for m, t in offenders.items() if t}, offenders


def test_inf_defaults_survive_resolve():
    assert ex.resolve("fig2").K[-1] == math.inf
    assert ex.resolve("fig4", K_bn="inf").K_bn == (1, math.inf)
