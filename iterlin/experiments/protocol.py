"""The claims protocol: each claim the book tests is one declared row of ``claims.toml``.

A :class:`Row` says what is tested before anything is measured: the paper's words and number, the
experiment and the comparison (which runs, which metric, read when), the rule (``kind``), its
margin and why the margin is that size, the seeds, the stability and convergence conditions, and
whether the row is ``exploratory`` (a pilot's row, which never counts) or ``confirmatory`` (then
with the date it was registered, committed before its runs). :func:`claims` turns an experiment's
rows and its results into the claims rows a notebook prints (:class:`iterlin.repro.claims.Claim`, keyed
by the row's ``id``): the rule's wording and its n/a cases come from the row's kind
(:data:`KINDS`), the words from the row.

An :class:`Amendment` records a change to a row after it was registered: its id, date, reason and
the original values of the changed fields, so that the verdict under the original row stays
visible (:func:`original`). A reference run's provenance records the rows it tests
(:func:`provenance`: the commit, each row and the SHA-256 of the experiment's rows); :func:`check_run`
refuses a confirmatory row changed since its run without an amendment, naming the field.

Every check raises :class:`ProtocolError` (a ValueError) naming the row, the field, the value and
what is allowed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from ..repro.claims import NA, UNDECIDED, UNSTABLE, Claim, divergence_claim, on_par_claim, sharpness_claim, verdict
from ..repro.stats import pct, runs_of
from ..training import METRIC_NAMES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["Row", "Amendment", "Protocol", "ProtocolError", "KINDS", "STATUSES", "METRICS", "PROTOCOL_FILE",
           "parse", "load", "protocol", "rows_of", "rule", "config_mismatch", "evaluate", "claims", "row_hash", "rows_hash",
           "provenance", "check_run", "original"]

#: The protocol's file, beside this module.
PROTOCOL_FILE = Path(__file__).with_name("claims.toml")
#: A row's status: a pilot's row (never counts) or a preregistered one.
STATUSES = ("exploratory", "confirmatory")
#: The metrics a row may compare: a history's evaluations (``net_test_acc``, …) and its records.
METRICS = tuple(METRIC_NAMES) + ("n_relin", "lr_over_bound", "diverged")


class ProtocolError(ValueError):
    """A malformed or contradictory row or amendment, or a row changed after its run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    """One claim, declared before it is measured (the fields of a ``[[row]]`` of ``claims.toml``).

    id: ``"<experiment>.<name>"``, unique. claim: what is tested, in words (the table's claim
    column). paper: the paper's number or statement. experiment: the notebook whose results decide
    it. kind: the rule (:data:`KINDS`). history: the results' sweep field(s) compared (a figure's
    panel each). panels: the panels' names, one per history (default: none). runs: which runs are
    compared, in words. metric: :data:`METRICS`. read: when the metric is read, in words. margin: the
    rule's margin (a fraction of accuracy, or of the stability bound), ≥ 0; None where the kind
    takes none. margin_why: why the margin is that size. value: the number the rule compares
    with where it is not a margin (a fraction): the paper's number of a ``paper_value`` row, or a
    threshold of an experiment's own rule. judged_at: the scale at which a ``paper_value``
    row is judged (n/a at every other). max_relin: the most re-linearisations an ``on_par`` row
    allows (None: any). seeds: the seeds the row needs (None: the scale's, exploratory rows only);
    seeds_why: the power analysis that set them (its pilot, components and power).
    stability, convergence: the conditions under which a verdict counts, in words. status:
    :data:`STATUSES`. registered: the ISO date a confirmatory row was committed before its runs.
    check: a consistency check (holds by construction; not evidence). config: the run the row is
    decided on, as knobs of the experiment's config (``scale`` among them; a TOML inline table): a
    run whose config differs in one of them reads n/a (:func:`evaluate`), so that a registered row
    fixes its run as well as its rule (empty: any run). requires: ids of rows of the same
    experiment that must read "yes" for this row's verdict to count (its convergence and stability
    conditions as rows); when one does not, :func:`evaluate` makes the verdict undecided (or
    ``"no (unstable)"`` for a failed ``stable``/``finite`` row) and says which.
    """

    id: str
    claim: str
    paper: str
    experiment: str
    kind: str
    history: tuple[str, ...]
    panels: tuple[str, ...] = ()
    runs: str = ""
    metric: str = "net_test_acc"
    read: str = "the last evaluation"
    margin: float | None = None
    margin_why: str = ""
    value: float | None = None
    judged_at: str | None = None
    max_relin: int | None = None
    seeds: int | None = None
    seeds_why: str = ""
    stability: str = ""
    convergence: str = ""
    status: str = "exploratory"
    registered: str = ""
    check: bool = False
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    requires: tuple[str, ...] = ()

    def __post_init__(self):
        where = f"row {self.id!r}"
        for f in ("id", "claim", "paper", "experiment", "kind", "runs", "metric", "read", "margin_why",
                  "seeds_why", "stability", "convergence", "status", "registered"):
            _typed(where, f, getattr(self, f), str)
        for f in ("id", "claim", "paper", "experiment", "kind"):
            if not getattr(self, f):
                raise ProtocolError(f"{where}: {f}='' is not allowed: {f} must be a non-empty string")
        if not self.id.startswith(self.experiment + ".") or not self.id[len(self.experiment) + 1:]:
            raise ProtocolError(f"{where}: id={self.id!r} is not allowed: it must be '{self.experiment}.<name>' "
                                f"(its experiment, a dot, a name)")
        for f in ("history", "panels", "requires"):
            v = getattr(self, f)
            if isinstance(v, list):
                object.__setattr__(self, f, v := tuple(v))
            if not isinstance(v, tuple) or not all(isinstance(s, str) and s for s in v):
                raise ProtocolError(f"{where}: {f}={v!r} is not allowed: {f} must be a list of non-empty strings")
        if bad := [r for r in self.requires if not r.startswith(self.experiment + ".") or r == self.id]:
            raise ProtocolError(f"{where}: requires={list(self.requires)!r} is not allowed: {bad[0]!r} must be another "
                                f"row of {self.experiment!r}")
        if not self.history:
            raise ProtocolError(f"{where}: history=() is not allowed: name at least one results field")
        if self.panels and len(self.panels) != len(self.history):
            raise ProtocolError(f"{where}: panels={self.panels!r} is not allowed: one panel name per history "
                                f"field ({len(self.history)})")
        if self.kind not in KINDS or ("." in self.kind and not self.kind.startswith(self.experiment + ".")):
            raise ProtocolError(f"{where}: kind={self.kind!r} is not allowed: kind must be one of the shared "
                                f"{tuple(k for k in KINDS if '.' not in k)} or its experiment's own "
                                f"{tuple(k for k in KINDS if k.startswith(self.experiment + '.'))}")
        allowed = METRICS + KINDS[self.kind].metrics
        if self.metric not in allowed:
            raise ProtocolError(f"{where}: metric={self.metric!r} is not allowed: metric must be one of {allowed}")
        for f in ("margin", "value"):
            v = getattr(self, f)
            if v is not None:
                _typed(where, f, v, (int, float))
                if not math.isfinite(v) or v < 0:
                    raise ProtocolError(f"{where}: {f}={v!r} is not allowed: {f} must be a finite number ≥ 0")
        for f in ("max_relin", "seeds"):
            v = getattr(self, f)
            if v is not None:
                _typed(where, f, v, int)
                if v < 1:
                    raise ProtocolError(f"{where}: {f}={v!r} is not allowed: {f} must be an integer ≥ 1")
        _typed(where, "check", self.check, bool)
        _typed(where, "config", self.config, Mapping)
        object.__setattr__(self, "config", dict(self.config))
        if self.judged_at is not None:
            _typed(where, "judged_at", self.judged_at, str)
        needs = KINDS[self.kind].needs
        for f in needs:
            if getattr(self, f) is None:
                raise ProtocolError(f"{where}: {f}=None is not allowed: a {self.kind!r} row needs {', '.join(needs)}")
        takes = set(needs) | set(KINDS[self.kind].takes) | ({"max_relin"} if self.kind == "on_par" else set())
        for f in ("value", "judged_at", "max_relin"):  # a parameter its rule never reads contradicts the row
            if getattr(self, f) is not None and f not in takes:
                raise ProtocolError(f"{where}: {f}={getattr(self, f)!r} is not allowed: a {self.kind!r} row takes no {f}")
        if self.margin is not None and not self.margin_why:
            raise ProtocolError(f"{where}: margin_why='' is not allowed: say why the margin is {self.margin:g}")
        if self.status not in STATUSES:
            raise ProtocolError(f"{where}: status={self.status!r} is not allowed: status must be one of {STATUSES}")
        if self.status == "confirmatory":
            _date(where, "registered", self.registered)
            if self.seeds is None:
                raise ProtocolError(f"{where}: seeds=None is not allowed: a confirmatory row fixes its seeds")
        elif self.registered:
            raise ProtocolError(f"{where}: registered={self.registered!r} is not allowed: only a confirmatory row "
                                "is registered (status is 'exploratory')")

    def asdict(self) -> dict:
        """The row as plain data (lists for tuples), as ``claims.toml`` writes it and a hash reads it
        (an empty ``config``, ``requires`` or ``seeds_why`` left out, so that a row written before
        them hashes as it did)."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self) if f.name not in _NEW or getattr(self, f.name)}


#: Fields added after rows were first hashed: left out of :meth:`Row.asdict` when empty.
_NEW = ("config", "requires", "seeds_why")


class Amendment(NamedTuple):
    """A change to a row after it was registered: ``original`` holds the changed fields' values
    before the change (so the verdict under the original row stays visible, :func:`original`)."""

    id: str
    date: str
    reason: str
    original: Mapping[str, Any]


class Protocol(NamedTuple):
    """The rows (in file order) and their amendments."""

    rows: tuple[Row, ...]
    amendments: tuple[Amendment, ...] = ()

    def row(self, id: str) -> Row:
        for r in self.rows:
            if r.id == id:
                return r
        raise ProtocolError(f"id={id!r} is not a row of the protocol")


def _typed(where: str, field: str, value: Any, types) -> None:
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        names = " or ".join(t.__name__ for t in _tuple(types))
        raise ProtocolError(f"{where}: {field}={value!r} is not allowed: {field} must be {names} "
                            f"(got {type(value).__name__})")


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _date(where: str, field: str, value: Any) -> None:
    try:
        _dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise ProtocolError(f"{where}: {field}={value!r} is not allowed: {field} must be an ISO date "
                            "(YYYY-MM-DD)") from None


def _row(data: Mapping, i: int) -> Row:
    known = {f.name for f in dataclasses.fields(Row)}
    where = f"row {data.get('id', i)!r}"
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProtocolError(f"{where}: {unknown[0]}={data[unknown[0]]!r} is not allowed: {unknown[0]!r} is not a "
                            f"field of a row (they are {sorted(known)})")
    try:
        return Row(**data)
    except TypeError as e:  # a required field missing
        raise ProtocolError(f"{where}: {e}") from None


def parse(doc: Mapping, experiments: Iterable[str] | None = None) -> Protocol:
    """The protocol of a parsed ``claims.toml`` (``{"row": [...], "amendment": [...]}``), checked:
    every row (:class:`Row`), unique ids, each experiment among ``experiments`` (when given), each
    amendment's row, date, reason and fields (the original row must itself be a valid row)."""
    extra = sorted(set(doc) - {"row", "amendment"})
    if extra:
        raise ProtocolError(f"table {extra[0]!r} is not allowed: the protocol holds [[row]] and [[amendment]]")
    rows = tuple(_row(r, i) for i, r in enumerate(doc.get("row", ())))
    seen: set[str] = set()
    for r in rows:
        if r.id in seen:
            raise ProtocolError(f"row {r.id!r}: id={r.id!r} is not allowed: a duplicate id (ids are unique)")
        seen.add(r.id)
    for r in rows:
        if missing := [q for q in r.requires if q not in seen]:
            raise ProtocolError(f"row {r.id!r}: requires={list(r.requires)!r} is not allowed: {missing[0]!r} is not a row")
    if experiments is not None:
        known = tuple(experiments)
        for r in rows:
            if r.experiment not in known:
                raise ProtocolError(f"row {r.id!r}: experiment={r.experiment!r} is not allowed: experiment must be "
                                    f"one of {known}")
    amendments = []
    for a in doc.get("amendment", ()):
        where = f"amendment of {a.get('id')!r}"
        if set(a) != {"id", "date", "reason", "original"}:
            raise ProtocolError(f"{where}: fields {sorted(a)} are not allowed: an amendment has id, date, reason, "
                                "original")
        if a["id"] not in seen:
            raise ProtocolError(f"{where}: id={a['id']!r} is not allowed: it names no row")
        _date(where, "date", a["date"])
        _typed(where, "reason", a["reason"], str)
        if not a["reason"] or not isinstance(a["original"], Mapping) or not a["original"]:
            raise ProtocolError(f"{where}: an amendment needs a reason and the original values of the fields it changed")
        amendment = Amendment(a["id"], a["date"], a["reason"], dict(a["original"]))
        original(Protocol(rows).row(a["id"]), amendment)  # the original row is itself valid
        amendments.append(amendment)
    return Protocol(rows, tuple(amendments))


