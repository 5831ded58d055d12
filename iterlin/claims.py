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
* ``holds`` is ``"yes"``, ``"no"``, ``"undecided"`` or ``"n/a at this scale"``, decided by the
  ``rule`` written in the row: a claim about an absolute number of the paper (82.3 %) cannot hold at
  the smoke scale's few images and steps, and says so instead of "no".
* Every comparison of two accuracies goes through ONE noise rule (:func:`difference`, then
  :func:`on_par` or :func:`exceeds`): a 95 % Student's t interval around the difference Δ, whose
  standard error combines the seed-to-seed spread and the test set's noise (paired on the same test
  images when the runs' predictions are known), with the Welch–Satterthwaite degrees of freedom of
  that combination (few seeds: wide; :class:`Difference`). "Better" holds when the interval excludes 0; "on par within t"
  holds when the interval lies inside ±t, fails when it lies wholly outside, and is otherwise
  ``"undecided"`` (an equivalence test: not seeing a difference is not evidence of none).
* A diverged run (a NaN or exploding loss, see :func:`iterlin.training.commit_step`) is a result:
  say so (:func:`divergence_claim`) and let the rule decide (a diverged run does not match K = 1).

:func:`publish_claims` prints nothing itself: it returns the fixed-width table and saves the rows
atomically as JSON to ``<claims dir>/<name>.json`` (``$ITERLIN_CLAIMS``, else
``<repo>/_build/claims``), from which :func:`collect_claims` builds the book's claims page in
Markdown.
"""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple

import numpy as np

from .cache import repo_root
from .checkpoint import atomic_write_bytes
from .relin import fmt_K
from .stability import STABLE_FRACTION, block_loss_rise, first_unstable_step

__all__ = [
    "Claim",
    "HOLDS",
    "NA",
    "UNDECIDED",
    "UNSTABLE",
    "STABLE_FRACTION",
    "unstable_runs",
    "unstable_among",
    "Failure",
    "failures",
    "failed_runs",
    "run_seeds",
    "sharpness_claim",
    "claims_table",
    "ClaimsTable",
    "claims_markdown",
    "publish_claims",
    "collect_claims",
    "default_claims_dir",
    "verdict",
    "pct",
    "num",
    "fmt_K",
    "COLUMNS",
    "KINDS",
    "CHECKS_HEADING",
    "ON_PAR",
    "Difference",
    "difference",
    "on_par",
    "exceeds",
    "seed_interval",
    "t_quantile",
    "all_verdicts",
    "final_difference",
    "beyond",
    "two_se",
    "beyond_noise",
    "divergence_row",
    "divergence_claim",
    "EXPLODING",
    "BLOCK_RISE",
    "exploded_runs",
    "run_label",
    "on_par_claim",
    "on_par_rule",
    "EXCEEDS_RULE",
    "runs_of",
    "sweep_difference",
    "only_k1_rows",
]

#: The verdict of a claim that this run cannot test (the runs or the data it needs are missing at
#: this scale).
NA = "n/a at this scale"
#: The verdict of a comparison whose interval is too wide to decide it (see :func:`on_par`).
UNDECIDED = "undecided"
#: The verdict of a comparison whose large-K run was unstable (diverged, its loss exploded, its
#: linear model's loss rose inside a block, or η was above 2/λ_max(θ_s)): a failure of the linear
#: model's training at that rate, not evidence about the paper's claim (:func:`unstable_runs`).
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
    evidence.
    """

    claim: str
    paper: str
    measured: str
    holds: str
    rule: str = ""
    kind: str = "claim"

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


def _markdown(rows: list[Claim]) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [c.replace("|", "\\|") for c in (r.claim, r.paper, r.measured, r.holds, r.rule)]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def claims_markdown(rows: Iterable[Claim]) -> str:
    """The same rows as a Markdown table (``|`` inside a cell escaped as ``\\|``); consistency checks
    in a second table under :data:`CHECKS_HEADING`."""
    claims, checks = _split(_rows(rows))
    out = _markdown(claims)
    if checks:
        out += "\n\n" + CHECKS_HEADING + "\n\n" + _markdown(checks)
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
    doc = {"name": name, "scale": scale, "rows": [r._asdict() for r in rows]}
    data = json.dumps(doc, indent=1, ensure_ascii=False).encode()
    atomic_write_bytes(d / f"{name}.json", lambda f: f.write(data))
    return ClaimsTable(name, scale, rows)


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

