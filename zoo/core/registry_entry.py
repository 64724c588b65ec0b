"""The registry's entry type, its name rule and the fit defaults entries share: a :class:`ModelEntry` is what
:func:`zoo.experiments.registry.register` stores (the registry's API, its plugins and ``build`` live in
:mod:`zoo.experiments.registry`, which re-exports everything here; its table in
:mod:`zoo.core.registry_store`).

Model and guide names follow :data:`NAME_RULE`, so that they survive the command line's syntax: ``zoo bench
MODEL:GUIDE``, ``--guide NAME`` and bench labels ``model:guide[key=value,...]``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from zoo.core.config import Config
from zoo.core.model import BayesianModel

__all__ = [
    "ModelEntry",
    "PluginSource",
    "NAME_RULE",
    "check_name",
    "same_ignoring_case",
    "MINIBATCH_SVI_DEFAULTS",
    "FIXED_5000_STEPS",
]

#: What a model or guide name may be: a letter or a digit, then letters, digits, ``.``, ``_``, ``+`` and
#: ``-``.  A name so never holds the ``:`` of ``MODEL:GUIDE``, whitespace, or the ``[``, ``]``, ``,``, ``=``
#: and ``|`` of bench labels and keys, and never starts like a command-line option.
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def check_name(argument: str, name: object) -> str:
    """``name`` if it follows :data:`NAME_RULE`; else a ``ValueError`` (``TypeError`` for a non-string)
    whose message starts with ``argument``."""
    if not isinstance(name, str):
        raise TypeError(f"{argument}: a name must be a string, got {type(name).__name__}")
    if not NAME_RULE.fullmatch(name):
        raise ValueError(
            f"{argument}: {name!r} is not a valid name: use letters, digits, '.', '_', '+' and '-', starting "
            "with a letter or a digit (no ':', which separates MODEL:GUIDE, and no whitespace)"
        )
    return name


def same_ignoring_case(name: str, names: Iterable[str]) -> str | None:
    """The first of ``names`` other than ``name`` that equals it ignoring case, else ``None``."""
    return next((n for n in names if n != name and n.casefold() == name.casefold()), None)


#: Fit defaults of the minibatch SVI entries (``mfvi-bnn``, ``cm-``/``cv-``/``cmv-bnn``, ``ngig-bnn``): Adam
#: at lr 1e-2 on minibatches of 512, 5000 steps but at least 700 epochs (``min_epochs``, see
#: :func:`zoo.experiments.runs.default_steps`) -- the step count of the horseshoe's 175 epochs at batch 128,
#: ``1.37 n`` steps for ``n`` training rows.  5000 steps left naval under-fitted: with the longer default the
#: collapsed priors' test NLL there improves by over a nat and their RMSE falls about threefold (Tomczak et
#: al. 2021's entries, splits 0-9; benchmarks/RESULTS.md).  Only sets larger than about 3600 training rows
#: train longer (kin8nm, power, naval); on a set smaller than the batch a step is an epoch.
MINIBATCH_SVI_DEFAULTS: Mapping[str, object] = {
    "steps": 5000,
    "min_epochs": 700,
    "lr": 1e-2,
    "batch_size": 512,
    "optimizer": "adam",
}
#: 5000 steps whatever the size of the data: what the UCI protocols of Sheinkman & Wade (2025) and Tomczak
#: et al. (2021) ran, pinned by ``mfvi-uci`` and ``collapsed-uci`` so their committed rows stay reproducible.
FIXED_5000_STEPS: Mapping[str, object] = {"steps": 5000}


@dataclass(frozen=True)
class PluginSource:
    """The plugin being loaded: ``identity`` (its module name) and ``origin`` (what a spec records and a user
    imports again: the file path, the module name, or ``entry-point:<distribution>``)."""

    identity: str
    origin: str


@dataclass(frozen=True)
class ModelEntry:
    """A named model of the registry (:func:`zoo.experiments.registry.register`); entries are immutable.

    Attributes:
        name: the registry name (:data:`NAME_RULE`; unique ignoring case).
        summary: one line for ``zoo list``.
        build: ``build(in_features, out_features, task, hidden, **options)`` -> a
            :class:`~zoo.core.model.BayesianModel`.
        guides: guide name -> factory, ``factory(model, **guide_options)`` -> a guide; the **first key is
            the default guide**.  :func:`zoo.experiments.registry.register_guide` adds one to a registered
            entry.
        fit_defaults: default fit settings (steps, learning rate, batch size, optimizer, ``starts``).
        references: what ``zoo list`` prints (authors, year, an identifier).
        tasks: the tasks the entry supports.
        default_hidden: the hidden widths when none are given.
        fit_fn: optional fit function with :func:`zoo.infer.loop.fit`'s signature (multi-stage schedules,
            per-group learning rates).
        extra_metrics: optional metrics computed from a finished :class:`zoo.experiments.runs.RunOutput`.
        options: the builder's options as a :class:`~zoo.core.config.Config` dataclass: ``build`` validates
            the ``**options`` against it (unknown keys and bad values are a ``ValueError`` before anything is
            built), then passes the raw keyword values on to the builder.
        plugin: set by the plugin loader (leave it ``None``): where the entry comes from, a file path, a
            module name or ``entry-point:<distribution>`` (``build`` records it in the spec).
        plugin_module: set by the plugin loader: the plugin's module name.
        guide_plugins: set by ``register_guide`` (leave it empty): guide name -> the :class:`PluginSource`
            of the plugin that added that guide to an entry it does not own.
    """

    name: str
    summary: str
    build: Callable[..., BayesianModel]
    guides: Mapping[str, Callable]
    fit_defaults: Mapping[str, object] = field(default_factory=dict)
    references: Sequence[str] = ()
    tasks: Sequence[str] = ("regression", "binary", "multiclass")
    default_hidden: Sequence[int] = (50,)
    fit_fn: Callable | None = None
    extra_metrics: Callable | None = None
    options: type[Config] | None = None
    plugin: str | None = None
    plugin_module: str | None = None
    guide_plugins: Mapping[str, PluginSource] = field(default_factory=dict)

    @property
    def default_guide(self) -> str:
        """The first of :attr:`guides`."""
        return next(iter(self.guides))

    @property
    def owner(self) -> str:
        """Who registered the entry, in words: a plugin (origin and module), the zoo or a module."""
        if self.plugin is not None:
            return f"plugin {self.plugin} (module {self.plugin_module})"
        module = getattr(self.build, "__module__", None) or "?"
        return f"the zoo ({module})" if module.startswith("zoo.") else f"module {module}"

    def with_guide(self, name: str, factory: Callable, source: PluginSource | None = None) -> ModelEntry:
        """A copy that also offers guide ``name`` (last in order), owned by the plugin ``source`` if given."""
        plugins = {**self.guide_plugins, **({} if source is None else {name: source})}
        return dataclasses.replace(self, guides={**self.guides, name: factory}, guide_plugins=plugins)

    def without_guide(self, name: str) -> ModelEntry:
        """A copy without guide ``name``."""
        guides = {g: f for g, f in self.guides.items() if g != name}
        plugins = {g: s for g, s in self.guide_plugins.items() if g != name}
        return dataclasses.replace(self, guides=guides, guide_plugins=plugins)
