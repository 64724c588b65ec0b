"""Guides of the latent-binary BNN (Hubin & Storvik 2019, arXiv:1903.07594) and its LCRT variant
(Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395): the public guide classes, re-exported."""

from guides.lbbnn.base import LBBNNGuide
from guides.lbbnn.lcrt import LCRTLBBNNGuide
from guides.lbbnn.meanfield import MeanFieldLBBNNGuide
from guides.lbbnn.mvn import MVNLBBNNGuide

__all__ = ["LBBNNGuide", "MeanFieldLBBNNGuide", "MVNLBBNNGuide", "LCRTLBBNNGuide"]
