"""Kill/resume: a run SIGKILLed at three points and rerun ends exactly where an uninterrupted run does.

The training runs in a subprocess (``tests/_resume_worker.py``: a small MLP on synthetic data,
Adam, mini-batches over several epochs, K = 3, evaluation and a checkpoint every 4 of 24 steps, a
callback whose values go into the history). The worker pauses on cue (``ITERLIN_TEST_PAUSE``) and
says so with a marker file; the test then sends SIGKILL and reruns the same command. Kill points:

1. after the first checkpoint (inside the callback at step 8: the checkpoint holds step 4);
2. while a checkpoint is being written (inside ``atomic_write_bytes``'s temporary-file phase, half
   the bytes written): the previous checkpoint must be intact and is what the rerun resumes from;
3. after the last-but-one checkpoint (inside the callback at the last step, 24: it holds step 20).

The final parameters and the whole history (metrics, ``n_relin``, callback values, ``diverged``)
must be bitwise equal to an uninterrupted run without a checkpoint (CPU, same seed). The callback
log proves each rerun really resumed (it starts at the killed evaluation point, not at 0).

Temporary files: a write killed mid-way leaves its ``<name>.<random>.tmp`` beside the checkpoint
(nothing can clean up after SIGKILL). That is accepted: the loader only ever opens the checkpoint
path itself, never a temporary file, and the rename is atomic, so the checkpoint is always either
the previous complete one or the new complete one. The test checks that the stray file is truncated
(unloadable), that it is not what the rerun used, and that no temporary file is left by a write
that completed.

The same is then checked for ``train_sweep`` with K = [1, 3, ∞] (one kill).

The subprocesses run on CPU (``JAX_PLATFORMS=cpu``) and share a persistent compilation cache in a
temporary directory, so only the first run of each mode pays for compilation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from iterlin.checkpoint import CheckpointError, load_checkpoint

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_resume_worker.py"
REPO = HERE.parent
TIMEOUT = 300  # seconds per subprocess (generous: CI machines can be heavily loaded)

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")


@pytest.fixture(scope="module")
def worker_env(tmp_path_factory):
    """The environment of every worker: same interpreter, repo on PYTHONPATH, CPU, shared compile cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path_factory.mktemp("jax_cache"))
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
    for var in ("ITERLIN_TEST_PAUSE", "JAX_ENABLE_X64"):
        env.pop(var, None)
    return env


def _cmd(mode, out, ckpt):
    return [sys.executable, str(WORKER), mode, str(out)] + ([str(ckpt)] if ckpt is not None else [])


