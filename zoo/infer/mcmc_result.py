"""What :func:`zoo.infer.mcmc.fit_nuts` returns: :class:`NUTSResult`, a :class:`~zoo.infer.result.FitResult`
whose guide, :class:`PosteriorDrawsGuide`, replays the posterior draws.

The guide picks draw indices through one auxiliary site ``"_draw_index"`` (:class:`DrawIndex`) and emits
every latent site as a ``Delta`` at the chosen draw, so the zoo's :func:`~zoo.infer.predict.predict`
(vectorized over a particle plate), ``log_likelihood``, ``posterior_samples``, the ArviZ export and
checkpoints work as for any guide.  Under a plate of size ``c`` the indices are: every draw in storage
order (chain-major) when ``c`` equals the number of draws, ``c`` distinct random draws when fewer, and
draws with replacement when more.  ``predict(result, x, num_samples=S, sample_chunk=S)`` with ``S`` the
number of draws therefore averages over every posterior draw exactly once.

The draws and the per-draw sampler statistics are the guide's buffers (``state_dict``), with the site
names as its extra state, so a checkpoint holds the whole posterior sample: ``zoo.load(path)``
(:func:`zoo.infer.checkpoint.load`, or :func:`zoo.infer.checkpoint.load_nuts`) restores it as a
:class:`NUTSResult`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from torch import Tensor

from zoo.infer.result import FitResult

if TYPE_CHECKING:
    import arviz as az
    from torch.nn.modules.module import _IncompatibleKeys

__all__ = ["DrawIndex", "PosteriorDrawsGuide", "NUTSResult", "restore_sampled_form"]

_EMPTY = torch.Size()


class DrawIndex(dist.TorchDistribution):
    """Uniform law over the draw indices ``0..num_draws-1`` whose ``sample`` of ``n`` values takes every
    draw in order when ``n == num_draws``, distinct random draws when ``n < num_draws`` and draws with
    replacement otherwise (see the module docstring)."""

    arg_constraints: dict = {}
    has_enumerate_support = False

    def __init__(
        self, num_draws: int, batch_shape: torch.Size = _EMPTY, validate_args: bool | None = None
    ) -> None:
        self.num_draws = int(num_draws)
        super().__init__(torch.Size(batch_shape), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.integer_interval(0, self.num_draws - 1)

    def expand(self, batch_shape: Sequence[int], _instance: DrawIndex | None = None) -> DrawIndex:
        return DrawIndex(self.num_draws, torch.Size(batch_shape))

    def sample(self, sample_shape: torch.Size = _EMPTY) -> Tensor:
        shape = self._extended_shape(sample_shape)
        n, s = math.prod(shape), self.num_draws
        if n == s:
            idx = torch.arange(s)
        elif n < s:
            idx = torch.randperm(s)[:n]
        else:
            idx = torch.randint(0, s, (n,))
        return idx.reshape(shape)

    def log_prob(self, value: Tensor) -> Tensor:
        return torch.full(value.shape, -math.log(self.num_draws))


class PosteriorDrawsGuide(torch.nn.Module):
    """A guide that replays posterior draws ``{site: (chain, draw, *shape)}`` (module docstring).

    ``stats``: per-draw sampler statistics ``{name: (chain, draw)}`` (``lp``, ``diverging`` and those of
    :mod:`zoo.infer.mcmc_stats`: ``energy``, ``energy_error``, ``acceptance_rate``, ``step_size``,
    ``tree_depth``, ``n_steps``), kept with the draws.  ``uses_gradients = False``: there is nothing to
    train.
    """

    uses_gradients = False

    def __init__(
        self, samples: Mapping[str, Tensor] | None = None, stats: Mapping[str, Tensor] | None = None
    ):
        super().__init__()
        self._names: list[str] = []
        self._stats: list[str] = []
        if samples:
            self._store(samples, stats or {})

    def _store(self, samples: Mapping[str, Tensor], stats: Mapping[str, Tensor]) -> None:
        dims = {tuple(v.shape[:2]) for v in samples.values()} | {tuple(v.shape[:2]) for v in stats.values()}
        if len(dims) != 1 or len(next(iter(dims))) != 2:
            raise ValueError(f"samples: every site needs the same leading (chain, draw) dims, got {dims}")
        for name in [n for n in self._buffers if n.startswith(("draws_", "stat_"))]:
            del self._buffers[name]
        self._names, self._stats = list(samples), list(stats)
        for i, v in enumerate(samples.values()):
            self.register_buffer(f"draws_{i}", v.detach().clone())
        for i, v in enumerate(stats.values()):
            self.register_buffer(f"stat_{i}", v.detach().clone())

    @property
    def num_chains(self) -> int:
        return int(self.draws_0.shape[0]) if self._names else 0

    @property
    def num_draws(self) -> int:
        """Draws per chain."""
        return int(self.draws_0.shape[1]) if self._names else 0

    @property
    def samples(self) -> dict[str, Tensor]:
        """``{site: (chain, draw, *shape)}`` (constrained values, the model's own sites)."""
        return {n: getattr(self, f"draws_{i}") for i, n in enumerate(self._names)}

    @property
    def stats(self) -> dict[str, Tensor]:
        """Per-draw sampler statistics ``{name: (chain, draw)}``."""
        return {n: getattr(self, f"stat_{i}") for i, n in enumerate(self._stats)}

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Tensor]:
        if not self._names:
            return {}
        total = self.num_chains * self.num_draws
        idx = pyro.sample("_draw_index", DrawIndex(total), infer={"is_auxiliary": True})
        out = {}
        for name, v in self.samples.items():
            flat = v.reshape(total, *v.shape[2:])
            out[name] = pyro.sample(name, dist.Delta(flat[idx], event_dim=v.dim() - 2))
        return out

    def get_extra_state(self) -> dict:
        return {"names": list(self._names), "stats": list(self._stats)}

    def set_extra_state(self, state: Any) -> None:
        if not isinstance(state, dict) or "names" not in state:
            raise ValueError("state_dict: not the state of a PosteriorDrawsGuide")

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> _IncompatibleKeys:
        """Restore the draws (any sites and shapes: the buffers are created from ``state_dict``)."""
        extra = state_dict.get("_extra_state")
        if not isinstance(extra, dict) or "names" not in extra:
            raise ValueError("state_dict: not the state of a PosteriorDrawsGuide (no '_extra_state')")
        samples = {n: state_dict[f"draws_{i}"] for i, n in enumerate(extra["names"])}
        stats = {n: state_dict[f"stat_{i}"] for i, n in enumerate(extra.get("stats", []))}
        self._store(samples, stats)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


