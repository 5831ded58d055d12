"""What this edition found: the paper's claims (its figures 2-9), each with the experiment that
decides it and the other experiments that measure it.

The verdicts are never written here: :func:`findings` reads them from the reference runs' claims
(``results/<name>/claims.json``, the rows each notebook shows), so the book's front page and every
figure page print one answer per claim. A row is named by its id in ``claims.toml``, or by the start of
its ``claim`` text; :func:`findings` refuses a name that matches no row, or several.

Another experiment corroborates a finding only if its runs differ from the decisive experiment's:
:func:`shared_runs` finds the runs that two reference runs share (bit-identical per-image test
correctness and final test loss: the same seed, setting and code computed twice), and
:func:`findings` names such evidence as the same runs rather than as independent evidence.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from ..repro.claims import NA
from ..relin import fmt_K

__all__ = ["Evidence", "Finding", "FINDINGS", "STABILITY_ROW", "NO_RATE", "Found", "findings", "stability_row", "Run",
           "shared_runs", "describe_shared"]


class Evidence(NamedTuple):
    """One claims row of one experiment's reference run."""

    experiment: str  #: the notebook (``results/<experiment>/claims.json``)
    #: the row's id in the claims protocol (``claims.toml``), or, for an experiment whose claims are
    #: not yet rows there, the start of the row's ``claim`` text
    row: str


class Finding(NamedTuple):
    """One of the paper's claims, the experiment that decides it and those that also measure it."""

    figure: str  #: where the paper makes it
    claim: str  #: the claim, in words
    paper: str  #: the paper's number
    decisive: Evidence
    also: tuple[Evidence, ...] = ()
    #: the paper's own difference in points, as the decisive row defines Δ (None where the paper
    #: gives no number, or none comparable)
    paper_delta: float | None = None
    #: the confirmatory rows of ``claims.toml`` registered to test this claim (ids): the front page
    #: names their test beside the exploratory verdict, and their verdict once their run is committed
    registered: tuple[str, ...] = ()


#: The paper's claims, in the order of its figures (``SPEC.md``'s table, Figs. 2-9), one claim per
#: finding: the front page prints the decisive row's verdict beside the claim, so the claim says
#: no more than that row tests (a figure whose paper text makes several claims has a finding each;
#: tests/test_findings.py checks it word by word). The decisive experiment is the one whose
#: setting the claim is about and whose linear model's stability was recorded along its runs (Fig.
#: 3's stable setting). Figs. 5 and 8's is the exact limit where the figure's own runs cannot decide
#: it, which has no rate to keep under the bound and solves each linearisation exactly (τ = ∞ is
#: Gauss–Newton): Fig. 5's own runs on a factor of four in data leave intervals three seeds cannot
#: narrow, and Fig. 8's Adam-solved network does not settle (it hovers at 97-100 % train accuracy,
#: under the 99 % its comparisons ask; ``book/intro.md``).
FINDINGS: tuple[Finding, ...] = (
    Finding("Fig. 2", "large K performs on par with K = 1", "on par (full batch and mini-batch)",
            Evidence("fig2", "fig2.mini_on_par"), (Evidence("fig2", "fig2.full_on_par"),
                                                   Evidence("ceflow", "ceflow.large_tau")),
            registered=("ceflow_confirm.large_tau",)),
    Finding("Fig. 3", "with augmentation, large K ends under 1 point from K = 1", "82.3 % vs 81.4 %",
            Evidence("fig3", "fig3.gap"), paper_delta=-0.9, registered=("fig3_confirm.under_one_point",)),
    Finding("Sec. 4.1", "8-12 feature updates suffice to match K = 1", "8-12 re-linearisations",
            Evidence("fig3", "fig3.few_updates"),
            (Evidence("ksweep", "the largest K within noise of K = 1"),
             Evidence("limit", "limit.few_updates"),
             Evidence("limit", "limit.long_grid"),
             Evidence("ceflow", "ceflow.few_updates")), paper_delta=-0.9,
            registered=("fig3_confirm.few_updates", "ceflow_confirm.few_updates")),
    Finding("Fig. 4", "large K ≈ SGD (K = 1), with BatchNorm and augmentation", "similar test accuracy",
            Evidence("fig4", "fig4.bn_on_par"), (Evidence("fig4", "fig4.no_bn_on_par"),)),
    Finding("Fig. 4", "BatchNorm runs diverge more easily", "BN far more likely to diverge",
            Evidence("fig4", "fig4.bn_diverges"), (Evidence("fig4", "fig4.bn_bound"),)),
    Finding("Fig. 5", "K = ∞ scales worse with N", "K = ∞ worse than every finite K",
            Evidence("limit", "limit.inf_scales_worse"),
            (Evidence("fig5", "K = ∞ (no feature learning) scales worse"),
             Evidence("ksweep", "K = ∞ (no feature learning) ends below every finite K"),
             Evidence("ceflow", "ceflow.inf_scales_worse")),
            registered=("ceflow_confirm.inf_scales_worse",)),
    Finding("Fig. 5", "every finite K scales with data like K = 1", "every finite K like K = 1",
            Evidence("fig5", "every finite K scales with data like K = 1")),
    Finding("Fig. 6", "large-K features level off lower", "lower (linear probes)",
            Evidence("fig6", "layer2: large-K features level off lower"),
            (Evidence("fig6", "layer1: large-K features level off lower"),)),
    Finding("Fig. 6", "large-K features improve slower", "slower (linear probes)",
            Evidence("fig6", "layer2: large-K features improve slower"),
            (Evidence("fig6", "layer1: large-K features improve slower"),)),
    Finding("Fig. 7", "large-K first-layer filters evolve slower", "K = 1 evolves much faster",
            Evidence("fig7", "fig7.slower")),
    Finding("Fig. 8", "solving each linearisation completely hurts", "61.3 % vs 69.4 %",
            Evidence("limit", "limit.gn_below"),
            (Evidence("fig8", "fig8.sgd_better"), Evidence("ceflow", "ceflow.solve_further")),
            registered=("ceflow_confirm.solve_further",)),
    Finding("Fig. 9", "more damping → lower mean test RMSE", "lower RMSE (quintic)",
            Evidence("fig9", "fig9.lower"),
            (Evidence("limit", "limit.damping_helps"),)),
    Finding("Fig. 9", "more damping → more consistent test RMSE", "more consistent RMSE (quintic)",
            Evidence("fig9", "fig9.consistent")),
    Finding("Fig. 9", "more damping → smoother learned functions", "smoother functions (quintic)",
            Evidence("fig9", "fig9.smoother")),
)

