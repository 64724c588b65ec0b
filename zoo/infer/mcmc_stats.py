"""Per-draw sampler statistics of NUTS: :class:`RecordingNUTS`, Pyro's ``NUTS`` kernel that also records,
for every transition, the statistics Stan reports and ArviZ's diagnostics read from ``sample_stats``.

Pyro's ``NUTS`` (pyro 1.9) keeps only running summaries (divergent iterations, the mean acceptance
statistic); it has no per-draw record such as NumPyro's ``MCMC.get_extra_fields()``.  The kernel here
observes its own trajectory through the two tree-building methods of Pyro's implementation and, for each
transition, records (names as in ArviZ's ``sample_stats`` schema):

* ``energy``: the Hamiltonian ``H(z, r) = U(z) + K(r)`` at the selected point of the trajectory (Stan's
  ``energy__``), ``U = -lp`` the potential energy and ``K(r) = r' M^{-1} r / 2`` the kinetic energy.  So
  ``energy + lp = K >= 0``, and in stationarity ``K`` is ``Gamma(d / 2, 1)`` for ``d`` unconstrained
  parameters.  ArviZ's ``az.bfmi`` / ``az.plot_energy`` read it (the energy Bayesian fraction of missing
  information, Betancourt 2016, "Diagnosing suboptimal cotangent disintegrations in Hamiltonian Monte
  Carlo", arXiv:1604.00695, §4, eq. 5).
* ``energy_error``: ``energy`` minus the Hamiltonian at the start of the transition (the integration error
  of the selected point).
* ``acceptance_rate``: the mean over the trajectory's leapfrog steps of ``min(1, exp(H_0 - H_i))`` (the
  statistic the step size is adapted to, Hoffman & Gelman 2014, arXiv:1111.4246, §3.2, eq. 17).
* ``n_steps``: leapfrog steps of the transition; ``tree_depth``: doublings of the trajectory that were
  kept (Stan's ``treedepth__``; ``2**tree_depth - 1 <= n_steps <= 2**(tree_depth + 1) - 1``).
* ``step_size``: the (adapted) integrator step size.

Recording draws no random numbers: a chain gives the same draws as with Pyro's own ``NUTS``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pyro.infer import NUTS

__all__ = ["RecordingNUTS", "STAT_DTYPES", "stack_stats"]

#: the per-draw statistics :class:`RecordingNUTS` records and their storage dtypes
STAT_DTYPES: dict[str, torch.dtype] = {
    "energy": torch.float64,
    "energy_error": torch.float64,
    "acceptance_rate": torch.float64,
    "step_size": torch.float64,
    "tree_depth": torch.int64,
    "n_steps": torch.int64,
}


def _finite_or_inf(value: Any) -> float:
    """Pyro's convention for a trajectory point whose energy is NaN: infinite energy."""
    v = float(value)
    return math.inf if math.isnan(v) else v


class RecordingNUTS(NUTS):
    """Pyro's ``NUTS`` that records the statistics of each transition in :attr:`last_stats` (a dict keyed
    as :data:`STAT_DTYPES`; module docstring).  Same constructor as ``pyro.infer.NUTS``.

    Usage::

        kernel = RecordingNUTS(model, target_accept_prob=0.8)
        stats = []
        mcmc = MCMC(kernel, num_samples=500, warmup_steps=500,
                    hook_fn=lambda k, params, stage, i: stats.append(dict(k.last_stats)))
        mcmc.run(x, y)
    """

    def _reset(self) -> None:
        super()._reset()
        self.last_stats: dict[str, float | int] = {}
        self._begin_transition()

    def _begin_transition(self) -> None:
        self._nesting = 0
        self._depth = 0
        self._steps = 0
        self._accept_sum = 0.0
        self._start_energy: float | None = None
        self._leaves: list[tuple[torch.Tensor, float]] = []  # (potential energy tensor, energy) per step

    def _sample_r(self, name: str) -> tuple[dict, dict]:
        r, r_unscaled = super()._sample_r(name)
        if self._start_energy is None and self._potential_energy_last is not None:
            self._start_energy = _finite_or_inf(
                self._potential_energy_last + self._kinetic_energy(r_unscaled)
            )
        return r, r_unscaled

    def _build_basetree(self, z, r, z_grads, log_slice, direction, energy_current):
        tree = super()._build_basetree(z, r, z_grads, log_slice, direction, energy_current)
        self._steps += 1
        self._accept_sum += float(tree.sum_accept_probs)
        energy = tree.z_proposal_pe + self._kinetic_energy(tree.r_right_unscaled)
        self._leaves.append((tree.z_proposal_pe, _finite_or_inf(energy)))
        return tree

    def _build_tree(self, z, r, z_grads, log_slice, direction, tree_depth, energy_current):
        top = self._nesting == 0
        self._nesting += 1
        try:
            tree = super()._build_tree(z, r, z_grads, log_slice, direction, tree_depth, energy_current)
        finally:
            self._nesting -= 1
        if top and not bool(tree.diverging) and not bool(tree.turning):
            self._depth += 1  # as Pyro (and Stan) count: a new subtree that neither turns nor diverges
        return tree

    def sample(self, params: dict) -> dict:
        self._begin_transition()
        z = super().sample(params)
        start = self._start_energy if self._start_energy is not None else math.nan
        chosen = self._potential_energy_last  # the selected point's potential energy (the cached tensor)
        energy = next((e for pe, e in self._leaves if pe is chosen), start)  # no move: the start point
        self.last_stats = {
            "energy": energy,
            "energy_error": energy - start,
            "acceptance_rate": self._accept_sum / self._steps if self._steps else math.nan,
            "step_size": float(self.step_size),
            "tree_depth": self._depth,
            "n_steps": self._steps,
        }
        self._leaves = []  # do not keep the trajectory's tensors alive between transitions
        return z


def stack_stats(rows: list[dict[str, float | int]]) -> dict[str, torch.Tensor]:
    """``{name: (draws,)}`` tensors of the per-draw statistics ``rows`` (one dict per kept draw)."""
    return {k: torch.tensor([row[k] for row in rows], dtype=STAT_DTYPES[k]) for k in STAT_DTYPES}
