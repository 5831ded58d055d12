"""The command line (iterlin/cli.py): parameters, run, sweep through submitit's local executor, collect."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from iterlin import cli
from iterlin.experiments import fig9

#: fig9 in seconds: 3 Gauss–Newton steps of the paper's quintic regression, 2 λ values
TINY = ["-p", "steps=3", "-p", "n_evals=1", "-p", "n_functions=2"]


@pytest.mark.parametrize("text, value", [
    ("5e6", 5e6), ("3", 3), ("inf", math.inf), ("-inf", -math.inf), ("1,50", [1, 50]), ("[1,50]", [1, 50]),
    ("1,inf", [1, math.inf]), ("[1, 50, inf]", [1, 50, math.inf]), ("None", None), ("True", True),
    ("abc", "abc"), ("'abc'", "abc"),
])
def test_parse_value(text, value):
    assert cli.parse_value(text) == value


def test_parse_params_refuses_a_bad_item_and_a_repeat():
    assert cli.parse_params(["K=5e6", "seed=1"]) == {"K": 5e6, "seed": 1}
    with pytest.raises(ValueError, match=r"-p 'K' is not allowed: write -p NAME=VALUE"):
        cli.parse_params(["K"])
    with pytest.raises(ValueError, match="-p K is given twice"):
        cli.parse_params(["K=1", "K=2"])


def test_parse_seeds():
    assert cli.parse_seeds("0,1,2") == [0, 1, 2] == cli.parse_seeds("0-2")
    for bad in ("a", "1,1", "-1", ""):
        with pytest.raises(ValueError, match="--seeds .* is not allowed"):
            cli.parse_seeds(bad)


def test_grid_is_seeds_times_values_each_resolved():
    configs = cli.grid("fig3", "cpu", ["K=1,50,inf", "lr=0.01"], seeds=[0, 1])
    assert len(configs) == 6
    assert [c["K"] for c in configs[::2]] == [[1], [1, 50], [1, math.inf]]  # as `run -p K=…` expands it
    assert {c["seed"] for c in configs} == {0, 1} and {c["n_seeds"] for c in configs} == {1}
    assert cli.grid("fig3", "cpu", ["K=[1,50,inf]"])[0]["K"] == [1, 50, math.inf]  # one job with that list


@pytest.mark.parametrize("params, seeds, message", [
    (["K=1,abc"], None, "K='abc' is not allowed"),
    (["step=3"], None, "step=3 is not allowed: fig3 has no parameter 'step'"),
    (["seed=3"], [0, 1], "-p seed is not allowed with --seeds"),
])
def test_grid_fails_before_submitting(params, seeds, message):
    with pytest.raises(ValueError, match=message):
        cli.grid("fig3", "cpu", params, seeds)


def test_main_reports_bad_input_with_exit_2(capsys):
    assert cli.main(["run", "fig3", "-p", "K=abc"]) == 2
    assert "iterlin run: error: K='abc' is not allowed" in capsys.readouterr().err
    assert cli.main(["run", "fig99"]) == 2
    assert "experiment='fig99' is not allowed" in capsys.readouterr().err
    assert cli.main(["sweep", "fig9", "--seeds", "x", "--dry-run"]) == 2


def test_list_names_every_experiment(capsys):
    from iterlin.experiments import names

    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == list(names())


def test_run_writes_results_and_claims_and_resumes_from_the_cache(tmp_path, capsys):
    argv = ["run", "fig9", *TINY, "-p", "damping=0,1", "-p", "n_seeds=2", "--out", str(tmp_path / "out"),
            "--cache", str(tmp_path / "cache")]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "fig9: computed" in out and "Claims of fig9 at scale 'smoke'" in out
    assert f"results: {tmp_path / 'out' / 'results.npz'}" in out
    from iterlin.repro.cache import load_results

    results = load_results(tmp_path / "out" / "results.npz")
    doc = json.loads((tmp_path / "out" / "fig9.json").read_text())
    assert doc["name"] == "fig9" and doc["rows"]
    assert cli.main(argv) == 0  # the second time from the cache, the same results
    assert "fig9: loaded cached results" in capsys.readouterr().out
    again = load_results(tmp_path / "out" / "results.npz")
    assert results.keys() == again.keys()


def test_job_checkpoint_requeues_the_same_call(tmp_path):
    submitit = pytest.importorskip("submitit")
    config = cli.grid("fig9", "smoke", ["steps=3"])[0]
    job = cli.Job(tmp_path)
    delayed = job.checkpoint(0, config)
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    assert delayed.args == (0, config) and delayed.function.folder == str(tmp_path)


def test_sweep_with_the_local_executor_then_collect(tmp_path):
    """The same jobs Slurm would run, as processes on this machine (the path CI can test);
    ``--array-parallelism 2`` runs the 4 jobs in 2 processes."""
    folder = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "-m", "iterlin", "sweep", "fig9", *TINY, "-p", "damping=0,1", "--seeds", "0,1",
         "--executor", "local", "--array-parallelism", "2", "--folder", str(folder)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "4 jobs" in proc.stdout
    ids = json.loads((folder / cli.MANIFEST).read_text())["job_ids"]
    assert len(ids) == 4 and len(set(ids)) == 2 and ids[0] == ids[2] != ids[1] == ids[3], ids
    jobs = cli.collect(folder)
    assert [j.state for j in jobs] == ["done"] * 4
    assert [(j.config["damping"], j.config["seed"]) for j in jobs] == [([0.0], 0), ([0.0], 1), ([1.0], 0), ([1.0], 1)]
    # each job ran its own config: its stored results carry it, and the two seeds differ
    assert all(j.results.config.to_dict() == j.config for j in jobs)
    assert (jobs[0].results.train_rmse != jobs[1].results.train_rmse).any()
    table = cli.summary_table(jobs)
    assert table.splitlines()[0].split()[:4] == ["job", "damping", "seed", "state"]
    collected = subprocess.run([sys.executable, "-m", "iterlin", "collect", str(folder)], capture_output=True,
                               text=True, timeout=300)
    assert collected.returncode == 0 and collected.stdout.strip() == table


def test_collect_reports_unfinished_jobs_and_refuses_other_folders(tmp_path):
    configs = cli.grid("fig9", "smoke", ["steps=3,4"])
    (tmp_path / cli.MANIFEST).write_text(json.dumps({"name": "fig9", "scale": "smoke", "configs": configs}))
    jobs = cli.collect(tmp_path)
    assert [j.state for j in jobs] == ["unknown", "unknown"] and jobs[0].results is None
    assert "-" in cli.summary_table(jobs).splitlines()[1].split()
    assert cli.main(["collect", str(tmp_path)]) == 1  # not every job is done
    with pytest.raises(ValueError, match="is not allowed: it holds no sweep.json"):
        cli.collect(tmp_path / "nothing")


def test_console_script_is_installed():
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="iterlin")
    assert script.value == "iterlin.cli:main"
    proc = subprocess.run([str(Path(sys.executable).parent / "iterlin"), "list"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.split()[0] == "fig1", proc.stderr


def test_sweep_on_slurm_submits_one_job_array_with_requeue(tmp_path):
    """No Slurm here: a stand-in ``sbatch`` on PATH keeps the submission script and answers as sbatch
    does, so the test reads what a cluster would receive."""
    bin_dir, kept = tmp_path / "bin", tmp_path / "kept.sh"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f'#!/bin/sh\ncp "$1" {kept}\necho "Submitted batch job 4242"\n')
    sbatch.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    folder = tmp_path / "sweep"
    argv = [sys.executable, "-m", "iterlin", "sweep", "fig9", *TINY, "--seeds", "0-2", "-p", "damping=0,1",
            "--executor", "slurm", "--partition", "gpu", "--time", "240", "--gpus", "1", "--array-parallelism", "4",
            "--no-wait", "--folder", str(folder)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and "--executor slurm is not allowed on this machine" in proc.stderr  # no srun
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6 jobs" in proc.stdout and "submitted: 4242_0" in proc.stdout
    script = kept.read_text()
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=240", "#SBATCH --gpus-per-node=1", "#SBATCH --array=0-5%4",
                 "#SBATCH --signal=USR2@"):
        assert line in script, f"{line!r} missing from\n{script}"
    manifest = json.loads((folder / cli.MANIFEST).read_text())
    assert manifest["executor"] == "slurm" and len(manifest["configs"]) == 6
    assert manifest["job_ids"] == [f"4242_{i}" for i in range(6)]
    jobs = cli.collect(folder)  # nothing ran; no sacct here: the state says so instead of failing
    assert all(j.results is None and j.state.startswith(("unknown", "PENDING", "UNKNOWN")) for j in jobs)


# ------------------------------------------------------------------------------------------------
# Hostile or careless input (issue 22): exit 2 naming the value, never a traceback
# ------------------------------------------------------------------------------------------------

DEEP = "[" * 3000 + "1" + "]" * 3000


@pytest.mark.parametrize("argv, message", [
    (["run", "fig9", "-p", "scale=cpu"], "-p scale is not allowed: give the scale with --scale"),
    (["run", "fig9", "-p", "name=fig9"], "name='fig9' is not allowed: fig9 has no parameter 'name'"),
    (["sweep", "fig9", "-p", "scale=cpu", "--dry-run"], "-p scale is not allowed: give the scale with --scale"),
    (["sweep", "fig9", "-p", "name=fig9", "--dry-run"], "name='fig9' is not allowed"),
    (["run", "fig9", "-p", f"K={DEEP}"], r"-p K=\[\[\[.*nested 3000 brackets deep is not allowed: at most 16"),
    (["sweep", "fig9", "-p", f"steps={DEEP}", "--dry-run"], "-p steps=.*nested 3000 brackets deep"),
    (["sweep", "fig9", "--seeds", "0-4294967295", "--dry-run"],
     "--seeds '0-4294967295' is not allowed: 4294967296 seeds, more than a sweep's bound of 10000 jobs"),
    (["sweep", "fig9", "--seeds", "0-9999", "-p", "steps=10,20", "--dry-run"],
     "a sweep of 20000 jobs .* is not allowed: at most 10000 jobs"),
    (["sweep", "fig9", "-p", "steps=3", "--folder", "/proc/x"], "--folder '/proc/x' is not allowed: it cannot be written"),
])
def test_bad_command_lines_exit_2_naming_the_value(argv, message, capsys, tmp_path):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(message, err), err[:2000]


def test_run_checks_its_destination_before_computing(tmp_path, capsys, monkeypatch):
    from iterlin.experiments import registry

    def never(*args, **kwargs):
        raise AssertionError("computed before checking --out")

    monkeypatch.setattr(registry, "run", never)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for out in ("/proc/x", str(blocker / "sub")):
        assert cli.main(["run", "fig9", "-p", "steps=3", "--out", out, "--cache", str(tmp_path / "c")]) == 2
        assert f"--out '{out}' is not allowed: it cannot be written" in capsys.readouterr().err


def _fake_job(folder, index, config, *, stored_config=None, rows=()):
    """``<folder>/jobs/<index>`` as a finished job writes it, holding ``stored_config``'s results."""
    import numpy as np

    from iterlin.experiments import registry

    typed = registry.revalidate(stored_config or config)
    results = fig9.Results(**{f: np.zeros(2) for f in fig9.Results._fields if f != "config"}, config=typed)
    cli._write_run(folder / "jobs" / str(index), results, list(rows))


