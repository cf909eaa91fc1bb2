"""Several timed windows per repeat, the components a comparison saw, and calibrate's design.

- a repeat's windows are sub-samples of one process: the time per step pools them, the
  median step is the mean of each window's median, and files keep the count;
- calibrate measures processes in groups of four with several windows each, reports the
  variance at every level and what each level costs, and ``--auto`` writes the design
  into ``[tool.perfgate]`` without touching anything else of the file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from statistics import median

import pytest
from factories import make_repeat, make_result
from test_cli import one_error_line, run_cli

from perfgate.analysis.decide import GateConfig
from perfgate.analysis.stats.components import repeats_components
from perfgate.model.baseline import as_stored
from perfgate.model.errors import UsageError
from perfgate.model.result import repeat_from_dict
from perfgate.report.calibration import design_advice, measured_components
from perfgate.store.pyproject_edit import edited, read_settings_file


def windowed(index: int, windows: int = 3, steps: int = 12, **kw: object):
    return dataclasses.replace(make_repeat(index, steps=steps, **kw), windows=windows)  # type: ignore[arg-type]


def test_the_median_step_of_several_windows_is_the_mean_of_their_medians() -> None:
    repeat = windowed(0)
    parts = [repeat.phases_ms["step"][w * 4:(w + 1) * 4] for w in range(3)]
    assert repeat.medians_ms["step"] == pytest.approx(sum(median(p) for p in parts) / 3)
    assert repeat.per_step_ms["step"] == pytest.approx(sum(repeat.phases_ms["step"]) / 12)
    assert repeat.window_step_ms == pytest.approx(tuple(sum(p) / 4 for p in parts))
    assert windowed(0, windows=1).medians_ms["step"] == pytest.approx(median(repeat.phases_ms["step"]))


def test_windows_must_divide_the_steps() -> None:
    with pytest.raises(ValueError, match="12 steps do not divide into 5 windows"):
        windowed(0, windows=5)
    with pytest.raises(ValueError, match="windows must be an integer >= 1"):
        windowed(0, windows=0)


def test_a_result_file_and_a_baseline_keep_the_windows() -> None:
    repeat = windowed(0)
    data = repeat.to_dict()
    assert data["windows"] == 3
    assert repeat_from_dict(data, "r").windows == 3
    assert "windows" not in windowed(0, windows=1).to_dict()  # files of one window read as before
    data["windows"] = 5
    with pytest.raises(ValueError, match=r"r\.windows: 12 steps do not divide into 5 windows"):
        repeat_from_dict(data, "r")
    assert as_stored(repeat, 0).windows == 3


def test_a_baseline_written_with_windows_reads_back_with_them(tmp_path: Path) -> None:
    from perfgate.store.baselines import load_baseline, save_baseline, updated_baseline

    result = make_result(repeats=4)
    result = dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, windows=2) for r in result.repeats))
    back = load_baseline(save_baseline(updated_baseline(None, result, "test", append=False), tmp_path))
    assert {r.windows for rec in back.recordings for r in rec.repeats} == {2}


def test_the_components_a_paired_comparison_saw_remove_each_sides_mean() -> None:
    head = [dataclasses.replace(windowed(i, seed=1, jitter=0.05, scale=1.2), block=i // 2) for i in range(8)]
    base = [dataclasses.replace(windowed(i, seed=2, jitter=0.05), block=i // 2) for i in range(8)]
    found = repeats_components({"base": base, "head": head})
    assert found is not None and found.paired and found.processes == 16
    assert found.window_sd is not None and found.step_sd is not None
    # a 20% head offset is not noise between processes or blocks
    assert (found.block_sd or 0.0) < 0.05 and (found.process_sd or 0.0) < 0.05
    assert repeats_components({"head": head[:1]}) is None


def test_calibrate_reports_every_level_and_a_design_within_the_bounds() -> None:
    result = make_result(repeats=8)
    result = dataclasses.replace(result, repeats=tuple(
        dataclasses.replace(make_repeat(i, steps=12, jitter=0.05, seed=i), windows=3) for i in range(8)))
    found = measured_components(result)
    assert found.blocks == 2 and found.processes == 8 and found.windows == 24
    advice = design_advice(result, 1.5, GateConfig(max_blocks=8, delta=0.1), how="forked", gates=4)
    text = "\n".join(advice.lines)
    assert text.startswith("where the noise is: ")
    assert "a process 1.50 s beyond its timed windows (forked)" in text
    assert advice.pinned is not None and advice.pinned.steps == 4  # the workload's own steps per window
    assert 1 <= advice.pinned.windows <= 20 and 2 <= advice.pinned.blocks <= 8


def test_auto_edits_only_the_perfgate_table(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('# mine\n[project]\nname = "x"  # the name\n\n[tool.other]\nkeep = 1\n\n'
                         '[tool.perfgate]\ndevice = "cpu"  # here\nwindows = 2\n')
    text = edited(read_settings_file(pyproject), {"windows": 6, "blocks": 4})
    assert text.startswith('# mine\n[project]\nname = "x"  # the name\n\n[tool.other]\nkeep = 1\n')
    assert 'device = "cpu"  # here' in text and "windows = 6" in text and "blocks = 4" in text
    assert "windows = 2" not in text
    bare = tmp_path / "bare.toml"
    bare.write_text('[project]\nname = "x"\n')
    assert "[tool.perfgate]\nwindows = 6" in edited(read_settings_file(bare), {"windows": 6})
    broken = tmp_path / "broken.toml"
    broken.write_text("[tool\n")
    with pytest.raises(UsageError, match="not valid TOML, nothing written"):
        edited(read_settings_file(broken), {"windows": 6})
    odd = tmp_path / "odd.toml"
    odd.write_text('tool = "x"\n')
    with pytest.raises(UsageError, match=r"\[tool\] is not a table, nothing written"):
        edited(read_settings_file(odd), {"windows": 6})


def test_auto_without_a_pyproject_is_one_line_before_anything_is_measured(capsys, tmp_path: Path,
                                                                         tiny_path: Path) -> None:
    code, _, err = run_cli(capsys, "calibrate", "tiny", "--workloads-path", str(tiny_path), "--device", "cpu",
                           "--auto", "--config", str(tmp_path / "none.toml"))
    assert code == 2
    assert "--auto writes the design into" in one_error_line(err) and "which does not exist" in err


@pytest.mark.slow
def test_calibrate_auto_measures_the_levels_and_writes_the_design(capsys, tmp_path: Path, tiny_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    # A wide delta and few blocks keep the designs short (each is simulated through the gate's
    # driver, most of this test's time); what is measured and what --auto writes are the same.
    pyproject.write_text('# my project\n[tool.perfgate]\ndevice = "cpu"  # keep this\nmax_blocks = 6\n')
    before = pyproject.read_text()
    code, out, err = run_cli(capsys, "calibrate", "tiny", "--workloads-path", str(tiny_path), "--config",
                             str(pyproject), "--repeats", "8", "--windows", "2", "--out", str(tmp_path / "out"),
                             "--delta", "0.5", "--auto", "-q", "--no-telemetry")
    assert code == 0, out + err
    assert "where the noise is: " in out and "between windows" in out and "8 processes × 2 windows" in out
    assert "beyond its timed windows (forked; 2 templates" in out
    after = pyproject.read_text()
    assert after.startswith(before)  # only lines added
    wrote = next(line for line in out.splitlines() if line.startswith("wrote windows = "))
    windows, blocks = (int(x.split(" = ")[1].split()[0]) for x in wrote.split(" and "))
    assert f"windows = {windows}\nblocks = {blocks}\n" in after
