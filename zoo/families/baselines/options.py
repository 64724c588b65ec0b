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
    variance (ignored for classification); ``hierarchical_scale``: the HMC baseline prior of Sheinkman &
    Wade 2025 (arXiv:2411.11132), App. D.2, ``W ~ N(0, s_w^2 gamma / sqrt(fan_in))``, ``b ~ N(0, s_b^2
    gamma)`` with one shared ``gamma ~ IG(2, 1)``
    (:class:`~zoo.families.baselines.hierarchical.HierarchicalGaussianPrior`; it has its own fan-in factor).
    """

    weight_scale: float = 1.0
    bias_scale: float = 1.0
    fan_in_scaling: bool = False
    noise_concentration: float = 2.0
    noise_rate: float = 0.5
    hierarchical_scale: bool = False

    def validate(self) -> None:
        check_bool("fan_in_scaling", self.fan_in_scaling)
        check_bool("hierarchical_scale", self.hierarchical_scale)
        for name in ("weight_scale", "bias_scale", "noise_concentration", "noise_rate"):
            check_positive(name, getattr(self, name))
        if self.hierarchical_scale and self.fan_in_scaling:
            raise ValueError(
                "fan_in_scaling: the hierarchical_scale prior (arXiv:2411.11132 App. D.2) divides the weight "
                "variance by sqrt(fan_in) itself; leave fan_in_scaling False"
            )


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
