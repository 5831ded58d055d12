"""Reference runs: an experiment's results at a large scale, committed with their provenance.

``results/<name>/`` (beside the package in a checkout; ``$ITERLIN_RESULTS`` overrides) holds, for
each notebook, the run the book shows above this build's own (smoke) run:

* ``results.npz``: the results the notebook plots from (histories, filters, summaries: never
  parameters or checkpoints), in the result cache's format (:func:`iterlin.repro.cache.save_results`:
  flattened keys, the config and a digest that detects a changed file);
* ``claims.json``: that run's claims rows, ``{"name", "scale", "rows": [...]}`` as
  :func:`iterlin.repro.claims.publish_claims` writes them (the book's claims page reads them);
* ``provenance.json``: ``scale``, ``device`` (``"cpu: 2 cores"``, ``"NVIDIA H100 80GB HBM3"``),
  ``seeds``, ``iterlin_commit`` (``+dirty`` when the checkout had uncommitted changes),
  ``jax_version``, ``date`` (UTC), ``wall_seconds`` (of the computation, this invocation),
  ``resumed`` (whether it resumed from checkpoints), ``config``, ``data_fingerprint`` and
  ``code_fingerprint`` (of the code that computes the figure,
  :func:`iterlin.repro.fingerprint.code_fingerprint`), from which a page says "the library has changed
  since" when today's code differs; and ``equivalent_code`` (written by ``--attest``): the later
  code fingerprints shown to compute the same results, each with its ``iterlin_commit``, ``date``,
  ``probe`` (the config that was compared) and ``arrays`` (how many were compared); and
  ``protocol``: the rows of ``claims.toml`` the run tests, with the commit and their SHA-256
  (:func:`iterlin.experiments.protocol.provenance`); :func:`load` refuses the run when a
  confirmatory one has changed since without an amendment (runs made before the protocol have none).

One command regenerates them (``make results SCALE=cpu``)::

    python -m iterlin.experiments.reference --scale cpu            # every notebook
    python -m iterlin.experiments.reference --scale cpu fig3 fig2  # some
    python -m iterlin.experiments.reference --claims-only          # re-derive claims.json
    python -m iterlin.experiments.reference --refingerprint        # which runs' code has changed
    python -m iterlin.experiments.reference --attest fig3          # changed code, the same results?

A reference run always computes (it never reads the result cache, so that its wall time is its
own); an interrupted one resumes from its training checkpoints (``.cache/reference/``) when rerun
with the same config. ``--claims-only`` re-derives every ``claims.json`` from the stored results
with today's claims code (a changed rule needs no new run). Files are written atomically.

``--refingerprint`` re-derives each run's code fingerprint with today's fingerprint rules from the
code at the run's commit (``git archive`` of ``iterlin/``), compares it with today's code, and
prints which runs read as changed with the recorded fingerprints and with the re-derived ones (after
a change of :mod:`iterlin.repro.fingerprint`'s rules every recorded one reads as changed); ``--write``
then stores the re-derived fingerprints in ``provenance.json`` and the key of ``results.npz`` (the
same arrays; runs whose commit had uncommitted changes, ``+dirty``, are left as they are: the code
that ran is not known).

``--attest`` is how a restructuring that changes no result keeps the committed runs current
(:func:`attest`): for each run whose code has changed since, it computes the experiment at a probe
config (``--probe-scale``, default ``smoke``: the paper's models on real data, every branch the
experiment's compute takes at that scale) twice, in two processes, with the code of the run's
commit and with today's committed code, and compares every stored array bit for bit (wall-clock
measurements, keys naming ``seconds``, excepted). Only when all are equal is today's fingerprint
added to the run's ``equivalent_code``; the page then says that the code differs and that it was
shown to compute the same results, and at which scale. It is evidence about the probe config, not a
rerun: a change whose effect only a larger config shows is not caught, so a change meant to alter
results is rerun, never attested.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from ..repro.cache import ResultsMismatch, load_results, repo_root, save_results
from ..checkpoint import atomic_write_bytes
from ..repro.claims import Claim, ClaimsTable
from ..repro.fingerprint import code_fingerprint
from . import protocol, registry
from ._common import stored as stored_arrays

__all__ = ["Reference", "ReferenceMismatch", "Refingerprint", "Attestation", "results_dir", "write", "load", "show",
           "rewrite_claims", "refingerprint", "attest", "compare_results", "provenance_line", "device_name", "main"]
_ENTRY_POINTS = ("load", "compute")


class Reference(NamedTuple):
    """A committed reference run: ``results`` (the experiment's typed results, with ``config``), its
    claims ``rows`` and ``provenance``."""

    name: str
    results: Any
    rows: list
    provenance: dict

    def _status(self) -> tuple[bool, dict | None]:
        """(:attr:`changed_since`, :attr:`attested`), today's code fingerprinted once."""
        today = code_fingerprint(registry.get(self.name).module, _ENTRY_POINTS)
        if self.provenance.get("code_fingerprint") == today:
            return False, None
        entry = next((e for e in self.provenance.get("equivalent_code", []) if e["code_fingerprint"] == today), None)
        return entry is None, entry

    @property
    def changed_since(self) -> bool:
        """Whether the code that computes this figure differs from the code that ran it and has not
        been shown to compute the same results (:func:`attest`)."""
        return self._status()[0]

    @property
    def attested(self) -> dict | None:
        """The provenance's ``equivalent_code`` entry for today's code (:func:`attest`), or None."""
        return self._status()[1]

    def claims(self) -> ClaimsTable:
        """The run's claims table (HTML in a notebook, fixed-width text elsewhere)."""
        return ClaimsTable(self.name, self.provenance["scale"], self.rows, reference=True)

    def caption(self) -> str:
        """:func:`provenance_line` of this run."""
        changed, attested = self._status()
        return provenance_line(self.provenance, changed=changed, attested=attested)


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
    return {"name": name, "scale": scale, "rows": [Claim(*r).check().asdict() for r in rows]}


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
    code = code_fingerprint(exp.module, _ENTRY_POINTS)
    commit = _commit()  # the code that runs, not whatever is checked out when it ends
    started = time.perf_counter()
    results = exp.compute(config, data, checkpoint_dir=ckpt, progress=progress)
    wall = time.perf_counter() - started
    import jax

    out = results_dir(base) / name
    key = f"reference:{name}:{scale}:{code}"
    stored = config.to_dict()
    save_results(out / "results.npz", stored_arrays(results), key=key, config=stored)
    rows = exp.claims(results._replace(config=config))
    _write_json(out / "claims.json", _claims_doc(name, scale, rows))
    seeds = _seeds(stored)
    _write_json(out / "provenance.json", {
        "name": name, "scale": scale, "device": device_name(), "seeds": seeds,
        "iterlin_commit": commit, "jax_version": jax.__version__, "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_seconds": round(wall, 1), "resumed": resumed, "config": stored,
        "protocol": protocol.provenance(name, commit),
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


def _check_equivalents(entries: Any, where: Path) -> None:
    """``equivalent_code`` is a list of :func:`attest`'s entries, each naming a commit of this checkout."""
    fields = ("code_fingerprint", "iterlin_commit", "probe", "arrays", "date")
    if not isinstance(entries, list) or not all(isinstance(e, dict) and all(f in e for f in fields) for e in entries):
        raise ReferenceMismatch(f"{where}: equivalent_code must be a list of entries with {', '.join(fields)}")
    for e in entries:
        _check_commit(e["iterlin_commit"], where)


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
    _check_equivalents(provenance.get("equivalent_code", []), where)
    try:
        typed = exp.config.from_dict(config)
    except ValueError as e:
        raise ReferenceMismatch(f"{where}: its config is not a config of today's {name}: {e}") from None
    try:
        results = exp.typed(results, typed)
    except ValueError as e:
        raise ReferenceMismatch(f"{d / 'results.npz'}: {e}") from None
    doc = json.loads((d / "claims.json").read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("name", name) != name or doc.get("scale") != scale:
        raise ReferenceMismatch(f"{d / 'claims.json'}: is not the claims of {name} at scale {scale!r}")
    rows = [Claim(**r).check() for r in doc["rows"]]
    if "protocol" in provenance:  # the rows this run tested: a confirmatory one may not have changed since
        try:
            protocol.check_run(provenance["protocol"])
        except protocol.ProtocolError as e:
            raise ReferenceMismatch(f"{d / 'provenance.json'}: {e}") from None
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


def show(name: str, plot: Callable[[Any], Any], *, base=None, table: bool = True) -> Reference | None:
    """A notebook's reference-run cell, the first thing its page shows: ``plot(results)`` of the
    committed run, the one-line verdict of its claims (:meth:`~iterlin.repro.claims.ClaimsTable.verdict`),
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


class Refingerprint(NamedTuple):
    """A reference run's code fingerprint re-derived (see :func:`refingerprint`)."""

    name: str
    commit: str  #: ``iterlin_commit`` as recorded (``+dirty``: with uncommitted changes)
    recorded: str  #: ``code_fingerprint`` as recorded in ``provenance.json``
    at_commit: str | None  #: today's rules applied to the code at ``commit`` (None: not available)
    today: str  #: today's rules applied to today's code
    equivalents: tuple = ()  #: the fingerprints of ``equivalent_code`` as recorded (:func:`attest`)

    @property
    def dirty(self) -> bool:
        return self.commit.endswith("+dirty")

    @property
    def changed_as_recorded(self) -> bool:
        """Whether the run reads as changed today (:attr:`Reference.changed_since`)."""
        return self.recorded != self.today and self.today not in self.equivalents

    @property
    def changed(self) -> bool | None:
        """Whether the code the run reaches differs from today's (None: unknown)."""
        return None if self.at_commit is None else self.at_commit != self.today


def _package_at(commit: str, dest: Path) -> bool:
    """Extract ``iterlin/`` as it was at ``commit`` into ``dest`` (False when git or the commit is missing)."""
    root = repo_root()
    if root is None:
        return False
    try:
        tar = subprocess.run(["git", "archive", "--format=tar", commit, "--", "iterlin"], cwd=root,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return False
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(dest, filter="data")
        else:  # Python < 3.10.12: git's own archive of a commit
            archive.extractall(dest)
    return (dest / "iterlin").is_dir()


def refingerprint(name: str, *, base=None) -> Refingerprint | None:
    """Re-derive the code fingerprint of ``name``'s reference run with today's rules from the code at
    its recorded commit (None when no run is committed)."""
    exp = registry.get(name)
    path = results_dir(base) / name / "provenance.json"
    if not path.is_file():
        return None
    prov = json.loads(path.read_text(encoding="utf-8"))
    commit = str(prov.get("iterlin_commit", ""))
    equivalents = tuple(str(e["code_fingerprint"]) for e in prov.get("equivalent_code", []))
    return Refingerprint(name, commit, str(prov.get("code_fingerprint")), _fingerprint_at(exp.module, commit),
                         code_fingerprint(exp.module, _ENTRY_POINTS), equivalents)


def _fingerprint_at(module: str, commit: str) -> str | None:
    """Today's fingerprint rules applied to ``module`` as it was at ``commit`` (None: not available)."""
    with tempfile.TemporaryDirectory() as tmp:
        if not _package_at(commit.removesuffix("+dirty"), Path(tmp)):
            return None
        try:
            return code_fingerprint(module, _ENTRY_POINTS, root=tmp)
        except ValueError:  # the experiment's module did not exist then
            return None


def _refingerprint_all(names: Sequence[str], base, write_back: bool) -> None:
    rows = [r for r in (refingerprint(n, base=base) for n in names) if r is not None]
    for r in rows:
        state = {None: "unknown (the commit's code is not available)", True: "changed", False: "unchanged"}[r.changed]
        note = " (commit had uncommitted changes: derived from the commit)" if r.dirty else ""
        if r.today in r.equivalents:
            reads = "today's code is attested to compute the same (equivalent_code)"
        else:
            reads = f"recorded fingerprint {'differs from' if r.changed_as_recorded else 'matches'} today's"
        print(f"{r.name}: {r.commit[:10]}{'+dirty' if r.dirty else ''}: code {state} since{note}; {reads}")
    print(f"{len(rows)} reference runs: {sum(r.changed_as_recorded for r in rows)} read as changed with the recorded "
          f"fingerprints, {sum(r.changed is not False for r in rows)} with fingerprints re-derived at their commits")
    if write_back:
        for r in rows:
            if r.at_commit is None or r.dirty or r.at_commit == r.recorded:
                continue
            d = results_dir(base) / r.name
            prov = json.loads((d / "provenance.json").read_text(encoding="utf-8"))
            scale, config = prov["scale"], prov["config"]
            new_key = f"reference:{r.name}:{scale}:{r.at_commit}"
            try:  # results.npz's stored key names the code fingerprint (load checks it): the same arrays, re-keyed
                results = load_results(d / "results.npz", key=f"reference:{r.name}:{scale}:{r.recorded}", config=config)
                save_results(d / "results.npz", results, key=new_key, config=config)
            except ResultsMismatch:  # re-keyed by an interrupted --write: only the provenance is left to do
                load_results(d / "results.npz", key=new_key, config=config)
            prov["code_fingerprint"] = r.at_commit
            for e in prov.get("equivalent_code", []):  # attested code: its fingerprint under today's rules too
                e["code_fingerprint"] = _fingerprint_at(registry.get(r.name).module, e["iterlin_commit"]) or \
                    e["code_fingerprint"]
            _write_json(d / "provenance.json", prov)
            print(f"{r.name}: code_fingerprint re-derived in {d / 'provenance.json'} and results.npz's key")


class Attestation(NamedTuple):
    """The outcome of :func:`attest` for one reference run."""

    name: str
    recorded: str  #: the run's ``code_fingerprint``
    today: str  #: today's code fingerprint
    equal: bool | None  #: whether both codes computed the same results (None: not compared)
    detail: str  #: what was compared, the first difference, or why nothing was


#: A stored array whose key has a part containing this is a wall-clock measurement: never compared.
WALL_CLOCK = "seconds"
_PROBE_META = ("__key__", "__digest__", "__package__")


def compare_results(a: str | os.PathLike, b: str | os.PathLike) -> tuple[bool, str]:
    """Whether two result files (:func:`iterlin.repro.cache.save_results`) hold the same config and the
    same arrays bit for bit (keys, dtypes, shapes and bytes), wall-clock measurements
    (:data:`WALL_CLOCK`) excepted; and a sentence saying so, or naming the first difference."""
    with np.load(a, allow_pickle=False) as za, np.load(b, allow_pickle=False) as zb:
        left, right = {k: za[k] for k in za.files}, {k: zb[k] for k in zb.files}
    keys = [k for k in sorted(set(left) | set(right)) if k not in _PROBE_META]
    timed = [k for k in keys if any(WALL_CLOCK in part for part in k.split("/"))]
    for k in (k for k in keys if k not in timed):
        if k not in left or k not in right:
            return False, f"{k!r} is stored in {Path(b if k in right else a).name} only"
        x, y = left[k], right[k]
        if k == "__config__" and x.tobytes() != y.tobytes():
            return False, "the config differs"
        if x.dtype != y.dtype or x.shape != y.shape:
            return False, f"{k!r}: {x.dtype}{list(x.shape)} against {y.dtype}{list(y.shape)}"
        if x.tobytes() != y.tobytes():
            return False, f"{k!r} differs" + ("" if x.dtype.kind not in "fc" else
                                              f" (largest difference {np.nanmax(np.abs(x - y)):.3g})")
    return True, f"{len(keys) - len(timed) - 1} arrays and the config equal bit for bit" + (
        f" ({len(timed)} wall-clock arrays not compared)" if timed else "")


def _run_probe(root: Path, name: str, scale: str, overrides: Mapping, out: Path) -> str | None:
    """Compute ``name`` at the probe config in a new process whose ``iterlin`` is the one under
    ``root`` (:mod:`._probe`); None when it ran, else why not."""
    from . import _probe

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    work = out.parent / f"{out.stem}-work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", Path(_probe.__file__).read_text(encoding="utf-8"), name, scale,
                           json.dumps(dict(overrides)), str(out), str(work / "checkpoints")],
                          cwd=work, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"the probe failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}"
    with np.load(out, allow_pickle=False) as z:
        package = Path(str(z["__package__"])).resolve()
    if root.resolve() not in package.parents:
        return f"the probe imported iterlin from {package.parent}, not from {root}"
    return None


def attest(name: str, *, base=None, scale: str = "smoke", overrides: Mapping | None = None,
           run: Callable[[Path, str, str, Mapping, Path], str | None] | None = None) -> Attestation | None:
    """Whether today's code computes what the code of ``name``'s reference run computed: both, from
    git at their commits, run the experiment at ``scale`` with ``overrides``, and every stored array
    is compared (:func:`compare_results`). ``run(package_root, name, scale, overrides, out)``
    computes and stores one side and returns None, or why it could not (default: a new process
    whose ``iterlin`` is the one under ``package_root``). When all are equal,
    today's code fingerprint is added to the provenance's ``equivalent_code`` (module docstring).
    Today's code must be committed (the entry names the commit it checked). None when no run is
    committed."""
    ref = load(name, base=base, check_claims=False)
    if ref is None:
        return None
    prov = ref.provenance
    recorded, today = str(prov["code_fingerprint"]), code_fingerprint(registry.get(name).module, _ENTRY_POINTS)

    def outcome(equal, detail):
        return Attestation(name, recorded, today, equal, detail)

    if recorded == today or ref.attested is not None:
        return outcome(True, "nothing to attest: today's code is the recorded one" if recorded == today else
                       f"attested before, at iterlin {ref.attested['iterlin_commit'][:10]}")
    commit, head = str(prov.get("iterlin_commit", "")), _commit()
    if commit.endswith("+dirty") or commit.startswith("unknown"):
        return outcome(None, f"not compared: the code of the run ({commit}) is not known")
    if head.endswith("+dirty") or head.startswith("unknown"):
        return outcome(None, f"not compared: today's code is not committed ({head}); commit it first")
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for label, sha in (("recorded", commit), ("today", head)):
            root = Path(tmp) / label
            if not _package_at(sha, root):
                return outcome(None, f"not compared: commit {sha[:10]} is not in this checkout")
            files[label] = Path(tmp) / f"{label}.npz"
            failed = (run or _run_probe)(root, name, scale, overrides or {}, files[label])
            if failed is not None:
                return outcome(None, f"not compared: {label} code: {failed}")
        equal, detail = compare_results(files["recorded"], files["today"])
    probe = {"scale": scale, "overrides": dict(overrides or {})}
    if equal:
        prov.setdefault("equivalent_code", []).append({
            "code_fingerprint": today, "iterlin_commit": head, "probe": probe, "arrays": detail,
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})
        _write_json(results_dir(base) / name / "provenance.json", prov)
    return outcome(equal, f"at scale {scale!r}" + (f" with {probe['overrides']}" if overrides else "") + f": {detail}")


def _attest_all(names: Sequence[str], base, scale: str) -> int:
    """``--attest``: 0 when every run is current or attested, 1 otherwise."""
    failed = 0
    for name in names:
        ref = load(name, base=base, check_claims=False)
        if ref is None or not ref.changed_since:
            print(f"{name}: {'no reference run' if ref is None else 'current (code unchanged or attested)'}; "
                  "nothing to attest", flush=True)
            continue
        print(f"{name}: computing at scale {scale!r} with the code of {ref.provenance['iterlin_commit'][:10]} and "
              "with today's", flush=True)
        a = attest(name, base=base, scale=scale)
        failed += a.equal is not True
        print(f"{name}: {'the same results' if a.equal else 'NOT attested'}: {a.detail}", flush=True)
    return 1 if failed else 0


def provenance_line(prov: Mapping, *, changed: bool = False, attested: Mapping | None = None) -> str:
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
    elif attested is not None:
        line += (f" The code that computes this figure has changed since; at scale '{attested['probe']['scale']}' "
                 f"it computes the same results bit for bit (compared at iterlin {attested['iterlin_commit'][:10]}, "
                 f"{attested['date'][:10]}).")
    return line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m iterlin.experiments.reference", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="experiments (default: every one)")
    parser.add_argument("--scale", default="cpu", help="scale of the reference runs (default: cpu)")
    parser.add_argument("--results", default=None, help="results folder (default: <repo>/results)")
    parser.add_argument("--claims-only", action="store_true", help="only re-derive claims.json from stored results")
    parser.add_argument("--skip-existing", action="store_true",
                        help="skip an experiment whose reference run at this scale exists")
    parser.add_argument("--refingerprint", action="store_true",
                        help="re-derive the runs' code fingerprints at their commits with today's rules; compare")
    parser.add_argument("--attest", action="store_true",
                        help="for each run whose code has changed: compare its commit's results with today's at "
                             "--probe-scale, and record today's code as equivalent when every array is equal")
    parser.add_argument("--probe-scale", default="smoke", help="with --attest: the scale compared (default: smoke)")
    parser.add_argument("--write", action="store_true",
                        help="with --refingerprint: store the re-derived fingerprints in provenance.json")
    args = parser.parse_args(argv)
    if args.write and not args.refingerprint:
        parser.error("--write is only allowed with --refingerprint")
    names = args.names or list(registry.names())
    for name in names:
        registry.get(name)
    if args.refingerprint:
        _refingerprint_all(names, args.results, args.write)
        return 0
    if args.attest:
        return _attest_all(names, args.results, args.probe_scale)
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