def _manifest(folder, configs, **extra):
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"name": "fig9", "scale": "smoke", "executor": "local", "configs": configs, **extra}
    (folder / cli.MANIFEST).write_text(json.dumps(doc, allow_nan=True))


def test_collect_checks_each_jobs_stored_config_against_the_manifest(tmp_path, capsys):
    configs = cli.grid("fig9", "smoke", ["steps=3"], seeds=[0, 5])
    _manifest(tmp_path, configs)
    _fake_job(tmp_path, 0, configs[0], stored_config=configs[1])  # job 0's folder holds seed 5's results
    _fake_job(tmp_path, 1, configs[1])
    jobs = cli.collect(tmp_path)
    assert [j.state for j in jobs] == ["invalid", "done"]
    assert jobs[0].results is None and "holds the results of config" in jobs[0].error and '"seed":5' in jobs[0].error
    assert isinstance(jobs[1].results, fig9.Results) and jobs[1].results.config.to_dict() == configs[1]
    assert cli.main(["collect", str(tmp_path)]) == 1
    assert "job 0 is invalid: cache file" in capsys.readouterr().err


def test_a_used_or_just_claimed_sweep_folder_is_refused(tmp_path, monkeypatch):
    configs = cli.grid("fig9", "smoke", ["steps=3"], seeds=[0, 1])
    _manifest(tmp_path / "used", configs)
    other = cli.grid("fig9", "smoke", ["steps=3"], seeds=[0, 2])  # another sweep: its job 1 differs
    with pytest.raises(ValueError, match=r"--folder .*used' is not allowed: it already holds a sweep \(sweep.json\) "
                                         r"of other configs \(2 jobs; job 1 differs\)"):
        cli.submit("fig9", "smoke", other, folder=tmp_path / "used", executor="debug")
    with pytest.raises(ValueError,
                       match=r"already holds a sweep \(sweep.json\) of fig9 at scale 'smoke', not fig9 at 'cpu'"):
        cli.submit("fig9", "cpu", configs, folder=tmp_path / "used", executor="debug")
    with pytest.raises(ValueError, match=r"other configs \(2 jobs; job 1 differs\)"):
        cli.submit("fig9", "smoke", configs[:1], folder=tmp_path / "used", executor="debug")
    (tmp_path / "jobs-only" / "jobs").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"already holds a sweep \(jobs\)"):
        cli.submit("fig9", "smoke", configs, folder=tmp_path / "jobs-only", executor="debug")
    # two sweeps started at once: the other one's sweep.json appears after the check, before the claim
    real = cli._executor

    def racing(kind, folder, options):
        (folder / cli.MANIFEST).write_text("{}")
        return real(kind, folder, options)

    monkeypatch.setattr(cli, "_executor", racing)
    with pytest.raises(ValueError, match="another sweep has just started in it"):
        cli.submit("fig9", "smoke", configs, folder=tmp_path / "race", executor="debug")
    assert (tmp_path / "race" / cli.MANIFEST).read_text() == "{}"  # the other sweep's manifest is untouched