def load(path: str | Path = PROTOCOL_FILE, experiments: Iterable[str] | None = None) -> Protocol:
    """:func:`parse` of the TOML file ``path``."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ProtocolError(f"{path}: not TOML ({e})") from None
    return parse(doc, experiments)


@lru_cache(maxsize=1)
def protocol() -> Protocol:
    """The project's protocol (:data:`PROTOCOL_FILE`), read once."""
    return load()


def rows_of(experiment: str, source: Protocol | None = None) -> tuple[Row, ...]:
    """The rows of ``experiment``, in file order."""
    return tuple(r for r in (source or protocol()).rows if r.experiment == experiment)


def original(row: Row, amendment: Amendment) -> Row:
    """The row as it was before ``amendment``."""
    known = {f.name for f in dataclasses.fields(Row)} - {"id", "experiment"}
    bad = sorted(set(amendment.original) - known)
    if bad:
        raise ProtocolError(f"amendment of {row.id!r}: field {bad[0]!r} is not allowed: it must be a field of the "
                            f"row other than id and experiment ({sorted(known)})")
    return dataclasses.replace(row, **amendment.original)


# ------------------------------------------------------------------------------------------------
# Hashes and the run's record
# ------------------------------------------------------------------------------------------------


def row_hash(row: Row) -> str:
    """SHA-256 of the row's fields as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(row.asdict(), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def rows_hash(rows: Sequence[Row]) -> str:
    """SHA-256 of the rows' hashes in order."""
    return hashlib.sha256("\n".join(row_hash(r) for r in rows).encode()).hexdigest()


