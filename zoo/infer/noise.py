"""The exact coordinate update of a log-normal noise factor after a gradient fit.

A regression model's Gaussian likelihood has one latent noise site (:class:`zoo.core.likelihoods.
GaussianLikelihood`): ``sigma2 ~ InverseGamma(a0, b0)`` or ``precision ~ Gamma(a0, b0)``.  Most guides give it
a log-normal factor ``q(s) = LogNormal(m, v)`` learned by gradient with everything else (Pyro's ``AutoNormal``
puts one on every positive site; the LBBNN guides have their own).  With ``q(W)`` held fixed, the ELBO's
terms in ``u = log s`` under ``q(u) = N(m, v)`` are, up to constants (``N O`` observed scalars, ``S`` the
expected sum of squared errors ``E_q(W)[sum_n ||y_n - f(W, x_n)||^2]``, and the change of variables'
``+u``)::

    precision:  A m - B E[e^u]   + log v / 2,   E[e^u]  = exp(m + v / 2)
    sigma2:    -A m - B E[e^-u]  + log v / 2,   E[e^-u] = exp(-m + v / 2)

with ``A = a0 + N O / 2`` and ``B = b0 + S / 2`` — the parameters of the conjugate optimum
``Gamma(A, B)`` / ``InverseGamma(A, B)`` that a free-form ``q`` would take (Bishop 2006, §10.1.3; Blei,
Kucukelbir & McAuliffe 2017, Eq. 18).  Setting both derivatives to zero gives the optimum in the log-normal
family in closed form::

    v* = 1 / A,     m* = log(A / B) - 1 / (2 A)   (precision),     m* = log(B / A) + 1 / (2 A)   (sigma2).

Why after the fit: the joint gradient fit does not end there.  At the end of a default fit ``E_q[sigma2]``
sat 1.3 times above ``S / (N O)`` (``mfvi-bnn``, yacht split 0) and twice above it (``mfvi-bnn`` and
``cm-bnn``, naval split 3), so the predictive intervals were wider than the fitted ``q(W)`` implies; 1500
more Adam steps on the noise factor alone, with ``q(W)`` fixed, reach the closed form (yacht split 0).
:func:`refit_noise` applies the
update once, after the last step, from :data:`NOISE_REFIT_DRAWS` weight-space draws on all rows (a forked
random stream, so training is not perturbed); :func:`zoo.infer.loop.run_steps` keeps the training values
in ``loop_state`` and puts them back before it trains again, so a resumed fit trains exactly as an
uninterrupted one (the horseshoe guides do the same with their conjugate ``q(gamma)``,
:mod:`guides.horseshoe.noise`).

**Student-t likelihood.**  As a scale mixture of normals (:class:`zoo.core.student_t.StudentTLikelihood`)
the noise is conjugate given the mixing variables, whose optimal factors weigh each squared error by
``w_n = (df + 1) / (df + E_q[precision] z_n)`` (Tipping & Lawrence 2005, "Variational inference for
Student-t models", Neurocomputing 69).  ``S`` is then the weighted sum.  Under the log-normal optimum above
``E_q[precision] = A / B`` for both sites (``exp(m* + v*/2)`` and ``exp(-m* + v*/2)``), so ``B`` solves a
fixed point (:func:`weighted_noise_rate`) on one set of draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pyro.poutine as poutine
import torch
from pyro.distributions.transforms import biject_to
from torch import Tensor

from zoo.core.likelihoods import GaussianLikelihood
from zoo.core.model import BayesianModel

__all__ = [
    "NO_NOISE_REFIT",
    "NOISE_REFIT_DRAWS",
    "expected_squared_error",
    "final_noise_sse",
    "final_squared_error",
    "lognormal_noise_factor",
    "optimal_lognormal",
    "refit_noise",
    "residual_draws",
    "restore_training_noise",
    "weighted_noise_rate",
]

#: weight-space draws of ``S`` in the update after the last step
NOISE_REFIT_DRAWS = 32
#: iterations of :func:`weighted_noise_rate` before it gives up (it contracts; a few dozen suffice)
_FIXED_POINT_ITERATIONS = 10_000

#: the fit option pinned by the reproduction protocols whose committed rows were run before the update
#: (``mfvi-uci``, ``collapsed-uci``, the Gaussian rows of ``hs-toys``): ``RunSpec(..., {"fit_options": ...})``
NO_NOISE_REFIT = {"noise_refit": False}

_SITES = {"inverse_gamma": "sigma2", "gamma": "precision"}


def _network_output(guide, model, x: Tensor, y: Tensor, subsample: Tensor | None) -> Tensor:
    """The network output ``f`` (the model's deterministic site ``"f"``) under one draw of ``guide``."""
    guide_trace = poutine.trace(guide).get_trace(x, y, subsample)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, y, subsample)
    if "f" not in model_trace.nodes:
        raise ValueError(f"model: {type(model).__name__} records no network output site 'f'")
    return model_trace.nodes["f"]["value"]


