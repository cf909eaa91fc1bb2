"""Exact counters as the gate's second signal: the paired design, the judge and the reports.

Results come from ``factories``; counter sets are built directly, so nothing here runs a
workload. A counter change that fails makes the workload a REGRESSION whatever the timing
says; a change that does not fail is shown and leaves the verdict to the timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from factories import define_workloads, make_result

from perfgate.adapters.judge_cli import add_parser, run_judge
from perfgate.analysis.compare import compare
from perfgate.analysis.counted import STORED_COUNTERS_NOTE, stored_counted
from perfgate.analysis.counters import CounterOutcome
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Counted, Entry, Pairing
from perfgate.gate.config import load_settings
from perfgate.model.counters import CounterError, CounterSet, PhaseCounters, SyncSite
from perfgate.model.errors import EXIT_OK, EXIT_REGRESSION, FileFormatError, UsageError
from perfgate.model.manifest import MANIFEST_NAME, RunManifest
from perfgate.model.result import RunResult
from perfgate.model.verdict import Verdict
from perfgate.model.workload import PHASES
from perfgate.report.json_report import outcome_to_dict
from perfgate.report.markdown import render_markdown
from perfgate.report.terminal import gate_table
from perfgate.store.counters import save_counters
from perfgate.store.jsonfile import write_json_atomic
from perfgate.store.results import save_result
from perfgate.store.untrusted_folders import load_measured

BASE_SHA = "b" * 40
HEAD_SHA = "c" * 40
BLOCKS = 3
SYNC = SyncSite("workloads/x.py:42", "aten::_local_scalar_dense", 2)
HOSTILE_LINE = "evil.py:1 | ![x](https://evil.invalid/p.png) @org/team <img src=x>\n**Check: passes.**"


def counters(name: str = "tiny", *, syncs: tuple[SyncSite, ...] = (), flops: int = 1000, ops: int = 100,
             steps: int = 2) -> CounterSet:
    """A CPU counter set: ``ops`` mm calls and ``flops`` in forward, the given syncs there."""
    phases = {}
    for p in PHASES:
        forward = p == "forward"
        phases[p] = PhaseCounters(
            ops={"aten::mm": ops} if forward else {}, copies={}, dtype_conversions=0, device_copies=0,
            flops=flops if forward else 0, flops_by_op={"aten::mm": flops} if forward else {},
            syncs=syncs if forward else (), kernel_launches=None, memcpy_calls=None, allocator=None)
    unavailable = {"compile": "does not compile", "kernel_launches": "cpu", "memcpy_calls": "cpu",
                   "allocator": "cpu"}
    return CounterSet(name, 1, "cpu", steps, 1, {}, phases, None, unavailable, "test")


def paired(name: str = "tiny", *, scale: float = 1.0, seed: int = 0, blocks: int = BLOCKS) -> RunResult:
    result = make_result(name, repeats=2 * blocks, scale=scale, seed=seed)
    repeats = tuple(dataclasses.replace(r, block=i // 2) for i, r in enumerate(result.repeats))
    return dataclasses.replace(result, repeats=repeats)


def judge_paired(head_counters: CounterSet | None, base_counters: CounterSet | None, *, scale: float = 1.0,
                 config: GateConfig = GateConfig(), note: str | None = None):
    entry = Entry("tiny", paired(scale=scale, seed=1), None, pairing=Pairing(paired(seed=2), BASE_SHA),
                  counted=Counted(base_counters, head_counters, note))
    outcome = compare([entry], config)
    return outcome, outcome.comparisons[0]


# --- the rule ---------------------------------------------------------------------------------


def test_a_new_sync_per_step_in_forward_is_a_regression_even_when_the_timing_passes() -> None:
    outcome, c = judge_paired(counters(syncs=(SYNC,)), counters())
    assert c.time is not None and c.time.verdict is Verdict.PASS  # the timing decision stays visible
    assert c.verdict is Verdict.REGRESSION
    assert c.reason.startswith("counters: 1 new host synchronisation per step in forward: workloads/x.py:42")
    assert "(time: PASS, " in c.reason
    assert outcome.exit_code == EXIT_REGRESSION
    assert c.counters is not None and c.counters_failed and len(c.counters.failures) == 1
    # deterministic: the same inputs give the same verdict and reason
    assert judge_paired(counters(syncs=(SYNC,)), counters())[1].reason == c.reason


def test_an_unchanged_counter_set_leaves_the_verdict_to_the_timing() -> None:
    outcome, c = judge_paired(counters(), counters())
    assert c.verdict is Verdict.PASS and outcome.exit_code == EXIT_OK
    assert c.counters == [] and not c.counters_failed
    _, slower = judge_paired(counters(), counters(), scale=1.3)
    assert slower.verdict is Verdict.REGRESSION and not slower.reason.startswith("counters:")


def test_a_change_that_does_not_fail_is_shown_and_the_timing_decides() -> None:
    _, c = judge_paired(counters(flops=1005), counters(flops=1000))  # +0.5% FLOPs, under 1%
    assert c.verdict is Verdict.PASS
    assert c.counters and not c.counters.failed
    assert "Counters (exact, per step" in render_markdown(compare(
        [Entry("tiny", paired(seed=1), None, pairing=Pairing(paired(seed=2), BASE_SHA),
               counted=Counted(counters(flops=1000), counters(flops=1005)))], GateConfig()))


def test_a_counter_in_counters_off_is_reported_but_does_not_fail() -> None:
    _, c = judge_paired(counters(syncs=(SYNC,)), counters(), config=GateConfig(counters_off=("syncs",)))
    assert c.verdict is Verdict.PASS
    assert c.counters is not None and [ch.counter for ch in c.counters] == ["syncs"]
    assert not c.counters.failed


def test_the_thresholds_are_settable_per_workload(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.perfgate]\nflops_threshold = 0.5\n"
                         "[tool.perfgate.workload.tiny]\ncounters_off = [\"syncs\"]\nlaunch_threshold = 0.2\n")
    settings = load_settings(pyproject)
    assert settings.gate.flops_threshold == 0.5 and settings.gate.counters_off == ()
    own = settings.per_workload["tiny"]
    assert own.counters_off == ("syncs",) and own.launch_threshold == 0.2 and own.flops_threshold == 0.5
    entry = Entry("tiny", paired(seed=1), None, pairing=Pairing(paired(seed=2), BASE_SHA),
                  counted=Counted(counters(), counters(syncs=(SYNC,), flops=1200)))
    (c,) = compare([entry], settings.gate, per_workload=settings.per_workload).comparisons
    assert c.verdict is Verdict.PASS and c.counters and not c.counters.failed  # syncs off, +20% FLOPs < 50%
    pyproject.write_text("[tool.perfgate]\ncounters_off = [\"nope\"]\n")
    with pytest.raises(UsageError, match="unknown counter 'nope'"):
        load_settings(pyproject)
    pyproject.write_text("[tool.perfgate]\ncounters = false\n")
    assert load_settings(pyproject).gate.counters is False


def test_a_head_counted_run_that_failed_where_the_base_counted_is_an_error() -> None:
    # Missing data is not a pass: a head without its counted run could hide a new per-step sync.
    _, c = judge_paired(None, counters(), note="the head side's counted run failed: boom")
    assert c.verdict is Verdict.ERROR and "the head lacks its counted run" in c.reason
    # with missing_is_error = false it is a note, and the timing stands
    lenient = GateConfig(missing_is_error=False)
    _, c = judge_paired(None, counters(), config=lenient, note="the head side's counted run failed: boom")
    assert c.verdict is Verdict.PASS and c.counters is None
    assert c.counters_note == "the head side's counted run failed: boom"
    assert "counters: the head side's counted run failed: boom" in gate_table(compare(
        [Entry("tiny", paired(seed=1), None, pairing=Pairing(paired(seed=2), BASE_SHA),
               counted=Counted(counters(), None, "the head side's counted run failed: boom"))], lenient))


def stored_baseline():
    from perfgate.store.baselines import updated_baseline

    baseline = None
    for day in range(3):
        baseline = updated_baseline(baseline, make_result("tiny", seed=day + 50), "test", append=True)
    assert baseline is not None
    return baseline


def test_the_stored_design_says_why_it_has_no_counters() -> None:
    from perfgate.store.baselines import Lookup

    lookup = Lookup(stored_baseline(), Path("b.json"), ())
    outcome = compare([Entry("tiny", make_result("tiny", seed=1), lookup,
                             counted=stored_counted(lookup, counters(), GateConfig()))], GateConfig())
    c = outcome.comparisons[0]
    assert c.counters is None and c.counters_note == STORED_COUNTERS_NOTE
    data = outcome_to_dict(outcome)["workloads"][0]
    assert data["counters"] is None and data["counters_note"] == STORED_COUNTERS_NOTE
    # with the baseline's counted run and the current one: compared, and a new sync fails
    counted = Lookup(lookup.baseline, lookup.path, (), counters=counters())
    entry = Entry("tiny", make_result("tiny", seed=1), counted,
                  counted=stored_counted(counted, counters(syncs=(SYNC,)), GateConfig()))
    (c,) = compare([entry], GateConfig()).comparisons
    assert c.verdict is Verdict.REGRESSION and c.reason.startswith("counters: 1 new host synchronisation")
    # counters = false: nothing compared, and it says so
    off = stored_counted(counted, counters(syncs=(SYNC,)), GateConfig(counters=False))
    assert off is not None and off.base is None and "counters = false" in (off.note or "")


def test_rebaseline_stores_the_counted_run_and_the_stored_gate_compares_with_it(tmp_path: Path, capsys) -> None:
    from perfgate.adapters.cli import main
    from perfgate.gate.judge import gated_by_base
    from perfgate.store.untrusted_folders import validate_baselines

    config = ["--config", str(tmp_path / "absent.toml")]
    store = tmp_path / "baselines"
    base = tmp_path / "base"
    base.mkdir()
    save_result(make_result("tiny", seed=1), base / "tiny.json")
    save_counters(counters(), base)
    assert main(["rebaseline", "--from-results", str(base), "--reason", "first", "--baselines", str(store),
                 *config]) == EXIT_OK
    out = capsys.readouterr().out
    (key_dir,) = store.iterdir()
    assert sorted(p.name for p in key_dir.iterdir()) == ["tiny.counters.json", "tiny.json"]
    assert "with its counted run" in out
    assert {p.name for p in validate_baselines(store)} == {"tiny.json", "tiny.counters.json"}
    settings = load_settings(None, {"baselines": str(store)})
    assert list(gated_by_base(settings, "cpu")) == ["tiny"]  # the counted run is no workload of its own

    head = tmp_path / "head"
    head.mkdir()
    save_result(make_result("tiny", seed=2), head / "tiny.json")
    save_counters(counters(syncs=(SYNC,)), head)
    code = main(["compare", "--results", str(head), "--baselines", str(store), *config])
    out = capsys.readouterr().out
    assert code == EXIT_REGRESSION
    assert "1 new host synchronisation per step in forward: workloads/x.py:42" in out
    (head / "tiny.counters.json").unlink()
    main(["compare", "--results", str(head), "--baselines", str(store), *config])
    assert "not compared: no counted run of the current code" in capsys.readouterr().out

    # a counted run of other code or another device is refused before anything is written
    before = {p.name: p.read_bytes() for p in key_dir.iterdir()}
    other = tmp_path / "other"
    other.mkdir()
    save_result(make_result("tiny", seed=3), other / "tiny.json")
    save_counters(dataclasses.replace(counters(), workload_version=7), other)
    assert main(["rebaseline", "--from-results", str(other), "--reason", "r", "--baselines", str(store),
                 *config]) == 2
    assert "its counted run is of cpu v7" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in key_dir.iterdir()} == before

    # replacing the recordings without a counted run removes the replaced code's one;
    # appending keeps it
    (other / "tiny.counters.json").unlink()
    assert main(["rebaseline", "--from-results", str(other), "--reason", "r", "--baselines", str(store),
                 "--append", *config]) == EXIT_OK
    assert (key_dir / "tiny.counters.json").exists()
    assert main(["rebaseline", "--from-results", str(other), "--reason", "r", "--baselines", str(store),
                 *config]) == EXIT_OK
    assert "removed" in capsys.readouterr().out and not (key_dir / "tiny.counters.json").exists()


def test_a_bad_counted_run_in_the_store_is_one_line(tmp_path: Path) -> None:
    from perfgate.store.baselines import find_baseline, save_baseline
    from perfgate.store.untrusted_folders import validate_baselines

    baseline = stored_baseline()
    save_baseline(baseline, tmp_path)
    key_dir = tmp_path / baseline.environment_key
    (key_dir / "tiny.counters.json").write_text("{\"kind\": \"perfgate.counters\"}")
    with pytest.raises(FileFormatError, match="tiny.counters.json"):
        validate_baselines(tmp_path)
    with pytest.raises(FileFormatError, match="tiny.counters.json"):
        find_baseline(tmp_path, baseline.environment_key, "tiny")
    save_counters(counters("other"), key_dir)
    (key_dir / "other.counters.json").rename(key_dir / "tiny.counters.json")
    with pytest.raises(FileFormatError, match="not what its path says"):
        validate_baselines(tmp_path)
    (key_dir / "tiny.counters.json").unlink()
    save_counters(counters("lonely"), key_dir)
    with pytest.raises(FileFormatError, match="no baseline"):
        validate_baselines(tmp_path)


# --- the reports ------------------------------------------------------------------------------


def test_the_reports_show_the_failing_counter() -> None:
    outcome, _ = judge_paired(counters(syncs=(SYNC,)), counters())
    text = gate_table(outcome)
    assert "  counters FAIL: 1 new host synchronisation per step in forward: workloads/x.py:42" in text
    data = outcome_to_dict(outcome)["workloads"][0]
    (change,) = data["counters"]
    assert change["counter"] == "syncs" and change["failed"] and change["base"] == 0 and change["head"] == 1
    assert json.dumps(data)  # plain JSON
    md = render_markdown(outcome)
    assert "| phase | counter | base | head | what changed |" in md
    assert "| forward | syncs ❌ | 0 | 1 | `workloads/x.py:42 (aten::_local_scalar_dense) +1` |" in md


def test_the_markdown_shows_a_hostile_stack_line_inert() -> None:
    outcome, c = judge_paired(counters(syncs=(SyncSite(HOSTILE_LINE, "aten::equal", 2),)), counters())
    assert c.verdict is Verdict.REGRESSION
    md = render_markdown(outcome)
    assert "Counters (exact, per step" in md
    assert "https://evil" not in md and "](https:" not in md
    assert "<img" not in md and "\n**Check: passes.**" not in md
    assert "@org/team" not in md
    table = [line for line in md.splitlines() if line.startswith("| forward | syncs")]
    assert len(table) == 1 and table[0].count(" | ") == 4  # one row, its cells intact


# --- the judge ---------------------------------------------------------------------------------


def write_run(folder: Path, head: CounterSet | None, base: CounterSet | None, *, scale: float = 1.0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_result(paired(scale=scale, seed=1), folder / "tiny.json")
    save_result(paired(seed=2), folder / "base" / "tiny.json")
    if head is not None:
        save_counters(head, folder)
    if base is not None:
        save_counters(base, folder / "base")
    manifest = RunManifest(design="paired", device="cpu", workloads=("tiny",), pr_number=7, head_sha=HEAD_SHA,
                           base_sha=BASE_SHA, base_ref="main")
    write_json_atomic(folder / MANIFEST_NAME, manifest.to_dict())
    return folder


@pytest.fixture
def base_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "base-checkout"
    (folder / "baselines").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(f'[tool.perfgate]\nbaselines = "baselines"\nblocks = {BLOCKS}\nwindows = 1\nbudget = "none"\n')
    define_workloads(folder, "tiny")
    return folder


def judge(tmp_path: Path, results: Path, base: Path) -> tuple[int, str, str, str]:
    parser = argparse.ArgumentParser(prog="perfgate")
    add_parser(parser.add_subparsers())
    artifacts = tmp_path / "judged"
    args = parser.parse_args(["judge", str(results), "--base-dir", str(base), "--artifacts", str(artifacts)])
    out, err = StringIO(), StringIO()
    code = run_judge(args, {}, out, err)
    comment = (artifacts / "comment.md").read_text() if (artifacts / "comment.md").exists() else ""
    return code, out.getvalue(), err.getvalue(), comment


def test_the_judge_reads_the_counters_files_and_applies_the_rule(tmp_path: Path, base_dir: Path) -> None:
    folder = write_run(tmp_path / "r", counters(syncs=(SYNC,)), counters())
    measured = load_measured(folder)
    assert set(measured.head_counters) == {"tiny"} and set(measured.base_counters) == {"tiny"}
    code, out, _, comment = judge(tmp_path, folder, base_dir)
    assert code == EXIT_REGRESSION, comment
    assert "counters: 1 new host synchronisation per step in forward" in out
    assert "| forward | syncs ❌ |" in comment
    report = json.loads((tmp_path / "judged" / "report.json").read_text())
    assert report["workloads"][0]["counters"][0]["failed"] is True

    same = write_run(tmp_path / "same", counters(), counters())
    code, _, _, comment = judge(tmp_path, same, base_dir)
    assert code == EXIT_OK, comment


def test_the_judge_without_the_heads_counters_file_is_an_error_unless_the_base_allows_it(tmp_path: Path,
                                                                                         base_dir: Path) -> None:
    # Leaving out tiny.counters.json hid a new per-step sync: missing data is not a pass.
    folder = write_run(tmp_path / "r", None, counters())
    code, _, _, comment = judge(tmp_path, folder, base_dir)
    assert code == 2 and "the head lacks its counted run" in comment, comment
    (base_dir / "pyproject.toml").write_text(f'[tool.perfgate]\nbaselines = "baselines"\nblocks = {BLOCKS}\nwindows = 1\nbudget = "none"\n'
                                             "missing_is_error = false\n")
    code, _, _, comment = judge(tmp_path, folder, base_dir)
    assert code == EXIT_OK, comment
    assert "no counted run of the head side" in comment


def test_the_base_can_turn_the_counters_off(tmp_path: Path, base_dir: Path) -> None:
    (base_dir / "pyproject.toml").write_text(f'[tool.perfgate]\nbaselines = "baselines"\nblocks = {BLOCKS}\nwindows = 1\nbudget = "none"\n'
                                             "counters = false\n")
    folder = write_run(tmp_path / "r", counters(syncs=(SYNC,)), counters())
    code, _, _, comment = judge(tmp_path, folder, base_dir)
    assert code == EXIT_OK, comment


def test_a_malformed_counters_file_is_one_line(tmp_path: Path, base_dir: Path) -> None:
    folder = write_run(tmp_path / "r", counters(), counters())
    path = folder / "tiny.counters.json"
    data = json.loads(path.read_text())
    data["phases"]["forward"]["flops"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(FileFormatError) as info:
        load_measured(folder)
    assert str(path) in info.value.message and "\n" not in info.value.message
    code, _, err, _ = judge(tmp_path, folder, base_dir)
    assert code == 2 and "tiny.counters.json" in err

    path.write_text(json.dumps(counters("other").to_dict()))
    with pytest.raises(FileFormatError, match="a counters file is named after its workload"):
        load_measured(folder)
    path.unlink()
    (folder / "base" / "tiny.counters.json").write_text("{not json")
    with pytest.raises(FileFormatError, match="tiny.counters.json"):
        load_measured(folder)


def test_a_results_folder_with_counters_files_still_loads_as_results(tmp_path: Path) -> None:
    from perfgate.store.benchmark_json import load_results_dir

    save_result(make_result("tiny"), tmp_path / "tiny.json")
    save_counters(counters(), tmp_path)
    assert [r.workload for r in load_results_dir(tmp_path)] == ["tiny"]


# --- the paired gate's counted runs -------------------------------------------------------------


def test_count_pairs_writes_both_sides_and_a_failure_is_a_note(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import perfgate.measure.counters as measure_counters
    from perfgate.gate.gating import PairedPlan, count_pairs

    calls = []

    def fake(job, device, cache_dir, *, out_dir=None, timeout_s, project_dir=None, python=None, steps=3):
        calls.append((job.side, out_dir, project_dir, python))
        if job.side == "base":
            return CounterOutcome("tiny", None, CounterError("tiny: the builder blew up"))
        c = counters()
        save_counters(c, out_dir)
        return CounterOutcome("tiny", c)

    monkeypatch.setattr(measure_counters, "count_job", fake)
    job = SimpleNamespace(workload=SimpleNamespace(name="tiny"))
    head_job, base_job = SimpleNamespace(side="head", **vars(job)), SimpleNamespace(side="base", **vars(job))
    out = tmp_path / "out"
    (out / "base").mkdir(parents=True)
    (out / "base" / "tiny.counters.json").write_text("stale")
    plan = PairedPlan([head_job], {"tiny": base_job}, tmp_path / "head", tmp_path / "basetree", BASE_SHA,
                      "/usr/bin/python-base")
    counted = count_pairs(plan, ["tiny"], device="cpu", cache_dir=tmp_path, out_dir=out, timeout_s=60)
    assert calls == [("head", out, tmp_path / "head", None),
                     ("base", out / "base", tmp_path / "basetree", "/usr/bin/python-base")]
    assert (out / "tiny.counters.json").is_file()
    assert not (out / "base" / "tiny.counters.json").exists()  # the stale file is gone
    assert counted["tiny"].head is not None and counted["tiny"].base is None
    assert counted["tiny"].note == "the base side's counted run failed: tiny: the builder blew up"


def test_the_html_report_shows_the_counters_escaped() -> None:
    from perfgate.report.html import render_html

    outcome, _ = judge_paired(counters(syncs=(SyncSite(HOSTILE_LINE, "aten::equal", 2),)), counters())
    page = render_html(outcome)
    assert "<th>what changed</th>" in page and "syncs ❌" in page
    assert "<img src=x>" not in page and "&lt;img src=x&gt;" in page


def test_the_pytest_failure_text_names_the_failing_counter() -> None:
    from perfgate.adapters.pytest_session import GateSession

    outcome, c = judge_paired(counters(syncs=(SYNC,)), counters())
    text = GateSession.failure_text(SimpleNamespace(outcome=outcome), c)  # type: ignore[arg-type]
    first, second = text.splitlines()[:2]
    assert first.startswith("perfgate: tiny: REGRESSION — counters: 1 new host synchronisation")
    assert second == "  counters FAIL: 1 new host synchronisation per step in forward: workloads/x.py:42"
    assert "| forward | syncs ❌ |" in text


# --- end to end -----------------------------------------------------------------------------------

from test_paired_gate import SETS, commit_change, one_look, run_cli  # noqa: E402 - the end-to-end tests' helpers, here

FAST = [*SETS]  # the counted runs on: they are this test's subject


@pytest.mark.slow
@pytest.mark.extended
def test_a_head_that_adds_an_item_in_the_loss_fails_on_its_counters(repo: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Real runs: two ABBA blocks, then a counted run per side; the timing cannot tell, the counters can."""
    commit_change(repo, "        loss = cross_entropy(output, target)\n",
                  "        loss = cross_entropy(output, target)\n        loss.item()\n", "read the loss every step")
    code, out, err = run_cli(["gate", "tiny", "--against", "HEAD~1", *one_look(2), "--json", "r.json", *FAST],
                             capsys)
    assert code == 1, out + err
    line = next(x for x in out.splitlines() if x.startswith("tiny: REGRESSION"))
    assert "counters: 1 new host synchronisation per step in forward" in line, out
    assert "  counters FAIL: 1 new host synchronisation per step in forward: workloads/tiny_workloads.py:" in out
    assert (repo / "perfgate-results" / "tiny.counters.json").is_file()
    assert (repo / "perfgate-results" / "base" / "tiny.counters.json").is_file()
    report = json.loads((repo / "r.json").read_text())
    assert any(ch["failed"] and ch["counter"] == "syncs" for ch in report["workloads"][0]["counters"])


