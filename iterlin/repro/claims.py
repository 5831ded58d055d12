"""The claims cell: the paper's claim, the paper's number, what this run measured, does it hold.

Each notebook ends with one table built from :class:`Claim` rows::

    rows = [
        Claim("large K ends on par with K = 1", paper="82.3 % vs 81.4 %",
              measured=f"{pct(a)} vs {pct(b)}", holds=verdict(abs(a - b) < 0.01),
              rule="|Δ| < 1 point"),
    ]
    print(publish_claims("fig3", rows, scale="smoke"))

* ``measured`` and ``paper`` are strings, rounded by the caller (:func:`~iterlin.repro.stats.pct`,
  :func:`~iterlin.repro.stats.num`) so that the printed table is stable across reruns (nbval compares it).
* ``holds`` is ``"yes"``, ``"no"``, ``"undecided"`` or ``"n/a at this scale"``, decided by the
  ``rule`` written in the row: a claim about an absolute number of the paper (82.3 %) cannot hold at
  the smoke scale's few images and steps, and says so instead of "no".
* Every comparison of two accuracies goes through ONE noise rule: the statistics of
  :mod:`iterlin.repro.stats` (:func:`~iterlin.repro.stats.difference`: a 95 % Student's t interval around the
  difference Δ, whose standard error combines the seed-to-seed spread and the test set's noise,
  paired on the same test images when the runs' predictions are known, with the
  Welch–Satterthwaite degrees of freedom of that combination; few seeds: wide), then the verdicts
  here, :func:`on_par` or :func:`exceeds`. "Better" holds when the interval excludes 0; "on par
  within t" holds when the interval lies inside ±t, fails when it lies wholly outside, and is
  otherwise ``"undecided"`` (an equivalence test: not seeing a difference is not evidence of none).
* A diverged run (a NaN or exploding loss, see :func:`iterlin.training.commit_step`) is a result:
  say so (:func:`divergence_claim`, from the events that :mod:`iterlin.repro.failures` finds) and let the
  rule decide (a diverged run does not match K = 1).

:func:`publish_claims` prints nothing itself: it returns the fixed-width table and saves the rows
atomically as JSON to ``<claims dir>/<name>.json`` (``$ITERLIN_CLAIMS``, else
``<repo>/_build/claims``), from which ``book/generate.py`` builds the book's claims page.
"""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from .cache import repo_root
from ..checkpoint import atomic_write_bytes
from .failures import BLOCK_RISE, EXPLODING, failures, run_label, unstable_among, unstable_note
from ..relin import fmt_K
from ..analysis.stability import STABLE_FRACTION
from .stats import Difference, num, pct, runs_of, seed_interval, sweep_difference

__all__ = [
    "Claim",
    "HOLDS",
    "NA",
    "UNDECIDED",
    "UNSTABLE",
    "STABLE_FRACTION",
    "sharpness_claim",
    "pooled_runs",
    "claims_table",
    "ClaimsTable",
    "publish_claims",
    "default_claims_dir",
    "verdict",
    "fmt_K",
    "COLUMNS",
    "KINDS",
    "CHECKS_HEADING",
    "ON_PAR",
    "on_par",
    "exceeds",
    "all_verdicts",
    "beyond",
    "divergence_row",
    "divergence_claim",
    "on_par_claim",
    "on_par_rule",
    "EXCEEDS_RULE",
    "only_k1_rows",
]

#: The verdict of a claim that this run cannot test (the runs or the data it needs are missing at
#: this scale).
NA = "n/a at this scale"
#: The verdict of a comparison whose interval is too wide to decide it (see :func:`on_par`).
UNDECIDED = "undecided"
#: The verdict of a comparison whose large-K run was unstable (diverged, its loss exploded, its
#: linear model's loss rose inside a block, or η was above 2/λ_max(θ_s)): a failure of the linear
#: model's training at that rate, not evidence about the paper's claim (:func:`~iterlin.repro.failures.unstable_runs`).
UNSTABLE = "no (unstable)"
#: The allowed values of :attr:`Claim.holds`.
HOLDS = ("yes", "no", UNSTABLE, UNDECIDED, NA)
#: The kinds of row (the paper's claims, and consistency checks that hold by construction, not evidence).
KINDS = ("claim", "check")
#: The heading of a table's consistency checks.
CHECKS_HEADING = "Consistency checks (hold by construction; not evidence for the paper's claims):"
#: The columns of a claims table, in order.
COLUMNS = ("claim", "paper", "this run", "holds", "rule")


