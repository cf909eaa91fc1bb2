"""The judge replays the sequential looks from the blocks in the artifact with its own boundary."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from factories import define_workloads, make_result
from test_judge import run, write_run

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


# --- a short run is no decision ---------------------------------------------------------------

START = datetime(2026, 12, 1, 9, 0, 0, tzinfo=timezone.utc)


def first(result: RunResult, blocks: int) -> RunResult:
    """``result`` with its first ``blocks`` blocks: what a job that stopped there uploads."""
    return dataclasses.replace(result, repeats=tuple(r for r in result.repeats if r.block < blocks))


def timed(result: RunResult, side: str, *, block_s: float = 5.0, gap_s: float = 0.0) -> RunResult:
    """Each repeat started as a measuring gate starts it: block ``b`` at ``b * block_s`` (and
    ``gap_s`` later from block 1 on: the counted runs after block 0), its four processes a
    quarter block apart, base, head, head, base."""
    quarters = (0, 3) if side == "base" else (1, 2)
    repeats = []
    for r in result.repeats:
        at = r.block * block_s + (gap_s if r.block else 0.0) + quarters[r.index % 2] * block_s / 4
        repeats.append(dataclasses.replace(r, started_at=(START + timedelta(seconds=at)).isoformat(
            timespec="milliseconds")))
    return dataclasses.replace(result, repeats=tuple(repeats))


def renamed(result: RunResult, name: str) -> RunResult:
    return dataclasses.replace(result, workload=name)


def with_settings(base: Path, extra: str) -> None:
    """The base's settings with ``extra`` lines, each replacing the key's line if it has one."""
    text = (base / "pyproject.toml").read_text()
    for line in extra.splitlines():
        key = line.split("=", 1)[0].strip()
        text = re.sub(rf"(?m)^{re.escape(key)} = .*\n", "", text)
    (base / "pyproject.toml").write_text(text + extra)


SLOW_AT_9 = {"seed": 18, "slow": 0.06, "sd": 0.05}
"""A head 6% slower whose 30 blocks the judge decides REGRESSION at the 9th (max_blocks 30)."""


def test_a_short_run_without_a_budget_is_an_error_not_a_stop_at_the_budget(tmp_path: Path, base: Path) -> None:
    head, base_side = noisy_pair(30, **SLOW_AT_9)
    control = judged(tmp_path, base, head, base_side, "all")
    assert (control["code"], control["workload"]["verdict"]) == (1, "REGRESSION")
    assert control["workload"]["progress"] == "decided after 9 blocks (look 7 of 28)"
    # the same blocks, the first 8 uploaded (a job run with --max-blocks 8, or cut short)
    out = judged(tmp_path, base, first(head, 8), first(base_side, 8), "short")
    w = out["workload"]
    assert (out["code"], w["verdict"]) == (2, "ERROR"), w
    assert w["reason"].startswith("tiny: the results hold 8 block(s), the base's settings plan looks up to 30 "
                                  "and the boundary had not decided at 8; the base sets no budget"), w["reason"]
    assert "stopped at the budget" not in out["comment"]


def test_a_short_run_under_a_budget_it_did_not_spend_is_an_error(tmp_path: Path, base: Path) -> None:
    """The base's budget holds 30 blocks of 5 s; the first 8 blocks, 40 s of the 2 min 30 s."""
    with_settings(base, 'budget = "150s"\n')
    head, base_side = (timed(r, side) for r, side in zip(noisy_pair(30, **SLOW_AT_9), ("head", "base"), strict=True))
    control = judged(tmp_path, base, head, base_side, "all")
    assert (control["code"], control["workload"]["verdict"]) == (1, "REGRESSION")
    out = judged(tmp_path, base, first(head, 8), first(base_side, 8), "short")
    w = out["workload"]
    assert (out["code"], w["verdict"]) == (2, "ERROR"), w
    assert w["reason"].startswith("tiny: the results hold 8 block(s), the base's settings plan looks up to 500"), w
    assert "its blocks record about 40 s of the base's budget of 2 min 30 s: the budget was not spent" in w["reason"], w


def test_a_run_whose_recorded_time_fills_the_budget_is_stopped_at_the_budget(tmp_path: Path, base: Path) -> None:
    """5 s blocks, but the counted runs after the first took 110 s, so the budget ended after 8
    blocks: that look is the last, all of α spent there, as the measuring gate spent it; 25%
    noise leaves +6% open, so too noisy to gate (an error), never green."""
    with_settings(base, 'budget = "150s"\n')
    head, base_side = (timed(r, side, gap_s=110.0) for r, side in zip(noisy_pair(8, seed=3), ("head", "base"), strict=True))
    out = judged(tmp_path, base, head, base_side)
    w = out["workload"]
    assert (out["code"], w["verdict"]) == (2, "TOO_NOISY"), w
    assert w["progress"].startswith("undecided at the last look, at the budget (8 blocks): all of α spent"), w["progress"]
    assert "**Check: fails as an error** (exit code 2)" in out["comment"] and "too noisy to gate" in out["comment"]
    # the same files under inconclusive = "pass": green, as every undecided gate was before
    with_settings(base, 'inconclusive = "pass"\n')
    relaxed = judged(tmp_path, base, head, base_side, "relaxed")
    assert (relaxed["code"], relaxed["workload"]["verdict"]) == (3, "INCONCLUSIVE")
    assert "**Check: neutral** (exit code 3)" in relaxed["comment"]


def test_a_budget_stops_every_undecided_workload_at_the_same_block(tmp_path: Path, base: Path) -> None:
    define_workloads(base, "other", file="workloads/other.py")
    with_settings(base, 'budget = "150s"\n')
    tiny = [timed(r, side, gap_s=110.0) for r, side in zip(noisy_pair(12, seed=3), ("head", "base"), strict=True)]
    other = [timed(renamed(r, "other"), side, gap_s=110.0) for r, side in zip(noisy_pair(12, seed=7), ("head", "base"), strict=True)]
    # the control: both stopped after 8 blocks, the budget spent
    folder = write_run(tmp_path / "same", {"tiny": first(tiny[0], 8), "other": first(other[0], 8)},
                       {"tiny": first(tiny[1], 8), "other": first(other[1], 8)})
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2 and comment.count("at the budget (8 blocks): all of α spent") >= 2, comment
    # tiny's files end after 8 blocks, other's went on to 12, undecided at 8: not a budget stop
    folder = write_run(tmp_path / "apart", {"tiny": first(tiny[0], 8), "other": other[0]},
                       {"tiny": first(tiny[1], 8), "other": other[1]})
    code, _, _, comment = run(tmp_path, folder, base)
    report = json.loads((tmp_path / "judged" / "report.json").read_text())
    verdicts = {w["workload"]: w for w in report["workloads"]}
    assert code == 2 and verdicts["tiny"]["verdict"] == "ERROR", comment
    assert "other, undecided too, holds 12: a budget stops every workload still undecided at the same block" \
        in verdicts["tiny"]["reason"]


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


def test_blocks_beyond_the_judges_max_blocks_are_refused(tmp_path: Path, base: Path) -> None:
    with_settings(base, "max_blocks = 4\n")
    head, base_side = noisy_pair(12, seed=5)
    out = judged(tmp_path, base, head, base_side)
    w = out["workload"]
    assert (out["code"], w["verdict"]) == (2, "ERROR")
    assert "holds block 4, beyond the last look the base's settings allow (4 blocks): refused, not read" in w["reason"]
    w = judged(tmp_path, base, first(head, 4), first(base_side, 4), "four")["workload"]
    assert w["step"]["count"] == 4
