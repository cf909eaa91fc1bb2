"""Builders of well-formed results for tests that do not need a real run, and the small
helpers the shared fixtures in conftest.py need (a judge's base settings, git, fake commands)."""

from __future__ import annotations

import math
import os
import random
import subprocess
import textwrap
from pathlib import Path

from perfgate.model.environment import Environment
from perfgate.model.result import RepeatResult, RunResult

ENV = Environment(device="cpu", torch="2.14.1", python="3.11.7", cpu_model="Test CPU", cpu_count=2,
                  os="Linux", torchvision="0.29.1", git_commit="0123abcd", git_dirty=False)

BASE_PHASES = {"data_wait": 2.0, "h2d": 0.5, "forward": 30.0, "backward": 60.0, "optimizer": 7.0}

# The base commit's settings in the judge's tests (the ``base`` fixture, tests/conftest.py): one
# window a process and no budget (the looks end at max_blocks), as the tests' results are made;
# a test that judges windows = "auto" or a budget sets them itself.
BLOCKS = 3
BASE_SETTINGS = (f'[tool.perfgate]\nbaselines = "baselines"\ndelta = 0.03\nblocks = {BLOCKS}\nrepeats = 3\n'
                 'windows = 1\nbudget = "none"\n')


START = "fork"
"""How a made repeat's process started (``torch_settings["process_start"]``, which every repeat
of a result records): a paired gate's, as the judge's tests judge (the base's ``start = "auto"``
forks in the paired design)."""


def make_repeat(index: int, *, scale: float = 1.0, phase_scale: dict[str, float] | None = None,
                steps: int = 10, seed: int = 0, jitter: float = 0.01, peak: int | None = 1_000_000,
                start: str = START) -> RepeatResult:
    rng = random.Random(seed * 1000 + index)
    series: dict[str, list[float]] = {p: [] for p in (*BASE_PHASES, "step")}
    for _ in range(steps):
        total = 0.0
        for phase, value in BASE_PHASES.items():
            v = value * scale * (phase_scale or {}).get(phase, 1.0) * math.exp(rng.gauss(0, jitter))
            series[phase].append(v)
            total += v
        series["step"].append(total + 0.2)
    window_s = sum(series["step"]) / 1e3
    return RepeatResult(
        index=index, started_at="2026-11-30T00:00:00+00:00", timing="perf_counter", window_s=window_s,
        phases_ms={k: tuple(v) for k, v in series.items()}, samples_per_s=steps * 8 / window_s,
        peak_memory_bytes=peak, peak_memory_kind="cpu_peak_rss",
        torch_settings={"num_threads": 2, "process_start": start}, loader_settings={"batch_size": 8, "num_workers": 0},
    )


def make_result(workload: str = "tiny", *, repeats: int = 5, scale: float = 1.0, seed: int = 0,
                phase_scale: dict[str, float] | None = None, env: Environment = ENV,
                params: dict | None = None, version: int = 1, jitter: float = 0.01,
                repeat_scales: list[float] | None = None, peak: int | None = 1_000_000, start: str = START,
                steps: int = 10) -> RunResult:
    scales = repeat_scales or [scale] * repeats
    return RunResult(
        workload=workload, workload_version=version, workload_source="file:/tmp/tiny.py", device=env.device,
        params=params or {"batch_size": 8, "steps": 10}, overrides={}, environment=env,
        data={"kind": "synthetic", "path": "memory", "content_hash": "0" * 64, "hash_method": "none",
              "num_samples": 256, "description": ""},
        created_at="2026-11-30T00:00:00+00:00", perfgate_version="0.1.0",
        repeats=tuple(make_repeat(i, scale=s, phase_scale=phase_scale, seed=seed, jitter=jitter, peak=peak, start=start,
                                  steps=steps) for i, s in enumerate(scales)),
    )


def define_workloads(tree: Path, *names: str, file: str = "workloads/defined.py") -> None:
    """Make ``tree`` define ``names`` the way a repository does: module-level ``Workload(...)``
    calls in a workload file. The judge reads them as data (``perfgate.store.definitions``),
    so the file is never imported and its builders need not exist."""
    path = tree / file
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["from perfgate import Workload", ""]
    lines += [f"W{i} = Workload(name={name!r}, version=1, description='', build=None)" for i, name in enumerate(names)]
    path.write_text("\n".join(lines) + "\n")


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` with a fixed author; its stdout, stripped."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def fake(bin_dir: Path, name: str, body: str) -> None:
    """A fake command ``name`` in ``bin_dir``: a bash script of ``body`` (dedented)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    path.chmod(0o755)
