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
:func:`iterlin.cache.save_results`) and ``<name>.json`` (the claims rows) to ``--out``.

``sweep`` makes one job per point of the grid: the cartesian product of ``--seeds`` (each job one
seed, ``n_seeds = 1``) and every ``-p`` value list (in a sweep ``-p K=1,100,inf`` is three jobs,
each given ``K`` as ``run -p K=…`` would; ``-p K=[1,50,inf]`` is one job with that list). Jobs go
through submitit: ``--executor slurm`` submits a job array, ``local`` runs the same jobs as
processes on this machine, ``debug`` in this process. A preempted or timed-out Slurm job is
requeued (submitit's checkpointing protocol, :meth:`Job.checkpoint`) and resumes from its training
checkpoints, which live in the sweep's folder (``<folder>/cache``: put the folder on a file system
every node sees). Each finished job writes ``<folder>/jobs/<i>/`` like ``run --out``;
``collect`` (or :func:`collect`) reads them back with the jobs' states, at any time.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

from .cache import default_cache_dir, load_results, save_results
from .checkpoint import atomic_write_bytes
from .claims import HOLDS, Claim, ClaimsTable, publish_claims
from .config import SCALE_NAMES

__all__ = ["parse_value", "parse_params", "grid", "Job", "JobResult", "collect", "summary_table", "main"]

#: The executors ``sweep`` can use (submitit's clusters).
EXECUTORS = ("local", "slurm", "debug")

#: The manifest a sweep writes into its folder.
MANIFEST = "sweep.json"


# ------------------------------------------------------------------------------------------------
# Parameters
# ------------------------------------------------------------------------------------------------


def parse_value(text: str) -> Any:
    """A ``-p`` value: a Python literal, ``inf``/``-inf``/``nan``, ``a,b,c`` or ``[a,b,c]`` a list, else
    the string (which the experiment's validation then refuses or takes).

    >>> parse_value("5e6"), parse_value("inf"), parse_value("1,50"), parse_value("[1,inf]"), parse_value("abc")
    (5000000.0, inf, [1, 50], [1, inf], 'abc')
    """
    s = text.strip()
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


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``["K=5e6", "seed=1"]`` → ``{"K": 5000000.0, "seed": 1}`` (a name given twice is an error)."""
    params: dict[str, Any] = {}
    for item in items:
        name, value = _split(item, "-p")
        if name in params:
            raise ValueError(f"-p {name} is given twice ({params[name]!r} and {value!r}): give it once")
        params[name] = parse_value(value)
    return params


def _grid_values(text: str) -> list[Any]:
    """A sweep's ``-p`` value: ``1,100,inf`` → three points; ``[1,50]`` → one point, that list."""
    s = text.strip()
    if s.startswith("["):
        return [parse_value(s)]
    return [parse_value(part) for part in s.split(",")]


def parse_seeds(text: str) -> list[int]:
    """``0,1,2`` or ``0-4`` (inclusive) → a list of seeds; a clear error otherwise."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            seeds += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
        except ValueError:
            raise ValueError(f"--seeds {text!r} is not allowed: seeds are integers >= 0, e.g. 0,1,2 or 0-4") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r} is not allowed: seeds are distinct integers >= 0, e.g. 0,1,2 or 0-4")
    return seeds


def grid(name: str, scale: str, params: Sequence[str] = (), seeds: Sequence[int] | None = None) -> list[dict]:
    """The resolved configs of a sweep: one per point of ``seeds`` × every ``-p`` value list.

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
        axes[key] = _grid_values(value)
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
    configs = []
    for point in itertools.product(*axes.values()):
        configs.append(registry.resolve(name, scale, **dict(zip(axes, point))))
    return configs


# ------------------------------------------------------------------------------------------------
# One run, one job
# ------------------------------------------------------------------------------------------------


def _write_run(out: Path, results: Mapping, rows: Sequence[Claim]) -> None:
    """``out/results.npz`` (with the config) and ``out/<name>.json`` (the claims rows), atomically."""
    config = results["config"]
    name = config["experiment"]
    save_results(out / "results.npz", {k: v for k, v in results.items() if k != "config"},
                 key=f"run:{name}", config=config)
    publish_claims(name, rows, scale=config["scale"], directory=out)