def test_collect_states_of_unfinished_local_jobs_come_from_their_processes(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    configs = cli.grid("fig9", "smoke", ["steps=3,4"])
    _manifest(tmp_path, configs, job_ids=[str(os.getpid()), dead])
    states = [j.state for j in cli.collect(tmp_path)]
    assert states == ["RUNNING", "STOPPED"], states


def test_local_jobs_get_no_time_limit_unless_asked(tmp_path):
    pytest.importorskip("submitit")
    assert cli._executor("local", tmp_path, {}).parameters["timeout_min"] == cli.LOCAL_UNLIMITED_MIN
    assert cli._executor("local", tmp_path, {"time": 7}).parameters["timeout_min"] == 7


@pytest.mark.parametrize("doc, message", [
    ({}, "it has no 'name'"),
    ({"name": "fig9", "scale": "smoke", "configs": 5}, "'configs' must be a list of configs"),
    ({"name": "../../../../tmp/x", "scale": "smoke", "configs": []}, "name='../../../../tmp/x' is not an experiment"),
    ({"name": "fig9", "scale": "smoke", "configs": [{"experiment": "fig3", "scale": "smoke"}]},
     "configs\\[0\\] is not a config of fig9"),
    ([1], "a JSON list, expected an object"),
])
def test_a_malformed_manifest_is_named(tmp_path, capsys, doc, message):
    (tmp_path / cli.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=f"{re.escape(str(tmp_path / cli.MANIFEST))} is not a sweep's manifest: {message}"):
        cli.collect(tmp_path)
    assert cli.main(["collect", str(tmp_path)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_jobs_unreadable_claims_or_forged_results_make_it_invalid(tmp_path):
    import numpy as np

    configs = cli.grid("fig9", "smoke", ["steps=3,4,5"])
    _manifest(tmp_path, configs)
    for i, c in enumerate(configs):
        _fake_job(tmp_path, i, c)
    doc = json.loads((tmp_path / "jobs/0/fig9.json").read_text())
    doc["rows"] = [{"claim": "c", "bogus": 1}]
    (tmp_path / "jobs/0/fig9.json").write_text(json.dumps(doc))
    _forge_huge_npz(tmp_path / "jobs/1/results.npz")
    np.savez(tmp_path / "jobs/2/results.npz", x=np.asarray([{"a": 1}], dtype=object), allow_pickle=True)
    jobs = cli.collect(tmp_path)
    assert [j.state for j in jobs] == ["invalid", "invalid", "invalid"]
    assert "fig9.json is not this job's claims (TypeError" in jobs[0].error
    assert "claims shape" in jobs[1].error
    assert "is an object array" in jobs[2].error


def _forge_huge_npz(path):
    """An .npz whose one member's header claims an 8 TiB float64 array (the data is 8 bytes)."""
    import io
    import zipfile

    import numpy as np

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x.npy", buf.getvalue() + b"\0" * 8)


def test_run_outside_a_checkout_with_xdg_cache_home_a_file_warns_and_runs(tmp_path):
    """Outside a checkout the caches are the user's (``$XDG_CACHE_HOME/iterlin``): a file there makes
    them unusable, which a run says and survives (they are only caches)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ITERLIN_CACHE", "ITERLIN_COMPILATION_CACHE",
                                                                    "JAX_COMPILATION_CACHE"))}
    env["XDG_CACHE_HOME"] = str(a_file)
    code = ("import sys, iterlin.repro.cache as c; c.repo_root = lambda: None; from iterlin.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "run", "fig9", *TINY, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "running without it" in proc.stderr
    assert (tmp_path / "out" / "results.npz").is_file()


def test_rerunning_the_same_sweep_resumes_only_its_unfinished_jobs(tmp_path):
    """The same sweep into its own folder: the jobs without results are submitted again (no
    others); a job still running, or whose files hold other results, is refused."""
    configs = cli.grid("fig9", "smoke", ["steps=3"], seeds=[0, 1, 2])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    _manifest(tmp_path, configs, job_ids=[dead, "2", dead])
    _fake_job(tmp_path, 1, configs[1])
    (job0, job2) = cli.submit("fig9", "smoke", configs, folder=tmp_path, executor="debug")
    assert [job0.result(), job2.result()] == [str(tmp_path / "jobs" / "0"), str(tmp_path / "jobs" / "2")]
    manifest = json.loads((tmp_path / cli.MANIFEST).read_text())
    assert manifest["job_ids"][1] == "2" and manifest["job_ids"][0] != dead and manifest["configs"] == configs
    assert [j.state for j in cli.collect(tmp_path)] == ["done"] * 3
    assert cli.submit("fig9", "smoke", configs, folder=tmp_path, executor="debug") == []  # all done: nothing
    _fake_job(tmp_path, 2, configs[2], stored_config=configs[0])
    with pytest.raises(ValueError, match=r"its job 2 is invalid .*; delete .*jobs/2 to run it again"):
        cli.submit("fig9", "smoke", configs, folder=tmp_path, executor="debug")
    running = tmp_path / "running"
    _manifest(running, configs[:1], job_ids=[str(os.getpid())])  # a local job whose process is alive
    with pytest.raises(ValueError, match="its job 0 is still RUNNING; wait for it, or cancel it"):
        cli.submit("fig9", "smoke", configs[:1], folder=running, executor="local")


#: fig9 with one checkpoint per evaluation point, long enough to be killed after the first one
RESUMABLE = ["-p", "steps=200", "-p", "n_functions=1", "-p", "damping=1", "-p", "n_test=50", "-p", "n_evals=20"]


def _sweep(folder, cwd, **kw):
    argv = [sys.executable, "-m", "iterlin", "sweep", "fig9", "--seeds", "0,1", *RESUMABLE, "--executor", "local",
            "--array-parallelism", "1", "--folder", str(folder)]
    return argv if kw.get("argv_only") else subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs POSIX process groups")
def test_a_sweep_killed_after_its_first_checkpoint_resumes_when_rerun(tmp_path):
    """End to end: the sweep's whole process group SIGKILLed once a training checkpoint exists;
    the same command rerun resumes (no refusal) and every job's results equal an uninterrupted
    sweep's, bit for bit."""
    import signal
    import time

    import jax
    import numpy as np

    from iterlin.experiments import stored

    folder = tmp_path / "killed"
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(_sweep(folder, tmp_path, argv_only=True), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while not list((folder / "cache").glob("**/checkpoints/*/*.npz")):
                assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint within 600 s"
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 60  # the killed processes end (and may stay unreaped) asynchronously
    while (states := [j.state for j in cli.collect(folder)]) != ["STOPPED", "STOPPED"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert states == ["STOPPED", "STOPPED"]  # killed before any job finished
    resumed = _sweep(folder, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    fresh = _sweep(tmp_path / "fresh", tmp_path)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    got, want = cli.collect(folder), cli.collect(tmp_path / "fresh")
    assert [j.state for j in got] == [j.state for j in want] == ["done", "done"]
    for a, b in zip(got, want):
        assert a.config == b.config and a.rows == b.rows
        leaves_a, tree_a = jax.tree.flatten(stored(a.results))
        leaves_b, tree_b = jax.tree.flatten(stored(b.results))
        assert tree_a == tree_b
        for x, y in zip(leaves_a, leaves_b):
            np.testing.assert_array_equal(x, y, strict=True)  # NaN equals NaN; same shape and dtype


def test_a_sweep_in_a_folder_through_a_symlink_and_dotdot_collects_every_result(tmp_path):
    """F = '<base>/a link/../sweep x': the system goes up from the link's target, while
    tempfile.mkstemp (every atomic write's, and the writability probe's) normalised the path
    lexically, to another folder ('<base>/sweep x', here absent): the sweep was refused, or its
    results went elsewhere. Resolved once at the boundary, every job's results are collected."""
    target = tmp_path / "real dir" / "inner"
    target.mkdir(parents=True)
    (tmp_path / "a link").symlink_to(target)
    folder = str(tmp_path / "a link") + "/../sweep x"
    configs = cli.grid("fig9", "smoke", ["steps=3", "n_functions=1", "n_evals=1"], seeds=[0, 1])
    jobs = cli.submit("fig9", "smoke", configs, folder=folder, executor="debug")
    assert [j.result() for j in jobs] == [str(tmp_path / "real dir" / "sweep x" / "jobs" / str(i)) for i in (0, 1)]
    assert not (tmp_path / "sweep x").exists()  # nothing in the lexically normalised folder
    got = cli.collect(folder)
    assert [j.state for j in got] == ["done", "done"] and all(j.results is not None for j in got)
    assert [j.results.config.to_dict() for j in got] == configs
