"""Synthetic data generators of the papers' toy experiments (all seeded, all numpy, all ``float64``).

Every ambiguity of the papers is resolved explicitly here; see each docstring.

* :func:`make_bowtie_toy`: bow-tie paper (Sheinkman & Wade 2025, arXiv:2411.11132, §4.1).
* :func:`make_sinusoid_toy`: horseshoe paper (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §6.1, §6.6).
* :func:`make_cubic_toy`: horseshoe paper (Ghosh et al. 2019, §6.2.1), after Hernández-Lobato & Adams (2015).
* :func:`make_221_toy`: horseshoe paper (Ghosh et al. 2019, §6.2.2, App. C.2.1), 2-2-1 network classification.
* :func:`make_logistic_selection`: **our** generator in the spirit of the LBBNN-flow simulation
  (Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, §5.1); the original ``sim3-X/Y`` files are not
  available.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "LOGISTIC_BETA",
    "LOGISTIC_INTERCEPT",
    "LOGISTIC_SUPPORT",
    "TOY_221_WEIGHTS",
    "make_221_toy",
    "make_bowtie_toy",
    "make_cubic_toy",
    "make_logistic_selection",
    "make_sinusoid_toy",
]


def _check_n(value: object, arg: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{arg} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _rng(seed: object) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return np.random.default_rng(int(seed))


def _check_var(value: float, arg: str) -> float:
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{arg} must be a finite variance >= 0, got {value!r}")
    return value


# ------------------------------------------------------------------------------------- regression toys


def bowtie_mean(x1: np.ndarray) -> np.ndarray:
    """Noise-free bow-tie toy function ``0.1 x1^2 + 10 sin(x1)`` (Sheinkman & Wade 2025, §4.1)."""
    return 0.1 * x1**2 + 10.0 * np.sin(x1)


def make_bowtie_toy(n: int = 300, seed: int = 0, noise_var: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Bow-tie simulated example (Sheinkman & Wade 2025, arXiv:2411.11132, §4.1).

    ``x_{n,d} ~ U[-2, 2]`` for d = 1, 2 (only x1 matters), ``y = 0.1 x1^2 + 10 sin(x1) + eps``, N = 300.
    The paper writes ``eps ~ N(0, 0.5)`` without saying whether 0.5 is a variance or an sd; we treat it as the
    **variance** (sd ``sqrt(0.5)``), following the usual ``N(mean, variance)`` notation.

    Returns:
        ``x`` of shape ``(n, 2)`` and ``y`` of shape ``(n,)``.
    """
    n = _check_n(n, "n")
    noise_var = _check_var(noise_var, "noise_var")
    rng = _rng(seed)
    x = rng.uniform(-2.0, 2.0, size=(n, 2))
    y = bowtie_mean(x[:, 0]) + np.sqrt(noise_var) * rng.standard_normal(n)
    return x, y


