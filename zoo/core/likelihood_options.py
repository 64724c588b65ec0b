"""A family's likelihood from its options object: the Gaussian or classification likelihood of
:mod:`zoo.core.likelihoods`, or the Student-t of :mod:`zoo.core.student_t` (options ``student_t_df``,
``student_t_learn_df``).  Its own module so that neither of those two imports the other's factory."""

from __future__ import annotations

from zoo.core.likelihoods import Likelihood, make_likelihood
from zoo.core.student_t import StudentTLikelihood
from zoo.core.validation import check_positive_int

__all__ = ["options_likelihood", "student_t_options", "task_likelihood"]


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


def student_t_options(task: str, opts: object) -> dict:
    """:func:`task_likelihood`'s ``df`` and ``learn_df`` from a family options object's ``student_t_df`` and
    ``student_t_learn_df`` (``{}`` when it has neither set); a ``ValueError`` naming the option for a
    classification task, or for ``student_t_learn_df`` without ``student_t_df``."""
    df = getattr(opts, "student_t_df", None)
    learn = bool(getattr(opts, "student_t_learn_df", False))
    if learn and df is None:
        raise ValueError("student_t_learn_df: learning the degrees of freedom needs student_t_df (its start)")
    if df is None:
        return {}
    if task != "regression":
        raise ValueError(f"student_t_df: a Student-t likelihood needs a regression task, got task={task!r}")
    return {"df": df, "learn_df": learn}


def options_likelihood(task: str, out_features: int, noise: str, opts: object) -> Likelihood:
    """:func:`task_likelihood` from a family's options object: its ``noise_concentration``/``noise_rate``
    are the prior of the ``noise`` site (``"inverse_gamma"`` or ``"gamma"``), its ``heteroscedastic`` (if it
    has one) the input-dependent noise of :class:`~zoo.core.likelihoods.GaussianLikelihood`, its
    ``student_t_df`` (if it has one and it is not ``None``) a :class:`StudentTLikelihood`, learned with
    ``student_t_learn_df``.  Build the network with ``out_features=likelihood.network_outputs``."""
    return task_likelihood(
        task,
        out_features,
        **student_t_options(task, opts),
        noise=noise,
        concentration=opts.noise_concentration,
        rate=opts.noise_rate,
        heteroscedastic=getattr(opts, "heteroscedastic", False),
    )
