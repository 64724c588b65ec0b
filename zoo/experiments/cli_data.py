"""Command-line options for the data of a run: a registered dataset or an own table file
(``--dataset csv:PATH`` / ``npz:PATH``, read by :func:`zoo.data.load_table`), shared by ``zoo fit`` and any
subcommand that fits on one dataset.

Flags (the table flags only with a ``csv:``/``npz:`` dataset):

* ``--target COLUMN``: the target column, a name or an integer index (negative from the end); default the
  last column; for an ``.npz`` file with arrays ``x`` and ``y`` leave it out;
* ``--task {regression,binary,multiclass}``: default inferred from the target (:data:`TASK_RULE`);
  ``zoo fit`` prints the task it uses (:func:`task_line`) and writes ``task``/``n_classes`` to metrics.json;
* ``--test-frac F`` (default 0.1) and ``--split-seed S`` (default 0): the random train/test split; split
  index ``--split K`` uses seed ``S + K`` (metrics.json records both and the effective ``split_seed``);
* ``--true-support COLS``: comma-separated columns known to matter (TPR/FPR selection metrics), names or
  integer file-column indices counted as ``--target`` counts them (the target's column included);
* ``--no-standardize``: keep the inputs as they are (default: standardise with the train part's mean and
  standard deviation); applies to registered datasets too.

Every problem is a usage error (exit 2) before anything is trained or written, naming the one flag at
fault when the error says which (``--target``, ``--true-support``, ``--test-frac``; a file that cannot be
read is ``--dataset``), else the table flags together.
"""

from __future__ import annotations

import argparse
import re

from zoo.data import Dataset, TableOptions, is_table_name, load_dataset

__all__ = ["add_data_arguments", "table_options", "load_cli_dataset", "task_line", "TABLE_FLAGS", "TASK_RULE"]

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
#: the rule of :func:`zoo.data.checks.infer_task`, as --help and the README state it
TASK_RULE = (
    "inferred from the target: non-integer values or more than 20 distinct integers: regression; two "
    "distinct values: binary; else multiclass (labels 0..C-1)"
)
#: the first word of a table error -> the one flag at fault
_ERROR_FLAGS = {"target": "--target", "true_support": "--true-support", "test_frac": "--test-frac"}
#: what the file itself is wrong about (its format, a cell): --dataset's fault, whatever the other flags
_FILE_ERRORS = (
    "not a text/CSV file",
    "archive",
    "is not numeric",
    "missing or non-finite",
    "header",
    "fields",
)


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--target``, ``--task``, ``--test-frac``, ``--split-seed``, ``--true-support`` (own tables) and
    ``--no-standardize`` to ``parser`` (which has ``--dataset``, ``--split`` and ``--data-dir``)."""
    g = parser.add_argument_group("own data (--dataset csv:PATH or npz:PATH)")
    g.add_argument(
        "--target",
        default=None,
        metavar="COLUMN",
        help="target column: a name or an integer index (default: the last column; leave it out for an "
        ".npz file with arrays x and y); a CSV needs a header row and '.' as the decimal point",
    )
    g.add_argument(
        "--task", choices=TASKS, default=None, help=f"default: {TASK_RULE}; zoo fit prints the task it uses"
    )
    g.add_argument("--test-frac", type=float, default=None, help="test fraction in (0, 1) (default 0.1)")
    g.add_argument(
        "--split-seed", type=int, default=None, help="seed of the random split (default 0; --split K adds K)"
    )
    g.add_argument(
        "--true-support",
        default=None,
        metavar="COLS",
        help="comma-separated columns known to matter, for the TPR/FPR selection metrics: names, or integer "
        "file-column indices counted as --target counts them (the target's column included)",
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
    try:
        return load_dataset(
            a.dataset, a.split, data_dir=a.data_dir, standardize=not a.no_standardize, table=table
        )
    except (ValueError, TypeError, FileNotFoundError) as e:
        parser.error(f"argument {error_flag(e, table is not None)}: {e}")


def error_flag(error: Exception, table: bool) -> str:
    """The flag(s) a data error is about: the one its first word names (``target:``, ``true_support:``,
    ``test_frac=``), ``--dataset`` for a file that is missing or unreadable as a table, else the flags that
    shape the data together."""
    if not table:
        return "--dataset/--split"
    if isinstance(error, FileNotFoundError):
        return "--dataset"
    text = str(error)
    word = re.split(r"[\W]", text, maxsplit=1)[0]
    if word in _ERROR_FLAGS:
        return _ERROR_FLAGS[word]
    if word == "path" or any(m in text for m in _FILE_ERRORS):
        return "--dataset"
    return "--dataset/--target/--task/--test-frac/--split-seed"


def task_line(ds: Dataset, given: str | None) -> str:
    """``task: multiclass (6 classes, inferred from the target; pass --task to override)`` for an own
    table (``given``: the ``--task`` flag), with the columns a ``--true-support`` selected."""
    classes = f"{ds.n_classes} classes, " if ds.task == "multiclass" else ""
    how = "given by --task" if given is not None else "inferred from the target; pass --task to override"
    line = f"task: {ds.task} ({classes}{how})"
    names = ds.meta.get("true_support_names")
    if names is not None:
        line += f"; true support: {', '.join(map(str, names))}"
    return line
