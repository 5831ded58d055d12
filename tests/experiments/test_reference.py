"""iterlin.experiments.reference: reference runs written with their provenance, read back, their
claims re-derived, and the command line."""

from __future__ import annotations

import ast
import dataclasses
import json
from typing import ClassVar, NamedTuple

import numpy as np
import pytest

from iterlin.repro.cache import load_results, save_results
from iterlin.repro.claims import Claim
from iterlin.repro.config import ExperimentConfig, RunCount, Seed, Steps
from iterlin.experiments import _common, reference, registry
from iterlin.repro.fingerprint import code_fingerprint


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyConfig(ExperimentConfig):
    experiment: ClassVar[str] = "toy"

    steps: Steps
    seed: Seed
    n_seeds: RunCount


class ToyResults(NamedTuple):
    acc: np.ndarray
    nested: dict
    config: ToyConfig | None = None


def _toy_experiment(calls):
    """A stand-in experiment (fig3's module for the code fingerprint): cheap load and compute."""

    def load(config):
        return {"x": np.arange(3.0)}

    def compute(config, data, *, checkpoint_dir=None, progress=False):
        calls.append(checkpoint_dir)
        return ToyResults(acc=np.asarray([0.4, 0.5]), nested={"steps": np.arange(config.steps)})

    def claims(results):
        a = np.asarray(results.acc)
        return [Claim("b beats a", "paper", f"{a[1] - a[0]:.2f}", "yes" if a[1] > a[0] else "no", "Δ > 0")]

    scales = {s: dict(steps=3, seed=0, n_seeds=2) for s in ("smoke", "cpu", "gpu", "paper")}
    return _common.Experiment("toy", scales, load, compute, claims, "iterlin.experiments.fig3", ToyConfig,
                              ToyResults)


@pytest.fixture
def toy(monkeypatch):
    calls = []
    exp = _toy_experiment(calls)
    monkeypatch.setitem(registry.EXPERIMENTS, "toy", exp)
    monkeypatch.setattr(registry, "data_fingerprint", lambda data: "data-fp")
    return exp, calls


def test_write_and_load_a_reference_run_with_its_provenance(toy, tmp_path):
    exp, calls = toy
    out = reference.write("toy", "cpu", base=tmp_path / "results", checkpoint_root=tmp_path / "ckpt", progress=False,
                          steps=4)
    assert out == tmp_path / "results" / "toy"
    assert sorted(p.name for p in out.iterdir()) == ["claims.json", "provenance.json", "results.npz"]
    assert calls == [tmp_path / "ckpt" / "toy-cpu"] and not (tmp_path / "ckpt" / "toy-cpu").exists()
    prov = json.loads((out / "provenance.json").read_text())
    for key in ("scale", "device", "seeds", "iterlin_commit", "jax_version", "date", "wall_seconds", "config",
                "data_fingerprint", "code_fingerprint", "resumed"):
        assert key in prov, key
    assert prov["scale"] == "cpu" and prov["seeds"] == [0, 1] and prov["config"]["steps"] == 4
    assert prov["device"].startswith("cpu: ") and prov["data_fingerprint"] == "data-fp" and prov["resumed"] is False
    assert prov["code_fingerprint"] == code_fingerprint("iterlin.experiments.fig3", ("load", "compute"))
    ref = reference.load("toy", base=tmp_path / "results")
    assert isinstance(ref.results, ToyResults)
    np.testing.assert_array_equal(ref.results.nested["steps"], np.arange(4))
    assert ref.results.config.to_dict() == prov["config"] and ref.rows == exp.claims(ref.results)
    assert not ref.changed_since
    caption = ref.caption()
    assert caption.startswith("Reference run: scale 'cpu', cpu: ") and "seeds 0–1 (2)" in caption
    assert "changed since" not in caption
    assert str(ref.claims()).startswith("Claims of the reference run of toy at scale 'cpu':")
    assert reference.load("toy", base=tmp_path / "elsewhere") is None


