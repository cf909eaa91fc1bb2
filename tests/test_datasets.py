"""The reference datasets: real layouts found and read by torchvision, synthetic stand-ins
generated once, deterministically, in the real formats."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms
from torchvision.datasets import CIFAR10, ImageFolder

from perfgate.errors import DataError
from perfgate.measure import datasets
from perfgate.measure.datasets import IMAGENETTE_CLASSES, cifar10, imagenette, with_sample_delay
from perfgate.workload import BuildContext, Params

PARAMS = Params(batch_size=2, input_size=32, warmup_steps=0, steps=2)


def make_ctx(cache_dir: Path, data_root: Path | None = None) -> BuildContext:
    return BuildContext(params=PARAMS, device="cpu", data_root=data_root, cache_dir=cache_dir)


def assert_one_line_naming(exc: pytest.ExceptionInfo[DataError], path: Path) -> None:
    message = str(exc.value)
    assert "\n" not in message
    assert str(path) in message


# --- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def synthetic_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both full-size synthetic sets, generated once for the session (about 1.5 s)."""
    cache = tmp_path_factory.mktemp("cache")
    cifar10(make_ctx(cache), None)
    imagenette(make_ctx(cache), None)
    return cache


def write_cifar_folder(folder: Path, per_batch: int = 4) -> dict[str, str]:
    """A tiny CIFAR-10 folder in the real python format; returns each file's md5."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        entry = {
            "batch_label": name,
            "labels": [int(x) for x in rng.integers(0, 10, per_batch)],
            "data": rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
            "filenames": [f"{name}_{i}.png" for i in range(per_batch)],
        }
        (folder / name).write_bytes(pickle.dumps(entry))
    meta = {"num_cases_per_batch": per_batch, "label_names": [f"c{i}" for i in range(10)], "num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def trust_md5s(monkeypatch: pytest.MonkeyPatch, md5s: dict[str, str]) -> None:
    """Make torchvision's CIFAR10 accept the fixture's files.

    torchvision hard-codes the md5 sums of the real CIFAR-10 files, and a test cannot
    make files with those sums without the real data set. Replacing the class's list
    leaves the reader's integrity check and loading code running as they are.
    """
    monkeypatch.setattr(CIFAR10, "train_list", [[f"data_batch_{i}", md5s[f"data_batch_{i}"]] for i in range(1, 6)])
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", md5s["test_batch"]]])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5s["batches.meta"]})


def write_jpeg(path: Path, size: tuple[int, int], shade: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (shade, 255 - shade, 90)).save(path, format="JPEG", quality=90)


@pytest.fixture
def imagenette_tree(tmp_path: Path) -> Path:
    """``<tmp>/data/imagenette2-160/{train,val}/<wnid>/*.JPEG``: 2 classes, 3 + 2 images."""
    top = tmp_path / "data" / "imagenette2-160"
    for split in ("train", "val"):
        for j, (wnid, count) in enumerate(((IMAGENETTE_CLASSES[0], 3), (IMAGENETTE_CLASSES[5], 2))):
            for i in range(count):
                write_jpeg(top / split / wnid / f"{wnid}_{i}.JPEG", (24 + 8 * i, 16), 40 * j + i)
    return top


# --- synthetic CIFAR-10 ---------------------------------------------------------------


def test_synthetic_cifar_is_read_by_torchvision_cifar10(synthetic_cache: Path) -> None:
    dataset, source = cifar10(make_ctx(synthetic_cache), transforms.ToTensor())

    assert isinstance(dataset, CIFAR10)
    assert len(dataset) == 10_000
    image, label = dataset[0]
    assert isinstance(image, torch.Tensor) and image.shape == (3, 32, 32) and image.dtype == torch.float32
    assert sorted(set(dataset.targets)) == list(range(10))
    assert isinstance(label, int) and 0 <= label <= 9
    assert dataset.classes[0] == "airplane"
    assert source.kind == "synthetic" and source.hash_method == "sha256-content"
    assert source.num_samples == 10_000 and len(source.content_hash) == 64
    assert source.path.endswith("cifar-10-batches-py")


def test_synthetic_cifar_files_are_real_cifar_batches(synthetic_cache: Path) -> None:
    folder = synthetic_cache / "cifar10-synthetic-v1" / "cifar-10-batches-py"
    with open(folder / "data_batch_3", "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    assert entry["data"].dtype == np.uint8 and entry["data"].shape == (2000, 3072)
    assert len(entry["labels"]) == 2000
    with open(folder / "test_batch", "rb") as f:
        assert pickle.load(f, encoding="latin1")["data"].shape == (1000, 3072)
    dataset, _ = cifar10(make_ctx(synthetic_cache), None)
    image = dataset[5][0]
    assert isinstance(image, Image.Image) and image.size == (32, 32) and image.mode == "RGB"
    pixels = np.asarray(image, dtype=np.float64)
    # Image-like: neighbouring pixels are far more alike than in white noise (std ~74).
    assert np.abs(np.diff(pixels, axis=1)).mean() < 25


def test_synthetic_cifar_generation_is_deterministic(tmp_path: Path) -> None:
    _, first = datasets._synthetic_cifar10(tmp_path / "a", None, per_batch=20, test_size=10)
    _, second = datasets._synthetic_cifar10(tmp_path / "b", None, per_batch=20, test_size=10)
    assert first.content_hash == second.content_hash
    assert first.num_samples == 100
    manifest = json.loads((tmp_path / "a" / "cifar10-synthetic-v1" / "manifest.json").read_text())
    assert manifest["generator_version"] == 1 and manifest["content_hash"] == first.content_hash
    assert [f["path"] for f in manifest["files"]][0] == "cifar-10-batches-py/batches.meta"


def test_synthetic_cache_is_reused_without_regenerating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, first = datasets._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    target = tmp_path / "cifar10-synthetic-v1"
    stamps = {p: p.stat().st_mtime_ns for p in target.rglob("*")}

    def refuse(*args: object) -> int:
        raise AssertionError("regenerated a valid cache")

    monkeypatch.setattr(datasets, "_generate_cifar10", refuse)
    dataset, second = datasets._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    assert second == first and len(dataset) == 100
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*")} == stamps
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar10-synthetic-v1"]


def test_incomplete_or_stale_cache_is_regenerated(tmp_path: Path) -> None:
    _, first = datasets._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    folder = tmp_path / "cifar10-synthetic-v1" / "cifar-10-batches-py"
    (folder / "data_batch_2").unlink()
    _, again = datasets._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    assert again.content_hash == first.content_hash and (folder / "data_batch_2").is_file()
    # Other sizes recorded in the manifest: not reused.
    _, other = datasets._synthetic_cifar10(tmp_path, None, per_batch=30, test_size=10)
    assert other.num_samples == 150 and other.content_hash != first.content_hash
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar10-synthetic-v1"]


def test_corrupt_synthetic_file_fails_torchvision_md5_check(tmp_path: Path) -> None:
    datasets._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    path = tmp_path / "cifar10-synthetic-v1" / "cifar-10-batches-py" / "data_batch_4"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # same size, so the manifest check passes and torchvision's md5 catches it
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="md5") as exc:
        datasets._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    assert_one_line_naming(exc, path.parent)


def test_losing_a_generation_race_keeps_the_winners_copy(tmp_path: Path) -> None:
    calls = []

    def generate(tmp: Path) -> int:
        calls.append(tmp)
        if len(calls) == 1:  # another process finishes first, while this one generates
            datasets._ensure_synthetic(tmp_path, "race", {}, generate)
        (tmp / "file.bin").write_bytes(str(len(calls)).encode())
        return len(calls)

    target, manifest = datasets._ensure_synthetic(tmp_path, "race", {}, generate)
    assert manifest["num_samples"] == 2  # the inner (winning) generation
    assert (target / "file.bin").read_bytes() == b"2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["race-synthetic-v1"]


# --- synthetic Imagenette -------------------------------------------------------------


def test_synthetic_imagenette_is_an_image_folder_like_imagenette2_160(synthetic_cache: Path) -> None:
    dataset, source = imagenette(make_ctx(synthetic_cache), None)

    assert isinstance(dataset, ImageFolder)
    assert tuple(dataset.classes) == IMAGENETTE_CLASSES
    assert len(dataset) == 500 and source.num_samples == 500
    assert np.bincount(dataset.targets).tolist() == [50] * 10
    assert source.kind == "synthetic" and source.hash_method == "sha256-content"
    sizes = []
    for path, _ in dataset.samples:
        with Image.open(path) as image:
            assert image.format == "JPEG" and not image.getexif()
            sizes.append(image.size)
    assert {min(size) for size in sizes} == {160}
    assert 160 <= min(max(size) for size in sizes) and max(max(size) for size in sizes) <= 320
    assert len({max(size) for size in sizes}) > 50  # varied, not one size
    portrait = sum(w < h for w, h in sizes)
    assert 0 < portrait < len(sizes) / 2  # mostly landscape, some portrait
    kib = np.mean([os.path.getsize(p) for p, _ in dataset.samples]) / 1024
    assert 8 < kib < 40  # like real JPEG photos at this size, not flat colour or white noise
    image, label = dataset[0]
    assert image.mode == "RGB" and label == 0


def test_synthetic_imagenette_generation_is_deterministic(tmp_path: Path) -> None:
    _, first = datasets._synthetic_imagenette(tmp_path / "a", None, per_class=2)
    _, second = datasets._synthetic_imagenette(tmp_path / "b", None, per_class=2)
    assert first.content_hash == second.content_hash and first.num_samples == 20


# --- real CIFAR-10 --------------------------------------------------------------------


def test_real_cifar_with_foreign_md5_is_a_data_error(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_folder(folder)  # the real format, but not torchvision's md5 sums
    with pytest.raises(DataError, match="md5") as exc:
        cifar10(make_ctx(tmp_path / "cache", tmp_path), None)
    assert_one_line_naming(exc, folder)


@pytest.mark.parametrize("given", ["parent", "folder"])
def test_real_cifar_is_read_from_either_root_convention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    trust_md5s(monkeypatch, write_cifar_folder(folder))
    root = tmp_path if given == "parent" else folder

    dataset, source = cifar10(make_ctx(tmp_path / "cache", root), transforms.ToTensor())

    assert type(dataset) is CIFAR10 and len(dataset) == 20
    assert dataset[3][0].shape == (3, 32, 32)
    assert source.kind == "real" and source.hash_method == "md5-list-verified"
    assert source.num_samples == 20 and source.path == str(folder)
    assert not (tmp_path / "cache").exists()  # real data writes nothing to the cache


def test_real_cifar_hash_follows_the_verified_md5_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    md5s = write_cifar_folder(tmp_path / "a" / "cifar-10-batches-py")
    trust_md5s(monkeypatch, md5s)
    _, first = cifar10(make_ctx(tmp_path / "cache", tmp_path / "a"), None)
    renamed = tmp_path / "b" / "my-cifar-copy"  # a renamed batch folder is read too
    write_cifar_folder(renamed)
    _, second = cifar10(make_ctx(tmp_path / "cache", renamed), None)
    assert first.content_hash == second.content_hash  # same files, same sums
    md5s_other = write_cifar_folder(tmp_path / "c" / "cifar-10-batches-py", per_batch=5)
    trust_md5s(monkeypatch, md5s_other)
    _, third = cifar10(make_ctx(tmp_path / "cache", tmp_path / "c"), None)
    assert third.content_hash != first.content_hash and third.num_samples == 25


def test_cifar_roots_that_do_not_look_like_cifar(tmp_path: Path) -> None:
    ctx_for = lambda root: make_ctx(tmp_path / "cache", root)  # noqa: E731
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="not a directory") as exc:
        cifar10(ctx_for(missing), None)
    assert_one_line_naming(exc, missing)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="cifar-10-batches-py") as exc:
        cifar10(ctx_for(empty), None)
    assert_one_line_naming(exc, empty)

    folder = tmp_path / "partial" / "cifar-10-batches-py"
    write_cifar_folder(folder)
    (folder / "data_batch_3").unlink()
    (folder / "batches.meta").unlink()
    for root in (folder.parent, folder):
        with pytest.raises(DataError, match="missing data_batch_3, batches.meta") as exc:
            cifar10(ctx_for(root), None)
        assert_one_line_naming(exc, folder)


def test_unreadable_cifar_pickle_is_a_data_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_folder(folder)
    (folder / "data_batch_1").write_bytes(b"not a pickle")
    trust_md5s(monkeypatch, {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()})
    with pytest.raises(DataError, match="unpickled") as exc:
        cifar10(make_ctx(tmp_path / "cache", tmp_path), None)
    assert_one_line_naming(exc, folder)


# --- real Imagenette ------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["imagenette2-160", "train", "parent"])
def test_real_imagenette_is_read_from_each_root_layout(imagenette_tree: Path, layout: str) -> None:
    root = {"imagenette2-160": imagenette_tree, "train": imagenette_tree / "train", "parent": imagenette_tree.parent}
    dataset, source = imagenette(make_ctx(imagenette_tree.parent / "cache", root[layout]), transforms.ToTensor())

    assert isinstance(dataset, ImageFolder) and len(dataset) == 5
    assert dataset.classes == [IMAGENETTE_CLASSES[0], IMAGENETTE_CLASSES[5]]
    assert dataset.targets == [0, 0, 0, 1, 1]
    assert dataset[1][0].shape == (3, 16, 32)
    assert source.kind == "real" and source.hash_method == "sha256-listing"
    assert source.path == str(imagenette_tree / "train") and source.num_samples == 5
    listing = f"{IMAGENETTE_CLASSES[0]}\n{IMAGENETTE_CLASSES[5]}\n\n" + "".join(
        f"{Path(p).relative_to(imagenette_tree / 'train').as_posix()}\t{os.path.getsize(p)}\n"
        for p, _ in dataset.samples
    )
    assert source.content_hash == hashlib.sha256(listing.encode()).hexdigest()


def test_real_imagenette_hash_sees_listing_changes(imagenette_tree: Path) -> None:
    ctx = make_ctx(imagenette_tree.parent / "cache", imagenette_tree)
    _, before = imagenette(ctx, None)
    _, same = imagenette(ctx, None)
    assert same.content_hash == before.content_hash
    write_jpeg(imagenette_tree / "train" / IMAGENETTE_CLASSES[5] / "extra.JPEG", (20, 20), 7)
    _, after = imagenette(ctx, None)
    assert after.content_hash != before.content_hash and after.num_samples == 6


def test_imagenette_roots_that_do_not_look_like_imagenette(tmp_path: Path) -> None:
    ctx_for = lambda root: make_ctx(tmp_path / "cache", root)  # noqa: E731
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="not a directory") as exc:
        imagenette(ctx_for(missing), None)
    assert_one_line_naming(exc, missing)

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.txt").write_text("no images here")
    with pytest.raises(DataError, match="no class folders") as exc:
        imagenette(ctx_for(empty), None)
    assert_one_line_naming(exc, empty)

    no_images = tmp_path / "no-images" / "train"
    (no_images / IMAGENETTE_CLASSES[0]).mkdir(parents=True)
    (no_images / IMAGENETTE_CLASSES[1]).mkdir()
    (no_images / IMAGENETTE_CLASSES[1] / "notes.txt").write_text("x")
    write_jpeg(no_images / IMAGENETTE_CLASSES[2] / "a.JPEG", (8, 8), 1)
    with pytest.raises(DataError, match="without images") as exc:
        imagenette(ctx_for(no_images.parent), None)
    assert_one_line_naming(exc, no_images)
    assert IMAGENETTE_CLASSES[0] in str(exc.value) and IMAGENETTE_CLASSES[2] not in str(exc.value)

    val_only = tmp_path / "val-only" / "imagenette2-160"
    write_jpeg(val_only / "val" / IMAGENETTE_CLASSES[0] / "a.JPEG", (8, 8), 1)
    for root in (val_only, val_only.parent):
        with pytest.raises(DataError, match="no train/ folder") as exc:
            imagenette(ctx_for(root), None)
        assert_one_line_naming(exc, val_only)


# --- worker safety --------------------------------------------------------------------


def test_datasets_survive_pickling_for_worker_processes(synthetic_cache: Path, imagenette_tree: Path) -> None:
    cifar, _ = cifar10(make_ctx(synthetic_cache), transforms.ToTensor())
    folder, _ = imagenette(make_ctx(synthetic_cache, imagenette_tree), transforms.ToTensor())
    for dataset in (cifar, folder, with_sample_delay(folder, 1.0)):
        copy = pickle.loads(pickle.dumps(dataset))
        assert len(copy) == len(dataset)
        assert torch.equal(copy[2][0], dataset[2][0]) and copy[2][1] == dataset[2][1]


def test_forked_dataloader_workers_read_the_synthetic_sets(synthetic_cache: Path) -> None:
    crop = transforms.Compose([transforms.CenterCrop(160), transforms.ToTensor()])
    dataset, _ = imagenette(make_ctx(synthetic_cache), crop)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2, shuffle=False)
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 160, 160) and labels.tolist() == [0, 0, 0, 0]


# --- with_sample_delay ----------------------------------------------------------------


def test_sample_delay_sleeps_before_each_sample(imagenette_tree: Path) -> None:
    dataset, _ = imagenette(make_ctx(imagenette_tree.parent / "cache", imagenette_tree), None)
    slow = with_sample_delay(dataset, 50)
    assert len(slow) == len(dataset)
    start = time.perf_counter()
    image, label = slow[3]
    assert time.perf_counter() - start >= 0.045  # a lower bound only: never an upper one
    assert label == dataset[3][1] and image.size == dataset[3][0].size


def test_sample_delay_zero_returns_the_dataset_and_negative_is_refused() -> None:
    dataset = torch.utils.data.TensorDataset(torch.zeros(3, 2))
    assert with_sample_delay(dataset, 0) is dataset
    assert with_sample_delay(dataset, 0.0) is dataset
    for bad in (-1, -0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            with_sample_delay(dataset, bad)

