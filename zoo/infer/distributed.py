"""Data-parallel training with ``torch.distributed``: sharded minibatches, all-reduced gradients and
all-reduced sufficient statistics of closed-form (CAVI) steps.

A fit with ``nproc = k > 1`` (:class:`~zoo.infer.config.FitConfig`, ``zoo fit --nproc k``) runs on ``k``
ranks (gloo on CPU, NCCL on CUDA; :mod:`zoo.infer.launch` starts them, or ``torchrun`` does).  Every rank
holds the full data and the same loop state, so every rank draws the *same global* minibatch ``idx`` from
the seeded epoch permutation; rank ``r`` then keeps the contiguous chunk ``r`` of it (:func:`shard_bounds`),
so the shards are disjoint and together are exactly the single-process batch.  Pyro never draws indices
itself: the chunk is passed as the model's ``plate("data", N, subsample=chunk)``, which scales the
chunk's log-likelihood by ``N / |chunk|``.

**Gradient steps** (:class:`DistributedSVI`).  Rank ``r``'s loss is ``L_r = -(N/|B_r|) sum_{B_r} ll +
KL`` (its own unbiased ELBO estimate).  With weights ``w_r = |B_r| / |B|`` (``sum_r w_r = 1``)
``sum_r w_r L_r = -(N/|B|) sum_B ll + KL``, the single-process loss on the global batch ``B``; so
``sum_r w_r grad L_r`` is its gradient.  One flat all-reduce per step carries the weighted gradients and
the weighted loss, then every rank applies the same optimizer update (a stop flag is all-reduced too only
when rank 0 runs callbacks).  Consequences:

* a deterministic guide (``delta``/MAP) gives the single-process run to float tolerance (only the
  summation order of the reduced gradient differs);
* a stochastic guide whose latents are all global (``normal``, ``lowrank``, ...) draws its
  reparameterized noise from the same seeded RNG stream on every rank: each rank uses the draw the single
  process uses, so the run is again equal to float tolerance;
* latents *inside* the data plate (local latents, local-reparameterization noise) are drawn per shard, so
  the ranks' draws differ from the single process's: the reduced gradient is then equal in expectation
  (both are unbiased for the same full-data ELBO gradient), not draw by draw.

**Closed-form steps** all-reduce their sufficient statistics through :func:`data_sum`: a guide that
supports data parallelism (``data_parallel = True``: the bow-tie CAVI guide, the conjugate linear-regression
guide) calls
``data_sum`` on every sum over data points (Gram matrices, residual sums of squares, local ELBO terms) and
``data_count`` for ``N``; outside a process group both are the identity.  A full-batch CAVI sweep then
runs on the rank's rows only (``shard_rows``/``gather_rows`` of the guide hold and collect its
per-datapoint factors) and equals the single-process sweep up to the rounding of the sums.

**Cost per step** (``P`` parameters, ``k`` ranks): one all-reduce of ``P + 1`` floats (gradient steps) or
the all-reduces of the sufficient statistics (CAVI: ``sum_l D_l (D_{l-1}+1)^2`` for the weight-row
precisions, plus ``O(sum_l D_l D_{l-1})``, in ``3 (L+1) + 2`` calls per sweep); a ring all-reduce moves
about ``2 (k-1)/k`` times that many bytes per rank.

References: Hoffman, Blei, Wang & Paisley (2013), "Stochastic variational inference", JMLR 14 (the
minibatch rescaling ``N/|B|``); Li et al. (2020), "PyTorch Distributed: experiences on accelerating data
parallel training", arXiv 2006.15704, §3 (all-reduce of gradients).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
from collections.abc import Iterator, Sequence

import pyro
import torch
import torch.distributed as dist
from pyro import poutine
from pyro.infer import SVI
from torch import Tensor

from zoo.infer.config import FitConfig

__all__ = [
    "DistState",
    "DistributedSVI",
    "active",
    "backend_for",
    "data_count",
    "data_sum",
    "default_nproc",
    "resolve_nproc",
    "gather_rows",
    "process_group",
    "shard_bounds",
    "check_data_parallel",
]

log = logging.getLogger(__name__)

_STATE: DistState | None = None
_DEFAULT_NPROC = 1


@dataclasses.dataclass(frozen=True)
class DistState:
    """The process group this process trains in: its ``rank`` among ``world`` ranks."""

    rank: int
    world: int
    backend: str


def active() -> DistState | None:
    """The current data-parallel group, or ``None`` (a single-process fit)."""
    return _STATE


@contextlib.contextmanager
def default_nproc(nproc: int) -> Iterator[None]:
    """Within the block, fits whose config leaves ``nproc`` at 1 run on ``nproc`` processes (how ``zoo fit
    --nproc`` reaches the :func:`~zoo.infer.loop.fit` call inside ``fit_on_dataset``)."""
    global _DEFAULT_NPROC
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be a positive integer, got {nproc!r}")
    old, _DEFAULT_NPROC = _DEFAULT_NPROC, nproc
    try:
        yield
    finally:
        _DEFAULT_NPROC = old


def resolve_nproc(cfg: FitConfig) -> FitConfig:
    """``cfg`` (a :class:`~zoo.infer.config.FitConfig`) with the :func:`default_nproc` of the caller when its
    own ``nproc`` is 1."""
    if cfg.nproc == 1 and _DEFAULT_NPROC > 1 and _STATE is None:
        return cfg.replace(nproc=_DEFAULT_NPROC)
    return cfg


def backend_for(device: str | torch.device | None) -> str:
    """``"nccl"`` for CUDA devices, ``"gloo"`` otherwise."""
    return "nccl" if device is not None and torch.device(device).type == "cuda" else "gloo"


def _timeout() -> datetime.timedelta:
    return datetime.timedelta(seconds=float(os.environ.get("ZOO_DIST_TIMEOUT", "600")))


@contextlib.contextmanager
def process_group(rank: int, world: int, init_method: str, backend: str = "gloo") -> Iterator[DistState]:
    """Join (and on exit leave) a ``torch.distributed`` group; :func:`active` reports it meanwhile.  A group
    already initialized by the launcher (``torchrun``) is used as is and left open."""
    global _STATE
    own = not dist.is_initialized()
    if own:
        dist.init_process_group(
            backend, init_method=init_method, rank=rank, world_size=world, timeout=_timeout()
        )
    _STATE = DistState(dist.get_rank(), dist.get_world_size(), dist.get_backend())
    try:
        yield _STATE
    finally:
        _STATE = None
        if own:
            dist.destroy_process_group()


def all_sum(t: Tensor) -> Tensor:
    """Sum of ``t`` over the ranks (a new tensor); ``t`` itself outside a group."""
    if _STATE is None:
        return t
    out = t.detach().clone().contiguous()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def data_sum(value: Tensor) -> Tensor:
    """A sum over data points completed over all ranks' shards (identity in a single process): the one
    call closed-form steps need to all-reduce their sufficient statistics."""
    return all_sum(value)


def data_count(n: int) -> int:
    """The number of data points over all ranks (``n`` in a single process)."""
    if _STATE is None:
        return int(n)
    return int(all_sum(torch.tensor(float(n), dtype=torch.float64)).item())


def gather_rows(t: Tensor, n: int) -> Tensor:
    """All ``n`` rows of a per-datapoint tensor whose rows are split as :func:`shard_bounds` splits them
    (every rank gets the whole; ``t`` itself outside a group)."""
    if _STATE is None:
        return t
    sizes = [b - a for a, b in (shard_bounds(n, r, _STATE.world) for r in range(_STATE.world))]
    if t.shape[0] != sizes[_STATE.rank]:
        raise ValueError(f"gather_rows: rank {_STATE.rank} holds {t.shape[0]} rows, not {sizes[_STATE.rank]}")
    padded = t.new_zeros((max(sizes), *t.shape[1:]))
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([p[:s] for p, s in zip(parts, sizes)])


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of rank ``rank``: ``world`` contiguous chunks of sizes differing by at most one
    (the first ``n % world`` get the extra row)."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def check_data_parallel(guide: object, world: int) -> None:
    """A ``ValueError`` before training when ``guide`` has closed-form steps that do not all-reduce their
    sufficient statistics (no ``data_parallel = True``), or when a shard would be empty."""
    from zoo.core.guide import ClosedFormGuide

    if isinstance(guide, ClosedFormGuide) and not getattr(guide, "data_parallel", False):
        raise ValueError(
            f"nproc: the guide {type(guide).__name__} has closed-form steps that do not all-reduce their "
            "sufficient statistics (no data_parallel = True); fit it with nproc=1"
        )
    if world < 1:
        raise ValueError(f"nproc must be a positive integer, got {world}")


class DistributedSVI(SVI):
    """``SVI`` whose step all-reduces ``w * gradient`` and ``w * loss`` over the ranks before the optimizer
    update (module docstring); ``weight`` is this rank's share ``|B_r| / |B|`` of the global batch."""

    def step(self, *args, weight: float = 1.0, **kwargs) -> float:
        with poutine.trace(param_only=True) as capture:
            loss = self.loss_and_grads(self.model, self.guide, *args, **kwargs)
        params = _ordered_params(capture.trace.nodes.values())
        total = _reduce_grads(params, weight, float(loss))
        self.optim(set(params))
        pyro.infer.util.zero_grads(set(params))
        return total

    def evaluate_loss(self, *args, weight: float = 1.0, **kwargs) -> float:
        loss = super().evaluate_loss(*args, **kwargs)
        return float(all_sum(torch.tensor(float(loss) * weight, dtype=torch.float64)))


def _ordered_params(sites: Sequence[dict] | object) -> list[Tensor]:
    """Unconstrained parameters of a param-only trace, in trace order (identical on every rank)."""
    out, seen = [], set()
    for site in sites:
        p = site["value"].unconstrained()
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def _reduce_grads(params: list[Tensor], weight: float, loss: float) -> float:
    """One flat all-reduce of ``weight * grad`` (a missing gradient counts as zero) and ``weight * loss`` (the
    last entry), in the gradients' common dtype; returns the reduced loss."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    dtype = torch.float64 if not grads else grads[0].dtype
    for g in grads[1:]:
        dtype = torch.promote_types(dtype, g.dtype)
    device = grads[0].device if grads else "cpu"
    last = torch.tensor([loss], dtype=dtype, device=device)
    flat = all_sum(torch.cat([g.reshape(-1).to(dtype) for g in grads] + [last]) * weight)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.dtype)
        offset += n
    return float(flat[-1])
