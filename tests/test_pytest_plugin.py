"""The pytest plugin, end to end through pytester.

Without ``--perfgate`` it must stay out of the way (no items, no torch). With it, each
workload is an item ``perfgate::NAME``, the gate runs once for all of them, and the
verdicts become pytest outcomes: REGRESSION fails with the workload's markdown section,
NO_BASELINE and INCONCLUSIVE skip with the reason, ERROR is a test error.

The real runs use the tiny CPU workload (each repeat is a fresh process importing torch,
a few seconds here), so there are few of them: one baseline is recorded per module and
copied into each test's own store, and the runs use 2 or 3 repeats and one look (max_blocks
at the first look's repeats). The baseline and the gates against it fork their repeats from a
template that has imported torch (``start = fork``: one ``import torch`` per four repeats, not
one per repeat), as does the NO_BASELINE run (from pyproject); the run whose workload cannot
be built keeps the stored design's default start, a new interpreter per repeat. They
run pytest in a subprocess: the gate's runner imports torch in the pytest process, and
an in-process run would leave it half-unloaded (pytester restores ``sys.modules``).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfgate.adapters.cli import build_parser, main
from perfgate.analysis.summary import summarise
from perfgate.store.benchmark_json import load_results_dir

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).parent / "fixtures"
# Heavier than the tiny defaults so that a step is a few ms, not dominated by timer jitter.
SETTINGS = ("width=32", "input_size=32", "batch_size=16", "steps=16")
SET_ARGS = [arg for setting in SETTINGS for arg in ("--perfgate-set", setting)]
# The gates against the recorded baseline start their repeats as it did (forked from a template).
FORK = ["--perfgate-start", "fork"]

# A user's test declaring the workload; it records what the fixture handed it.
USER_TEST = '''
import json

import pytest


@pytest.mark.perfgate(workload="tiny")
def test_tiny_as_the_user_sees_it(perfgate_comparison):
    c = perfgate_comparison
    forward = next(row for row in c.phases if row.phase == "forward")
    with open("seen.json", "w") as handle:
        json.dump({"workload": c.workload, "verdict": c.verdict.value,
                   "forward_slower": bool(forward.flag and forward.flag.flagged
                                          and forward.flag.estimate.ratio > 1)}, handle)
'''

# A test module that defines its own workload, "mine" (the tiny one renamed), and a test
# declaring it.
TEST_MINE = (FIXTURES / "tiny_workloads.py").read_text().replace('name="tiny"', 'name="mine"') + '''

import pytest


@pytest.mark.perfgate(workload="mine")
def test_mine(perfgate_comparison):
    raise AssertionError("a workload without a baseline is skipped before the test runs")
'''


@dataclass(frozen=True)
class Recorded:
    store: Path
    step_ms: float


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """A baseline of the tiny workload, recorded once with the CLI.

    Five repeats, so that the gate may set aside one repeat hit by a burst of load
    (it screens no recording of fewer than five), forked from a template (``--start fork``)
    so that torch is imported twice, not five times.
    """
    root = tmp_path_factory.mktemp("perfgate-baseline")
    shutil.copy(FIXTURES / "tiny_workloads.py", root / "tiny_workloads.py")
    store = root / "baselines"
    code = main(["rebaseline", "tiny", "--workloads-path", str(root / "tiny_workloads.py"), "--device", "cpu",
                 "--repeats", "5", "--start", "fork", "--set", *SETTINGS, "--baselines", str(store),
                 "--reason", "plugin tests",
                 "--out", str(root / "results"), "--cache-dir", str(root / "cache"),
                 "--config", str(root / "absent-pyproject.toml"), "-q", "--no-counters"])
    assert code == 0  # no counted run: the counters' stored path is tested in test_counter_gate.py
    (result,) = load_results_dir(root / "results")
    return Recorded(store, summarise(result).median_ms["step"])


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory with the tiny workload in ``perf/``."""
    (pytester.path / "perf").mkdir()
    shutil.copy(FIXTURES / "tiny_workloads.py", pytester.path / "perf" / "tiny_workloads.py")
    return pytester


