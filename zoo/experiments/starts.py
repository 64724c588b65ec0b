"""Best of several starts: fit a model from several initializations of its guide and keep the fit whose
ELBO is highest.

The ELBO of a variational family is not concave in its parameters, and stochastic optimization stops in
the basin it starts in.  Between two fits of the same model and family, ``ELBO(q) = log p(D) − KL(q ‖ p(· |
D))``, so the fit with the higher ELBO is the closer one in ``KL(q ‖ p)`` — the objective's own criterion,
with no test data involved (Blei, Kucukelbir & McAuliffe 2017, "Variational Inference: A Review for
Statisticians", arXiv:1601.00670, §2.2 and §5; with empirical-Bayes hyperparameters, as the LBBNN's
``eb-point`` prior, the same maximum is the joint maximum over ``q`` and the hyperparameters).

A *start* is a mapping of guide options (e.g. the LBBNN inclusion logits' initial range, ``{"init_logit":
[4, 5]}``).  :func:`resolve_starts` reads the run's starts: ``fit_options["starts"]`` when given (``[{}]``
is one plain fit), else the entry's ``fit_defaults["starts"][guide]`` — used only when the run's own
``guide_options`` set none of the options the starts vary, so an explicit choice is never overridden.
:func:`elbo_estimate` is the comparison: the mean of ``particles`` draws of the training objective on all
training rows, under a fixed seed.  Every start is built (and its options checked) before any is fitted.

*Which noise model* is the same comparison one level up.  ``fit_options["likelihoods"]`` lists candidate
likelihoods (:func:`likelihood_options`: ``"gaussian"``, ``"t4"`` — a Student-t of 4 degrees of freedom —,
``"heteroscedastic"``, or a mapping of the builder's likelihood options); the run fits every start under every
candidate and keeps the highest ELBO.  Each ELBO bounds the log evidence ``log p(D | likelihood)`` of its own
model from below, on the same data, so the comparison is variational model selection (Bishop 2006, *Pattern
Recognition and Machine Learning*, §10.1.4; Beal 2003, PhD thesis, §2.6): approximate, because the gaps
``KL(q ‖ p(· | D))`` of the two models need not be equal.  :func:`choose` makes both choices and records them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyro
import torch
from pyro.infer import ELBO, Trace_ELBO
from torch import Tensor

if TYPE_CHECKING:
    from zoo.infer.result import FitResult

__all__ = [
    "ELBO_PARTICLES",
    "LIKELIHOOD_KEYS",
    "best_start",
    "choose",
    "elbo_estimate",
    "fit_elbo",
    "likelihood_name",
    "likelihood_options",
    "resolve_likelihoods",
    "resolve_starts",
]

#: the builder options a likelihood candidate may set (zoo.core.likelihood_options)
LIKELIHOOD_KEYS = frozenset({"student_t_df", "student_t_learn_df", "heteroscedastic"})

#: draws of the training objective per start (for the LBBNN on the UCI sets the standard error of 32 draws
#: is 0.8-8 nats; two starts closer than a few of those are equally good fits by the objective)
ELBO_PARTICLES = 32


def _check_starts(starts: object) -> list[dict]:
    if isinstance(starts, (str, bytes)) or not isinstance(starts, Sequence) or len(starts) == 0:
        raise TypeError(
            f"fit_options['starts'] must be a non-empty list of guide-option mappings, got {starts!r}"
        )
    out = []
    for i, s in enumerate(starts):
        if not isinstance(s, Mapping):
            raise TypeError(f"fit_options['starts'][{i}] must be a mapping of guide options, got {s!r}")
        out.append(dict(s))
    return out


def resolve_starts(
    fit_options: Mapping[str, Any], fit_defaults: Mapping[str, Any], guide: str, guide_options: Mapping
) -> list[dict]:
    """The guide-option overrides of each start (``[{}]``: one fit with the run's own options).

    ``fit_options["starts"]`` (explicit, a non-empty list of mappings) wins; otherwise
    ``fit_defaults["starts"]`` maps guide names to their default starts, which apply unless the run's
    ``guide_options`` already set one of the options they vary."""
    if "starts" in fit_options:
        return _check_starts(fit_options["starts"])
    defaults = dict(fit_defaults.get("starts") or {}).get(guide)
    if not defaults:
        return [{}]
    starts = _check_starts(defaults)
    varied = {k for s in starts for k in s}
    return [{}] if varied & set(guide_options) else starts


def likelihood_options(candidate: object, where: str = "fit_options['likelihoods']") -> dict:
    """The builder options of one likelihood candidate: ``"gaussian"`` → ``{}``, ``"t<ν>"`` (e.g. ``"t4"``)
    → ``{"student_t_df": ν}``, ``"heteroscedastic"`` → ``{"heteroscedastic": True}``, or a mapping whose keys
    are in :data:`LIKELIHOOD_KEYS` (its values are checked when the model is built).  ``where`` names the
    argument in the error."""
    if isinstance(candidate, str):
        text = candidate.strip().lower()
        if text == "gaussian":
            return {}
        if text == "heteroscedastic":
            return {"heteroscedastic": True}
        if text.startswith("t"):
            try:
                df = float(text[1:])
            except ValueError:
                df = math.nan
            if math.isfinite(df) and df > 0:
                return {"student_t_df": df}
        raise ValueError(
            f"{where}: unknown likelihood {candidate!r}; use 'gaussian', 't<degrees of freedom>' "
            "(e.g. 't4'), 'heteroscedastic' or a mapping of likelihood options"
        )
    if not isinstance(candidate, Mapping):
        raise TypeError(f"{where}: a likelihood is a name or a mapping of options, got {candidate!r}")
    unknown = sorted(set(candidate) - LIKELIHOOD_KEYS)
    if unknown:
        allowed = sorted(LIKELIHOOD_KEYS)
        raise ValueError(f"{where}: {unknown} are not likelihood options (allowed: {allowed})")
    return dict(candidate)


def likelihood_name(options: Mapping[str, Any]) -> str:
    """A likelihood candidate's builder options as text: ``"gaussian"`` for ``{}``, ``"t4"`` for
    ``{"student_t_df": 4}``, else ``key=value`` pairs."""
    if not options:
        return "gaussian"
    if set(options) == {"student_t_df"}:
        return f"t{float(options['student_t_df']):g}"
    return ",".join(f"{k}={options[k]}" for k in sorted(options))


def resolve_likelihoods(
    fit_options: Mapping[str, Any], options: Mapping[str, Any] | None = None
) -> list[dict]:
    """The builder-option overrides of each likelihood candidate of a run (``[{}]``: the run's own
    likelihood); ``fit_options["likelihoods"]`` is a non-empty list of :func:`likelihood_options` inputs
    without repeats.  The run's builder ``options`` must then leave the likelihood to the candidates (a
    ``ValueError`` if they set one of :data:`LIKELIHOOD_KEYS`: ``"gaussian"`` would otherwise inherit it)."""
    if "likelihoods" not in fit_options:
        return [{}]
    clash = sorted(set(options or {}) & LIKELIHOOD_KEYS)
    if clash:
        raise ValueError(
            f"fit_options['likelihoods'] chooses the likelihood; the run's options must not also set {clash}"
        )
    given = fit_options["likelihoods"]
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or len(given) == 0:
        raise TypeError(f"fit_options['likelihoods'] must be a non-empty list of likelihoods, got {given!r}")
    out = [likelihood_options(c, f"fit_options['likelihoods'][{i}]") for i, c in enumerate(given)]
    if len({repr(sorted(o.items())) for o in out}) < len(out):
        raise ValueError(f"fit_options['likelihoods'] names the same likelihood twice: {given!r}")
    return out


def choose(elbos: Sequence[Sequence[tuple[float, float]]]) -> tuple[int, int, dict[str, Any]]:
    """``(likelihood i, start j, record)`` of the highest ELBO in ``elbos[i][j]`` (``(mean, standard
    error)`` of likelihood ``i``'s start ``j``).  The record: with several starts, ``starts``, ``start``
    and the kept likelihood's ``start_elbo_<j>``/``start_elbo_se_<j>``; with several likelihoods,
    ``likelihoods``, ``likelihood`` and each likelihood's best ``likelihood_elbo_<i>`` (and
    ``likelihood_elbo_se_<i>``)."""
    if not elbos or any(not row for row in elbos) or len({len(row) for row in elbos}) != 1:
        raise ValueError(f"elbos must be a non-empty grid (likelihoods x starts), got {elbos!r}")
    best_j = [best_start([e for e, _ in row]) for row in elbos]
    i = best_start([row[j][0] for row, j in zip(elbos, best_j)])
    j = best_j[i]
    info: dict[str, Any] = {}
    if len(elbos[i]) > 1:
        info.update(starts=len(elbos[i]), start=j)
        for k, (e, se) in enumerate(elbos[i]):
            info[f"start_elbo_{k}"], info[f"start_elbo_se_{k}"] = e, se
    if len(elbos) > 1:
        info.update(likelihoods=len(elbos), likelihood=i)
        for k, (row, bj) in enumerate(zip(elbos, best_j)):
            info[f"likelihood_elbo_{k}"], info[f"likelihood_elbo_se_{k}"] = row[bj]
    return i, j, info


def elbo_estimate(
    model: Callable,
    guide: Callable,
    x: Tensor,
    y: Tensor | None,
    loss: ELBO | None = None,
    *,
    particles: int = ELBO_PARTICLES,
    seed: int = 0,
) -> tuple[float, float]:
    """``(mean, standard error)`` of ``particles`` draws of the ELBO (``−loss.loss``) on all of ``(x, y)``,
    under ``seed`` (the global RNG state is restored afterwards).  ``loss``: the fit's objective (a Pyro
    ELBO; default ``Trace_ELBO``).  A guide with an exact ELBO (``closed_form_elbo``, as the training loop
    records for closed-form guides) gives it, with standard error 0."""
    if particles < 2:
        raise ValueError(f"particles must be at least 2, got {particles}")
    exact = getattr(guide, "closed_form_elbo", None)
    if callable(exact):
        with torch.no_grad():
            value = exact(model, x, y)
        if value is not None:
            return (float(value), 0.0) if math.isfinite(float(value)) else (-math.inf, math.inf)
    loss = Trace_ELBO() if loss is None else loss
    state = pyro.util.get_rng_state()
    try:
        pyro.set_rng_seed(seed)
        with torch.no_grad():
            draws = torch.tensor(
                [-float(loss.loss(model, guide, x, y)) for _ in range(particles)], dtype=torch.float64
            )
    finally:
        pyro.util.set_rng_state(state)
    if not bool(torch.isfinite(draws).all()):
        return -math.inf, math.inf
    return float(draws.mean()), float(draws.std() / math.sqrt(particles))


def fit_elbo(result: FitResult, x: Tensor, y: Tensor | None, seed: int = 0) -> tuple[float, float]:
    """:func:`elbo_estimate` of a finished fit (a :class:`zoo.infer.result.FitResult`: its model, guide and
    training objective) inside the fit's own parameter-store scope."""
    with result.activate():
        return elbo_estimate(result.model, result.guide, x, y, result.loss, seed=seed)


def best_start(elbos: Sequence[float]) -> int:
    """The index of the highest ELBO (the first on ties; a non-finite ELBO never wins unless all are)."""
    finite = [e if math.isfinite(e) else -math.inf for e in elbos]
    return max(range(len(finite)), key=lambda i: (finite[i], -i))
