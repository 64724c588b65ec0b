"""Every script in ``benchmarks/`` still imports against the library (a renamed helper once broke
``nuts_uci.py`` unnoticed), and ``nuts_uci.py`` keeps the committed rows a new invocation does not replace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_imports(name, benchmark_script):
    mod = benchmark_script(name)  # module-level imports run here; the work sits behind __main__
    public = not name.startswith("_")
    assert callable(getattr(mod, "main", None)) or not public, f"benchmarks/{name}.py has no main()"


def _row(protocol, dataset, split, rmse):
    return {"protocol": protocol, "model": "m", "dataset": dataset, "split": split, "rmse": rmse}


def test_nuts_uci_merges_committed_rows(tmp_path, benchmark_script):
    mod = benchmark_script("nuts_uci")
    earlier = tmp_path / "nuts-uci.json"
    old = [_row("mfvi-uci", "uci:yacht", 0, 1.0), _row("mfvi-uci", "uci:yacht", 1, 2.0)]
    earlier.write_text(json.dumps({"rows": old}))
    new = [_row("mfvi-uci", "uci:yacht", 1, 3.0), _row("hs-uci", "uci:yacht", 1, 4.0)]
    merged = mod._merge_rows(new, earlier)
    got = {(r["protocol"], r["split"]): r["rmse"] for r in merged}
    assert got == {("mfvi-uci", 0): 1.0, ("mfvi-uci", 1): 3.0, ("hs-uci", 1): 4.0}  # split 1 replaced
    assert [r["protocol"] for r in merged] == ["mfvi-uci", "mfvi-uci", "hs-uci"]
    assert mod._merge_rows(new, tmp_path / "absent.json") == [new[0], new[1]]


def _fit(instance, guide, seed, w2):
    return {"instance": instance, "model": "lbbnn", "guide": guide, "seed": seed, "steps": None,
            "seconds": 1.0, "scores": {"y": {"w2": w2}}}  # fmt: skip


def test_scoreboard_render_adds_to_the_committed_board(tmp_path, benchmark_script):
    """A render from a journal of one instance keeps the committed cells of the others (a fresh checkout has
    no journal), replaces the committed rows it redoes, and records every command."""
    import argparse

    from zoo.reference.store import default_root, stored_names

    if not {"ss-yacht", "ss-diabetes"} <= set(stored_names(default_root())):
        pytest.skip("the stored references ss-yacht and ss-diabetes are not in this checkout")
    mod = benchmark_script("scoreboard")
    carried = {
        "lbbnn:lcrt": {"seeds": 5, "errors": [], "seconds_mean": 3.0, "headline": {"mean": 0.5, "sd": 0}}
    }
    old = {
        "command": "first",
        "board": {"ss-diabetes": carried},
        "instance_steps": {"ss-diabetes": [100]},
        "rows": [_fit("ss-yacht", "mvn", 0, 9.0), _fit("ss-yacht", "mvn", 1, 2.0)],
    }
    (tmp_path / "scoreboard.json").write_text(json.dumps(old))
    journal = tmp_path / "scoreboard.partial.jsonl"
    redone = [_fit("ss-yacht", "mvn", 0, 5.0), _fit("ss-yacht", "mvn", 0, 4.0)]  # journaled twice: the last
    journal.write_text("".join(json.dumps(r) + "\n" for r in redone))
    args = argparse.Namespace(out=str(tmp_path), root=str(default_root()), seeds=2, steps=None)
    mod._render(args, journal, "second")
    rec = json.loads((tmp_path / "scoreboard.json").read_text())
    assert list(rec["board"]) == ["ss-diabetes", "ss-yacht"]  # the registry's order
    assert rec["board"]["ss-diabetes"] == carried and rec["instance_steps"]["ss-diabetes"] == [100]
    cell = rec["board"]["ss-yacht"]["lbbnn:mvn"]
    assert cell["seeds"] == 2 and cell["y"]["w2"]["mean"] == pytest.approx(3.0)  # seed 0 redone: 4, not 9
    assert len(rec["rows"]) == 2 and rec["commands"] == ["first", "second"]
    md = (tmp_path / "scoreboard.md").read_text()
    assert "* `first`" in md and "* `second`" in md and "## ss-diabetes" in md and "## ss-yacht" in md
    assert (tmp_path / "scoreboard.png").stat().st_size > 0
    mod._render(args, journal, None)  # --render-only: no fit ran, no command is recorded
    again = json.loads((tmp_path / "scoreboard.json").read_text())
    assert again["commands"] == ["first", "second"] and again["command"] == "second"


def test_scoreboard_specs_filter_models_and_guides(benchmark_script):
    from zoo.experiments.registry import get_entry
    from zoo.reference.instances import get_instance

    mod = benchmark_script("scoreboard")
    inst = get_instance("cm-yacht-linear")
    assert mod._specs(inst, None) == [("cm-bnn", g) for g in get_entry("cm-bnn").guides]
    assert mod._specs(inst, None, {"flow", "collapsed"}) == [("cm-bnn", "collapsed"), ("cm-bnn", "flow")]
    assert mod._specs(inst, {"mfvi-bnn"}) == []


def test_calibration_merges_committed_rows(tmp_path, benchmark_script):
    """A run into the results folder adds to the committed table: rows it redoes are replaced, the others kept
    (a run on a fresh checkout once would have rewritten the table from its own journal)."""
    mod = benchmark_script("calibration")
    record, journal = tmp_path / "calibration.json", tmp_path / "calibration.partial.jsonl"

    def row(model, split, nll):
        return {"model": model, "dataset": "uci:yacht", "split": split, "nll": nll}

    record.write_text(json.dumps({"rows": [row("m", 0, 1.0), row("m", 1, 2.0), row("m+x", 0, 3.0)]}))
    journal.write_text("".join(json.dumps(r) + "\n" for r in [row("m", 1, 5.0), row("m", 1, 6.0)]))
    got = {(r["model"], r["split"]): r["nll"] for r in mod.merged_rows(journal, record)}
    assert got == {("m", 0): 1.0, ("m+x", 0): 3.0, ("m", 1): 6.0}
    assert mod.merged_rows(tmp_path / "none.jsonl", tmp_path / "none.json") == []


def _guide_row(dataset, guide, elbo, fit):
    return {
        "dataset": dataset,
        "split": 0,
        "guide": guide,
        "elbo_full": elbo,
        "elbo_full_se": 0.25,
        "nll": 1.0,
        "coverage95": 0.95,
        **fit,
    }


def test_guides_elbo_table_pairs_the_guides(benchmark_script):
    mod = benchmark_script("guides_elbo")
    rows = [
        _guide_row("uci:yacht", "lcrt", 222.7, {"rmse": 0.53}),
        _guide_row("uci:yacht", "mean-field", -276.3, {"rmse": 4.6}),
        _guide_row("digits", "lcrt", -884.2, {"accuracy": 0.972}),
        _guide_row("digits", "mean-field", -993.1, {"accuracy": 0.972}),
        _guide_row("uci:energy", "lcrt", -84.0, {"rmse": 2.1}),  # no partner: left out
    ]
    lines = mod.render(rows, ["lcrt", "mean-field"]).splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("| dataset | split | ELBO lcrt | ELBO mean-field | RMSE / acc. lcrt |")
    assert (
        lines[2]
        == "| uci:yacht | 0 | 222.7 ± 0.2 | -276.3 ± 0.2 | 0.53 | 4.6 | 1.000 | 1.000 | 0.950 | 0.950 |"
    )
    assert lines[3].startswith("| digits | 0 | -884.2 ± 0.2 | -993.1 ± 0.2 | 0.972 | 0.972 |")
    three = mod.render(
        rows[:2] + [_guide_row("uci:yacht", "mvn", 1.5, {"rmse": 0.7})], ["lcrt", "mean-field", "mvn"]
    )
    assert three.splitlines()[2].startswith(
        "| uci:yacht | 0 | 222.7 ± 0.2 | -276.3 ± 0.2 | 1.5 ± 0.2 | 0.53 |"
    )


@pytest.mark.parametrize("name", ["guides_elbo", "lbbnn_guides_elbo"])
def test_guides_elbo_refuses_bad_arguments_or_an_existing_out_first(
    tmp_path, benchmark_script, monkeypatch, name
):
    mod = benchmark_script(name)
    monkeypatch.setattr(
        sys.modules["guides_elbo"] if name != "guides_elbo" else mod,
        "fit_row",
        lambda *a, **k: pytest.fail("a fit ran before the arguments were checked"),
    )
    with pytest.raises(ValueError, match="--out must name a .json"):
        mod.main(["--out", str(tmp_path / "rows.txt")])
    (tmp_path / "rows.md").write_text("earlier table")
    with pytest.raises(ValueError, match="exists; pass --overwrite"):
        mod.main(["--out", str(tmp_path / "rows.json")])
    assert (tmp_path / "rows.md").read_text() == "earlier table"
    for guides in (["normal"], ["normal", "normal"]):
        with pytest.raises(ValueError, match="--guides must name at least two different guides"):
            mod.main(["--model", "mfvi-bnn", "--guides", *guides])


def test_guides_elbo_full_elbo_is_the_elbo_on_the_training_rows(benchmark_script):
    """On the conjugate-family entry: the CAVI fit's full-data ELBO is its exact ELBO on the standardized
    training rows (standard error 0); the autoguide's is a 32-draw mean that agrees with an independent
    4000-draw ``Trace_ELBO`` within five standard errors; the rows carry both, the CAVI optimum above."""
    import torch
    from pyro.infer import Trace_ELBO

    from zoo.data.tensors import fit_tensors
    from zoo.experiments.runs import fit_on_dataset

    mod = benchmark_script("guides_elbo")
    kw = {"hidden": [], "num_samples": 5, "split": 0, "seed": 0, "progress": False}
    fits = {
        g: fit_on_dataset("blr-cavi", "diabetes", guide=g, steps=300, **kw).result for g in ("cavi", "normal")
    }
    xtr, ytr, *_ = fit_tensors(load_diabetes_split0(), torch.device("cpu"), standardize_y=True)
    for guide, r in fits.items():
        got, se = mod.full_elbo(r, load_diabetes_split0())
        with r.activate(), torch.no_grad():
            if guide == "cavi":
                assert se == 0.0 and got == pytest.approx(float(r.guide.closed_form_elbo(r.model, xtr, ytr)))
            else:
                many = -float(Trace_ELBO(num_particles=4000).loss(r.model, r.guide, xtr, ytr))
                assert 0.0 < se and abs(got - many) < 5 * se
    rows = [mod.fit_row("blr-cavi", "diabetes", 0, g, steps=300, hidden=[], num_samples=5) for g in fits]
    assert rows[0]["elbo_full_se"] == 0.0 and rows[1]["elbo_full"] < rows[0]["elbo_full"]
    assert {"rmse", "nll", "coverage95", "fit_seconds", "elbo"} <= set(rows[1])


def load_diabetes_split0():
    from zoo.data.registry import load_dataset

    return load_dataset("diabetes", 0)


def test_calibration_target_table_marks_what_is_outside(benchmark_script):
    mod = benchmark_script("_calibration_target")

    def entry(model, dataset, cov, splits=5, sd=None):
        return {"model": model, "dataset": dataset, "coverage95": cov, "splits": splits, "coverage95_sd": sd}

    summary = [
        entry("m", "yacht", 0.984, 10),
        entry("m", "energy", 0.9204),
        entry("m", "kin8nm", 0.919),
        entry("m+x", "yacht", 0.95),  # not a default: left out
        entry("n", "energy", 0.98),
    ]
    lines = mod.target_table(summary)
    assert lines[2] == "| model | yacht | energy | kin8nm | inside | beyond |"
    assert lines[4] == "| m | **0.984** (10) | 0.920 (5) | **0.919** (5) | 1/3 | 0 |"
    assert lines[5] == "| n | – | 0.980 (5) | – | 1/1 | 0 |"
    assert mod.target_table([entry("m+x", "yacht", 0.95)]) == []
    # a guide other than the entry's default is not a default either
    assert (
        mod.target_table([entry("lbbnn:mean-field", "yacht", 1.0), entry("hs-bnn:structured", "yacht", 0.97)])
        == []
    )
    assert [ln.split(" |")[0] for ln in mod.target_table([entry("lbbnn:lcrt", "yacht", 0.97)])[4:5]] == [
        "| lbbnn:lcrt"
    ]
    # with the splits' sd: the t half-width t(0.975, 9) sd / sqrt(10) = 2.2622 * 0.02 / 3.1623 = 0.0143;
    # a cell is "beyond" only when its whole interval is outside the target
    near, far = entry("m", "yacht", 0.99, 10, 0.02), entry("m", "energy", 0.90, 10, 0.02)
    assert mod.split_interval(near) == pytest.approx(2.262157 * 0.02 / 10**0.5, rel=1e-5)
    assert mod.split_interval(entry("m", "yacht", 0.99, 1, None)) is None
    assert mod.target_table([near, far])[4] == (
        "| m | **0.990** ± 0.014 (10) | **0.900** ± 0.014 (10) | 0/2 | 1 |"
    )
    # a replication on more splits is listed after the table, not mixed into it
    wider = [entry("m", "yacht", 0.97, 20, 0.02), entry("m", "energy", 0.90, 10, 0.02)]
    lines = mod.target_table([near, far], wider)
    assert lines[4].startswith("| m | **0.990** ± 0.014 (10) |")
    assert lines[-2] == "* m on yacht: 0.970 ± 0.009 (20)" and not any("on energy" in x for x in lines)


def test_calibration_choice_table_counts_the_kept_likelihoods_and_the_elbo_differences(benchmark_script):
    mod = benchmark_script("_calibration_choice")

    def row(kept, e0, e1):
        return {
            "likelihoods": 2,
            "likelihood": kept,
            "likelihood_name": ("gaussian", "t4")[kept],
            "likelihood_elbo_0": e0,
            "likelihood_elbo_1": e1,
        }

    rows = [row(1, 10.0, 60.0), row(1, -5.0, 15.0), row(0, 3.0, -7.0)]
    summary = mod.choice_summary(rows)
    assert summary["kept"] == {"gaussian": 1, "t4": 2}
    (gain,) = summary["gains"]
    assert gain == pytest.approx((20.0, -10.0, 50.0))
    # rows without a choice, or with different numbers of candidates, have no summary
    assert mod.choice_summary([{"coverage95": 0.95}]) is None
    assert mod.choice_summary([row(1, 0.0, 1.0), {**row(0, 1.0, 0.0), "likelihoods": 3}]) is None
    assert mod.choice_summary([]) is None
    entry = {"model": "m+c", "dataset": "yacht", "splits": 3, "coverage95": 0.97, "nll": 1.0, "rmse": 0.8}
    lines = mod.choice_table([{**entry, "choice": summary}, {**entry, "model": "m", "choice": None}])
    assert lines[4] == "| m+c | yacht | 3 | gaussian 1, t4 2 | +20.0 [-10.0, +50.0] | 0.970 | 1.000 | 0.8 |"
    assert len(lines) == 6 and lines[-1] == ""
    assert mod.choice_table([{**entry, "choice": None}]) == []


def test_calibration_target_is_on_splits_0_to_9(tmp_path, benchmark_script):
    """Rows of splits 10-19 enter the per-label table and the replication lines, not the target table."""
    mod = benchmark_script("calibration")
    rows = [
        {"model": "m", "dataset": "yacht", "split": k, "coverage95": 0.99 if k < 10 else 0.93, "nll": 1.0,
         "rmse": 1.0, "noise_ratio": 1.0, "epistemic_share": 0.1,
         "coverage": {str(lv): lv for lv in mod.LEVELS}, "fit_seconds": 1.0}
        for k in range(20)
    ]  # fmt: skip
    (tmp_path / "calibration.partial.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = mod.main(["--render-only", "--out", str(tmp_path)])
    assert summary[0]["splits"] == 20 and summary[0]["coverage95"] == pytest.approx(0.96)
    record = json.loads((tmp_path / "calibration.json").read_text())
    assert record["target"][0]["splits"] == 10 and record["target"][0]["coverage95"] == pytest.approx(0.99)
    text = (tmp_path / "calibration.md").read_text()
    assert "| m | **0.990** ± 0.000 (10) | 0/1 | 1 |" in text
    assert "* m on yacht: 0.960 ± 0.014 (20)" in text


def test_reference_pilot_ess_summary(benchmark_script):
    """The pilot's ESS: about n for independent draws, about n (1 - rho) / (1 + rho) for an AR(1) chain."""
    mod = benchmark_script("reference_pilot")
    rng = np.random.default_rng(0)
    n, rho = 4000, 0.9
    ar = np.zeros((n, 2))
    for t in range(1, n):
        ar[t] = rho * ar[t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(2)
    got = mod.ess_summary({"iid": rng.standard_normal((n, 3)), "ar": ar})
    assert got["iid"][0] > 0.8 * n
    assert 0.5 < got["ar"][0] / (n * (1 - rho) / (1 + rho)) < 1.6 and got["ar"][0] <= got["ar"][1]
    with pytest.raises(ValueError, match="at least 4"):
        mod.ess_summary({"f": np.zeros((3, 2))})


def test_reference_pilot_runs_one_chain(benchmark_script, capsys):
    mod = benchmark_script("reference_pilot")
    assert mod.main(["gauss-221", "--warmup", "10", "--samples", "12"]) == 0
    out = capsys.readouterr().out
    assert "bulk ESS min" in out and "divergences" in out and "of 12" in out
    with pytest.raises(SystemExit):
        mod.main(["ss-diabetes"])  # an exact instance: nothing to pilot


def test_reference_pilot_sampler_overrides(benchmark_script):
    """``--no-gibbs`` runs a Gibbs instance as plain (JIT-compiled) NUTS, ``--full-mass`` adds the dense mass
    matrix, ``--centered`` / ``--non-centered`` pick the horseshoe's parameterization, and contradictory
    flags are refused."""
    import argparse

    from zoo.reference.instances import get_instance

    mod = benchmark_script("reference_pilot")
    inst = get_instance("hs-bowtie-tanh-w1")
    assert inst.sampler.gibbs and not inst.sampler.jit_compile

    def args(**kw):
        base = dict(warmup=None, samples=None, target_accept=None, gibbs=False, no_gibbs=False, seed=0)
        flags = dict(full_mass=False, interweave=False, centered=False, non_centered=False)
        return argparse.Namespace(**{**base, **flags, **kw})

    cfg = mod._config(inst, args())
    assert cfg.gibbs and not cfg.full_mass and not cfg.jit_compile
    cfg = mod._config(inst, args(no_gibbs=True, full_mass=True, target_accept=0.99))
    assert not cfg.gibbs and cfg.full_mass and cfg.jit_compile and cfg.target_accept == 0.99
    assert cfg.centered is None  # as the instance is built
    assert mod._config(inst, args(no_gibbs=True, centered=True)).centered is True
    assert mod._config(inst, args(no_gibbs=True, non_centered=True)).centered is False
    with pytest.raises(ValueError, match="--no-gibbs"):
        mod._config(inst, args(gibbs=True, no_gibbs=True))
    with pytest.raises(ValueError, match="--centered and --non-centered"):
        mod._config(inst, args(centered=True, non_centered=True))
    with pytest.raises(SystemExit):
        mod.main(["hs-bowtie-tanh-w1", "--gibbs", "--no-gibbs"])


def test_conformal_uci_resumes_its_journal_and_keeps_committed_rows(tmp_path, benchmark_script, monkeypatch):
    """A split already in the journal is not fitted again; the summary keeps the committed rows a run does
    not redo, replaces those it does, and records every command."""
    mod = benchmark_script("conformal_uci")
    monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path))
    fitted = []

    def fake(model, dataset, split, folds, share):
        fitted.append(split)
        row = dict.fromkeys(mod.FIELDS, 0.9) | {"rmse": 1.0, "rmse_conformal": 1.1, "seconds": 2.0}
        return row | {"model": model, "dataset": dataset, "split": split, "folds": folds, "share": share}

    monkeypatch.setattr(mod, "fit_split", fake)
    old = fake("mfvi-bnn", "yacht", 0, 5, 0.2) | {"coverage95": 0.5}
    keep = fake("mfvi-bnn", "yacht", 7, 5, 0.2)
    (tmp_path / "conformal-uci.json").write_text(json.dumps({"commands": ["first"], "rows": [old, keep]}))
    journal = tmp_path / "conformal-uci.partial.jsonl"
    journal.write_text(json.dumps(fake("mfvi-bnn", "yacht", 1, 5, 0.2)) + "\n")
    fitted.clear()
    assert mod.main(["--splits", "0", "1", "--out", str(tmp_path)]) == 0
    assert fitted == [0]  # split 1 came from the journal
    doc = json.loads((tmp_path / "conformal-uci.json").read_text())
    assert [(r["split"], r["coverage95"]) for r in doc["rows"]] == [(0, 0.9), (7, 0.9), (1, 0.9)]
    assert doc["commands"][0] == "first" and "--splits 0 1" in doc["commands"][1]
    assert not (tmp_path / "conformal-uci.partial.jsonl").exists()
    md = (tmp_path / "conformal-uci.md").read_text()
    assert "| mfvi-bnn | yacht | 0–7 (3) | 0.900 |" in md


def test_conformal_uci_refuses_bad_settings_before_any_fit(tmp_path, benchmark_script, monkeypatch):
    mod = benchmark_script("conformal_uci")
    monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(mod, "fit_split", lambda *a: pytest.fail("fitted"))
    for bad in (["--folds", "1"], ["--share", "1.5"], ["--models", "nope"]):
        with pytest.raises(SystemExit) as e:
            mod.main([*bad, "--out", str(tmp_path / "o")])
        assert e.value.code == 2
    assert not (tmp_path / "o").exists()