def gate_args(*extra: str) -> list[str]:
    return ["--perfgate", "--perfgate-workloads", "tiny", "--perfgate-workloads-path", "perf",
            "--perfgate-device", "cpu", "--perfgate-cache-dir", "cache", *extra]


def with_baseline(project: pytest.Pytester, recorded: Recorded) -> list[str]:
    shutil.copytree(recorded.store, project.path / "baselines")
    return ["--perfgate-baselines", "baselines"]


def outcomes(result: pytest.RunResult) -> dict[str, int]:
    counts = result.parseoutcomes()
    return {k: counts.get(k, 0) for k in ("passed", "failed", "skipped", "errors", "deselected")}


# --- without --perfgate ----------------------------------------------------------------


def test_importing_the_plugin_loads_neither_torch_nor_the_gate() -> None:
    code = ("import sys, perfgate.adapters.pytest_plugin;"
            "print(sorted(m for m in ('torch', 'scipy', 'perfgate.gate.gating', 'perfgate.measure.runner')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_plain_run_is_inert(project: pytest.Pytester) -> None:
    project.makepyfile(test_plain="def test_plain():\n    pass\n", test_user=USER_TEST)
    project.makeconftest('''
import json, sys

def pytest_sessionfinish(session):
    with open("modules.json", "w") as handle:
        json.dump({m: m in sys.modules for m in ("torch", "perfgate.gate.gating", "perfgate.adapters.pytest_plugin")}, handle)
''')
    # A fresh interpreter, so that what the plugin imports is visible in sys.modules.
    result = project.runpytest_subprocess("-rs", "--strict-markers")
    assert outcomes(result) == {"passed": 1, "failed": 0, "skipped": 1, "errors": 0, "deselected": 0}
    result.stdout.fnmatch_lines(["*test_user.py:*: perfgate: gated workloads run only with --perfgate"])
    assert "perfgate::" not in result.stdout.str()
    assert "== perfgate ==" not in result.stdout.str()
    assert json.loads((project.path / "modules.json").read_text()) == {
        "torch": False, "perfgate.gate.gating": False, "perfgate.adapters.pytest_plugin": True}
    assert not (project.path / "perfgate-results").exists()

    listed = project.runpytest_inprocess("--co", "-q")
    assert "perfgate::" not in listed.stdout.str()


def test_the_options_are_one_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    lines = result.stdout.lines
    start = lines.index("perfgate: performance-regression gate for PyTorch training:")
    end = next(i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" "))
    in_group = {m.group(1) for line in lines[start:end] for m in [re.match(r"\s+(--perfgate[\w-]*)", line)] if m}
    everywhere = {m.group(1) for line in lines for m in [re.match(r"\s+(--perfgate[\w-]*)", line)] if m}
    assert in_group == everywhere
    assert {"--perfgate", "--perfgate-device", "--perfgate-repeats", "--perfgate-baselines",
            "--perfgate-markdown", "--perfgate-workloads", "--perfgate-workloads-path", "--perfgate-alpha",
            "--perfgate-delta", "--perfgate-memory-threshold", "--perfgate-phase-q", "--perfgate-gate-phase",
            "--perfgate-fail-on-missing-baseline", "--perfgate-set", "--perfgate-out", "--perfgate-budget",
            "--perfgate-max-blocks", "--perfgate-inconclusive", "--perfgate-max-reruns",
            "--perfgate-max-other-cpu-share", "--perfgate-html"} <= in_group
    assert not {"--perfgate-looks", "--perfgate-second-look-repeats"} & everywhere


# --- with --perfgate, nothing measured -------------------------------------------------


