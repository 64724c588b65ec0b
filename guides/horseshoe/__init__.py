"""Guides of the node-wise (regularized) horseshoe BNN (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388):
the public guide classes and the local-reparameterization ELBO, re-exported."""

from guides.horseshoe.factorized import HorseshoeGuide
from guides.horseshoe.flow import HorseshoeFlowGuide
from guides.horseshoe.lrt import HorseshoeLRTELBO
from guides.horseshoe.semi_structured import SemiStructuredHorseshoeGuide
from guides.horseshoe.structured import StructuredHorseshoeGuide
from guides.horseshoe.tied import TiedHorseshoeGuide

__all__ = [
    "HorseshoeGuide",
    "TiedHorseshoeGuide",
    "SemiStructuredHorseshoeGuide",
    "StructuredHorseshoeGuide",
    "HorseshoeFlowGuide",
    "HorseshoeLRTELBO",
]
