"""One sparsity-report API shared by every pruning family.

A guide (or model) that can prune implements ``sparsity_report(model) -> SparsityReport``: bow-tie
Bayesian-FDR pruning (Sheinkman & Wade (2025) §3.4), horseshoe unit pruning (Ghosh et al. (2019) §4.3),
LBBNN median-probability
model (Hubin & Storvik (2019) §4.3).  ``zoo fit`` writes ``density`` from it; tutorials draw ``masks``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["SparsityReport"]


@dataclass
class SparsityReport:
    """``masks[site]`` is a bool tensor (the site's shape): True where the weight is kept.

    ``extras`` holds family-specific figures (e.g. nodes kept per layer, mean inclusion probability).
    """

    masks: dict[str, Tensor]
    extras: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k, v in self.masks.items():
            if not isinstance(v, Tensor) or v.dtype != torch.bool:
                raise TypeError(f"masks[{k!r}] must be a bool tensor")

    @property
    def density(self) -> float:
        """Fraction of weights kept, over all masked sites (layer sizes weight the average)."""
        total = sum(m.numel() for m in self.masks.values())
        return float(sum(int(m.sum()) for m in self.masks.values()) / total) if total else float("nan")

    def per_site(self) -> dict[str, float]:
        return {k: float(m.float().mean()) for k, m in self.masks.items()}

    def as_dict(self) -> dict:
        return {"density": self.density, "per_site": self.per_site(), **self.extras}