def expected_squared_error(
    guide: Callable,
    model: BayesianModel,
    x: Tensor,
    y: Tensor,
    subsample: Tensor | None,
    precision: Tensor | float | None = None,
) -> Tensor:
    """One-draw unbiased estimate of ``E_q(W)[sum_n ||y_n - f(W, x_n)||^2]`` (each term times ``exp(-g_n)``
    under a heteroscedastic likelihood) over all ``N`` rows: the
    minibatch's sum of squares under one weight-space draw of ``guide``, times ``N / B``.  The model must
    record the network output as the deterministic site ``"f"`` (every :class:`zoo.core.model.BayesianModel`
    does).  A Student-t likelihood weighs each term by its ``noise_weights`` at ``precision``, the current
    ``E_q[precision]`` (:meth:`zoo.core.student_t.StudentTLikelihood.noise_weights`)."""
    f = _network_output(guide, model, x, y, subsample)
    yb = y if subsample is None else y.index_select(0, subsample)
    sse = model.likelihood.scaled_squared_error(f, yb, precision)
    return sse * (x.shape[0] / f.shape[0])


def final_squared_error(guide: Callable, model: BayesianModel, x: Tensor, y: Tensor, draws: int) -> float:
    """``E_q(W)[sum_n ||y_n - f(W, x_n)||^2]`` on all rows, averaged over ``draws`` weight-space draws from a
    forked random stream (the training stream stays as it was): the ``S`` of a coordinate update of the
    noise after the last step."""
    devices = [x.device.index or 0] if x.is_cuda else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        return float(sum(expected_squared_error(guide, model, x, y, None) for _ in range(draws))) / draws


def residual_draws(guide: Callable, model: BayesianModel, x: Tensor, y: Tensor, draws: int) -> Tensor:
    """The squared residuals ``z`` (:meth:`~zoo.core.likelihoods.GaussianLikelihood.squared_residuals`) on
    all rows under ``draws`` weight-space draws from a forked random stream, stacked:
    ``(draws, *y.shape)``."""
    devices = [x.device.index or 0] if x.is_cuda else []
    lik = model.likelihood
    with torch.no_grad(), torch.random.fork_rng(devices=devices):
        z = [lik.squared_residuals(_network_output(guide, model, x, y, None), y) for _ in range(draws)]
    return torch.stack(z)


def weighted_noise_rate(
    likelihood: GaussianLikelihood, z: Tensor, a: float, b0: float, b: float, tol: float = 1e-10
) -> float:
    """The rate ``b*`` of ``q(precision) = Gamma(a, b*)`` that solves ``b* = b0 + mean_d sum w(a / b*) z / 2``
    for the squared-residual draws ``z`` of :func:`residual_draws` (their first axis), with the weights
    ``w`` of ``likelihood.noise_weights`` at ``E[precision] = a / b*``; iterated from ``b`` to a relative
    change below ``tol``.  For the Student-t each term ``(df + 1) z b / (df b + a z)`` is increasing, concave
    and bounded in ``b``, so the fixed point is unique and the iteration approaches it monotonically; with
    ``a = N / 2`` and ``b0 = 0``, ``b* / a`` is the maximum-likelihood squared scale of a Student-t with
    known location and ``df`` (the EM fixed point of Lange, Little & Taylor 1989, §3).  For a Gaussian
    (weights 1) the first iterate is exact."""
    for _ in range(_FIXED_POINT_ITERATIONS):
        new = b0 + 0.5 * float((likelihood.noise_weights(z, a / b) * z).sum()) / z.shape[0]
        if abs(new - b) <= tol * new:
            return new
        b = new
    raise RuntimeError(f"weighted_noise_rate: no fixed point within {_FIXED_POINT_ITERATIONS} iterations")


def final_noise_sse(
    guide: Callable,
    model: BayesianModel,
    x: Tensor,
    y: Tensor,
    draws: int,
    a: float,
    b0: float,
    b_start: float | None = None,
) -> float:
    """The ``S`` of the exact noise update after the last step, from ``draws`` weight-space draws on all rows:
    :func:`final_squared_error` for a Gaussian likelihood; for a Student-t the weighted sum at the fixed point
    of :func:`weighted_noise_rate` for the shape ``a`` (``S = 2 (b* - b0)``), iterated from ``b_start``
    (default: the rate of the unweighted sum)."""
    lik = model.likelihood
    if not lik.weighted_noise_update:
        return final_squared_error(guide, model, x, y, draws)
    z = residual_draws(guide, model, x, y, draws)
    start = b0 + 0.5 * float(z.sum()) / draws if b_start is None else b_start
    return 2.0 * (weighted_noise_rate(lik, z, a, b0, start) - b0)


def _noise_site(model) -> tuple[str, str, float, float] | None:
    """``(noise kind, site, a0, b0)`` of a model's learned noise with a conjugate update (Gaussian, or
    Student-t through its weights), else ``None``."""
    lik = getattr(model, "likelihood", None)
    kind = getattr(lik, "noise", None)
    if getattr(lik, "task", None) != "regression" or kind not in _SITES:
        return None
    if not (lik.conjugate_noise or lik.weighted_noise_update):
        return None
    return kind, _SITES[kind], float(lik.concentration), float(lik.rate)


