"""Finding and reading a real data root, by torchvision's own readers.

CIFAR-10 is read by ``torchvision.datasets.CIFAR10`` (its md5 check before any unpickling),
Imagenette by ``torchvision.datasets.ImageFolder`` (PIL decoding). A root that does not
look like the dataset, or files torchvision rejects, raise
:class:`~perfgate.model.errors.DataError` with one line naming the path and what was
expected. The synthetic stand-ins are written in the layouts named here (folder and file
names, class ids) and read by the same functions.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torchvision.datasets import CIFAR10, ImageFolder

from perfgate.model.errors import DataError

Transform = Callable[[Any], Any] | None

_CIFAR_FOLDER = CIFAR10.base_folder  # "cifar-10-batches-py"
_CIFAR_TRAIN = tuple(name for name, _ in CIFAR10.train_list)
_CIFAR_TEST = tuple(name for name, _ in CIFAR10.test_list)
_CIFAR_META = CIFAR10.meta["filename"]
_CIFAR_FILES = (*_CIFAR_TRAIN, *_CIFAR_TEST, _CIFAR_META)
_CIFAR_EXPECTED = "the directory containing cifar-10-batches-py/ or that directory itself"

IMAGENETTE_CLASSES = (
    "n01440764", "n02102040", "n02979186", "n03000684", "n03028079",
    "n03394916", "n03417042", "n03425413", "n03445777", "n03888605",
)  # fmt: skip
_IMAGENETTE_DIR = "imagenette2-160"
_IMAGENETTE_EXPECTED = f"{_IMAGENETTE_DIR}/ (containing train/), its train/ folder, or a directory containing it"
_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class _CIFAR10Files(CIFAR10):
    """torchvision's CIFAR10, reading a batch folder of any name with given md5 sums.

    Only the instance's file list changes; the integrity check and the loading code are
    torchvision's. Used for the synthetic copy (its own md5 sums) and for a real batch
    folder that was renamed.
    """

    def __init__(self, folder: Path, md5s: Mapping[str, str] | None, transform: Transform) -> None:
        self.base_folder = folder.name
        if md5s is not None:
            self.train_list = [[name, md5s[name]] for name in _CIFAR_TRAIN]
            self.test_list = [[name, md5s[name]] for name in _CIFAR_TEST]
            self.meta = {**CIFAR10.meta, "md5": md5s[_CIFAR_META]}
        super().__init__(str(folder.parent), train=True, transform=transform, download=False)


def _locate_cifar(root: Path) -> Path:
    """The ``cifar-10-batches-py`` folder of a CIFAR-10 data root, checked for its files."""
    if not root.is_dir():
        raise DataError(f"CIFAR-10 data root {root} is not a directory; expected {_CIFAR_EXPECTED}")
    if (root / _CIFAR_FOLDER).is_dir():
        folder = root / _CIFAR_FOLDER
    elif root.name == _CIFAR_FOLDER or any((root / name).exists() for name in _CIFAR_FILES):
        folder = root
    else:
        raise DataError(
            f"CIFAR-10 data root {root} has no {_CIFAR_FOLDER}/ folder and no CIFAR batch files; "
            f"expected {_CIFAR_EXPECTED}"
        )
    missing = [name for name in _CIFAR_FILES if not (folder / name).is_file()]
    if missing:
        raise DataError(
            f"CIFAR-10 folder {folder} is missing {', '.join(missing)}; "
            "expected data_batch_1..5, test_batch and batches.meta (the python version of CIFAR-10)"
        )
    return folder


def _read_cifar(folder: Path, transform: Transform, md5s: Mapping[str, str] | None) -> CIFAR10:
    expected = "the unmodified files of cifar-10-python.tar.gz"
    if md5s is not None:
        expected = "the synthetic files as checked just before (were they changed meanwhile?)"
    try:
        if md5s is None and folder.name == _CIFAR_FOLDER:
            return CIFAR10(str(folder.parent), train=True, transform=transform, download=False)
        return _CIFAR10Files(folder, md5s, transform)
    except RuntimeError as exc:  # torchvision's "not found or corrupted": an md5 mismatch here
        raise DataError(
            f"CIFAR-10 folder {folder} fails torchvision's md5 check ({exc}); expected {expected}"
        ) from None
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError) as exc:
        raise DataError(f"CIFAR-10 folder {folder} could not be unpickled: {type(exc).__name__}: {exc}") from None


def _has_image(folder: Path) -> bool:
    for _, _, names in os.walk(folder, followlinks=True):
        if any(name.lower().endswith(_IMAGE_EXTENSIONS) for name in names):
            return True
    return False


def _locate_imagenette(root: Path) -> Path:
    """The ``train/`` folder of an Imagenette data root, checked for class folders with images."""
    if not root.is_dir():
        raise DataError(f"Imagenette data root {root} is not a directory; expected {_IMAGENETTE_EXPECTED}")
    if (root / "train").is_dir():
        train = root / "train"
    elif (root / _IMAGENETTE_DIR / "train").is_dir():
        train = root / _IMAGENETTE_DIR / "train"
    elif (root / _IMAGENETTE_DIR).is_dir() or (root / "val").is_dir():
        where = root / _IMAGENETTE_DIR if (root / _IMAGENETTE_DIR).is_dir() else root
        raise DataError(f"Imagenette folder {where} has no train/ folder; expected {_IMAGENETTE_EXPECTED}")
    else:
        train = root  # the train folder itself
    classes = sorted(entry.name for entry in os.scandir(train) if entry.is_dir())
    if not classes:
        raise DataError(f"Imagenette folder {train} has no class folders; expected {_IMAGENETTE_EXPECTED}")
    empty = [name for name in classes if not _has_image(train / name)]
    if empty:
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        raise DataError(
            f"Imagenette folder {train} has class folders without images ({shown}); "
            f"expected image files (.JPEG) in every class folder"
        )
    return train


class _ImageFolder(ImageFolder):
    """torchvision's ImageFolder, whose unreadable image is one line naming the file (not
    "OSError: Caught OSError in DataLoader worker process 0" with no file named)."""

    def __getitem__(self, index: int) -> Any:
        try:
            return super().__getitem__(index)
        except (OSError, ValueError, SyntaxError) as exc:  # PIL.UnidentifiedImageError is an OSError
            path = self.samples[index][0]
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise DataError(f"{path}: cannot be read as an image ({type(exc).__name__}: {first})") from None


def _read_image_folder(train: Path, transform: Transform) -> ImageFolder:
    try:
        return _ImageFolder(str(train), transform=transform)
    except (FileNotFoundError, ValueError) as exc:
        raise DataError(f"Imagenette folder {train} could not be read as an ImageFolder: {exc}") from None
