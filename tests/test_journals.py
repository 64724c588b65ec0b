"""Journals are never discarded (:mod:`zoo.experiments.journal`): the journal of another command is refused
naming the differing settings (``--fresh`` sets it aside under a dated name and starts over), a damaged
line is skipped with a warning and the other rows are kept, and a failed final write keeps the journal."""

from __future__ import annotations

import errno
import json
import logging

import pytest

import zoo.experiments.reproduce as reproduce
from zoo.experiments.cli import main
from zoo.experiments.journal import JournalMismatch, load_journal, read_journal, set_aside
from zoo.experiments.reproduce import Protocol, RunSpec, run_protocol
from zoo.io import atomic_write_many

KEY = lambda r: r["k"]  # noqa: E731


def _journal(path, head, *lines: str):
    path.write_text("\n".join([json.dumps(head), *lines]) + "\n")
    return path.read_bytes()


# ------------------------------------------------------------------------------------ reading


def test_a_damaged_line_is_skipped_with_a_warning_and_the_rest_kept(tmp_path, caplog):
    p = tmp_path / "j.partial.jsonl"
    _journal(p, {"a": 1}, '{"k": 1}', '{"k": 2, "cut', "[1, 2]", '{"k": 3}', '{"k": 4')
    with caplog.at_level(logging.WARNING, logger="zoo.experiments.journal"):
        rows = read_journal(p, {"a": 1}, KEY)
    assert rows == {1: {"k": 1}, 3: {"k": 3}}
    assert [r.getMessage().split(": line ")[1][:1] for r in caplog.records] == ["3", "4", "6"]


def test_another_signature_is_refused_naming_what_differs_and_the_journal_is_kept(tmp_path):
    p = tmp_path / "j.partial.jsonl"
    before = _journal(p, {"protocol": "x", "overrides": {"steps": 3}, "command": "zoo a"}, '{"k": 1}')
    # the command that started it may differ (another --jobs): only the signature's keys must match
    assert read_journal(p, {"protocol": "x", "overrides": {"steps": 3}}, KEY) == {1: {"k": 1}}
    with pytest.raises(JournalMismatch) as e:
        load_journal(p, {"protocol": "x", "overrides": {"steps": 5}}, KEY)
    msg = str(e.value)
    assert 'overrides: {"steps": 3} there, {"steps": 5} now' in msg and "--fresh" in msg
    assert "protocol" not in msg.split("belongs to another run:")[1].split(".")[0]
    assert p.read_bytes() == before


def test_a_damaged_signature_line_is_refused_not_discarded(tmp_path):
    p = tmp_path / "j.partial.jsonl"
    p.write_text('{"protocol": "x", "overr\n{"k": 1}\n')
    before = p.read_bytes()
    with pytest.raises(JournalMismatch, match="damaged"):
        load_journal(p, {"protocol": "x"}, KEY)
    assert p.read_bytes() == before
    assert read_journal(p, {"protocol": "x"}, KEY, strict=False) == {} and p.read_bytes() == before


def test_fresh_sets_the_old_journal_aside_under_a_dated_name(tmp_path):
    p = tmp_path / "NAME.partial.jsonl"
    before = _journal(p, {"a": 1}, '{"k": 1}')
    assert load_journal(p, {"a": 2}, KEY, fresh=True) == {} and not p.exists()
    (kept,) = tmp_path.glob("NAME.partial.*.jsonl")
    assert kept.read_bytes() == before
    _journal(p, {"a": 3})
    second = set_aside(p)  # the same second: a distinct name, nothing overwritten
    assert second != kept and kept.read_bytes() == before and len(list(tmp_path.iterdir())) == 2


# ------------------------------------------------------------------------------------ zoo reproduce


@pytest.fixture
def tiny(monkeypatch):
    name = "r-journal-tiny"

    def runs(splits):
        return [
            RunSpec("mfvi", "mfvi-bnn", "diabetes", s, {"steps": 50, "hidden": [3], "num_samples": 4})
            for s in (splits if splits is not None else [0, 1])
        ]

    monkeypatch.setitem(reproduce.PROTOCOLS, name, Protocol(name, "journal test", runs, ["rmse"]))
    return name


