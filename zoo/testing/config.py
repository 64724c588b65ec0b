"""The sizes and tolerances of the conformance kit's checks (:class:`KitConfig`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from zoo.core.config import Config, resolve
from zoo.core.validation import check_device_name, check_positive, check_positive_int, resolve_device

__all__ = ["KitConfig", "kit_config", "UnknownSettingError"]


class UnknownSettingError(TypeError, ValueError):
    """An unknown keyword setting of a kit check: a ``TypeError`` (an unexpected keyword argument, as Python
    reports one) and, as the kit reported it before, a ``ValueError``."""


@dataclasses.dataclass(frozen=True)
class KitConfig(Config):
    """Settings of :func:`~zoo.testing.check_prior`, :func:`~zoo.testing.check_guide` and
    :func:`~zoo.testing.check_entry` (the defaults keep one check to seconds on a CPU).

    :param n_data: rows of the synthetic data set.
    :param particles: ``K`` of the vectorized-particle checks (``pyro.plate("particles", K, dim=-2)``).
    :param steps: optimizer steps of the short fit; ``lr`` its Adam learning rate.
    :param draws: posterior draws of the predictions and of the ArviZ export.
    :param mc_particles: Monte Carlo draws of the closed-form ELBO comparison, vectorized ``mc_chunk`` at a
        time.
    :param tolerance_se: the closed-form ELBO must lie within this many standard errors of the Monte Carlo
        mean (the standard error is the draws' standard deviation over ``sqrt(mc_particles)``).
    :param gibbs_chains: independent chains of the ``conditionals`` contract (Geweke's successive-conditional
        test of a prior's exact scale conditionals), run ``gibbs_sweeps`` sweeps each; its two-sample KS
        tests reject at ``gibbs_level`` (Bonferroni-corrected over the compared statistics).
    :param seed: seeds every random stream of a check (the caller's streams are restored afterwards).
    :param device: where to run (``None``: ``ZOO_DEVICE`` or the CPU).
    """

    n_data: int = 24
    particles: int = 3
    steps: int = 5
    lr: float = 1e-2
    draws: int = 4
    mc_particles: int = 2000
    mc_chunk: int = 500
    tolerance_se: float = 5.0
    gibbs_chains: int = 2000
    gibbs_sweeps: int = 8
    gibbs_level: float = 1e-3
    seed: int = 0
    device: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.device, torch.device):
            object.__setattr__(self, "device", str(self.device))
        super().__post_init__()

    def validate(self) -> None:
        for name in ("n_data", "steps", "draws", "mc_particles", "mc_chunk", "gibbs_chains", "gibbs_sweeps"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("particles", self.particles)
        if self.particles < 2:
            raise ValueError(
                f"particles must be >= 2 (distinct particles are compared), got {self.particles}"
            )
        if self.n_data < 4:
            raise ValueError(f"n_data must be >= 4, got {self.n_data}")
        check_positive("lr", self.lr)
        check_positive("tolerance_se", self.tolerance_se)
        if not 0 < self.gibbs_level < 1:
            raise ValueError(f"gibbs_level must be in (0, 1), got {self.gibbs_level!r}")
        check_positive_int("seed", self.seed, allow_zero=True)
        check_device_name("device", self.device)

    @property
    def torch_device(self) -> torch.device:
        return resolve_device(self.device)


def kit_config(config: KitConfig | Mapping[str, Any] | None, settings: Mapping[str, Any]) -> KitConfig:
    """``config`` (a :class:`KitConfig` or a mapping) updated by keyword ``settings``; ``device=None`` in
    ``settings`` keeps the config's device.  An unknown keyword is an :class:`UnknownSettingError` naming it
    (an unknown key of a ``config`` mapping stays the config's ``ValueError``)."""
    unknown = sorted(set(settings) - set(KitConfig.field_names()))
    if unknown:
        raise UnknownSettingError(
            f"unknown option(s) {unknown}: not keyword settings of the kit's checks (KitConfig); "
            f"valid: {sorted(KitConfig.field_names())}"
        )
    settings = {k: v for k, v in settings.items() if not (k == "device" and v is None)}
    cfg = resolve(KitConfig, config, settings)
    cfg.torch_device  # noqa: B018 - a CUDA device without CUDA is a ValueError before any check runs
    return cfg
