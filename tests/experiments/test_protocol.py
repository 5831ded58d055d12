"""The claims protocol (iterlin.experiments.protocol): rows as data, their checks, the run's record."""

import dataclasses
import json
from pathlib import Path

import pytest

from iterlin.experiments import protocol, reference, registry
from iterlin.experiments.protocol import Protocol, ProtocolError, Row

ROOT = Path(__file__).resolve().parents[2]
GOOD = dict(id="fig3.gap", claim="large K ends under 1 point from K = 1", paper="82.3 % vs 81.4 %",
            experiment="fig3", kind="on_par", history=["runs"], margin=0.01, margin_why="the paper's own gap")


def _doc(*rows, amendments=()):
    return {"row": [dict(r) for r in rows], "amendment": [dict(a) for a in amendments]}


def test_the_project_protocol_parses_with_every_experiment_known():
    p = protocol.load(experiments=registry.names())
    assert len({r.id for r in p.rows}) == len(p.rows) > 0
    # the confirmatory rows are those registered with their own run (fig3_confirm's, ceflow_confirm's); every other
    # row was written after its data was seen, so it is exploratory
    confirmatory = {r.experiment for r in p.rows if r.status == "confirmatory"}
    assert confirmatory == {"fig3_confirm", "ceflow_confirm"}
    assert all(r.config and r.registered and r.seeds and r.seeds_why for r in p.rows if r.status == "confirmatory")


@pytest.mark.parametrize("change, field", [
    (dict(margin="1 point"), "margin"),
    (dict(margin=-0.01), "margin"),
    (dict(margin=float("nan")), "margin"),
    (dict(seeds=3.0), "seeds"),
    (dict(seeds="3"), "seeds"),
    (dict(seeds=0), "seeds"),
    (dict(max_relin=True), "max_relin"),
    (dict(metric="net_test_accuracy"), "metric"),
    (dict(kind="roughly"), "kind"),
    (dict(kind="fig4.bound"), "kind"),  # another experiment's own rule
    (dict(status="final"), "status"),
    (dict(id="fig2.gap"), "id"),  # not its experiment's
    (dict(claim=""), "claim"),
    (dict(history=[]), "history"),
    (dict(panels=["a", "b"]), "panels"),  # one history, two panels
    (dict(margin=None), "margin"),  # on_par needs a margin
    (dict(margin_why=""), "margin_why"),
    (dict(registered="2026-12-05"), "registered"),  # exploratory rows are not registered
    (dict(status="confirmatory", seeds=8), "registered"),  # a confirmatory row needs its date
    (dict(status="confirmatory", registered="5 Dec", seeds=8), "registered"),
    (dict(status="confirmatory", registered="2026-12-05"), "seeds"),  # ... and its seeds
    (dict(colour="red"), "colour"),
    (dict(value=0.823), "value"),  # contradictory: an on-par row compares two runs, not a paper's value
    (dict(kind="finite", margin=None, judged_at="paper"), "judged_at"),
])
def test_a_malformed_row_is_refused_naming_its_field(change, field):
    with pytest.raises(ProtocolError, match=rf"row 'fig[23]\.gap': {field}\b"):
        protocol.parse(_doc({**GOOD, **change}))


def test_duplicate_ids_and_unknown_experiments_are_refused():
    with pytest.raises(ProtocolError, match="row 'fig3.gap': id='fig3.gap' is not allowed: a duplicate id"):
        protocol.parse(_doc(GOOD, GOOD))
    other = {**GOOD, "id": "fig33.gap", "experiment": "fig33"}
    protocol.parse(_doc(other))  # no list of experiments given: not checked
    with pytest.raises(ProtocolError, match="row 'fig33.gap': experiment='fig33' is not allowed"):
        protocol.parse(_doc(other), experiments=registry.names())


def test_an_amendment_is_checked():
    ok = dict(id="fig3.gap", date="2026-12-06", reason="pilot variance", original={"margin": 0.02})
    p = protocol.parse(_doc(GOOD, amendments=[ok]))
    assert protocol.original(p.rows[0], p.amendments[0]).margin == 0.02
    for bad, field in ((dict(ok, id="fig3.nope"), "id"), (dict(ok, date="soon"), "date"),
                       (dict(ok, original={"margin": -1.0}), "margin"), (dict(ok, original={"id": "x"}), "'id'")):
        with pytest.raises(ProtocolError, match=field):
            protocol.parse(_doc(GOOD, amendments=[bad]))


def _confirmatory(**change):
    return Row(**{**GOOD, "status": "confirmatory", "registered": "2026-12-05", "seeds": 8, **change})


