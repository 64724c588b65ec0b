"""Own data from a table file: :func:`load_table` reads a ``.csv`` or ``.npz`` file into a validated
:class:`~zoo.data.core.Dataset` with a seeded random train/test split; :class:`TableOptions` holds the
settings.

``zoo.data.load_dataset("csv:PATH")`` / ``"npz:PATH"`` (and so ``zoo fit``, ``fit_on_dataset``, protocols and
``zoo bench``) go through here: the split index ``K`` of a run uses split seed ``split_seed + K``.

* **CSV**: UTF-8 text with a header row naming the columns (required: a first row of numbers is refused);
  the delimiter (``,``, ``;`` or tab) is detected; ``.`` is the decimal point (``1,95`` and thousands
  separators such as ``1,822.79`` are not numbers).  Every feature column must be numeric (an error names
  the first that is not); empty cells and ``NA``/``NaN`` are missing values, which are an error naming the
  column and how many (data rows are counted from 1, the header not included).
* **NPZ**: an ``np.savez`` archive (``allow_pickle=False``: object arrays are refused) with arrays ``x``
  (``(n, d)``) and ``y`` (``(n,)`` or ``(n, k)``), or a single 2-D array whose column ``target`` is the
  target; rows are counted from 0, as numpy indexes them.
* ``target`` is a column name (CSV) or an integer column index (negative counts from the end); default the
  last column.  ``true_support`` names the relevant feature columns the same way: an integer is a **file
  column** index, counted over all columns with the target included, exactly as ``target`` (with ``x``/``y``
  arrays the file columns are those of ``x``).  :func:`zoo.data.from_arrays`, which has no file, takes
  feature indices; ``Dataset.meta["true_support_names"]`` names the columns a table's support selected.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import numbers
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from zoo.core.config import Config
from zoo.core.validation import check_bool, check_positive_int, check_probability
from zoo.data import checks
from zoo.data.core import Dataset, from_arrays, random_split

__all__ = ["TABLE_FORMATS", "TableOptions", "load_table", "table_format"]

logger = logging.getLogger(__name__)

TABLE_FORMATS = ("csv", "npz")
"""Table formats, also the dataset-name prefixes ``csv:PATH`` and ``npz:PATH`` of ``load_dataset``."""

_MISSING = {"", "na", "nan", "n/a", "null", "none", "?"}


def _check_column_ref(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, str | numbers.Integral):
        raise TypeError(f"{name} must be a column name (str) or an integer column index, got {value!r}")
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{name} must not be an empty column name")


@dataclasses.dataclass(frozen=True)
class TableOptions(Config):
    """How to read a table file into a dataset (:func:`load_table`; ``zoo fit --dataset csv:PATH``).

    Attributes:
        target: the target column, by name (CSV) or integer index (negative from the end); ``None``: the last
            column.  Must be ``None`` for an NPZ file with ``x`` and ``y`` arrays.
        task: ``"regression"``, ``"binary"``, ``"multiclass"``, or ``None`` to infer it from the target
            (non-integer or more than 20 distinct values: regression; two values: binary; else multiclass).
        test_frac: fraction of rows in the test part, in ``(0, 1)``; both parts must end up non-empty.
        split_seed: seed of the random split (``np.random.default_rng(split_seed).permutation``).
        standardize: standardise the inputs with the train part's statistics (see
            :func:`zoo.data.from_arrays`, which also records the regression targets' train mean/std).
        true_support: the feature columns that truly matter, for the variable-selection metrics TPR/FPR;
            names, or integer **file column** indices counted as ``target`` counts them (over all the
            file's columns, the target's included: in columns ``a, y, b`` with target ``y``, ``b`` is 2);
            ``None``: unknown.

    ``load_dataset(name, standardize=False, table=TableOptions(standardize=True))``: the inputs are
    standardized only when both say so, so either ``False`` turns it off.
    """

    target: str | int | None = None
    task: str | None = None
    test_frac: float = 0.1
    split_seed: int = 0
    standardize: bool = True
    true_support: tuple[str | int, ...] | None = None

    def __post_init__(self) -> None:
        ts = self.true_support
        if isinstance(ts, Sequence) and not isinstance(ts, str):
            object.__setattr__(self, "true_support", tuple(ts))
        super().__post_init__()

    def validate(self) -> None:
        if self.target is not None:
            _check_column_ref("target", self.target)
        if self.task is not None:
            checks.check_task(self.task)
        check_probability("test_frac", self.test_frac)
        check_positive_int("split_seed", self.split_seed, allow_zero=True)
        check_bool("standardize", self.standardize)
        if self.true_support is not None:
            if not isinstance(self.true_support, tuple):
                raise TypeError(
                    f"true_support must be a list of columns, got {type(self.true_support).__name__}"
                )
            for ref in self.true_support:
                _check_column_ref("true_support", ref)


def table_format(path: str | os.PathLike) -> str:
    """``"csv"`` or ``"npz"`` from the file's suffix."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in TABLE_FORMATS:
        raise ValueError(f"path: a table file must end in .csv or .npz, got {str(path)!r}")
    return fmt


