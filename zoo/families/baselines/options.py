"""Options of the baseline builders as validated configs: ``mfvi-bnn`` (:class:`MFVIOptions`) and
``blr-cavi`` (:class:`BLROptions`).

Both put independent Gaussian priors on the weights (the "mfVI" / Bayes-by-backprop baseline of Blundell,
Cornebise, Kavukcuoglu & Wierstra 2015, arXiv:1505.05424, §3) and, for regression, an inverse-gamma prior
``sigma^2 ~ IG(noise_concentration, noise_rate)`` on the noise variance (Bishop 2006, *Pattern Recognition
and Machine Learning*, §10.1.3; Ormerod & Wand 2010, Algorithm 1).
"""

from __future__ import annotations

import dataclasses

from zoo.core.config import Config
from zoo.core.validation import check_bool, check_positive

__all__ = ["MFVIOptions", "BLROptions"]


@dataclasses.dataclass(frozen=True)
class MFVIOptions(Config):
    """Keyword options of the ``mfvi-bnn`` builder.

    ``weight_scale``/``bias_scale``: prior standard deviations ``s_w``, ``s_b`` of
    :class:`~zoo.core.gaussian.GaussianPrior`; ``fan_in_scaling``: use ``s_w / sqrt(fan_in)`` per layer;
    ``noise_concentration``/``noise_rate``: the inverse-gamma prior on a regression likelihood's noise
    variance (ignored for classification).
    """

    weight_scale: float = 1.0
    bias_scale: float = 1.0
    fan_in_scaling: bool = False
    noise_concentration: float = 2.0
    noise_rate: float = 0.5

    def validate(self) -> None:
        check_bool("fan_in_scaling", self.fan_in_scaling)
        for name in ("weight_scale", "bias_scale", "noise_concentration", "noise_rate"):
            check_positive(name, getattr(self, name))


@dataclasses.dataclass(frozen=True)
class BLROptions(Config):
    """Keyword options of the ``blr-cavi`` builder: ``w ~ N(0, weight_scale^2 I)``,
    ``sigma^2 ~ IG(noise_concentration, noise_rate)``."""

    weight_scale: float = 1.0
    noise_concentration: float = 2.0
    noise_rate: float = 1.0

    def validate(self) -> None:
        for name in ("weight_scale", "noise_concentration", "noise_rate"):
            check_positive(name, getattr(self, name))