class Claim(NamedTuple):
    """One row of a claims table (all fields are strings).

    claim: what the paper claims, in words. paper: the paper's number or statement.
    measured: what this run measured (pre-rounded). holds: one of :data:`HOLDS`.
    rule: how ``holds`` was decided (e.g. ``"|Δ| < 1 point"``), or why it is n/a.
    kind: ``"claim"`` (evidence about the paper's claim) or ``"check"``: a consistency check that
    holds by construction (two routes to one computation), listed apart and not counted as
    evidence. id: the protocol row it answers (``iterlin.experiments.protocol``), ``""`` for a
    row not yet declared there.
    """

    claim: str
    paper: str
    measured: str
    holds: str
    rule: str = ""
    kind: str = "claim"
    id: str = ""

    def asdict(self) -> dict:
        """The row as a dict for JSON, without ``id`` when it has none."""
        return {k: v for k, v in self._asdict().items() if k != "id" or v}

    def check(self) -> "Claim":
        if self.kind not in KINDS:
            raise ValueError(f"Claim.kind={self.kind!r} is not allowed: kind must be one of {KINDS}")
        for field in self._fields:
            v = getattr(self, field)
            if not isinstance(v, str):
                raise TypeError(f"Claim.{field}={v!r} is not allowed: every field must be a string")
            if "\n" in v or "\r" in v:
                raise ValueError(f"Claim.{field}={v!r} is not allowed: no newlines in a field")
        if self.holds not in HOLDS:
            raise ValueError(f"Claim.holds={self.holds!r} is not allowed: holds must be one of {HOLDS}")
        return self


def verdict(condition: bool | None, applicable: bool = True) -> str:
    """``"yes"``/``"no"`` from ``condition``; ``"n/a at this scale"`` if not applicable or None."""
    if not applicable or condition is None:
        return NA
    return "yes" if bool(condition) else "no"


def _rows(rows: Iterable[Claim]) -> list[Claim]:
    out = []
    for r in rows:
        if not isinstance(r, Claim):
            r = Claim(*r)
        out.append(r.check())
    return out


def _split(rows: list[Claim]) -> tuple[list[Claim], list[Claim]]:
    return [r for r in rows if r.kind == "claim"], [r for r in rows if r.kind == "check"]


def _fixed_width(rows: list[Claim]) -> str:
    cells = [list(COLUMNS)] + [[r.claim, r.paper, r.measured, r.holds, r.rule] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(widths))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def claims_table(rows: Iterable[Claim]) -> str:
    """A fixed-width plain-text table (columns claim, paper, this run, holds, rule).

    Column widths are the longest entry of each column; fields are left-aligned and separated by
    two spaces; a dashed line follows the header. Consistency checks (``kind="check"``) follow in a
    second table under :data:`CHECKS_HEADING`. Deterministic for given rows.
    """
    claims, checks = _split(_rows(rows))
    out = _fixed_width(claims)
    if checks:
        out += "\n\n" + CHECKS_HEADING + "\n" + _fixed_width(checks)
    return out


