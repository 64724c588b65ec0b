"""Unit pruning for the horseshoe guides (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §4.3): prune unit
``k`` of hidden layer ``l`` when ``P(tau_kl v_l < delta) > p0`` (defaults ``delta = 1e-3``, ``p0 = 0.9``),
the shrinkage profile ``||E[w_kl]||_2`` of §6.5, and the export of a smaller dense network without the
pruned units (:func:`prune_network`).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyro
import torch
from pyro import poutine
from torch import Tensor

from guides.horseshoe.closed_forms import prune_probability
from zoo.core.architectures import MLP
from zoo.core.model import BayesianModel
from zoo.core.sparsity import SparsityReport
from zoo.families.horseshoe.prior import HSLayer, regularized_variance

__all__ = ["HorseshoePruningMixin", "prune_network"]


class HorseshoePruningMixin:
    """Pruning rule, posterior means and the sparsity report of a horseshoe guide.

    The host (:class:`guides.horseshoe.factorized.HorseshoeGuide`) provides ``layers``, ``centered``,
    ``regularized``, ``family``, ``_tau_marginal(i)``, ``_lognormal(name)`` and ``_device``; calling the
    host runs its weight-space sample sites.
    """

    def prune_probabilities(self, delta: float = 1e-3) -> dict[str, Tensor]:
        """``P(tau_kl v_l < delta)`` per hidden unit, ``{prefix: (K,)}`` (closed form under the log-normal
        factors, App. B.2)."""
        out = {}
        for i, layer in enumerate(self.layers):
            if not layer.output:
                mu_t, var_t = self._tau_marginal(i)
                mu_v, var_v = self._lognormal(f"l{i}_v")
                out[layer.prefix] = prune_probability(mu_t, var_t, mu_v, var_v, delta).detach()
        return out

    @torch.no_grad()
    def mean_rows(self, num_samples: int = 1000, seed: int = 0) -> dict[str, Tensor]:
        """Monte Carlo ``E_q[w_kl]`` as ``{prefix: (K, F)}`` rows (fixed seed, so deterministic), drawn in
        chunks of at most ~2e7 weights."""
        numel = sum(lay.units * lay.fan for lay in self.layers)
        chunk = max(1, min(num_samples, int(2e7) // numel))
        sums: dict[str, Tensor] = {}
        devices = [self._device.index or 0] if self._device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), poutine.block():
            torch.manual_seed(seed)
            done = 0
            while done < num_samples:
                c = min(chunk, num_samples - done)
                for p, rows in self._draw_rows(c).items():
                    sums[p] = sums[p] + rows.sum(0) if p in sums else rows.sum(0)
                done += c
        return {p: s / num_samples for p, s in sums.items()}

    def _draw_rows(self, num_samples: int) -> dict[str, Tensor]:
        """``num_samples`` joint draws of every layer's weight rows ``w = tau~ v beta``, ``(S, K, F)``."""
        with pyro.plate("_hs_draws", num_samples, dim=-2):
            tr = poutine.trace(self).get_trace()
        nodes = tr.nodes
        c2 = nodes["hs.c2"]["value"] if self.regularized else None
        out = {}
        for layer in self.layers:
            p = layer.prefix
            rows = nodes[f"{p}.w" if self.centered else f"{p}.beta"]["value"]
            if not self.centered:
                if layer.output:
                    scale = nodes[f"{p}.kappa2"]["value"].sqrt()[..., None, None]
                else:
                    tau2, v2 = nodes[f"{p}.tau2"]["value"], nodes[f"{p}.v2"]["value"][..., None]
                    var = regularized_variance(tau2, v2, None if c2 is None else c2[..., None])
                    scale = var.sqrt()[..., None]
                rows = scale * rows
            out[p] = rows.reshape(num_samples, layer.units, layer.fan)
        return out

    def posterior_mean_params(
        self, model: BayesianModel, num_samples: int = 1000, seed: int = 0
    ) -> dict[str, Tensor]:
        """``E_q[w]`` for every architecture parameter, ``{spec.name: tensor}``."""
        rows = self.mean_rows(num_samples, seed)
        out: dict[str, Tensor] = {}
        for layer in self.layers:
            out.update(layer.split(rows[layer.prefix]))
        return out

    def sparsity_report(
        self, model: BayesianModel, delta: float = 1e-3, p0: float = 0.9, num_samples: int = 200
    ) -> SparsityReport:
        """Prune unit ``k`` of hidden layer ``l`` when ``P(tau_kl v_l < delta) > p0`` (§4.3; defaults
        ``delta = 1e-3``, ``p0 = 0.9``).

        Masks drop a pruned unit's incoming weights and bias and, for a following 2-D ``weight`` spec
        (an MLP), the column that reads the unit.  ``extras``: units kept and compression rate (fraction
        of units kept) per layer, the pruning probabilities, and the shrinkage profile ``||E[w_kl]||_2``.
        """
        if not 0 < delta:
            raise ValueError(f"delta must be positive, got {delta}")
        if not 0 <= p0 < 1:
            raise ValueError(f"p0 must be in [0, 1), got {p0}")
        probs = self.prune_probabilities(delta)
        rows = self.mean_rows(num_samples)
        masks, kept = self._unit_masks(probs, p0)
        hidden = [lay for lay in self.layers if not lay.output]
        extras = {
            "family": self.family,
            "delta": delta,
            "p0": p0,
            "units": {lay.prefix: lay.units for lay in hidden},
            "units_kept": {lay.prefix: kept[lay.prefix] for lay in hidden},
            "compression": {lay.prefix: kept[lay.prefix] / lay.units for lay in hidden},
            "prune_probability": {k: v.cpu().tolist() for k, v in probs.items()},
            "weight_norms": {lay.prefix: rows[lay.prefix].norm(dim=-1).cpu().tolist() for lay in self.layers},
        }
        return SparsityReport(masks, extras)

    def _unit_masks(self, probs: dict[str, Tensor], p0: float) -> tuple[dict[str, Tensor], dict[str, int]]:
        """Per-spec keep masks and the number of units kept per layer (the output layer keeps all)."""
        masks: dict[str, Tensor] = {}
        kept: dict[str, int] = {}
        prev_keep: Tensor | None = None
        for layer in self.layers:
            if layer.output:
                keep = torch.ones(layer.units, dtype=torch.bool, device=self._device)
            else:
                keep = probs[layer.prefix] <= p0
            masks.update(_layer_masks(layer, keep, prev_keep))
            kept[layer.prefix] = int(keep.sum())
            prev_keep = keep
        return masks, kept