def test_show_plots_the_reference_run_then_its_verdict_provenance_and_claims(toy, tmp_path, capsys):
    base = tmp_path / "results"
    plotted = []
    assert reference.show("toy", plotted.append, base=base) is None and plotted == []
    assert capsys.readouterr().out == "No reference run is committed yet: make results SCALE=cpu\n"
    reference.write("toy", "cpu", base=base, checkpoint_root=tmp_path / "ckpt", progress=False)
    ref = reference.show("toy", plotted.append, base=base)
    assert len(plotted) == 1 and plotted[0] is ref.results
    out = capsys.readouterr().out
    verdict = ref.claims().verdict()
    assert verdict.startswith("Verdict of the reference run of toy at scale 'cpu': of ")
    assert out.startswith(f"{verdict}\n{ref.caption()}\n") and "Claims of the reference run of toy at scale 'cpu':" in out
    ref = reference.show("toy", plotted.append, base=base, table=False)  # the table further down the page
    assert capsys.readouterr().out == f"{verdict}\n{ref.caption()}\n"
    reference.show_claims(ref)
    assert capsys.readouterr().out.startswith("Claims of the reference run of toy at scale 'cpu':")
    reference.show_claims(None)
    assert capsys.readouterr().out == ""


def test_a_changed_library_is_said_and_claims_are_re_derived(toy, tmp_path, monkeypatch):
    exp, _ = toy
    base = tmp_path / "results"
    reference.write("toy", "cpu", base=base, checkpoint_root=tmp_path / "ckpt", progress=False)
    monkeypatch.setattr(reference, "code_fingerprint", lambda *args: "0" * 64)  # today's code differs
    ref = reference.load("toy", base=base)
    assert ref.changed_since and "The library has changed since" in ref.caption()

    def stricter(results):
        return [Claim("b beats a by 20 points", "paper", "10 pts", "no", "Δ > 0.2")]

    monkeypatch.setitem(registry.EXPERIMENTS, "toy", exp._replace(claims=stricter))
    with pytest.raises(reference.ReferenceMismatch, match=r"toy/claims.json: row 0 is .* but the stored results give"):
        reference.load("toy", base=base)  # claims.json is no longer what today's rule derives
    assert reference.rewrite_claims("toy", base=base)
    assert reference.load("toy", base=base).rows == stricter(None)
    assert not reference.rewrite_claims("toy", base=tmp_path / "none")


def test_an_interrupted_run_resumes_from_its_checkpoints(toy, tmp_path):
    ckpt = tmp_path / "ckpt" / "toy-cpu"
    ckpt.mkdir(parents=True)
    (ckpt / "runs.npz").write_bytes(b"partial")
    reference.write("toy", "cpu", base=tmp_path / "results", checkpoint_root=tmp_path / "ckpt", progress=False)
    assert json.loads((tmp_path / "results" / "toy" / "provenance.json").read_text())["resumed"] is True


def test_provenance_line():
    prov = {"scale": "gpu", "device": "NVIDIA H100 80GB HBM3", "seeds": [3], "date": "2026-11-23T07:00:00Z",
            "iterlin_commit": "0123456789abcdef+dirty", "jax_version": "0.11.0", "wall_seconds": 612.4}
    line = reference.provenance_line(prov, changed=True)
    assert line.startswith("Reference run: scale 'gpu', NVIDIA H100 80GB HBM3, seed 3, 2026-11-23, iterlin "
                           "0123456789+dirty, JAX 0.11.0, 612 s of computation.")
    assert line.endswith("differs from that commit's.")


