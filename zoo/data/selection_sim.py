"""A logistic variable-selection generator built from the description of the LBBNN-flow study (Skaaret-Lund,
Storvik & Hubin 2023, "Sparsifying Bayesian neural networks with latent binary variables and normalizing
flows", arXiv:2305.03395, §5.1), registered as the data set ``logistic-hs18``.

The paper fits its methods to the data of Hubin & Storvik (2018, "Mode jumping MCMC for Bayesian variable
selection in GLMM", arXiv:1604.06398), whose covariate generation is deferred to that paper's appendix B
(a separate supplement we could not obtain).  What the LBBNN-flow paper itself says, and where each design
choice below comes from:

* **n = 2000 rows, 20 covariates, a mix of binary and continuous** (§5.1).  We take **six binary** columns,
  X1-X6, and fourteen continuous ones (the count of binary columns is our choice; §5.1 names β1-β6 as the
  block of highly correlated covariates, and binary covariates are what §5.1 contrasts with continuous ones).
* **"A strong and complicated correlation structure between many of the variables"** (§5.1, Fig. 4, whose
  values are not printed): **ours**.  The nineteen non-trend covariates are a Gaussian copula
  ``Z ~ N(0, R)`` (:data:`LATENT_CORRELATION`); binary columns are ``1{Z_j > 0}`` (frequency 1/2, the
  largest variance a 0/1 column can have), continuous columns are ``Z_j`` itself (N(0, 1) marginals, as the
  paper gives no scale).  ``R`` gives the true covariates correlated *null* partners (decoys), so that a
  mean-field posterior can split the evidence between them — the situation in which Carbonetto & Stephens
  (2012), cited in §5.1, expect mean-field VI to fail — and links the binary block to the continuous one:

  - binary block A (X1 true; X2, X4 null: latent correlations 0.9 and 0.7 with X1, hence 0.63 between
    them) and block B (X3 true; X5, X6 null: -0.9 and 0.7 with X3); phi coefficients ``(2/π) arcsin r``
    (±0.71, ±0.49, ±0.44);
  - continuous pairs: X7-X8 0.8, X9-X11 0.85, X10-X11 0.5, X12-X14 0.7, X13-X15 -0.9, X18-X20 -0.85,
    X16-X19 0.4;
  - binary-continuous: latent X1-X16 0.5 and X3-X18 -0.6 (point-biserial ``r √(2/π)``: 0.40, -0.48).

  X19 is tied only to true covariates (X16 directly, X1 through X16).  :func:`design_correlation` gives the
  implied correlation of every pair of columns.
* **The trend covariate**: X17 = (row index)², rows numbered 1..n in generation order.  The printed
  β17 = -0.00005 only makes sense for a covariate in the millions; a squared row index (1 to 4·10⁶ for
  n = 2000) is the natural reading, and it makes the rows *ordered*, which matters for the reference code's
  fixed-order minibatches.
* **Response** (§5.1, unnumbered display): ``η ~ N(βx, 0.5)``, ``y ~ Bernoulli(e^η / (1 + e^η))`` with the
  printed ``β = (-4, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1.2, 0, 37.1, 0, 0, 50, -0.00005, 10, 3, 0)``: 0.5 read as
  the **variance** (the usual ``N(mean, variance)`` notation) and **no intercept** (none is printed).
  β applies to the **raw** covariates, before any standardisation: on a standardised X17 the printed
  -0.00005 would be a null effect, yet §5.1 lists 17 among the true covariates.
  True support (1-based): {1, 3, 7, 11, 13, 16, 17, 18, 19}.
* **Preprocessing** (the authors' public code for §5.1): continuous columns 7-20 standardised with the
  full-data mean and sd, binary columns 1-6 left raw.  The support is unchanged (a column's scale does not
  make its coefficient zero or non-zero).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "BETA",
    "BINARY_COLUMNS",
    "LATENT_CORRELATION",
    "NOISE_VAR",
    "SUPPORT",
    "TREND_COLUMN",
    "design_correlation",
    "make_logistic_hs18",
    "make_hs18_covariates",
    "standardize_continuous",
]

N_FEATURES = 20

BETA = np.array(
    [-4.0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1.2, 0, 37.1, 0, 0, 50, -0.00005, 10, 3, 0], dtype=np.float64
)
"""The printed coefficients of Skaaret-Lund et al. (2023, arXiv:2305.03395, §5.1), on the raw covariates."""
BETA.setflags(write=False)

SUPPORT: tuple[int, ...] = tuple(int(j) + 1 for j in np.flatnonzero(BETA))
"""1-based positions of the non-zero coefficients: (1, 3, 7, 11, 13, 16, 17, 18, 19)."""

BINARY_COLUMNS: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
"""1-based binary columns (left raw by the preprocessing)."""

TREND_COLUMN = 17
"""1-based column of the trend covariate ``(row index)²``."""

NOISE_VAR = 0.5
"""Variance of the Gaussian noise on the linear predictor (§5.1: ``η ~ N(βx, 0.5)``)."""

# the copula as a chain of one-parent equations Z_c = b Z_parent + sqrt(1 - b²) ε_c (1-based columns, listed
# parents first), so R is positive definite by construction; see the module docstring
_PARENTS: dict[int, tuple[int, float]] = {
    2: (1, 0.9), 4: (1, 0.7),  # binary block A around X1
    5: (3, -0.9), 6: (3, 0.7),  # binary block B around X3
    8: (7, 0.8), 9: (11, 0.85), 10: (11, 0.5), 14: (12, 0.7), 15: (13, -0.9),
    16: (1, 0.5), 18: (3, -0.6),  # continuous true covariates tied to the binary blocks
    19: (16, 0.4), 20: (18, -0.85),
}  # fmt: skip

_LATENT_COLUMNS = tuple(j for j in range(1, N_FEATURES + 1) if j != TREND_COLUMN)


def _loadings() -> np.ndarray:
    """``A`` with ``Z = A ε`` (rows and columns in :data:`_LATENT_COLUMNS` order), so ``R = A Aᵀ``."""
    pos = {c: i for i, c in enumerate(_LATENT_COLUMNS)}
    a = np.zeros((len(pos), len(pos)))

    def depth(c: int) -> int:
        return 0 if c not in _PARENTS else 1 + depth(_PARENTS[c][0])

    for c in sorted(_LATENT_COLUMNS, key=depth):  # every parent before its children
        parent, b = _PARENTS.get(c, (None, 0.0))
        a[pos[c], pos[c]] = math.sqrt(1.0 - b * b)
        if parent is not None:
            a[pos[c]] += b * a[pos[parent]]
    return a


_LOADINGS = _loadings()
LATENT_CORRELATION = _LOADINGS @ _LOADINGS.T
"""``R`` (19 × 19, columns 1-16 and 18-20 in order) of the Gaussian copula; positive definite."""
LATENT_CORRELATION.setflags(write=False)


def _check_int(value: object, arg: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{arg} must be an int >= {minimum}, got {value!r}")
    return int(value)


def design_correlation() -> np.ndarray:
    """The population correlation of every pair of raw columns (20 × 20, 0-based), implied by the copula.

    Continuous-continuous: ``r``; binary-binary (thresholds at 0): ``(2/π) arcsin r``; binary-continuous:
    ``r √(2/π)``.  The trend column is uncorrelated with the others in distribution (its row is 0 off the
    diagonal)."""
    binary = {j - 1 for j in BINARY_COLUMNS}
    out = np.eye(N_FEATURES)
    for i, a in enumerate(_LATENT_COLUMNS):
        for k, b in enumerate(_LATENT_COLUMNS):
            if i == k:
                continue
            r = LATENT_CORRELATION[i, k]
            nb = ((a - 1) in binary) + ((b - 1) in binary)
            out[a - 1, b - 1] = (2 / math.pi) * math.asin(r) if nb == 2 else r * math.sqrt(2 / math.pi) ** nb
    return out


def make_hs18_covariates(n: int = 2000, seed: int = 0) -> np.ndarray:
    """Raw covariates ``(n, 20)`` float64: binary 0/1 in columns 1-6, N(0, 1) copula columns, and column 17
    equal to ``(row index)²`` (rows 1..n).  See the module docstring for the design."""
    n = _check_int(n, "n", 2)
    seed = _check_int(seed, "seed", 0)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, len(_LATENT_COLUMNS))) @ _LOADINGS.T
    x = np.empty((n, N_FEATURES))
    x[:, [c - 1 for c in _LATENT_COLUMNS]] = z
    bins = [c - 1 for c in BINARY_COLUMNS]
    x[:, bins] = (x[:, bins] > 0).astype(np.float64)
    x[:, TREND_COLUMN - 1] = np.arange(1, n + 1, dtype=np.float64) ** 2
    return x


def standardize_continuous(
    x: np.ndarray, stats: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Standardise columns 7-20 with ``stats = (mean, sd)`` (default: this array's own full-data mean and sd,
    ``ddof=0``), leaving the binary columns 1-6 raw, as the authors' code does.  Returns the new array and the
    statistics used."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != N_FEATURES:
        raise ValueError(f"x must have shape (n, {N_FEATURES}), got {x.shape}")
    cont = slice(len(BINARY_COLUMNS), N_FEATURES)
    if stats is None:
        stats = (x[:, cont].mean(axis=0), x[:, cont].std(axis=0))
    mean, sd = stats
    out = x.copy()
    out[:, cont] = (x[:, cont] - mean) / sd
    return out, (mean, sd)


def make_logistic_hs18(
    n: int = 2000, seed: int = 0, noise_var: float = NOISE_VAR
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw covariates, labels and β of the §5.1 study as described (module docstring).

    ``η = x β + sqrt(noise_var) ε`` on the raw covariates, ``y ~ Bernoulli(sigmoid(η))``.

    Returns:
        ``x (n, 20)`` raw float64 (apply :func:`standardize_continuous` for the reference preprocessing),
        ``y (n,)`` int64 in {0, 1}, ``beta (20,)`` (a copy of :data:`BETA`).
    """
    noise_var = float(noise_var)
    if not (np.isfinite(noise_var) and noise_var >= 0):
        raise ValueError(f"noise_var must be a finite variance >= 0, got {noise_var!r}")
    x = make_hs18_covariates(n, seed)
    # the response has its own stream, apart from the covariates'
    rng = np.random.default_rng([_check_int(seed, "seed", 0), 1])
    eta = x @ BETA + math.sqrt(noise_var) * rng.standard_normal(x.shape[0])
    p = 0.5 * (1.0 + np.tanh(0.5 * eta))  # sigmoid without overflow at |η| in the hundreds
    y = (rng.uniform(size=x.shape[0]) < p).astype(np.int64)
    return x, y, BETA.copy()
