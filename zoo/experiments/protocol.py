"""The records of a paper protocol: :class:`RunSpec` (one run: variant, model, dataset, split, run settings)
and :class:`Protocol` (a named list of runs with the paper's numbers).  :mod:`zoo.experiments.reproduce`
registers and runs them; this leaf module lets the families and other inference methods build run lists
without importing the runner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["Protocol", "RunSpec"]


@dataclass(frozen=True)
class RunSpec:
    variant: str
    model: str
    dataset: str
    split: int
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Protocol:
    name: str
    description: str
    runs: Callable[[Sequence[int] | None], list[RunSpec]]
    metrics: Sequence[str]
    paper: dict = field(default_factory=dict)  # {(variant, dataset): {metric: value}} reference numbers
    paper_source: str = ""
    #: variants that run only when named (``--variants``/``variants=``): the NUTS rows cost hours per fit
    opt_in: tuple[str, ...] = ()