def _interrupted(tiny, out, monkeypatch, steps=3):
    """A run of ``tiny`` killed after its first fit: the journal holds the signature and one row."""
    real = reproduce._run_one

    def second_fails(spec):
        if spec.split == 1:
            raise KeyboardInterrupt
        return real(spec)

    monkeypatch.setattr(reproduce, "_run_one", second_fails)
    with pytest.raises(KeyboardInterrupt):
        run_protocol(tiny, out, overrides={"steps": steps}, progress=False)
    monkeypatch.setattr(reproduce, "_run_one", real)
    journal = out / f"{tiny}.partial.jsonl"
    assert len(journal.read_text().splitlines()) == 2
    return journal


def test_reproduce_refuses_the_journal_of_other_settings_and_fresh_keeps_it(
    tiny, tmp_path, monkeypatch, capsys
):
    journal = _interrupted(tiny, tmp_path, monkeypatch)
    before = journal.read_bytes()
    real = reproduce._run_one
    monkeypatch.setattr(reproduce, "_run_one", lambda spec: pytest.fail("a fit ran"))
    with pytest.raises(JournalMismatch, match="steps"):
        run_protocol(tiny, tmp_path, overrides={"steps": 4}, progress=False)
    with pytest.raises(SystemExit) as e:
        main(["reproduce", tiny, "--out", str(tmp_path), "--steps", "4"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--out" in err and "--fresh" in err and '{"steps": 3} there' in err
    assert journal.read_bytes() == before
    monkeypatch.setattr(reproduce, "_run_one", real)
    doc = run_protocol(tiny, tmp_path, overrides={"steps": 4}, progress=False, fresh=True)
    assert [r["steps"] for r in doc["rows"]] == [4, 4] and not journal.exists()
    (kept,) = tmp_path.glob(f"{tiny}.partial.*.jsonl")
    assert kept.read_bytes() == before


def test_reproduce_resumes_past_a_damaged_line(tiny, tmp_path, monkeypatch, caplog):
    journal = _interrupted(tiny, tmp_path, monkeypatch)
    with open(journal, "a") as fh:
        fh.write('{"variant": "mfvi", "dataset": "diab\n')  # cut by a kill -9
    done = json.loads(journal.read_text().splitlines()[1])
    calls = []
    real = reproduce._run_one
    monkeypatch.setattr(reproduce, "_run_one", lambda spec: calls.append(spec.split) or real(spec))
    with caplog.at_level(logging.WARNING, logger="zoo.experiments.journal"):
        doc = run_protocol(tiny, tmp_path, overrides={"steps": 3}, progress=False)
    assert calls == [1] and "line 3 is damaged" in caplog.text
    assert doc["rows"][0]["rmse"] == done["rmse"] and doc["rows"][0]["split"] == 0


def test_a_failed_final_write_keeps_the_journal(tiny, tmp_path, monkeypatch):
    def full(files):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reproduce, "atomic_write_many", full)
    with pytest.raises(OSError, match="No space"):
        run_protocol(tiny, tmp_path, splits=[0], overrides={"steps": 3}, progress=False)
    journal = tmp_path / f"{tiny}.partial.jsonl"
    assert len(journal.read_text().splitlines()) == 2 and not (tmp_path / f"{tiny}.json").exists()
    monkeypatch.setattr(reproduce, "atomic_write_many", atomic_write_many)
    monkeypatch.setattr(reproduce, "_run_one", lambda spec: pytest.fail("a journaled fit ran again"))
    doc = run_protocol(tiny, tmp_path, splits=[0], overrides={"steps": 3}, progress=False)
    assert len(doc["rows"]) == 1 and not journal.exists()


def test_read_lines_skips_a_cut_line(tmp_path):
    from zoo.io import append_line, read_lines

    path = tmp_path / "j.jsonl"
    assert read_lines(path) == []
    with open(path, "a") as fh:
        append_line(fh, json.dumps({"a": 1}))
        append_line(fh, json.dumps({"b": [2, 3]}))
    with open(path, "a") as fh:
        fh.write('{"c": ')  # a kill mid-line
    assert read_lines(path) == [{"a": 1}, {"b": [2, 3]}]