#: ``|Δ|`` (fraction of test accuracy) within which two runs count as "on par" where the paper gives
#: no number (Figs. 2, 4, 5); Fig. 3 uses the paper's own "under 1 point".
ON_PAR = 0.02


class Difference(NamedTuple):
    """Δ = mean over seeds of (accuracy of B − accuracy of A), and its standard error.

    ``se`` combines the seed-to-seed spread of the per-seed differences (v_seed = var/S, when S ≥ 2)
    and the test set's sampling noise (v_test: paired, the variance over test images of the
    per-image difference in correctness, averaged over seeds, / n; unpaired, two independent
    binomials). ``df``: the degrees of freedom of se², by Welch–Satterthwaite with the seed term's
    S − 1 and the test term's ∞: df = (v_seed + v_test)² / (v_seed²/(S − 1)) (∞ when v_seed = 0);
    ``None`` when they are unknown, for one seed (the seed term cannot be estimated, and
    :func:`difference` leaves it out) or a Difference built by hand without them.
    ``lo``/``hi``: Δ ∓ q·se with q = :attr:`quantile`: the 0.975 quantile of Student's t with
    ``df`` degrees of freedom (a 95 % interval; t(1) = 12.7, t(∞) = 1.96), or 2 when df is None.
    """

    delta: float
    se: float
    n_seeds: int
    n_test: int
    paired: bool
    df: float | None = None

    @property
    def quantile(self) -> float:
        """The interval's half-width in standard errors, t_{0.975}(df) (2 when ``df`` is None)."""
        return 2.0 if self.df is None else t_quantile(self.df)

    @property
    def lo(self) -> float:
        return self.delta - self.quantile * self.se

    @property
    def hi(self) -> float:
        return self.delta + self.quantile * self.se

    def interval_name(self) -> str:
        """``95 % t interval`` (``df`` known) or ``2 s.e. interval`` (one seed: test noise only)."""
        return "2 s.e. interval" if self.df is None else "95 % t interval"

    def describe(self) -> str:
        """``Δ +0.4 pts, 95 % t interval [−1.2, +2.0] (3 seeds, 932 paired test images)``; with one
        seed ``…, 2 s.e. interval […] (1 seed: test noise only, …)``."""
        return (f"Δ {_signed(100 * self.delta)} pts, {self.interval_name()} [{_signed(100 * self.lo)}, "
                f"{_signed(100 * self.hi)}] ({self.counts()})")

    def short(self) -> str:
        """``Δ +0.4 [−1.2, +2.0]``: Δ and its interval (:meth:`interval_name`) in points, for rows
        that list many differences (:meth:`counts` then goes once into the rule)."""
        return f"Δ {_signed(100 * self.delta)} [{_signed(100 * self.lo)}, {_signed(100 * self.hi)}]"

    def counts(self) -> str:
        """``3 seeds, 932 paired test images``: what the interval was estimated from."""
        kind = "paired" if self.paired else "unpaired"
        seeds = f"{self.n_seeds} seed{'s' if self.n_seeds != 1 else ''}"
        if self.n_seeds == 1 and self.df is None:
            seeds += ": test noise only, no seed spread"
        return f"{seeds}, {self.n_test} {kind} test images"


def t_quantile(df: float, p: float = 0.975) -> float:
    """The ``p`` quantile of Student's t with ``df`` > 0 degrees of freedom (the normal's for ∞)."""
    from scipy import stats

    df = float(df)
    return float(stats.norm.ppf(p) if math.isinf(df) else stats.t.ppf(p, df))


def _signed(x: float) -> str:
    return ("+" if x > 0 and round(x, 1) != 0 else "") + num(x, 1)