def provenance(experiment: str, commit: str, source: Protocol | None = None) -> dict:
    """What a run's provenance records of the rows it tests: the commit, the SHA-256 of the rows
    and each row as plain data (so that a later change names its field)."""
    rows = rows_of(experiment, source)
    return {"commit": commit, "rows_sha256": rows_hash(rows), "rows": [r.asdict() for r in rows]}


def check_run(record: Mapping, source: Protocol | None = None) -> None:
    """Refuse a confirmatory row that the run recorded (:func:`provenance`) and that has changed
    since without an amendment whose ``original`` gives back the recorded row: ProtocolError
    naming the row, the field, the recorded and the current value. A recorded row that is gone is
    refused too. Exploratory rows may change freely (they never count)."""
    source = source or protocol()
    current = {r.id: r for r in source.rows}
    for data in record.get("rows", ()):
        then = _row(data, 0)
        if then.status != "confirmatory":
            continue
        if then.id not in current:
            raise ProtocolError(f"row {then.id!r}: is recorded by the run but no longer in the protocol")
        now = current[then.id]
        if row_hash(now) == row_hash(then):
            continue
        amended = [a for a in source.amendments if a.id == then.id]
        if any(row_hash(original(now, a)) == row_hash(then) for a in amended):
            continue
        changed = [f.name for f in dataclasses.fields(Row) if getattr(now, f.name) != getattr(then, f.name)]
        what = "; ".join(f"{f} is {getattr(now, f)!r} but the run tested {f}={getattr(then, f)!r}" for f in changed)
        raise ProtocolError(f"row {then.id!r}: {what} (row hash {row_hash(now)[:12]} ≠ {row_hash(then)[:12]}): a "
                            "confirmatory row changed after its run needs an [[amendment]] with its reason, date and "
                            f"the original {', '.join(changed)}")


