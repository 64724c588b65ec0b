"""The composition matrix: every prior family of the zoo x every guide family, with a check mark where a CI
test fits the pair and the reason where the pair cannot exist (``zoo list --matrix``).

The matrix is derived, not written by hand:

* a pair is a check mark when a registry entry of the prior family offers a guide of the guide family
  (:data:`GUIDE_NAMES`: the registry name of each guide family), or when :data:`EXTRA_PAIRINGS` names the
  entry that holds it (bow-tie CAVI lives on the ``bowtie`` model, conjugate CAVI on ``blr-cavi``);
  ``tests/test_matrix.py`` fits every such :class:`Pairing` (tiny net, a few steps, finite ELBO, predictions
  of the right shape);
* every other pair is refused with its guide family's :attr:`GuideFamily.reason`, and the test builds each
  zoo guide class of that family (:attr:`GuideFamily.members`) on the prior family's representative model,
  which must raise :class:`guides.autoguides.IncompatiblePriorError` (a ``ValueError``) naming both.

Each member also declares the prior families it refuses (:attr:`Member.refuses`); the test checks that
these declarations, the registry and the refusals agree.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from pyro.infer import ELBO

from guides.autoguides import AUTOGUIDES, make_autoguide
from guides.baselines.conjugate import LinearRegressionCAVIGuide
from guides.bowtie.cavi import BowtieCAVIGuide
from guides.collapsed.bound import CollapsedBoundGuide, HierarchicalCollapsedGuide
from guides.flows.gaussian import GaussianFlowGuide
from guides.flows.lbbnn import LBBNNFlowGuide
from guides.flows.weightspace import WeightSpaceGuide
from guides.horseshoe.factorized import HorseshoeGuide
from guides.horseshoe.flow import HorseshoeFlowGuide
from guides.horseshoe.semi_structured import SemiStructuredHorseshoeGuide
from guides.horseshoe.structured import StructuredHorseshoeGuide
from guides.horseshoe.tied import TiedHorseshoeGuide
from guides.lbbnn.lcrt import LCRTLBBNNGuide
from guides.lbbnn.meanfield import MeanFieldLBBNNGuide
from guides.lbbnn.mvn import MVNLBBNNGuide
from zoo.core.model import BayesianModel
from zoo.experiments.registry import build, get_entry

__all__ = [
    "PriorFamily",
    "Member",
    "GuideFamily",
    "Pairing",
    "Cell",
    "Row",
    "PRIOR_FAMILIES",
    "GUIDE_FAMILIES",
    "GUIDE_NAMES",
    "EXTRA_PAIRINGS",
    "composition_matrix",
    "format_matrix",
]

WIDTH = 110


@dataclass(frozen=True)
class PriorFamily:
    """A prior family: ``entry`` is its representative registry entry (built with ``options``)."""

    key: str
    label: str
    prior: str
    entry: str
    options: Mapping[str, object] = field(default_factory=dict)

    def model(self, in_features: int = 2, hidden: tuple[int, ...] = (3,)) -> BayesianModel:
        """A tiny regression model of the representative entry."""
        return build(self.entry, in_features, 1, "regression", hidden=hidden, **self.options)[0]


@dataclass(frozen=True)
class Member:
    """One zoo guide class ``cls`` of a guide family: ``make(model)`` builds it; ``refuses`` lists the prior
    family keys it cannot serve (it must raise ``IncompatiblePriorError`` on their representative models)."""

    name: str
    cls: type
    make: Callable[[BayesianModel], object]
    refuses: tuple[str, ...]


@dataclass(frozen=True)
class GuideFamily:
    """A guide family (a column): abbreviation, label, its zoo guide classes and why a pair is refused."""

    key: str
    abbrev: str
    label: str
    members: tuple[Member, ...]
    reason: str


@dataclass(frozen=True)
class Pairing:
    """A CI-tested pair: registry ``entry`` with guide ``guide``, builder ``options`` and ``hidden``."""

    entry: str
    guide: str
    options: Mapping[str, object] = field(default_factory=dict)
    hidden: tuple[int, ...] = (3,)

    def build(self, in_features: int = 2) -> tuple[BayesianModel, Callable, dict]:
        """``(model, guide, spec)`` of a tiny regression net (:func:`zoo.experiments.registry.build`)."""
        return build(
            self.entry, in_features, 1, "regression", hidden=self.hidden, guide=self.guide, **self.options
        )

    def loss(self, model: BayesianModel, guide: Callable) -> ELBO | None:
        """The objective ``zoo fit`` trains this pair with: the entry's ``fit_defaults["loss"]`` factory,
        else the guide's ``default_loss()``, else ``None`` (``Trace_ELBO``)."""
        factory = get_entry(self.entry).fit_defaults.get("loss")
        loss = factory(model, guide) if callable(factory) else None
        if loss is None and callable(getattr(guide, "default_loss", None)):
            loss = guide.default_loss()
        return loss


