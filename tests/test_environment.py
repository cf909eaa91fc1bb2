from __future__ import annotations

import dataclasses

from perfgate.environment import Environment

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
