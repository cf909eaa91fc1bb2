"""``windows = "auto"``: a paired gate designs each workload's windows from this runner's earlier
gates, records what it designed from, and the judge re-derives the windows from that record."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
from factories import make_repeat, make_result
from test_judge import BASE_SHA, HEAD_SHA, paired, run, write_run
from test_judge_design import judged_workload, settings
from test_judge_fail_closed import SLOW

from perfgate.analysis.design import (
    MAX_AUTO_WINDOWS,
    MIN_AUTO_WINDOWS,
    PILOT_WINDOWS,
    block_overheads,
    choose_windows,
    evidence_of,
    pooled,
)
from perfgate.gate.config import load_settings
from perfgate.gate.judge import expected_windows
from perfgate.model.design import DesignEvidence
from perfgate.model.errors import UsageError
from perfgate.model.manifest import RunManifest
from perfgate.model.result import RepeatResult, RunResult
from perfgate.store.design_cache import evidence_path, load_evidence, record_evidence
from perfgate.store.untrusted_folders import manifest_from_dict


def evidence(process_var: float = 0.01, window_var: float = 0.01, process_s: float = 25.0, window_s: float = 1.0,
             df: int = 10) -> DesignEvidence:
    return DesignEvidence(process_var=process_var, process_df=df, window_var=window_var, window_df=df,
                          process_s=process_s, window_s=window_s)


FIVE = evidence()
"""Evidence whose design is five windows: equal noise, a process 25 windows' worth of time."""


# --- the rule ---------------------------------------------------------------------------------

def test_no_evidence_gives_the_pilot_and_the_rule_follows_the_continuous_optimum() -> None:
    assert choose_windows(None) == PILOT_WINDOWS == 3
    assert choose_windows(FIVE) == 5
    for ratio in (0.05, 0.3, 1.0, 3.0):
        for cost in (0.5, 2.2, 10.0, 60.0):
            found = choose_windows(evidence(process_var=0.01, window_var=0.01 * ratio, process_s=cost))
            optimum = math.sqrt(ratio * cost)
            clipped = min(max(optimum, MIN_AUTO_WINDOWS), MAX_AUTO_WINDOWS)
            assert abs(found - clipped) <= 1, (ratio, cost, found, optimum)


def test_costly_processes_and_noisy_windows_ask_for_more_windows_noisy_processes_for_fewer() -> None:
    assert choose_windows(evidence(process_s=200.0, window_var=0.05)) == MAX_AUTO_WINDOWS
    assert choose_windows(evidence(process_s=0.1, window_var=0.0001)) == MIN_AUTO_WINDOWS
    assert choose_windows(evidence(process_var=0.0, window_var=0.01)) == MAX_AUTO_WINDOWS  # processes do not vary
    assert choose_windows(evidence(process_var=0.0, window_var=0.0)) == MIN_AUTO_WINDOWS   # a tie: fewer


def test_pooling_weighs_variances_by_their_degrees_of_freedom_and_takes_the_median_cost() -> None:
    one = evidence(process_var=0.01, window_var=0.04, process_s=1.0, df=2)
    two = evidence(process_var=0.04, window_var=0.01, process_s=3.0, df=6)
    three = evidence(process_var=0.04, window_var=0.01, process_s=100.0, df=6)
    found = pooled([one, two, three])
    assert found is not None and found.gates == 3 and found.process_df == 14
    assert found.process_var == pytest.approx((0.02 + 0.24 + 0.24) / 14)
    assert found.window_var == pytest.approx((0.08 + 0.06 + 0.06) / 14)
    assert found.process_s == 3.0  # one slow gate does not move the cost
    assert pooled([]) is None


@pytest.mark.parametrize(("field", "value"), [
    ("process_var", float("nan")), ("process_var", -0.1), ("window_var", True), ("window_s", 0.0),
    ("process_df", 0), ("process_df", 1.5), ("gates", "3"), ("process_s", 1e12),
])
def test_evidence_read_from_a_file_is_checked_field_by_field(field: str, value: object) -> None:
    data = {**FIVE.to_dict(), field: value}
    with pytest.raises(ValueError, match=field):
        DesignEvidence.from_dict(data)