def _factors(guide, site: str) -> Iterator[tuple[torch.nn.Module, str, torch.nn.Module, str]]:
    """``(module, loc name, module, scale name)`` of each log-normal factor of ``site`` in ``guide``: Pyro's
    ``AutoNormal`` (``locs.<site>``, ``scales.<site>``) and guides that name their own (``noise_loc``,
    ``noise_scale`` with ``_noise_site == site``)."""
    if not isinstance(guide, torch.nn.Module):
        return
    for m in guide.modules():
        locs, scales = getattr(m, "locs", None), getattr(m, "scales", None)
        if site in getattr(locs, "_pyro_params", {}) and site in getattr(scales, "_pyro_params", {}):
            yield locs, site, scales, site
        elif getattr(m, "_noise_site", None) == site and {"noise_loc", "noise_scale"} <= set(m._pyro_params):
            yield m, "noise_loc", m, "noise_scale"


def lognormal_noise_factor(
    guide: object, model: torch.nn.Module
) -> tuple[torch.nn.Module, str, torch.nn.Module, str] | None:
    """The one log-normal factor of ``model``'s noise site in ``guide`` (see :func:`_factors`), or ``None``
    (no learned Gaussian noise, another family of factor, or more than one candidate)."""
    found = _noise_site(model)
    if found is None:
        return None
    factors = list(_factors(guide, found[1]))
    return factors[0] if len(factors) == 1 else None


def optimal_lognormal(kind: str, a0: float, b0: float, n_obs: int, sse: float) -> tuple[float, float]:
    """``(m*, v*)`` of the module docstring: the log-normal ``q`` of ``sigma2`` (``kind="inverse_gamma"``)
    or of the precision (``"gamma"``) that maximizes the ELBO given ``n_obs`` observed scalars whose
    expected sum of squared errors is ``sse``."""
    if kind not in _SITES:
        raise ValueError(f"kind must be one of {sorted(_SITES)}, got {kind!r}")
    if not (n_obs > 0 and math.isfinite(sse) and sse >= 0):
        raise ValueError(f"n_obs must be positive and sse finite and >= 0, got {n_obs!r}, {sse!r}")
    a, b = a0 + 0.5 * n_obs, b0 + 0.5 * sse
    m = math.log(a / b) - 0.5 / a if kind == "gamma" else math.log(b / a) + 0.5 / a
    return m, 1.0 / a


def _raw(module: torch.nn.Module, name: str) -> Tensor:
    """The unconstrained tensor behind PyroParam ``name`` (the one the optimizer steps)."""
    return getattr(module, f"{name}_unconstrained")


def _set(module: torch.nn.Module, name: str, value: float) -> None:
    """Write the constrained ``value`` into the unconstrained tensor of PyroParam ``name``, in place."""
    constraint = module._pyro_params[name][0]
    raw = _raw(module, name)
    with torch.no_grad():
        raw.copy_(biject_to(constraint).inv(torch.as_tensor(value, dtype=raw.dtype, device=raw.device)))


def refit_noise(
    guide: Callable, model: torch.nn.Module, x: Tensor, y: Tensor | None, draws: int = NOISE_REFIT_DRAWS
) -> dict | None:
    """Set ``guide``'s log-normal noise factor to its optimum given ``q(W)`` (module docstring) from
    ``draws`` weight-space draws on all rows.  Returns ``{"loc", "scale"}``: the unconstrained training
    values it replaced, as plain lists (for :func:`restore_training_noise` and checkpoints), or ``None``
    when there is nothing to update."""
    factor = None if y is None else lognormal_noise_factor(guide, model)
    if factor is None or not isinstance(model, BayesianModel):  # only a BayesianModel promises the site "f"
        return None
    kind, _, a0, b0 = _noise_site(model)
    loc_mod, loc_name, scale_mod, scale_name = factor
    sse = final_noise_sse(guide, model, x, y, draws, a0 + 0.5 * y.numel(), b0)
    m, v = optimal_lognormal(kind, a0, b0, y.numel(), sse)
    old = {"loc": _raw(loc_mod, loc_name).tolist(), "scale": _raw(scale_mod, scale_name).tolist()}
    _set(loc_mod, loc_name, m)
    _set(scale_mod, scale_name, math.sqrt(v))
    return old


def restore_training_noise(guide: object, model: torch.nn.Module, saved: dict) -> None:
    """Put back, bit for bit, the training values :func:`refit_noise` returned."""
    factor = lognormal_noise_factor(guide, model)
    if factor is None:
        raise ValueError("saved: the guide has no log-normal noise factor to restore")
    loc_mod, loc_name, scale_mod, scale_name = factor
    with torch.no_grad():
        for mod, name, key in ((loc_mod, loc_name, "loc"), (scale_mod, scale_name, "scale")):
            raw = _raw(mod, name)
            raw.copy_(torch.as_tensor(saved[key], dtype=raw.dtype, device=raw.device))