def test_no_counters_on_the_command_line_turns_the_counted_runs_off(tmp_path: Path) -> None:
    from perfgate.adapters import cli, options

    args = cli.build_parser().parse_args(["gate", "--no-counters", "--config", str(tmp_path / "none.toml")])
    assert options.settings_of(args).gate.counters is False
    args = cli.build_parser().parse_args(["gate", "--config", str(tmp_path / "none.toml")])
    assert options.settings_of(args).gate.counters is True


@pytest.mark.slow
@pytest.mark.extended
def test_a_measured_rebaseline_counts_and_stores_the_counted_run(tmp_path: Path, capsys) -> None:
    """The measuring path end to end: two repeats of the tiny workload and its counted run,
    stored beside the baseline (the --from-results path is tested above, without torch)."""
    import shutil

    from conftest import FIXTURES

    from perfgate.adapters.cli import main
    from perfgate.store.counters import load_counters

    shutil.copy(FIXTURES / "tiny_workloads.py", tmp_path / "tiny_workloads.py")
    store = tmp_path / "baselines"
    code = main(["rebaseline", "tiny", "--workloads-path", str(tmp_path / "tiny_workloads.py"), "--device", "cpu",
                 "--repeats", "2", "--baselines", str(store), "--reason", "r", "--out", str(tmp_path / "results"),
                 "--cache-dir", str(tmp_path / "cache"), "--config", str(tmp_path / "absent.toml"), "-q"])
    assert code == EXIT_OK, capsys.readouterr().err
    (key_dir,) = store.iterdir()
    counted = load_counters(key_dir / "tiny.counters.json")
    assert counted.workload == "tiny" and counted.device == "cpu" and counted.total("ops")
    assert (tmp_path / "results" / "tiny.counters.json").is_file()