def difference(acc_a, acc_b, *, n_test: int, correct_a=None, correct_b=None, test_var: float | None = None) -> Difference:
    """The shared noise model of a comparison of B against A (see :class:`Difference`).

    Args:
      acc_a, acc_b: (S,) accuracies of A and B, one per seed (seed s of A paired with seed s of B:
        same initialisation and batches), or scalars for one seed.
      n_test: test images each accuracy was measured on (n > 0).
      correct_a, correct_b: optional (S, n_test) booleans, whether each run got each test image
        right; given both, the test noise is that of a paired comparison on the same images,
        max(Var_i[mean_s(c_b − c_a)]/n, 3/n²) (3/n²: the rule of three, so that runs agreeing on
        every image of a small test set are not called noiseless), which is far tighter than two independent binomials
        (2·p(1 − p)/n, p clipped to [0.05, 0.95]) when the runs agree on most images.

      test_var: the test-set variance of Δ when the caller knows it better (e.g. a difference of
        two gains, four accuracies: Fig. 5); replaces both formulas above.

    The seed term is Var_s(Δ_s)/S (sample variance, S ≥ 2), and the interval is Student's t with
    the Welch–Satterthwaite df of seed + test variance (:class:`Difference`). With one seed the seed
    term cannot be estimated: it is 0 and the interval is ±2 s.e. of the test noise alone, which
    :meth:`Difference.describe` states (``1 seed: test noise only``).
    """
    a = np.atleast_1d(np.asarray(acc_a, np.float64))
    b = np.atleast_1d(np.asarray(acc_b, np.float64))
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"acc_a and acc_b of shapes {a.shape} and {b.shape} are not allowed: one accuracy per seed each")
    n = int(n_test)
    if n <= 0:
        raise ValueError(f"n_test={n_test!r} is not allowed: n_test must be a positive number of test images")
    d = b - a
    S = d.size
    seed_var = float(np.var(d, ddof=1)) / S if S > 1 else 0.0
    paired = correct_a is not None and correct_b is not None and test_var is None
    if test_var is not None:
        test_var = float(test_var)
    elif paired:
        ca = np.asarray(correct_a, np.float64).reshape(S, -1)
        cb = np.asarray(correct_b, np.float64).reshape(S, -1)
        per_image = (cb - ca).mean(axis=0)
        m = per_image.size
        # at least the variance of 3 discordant images in m (the rule of three's 95 % bound when
        # none were seen): runs that agree on every image of a small test set still carry its noise
        test_var = max(float(np.var(per_image, ddof=1)) / m if m > 1 else 0.0, 3.0 / m**2)
    else:
        p = min(max(float(np.mean(np.concatenate([a, b]))), 0.05), 0.95)
        test_var = 2.0 * p * (1.0 - p) / n
    if S == 1:
        df = None
    elif seed_var > 0:
        df = (seed_var + test_var) ** 2 / (seed_var**2 / (S - 1))
    else:
        df = math.inf
    return Difference(float(d.mean()), math.sqrt(seed_var + test_var), S, n, paired, df)


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


def final_difference(results: Mapping, ia, ib) -> Difference:
    """:func:`difference` of runs ``ib`` against runs ``ia`` (index arrays, paired by seed) of the
    final test accuracies ``results["final_test_acc"]`` (R,), paired on the test images when
    ``results["final_test_correct"]`` (R, n_test) is recorded
    (:func:`iterlin.experiments._common.trained_final`); ``results["n_test"]`` test images."""
    return _runs_difference(np.asarray(results["final_test_acc"], np.float64), results.get("final_test_correct"),
                            ia, ib, n_test=int(results["n_test"]))


def _runs_difference(acc, correct, ia, ib, *, n_test: int) -> Difference:
    """:func:`difference` of runs ``ib`` against runs ``ia`` (index arrays, paired by seed) of the
    accuracies ``acc`` (R,), paired on the test images when ``correct`` (R, n_test) is given."""
    ia, ib = np.atleast_1d(ia), np.atleast_1d(ib)
    pair = {} if correct is None else {"correct_a": np.asarray(correct)[ia], "correct_b": np.asarray(correct)[ib]}
    return difference(acc[ia], acc[ib], n_test=n_test, **pair)


def seed_interval(values) -> tuple[float, float, float, float]:
    """``(mean, se, lo, hi)`` over seeds of (S,) values (a ratio, a distance, one per seed): the
    mean, its standard error std(ddof=1)/√S and the 95 % Student's t interval
    [mean − q se, mean + q se], q = t_{0.975}(S − 1) (:func:`t_quantile`; 12.7 for two seeds);
    se, lo and hi are NaN for one seed (no spread to estimate)."""
    v = np.atleast_1d(np.asarray(values, np.float64))
    m = float(v.mean())
    if v.size < 2:
        return m, math.nan, math.nan, math.nan
    se = float(np.std(v, ddof=1) / math.sqrt(v.size))
    q = t_quantile(v.size - 1)
    return m, se, m - q * se, m + q * se


