"""Classification metrics: NLL, accuracy, confident accuracy, ECE, predictive entropy, mutual information.

Conventions (see also :mod:`zoo.eval.metrics`):

* ``probs`` is either ``(N, K)`` class probabilities (rows summing to one) or, for binary tasks, ``(N,)``
  with ``P(y = 1)``; the latter is expanded to ``[1 - p, p]``.  Labels ``y`` are 1-D integers (integer-valued
  floats are accepted).  Predicted labels are the argmax, ties going to the lower class index (so a binary
  ``p = 0.5`` predicts class 0, like ``torch.round`` in the code of Skaaret-Lund, Storvik & Hubin 2023,
  arXiv:2305.03395).
* **Confident subset** (Hubin & Storvik 2019, arXiv:1903.07594, §3.2, "0.95 threshold Acc / Num.cl"):
  points whose maximal model-averaged class probability is ``>= threshold`` (the authors' code uses ``>=``).
* **ECE** (Guo, Pleiss, Sun & Weinberger 2017, arXiv:1706.04599, §2, Eq. 3; as used by Skaaret-Lund et
  al. 2023, §4.4): ``n_bins`` equal-width bins over the top-class confidence, bins ``(lo, hi]`` with a
  confidence of exactly 0 put into the first bin, ``ECE = sum_m (|B_m| / N) |acc(B_m) - conf(B_m)|``.
* **Uncertainty decomposition** (Houlsby, Huszár, Ghahramani & Lengyel 2011, arXiv:1112.5745, Eq. 2):
  total = ``H[E_theta p]``, epistemic = mutual information ``H[E_theta p] - E_theta H[p]``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.metrics import log_loss

from zoo.core.validation import (
    check_class_probs,
    check_count,
    check_float_array,
    check_label_range,
    check_labels,
    check_level,
    check_shape,
    to_numpy,
)

__all__ = [
    "PROB_CLAMP",
    "categorical_nll",
    "accuracy",
    "confident_accuracy",
    "ece",
    "predictive_entropy",
    "mutual_information",
]

#: Lower clamp applied to probabilities before taking logs in :func:`categorical_nll`.
PROB_CLAMP = 1e-12


def _labels_and_probs(y: Any, probs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(labels (N,), probabilities (N, K))`` with every label in ``[0, K - 1]``."""
    y_ = check_labels("y", y)
    p = check_class_probs("probs", probs, y_.shape[0])
    check_label_range("y", y_, p.shape[1])
    return y_, p