def _parse_column(values: list[str], column: str, path: Path, role: str) -> np.ndarray:
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        v = v.strip()
        if v.lower() in _MISSING:
            out[i] = np.nan
            continue
        try:
            out[i] = float(v)
        except ValueError:
            raise ValueError(
                f"{path}: {role} column {column!r} is not numeric (data row {i + 1} holds {v!r}); "
                + _number_hint(v, role)
            ) from None
    return out


_THOUSANDS = re.compile(r"^[+-]?\d{1,3}([,' ]\d{3})+(\.\d*)?$")
_DECIMAL_COMMA = re.compile(r"^[+-]?\d*,\d+$")


def _number_hint(value: str, role: str) -> str:
    """What to do about a cell that is not a number: number formats first, then labels or encodings."""
    if _THOUSANDS.match(value):
        return "remove the thousands separators (numbers are read as 1822.79, not 1,822.79)"
    if _DECIMAL_COMMA.match(value):
        return "'.' is the decimal point: write 1.95, not 1,95"
    if role == "target":
        return (
            "class labels must be integers 0..C-1 (e.g. y = np.unique(y, return_inverse=True)[1]); a "
            "regression target must hold plain numbers"
        )
    return "encode it as numbers or drop it"


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _read_text(path: Path) -> str:
    """The file as UTF-8 text; a binary file (an archive, an image, ...) is a ``ValueError`` naming it."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not a text/CSV file (byte {exc.object[exc.start]:#04x} at offset {exc.start} is not "
            "UTF-8 text); give a CSV file with a header row, or an .npz archive as npz:PATH"
        ) from None
    if "\x00" in text:
        raise ValueError(
            f"{path}: not a text/CSV file (it holds NUL bytes); give a CSV file with a header row"
        )
    return text


def _read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    """The header's column names and the data rows (as strings)."""
    lines = [line for line in _read_text(path).splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path}: the file is empty")
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(lines[0], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    rows = list(csv.reader(lines, dialect))
    header = [c.strip() for c in rows[0]]
    if all(_is_number(c) for c in header):
        raise ValueError(
            f"{path}: the first row looks like data ({rows[0]}); a header row naming the columns is required"
        )
    if len(header) < 2:
        raise ValueError(f"{path}: need at least two columns (features and a target), found {header}")
    if len(rows) < 2:
        raise ValueError(f"{path}: the file has a header but no data rows")
    for i, row in enumerate(rows[1:]):
        if len(row) != len(header):
            raise ValueError(f"{path}: data row {i + 1} has {len(row)} fields, the header {len(header)}")
    return header, rows[1:]


# A reader returns (x, y, feature names, target name, the column names `target`/`true_support` refer to,
# the target's position among them or None when the target is not one of them).
_Columns = tuple[np.ndarray, np.ndarray, list[str], str, list[str], int | None]


def _csv_columns(path: Path, options: TableOptions) -> _Columns:
    header, body = _read_csv(path)
    t = checks.feature_index(-1 if options.target is None else options.target, header, "target")
    features = [j for j in range(len(header)) if j != t]
    x = np.column_stack([_parse_column([r[j] for r in body], header[j], path, "feature") for j in features])
    y = _parse_column([r[t] for r in body], header[t], path, "target")
    return x, y, [header[j] for j in features], header[t], header, t


def _npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive, read without unpickling anything; anything else is a
    ``ValueError`` naming the file and what it is."""
    with open(path, "rb") as fh:
        head = fh.read(6)
    if head == b"\x93NUMPY":
        raise ValueError(
            f"{path}: not an .npz archive but a single .npy array; save it with np.savez(path, x=x, y=y) "
            "(or one 2-D array, np.savez(path, table))"
        )
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path}: not an .npz archive (np.savez / np.savez_compressed writes one); a text table is read "
            "as csv:PATH"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except ValueError as exc:  # object arrays: numpy would suggest an unsafe pickle load
        raise ValueError(
            f"{path}: an array of the archive holds Python objects, not numbers; store numeric arrays"
        ) from exc
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npz archive ({exc})") from exc


def _npz_columns(path: Path, options: TableOptions) -> _Columns:
    arrays = _npz_arrays(path)
    if "x" in arrays and "y" in arrays:
        if options.target is not None:
            raise ValueError(f"target: {path} holds arrays 'x' and 'y', so target must be None")
        x, y = arrays["x"], arrays["y"]
        x = x[:, None] if x.ndim == 1 else x
        if x.ndim != 2:
            raise ValueError(f"{path}: array 'x' must be 2-D (rows, features), got shape {x.shape}")
        names = [f"x[:, {j}]" for j in range(x.shape[1])]
        return x, y, names, "y", names, None
    if len(arrays) != 1:
        raise ValueError(f"{path}: expected arrays 'x' and 'y' or a single 2-D array, found {sorted(arrays)}")
    ((key, table),) = arrays.items()
    if table.ndim != 2 or table.shape[1] < 2:
        raise ValueError(f"{path}: array {key!r} must be 2-D with at least two columns, got {table.shape}")
    if isinstance(options.target, str):
        raise ValueError(
            f"target: the columns of array {key!r} in {path} have no names; give an integer index"
        )
    names = [f"{key}[:, {j}]" for j in range(table.shape[1])]
    t = checks.feature_index(-1 if options.target is None else options.target, names, "target")
    features = [j for j in range(table.shape[1]) if j != t]
    return table[:, features], table[:, t], [names[j] for j in features], names[t], names, t


def _support_indices(refs: tuple[str | int, ...], columns: list[str], t: int | None) -> list[int]:
    """Feature indices of the ``true_support`` column references (the target at position ``t`` is not a
    feature, so later columns move down by one)."""
    out = []
    for ref in refs:
        j = checks.feature_index(ref, columns, "true_support")
        if j == t:
            raise ValueError(
                f"true_support: column {ref!r} is the target, not a feature (integer indices count the "
                "file's columns, the target's included, as target does)"
            )
        out.append(j - 1 if t is not None and j > t else j)
    return out


def _check_values(
    path: Path, x: np.ndarray, y: np.ndarray, features: list[str], target: str, fmt: str = "csv"
) -> None:
    """Numeric arrays of equal length without missing values; errors name the column and the rows (a CSV's
    data rows from 1, an NPZ array's rows from 0)."""
    for what, arr in (("inputs", x), ("target", y)):
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"{path}: the {what} must be numeric, got dtype {arr.dtype}")
    if y.ndim == 0 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"{path}: the target has {y.shape[0] if y.ndim else 0} rows, the inputs {x.shape[0]}"
        )
    y_cols = y.reshape(len(y), -1).T
    for name, col in [*zip(features, x.T, strict=True), *((target, c) for c in y_cols)]:
        bad = ~np.isfinite(col.astype(np.float64))
        if bad.any():
            first = 1 if fmt == "csv" else 0
            rows = (np.flatnonzero(bad)[:5] + first).tolist()
            what = "data rows" if fmt == "csv" else "rows (0-based)"
            raise ValueError(
                f"{path}: column {name!r} has {int(bad.sum())} missing or non-finite value(s) ({what} "
                f"{rows}{', ...' if bad.sum() > 5 else ''}); drop or impute them before training"
            )