def beyond(values, threshold: float, *, above: bool) -> str:
    """Whether a quantity measured once per seed lies above (``above=True``) or below a threshold:
    ``"yes"`` when the 95 % t interval of :func:`seed_interval` lies strictly on that side, ``"no"``
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


def two_se(p: float, n: int, *, diff: bool = False) -> float:
    """Two binomial standard errors of an accuracy p measured on n test images, or, with
    ``diff=True``, of the difference of two independent such accuracies near p (p clipped to
    [0.05, 0.95]); for a single accuracy's noise band. Comparisons use :func:`difference`."""
    p = min(max(float(p), 0.05), 0.95)
    c = 2.0 if diff else 1.0
    return 2.0 * math.sqrt(c * p * (1.0 - p) / max(int(n), 1))


def beyond_noise(a: float, b: float, n: int) -> bool:
    """True when ``|a − b|`` exceeds two standard errors of the difference of two accuracies on n images."""
    return n > 0 and abs(a - b) > two_se(0.5 * (a + b), n, diff=True)


def _fmt_lr(v: float) -> str:
    return f"{float(v):g}"


#: A run whose training loss (``net_train_loss`` of its history) rises above this many times its value
#: at step 0 has an exploding loss although it stayed finite (:func:`divergence_claim`): the guard of
#: :func:`iterlin.training.commit_step` stops only NaN, ±∞ and losses near the float range.
EXPLODING = 10.0


#: The relative rise of the linear model's training loss inside one linearisation block beyond
#: which the block counts as unstable (:func:`iterlin.stability.block_loss_rise`): that loss is
#: convex in θ, so a rise beyond SGD's noise means the step was too large for that linearisation.
BLOCK_RISE = 0.1


def divergence_row(bad: Iterable[str], exploded: Iterable[str] = (), rose: Iterable[str] = (),
                   jumped: Iterable[str] = ()) -> Claim:
    """The row reporting diverged runs, each described by a string (e.g. ``"K=5 at step 12"``),
    finite runs whose loss exploded (e.g. ``"K=5: training loss 2.4 → 8.2e+04 at step 100"``), and
    runs whose linear model's training loss rose inside a block (e.g. ``"K=50: 1.73 → 2.19 at step
    375 (unstable: η above 2/λ_max(θ_s) from step 300)"``), and runs with K > 1 whose network's
    training loss rose between two evaluations (``jumped``: where no evaluation falls inside a block).
    Any of them makes the row "no"."""
    bad, exploded, rose, jumped = list(bad), list(exploded), list(rose), list(jumped)
    parts = ["diverged: " + "; ".join(bad)] if bad else []
    if exploded:
        parts.append(f"loss exploded (finite, above {EXPLODING:g}× its value at step 0): " + "; ".join(exploded))
    if rose:
        parts.append(f"the linear model's training loss rose inside a block (by over {BLOCK_RISE:.0%}): "
                     + "; ".join(rose))
    if jumped:
        parts.append(f"the training loss of a large-K run rose between evaluations (by over {BLOCK_RISE:.0%}, "
                     "across re-linearisations): " + "; ".join(jumped))
    return Claim(
        "every run stays finite (no NaN or exploding loss)", "no divergence reported",
        "; ".join(parts) if parts else "none diverged",
        verdict(not parts), "a diverged run is frozen at its last finite state and plotted with a cross; a run "
        f"whose linear model's loss rose inside a block, or a large-K run whose loss rose between evaluations, "
        f"by over {BLOCK_RISE:.0%}, is 'no'",
    )


def run_label(panel: str, h: Mapping, i: int) -> str:
    """The default name of run ``i`` of a sweep history in :func:`divergence_claim`: ``K=…`` and,
    when the history has one, ``lr=…``."""
    lr = f", lr={_fmt_lr(h['lr'][i])}" if "lr" in h else ""
    return f"K={fmt_K(h['K'][i])}{lr}"


def _loss_peaks(h: Mapping):
    """``(first, peak, at)``, each (R,): each run's ``net_train_loss`` at the first evaluation, its
    largest finite value and that value's evaluation index; None without a training loss recorded
    at two points or more."""
    loss = np.asarray(h.get("net_train_loss", np.zeros((0, 0))), np.float64)
    if loss.ndim != 2 or loss.shape[0] != np.size(h["diverged"]) or loss.shape[1] < 2:
        return None
    finite = np.where(np.isfinite(loss), loss, -np.inf)
    at = np.argmax(finite, axis=1)
    return loss[:, 0], finite[np.arange(loss.shape[0]), at], at


