"""The NUTS arguments of ``zoo fit``: ``--inference nuts [--chains C --warmup W --samples S ...]``.

``zoo fit MODEL --inference nuts`` samples the registry model with NUTS (:func:`zoo.infer.mcmc.fit_nuts`)
instead of fitting a guide; the run folder is the same (``metrics.json`` with the sampler's diagnostics,
``posterior.nc`` with ``chain`` dims and the sampler statistics, ``checkpoint.pt`` that ``zoo.load``
(:func:`zoo.infer.checkpoint.load_nuts`) reloads as a :class:`~zoo.infer.mcmc_result.NUTSResult`).  Every
value is checked by :class:`~zoo.infer.mcmc.NUTSConfig` before anything runs; a bad one is a usage error
naming its flag, as are variational-only flags (``--steps``, ``--lr``, ``--batch-size``,
``--guide``, ``--ensemble``) combined with NUTS and NUTS flags without it.
"""

from __future__ import annotations

import argparse

__all__ = ["add_nuts_arguments", "apply_nuts_arguments"]

#: flag -> NUTSConfig field
_FLAGS = {
    "--chains": "chains",
    "--warmup": "warmup",
    "--samples": "samples",
    "--target-accept": "target_accept",
    "--max-tree-depth": "max_tree_depth",
    "--init": "init",
}
_VI_ONLY = {"--steps": "steps", "--lr": "lr", "--batch-size": "batch_size", "--guide": "guide"}


def add_nuts_arguments(f: argparse.ArgumentParser) -> None:
    """Add the ``--inference`` switch and the NUTS settings to the ``zoo fit`` parser."""
    g = f.add_argument_group("NUTS (--inference nuts)")
    g.add_argument(
        "--inference",
        choices=("vi", "nuts"),
        default="vi",
        help="vi: fit the guide (default); nuts: sample the same model with NUTS (test metrics then average "
        "over every posterior draw; --num-samples is not used for them)",
    )
    g.add_argument("--chains", type=int, default=None, help="chains (default 4; in parallel, one per core)")
    g.add_argument("--warmup", type=int, default=None, help="warm-up iterations per chain (default 500)")
    g.add_argument("--samples", type=int, default=None, help="kept draws per chain (default 500)")
    g.add_argument("--target-accept", type=float, default=None, help="target acceptance rate (default 0.8)")
    g.add_argument("--max-tree-depth", type=int, default=None, help="NUTS tree depth limit (default 10)")
    g.add_argument("--init", default=None, help="initial values: uniform (default), median, mean, sample")
    g.add_argument("--no-jit", action="store_true", help="do not compile the potential energy (PyTorch JIT)")
    g.add_argument("--sequential", action="store_true", help="run the chains one after the other")
    g.add_argument("--full-mass", action="store_true", help="adapt a dense mass matrix (small networks)")
    g.add_argument(
        "--hierarchical",
        action="store_true",
        help="sample a prior that has a hierarchical form (horseshoe auxiliaries, collapsed hyper-latents, "
        "N-GIG local scales) in that form (default: its marginal form, the same posterior)",
    )
    g.add_argument(
        "--centered",
        action="store_true",
        help="sample a horseshoe prior in its centered parameterization (the same posterior; default: "
        "as built)",
    )
    g.add_argument(
        "--non-centered",
        action="store_true",
        help="sample a horseshoe prior non-centered (w = sd * beta; with --gibbs NUTS then moves beta)",
    )
    g.add_argument(
        "--gibbs",
        action="store_true",
        help="NUTS within Gibbs: draw the scales of a horseshoe, N-GIG or collapsed prior exactly from their "
        "conditionals between NUTS transitions of the weights (centered, hierarchical form; no JIT)",
    )
    g.add_argument(
        "--interweave",
        action="store_true",
        help="with --gibbs: follow each Gibbs sweep with ancillary (non-centered) moves of the scales that "
        "rescale their weights (Yu & Meng 2011; the horseshoe's and N-GIG's)",
    )


def _given(a: argparse.Namespace, flags: dict[str, str]) -> list[str]:
    return [flag for flag, attr in flags.items() if getattr(a, attr, None) is not None]


def apply_nuts_arguments(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Check the NUTS flags and, for ``--inference nuts``, put the settings into ``a.config.fit_options``."""
    from zoo.infer.mcmc import NUTSConfig

    switches = (
        "--no-jit",
        "--sequential",
        "--full-mass",
        "--hierarchical",
        "--centered",
        "--non-centered",
        "--gibbs",
        "--interweave",
    )
    nuts_flags = _given(a, _FLAGS) + [f for f in switches if getattr(a, f[2:].replace("-", "_"))]
    if a.inference != "nuts":
        if nuts_flags:
            parser.error(f"argument {nuts_flags[0]}: only with --inference nuts")
        return
    vi_flags = _given(a, _VI_ONLY) + (["--ensemble"] if a.ensemble > 1 else [])
    vi_flags += ["--likelihoods"] if getattr(a, "likelihoods", None) else []
    if vi_flags:
        parser.error(f"argument {vi_flags[0]}: a variational setting; not with --inference nuts")
    settings = {field: getattr(a, flag[2:].replace("-", "_")) for flag, field in _FLAGS.items()}
    settings = {k: v for k, v in settings.items() if v is not None}
    if a.no_jit:
        settings["jit_compile"] = False
    if a.sequential:
        settings["parallel"] = False
    if a.full_mass:
        settings["full_mass"] = True
    if a.hierarchical:
        settings["hierarchical"] = True
    if a.centered and a.non_centered:
        parser.error("argument --non-centered: not with --centered")
    if a.centered or a.non_centered:
        settings["centered"] = bool(a.centered)
    if a.gibbs:
        settings.update(gibbs=True, jit_compile=False)
    if a.interweave:
        settings["interweave"] = True
    try:
        NUTSConfig(**settings)
    except (TypeError, ValueError) as e:
        field = str(e).split(" ", 1)[0].rstrip(":").split("=")[0]
        switch = f"--{field.replace('_', '-')}"
        flag = next(
            (k for k, v in _FLAGS.items() if v == field), switch if switch in switches else "--inference"
        )
        parser.error(f"argument {flag}: {e}")
    a.config = a.config.replace(fit_options={**a.config.fit_options, "inference": "nuts", **settings})