def _layer_masks(layer: HSLayer, keep: Tensor, prev_keep: Tensor | None) -> dict[str, Tensor]:
    """Masks of ``layer``'s specs: rows of the units kept, and (2-D weights) the inputs still alive."""
    out = {}
    for s in layer.specs:
        shape = [1] * len(s.shape)
        shape[s.unit_dim] = layer.units
        m = keep.reshape(shape).expand(s.shape).clone()
        if prev_keep is not None and s.role == "weight" and len(s.shape) == 2:
            if s.shape[1] == prev_keep.numel():
                m &= prev_keep.reshape(1, -1)
        out[s.name] = m
    return out


def prune_network(
    model: BayesianModel, params: Mapping[str, Tensor], report: SparsityReport
) -> tuple[MLP, dict[str, Tensor]]:
    """A smaller dense :class:`~zoo.core.architectures.MLP` without the pruned units: deletes the pruned rows
    of ``W_l`` / ``b_l`` and the matching columns of ``W_{l+1}``.  ``params`` are point values (e.g.
    :meth:`HorseshoePruningMixin.posterior_mean_params`)."""
    arch = model.architecture
    if not isinstance(arch, MLP):
        raise TypeError(f"model: prune_network needs an MLP, got {type(arch).__name__}")
    keep_in = torch.ones(arch.in_features, dtype=torch.bool, device=params["fc0.weight"].device)
    hidden, out = [], {}
    for l in range(arch.num_layers):
        w = params[f"fc{l}.weight"]
        keep = report.masks[f"fc{l}.weight"].any(dim=1).to(w.device)
        if l == arch.num_layers - 1:
            keep = torch.ones_like(keep)
        else:
            if not keep.any():  # keep one unit so the network stays well-formed
                keep[0] = True
            hidden.append(int(keep.sum()))
        out[f"fc{l}.weight"] = w[keep][:, keep_in]
        if arch.bias:
            out[f"fc{l}.bias"] = params[f"fc{l}.bias"][keep]
        keep_in = keep
    small = MLP(arch.in_features, tuple(hidden), arch.out_features, arch.activation, arch.bias)
    return small, out
