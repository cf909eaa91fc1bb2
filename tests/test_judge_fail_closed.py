"""The judge fails closed: nothing in the artifact chooses what is gated, against which
commit, on which device, with how many blocks; missing data is never a pass.

Each case reproduces an attack on ``perfgate judge`` with a folder the test writes, and its
control: the same files without the attack fail the gate as they should (a +20% head is
a REGRESSION). Every attack ends with exit 1 or 2, never 0 or 3 (INCONCLUSIVE sets a
green status). docs/threat-model.md lists them with their defences.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
from factories import define_workloads, make_result
from test_judge import BASE_SHA, HEAD_SHA, paired, run, write_run

from perfgate.model.manifest import MANIFEST_NAME, RunManifest
from perfgate.model.result import RunResult
from perfgate.store.jsonfile import write_json_atomic

SLOW = 1.2


def control(tmp_path: Path, name: str = "control", **head_kw: object) -> Path:
    return write_run(tmp_path / name, {"tiny": paired("tiny", scale=SLOW, seed=1, **head_kw)},  # type: ignore[arg-type]
                     {"tiny": paired("tiny", seed=2)})


def rewrite_manifest(folder: Path, **fields: object) -> None:
    data = json.loads((folder / MANIFEST_NAME).read_text())
    data.update(fields)
    (folder / MANIFEST_NAME).write_text(json.dumps(data))


def edit_result(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_the_control_is_a_regression(tmp_path: Path, base: Path) -> None:
    code, out, _, _ = run(tmp_path, control(tmp_path), base)
    assert code == 1 and "REGRESSION" in out


# 1. an older base commit ------------------------------------------------------------------

def test_results_measured_against_another_base_than_the_pull_requests_are_refused(tmp_path: Path, base: Path) -> None:
    folder = control(tmp_path)
    code, _, err, _ = run(tmp_path, folder, base, "--expect-base-sha", "a" * 40)
    assert code == 2 and "not the pull request's base aaaaaaaaaaaa" in err
    assert run(tmp_path, folder, base, "--expect-base-sha", BASE_SHA)[0] == 1


# 2. the artifact chooses the device -------------------------------------------------------

def test_a_base_that_gates_cuda_refuses_cpu_results_and_an_empty_run(tmp_path: Path, base: Path) -> None:
    (base / "pyproject.toml").write_text((base / "pyproject.toml").read_text() + 'device = "cuda"\n')
    code, _, err, _ = run(tmp_path, control(tmp_path), base)
    assert code == 2 and "the base gates on cuda" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    write_json_atomic(empty / MANIFEST_NAME, RunManifest(design="paired", device="cpu", workloads=(), pr_number=7,
                                                         head_sha=HEAD_SHA, base_sha=BASE_SHA).to_dict())
    code, _, err, _ = run(tmp_path, empty, base)
    assert code == 2 and "measured nothing" in err


@pytest.mark.parametrize("device", ["cpu", "cud"])
def test_run_json_never_chooses_the_device_and_an_empty_run_is_no_pass(tmp_path: Path, base: Path, device: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    write_json_atomic(empty / MANIFEST_NAME, RunManifest(design="paired", device=device, workloads=(), pr_number=7,
                                                         head_sha=HEAD_SHA, base_sha=BASE_SHA).to_dict())
    code, _, err, _ = run(tmp_path, empty, base)
    assert code == 2, err
    folder = control(tmp_path)
    rewrite_manifest(folder, device="cud")
    assert run(tmp_path, folder, base)[0] == 2


def test_a_cpu_environment_labelled_cuda_is_refused(tmp_path: Path, base: Path) -> None:
    def cuda(result):
        return dataclasses.replace(result, device="cuda")  # the environment still says cpu

    folder = write_run(tmp_path / "r", {"tiny": cuda(paired("tiny", scale=SLOW, seed=1))},
                       {"tiny": cuda(paired("tiny", seed=2))},
                       RunManifest(design="paired", device="cuda", workloads=("tiny",), pr_number=7,
                                   head_sha=HEAD_SHA, base_sha=BASE_SHA))
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and "environment is of a cpu machine" in err


# 3. run.json chooses the looks -------------------------------------------------------------

def test_run_json_second_look_blocks_is_ignored(tmp_path: Path, base: Path) -> None:
    """No perfgate writes it any more; a run.json of one that did is read, the key ignored."""
    folder = control(tmp_path)
    assert "second_look_blocks" not in json.loads((folder / MANIFEST_NAME).read_text())
    for value in (1, None, "not even a number"):
        rewrite_manifest(folder, second_look_blocks=value)
        code, out, _, _ = run(tmp_path, folder, base)
        assert code == 1 and "REGRESSION" in out, value


def test_the_looks_are_the_judges_whatever_the_artifact_holds(tmp_path: Path, base: Path) -> None:
    """The measuring job measured 9 blocks of a head 20% slower; the judge's own first look
    (3 blocks, the base's) decides, and what the job measured after it is not read."""
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", scale=SLOW, seed=1, blocks=9)},
                       {"tiny": paired("tiny", seed=2, blocks=9)})
    code, out, _, comment = run(tmp_path, folder, base)
    assert code == 1 and "REGRESSION" in out
    assert "Decided after 3 blocks (look 1 of 28)." in comment


