"""Storage of the bow-tie CAVI factors (Sheinkman & Wade 2025, arXiv 2411.11132, §3.1, Eqs. 13–19).

Every variational parameter of :class:`guides.bowtie.cavi.BowtieCAVIGuide` is a registered float64
buffer (so ``.to(device)`` moves them and ``state_dict()`` saves them), per layer ``k``: ``m{k}``,
``B{k}`` (weight rows, Eq. 16), ``dtau{k}``, ``dpsi{k}`` (``delta_hat`` of the GIG scales, Eqs. 13–14), per
hidden layer ``alpha{k}``, ``beta{k}`` (Eq. 15) and the training locals ``rho{k}``, ``A{k}``, ``S{k}``,
``t{k}``, ``M{k}`` (Eqs. 17–19), and ``alpha_out``, ``beta_out`` of the output noise.
:class:`BowtieGuideState` registers them, exposes them to the factor updates as
:class:`~guides.bowtie.state.Globals` / :class:`~guides.bowtie.state.Locals` views and stores the updates'
results.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

from guides.bowtie.linalg import F64
from guides.bowtie.pruning import masked_row
from guides.bowtie.state import Globals, Locals
from zoo.core.guide import ClosedFormGuide
from zoo.families.bowtie.model import BowtieModel

__all__ = ["BowtieGuideState"]


def _register_buffers(guide: torch.nn.Module, widths: tuple[int, ...], init_cov: float) -> None:
    """The variational parameters (module docstring); the per-datapoint ones start with 0 rows."""
    nh = len(widths) - 2
    for k in range(nh + 1):
        d, dp = widths[k + 1], widths[k]
        guide.register_buffer(f"m{k}", torch.zeros(d, dp + 1, dtype=F64))
        guide.register_buffer(f"B{k}", init_cov * torch.eye(dp + 1, dtype=F64).expand(d, -1, -1).clone())
        guide.register_buffer(f"dtau{k}", torch.ones((), dtype=F64))
        guide.register_buffer(f"dpsi{k}", torch.ones(d, dp, dtype=F64))
    for k in range(nh):
        d = widths[k + 1]
        guide.register_buffer(f"alpha{k}", torch.ones(d, dtype=F64))
        guide.register_buffer(f"beta{k}", torch.ones(d, dtype=F64))
        for name in ("rho", "A", "t"):
            guide.register_buffer(f"{name}{k}", torch.zeros(0, d, dtype=F64))
        guide.register_buffer(f"S{k}", torch.zeros(0, d, d, dtype=F64))
        guide.register_buffer(f"M{k}", torch.zeros(0, d, widths[k], dtype=F64))
    guide.register_buffer("alpha_out", torch.ones((), dtype=F64))
    guide.register_buffer("beta_out", torch.ones((), dtype=F64))
    guide.register_buffer("initialized", torch.tensor(False))
    guide.register_buffer("svi_step", torch.tensor(0))


class BowtieGuideState(ClosedFormGuide):
    """The buffers of the bow-tie CAVI guide and their views (module docstring); the updates live in
    :class:`guides.bowtie.cavi.BowtieCAVIGuide`."""

    def __init__(self, model: BowtieModel, init_cov: float) -> None:
        super().__init__()
        self.widths = tuple(model.widths)
        self.num_hidden = model.num_hidden
        _register_buffers(self, self.widths, init_cov)
        self._svi_elbo: float | None = None
        self._train_x: Tensor | None = None
        object.__setattr__(self, "_model", model)  # a plain reference, not a submodule (no duplicated state)

    # ------------------------------------------------------------------ buffers
    def _b(self, name: str, k: int) -> Tensor:
        return self._buffers[f"{name}{k}"]  # direct: read several hundred times per sweep

    def _set(self, name: str, value: Tensor) -> None:
        self._buffers[name] = value.detach().to(F64)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The per-datapoint buffers are sized by the training set: resize them before loading (checkpoints).
        for k in range(self.num_hidden):
            for name in Locals.FIELDS:
                key = f"{prefix}{name}{k}"
                if key in state_dict:
                    self._buffers[f"{name}{k}"] = torch.empty_like(state_dict[key], dtype=F64)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def q(self) -> Globals:
        """A view of the current global factors (read at call time: rebuild after every update)."""
        r, h = range(self.num_hidden + 1), range(self.num_hidden)
        return Globals(
            *([self._b(n, k) for k in r] for n in ("m", "B", "dtau", "dpsi")),
            [self._b("alpha", k) for k in h] + [self._buffers["alpha_out"]],
            [self._b("beta", k) for k in h] + [self._buffers["beta_out"]],
        )

    @property
    def train_locals(self) -> Locals:
        return Locals(*([self._b(n, k) for k in range(self.num_hidden)] for n in Locals.FIELDS))

    def _store_locals(self, loc: Locals) -> None:
        for k in range(self.num_hidden):
            for name in Locals.FIELDS:
                self._set(f"{name}{k}", getattr(loc, name)[k])

    def _store_layers(self, name: str, values: list[Tensor]) -> None:
        for k, v in enumerate(values):
            self._set(f"{name}{k}", v)

    def _store_row(self, k: int, cov: Tensor, mean: Tensor) -> None:
        self._set(f"B{k}", cov)
        self._set(f"m{k}", mean)

    def _store_noise(self, alphas: list[Tensor], betas: list[Tensor]) -> None:
        self._store_layers("alpha", alphas[:-1])
        self._store_layers("beta", betas[:-1])
        self._set("alpha_out", alphas[-1])
        self._set("beta_out", betas[-1])

    # ------------------------------------------------------------------ training locals
    def _holds_rows(self, x: Tensor) -> bool:
        """Whether the guide is initialized with locals for ``x``'s rows (a network without hidden layers
        has no locals: initialized is enough)."""
        if not bool(self.initialized):
            return False
        return self.num_hidden == 0 or self._b("rho", 0).shape[0] == x.shape[0]

    def _locals_for(self, x: Tensor) -> Locals | None:
        """The fitted locals when ``x`` are the training inputs, else ``None``."""
        if self.num_hidden == 0:
            return self.train_locals  # no locals: the same (empty) ones serve every input
        tx = self._train_x
        if tx is not None:
            same = tx.shape == x.shape and torch.equal(tx, x.to(F64))
        else:  # restored from a checkpoint: the training inputs are not stored, trust the row count
            same = self._holds_rows(x)
        return self.train_locals if same else None

    # ------------------------------------------------------------------ data parallelism
    def shard_rows(self, model: BowtieModel, x: Tensor, y: Tensor, rows: slice) -> None:
        """Keep the training locals of ``rows`` only (one rank of a data-parallel full-batch fit,
        :mod:`zoo.infer.distributed`), initializing on all ``N`` rows first if the guide holds no locals of
        them — the same random initialization as a single-process fit."""
        if not self._holds_rows(x):
            self.initialize(model, x, y)
        for k in range(self.num_hidden):
            for name in Locals.FIELDS:
                self._set(f"{name}{k}", self._b(name, k)[rows])
        self._train_x = x[rows].to(F64)

    def gather_rows(self, n: int) -> None:
        """Collect every rank's training locals back into all ``n`` rows (inverse of :meth:`shard_rows`)."""
        from zoo.infer.distributed import gather_rows

        for k in range(self.num_hidden):
            for name in Locals.FIELDS:
                self._set(f"{name}{k}", gather_rows(self._b(name, k), n))
        self._train_x = None

    @contextlib.contextmanager
    def pruned(self, masks: dict[str, Tensor]) -> Iterator[BowtieGuideState]:
        """Within the block, ``q(b, W)`` of every row is restricted to the surviving weights (§3.4,
        :func:`guides.bowtie.pruning.masked_row`).  ``masks``: ``{"fc{k}.weight": bool (D, D_prev)}`` as in
        :meth:`sparsity_report`; biases are always kept."""
        saved = {}
        try:
            for k in range(self.num_hidden + 1):
                key = f"fc{k}.weight"
                if key in masks:
                    m, b = self._b("m", k), self._b("B", k)
                    new_m, new_b = masked_row(m, b, masks[key], key)
                    saved[k] = (b, m)
                    self._store_row(k, new_b, new_m)
            yield self
        finally:
            for k, (b, m) in saved.items():
                self._store_row(k, b, m)

    @property
    def _model_ref(self) -> BowtieModel:
        model = getattr(self, "_model", None)
        if model is None:
            raise RuntimeError("BowtieCAVIGuide lost its model reference")
        return model
