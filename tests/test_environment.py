from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from factories import make_result

from perfgate.model.environment import Environment
from perfgate.store.baselines import load_baseline, updated_baseline

CPU = Environment(device="cpu", torch="2.14.1+cu130", python="3.11.7", cpu_model="Intel(R) Xeon(R) Platinum 8375C",
                  cpu_count=2, os="Linux-6.1", torchvision="0.29.1", git_commit="abc", git_dirty=False)
T4 = dataclasses.replace(CPU, device="cuda", gpu_name="Tesla T4", cuda="13.0", cudnn="91000", gpu_driver="580.1")


def test_key_is_short_stable_and_readable() -> None:
    assert CPU.key() == CPU.key()
    assert CPU.key().startswith("cpu-intel-r-xeon-r-platinum-8375c-torch2.14.1-")
    assert T4.key().startswith("cuda-tesla-t4-torch2.14.1-")
    assert len(T4.key().rsplit("-", 1)[1]) == 8


def test_key_ignores_what_does_not_change_the_measurement() -> None:
    same = dataclasses.replace(T4, git_commit="def", git_dirty=True, gpu_driver="581.0", os="Linux-6.8", python="3.11.9")
    assert same.key() == T4.key()
    # a CPU run does not care which GPU sits in the box
    assert dataclasses.replace(CPU, gpu_name="Tesla T4", cuda="13.0").key() == CPU.key()


def test_key_separates_what_does() -> None:
    keys = {
        CPU.key(), T4.key(),
        dataclasses.replace(T4, gpu_name="NVIDIA A10G").key(),
        dataclasses.replace(T4, torch="2.15.0").key(),
        dataclasses.replace(T4, cudnn="91100").key(),
        dataclasses.replace(CPU, cpu_count=4).key(),
        dataclasses.replace(CPU, python="3.12.1").key(),
    }
    assert len(keys) == 7
    assert T4.differences(dataclasses.replace(T4, gpu_name="NVIDIA A10G")) == {"gpu_name": ("Tesla T4", "NVIDIA A10G")}
    assert "device" in CPU.differences(T4)


def test_round_trip() -> None:
    assert Environment.from_dict(T4.to_dict()) == T4
    assert T4.to_dict()["key"] == T4.key()


# The clock lock of the GPU (``gpu_clocks``): comparable on CUDA, absent from CPU keys.

LOCKED = dataclasses.replace(T4, gpu_clocks="locked 1245 MHz")
UNLOCKED = dataclasses.replace(T4, gpu_clocks="unlocked")
BASELINES = Path(__file__).resolve().parent.parent / "baselines"


def test_cpu_key_is_the_one_it_had_before_gpu_clocks() -> None:
    # The exact key this environment had before the field existed: stored baselines live under it.
    assert CPU.key() == "cpu-intel-r-xeon-r-platinum-8375c-torch2.14.1-254411f5"
    assert "gpu_clocks" not in CPU.comparable_fields()
    # a CPU run ignores a clock state, whatever it says
    assert dataclasses.replace(CPU, gpu_clocks="locked 1245 MHz").key() == CPU.key()
    assert "gpu_clocks" not in CPU.to_dict()


def test_cuda_key_without_a_known_clock_state_is_the_one_it_had_before() -> None:
    assert T4.key() == "cuda-tesla-t4-torch2.14.1-49f9248e"
    assert dataclasses.replace(T4, gpu_clocks="unknown").key() == T4.key()


def test_locked_and_unlocked_gpu_clocks_are_incomparable_and_named() -> None:
    keys = {T4.key(), LOCKED.key(), UNLOCKED.key(), dataclasses.replace(T4, gpu_clocks="locked 1590 MHz").key()}
    assert len(keys) == 4
    assert LOCKED.differences(UNLOCKED) == {"gpu_clocks": ("locked 1245 MHz", "unlocked")}
    assert LOCKED.differences(dataclasses.replace(T4, gpu_clocks="locked 1590 MHz")) == {
        "gpu_clocks": ("locked 1245 MHz", "locked 1590 MHz")}
    assert LOCKED.key().startswith("cuda-tesla-t4-torch2.14.1-")
    assert LOCKED.differences(dataclasses.replace(LOCKED, git_commit="def")) == {}


