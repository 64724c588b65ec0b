"""Name-based access to every dataset of the zoo: :func:`load_dataset`.

============================  ==========  ================================================================
name                          task        protocol (``split`` = K)
============================  ==========  ================================================================
``diabetes``                  regression  sklearn, random 90/10 split, seed K
``breast-cancer``             binary      sklearn, random 90/10 split, seed K
``digits``                    multiclass  sklearn, random 90/10 split, seed K
``uci:<folder or alias>``     regression  HL&A 2015 split files (airfoil: random 90/10, seed K)
``mnist10k``, ``kmnist10k``   multiclass  fixed 8000/2000 re-split of t10k; only ``split=0``; pixels / 255
``toy-bowtie``                regression  N = 300 drawn once (seed 0), random 90/10, seed K (bow-tie §4.1)
``toy-hs``                    regression  cubic toy, 100 train / 400 test drawn with seed K (horseshoe §6.2.1)
``toy-hs-221``                binary      2-2-1 network labels, N = 1000 (seed 0), random 90/10, seed K
``toy-sinusoid``              regression  200 train / 1000 test drawn with seed K (horseshoe §6.6)
``logistic-sim``              binary      our correlated generator, N = 2000 (seed 0), random 90/10, seed K
``logistic-sim-weak``         binary      the same design with coefficients × 0.4 (weak signal), as above
``logistic-hs18``             binary      LBBNN-flow §5.1 design as described, N = 2000 (seed 0), all rows
                                          train in row order; test: an independent draw (seed 1)
``cv10:<any name above>``     (base)      10-fold CV over all rows of the base set, fold K (LBBNN-flow App. C)
``csv:PATH``, ``npz:PATH``    (table)     own table file (:mod:`zoo.data.tables`), random split, seed
                                          ``table.split_seed + K``
============================  ==========  ================================================================

Synthetic data sets drawn once (``toy-bowtie``, ``toy-hs-221``, ``logistic-sim[-weak]``) keep the same data
for every split, as the papers do (10 random splits of the same data, bow-tie §4; 100 fits to the same data,
LBBNN-flow §5.1). ``standardize`` applies train-statistics standardisation to x for every set except
the images (pixels are only divided by 255).

Sections cited above are those of the bow-tie paper (Sheinkman & Wade 2025, arXiv:2411.11132), the
horseshoe paper (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388) and the LBBNN-flow paper (Skaaret-Lund,
Storvik & Hubin 2023, arXiv:2305.03395).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zoo.data import embedded, images, selection_sim, synthetic
from zoo.data.core import Dataset, check_split, from_arrays
from zoo.data.cv import CV_PREFIX, cross_validation_dataset
from zoo.data.splits import random_split_dataset
from zoo.data.tables import TABLE_FORMATS, TableOptions, load_table
from zoo.data.uci import UCI_FOLDERS, load_uci, resolve_uci_name

__all__ = ["DATASETS", "is_dataset_name", "is_table_name", "load_dataset"]

_TOY_DATA_SEED = 0  # synthetic sets drawn once: the data seed; the split seed is `split`

DATASETS: tuple[str, ...] = (
    "diabetes",
    "breast-cancer",
    "digits",
    *(f"uci:{folder}" for folder in UCI_FOLDERS),
    "mnist10k",
    "kmnist10k",
    "toy-bowtie",
    "toy-hs",
    "toy-hs-221",
    "toy-sinusoid",
    "logistic-sim",
    "logistic-sim-weak",
    "logistic-hs18",
)


def _toy_bowtie(split: int, standardize: bool) -> Dataset:
    x, y = synthetic.make_bowtie_toy(n=300, seed=_TOY_DATA_SEED)
    meta = {
        "source": "zoo.data.synthetic.make_bowtie_toy",
        "noise_var": 0.5,
        "protocol": f"N=300 drawn with seed {_TOY_DATA_SEED} (Sheinkman & Wade 2025, arXiv:2411.11132, §4.1)",
    }
    return random_split_dataset(
        "toy-bowtie", "regression", x, y, split, standardize=standardize, n_classes=None, meta=meta
    )


def _toy_hs(split: int, standardize: bool) -> Dataset:
    xtr, ytr, xte, yte = synthetic.make_cubic_toy(n_train=100, n_test=400, seed=split)
    meta = {
        "source": "zoo.data.synthetic.make_cubic_toy",
        "noise_var": 9.0,
        "protocol": (
            f"cubic toy, 100 train / 400 test drawn i.i.d. with seed {split} (Ghosh et al. 2019, §6.2.1)"
        ),
    }
    return from_arrays(
        "toy-hs", "regression", xtr, ytr, xte, yte, standardize=standardize, split=split, meta=meta
    )


def _toy_221(split: int, standardize: bool) -> Dataset:
    x, y, weights = synthetic.make_221_toy(n=1000, seed=_TOY_DATA_SEED)
    meta = {
        "source": "zoo.data.synthetic.make_221_toy",
        "weights": weights,
        "protocol": (
            f"2-2-1 network labels, N=1000 drawn with seed {_TOY_DATA_SEED} (Ghosh et al. 2019, §6.2.2)"
        ),
    }
    return random_split_dataset(
        "toy-hs-221", "binary", x, y, split, standardize=standardize, n_classes=2, meta=meta
    )


def _toy_sinusoid(split: int, standardize: bool) -> Dataset:
    x, y = synthetic.make_sinusoid_toy(n=1200, seed=split)
    meta = {
        "source": "zoo.data.synthetic.make_sinusoid_toy",
        "noise_var": 0.1,
        "protocol": (
            f"sinusoid, 200 train / 1000 test drawn i.i.d. with seed {split} (Ghosh et al. 2019, §6.6)"
        ),
    }
    return from_arrays(
        "toy-sinusoid",
        "regression",
        x[:200],
        y[:200],
        x[200:],
        y[200:],
        standardize=standardize,
        split=split,
        meta=meta,
    )


def _logistic_sim(split: int, standardize: bool, weak: bool = False) -> Dataset:
    signal = synthetic.LOGISTIC_WEAK_SIGNAL if weak else 1.0
    name = "logistic-sim-weak" if weak else "logistic-sim"
    x, y, beta = synthetic.make_logistic_selection(n=2000, seed=_TOY_DATA_SEED, signal=signal)
    meta = {
        "signal": signal,
        "source": "zoo.data.synthetic.make_logistic_selection",
        "beta_true": beta,
        "intercept": synthetic.LOGISTIC_INTERCEPT,
        "support": synthetic.LOGISTIC_SUPPORT,
        "protocol": (
            f"our correlated logistic generator (not the paper's sim3 file), N=2000 drawn with seed "
            f"{_TOY_DATA_SEED} (Skaaret-Lund et al. 2023, §5.1); beta_true refers to the unstandardised "
            "columns"
        ),
    }
    return random_split_dataset(name, "binary", x, y, split, standardize=standardize, n_classes=2, meta=meta)


def _logistic_hs18(split: int, standardize: bool) -> Dataset:
    """All 2000 rows of the seed-0 draw train (in row order: the trend column makes the order matter for
    fixed-order minibatches); an independent seed-1 draw, standardised with the training statistics, is the
    test set.  ``standardize`` is ignored: the reference preprocessing (continuous columns standardised,
    binary columns raw) is part of the data set."""
    x, y, beta = selection_sim.make_logistic_hs18(n=2000, seed=_TOY_DATA_SEED)
    xtr, stats = selection_sim.standardize_continuous(x)
    xt, yt, _ = selection_sim.make_logistic_hs18(n=2000, seed=_TOY_DATA_SEED + 1)
    xte, _ = selection_sim.standardize_continuous(xt, stats)
    meta = {
        "source": "zoo.data.selection_sim.make_logistic_hs18",
        "beta_true": beta,
        "noise_var": selection_sim.NOISE_VAR,
        "protocol": (
            f"the §5.1 design as described (Skaaret-Lund et al. 2023, arXiv:2305.03395), N=2000 drawn with "
            f"seed {_TOY_DATA_SEED}, all rows train in row order; test: an independent draw (seed "
            f"{_TOY_DATA_SEED + 1}); columns 7-20 standardised with the training mean/sd, 1-6 raw; beta_true "
            "refers to the raw columns"
        ),
    }
    return from_arrays(
        "logistic-hs18", "binary", xtr, y, xte, yt, standardize=False, split=split, n_classes=2,
        true_support=beta != 0, meta=meta,
    )  # fmt: skip


def _images(name: str, split: int, data_dir: str | Path | None) -> Dataset:
    check_split(split, 1)
    return images.load_mnist_like(name, subset="10k", data_dir=data_dir)


_SPLIT_LOADERS: dict[str, Callable[[int, bool], Dataset]] = {
    "diabetes": lambda s, std: embedded.load_diabetes(s, standardize=std),
    "breast-cancer": lambda s, std: embedded.load_breast_cancer(s, standardize=std),
    "digits": lambda s, std: embedded.load_digits(s, standardize=std),
    "toy-bowtie": _toy_bowtie,
    "toy-hs": _toy_hs,
    "toy-hs-221": _toy_221,
    "toy-sinusoid": _toy_sinusoid,
    "logistic-sim": _logistic_sim,
    "logistic-sim-weak": lambda s, std: _logistic_sim(s, std, weak=True),
    "logistic-hs18": _logistic_hs18,
}


def _table(
    name: str, split: int, standardize: bool, table: TableOptions | Mapping[str, Any] | None
) -> Dataset:
    """``csv:PATH`` / ``npz:PATH``: split ``K`` uses seed ``split_seed + K``; inputs are standardised only
    when both ``standardize`` and ``table.standardize`` say so.  ``meta["table_options"]`` records the
    options as given (with the ``standardize`` applied), ``meta["split_seed"]`` the effective seed."""
    fmt, _, path = name.partition(":")
    if not path:
        raise ValueError(f"name={name!r}: give the file after the prefix, e.g. {fmt}:data/my_table.{fmt}")
    if table is None:
        opts = TableOptions()
    elif isinstance(table, TableOptions):
        opts = table
    elif isinstance(table, Mapping):
        opts = TableOptions.from_dict(table, what="table")
    else:
        raise TypeError(f"table must be a TableOptions or a mapping, got {type(table).__name__}")
    opts = opts.replace(standardize=bool(standardize and opts.standardize))
    ds = load_table(path, opts.replace(split_seed=opts.split_seed + split), fmt=fmt)
    ds.meta["table_options"] = opts.to_dict()  # as given: the effective seed is meta["split_seed"]
    return ds


def is_table_name(name: str) -> bool:
    """Whether ``name`` names a table file (``csv:PATH`` or ``npz:PATH``)."""
    return isinstance(name, str) and name.strip().partition(":")[0] in TABLE_FORMATS


def is_dataset_name(name: object) -> bool:
    """Whether ``name`` has a form :func:`load_dataset` takes (without loading anything): a name from
    :data:`DATASETS`, ``uci:<folder or alias>``, ``cv10:<tabular name>`` or a table file ``csv:PATH`` /
    ``npz:PATH``."""
    if not isinstance(name, str):
        return False
    key = name.strip()
    if key in DATASETS or is_table_name(key):
        return True
    if key.startswith("uci:"):
        try:
            resolve_uci_name(key[len("uci:") :])
        except ValueError:
            return False
        return True
    if key.startswith(CV_PREFIX):
        base = key[len(CV_PREFIX) :]
        tabular = not base.startswith(CV_PREFIX) and base not in ("mnist10k", "kmnist10k")
        return tabular and is_dataset_name(base)
    return False


def load_dataset(
    name: str,
    split: int = 0,
    *,
    data_dir: str | Path | None = None,
    standardize: bool = True,
    table: TableOptions | Mapping[str, Any] | None = None,
) -> Dataset:
    """Load split ``split`` of dataset ``name`` (see the module table and :data:`DATASETS`).

    Args:
        name: a name from :data:`DATASETS`; UCI sets also by alias, e.g. ``"uci:boston"``; an own table file
            as ``"csv:PATH"`` or ``"npz:PATH"`` (relative paths from the working directory).
        split: non-negative int; see the table for its meaning per dataset.
        data_dir: data root for UCI and image sets (default ``$ZOO_DATA_DIR``).
        standardize: standardise x with train statistics (ignored for the image sets).  For a table file
            the inputs are standardised only when both this and ``table.standardize`` are true: either
            ``False`` turns it off.
        table: :class:`~zoo.data.tables.TableOptions` (or a mapping of them) for a table file: target column,
            task, test fraction, split seed, true support; default ``TableOptions()`` (last column the target,
            task inferred, 10 % test).  Only for ``csv:``/``npz:`` names.

    Raises:
        ValueError: unknown ``name`` (the message lists the valid names) or ``split`` out of range; a table
            file with bad contents (see :func:`zoo.data.load_table`); ``table`` given for another name.
        TypeError: ``name`` is not a str or ``split`` is not an int.
        FileNotFoundError: the data root or a file is missing (UCI, image sets and table files).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    split = check_split(split)
    key = name.strip()
    if is_table_name(key):
        return _table(key, split, standardize, table)
    if table is not None and not key.startswith(CV_PREFIX):
        raise ValueError(f"table: table options apply to csv:PATH / npz:PATH names only, got name={name!r}")
    if key.startswith(CV_PREFIX):
        base = key[len(CV_PREFIX) :]
        if base.startswith(CV_PREFIX) or base in ("mnist10k", "kmnist10k"):
            raise ValueError(f"name={name!r}: cross-validation needs a tabular base set, got {base!r}")
        return cross_validation_dataset(
            base,
            split,
            lambda b: load_dataset(b, 0, data_dir=data_dir, standardize=False, table=table),
            standardize=standardize,
        )
    if key.startswith("uci:"):
        return load_uci(key[len("uci:") :], split, data_dir=data_dir, standardize=standardize)
    if key in ("mnist10k", "kmnist10k"):
        return _images(key[: -len("10k")], split, data_dir)
    if key in _SPLIT_LOADERS:
        return _SPLIT_LOADERS[key](split, standardize)
    raise ValueError(
        f"unknown dataset name={name!r}; valid names: {', '.join(DATASETS)} "
        "(UCI sets also as uci:<alias>, e.g. uci:boston; any tabular set as cv10:<name>; "
        "an own table file as csv:PATH or npz:PATH)"
    )
