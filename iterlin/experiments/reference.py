"""Reference runs: an experiment's results at a large scale, committed with their provenance.

``results/<name>/`` (beside the package in a checkout; ``$ITERLIN_RESULTS`` overrides) holds, for
each notebook, the run the book shows above this build's own (smoke) run:

* ``results.npz``: the results the notebook plots from (histories, filters, summaries: never
  parameters or checkpoints), in the result cache's format (:func:`iterlin.cache.save_results`:
  flattened keys, the config and a digest that detects a changed file);
* ``claims.json``: that run's claims rows, ``{"name", "scale", "rows": [...]}`` as
  :func:`iterlin.claims.publish_claims` writes them (the book's claims page reads them);
* ``provenance.json``: ``scale``, ``device`` (``"cpu: 2 cores"``, ``"NVIDIA H100 80GB HBM3"``),
  ``seeds``, ``iterlin_commit`` (``+dirty`` when the checkout had uncommitted changes),
  ``jax_version``, ``date`` (UTC), ``wall_seconds`` (of the computation, this invocation),
  ``resumed`` (whether it resumed from checkpoints), ``config``, ``data_fingerprint`` and
  ``code_fingerprint`` (of the code that computes the figure,
  :func:`iterlin.fingerprint.code_fingerprint`), from which a page says "the library has changed
  since" when today's code differs.

One command regenerates them (``make results SCALE=cpu``)::

    python -m iterlin.experiments.reference --scale cpu            # every notebook
    python -m iterlin.experiments.reference --scale cpu fig3 fig2  # some
    python -m iterlin.experiments.reference --claims-only          # re-derive claims.json

A reference run always computes (it never reads the result cache, so that its wall time is its
own); an interrupted one resumes from its training checkpoints (``.cache/reference/``) when rerun
with the same config. ``--claims-only`` re-derives every ``claims.json`` from the stored results
with today's claims code (a changed rule needs no new run). Files are written atomically.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from ..cache import ResultsMismatch, load_results, repo_root, save_results
from ..checkpoint import atomic_write_bytes
from ..claims import Claim, ClaimsTable
from ..fingerprint import code_fingerprint
from . import registry

__all__ = ["Reference", "ReferenceMismatch", "results_dir", "write", "load", "show", "rewrite_claims", "provenance_line", "device_name", "main"]


class Reference(NamedTuple):
    """A committed reference run: ``results`` (with ``"config"``), its claims ``rows`` and ``provenance``."""

    name: str
    results: dict
    rows: list
    provenance: dict

    @property
    def changed_since(self) -> bool:
        """Whether the code that computes this figure differs from the code that ran it."""
        exp = registry.get(self.name)
        return self.provenance.get("code_fingerprint") != code_fingerprint(exp.module, ("load", "compute"))

    def claims(self) -> ClaimsTable:
        """The run's claims table (HTML in a notebook, fixed-width text elsewhere)."""
        return ClaimsTable(self.name, self.provenance["scale"], self.rows, reference=True)

    def caption(self) -> str:
        """:func:`provenance_line` of this run."""
        return provenance_line(self.provenance, changed=self.changed_since)


def results_dir(base: str | os.PathLike | None = None) -> Path:
    """``base``, else ``$ITERLIN_RESULTS``, else ``<repo>/results``, else ``./results``."""
    if base is not None:
        return Path(base).expanduser()
    env = os.environ.get("ITERLIN_RESULTS")
    if env:
        return Path(env).expanduser()
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "results"


def device_name() -> str:
    """The device the computation ran on: ``"cpu: 2 cores (x86_64)"`` or the accelerator's kind."""
    import jax

    dev = jax.devices()[0]
    if dev.platform == "cpu":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return f"cpu: {cores} cores ({platform.machine()})"
    count = jax.device_count()
    return f"{dev.device_kind}" + (f" x{count}" if count > 1 else "")


def _commit() -> str:
    root = repo_root()
    if root is None:
        return "unknown (not a checkout)"
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "iterlin"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (git unavailable)"
    return sha + ("+dirty" if dirty else "")


def _write_json(path: Path, doc: Mapping) -> None:
    data = json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=True).encode()
    atomic_write_bytes(path, lambda f: f.write(data))


def _claims_doc(name: str, scale: str, rows: Sequence[Claim]) -> dict:
    return {"name": name, "scale": scale, "rows": [Claim(*r).check()._asdict() for r in rows]}


