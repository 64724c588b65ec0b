"""Projection-predictive unit pruning (:mod:`zoo.sparsity`): a planted network is pruned to exactly its
planted units, the projection is the least-squares refit it claims to be, and bad inputs are refused."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.experiments.registry import build
from zoo.infer.loop import fit
from zoo.sparsity import ProjpredConfig, projpred_units
from zoo.sparsity.projpred import _project, _search

W = torch.tensor([[2.0, 0.0, 0.0, 0.0], [0.0, -2.0, 1.0, 0.0], [1.0, 1.0, 0.0, 2.0]])
B = torch.tensor([0.5, -0.3, 0.0])
V = torch.tensor([1.5, -2.0, 1.0])


def _planted(n: int = 200, seed: int = 0, device: torch.device | None = None):
    """A 4-8-1 ReLU network with three planted units (0, 1, 2) and five that a projection can drop at no
    cost: unit 3 duplicates unit 0 and shares its output weight, units 4-5 have output weight 0, units 6-7
    never fire (bias -100).  Fitted with the delta guide at these weights (``steps=0``)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    w0 = torch.cat([W, W[:1], torch.randn(2, 4, generator=g), torch.randn(2, 4, generator=g)])
    b0 = torch.cat([B, B[:1], torch.zeros(2), torch.full((2,), -100.0)])
    w1 = torch.tensor([[V[0] / 2, V[1], V[2], V[0] / 2, 0.0, 0.0, 3.0, -1.0]])
    f = torch.relu(x @ W.T + B) @ V
    y = f + 0.1 * torch.randn(n, generator=g)
    x, y = x.to(device), y.to(device)
    model, guide, _ = build("mfvi-bnn", 4, 1, "regression", hidden=[8], guide="delta", seed=0)
    result = fit(model, guide, x, y, steps=0, progress=False, device=device)
    with result.activate():
        guide(x, y)
        params = dict(guide.named_parameters())
        with torch.no_grad():
            planted = {"fc0.weight": w0, "fc0.bias": b0, "fc1.weight": w1, "fc1.bias": [0.0]}
            for name, value in planted.items():
                params[f"{name}_unconstrained"].copy_(torch.as_tensor(value))
    return result, x, y


@pytest.mark.parametrize("rule", ["nll", "se", "kl"])
def test_planted_network_keeps_exactly_the_planted_units(rule: str, device) -> None:
    result, x, y = _planted(device=device)
    pp = projpred_units(result, x, y, ProjpredConfig(num_draws=8, rule=rule))
    assert len(pp.kept) == 3 and {1, 2} <= set(pp.kept) and len({0, 3} & set(pp.kept)) == 1, pp.kept
    removed = [p["removed"] for p in pp.path[1:6]]
    assert set(removed) | set(pp.kept) >= set(range(8)) - set(removed) and len(set(removed)) == 5
    assert all(p["kl"] < 1e-6 for p in pp.path[1:6])  # the five free units cost nothing
    assert pp.path[6]["kl"] > 0.1 and pp.path[6]["delta_elpd"] < -10  # a planted unit does
    mean, sd = pp.predict(x)
    full, full_sd = pp.predict(x, pruned=False)
    torch.testing.assert_close(mean, full, atol=1e-5, rtol=0)  # the pruned network is the same function
    assert torch.allclose(sd, full_sd, atol=1e-6)


def test_projection_is_the_least_squares_refit_and_its_noise_variance() -> None:
    g = torch.Generator().manual_seed(1)
    h = torch.rand(3, 40, 5, generator=g, dtype=torch.float64)
    f = torch.randn(3, 40, generator=g, dtype=torch.float64)
    s2 = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    beta, sp = _project(h, f, s2, [0, 2, 4], ridge=1e-12)
    for s in range(3):
        a = torch.cat([torch.ones(40, 1, dtype=torch.float64), h[s][:, [0, 2, 4]]], 1)
        ls = torch.linalg.lstsq(a, f[s].unsqueeze(-1)).solution.squeeze(-1)
        torch.testing.assert_close(beta[s], ls, atol=1e-8, rtol=1e-8)
        resid = f[s] - a @ ls
        assert float(sp[s]) == pytest.approx(float(s2[s] + resid.pow(2).mean()), rel=1e-10)
    # KL(N(f, s2) || N(f_perp, s2 + mse)) per point averages to 0.5 log(sp / s2) (the mse cancels)
    assert 0.5 * math.log(float(sp[0] / s2[0])) > 0


def _exhaustive_path(h, f, s2, ridge):
    """The greedy backward search by brute force: every candidate refitted by ``lstsq`` (ground truth)."""
    units, order, kls = list(range(h.shape[-1])), [], []
    while len(units) > 1:
        trials = []
        for r in units:
            _, sp = _project(h, f, s2, [u for u in units if u != r], ridge)
            trials.append((float(0.5 * (sp / s2).log().mean()), r))
        kl, r = min(trials)
        units.remove(r)
        order.append(r)
        kls.append(kl)
    return order, kls