#: The experiments whose linearisations are solved in closed form, so have no gradient-descent rate
#: to keep under the bound: the exact limit (each linearisation advanced by its closed-form flow,
#: :mod:`iterlin.experiments.limit`) and Fig. 9 (each damped Gauss–Newton step a ridge solve).
NO_RATE = ("limit", "fig9")

#: The start of the claims row that records whether a run's linear model stayed stable
#: (:func:`iterlin.repro.claims.sharpness_claim`).
STABILITY_ROW = "the linear model stays stable"


class Found(NamedTuple):
    """A :class:`Finding` with the rows its evidence names (dicts of ``claim``, ``paper``,
    ``measured``, ``holds``, ``rule``), None where an experiment has no reference run."""

    finding: Finding
    decisive: Mapping | None
    also: tuple[Mapping | None, ...]
    stability: Mapping | None  #: the decisive run's :data:`STABILITY_ROW`, None where not recorded
    also_stability: tuple[Mapping | None, ...] = ()  #: the same for each of ``also``
    #: for each of ``also`` from another experiment, the runs it shares with the decisive
    #: experiment (:func:`describe_shared`), ``""`` when its runs are its own
    also_shared: tuple[str, ...] = ()


def _row(rows: Sequence[Mapping] | None, evidence: Evidence) -> Mapping | None:
    if rows is None:
        return None
    hits = [r for r in rows if r.get("id") == evidence.row] or [r for r in rows if r["claim"].startswith(evidence.row)]
    if len(hits) != 1:
        raise ValueError(f"{evidence.experiment}: {len(hits)} claims rows start with {evidence.row!r} "
                         "(expected exactly one): update iterlin.experiments.findings.FINDINGS")
    return hits[0]


