"""Datasets of the zoo: UCI regression (HL&A 2015 splits), scikit-learn sets, MNIST-like images, paper toys.

Entry point: :func:`load_dataset` (names in :data:`DATASETS`), returning a :class:`Dataset`. Real data is read
from the data root given by ``data_dir=`` or ``$ZOO_DATA_DIR`` (layout: ``zoo.data.core.EXPECTED_LAYOUT``).

Own data, validated before any training (non-finite values, empty parts, labels not integers in ``0..C-1``,
``n_classes``; see :mod:`zoo.data.checks`):

* from arrays: ``from_arrays(name, task, x_train, y_train, x_test, y_test, standardize=True,
  n_classes=None, true_support=None)`` (``task=None`` infers it; ``true_support``, a mask or index list of the
  relevant inputs, turns on the TPR/FPR selection metrics of models that select variables);
* from a file: ``load_table("data.csv", TableOptions(target="y", task=None, test_frac=0.1, split_seed=0,
  standardize=True))``, or ``load_dataset("csv:data.csv", split, table=TableOptions(...))`` wherever a dataset
  name is taken (``.npz``: arrays ``x`` and ``y``, or one 2-D array with ``target`` a column index).
"""

from zoo.data.checks import infer_task
from zoo.data.core import Dataset, data_root, from_arrays, random_split, standardize
from zoo.data.embedded import load_breast_cancer, load_diabetes, load_digits
from zoo.data.images import SPLIT_SEED_10K, load_mnist_like, load_ood_images, read_idx
from zoo.data.registry import DATASETS, is_dataset_name, is_table_name, load_dataset
from zoo.data.synthetic import (
    LOGISTIC_BETA,
    LOGISTIC_INTERCEPT,
    LOGISTIC_SUPPORT,
    LOGISTIC_WEAK_SIGNAL,
    TOY_221_WEIGHTS,
    make_221_toy,
    make_bowtie_toy,
    make_cubic_toy,
    make_logistic_selection,
    make_sinusoid_toy,
)
from zoo.data.tables import TableOptions, load_table
from zoo.data.uci import UCI_ALIASES, load_uci

__all__ = [
    "DATASETS",
    "LOGISTIC_BETA",
    "LOGISTIC_INTERCEPT",
    "LOGISTIC_SUPPORT",
    "LOGISTIC_WEAK_SIGNAL",
    "SPLIT_SEED_10K",
    "TOY_221_WEIGHTS",
    "UCI_ALIASES",
    "Dataset",
    "TableOptions",
    "data_root",
    "from_arrays",
    "infer_task",
    "is_dataset_name",
    "is_table_name",
    "load_breast_cancer",
    "load_dataset",
    "load_diabetes",
    "load_digits",
    "load_mnist_like",
    "load_ood_images",
    "load_table",
    "load_uci",
    "make_221_toy",
    "make_bowtie_toy",
    "make_cubic_toy",
    "make_logistic_selection",
    "make_sinusoid_toy",
    "random_split",
    "read_idx",
    "standardize",
]
