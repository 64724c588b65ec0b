"""Exact conditional draws of the node-wise horseshoe's scales given the weights: the Gibbs block that
:func:`zoo.infer.mcmc.fit_nuts` alternates with NUTS transitions of the weights (``gibbs=True``,
:mod:`zoo.infer.mcmc_gibbs`).

In the centered, hierarchical form of :class:`~zoo.families.horseshoe.prior.HorseshoePrior` (Ghosh, Yao &
Doshi-Velez 2019, arXiv:1705.10388, Eq. 1 with the inverse-gamma auxiliaries of §3.3) every scale has an
inverse-gamma full conditional (the same algebra as the linear horseshoe's Gibbs sampler, Makalic &
Schmidt 2016, arXiv:1508.03884, Eqs. 7-10).  For a hidden layer ``p`` with ``K`` units whose rows
``w_k`` (``F`` entries each, bias last) are the site ``p.w``, and ``IG(a, b)`` with rate ``b``::

    p.tau2_k | w_k, lam_k, v2   ~ IG(1/2 + F/2,  1/lam_k + |w_k|^2 / (2 v2))
    p.lam_k  | tau2_k           ~ IG(1,          1/tau2_k + 1/b0^2)
    p.v2     | w, tau2, theta   ~ IG(1/2 + KF/2, 1/theta + sum_k |w_k|^2 / (2 tau2_k))
    p.theta  | v2               ~ IG(1,          1/v2 + 1/bg^2)

and for the output layer, whose ``K F`` entries share one scale::

    p.kappa2 | w, rho ~ IG(1/2 + KF/2, 1/rho + |w|^2 / 2),    p.rho | kappa2 ~ IG(1, 1/kappa2 + 1/b_kappa^2).

The draws are made in that order, each given the newest value of the others (one systematic-scan Gibbs
sweep), so the block leaves the joint posterior invariant.

The **regularized** horseshoe (Eq. 2) replaces each row's variance ``tau2_k v2`` by
``1 / (1/(tau2_k v2) + 1/c2)`` with one slab ``hs.c2 ~ IG(c_a, c_b)`` shared by every hidden layer, so
``tau2_k``, ``v2`` and ``c2`` lose their conjugate conditionals (each row contributes
``(F/2) log(1/(tau2_k v2) + 1/c2) - |w_k|^2 (1/(tau2_k v2) + 1/c2) / 2`` to all three).  They are drawn by
exact univariate slice sampling on their logarithms (:func:`zoo.infer.slice.slice_step`; the unit scales
of a layer are independent given ``v2`` and ``c2`` and move at once), in the same order, with ``c2``
last; the auxiliaries ``lam``, ``theta``, ``kappa2`` and ``rho`` keep their inverse-gamma conditionals.

:func:`interweave_scales` adds the ancillary half of an interweaving sweep (:mod:`zoo.infer.interweave`,
Yu & Meng 2011): each unit scale ``tau2_k``, each layer scale ``v2``, each output scale ``kappa2`` and the
slab ``c2`` in turn is redrawn with the standardized weights ``z = w / sqrt(var)`` held fixed — from its
prior conditional (``IG(1/2, 1/lam_k)``, ``IG(1/2, 1/theta)``, ``IG(1/2, 1/rho)``, ``IG(c_a, c_b)``) times
the likelihood of the rescaled weights — so a unit that the data need can leave the horseshoe's spike,
and the layer scale can move all its units at once.  :func:`reparameterize` maps the non-centered rows
``p.beta`` to the centered ``p.w = sqrt(var) beta`` and back, so the NUTS block can move the standardized
rows while both kinds of scale draw act on the same state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

import pyro.distributions as dist
import torch
from torch import Tensor

from zoo.core.architectures import ParamSpec
from zoo.families.horseshoe.prior import HorseshoePrior, group_layers, regularized_variance
from zoo.infer.interweave import LogLikelihood, ancillary_log_scale
from zoo.infer.slice import slice_step

__all__ = ["SLAB", "scale_sites", "draw_scales", "interweave_scales", "reparameterize", "row_log_likelihood"]


#: the site of the regularized horseshoe's slab (``HorseshoePrior.sample_params``)
SLAB = "hs.c2"


def _check(prior: HorseshoePrior) -> None:
    if not isinstance(prior, HorseshoePrior):
        raise TypeError(f"prior must be a HorseshoePrior, got {type(prior).__name__}")


def scale_sites(prior: HorseshoePrior, specs: Sequence[ParamSpec]) -> list[str]:
    """The names of the scale sites :func:`draw_scales` draws, in draw order."""
    _check(prior)
    out = []
    for layer in group_layers(specs):
        p = layer.prefix
        names = ("kappa2", "rho") if layer.output else ("tau2", "lam", "v2", "theta")
        out += [f"{p}.{n}" for n in names]
    return out + [SLAB] if prior.regularized else out


def row_log_likelihood(ss: Tensor, fan: int, log_s: Tensor, log_c2: Tensor | None) -> Tensor:
    """``log N(w_k; 0, var_k I)`` up to a constant, from ``ss = |w_k|^2`` and ``log s = log(tau2_k v2)``:
    ``(F/2) log(1/var_k) - ss / (2 var_k)`` with ``1/var_k = 1/s + 1/c2`` (regularized, Eq. 2) or ``1/s``."""
    log_prec = -log_s if log_c2 is None else torch.logaddexp(-log_s, -log_c2)
    return 0.5 * fan * log_prec - 0.5 * ss * log_prec.exp()


def _log_ig(log_x: Tensor, shape: float | Tensor, rate: Tensor | float) -> Tensor:
    """``log IG(x; shape, rate)`` of ``x = exp(log_x)`` plus the Jacobian ``log_x``, up to a constant."""
    return -shape * log_x - rate * torch.exp(-log_x)


def _slice_log(log_density, x: Tensor) -> Tensor:
    """A slice-sampling update of ``x > 0`` on ``log x`` (``log_density`` takes ``log x``)."""
    return slice_step(log_density, x.log()).exp()


def _ig(shape: Tensor | float, rate: Tensor) -> Tensor:
    return dist.InverseGamma(torch.as_tensor(shape, dtype=rate.dtype, device=rate.device), rate).sample()


def draw_scales(
    prior: HorseshoePrior, specs: Sequence[ParamSpec], values: Mapping[str, Tensor]
) -> dict[str, Tensor]:
    """One Gibbs sweep over the scales (module docstring): new values of every :func:`scale_sites` site given
    ``values`` (the current value of every site, the centered rows ``p.w`` included).  Leading batch
    dimensions (independent chains) broadcast: rows ``(..., K, F)``, unit scales ``(..., K)``, layer and
    output scales ``(...)``."""
    _check(prior)
    log_c2 = values[SLAB].log() if prior.regularized else None
    out: dict[str, Tensor] = {}
    rows: list[tuple[Tensor, int, Tensor]] = []  # (|w_k|^2, F, log(tau2_k v2)) of each hidden layer
    for layer in group_layers(specs):
        p, k, f = layer.prefix, layer.units, layer.fan
        w = values[f"{p}.w"]
        if tuple(w.shape[-2:]) != (k, f):
            raise ValueError(f"values[{p + '.w'!r}] must have shape (..., {k}, {f}), got {tuple(w.shape)}")
        if layer.output:
            kappa2 = _ig(0.5 + k * f / 2, 1.0 / values[f"{p}.rho"] + w.square().sum((-2, -1)) / 2)
            out[f"{p}.kappa2"] = kappa2
            out[f"{p}.rho"] = _ig(1.0, 1.0 / kappa2 + prior.b_kappa**-2)
            continue
        ss = w.square().sum(-1)  # |w_k|^2, shape (..., K)
        tau2 = _unit_scales(ss, f, values[f"{p}.lam"], values[f"{p}.v2"], log_c2, values[f"{p}.tau2"])
        out[f"{p}.tau2"] = tau2
        out[f"{p}.lam"] = _ig(1.0, 1.0 / tau2 + prior.b0**-2)
        v2 = _layer_scale(ss, f, tau2, values[f"{p}.theta"], log_c2, values[f"{p}.v2"])
        out[f"{p}.v2"] = v2
        out[f"{p}.theta"] = _ig(1.0, 1.0 / v2 + prior.bg**-2)
        rows.append((ss, f, tau2.log() + v2.log()[..., None]))
    if log_c2 is not None:
        out[SLAB] = _slice_log(lambda u: _slab_log_density(prior, rows, u), values[SLAB])
    return out


def _unit_scales(
    ss: Tensor, f: int, lam: Tensor, v2: Tensor, log_c2: Tensor | None, current: Tensor
) -> Tensor:
    """``tau2_k | w_k, lam_k, v2 (, c2)``: inverse-gamma, or a slice step on ``log tau2`` (regularized)."""
    if log_c2 is None:
        return _ig(0.5 + f / 2, 1.0 / lam + ss / (2 * v2[..., None]))
    log_v2, lc2 = v2.log()[..., None], log_c2[..., None]
    return _slice_log(
        lambda u: row_log_likelihood(ss, f, u + log_v2, lc2) + _log_ig(u, 0.5, 1.0 / lam), current
    )


def _layer_scale(
    ss: Tensor, f: int, tau2: Tensor, theta: Tensor, log_c2: Tensor | None, current: Tensor
) -> Tensor:
    """``v2 | w, tau2, theta (, c2)``: inverse-gamma, or a slice step on ``log v2`` (regularized)."""
    if log_c2 is None:
        return _ig(0.5 + ss.shape[-1] * f / 2, 1.0 / theta + (ss / tau2).sum(-1) / 2)
    log_tau2, lc2 = tau2.log(), log_c2[..., None]

    def log_density(u: Tensor) -> Tensor:
        return row_log_likelihood(ss, f, log_tau2 + u[..., None], lc2).sum(-1) + _log_ig(u, 0.5, 1.0 / theta)

    return _slice_log(log_density, current)


def _slab_log_density(prior: HorseshoePrior, rows: list[tuple[Tensor, int, Tensor]], u: Tensor) -> Tensor:
    """Log full conditional of ``log c2`` (Jacobian included): the ``IG(c_a, c_b)`` prior and every hidden
    row's likelihood."""
    total = _log_ig(u, prior.c_a, prior.c_b)
    for ss, f, log_s in rows:
        total = total + row_log_likelihood(ss, f, log_s, u[..., None]).sum(-1)
    return total