def test_command_line(toy, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ITERLIN_RESULTS", str(tmp_path / "r"))
    monkeypatch.setattr(reference, "write", lambda name, scale, **kw: _fake_write(name, scale, tmp_path / "r"))
    assert reference.main(["toy", "--scale", "smoke"]) == 0
    assert "toy: written to" in capsys.readouterr().out
    assert reference.main(["toy", "--scale", "smoke", "--skip-existing"]) == 0
    assert "exists, skipped" in capsys.readouterr().out
    assert reference.main(["toy", "--claims-only"]) == 0
    assert "toy: claims rewritten" in capsys.readouterr().out
    with pytest.raises(ValueError, match="experiment='nope' is not allowed"):
        reference.main(["nope"])


def _fake_write(name, scale, base):
    from iterlin.repro.cache import save_results

    out = base / name
    config = {"experiment": name, "scale": scale, "steps": 3, "seed": 0, "n_seeds": 1}
    results = ToyResults(acc=np.asarray([0.4, 0.5]), nested={"steps": np.arange(3)})
    save_results(out / "results.npz", _common.stored(results), key=f"reference:{name}:{scale}:x", config=config)
    rows = registry.get(name).claims(results)
    reference._write_json(out / "claims.json", reference._claims_doc(name, scale, rows))
    reference._write_json(out / "provenance.json", {
        "scale": scale, "device": "cpu: 1 cores", "seeds": [0], "iterlin_commit": "unknown (not a checkout)",
        "jax_version": "0", "date": "2026-01-01T00:00:00Z", "wall_seconds": 1.0, "config": config,
        "code_fingerprint": "x"})
    return out


def _git(cwd, *args):
    import subprocess

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(cwd), "PATH": __import__("os").environ["PATH"]}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