def load_table(
    path: str | os.PathLike, options: TableOptions | None = None, *, fmt: str | None = None
) -> Dataset:
    """Read a ``.csv`` or ``.npz`` table (see the module docstring) into a validated :class:`Dataset`.

    The rows are split at random (``options.split_seed``, ``options.test_frac``); the dataset is named
    ``csv:<stem>`` / ``npz:<stem>``, ``split`` is the split seed, and ``meta`` records the file, the feature
    and target names and the train/test row indices.  ``fmt`` overrides the format taken from the suffix.

    Raises:
        FileNotFoundError: no such file.
        ValueError: naming the option, column or array at fault (see :func:`zoo.data.from_arrays` for the
            checks of the values), before any training.
    """
    options = TableOptions() if options is None else options
    if not isinstance(options, TableOptions):
        raise TypeError(f"options must be a TableOptions, got {type(options).__name__}")
    path = Path(path).expanduser()
    fmt = table_format(path) if fmt is None else fmt
    if fmt not in TABLE_FORMATS:
        raise ValueError(f"fmt must be one of {TABLE_FORMATS}, got {fmt!r}")
    if not path.is_file():
        raise FileNotFoundError(f"path: no table file {str(path)!r}")
    reader = _csv_columns if fmt == "csv" else _npz_columns
    x, y, features, target, columns, t = reader(path, options)
    _check_values(path, x, y, features, target, fmt)
    n = x.shape[0]
    n_test = n - int(round((1.0 - options.test_frac) * n))
    if n < 2 or not 0 < n_test < n:
        raise ValueError(
            f"test_frac={options.test_frac} leaves an empty train or test part for {n} row(s) of {path}"
        )
    task = options.task if options.task is not None else checks.infer_task(y, f"target column {target!r}")
    support = None
    if options.true_support is not None:
        support = _support_indices(options.true_support, columns, t)
    tr, te = random_split(n, seed=options.split_seed, test_fraction=options.test_frac)
    logger.info("table %s: %d rows, %d features, task %s", path, n, x.shape[1], task)
    try:
        return from_arrays(
            f"{fmt}:{path.stem}",
            task,
            x[tr],
            y[tr],
            x[te],
            y[te],
            standardize=options.standardize,
            split=options.split_seed,
            true_support=support,
            meta={
                **_meta(path, options, features, target, tr, te),
                **({} if support is None else {"true_support_names": [features[j] for j in support]}),
            },
        )
    except ValueError as exc:
        raise ValueError(f"{path} (target column {target!r}): {exc}") from exc


def _meta(
    path: Path, options: TableOptions, features: list[str], target: str, tr: np.ndarray, te: np.ndarray
) -> dict:
    return {
        "source": str(path.resolve()),
        "feature_names": features,
        "target": target,
        "train_index": tr,
        "test_index": te,
        "protocol": (
            f"own table {path.name}: random split np.random.default_rng({options.split_seed}).permutation, "
            f"first round({1 - options.test_frac:g} N) rows train"
        ),
        "table_options": options.to_dict(),
        "split_seed": options.split_seed,
    }