class ClaimsTable:
    """A claims table that renders as an HTML table in a notebook and as fixed-width text elsewhere.

    ``str(table)`` (and ``repr``) is the header line ``Claims of <name> at scale '<scale>':`` and
    :func:`claims_table`; ``_repr_html_`` is the same rows as an HTML ``<table>`` (Jupyter and the
    book show it; nbval compares the text). ``reference=True`` says it is a committed reference run's.
    """

    def __init__(self, name: str, scale: str, rows: Iterable[Claim], *, reference: bool = False):
        self.name, self.scale, self.rows, self.reference = name, scale, _rows(rows), reference

    def header(self) -> str:
        what = f"the reference run of {self.name}" if self.reference else self.name
        return f"Claims of {what} at scale {self.scale!r}:"

    def __str__(self) -> str:
        return self.header() + "\n" + claims_table(self.rows)

    __repr__ = __str__

    def verdict(self) -> "Verdict":
        """The table in one line: how many of the paper's claims hold, do not, are undecided and are
        not judged at this scale (consistency checks apart), e.g. ``Verdict of the reference run of
        fig3 at scale 'cpu': of 3 claims, 0 hold, 2 do not, 1 not judged at this scale.``"""
        claims, checks = _split(self.rows)

        def count(holds, one, many):
            n = sum(r.holds == holds for r in claims)
            return n, f"{n} {one if n == 1 else many}"

        parts = [count("yes", "holds", "hold"), count("no", "does not", "do not"), count(UNDECIDED, "undecided", "undecided"),
                 count(NA, "not judged at this scale", "not judged at this scale")]
        text = ", ".join([parts[0][1]] + [words for n, words in parts[1:] if n])
        what = f"the reference run of {self.name}" if self.reference else self.name
        line = f"Verdict of {what} at scale {self.scale!r}: of {len(claims)} claim{'s' * (len(claims) != 1)}, {text}"
        if checks:
            line += f"; consistency checks: {sum(r.holds == 'yes' for r in checks)} of {len(checks)} hold"
        return Verdict(line + ".")

    def _repr_html_(self) -> str:
        esc = html.escape

        def table(rows):
            head = "".join(f"<th style='text-align:left'>{esc(c)}</th>" for c in COLUMNS)
            body = "".join(
                "<tr>" + "".join(f"<td style='text-align:left'>{esc(c)}</td>"
                                 for c in (r.claim, r.paper, r.measured, r.holds, r.rule)) + "</tr>"
                for r in rows
            )
            return f"<table class='iterlin-claims'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

        claims, checks = _split(self.rows)
        out = f"<p><strong>{esc(self.header())}</strong></p>" + table(claims)
        if checks:
            out += f"<p><em>{esc(CHECKS_HEADING)}</em></p>" + table(checks)
        return out


class Verdict(str):
    """A claims table's one-line verdict (:meth:`ClaimsTable.verdict`): plain text, in bold in HTML."""

    __repr__ = str.__str__

    def _repr_html_(self) -> str:
        return f"<p class='iterlin-verdict'><strong>{html.escape(self)}</strong></p>"


def default_claims_dir() -> Path:
    """``$ITERLIN_CLAIMS``, else ``<repo>/_build/claims``, else ``./_build/claims``."""
    env = os.environ.get("ITERLIN_CLAIMS")
    if env:
        return Path(env).expanduser()
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "_build" / "claims"


def publish_claims(name: str, rows: Iterable[Claim], *, scale: str,
                   directory: str | os.PathLike | None = None) -> ClaimsTable:
    """Save the rows as JSON (atomically) to ``<directory>/<name>.json`` and return the table.

    The JSON is ``{"name", "scale", "rows": [{claim, paper, measured, holds, rule}, ...]}``.
    The returned :class:`ClaimsTable` is the notebook's final expression (HTML in the page; its
    ``str`` is a header line ``Claims of <name> at scale '<scale>':`` then :func:`claims_table`).
    """
    rows = _rows(rows)
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
        raise ValueError(f"name={name!r} is not allowed: a non-empty file-name-safe string")
    d = Path(directory) if directory is not None else default_claims_dir()
    doc = {"name": name, "scale": scale, "rows": [r.asdict() for r in rows]}
    data = json.dumps(doc, indent=1, ensure_ascii=False).encode()
    atomic_write_bytes(d / f"{name}.json", lambda f: f.write(data))
    return ClaimsTable(name, scale, rows)


# ------------------------------------------------------------------------------------------------
# Rows shared by every experiment: noise, on-par comparisons, divergence
# ------------------------------------------------------------------------------------------------