@dataclass(frozen=True)
class Cell:
    """One pair: ``pairing`` (tested fit) or ``reason`` (why the pair cannot exist)."""

    prior: PriorFamily
    guide: GuideFamily
    pairing: Pairing | None
    reason: str | None

    @property
    def ok(self) -> bool:
        return self.pairing is not None


@dataclass(frozen=True)
class Row:
    """The cells of one prior family, in :data:`GUIDE_FAMILIES` order."""

    prior: PriorFamily
    cells: tuple[Cell, ...]


PRIOR_FAMILIES: tuple[PriorFamily, ...] = (
    PriorFamily("gaussian", "Gaussian", "GaussianPrior (GaussianBowtiePrior on bowtie)", "mfvi-bnn"),
    PriorFamily("ngig", "N-GIG", "NGIGPrior (on an MLP; on bowtie's bow-tie units)", "ngig-bnn"),
    PriorFamily("hs", "horseshoe", "HorseshoePrior, non-centered", "hs-bnn"),
    PriorFamily("reghs", "reg. horseshoe", "HorseshoePrior(regularized=True), non-centered", "reg-hs-bnn"),
    PriorFamily("ss", "spike-and-slab", "SpikeSlabPrior", "lbbnn"),
    PriorFamily("cm", "collapsed CM", "CollapsedPrior('cm')", "cm-bnn"),
    PriorFamily("cv", "collapsed CV", "CollapsedPrior('cv')", "cv-bnn"),
    PriorFamily("cmv", "collapsed CMV", "CollapsedPrior('cmv')", "cmv-bnn"),
)
_ALL = tuple(p.key for p in PRIOR_FAMILIES)


def _but(*served: str) -> tuple[str, ...]:
    return tuple(k for k in _ALL if k not in served)


def _auto(name: str) -> Member:
    return Member(name, AUTOGUIDES[name], lambda m: make_autoguide(name, m), ("ss",))


def _ws(family: str) -> Member:
    def make(model: BayesianModel) -> WeightSpaceGuide:
        return WeightSpaceGuide(model, family)

    return Member(f"WeightSpaceGuide({family!r})", WeightSpaceGuide, make, ("hs", "reghs", "ss"))


def _cls(cls: type, *served: str) -> Member:
    return Member(cls.__name__, cls, cls, _but(*served))


_HS = ("hs", "reghs")
_COLLAPSED = ("cm", "cv", "cmv")
_COLLAPSED_REASON = (
    "the collapsed bounds integrate out per-weight CM/CV/CMV hyper-latents in closed form (penalties Eqs. 29 "
    "and 74, optimal q* Eqs. 19, 36, 50 of Tomczak et al. 2021, App. B); other priors have no such hyperprior"
)
_LBBNN_REASON = (
    "q(γ) and q(θ | γ) are factors of the spike-and-slab's inclusion and slab sites; this prior has none"
)
_DISCRETE = "autoguides cannot represent the discrete inclusion indicators of the spike-and-slab prior"