def stability_row(rows: Sequence[Mapping] | None, evidence: Evidence | None = None) -> Mapping | None:
    """The :data:`STABILITY_ROW` of a reference run's claims rows that goes with ``evidence``: the
    row of its panel (``"<panel>: the linear model stays stable…"`` when ``evidence.row`` starts
    ``"<panel>: "``, as Fig. 2's panels), else the run's own; None when it has none or it is n/a
    (no sharpness record)."""
    rows = list(rows or ())
    hits = []
    claim = _row(rows, evidence)["claim"] if evidence is not None and rows else ""
    if ": " in claim:
        hits = [r for r in rows if r["claim"].startswith(claim.split(": ")[0] + ": " + STABILITY_ROW)]
    hits = hits or [r for r in rows if r["claim"].startswith(STABILITY_ROW)]
    return hits[0] if hits and hits[0]["holds"] != NA else None


class Run(NamedTuple):
    """One run of a reference run's sweep: the experiment, the sweep's field path, its index, K, seed."""

    experiment: str
    sweep: str
    index: int
    K: float
    seed: int


def _sweeps(value: Any, path: str) -> Iterator[tuple[str, Mapping]]:
    if isinstance(value, Mapping) and "net_test_correct" in value and "net_test_loss" in value:
        yield path, value
    elif isinstance(value, Mapping) or hasattr(value, "_asdict"):
        items = value._asdict().items() if hasattr(value, "_asdict") else value.items()
        for k, v in items:
            if k != "config":
                yield from _sweeps(v, f"{path}/{k}" if path else str(k))


def shared_runs(results: Mapping[str, Any]) -> dict[tuple[str, str], tuple[tuple[Run, Run], ...]]:
    """The runs that two experiments' results share, by pair of experiment names (sorted): a run of
    one and a run of the other are the same run when their per-image test correctness
    (``net_test_correct``, (n_test,)) and their final test loss are equal bit for bit (equal
    correctness alone is not enough: two runs that predict one class score alike). ``results``:
    typed results (or mappings of sweeps) by experiment name; None values are skipped."""
    seen: dict[bytes, list[Run]] = {}
    for name, res in results.items():
        if res is None:
            continue
        for path, h in _sweeps(res, ""):
            correct = np.asarray(h["net_test_correct"])
            loss = np.asarray(h["net_test_loss"], np.float64)[:, -1]
            n = correct.shape[0]
            K = np.asarray(h["K"], np.float64) if "K" in h else np.full(n, np.nan)
            seed = np.asarray(h["seed"] if "seed" in h else h["seed_index"] if "seed_index" in h else np.full(n, -1))
            for i in range(n):
                key = np.packbits(correct[i]).tobytes() + loss[i].tobytes()
                seen.setdefault(key, []).append(Run(name, path, i, float(K[i]), int(seed[i])))
    out: dict[tuple[str, str], list[tuple[Run, Run]]] = {}
    for runs in seen.values():
        for a in runs:
            for b in runs:
                if a.experiment < b.experiment:
                    out.setdefault((a.experiment, b.experiment), []).append((a, b))
    return {k: tuple(sorted(v)) for k, v in out.items()}


def describe_shared(pairs: Sequence[tuple[Run, Run]]) -> str:
    """``"K = 1, 320 (seeds 0, 1, 2)"``: the settings and seeds of shared runs."""
    Ks = sorted({a.K for a, _ in pairs})
    seeds = sorted({a.seed for a, _ in pairs})
    return (f"K = {', '.join(fmt_K(k) for k in Ks)} (seed{'s' * (len(seeds) != 1)} "
            f"{', '.join(str(s) for s in seeds)})")


def findings(rows: Mapping[str, Sequence[Mapping] | None], table: Sequence[Finding] = FINDINGS,
             shared: Mapping[tuple[str, str], Sequence[tuple[Run, Run]]] | None = None) -> list[Found]:
    """Each finding of ``table`` with its rows, from ``rows``: the reference run's claims rows per
    experiment name (None, or absent, where there is no reference run), and for each of its other
    experiments the runs it shares with the decisive one (``shared``: :func:`shared_runs`).
    ValueError when a named row is missing or ambiguous."""
    shared = shared or {}
    out = []
    for f in table:
        decisive_rows = rows.get(f.decisive.experiment)
        same = tuple(describe_shared(p) if (p := shared.get(tuple(sorted((e.experiment, f.decisive.experiment)))))
                     and e.experiment != f.decisive.experiment else "" for e in f.also)
        out.append(Found(f, _row(decisive_rows, f.decisive),
                         tuple(_row(rows.get(e.experiment), e) for e in f.also),
                         stability_row(decisive_rows, f.decisive),
                         tuple(stability_row(rows.get(e.experiment), e) for e in f.also), same))
    return out