def test_a_confirmatory_row_changed_after_its_run_is_refused_naming_the_field():
    then = _confirmatory()
    record = protocol.provenance("fig3", "abc123", Protocol((then,)))
    assert record["rows_sha256"] == protocol.rows_hash([then]) and record["commit"] == "abc123"
    protocol.check_run(record, Protocol((then,)))  # unchanged
    now = _confirmatory(margin=0.02)
    with pytest.raises(ProtocolError, match=r"row 'fig3.gap': margin is 0.02 but the run tested margin=0.01 "
                                            r"\(row hash \w+ ≠ \w+\)"):
        protocol.check_run(record, Protocol((now,)))
    amended = protocol.Amendment("fig3.gap", "2026-12-06", "pilot variance", {"margin": 0.01})
    protocol.check_run(record, Protocol((now,), (amended,)))  # the amendment gives back the row that ran
    with pytest.raises(ProtocolError, match="no longer in the protocol"):
        protocol.check_run(record, Protocol((dataclasses.replace(now, id="fig3.other"),)))
    # an exploratory row may change: it never counts
    loose = protocol.provenance("fig3", "abc123", Protocol((Row(**GOOD),)))
    protocol.check_run(loose, Protocol((Row(**{**GOOD, "margin": 0.03}),)))


def test_a_reference_run_whose_row_changed_is_refused(tmp_path, monkeypatch):
    import shutil

    shutil.copytree(ROOT / "results" / "fig3", tmp_path / "fig3")
    then = dataclasses.replace(protocol.rows_of("fig3")[0], status="confirmatory", registered="2026-12-05", seeds=3)
    prov_path = tmp_path / "fig3" / "provenance.json"
    prov = json.loads(prov_path.read_text())
    prov["protocol"] = protocol.provenance("fig3", prov["iterlin_commit"], Protocol((then,)))
    prov_path.write_text(json.dumps(prov))
    with pytest.raises(reference.ReferenceMismatch, match="provenance.json: row 'fig3.gap': seeds is None but the run "
                                                          "tested seeds=3; status is 'exploratory' but the run tested "
                                                          "status='confirmatory'"):
        reference.load("fig3", base=tmp_path)


def test_claims_are_keyed_by_their_rows_ids():
    names = sorted({r.experiment for r in protocol.protocol().rows})
    assert {"fig2", "fig3", "fig4"} <= set(names)
    for name in names:
        path = ROOT / "results" / name / "claims.json"
        if not path.exists():  # registered before its run (fig3_confirm, ceflow_confirm): nothing to compare yet
            assert all(r.status == "confirmatory" for r in protocol.rows_of(name)), name
            continue
        doc = json.loads(path.read_text())
        assert [r["id"] for r in doc["rows"]] == [r.id for r in protocol.rows_of(name)]
        assert [r["claim"] for r in doc["rows"]] == [r.claim for r in protocol.rows_of(name)]


def _generate():
    import importlib.util

    spec = importlib.util.spec_from_file_location("book_generate_protocol", ROOT / "book" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_protocol_page_lists_the_rows_and_keeps_the_verdict_under_an_amended_rows_original():
    generate = _generate()
    ref = reference.load("fig3")
    items = [{"name": "fig3", "reference": {"results": ref.results, "provenance": ref.provenance}},
             {"name": "fig7", "reference": None}]
    now = dataclasses.replace(protocol.rows_of("fig3")[0], margin=0.03)
    amended = protocol.Amendment("fig3.gap", "2026-12-06", "a pilot's variance", {"margin": 0.01})
    page = generate.protocol_page(items, Protocol((now,) + protocol.rows_of("fig3")[1:], (amended,)))
    assert all(f"| {generate.escape(r.id)} | exploratory |" in page for r in protocol.rows_of("fig3"))
    line = next(x for x in page.splitlines() if x.startswith("| fig3.gap | 2026-12-06 |"))
    # Δ −0.6 [−1.7, +0.4]: undecided within ±1 point (the original row), inside ±3 (the amended one)
    assert "margin: 0.01 → 0.03" in line and line.count("**undecided**") == 1 and line.count("**yes**") == 1
    assert line.index("**undecided**") < line.index("**yes**")
    assert "run before the protocol (no record)" in page
    assert "not yet declared as rows: {doc}`fig7 <executed/fig7>`" in page
    assert "None: no row has changed" in generate.protocol_page(items, Protocol(protocol.protocol().rows))
    today = generate.protocol_page(items, protocol.protocol())  # fig3_confirm's rows, amended before their run
    assert all(f"| {generate.escape(a.id)} | {a.date} |" in today for a in protocol.protocol().amendments)