def run_to_end(mode, out, ckpt, env):
    """Run the worker to completion; return (params leaves, history)."""
    proc = subprocess.run(_cmd(mode, out, ckpt), env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    with np.load(out / "params.npz") as z:
        params = [z[f"leaf_{i}"] for i in range(len(z.files))]
    with np.load(out / "history.npz") as z:
        history = {k: z[k] for k in z.files}
    return params, history


def run_and_kill(mode, out, ckpt, env, pause):
    """Start the worker, wait until it reports the pause point ``pause``, SIGKILL it."""
    out.mkdir(parents=True, exist_ok=True)
    marker = out / "paused"
    with open(out / "stderr.txt", "w") as err:
        proc = subprocess.Popen(_cmd(mode, out, ckpt), env={**env, "ITERLIN_TEST_PAUSE": pause},
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + TIMEOUT
            while not marker.exists():
                if proc.poll() is not None:
                    pytest.fail(f"worker exited (rc {proc.returncode}) before pausing at {pause}:\n"
                                f"{(out / 'stderr.txt').read_text()[-4000:]}")
                if time.monotonic() > deadline:
                    pytest.fail(f"worker did not reach {pause} within {TIMEOUT} s")
                time.sleep(0.02)
            assert marker.read_text() == pause
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    marker.unlink()
    assert not (out / "params.npz").exists(), "a killed run must not have finished"


def checkpoint_steps(ckpt: Path) -> list[int]:
    """Read the checkpoint as a plain npz (every member, so a corrupt file fails) and return its steps."""
    with np.load(ckpt, allow_pickle=False) as z:
        for name in z.files:
            z[name]
        meta = json.loads(str(z["meta"]))
    steps = meta["history"]["step"]
    assert meta["done"] == len(steps)
    return steps


def temp_files(ckpt: Path) -> list[Path]:
    return sorted(ckpt.parent.glob(ckpt.name + ".*.tmp"))


def callback_calls(out: Path) -> list[list[int]]:
    """Evaluation steps at which the callback ran, grouped by process, in order."""
    groups: list[list[int]] = []
    last = None
    for line in (out / "callbacks.log").read_text().splitlines():
        pid, step = line.split()
        if pid != last:
            groups.append([])
            last = pid
        groups[-1].append(int(step))
    return groups


def assert_same_run(got, want):
    params, history = got
    params_ref, history_ref = want
    assert len(params) == len(params_ref)
    for i, (a, b) in enumerate(zip(params, params_ref)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"params leaf {i}"
        assert np.array_equal(a, b), f"params leaf {i} differs: max |Δ| = {np.max(np.abs(a - b))}"
    assert sorted(history) == sorted(history_ref)
    for k in history_ref:
        a, b = history[k], history_ref[k]
        assert a.shape == b.shape and a.dtype == b.dtype, f"history[{k!r}]: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f"history[{k!r}] differs:\n{a}\n{b}"


def test_train_killed_three_times_resumes_to_the_uninterrupted_result(tmp_path, worker_env):
    reference = run_to_end("single", tmp_path / "ref", None, worker_env)
    assert list(reference[1]["step"]) == [0, 4, 8, 12, 16, 20, 24]
    assert not reference[1]["diverged"]

    out, ckpt = tmp_path / "run", tmp_path / "ckpt" / "run.npz"

    # 1. Killed after the first checkpoint (in the callback at step 8).
    run_and_kill("single", out, ckpt, worker_env, "callback:8")
    assert checkpoint_steps(ckpt) == [0, 4]
    assert temp_files(ckpt) == []

    # 2. Killed while writing a checkpoint (this process's 3rd write: the one for step 16).
    run_and_kill("single", out, ckpt, worker_env, "write:3")
    assert checkpoint_steps(ckpt) == [0, 4, 8, 12], "the previous checkpoint must be intact"
    (stray,) = temp_files(ckpt)
    assert 0 < stray.stat().st_size < ckpt.stat().st_size * 3 // 4, "the temp file holds half a checkpoint"
    with pytest.raises(CheckpointError, match="unreadable or truncated"):
        load_checkpoint(stray, ())

    # 3. Killed after the last-but-one checkpoint (in the callback at the last step, 24).
    run_and_kill("single", out, ckpt, worker_env, "callback:24")
    assert checkpoint_steps(ckpt) == [0, 4, 8, 12, 16, 20]

    # Rerun to the end.
    resumed = run_to_end("single", out, ckpt, worker_env)
    assert checkpoint_steps(ckpt) == [0, 4, 8, 12, 16, 20, 24]
    assert callback_calls(out) == [[0, 4, 8], [8, 12, 16], [16, 20, 24], [24]], "each rerun resumes"
    # Only the killed write may have left a temporary file (removing stale ones later is fine too).
    assert set(temp_files(ckpt)) <= {stray}
    assert_same_run(resumed, reference)


def test_train_sweep_killed_resumes_to_the_uninterrupted_result(tmp_path, worker_env):
    reference = run_to_end("sweep", tmp_path / "ref", None, worker_env)
    assert reference[1]["n_relin"].shape == (3, 7)
    assert list(reference[1]["n_relin"][:, -1]) == [24, 8, 0]  # K = 1, 3, ∞

    out, ckpt = tmp_path / "run", tmp_path / "sweep.npz"
    run_and_kill("sweep", out, ckpt, worker_env, "callback:12")
    assert checkpoint_steps(ckpt) == [0, 4, 8]
    resumed = run_to_end("sweep", out, ckpt, worker_env)
    assert callback_calls(out) == [[0, 4, 8, 12], [12, 16, 20, 24]]
    assert temp_files(ckpt) == []
    assert_same_run(resumed, reference)
