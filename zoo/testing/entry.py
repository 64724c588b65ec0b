"""The registry-entry contracts (:func:`check_entry`): the entry itself, then its prior's and guide's."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from zoo.core.model import BayesianModel
from zoo.experiments.registry import ModelEntry, build, get_entry
from zoo.testing._util import contract, fail, guarded_store, isolated
from zoo.testing.config import KitConfig, kit_config
from zoo.testing.guide import Subject, guide_contracts
from zoo.testing.prior import model_particles, prior_contracts

__all__ = ["check_entry"]

_OUT = {"regression": 1, "binary": 1, "multiclass": 3}
_NO_GUIDE = "__zoo_testing_no_such_guide__"


def check_entry(
    name: str,
    *,
    guide: str | None = None,
    task: str | None = None,
    hidden: Sequence[int] | None = None,
    options: Mapping[str, Any] | None = None,
    guide_options: Mapping[str, Any] | None = None,
    in_features: int = 3,
    config: KitConfig | Mapping | None = None,
    **settings: Any,
) -> None:
    """Check registry entry ``name`` (:mod:`zoo.experiments.registry`, plugins included) with guide
    ``guide`` (default: the entry's default guide) on a tiny network: the entry contract, every prior
    contract of the model it builds, and every guide contract.

    :param task: one of the entry's tasks (default: its first).
    :param hidden: hidden widths (default: ``(3,)``, or ``()`` for an entry whose default has no hidden
        layer).
    :param options: builder options of the entry; ``guide_options`` go to the guide factory.
    :param config: :class:`~zoo.testing.config.KitConfig` (or mapping) updated by keyword ``settings``.

    Returns ``None`` when every contract holds; raises ``AssertionError("[contract-id] ...")`` naming the
    first broken one.  An unknown name, guide or task is a ``ValueError`` before any check runs.
    """
    cfg = kit_config(config, settings)
    entry = get_entry(name)
    guide = entry.default_guide if guide is None else guide
    if guide not in entry.guides:
        raise ValueError(f"guide: {name} offers guides {list(entry.guides)}, not {guide!r}")
    task = entry.tasks[0] if task is None else task
    if task not in entry.tasks:
        raise ValueError(f"task: {name} supports {list(entry.tasks)}, not {task!r}")
    hidden = tuple(hidden) if hidden is not None else ((3,) if tuple(entry.default_hidden) else ())
    make = functools.partial(
        build, name, in_features, _OUT[task], task, hidden=list(hidden), guide=guide,
        guide_options=dict(guide_options or {}), **dict(options or {}),
    )  # fmt: skip
    with guarded_store(f"building {name}"), isolated(cfg.seed, cfg.torch_device):
        model, spec = _entry_contract(entry, guide, task, make)
        model.to(cfg.torch_device)
        prior_contracts(model.prior, model.specs, cfg)
        model_particles(model, cfg)
    factory = functools.partial(entry.guides[guide], **dict(guide_options or {}))
    subject = Subject(lambda: make()[0], factory, spec, entry.fit_defaults.get("loss"), f"{name}/{guide}")
    guide_contracts(subject, cfg)


def _entry_contract(entry: ModelEntry, guide: str, task: str, make) -> tuple[BayesianModel, dict]:
    """``[entry]``: references, a summary, a build that records its spec, unknown guides refused."""
    if not entry.references or not all(isinstance(r, str) and r.strip() for r in entry.references):
        fail("entry", f"{entry.name} cites no references: list the paper(s) (authors, year, arXiv id)")
    if not isinstance(entry.summary, str) or not entry.summary.strip():
        fail("entry", f"{entry.name} has no summary (the line `zoo list` prints)")
    with contract("entry", f"build({entry.name!r}, guide={guide!r})"):
        model, _, spec = make()
    if not isinstance(model, BayesianModel):
        fail("entry", f"{entry.name}'s builder returned a {type(model).__name__}, not a BayesianModel")
    recorded = {k: spec.get(k) for k in ("model", "guide", "task")}
    if recorded != {"model": entry.name, "guide": guide, "task": task}:
        fail("entry", f"build({entry.name!r}) recorded the spec {recorded}")
    try:
        make.func(*make.args, **{**make.keywords, "guide": _NO_GUIDE})
    except ValueError as e:
        if "guide" not in str(e):
            fail("entry", f"an unknown guide is refused without naming the argument 'guide': {e}")
    else:
        fail("entry", f"build({entry.name!r}, guide={_NO_GUIDE!r}) did not raise ValueError")
    return model, spec