def write(name: str, scale: str = "cpu", *, base=None, checkpoint_root=None, progress: bool = True,
          **overrides: Any) -> Path:
    """Compute experiment ``name`` at ``scale`` (``overrides`` as :func:`registry.resolve`) and
    write ``results/<name>/`` (module docstring); return that folder."""
    config = registry.resolve(name, scale, **overrides)
    exp = registry.get(name)
    data = exp.load(config)
    root = repo_root() or Path.cwd()
    ckpt_root = Path(checkpoint_root) if checkpoint_root is not None else root / ".cache" / "reference"
    ckpt = ckpt_root / f"{name}-{scale}"
    resumed = ckpt.is_dir() and any(ckpt.iterdir())
    ckpt.mkdir(parents=True, exist_ok=True)
    code = code_fingerprint(exp.module, ("load", "compute"))
    commit = _commit()  # the code that runs, not whatever is checked out when it ends
    started = time.perf_counter()
    results = exp.compute(config, data, checkpoint_dir=ckpt, progress=progress)
    wall = time.perf_counter() - started
    import jax

    out = results_dir(base) / name
    key = f"reference:{name}:{scale}:{code}"
    save_results(out / "results.npz", results, key=key, config=config)
    rows = exp.claims({**results, "config": config})
    _write_json(out / "claims.json", _claims_doc(name, scale, rows))
    seeds = _seeds(config)
    _write_json(out / "provenance.json", {
        "name": name, "scale": scale, "device": device_name(), "seeds": seeds,
        "iterlin_commit": commit, "jax_version": jax.__version__, "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_seconds": round(wall, 1), "resumed": resumed, "config": config,
        "data_fingerprint": registry.data_fingerprint(data), "code_fingerprint": code,
    })
    shutil.rmtree(ckpt, ignore_errors=True)
    return out


class ReferenceMismatch(ValueError):
    """A reference run's files disagree with each other: what a page would print is not what was computed."""


def _seeds(config: Mapping) -> list[int]:
    """The seeds a config runs: ``seed``, ``seed + 1``, ... (``n_seeds`` of them)."""
    return [config["seed"] + i for i in range(config.get("n_seeds", 1))] if "seed" in config else []


def _check_commit(commit: Any, where: Path) -> None:
    """``iterlin_commit`` is a commit's sha (``+dirty`` allowed), one this checkout has when it can tell."""
    text = str(commit)
    sha = text[:-len("+dirty")] if text.endswith("+dirty") else text
    if text.startswith("unknown"):
        return
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise ReferenceMismatch(f"{where}: iterlin_commit={text!r} is not a commit's sha")
    root = repo_root()
    if root is None or not (root / ".git").exists():
        return
    try:
        shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=root, capture_output=True,
                                 text=True, check=True).stdout.strip() == "true"
        found = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=root, capture_output=True).returncode == 0
    except (OSError, subprocess.CalledProcessError):
        return  # no git here: nothing to compare with
    if not found and not shallow:
        raise ReferenceMismatch(f"{where}: iterlin_commit={text!r} is not a commit of this checkout")