def run_one(config: Mapping, *, out: str | os.PathLike, cache_dir=None, progress: bool | None = None) -> ClaimsTable:
    """Compute ``config`` (through the result cache and its checkpoints), write ``out``, return the claims."""
    from .experiments import registry

    results = registry.run(config, cache_dir=cache_dir, progress=progress)
    rows = registry.get(config["experiment"]).claims(results)
    _write_run(Path(out), results, rows)
    return ClaimsTable(config["experiment"], config["scale"], rows)


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


def _executor(kind: str, folder: Path, options: Mapping[str, Any]):
    import submitit

    try:
        executor = submitit.AutoExecutor(folder=folder / "submitit", cluster=kind)
    except RuntimeError as e:  # e.g. slurm without srun: not a Slurm machine
        raise ValueError(f"--executor {kind} is not allowed on this machine: {e}") from e
    params: dict[str, Any] = {"name": options.get("job_name") or "iterlin"}
    if options.get("time") is not None:
        params["timeout_min"] = options["time"]
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


def submit(name: str, scale: str, configs: Sequence[Mapping], *, folder: str | os.PathLike, executor: str = "local",
           options: Mapping[str, Any] | None = None) -> list:
    """Submit one job per config (a job array on Slurm); write ``<folder>/sweep.json``; return the jobs."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r} is not allowed: one of " + ", ".join(map(repr, EXECUTORS)))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ex = _executor(executor, folder, options or {})
    jobs = ex.map_array(Job(folder), list(range(len(configs))), list(configs))
    manifest = {"name": name, "scale": scale, "executor": executor, "configs": list(configs),
                "job_ids": [str(j.job_id) for j in jobs]}
    text = json.dumps(manifest, indent=1, allow_nan=True).encode()
    atomic_write_bytes(folder / MANIFEST, lambda f: f.write(text))
    return jobs


# ------------------------------------------------------------------------------------------------
# Collecting a sweep
# ------------------------------------------------------------------------------------------------


class JobResult(NamedTuple):
    """One job of a sweep: its ``config``, ``state`` (``"done"``, or submitit's state, or
    ``"unknown"``), its ``results`` and claims ``rows`` (None until done)."""

    index: int
    config: dict
    state: str
    results: dict | None
    rows: list | None


def _state(folder: Path, job_id: str | None) -> str:
    if job_id is None:
        return "unknown"
    try:
        import submitit

        return str(submitit.Job(folder / "submitit", job_id).state)
    except Exception as e:  # noqa: BLE001 - a missing scheduler (sacct) or folder: report, do not fail
        return f"unknown ({type(e).__name__})"


def collect(folder: str | os.PathLike) -> list[JobResult]:
    """Every job of the sweep in ``folder``: finished ones with their results and claims rows."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise ValueError(f"folder={str(folder)!r} is not allowed: it holds no {MANIFEST} (not a sweep's folder)")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    name, ids = manifest["name"], manifest.get("job_ids") or []
    out = []
    for i, config in enumerate(manifest["configs"]):
        job = folder / "jobs" / str(i)
        if (job / "results.npz").is_file() and (job / f"{name}.json").is_file():
            results = load_results(job / "results.npz")
            results["config"] = config
            doc = json.loads((job / f"{name}.json").read_text(encoding="utf-8"))
            rows = [Claim(**r) for r in doc["rows"]]
            out.append(JobResult(i, config, "done", results, rows))
        else:
            out.append(JobResult(i, config, _state(folder, ids[i] if i < len(ids) else None), None, None))
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
    head = ["job", *varying, "state", "claims: " + "/".join(h.split()[0] for h in HOLDS)]
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
        return 0 if all(j.state == "done" for j in jobs) else 1
    from .experiments import registry

    registry.get(args.name)
    if args.command == "run":
        config = registry.resolve(args.name, args.scale, **parse_params(args.params))
        out = Path(args.out) if args.out else Path.cwd() / "iterlin-runs" / f"{args.name}-{args.scale}"
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