# 4. negative block numbers, gaps, blocks beyond max_blocks ----------------------------------

def _padded(result, shift):
    extra = paired("tiny", seed=9, blocks=20)
    fake = tuple(dataclasses.replace(r, block=shift(r.block), index=100 + i) for i, r in enumerate(extra.repeats))
    return dataclasses.replace(result, repeats=(*result.repeats, *fake))


@pytest.mark.parametrize(("shift", "words"), [
    (lambda b: -1 - b, "block"),  # refused by the reader: blocks are numbered from 0
    # read (below max_blocks = 30), but blocks 3 to 9 were never measured: not the gate's plan
    (lambda b: 10 + b, "the head side lacks block(s) 3, 4, 5, 6, 7, 8, 9 of the 0–29 measured"),
])
def test_blocks_outside_the_planned_ones_are_not_a_measurement(tmp_path: Path, base: Path, shift, words: str) -> None:
    folder = write_run(tmp_path / "r", {"tiny": _padded(paired("tiny", scale=SLOW, seed=1), shift)},
                       {"tiny": _padded(paired("tiny", seed=2), shift)})
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2 and words in comment, comment


def test_blocks_from_max_blocks_on_are_never_read(tmp_path: Path, base: Path) -> None:
    """Blocks 40 to 59, beyond the judge's max_blocks (30), with a head twice as fast: refused,
    never read, never a pass they could buy. (Blocks below max_blocks that the judge's
    boundary did not need are not read: tests/test_judge_replay.py.)"""
    def with_tail(result, scale: float):
        tail = paired("tiny", scale=scale, seed=9, blocks=20).repeats
        fake = tuple(dataclasses.replace(r, block=40 + r.block, index=100 + i) for i, r in enumerate(tail))
        return dataclasses.replace(result, repeats=(*result.repeats, *fake))

    folder = write_run(tmp_path / "r", {"tiny": with_tail(paired("tiny", scale=SLOW, seed=1), 0.5)},
                       {"tiny": with_tail(paired("tiny", seed=2), 1.0)})
    code, out, _, comment = run(tmp_path, folder, base)
    assert code == 2 and "beyond the last look the base's settings allow (30 blocks): refused, not read" in comment


def test_a_block_with_three_head_repeats_is_not_whole(tmp_path: Path, base: Path) -> None:
    head = paired("tiny", scale=SLOW, seed=1)
    extra = dataclasses.replace(head.repeats[0], index=99)
    folder = write_run(tmp_path / "r", {"tiny": dataclasses.replace(head, repeats=(*head.repeats, extra))},
                       {"tiny": paired("tiny", seed=2)})
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2 and "holds 3 repeats in block 0" in comment


# 5. slowdown flags thin a side ------------------------------------------------------------

HOT = {"gpu": {"slowdown_reasons": ["hw_thermal_slowdown"]}}


def _on_gpu(result: RunResult) -> RunResult:
    from test_judge_design import CUDA_ENV

    return dataclasses.replace(result, device="cuda", environment=CUDA_ENV)


def _gpu_manifest() -> RunManifest:
    return RunManifest(design="paired", device="cuda", workloads=("tiny",), pr_number=7, head_sha=HEAD_SHA,
                       base_sha=BASE_SHA)


