"""Named, pinned reference instances: one frozen :class:`ReferenceInstance` per posterior the zoo's guides are
scored against (:data:`INSTANCES`).

An instance fixes everything a reference depends on: the registry model and its builder options, the hidden
widths, the data (:class:`DataSpec`: dataset, split, a seeded subsample of the training and test rows, a
column subset), the method (``"nuts"``, Hoffman & Gelman 2014, arXiv:1111.4246, through
:func:`zoo.infer.mcmc.fit_nuts`; or ``"enumeration"``, the exact spike-and-slab posterior of
:mod:`zoo.reference.enumeration`), the sampler settings (:class:`SamplerSettings`), the number of predictive
draws kept and the seed.  Networks and data are kept small (hidden width 3 or less, at most a few hundred
training rows); even so few network instances pass the gate here.  ``zoo reference list`` shows which are
stored and the others' gate failures (``attempts.json``); the comments below record every attempt.  In
short: tanh units (``*-tanh``) remove ReLU's rescaling ridge, and the Gaussian tanh networks pass; the
heavy-tailed priors fail on two or three units, first for the scales' funnel, which NUTS within Gibbs
(``SamplerSettings.gibbs``, :mod:`zoo.infer.mcmc_gibbs`) removes (``*-cubic-tanh-gibbs`` pass), then
because the chains disagree on which units are on.  One tanh unit (``*-tanh-w1``) removes that choice, and
the horseshoes and N-GIG pass on the bow-tie toy; on yacht one unit leaves a ridge that needs a dense mass
matrix (the comment at ``hs-yacht-tanh-w1``), with which CM and CMV pass.  The subsampling is part of the
instance, so a guide scored against it is fitted on the same rows (:meth:`ReferenceInstance.dataset`).

For the families whose network references fail the gate, the ``*-linear`` instances hold the same prior
on a network with no hidden layer (``hidden=()``): a linear regression whose weights carry the collapsed
CM or CMV prior (Tomczak et al. 2021, App. B) or the N-GIG prior (Sheinkman & Wade 2025, arXiv:2411.11132,
Eqs. 5-7).  Without hidden units there are no permutation or rescaling symmetries and the likelihood
dominates the heavy-tailed scales, so NUTS mixes there (pilot chains on this machine: step sizes 0.1-0.2,
no divergences, against 0.009-0.025 and trees at the depth limit for the same priors on a 3-unit network
on diabetes).  They score the families' guides on the prior's own geometry — the collapsed bound's
optimal hyper-posterior, the N-GIG scales — without the network's.  ``ngig-diabetes-linear`` also scores
the bow-tie CAVI guides: without hidden layers the bow-tie network has no stochastic units, so its model
is the same N-GIG linear regression; it is fitted with the instance's hyperparameters and scored as the
same model (:func:`zoo.reference.score.fit_settings`).  The horseshoe has no linear instance:
its prior acts on hidden units only (the output layer has no sparsity prior, Ghosh et al. 2019, §3.3).

``selection-linear`` (the zoo's correlated selection design with a linear-Gaussian response) and the
instance's parts are defined in :mod:`zoo.reference.spec`, the constructors of each kind of instance (exact,
linear, tanh network, horseshoe on tanh units, one tanh unit) in :mod:`zoo.reference.instance_kinds`.
"""

from __future__ import annotations

from zoo.families.baselines.options import MFVI_UNSCALED
from zoo.reference.instance_kinds import HS_SAMPLER as _HS
from zoo.reference.instance_kinds import TANH as _TANH
from zoo.reference.instance_kinds import TANH_NOTE as _TANH_NOTE
from zoo.reference.instance_kinds import WIDTH as _WIDTH
from zoo.reference.instance_kinds import exact_instance as _exact
from zoo.reference.instance_kinds import gauss_tanh_instance as _gauss_tanh
from zoo.reference.instance_kinds import hs_tanh_instance as _hs_tanh
from zoo.reference.instance_kinds import linear_instance as _linear
from zoo.reference.instance_kinds import nuts_instance as _nuts
from zoo.reference.instance_kinds import one_unit_instance as _one_unit
from zoo.reference.instance_kinds import tanh_net_instance as _tanh_net
from zoo.reference.spec import SELECTION_COLUMNS, DataSpec, ReferenceInstance, SamplerSettings