def load(name: str, *, base=None, check_claims: bool = True) -> Reference | None:
    """The committed reference run of ``name``, or None when ``results/<name>/`` has none.

    What a page prints is checked against what ``results.npz`` stores (a :class:`ReferenceMismatch`
    naming the file otherwise): its stored key names this experiment, the provenance's scale and
    code fingerprint; its stored config is the provenance's ``config`` (of this experiment at that
    scale); the provenance's ``seeds`` are the config's; ``iterlin_commit`` is a commit of this
    checkout (where git can tell); and, with ``check_claims``, ``claims.json`` holds the rows
    today's claims code derives from the results (``--claims-only`` rewrites it after a change).
    """
    exp = registry.get(name)
    d = results_dir(base) / name
    if not (d / "provenance.json").is_file():
        return None
    where = d / "provenance.json"
    provenance = json.loads(where.read_text(encoding="utf-8"))
    if not isinstance(provenance, dict):
        raise ReferenceMismatch(f"{where}: not a provenance (a JSON object)")
    for key in ("scale", "config", "code_fingerprint", "seeds", "device", "date", "jax_version", "wall_seconds"):
        if key not in provenance:
            raise ReferenceMismatch(f"{where}: has no {key!r}")
    config, scale = provenance["config"], provenance["scale"]
    if provenance.get("name", name) != name or not isinstance(config, dict) or config.get("experiment") != name \
            or config.get("scale") != scale:
        raise ReferenceMismatch(f"{where}: is not a provenance of {name} at scale {scale!r} (name "
                             f"{provenance.get('name')!r}, config of {config.get('experiment') if isinstance(config, dict) else config!r})")
    key = f"reference:{name}:{scale}:{provenance['code_fingerprint']}"
    try:
        results = load_results(d / "results.npz", key=key, config=config)
    except ResultsMismatch as e:
        raise ReferenceMismatch(f"{d / 'results.npz'} is not the run {where} describes: {e}") from None
    if list(provenance["seeds"]) != _seeds(config):
        raise ReferenceMismatch(f"{where}: seeds {provenance['seeds']!r} are not the stored config's {_seeds(config)!r}")
    _check_commit(provenance.get("iterlin_commit", "unknown"), where)
    results["config"] = config
    doc = json.loads((d / "claims.json").read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("name", name) != name or doc.get("scale") != scale:
        raise ReferenceMismatch(f"{d / 'claims.json'}: is not the claims of {name} at scale {scale!r}")
    rows = [Claim(**r).check() for r in doc["rows"]]
    if check_claims:
        derived = [Claim(*r).check() for r in exp.claims(results)]
        if rows != derived:
            diff = next((i for i, (a, b) in enumerate(zip(rows, derived)) if a != b), min(len(rows), len(derived)))
            shown = rows[diff] if diff < len(rows) else None
            want = derived[diff] if diff < len(derived) else None
            raise ReferenceMismatch(f"{d / 'claims.json'}: row {diff} is {shown!r}, but the stored results give {want!r}; "
                                 f"re-derive it: python -m iterlin.experiments.reference --claims-only {name}")
    return Reference(name, results, rows, provenance)


def _display(obj) -> None:
    try:
        from IPython.display import display
    except ImportError:  # outside IPython: as text
        display = print
    display(obj)


def show(name: str, plot: Callable[[Mapping], Any], *, base=None, table: bool = True) -> Reference | None:
    """A notebook's reference-run cell, the first thing its page shows: ``plot(results)`` of the
    committed run, the one-line verdict of its claims (:meth:`~iterlin.claims.ClaimsTable.verdict`),
    its provenance line (:meth:`Reference.caption`) and, unless ``table=False`` (then
    :func:`show_claims` shows it further down), its claims table (HTML in a notebook); or one line
    saying that none is committed. Returns the :class:`Reference` (None without one)."""
    ref = load(name, base=base)
    if ref is None:
        print("No reference run is committed yet: make results SCALE=cpu")
        return None
    plot(ref.results)
    _display(ref.claims().verdict())
    print(ref.caption())
    if table:
        _display(ref.claims())
    return ref


def show_claims(ref: Reference | None) -> None:
    """The claims table of the reference run ``ref`` that :func:`show` returned (nothing without one)."""
    if ref is not None:
        _display(ref.claims())


def rewrite_claims(name: str, *, base=None) -> bool:
    """Re-derive ``results/<name>/claims.json`` from the stored results with today's claims code
    (False when there is no reference run)."""
    ref = load(name, base=base, check_claims=False)
    if ref is None:
        return False
    rows = registry.get(name).claims(ref.results)
    _write_json(results_dir(base) / name / "claims.json", _claims_doc(name, ref.provenance["scale"], rows))
    return True


def provenance_line(prov: Mapping, *, changed: bool = False) -> str:
    """One line under a reference plot: scale, device, seeds, date, commit, wall time."""
    seeds = prov.get("seeds") or []
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        seed_text = f"seeds {seeds[0]}–{seeds[-1]} ({len(seeds)})"
    else:
        seed_text = "seed " + ", ".join(map(str, seeds)) if seeds else "no seed"
    commit = str(prov.get("iterlin_commit", "?"))
    short = commit[:10] + ("+dirty" if commit.endswith("+dirty") else "")
    line = (f"Reference run: scale '{prov['scale']}', {prov['device']}, {seed_text}, {prov['date'][:10]}, "
            f"iterlin {short}, JAX {prov['jax_version']}, {prov['wall_seconds']:.0f} s of computation.")
    if changed:
        line += " The library has changed since: the code that computes this figure differs from that commit's."
    return line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m iterlin.experiments.reference", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="experiments (default: every one)")
    parser.add_argument("--scale", default="cpu", help="scale of the reference runs (default: cpu)")
    parser.add_argument("--results", default=None, help="results folder (default: <repo>/results)")
    parser.add_argument("--claims-only", action="store_true", help="only re-derive claims.json from stored results")
    parser.add_argument("--skip-existing", action="store_true",
                        help="skip an experiment whose reference run at this scale exists")
    args = parser.parse_args(argv)
    names = args.names or list(registry.names())
    for name in names:
        registry.get(name)
    if args.claims_only and not results_dir(args.results).is_dir():
        print(f"error: --claims-only: the results folder {str(results_dir(args.results))!r} does not exist "
              "(--results or $ITERLIN_RESULTS)", file=sys.stderr)
        return 2
    missing = []
    for name in names:
        if args.claims_only:
            try:
                done = rewrite_claims(name, base=args.results)
            except (ReferenceMismatch, OSError) as e:
                print(f"error: {name}: {e}", file=sys.stderr)
                return 2
            print(f"{name}: {'claims rewritten' if done else 'no reference run'}")
            missing += [] if done else [name]
            continue
        ref = load(name, base=args.results) if args.skip_existing else None
        if ref is not None and ref.provenance["scale"] == args.scale:
            print(f"{name}: reference run at scale {args.scale!r} exists, skipped")
            continue
        print(f"{name}: computing at scale {args.scale!r}", flush=True)
        out = write(name, args.scale, base=args.results, progress=True)
        ref = load(name, base=args.results)
        print(ref.caption())
        print(ref.claims())
        print(f"{name}: written to {out}", flush=True)
    if missing and len(missing) == len(names):
        print(f"error: --claims-only: no reference run in {results_dir(args.results)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