GUIDE_FAMILIES: tuple[GuideFamily, ...] = (
    GuideFamily("normal", "AN", "autoguide normal (AutoNormal)", (_auto("normal"),), _DISCRETE),
    GuideFamily(
        "lowrank",
        "LR",
        "autoguide low-rank MVN (AutoLowRankMultivariateNormal)",
        (_auto("lowrank"),),
        _DISCRETE,
    ),
    GuideFamily("iaf", "IAF", "autoguide IAF (guides.autoguides.AutoIAFNormal)", (_auto("iaf"),), _DISCRETE),
    GuideFamily(
        "zflow",
        "ZF",
        "z-flow (GaussianFlowGuide, WeightSpaceGuide, HorseshoeFlowGuide, LBBNNFlowGuide)",
        (
            _cls(GaussianFlowGuide, "gaussian"),
            _ws("flow"),
            _cls(HorseshoeFlowGuide, *_HS),
            _cls(LBBNNFlowGuide, "ss"),
        ),
        "",
    ),
    GuideFamily(
        "factorized",
        "FAC",
        "factorized (HorseshoeGuide on horseshoes, WeightSpaceGuide elsewhere)",
        (_cls(HorseshoeGuide, *_HS), _ws("factorized")),
        "the weights are γ ⊙ θ with a discrete γ: the LBBNN mean-field guide is its factorized family",
    ),
    GuideFamily(
        "tied",
        "TIE",
        "tied (TiedHorseshoeGuide on horseshoes, WeightSpaceGuide elsewhere)",
        (_cls(TiedHorseshoeGuide, *_HS), _ws("tied")),
        "the weights are γ ⊙ θ with a discrete γ: the LBBNN mean-field guide is its factorized family",
    ),
    GuideFamily(
        "semi",
        "SEMI",
        "horseshoe semi-structured (SemiStructuredHorseshoeGuide)",
        (_cls(SemiStructuredHorseshoeGuide, *_HS),),
        "matrix-normal unit rows with the node/layer scales factored out: needs the horseshoe's "
        "node-wise scales",
    ),
    GuideFamily(
        "structured",
        "STR",
        "horseshoe structured (StructuredHorseshoeGuide)",
        (_cls(StructuredHorseshoeGuide, *_HS),),
        "matrix-normal unit rows with the node/layer scales factored out: needs the horseshoe's "
        "node-wise scales",
    ),
    GuideFamily(
        "lbbnn-mf",
        "LMF",
        "LBBNN mean-field (MeanFieldLBBNNGuide)",
        (_cls(MeanFieldLBBNNGuide, "ss"),),
        _LBBNN_REASON,
    ),
    GuideFamily(
        "lbbnn-mvn",
        "LMVN",
        "LBBNN MVN (MVNLBBNNGuide)",
        (_cls(MVNLBBNNGuide, "ss"),),
        _LBBNN_REASON,
    ),
    GuideFamily(
        "lcrt",
        "LCRT",
        "LBBNN LCRT (LCRTLBBNNGuide)",
        (_cls(LCRTLBBNNGuide, "ss"),),
        _LBBNN_REASON,
    ),
    GuideFamily(
        "bowtie",
        "BCAV",
        "bow-tie CAVI (BowtieCAVIGuide)",
        (Member("BowtieCAVIGuide", BowtieCAVIGuide, BowtieCAVIGuide, _but("gaussian", "ngig")),),
        "bow-tie CAVI needs the conjugate N-GIG (GIG scales) or Gaussian weight updates of the bow-tie "
        "model with its Pólya-Gamma augmentation; the horseshoe, spike-and-slab and collapsed priors lack "
        "them",
    ),
    GuideFamily(
        "collapsed",
        "CB",
        "collapsed bound (CollapsedBoundGuide)",
        (_cls(CollapsedBoundGuide, *_COLLAPSED),),
        _COLLAPSED_REASON,
    ),
    GuideFamily(
        "hierarchical",
        "CH",
        "collapsed hierarchical (HierarchicalCollapsedGuide)",
        (_cls(HierarchicalCollapsedGuide, *_COLLAPSED),),
        _COLLAPSED_REASON,
    ),
    GuideFamily(
        "conjugate",
        "CCAV",
        "conjugate CAVI of a linear model (LinearRegressionCAVIGuide)",
        (_cls(LinearRegressionCAVIGuide, "gaussian"),),
        "Normal-inverse-gamma CAVI exists for Gaussian weights of a linear model only (Bishop 2006, §10.1.3)",
    ),
)

#: the registry name of each guide family, looked up in the prior family's representative entry
GUIDE_NAMES: dict[str, str] = {
    "normal": "normal",
    "lowrank": "lowrank",
    "iaf": "iaf",
    "zflow": "flow",
    "factorized": "factorized",
    "tied": "tied",
    "semi": "semi-structured",
    "structured": "structured",
    "lbbnn-mf": "mean-field",
    "lbbnn-mvn": "mvn",
    "lcrt": "lcrt",
    "collapsed": "collapsed",
    "hierarchical": "hierarchical",
}

