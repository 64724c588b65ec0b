"""What ``zoo reproduce`` records and refuses: ``--list`` names every protocol with the paper's numbers it is
compared with; a run whose overrides change the protocol's runs is marked off budget in NAME.json and
NAME.md; a finished NAME.json of other overrides is not replaced (or merged into) without ``--overwrite``;
and NAME.md is written again from NAME.json with the protocol's current description and paper source."""

from __future__ import annotations

import json

import pytest

import zoo.experiments.reproduce as reproduce
from zoo.experiments.cli import main
from zoo.experiments.journal import JournalMismatch
from zoo.experiments.protocol_report import departures, off_budget_line, protocol_list, recorded_overrides
from zoo.experiments.reproduce import Protocol, RunSpec, available_protocols, run_protocol

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NAME = "r-records-tiny"


def _runs(splits):
    return [
        RunSpec("mfvi", "mfvi-bnn", "diabetes", s, {"steps": 6, "hidden": [3], "num_samples": 4})
        for s in (splits if splits is not None else [0])
    ]


@pytest.fixture
def tiny(monkeypatch):
    p = Protocol(NAME, "a tiny protocol. Second sentence.", _runs, ["rmse"], paper_source="Old source")
    monkeypatch.setitem(reproduce.PROTOCOLS, NAME, p)
    return p


# ------------------------------------------------------------------------------------ --list


def test_list_prints_every_protocol_with_what_it_runs_and_its_paper_source(capsys):
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "--list"])  # neither NAME nor --out needed
    out = capsys.readouterr().out
    assert e.value.code == 0
    names = available_protocols()
    assert len(names) >= 14
    lines = out.splitlines()
    for n in names:
        i = lines.index(n)
        assert lines[i + 1].startswith("  runs:  ") and lines[i + 2].startswith("  paper: ")
    assert "Skaaret-Lund et al. 2023" in out and "Sheinkman & Wade 2025" in out
    assert max(map(len, lines)) <= 120  # one line each


def test_protocol_list_cuts_the_description_at_its_first_sentence_not_at_an_abbreviation(tiny):
    p = Protocol("x", "Runs App. D of Tomczak et al. 2021 on Fig. 3 data. Then more.", _runs, ["rmse"])
    assert protocol_list({"x": p}) == [
        "x",
        "  runs:  Runs App. D of Tomczak et al. 2021 on Fig. 3 data",
        "  paper: (no paper numbers)",
    ]
    assert protocol_list({"x": p}, width=12)[1] == "  runs:  Runs App. D…"


# ------------------------------------------------------------------------------------ off budget


def test_departures_are_the_overrides_that_change_a_selected_run():
    specs = _runs([0, 1])
    assert departures(specs, None) == {}
    assert departures(specs, {"steps": 6}) == {}  # the protocol's own value
    assert departures(specs, {"steps": 3}) == {"steps": 3}
    assert departures([RunSpec("v", "m", "d", 0, {})], {"steps": 6}) == {"steps": 6}  # the entry's budget
    assert departures(specs, {"lr": 0.1}) == {}  # no run sets lr: none is changed


def test_a_smoke_run_is_marked_off_budget_in_both_files_and_a_full_one_is_not(tiny, tmp_path):
    doc = run_protocol(NAME, tmp_path / "smoke", overrides={"steps": 2}, progress=False)
    assert doc["off_budget"] == {"steps": 2} and doc["overrides"] == {"steps": 2}
    md = (tmp_path / "smoke" / f"{NAME}.md").read_text()
    assert "**Off budget**" in md and '{"steps": 2}' in md
    full = run_protocol(NAME, tmp_path / "full", progress=False)
    assert full["off_budget"] == {} and "Off budget" not in (tmp_path / "full" / f"{NAME}.md").read_text()


def test_files_written_before_the_marker_read_their_overrides_from_the_command():
    legacy = {"command": 'zoo reproduce x --set posttrain_steps=0 --set options={"a":1} --steps 20 --out d'}
    assert recorded_overrides(legacy) == {"posttrain_steps": 0, "options": {"a": 1}, "steps": 20}
    assert recorded_overrides({"command": "zoo reproduce x --out d --jobs 2"}) == {}
    assert recorded_overrides({"command": "zoo reproduce x --steps 5", "overrides": {}}) == {}
    assert off_budget_line({"command": "zoo reproduce x --steps 5"})[0].startswith("**Off budget**")
    assert off_budget_line({"command": "zoo reproduce x --steps 5", "overrides": {}, "off_budget": {}}) == []


# ------------------------------------------------------------------------------------ replacing a result


def test_a_finished_result_of_other_settings_is_refused_before_any_fit(tiny, tmp_path, monkeypatch, capsys):
    run_protocol(NAME, tmp_path, progress=False)
    record = tmp_path / f"{NAME}.json"
    before = record.read_bytes()
    real = reproduce._run_one
    monkeypatch.setattr(reproduce, "_run_one", lambda spec: pytest.fail("a fit ran"))
    with pytest.raises(JournalMismatch, match="finished run of other settings"):
        run_protocol(NAME, tmp_path, overrides={"steps": 2}, progress=False)
    with pytest.raises(JournalMismatch):  # merging smoke rows into it is refused too
        run_protocol(NAME, tmp_path, splits=[1], overrides={"steps": 2}, progress=False, merge=True)
    with pytest.raises(SystemExit) as e:
        main(["reproduce", NAME, "--out", str(tmp_path), "--steps", "2"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--out" in err and "--overwrite" in err and '{"steps": 2} now' in err
    assert record.read_bytes() == before and not list(tmp_path.glob("*.partial.jsonl"))
    monkeypatch.setattr(reproduce, "_run_one", real)
    assert run_protocol(NAME, tmp_path, progress=False)["overrides"] == {}  # the same settings: replaced
    assert main(["reproduce", NAME, "--out", str(tmp_path), "--steps", "2", "--overwrite"]) == 0
    assert json.loads(record.read_text())["overrides"] == {"steps": 2}


def test_a_result_written_before_overrides_were_recorded_is_judged_by_its_command(tiny, tmp_path):
    doc = run_protocol(NAME, tmp_path, progress=False)
    legacy = {k: v for k, v in doc.items() if k not in ("overrides", "off_budget")}
    (tmp_path / f"{NAME}.json").write_text(json.dumps({**legacy, "command": "zoo reproduce x --steps 2"}))
    with pytest.raises(JournalMismatch, match='"steps": 2} there'):
        run_protocol(NAME, tmp_path, progress=False)
    run_protocol(NAME, tmp_path, overrides={"steps": 2}, progress=False)


# ------------------------------------------------------------------------------------ rendering


def test_render_writes_the_md_again_with_the_current_paper_source(tiny, tmp_path, monkeypatch):
    doc = run_protocol(NAME, tmp_path, progress=False)
    md = tmp_path / f"{NAME}.md"
    assert "Paper numbers: Old source" in md.read_text()
    json_before = (tmp_path / f"{NAME}.json").read_bytes()
    new = Protocol(NAME, "a tiny protocol. Second sentence.", _runs, ["rmse"], paper_source="New source")
    monkeypatch.setitem(reproduce.PROTOCOLS, NAME, new)
    assert reproduce.render_protocol(NAME, tmp_path) == md
    text = md.read_text()
    assert "Paper numbers: New source" in text and "Old source" not in text
    assert f"Command: `{doc['command']}`" in text and (tmp_path / f"{NAME}.json").read_bytes() == json_before
    with pytest.raises(ValueError, match="name"):
        reproduce.render_protocol("no-such-protocol", tmp_path)