# ------------------------------------------------------------------------------------------------
# The rules: a row and the results give a claims row
# ------------------------------------------------------------------------------------------------


class Kind(NamedTuple):
    """A rule: which fields a row of this kind needs, and ``evaluate(row, results)``, which returns
    what was measured, the verdict and the rule's wording, as ``(measured, holds, rule)`` or as a
    :class:`~iterlin.repro.claims.Claim` whose other fields are ignored (the words come from the row)."""

    needs: tuple[str, ...]
    evaluate: Callable[[Row, Any], Claim | tuple[str, str, str]]
    metrics: tuple[str, ...] = ()  #: the experiment's own records a row of this kind may name as its metric
    takes: tuple[str, ...] = ()  #: the optional fields (``value``, ``judged_at``, ``max_relin``) its rule reads


def _on_par(row: Row, results) -> Claim:
    h = getattr(results, row.history[0])
    c = on_par_claim(row.claim, row.paper, h, n_test=int(results.n_test), tol=row.margin, metric=row.metric)
    if row.max_relin is None:
        return c
    K = np.asarray(h["K"], np.float64)
    relin = int(np.asarray(h["n_relin"])[runs_of(h, K.max())[0], -1])
    holds = c.holds if c.holds in (UNSTABLE, UNDECIDED) else verdict(
        c.holds == "yes" and relin <= row.max_relin, applicable=c.holds in ("yes", "no"))
    return c._replace(holds=holds, rule=f"≤ {row.max_relin} re-linearisations, and the large-K run on par with "
                      f"K = 1: {c.rule} ({row.margin_why}); undecided or '{UNSTABLE}' when that is")