@pytest.mark.parametrize("refresh", [1, 3, 1000])
def test_downdated_search_equals_refitting_every_candidate(refresh: int) -> None:
    """The rank-one downdate scores and refits exactly what refitting every candidate would: the same
    removal order and path KLs, whether the Gram inverse is refactorized every step or never."""
    g = torch.Generator().manual_seed(3)
    s, n, k = 4, 60, 12
    h = torch.relu(torch.randn(s, n, k, generator=g, dtype=torch.float64))
    f = (h * torch.linspace(2.0, 0.01, k, dtype=torch.float64)).sum(-1) + 0.3 * torch.randn(s, n, generator=g)
    s2 = torch.tensor([0.2, 0.5, 1.0, 0.3], dtype=torch.float64)
    cfg = ProjpredConfig(refresh=refresh, ridge=1e-10)

    def score(units, beta):
        a = torch.cat([torch.ones(s, n, 1, dtype=torch.float64), h[..., units]], -1)
        sp = s2 + (f - (a @ beta.unsqueeze(-1)).squeeze(-1)).pow(2).mean(-1)
        return {"kl": float(0.5 * (sp / s2).log().mean()), "delta_elpd": 0.0, "se": 0.0, "n": n,
                "sigma_perp": sp}  # fmt: skip

    path = _search(h, f, s2, cfg, score)
    order, kls = _exhaustive_path(h, f, s2, 1e-10)
    assert [p["removed"] for p in path[1:]] == order
    path_kl = torch.tensor([p["kl"] for p in path[1:]])
    torch.testing.assert_close(path_kl, torch.tensor(kls), rtol=1e-7, atol=1e-10)
    with pytest.raises(ValueError, match="refresh"):
        ProjpredConfig(refresh=0)


def test_refusals() -> None:
    result, x, y = _planted(n=40)
    with pytest.raises(ValueError, match="rule must be"):
        ProjpredConfig(rule="aic")
    with pytest.raises(ValueError, match="nll_tol"):
        ProjpredConfig(nll_tol=-1.0)
    with pytest.raises(ValueError, match="x: expected a"):
        projpred_units(result, x[:, :3], y)
    with pytest.raises(ValueError, match="y: expected"):
        projpred_units(result, x, y[:-1])
    bad = x.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="must be finite"):
        projpred_units(result, bad, y)
    with pytest.raises(TypeError, match="config must be a ProjpredConfig"):
        projpred_units(result, x, y, {"rule": "nll"})
    model, guide, _ = build("bowtie", 4, 1, "regression", hidden=[3], seed=0)
    res = fit(model, guide, x, y, steps=1, progress=False)
    with pytest.raises(ValueError, match="predicts in closed form"):
        projpred_units(res, x, y)
    model, guide, _ = build("mfvi-bnn", 4, 1, "binary", hidden=[3], seed=0)
    res = fit(model, guide, x, (y > 0).float(), steps=1, progress=False)
    with pytest.raises(ValueError, match="Gaussian"):
        projpred_units(res, x, (y > 0).float())
    model, guide, _ = build("mfvi-bnn", 4, 1, "regression", hidden=[3], seed=0, student_t_df=4)
    res = fit(model, guide, x, y, steps=1, progress=False)
    with pytest.raises(ValueError, match="Gaussian.*StudentTLikelihood"):
        projpred_units(res, x, y)