def exploded_runs(h: Mapping) -> np.ndarray:
    """(R,) bool: the runs of a sweep history that did not diverge but whose ``net_train_loss`` (R, E)
    rose above :data:`EXPLODING` times its value at the first evaluation (all False without a
    training loss recorded at two points or more)."""
    div = np.atleast_1d(np.asarray(h["diverged"], bool))
    peaks = _loss_peaks(h)
    if peaks is None:
        return np.zeros_like(div)
    first, peak, _ = peaks
    return ~div & (peak > EXPLODING * np.abs(first))


class Failure(NamedTuple):
    """One way run ``run`` of a sweep history failed (:func:`failures`)."""

    run: int
    kind: str  #: "diverged", "exploded", "rose" (inside a block) or "jumped" (between evaluations)
    step: int  #: the step of the divergence, of the loss's peak, or of the top of the rise
    low: float = math.nan  #: the loss before (NaN for "diverged")
    high: float = math.nan  #: the loss at ``step`` (NaN for "diverged")

    def describe(self, name: str, *, headed: bool = False) -> str:
        """``name`` (the run) and what happened: the step, and the losses where there are some;
        ``headed``: under a heading that names the kind (:func:`divergence_row`), so without it."""
        if self.kind == "diverged":
            return f"{name} at step {self.step}" if headed else f"{name} diverged at step {self.step}"
        losses = f"{self.low:.3g} → {self.high:.3g} at step {self.step}"
        if self.kind == "exploded":
            return f"{name}: training loss {losses}"
        if headed:
            return f"{name}: {losses}"
        what = "the linear model's loss rose inside a block" if self.kind == "rose" else "the loss rose between evaluations"
        return f"{name}: {what}, {losses}"


def failures(h: Mapping) -> list[Failure]:
    """Every failure of every run of a sweep history, by run: it diverged (``diverged`` /
    ``diverged_step``); it stayed finite but its ``net_train_loss`` rose above :data:`EXPLODING`
    times its value at the first evaluation ("exploded": its first and largest value, at the
    largest's step); its linear model's training loss (``lin_train_loss``, blocks by ``n_relin``)
    rose inside a block by over :data:`BLOCK_RISE` ("rose": :func:`iterlin.stability.block_loss_rise`);
    and, for K > 1 runs with none of these, its ``net_train_loss`` rose by over :data:`BLOCK_RISE`
    between two evaluations ("jumped": where no evaluation falls inside a block)."""
    div, at = np.atleast_1d(np.asarray(h["diverged"], bool)), np.atleast_1d(h["diverged_step"])
    out = [Failure(int(i), "diverged", int(at[i])) for i in np.flatnonzero(div)]
    boom = exploded_runs(h)
    if boom.any():
        first, peak, at_peak = _loss_peaks(h)
        steps = np.asarray(h["step"])
        out += [Failure(int(i), "exploded", int(steps[at_peak[i]]), float(first[i]), float(peak[i]))
                for i in np.flatnonzero(boom)]
    risen = _block_rises(h)
    done = div | boom
    if risen is not None:
        up, low, peak, t_up = risen
        out += [Failure(int(i), "rose", int(t_up[i]), float(low[i]), float(peak[i])) for i in np.flatnonzero(up)]
        done = done | up
    out += [Failure(i, "jumped", t, low, peak) for i, low, peak, t in _net_rises(h, done)]
    return sorted(out, key=lambda f: f.run)


def divergence_claim(histories: Mapping[str, Mapping], label: Callable | None = None, *,
                     prefix: bool = True) -> Claim:
    """:func:`divergence_row` of the :func:`failures` of sweep histories by panel name: each
    diverged run as ``"<panel>: <label> at step <t>"`` (the panel only when ``prefix`` and there are
    several), ``label(panel, history, i) -> str`` naming run ``i`` (default :func:`run_label`); each
    run whose loss exploded, with its first and largest value and the step of the largest; each
    run whose linear model's loss rose inside a block (and did neither of those), and each large-K
    run whose loss rose between evaluations, with the loss before and after. Where a history
    records the sharpness (``lr_over_bound`` (R, E), :func:`iterlin.stability.sharpness_recorder`),
    each failing run says whether η was above 2/λ_max(θ_s) before it failed ("unstable: η above
    2/λ_max(θ_s) from step t") or not."""
    label = run_label if label is None else label
    found: dict[str, list[str]] = {"diverged": [], "exploded": [], "rose": [], "jumped": []}
    for panel, h in histories.items():
        where = f"{panel}: " if prefix and len(histories) > 1 else ""
        unstable = _unstable_note(h)
        events = failures(h)
        worse = {f.run for f in events if f.kind in ("diverged", "exploded")}
        for f in events:
            if f.kind == "rose" and f.run in worse:
                continue  # reported as the worse failure
            found[f.kind].append(f.describe(f"{where}{label(panel, h, f.run)}", headed=True)
                                 + unstable(f.run, f.step))
    return divergence_row(found["diverged"], found["exploded"], found["rose"], found["jumped"])


