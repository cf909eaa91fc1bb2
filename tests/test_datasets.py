"""The reference datasets: real layouts found and read by torchvision, synthetic stand-ins
generated once, deterministically, in the real formats, and never trusted from the cache
without a check against the content pinned in code."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import pickletools
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms
from torchvision.datasets import CIFAR10, ImageFolder

from perfgate.measure.datasets import (
    GENERATOR_VERSION,
    IMAGENETTE_CLASSES,
    cifar10,
    generator,
    imagenette,
    jpeg,
    pickler,
    synthetic,
    with_sample_delay,
)
from perfgate.model.errors import DataError
from perfgate.model.workload import BuildContext, Params

PARAMS = Params(batch_size=2, input_size=32, warmup_steps=0, steps=2)
CIFAR_DIR = f"cifar10-synthetic-v{GENERATOR_VERSION}"
IMAGENETTE_DIR = f"imagenette-synthetic-v{GENERATOR_VERSION}"
CIFAR_DEFAULT_KEY = ("cifar10", (("per_batch", 2000), ("test_size", 1000)))
IMAGENETTE_DEFAULT_KEY = ("imagenette", (("per_class", 50),))


def make_ctx(cache_dir: Path, data_root: Path | None = None) -> BuildContext:
    return BuildContext(params=PARAMS, device="cpu", data_root=data_root, cache_dir=cache_dir)


def assert_one_line_naming(exc: pytest.ExceptionInfo[DataError], path: Path) -> None:
    message = str(exc.value)
    assert "\n" not in message
    assert str(path) in message


# --- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def synthetic_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both full-size synthetic sets, generated once for the session by the loaders (a few seconds)."""
    cache = tmp_path_factory.mktemp("cache")
    cifar10(make_ctx(cache), None)
    imagenette(make_ctx(cache), None)
    return cache


def read_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but the manifest, by relative POSIX path."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.relative_to(folder).as_posix() != "manifest.json"
    }


@pytest.fixture(scope="session")
def default_files(synthetic_cache: Path) -> dict[str, dict[str, bytes]]:
    """The bytes the generator made in this session, at the default settings."""
    names = ("cifar10", "imagenette")
    return {name: read_files(synthetic_cache / f"{name}-synthetic-v{GENERATOR_VERSION}") for name in names}


def rewrite_manifest(target: Path, rel: str) -> None:
    """Make ``manifest.json`` vouch for the file ``rel`` as it is now (size and md5).

    This is what a planted copy comes with: a cache that trusted its own manifest would
    accept it.
    """
    path = target / "manifest.json"
    manifest = json.loads(path.read_text())
    data = (target / rel).read_bytes()
    entries = [entry for entry in manifest["files"] if entry["path"] == rel]
    if not entries:
        entries = [{"path": rel}]
        manifest["files"].append(entries[0])
    entries[0].update(size=len(data), md5=hashlib.md5(data).hexdigest())
    path.write_text(json.dumps(manifest))