def test_workloads_become_items_selected_by_pyproject_options_and_k(project: pytest.Pytester) -> None:
    project.makepyfile(test_plain="def test_plain():\n    pass\n")
    project.makefile(".toml", pyproject='[tool.perfgate]\nworkloads = ["tiny"]\nworkloads_path = ["perf"]\n')
    base = ["--perfgate", "--perfgate-device", "cpu", "--co", "-q"]

    def listed(*args: str) -> list[str]:
        result = project.runpytest(*base, *args)
        assert result.ret == 0, result.stdout.str()
        return [line for line in result.stdout.lines if "::" in line]

    assert listed() == ["test_plain.py::test_plain", "perfgate::tiny"]
    project.runpytest(*base).stdout.fnmatch_lines(["2 tests collected in *"])  # counted like any item
    assert listed("--perfgate-workloads", "resnet18-cifar10,tiny") == [
        "test_plain.py::test_plain", "perfgate::resnet18-cifar10", "perfgate::tiny"]
    assert listed("--perfgate-workloads", "resnet18-cifar10", "--perfgate-workloads", "tiny")[1:] == [
        "perfgate::resnet18-cifar10", "perfgate::tiny"]
    assert listed("-k", "not tiny") == ["test_plain.py::test_plain"]
    assert listed("-m", "perfgate") == ["perfgate::tiny"]


def test_a_workload_defined_in_a_test_module_joins_and_can_be_named(project: pytest.Pytester) -> None:
    (project.path / "test_mine.py").write_text(TEST_MINE)
    base = ["--perfgate", "--perfgate-device", "cpu", "--perfgate-workloads-path", "perf", "--co", "-q"]
    for args, expected in [
        (["--perfgate-workloads", "mine"], ["perfgate::mine"]),
        (["--perfgate-workloads", "tiny"], ["perfgate::tiny", "perfgate::mine"]),
    ]:
        result = project.runpytest(*base, *args)
        assert [line for line in result.stdout.lines if "::" in line] == ["test_mine.py::test_mine", *expected]


def test_a_deselected_gate_never_runs(project: pytest.Pytester) -> None:
    project.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = project.runpytest(*gate_args("-k", "not tiny"))
    assert outcomes(result) == {"passed": 1, "failed": 0, "skipped": 0, "errors": 0, "deselected": 1}
    assert "one gate over" not in result.stdout.str()
    assert "== perfgate ==" not in result.stdout.str()
    assert not (project.path / "perfgate-results").exists()


@pytest.mark.parametrize(("files", "args", "message"), [
    ({}, ["--perfgate-workloads", "nope"], "unknown workload 'nope'; known workloads: *tiny*"),
    ({}, ["--perfgate-repeats", "1"], "--perfgate-repeats: a gate needs at least 2 repeats*"),
    ({}, ["--perfgate-blocks", "1"], "--perfgate-blocks: the paired design needs at least 2 ABBA blocks"),
    ({}, ["--perfgate-budget", "soon"], "--perfgate-budget: expected a duration such as 20m, 90s or 1h, got 'soon'"),
    ({}, ["--perfgate-max-other-cpu-share", "2"], "--perfgate-max-other-cpu-share: max_other_cpu_share must be*"),
    ({}, ["--perfgate-set", "widht=3"], "unknown parameter 'widht' for workload tiny; allowed: *"),
    ({"test_user.py": '@__import__("pytest").mark.perfgate(workload="nope")\ndef test_x():\n    pass\n'},
     [], "test_user.py::test_x: unknown workload 'nope' in @pytest.mark.perfgate; known workloads: *tiny*"),
    ({"test_user.py": '@__import__("pytest").mark.perfgate\ndef test_x():\n    pass\n'},
     [], "test_user.py::test_x: @pytest.mark.perfgate needs a workload name*"),
    # "?" because fnmatch reads [...] as a set of characters
    ({"pyproject.toml": "[tool.perfgate]\nbogus = 1\n"}, [], "*pyproject.toml ?tool.perfgate?: unknown key 'bogus'*"),
], ids=["unknown-workload", "one-repeat", "one-block", "bad-budget", "bad-cpu-share", "bad-set", "marker-unknown-workload", "marker-without-name",
        "bad-pyproject"])