def _flagged(result: RunResult, pick: str) -> RunResult:
    """``result`` with a thermal slowdown flag, block by block, on its slower (``"slowest"``) or
    faster repeat when that one is beyond the side's median, as many as the 25% cap allows
    at every look: the head's slowest and the base's fastest quarter."""
    values = sorted(r.per_step_ms["step"] for r in result.repeats)
    middle = values[len(values) // 2]
    chosen: set[int] = set()
    for block in range(len(result.repeats) // 2):
        pair = [r for r in result.repeats if r.block == block]
        r = (max if pick == "slowest" else min)(pair, key=lambda r: r.per_step_ms["step"])
        beyond = r.per_step_ms["step"] > middle if pick == "slowest" else r.per_step_ms["step"] < middle
        if beyond and len(chosen) + 1 <= 0.25 * 2 * max(3, block + 1):
            chosen.add(r.index)
    return dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, telemetry=HOT) if r.index in chosen
                                                     else r for r in result.repeats))


def _noisy(scale: float, seed: int, blocks: int = 30) -> RunResult:
    """30 ABBA blocks (the base's max_blocks) of repeats 3% apart, the looks replayed to the last."""
    rng = random.Random(seed)
    scales = [scale * (1 + rng.gauss(0, 0.03)) for _ in range(2 * blocks)]
    result = make_result("tiny", repeats=2 * blocks, seed=seed, repeat_scales=scales)
    return dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, block=i // 2)
                                                     for i, r in enumerate(result.repeats)))


def test_slowdown_flags_on_a_cpu_run_are_refused(tmp_path: Path, base: Path) -> None:
    """A head 4.5% slower, measured on the CPU: a REGRESSION. The same files with thermal
    flags on the head's slowest and the base's fastest quarter (within max_left_out at every
    look) were INCONCLUSIVE: the flags chose which repeats were judged. A CPU run has no GPU
    to slow down: the flags are refused, naming the workload and the side."""
    head, side = _noisy(1.045, 100), _noisy(1.0, 200)
    code, out, _, comment = run(tmp_path, write_run(tmp_path / "control", {"tiny": head}, {"tiny": side}), base)
    assert code == 1 and "REGRESSION" in out, comment
    folder = write_run(tmp_path / "r", {"tiny": _flagged(head, "slowest")}, {"tiny": _flagged(side, "fastest")})
    code, _, _, comment = run(tmp_path, folder, base)
    reason = json.loads((tmp_path / "judged" / "report.json").read_text())["workloads"][0]["reason"]
    assert code == 2 and reason.startswith(
        "not measured as the base's settings design it: GPU slowdown flags on a CPU run: tiny's head side was "
        "measured on cpu, but its repeat(s) "), comment
    assert "record thermal (hw_thermal_slowdown)" in reason
    # flags on the base side alone are refused as well
    folder = write_run(tmp_path / "b", {"tiny": head}, {"tiny": _flagged(side, "fastest")})
    code, _, _, _ = run(tmp_path, folder, base)
    reason = json.loads((tmp_path / "judged" / "report.json").read_text())["workloads"][0]["reason"]
    assert code == 2 and "tiny's base side was measured on cpu" in reason


def test_on_a_gpu_a_flagged_repeat_leaves_its_whole_block_out_on_both_sides_up_to_the_cap(tmp_path: Path,
                                                                                        base: Path) -> None:
    """The same attack on a GPU run: each flag leaves its ABBA block out on both sides, so the
    flags no longer pick one side's repeats against the other's; the head's and the base's
    flagged blocks together are more than the 25% that may be left out: runner unfit."""
    head, side = _on_gpu(_noisy(1.045, 100)), _on_gpu(_noisy(1.0, 200))
    code, out, _, comment = run(tmp_path, write_run(tmp_path / "control", {"tiny": head}, {"tiny": side},
                                                    _gpu_manifest()), base)
    assert code == 1 and "REGRESSION" in out, comment
    folder = write_run(tmp_path / "r", {"tiny": _flagged(head, "slowest")}, {"tiny": _flagged(side, "fastest")},
                       _gpu_manifest())
    code, _, _, comment = run(tmp_path, folder, base)
    reason = json.loads((tmp_path / "judged" / "report.json").read_text())["workloads"][0]["reason"]
    assert code == 2 and reason.startswith("runner unfit: "), comment
    assert "a slowed-down repeat leaves its whole ABBA block out on both sides" in reason