def _net_rises(h: Mapping, skip) -> list:
    """``[(i, low, peak, step)]``: the runs with K > 1 (not in ``skip``) whose ``net_train_loss``
    rose by over :data:`BLOCK_RISE` from one evaluation to the next, the first such rise each. For
    histories that evaluate at most once per linearisation block, where :func:`_block_rises` cannot
    see inside a block; K = 1 (the reference SGD) is not judged."""
    loss = np.asarray(h.get("net_train_loss", ()), np.float64)
    K = np.asarray(h.get("K", ()), np.float64)
    if loss.ndim != 2 or loss.shape[1] < 2 or K.shape != (loss.shape[0],) or loss.shape[0] != np.size(skip):
        return []
    steps, out = np.asarray(h["step"]), []
    for i in np.flatnonzero((K > 1) & ~np.asarray(skip)):
        up = np.flatnonzero(loss[i, 1:] > (1.0 + BLOCK_RISE) * loss[i, :-1])
        if up.size:
            e = int(up[0]) + 1
            out.append((int(i), float(loss[i, e - 1]), float(loss[i, e]), int(steps[e])))
    return out


def _block_rises(h: Mapping):
    """:func:`iterlin.stability.block_loss_rise` of a sweep history, (R,) each; None without
    ``lin_train_loss`` and ``n_relin`` of shape (R, E)."""
    loss, relin = np.asarray(h.get("lin_train_loss", ())), np.asarray(h.get("n_relin", ()))
    if loss.ndim != 2 or loss.shape != relin.shape or loss.shape[0] != np.size(h["diverged"]):
        return None
    return block_loss_rise(h, rtol=BLOCK_RISE)


def _unstable_note(h: Mapping) -> Callable[[int, int], str]:
    """``note(i, t)``: for run i failing at step t, ``" (unstable: η above 2/λ_max(θ_s) from step s)"``
    when the history's sharpness record (``lr_over_bound``) exceeded 1 at a step s ≤ t,
    ``" (η under 2/λ_max(θ_s) at every recorded step up to t)"`` when it did not; ``""`` without a record."""
    ratio = np.asarray(h.get("lr_over_bound", ()), np.float64)
    if ratio.ndim != 2 or ratio.shape[0] != np.size(h["diverged"]):
        return lambda i, t: ""
    first = first_unstable_step(h)

    def note(i: int, t: int) -> str:
        if 0 <= first[i] <= t:
            return f" (unstable: η above 2/λ_max(θ_s) from step {int(first[i])})"
        return f" (η under 2/λ_max(θ_s) at every recorded step up to {t})"

    return note


def runs_of(h: Mapping, K: float, lr: float | None = None) -> np.ndarray:
    """Indices of a sweep history's runs with period ``K`` (and learning rate ``lr``), one per seed,
    in seed order."""
    sel = np.asarray(h["K"], np.float64) == float(K)
    if lr is not None and "lr" in h:
        sel &= np.asarray(h["lr"], np.float64) == float(lr)
    return np.flatnonzero(sel)


def sweep_difference(h: Mapping, ia, ib, *, n_test: int, metric: str = "net_test_acc", point: int = -1) -> Difference:
    """:func:`difference` of runs ``ib`` against runs ``ia`` (index arrays, paired by seed) of a
    sweep history at evaluation ``point``; paired on the test images when the history records the
    runs' final per-image correctness (``net_test_correct``/``lin_test_correct``) and ``point`` is
    the last."""
    values = np.asarray(h[metric], np.float64)
    correct = h.get(metric.replace("_acc", "_correct")) if metric.endswith("test_acc") else None
    last = point in (-1, values.shape[-1] - 1)
    return _runs_difference(values[..., point], correct if last else None, ia, ib, n_test=n_test)