def test_cli_fit_prune_projpred_end_to_end(data_dir, tmp_path, capsys) -> None:
    """``zoo fit ... --prune projpred`` writes the prune columns into metrics.json and prints them."""
    import json

    from zoo.experiments.cli import main

    out = tmp_path / "run"
    args = ["fit", "mfvi-bnn", "--dataset", "uci:yacht", "--hidden", "6", "--steps", "300", "--no-progress"]
    assert main([*args, "--prune", "projpred", "--data-dir", str(data_dir), "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert 1 <= m["pp_units_kept"] <= m["pp_units_total"] == 6 and len(m["prune_kept"]) == m["pp_units_kept"]
    assert m["prune_rule"] == "nll" and m["prune_tol"] == 0.01 and m["prune_seconds"] > 0
    assert math.isfinite(m["prune_delta_nll"]) and math.isfinite(m["prune_delta_rmse"])
    assert f"projpred: kept {m['pp_units_kept']} of 6 units of fc0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "model, dataset, extra, message",
    [
        ("bowtie", "uci:yacht", [], "predicts in closed form"),
        ("mfvi-bnn", "breast-cancer", [], "projpred pruning is for regression"),
        ("mfvi-bnn", "uci:yacht", ["--prune-tol", "0"], "--prune-tol: must be a finite number > 0"),
        ("mfvi-bnn", "uci:yacht", ["--ensemble", "2"], "prunes one fit; not with --ensemble"),
        ("mfvi-bnn", "uci:yacht", ["--option", "heteroscedastic=true"], "needs a network with one output"),
    ],
)
def test_cli_prune_refusals_before_any_fit(data_dir, tmp_path, capsys, model, dataset, extra, message):
    from zoo.experiments.cli import main

    argv = ["fit", model, "--dataset", dataset, "--prune", "projpred", *extra, "--data-dir", str(data_dir)]
    with pytest.raises(SystemExit):
        main([*argv, "--out", str(tmp_path / "o")])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "name, guide",
    [("mfvi-bnn", None), ("hs-bnn", "structured"), ("reg-hs-bnn", None), ("lbbnn", None), ("cm-bnn", None)],
)
def test_every_family_with_units_can_be_pruned(name: str, guide) -> None:
    """The weights of any guide that samples the model's prior sites are replayed per draw and projected."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 3, generator=g)
    y = torch.tanh(2 * x[:, 0]) + 0.1 * torch.randn(60, generator=g)
    model, guide_, _ = build(name, 3, 1, "regression", hidden=[4], guide=guide, seed=0)
    result = fit(model, guide_, x, y, steps=30, progress=False)
    pp = projpred_units(result, x, y, ProjpredConfig(num_draws=10))
    assert 1 <= len(pp.kept) <= 4 and [p["size"] for p in pp.path] == [4, 3, 2, 1]
    kls = [p["kl"] for p in pp.path]
    assert kls[0] < 1e-6 and all(b >= a - 1e-9 for a, b in zip(kls, kls[1:]))  # nested: KL grows as units go


def test_protocol_runs_carry_the_prune_columns() -> None:
    """A protocol spec with ``prune: "projpred"`` gets the prune columns in its row, consistent with the
    fit's own test metrics; a bad value or an ensemble is refused before any fit."""
    from zoo.experiments.protocol import RunSpec
    from zoo.experiments.reproduce import _run_one, run_config

    row = _run_one(RunSpec("g", "mfvi-bnn", "toy-hs", 0, {"hidden": [6], "steps": 200, "prune": "projpred"}))
    assert row["pp_units_total"] == 6 and 1 <= row["pp_units_kept"] <= 6
    assert row["prune_rule"] == "nll" and row["prune_seconds"] >= 0
    assert math.isfinite(row["prune_delta_nll"]) and math.isfinite(row["prune_delta_rmse"])
    assert abs(row["prune_full_nll"] - row["nll_mixture"]) < 0.2  # the same posterior, other draws
    for bad, message in (({"prune": "lasso"}, "prune must be one of projpred"), ({"prune": "projpred",
                         "ensemble": 2}, "not with ensemble")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            run_config(RunSpec("g", "mfvi-bnn", "toy-hs", 0, bad))


def test_spread_report_summarizes_the_units_kept(monkeypatch, capsys, benchmark_script) -> None:
    mod = benchmark_script("projpred_spread")
    rows = [
        {"seed": s, "rmse": 1.0, "nll": 2.0, "pp_units_kept": k, "pp_units_total": 50,
         "prune_delta_nll": 0.001, "prune_delta_rmse": -0.01, "prune_seconds": 0.5}
        for s, k in enumerate([2, 4, 3])
    ]  # fmt: skip
    text = mod.markdown(rows, "t", "cmd")
    assert "mean 3.0 ± 1.0, min 2, max 4" in text and "| 1 | 1.000 | 2.000 | 4 of 50 | +0.0010 |" in text
    monkeypatch.delenv("ZOO_DATA_DIR", raising=False)
    with pytest.raises(SystemExit):
        mod.main(["--seeds", "0", "--dataset", "uci:yacht"])
    assert "needs ZOO_DATA_DIR" in capsys.readouterr().err


def test_se_rule_treats_round_off_as_no_loss() -> None:
    """On a GPU a lossless removal measured delta_elpd -5.7e-6 with se 3.4e-6 over 200 points (round-off
    of the same size as its own standard error): the "se" rule must keep going; a real loss still stops it."""
    from zoo.sparsity.projpred import _select

    def step(size, removed, delta, se):
        return {"size": size, "removed": removed, "kl": 0.0, "delta_elpd": delta, "se": se, "n": 200}

    path = [step(4, None, -3.7e-6, 3.3e-6), step(3, 3, -5.7e-6, 3.4e-6), step(2, 0, -516.0, 17.0),
            step(1, 1, -639.0, 18.6)]  # fmt: skip
    assert _select(path, ProjpredConfig(rule="se")) == [0, 1, 2]  # unit 3 goes, unit 0 stays
    small = [step(2, 0, -1e-4, 1e-4), step(1, 1, -2e-3, 1e-4)]  # within z * se, then 1e-5 nats/point more
    assert _select(path[:2] + small, ProjpredConfig(rule="se")) == [1, 2]