def interweave_scales(
    prior: HorseshoePrior, specs: Sequence[ParamSpec], values: Mapping[str, Tensor], log_lik: LogLikelihood
) -> dict[str, Tensor]:
    """The ancillary moves of every scale (module docstring), one at a time: the new value of every scale
    site that has a weight group (``p.tau2``, ``p.v2``, ``p.kappa2``, ``hs.c2``) and of every rows site
    ``p.w`` rescaled with it.  ``log_lik(values)``: the data's log-likelihood given every site's value (one
    value per chain when ``values`` carry leading chain dimensions)."""
    _check(prior)
    cur = dict(values)
    layers = group_layers(specs)
    names: list[str] = []
    for layer in layers:
        p = layer.prefix
        if layer.output:
            _move(cur, log_lik, f"{p}.kappa2", 1.0 / cur[f"{p}.rho"], partial(_rescale_output, p=p))
            names += [f"{p}.kappa2", f"{p}.w"]
            continue
        for k in range(layer.units):
            rescale = partial(_rescale_hidden, p=p, which="tau2", unit=k)
            _move(cur, log_lik, (f"{p}.tau2", k), 1.0 / cur[f"{p}.lam"][..., k], rescale)
        rescale = partial(_rescale_hidden, p=p, which="v2")
        _move(cur, log_lik, f"{p}.v2", 1.0 / cur[f"{p}.theta"], rescale)
        names += [f"{p}.tau2", f"{p}.v2", f"{p}.w"]
    if prior.regularized:
        hidden = [layer.prefix for layer in layers if not layer.output]

        def slab(c: dict[str, Tensor], s: Tensor) -> dict[str, Tensor]:
            for p in hidden:
                c = _rescale_hidden(c, s, p, which="c2")
            return {**c, SLAB: s}

        _move(cur, log_lik, SLAB, prior.c_b, slab, shape=prior.c_a)
        names.append(SLAB)
    return {n: cur[n] for n in names}


