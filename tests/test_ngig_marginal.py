"""The N-GIG prior's marginal form (``NGIGPrior.hierarchical = False``: the inverse-gamma local scales
integrated out, Sheinkman & Wade 2025, arXiv:2411.11132, Eqs. 5-6) against quadrature of the hierarchical
form, and the ``activation`` option of ``ngig-bnn``."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from scipy import integrate, stats

from zoo.experiments.registry import build
from zoo.infer.mcmc import NUTSConfig, fit_nuts

F64 = torch.float64


def _trace(model, x):
    with torch.no_grad():
        return poutine.trace(model).get_trace(x, None)


@pytest.mark.parametrize("nu_loc, delta_loc", [(-1.5, 1.0), (-0.7, 2.5)])
def test_marginal_weight_density_is_the_integral_over_psi(nu_loc: float, delta_loc: float) -> None:
    """``log p(W | tau)`` of the marginal site equals ``log int N(W; 0, tau psi) IG(psi; a, b) dpsi`` by
    quadrature, with ``a = -nu_loc`` and the App. D.1 scaling ``b = (delta_loc / sqrt(fan_in))^2 / 2``."""
    model, _, _ = build("ngig-bnn", 3, 1, "regression", hidden=(2,), nu_loc=nu_loc, delta_loc=delta_loc)
    model = model.to(F64)
    model.prior.hierarchical = False
    x = torch.randn(5, 3, dtype=F64)
    tr = _trace(model, x)
    assert not any(name.endswith(".psi") for name in tr.nodes), list(tr.nodes)
    site, tau = tr.nodes["fc0.weight"], float(tr.nodes["fc0.tau"]["value"])
    w = site["value"].detach().numpy().ravel()
    got = site["fn"].base_dist.log_prob(site["value"]).detach().numpy().ravel()
    a, b = -nu_loc, 0.5 * (delta_loc / math.sqrt(3)) ** 2

    def integrand(psi: float, wi: float) -> float:
        return stats.norm.pdf(wi, scale=math.sqrt(tau * psi)) * stats.invgamma.pdf(psi, a, scale=b)

    want = [math.log(integrate.quad(integrand, 0, np.inf, args=(wi,), limit=200)[0]) for wi in w]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_forms_share_global_scales_and_bias_sites() -> None:
    """The two forms differ only in the ``psi`` sites: the marginal form keeps ``tau`` per layer, the biases
    and the weights, and a GIG with ``lam_loc > 0`` (no closed-form marginal) offers no choice."""
    model, _, _ = build("ngig-bnn", 2, 1, "regression", hidden=(3,))
    x = torch.randn(4, 2)
    hier = {n for n, s in _trace(model, x).nodes.items() if s["type"] == "sample"}
    assert {"fc0.psi", "fc1.psi"} <= hier and model.prior.hierarchical is True
    model.prior.hierarchical = False
    marg = {n for n, s in _trace(model, x).nodes.items() if s["type"] == "sample"}
    assert marg == hier - {"fc0.psi", "fc1.psi"}
    gig, _, _ = build("ngig-bnn", 2, 1, "regression", hidden=(3,), lam_loc=1.0)
    assert gig.prior.hierarchical is None


def test_nuts_samples_the_marginal_form_and_a_gig_prior_hierarchically() -> None:
    """``fit_nuts`` switches an inverse-gamma N-GIG prior to its marginal form (no ``psi`` draws) and leaves
    a ``lam_loc > 0`` prior hierarchical (its ``psi`` drawn), recording which form it sampled."""
    pyro.clear_param_store()
    x = torch.randn(10, 2)
    y = x[:, 0] - x[:, 1]
    cfg = NUTSConfig(chains=1, warmup=4, samples=3, max_tree_depth=2, jit_compile=False, progress=False)
    for opts, form in (({}, False), ({"lam_loc": 1.0}, None)):
        model, _, _ = build("ngig-bnn", 2, 1, "regression", hidden=(2,), **opts)
        result = fit_nuts(model, (x, y), cfg)
        assert result.config["hierarchical_form"] is form
        assert ("fc0.psi" in result.samples) is (form is None)
        assert torch.isfinite(result.predict(x, num_samples=3).mean).all()


def test_activation_option() -> None:
    """``activation="tanh"`` reaches the network (its forward pass is the tanh MLP computed by hand); an
    unknown name is a ValueError naming ``activation`` before anything is built."""
    model, _, spec = build("ngig-bnn", 1, 1, "regression", hidden=(3,), activation="tanh")
    assert spec["options"] == {"activation": "tanh"}
    x = torch.linspace(-2, 2, 7).unsqueeze(-1)
    w0, b0, w1, b1 = torch.randn(3, 1), torch.randn(3), torch.randn(1, 3), torch.randn(1)
    params = {"fc0.weight": w0, "fc0.bias": b0, "fc1.weight": w1, "fc1.bias": b1}
    want = (torch.tanh(x @ w0.T + b0) @ w1.T + b1).squeeze(-1)
    torch.testing.assert_close(model.architecture.forward(x, params).squeeze(-1), want)
    relu, _, _ = build("ngig-bnn", 1, 1, "regression", hidden=(3,))
    assert not torch.allclose(relu.architecture.forward(x, params).squeeze(-1), want)
    with pytest.raises(ValueError, match="activation"):
        build("ngig-bnn", 1, 1, "regression", hidden=(3,), activation="softsign")
