"""``zoo.testing``: the conformance kit, the zoo's ``check_estimator`` for priors, guides and entries.

The zoo runs these checks on its own registry (``tests/test_composition.py``); a third-party prior, guide
or plugin runs them from its own pytest file::

    # tests/test_my_prior.py
    import pytest
    from zoo.testing import check_entry, check_guide, check_prior

    from my_package import MyGuide, MyPrior, build, register

    @pytest.mark.parametrize("task", ["regression", "binary"])
    def test_prior_contracts(task):
        check_prior(MyPrior(scale=0.5), task=task, hidden=(3, 2))

    def test_guide_contracts():
        check_guide(MyGuide, build(3, 1, "regression", (4,)))

    def test_registry_entry():
        register()                      # or load_plugin("my_module.py")
        check_entry("my-bnn", guide="meanfield")

Each function returns ``None`` when every contract holds and otherwise raises an ``AssertionError`` whose
message starts with ``[contract-id]`` naming the broken contract (the ids and what each requires:
:data:`CONTRACTS`), so a failing test says what to fix.  Bad arguments are a ``TypeError``/``ValueError``
naming the argument before any check runs.  The checks work on copies of what they are given, seed every
random stream themselves and restore the caller's afterwards, and leave Pyro's parameter store as it was.
Sizes and tolerances (data rows, particles, fit steps, Monte Carlo draws, the standard-error tolerance of the
closed-form ELBO, the device) are a :class:`KitConfig`, or keywords: ``check_guide(G, m, steps=10)``,
``check_prior(p, gibbs_chains=500)`` (an unknown keyword is a ``TypeError`` naming it).

* :func:`check_prior` — ``param-values``, ``param-sites``, ``event-dims``, ``site-names``, ``particles``,
  ``buffers``, ``param-store`` (and ``runs``), and ``conditionals`` for a prior with exact scale
  conditionals (NUTS within Gibbs; also alone, :func:`check_conditionals`);
* :func:`check_guide` — ``guide-build``, ``support`` (before the fit, on the unfitted guide, and after it),
  ``fit``, ``coverage``, ``elbo-finite``, ``closed-form-elbo``, ``predict-pure``, ``checkpoint``, ``arviz``,
  ``guide-dtype``, ``param-store``;
* :func:`check_entry` — ``entry``, then every prior contract of the model it builds and every guide contract.
"""

from __future__ import annotations

from zoo.testing._util import CONTRACTS
from zoo.testing.conditionals import check_conditionals
from zoo.testing.config import KitConfig
from zoo.testing.entry import check_entry
from zoo.testing.guide import check_guide
from zoo.testing.prior import check_prior

__all__ = ["check_prior", "check_conditionals", "check_guide", "check_entry", "KitConfig", "CONTRACTS"]