def test_evidence_with_unknown_or_missing_fields_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown field 'windows'"):
        DesignEvidence.from_dict({**FIVE.to_dict(), "windows": 8})
    data = FIVE.to_dict()
    del data["window_s"]
    with pytest.raises(ValueError, match="window_s missing"):
        DesignEvidence.from_dict(data)
    assert DesignEvidence.from_dict(FIVE.to_dict()) == FIVE


# --- what one gate measured -------------------------------------------------------------------

def _side(blocks: int, process_sd: float, window_sd: float, seed: int, *, windows: int = 4, steps: int = 8,
          process_s: float = 3.0) -> list[RepeatResult]:
    """Two processes per block, each ``windows`` windows of ``steps`` steps with planted noise,
    started ``process_s`` + their windows apart."""
    rng = random.Random(seed)
    out = []
    for block in range(blocks):
        for k in range(2):
            p = rng.gauss(0, process_sd)
            step: list[float] = []
            for _ in range(windows):
                w = rng.gauss(0, window_sd)
                step += [10.0 * math.exp(p + w + rng.gauss(0, 0.001)) for _ in range(steps)]
            base = make_repeat(block * 4 + k, steps=windows * steps, seed=seed)
            window_s = sum(step) / 1e3
            # this side's two processes of the block start at 2k and 2k+1 (the other side's in between)
            at = block * 1000.0 + (2 * k + seed % 2) * (process_s + window_s)
            out.append(dataclasses.replace(
                base, block=block, windows=windows, window_s=window_s, phases_ms={**base.phases_ms, "step": tuple(step)},
                started_at=f"2026-12-01T00:{int(at // 60):02d}:{at % 60:06.3f}+00:00"))
    return out


def test_one_gates_evidence_finds_its_planted_noise_and_costs() -> None:
    base = _side(30, process_sd=0.08, window_sd=0.03, seed=2)
    head = _side(30, process_sd=0.08, window_sd=0.03, seed=3)
    found = evidence_of(base, head)
    assert found is not None
    assert 0.05 < math.sqrt(found.process_var) < 0.11
    assert 0.02 < math.sqrt(found.window_var) < 0.04
    assert found.window_s == pytest.approx(0.08, rel=0.1)  # 8 steps of ~10 ms
    assert found.process_s == pytest.approx(3.0, rel=0.1)


def _contended(repeat: RepeatResult, share: float) -> RepeatResult:
    machine = {"cpus": 2, "other_cpu_share": {"median": share, "p90": share, "max": share, "mean": share, "samples": 9}}
    return dataclasses.replace(repeat, telemetry={**(repeat.telemetry or {}), "machine": machine})


@pytest.mark.parametrize("contended", [0, 1])
def test_only_a_gate_no_other_process_shared_teaches_the_next_gates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    contended: int) -> None:
    from perfgate.gate.auto_windows import keep_evidence

    monkeypatch.setenv("PERFGATE_DESIGN_DIR", str(tmp_path))
    base = _side(30, process_sd=0.08, window_sd=0.03, seed=2)
    head = _side(30, process_sd=0.08, window_sd=0.03, seed=3)
    if contended:
        head[7] = _contended(head[7], 0.5)  # one process of sixty, half the CPUs taken by another
    else:
        head[7] = _contended(head[7], 0.02)  # the quiet machine's background
    result = lambda repeats: dataclasses.replace(make_result("w", repeats=1), repeats=tuple(repeats))  # noqa: E731
    said: list[str] = []
    keep_evidence({"w": (result(base), result(head))}, "cpu", said.append)
    kept = load_evidence(tmp_path, "w", "cpu", said.append)
    if contended:
        assert kept == [] and said == ["w: the design evidence of this gate is not kept: 1 of its 120 processes "
                                       "shared the machine with other processes"]
    else:
        assert len(kept) == 1 and not said


def _timed(repeat: RepeatResult, at: float, block: int) -> RepeatResult:
    return dataclasses.replace(repeat, block=block, started_at=f"2026-12-01T01:{int(at // 60):02d}:{at % 60:06.3f}+00:00")