__all__ = [
    "DataSpec",
    "SamplerSettings",
    "ReferenceInstance",
    "INSTANCES",
    "get_instance",
    "instance_names",
    "SELECTION_COLUMNS",
]


_BOWTIE = DataSpec("toy-bowtie", n_train=100)
_CUBIC = DataSpec("toy-hs", n_test=50)
_YACHT = DataSpec("uci:yacht", n_train=100)
_DIABETES = DataSpec("diabetes", n_train=150)
_YACHT_ROWS = "100 of 277 training rows"
#: the plain horseshoe's yacht unit, sampled centered (pilots: no divergence, 3 times the non-centered step)
_HS_YACHT = {"centered": True, "target_accept": 0.95}
_DIABETES_ROWS = "150 of 398 rows"
_BOWTIE_ROWS = "100 of 270 training rows"
_NGIG_DIABETES = {"samples": 3000, "target_accept": 0.995}  # plain NUTS (the comment at the instance)
_TOY221 = DataSpec("toy-hs-221", n_train=200)
_SHRUNK = "hidden 3; {}"
_CUBIC_ROWS = "50 of 400 test rows"
_BG1_NOTE = f"hidden 2, tanh units, layer scale b_g = 1; {_CUBIC_ROWS}"
_CENTERED_NOTE = f"hidden 2, tanh units, sampled centered; {_CUBIC_ROWS}"

#: the regression toys saturate tree depth 8 at every iteration (about 0.3-0.4 CPU-s each on this machine):
#: 4 x (300 + 600) iterations keep one attempt under half an hour on one core (gauss-cubic's fails the gate:
#: bulk ESS 66 of the network output, R-hat 1.048, 2 divergences; see attempts.json)
_SHORT = SamplerSettings(warmup=300, samples=600)

_SELECTION_NOTE = "exact: 2^14 models; 200 train / 50 test rows"