#: ``|Δ|`` (fraction of test accuracy) within which two runs count as "on par" where the paper gives
#: no number (Figs. 2, 4, 5); Fig. 3 uses the paper's own "under 1 point".
ON_PAR = 0.02

def on_par(diff: Difference, tol: float) -> str:
    """"On par within ``tol``" (an equivalence test): ``"yes"`` when the whole interval
    [lo, hi] lies inside (−tol, tol), ``"no"`` when it lies wholly outside (lo ≥ tol or hi ≤ −tol),
    else :data:`UNDECIDED` (the interval is wider than the claim)."""
    if not math.isfinite(diff.delta) or not math.isfinite(diff.se):
        return "no"
    if -tol < diff.lo and diff.hi < tol:
        return "yes"
    if diff.lo >= tol or diff.hi <= -tol:
        return "no"
    return UNDECIDED


def exceeds(diff: Difference) -> str:
    """"B is better than A": ``"yes"`` when the interval lies above 0, ``"no"`` when it lies below,
    else :data:`UNDECIDED` (no difference beyond noise either way)."""
    if not math.isfinite(diff.delta) or not math.isfinite(diff.se):
        return "no"
    if diff.lo > 0:
        return "yes"
    if diff.hi < 0:
        return "no"
    return UNDECIDED


def all_verdicts(verdicts: Iterable[str]) -> str:
    """One verdict for a claim over several comparisons: ``"yes"`` when every one is yes, ``"no"``
    when any is no, else :data:`UNSTABLE` when any is, else :data:`UNDECIDED` when any is;
    :data:`NA` when there are none."""
    v = list(verdicts)
    if not v:
        return NA
    for h in ("no", UNSTABLE, UNDECIDED):
        if h in v:
            return h
    return "yes"


def beyond(values, threshold: float, *, above: bool) -> str:
    """Whether a quantity measured once per seed lies above (``above=True``) or below a threshold:
    ``"yes"`` when the 95 % t interval of :func:`~iterlin.repro.stats.seed_interval` lies strictly on that side, ``"no"``
    when it lies wholly on the other side (touching the threshold counts as the other side), else
    :data:`UNDECIDED` (it straddles the threshold, or one seed gives no interval). A non-finite
    value is ``"no"``."""
    v = np.atleast_1d(np.asarray(values, np.float64))
    if not np.all(np.isfinite(v)):
        return "no"
    _, se, lo, hi = seed_interval(v)
    if not math.isfinite(se):
        return UNDECIDED
    if above:
        return "yes" if lo > threshold else "no" if hi <= threshold else UNDECIDED
    return "yes" if hi < threshold else "no" if lo >= threshold else UNDECIDED


#: The rule column of every on-par row (:func:`on_par`).
def on_par_rule(tol: float) -> str:
    return (f"on par: the 95 % t interval of Δ (seeds and test images) inside ±{num(100 * tol, 0)} pts; "
            f"'no' when wholly outside; else undecided")


#: The rule column of every better/worse row (:func:`exceeds`).
EXCEEDS_RULE = "better: the 95 % t interval of Δ (seeds and test images) excludes 0; undecided when it holds 0"


def divergence_row(bad: Iterable[str], exploded: Iterable[str] = (), rose: Iterable[str] = (),
                   jumped: Iterable[str] = ()) -> Claim:
    """The row reporting diverged runs, each described by a string (e.g. ``"K=5 at step 12"``),
    finite runs whose loss exploded (e.g. ``"K=5: training loss 2.4 → 8.2e+04 at step 100"``), and
    runs whose linear model's training loss rose inside a block (e.g. ``"K=50: 1.73 → 2.19 at step
    375 (unstable: η above 2/λ_max(θ_s) from step 300)"``), and runs with K > 1 whose network's
    training loss rose between two evaluations across a re-linearisation (``jumped``:
    :func:`iterlin.repro.failures.failures`).
    Any of them makes the row "no"."""
    bad, exploded, rose, jumped = list(bad), list(exploded), list(rose), list(jumped)
    parts = ["diverged: " + "; ".join(bad)] if bad else []
    if exploded:
        parts.append(f"loss exploded (finite, above {EXPLODING:g}× its value at step 0): " + "; ".join(exploded))
    if rose:
        parts.append(f"the linear model's training loss rose inside a block (by over {BLOCK_RISE:.0%}): "
                     + "; ".join(rose))
    if jumped:
        parts.append(f"the network's training loss rose across a re-linearisation (by over {BLOCK_RISE:.0%}): "
                     + "; ".join(jumped))
    return Claim(
        "every run stays finite (no NaN or exploding loss)", "no divergence reported",
        "; ".join(parts) if parts else "none diverged",
        verdict(not parts), "a diverged run is frozen at its last finite state and plotted with a cross; a run "
        f"whose linear model's loss rose inside a block, or whose network's loss rose across a re-linearisation, "
        f"by over {BLOCK_RISE:.0%}, is 'no'",
    )