#: pairs whose guide lives on another entry than the prior family's representative one
EXTRA_PAIRINGS: dict[tuple[str, str], Pairing] = {
    ("gaussian", "bowtie"): Pairing("bowtie", "cavi", {"gaussian_prior": True}),
    ("ngig", "bowtie"): Pairing("bowtie", "cavi"),
    ("gaussian", "conjugate"): Pairing("blr-cavi", "cavi", hidden=()),
}


def _pairing(prior: PriorFamily, guide: GuideFamily) -> Pairing | None:
    """The tested pair of ``prior`` and ``guide``: an :data:`EXTRA_PAIRINGS` entry, or the representative
    entry's guide called :data:`GUIDE_NAMES` ``[guide.key]`` if it builds a member class of the family
    (``mvn`` is an LBBNN guide on ``lbbnn`` but an autoguide on ``mfvi-bnn``)."""
    extra = EXTRA_PAIRINGS.get((prior.key, guide.key))
    if extra is not None:
        return extra
    name = GUIDE_NAMES.get(guide.key)
    if name is None or name not in get_entry(prior.entry).guides:
        return None
    pairing = Pairing(prior.entry, name, prior.options)
    built = pairing.build()[1]
    return pairing if isinstance(built, tuple(m.cls for m in guide.members)) else None


def composition_matrix() -> list[Row]:
    """Every prior family x every guide family (module docstring).  Builds each candidate registry guide
    once on a tiny net to check its family, inside a forked RNG (the global RNG does not move)."""
    rows = []
    with torch.random.fork_rng(devices=[]):
        for p in PRIOR_FAMILIES:
            cells = []
            for g in GUIDE_FAMILIES:
                pairing = _pairing(p, g)
                cells.append(Cell(p, g, pairing, None if pairing else g.reason))
            rows.append(Row(p, tuple(cells)))
    return rows


def format_matrix(rows: list[Row] | None = None) -> str:
    """The matrix as plain text of at most 110 columns: ``✓`` (a CI test fits the pair) or a letter keyed to
    the reason the pair cannot exist, then the legend of the guide and prior families."""
    rows = composition_matrix() if rows is None else rows
    letters: dict[str, str] = {}
    for row in rows:
        for c in row.cells:
            if not c.ok and c.reason not in letters:
                letters[c.reason] = chr(ord("a") + len(letters))
    label = max(len("prior \\ guide"), *(len(r.prior.label) for r in rows)) + 2
    width = max(len(g.abbrev) for g in GUIDE_FAMILIES) + 1
    lines = [
        ("prior \\ guide".ljust(label) + "".join(g.abbrev.ljust(width) for g in GUIDE_FAMILIES)).rstrip()
    ]
    for row in rows:
        marks = ("✓" if c.ok else letters[c.reason] for c in row.cells)
        lines.append((row.prior.label.ljust(label) + "".join(m.ljust(width) for m in marks)).rstrip())
    lines += [
        "",
        "✓: a CI test fits the pair (tests/test_matrix.py); a letter: the pair cannot exist because",
    ]
    for text, letter in letters.items():
        lines += textwrap.wrap(text, WIDTH, initial_indent=f"  {letter}: ", subsequent_indent="     ")
    lines += ["", "guide families:"]
    lines += [f"  {g.abbrev.ljust(width)}{g.label}" for g in GUIDE_FAMILIES]
    lines += ["prior families: representative registry entry, prior class"]
    lines += [f"  {p.label.ljust(label)}{p.entry.ljust(12)}{p.prior}" for p in PRIOR_FAMILIES]
    other = "; ".join(
        f"{_label(PRIOR_FAMILIES, k)} x {_abbrev(g)} on {pr.entry}" for (k, g), pr in EXTRA_PAIRINGS.items()
    )
    lines += textwrap.wrap(f"pairs fitted on another entry: {other}", WIDTH)
    return "\n".join(lines)


def _label(priors: tuple[PriorFamily, ...], key: str) -> str:
    return next(p.label for p in priors if p.key == key)


def _abbrev(key: str) -> str:
    return next(g.abbrev for g in GUIDE_FAMILIES if g.key == key)
