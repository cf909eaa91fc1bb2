"""One pytest session with ``--perfgate``: its workloads, its single gate run, and how each
verdict becomes a test outcome (see :mod:`perfgate.adapters.pytest_plugin`)."""

from __future__ import annotations

import shlex
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from perfgate.adapters import options
from perfgate.adapters.pytest_items import (
    COLLECTOR_NAME,
    MARKER,
    NotJudged,
    PerfgateCollector,
    PerfgateItem,
    marker_workload,
)
from perfgate.text.inert import terminal

if TYPE_CHECKING:
    from perfgate.analysis.outcome import GateOutcome, WorkloadComparison
    from perfgate.gate.config import Settings
    from perfgate.gate.frontend import Interruption
    from perfgate.gate.gating import GateRequest, GateRun
    from perfgate.measure.runner import Progress
    from perfgate.model.job import Job


class GateSession:
    """State and hooks of one pytest session with ``--perfgate``; lives in ``config.stash``."""

    def __init__(self, config: pytest.Config) -> None:
        from perfgate.model.errors import PerfgateError

        self.config = config
        self._here = Path(config.invocation_params.dir)
        self.jobs: dict[str, Job] = {}
        self.assignments: dict[str, object] = {}
        self.workload_paths: list[Path] = []
        self.device: str | None = None
        self.outcome: GateOutcome | None = None
        self.error: BaseException | None = None
        self.interruption: Interruption | None = None
        """The gate's record of Ctrl-C or SIGTERM (its signal None while none came)."""
        self.interrupted: GateRun | None = None
        """The gate's run when a signal ended it before its course: a partial report, never a verdict."""
        self.written: list[Path] = []
        self.unwritten: list[str] = []
        self._session: pytest.Session | None = None
        self._started = False
        self.values = options.pytest_values(config.getoption, self._here)
        """The gate's options (:data:`perfgate.adapters.options.GATE_OPTIONS`), as given."""
        try:
            self.settings = self._load_settings()
        except PerfgateError as exc:
            raise pytest.UsageError(f"perfgate: {exc.message}") from None

    # -- options and settings ------------------------------------------------------------

    def _opt(self, name: str) -> Any:
        return self.config.getoption(f"perfgate_{name}")

    @property
    def fail_on_missing_baseline(self) -> bool:
        return self.settings.gate.fail_on_missing_baseline

    def _load_settings(self) -> Settings:
        """The rootdir's settings with the gate's options given, checked as the command line's are."""
        from perfgate.gate.config import load_settings

        settings = load_settings(self.config.rootpath / "pyproject.toml",
                                 options.settings_cli(self.values, options.pytest_flag))
        options.require_gate_repeats(settings, self.values, options.pytest_flag)
        # Checked now, not when the gate runs: a bad --perfgate-max-other-cpu-share is a usage error.
        options.contention_policy(self.values, options.pytest_flag)
        return settings

    def pytest_report_header(self, config: pytest.Config) -> str:
        s = self.settings
        return (f"perfgate: gate on (settings: {s.source}); baselines {s.baselines}, "
                f"{s.repeats} repeat(s) at the first look, device {s.device}")

    # -- collection ----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before -k/-m deselection, which then applies to these items
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        from perfgate.model.errors import PerfgateError

        self._session = session  # its items, after deselection, are the run's workloads
        try:
            names = self._prepare_jobs(items)
        except PerfgateError as exc:
            raise pytest.UsageError(f"perfgate: {exc.message}") from None
        if not names:
            return
        collector = PerfgateCollector.from_parent(session, name=COLLECTOR_NAME, nodeid=COLLECTOR_NAME,
                                                  workloads=names)
        new_items = collector.collect()
        # Reported like any collected node, so "collected N items" and other plugins count them.
        config.hook.pytest_collectreport(report=pytest.CollectReport(
            collector.nodeid, "passed", None, [*new_items]))
        for item in new_items:
            config.hook.pytest_itemcollected(item=item)
        items.extend(new_items)

    def _prepare_jobs(self, items: Sequence[pytest.Item]) -> list[str]:
        """Validate every workload the run may need and build its job; return the item names."""
        from perfgate.adapters.pytest_jobs import plan_jobs

        plan = plan_jobs(items, self.settings, here=self._here, rootpath=self.config.rootpath,
                         workloads=self._opt("workloads"), workloads_path=self._opt("workloads_path"),
                         assignments=self._opt("set"), data_root=self._opt("data_root"),
                         scripts=self._opt("script"))
        if plan is None:
            return []
        self.device, self.assignments, self.workload_paths = plan.device, plan.assignments, plan.workload_paths
        self.jobs.update(plan.jobs)
        return list(plan.jobs)

    # -- the single gate run -------------------------------------------------------------

    def _needed(self) -> list[str]:
        """Workloads still selected after deselection, in collection order."""
        assert self._session is not None
        wanted: set[str] = set()
        for item in self._session.items:
            if isinstance(item, PerfgateItem):
                wanted.add(item.workload)
            else:
                marker = item.get_closest_marker(MARKER)
                if marker is not None:
                    wanted.add(marker_workload(marker, item.nodeid))
        return [name for name in self.jobs if name in wanted]

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or self.config.get_verbosity() < 0:
            return
        # The gate runs inside a test's setup, where output is captured; progress is not
        # the test's output, so it goes to the terminal the way live logging does.
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if capture is None:
            reporter.write_line(line)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    def _progress(self, event: Progress) -> None:
        where = event.label or f"repeat {event.repeat}/{event.repeats}"
        if event.status == "done":
            self._say(f"perfgate: [{event.workload}] {where} done in "
                      f"{event.seconds:.1f} s, step median {event.step_median_ms:.2f} ms")
        elif event.status == "failed":
            self._say(f"perfgate: [{event.workload}] {where} failed "
                      f"after {event.seconds:.1f} s: {event.message}")

    def run(self) -> GateOutcome:
        """The gate's outcome, measuring on the first call only; a failed run is not retried.

        Ctrl-C or SIGTERM while the gate runs ends the session as an interruption (a
        KeyboardInterrupt): no test passes or skips on a partial gate, the summary shows
        what was measured under an INTERRUPTED headline, and the exit status is 130 or 143
        (:meth:`pytest_sessionfinish`)."""
        if not self._started:
            self._started = True
            from perfgate.gate.frontend import interruptible

            with interruptible() as self.interruption:
                try:
                    gate = self._run()
                except BaseException as exc:
                    self.error = exc
                    if not isinstance(exc, Exception):
                        raise  # KeyboardInterrupt and the like end the session
                else:
                    if gate.interrupted:
                        self.interrupted = gate
                        raise KeyboardInterrupt
                    self.outcome = gate.outcome
                    self._publish(self.outcome)
        if self.error is not None:
            from perfgate.model.errors import PerfgateError

            if isinstance(self.error, PerfgateError):
                detail = f"\n{self.error.detail}" if self.error.detail and self.config.get_verbosity() > 0 else ""
                pytest.fail(f"perfgate: the gate could not run: {self.error.message}{detail}", pytrace=False)
            raise self.error
        assert self.outcome is not None
        return self.outcome

    def request(self, jobs: Sequence[Job]) -> GateRequest:
        """The gate's request, built from the options as the command line builds it: the
        same contention policy (telemetry on, ``--perfgate-max-other-cpu-share``), reruns
        and timeout."""
        assert self.device is not None
        return options.gate_request(self.values, self.settings, self.device, jobs, progress=self._progress,
                                    announce=lambda message: self._say(f"perfgate: {message}"),
                                    flag=options.pytest_flag)

    def _run(self) -> GateRun:
        from perfgate.gate.gating import run_gate

        names = self._needed()
        request = self.request([self.jobs[n] for n in names])
        if self._opt("against"):
            return self._run_paired(request)
        self._say(f"perfgate: one gate over {len(names)} workload(s) on {self.device} "
                  f"({', '.join(names)}), {self.settings.repeats} repeat(s) each at the first look, one process "
                  "per repeat")
        return run_gate(request)

    def _run_paired(self, request: GateRequest) -> GateRun:
        """``--perfgate-against REF``: the base commit in a temporary worktree, ABBA blocks."""
        from perfgate.gate.frontend import checked_out, paired_gate

        with checked_out(self._here, self._opt("against"), allow_dirty=self._opt("allow_dirty")) as tree:
            self._say(f"perfgate: one paired gate over {len(request.jobs)} workload(s) on {self.device} against "
                      f"{tree.commit[:7]}, {self.settings.blocks} ABBA block(s) of four processes each at the "
                      "first look")
            return paired_gate(request, tree, project_dir=self.config.rootpath, workload_paths=self.workload_paths,
                               assignments=self.assignments)

    def _publish(self, outcome: GateOutcome) -> None:
        """Write the reports asked for, each atomically; a file that cannot be written loses no verdict."""
        from perfgate.adapters.publish import FORMATS, publish

        done = publish(outcome, {name: self.values[name] for name in FORMATS})
        self.written.extend(done.written)
        self.unwritten.extend(done.unwritten)

    def comparison(self, workload: str) -> WorkloadComparison:
        for c in self.run().comparisons:
            if c.workload == workload:
                return c
        pytest.fail(f"perfgate: {workload} was not part of this session's gate run", pytrace=False)

    def judgeable(self, workload: str) -> WorkloadComparison:
        """The comparison, unless the gate could not judge it: then ``pytest.fail``, which
        in setup makes the test an error (ERROR, INCOMPARABLE, and NO_BASELINE when a
        missing baseline fails the gate)."""
        from perfgate.adapters.pytest_items import is_setup_error

        c = self.comparison(workload)
        if is_setup_error(c, self.settings.gate):
            pytest.fail(self.failure_text(c), pytrace=False)
        return c

    # -- texts ---------------------------------------------------------------------------

    def rebaseline_command(self, c: WorkloadComparison) -> str:
        """``perfgate rebaseline`` for this workload, with what the CLI needs to find and
        resolve it the same way (its file, the overrides, the store given to pytest)."""
        job = self.jobs.get(c.workload)
        script = job.script if job is not None else None
        if script is not None and not script.configured:
            # Given to this session only: the command line names the file (relative to where
            # pytest started), the name it goes by and its arguments after --.
            from perfgate.measure.script_job import shown_path

            parts = ["perfgate", "rebaseline", "--script", shown_path(script.path, self._here)]
            if c.workload != script.default_name():
                parts += ["--name", c.workload]
        else:
            parts = ["perfgate", "rebaseline", c.workload]
        if c.device:
            parts += ["--device", c.device]
        if job is not None and job.workload.source.startswith("file:"):
            source = Path(job.workload.source.removeprefix("file:"))
            parts += ["--workloads-path", str(source.relative_to(self._here)
                                              if source.is_relative_to(self._here) else source)]
        for key, value in sorted(c.overrides.items()):
            parts += ["--set", f"{key}={value}"]
        if self._opt("baselines"):
            parts += ["--baselines", self._opt("baselines")]
        parts += ["--reason", "<why this change is intended>"]
        if script is not None and not script.configured and script.args:
            parts += ["--", *script.args]
        return shlex.join(parts)

    def skip_reason(self, c: WorkloadComparison) -> str:
        from perfgate.model.verdict import Verdict

        reason = f"{c.verdict.value}: {terminal(c.headline)}"  # the deciding fact, as every report's verdict line
        if c.verdict is Verdict.NO_BASELINE:
            reason += f"; record one with: {self.rebaseline_command(c)}"
        return reason

    def failure_text(self, c: WorkloadComparison) -> str:
        from perfgate.model.verdict import Verdict
        from perfgate.report.markdown import render_workload

        assert self.outcome is not None
        head = f"perfgate: {terminal(c.verdict_line)}"  # then each failing counter, then the whole section
        if c.counters is not None:  # exact counters that fail, one line each
            head += "".join(f"\n  counters FAIL: {terminal(ch.reason)}" for ch in c.counters.failures)
        text = f"{head}\n\n{render_workload(self.outcome, c.workload)}"
        if c.verdict is Verdict.NO_BASELINE:
            text += f"\n(fail_on_missing_baseline is set)\n\n    {self.rebaseline_command(c)}\n"
        return text

    # -- reporting -----------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.excinfo is not None and isinstance(call.excinfo.value, NotJudged):
            # Shown at the workload item (or the test that asked for it), not at this file. A
            # line of None (no line) is what pytest's skip summary takes, though typed int.
            if isinstance(item, PerfgateItem):
                report.longrepr = (item.nodeid, None, call.excinfo.value.reason)  # type: ignore[assignment]  # no line
            else:
                path, line, _ = item.location
                report.longrepr = (path, None if line is None else line + 1,  # type: ignore[assignment]  # no line
                                   call.excinfo.value.reason)
        return report

    def _interrupted_code(self) -> int | None:
        """130 or 143 when Ctrl-C or SIGTERM ended the gate; None otherwise."""
        if self.interruption is None:
            return None
        if self.interrupted is not None or self.interruption.signum is not None or \
                isinstance(self.error, KeyboardInterrupt):
            return self.interruption.exit_code
        return None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        code = self._interrupted_code()
        if code is not None:
            session.exitstatus = code  # pytest's own would be 2, which reads as a usage error

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if not self._started:
            return
        terminalreporter.write_sep("=", "perfgate")
        if self._interrupted_code() is not None:
            from perfgate.gate.frontend import interrupted_lines

            assert self.interruption is not None
            if self.interrupted is not None:
                lines = interrupted_lines(self.interrupted, self.interruption)
            else:
                lines = [f"perfgate: INTERRUPTED by {self.interruption.name}: no verdict (exit code "
                         f"{self.interruption.exit_code})"]
            terminalreporter.write_line(lines[0], bold=True, red=True)
            for line in lines[1:]:
                terminalreporter.write_line(line)
            return
        if self.outcome is None:
            message = getattr(self.error, "message", None) or f"{type(self.error).__name__}: {self.error}"
            terminalreporter.write_line(f"perfgate: the gate could not run: {message}", red=True)
            return
        from perfgate.report.terminal import gate_table

        terminalreporter.write(gate_table(self.outcome))
        for path in self.written:
            terminalreporter.write_line(f"perfgate: report written to {path}")
        for problem in self.unwritten:
            terminalreporter.write_line(f"perfgate: report NOT written: {problem}", red=True)
        from perfgate.model.verdict import run_policy

        exit_code = self.outcome.exit_code
        fails = run_policy(exit_code, self.outcome.config).fails
        terminalreporter.write_line(self.outcome.headline, bold=True, red=fails, green=exit_code == 0,
                                    yellow=exit_code != 0 and not fails)