def test_what_a_block_costs_beyond_its_processes_is_found_per_workload() -> None:
    """Two workloads, six blocks each: a template of 3 s (a) and 1 s (b) before each of their
    blocks, processes of 2 s (a) and 0.5 s (b), and the counted runs (20 s) once, after block 1."""
    starts: dict[str, list[RepeatResult]] = {"a": [], "b": []}
    t, index = 0.0, 0
    for block in range(6):
        for name, template, wall in (("a", 3.0, 2.0), ("b", 1.0, 0.5)):
            t += template
            for _ in range(4):
                starts[name].append(_timed(make_repeat(index), t, block))
                index += 1
                t += wall
        if block == 1:
            t += 20.0
    found = block_overheads(starts)
    assert found["a"] == pytest.approx(3.0, abs=1e-3) and found["b"] == pytest.approx(1.0, abs=1e-3)


def test_the_block_overhead_is_shared_by_the_blocks_processes() -> None:
    base = _side(30, process_sd=0.08, window_sd=0.03, seed=2)
    head = _side(30, process_sd=0.08, window_sd=0.03, seed=3)
    plain, shared = evidence_of(base, head), evidence_of(base, head, block_overhead_s=2.0)
    assert plain is not None and shared is not None
    assert shared.process_s == pytest.approx(plain.process_s + 0.5)  # four processes a block


def test_one_window_per_process_or_one_side_alone_tells_nothing() -> None:
    one = _side(4, 0.05, 0.05, seed=2, windows=1)
    assert evidence_of(one, _side(4, 0.05, 0.05, seed=3, windows=1)) is None
    assert evidence_of(_side(4, 0.05, 0.05, seed=2), []) is None


# --- the runner's design folder -----------------------------------------------------------------

def test_the_folder_keeps_the_latest_gates_and_survives_what_it_cannot_read(tmp_path: Path) -> None:
    for i in range(12):
        record_evidence(tmp_path, "tiny", "cpu", evidence(process_s=float(i + 1)), keep=10)
    kept = load_evidence(tmp_path, "tiny", "cpu")
    assert [e.process_s for e in kept] == [float(i + 1) for i in range(2, 12)]
    assert load_evidence(tmp_path, "tiny", "cuda") == [] and load_evidence(tmp_path, "other", "cpu") == []

    path = evidence_path(tmp_path, "tiny", "cpu")
    data = json.loads(path.read_text())
    data["gates"][0]["process_var"] = -1
    path.write_text(json.dumps(data))
    notices: list[str] = []
    assert len(load_evidence(tmp_path, "tiny", "cpu", notices.append)) == 9
    assert notices and "entry 1 left out: process_var must be a finite number >= 0" in notices[0]

    path.write_text("{not json")
    notices.clear()
    assert load_evidence(tmp_path, "tiny", "cpu", notices.append) == []
    assert len(notices) == 1 and "designing as if it held nothing" in notices[0]
    record_evidence(tmp_path, "tiny", "cpu", FIVE, keep=10)  # the next gate's write replaces it whole
    assert load_evidence(tmp_path, "tiny", "cpu") == [FIVE]

    other = evidence_path(tmp_path, "other", "cpu")
    other.write_text(path.read_text())  # tiny's file under another workload's name
    assert load_evidence(tmp_path, "other", "cpu", notices.append) == []
    assert "not other's design evidence on cpu" in notices[-1]


def test_a_workload_name_that_is_no_plain_file_name_gets_a_hashed_file(tmp_path: Path) -> None:
    path = evidence_path(tmp_path, "../../etc/passwd", "cpu")
    assert path.parent == tmp_path and path.name.startswith("w-")
    record_evidence(tmp_path, "../../etc/passwd", "cpu", FIVE, keep=3)
    assert load_evidence(tmp_path, "../../etc/passwd", "cpu") == [FIVE]


# --- the settings -----------------------------------------------------------------------------

