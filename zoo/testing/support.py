"""The ``[support]`` contract: a guide samples every latent site inside the model site's support.

A guide that puts a Normal on a Gamma site (a noise precision, a horseshoe scale) gives negative draws to a
positive parameter: the ELBO is then undefined (or silently wrong when the model only uses the value in a
way that tolerates the sign).  For every site in both traces (observed and auxiliary sites aside) the
guide's distribution must have a support contained in the model's:

* supports are compared after unwrapping ``independent(...)``; interval-like constraints (``real``,
  ``greater_than``/``positive``, ``greater_than_eq``/``nonnegative``, ``less_than``, ``interval``/
  ``unit_interval``, ``half_open_interval`` and the integer ones) by their bounds, with open and closed
  ends alike (``positive`` and ``greater_than_eq(0)`` are compatible), a discrete support never inside a
  continuous one nor the reverse;
* a guide site whose declared support says nothing (a ``Delta`` point mass, as autoguides emit; a
  ``TransformedDistribution`` through ``biject_to(...)``, whose declared codomain is often ``real``; a
  dependent or unknown constraint): its sampled value is checked against the model's support instead;
* a model site with a dependent support, or a model support of another kind that the guide's also has, is
  not judged.
"""

from __future__ import annotations

import math

import torch
from pyro.distributions import Delta
from torch.distributions import TransformedDistribution, constraints
from torch.distributions.constraints import Constraint

from zoo.testing._util import fail, latent_sites

__all__ = ["check_support", "support_problem", "describe"]

_INF = math.inf


def _unwrap(c: Constraint) -> Constraint:
    while isinstance(c, constraints.independent):
        c = c.base_constraint
    return c


def _bounds(c: Constraint) -> tuple[bool, object, object] | None:
    """``(discrete, lower, upper)`` of an interval-like constraint, else ``None``."""
    c = _unwrap(c)
    if isinstance(c, constraints._Real):
        return False, -_INF, _INF
    if isinstance(c, constraints._Boolean):
        return True, 0, 1
    if isinstance(c, constraints._IntegerInterval):
        return True, c.lower_bound, c.upper_bound
    if isinstance(c, constraints._IntegerGreaterThan):
        return True, c.lower_bound, _INF
    if isinstance(c, (constraints._GreaterThan, constraints._GreaterThanEq)):
        return False, c.lower_bound, _INF
    if isinstance(c, constraints._LessThan):
        return False, -_INF, c.upper_bound
    if isinstance(c, (constraints._Interval, constraints._HalfOpenInterval)):
        return False, c.lower_bound, c.upper_bound
    return None


def _is_real(b: tuple[bool, object, object] | None) -> bool:
    return b is not None and not b[0] and _scalar(b[1]) == -_INF and _scalar(b[2]) == _INF


def _ge(a: object, b: object) -> bool:
    return bool(torch.all(torch.as_tensor(a) >= torch.as_tensor(b)))


def _scalar(v: object) -> float | None:
    t = torch.as_tensor(v)
    return float(t) if t.numel() == 1 else None


def describe(c: Constraint) -> str:
    """A constraint's short name: ``real``, ``positive``, ``nonnegative``, ``unit_interval`` or its repr."""
    c = _unwrap(c)
    b = _bounds(c)
    if b is not None and not b[0]:
        lo, hi = _scalar(b[1]), _scalar(b[2])
        if (lo, hi) == (-_INF, _INF):
            return "real"
        if (lo, hi) == (0.0, _INF):
            return "positive" if isinstance(c, constraints._GreaterThan) else "nonnegative"
        if (lo, hi) == (0.0, 1.0) and isinstance(c, constraints._Interval):
            return "unit_interval"
    return repr(c)


def _support(fn: object) -> Constraint | None:
    try:
        c = fn.support
    except (AttributeError, NotImplementedError):
        return None
    return None if c is None or constraints.is_dependent(c) else c


def _innermost(fn: object) -> object:
    while hasattr(fn, "base_dist") and not isinstance(fn, TransformedDistribution):
        fn = fn.base_dist
    return fn


def _value_problem(name: str, value: object, model_support: Constraint) -> str | None:
    """The draw ``value`` against the model's support (closed bounds: a draw on the edge is fine)."""
    if not torch.is_tensor(value):
        return None
    b, shown = _bounds(model_support), ""
    with torch.no_grad():
        if b is not None:
            lo, hi = (torch.as_tensor(v, dtype=value.dtype, device=value.device) for v in b[1:])
            ok = (value >= lo) & (value <= hi)
            if not bool(ok.all()):
                shown = f" {float(value[~ok][0]):.4g}"
        else:
            try:
                ok = model_support.check(value)
            except (RuntimeError, ValueError, NotImplementedError):
                return None
    if bool(ok.all()):
        return None
    return f"{name!r}: the guide's draw{shown} lies outside the model's support {describe(model_support)}"


def support_problem(name: str, guide_site: dict, model_site: dict) -> str | None:
    """Why ``guide_site``'s support is not inside ``model_site``'s (module docstring), else ``None``."""
    m_sup = _support(model_site["fn"])
    if m_sup is None:
        return None
    mb = _bounds(m_sup)
    if _is_real(mb):
        return None  # every continuous value is in ``real``
    g_fn = guide_site["fn"]
    g_sup = _support(g_fn)
    gb = None if g_sup is None else _bounds(g_sup)
    vague = isinstance(_innermost(g_fn), (Delta, TransformedDistribution)) and (gb is None or _is_real(gb))
    if g_sup is None or vague:
        return _value_problem(name, guide_site["value"], m_sup)
    if mb is None or gb is None:
        if type(_unwrap(g_sup)) is type(_unwrap(m_sup)):
            return None
        return _value_problem(name, guide_site["value"], m_sup)
    if gb[0] == mb[0] and _ge(gb[1], mb[1]) and _ge(mb[2], gb[2]):
        return None
    return f"{name!r}: guide {describe(g_sup)} vs model {describe(m_sup)}"


def check_support(guide_trace, model_trace) -> None:
    """``[support]`` unless every site of both traces has a guide support inside the model's."""
    q, p = latent_sites(guide_trace, guide=True), latent_sites(model_trace)
    for name in sorted(set(q) & set(p)):
        problem = support_problem(name, q[name], p[name])
        if problem is not None:
            fail(
                "support",
                f"{problem}: the guide must sample inside the model site's support (a positive site needs a "
                "positive distribution, e.g. a LogNormal or a Normal pushed through biject_to(support))",
            )