def _move(
    cur: dict[str, Tensor],
    log_lik: LogLikelihood,
    site: str | tuple[str, int],
    rate: Tensor,
    rescale: Callable[[dict[str, Tensor], Tensor], dict[str, Tensor]],
    shape: float | Tensor = 0.5,
) -> None:
    """One ancillary move of the scale ``site`` (a name, or ``(name, k)``: entry ``k`` of a unit-scale
    vector) whose prior conditional is ``IG(shape, rate)``; ``rescale(values, s)``: the values with the scale
    set to ``s`` and its weights rescaled.  Updates ``cur`` in place."""
    name, k = (site, None) if isinstance(site, str) else site
    current = cur[name] if k is None else cur[name][..., k]
    u = ancillary_log_scale(
        current.log(), lambda v: _log_ig(v, shape, rate), lambda v: rescale(cur, v.exp()), log_lik
    )
    cur.update(rescale(cur, u.exp()))


def _row_variance(tau2: Tensor, v2: Tensor, c2: Tensor | None) -> Tensor:
    """Each hidden row's variance ``(..., K)``: unit scales ``(..., K)``, layer scale and slab ``(...)``."""
    return regularized_variance(tau2, v2[..., None], None if c2 is None else c2[..., None])


def _rescale_output(c: dict[str, Tensor], kappa2: Tensor, p: str) -> dict[str, Tensor]:
    """The output layer's rows with their scale ``kappa2`` replaced (``w = kappa z``, ``z`` kept)."""
    ratio = (kappa2 / c[f"{p}.kappa2"]).sqrt()[..., None, None]
    return {**c, f"{p}.kappa2": kappa2, f"{p}.w": c[f"{p}.w"] * ratio}