def divergence_claim(histories: Mapping[str, Mapping], label: Callable | None = None, *,
                     prefix: bool = True) -> Claim:
    """:func:`divergence_row` of the :func:`~iterlin.repro.failures.failures` of sweep histories by panel name: each
    diverged run as ``"<panel>: <label> at step <t>"`` (the panel only when ``prefix`` and there are
    several), ``label(panel, history, i) -> str`` naming run ``i`` (default :func:`~iterlin.repro.failures.run_label`); each
    run whose loss exploded, with its first and largest value and the step of the largest; each
    run whose linear model's loss rose inside a block (and did neither of those), and each large-K
    run whose network's loss rose across a re-linearisation, with the loss before and after. Where a history
    records the sharpness (``lr_over_bound`` (R, E), :func:`iterlin.analysis.stability.sharpness_recorder`),
    each failing run says whether η was above 2/λ_max(θ_s) before it failed ("unstable: η above
    2/λ_max(θ_s) from step t") or not."""
    label = run_label if label is None else label
    found: dict[str, list[str]] = {"diverged": [], "exploded": [], "rose": [], "jumped": []}
    for panel, h in histories.items():
        where = f"{panel}: " if prefix and len(histories) > 1 else ""
        unstable = unstable_note(h)
        events = failures(h)
        worse = {f.run for f in events if f.kind in ("diverged", "exploded")}
        for f in events:
            if f.kind == "rose" and f.run in worse:
                continue  # reported as the worse failure
            found[f.kind].append(f.describe(f"{where}{label(panel, h, f.run)}", headed=True)
                                 + unstable(f.run, f.step))
    return divergence_row(found["diverged"], found["exploded"], found["rose"], found["jumped"])


def sharpness_claim(h: Mapping, fraction: float = STABLE_FRACTION, *, panel: str = "") -> Claim:
    """Whether η stayed under ``fraction`` of the linear model's bound 2/λ_max(θ_s) at every point
    the history records it (``lr_over_bound`` (R, E), :func:`iterlin.analysis.stability.sharpness_recorder`)
    along every run with K > 1, whose linear model is trained for K steps (K = 1 re-linearises
    every step: its record, the network's own sharpness, is reported beside it, not judged). The
    largest η·λ_max/2 of each group with its run (named by ``h["label"]`` (R,) where given, else by
    its K) and step; n/a without a record of a K > 1 run.
    ``panel``: the claim starts ``"<panel>: "`` (a figure with several sweeps, e.g. Fig. 2's)."""
    ratio = np.asarray(h.get("lr_over_bound", ()), np.float64)
    claim = (f"{panel}: " if panel else "") + (
        f"the linear model stays stable: η under {fraction:.2g} of 2/λ_max(θ_s) along every large-K run")
    rule = (f"'yes' when η·λ_max/2 ≤ {fraction:.2g} at every record of every run with K > 1 (λ_max of the linear "
            "model's Hessian on a fixed training subset, by power iteration); above 1 the linearisation diverges")
    K = np.asarray(h["K"], np.float64)
    if ratio.ndim != 2 or not np.isfinite(ratio[K > 1]).any():
        return Claim(claim, "not measured in the paper", "no sharpness record", NA, rule)
    steps = np.asarray(h["step"])
    parts = []
    for what, sel in (("K>1", K > 1), ("K=1 (not judged)", K == 1)):
        r = np.where(sel[:, None] & np.isfinite(ratio), ratio, -np.inf)
        if not np.isfinite(r).any():
            continue
        i, e = np.unravel_index(int(np.argmax(r)), r.shape)
        run = str(h["label"][i]) if "label" in h else f"K={fmt_K(K[i])}"
        parts.append(f"{what}: largest η·λ_max/2 {ratio[i, e]:.2f} ({run}, step {int(steps[e])})")
    worst = float(np.nanmax(ratio[K > 1]))
    return Claim(claim, "not measured in the paper (its rate is ~500× under the bound at θ_0)",
                 "; ".join(parts), verdict(worst <= fraction), rule)