def make_sinusoid_toy(
    n: int = 200, seed: int = 0, noise_var: float = 0.1, x_range: tuple[float, float] = (-4.0, 4.0)
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy sinusoid of the horseshoe paper (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §6.1, §6.6).

    ``y ~ N(sin x, 0.1)`` with 0.1 read as the **variance** (as the authors' public code does).
    The code takes a 20 % subsample of ``linspace(-4, 4)``; we draw ``x ~ U(x_range)`` i.i.d. instead, which
    has the same design density and lets train (200) and extra validation points (1000, §6.6) come from the
    same process.

    Returns:
        ``x`` of shape ``(n, 1)`` and ``y`` of shape ``(n,)``.
    """
    n = _check_n(n, "n")
    noise_var = _check_var(noise_var, "noise_var")
    lo, hi = (float(v) for v in x_range)
    if not lo < hi:
        raise ValueError(f"x_range must be (low, high) with low < high, got {x_range!r}")
    rng = _rng(seed)
    x = rng.uniform(lo, hi, size=(n, 1))
    y = np.sin(x[:, 0]) + np.sqrt(noise_var) * rng.standard_normal(n)
    return x, y


def make_cubic_toy(
    n_train: int = 100, n_test: int = 400, seed: int = 0, noise_var: float = 9.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cubic toy of Hernández-Lobato & Adams 2015 (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §6.2.1).

    ``x ~ U(-4, 4)``, ``y = x^3 + eps`` with ``eps ~ N(0, 9)`` (variance 9, sd 3, as in HL&A 2015).
    500 points: 100 train, 400 test. All ``n_train + n_test`` points are drawn i.i.d.; the first ``n_train``
    are the training set.

    Returns:
        ``x_train (n_train, 1), y_train (n_train,), x_test (n_test, 1), y_test (n_test,)``.
    """
    n_train = _check_n(n_train, "n_train")
    n_test = _check_n(n_test, "n_test")
    noise_var = _check_var(noise_var, "noise_var")
    rng = _rng(seed)
    n = n_train + n_test
    x = rng.uniform(-4.0, 4.0, size=(n, 1))
    y = x[:, 0] ** 3 + np.sqrt(noise_var) * rng.standard_normal(n)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


# --------------------------------------------------------------------------------- classification toys

TOY_221_WEIGHTS: dict[str, np.ndarray] = {
    "W1": np.array([[1.0, 1.0], [1.0, -1.0]]),
    "b1": np.array([1.0, 0.5]),
    "W2": np.array([[1.0, 0.5]]),
    "b2": np.array([-1.25]),
}
"""Fixed generating weights of the 2-2-1 toy (ours; the paper's values are not published).

``h = relu(W1 x + b1)``, ``f = W2 h + b2``, label ``1{f > 0}``. On ``U[-1, 1]^2`` both hidden units are
active on most of the square (87 % and 72 %), the decision boundary is two line pieces ``x1 + x2 = 0.25`` and
``3 x1 + x2 = 0`` meeting at ``(-0.125, 0.375)`` — "nearly linear": the best linear classifier gets ~97 %
accuracy — and the classes are ~53/47.
"""


def make_221_toy(n: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """2-D classification labelled by a known 2-2-1 ReLU network (Ghosh et al. 2019, §6.2.2, App. C.2.1).

    ``x ~ U[-1, 1]^2`` and ``y = 1{W2 relu(W1 x + b1) + b2 > 0}`` with the fixed weights
    :data:`TOY_221_WEIGHTS` (labels are the deterministic sign of the network output, no label noise). A model
    with a non-centered horseshoe prior should prune a wide hidden layer down to about 2 units.

    Returns:
        ``x (n, 2)`` float64, ``y (n,)`` int64 in {0, 1}, and a copy of the generating weights.
    """
    n = _check_n(n, "n")
    rng = _rng(seed)
    w = {k: v.copy() for k, v in TOY_221_WEIGHTS.items()}
    x = rng.uniform(-1.0, 1.0, size=(n, 2))
    h = np.maximum(x @ w["W1"].T + w["b1"], 0.0)
    f = (h @ w["W2"].T + w["b2"])[:, 0]
    return x, (f > 0).astype(np.int64), w


LOGISTIC_SUPPORT: tuple[int, ...] = (1, 3, 7, 11, 13, 16, 17, 18, 19)
"""1-based positions of the non-zero coefficients (Skaaret-Lund, Storvik & Hubin 2023, §5.1)."""

LOGISTIC_BETA = np.zeros(20)
LOGISTIC_BETA[np.array(LOGISTIC_SUPPORT) - 1] = [-1.0, 1.0, 1.0, 0.6, -1.2, 1.5, -0.5, 0.8, 0.7]
LOGISTIC_BETA.setflags(write=False)
LOGISTIC_INTERCEPT = 0.4

LOGISTIC_WEAK_SIGNAL = 0.4
"""Coefficient scale of ``logistic-sim-weak``.  Fixed from the logistic MLE alone, before any LBBNN fit on it:
at 0.4 the four weakest true coefficients have mean Wald ``|z|`` 1.9-2.8 over 20 response draws on the
seed-0 design (1.0 gives 3.6-5.4), i.e. they sit at the MPM decision boundary of a ψ = 0.25 spike-and-slab,
where the guides' selection can differ; the null coefficients keep mean ``|z|`` ≈ 1."""


def _logistic_covariates(rng: np.random.Generator, n: int) -> np.ndarray:
    g = rng.standard_normal((n, 19))

    def mix(a: np.ndarray, rho: float, b: np.ndarray) -> np.ndarray:  # corr(a, result) = rho for N(0,1) a, b
        return rho * a + np.sqrt(1.0 - rho**2) * b

    # binary X1..X6: thresholded correlated latent Gaussians
    lat = np.column_stack(
        [
            g[:, 0],
            g[:, 2],
            mix(g[:, 2], -0.95, g[:, 3]),
            mix(g[:, 0], 0.7, g[:, 1]),
            g[:, 4],
            mix(g[:, 4], -0.95, g[:, 5]),
        ]
    )
    b = (lat > np.array([0.3, 0.0, 0.0, -0.2, 0.5, -0.5])).astype(np.float64)
    c = np.empty((n, 14))
    c[:, 0] = g[:, 6]  # X7
    c[:, 1] = mix(c[:, 0], 0.6, g[:, 7])  # X8
    c[:, 2] = g[:, 8]  # X9
    c[:, 3] = np.exp(0.5 * g[:, 9])  # X10 skewed (log-normal)
    c[:, 4] = mix(c[:, 2], 0.85, g[:, 10])  # X11
    c[:, 5] = g[:, 11]  # X12
    c[:, 6] = g[:, 12]  # X13
    c[:, 7] = mix(c[:, 5], -0.77, g[:, 13])  # X14
    c[:, 8] = mix(c[:, 6], -0.95, g[:, 14])  # X15
    c[:, 9] = g[:, 15]  # X16
    c[:, 10] = rng.uniform(size=n) ** 2  # X17 squared-uniform trend
    c[:, 11] = (1.0 - b[:, 1]) * np.exp(0.25 * g[:, 16])  # X18 zero-inflated, zero whenever X2 = 1
    c[:, 12] = mix(c[:, 9], 0.5, g[:, 17])  # X19
    c[:, 13] = 0.8 * (2.0 * b[:, 1] - 1.0) + 0.6 * g[:, 18]  # X20 driven by binary X2
    c = (c - c.mean(axis=0)) / c.std(axis=0)
    return np.hstack([b, c])


def make_logistic_selection(
    n: int = 2000, seed: int = 0, signal: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Correlated logistic variable-selection data: **our** generator, not the paper's data file.

    The LBBNN-flow paper (Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, §5.1) uses the Hubin &
    Storvik (2018) file ``sim3`` (20 covariates, 6 binary, n = 2000, "strong and complicated correlation
    structure"), which is not available. This generator keeps what matters for the experiment: n = 2000;
    columns 1-6 binary 0/1 (left raw), columns 7-20 continuous and standardised with full-data mean/sd (as
    the authors' public code does); the true support at the 1-based positions
    ``{1, 3, 7, 11, 13, 16, 17, 18, 19}``; and strong correlations mimicking those measured in ``sim3``:

    * binary-binary: X2-X3 ~ -0.81, X5-X6 ~ -0.78, X1-X4 ~ +0.46 (thresholded latent Gaussians);
    * binary-continuous: X2-X18 ~ -0.94 (X18 is zero-inflated: 0 whenever X2 = 1), X2-X20 ~ +0.80,
      X3-X18 ~ +0.76;
    * continuous: X13-X15 ~ -0.95, X9-X11 ~ +0.85, X12-X14 ~ -0.78, X18-X20 ~ -0.77, X7-X8 ~ +0.59,
      X16-X19 ~ +0.50; X10 is log-normal and X17 a squared uniform.

    Response: ``y ~ Bernoulli(sigmoid(x @ beta + 0.4))`` with :data:`LOGISTIC_BETA`
    ``(-1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0.6, 0, -1.2, 0, 0, 1.5, -0.5, 0.8, 0.7, 0)`` and intercept
    :data:`LOGISTIC_INTERCEPT` = 0.4 (mean y ~ 0.55; ``sim3`` has 0.596). The paper's printed beta does not
    reproduce its own file (our check against the ``sim3`` files published with the authors' code), and its
    extra ``N(0, 0.5)`` noise on the linear predictor is omitted. The magnitudes were chosen so that a
    logistic MLE on n = 2000 finds the true coefficients with Wald ``|z|`` between ~3 (the correlated X3, X11,
    X13, X18) and ~16 (X16), while null coefficients stay mostly below 2.5: learnable, but not trivial for a
    sparse method.

    ``signal`` multiplies every coefficient (not the intercept); the covariates do not depend on it, so
    ``signal < 1`` gives the same design with weaker effects (:data:`LOGISTIC_WEAK_SIGNAL`).

    Returns:
        ``x (n, 20)`` float64, ``y (n,)`` int64 in {0, 1}, ``beta_true (20,)`` (``signal * LOGISTIC_BETA``).
    """
    n = _check_n(n, "n", minimum=2)
    signal = float(signal)
    if not (np.isfinite(signal) and signal > 0):
        raise ValueError(f"signal must be a finite positive number, got {signal!r}")
    rng = _rng(seed)
    x = _logistic_covariates(rng, n)
    beta = signal * LOGISTIC_BETA
    eta = x @ beta + LOGISTIC_INTERCEPT
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    return x, y, beta
