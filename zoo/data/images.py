"""MNIST-like image sets in idx format (MNIST, KMNIST; Fashion-MNIST if its images are supplied).

The shared data root has only the official **test** images (``t10k``) of MNIST and KMNIST
(``MANIFEST.md`` §3); the 60k training images are not available. Two protocols are therefore offered:

* ``subset="10k"`` (reduced experiments, tests): the 10 000 official test images are re-split into a **fixed**
  8000 train / 2000 test split: ``perm = np.random.default_rng(SPLIT_SEED_10K).permutation(10000)``,
  ``train = perm[:8000]``, ``test = perm[8000:]`` with ``SPLIT_SEED_10K = 12345``. The same permutation is
  used for every dataset. Results on it are **not** comparable with the standard 60k/10k numbers of the LBBNN
  (Hubin & Storvik 2019, arXiv:1903.07594, §5; Skaaret-Lund, Storvik & Hubin 2023, arXiv:2305.03395, §5.3)
  or horseshoe (Ghosh, Yao & Doshi-Velez 2019, arXiv:1705.10388, §6.3.1) papers.
* ``subset="60k"`` (the papers' protocol): the official ``train-*`` (60 000) and ``t10k-*`` (10 000) files,
  read from ``<root>/<name>/`` where the user has put them.

Pixels are flattened to 784 ``float64`` values divided by ``scale`` (255 by default; the horseshoe paper uses
126, Ghosh et al. 2019, §6.3.1) and are never standardised.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from zoo.data.core import DATA_ENV_VAR, Dataset, data_root, from_arrays

__all__ = [
    "IMAGE_SETS",
    "N_TEST_10K",
    "N_TRAIN_10K",
    "SPLIT_SEED_10K",
    "load_mnist_like",
    "load_ood_images",
    "read_idx",
    "split_10k",
]

IMAGE_SETS: tuple[str, ...] = ("mnist", "kmnist", "fashion_mnist")
SPLIT_SEED_10K = 12345
"""Seed of the fixed 8000/2000 re-split of the 10k official test images."""
N_TRAIN_10K = 8000
N_TEST_10K = 2000

_MAGIC_LABELS = 0x801  # unsigned byte, 1-D
_MAGIC_IMAGES = 0x803  # unsigned byte, 3-D
_OFFICIAL = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an idx file (LeCun's MNIST format), gzipped or not (detected from the content).

    Only unsigned-byte files are accepted: magic ``0x00000801`` (labels, 1-D) or ``0x00000803``
    (images, ``(n, rows, cols)``).

    Returns:
        A ``uint8`` array with the shape given in the header.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: malformed file (bad gzip stream, wrong magic, truncated header or payload size that does
            not match the header); the message names the path.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise ValueError(f"idx file {str(path)!r}: corrupt gzip stream ({err})") from err
    if len(raw) < 4:
        raise ValueError(f"idx file {str(path)!r}: too short for an idx header ({len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    if magic not in (_MAGIC_LABELS, _MAGIC_IMAGES):
        raise ValueError(
            f"idx file {str(path)!r}: bad magic number 0x{magic:08x}, expected 0x00000801 (labels) "
            "or 0x00000803 (images)"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"idx file {str(path)!r}: truncated header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(shape, dtype=np.int64))
    if len(raw) - header != expected:
        raise ValueError(
            f"idx file {str(path)!r}: header says shape {shape} ({expected} bytes) but the payload has "
            f"{len(raw) - header} bytes"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape).copy()


def _check_name(name: str) -> str:
    if not isinstance(name, str) or name not in IMAGE_SETS:
        raise ValueError(f"name must be one of {IMAGE_SETS}, got {name!r}")
    return name


def _check_scale(scale: float) -> float:
    scale = float(scale)
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    return scale


def _official_file(folder: Path, key: str) -> Path:
    stem = _OFFICIAL[key]
    for candidate in (folder / f"{stem}.gz", folder / stem):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"official file {stem}.gz (or {stem}) not found in {str(folder)!r}; put the official idx files in "
        f"<root>/<name>/ and set {DATA_ENV_VAR} (or pass data_dir=). The shared data root lacks the 60k "
        "train images; use subset='10k' there."
    )


def _read_pair(folder: Path, prefix: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    img_path = _official_file(folder, f"{prefix}_images")
    lab_path = _official_file(folder, f"{prefix}_labels")
    images, labels = read_idx(img_path), read_idx(lab_path)
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{str(img_path)!r} / {str(lab_path)!r}: expected (n, rows, cols) images and n labels, got "
            f"{images.shape} and {labels.shape}"
        )
    return images, labels, [str(img_path), str(lab_path)]


def split_10k() -> tuple[np.ndarray, np.ndarray]:
    """The fixed 8000/2000 re-split of the 10k test images: ``(train_idx, test_idx)``."""
    perm = np.random.default_rng(SPLIT_SEED_10K).permutation(N_TRAIN_10K + N_TEST_10K)
    return perm[:N_TRAIN_10K], perm[N_TRAIN_10K:]


def _flat(images: np.ndarray, scale: float) -> np.ndarray:
    return images.reshape(images.shape[0], -1).astype(np.float64) / scale


def load_mnist_like(
    name: str, *, subset: str = "10k", data_dir: str | Path | None = None, scale: float = 255.0
) -> Dataset:
    """Load an MNIST-like set as a 10-class :class:`Dataset` (x: ``(n, 784)`` float64 pixels / ``scale``).

    Args:
        name: ``"mnist"``, ``"kmnist"`` (or ``"fashion_mnist"`` if its images are supplied).
        subset: ``"10k"``: the official t10k files re-split 8000/2000 with the fixed seed
            ``SPLIT_SEED_10K = 12345`` (see module docstring); ``"60k"``: official 60000 train / 10000 test.
        data_dir: data root; default ``$ZOO_DATA_DIR``. Files are read from ``<root>/<name>/``.
        scale: pixels are divided by this (255 -> [0, 1]); no standardisation.

    Raises:
        ValueError: bad ``name``, ``subset`` or ``scale``; malformed idx file; unexpected image count.
        FileNotFoundError: data root or an official file is missing (the message names the file).
    """
    name = _check_name(name)
    scale = _check_scale(scale)
    if subset not in ("10k", "60k"):
        raise ValueError(f"subset must be '10k' or '60k', got {subset!r}")
    folder = data_root(data_dir) / name
    images, labels, sources = _read_pair(folder, "test")
    if subset == "10k":
        if images.shape[0] != N_TRAIN_10K + N_TEST_10K:
            raise ValueError(
                f"{sources[0]!r}: expected 10000 test images for subset='10k', got {images.shape[0]}"
            )
        tr, te = split_10k()
        xtr, ytr, xte, yte = _flat(images[tr], scale), labels[tr], _flat(images[te], scale), labels[te]
        protocol = (
            f"official t10k images re-split 8000/2000: np.random.default_rng({SPLIT_SEED_10K})"
            ".permutation(10000), first 8000 train; NOT the standard 60k/10k protocol"
        )
        ds_name = f"{name}10k"
    else:
        tr_images, tr_labels, tr_sources = _read_pair(folder, "train")
        if tr_images.shape[1:] != images.shape[1:]:
            raise ValueError(
                f"train and test image sizes differ: {tr_images.shape[1:]} vs {images.shape[1:]}"
            )
        xtr, ytr, xte, yte = _flat(tr_images, scale), tr_labels, _flat(images, scale), labels
        sources = tr_sources + sources
        protocol = "official train (60000) / t10k (10000) split"
        ds_name = f"{name}60k"
        tr = te = None
    meta = {
        "source": sources,
        "protocol": protocol,
        "subset": subset,
        "scale": scale,
        "image_shape": tuple(images.shape[1:]),
    }
    if tr is not None:
        meta.update(train_index=tr, test_index=te, split_seed=SPLIT_SEED_10K)
    return from_arrays(
        ds_name, "multiclass", xtr, ytr, xte, yte, standardize=False, split=0, n_classes=10, meta=meta
    )


def load_ood_images(
    name: str, *, data_dir: str | Path | None = None, scale: float = 255.0, with_labels: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Out-of-distribution inputs: the 2000-image test part of the fixed 10k re-split of ``name``.

    E.g. ``load_ood_images("kmnist")`` for a model trained on ``mnist10k``; the images are preprocessed
    exactly as :func:`load_mnist_like` does (flattened, divided by ``scale``), so they
    can be fed to the same model.

    Returns:
        ``x`` of shape ``(2000, 784)`` float64, or ``(x, labels)`` if ``with_labels``.
    """
    name = _check_name(name)
    scale = _check_scale(scale)
    images, labels, sources = _read_pair(data_root(data_dir) / name, "test")
    if images.shape[0] != N_TRAIN_10K + N_TEST_10K:
        raise ValueError(f"{sources[0]!r}: expected 10000 test images, got {images.shape[0]}")
    te = split_10k()[1]
    x = _flat(images[te], scale)
    return (x, labels[te].astype(np.int64)) if with_labels else x