def _rescale_hidden(
    c: dict[str, Tensor], s: Tensor, p: str, which: str, unit: int | None = None
) -> dict[str, Tensor]:
    """Hidden layer ``p``'s rows with the scale ``which`` set to ``s`` (``"tau2"``: unit ``unit``'s;
    ``"v2"``; ``"c2"``: the slab), ``z = w / sqrt(var)`` kept (``var``: :func:`regularized_variance`)."""
    old = {"tau2": c[f"{p}.tau2"], "v2": c[f"{p}.v2"], "c2": c.get(SLAB)}
    new = dict(old)
    if which == "tau2":
        new["tau2"] = old["tau2"].clone()
        new["tau2"][..., unit] = s
    else:
        new[which] = s
    ratio = (_row_variance(**new) / _row_variance(**old)).sqrt()
    return {**c, f"{p}.tau2": new["tau2"], f"{p}.v2": new["v2"], f"{p}.w": c[f"{p}.w"] * ratio[..., None]}


def reparameterize(
    prior: HorseshoePrior, specs: Sequence[ParamSpec], values: Mapping[str, Tensor], centered: bool
) -> dict[str, Tensor]:
    """The rows of every layer in the other parameterization given the scales in ``values``: ``p.w = sd *
    p.beta`` (``centered=True``) or ``p.beta = p.w / sd`` (``False``), with ``sd = sqrt(var)`` of each
    hidden row (:func:`~zoo.families.horseshoe.prior.regularized_variance`) or ``kappa`` (output layer)."""
    _check(prior)
    c2 = values.get(SLAB) if prior.regularized else None
    out = {}
    for layer in group_layers(specs):
        p = layer.prefix
        if layer.output:
            sd = values[f"{p}.kappa2"].sqrt()[..., None, None]
        else:
            sd = _row_variance(values[f"{p}.tau2"], values[f"{p}.v2"], c2).sqrt()[..., None]
        if centered:
            out[f"{p}.w"] = values[f"{p}.beta"] * sd
        else:
            out[f"{p}.beta"] = values[f"{p}.w"] / sd
    return out
