"""Sparsity selection on fitted networks: projection-predictive unit pruning
(:mod:`zoo.sparsity.projpred`)."""

from zoo.sparsity.projpred import ProjpredConfig, ProjpredResult, projpred_units

__all__ = ["ProjpredConfig", "ProjpredResult", "projpred_units"]