def test_windows_auto_in_the_settings_and_a_number_on_the_command_line(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.perfgate]\nwindows = "auto"\n')
    auto = load_settings(pyproject)
    assert auto.windows_auto and auto.windows == PILOT_WINDOWS
    fixed = load_settings(pyproject, {"windows": 2})
    assert not fixed.windows_auto and fixed.windows == 2
    pyproject.write_text('[tool.perfgate]\nwindows = "Auto"\n')
    with pytest.raises(UsageError, match='windows must be an integer from 1 to 100 or "auto", got \'Auto\''):
        load_settings(pyproject)


# --- the judge re-derives the windows -----------------------------------------------------------

def test_expected_windows_come_from_the_recorded_evidence_never_from_the_results(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.perfgate]\nwindows = "auto"\n')
    auto = load_settings(pyproject)
    manifest = RunManifest(design="paired", device="cpu", workloads=("tiny", "new"),
                           windows_evidence={"tiny": FIVE, "new": None})
    assert expected_windows("tiny", auto, manifest, paired=True, script=False) == (5, None)
    assert expected_windows("new", auto, manifest, paired=True, script=False) == (PILOT_WINDOWS, None)
    assert expected_windows("script-train.py", auto, manifest, paired=True, script=True) == (1, None)
    assert expected_windows("tiny", auto, manifest, paired=False, script=False) == (PILOT_WINDOWS, None)
    assert expected_windows("script-train.py", auto, None, paired=False, script=True) == (1, None)
    missing, why = expected_windows("gone", auto, manifest, paired=True, script=False)
    assert missing is None and why is not None and "records no design evidence for 'gone'" in why
    assert expected_windows("tiny", auto, None, paired=True, script=False)[0] is None


def test_run_json_keeps_the_evidence_and_its_reader_checks_it() -> None:
    manifest = RunManifest(design="paired", device="cpu", workloads=("tiny",), windows_evidence={"tiny": FIVE})
    assert manifest_from_dict(manifest.to_dict()).windows_evidence == {"tiny": FIVE}
    assert "windows_evidence" not in RunManifest(design="paired", device="cpu", workloads=()).to_dict()
    bad = manifest.to_dict()
    bad["windows_evidence"]["tiny"]["window_s"] = -1
    with pytest.raises(ValueError, match="windows_evidence.tiny: window_s must be"):
        manifest_from_dict(bad)
    bad["windows_evidence"] = {"../x": None}
    with pytest.raises(ValueError, match="windows_evidence key"):
        manifest_from_dict(bad)


def _windowed(result: RunResult, windows: int) -> RunResult:
    """``result`` timed as ``windows`` windows of the workload's steps: its steps tiled ``windows`` times."""
    def tiled(r: RepeatResult) -> RepeatResult:
        return dataclasses.replace(r, windows=windows, phases_ms={k: tuple(v) * windows for k, v in r.phases_ms.items()})
    return dataclasses.replace(result, repeats=tuple(tiled(r) for r in result.repeats))


def _folder(tmp_path: Path, name: str, windows: int, recorded: dict[str, DesignEvidence | None] | None) -> Path:
    manifest = RunManifest(design="paired", device="cpu", workloads=("tiny",), pr_number=7, head_sha=HEAD_SHA,
                           base_sha=BASE_SHA, base_ref="main", windows_evidence=recorded)
    return write_run(tmp_path / name, {"tiny": _windowed(paired("tiny", scale=SLOW, seed=1), windows)},
                     {"tiny": _windowed(paired("tiny", seed=2), windows)}, manifest)


def test_the_judge_accepts_the_windows_the_evidence_gives_and_refuses_any_other(tmp_path: Path, base: Path) -> None:
    settings(base, 'windows = "auto"\n')
    assert run(tmp_path, _folder(tmp_path, "five", 5, {"tiny": FIVE}), base)[0] == 1  # judged: a REGRESSION

    code, _, _, comment = run(tmp_path, _folder(tmp_path, "two", 2, {"tiny": FIVE}), base)
    w = judged_workload(tmp_path, "tiny")
    assert code == 2 and w["verdict"] == "ERROR", comment
    assert w["reason"] == ("not measured as the base's settings design it: windows: the base's design 5, the head "
                           "side's repeat 1 holds 2")

    code, _, _, comment = run(tmp_path, _folder(tmp_path, "fixed", 5, None), base)  # measured with --windows 5
    w = judged_workload(tmp_path, "tiny")
    assert code == 2 and w["verdict"] == "ERROR", comment
    assert "records no design evidence for 'tiny'" in w["reason"]