class NUTSResult(FitResult):
    """A NUTS fit (:func:`zoo.infer.mcmc.fit_nuts`, ``zoo fit MODEL --inference nuts``): a
    :class:`~zoo.infer.result.FitResult` whose guide is a :class:`PosteriorDrawsGuide`, so ``predict``,
    ``log_likelihood``, ``save`` and the run folder work as for a variational fit.

    * :attr:`samples`: the draws ``{site: (chain, draw, *shape)}``; ``guide.stats``: the per-draw sampler
      statistics ``{name: (chain, draw)}`` (``lp``, ``diverging``, ``energy``, ``acceptance_rate``,
      ``step_size``, ``tree_depth``, ``n_steps``, ``energy_error``);
    * :attr:`diagnostics`: divergences, R-hat and bulk/tail ESS per site; :attr:`chain_stats`: per chain;
    * :meth:`to_inference_data`: the ArviZ export with ``(chain, draw)`` dims and ``sample_stats``, so
      ``az.summary`` (R-hat, ESS), ``az.bfmi``, ``az.plot_energy`` and ``az.loo`` apply; it is also what
      ``posterior.nc`` of ``zoo fit --inference nuts`` holds.  (The variational exporter's i.i.d. draws of one
      chain are not the right schema for MCMC draws.)

    A saved fit comes back with ``zoo.load(path)`` (:func:`zoo.infer.checkpoint.load_nuts`).

    Usage::

        result = zoo.load("run/checkpoint.pt")       # after zoo fit mfvi-bnn --inference nuts --out run
        result.diagnostics["rhat_max"], result.samples["sigma2"].shape   # (chains, draws)
        pred = result.predict(x_test, num_samples=result.num_draws)      # every draw once
        idata = result.to_inference_data(x_test, y_test, train=(x_train, y_train))
        az.summary(idata, var_names=["sigma2"]), az.bfmi(idata)
    """

    @property
    def samples(self) -> dict[str, Tensor]:
        """Raw draws ``{site: (chain, draw, *shape)}``."""
        return self.guide.samples

    @property
    def diagnostics(self) -> dict[str, Any]:
        """Divergences, R-hat, bulk/tail ESS (:func:`zoo.infer.mcmc_export.convergence_summary`)."""
        return self.loop_state.get("nuts", {}).get("diagnostics", {})

    @property
    def chain_stats(self) -> list[dict]:
        """Per chain: acceptance rate, adapted step size, divergences, seconds, seed."""
        return self.loop_state.get("nuts", {}).get("chains", [])

    @property
    def num_draws(self) -> int:
        """All kept draws (chains x draws per chain)."""
        return self.guide.num_chains * self.guide.num_draws

    def to_inference_data(
        self,
        x: Tensor | None = None,
        y: Tensor | None = None,
        num_samples: int | None = None,
        *,
        train: tuple[Tensor, Tensor] | None = None,
        include_weights: bool | None = None,
        max_weight_params: int = 50_000,
        max_input_values: int = 100_000,
        seed: int | None = None,
        max_marginal_values: int = 250_000,
    ) -> az.InferenceData:
        """ArviZ export with ``(chain, draw)`` dims and the sampler's ``sample_stats``
        (:func:`zoo.infer.mcmc_export.to_inference_data`, which documents the arguments)."""
        from zoo.infer.mcmc_export import to_inference_data

        return to_inference_data(
            self,
            x,
            y,
            num_samples,
            train=train,
            include_weights=include_weights,
            max_weight_params=max_weight_params,
            max_input_values=max_input_values,
            seed=seed,
            max_marginal_values=max_marginal_values,
        )


def restore_sampled_form(result: FitResult) -> None:
    """Put the prior of ``result.model`` back in the form its draws were sampled in (``spec["nuts"]``:
    hierarchical or marginal, centered or non-centered; :class:`~zoo.infer.mcmc.NUTSConfig`), so that the
    replayed draws name the sites that form has.  Used when a NUTS checkpoint is loaded
    (:func:`zoo.infer.checkpoint.load_nuts`)."""
    forms = (result.spec or {}).get("nuts") or {}
    prior = getattr(result.model, "prior", None)
    for attr in ("hierarchical", "centered"):
        form = forms.get(attr)
        if form is not None and prior is not None and isinstance(getattr(prior, attr, None), bool):
            setattr(prior, attr, bool(form))