def _predict(probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(predicted labels, confidences) from (N, K) probabilities; ties go to the lowest index."""
    pred = np.argmax(probs, axis=1)
    return pred, probs[np.arange(probs.shape[0]), pred]


def categorical_nll(y: Any, probs: Any) -> float:
    """``-mean_n log p(y_n)`` for integer labels ``y`` (N,) and ``probs`` (N, K), or binary (N,) ``P(y=1)``.

    Computed by :func:`sklearn.metrics.log_loss` after clamping every probability below at
    :data:`PROB_CLAMP` (``1e-12``), so a confidently wrong prediction costs at most
    ``-log(1e-12) ~= 27.6`` nats.  Rows need only sum to one within 1e-4 (float32 softmax outputs):
    scikit-learn >= 1.5 does not renormalize them, and its warning about it is silenced here.
    """
    y_, p = _labels_and_probs(y, probs)
    if p.shape[1] == 1:  # a single class has probability 1 (scikit-learn needs two labels)
        return 0.0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*do not sum to one", category=UserWarning)
        return float(log_loss(y_, np.maximum(p, PROB_CLAMP), labels=np.arange(p.shape[1])))


def accuracy(y: Any, probs: Any) -> float:
    """Fraction of correct predictions.

    ``probs`` is (N, K) probabilities, binary (N,) ``P(y=1)`` (predicts 1 iff ``p > 0.5``), or, when it is a
    1-D integer/bool array, already-predicted labels.
    """
    y_ = check_labels("y", y)
    raw = to_numpy("probs", probs)
    if raw.ndim == 1 and raw.dtype.kind in "biu":
        check_shape("probs", raw, y_.shape, "predicted labels, the shape of `y`")
        return float(np.mean(raw.astype(np.int64) == y_))
    p = check_class_probs("probs", raw, y_.shape[0])
    check_label_range("y", y_, p.shape[1])
    pred, _ = _predict(p)
    return float(np.mean(pred == y_))


def confident_accuracy(y: Any, probs: Any, threshold: float = 0.95) -> tuple[float, float]:
    """Accuracy on the points whose maximal class probability is ``>= threshold``, and that subset's fraction.

    Hubin & Storvik's "0.95 threshold Acc" and "Num.cl" (arXiv:1903.07594, §3.2; the latter as a fraction:
    multiply by N for the count).  If no point reaches the threshold the accuracy is undefined and
    returned as ``nan`` (fraction ``0.0``).
    """
    thr = check_level("threshold", threshold, allow_one=True)
    y_, p = _labels_and_probs(y, probs)
    pred, conf = _predict(p)
    keep = conf >= thr
    frac = float(np.mean(keep))
    if not np.any(keep):
        return float("nan"), frac
    return float(np.mean(pred[keep] == y_[keep])), frac


def predictive_entropy(probs: Any) -> np.ndarray:
    """Per-point entropy ``H[p(y | x, D)] = -sum_k p_k log p_k`` (nats) of model-averaged (N, K) or binary
    (N,) probabilities: the total predictive uncertainty, e.g. on out-of-domain inputs (Hubin & Storvik,
    arXiv:1903.07594, §5: MNIST-trained models evaluated on an out-of-domain image set; here KMNIST)."""
    raw = to_numpy("probs", probs)
    p = check_class_probs("probs", raw, raw.shape[0] if raw.ndim >= 1 else 0)
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)


def mutual_information(draw_probs: Any) -> np.ndarray:
    """Per-point epistemic uncertainty ``I[y; theta | x, D] = H[E_theta p] - E_theta H[p]`` (nats) from
    per-draw probabilities (S, N, K) (the BALD score); ``>= 0``, zero when all draws agree."""
    d = check_float_array("draw_probs", draw_probs, min_ndim=3)
    if d.ndim != 3:
        raise ValueError(f"`draw_probs` must be (S, N, K) per-draw class probabilities, got shape {d.shape}")
    per_draw = np.stack([predictive_entropy(d_s) for d_s in d])  # validates each draw
    return np.maximum(predictive_entropy(d.mean(axis=0)) - per_draw.mean(axis=0), 0.0)


def ece(y: Any, probs: Any, n_bins: int = 10) -> float:
    """Expected calibration error over the top-class confidence (Guo et al. 2017, arXiv:1706.04599, Eq. 3).

    ``n_bins`` equal-width bins ``(lo, hi]`` on [0, 1] (a confidence of exactly 0 goes into the first bin);
    ``ECE = sum_m (|B_m| / N) |acc(B_m) - conf(B_m)|``.  Binary (N,) ``P(y=1)`` is treated as two classes.
    """
    n_bins = check_count("n_bins", n_bins, minimum=1)
    y_, p = _labels_and_probs(y, probs)
    pred, conf = _predict(p)
    correct = (pred == y_).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # searchsorted(side="left") gives i with edges[i-1] < c <= edges[i]  ->  bin i-1; c == 0 -> bin 0.
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    acc_sum = np.bincount(idx, weights=correct, minlength=n_bins)
    conf_sum = np.bincount(idx, weights=conf, minlength=n_bins)
    # sum_m (|B_m|/N) |acc_m - conf_m| = (1/N) sum_m |sum_{B_m} correct - sum_{B_m} conf|
    return float(np.sum(np.abs(acc_sum - conf_sum)) / y_.shape[0])
