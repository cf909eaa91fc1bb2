"""The two reference datasets, read by torchvision's own readers, real or synthetic.

Both reference workloads train resnet18 on data that goes through the real loading
code, so the measured data path (unpickling, PIL decoding, transforms) is the one a user
has. Nothing is ever downloaded.

**CIFAR-10** (:func:`cifar10`) is read by ``torchvision.datasets.CIFAR10`` with
``download=False``, train split. ``--data-root`` is either the directory that contains
``cifar-10-batches-py/`` (torchvision's convention) or ``cifar-10-batches-py/`` itself;
it must hold ``data_batch_1..5``, ``test_batch`` and ``batches.meta``. torchvision checks
every file against its hard-coded md5 sums before it unpickles anything; the recorded
hash is sha256 over that verified md5 list (``hash_method="md5-list-verified"``), which
costs nothing extra.

**Imagenette** (:func:`imagenette`) is read by ``torchvision.datasets.ImageFolder`` (PIL
decoding) from the ``train/`` folder of imagenette2-160. ``--data-root`` is either
``imagenette2-160/`` (containing ``train/``), the ``train/`` folder itself, or a
directory containing ``imagenette2-160/``. Hashing ~100 MB of JPEGs in every repeat
would cost more than the measurement, so the recorded hash is sha256 over the class list
and the sorted (relative path, size) listing (``hash_method="sha256-listing"``): it sees
files added, removed, renamed or resized, not a same-size edit.

A root that does not look like the dataset, or files torchvision rejects, raise
:class:`~perfgate.model.errors.DataError` with one line naming the path and what was expected.

**Without a data root** a deterministic synthetic stand-in is generated once into
``<cache_dir>/<dataset>-synthetic-v<GENERATOR_VERSION>`` and read by the same reader:
CIFAR-10 as real python batch files (5 x 2,000 train images, 1,000 test images;
torchvision's md5 list is replaced, per instance, by the generated files' sums so its
own integrity check and loading code run unchanged), Imagenette as 500 baseline JPEGs
(quality 90, 4:2:0, shortest side 160 px, the other 160-320 px, mostly landscape) under
the ten real WordNet-id class folders. The cache is not trusted: its content is pinned in
code and checked before anything in it is unpickled or decoded
(:mod:`perfgate.measure.datasets.synthetic`), and the generator makes the same bytes on
every machine and with every supported numpy, so that a pin is possible
(:mod:`perfgate.measure.datasets.generator`).

:func:`with_sample_delay` makes the data path slow on purpose, for power tests and for
showing what an input-bound step looks like.

The modules: ``files`` finds and reads a real data root, ``synthetic`` keeps the checked
cache of the stand-ins, ``generator`` makes their bytes, with ``pickler`` writing the CIFAR
batch files and ``jpeg`` encoding the Imagenette images.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from perfgate.measure.datasets.files import (
    IMAGENETTE_CLASSES,
    Transform,
    _locate_cifar,
    _locate_imagenette,
    _read_cifar,
    _read_image_folder,
)
from perfgate.measure.datasets.generator import GENERATOR_VERSION
from perfgate.measure.datasets.synthetic import _synthetic_cifar10, _synthetic_imagenette
from perfgate.model.workload import BuildContext, DataSource

__all__ = ["cifar10", "imagenette", "with_sample_delay", "SampleDelay", "IMAGENETTE_CLASSES", "GENERATOR_VERSION"]

_log = logging.getLogger(__name__)


def cifar10(ctx: BuildContext, transform: Transform) -> tuple[Dataset, DataSource]:
    """The CIFAR-10 train split from ``ctx.data_root``, or the synthetic stand-in."""
    if ctx.data_root is None:
        return _synthetic_cifar10(Path(ctx.cache_dir), transform)
    folder = _locate_cifar(Path(os.path.abspath(Path(ctx.data_root).expanduser())))
    # A user's own files: torchvision's CIFAR10.__init__ runs _check_integrity() (md5 of
    # every train and test batch against the sums hard-coded in torchvision) before its
    # loop that calls pickle.load, and _load_meta() checks batches.meta's md5 before
    # unpickling it, so nothing is unpickled unless it is the published CIFAR-10 file.
    dataset = _read_cifar(folder, transform, md5s=None)
    verified = [*dataset.train_list, *dataset.test_list, [dataset.meta["filename"], dataset.meta["md5"]]]
    digest = hashlib.sha256("".join(f"{name} {md5}\n" for name, md5 in verified).encode()).hexdigest()
    source = DataSource(
        kind="real",
        path=str(folder),
        content_hash=digest,
        hash_method="md5-list-verified",
        num_samples=len(dataset),
        description="CIFAR-10 train split, torchvision CIFAR10 reader (download=False)",
    )
    return dataset, source


def imagenette(ctx: BuildContext, transform: Transform) -> tuple[Dataset, DataSource]:
    """The Imagenette (160 px) train split from ``ctx.data_root``, or the synthetic stand-in."""
    if ctx.data_root is None:
        return _synthetic_imagenette(Path(ctx.cache_dir), transform)
    train = _locate_imagenette(Path(os.path.abspath(Path(ctx.data_root).expanduser())))
    dataset = _read_image_folder(train, transform)
    if tuple(dataset.classes) != IMAGENETTE_CLASSES:
        _log.warning("%s: class folders are not the ten Imagenette WordNet ids", train)
    listing = "".join(f"{c}\n" for c in dataset.classes) + "\n"
    listing += "".join(
        f"{Path(os.path.relpath(p, train)).as_posix()}\t{os.stat(p).st_size}\n" for p, _ in sorted(dataset.samples)
    )
    source = DataSource(
        kind="real",
        path=str(train),
        content_hash=hashlib.sha256(listing.encode()).hexdigest(),
        hash_method="sha256-listing",
        num_samples=len(dataset),
        description=f"Imagenette train split ({len(dataset.classes)} classes), torchvision ImageFolder reader",
    )
    return dataset, source


class SampleDelay(Dataset):
    """A dataset whose ``__getitem__`` sleeps ``delay_ms`` before reading the sample."""

    def __init__(self, dataset: Dataset, delay_ms: float) -> None:
        self.dataset = dataset
        self.delay_ms = delay_ms

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]  # wraps a map-style dataset: sized

    def __getitem__(self, index: int) -> Any:
        time.sleep(self.delay_ms / 1000.0)
        return self.dataset[index]


def with_sample_delay(dataset: Dataset, delay_ms: float) -> Dataset:
    """``dataset`` with a sleep of ``delay_ms`` milliseconds before every sample.

    A deliberate knob: it makes the data path slow, as if decoding or storage were slow,
    so an input-bound step (large ``data_wait``) can be produced on demand. A delay of 0
    returns ``dataset`` itself; a negative or non-finite delay is a ``ValueError``.
    """
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, (int, float)) or not np.isfinite(delay_ms):
        raise ValueError(f"sample delay must be a finite number of milliseconds, got {delay_ms!r}")
    if delay_ms < 0:
        raise ValueError(f"sample delay must be >= 0 ms, got {delay_ms!r}")
    if delay_ms == 0:
        return dataset
    return SampleDelay(dataset, float(delay_ms))