def _two_commits(tmp_path):
    """A git checkout of today's ``iterlin/`` (commit ``same``), then one where fig3's compute
    differs (commit ``other``): (repo, same, other)."""
    import shutil

    from iterlin.repro.fingerprint import PACKAGE_DIR

    repo = tmp_path / "repo"
    shutil.copytree(PACKAGE_DIR, repo / "iterlin", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _git(repo, "init", "-q")
    _git(repo, "add", "iterlin")
    _git(repo, "commit", "-q", "-m", "today's code")
    same = _git(repo, "rev-parse", "HEAD")
    fig3 = repo / "iterlin" / "experiments" / "fig3.py"
    lines = fig3.read_text().splitlines(keepends=True)
    compute = next(n for n in ast.parse("".join(lines)).body if getattr(n, "name", None) == "compute")
    lines.insert(compute.body[-1].lineno - 1, " " * compute.body[-1].col_offset + "print('edited')\n")
    fig3.write_text("".join(lines))
    _git(repo, "commit", "-q", "-am", "compute differs")
    return repo, same, _git(repo, "rev-parse", "HEAD")


def _recorder(results):
    """``recorded(commit, code)``: make the toy run under ``results`` one made at ``commit`` whose
    fingerprint is ``code`` (e.g. by other rules)."""
    path = results / "toy" / "provenance.json"
    prov = json.loads(path.read_text())

    def recorded(commit, code="0" * 64):
        arrays = load_results(results / "toy" / "results.npz")
        save_results(results / "toy" / "results.npz", arrays, key=f"reference:toy:cpu:{code}", config=prov["config"])
        path.write_text(json.dumps({**prov, "iterlin_commit": commit, "code_fingerprint": code}))

    return recorded


def test_refingerprint_re_derives_at_the_runs_commit(toy, tmp_path, monkeypatch, capsys):
    """A run recorded under other fingerprint rules reads as changed; re-derived at its commit (a
    checkout holding today's code, then one where fig3's compute differs) it does not, then does."""
    repo, same, other = _two_commits(tmp_path)
    monkeypatch.setattr(reference, "repo_root", lambda: repo)
    results = tmp_path / "results"
    reference.write("toy", "cpu", base=results, checkpoint_root=tmp_path / "ckpt", progress=False)
    path = results / "toy" / "provenance.json"
    recorded = _recorder(results)

    for commit, changed in [(same, False), ("f" * 40, None), (other, True)]:
        recorded(commit)
        r = reference.refingerprint("toy", base=results)
        assert r.changed_as_recorded and r.changed is changed, commit
    assert reference.load("toy", base=results).changed_since  # (the commit of `other`, recorded)
    assert reference.refingerprint("fig3", base=results) is None  # no run committed

    recorded(same)
    assert reference.main(["toy", "--refingerprint", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "toy: " in out and "code unchanged since" in out and "1 read as changed with the recorded" in out
    assert "0 with fingerprints re-derived" in out and json.loads(path.read_text())["code_fingerprint"] == "0" * 64
    assert reference.main(["toy", "--refingerprint", "--write", "--results", str(results)]) == 0
    ref = reference.load("toy", base=results)  # results.npz re-keyed with it: it still loads, the same arrays
    assert not ref.changed_since  # re-derived: today's code is the commit's
    np.testing.assert_array_equal(ref.results.nested["steps"], np.arange(3))
    for commit in (other, same + "+dirty"):  # code that differs, or is not known: reads as changed
        recorded(commit)
        reference.main(["toy", "--refingerprint", "--write", "--results", str(results)])
        assert reference.load("toy", base=results).changed_since, commit
    with pytest.raises(SystemExit):
        reference.main(["--write"])


def test_claims_only_fails_without_the_results_folder(toy, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ITERLIN_RESULTS", str(tmp_path / "missing"))
    assert reference.main(["--claims-only"]) == 2
    assert f"the results folder '{tmp_path / 'missing'}' does not exist" in capsys.readouterr().err
    (tmp_path / "missing").mkdir()
    assert reference.main(["toy", "--claims-only"]) == 1  # nothing to re-derive is a failure, not success


def _probe_runner(calls, differ=()):
    """A stand-in for the probe's process: the toy's results in-process (:mod:`._probe`), the last
    array changed for the sides named in ``differ``; records (side, scale, overrides)."""
    from iterlin.experiments import _probe

    def run(root, name, scale, overrides, out):
        side = root.name
        assert (root / "iterlin" / "experiments" / "fig3.py").is_file()  # the commit's package, extracted
        calls.append((side, scale, dict(overrides)))
        _probe.main([name, scale, json.dumps(dict(overrides)), str(out), str(out.parent / f"{side}-ckpt")])
        if side in differ:
            arrays = load_results(out)
            arrays["acc"] = arrays["acc"] + np.float64(1e-16) * 4
            save_results(out, arrays, key="probe", config=json.loads(str(np.load(out)["__config__"])))
        return None

    return run


def test_compare_results(tmp_path):
    config = {"experiment": "toy", "scale": "smoke", "steps": 2}
    a = {"acc": np.asarray([0.25, 0.5]), "n": {"steps": np.arange(3)}, "wall_seconds": np.asarray([1.0])}

    def saved(name, results, cfg=config):
        save_results(tmp_path / name, results, key="k", config=cfg)
        return tmp_path / name

    same = saved("a.npz", a)
    assert reference.compare_results(same, saved("b.npz", {**a, "wall_seconds": np.asarray([9.0])})) == (
        True, "2 arrays and the config equal bit for bit (1 wall-clock arrays not compared)")
    cases = [
        ({**a, "acc": np.asarray([0.25, 0.5 + 2 ** -40])}, config, "'acc' differs (largest difference 9.09e-13)"),
        ({**a, "acc": np.asarray([0.25, 0.5], np.float32)}, config, "'acc': float64[2] against float32[2]"),
        ({**a, "extra": np.zeros(1)}, config, "'extra' is stored in c2.npz only"),
        (a, {**config, "steps": 3}, "the config differs"),
    ]
    for i, (results, cfg, message) in enumerate(cases):
        assert reference.compare_results(same, saved(f"c{i}.npz", results, cfg)) == (False, message)


def test_attest_records_equivalent_code_only_when_every_array_is_equal(toy, tmp_path, monkeypatch, capsys):
    """A run made at an older commit (fig3's compute differs there) reads as changed; when both
    codes compute the same results at the probe config it is attested (the page says so, and a
    second attest has nothing to do); when one array differs in its last bit it is not; today's
    code must be committed and the run's code known."""
    repo, same, other = _two_commits(tmp_path)
    monkeypatch.setattr(reference, "repo_root", lambda: repo)
    monkeypatch.setattr(reference, "_commit", lambda: same)
    results = tmp_path / "results"
    reference.write("toy", "cpu", base=results, checkpoint_root=tmp_path / "ckpt", progress=False)
    recorded = _recorder(results)

    recorded(other)
    calls = []
    a = reference.attest("toy", base=results, run=_probe_runner(calls, differ=("recorded",)))
    assert a.equal is False and a.detail.startswith("at scale 'smoke': 'acc' differs (largest difference 4")
    assert calls == [("recorded", "smoke", {}), ("today", "smoke", {})]
    assert reference.load("toy", base=results).changed_since  # not attested: still reads as changed

    calls.clear()
    a = reference.attest("toy", base=results, scale="cpu", overrides={"steps": 2}, run=_probe_runner(calls))
    assert a.equal is True and a.detail == "at scale 'cpu' with {'steps': 2}: 2 arrays and the config equal bit for bit"
    ref = reference.load("toy", base=results)
    assert not ref.changed_since and ref.attested["iterlin_commit"] == same
    assert ref.attested["probe"] == {"scale": "cpu", "overrides": {"steps": 2}}
    assert "at scale 'cpu' it computes the same results bit for bit" in ref.caption()
    again = reference.attest("toy", base=results, run=_probe_runner(calls := []))
    assert again.equal is True and again.detail.startswith("attested before") and calls == []
    capsys.readouterr()
    assert reference.main(["toy", "--attest", "--results", str(results)]) == 0  # nothing left to attest
    assert capsys.readouterr().out == "toy: current (code unchanged or attested); nothing to attest\n"

    recorded(other)  # a fresh record: no equivalent code
    monkeypatch.setattr(reference, "_commit", lambda: same + "+dirty")
    assert reference.attest("toy", base=results, run=_probe_runner(calls)).equal is None and calls == []
    monkeypatch.setattr(reference, "_commit", lambda: same)
    recorded(other + "+dirty")
    assert "is not known" in reference.attest("toy", base=results, run=_probe_runner(calls)).detail
    recorded(other)
    monkeypatch.setattr(reference, "_run_probe", _probe_runner(calls, differ=("today",)))
    assert reference.main(["toy", "--attest", "--results", str(results)]) == 1
    assert "toy: NOT attested: at scale 'smoke': 'acc' differs" in capsys.readouterr().out


@pytest.mark.parametrize("cache_module", ["repro/cache.py", "cache.py"])  # today's layout, and a past commit's flat one
def test_the_probe_runs_the_package_it_is_given(tmp_path, cache_module):
    """The probe's process imports ``iterlin`` from the root it is given, ahead of the installed one
    (a stand-in package here: its registry computes without JAX), and says when it fails."""
    root = tmp_path / "pkg"
    (root / "iterlin" / "experiments").mkdir(parents=True)
    (root / "iterlin" / "repro").mkdir()
    (root / "iterlin" / "__init__.py").write_text("")
    (root / "iterlin" / "repro" / "__init__.py").write_text("")
    (root / "iterlin" / cache_module).write_text(
        "import json, numpy as np\n"
        "def save_results(path, results, *, key, config):\n"
        "    np.savez(path, __key__=np.asarray(key), __config__=np.asarray(json.dumps(config)), **results)\n")
    (root / "iterlin" / "experiments" / "__init__.py").write_text("")
    (root / "iterlin" / "experiments" / "registry.py").write_text(
        "import numpy as np, types, typing\n"
        "class Results(typing.NamedTuple):\n"
        "    steps: np.ndarray\n"
        "    unset: object = None\n"
        "    config: object = None\n"
        "def resolve(name, scale, **kw):\n"
        "    if name != 'stand-in': raise ValueError(f'name={name!r} is not allowed')\n"
        "    return {'experiment': name, 'scale': scale, **kw}\n"
        "def compute(c, d, **kw):  # typed results, or a dict (the code of older commits)\n"
        "    steps = np.arange(c['steps'])\n"
        "    return Results(steps) if c['typed'] else {'steps': steps}\n"
        "def get(name):\n"
        "    return types.SimpleNamespace(load=lambda c: None, compute=compute)\n")
    for typed in (True, False):
        out = tmp_path / f"out-{typed}.npz"
        assert reference._run_probe(root, "stand-in", "smoke", {"steps": 3, "typed": typed}, out) is None
        with np.load(out) as z:  # the typed results' fields but config and the unset ones
            assert sorted(z.files) == ["__config__", "__key__", "__package__", "steps"]
            np.testing.assert_array_equal(z["steps"], np.arange(3))
            assert str(z["__package__"]) == str(root / "iterlin" / "__init__.py")
    failed = reference._run_probe(root, "other", "smoke", {}, tmp_path / "other.npz")
    assert failed.startswith("the probe failed (exit 1)") and "name='other' is not allowed" in failed


@pytest.mark.parametrize("field, value, message", [
    ("equivalent_code", [{"code_fingerprint": "x"}], "equivalent_code must be a list of entries with"),
    ("scale", "paper", "results.npz is not the run .*provenance.json describes"),
    ("seeds", list(range(100)), "seeds .* are not the stored config's \\[0, 1\\]"),
    ("iterlin_commit", "f" * 40, "iterlin_commit='f{40}' is not a commit of this checkout"),
    ("iterlin_commit", "not-a-sha", "is not a commit's sha"),
    ("name", "fig3", "is not a provenance of toy"),
])
def test_load_refuses_a_provenance_that_is_not_the_stored_runs(toy, tmp_path, field, value, message):
    base = tmp_path / "results"
    reference.write("toy", "cpu", base=base, checkpoint_root=tmp_path / "ckpt", progress=False)
    path = base / "toy" / "provenance.json"
    prov = json.loads(path.read_text())
    prov[field] = value
    if field == "scale":
        prov["config"]["scale"] = value
    path.write_text(json.dumps(prov))
    with pytest.raises(reference.ReferenceMismatch, match=message):
        reference.load("toy", base=base)
    assert reference.main(["toy", "--claims-only", "--results", str(base)]) == 2


#: Experiments whose reference run is registered but not yet committed (a confirmatory run of
#: many CPU-hours, resumed across sessions): their plot is checked on the smoke run (their tests).
PENDING = ("fig3_confirm",)


def test_only_registered_runs_are_pending():
    """Every experiment has a committed reference run but those whose confirmatory run is pending,
    and those have only confirmatory rows (registered before the run)."""
    from iterlin.experiments import protocol

    assert [n for n in registry.names() if reference.load(n, check_claims=False) is None] == list(PENDING)
    assert all(r.status == "confirmatory" for n in PENDING for r in protocol.rows_of(n))


@pytest.mark.parametrize("name", [n for n in registry.names() if n not in PENDING])
def test_every_figure_plots_its_committed_reference_run(name, figures, capsys):
    """Each figure's ``plot`` (in its module; the notebook calls it) draws the committed run, as the
    page's first cell does, without a warning."""
    import importlib
    import warnings

    ref = reference.load(name, check_claims=False)
    assert ref is not None, f"no reference run of {name} is committed"
    module = importlib.import_module(registry.get(name).module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", "FigureCanvasAgg is non-interactive")  # plt.show() on Agg
        module.plot(ref.results)
    assert figures.get_fignums(), f"{name}'s plot drew no figure"
    assert all(ax.has_data() for n in figures.get_fignums() for ax in figures.figure(n).axes if ax.get_visible()
               and not ax.get_label() == "<colorbar>"), f"{name}'s plot left an empty panel"
