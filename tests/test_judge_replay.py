"""The judge replays the sequential looks from the blocks in the artifact with its own boundary."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
from factories import make_result
from test_judge import base, run, write_run  # noqa: F401 (base: the fixture)

from perfgate.model.result import RunResult


def blocks_of(name: str, scales: list[float], seed: int) -> RunResult:
    """Two repeats a block, block ``b`` at ``scales[b]`` (each repeat with 1% jitter)."""
    per_repeat = [s for s in scales for _ in range(2)]
    result = make_result(name, repeats=len(per_repeat), repeat_scales=per_repeat, seed=seed)
    return dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, block=i // 2)
                                                     for i, r in enumerate(result.repeats)))


def noisy_pair(blocks: int, seed: int = 0, slow: float = 0.0, sd: float = 0.25) -> tuple[RunResult, RunResult]:
    rng = np.random.default_rng(seed)
    machine = np.exp(rng.normal(0, 0.2, blocks))  # shared by both sides of a block: cancels
    head = machine * np.exp(rng.normal(0, sd, blocks)) * (1 + slow)
    base_ = machine * np.exp(rng.normal(0, sd, blocks))
    return blocks_of("tiny", head.tolist(), seed + 1), blocks_of("tiny", base_.tolist(), seed + 2)


def judged(tmp_path: Path, base: Path, head: RunResult, base_side: RunResult, folder: str = "r") -> dict:
    results = write_run(tmp_path / folder, {"tiny": head}, {"tiny": base_side})
    code, _, err, comment = run(tmp_path, results, base)
    report = json.loads((tmp_path / "judged" / "report.json").read_text())
    (workload,) = report["workloads"]
    return {"code": code, "err": err, "comment": comment, "workload": workload, "report": report}


def test_an_artifact_that_stops_undecided_before_max_blocks_is_inconclusive_stopped_at_the_budget(
        tmp_path: Path, base: Path) -> None:
    head, base_side = noisy_pair(8, seed=3)
    out = judged(tmp_path, base, head, base_side)
    w = out["workload"]
    assert w["verdict"] == "INCONCLUSIVE", w["reason"]
    assert w["progress"].startswith("stopped at the budget: the results hold 8 blocks"), w["progress"]
    assert out["code"] == 3


def test_blocks_after_the_judges_decision_are_not_read(tmp_path: Path, base: Path) -> None:
    # 40% slower: the judge's first look (3 blocks) decides; the 6 blocks after it are faster
    # and would pull the estimate down; they are never read.
    head_slow = [1.4] * 3 + [0.7] * 6
    head = blocks_of("tiny", head_slow, 1)
    base_side = blocks_of("tiny", [1.0] * 9, 2)
    out = judged(tmp_path, base, head, base_side)
    w = out["workload"]
    assert w["verdict"] == "REGRESSION", w["reason"]
    assert w["progress"] == "decided after 3 blocks (look 1 of 28)"
    assert w["step"]["count"] == 3


def test_a_gap_in_the_blocks_is_an_error_naming_it(tmp_path: Path, base: Path) -> None:
    head = blocks_of("tiny", [1.0] * 5, 1)
    base_side = blocks_of("tiny", [1.0] * 5, 2)
    head = dataclasses.replace(head, repeats=tuple(r for r in head.repeats if r.block != 3))
    out = judged(tmp_path, base, head, base_side)
    assert out["workload"]["verdict"] == "ERROR"
    assert "the head side lacks block(s) 3 of the 0–4 measured" in out["workload"]["reason"]


def test_fewer_blocks_than_the_judges_first_look_is_an_error(tmp_path: Path, base: Path) -> None:
    out = judged(tmp_path, base, blocks_of("tiny", [1.0] * 2, 1), blocks_of("tiny", [1.0] * 2, 2))
    assert out["workload"]["verdict"] == "ERROR"
    assert "the first look was not measured whole: 2 block(s) of its 3" in out["workload"]["reason"]


def test_blocks_beyond_the_judges_max_blocks_are_not_read(tmp_path: Path, base: Path) -> None:
    (base / "pyproject.toml").write_text((base / "pyproject.toml").read_text() + "max_blocks = 4\n")
    head, base_side = noisy_pair(12, seed=5)
    out = judged(tmp_path, base, head, base_side)
    w = out["workload"]
    assert w["step"]["count"] <= 4
    if w["verdict"] == "INCONCLUSIVE":
        assert w["progress"] == "undecided at the last planned look (4 blocks, max_blocks)"
