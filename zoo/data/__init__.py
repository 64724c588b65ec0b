"""Datasets of the zoo: UCI regression (HL&A 2015 splits), scikit-learn sets, MNIST-like images, paper toys.

Entry point: :func:`load_dataset` (names in :data:`DATASETS`), returning a :class:`Dataset`. Real data is read
from the shared data root given by ``data_dir=`` or ``$ZOO_DATA_DIR`` (see ``shared/data/MANIFEST.md``).
"""

from zoo.data.core import Dataset, data_root, from_arrays, random_split, standardize
from zoo.data.embedded import load_breast_cancer, load_diabetes, load_digits
from zoo.data.images import SPLIT_SEED_10K, load_mnist_like, load_ood_images, read_idx
from zoo.data.registry import DATASETS, load_dataset
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
    "data_root",
    "from_arrays",
    "load_breast_cancer",
    "load_dataset",
    "load_diabetes",
    "load_digits",
    "load_mnist_like",
    "load_ood_images",
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
