"""``perfgate ci`` with no workload named measures what the judge will judge.

The judge refuses results for perfgate's bundled reference workloads unless the base selects
them or holds their baselines (``tests/test_judge_design.py``). So ``ci``'s default selection
keeps the project's own workloads and leaves a reference workload out unless the base's store
holds a baseline of it for the device: measuring it would cost the runner its time and end the
gate in an ERROR.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from perfgate.adapters import selection
from perfgate.gate.config import load_settings

OWN = '''
from perfgate import Params, Workload


def build(ctx):
    raise NotImplementedError


MINE = Workload(name="mine", version=1, description="the project's own", build=build,
                params=Params(batch_size=2, steps=2, warmup_steps=1))
'''


def _args() -> argparse.Namespace:
    from perfgate.adapters.ci import add_parser

    parser = argparse.ArgumentParser(prog="perfgate")
    add_parser(parser.add_subparsers())
    return parser.parse_args(["ci", "--base-dir", ".", "--device", "cpu", "-q"])


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "mine.py").write_text(OWN)
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate]\nworkloads_path = ["workloads"]\n'
                                             'baselines = "baselines"\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _names(project: Path, *, prefer_project: bool) -> list[str]:
    settings = load_settings(project / "pyproject.toml")
    _, jobs = selection.jobs_of(_args(), settings, prefer_project=prefer_project, shard=False)
    return [job.workload.name for job in jobs]


def test_ci_leaves_out_reference_workloads_the_base_holds_no_baseline_of(project: Path) -> None:
    assert _names(project, prefer_project=True) == ["mine"]
    # perfgate run (not ci) still runs every discovered workload, the references included
    everything = _names(project, prefer_project=False)
    assert "mine" in everything and "resnet18-cifar10" in everything


def test_ci_measures_a_reference_workload_the_base_holds_a_baseline_of(project: Path) -> None:
    store = project / "baselines" / "cpu-test-key"
    store.mkdir(parents=True)
    (store / "resnet18-cifar10.json").write_text(json.dumps({"schema": 1}))
    assert _names(project, prefer_project=True) == ["mine", "resnet18-cifar10"]
    # a baseline for another device does not count
    other = project / "baselines" / "cuda-test-key"
    other.mkdir()
    (other / "resnet18-imagenette.json").write_text("{}")
    assert "resnet18-imagenette" not in _names(project, prefer_project=True)