def pooled_runs(histories: Sequence[Mapping]) -> dict:
    """Several sweep histories that share their evaluation points as one, for
    :func:`sharpness_claim` over every run of a figure: ``K`` (ΣR,), ``step`` (E,) of the first, and
    ``lr_over_bound`` (ΣR, E) when every one recorded it."""
    out = {"K": np.concatenate([np.asarray(h["K"], np.float64) for h in histories]),
           "step": np.asarray(histories[0]["step"])}
    if all("lr_over_bound" in h for h in histories):
        out["lr_over_bound"] = np.concatenate([np.asarray(h["lr_over_bound"], np.float64) for h in histories])
    return out


def on_par_claim(claim: str, paper: str, h: Mapping, *, n_test: int, tol: float = ON_PAR,
                 metric: str = "net_test_acc") -> Claim:
    """K = 1 against the largest finite K > 1 of a sweep history, at the last evaluation point.

    The shared rule: :func:`~iterlin.repro.stats.sweep_difference` (over the history's seeds, paired on the test images
    when the history records per-image correctness), then :func:`on_par` within ``tol``. A
    diverged K = 1 run is a "no"; a large-K run whose linear model was unstable
    (:func:`~iterlin.repro.failures.unstable_runs`) makes the row :data:`UNSTABLE`, with what happened and when.
    """
    K = np.asarray(h["K"], np.float64)
    acc = np.asarray(h[metric], np.float64)[:, -1]
    i1 = runs_of(h, 1)
    large = np.unique(K[(K > 1) & np.isfinite(K)])
    if large.size == 0:
        return Claim(claim, paper, f"K=1: {pct(acc[i1].mean())} (no finite K > 1 run)", verdict(None),
                     "needs a run with finite K > 1")
    Kj = float(large[-1])
    j = runs_of(h, Kj)
    relin = int(np.asarray(h["n_relin"])[j[0], -1])
    d = sweep_difference(h, i1, j, n_test=n_test, metric=metric)
    unstable = unstable_among(h, j)
    measured = (f"K=1: {pct(acc[i1].mean())}; K={fmt_K(Kj)} ({relin} re-linearisations): {pct(acc[j].mean())}; "
                + d.describe() + ("; unstable: " + "; ".join(unstable) if unstable else ""))
    if bool(np.asarray(h["diverged"])[i1].any()):
        holds = "no"
    else:
        holds = UNSTABLE if unstable else on_par(d, tol)
    return Claim(claim, paper, measured, holds, on_par_rule(tol) + "; a diverged K = 1 run is 'no'; "
                 f"'{UNSTABLE}' when a large-K run's linear model was unstable (diverged, its loss exploded or rose "
                 f"inside a block by over {BLOCK_RISE:.0%}, or η above 2/λ_max(θ_s))")


def only_k1_rows(name: str, history: Mapping) -> list[Claim] | None:
    """The claims rows when a sweep ran no K > 1 (nothing to compare with K = 1), else None."""
    if np.asarray(history["K"], np.float64).max() > 1:
        return None
    return [Claim(f"{name}: large K against K = 1", "see the notebook", "only K = 1 was run", verdict(None),
                  "needs a run with K > 1"), divergence_claim({"runs": history})]