INSTANCES: dict[str, ReferenceInstance] = {
    i.name: i
    for i in (
        _exact("ss-selection-linear", DataSpec("selection-linear"), _SELECTION_NOTE),
        _exact("ss-boston", DataSpec("uci:bostonHousing"), "exact: 2^13 models; standard split 0"),
        _exact("ss-diabetes", DataSpec("diabetes"), "exact: 2^10 models; full split 0"),
        # four more real designs with correlated inputs (largest |r| on split 0's training rows: energy's
        # relative compactness and surface area -0.99, yacht 0.69, wine's fixed acidity and pH -0.68,
        # concrete's water and superplasticizer -0.66), where mean-field inclusion probabilities are
        # expected to suffer (Carbonetto & Stephens 2012)
        _exact("ss-yacht", DataSpec("uci:yacht"), "exact: 2^6 models; standard split 0"),
        _exact("ss-energy", DataSpec("uci:energy"), "exact: 2^8 models; standard split 0"),
        _exact("ss-concrete", DataSpec("uci:concrete"), "exact: 2^8 models; standard split 0"),
        _exact("ss-wine", DataSpec("uci:wine-quality-red"), "exact: 2^11 models; standard split 0"),
        # linear instances of the collapsed (Tomczak et al. 2021) and N-GIG (Sheinkman & Wade 2025) priors
        _linear("cm-yacht-linear", "cm-bnn", "uci:yacht", "collapsed-mean (CM)", 277),
        _linear("cmv-yacht-linear", "cmv-bnn", "uci:yacht", "collapsed mean-and-variance (CMV)", 277),
        _linear("ngig-diabetes-linear", "ngig-bnn", "diabetes", "N-GIG", 398, scored=("ngig-bnn", "bowtie")),
        _nuts(
            "gauss-221",
            "mfvi-bnn",
            DataSpec("toy-hs-221", n_train=200),
            "2-2-1 network; 200 of 900 rows",
            hidden=(2,),
            options=MFVI_UNSCALED,
        ),
        *(
            _nuts(
                f"{prefix}-221",
                model,
                _TOY221,
                "2-2-1 network on the binary toy; 200 of 900 rows",
                hidden=(2,),
                sampler=sampler,
            )
            for prefix, model, sampler in (
                ("hs", "hs-bnn", _HS),
                ("reghs", "reg-hs-bnn", _HS),
                ("ngig", "ngig-bnn", SamplerSettings(target_accept=0.95)),
                ("cm", "cm-bnn", SamplerSettings()),
                ("cmv", "cmv-bnn", SamplerSettings()),
            )
        ),
        _nuts(
            "gauss-cubic",
            "mfvi-bnn",
            _CUBIC,
            _SHRUNK.format(_CUBIC_ROWS),
            hidden=_WIDTH,
            sampler=_SHORT,
            options=MFVI_UNSCALED,
        ),
        _gauss_tanh("gauss-cubic-tanh", _CUBIC, _CUBIC_ROWS),
        _nuts("hs-cubic", "hs-bnn", _CUBIC, _SHRUNK.format(_CUBIC_ROWS), hidden=_WIDTH, sampler=_HS),
        _nuts("reghs-cubic", "reg-hs-bnn", _CUBIC, _SHRUNK.format(_CUBIC_ROWS), hidden=_WIDTH, sampler=_HS),
        # tanh units: no rescaling ridge between a unit's incoming and outgoing weights.  The Gaussian
        # network then mixes in function space (gauss-cubic-tanh at target acceptance .8: R-hat of f 1.003,
        # bulk ESS 1982, but 20 divergences; hence .95); the regularized horseshoe does not (4 x 1500 at .95
        # with a dense mass matrix, 3136 s: 69 divergences, R-hat of kappa 1.17 — the scales' funnel
        # remains, attempts.json), although its one-chain pilot (150 + 150) had no divergence
        _nuts(
            "reghs-cubic-tanh",
            "reg-hs-bnn",
            _CUBIC,
            _TANH_NOTE.format(_CUBIC_ROWS),
            hidden=_WIDTH,
            sampler=_HS,
            options=_TANH,
        ),
        # the plain horseshoe (the paper's b_g = 1e-5) on two tanh units: one-chain pilots (300 + 150) had no
        # divergence with two units at target acceptance .99 (step size 0.007), 3 with one unit at .95; the
        # full run at .99 with 4 x (500 + 1000) (2800 s) passed on f, sigma and the unit norms but not on
        # kappa (R-hat 1.019, bulk ESS 212) and had one divergence; at .995 with 4 x (500 + 2500) (3888 s, two
        # chain processes) f, sigma and the norms are far inside the gate (R-hat <= 1.0015, bulk ESS >= 1823)
        # but kappa is not (R-hat 1.013, bulk ESS 268) and there were 13 divergences (attempts.json).
        # One-chain pilots (300 + 600) did no better: at .999 the step size fell to 0.001 (bulk ESS of
        # kappa 3, 597 s); the regularized horseshoe on the same two units at .995 had 15 divergences (bulk
        # ESS of f 2, 645 s)
        _hs_tanh(
            "hs-cubic-tanh",
            _CUBIC,
            "hidden 2, tanh units; 50 of 400 test rows",
            target_accept=0.995,
            samples=2500,
        ),
        # one tanh unit: stopped after two of four chains (not in attempts.json) — the first at step size
        # 0.0018, the second at 0.013 with acceptance .42 against the target .99 (divergent trajectories)
        _hs_tanh("hs-cubic-tanh-w1", _CUBIC, "hidden 1, tanh unit; 50 of 400 test rows", hidden=(1,)),
        # hs-cubic-tanh sampled in the centered parameterization (the same posterior): 4 x (500 + 1500) at
        # .99, 1767 s: three chains ran at step sizes 0.04-0.08 (200-320 s each), one stayed at 0.0012 with 4
        # divergences in another region, R-hat 1.53 on f; with b_g = 1 (non-centered, the same settings,
        # 3383 s) the chains disagree too (R-hat 1.50 on f, 46 divergences): the paper's b_g = 1e-5 and the
        # non-centered form come closest (attempts.json)
        _hs_tanh("hs-cubic-tanh-centered", _CUBIC, _CENTERED_NOTE, samples=1500, centered=True),
        _hs_tanh("hs-cubic-tanh-bg1", _CUBIC, _BG1_NOTE, samples=1500, options={"bg": 1.0}),
        # NUTS within Gibbs (zoo.infer.mcmc_gibbs): hs-cubic-tanh's posterior, the scales drawn exactly from
        # their inverse-gamma conditionals between NUTS transitions of the weights.  Two one-chain pilots
        # (300 + 600 at .95, diagonal mass, 830 s each) had no divergence and bulk ESS 390-560 of kappa,
        # 280-610 of f per 600 draws, against 67 of kappa per 2500 draws and chain for NUTS alone
        _hs_tanh(
            "hs-cubic-tanh-gibbs",
            _CUBIC,
            "hidden 2, tanh units, NUTS within Gibbs; 50 of 400 test rows",
            target_accept=0.95,
            full_mass=False,
            jit_compile=False,
            gibbs=True,
            samples=700,
        ),
        # the regularized horseshoe (slab c^2 ~ IG(2, 6)) on the same network and rows: its unit, layer and
        # slab scales have no conjugate conditional and are slice-sampled within the Gibbs sweep
        # (zoo.families.horseshoe.gibbs); NUTS alone failed on this posterior (reghs-cubic-tanh, and the
        # two-unit pilot at .995 in the comment at hs-cubic-tanh)
        _hs_tanh(
            "reghs-cubic-tanh-gibbs",
            _CUBIC,
            "hidden 2, tanh units, regularized, NUTS within Gibbs; 50 of 400 test rows",
            model="reg-hs-bnn",
            target_accept=0.95,
            full_mass=False,
            jit_compile=False,
            gibbs=True,
            samples=700,
        ),
        _nuts(
            "ngig-bowtie",
            "ngig-bnn",
            _BOWTIE,
            _SHRUNK.format(_BOWTIE_ROWS),
            hidden=_WIDTH,
            scored=("ngig-bnn", "bowtie"),
        ),
        _gauss_tanh("gauss-bowtie-tanh", _BOWTIE, _BOWTIE_ROWS),
        # the N-GIG prior (the paper's inverse-gamma scales, Student-t(3) marginals, App. D.1 scaling) on
        # gauss-cubic-tanh's network and rows, sampled in the marginal form (psi integrated out; NGIGPrior):
        # 4 x (500 + 1000) at .99 (two chain processes, 1520 s) had no divergence but step sizes 0.0024-0.0049
        # and failed the gate (R-hat 1.021 / bulk ESS 179 on f, 1.22 / 14 on the unit norms; attempts.json),
        # where the Gaussian prior on the same network passes at .95.  One-chain pilots (300 + 300) mixed no
        # better hierarchically (psi sampled), with a dense mass matrix, with the layer scales non-centered
        # (W = sqrt(tau) V), or on the bow-tie toy (bulk ESS of the unit norms 2-29 in every case)
        # NUTS within Gibbs (the psi and tau conditionals of zoo.families.bowtie.gibbs; one-chain pilot,
        # 300 + 600 at .95, 1504 CPU s): no divergence, bulk ESS of f 156 but of the unit norms only 21 per
        # 600 draws, so four chains passing the gate would take about six CPU hours; not run.  With the
        # ancillary move of each layer's tau interleaved (interweave=True, the same pilot, 1819 CPU s): no
        # divergence but bulk ESS 29 of f and 1 of the unit norms — worse
        _tanh_net("ngig-cubic-tanh", "ngig-bnn", _CUBIC, _CUBIC_ROWS, {}, 0.99),
        # the paper's horseshoe where the data need every unit: two tanh units on the bow-tie toy (10 sin x1
        # against noise sd 0.7), sampled centered — the form that suits scales the data pin down. A one-chain
        # pilot (300 + 300) ran at step size 0.010 with no divergence (293 s); the full 4 x (500 + 1000) at
        # .99 (2366 s) did not: step sizes 0.0004-0.019 and 0/16/18/117 divergences, R-hat 1.31 on f and 2.0
        # on kappa — the chains disagree on how the two units share the layer's scale (attempts.json).
        # Non-centered, two one-chain pilots (300 + 600 at .99, 570 s each) had no divergence but bulk ESS 3
        # of kappa and 4-6 of the unit norms per 600 draws: a reference would take about 100 times longer.
        # Within Gibbs (one chain, 300 + 600 at .95, 1247 CPU s): bulk ESS 71 of kappa but 31 of f and 11 of
        # the unit norms, and 6 divergences — better, not yet enough.  Interweaving the scales' ancillary
        # moves (zoo.infer.interweave; the same pilot settings) did not help: centered, 205 divergences and
        # bulk ESS 8 of kappa, 12 of the norms (1164 CPU s); with NUTS on the standardized rows
        # (centered=False), 129 divergences and bulk ESS 8 of kappa and of the norms (1393 CPU s)
        _hs_tanh(
            "hs-bowtie-tanh",
            _BOWTIE,
            "hidden 2, tanh units, sampled centered; 100 of 270 training rows",
            samples=1000,
            centered=True,
        ),
        # at target acceptance .95 (1769 s) one chain of four stalled at acceptance .45 with 109 divergences
        # (R-hat of f 1.072; attempts.json); hence .99
        _gauss_tanh("gauss-yacht-tanh", _YACHT, _YACHT_ROWS, target_accept=0.99),
        # the paper's horseshoe on the same network: a unit's scale is shared by its 7 incoming entries (6
        # inputs and the bias) rather than the cubic toy's 2, so the data should pin it down better; they do
        # not: 4 x (500 + 1000) at .99 (two chain processes, 1276 s) — one chain stuck at acceptance .27 with
        # 645 divergences, the other three at step sizes 0.0026-0.0095 in different modes (R-hat 1.85 on f).
        # Within Gibbs with interweaving (one chain, 300 + 600 at .95): centered, the chain fell into the
        # mode where every unit is off (unit norms <= 0.001, sigma drifting to 72, step size 9e-5, 70
        # divergences; 1550 CPU s); with NUTS on the standardized rows (centered=False) it fitted the data
        # (sigma 0.68, 4 divergences) but moved slowly (step size 0.0015, bulk ESS 2 of sigma and of the
        # unit norms in 600 draws; 1874 CPU s)
        _hs_tanh("hs-yacht-tanh", _YACHT, _TANH_NOTE.format(_YACHT_ROWS), hidden=_WIDTH),
        # one tanh unit (pilots, failed runs: benchmarks/RESULTS.md, attempts.json), within Gibbs on the
        # bow-tie toy.  On yacht every row sits on the unit's saturated side, where v tanh(a) + c ~ (c - v) +
        # 2 v exp(2a): output weight and bias move along a ridge only a dense mass matrix follows, hence plain
        # NUTS on the marginal prior, the horseshoes centered (non-centered, hs failed: step size 0.0006;
        # reghs at .95: 215 divergences in one chain).  ngig-diabetes: 23 divergences in Gibbs, 2 at .99
        _one_unit("hs-bowtie-tanh-w1", "hs-bnn", _BOWTIE, _BOWTIE_ROWS),
        _one_unit("reghs-bowtie-tanh-w1", "reg-hs-bnn", _BOWTIE, _BOWTIE_ROWS),
        _one_unit("hs-yacht-tanh-w1", "hs-bnn", _YACHT, _YACHT_ROWS, False, **_HS_YACHT, samples=2500),
        _one_unit(
            "reghs-yacht-tanh-w1", "reg-hs-bnn", _YACHT, _YACHT_ROWS, False, centered=True, samples=3000
        ),
        _one_unit("ngig-bowtie-tanh-w1", "ngig-bnn", _BOWTIE, _BOWTIE_ROWS),
        _one_unit("ngig-diabetes-tanh-w1", "ngig-bnn", _DIABETES, _DIABETES_ROWS, False, **_NGIG_DIABETES),
        _one_unit("cm-yacht-tanh-w1", "cm-bnn", _YACHT, _YACHT_ROWS, False, samples=1500),
        _one_unit("cmv-yacht-tanh-w1", "cmv-bnn", _YACHT, _YACHT_ROWS, False, samples=1500),
        _nuts(
            "gauss-bowtie",
            "mfvi-bnn",
            _BOWTIE,
            _SHRUNK.format(_BOWTIE_ROWS),
            hidden=_WIDTH,
            sampler=_SHORT,
            options=MFVI_UNSCALED,
        ),
        _nuts("cm-yacht", "cm-bnn", _YACHT, _SHRUNK.format(_YACHT_ROWS), hidden=_WIDTH),
        # the collapsed priors (Tomczak et al. 2021, Table 4 defaults) on gauss-yacht-tanh's network and rows:
        # cm-yacht-tanh at .99 (1731 s): no divergence, but the chains sit in different predictive modes
        # (R-hat 1.74 on f, 1.61 on sigma), as cm-221's did; cmv-yacht-tanh likewise (1696 s, no divergence,
        # R-hat 2.49 on f; attempts.json).  NUTS within Gibbs (the hyper-latents drawn from their exact
        # conditionals, zoo.families.collapsed.gibbs) did not help cmv-yacht-tanh: 4 x (150 + 200) at .95,
        # 2938 s with another run on the same cores, step sizes 0.005-0.013, 26 divergences, R-hat 2.02 on f
        # and 2.75 on the unit norms (bulk ESS 5-6): the chains' predictive modes, not the scales, are what
        # NUTS cannot cross here
        _tanh_net("cm-yacht-tanh", "cm-bnn", _YACHT, _YACHT_ROWS, {}, target_accept=0.99),
        _tanh_net("cmv-yacht-tanh", "cmv-bnn", _YACHT, _YACHT_ROWS, {}, target_accept=0.99),
        _nuts("cmv-yacht", "cmv-bnn", _YACHT, _SHRUNK.format(_YACHT_ROWS), hidden=_WIDTH),
        _nuts(
            "gauss-yacht",
            "mfvi-bnn",
            _YACHT,
            _SHRUNK.format(_YACHT_ROWS),
            hidden=_WIDTH,
            options=MFVI_UNSCALED,
        ),
        _nuts(
            "hs-yacht",
            "hs-bnn",
            _YACHT,
            _SHRUNK.format(_YACHT_ROWS),
            hidden=_WIDTH,
            sampler=_HS,
        ),
        _nuts(
            "reghs-yacht",
            "reg-hs-bnn",
            _YACHT,
            _SHRUNK.format(_YACHT_ROWS),
            hidden=_WIDTH,
            sampler=_HS,
        ),
        _nuts(
            "hs-bowtie",
            "hs-bnn",
            _BOWTIE,
            _SHRUNK.format(_BOWTIE_ROWS),
            hidden=_WIDTH,
            sampler=_HS,
        ),
        _nuts(
            "reghs-bowtie",
            "reg-hs-bnn",
            _BOWTIE,
            _SHRUNK.format(_BOWTIE_ROWS),
            hidden=_WIDTH,
            sampler=_HS,
        ),
        _nuts(
            "ngig-diabetes",
            "ngig-bnn",
            _DIABETES,
            _SHRUNK.format(_DIABETES_ROWS),
            hidden=_WIDTH,
        ),
    )
}
"""Every pinned instance, in the order they are computed (the exact ones first)."""


def instance_names() -> list[str]:
    return list(INSTANCES)


def get_instance(name: str) -> ReferenceInstance:
    """The instance called ``name``; ``ValueError`` listing the names otherwise."""
    try:
        return INSTANCES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown reference instance {name!r}; available: {', '.join(INSTANCES)}") from None
