"""The z-flow guides of Skaaret-Lund, Storvik & Hubin (2023, arXiv:2305.03395): the public guide classes,
re-exported."""

from guides.flows.gaussian import GaussianFlowGuide
from guides.flows.lbbnn import LBBNNFlowGuide

__all__ = ["LBBNNFlowGuide", "GaussianFlowGuide"]