def _paper_value(row: Row, results) -> Claim:
    h = getattr(results, row.history[0])
    got = np.asarray(h[row.metric], np.float64)[runs_of(h, 1), -1].mean()
    return Claim(row.claim, row.paper, f"{pct(got)} (mean over seeds)",
                 verdict(abs(got - row.value) <= row.margin, applicable=results.config.scale == row.judged_at),
                 f"|Δ| ≤ {100 * row.margin:g} points; judged only at scale {row.judged_at!r} (fewer images and steps "
                 "here)")


def _stable(row: Row, results) -> Claim:
    return sharpness_claim(getattr(results, row.history[0]), row.margin)


def _finite(row: Row, results) -> Claim:
    histories = {p: getattr(results, f) for p, f in zip(row.panels or ("runs",), row.history)}
    return divergence_claim(histories)


#: The rules by name (an experiment adds its own with :func:`rule`): ``on_par`` (K = 1 against the largest finite K at the last evaluation, within
#: ±margin, :func:`iterlin.repro.claims.on_par_claim`; with ``max_relin``, also at most that many
#: re-linearisations), ``paper_value`` (K = 1's mean within ±margin of the paper's ``value``,
#: judged only at scale ``judged_at``), ``stable`` (η·λ_max/2 ≤ margin along every large-K run,
#: :func:`iterlin.repro.claims.sharpness_claim`) and ``finite`` (no run diverged,
#: :func:`iterlin.repro.claims.divergence_claim`).
KINDS: dict[str, Kind] = {
    "on_par": Kind(("margin",), _on_par),
    "paper_value": Kind(("margin", "value", "judged_at"), _paper_value),
    "stable": Kind(("margin",), _stable),
    "finite": Kind((), _finite),
}