def test_bad_input_is_a_usage_error_before_anything_runs(project: pytest.Pytester, files: dict[str, str],
                                                         args: list[str], message: str) -> None:
    for name, text in files.items():
        (project.path / name).write_text(text)
    result = project.runpytest(*gate_args(*args))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: perfgate: {message}"])
    assert "one gate over" not in result.stdout.str()


def test_the_session_builds_the_command_line_s_request(project: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The request the gate gets: telemetry on and the contention policy of ``perfgate gate``
    (a contended repeat is measured again), the reruns, the timeout; stopped before measuring."""
    from contextlib import contextmanager

    from perfgate.model.errors import UsageError

    seen: list[object] = []

    def run_gate(request):
        seen.append(request)
        raise UsageError("stopped by the test before measuring")

    monkeypatch.setattr("perfgate.gate.gating.run_gate", run_gate)
    result = project.runpytest_inprocess(*gate_args("--perfgate-max-reruns", "1", "--perfgate-timeout", "60"))
    result.stdout.fnmatch_lines(["*perfgate: the gate could not run: stopped by the test before measuring*"])
    (request,) = seen
    measuring = request.measuring
    assert measuring.contention_check is not None and measuring.telemetry
    assert measuring.contention_check({"machine": {"other_cpu_share": {"median": 0.9}}}).startswith(
        "other processes used 90%")
    assert (measuring.max_reruns, measuring.timeout_s, request.paired) == (1, 60.0, None)
    assert [job.workload.name for job in request.jobs] == ["tiny"]
    assert measuring.cache_dir == project.path / "cache" and request.out_dir == project.path / "perfgate-results"

    seen.clear()
    project.runpytest_inprocess(*gate_args("--perfgate-no-telemetry"))
    assert seen[0].measuring.contention_check is None and not seen[0].measuring.telemetry
    seen.clear()
    project.runpytest_inprocess(*gate_args("--perfgate-no-telemetry", "--perfgate-max-other-cpu-share", "0.5"))
    assert seen[0].measuring.contention_check({"machine": {"other_cpu_share": {"median": 0.4}}}) is None
    assert seen[0].measuring.contention_check({"machine": {"other_cpu_share": {"median": 0.6}}}) is not None

    # --perfgate-against: the same request, handed to paired_gate with the base tree.
    @contextmanager
    def checked_out(start, ref, *, allow_dirty):
        yield type("Tree", (), {"commit": "0123456789abcdef"})()

    def paired_gate(request, tree, **kw):
        seen.append((request, tree, kw))
        raise UsageError("stopped by the test before measuring")

    monkeypatch.setattr("perfgate.gate.frontend.checked_out", checked_out)
    monkeypatch.setattr("perfgate.gate.frontend.paired_gate", paired_gate)
    seen.clear()
    result = project.runpytest_inprocess(*gate_args("--perfgate-against", "HEAD~1", "--perfgate-blocks", "3"))
    ((request, tree, kw),) = seen
    assert request.measuring.contention_check is not None and request.measuring.telemetry
    assert request.settings.blocks == 3
    assert tree.commit == "0123456789abcdef" and kw["project_dir"] == project.path
    result.stdout.fnmatch_lines(["*one paired gate over 1 workload(s) on cpu against 0123456, 3 ABBA block(s)*"])


# --- with --perfgate, real runs of the tiny workload -----------------------------------


@pytest.mark.slow
def test_no_baseline_skips_with_the_command_and_writes_the_report(project: pytest.Pytester) -> None:
    # "mine" is defined in the test module itself and joins the run through the marker;
    # the repeats, δ, the start (forked from a template) and the default selection come from
    # pyproject, α from the command line.
    (project.path / "test_mine.py").write_text(TEST_MINE)
    project.makefile(".toml", pyproject='[tool.perfgate]\nworkloads = ["tiny"]\nworkloads_path = ["perf"]\n'
                                        'repeats = 2\ndelta = 0.25\nstart = "fork"\n')
    result = project.runpytest_subprocess("--perfgate", "--perfgate-device", "cpu", "--perfgate-cache-dir", "cache",
                               "--perfgate-alpha", "0.05", "--perfgate-baselines", "empty-store",
                               "--perfgate-markdown", "report/gate.md", "-rs")
    out = result.stdout.str()
    assert outcomes(result) == {"passed": 0, "failed": 0, "skipped": 3, "errors": 0, "deselected": 0}, out
    assert out.count("perfgate: one gate over 2 workload(s) on cpu (tiny, mine), 2 repeat(s) each") == 1
    # Once each, or more when other processes loaded the machine: the session measures a
    # contended repeat again, as perfgate gate does.
    assert out.count("[tiny] repeat 1/2 done") >= 1 and out.count("[mine] repeat 2/2 done") >= 1

    commands = {}
    for name in ("tiny", "mine"):
        line = next(line for line in result.stdout.lines if line.startswith(f"SKIPPED [1] perfgate::{name}: "))
        assert f"NO_BASELINE: no baseline for {name} in environment cpu-" in line
        commands[name] = line.split("; record one with: ")[1]
    assert commands["tiny"] == ("perfgate rebaseline tiny --device cpu --workloads-path perf/tiny_workloads.py "
                                "--baselines empty-store --reason '<why this change is intended>'")
    assert "--workloads-path test_mine.py" in commands["mine"]
    args = build_parser().parse_args(shlex.split(commands["mine"])[1:])
    assert args.workloads == ["mine"] and args.workloads_path == ["test_mine.py"]
    result.stdout.fnmatch_lines(["SKIPPED ?1? test_mine.py:*: NO_BASELINE: no baseline for mine*"])

    result.stdout.fnmatch_lines(["*= perfgate =*", "perfgate: pass (2 NO_BASELINE)", "",
                                 "tiny: NO_BASELINE — no baseline for tiny*"])
    report = (project.path / "report" / "gate.md").read_text()
    assert "## perfgate: pass (2 NO_BASELINE)" in report
    assert "**No baseline for `tiny`, `mine`**" in report
    assert "α=0.05 one-sided" in report and "δ=25%" in report


@pytest.mark.slow
def test_an_unchanged_run_is_not_failed_and_the_fixture_shares_the_gate(project: pytest.Pytester,
                                                                        recorded: Recorded) -> None:
    project.makepyfile(test_user=USER_TEST)
    # δ=90%: this checks the wiring, not the statistics; load from other jobs on this
    # shared machine can move an unchanged step by far more than the default 3%.
    result = project.runpytest_subprocess(*gate_args(*with_baseline(project, recorded), *SET_ARGS, *FORK,
                                                     "--perfgate-repeats", "3", "--perfgate-max-blocks", "3",
                                                     "--perfgate-delta", "0.9", "-rA"))
    out = result.stdout.str()
    counts = outcomes(result)
    assert counts["failed"] == counts["errors"] == 0, out
    assert counts["passed"] + counts["skipped"] == 2, out
    assert out.count("perfgate: one gate over 1 workload(s)") == 1
    assert out.count("[tiny] repeat 3/3 done") >= 1  # more when a contended repeat is measured again

    seen = json.loads((project.path / "seen.json").read_text())
    assert seen["workload"] == "tiny" and seen["verdict"] in ("PASS", "IMPROVED", "INCONCLUSIVE")
    if seen["verdict"] == "INCONCLUSIVE":
        result.stdout.fnmatch_lines(["SKIPPED ?1? perfgate::tiny: INCONCLUSIVE: time per step *"])
    else:
        result.stdout.fnmatch_lines(["PASSED perfgate::tiny"])
    result.stdout.fnmatch_lines(["PASSED test_user.py::test_tiny_as_the_user_sees_it"])
    # The terminal summary: verdicts, the phase table, the headline.
    result.stdout.fnmatch_lines([
        "*= perfgate =*", "perfgate: *", "", f"tiny: {seen['verdict']} — time per step *", "",
        f"tiny ({seen['verdict']})", "phase * baseline ms/step * current ms/step * change (95% CI) * share * flag",
        "*", "data_wait *", "h2d *", "forward *", "backward *", "optimizer *", "residual *", "step *"])


@pytest.mark.slow
def test_a_slower_forward_fails_with_the_markdown_section(project: pytest.Pytester, recorded: Recorded,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    project.makepyfile(test_user=USER_TEST)
    # A sleep of three baseline steps in forward: the step becomes about 4x slower. The
    # later looks stay on (a repeat more each), in case a burst of load leaves the first undecided.
    # No contended repeat is measured again: load from other processes only slows a step more,
    # and a slowdown of 4x is decided at the first look all the same (re-measured, a loaded
    # machine doubled this gate's processes).
    monkeypatch.setenv("TINY_FORWARD_DELAY_MS", f"{3 * recorded.step_ms:.3f}")
    result = project.runpytest_subprocess(*gate_args(*with_baseline(project, recorded), *SET_ARGS, *FORK,
                                                     "--perfgate-repeats", "3", "--perfgate-max-reruns", "0",
                                                     "--perfgate-markdown", "gate.md"))
    out = result.stdout.str()
    # The item fails; the user's test gets the REGRESSION comparison and passes.
    assert outcomes(result) == {"passed": 1, "failed": 1, "skipped": 0, "errors": 0, "deselected": 0}, out
    assert json.loads((project.path / "seen.json").read_text()) == {
        "workload": "tiny", "verdict": "REGRESSION", "forward_slower": True}
    result.stdout.fnmatch_lines([
        "*_ perfgate::tiny _*",
        "perfgate: tiny: REGRESSION — time per step +*",
        "",
        "### ❌ tiny: REGRESSION",
        "",
        "time per step +*",
        "",
        "| phase | baseline ms/step | current ms/step | change (95% CI) | share | flag |",
    ])
    failure = out.split("_ perfgate::tiny _")[1]
    forward = next(line for line in failure.splitlines() if line.startswith("| forward |"))
    assert "⚠️ slower" in forward
    result.stdout.fnmatch_lines(["FAILED perfgate::tiny - Failed: perfgate: tiny: REGRESSION — time per step +*"])
    result.stdout.fnmatch_lines(["perfgate: REGRESSION (1 REGRESSION)"])
    assert "| forward |" in (project.path / "gate.md").read_text()


@pytest.mark.slow
def test_a_workload_that_cannot_be_built_is_an_error_not_a_failure(project: pytest.Pytester,
                                                                   recorded: Recorded) -> None:
    project.makepyfile(test_user=USER_TEST)
    (project.path / "taken").write_text("a file, so the report cannot go in a directory of that name")
    result = project.runpytest_subprocess(*gate_args(*with_baseline(project, recorded), *SET_ARGS,
                                                     "--perfgate-set", "fail_build=true", "--perfgate-repeats", "2",
                                                     "--perfgate-markdown", "taken/gate.md"))
    out = result.stdout.str()
    # The item and the test that asked for the comparison are both errors at setup.
    assert outcomes(result) == {"passed": 0, "failed": 0, "skipped": 0, "errors": 2, "deselected": 0}, out
    result.stdout.fnmatch_lines([
        "*_ ERROR at setup of test_tiny_as_the_user_sees_it _*",
        "perfgate: tiny: ERROR — *the builder blew up on purpose*",
        "*_ ERROR at setup of perfgate::tiny _*",
        "perfgate: tiny: ERROR — *the builder blew up on purpose*",
    ])
    assert out.count("[tiny] repeat 1/2 failed") == 1
    assert "REGRESSION" not in out
    # A report that cannot be written is said so, and loses no verdict.
    result.stdout.fnmatch_lines(["*= perfgate =*", "tiny: ERROR — *the builder blew up on purpose*",
                                 "perfgate: report NOT written: */taken/gate.md: *", "perfgate: error (1 ERROR)"])
