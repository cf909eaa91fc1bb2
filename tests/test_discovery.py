from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.model.errors import UsageError, WorkloadError
from perfgate.store.discovery import discover

WORKLOAD = '''
from perfgate import Params, Workload
{name_var} = Workload(name="{name}", version=1, build=lambda ctx: None,
                      params=Params(batch_size=1, input_size=1, warmup_steps=0, steps=2))
'''


def test_reference_workloads_are_always_there(tmp_path: Path) -> None:
    registry = discover(project_dir=tmp_path)
    assert {"resnet18-cifar10", "resnet18-imagenette"} <= set(registry.names())
    assert registry.get("resnet18-cifar10").source == "module:perfgate_workloads.resnet18_cifar10"


def test_project_workloads_dir_and_extra_paths(tmp_path: Path) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "mine.py").write_text(WORKLOAD.format(name_var="A", name="mine"))
    (tmp_path / "workloads" / "_private.py").write_text("raise SystemExit('must not be imported')")
    extra = tmp_path / "elsewhere.py"
    extra.write_text(WORKLOAD.format(name_var="B", name="other"))
    registry = discover([extra], project_dir=tmp_path)
    assert {"mine", "other", "resnet18-cifar10"} <= set(registry.names())
    assert registry.get("mine").source == f"file:{(tmp_path / 'workloads' / 'mine.py').resolve()}"
    assert [w.name for w in registry.select(["other", "mine", "other"])] == ["other", "mine"]


def test_unknown_name_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"unknown workload 'resnet19'; known workloads: .*resnet18-cifar10"):
        discover(project_dir=tmp_path).get("resnet19")


def test_two_definitions_of_one_name_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "mine.py").write_text(WORKLOAD.format(name_var="A", name="resnet18-cifar10"))
    with pytest.raises(UsageError, match="defined twice"):
        discover(project_dir=tmp_path)


def test_the_reference_files_reached_twice_are_not_duplicates() -> None:
    # perfgate's own repository: ./workloads/ holds the reference modules themselves.
    repo = Path(__file__).resolve().parents[1]
    registry = discover(project_dir=repo)
    assert registry.names().count("resnet18-cifar10") == 1


def test_a_broken_module_and_a_missing_path(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(WorkloadError, match="broken.py: importing the workload module failed: ModuleNotFoundError"):
        discover([broken], project_dir=tmp_path)
    with pytest.raises(UsageError, match="workload path not found"):
        discover([tmp_path / "absent"], project_dir=tmp_path)