def test_slowdown_flags_on_most_repeats_make_the_runner_unfit(tmp_path: Path, base: Path) -> None:
    def flagged(result, n):
        return dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, telemetry=HOT) if i < n else r
                                                         for i, r in enumerate(result.repeats)))

    folder = write_run(tmp_path / "r", {"tiny": _on_gpu(flagged(paired("tiny", scale=SLOW, seed=1), 5))},
                       {"tiny": _on_gpu(flagged(paired("tiny", seed=2), 4))}, _gpu_manifest())
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2 and "runner unfit" in comment


# 6. padding the Holm family ---------------------------------------------------------------

def test_results_for_workloads_no_tree_defines_are_refused(tmp_path: Path, base: Path) -> None:
    head = {"tiny": paired("tiny", scale=SLOW, seed=1)}
    side = {"tiny": paired("tiny", seed=2)}
    for i in range(40):
        head[f"pad-{i:02d}"] = paired(f"pad-{i:02d}", seed=10 + i)
        side[f"pad-{i:02d}"] = paired(f"pad-{i:02d}", seed=60 + i)
    folder = write_run(tmp_path / "r", head, side)
    code, _, err, _ = run(tmp_path, folder, base)
    assert code == 2 and "neither the base nor the pull request defines: pad-00" in err
    # a workload the pull request adds is defined by its own files (fetched as data), but the
    # base commit cannot measure it: base-side results for it are refused (they padded Holm:
    # the REGRESSION of tiny read exit 3 among 40 judged pads)
    head_files = tmp_path / "head-files"
    define_workloads(head_files, *(f"pad-{i:02d}" for i in range(40)), file="workloads/new.py")
    changed = tmp_path / "changed.tsv"
    changed.write_text("added\tworkloads/new.py\n")
    code, _, err, _ = run(tmp_path, folder, base, "--head-files", str(head_files), "--changed-files", str(changed))
    assert code == 2 and "base-side results for workloads the base tree does not define: pad-00" in err, err
    # measured on the head alone, as the measuring job does a new workload: each is an ERROR
    # naming it (no base side), and tiny's REGRESSION stands beside them (exit 1 before 2)
    head_only = write_run(tmp_path / "head-only", head, {"tiny": side["tiny"]},
                          RunManifest(design="paired", device="cpu", workloads=tuple(head), pr_number=7,
                                      head_sha=HEAD_SHA, base_sha=BASE_SHA, base_missing=tuple(sorted(head)[:40])))
    code, _, _, comment = run(tmp_path, head_only, base, "--head-files", str(head_files), "--changed-files",
                              str(changed))
    assert code == 1 and "has no workload 'pad-00' measured" in comment, comment
    assert any("tiny" in line and "REGRESSION" in line for line in comment.splitlines()), comment


# 7. a decoy file retires a workload -------------------------------------------------------

def test_removing_a_stale_baseline_of_the_same_name_retires_nothing(tmp_path: Path, base: Path) -> None:
    from test_judge import record

    record(base, "tiny")
    define_workloads(base, "other", file="workloads/other.py")
    (key_dir,) = [p for p in (base / "baselines").iterdir() if p.is_dir()]
    stale = "baselines/cpu-old-torch2.13.0-0000/tiny.json"
    changed = tmp_path / "changed.tsv"
    changed.write_text(f"removed\t{stale}\n")
    nothing = write_run(tmp_path / "r", {"other": paired("other", seed=1)}, {"other": paired("other", seed=2)})
    code, _, _, comment = run(tmp_path, nothing, base, "--changed-files", str(changed))
    assert code == 2 and "no result for 'tiny'" in comment
    # removing the baseline that gates it, by its full path, retires it in plain view
    changed.write_text(f"removed\tbaselines/{key_dir.name}/tiny.json\n")
    code, _, _, comment = run(tmp_path, nothing, base, "--changed-files", str(changed))
    assert code != 2 and "tiny" in comment


# 8. missing data counts as a pass ---------------------------------------------------------

def test_a_head_without_its_peak_memory_is_an_error(tmp_path: Path, base: Path) -> None:
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    edit_result(folder / "tiny.json", lambda d: [r.update(peak_memory_bytes=None) for r in d["repeats"]])
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2 and "lacks its peak memory" in comment
    (base / "pyproject.toml").write_text((base / "pyproject.toml").read_text() + "missing_is_error = false\n")
    assert run(tmp_path, folder, base)[0] in (0, 3)


