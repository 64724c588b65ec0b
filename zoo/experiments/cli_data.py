"""Command-line options for the data of a run: a registered dataset or an own table file
(``--dataset csv:PATH`` / ``npz:PATH``, read by :func:`zoo.data.load_table`), shared by ``zoo fit`` and any
subcommand that fits on one dataset.

Flags (the table flags only with a ``csv:``/``npz:`` dataset):

* ``--target COLUMN``: the target column, a name or an integer index (negative from the end); default the
  last column; for an ``.npz`` file with arrays ``x`` and ``y`` leave it out;
* ``--task {regression,binary,multiclass}``: default inferred from the target;
* ``--test-frac F`` (default 0.1) and ``--split-seed S`` (default 0): the random train/test split; split
  index ``--split K`` uses seed ``S + K``;
* ``--true-support COLS``: comma-separated feature columns known to matter (TPR/FPR selection metrics);
* ``--no-standardize``: keep the inputs as they are (default: standardise with the train part's mean and
  standard deviation); applies to registered datasets too.

Every problem is a usage error (exit 2) naming the flag, before anything is trained or written.
"""

from __future__ import annotations

import argparse
import re

from zoo.data import Dataset, TableOptions, is_table_name, load_dataset

__all__ = ["add_data_arguments", "table_options", "load_cli_dataset", "TABLE_FLAGS"]

TASKS = ("regression", "binary", "multiclass")
#: TableOptions field -> its flag (the namespace attribute is the field name)
TABLE_FLAGS = {
    "target": "--target",
    "task": "--task",
    "test_frac": "--test-frac",
    "split_seed": "--split-seed",
    "true_support": "--true-support",
}
_INT = re.compile(r"^-?\d+$")


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--target``, ``--task``, ``--test-frac``, ``--split-seed``, ``--true-support`` (own tables) and
    ``--no-standardize`` to ``parser`` (which has ``--dataset``, ``--split`` and ``--data-dir``)."""
    g = parser.add_argument_group("own data (--dataset csv:PATH or npz:PATH)")
    g.add_argument(
        "--target",
        default=None,
        metavar="COLUMN",
        help="target column: a name or an integer index (default: the last column; leave it out for an "
        ".npz file with arrays x and y)",
    )
    g.add_argument("--task", choices=TASKS, default=None, help="default: inferred from the target")
    g.add_argument("--test-frac", type=float, default=None, help="test fraction in (0, 1) (default 0.1)")
    g.add_argument(
        "--split-seed", type=int, default=None, help="seed of the random split (default 0; --split K adds K)"
    )
    g.add_argument(
        "--true-support",
        default=None,
        metavar="COLS",
        help="comma-separated feature columns (names or indices) known to matter: TPR/FPR metrics",
    )
    parser.add_argument(
        "--no-standardize",
        action="store_true",
        help="do not standardise the inputs (default: with the train part's mean and standard deviation)",
    )


def _column(text: str, numeric_only: bool) -> str | int:
    text = text.strip()
    return int(text) if numeric_only and _INT.match(text) else text


def table_options(parser: argparse.ArgumentParser, a: argparse.Namespace) -> TableOptions | None:
    """The :class:`~zoo.data.TableOptions` of ``a`` for a table dataset, else ``None`` (then giving a table
    flag is a usage error)."""
    given = [flag for field, flag in TABLE_FLAGS.items() if getattr(a, field) is not None]
    if not is_table_name(a.dataset):
        if given:
            parser.error(
                f"argument {given[0]}: applies only to --dataset csv:PATH or npz:PATH, not {a.dataset!r}"
            )
        return None
    npz = a.dataset.strip().startswith("npz:")  # an .npz table's columns have no names: indices only
    values = {
        "target": None if a.target is None else _column(a.target, npz),
        "task": a.task,
        "test_frac": a.test_frac,
        "split_seed": a.split_seed,
        "true_support": None
        if a.true_support is None
        else [_column(c, npz) for c in a.true_support.split(",") if c.strip()],
    }
    try:
        return TableOptions(
            **{k: v for k, v in values.items() if v is not None}, standardize=not a.no_standardize
        )
    except (TypeError, ValueError) as e:
        word = re.split(r"\W", str(e), maxsplit=1)[0]
        parser.error(f"argument {TABLE_FLAGS.get(word, '--dataset')}: {e}")


def load_cli_dataset(parser: argparse.ArgumentParser, a: argparse.Namespace) -> Dataset:
    """Load ``a.dataset`` split ``a.split`` (:func:`zoo.data.load_dataset`, with :func:`table_options` for
    a table file); any problem is ``parser.error`` naming the flags."""
    table = table_options(parser, a)
    flags = "--dataset/--target/--task/--test-frac/--split-seed" if table is not None else "--dataset/--split"
    try:
        return load_dataset(
            a.dataset, a.split, data_dir=a.data_dir, standardize=not a.no_standardize, table=table
        )
    except (ValueError, TypeError, FileNotFoundError) as e:
        parser.error(f"argument {flags}: {e}")
