"""The command line: ``python -m iterlin`` (or the ``iterlin`` script).

::

    iterlin list                                       # the experiments and their scales
    iterlin run fig3 --scale cpu -p K=5e6 -p seed=1    # one run, as the notebook would make it
    iterlin sweep fig3 --scale paper --seeds 0,1,2 -p K=100,inf --executor slurm \\
        --partition gpu --time 240 --gpus 1 --array-parallelism 16
    iterlin collect sweeps/fig3-paper                  # the table of a sweep's jobs, finished or not

``-p NAME=VALUE`` takes the notebooks' parameters, through the same validation and messages
(:func:`iterlin.experiments.resolve`): ``-p K=abc`` fails naming K and the value before anything
runs. A value is read as a Python literal (``5e6``, ``[1, 50]``, ``None``, ``True``), ``inf`` as
infinity, a comma-separated value as a list (``K=1,50`` is ``[1, 50]``), anything else as a string.

``run`` computes through the result cache and the training checkpoints (an interrupted run resumes
when rerun), prints the claims table and writes ``results.npz`` (the results, config and digest,
:func:`iterlin.repro.cache.save_results`) and ``<name>.json`` (the claims rows) to ``--out``.

``sweep`` makes one job per point of the grid: the cartesian product of ``--seeds`` (each job one
seed, ``n_seeds = 1``) and every ``-p`` value list (in a sweep ``-p K=1,100,inf`` is three jobs,
each given ``K`` as ``run -p K=…`` would; ``-p K=[1,50,inf]`` is one job with that list). Jobs go
through submitit: ``--executor slurm`` submits a job array, ``local`` runs the same jobs as
processes on this machine, ``debug`` in this process. A preempted or timed-out Slurm job is
requeued (submitit's checkpointing protocol, :meth:`Job.checkpoint`) and resumes from its training
checkpoints, which live in the sweep's folder (``<folder>/cache``: put the folder on a file system
every node sees). Each finished job writes ``<folder>/jobs/<i>/`` like ``run --out``;
``collect`` (or :func:`collect`) reads them back with the jobs' states, at any time, each checked
to hold the config ``sweep.json`` gives it.

Bad input exits 2 with a message naming the parameter, the value and what is allowed, before
anything runs: a sweep has at most :data:`MAX_JOBS` jobs; ``--out`` and ``--folder`` must be
writable; a sweep's folder must be new or empty (``sweep.json`` is created exclusively, so two
sweeps started into one folder cannot mix their jobs), or hold the same sweep: the same command,
rerun after an interruption (a killed login node, a cancelled Slurm array), resumes it, running
again only the jobs without results, each from its training checkpoints. On the local executor a
job has no time limit unless ``--time`` is given, and ``--array-parallelism p`` runs the jobs in
``p`` processes.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import itertools
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from .repro.cache import default_cache_dir, load_results, save_results
from .checkpoint import CheckpointError, atomic_write_bytes
from .repro.claims import HOLDS, UNSTABLE, Claim, ClaimsTable, publish_claims
from .repro.config import SCALE_NAMES

__all__ = ["parse_value", "parse_params", "parse_seeds", "grid", "Job", "Batch", "JobResult", "submit", "collect",
           "summary_table", "writable_folder", "main"]

#: The executors ``sweep`` can use (submitit's clusters).
EXECUTORS = ("local", "slurm", "debug")

#: The manifest a sweep writes into its folder.
MANIFEST = "sweep.json"

#: The most jobs one sweep may have (``--seeds`` × every ``-p`` value list).
MAX_JOBS = 10_000

#: The deepest a ``-p`` value's brackets may nest (``[[1]]`` is 2).
MAX_DEPTH = 16


# ------------------------------------------------------------------------------------------------
# Parameters
# ------------------------------------------------------------------------------------------------


def parse_value(text: str) -> Any:
    """A ``-p`` value: a Python literal, ``inf``/``-inf``/``nan``, ``a,b,c`` or ``[a,b,c]`` a list, else
    the string (which the experiment's validation then refuses or takes).

    >>> parse_value("5e6"), parse_value("inf"), parse_value("1,50"), parse_value("[1,inf]"), parse_value("abc")
    (5000000.0, inf, [1, 50], [1, inf], 'abc')

    Brackets nested deeper than :data:`MAX_DEPTH` are refused (ValueError).
    """
    s = text.strip()
    depth = deepest = 0
    for c in s:
        depth += (c in "([{") - (c in ")]}")
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise ValueError(f"a value nested {deepest} brackets deep is not allowed: at most {MAX_DEPTH}")
    if s.lower() in ("inf", "+inf", "infinity", "-inf", "-infinity", "nan"):
        return float(s)
    try:
        value = ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        if s.startswith("[") and s.endswith("]"):
            return [parse_value(part) for part in s[1:-1].split(",") if part.strip()]
        if "," in s:
            return [parse_value(part) for part in s.split(",")]
        return s
    return list(value) if isinstance(value, tuple) else value


def _split(text: str, option: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise ValueError(f"{option} {text!r} is not allowed: write {option} NAME=VALUE, e.g. {option} K=5e6")
    return name, value


def _parsed(name: str, value: str, parse=None) -> Any:
    """``parse(value)`` (default :func:`parse_value`), its error naming ``-p name=value``."""
    try:
        return (parse or parse_value)(value)
    except ValueError as e:
        shown = value if len(value) <= 60 else value[:60] + "..."
        raise ValueError(f"-p {name}={shown}: {e}") from None


def _check_scale(names) -> None:
    if "scale" in names:
        raise ValueError("-p scale is not allowed: give the scale with --scale, one of " + ", ".join(SCALE_NAMES))


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``["K=5e6", "seed=1"]`` → ``{"K": 5000000.0, "seed": 1}`` (a name given twice is an error)."""
    params: dict[str, Any] = {}
    for item in items:
        name, value = _split(item, "-p")
        if name in params:
            raise ValueError(f"-p {name} is given twice ({params[name]!r} and {value!r}): give it once")
        params[name] = _parsed(name, value)
    _check_scale(params)
    return params


def _grid_values(text: str) -> list[Any]:
    """A sweep's ``-p`` value: ``1,100,inf`` → three points; ``[1,50]`` → one point, that list."""
    s = text.strip()
    if s.startswith("["):
        return [parse_value(s)]
    return [parse_value(part) for part in s.split(",")]


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` or ``0-4`` (inclusive) → a list of seeds; a clear error otherwise (also for more
    than :data:`MAX_JOBS` seeds)."""
    ranges: list[range] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            ranges.append(range(int(lo), int(hi) + 1) if dash else range(int(lo), int(lo) + 1))
        except ValueError:
            raise ValueError(f"--seeds {text!r} is not allowed: seeds are integers >= 0, e.g. 0,1,2 or 0-4") from None
    count = sum(len(r) for r in ranges)
    if count > MAX_JOBS:
        raise ValueError(f"--seeds {text!r} is not allowed: {count} seeds, more than a sweep's bound of {MAX_JOBS} jobs")
    seeds = [seed for r in ranges for seed in r]
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r} is not allowed: seeds are distinct integers >= 0, e.g. 0,1,2 or 0-4")
    return seeds


def grid(name: str, scale: str, params: Sequence[str] = (), seeds: Sequence[int] | None = None) -> list[dict]:
    """The resolved configs of a sweep, as the JSON-able dicts the jobs and ``sweep.json`` hold
    (:meth:`iterlin.repro.config.ExperimentConfig.to_dict`): one per point of ``seeds`` × every ``-p``
    value list.

    Every config goes through :func:`iterlin.experiments.resolve`, so a bad value fails here, before
    any job is submitted. ``seeds``: each job runs one seed (``n_seeds = 1`` where the experiment
    has it); None keeps the scale's seeds in every job.
    """
    from .experiments import registry

    axes: dict[str, list[Any]] = {}
    for item in params:
        key, value = _split(item, "-p")
        if key in axes:
            raise ValueError(f"-p {key} is given twice: give one list of values, e.g. -p {key}=1,100,inf")
        axes[key] = _parsed(key, value, _grid_values)
    _check_scale(axes)
    allowed = registry.notebook_parameters(name)
    if seeds is not None:
        if "seed" not in allowed:
            raise ValueError(f"--seeds is not allowed for {name}: it has no seed parameter")
        for key in ("seed", "n_seeds"):
            if key in axes:
                raise ValueError(f"-p {key} is not allowed with --seeds: --seeds gives each job one seed")
        axes["seed"] = list(seeds)
        if "n_seeds" in allowed:
            axes["n_seeds"] = [1]
    count = math.prod(len(v) for v in axes.values())
    if count > MAX_JOBS:
        raise ValueError(f"a sweep of {count} jobs (" + " × ".join(f"{len(v)} {k}" for k, v in axes.items())
                         + f") is not allowed: at most {MAX_JOBS} jobs")
    configs = []
    for point in itertools.product(*axes.values()):
        configs.append(registry.resolve(name, scale, **dict(zip(axes, point))).to_dict())
    return configs


# ------------------------------------------------------------------------------------------------
# One run, one job
# ------------------------------------------------------------------------------------------------


def _write_run(out: Path, results: Any, rows: Sequence[Claim]) -> None:
    """``out/results.npz`` (with the config) and ``out/<name>.json`` (the claims rows), atomically."""
    from .experiments import stored

    config = results.config
    save_results(out / "results.npz", stored(results), key=f"run:{config.experiment}", config=config.to_dict())
    publish_claims(config.experiment, rows, scale=config.scale, directory=out)


def run_one(config: Mapping, *, out: str | os.PathLike, cache_dir=None, progress: bool | None = None) -> ClaimsTable:
    """Compute ``config`` (a typed config, or its dict; through the result cache and its
    checkpoints), write ``out``, return the claims."""
    from .experiments import registry

    results = registry.run(config, cache_dir=cache_dir, progress=progress)
    config = results.config
    rows = registry.get(config.experiment).claims(results)
    _write_run(Path(out), results, rows)
    return ClaimsTable(config.experiment, config.scale, rows)


class Job:
    """A sweep's job, as submitit pickles it: ``Job(folder)(index, config)`` runs one config.

    Submitit calls :meth:`checkpoint` when a Slurm job is preempted or reaches its time limit; it
    returns the same call, which submitit requeues. The rerun finds the training checkpoints in
    ``<folder>/cache`` (the result cache keys them by config) and resumes where the job stopped.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = str(folder)

    def __call__(self, index: int, config: Mapping) -> str:
        out = Path(self.folder) / "jobs" / str(index)
        run_one(config, out=out, cache_dir=Path(self.folder) / "cache", progress=False)
        return str(out)

    def checkpoint(self, index: int, config: Mapping):
        import submitit

        return submitit.helpers.DelayedSubmission(Job(self.folder), index, config)


class Batch:
    """Several jobs of a local sweep run one after another in one process: ``--array-parallelism p``
    on the local executor makes ``p`` batches (submitit's local executor has no array limit)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = str(folder)

    def __call__(self, indices: Sequence[int], configs: Sequence[Mapping]) -> list[str]:
        return [Job(self.folder)(i, c) for i, c in zip(indices, configs)]

    def checkpoint(self, indices: Sequence[int], configs: Sequence[Mapping]):
        import submitit

        return submitit.helpers.DelayedSubmission(Batch(self.folder), indices, configs)


#: A local job's time limit when ``--time`` is not given: none, in effect (submitit's local default is 2 min).
LOCAL_UNLIMITED_MIN = 60 * 24 * 365


def writable_folder(path: str | os.PathLike, option: str) -> Path:
    """``path`` created if needed and checked writable (a probe file), before anything is computed;
    returned resolved (absolute, without symlinks or ``..``: what the system means by it, so that
    every process and library that later reads or writes it, normalising or not, finds the same folder)."""
    path = Path(os.path.realpath(path))
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{option} {str(path)!r} is not allowed: it cannot be written ({type(e).__name__}: "
                         f"{e.strerror or e}); give a writable folder") from None
    return path


def _executor(kind: str, folder: Path, options: Mapping[str, Any]):
    import submitit

    try:
        executor = submitit.AutoExecutor(folder=folder / "submitit", cluster=kind)
    except RuntimeError as e:  # e.g. slurm without srun: not a Slurm machine
        raise ValueError(f"--executor {kind} is not allowed on this machine: {e}") from e
    params: dict[str, Any] = {"name": options.get("job_name") or "iterlin"}
    if options.get("time") is not None:
        params["timeout_min"] = options["time"]
    elif kind == "local":
        params["timeout_min"] = LOCAL_UNLIMITED_MIN
    if options.get("gpus") is not None:
        params["gpus_per_node"] = options["gpus"]
    if options.get("cpus") is not None:
        params["cpus_per_task"] = options["cpus"]
    if options.get("mem_gb") is not None:
        params["mem_gb"] = options["mem_gb"]
    if kind == "slurm":
        if options.get("partition"):
            params["slurm_partition"] = options["partition"]
        if options.get("array_parallelism") is not None:
            params["slurm_array_parallelism"] = options["array_parallelism"]
    executor.update_parameters(**params)
    return executor


def _write_manifest(path: Path, manifest: Mapping, *, new: bool = False) -> None:
    text = json.dumps(manifest, indent=1, allow_nan=True).encode()
    if not new:
        atomic_write_bytes(path, lambda f: f.write(text))
        return
    with open(path, "xb") as f:  # exclusive: of two sweeps started into one folder, one gets it
        f.write(text)


#: Scheduler states of a job that may still run (a resume must not start it a second time).
ACTIVE_STATES = ("RUNNING", "PENDING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING",
                 "REQUEUE_HOLD", "REQUEUE_FED")

#: The lock a submission holds on its folder (``flock``: released when the process ends, even killed).
LOCK = ".sweep.lock"


@contextlib.contextmanager
def _locked(folder: Path):
    """Hold ``<folder>/.sweep.lock`` exclusively (``fcntl.flock``; a no-op where it does not exist):
    two submissions into one folder check and write its manifest one after the other."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(folder / LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (how ``sweep.json`` stores them; NaN equals NaN)."""
    return json.dumps(a, sort_keys=True, allow_nan=True) == json.dumps(b, sort_keys=True, allow_nan=True)


def _unfinished(folder: Path, name: str, scale: str, configs: Sequence[Mapping]) -> tuple[dict, list[int]] | None:
    """None for a new or empty folder; for a folder holding this very sweep (same experiment, scale
    and configs, in order), its manifest and the indices of the jobs to run again (those without
    results, none of them still running). Anything else is refused (ValueError)."""
    used = [p.name for p in (folder / MANIFEST, folder / "jobs") if p.exists()]
    if not used:
        return None

    def refuse(why: str) -> ValueError:
        return ValueError(f"--folder {str(folder)!r} is not allowed: it already holds a sweep ({', '.join(used)})"
                          f"{why}; give a new or empty folder, or rerun the same sweep command to resume it")

    if MANIFEST not in used:
        raise refuse("")
    try:
        manifest = _manifest(folder)
    except ValueError as e:
        raise refuse(f" that cannot be read ({e})") from None
    if manifest["name"] != name or manifest["scale"] != scale:
        raise refuse(f" of {manifest['name']} at scale {manifest['scale']!r}, not {name} at {scale!r}")
    if len(manifest["configs"]) != len(configs) or not all(map(_same, manifest["configs"], configs)):
        differ = next((i for i, (a, b) in enumerate(zip(manifest["configs"], configs)) if not _same(a, b)),
                      min(len(configs), len(manifest["configs"])))
        raise refuse(f" of other configs ({len(manifest['configs'])} jobs; job {differ} differs)")
    pending = []
    for job in collect(folder):
        if job.state == "invalid":
            raise refuse(f": its job {job.index} is invalid ({job.error}); delete {folder / 'jobs' / str(job.index)} "
                         "to run it again")
        if job.state in ACTIVE_STATES:
            raise refuse(f": its job {job.index} is still {job.state}; wait for it, or cancel it, then rerun")
        if job.state != "done":
            pending.append(job.index)
    return manifest, pending


def submit(name: str, scale: str, configs: Sequence[Mapping], *, folder: str | os.PathLike, executor: str = "local",
           options: Mapping[str, Any] | None = None) -> list:
    """Submit one job per config (a job array on Slurm); write ``<folder>/sweep.json``; return the jobs.

    A new or empty folder starts the sweep: ``sweep.json`` is created exclusively before anything is
    submitted, so two sweeps started into one folder at once cannot mix their jobs (the second is
    refused). A folder that holds *this* sweep (the same experiment, scale and configs: the same
    command rerun) resumes it: the jobs without results are submitted again, and each resumes from
    its training checkpoints in ``<folder>/cache``; the finished ones are kept (none resubmitted
    when every job is done: the list returned is empty). A folder holding another sweep, a job
    whose files hold other results (``"invalid"``, :func:`collect`), or a job still running or
    queued, is refused. The check and the manifest's update hold a lock on the folder.
    On the local executor, ``array_parallelism`` ``p`` runs the jobs in ``p`` processes (:class:`Batch`),
    and a job has no time limit unless ``time`` is given.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r} is not allowed: one of " + ", ".join(map(repr, EXECUTORS)))
    if len(configs) > MAX_JOBS:
        raise ValueError(f"a sweep of {len(configs)} jobs is not allowed: at most {MAX_JOBS} jobs")
    options = options or {}
    folder = writable_folder(folder, "--folder")
    path = folder / MANIFEST
    with _locked(folder):
        resumed = _unfinished(folder, name, scale, configs)
        if resumed is not None and not resumed[1]:
            return []
        ex = _executor(executor, folder, options)
        if resumed is None:
            manifest = {"name": name, "scale": scale, "executor": executor, "configs": list(configs), "job_ids": []}
            indices = list(range(len(configs)))
            try:
                _write_manifest(path, manifest, new=True)
            except FileExistsError:
                raise ValueError(f"--folder {str(folder)!r} is not allowed: another sweep has just started in it "
                                 f"({MANIFEST}); give a new or empty folder") from None
        else:
            manifest, indices = resumed
        try:
            jobs, ids = _submit_jobs(ex, executor, folder, indices, [manifest["configs"][i] for i in indices],
                                     options.get("array_parallelism"))
        except BaseException:
            if resumed is None:
                path.unlink(missing_ok=True)
            raise
        job_ids = list(manifest.get("job_ids") or []) + [None] * len(configs)
        for i, job_id in zip(indices, ids):
            job_ids[i] = job_id
        _write_manifest(path, {**manifest, "executor": executor,
                               "job_ids": [j or "" for j in job_ids[:len(configs)]]})
    return jobs


def _submit_jobs(ex, executor: str, folder: Path, indices: list[int], configs: list, parallel: int | None):
    """Submit the jobs ``indices`` (their ``configs``); return the jobs and each index's job id."""
    if executor == "local" and parallel is not None and parallel < len(indices):
        chunks = [indices[k::parallel] for k in range(parallel)]
        by_index = dict(zip(indices, configs))
        batches = ex.map_array(Batch(folder), chunks, [[by_index[i] for i in c] for c in chunks])
        ids = {i: str(b.job_id) for b, c in zip(batches, chunks) for i in c}
        return batches, [ids[i] for i in indices]
    jobs = ex.map_array(Job(folder), indices, configs)
    return jobs, [str(j.job_id) for j in jobs]


# ------------------------------------------------------------------------------------------------
# Collecting a sweep
# ------------------------------------------------------------------------------------------------


class JobResult(NamedTuple):
    """One job of a sweep: its ``config``, ``state`` (``"done"``, ``"invalid"`` when its files do not
    hold this job's results, or the scheduler's state, or ``"unknown"``), its ``results`` and claims
    ``rows`` (None until done) and, when invalid, the ``error``."""

    index: int
    config: dict
    state: str
    results: Any  #: the experiment's typed results (with ``config``), or None
    rows: list | None
    error: str | None = None


def _state(folder: Path, executor: str, job_id: str | None) -> str:
    """A job's state without its submitit handle: Slurm asks ``sacct``; a local job is its process."""
    if job_id is None or executor == "debug":
        return "unknown"
    try:
        import submitit
        from submitit.core.utils import JobPaths

        if executor == "slurm":
            return str(submitit.SlurmJob(folder / "submitit", job_id).state)
        if JobPaths(folder / "submitit", job_id).result_pickle.exists():
            return "FAILED"  # submitit stored its outcome, but no results: it raised
        try:
            os.kill(int(job_id), 0)
        except ProcessLookupError:
            return "STOPPED"
        except PermissionError:
            pass
        return "STOPPED" if _zombie(int(job_id)) else "RUNNING"
    except Exception as e:  # noqa: BLE001 - a missing scheduler (sacct) or folder: report, do not fail
        return f"unknown ({type(e).__name__})"


def _zombie(pid: int) -> bool:
    """Whether process ``pid`` has ended but not been reaped (Linux's ``/proc``; False elsewhere): a
    killed job whose parent died too stays so where nothing reaps orphans (e.g. a container)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 1:].split()[:1] == ["Z"]


def _manifest(folder: Path) -> dict:
    """``<folder>/sweep.json``, every field checked (a ValueError naming the file and the field)."""
    from .experiments import registry

    path = folder / MANIFEST
    if not path.is_file():
        raise ValueError(f"folder={str(folder)!r} is not allowed: it holds no {MANIFEST} (not a sweep's folder)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path} is not a sweep's manifest: unreadable ({type(e).__name__}: {e})") from None

    def bad(what: str) -> ValueError:
        return ValueError(f"{path} is not a sweep's manifest: {what}")

    if not isinstance(manifest, dict):
        raise bad(f"a JSON {type(manifest).__name__}, expected an object")
    for key in ("name", "scale", "configs"):
        if key not in manifest:
            raise bad(f"it has no {key!r}")
    name, configs, ids = manifest["name"], manifest["configs"], manifest.get("job_ids") or []
    if name not in registry.names():
        raise bad(f"name={name!r} is not an experiment (one of {', '.join(registry.names())})")
    if manifest["scale"] not in SCALE_NAMES:
        raise bad(f"scale={manifest['scale']!r} is not one of {', '.join(SCALE_NAMES)}")
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise bad("'configs' must be a list of configs (objects)")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise bad("'job_ids' must be a list of strings")
    for i, c in enumerate(configs):
        if c.get("experiment") != name or c.get("scale") != manifest["scale"]:
            raise bad(f"configs[{i}] is not a config of {name} at scale {manifest['scale']!r}")
    return manifest


def _finished(job: Path, name: str, config: Mapping) -> tuple[Any, list]:
    """A finished job's results and claims rows, checked to be this config's (else ValueError)."""
    try:
        results = load_results(job / "results.npz", key=f"run:{name}", config=config)
    except CheckpointError as e:
        raise ValueError(str(e)) from None
    from .experiments import registry

    config = registry.revalidate(config)
    try:
        results = registry.get(name).typed(results, config)
    except ValueError as e:
        raise ValueError(f"{job / 'results.npz'}: {e}") from None
    path = job / f"{name}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        rows = [Claim(**r) for r in doc["rows"]]
        if doc.get("name") != name:
            raise ValueError(f"it holds the claims of {doc.get('name')!r}, expected {name!r}")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not this job's claims ({type(e).__name__}: {e})") from None
    return results, rows


def collect(folder: str | os.PathLike) -> list[JobResult]:
    """Every job of the sweep in ``folder``: finished ones with their results and claims rows.

    A finished job's ``results.npz`` must hold the config the manifest gives it (the stored config
    is compared); one that does not, or that cannot be read, is ``"invalid"`` with its ``error``.
    """
    folder = Path(os.path.realpath(folder))  # as submit wrote it (writable_folder)
    manifest = _manifest(folder)
    name, ids, executor = manifest["name"], manifest.get("job_ids") or [], manifest.get("executor", "local")
    out = []
    for i, config in enumerate(manifest["configs"]):
        job = folder / "jobs" / str(i)
        if (job / "results.npz").is_file() and (job / f"{name}.json").is_file():
            try:
                results, rows = _finished(job, name, config)
            except ValueError as e:
                out.append(JobResult(i, config, "invalid", None, None, str(e)))
                continue
            out.append(JobResult(i, config, "done", results, rows))
        else:
            state = _state(folder, executor, ids[i] if i < len(ids) and ids[i] else None)
            out.append(JobResult(i, config, state, None, None))
    return out


def _varying(configs: Sequence[Mapping]) -> list[str]:
    keys = [k for k in configs[0] if k not in ("experiment", "scale")]
    return [k for k in keys if len({json.dumps(c.get(k), allow_nan=True) for c in configs}) > 1] if len(configs) > 1 \
        else []


def summary_table(jobs: Sequence[JobResult]) -> str:
    """Fixed-width text: a row per job, the parameters that vary, its state and its claims' verdicts."""
    if not jobs:
        return "(no jobs)"
    varying = _varying([j.config for j in jobs])
    head = ["job", *varying, "state", "claims: " + "/".join("unstable" if h == UNSTABLE else h.split()[0] for h in HOLDS)]
    rows = []
    for j in jobs:
        if j.rows is None:
            verdicts = "-"
        else:
            claims = [r for r in j.rows if getattr(r, "kind", "claim") == "claim"]
            verdicts = "/".join(str(sum(r.holds == h for r in claims)) for h in HOLDS)
        rows.append([str(j.index), *(json.dumps(j.config[k], allow_nan=True) for k in varying), j.state, verdicts])
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [head, *rows])


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------


def _list() -> str:
    from .experiments import registry

    lines = []
    for name in registry.names():
        exp = registry.get(name)
        doc = (sys.modules[exp.module].__doc__ or "").strip().splitlines()
        lines.append(f"{name:5s}  scales: {', '.join(exp.scales)}  {doc[0] if doc else ''}".rstrip())
    return "\n".join(lines)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed: an integer >= 1")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="iterlin", description="Iterative linearisation: the paper's experiments.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the experiments and their scales")

    def common(q):
        q.add_argument("name", help="the experiment (iterlin list)")
        q.add_argument("--scale", default="smoke", help="one of " + ", ".join(SCALE_NAMES) + " (default: smoke)")
        q.add_argument("-p", dest="params", action="append", default=[], metavar="NAME=VALUE",
                       help="a parameter of the experiment, as papermill's -p NAME VALUE")

    r = sub.add_parser("run", help="one run: prints its claims, writes its results")
    common(r)
    r.add_argument("--out", default=None, help="where to write results.npz and the claims (default: "
                   "./iterlin-runs/<name>-<scale>)")
    r.add_argument("--cache", default=None, help="result cache and checkpoints (default: $ITERLIN_CACHE, "
                   "<checkout>/.cache/results, or the user cache folder)")

    s = sub.add_parser("sweep", help="one job per configuration, through submitit (local processes or Slurm)")
    common(s)
    s.add_argument("--seeds", default=None, help="one job per seed: 0,1,2 or 0-4")
    s.add_argument("--executor", default="local", choices=EXECUTORS)
    s.add_argument("--folder", default=None, help="the sweep's folder (default: ./iterlin-sweeps/<name>-<scale>)")
    s.add_argument("--partition", default=None, help="Slurm partition")
    s.add_argument("--time", type=_positive, default=None, help="time limit per job, minutes")
    s.add_argument("--gpus", type=int, default=None, help="GPUs per job")
    s.add_argument("--cpus", type=_positive, default=None, help="CPUs per job")
    s.add_argument("--mem-gb", dest="mem_gb", type=_positive, default=None, help="memory per job, GiB")
    s.add_argument("--array-parallelism", dest="array_parallelism", type=_positive, default=None,
                   help="Slurm: at most this many jobs of the array at once")
    s.add_argument("--job-name", dest="job_name", default=None)
    s.add_argument("--dry-run", action="store_true", help="print the configs, submit nothing")
    s.add_argument("--no-wait", dest="wait", action="store_false", help="submit and return (then: iterlin collect)")

    c = sub.add_parser("collect", help="a sweep's jobs: state and claims")
    c.add_argument("folder")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The ``iterlin`` command. Returns the exit status: 0, 1 when a job failed, 2 for bad input."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except ValueError as e:
        print(f"iterlin {args.command}: error: {e}", file=sys.stderr)
        return 2


def _main(args) -> int:
    if args.command == "list":
        print(_list())
        return 0
    if args.command == "collect":
        jobs = collect(args.folder)
        print(summary_table(jobs))
        for j in jobs:
            if j.error:
                print(f"job {j.index} is invalid: {j.error}", file=sys.stderr)
        return 0 if all(j.state == "done" for j in jobs) else 1
    from .experiments import registry

    registry.get(args.name)
    if args.command == "run":
        config = registry.resolve(args.name, args.scale, **parse_params(args.params))
        out = writable_folder(Path(args.out) if args.out else Path.cwd() / "iterlin-runs" / f"{args.name}-{args.scale}",
                              "--out")
        cache = args.cache if args.cache is not None else default_cache_dir()
        table = run_one(config, out=out, cache_dir=cache)
        print(table)
        print(f"results: {out / 'results.npz'}\nclaims: {out / (args.name + '.json')}\ncache: {cache}")
        return 0
    seeds = parse_seeds(args.seeds) if args.seeds is not None else None
    configs = grid(args.name, args.scale, args.params, seeds)
    folder = Path(args.folder) if args.folder else Path.cwd() / "iterlin-sweeps" / f"{args.name}-{args.scale}"
    print(f"{args.name} ({args.scale}): {len(configs)} job{'s' * (len(configs) != 1)} in {folder}")
    if args.dry_run:
        for i, config in enumerate(configs):
            print(i, json.dumps({k: v for k, v in config.items() if k not in ("experiment", "scale")}, allow_nan=True))
        return 0
    options = {k: getattr(args, k) for k in ("partition", "time", "gpus", "cpus", "mem_gb", "array_parallelism",
                                              "job_name")}
    jobs = submit(args.name, args.scale, configs, folder=folder, executor=args.executor, options=options)
    if not jobs:
        print(f"every job of this sweep is done already\n{summary_table(collect(folder))}")
        return 0
    print("submitted: " + ", ".join(str(j.job_id) for j in jobs))
    if not args.wait:
        print(f"then: python -m iterlin collect {folder}")
        return 0
    failed = 0
    for job in jobs:
        try:
            job.result()
        except Exception as e:  # noqa: BLE001 - report every job, then fail
            failed += 1
            print(f"job {job.job_id} failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e!r}",
                  file=sys.stderr)
    print(summary_table(collect(folder)))
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
