"""The claims cell: the paper's claim, the paper's number, what this run measured, does it hold.

Each notebook ends with one table built from :class:`Claim` rows::

    rows = [
        Claim("large K ends on par with K = 1", paper="82.3 % vs 81.4 %",
              measured=f"{pct(a)} vs {pct(b)}", holds=verdict(abs(a - b) < 0.01),
              rule="|Δ| < 1 point"),
    ]
    print(publish_claims("fig3", rows, scale="smoke"))

* ``measured`` and ``paper`` are strings, rounded by the caller (:func:`pct`, :func:`num`) so that
  the printed table is stable across reruns (nbval compares it).
* ``holds`` is ``"yes"``, ``"no"`` or ``"n/a at this scale"`` (:func:`verdict`), decided by the
  ``rule`` written in the row: a claim about an absolute number of the paper (82.3 %) cannot hold at
  the smoke scale's few images and steps, and says so instead of "no".
* A diverged run (a NaN or exploding loss, see :func:`iterlin.training.commit_step`) is a result:
  say so (:func:`divergence_claim`) and let the rule decide (a diverged run does not match K = 1).

:func:`publish_claims` prints nothing itself: it returns the fixed-width table and saves the rows
atomically as JSON to ``<claims dir>/<name>.json`` (``$ITERLIN_CLAIMS``, else
``<repo>/_build/claims``), from which :func:`collect_claims` builds the book's claims page in
Markdown.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

import numpy as np

from .cache import repo_root
from .checkpoint import atomic_write_bytes

__all__ = [
    "Claim",
    "HOLDS",
    "NA",
    "claims_table",
    "claims_markdown",
    "publish_claims",
    "collect_claims",
    "default_claims_dir",
    "verdict",
    "pct",
    "num",
    "fmt_K",
    "COLUMNS",
    "ON_PAR",
    "two_se",
    "beyond_noise",
    "divergence_row",
    "divergence_claim",
    "on_par_claim",
    "only_k1_rows",
]

NA = "n/a at this scale"
#: The allowed values of :attr:`Claim.holds`.
HOLDS = ("yes", "no", NA)
#: The columns of a claims table, in order.
COLUMNS = ("claim", "paper", "this run", "holds", "rule")


class Claim(NamedTuple):
    """One row of a claims table (all fields are strings).

    claim: what the paper claims, in words. paper: the paper's number or statement.
    measured: what this run measured (pre-rounded). holds: one of :data:`HOLDS`.
    rule: how ``holds`` was decided (e.g. ``"|Δ| < 1 point"``), or why it is n/a.
    """

    claim: str
    paper: str
    measured: str
    holds: str
    rule: str = ""

    def check(self) -> "Claim":
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


def pct(x: float, digits: int = 1) -> str:
    """A fraction as a percentage, rounded: ``pct(0.41234) == "41.2 %"``; NaN → ``"nan"``."""
    x = float(x)
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    v = round(100.0 * x, digits)
    return f"{v + 0.0:.{digits}f} %"  # + 0.0: never print "-0.0"


def num(x: float, digits: int = 2) -> str:
    """A number rounded to ``digits`` decimals (``-0.00`` printed as ``0.00``); NaN → ``"nan"``."""
    x = float(x)
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return f"{round(x, digits) + 0.0:.{digits}f}"


def fmt_K(K: float) -> str:
    """``1``, ``100``, ``5e6``, ``∞``: K as the paper writes it."""
    K = float(K)
    if math.isinf(K):
        return "∞"
    if K >= 10_000:
        mant, exp = f"{K:.0e}".split("e")
        return f"{mant}e{int(exp)}"
    return str(int(K))


def _rows(rows: Iterable[Claim]) -> list[Claim]:
    out = []
    for r in rows:
        if not isinstance(r, Claim):
            r = Claim(*r)
        out.append(r.check())
    return out


def claims_table(rows: Iterable[Claim]) -> str:
    """A fixed-width plain-text table (columns claim, paper, this run, holds, rule).

    Column widths are the longest entry of each column; fields are left-aligned and separated by
    two spaces; a dashed line follows the header. Deterministic for given rows.
    """
    rows = _rows(rows)
    cells = [list(COLUMNS)] + [[r.claim, r.paper, r.measured, r.holds, r.rule] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(widths))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def claims_markdown(rows: Iterable[Claim]) -> str:
    """The same rows as a Markdown table (``|`` inside a cell escaped as ``\\|``)."""
    rows = _rows(rows)
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [c.replace("|", "\\|") for c in (r.claim, r.paper, r.measured, r.holds, r.rule)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def default_claims_dir() -> Path:
    """``$ITERLIN_CLAIMS``, else ``<repo>/_build/claims``, else ``./_build/claims``."""
    env = os.environ.get("ITERLIN_CLAIMS")
    if env:
        return Path(env).expanduser()
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "_build" / "claims"


def publish_claims(name: str, rows: Iterable[Claim], *, scale: str, directory: str | os.PathLike | None = None) -> str:
    """Save the rows as JSON (atomically) to ``<directory>/<name>.json`` and return the table.

    The JSON is ``{"name", "scale", "rows": [{claim, paper, measured, holds, rule}, ...]}``.
    The returned string is a header line ``Claims of <name> at scale '<scale>':`` then
    :func:`claims_table`; print it in the notebook's final cell.
    """
    rows = _rows(rows)
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
        raise ValueError(f"name={name!r} is not allowed: a non-empty file-name-safe string")
    d = Path(directory) if directory is not None else default_claims_dir()
    doc = {"name": name, "scale": scale, "rows": [r._asdict() for r in rows]}
    data = json.dumps(doc, indent=1, ensure_ascii=False).encode()
    atomic_write_bytes(d / f"{name}.json", lambda f: f.write(data))
    return f"Claims of {name} at scale {scale!r}:\n" + claims_table(rows)


def collect_claims(directory: str | os.PathLike | None = None) -> str:
    """Markdown of every ``<name>.json`` in ``directory`` (sorted by name): a section per notebook.

    Unreadable files are listed as such rather than failing the book build.
    """
    d = Path(directory) if directory is not None else default_claims_dir()
    parts = []
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            rows = [Claim(**r) for r in doc["rows"]]
            body = claims_markdown(rows)
            title = f"## {doc['name']} (scale: {doc['scale']})"
        except (OSError, ValueError, KeyError, TypeError) as e:
            title, body = f"## {path.stem}", f"*(claims file {path.name} unreadable: {type(e).__name__})*"
        parts.append(f"{title}\n\n{body}\n")
    if not parts:
        return "*(no claims recorded yet: execute the notebooks first)*\n"
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------
# Rows shared by every experiment: noise, on-par comparisons, divergence
# ------------------------------------------------------------------------------------------------

#: |Δ| (fraction of test accuracy) below which two runs count as "on par" where the paper gives
#: no number (Figs. 2, 4, 5); Fig. 3 uses the paper's own "under 1 point".
ON_PAR = 0.02


def two_se(p: float, n: int, *, diff: bool = False) -> float:
    """Two standard errors of an accuracy p measured on n test images (binomial), or, with
    ``diff=True``, of the difference of two independent such accuracies near p.

    2·sqrt(c·p(1 − p)/n), c = 2 for a difference, else 1; p is clipped to [0.05, 0.95] so that a
    run at 0 % or 100 % does not claim zero noise.
    """
    p = min(max(float(p), 0.05), 0.95)
    c = 2.0 if diff else 1.0
    return 2.0 * math.sqrt(c * p * (1.0 - p) / max(int(n), 1))


def beyond_noise(a: float, b: float, n: int) -> bool:
    """True when |a − b| exceeds two standard errors of the difference of two accuracies on n images."""
    return n > 0 and abs(a - b) > two_se(0.5 * (a + b), n, diff=True)


def _fmt_lr(v: float) -> str:
    return f"{float(v):g}"


def divergence_row(bad: Iterable[str]) -> Claim:
    """The row reporting diverged runs, each described by a string (e.g. ``"K=5 at step 12"``)."""
    bad = list(bad)
    return Claim(
        "every run stays finite (no NaN or exploding loss)", "no divergence reported",
        "none diverged" if not bad else "diverged: " + "; ".join(bad),
        verdict(not bad), "a diverged run is frozen at its last finite state and plotted with a cross",
    )


def divergence_claim(histories: Mapping[str, Mapping]) -> Claim:
    """:func:`divergence_row` for sweep histories by panel name (runs labelled by ``K`` and ``lr``)."""
    bad = []
    for panel, h in histories.items():
        div, at = np.atleast_1d(h["diverged"]), np.atleast_1d(h["diverged_step"])
        for i in np.flatnonzero(div):
            where = f"{panel}: " if len(histories) > 1 else ""
            lr = f", lr={_fmt_lr(h['lr'][i])}" if "lr" in h else ""
            bad.append(f"{where}K={fmt_K(h['K'][i])}{lr} at step {int(at[i])}")
    return divergence_row(bad)


def on_par_claim(claim: str, paper: str, h: Mapping, *, n_test: int, tol: float = ON_PAR,
                 metric: str = "net_test_acc") -> Claim:
    """K = 1 against the largest finite K > 1 of a sweep history, at the last evaluation point.

    Holds when |Δ| < ``tol`` and neither run diverged; decided only when two standard errors of
    the difference on ``n_test`` test images (:func:`two_se`) are below ``tol``, so that a
    verdict is never a coin toss of the test set. A diverged run is a "no".
    """
    K = np.asarray(h["K"], np.float64)
    acc = np.asarray(h[metric], np.float64)[:, -1]
    i1 = int(np.flatnonzero(K == 1)[0])
    large = np.flatnonzero((K > 1) & np.isfinite(K))
    if large.size == 0:
        return Claim(claim, paper, f"K=1: {pct(acc[i1])} (no finite K > 1 run)", verdict(None),
                     "needs a run with finite K > 1")
    j = int(large[-1])
    relin = int(np.asarray(h["n_relin"])[j, -1])
    delta = acc[j] - acc[i1]
    diverged = bool(np.asarray(h["diverged"])[[i1, j]].any())
    noise = two_se(acc[i1], n_test, diff=True)
    measured = (f"K=1: {pct(acc[i1])}; K={fmt_K(K[j])} ({relin} re-linearisations): {pct(acc[j])} "
                f"(Δ {num(100 * delta, 1)} pts)")
    holds = "no" if diverged else verdict(abs(delta) < tol, applicable=noise < tol)
    return Claim(
        claim, paper, measured, holds,
        f"|Δ| < {num(100 * tol, 0)} pts at the last step, neither diverged; decided only when 2 s.e. of Δ "
        f"({num(100 * noise, 1)} pts on {n_test} test images) < {num(100 * tol, 0)} pts",
    )


def only_k1_rows(name: str, history: Mapping) -> list[Claim] | None:
    """The claims rows when a sweep ran no K > 1 (nothing to compare with K = 1), else None."""
    if np.asarray(history["K"], np.float64).max() > 1:
        return None
    return [Claim(f"{name}: large K against K = 1", "see the notebook", "only K = 1 was run", verdict(None),
                  "needs a run with K > 1"), divergence_claim({"runs": history})]
