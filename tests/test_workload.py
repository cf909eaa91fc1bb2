"""The workload API: parameters, profiles and --set overrides."""

from __future__ import annotations

import pytest

from perfgate.model.errors import UsageError
from perfgate.model.workload import Params, Workload, apply_overrides, parse_assignments


def params(**kw) -> Params:
    base = dict(batch_size=8, input_size=32, warmup_steps=2, steps=10, extra={"lr": 0.1, "delay_ms": 0.0, "fused": False})
    base.update(kw)
    return Params(**base)


def test_overrides_are_typed_by_the_parameter() -> None:
    p = apply_overrides(params(), parse_assignments(["batch_size=32", "pin_memory=yes", "lr=0.5",
                                                     "fused=true", "prefetch_factor=4", "precision=bf16"]))
    assert (p.batch_size, p.pin_memory, p.extra["lr"], p.extra["fused"], p.prefetch_factor, p.precision) == (
        32, True, 0.5, True, 4, "bf16")
    assert apply_overrides(p, {"prefetch_factor": "none"}).prefetch_factor is None


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("batch_sise=3", "unknown parameter 'batch_sise'.*allowed: .*batch_size"),
        ("batch_size=many", "batch_size must be an integer"),
        ("batch_size=0", "batch_size must be an integer >= 1"),
        ("precision=fp8", "precision must be one of fp32, bf16, fp16"),
        ("memory_format=nhwc", "memory_format must be one of contiguous, channels_last"),
        ("pin_memory=maybe", "pin_memory must be true or false"),
        ("lr=fast", "lr must be a number"),
        ("lr=nan", "lr must be a finite number"),
        ("steps=1", "steps must be an integer >= 2"),
    ],
)
def test_bad_overrides_name_the_key_and_what_it_accepts(item: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        apply_overrides(params(), parse_assignments([item]), workload="w")


def test_set_needs_key_equals_value() -> None:
    with pytest.raises(UsageError, match="--set expects key=value"):
        parse_assignments(["batch_size"])


def test_loader_settings_leave_out_what_dataloader_refuses_without_workers() -> None:
    assert params(num_workers=0, prefetch_factor=4, persistent_workers=True).loader_settings() == {
        "batch_size": 8, "num_workers": 0, "pin_memory": False}
    assert params(num_workers=2, prefetch_factor=4, persistent_workers=True).loader_settings() == {
        "batch_size": 8, "num_workers": 2, "pin_memory": False, "persistent_workers": True, "prefetch_factor": 4}


def test_profiles_then_overrides() -> None:
    w = Workload("w", 1, build=lambda ctx: None, params=params(), profiles={"cpu": {"batch_size": 4}})  # type: ignore[arg-type, return-value]
    assert w.resolve("cuda").batch_size == 8
    assert w.resolve("cpu").batch_size == 4
    assert w.resolve("cpu", {"batch_size": "2"}).batch_size == 2


def test_params_round_trip_through_the_flat_form() -> None:
    p = params(num_workers=3, prefetch_factor=2)
    assert Params.from_dict(p.to_dict()) == p


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Bad Name"}, "workload name"),
        ({"version": 0}, "version must be an integer >= 1"),
        ({"profiles": {"tpu": {}}}, "profile must be one of cpu, cuda"),
        ({"profiles": {"cpu": {"nope": 1}}}, "unknown parameter 'nope'"),
    ],
)
def test_a_malformed_workload_fails_when_defined(kwargs: dict, message: str) -> None:
    base = dict(name="w", version=1, build=lambda ctx: None, params=params())
    base.update(kwargs)
    with pytest.raises(ValueError, match=message):
        Workload(**base)  # type: ignore[arg-type]


def test_extra_parameters_cannot_shadow_standard_ones() -> None:
    with pytest.raises(ValueError, match="shadows a standard parameter"):
        params(extra={"steps": 3})


def test_cuda_needs_a_warmup_step_and_the_cpu_does_not() -> None:
    from perfgate.model.errors import EXIT_ERROR

    w = Workload("w", 1, build=lambda ctx: None, params=params(warmup_steps=2))  # type: ignore[arg-type, return-value]
    assert w.resolve("cpu", {"warmup_steps": "0"}).warmup_steps == 0
    assert w.resolve("cuda", {"warmup_steps": "1"}).warmup_steps == 1
    with pytest.raises(UsageError) as caught:
        w.resolve("cuda", {"warmup_steps": "0"})
    message = caught.value.message
    assert message.startswith("warmup_steps must be at least 1 on cuda (workload w), got 0")
    assert "\n" not in message and "cuDNN" in message
    assert caught.value.exit_code == EXIT_ERROR == 2
    # a reference value of 0 is fine on the CPU, refused on CUDA unless a profile fixes it
    cpu_only = Workload("w", 1, build=lambda ctx: None, params=params(warmup_steps=0))  # type: ignore[arg-type, return-value]
    assert cpu_only.resolve("cpu").warmup_steps == 0
    with pytest.raises(UsageError, match="warmup_steps must be at least 1 on cuda"):
        cpu_only.resolve("cuda")
    fixed = Workload("w", 1, build=lambda ctx: None, params=params(warmup_steps=0),  # type: ignore[arg-type, return-value]
                     profiles={"cuda": {"warmup_steps": 5}})
    assert fixed.resolve("cuda").warmup_steps == 5


def test_a_cuda_profile_without_warmup_fails_when_defined() -> None:
    with pytest.raises(ValueError, match="profile 'cuda' of workload w: warmup_steps must be at least 1 on cuda"):
        Workload("w", 1, build=lambda ctx: None, params=params(), profiles={"cuda": {"warmup_steps": 0}})  # type: ignore[arg-type, return-value]


def test_the_compiled_reference_workload_says_when_inductor_has_no_cpu_compiler(monkeypatch) -> None:
    import shutil

    import pytest
    from perfgate_workloads import resnet18_cifar10

    from perfgate.model.errors import WorkloadError
    from perfgate.store.discovery import discover

    compiled = discover().get("resnet18-cifar10-compiled")
    plain = discover().get("resnet18-cifar10")
    assert compiled.resolve("cpu").extra["compile_backend"] == "inductor"
    assert "compile_backend" not in plain.resolve("cpu").extra  # the eager workload's parameters are unchanged
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(WorkloadError) as caught:
        resnet18_cifar10._require_cpu_toolchain("resnet18-cifar10-compiled")
    message = caught.value.message
    assert "\n" not in message and "needs a C++ compiler" in message and "--set compile_backend=eager" in message