def run_seeds(h: Mapping) -> np.ndarray:
    """(R,) each run's seed: the history's ``seed``, else its ``seed_index``, else 0."""
    if "seed" in h:
        return np.asarray(h["seed"])
    return np.asarray(h.get("seed_index", np.zeros(np.size(h["K"]), int)))


def _seed_label(h: Mapping) -> Callable[[int], str]:
    K, seed = np.atleast_1d(np.asarray(h["K"], np.float64)), run_seeds(h)
    return lambda i: f"K={fmt_K(K[i])} seed {int(seed[i])}"


def failed_runs(h: Mapping, label: Callable | None = None) -> dict[int, tuple[int, str]]:
    """``{i: (step, why)}``: the runs with K > 1 of a sweep history whose linear model's training
    failed, with the step and a description of the first failure (:func:`failures`: it diverged,
    its training loss exploded, or the linear model's training loss rose inside a block, whichever
    came first); the description says where the history's sharpness record put η against
    2/λ_max(θ_s). K = 1 is ordinary SGD and is not judged here (a network can train at the edge of
    stability). ``label`` names run i (default ``K=… seed …``)."""
    K = np.atleast_1d(np.asarray(h["K"], np.float64))
    name = label or _seed_label(h)
    note = _unstable_note(h)
    out: dict[int, tuple[int, str]] = {}
    for f in failures(h):
        if K[f.run] <= 1 or f.kind == "jumped":
            continue
        if f.run not in out or f.step < out[f.run][0]:
            out[f.run] = (f.step, f.describe(name(f.run)) + note(f.run, f.step))
    return out


def unstable_runs(h: Mapping, label: Callable | None = None) -> dict[int, str]:
    """``{i: why}``: the runs with K > 1 of a sweep history whose linear model was unstable: those
    of :func:`failed_runs`, and, where the history records the sharpness, those with η above
    2/λ_max(θ_s) at a recorded point (:func:`iterlin.stability.first_unstable_step`)."""
    out = {i: why for i, (_, why) in failed_runs(h, label).items()}
    ratio = np.asarray(h.get("lr_over_bound", ()), np.float64)
    K = np.atleast_1d(np.asarray(h["K"], np.float64))
    if ratio.ndim == 2 and ratio.shape[0] == K.size:
        name = label or _seed_label(h)
        first = first_unstable_step(h)
        for i in np.flatnonzero((K > 1) & (first >= 0)):
            out.setdefault(int(i), f"{name(i)}: η above 2/λ_max(θ_s) at step {int(first[i])}")
    return dict(sorted(out.items()))


def unstable_among(h: Mapping, runs) -> list[str]:
    """What made each of ``runs`` (indices into the sweep history ``h``) unstable, in order
    (:func:`unstable_runs`); empty when none was."""
    chosen = {int(i) for i in np.atleast_1d(runs)}
    return [why for i, why in unstable_runs(h).items() if i in chosen]


def sharpness_claim(h: Mapping, fraction: float = STABLE_FRACTION, *, panel: str = "") -> Claim:
    """Whether η stayed under ``fraction`` of the linear model's bound 2/λ_max(θ_s) at every point
    the history records it (``lr_over_bound`` (R, E), :func:`iterlin.stability.sharpness_recorder`)
    along every run with K > 1, whose linear model is trained for K steps (K = 1 re-linearises
    every step: its record, the network's own sharpness, is reported beside it, not judged). The
    largest η·λ_max/2 of each group with its run and step; n/a without a record of a K > 1 run.
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
        parts.append(f"{what}: largest η·λ_max/2 {ratio[i, e]:.2f} (K={fmt_K(K[i])}, step {int(steps[e])})")
    worst = float(np.nanmax(ratio[K > 1]))
    return Claim(claim, "not measured in the paper (its rate is ~500× under the bound at θ_0)",
                 "; ".join(parts), verdict(worst <= fraction), rule)


def on_par_claim(claim: str, paper: str, h: Mapping, *, n_test: int, tol: float = ON_PAR,
                 metric: str = "net_test_acc") -> Claim:
    """K = 1 against the largest finite K > 1 of a sweep history, at the last evaluation point.

    The shared rule: :func:`sweep_difference` (over the history's seeds, paired on the test images
    when the history records per-image correctness), then :func:`on_par` within ``tol``. A
    diverged K = 1 run is a "no"; a large-K run whose linear model was unstable
    (:func:`unstable_runs`) makes the row :data:`UNSTABLE`, with what happened and when.
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