def rule(name: str, needs: tuple[str, ...] = (), metrics: tuple[str, ...] = (), takes: tuple[str, ...] = ()) -> Callable:
    """Register an experiment's own rule kind ``name`` (``"<experiment>.<rule>"``), a decorator of
    its ``evaluate(row, results)`` (:class:`Kind`); ``needs``: the row fields it requires;
    ``metrics``: the experiment's own records its rows may name besides :data:`METRICS`;
    ``takes``: the optional fields it reads when given (e.g. ``max_relin``)."""
    def register(evaluate: Callable) -> Callable:
        if name in KINDS and KINDS[name].evaluate is not evaluate:
            raise ValueError(f"kind={name!r} is already registered")
        KINDS[name] = Kind(tuple(needs), evaluate, tuple(metrics), tuple(takes))
        return evaluate
    return register


def config_mismatch(row: Row, config) -> str:
    """``""`` when the run's ``config`` has every knob of ``row.config``, else which differ
    (``"lr=0.002 (the row's 0.001)"``): lists compare as tuples, numbers as floats, and a knob's
    None (every image) as the row's ``"all"`` (TOML has no null)."""
    def norm(v):
        if isinstance(v, (list, tuple)):
            return tuple(norm(x) for x in v)
        if v is None:
            return "all"
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    given = {} if config is None else config.to_dict()
    return "; ".join(f"{k}={given.get(k, '(none)')!r} (the row's {v!r})" for k, v in row.config.items()
                     if norm(given.get(k)) != norm(v))


def evaluate(rows: Iterable[Row], results) -> list[Claim]:
    """The claims rows of ``rows`` on ``results``, in order, each keyed by its row's id
    (``Claim.id``); a ``check`` row is of kind ``"check"``. A row whose ``config`` the run does not
    have (:func:`config_mismatch`) reads n/a, naming the knobs that differ."""
    out = []
    for row in rows:
        if row.config and (differ := config_mismatch(row, getattr(results, "config", None))):
            out.append(Claim(row.claim, row.paper, "not measured: this run is not the row's", NA,
                             f"decided only on the row's run; this one has {differ}",
                             "check" if row.check else "claim", row.id))
            continue
        got = KINDS[row.kind].evaluate(row, results)
        measured, holds, wording = (got.measured, got.holds, got.rule) if isinstance(got, Claim) else got
        out.append(Claim(row.claim, row.paper, measured, holds, wording, "check" if row.check else "claim", row.id))
    return _required(rows, out)


def _required(rows: Sequence[Row], out: list[Claim]) -> list[Claim]:
    """Each row's verdict made undecided (``"no (unstable)"`` for a failed stable or finite row)
    when a row it ``requires`` does not read "yes" (:class:`Row`)."""
    by_id = {c.id: (r, c) for r, c in zip(rows, out)}
    done = []
    for row, c in zip(rows, out):
        failed = []
        for rid in () if c.holds == NA else row.requires:
            if rid not in by_id:
                raise ProtocolError(f"row {row.id!r}: requires={list(row.requires)!r} is not allowed: {rid!r} is not "
                                    "evaluated with it")
            need, got = by_id[rid]
            if got.holds != "yes":
                failed.append((need, got))
        if failed and c.holds in ("yes", "no", UNDECIDED):
            unstable = any(n.kind in ("stable", "finite") and g.holds == "no" for n, g in failed)
            why = "; ".join(f"row {n.id} reads {g.holds!r}" for n, g in failed)
            c = c._replace(measured=f"{c.measured}; not counted: {why}", holds=UNSTABLE if unstable else UNDECIDED,
                           rule=f"{c.rule}; counted only when rows {', '.join(row.requires)} read 'yes'")
        done.append(c)
    return done


def claims(experiment: str, results, source: Protocol | None = None) -> list[Claim]:
    """:func:`evaluate` of ``experiment``'s rows (:func:`rows_of`); ProtocolError when it has none."""
    rows = rows_of(experiment, source)
    if not rows:
        raise ProtocolError(f"experiment={experiment!r} has no rows in {PROTOCOL_FILE.name}")
    return evaluate(rows, results)

