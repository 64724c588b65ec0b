"""Benchmark suites of ``zoo bench``: each a fixed list of datasets × splits × settings, defined once here.

A :class:`Suite` fixes what every model benched on it sees: the datasets, the split indices, the hidden
widths and one training :class:`Budget` shared by every model (SVI steps, learning rate and mini-batch size
for gradient-trained guides; a number of closed-form sweeps for the CAVI guides, whose update has no step
size).  A fixed budget across models is what makes the leaderboard a comparison of priors and guides rather
than of tuning effort; a run with ``--steps``/``--splits`` is a smoke run *off* the budget and its
leaderboard says so.

Suites:

* ``uci-small``: four UCI regression sets of Hernández-Lobato & Adams (2015, "Probabilistic
  Backpropagation", ICML, arXiv:1502.05336, §5, their standard split files) — yacht, boston, energy,
  concrete — splits 0-4, one hidden layer of 50 units;
* ``toys``: the bow-tie toy (Sheinkman & Wade 2025, arXiv:2411.11132, §4.2), the horseshoe paper's cubic
  toy and 2-2-1 classification toy (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §7.2-7.3);
* ``selection``: the correlated logistic generators (``logistic-sim``, ``logistic-sim-weak``) scored by the
  TPR/FPR of the fitted model's input selection (Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395,
  §4.1) with a one-neuron network (logistic regression), as the ``lbbnn-selection`` protocol.

* ``reference``: every stored gold-standard posterior (``zoo reference list``) as a dataset
  ``reference:NAME``, each guide scored by the distance of its predictive to the reference's
  (:mod:`zoo.experiments.reference_suite`); registered only where references are stored.

**Hook for more suites**: build a :class:`Suite` and call :func:`register_suite`.  ``Suite.scorer``, a
picklable top-level function ``(RunOutput) -> dict[str, float]``, adds metrics to every fit (e.g. W2 to
reference draws), and ``Suite.metrics`` names the columns the leaderboard ranks by, with their direction in
:data:`LOWER_IS_BETTER` / :data:`HIGHER_IS_BETTER` (extend them for new metrics).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from zoo.core.config import Config
from zoo.core.validation import check_optional, check_positive, check_positive_int
from zoo.experiments.reference_suite import METRICS as REFERENCE_METRICS
from zoo.experiments.reference_suite import PREFIX as REFERENCE_PREFIX
from zoo.experiments.reference_suite import reference_scorer, stored_instances

__all__ = [
    "Budget",
    "Suite",
    "SUITES",
    "register_suite",
    "reference_suite",
    "get_suite",
    "metrics_for_task",
    "LOWER_IS_BETTER",
    "HIGHER_IS_BETTER",
]

#: metrics where a smaller value is better, and where a larger one is
LOWER_IS_BETTER = frozenset({"nll", "rmse", "ece", "fpr", "fit_seconds", *REFERENCE_METRICS})
HIGHER_IS_BETTER = frozenset({"accuracy", "tpr", "coverage95"})

_TASK_METRICS = {"regression": ("nll", "rmse"), "classification": ("nll", "accuracy", "ece")}


def metrics_for_task(task: str, selection: bool = False) -> tuple[str, ...]:
    """The ranked metrics of a dataset's task (``regression``, ``binary``/``multiclass``), plus TPR/FPR for
    a selection suite."""
    base = _TASK_METRICS["regression" if task == "regression" else "classification"]
    return (*base, "tpr", "fpr") if selection else base


@dataclasses.dataclass(frozen=True)
class Budget(Config):
    """One training budget for every model of a suite.

    ``steps``/``lr``/``batch_size`` apply to gradient-trained (SVI) guides (``batch_size=None``: full batch;
    a batch at least the training-set size is full batch too); ``cavi_sweeps`` replaces ``steps`` for the
    pure closed-form CAVI guides (``uses_gradients = False``), which always run full batch;
    ``num_samples``: posterior draws for the predictive."""

    steps: int = 500
    lr: float = 1e-2
    batch_size: int | None = 256
    cavi_sweeps: int = 25
    num_samples: int = 100

    def validate(self) -> None:
        check_positive_int("steps", self.steps)
        check_positive("lr", self.lr)
        check_optional("batch_size", self.batch_size, check_positive_int)
        check_positive_int("cavi_sweeps", self.cavi_sweeps)
        check_positive_int("num_samples", self.num_samples)


@dataclasses.dataclass(frozen=True)
class Suite(Config):
    """A benchmark suite: ``datasets`` × ``splits`` at ``hidden`` widths and one ``budget``.

    ``hidden=()`` is a network without hidden layer; an entry whose default architecture has no hidden
    layer (a linear model such as ``blr-cavi``) is always fitted with ``hidden=()``.  ``selection=True``
    adds the TPR/FPR columns (the datasets must know their true support).  ``scorer``: see the module
    docstring (not part of the suite's identity in journals: give a new suite a new name instead)."""

    name: str
    description: str
    datasets: tuple[str, ...]
    splits: tuple[int, ...]
    hidden: tuple[int, ...] = (50,)
    budget: Budget = dataclasses.field(default_factory=Budget)
    selection: bool = False
    scorer: Callable | None = None
    metrics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("datasets", "splits", "hidden", "metrics"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        super().__post_init__()

    def validate(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.datasets, tuple) or not self.datasets:
            raise ValueError(f"datasets must be a non-empty tuple of dataset names, got {self.datasets!r}")
        if not isinstance(self.splits, tuple) or not self.splits:
            raise ValueError(f"splits must be a non-empty tuple of split indices, got {self.splits!r}")
        for s in self.splits:
            check_positive_int("splits", s, allow_zero=True)
        if not isinstance(self.hidden, tuple):
            raise TypeError(f"hidden must be a tuple of widths, got {type(self.hidden).__name__}")
        for h in self.hidden:
            check_positive_int("hidden", h)
        if not isinstance(self.budget, Budget):
            raise TypeError(f"budget must be a Budget, got {type(self.budget).__name__}")
        if self.scorer is not None and not callable(self.scorer):
            raise TypeError("scorer must be a callable (RunOutput) -> dict or None")
        for m in self.metrics:
            if m not in LOWER_IS_BETTER | HIGHER_IS_BETTER:
                raise ValueError(
                    f"metrics: {m!r} has no direction (add it to LOWER_IS_BETTER/HIGHER_IS_BETTER)"
                )

    def identity(self) -> dict:
        """What defines the suite's numbers (journals and committed rows record it): everything but the
        description, the scorer and its columns."""
        d = self.to_dict()
        for key in ("scorer", "description", "metrics"):  # the scorer's columns follow from the scorer
            d.pop(key)
        return d


SUITES: dict[str, Suite] = {}


def register_suite(suite: Suite) -> Suite:
    """Add ``suite`` to :data:`SUITES`; a name registered twice is a ``ValueError``."""
    if not isinstance(suite, Suite):
        raise TypeError(f"suite must be a Suite, got {type(suite).__name__}")
    if suite.name in SUITES:
        raise ValueError(f"name: suite {suite.name!r} already registered")
    SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> Suite:
    """The registered suite ``name``; unknown is a ``ValueError`` listing the suites."""
    if name not in SUITES:
        raise ValueError(f"suite: unknown suite {name!r}; available: {', '.join(sorted(SUITES))}")
    return SUITES[name]


#: 500 Adam steps at lr 1e-2 on mini-batches of 256 (yacht and boston: full batch) and 25 CAVI sweeps:
#: one fit takes about 3-15 s on one core, the whole zoo (16 entry/guide pairs x 20 fits) under an hour.
UCI_SMALL_BUDGET = Budget(steps=500, lr=1e-2, batch_size=256, cavi_sweeps=25, num_samples=100)

register_suite(
    Suite(
        name="uci-small",
        description=(
            "UCI yacht, boston, energy, concrete (Hernández-Lobato & Adams 2015 split files) x splits 0-4, "
            "one hidden layer of 50 units, 500 Adam steps at lr 1e-2 on batches of 256 (25 sweeps for CAVI "
            "guides); metrics on the original target scale"
        ),
        datasets=("uci:yacht", "uci:boston", "uci:energy", "uci:concrete"),
        splits=(0, 1, 2, 3, 4),
        hidden=(50,),
        budget=UCI_SMALL_BUDGET,
    )
)

register_suite(
    Suite(
        name="toys",
        description=(
            "the bow-tie toy (N = 300), the horseshoe cubic toy (100 train / 400 test) and the 2-2-1 "
            "classification toy (N = 1000) x splits 0-4, one hidden layer of 50 units, 500 Adam steps at "
            "lr 1e-2 on batches of 256 (25 sweeps for CAVI guides)"
        ),
        datasets=("toy-bowtie", "toy-hs", "toy-hs-221"),
        splits=(0, 1, 2, 3, 4),
        hidden=(50,),
        budget=UCI_SMALL_BUDGET,
    )
)

register_suite(
    Suite(
        name="selection",
        description=(
            "the correlated logistic generators logistic-sim and logistic-sim-weak (N = 2000, 20 "
            "covariates, 90/10 split, split = seed) x splits 0-9 with a one-neuron network (logistic "
            "regression), 1000 full-batch Adam steps at lr 2e-2; TPR/FPR of the fitted input selection"
        ),
        datasets=("logistic-sim", "logistic-sim-weak"),
        splits=tuple(range(10)),
        hidden=(),
        budget=Budget(steps=1000, lr=2e-2, batch_size=None, cavi_sweeps=50, num_samples=100),
        selection=True,
    )
)


def reference_suite(root: str | os.PathLike | None = None) -> Suite | None:
    """The ``reference`` :class:`Suite` over the instances stored under ``root`` (default
    :func:`zoo.reference.store.default_root`; :mod:`zoo.experiments.reference_suite`); ``None`` when none
    is stored (an installed zoo without the source checkout's ``benchmarks/reference``)."""
    names = stored_instances(root)
    if not names:
        return None
    return Suite(
        name="reference",
        description=(
            "every stored reference posterior (zoo reference list): the instance's pinned data, hidden "
            "widths and (for its own model) options; splits 0-4 are five seeds on the same data; 2000 Adam "
            "steps at lr 1e-2, full batch (50 sweeps for CAVI guides); scored by W2/W1 of the predictive "
            "draws against the reference's (/ train-target sd), NLL gap, TV and disagreement (binary), PIP "
            "MAE (exact spike-and-slab)"
        ),
        datasets=tuple(REFERENCE_PREFIX + n for n in names),
        splits=(0, 1, 2, 3, 4),
        hidden=(10,),
        budget=Budget(steps=2000, lr=1e-2, batch_size=None, cavi_sweeps=50, num_samples=200),
        scorer=reference_scorer,
        metrics=REFERENCE_METRICS,
    )


_reference = reference_suite()  # the stored gold standards of the source checkout (none: no suite)
if _reference is not None:
    register_suite(_reference)
