"""A family's likelihood from its options object: the Gaussian or classification likelihood of
:mod:`zoo.core.likelihoods`, or the Student-t of :mod:`zoo.core.student_t` (options ``student_t_df``,
``student_t_learn_df``).  Its own module so that neither of those two imports the other's factory.
:class:`LikelihoodOptions` holds the regression likelihood options the families' builders share."""

from __future__ import annotations

import dataclasses

from zoo.core.config import Config
from zoo.core.likelihoods import WEAK_NOISE_PRIOR, Likelihood, make_likelihood
from zoo.core.student_t import StudentTLikelihood, check_student_t_df
from zoo.core.validation import check_bool, check_optional, check_positive, check_positive_int

__all__ = ["LikelihoodOptions", "options_likelihood", "student_t_options", "task_likelihood"]


@dataclasses.dataclass(frozen=True)
class LikelihoodOptions(Config):
    """The regression likelihood options shared by the families' builder options (classification ignores
    them; a family's options class derives from this one and validates these fields first).

    ``noise_concentration``/``noise_rate``: the prior of the family's noise site, an inverse-gamma on the
    noise variance for most families and a Gamma on the noise precision for the horseshoe (each family's
    docstring says which, and why its default; here :data:`zoo.core.likelihoods.WEAK_NOISE_PRIOR`).
    ``heteroscedastic``: input-dependent noise ``sigma^2 exp(g(x))`` from a second network output ``g`` per
    target (:class:`~zoo.core.likelihoods.GaussianLikelihood`; regression only).
    ``student_t_df``: ``None`` (default, Gaussian) or the degrees of freedom (> 2) of a Student-t
    likelihood, robust to heavy-tailed errors (:class:`~zoo.core.student_t.StudentTLikelihood`;
    regression only); ``student_t_learn_df``: learn them, starting there (type-II maximum likelihood).
    """

    noise_concentration: float = WEAK_NOISE_PRIOR[0]
    noise_rate: float = WEAK_NOISE_PRIOR[1]
    heteroscedastic: bool = False
    student_t_df: float | None = None
    student_t_learn_df: bool = False

    def validate(self) -> None:
        check_bool("heteroscedastic", self.heteroscedastic)
        check_optional("student_t_df", self.student_t_df, check_student_t_df)
        check_bool("student_t_learn_df", self.student_t_learn_df)
        for name in ("noise_concentration", "noise_rate"):
            check_positive(name, getattr(self, name))


def task_likelihood(
    task: str, out_features: int = 1, df: float | None = None, learn_df: bool = False, **kwargs
) -> Likelihood:
    """:func:`zoo.core.likelihoods.make_likelihood`, or with ``df`` a :class:`StudentTLikelihood` of those
    degrees of freedom (learned with ``learn_df=True``; regression only, a ``ValueError`` otherwise)."""
    if df is None:
        if learn_df:
            raise ValueError("learn_df=True needs a Student-t likelihood (df)")
        return make_likelihood(task, out_features, **kwargs)
    if task != "regression":
        raise ValueError(f"df (a Student-t likelihood) needs a regression task, got task={task!r}")
    out_features = check_positive_int("out_features", out_features)
    return StudentTLikelihood(df=df, learn_df=learn_df, out_features=out_features, **kwargs)


def student_t_options(task: str, opts: LikelihoodOptions | object) -> dict:
    """:func:`task_likelihood`'s ``df`` and ``learn_df`` from a family options object's ``student_t_df`` and
    ``student_t_learn_df`` (``{}`` when it has neither set; an options object that is not a
    :class:`LikelihoodOptions` may lack them); a ``ValueError`` naming the option for a classification
    task, or for ``student_t_learn_df`` without ``student_t_df``."""
    df = getattr(opts, "student_t_df", None)
    learn = bool(getattr(opts, "student_t_learn_df", False))
    if learn and df is None:
        raise ValueError("student_t_learn_df: learning the degrees of freedom needs student_t_df (its start)")
    if df is None:
        return {}
    if task != "regression":
        raise ValueError(f"student_t_df: a Student-t likelihood needs a regression task, got task={task!r}")
    return {"df": df, "learn_df": learn}


def options_likelihood(
    task: str, out_features: int, noise: str, opts: LikelihoodOptions | object
) -> Likelihood:
    """:func:`task_likelihood` from a family's options object (a :class:`LikelihoodOptions`, or any object
    with ``noise_concentration``/``noise_rate``): those are the prior of the ``noise`` site
    (``"inverse_gamma"`` or ``"gamma"``), its ``heteroscedastic`` (if it has one) the input-dependent noise
    of :class:`~zoo.core.likelihoods.GaussianLikelihood`, its ``student_t_df`` (if it has one and it is not
    ``None``) a :class:`StudentTLikelihood`, learned with ``student_t_learn_df``.  Build the network with
    ``out_features=likelihood.network_outputs``."""
    return task_likelihood(
        task,
        out_features,
        **student_t_options(task, opts),
        noise=noise,
        concentration=opts.noise_concentration,
        rate=opts.noise_rate,
        heteroscedastic=getattr(opts, "heteroscedastic", False),
    )