class Payload:
    """Unpickling this creates the file ``marker``: the stand-in for a planted pickle's code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.marker), "w")


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_synthetic_cifar_files_are_real_cifar_batches(synthetic_cache: Path) -> None:
    folder = synthetic_cache / CIFAR_DIR / "cifar-10-batches-py"
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
    _, first = synthetic._synthetic_cifar10(tmp_path / "a", None, per_batch=20, test_size=10)
    _, second = synthetic._synthetic_cifar10(tmp_path / "b", None, per_batch=20, test_size=10)
    assert first.content_hash == second.content_hash
    assert first.num_samples == 100
    assert generator._generate_cifar10(20, 10) == generator._generate_cifar10(20, 10)
    # The manifest describes the folder for a person; it is written, never read.
    manifest = json.loads((tmp_path / "a" / CIFAR_DIR / "manifest.json").read_text())
    assert manifest["generator_version"] == GENERATOR_VERSION and manifest["content_hash"] == first.content_hash
    assert [f["path"] for f in manifest["files"]][0] == "cifar-10-batches-py/batches.meta"


def test_synthetic_cache_is_reused_without_regenerating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, first = synthetic._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    target = tmp_path / CIFAR_DIR
    (target / "manifest.json").unlink()  # never read: its absence changes nothing
    stamps = {p: p.stat().st_mtime_ns for p in target.rglob("*")}

    def refuse(*args: object) -> int:
        raise AssertionError("regenerated a valid cache")

    monkeypatch.setattr(synthetic, "_generate_cifar10", refuse)
    dataset, second = synthetic._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    assert second == first and len(dataset) == 100
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*")} == stamps
    assert sorted(p.name for p in tmp_path.iterdir()) == [CIFAR_DIR]


def test_incomplete_or_stale_cache_is_regenerated(tmp_path: Path) -> None:
    _, first = synthetic._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    folder = tmp_path / CIFAR_DIR / "cifar-10-batches-py"
    (folder / "data_batch_2").unlink()
    _, again = synthetic._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    assert again.content_hash == first.content_hash and (folder / "data_batch_2").is_file()
    # Other sizes recorded in the manifest: not reused.
    _, other = synthetic._synthetic_cifar10(tmp_path, None, per_batch=30, test_size=10)
    assert other.num_samples == 150 and other.content_hash != first.content_hash
    assert sorted(p.name for p in tmp_path.iterdir()) == [CIFAR_DIR]


def test_losing_a_generation_race_keeps_the_winners_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"file.bin": b"the same bytes in every generation"}
    calls = []

    def generate() -> dict[str, bytes]:
        calls.append(1)
        if len(calls) == 1:  # another process finishes first, while this one generates
            synthetic._ensure_synthetic(tmp_path, spec)
        return dict(files)

    spec = synthetic._Spec("race", {}, 1, generate)
    monkeypatch.setattr(synthetic, "_PINS", {spec.key: synthetic._pin_of(files)})
    target, pin = synthetic._ensure_synthetic(tmp_path, spec)
    assert len(calls) == 2 and pin == synthetic._pin_of(files)
    assert (target / "file.bin").read_bytes() == files["file.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"race-synthetic-v{GENERATOR_VERSION}"]


# --- the cache is not trusted ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("settings", ["default", "small"])
def test_a_planted_pickle_in_the_cache_is_never_unpickled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synthetic_cache: Path, settings: str
) -> None:
    cache = tmp_path / "cache"
    sizes = {"per_batch": 2000, "test_size": 1000} if settings == "default" else {"per_batch": 20, "test_size": 10}
    if settings == "default":  # a copy of a finished cache, manifest included
        shutil.copytree(synthetic_cache / CIFAR_DIR, cache / CIFAR_DIR)
    else:
        synthetic._synthetic_cifar10(cache, None, **sizes)
        # These settings have no pin in code: a fresh process, which has not computed
        # their hash yet, must not trust the cache either.
        monkeypatch.setattr(synthetic, "_COMPUTED_PINS", {}, raising=False)
    rel = "cifar-10-batches-py/data_batch_1"
    genuine = (cache / CIFAR_DIR / rel).read_bytes()
    marker = tmp_path / "pwned"
    (cache / CIFAR_DIR / rel).write_bytes(pickle.dumps(Payload(marker)))
    rewrite_manifest(cache / CIFAR_DIR, rel)

    dataset, source = synthetic._synthetic_cifar10(cache, transforms.ToTensor(), **sizes)

    assert not marker.exists()
    assert (cache / CIFAR_DIR / rel).read_bytes() == genuine  # regenerated
    assert len(dataset) == 5 * sizes["per_batch"] and dataset[0][0].shape == (3, 32, 32)
    assert sorted(p.name for p in cache.iterdir()) == [CIFAR_DIR]  # the planted copy is gone
    if settings == "default":
        assert source.content_hash == synthetic._PINS[CIFAR_DEFAULT_KEY].content_hash


@pytest.mark.parametrize("change", ["altered", "truncated", "extra file", "symlink", "linked folder"])
def test_a_changed_synthetic_cifar_file_is_detected_and_regenerated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    cache = tmp_path / "cache"
    _, first = synthetic._synthetic_cifar10(cache, None, per_batch=20, test_size=10)
    target = cache / CIFAR_DIR
    rel = "cifar-10-batches-py/data_batch_4"
    path = target / rel
    genuine = path.read_bytes()
    if change == "altered":
        data = bytearray(genuine)
        data[-100] ^= 0xFF  # the same size
        path.write_bytes(bytes(data))
    elif change == "truncated":
        path.write_bytes(genuine[: len(genuine) // 2])
    elif change == "extra file":
        rel = "cifar-10-batches-py/data_batch_6"
        (target / rel).write_bytes(genuine)
    elif change == "symlink":  # the same bytes, but through a link that could point anywhere later
        elsewhere = tmp_path / "elsewhere"
        elsewhere.write_bytes(genuine)
        path.unlink()
        path.symlink_to(elsewhere)
    else:  # the whole folder, unchanged, behind a link
        target.rename(tmp_path / "moved")
        target.symlink_to(tmp_path / "moved", target_is_directory=True)
    rewrite_manifest(target, rel)
    unpickled = []
    real_load = pickle.load
    monkeypatch.setattr(pickle, "load", lambda f, **kw: unpickled.append(f.name) or real_load(f, **kw))

    dataset, again = synthetic._synthetic_cifar10(cache, None, per_batch=20, test_size=10)

    assert again == first and len(dataset) == 100
    assert path.read_bytes() == genuine and not path.is_symlink()
    assert not (target / "cifar-10-batches-py" / "data_batch_6").exists()
    assert len(unpickled) == 6  # the five train batches and the meta file, each once, after the check
    assert sorted(p.name for p in cache.iterdir()) == [CIFAR_DIR]


@pytest.mark.parametrize("change", ["altered", "extra image", "extra class"])
def test_a_changed_synthetic_imagenette_file_is_regenerated_before_pil_opens_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    _, first = synthetic._synthetic_imagenette(tmp_path, None, per_class=2)
    train = tmp_path / IMAGENETTE_DIR / "train"
    path = train / IMAGENETTE_CLASSES[3] / f"{IMAGENETTE_CLASSES[3]}_00001.JPEG"
    genuine = path.read_bytes()
    planted = io.BytesIO()
    Image.new("RGB", (16, 16), (1, 2, 3)).save(planted, format="TIFF")  # any format PIL would decode
    changed = {
        "altered": path,
        "extra image": train / IMAGENETTE_CLASSES[3] / "planted.JPEG",
        "extra class": train / "n99999999" / "planted.JPEG",
    }[change]
    changed.parent.mkdir(exist_ok=True)
    changed.write_bytes(planted.getvalue())
    rewrite_manifest(tmp_path / IMAGENETTE_DIR, changed.relative_to(tmp_path / IMAGENETTE_DIR).as_posix())

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("PIL opened a file while the dataset was being checked")

    with monkeypatch.context() as patch:
        patch.setattr(Image, "open", refuse)
        dataset, again = synthetic._synthetic_imagenette(tmp_path, None, per_class=2)

    assert again == first and len(dataset) == 20
    assert path.read_bytes() == genuine
    assert changed == path or not changed.exists()
    assert tuple(dataset.classes) == IMAGENETTE_CLASSES
    assert all(Path(p).read_bytes()[:2] == b"\xff\xd8" for p, _ in dataset.samples)


@pytest.mark.slow
def test_the_pins_are_what_the_generator_makes_now(default_files: dict[str, dict[str, bytes]]) -> None:
    pairs = ((CIFAR_DEFAULT_KEY, default_files["cifar10"]), (IMAGENETTE_DEFAULT_KEY, default_files["imagenette"]))
    for key, files in pairs:
        made = synthetic._pin_of(files)
        assert made == synthetic._PINS[key], (
            f"the synthetic {key[0]} generator no longer makes the pinned bytes: "
            f"bump GENERATOR_VERSION and set the pin to {made}"
        )
    assert set(synthetic._PINS) == {CIFAR_DEFAULT_KEY, IMAGENETTE_DEFAULT_KEY}


@pytest.mark.slow
def test_the_synthetic_cache_is_read_under_the_pinned_hash(synthetic_cache: Path) -> None:
    _, cifar = cifar10(make_ctx(synthetic_cache), None)
    _, nette = imagenette(make_ctx(synthetic_cache), None)
    assert cifar.content_hash == synthetic._PINS[CIFAR_DEFAULT_KEY].content_hash
    assert nette.content_hash == synthetic._PINS[IMAGENETTE_DEFAULT_KEY].content_hash


def test_generated_bytes_that_miss_their_pin_are_a_data_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = ("cifar10", (("per_batch", 20), ("test_size", 10)))
    monkeypatch.setattr(synthetic, "_PINS", {key: synthetic._Pin("0" * 64, 7, 1)})
    with pytest.raises(DataError, match="GENERATOR_VERSION") as exc:
        synthetic._synthetic_cifar10(tmp_path, None, per_batch=20, test_size=10)
    assert "\n" not in str(exc.value)
    assert list(tmp_path.iterdir()) == []  # nothing written, no temporary folder left


@pytest.mark.slow
def test_cifar_pickles_do_not_depend_on_the_numpy_version(default_files: dict[str, dict[str, bytes]]) -> None:
    # numpy's own pickles name numpy._core.multiarray (numpy 2) or numpy.core.multiarray (1).
    for rel, data in default_files["cifar10"].items():
        globals_named = {arg for op, arg, _ in pickletools.genops(data) if op.name in ("GLOBAL", "STACK_GLOBAL")}
        assert globals_named <= {"numpy ndarray", "builtins bytearray"}, rel
    entry = pickle.loads(default_files["cifar10"]["cifar-10-batches-py/test_batch"], encoding="latin1")
    assert entry["data"].dtype == np.uint8 and entry["data"].shape == (1000, 3072) and entry["data"].flags.writeable
    assert entry["batch_label"] == "testing batch 1 of 1" and len(entry["labels"]) == 1000
    assert entry["filenames"][1] == "synthetic_test_batch_00001.png"
    value = {"a": [0, 255, 256, 65535, 65536, 2**31 - 1], "é": [], "": {}, "rows": ["x"]}
    assert pickle.loads(pickler._pickle(value)) == value
    for bad in (True, -1, 2**31, 1.5, (1,), b"x"):
        with pytest.raises(TypeError):
            pickler._pickle([bad])


def decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"), dtype=np.int64)


def libjpeg(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)  # 4:2:0 at this quality, as ours
    return buffer.getvalue()


def test_the_jpeg_encoder_writes_baseline_jpegs_as_good_as_libjpeg() -> None:
    rng = np.random.default_rng(3)
    noise = generator._Draw("test").noise("noise", 1 << 20, 12)
    images = [generator._smooth_image(generator._Draw(f"test {i}"), noise) for i in range(2)]
    for height, width in ((160, 320), (17, 23), (8, 8), (1, 1)):
        smooth = generator._resize(rng.integers(0, 256, size=(3, 3, 3)), max(height, 2), max(width, 2))
        pixels = np.clip(smooth, 0, 255).astype(np.uint8).transpose(1, 2, 0)[:height, :width]
        images.append(np.ascontiguousarray(pixels))
    for pixels in images:
        data = jpeg._encode_jpeg(pixels, quality=90)
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "JPEG" and image.size == pixels.shape[1::-1] and not image.getexif()
            assert "progressive" not in image.info and "jfif" in image.info
        ours, theirs = decode(data), decode(libjpeg(pixels))
        error = np.abs(ours - pixels).mean()
        assert error <= np.abs(theirs - pixels).mean() + 0.5, pixels.shape
        assert np.abs(ours - theirs).mean() < 2, pixels.shape
        assert 0.8 < len(data) / len(libjpeg(pixels)) < 1.25 or pixels.size < 1000


def test_the_integer_dct_matrix_is_the_rounded_dct() -> None:
    for u in range(8):
        for x in range(8):
            exact = 16384 * (math.sqrt(0.5) if u == 0 else 1.0) / 2 * math.cos((2 * x + 1) * u * math.pi / 16)
            assert abs(jpeg._DCT[u, x] - exact) <= 0.5


@pytest.mark.slow
def test_checking_the_default_cifar_cache_is_cheap(synthetic_cache: Path) -> None:
    pin = synthetic._PINS[CIFAR_DEFAULT_KEY]
    start = time.perf_counter()
    assert synthetic._matches_pin(synthetic_cache / CIFAR_DIR, pin)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0  # a loose bound for a shared machine; typically tens of milliseconds


# --- synthetic Imagenette -------------------------------------------------------------


@pytest.mark.slow
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
    _, first = synthetic._synthetic_imagenette(tmp_path / "a", None, per_class=2)
    _, second = synthetic._synthetic_imagenette(tmp_path / "b", None, per_class=2)
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


@pytest.mark.slow
def test_datasets_survive_pickling_for_worker_processes(synthetic_cache: Path, imagenette_tree: Path) -> None:
    cifar, _ = cifar10(make_ctx(synthetic_cache), transforms.ToTensor())
    folder, _ = imagenette(make_ctx(synthetic_cache, imagenette_tree), transforms.ToTensor())
    for dataset in (cifar, folder, with_sample_delay(folder, 1.0)):
        copy = pickle.loads(pickle.dumps(dataset))
        assert len(copy) == len(dataset)
        assert torch.equal(copy[2][0], dataset[2][0]) and copy[2][1] == dataset[2][1]


@pytest.mark.slow
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



@pytest.mark.slow
def test_a_corrupt_image_in_a_real_dataset_is_one_line_naming_the_file_and_the_workload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Not "OSError: Caught OSError in DataLoader worker process 0" with no file named.
    (The command runs in this process; its repeat is a process of its own, as always.)"""
    from PIL import Image as PILImage

    from perfgate.adapters.cli import main

    train = tmp_path / "imagenette2-160" / "train"
    for i, cls in enumerate(IMAGENETTE_CLASSES):
        (train / cls).mkdir(parents=True)
        for j in range(3):
            PILImage.new("RGB", (120 + j, 160), (20 * i, 10 * j, 90)).save(train / cls / f"img{j}.JPEG")
    bad = train / IMAGENETTE_CLASSES[4] / "broken.JPEG"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    monkeypatch.setenv("PERFGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    code = main(["run", "resnet18-imagenette", "--device", "cpu", "--repeats", "1", "--data-root",
                 str(tmp_path / "imagenette2-160"), "--out", str(tmp_path / "out"), "--no-telemetry"])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    errors = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert len(errors) == 1, err
    assert "resnet18-imagenette" in errors[0] and str(bad) in errors[0] and "cannot be read as an image" in errors[0]