# --- a real paired gate -----------------------------------------------------------------------

@pytest.mark.slow
def test_a_paired_gate_times_the_designed_windows_and_keeps_what_it_measured(
        repo: Path, design_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from factories import git
    from test_paired_gate import FAST, one_look, run_cli

    from perfgate.analysis.contention import contention

    # two blocks of an A/A gate rule out no +6%: inconclusive = "pass" keeps this test on the windows
    (repo / "pyproject.toml").write_text('[tool.perfgate]\nwindows = "auto"\ninconclusive = "pass"\n')
    git(repo, "add", "pyproject.toml")
    git(repo, "commit", "-qm", "windows designed by the runner")
    two = evidence(process_s=4.0, window_s=1.0)  # equal noise, a process four windows' worth: two windows
    assert choose_windows(two) == 2
    record_evidence(design_folder, "tiny", "cpu", two, keep=10)

    code, out, err = run_cli(["gate", "tiny", "--against", "HEAD", *one_look(2), *FAST], capsys)
    assert code in (0, 3), out + err
    assert "tiny: 2 windows per process, from 1 earlier gate on this runner" in out + err
    contended = False
    for side in ("", "base/"):
        result = json.loads((repo / "perfgate-results" / f"{side}tiny.json").read_text())
        assert {r["windows"] for r in result["repeats"]} == {2}, side
        contended |= any(contention(r["telemetry"]) is not None for r in result["repeats"])
    kept = load_evidence(design_folder, "tiny", "cpu")
    if contended:  # another process shared the machine (the suite's other worker): nothing learnt
        assert kept == [two] and "the design evidence of this gate is not kept" in out + err
    else:
        assert len(kept) == 2 and kept[0] == two and kept[1].window_df >= 4


def test_the_efficiency_line_shows_the_windows_the_repeats_hold() -> None:
    from factories import make_result

    from perfgate.gate.gating import measuring_cost
    from perfgate.measure.template import FRESH

    two, five = (_windowed(make_result(name), w) for name, w in (("a", 2), ("b", 5)))
    cost = measuring_cost(100.0, [two, five], FRESH, PILOT_WINDOWS)
    assert (cost.windows, cost.windows_high) == (2, 5)
    assert "2–5 windows each" in cost.describe() and cost.to_dict()["windows_high"] == 5
    same = measuring_cost(100.0, [two], FRESH, PILOT_WINDOWS)
    assert "2 windows each" in same.describe() and "windows_high" not in same.to_dict()
    assert measuring_cost(1.0, [], FRESH, 3).windows == 3  # nothing measured: the design's


def test_under_auto_a_script_times_one_window_in_either_design(tmp_path: Path) -> None:
    """A script's steps are one window (more are refused for a script): under ``"auto"`` it
    gets one, in a paired gate, a stored gate and a plain run alike; a fixed count is the user's."""
    from types import SimpleNamespace

    from perfgate.gate.gating import MeasuringRequest

    def job(name: str, script: object) -> SimpleNamespace:  # what windows_of reads of a Job
        return SimpleNamespace(workload=SimpleNamespace(name=name), script=script)

    workload, script = job("tiny", None), job("script-train.py", object())
    auto = MeasuringRequest("cpu", tmp_path, windows=PILOT_WINDOWS, windows_auto=True)
    assert auto.windows_of([workload, script]) == {"tiny": PILOT_WINDOWS, "script-train.py": 1}
    designed = dataclasses.replace(auto, windows_by_workload={"tiny": 5, "script-train.py": 1})
    assert designed.windows_of([workload, script]) == {"tiny": 5, "script-train.py": 1}
    fixed = MeasuringRequest("cpu", tmp_path, windows=2)
    assert fixed.windows_of([workload, script]) == {"tiny": 2, "script-train.py": 2}