def _slopes(result: RunResult, per_step: float) -> RunResult:
    """``result`` with each repeat's resident-memory slope: ``per_step`` bytes a step."""
    repeats = []
    for r in result.repeats:
        to_rate = r.steps / r.window_s
        slope = {"bytes_per_s": per_step * to_rate, "stderr_bytes_per_s": 0.001 * 2**20 * to_rate, "samples": 15}
        repeats.append(dataclasses.replace(r, telemetry={"samples": 15, "gpu": None, "cpu": {"rss_slope": slope}}))
    return dataclasses.replace(result, repeats=tuple(repeats))


def _without_slopes(data: dict) -> None:
    for r in data["repeats"]:
        del r["telemetry"]["cpu"]["rss_slope"]


@pytest.mark.parametrize("side", ["head", "base"])
def test_a_memory_slope_left_out_on_one_side_is_an_error(tmp_path: Path, base: Path, side: str) -> None:
    """A head that keeps a MiB a step: MEMORY-CREEP against a flat base side, a REGRESSION.
    The same files with the head's slopes (or the base side's) deleted passed: the creep rule
    had no pair to compare. Missing data is an ERROR, as a missing peak memory is."""
    folder = write_run(tmp_path / "r", {"tiny": _slopes(paired("tiny", seed=1), 2**20)},
                       {"tiny": _slopes(paired("tiny", seed=2), 0.0)})
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 1 and "MEMORY-CREEP" in comment, comment  # the control
    edit_result(folder / ("tiny.json" if side == "head" else "base/tiny.json"), _without_slopes)
    code, _, _, comment = run(tmp_path, folder, base)
    lacking = ("the head lacks its memory slope (resident memory), which the base side holds" if side == "head"
               else "the base side lacks its memory slope (resident memory), which the head holds")
    assert code == 2 and lacking in comment, comment
    (base / "pyproject.toml").write_text((base / "pyproject.toml").read_text() + "missing_is_error = false\n")
    code, _, _, comment = run(tmp_path, folder, base)
    assert code in (0, 3) and "memory creep not compared: resident memory not recorded in the" in comment


def test_a_side_whose_windows_were_too_short_for_a_slope_lacks_nothing(tmp_path: Path, base: Path) -> None:
    """A fast base side (0.2 s windows: two samples of 100 ms) records no slope beside a slowed
    head that does: its slope is not known, not left out, and the gate goes on without it."""
    def short(result: RunResult) -> RunResult:
        return dataclasses.replace(result, repeats=tuple(dataclasses.replace(
            r, window_s=r.window_s / 5, phases_ms={k: tuple(v / 5 for v in s) for k, s in r.phases_ms.items()},
            telemetry={"samples": 2, "gpu": None, "cpu": {"rss_slope": None}}) for r in result.repeats))
    folder = write_run(tmp_path / "r", {"tiny": _slopes(paired("tiny", scale=SLOW, seed=1), 0.0)},
                       {"tiny": short(paired("tiny", seed=2))})
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 1 and "lacks its memory slope" not in comment, comment  # judged: the head 20% slower
    assert "memory creep not compared: resident memory not recorded in the base side" in comment


def test_a_head_without_its_counted_run_is_an_error_when_the_base_has_one(tmp_path: Path, base: Path) -> None:
    from test_counter_gate import counters

    from perfgate.store.counters import save_counters

    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    save_counters(counters(), folder / "base")
    code, _, _, comment = run(tmp_path, folder, base)
    assert code == 2 and "lacks its counted run" in comment
    save_counters(counters(), folder)  # the control: both sides counted alike
    assert run(tmp_path, folder, base)[0] in (0, 3)


# the changed-files list ---------------------------------------------------------------------

@pytest.mark.parametrize("odd", ["\u2028", "\u0085", "\x1c", "\x1d", "\x1e"])
def test_the_changed_files_list_breaks_lines_at_newlines_only(tmp_path: Path, odd: str) -> None:
    from perfgate.gate.inputs import read_changed_files

    listing = tmp_path / "changed.tsv"
    name = f"baselines/cpu-x/ti{odd}ny.json"
    if ord(odd) < 32:
        listing.write_text(f"removed\t{name}\t\n", encoding="utf-8")
        with pytest.raises(Exception, match="control characters"):
            read_changed_files(listing)  # refused in one line, never split into two paths
        return
    listing.write_text(f"removed\t{name}\t\nmodified\tREADME.md\t\n", encoding="utf-8")
    assert read_changed_files(listing) == [("removed", name), ("modified", "README.md")]