def test_a_cuda_environment_without_gpu_clocks_compares_as_unknown() -> None:
    assert T4.comparable_fields()["gpu_clocks"] == "unknown"
    assert T4.differences(dataclasses.replace(T4, gpu_clocks="unknown")) == {}
    assert T4.differences(LOCKED) == {"gpu_clocks": ("unknown", "locked 1245 MHz")}
    assert T4.key() != LOCKED.key()


def test_gpu_clocks_is_not_named_when_only_one_side_is_cuda() -> None:
    # the device difference says it; a CPU run has no clock state to differ
    assert "gpu_clocks" not in CPU.differences(LOCKED)
    assert "device" in CPU.differences(LOCKED)


def test_an_old_cuda_file_without_gpu_clocks_loads_as_none() -> None:
    old = {k: v for k, v in T4.to_dict().items() if k != "gpu_clocks"}
    old["key"] = "cuda-tesla-t4-torch2.14.1-49f9248e"
    env = Environment.from_dict(old)
    assert env.gpu_clocks is None
    assert env.key() == old["key"]
    assert Environment.from_dict(LOCKED.to_dict()) == LOCKED
    assert LOCKED.to_dict()["gpu_clocks"] == "locked 1245 MHz"


def _check_stored_keys(path: Path) -> None:
    """The keys a stored baseline file holds (its folder, its ``environment_key`` and each
    recording's environment ``key``) are the key its recorded environments derive today."""
    load_baseline(path)  # well-formed
    data = json.loads(path.read_text())
    assert data["environment_key"] == path.parent.name, path
    for recording in data["recordings"]:
        stored = recording["environment"]
        assert Environment.from_dict(stored).key() == stored["key"] == data["environment_key"], path


def test_stored_baselines_keep_their_environment_keys() -> None:
    paths = sorted(BASELINES.glob("*/*.json"))
    if not paths:
        pytest.skip(f"{BASELINES} holds no stored baseline yet")
    for path in paths:
        _check_stored_keys(path)


def test_a_cpu_baseline_written_before_gpu_clocks_keeps_its_key(tmp_path: Path) -> None:
    # A baseline as the code before the field wrote it: no gpu_clocks, the key of that code.
    result = make_result(env=CPU)
    data = updated_baseline(None, result, "before gpu_clocks", append=False).to_dict()
    old_key = "cpu-intel-r-xeon-r-platinum-8375c-torch2.14.1-254411f5"
    data["environment_key"] = old_key
    for recording in data["recordings"]:
        recording["environment"].pop("gpu_clocks", None)
        recording["environment"]["key"] = old_key
    path = tmp_path / old_key / "tiny.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    _check_stored_keys(path)


def test_the_gpu_uuid_tells_a_fleets_cards_apart_without_splitting_the_key() -> None:
    from perfgate.model.result import environment_from_fields
    from perfgate.model.schema import Fields

    card = dataclasses.replace(T4, gpu_uuid="GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    assert card.key() == T4.key()  # two cards of one model are compared: that is a fleet
    assert "gpu_uuid" not in CPU.to_dict() and "gpu_uuid" not in T4.to_dict()  # written as before
    data = card.to_dict()
    assert data["gpu_uuid"] == card.gpu_uuid
    assert environment_from_fields(Fields(data, "environment")) == card


@pytest.mark.parametrize(("given", "recorded"), [
    ("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"),
    ("GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"),
    ("", None), ("not a uuid\n", None), (None, None),
])
def test_the_gpu_uuid_is_read_from_torch_as_nvidia_smi_names_it(monkeypatch: pytest.MonkeyPatch, given, recorded) -> None:
    import types

    import torch

    from perfgate.measure import fingerprint

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(uuid=given))
    assert fingerprint.gpu_uuid(0) == recorded

    def broken(index: int) -> None:
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(torch.cuda, "get_device_properties", broken)
    assert fingerprint.gpu_uuid(0) is None


def test_a_recorded_run_takes_the_gpu_uuid_its_result_holds() -> None:
    from perfgate.store.history_values import Recording

    result = make_result()
    card = dataclasses.replace(result, environment=dataclasses.replace(result.environment, gpu_uuid="GPU-abc"))
    assert Recording(card, None, "stored").gpu_uuid == "GPU-abc"
    assert Recording(card, None, "stored", gpu_uuid="GPU-given").gpu_uuid == "GPU-given"
    assert Recording(result, None, "stored").gpu_uuid is None
