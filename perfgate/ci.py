"""``perfgate ci``: the pull-request gate as the GitHub workflow runs it, runnable anywhere.

It does what ``.github/workflows/perfgate.yml`` needs done, except talking to the GitHub
API: it reads the event GitHub describes in the ``GITHUB_*`` variables, takes the gate's
settings, thresholds and baselines from a checkout of the base branch (``--base-dir``),
says loudly when the pull request edits them, measures the pull request's workloads (or
judges result files already on disk with ``--results``), and publishes the report: the job
summary, a report and a comment file in the artifacts directory, the step's outputs and
workflow commands for the annotations. Its exit code is the gate's (0 pass, 1 regression,
2 error, 3 inconclusive); whatever goes wrong, including a bug, ends as 2 with the outputs
written, never as a pass.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tomllib
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from perfgate.compare import GateOutcome, compare
from perfgate.config import Settings, load_settings
from perfgate.decide import Verdict
from perfgate.errors import EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, PerfgateError, UsageError
from perfgate.gating import entries_for, run_gate
from perfgate.jsonfile import write_json_atomic
from perfgate.report.json_report import outcome_to_dict
from perfgate.report.markdown import GITHUB_COMMENT_LIMIT, MARKER, render_markdown
from perfgate.report.terminal import gate_table
from perfgate.tracing import TraceOutcome
from perfgate.worktree import BaseTree
from perfgate.benchmark_json import load_results_dir

VERDICT_WORD = {EXIT_OK: "pass", EXIT_REGRESSION: "regression", EXIT_ERROR: "error",
                EXIT_INCONCLUSIVE: "inconclusive"}
CHECK_LINE = {
    EXIT_OK: "**Check: passes.**",
    EXIT_REGRESSION: "**Check: fails** (exit code 1): a regression.",
    EXIT_ERROR: "**Check: fails as an error** (exit code 2): perfgate could not judge every workload. "
                "This is not a verdict on speed.",
    EXIT_INCONCLUSIVE: "**Check: neutral** (exit code 3): undecided after the planned looks; the check "
                       "passes with a warning. More repeats or baseline recordings decide it, not a re-run.",
}
# The files that decide how a pull request is judged besides the baselines and
# [tool.perfgate]: editing them is reported too (they run from the pull request's copy).
WORKFLOW_FILES = (".github/workflows/perfgate.yml", ".github/workflows/perfgate-comment.yml",
                  ".github/workflows/rebaseline.yml")
LISTED = 20  # file names shown per kind of change before "and N more"


# --- what GitHub hands the job ------------------------------------------------------------

@dataclass(frozen=True)
class PullRequest:
    number: int
    base_ref: str
    base_sha: str
    head_ref: str
    head_sha: str
    head_repo: str | None


def read_pull_request(path: Path) -> PullRequest:
    """The pull request of a ``pull_request`` event file; :class:`UsageError` when it is not one."""
    where = f"GITHUB_EVENT_PATH {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    pr = data.get("pull_request") if isinstance(data, dict) else None
    if not isinstance(pr, dict):
        raise UsageError(f"{where}: no pull_request object; perfgate ci judges pull_request events")
    number = pr.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise UsageError(f"{where}: pull_request.number is missing or not a positive integer")

    def side(name: str) -> tuple[str, str, Any]:
        value = pr.get(name)
        sha = value.get("sha") if isinstance(value, dict) else None
        if not isinstance(sha, str) or not sha:
            raise UsageError(f"{where}: pull_request.{name}.sha is missing")
        ref = value.get("ref")
        return (ref if isinstance(ref, str) else "?"), sha, value.get("repo")

    base_ref, base_sha, _ = side("base")
    head_ref, head_sha, head_repo = side("head")
    repo_name = head_repo.get("full_name") if isinstance(head_repo, dict) else None
    return PullRequest(number, base_ref, base_sha, head_ref, head_sha,
                       repo_name if isinstance(repo_name, str) else None)


def _path_variable(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name, "").strip()
    return Path(value) if value else None


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def workflow_command(command: str, message: str, **properties: str) -> str:
    """A GitHub workflow command (``::error title=...::message``), escaped so that text
    from a pull request (a workload's name, a reason) cannot start a command of its own."""
    props = ",".join(
        f"{key}={_escape_data(value).replace(':', '%3A').replace(',', '%2C')}"
        for key, value in properties.items() if value
    )
    return f"::{command}{' ' + props if props else ''}::{_escape_data(message)}"


def set_output(path: Path, values: Mapping[str, str]) -> None:
    """Append step outputs to ``$GITHUB_OUTPUT`` (multi-line values in the delimiter form)."""
    lines = []
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            delimiter = f"perfgate_{uuid.uuid4().hex}"
            lines += [f"{key}<<{delimiter}", value, delimiter]
        else:
            lines.append(f"{key}={value}")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


# --- the base branch's settings, and what the pull request changes in them -----------------

def ci_settings(base_dir: Path, cli: Mapping[str, Any]) -> Settings:
    """Settings, thresholds and the baseline store from the base checkout's pyproject.toml.

    ``workloads_path`` entries name code, which is the pull request's: they are taken at
    the same place in the pull request's checkout (the current directory).
    """
    pyproject = base_dir / "pyproject.toml"
    settings = load_settings(pyproject, cli)
    if not pyproject.is_file():
        settings = dataclasses.replace(settings, baselines=base_dir / "baselines")
    paths = []
    for entry in settings.workloads_path:
        try:
            paths.append(str(Path(entry).relative_to(base_dir)))
        except ValueError:
            paths.append(entry)
    return dataclasses.replace(settings, workloads_path=tuple(paths))


@dataclass(frozen=True)
class InputChanges:
    """What the pull request changes in the gate's own inputs, against the base checkout."""

    baselines_dir: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    workflows: tuple[str, ...] = ()

    @property
    def baselines_changed(self) -> bool:
        return bool(self.added or self.removed or self.modified)

    @property
    def any(self) -> bool:
        return self.baselines_changed or bool(self.settings or self.workflows)


def _digests(root: Path) -> dict[str, str]:
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _perfgate_table(pyproject: Path) -> tuple[dict[str, Any], str | None]:
    """The raw ``[tool.perfgate]`` table (empty when absent) and a problem, if unreadable."""
    if not pyproject.is_file():
        return {}, None
    try:
        with open(pyproject, "rb") as handle:
            table = tomllib.load(handle).get("tool", {}).get("perfgate", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, AttributeError) as exc:
        return {}, f"not valid TOML or not tables ({exc})"
    return (table if isinstance(table, dict) else {"": table}), None


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


_UNSET = object()


def _shown(value: Any) -> str:
    return "(unset)" if value is _UNSET else json.dumps(value, default=str)


def input_changes(head_dir: Path, base_dir: Path, settings: Settings) -> InputChanges:
    """Compare the pull request's baselines, ``[tool.perfgate]`` and perfgate workflows with
    the base checkout's. The head's store is where the head's own table puts it."""
    head_table, head_problem = _perfgate_table(head_dir / "pyproject.toml")
    base_table, _ = _perfgate_table(base_dir / "pyproject.toml")
    head_store = head_table.get("baselines", "baselines")
    head_baselines = head_dir / (head_store if isinstance(head_store, str) else "baselines")
    head_files, base_files = _digests(head_baselines), _digests(settings.baselines)
    settings_changes: list[str] = []
    if head_problem:
        settings_changes.append(f"the pull request's pyproject.toml: {head_problem}")
    head_flat, base_flat = _flatten(head_table), _flatten(base_table)
    for key in sorted(set(head_flat) | set(base_flat)):
        before, after = base_flat.get(key, _UNSET), head_flat.get(key, _UNSET)
        if before != after:
            settings_changes.append(f"`{key}` {_shown(before)} → {_shown(after)}")
    workflows = []
    for name in WORKFLOW_FILES:
        head_file, base_file = head_dir / name, base_dir / name
        head_bytes = head_file.read_bytes() if head_file.is_file() else None
        base_bytes = base_file.read_bytes() if base_file.is_file() else None
        if head_bytes != base_bytes:
            workflows.append(name)
    try:
        shown_dir = settings.baselines.relative_to(base_dir).as_posix()
    except ValueError:
        shown_dir = str(settings.baselines)
    return InputChanges(
        baselines_dir=shown_dir,
        added=tuple(sorted(set(head_files) - set(base_files))),
        removed=tuple(sorted(set(base_files) - set(head_files))),
        modified=tuple(sorted(k for k in set(head_files) & set(base_files) if head_files[k] != base_files[k])),
        settings=tuple(settings_changes),
        workflows=tuple(workflows),
    )


def _listed(names: tuple[str, ...]) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def notice_markdown(changes: InputChanges, pr: PullRequest) -> list[str]:
    if not changes.any:
        return []
    lines = [
        "> [!CAUTION]",
        "> **This pull request edits the gate's own inputs.** It is judged against the baselines and "
        f"thresholds of the base branch `{pr.base_ref}` (`{pr.base_sha[:12]}`) all the same: the edits "
        "take effect only once merged. Reviewers: make sure they are intended (new baselines should come "
        "from the rebaseline workflow, with their reason).",
        ">",
    ]
    if changes.baselines_changed:
        parts = [f"{word} {_listed(names)}" for word, names in
                 (("changed", changes.modified), ("added", changes.added), ("removed", changes.removed)) if names]
        lines.append(f"> - baselines (`{changes.baselines_dir}/`): {'; '.join(parts)}")
    if changes.settings:
        lines.append(f"> - `[tool.perfgate]` in pyproject.toml: {'; '.join(changes.settings)}")
    if changes.workflows:
        lines.append(f"> - perfgate's workflows: {_listed(changes.workflows)} (they run from the pull request's copy)")
    return lines + [""]


def notice_commands(changes: InputChanges) -> list[str]:
    commands = []
    if changes.baselines_changed:
        count = len(changes.added) + len(changes.removed) + len(changes.modified)
        commands.append(workflow_command(
            "warning", f"this pull request changes {count} file(s) in {changes.baselines_dir}/; it is still "
                       "judged against the base branch's baselines", title="perfgate: baselines edited"))
    if changes.settings:
        commands.append(workflow_command(
            "warning", "this pull request changes [tool.perfgate] (" + "; ".join(changes.settings).replace("`", "")
                       + "); it is still judged with the base branch's thresholds",
            title="perfgate: thresholds edited"))
    if changes.workflows:
        commands.append(workflow_command(
            "warning", f"this pull request changes {', '.join(changes.workflows)}, which run from its own copy",
            title="perfgate: workflows edited"))
    return commands


# --- judging ------------------------------------------------------------------------------

MEASURING_OPTIONS = (("repeats", "--repeats"), ("steps", "--steps"), ("warmup", "--warmup"),
                     ("set", "--set"), ("data_root", "--data-root"))


def judge(args: argparse.Namespace,
          settings_for: Callable[[Mapping[str, Any]], Settings],
          base: BaseTree | None = None) -> tuple[GateOutcome, Settings, dict[str, TraceOutcome]]:
    """Measure (or load) the pull request's results and judge them: paired against the base
    checkout ``base`` (ABBA blocks in this job), or against the base's stored baselines.

    With ``--trace-on-fail``, each regressed workload also gets a profiler trace (a separate
    run that never feeds the verdict) in ``<artifacts>/traces``.
    """
    from perfgate import cli  # the same job assembly and progress lines as `perfgate gate`

    if args.results:
        given = [flag for name, flag in MEASURING_OPTIONS if getattr(args, name)]
        if given:
            raise UsageError("--results judges result files on disk; "
                             f"it takes no measuring option ({', '.join(given)})")
        settings = settings_for({})
        results = {r.workload: r for r in load_results_dir(Path(args.results))}
        names = list(args.workloads) or list(settings.workloads) or sorted(results)
        missing = [n for n in names if n not in results]
        if missing:
            raise UsageError(f"no result for {', '.join(missing)} in {args.results}")
        if not names:
            raise UsageError(f"{args.results}: no result files to judge")
        config = dataclasses.replace(settings.gate, looks=1)  # results on disk: one look, full α
        outcome = compare(entries_for(results, {}, names, settings.baselines), config, look=1,
                          per_workload=settings.per_workload)
        return outcome, settings, {}
    if args.repeats is not None and args.repeats < 1:
        raise UsageError("--repeats must be at least 1")
    if args.blocks is not None and args.blocks < 2:
        raise UsageError("--blocks: the paired design needs at least 2 ABBA blocks")
    settings = settings_for({"repeats": args.repeats, "blocks": args.blocks})
    if settings.repeats < 2:
        raise UsageError("a gate needs at least 2 repeats to know its run-to-run noise")
    device, jobs = cli._jobs(args, settings)
    if base is not None:
        gate = cli.paired_gate_in(base, args, settings, device, jobs)
    else:
        gate = run_gate(
            jobs, settings=settings, device=device, repeats=settings.repeats,
            cache_dir=cli._cache_dir(args),
            out_dir=Path(args.out), progress=cli._progress_printer(args.quiet), timeout_s=args.timeout,
            telemetry=not args.no_telemetry,
            announce=lambda message: print(f"perfgate: {message}", file=sys.stderr),
            contention_check=cli._contention_policy(args), max_reruns=args.max_reruns,
        )
    traces: dict[str, TraceOutcome] = {}
    if args.trace_on_fail:
        from perfgate.measure.trace import trace_job

        for job in jobs:
            if gate.outcome_for(job.workload.name).verdict is Verdict.REGRESSION:
                traces[job.workload.name] = trace_job(job, device, cli._cache_dir(args),
                                                      Path(args.artifacts) / "traces", timeout_s=args.timeout)
    return gate.outcome, settings, traces


def _base_commit(base_dir: Path) -> str | None:
    """The commit checked out in ``base_dir``, or None when it is not a git checkout."""
    if not (base_dir / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(base_dir), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _clock_outcome(artifacts: Path) -> str | None:
    record = artifacts / "gpu-clocks.txt"
    try:
        first = record.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    return first.removeprefix("outcome: ").strip() or None


def _annotations(outcome: GateOutcome) -> list[str]:
    kinds = {Verdict.REGRESSION: "error", Verdict.ERROR: "error", Verdict.INCOMPARABLE: "error",
             Verdict.INCONCLUSIVE: "warning", Verdict.NO_BASELINE: "warning", Verdict.IMPROVED: "notice"}
    commands = []
    for c in outcome.comparisons:
        kind = kinds.get(c.verdict)
        if kind:
            reason = c.reason + (" (not judged; it does not fail the gate)" if c.verdict is Verdict.NO_BASELINE
                                 and not outcome.config.fail_on_missing_baseline else "")
            commands.append(workflow_command(kind, reason, title=f"perfgate {c.verdict.value}: {c.workload}"))
    return commands


@dataclass
class Published:
    """Where the report went; filled in as each piece is written."""

    markdown: Path | None = None
    pr: PullRequest | None = None
    changes: InputChanges | None = None


def _write_report(markdown: str, artifacts: Path, summary: Path | None, pr: PullRequest | None) -> Path:
    artifacts.mkdir(parents=True, exist_ok=True)
    report = artifacts / "report.md"
    report.write_text(markdown, encoding="utf-8")
    if pr is not None:
        comment = artifacts / "comment"
        comment.mkdir(exist_ok=True)
        (comment / "report.md").write_text(markdown, encoding="utf-8")
        (comment / "pr-number").write_text(f"{pr.number}\n", encoding="utf-8")
    if summary is not None:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown)
    return report


def _compose(outcome: GateOutcome, pr: PullRequest, changes: InputChanges, base_commit: str | None,
             clocks: str | None, environ: Mapping[str, str],
             traces: Mapping[str, TraceOutcome] | None = None, artifacts: Path | None = None) -> str:
    context = (f"Judged against the baselines and `[tool.perfgate]` of the base branch `{pr.base_ref}` "
               f"(`{pr.base_sha[:12]}`{'' if base_commit else ', base checkout not verified as a git commit'}); "
               f"pull request #{pr.number} at `{pr.head_sha[:12]}`.")
    if clocks:
        context += f" GPU clocks: {clocks}."
    run_id, repo = environ.get("GITHUB_RUN_ID"), environ.get("GITHUB_REPOSITORY")
    if run_id and repo:
        server = environ.get("GITHUB_SERVER_URL", "https://github.com")
        context += f" Results and traces: the artifacts of [run {run_id}]({server}/{repo}/actions/runs/{run_id})."
    extra = ["", CHECK_LINE[outcome.exit_code], "", *notice_markdown(changes, pr), f"<sub>{context}</sub>"]
    extra_text = "\n".join(extra)
    report = render_markdown(outcome, limit=GITHUB_COMMENT_LIMIT - len(extra_text) - 2, traces=traces,
                             relative_to=artifacts.resolve() if artifacts is not None else None)
    head, _, rest = report.partition("\n")
    title, _, rest = rest.partition("\n")
    if head != MARKER or not title.startswith("## "):
        return f"{MARKER}\n{extra_text}\n{report}"
    return f"{head}\n{title}\n{extra_text}\n{rest}"


def run_ci(args: argparse.Namespace, environ: Mapping[str, str] | None = None,
           out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The whole of ``perfgate ci``; returns the exit code and never raises."""
    environ = os.environ if environ is None else environ
    out = out or sys.stdout
    err = err or sys.stderr
    output = _path_variable(environ, "GITHUB_OUTPUT")
    summary = _path_variable(environ, "GITHUB_STEP_SUMMARY")
    artifacts = Path(args.artifacts)
    done = Published()
    try:
        if summary is None:
            raise UsageError("GITHUB_STEP_SUMMARY is not set: perfgate ci writes its report to the job summary "
                             "(outside GitHub, point it at a file)")
        if output is None:
            raise UsageError("GITHUB_OUTPUT is not set: perfgate ci writes the verdict to the step's outputs "
                             "(outside GitHub, point it at a file)")
        for name, path in (("GITHUB_STEP_SUMMARY", summary), ("GITHUB_OUTPUT", output)):
            if not path.parent.is_dir():
                raise UsageError(f"{name} {path}: its directory does not exist")
        event_name = environ.get("GITHUB_EVENT_NAME", "")
        if event_name != "pull_request":
            raise UsageError(f"GITHUB_EVENT_NAME is {event_name or 'not set'!r}: perfgate ci judges pull_request "
                             "events only (pull_request_target would hand the pull request's code a write token)")
        event_path = _path_variable(environ, "GITHUB_EVENT_PATH")
        if event_path is None:
            raise UsageError("GITHUB_EVENT_PATH is not set: perfgate ci reads the pull request from the event file")
        done.pr = pr = read_pull_request(event_path)
        base_dir = Path(args.base_dir)
        if not base_dir.is_dir():
            raise UsageError(f"--base-dir {base_dir}: not a directory (check out the base branch there)")
        if base_dir.resolve() == Path.cwd().resolve():
            raise UsageError("--base-dir is the pull request's own checkout; check out the base branch separately")
        base_commit = _base_commit(base_dir)
        if base_commit is not None and base_commit != pr.base_sha:
            raise UsageError(f"--base-dir {base_dir} is at {base_commit[:12]}, not the pull request's base "
                             f"{pr.base_sha[:12]}: the baselines must come from the base branch")
        settings_now = ci_settings(base_dir, {})
        done.changes = changes = input_changes(Path.cwd(), base_dir, settings_now)
        for command in notice_commands(changes):
            print(command, file=out)
        paired = None
        if args.design == "paired" and not args.results:
            paired = BaseTree(pr.base_sha, base_dir.resolve(), Path.cwd().resolve())
        outcome, _, traces = judge(args, lambda cli: ci_settings(base_dir, cli), paired)
        print(gate_table(outcome), end="", file=out)
        markdown = _compose(outcome, pr, changes, base_commit, _clock_outcome(artifacts), environ,
                            traces, artifacts)
        done.markdown = _write_report(markdown, artifacts, summary, pr)
        write_json_atomic(artifacts / "report.json", outcome_to_dict(outcome))
        for command in _annotations(outcome):
            print(command, file=out)
        code = outcome.exit_code
        set_output(output, {"verdict": VERDICT_WORD[code], "exit-code": str(code),
                            "markdown": str(done.markdown.resolve()),
                            "inputs-changed": "true" if changes.any else "false"})
        return code
    except Exception as exc:  # noqa: BLE001 - every failure must end as exit 2 with its outputs
        if isinstance(exc, PerfgateError):
            message = exc.message
            if args.verbose and exc.detail:
                print(exc.detail, file=err)
        else:
            message = f"internal error: {type(exc).__name__}: {exc}"
            traceback.print_exc(file=err)
        return _fail(message, args, output, summary, artifacts, done, out, err)


def _fail(message: str, args: argparse.Namespace, output: Path | None, summary: Path | None,
          artifacts: Path, done: Published, out: TextIO, err: TextIO) -> int:
    print(f"perfgate: error: {message}", file=err)
    print(workflow_command("error", message, title="perfgate error"), file=out)
    markdown = "\n".join([MARKER, "## perfgate: error", "", CHECK_LINE[EXIT_ERROR], "",
                          *(notice_markdown(done.changes, done.pr) if done.changes and done.pr else []),
                          f"💥 {message}", ""])
    values = {"verdict": "error", "exit-code": str(EXIT_ERROR)}
    try:
        if summary is not None and not summary.parent.is_dir():
            summary = None
        values["markdown"] = str(_write_report(markdown, artifacts, summary, done.pr).resolve())
    except OSError as exc:
        print(f"perfgate: error: could not write the report: {exc}", file=err)
    if output is not None:
        try:
            set_output(output, values)
        except OSError as exc:
            print(f"perfgate: error: could not write the step outputs: {exc}", file=err)
    return EXIT_ERROR


def cmd_ci(args: argparse.Namespace) -> int:
    return run_ci(args)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``perfgate ci`` to the ``perfgate`` command line."""
    from perfgate import cli  # the gate's run options, shared so the two cannot drift apart

    p = subparsers.add_parser(
        "ci", help="the pull-request gate as the GitHub workflow runs it (reads GITHUB_* variables)",
        description="Judge a pull request as .github/workflows/perfgate.yml does: settings, thresholds and "
                    "baselines from the base branch's checkout (--base-dir), the workloads from the current "
                    "directory (the pull request's checkout); report to $GITHUB_STEP_SUMMARY, the artifacts "
                    "directory and $GITHUB_OUTPUT (verdict, exit-code, markdown, inputs-changed).",
        epilog="exit codes: 0 pass, 1 regression, 2 error or bad input, 3 inconclusive",
    )
    cli._add_run_options(p, repeats_help="repeats per workload at the first look (default: the base's "
                                         "[tool.perfgate] repeats, else 5)")
    p.add_argument("--base-dir", required=True, metavar="DIR",
                   help="a checkout of the pull request's base commit: baselines and [tool.perfgate] come from here")
    p.add_argument("--design", choices=["paired", "stored"], default="paired",
                   help="paired (default): measure the base checkout in this job, alternating with the pull "
                        "request in ABBA blocks; stored: compare with the base branch's stored baselines only")
    cli.add_paired_options(p)
    p.add_argument("--trace-on-fail", action="store_true",
                   help="after a REGRESSION, take a profiler trace of that workload into <artifacts>/traces")
    p.add_argument("--artifacts", default="perfgate-artifacts", metavar="DIR",
                   help="where report.md, report.json and comment/ go (default: perfgate-artifacts)")
    p.add_argument("--results", metavar="DIR",
                   help="judge the result files in DIR instead of measuring (one look, full alpha)")
    p.add_argument("--workloads-path", action="append", default=[], metavar="PATH",
                   help="extra workload file or directory (repeatable); ./workloads/ is always searched")
    p.add_argument("-v", "--verbose", action="store_true", help="show worker output on errors")
    p.set_defaults(func=cmd_ci)
    return p
