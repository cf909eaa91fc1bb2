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

On GitHub the pull request's job runs ``perfgate ci --measure-only``: it measures and
writes the result files and the manifest ``run.json`` and nothing else, because a job
that runs the pull request's code cannot be trusted with its verdict. The verdict, the
comment and the commit status come from ``perfgate judge`` (``perfgate.adapters.judge_cli``, judging in
``perfgate.gate.judge``) in a
separate job that runs none of it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from perfgate.adapters import options, selection
from perfgate.adapters.script_cli import add_script_options
from perfgate.adapters.publish import publish
from perfgate.analysis.decide import Look
from perfgate.analysis.outcome import GateOutcome
from perfgate.gate.comment import CHECK_LINE, VERDICT_WORD, ReportContext, compose, error_report, run_link
from perfgate.report.markdown import MARKER
from perfgate.gate.config import Settings
from perfgate.gate.frontend import (
    Interruption,
    interruptible,
    interrupted_lines,
    judge_on_disk,
    select_results,
    trace_regressions,
)
from perfgate.gate.gating import GateRun
from perfgate.gate.github import path_variable as _path_variable
from perfgate.gate.github import set_output, workflow_annotations, workflow_command
from perfgate.gate.inputs import (
    GITHUB,
    HARNESS,
    PYPROJECT,
    WORKLOADS,
    InputChanges,
    classify,
    perfgate_table,
    relative_to,
    settings_changes,
    tree_changes,
)
from perfgate.gate.judge import base_settings, git_commit_of
from perfgate.gate.worktree import BaseTree, SiblingTrees, repository_root, resolve_commit, sibling_worktrees
from perfgate.model.errors import EXIT_ERROR, EXIT_OK, PerfgateError, UsageError
from perfgate.model.manifest import MANIFEST_NAME, RunManifest
from perfgate.model.shard import second_look_alpha
from perfgate.report.terminal import gate_table
from perfgate.store.benchmark_json import load_results_dir
from perfgate.store.counters import load_counters_beside
from perfgate.store.jsonfile import write_json_atomic
from perfgate.store.traces import TraceOutcome
from perfgate.text.inert import inline, terminal

__all__ = ["add_parser", "read_pull_request", "run_ci", "workflow_command", "set_output", "CHECK_LINE"]


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
        if not isinstance(value, dict):
            value = {}
        sha = value.get("sha")
        if not isinstance(sha, str) or not sha:
            raise UsageError(f"{where}: pull_request.{name}.sha is missing")
        ref = value.get("ref")
        return (ref if isinstance(ref, str) else "?"), sha, value.get("repo")

    base_ref, base_sha, _ = side("base")
    head_ref, head_sha, head_repo = side("head")
    repo_name = head_repo.get("full_name") if isinstance(head_repo, dict) else None
    return PullRequest(number, base_ref, base_sha, head_ref, head_sha,
                       repo_name if isinstance(repo_name, str) else None)


def ci_settings(base_dir: Path, cli: Mapping[str, Any]) -> Settings:
    """Settings, thresholds and the baseline store from the base checkout (see
    :func:`perfgate.gate.judge.base_settings`)."""
    return base_settings(base_dir, cli)


def input_changes(head_dir: Path, base_dir: Path, settings: Settings) -> InputChanges:
    """What the pull request's checkout changes in the gate's inputs against the base
    checkout: the baseline store, ``[tool.perfgate]``, the workload definitions, the
    harness and its pins, and ``.github/``, compared file by file."""
    store = relative_to(settings.baselines, base_dir) or "baselines"
    head_table = perfgate_table(head_dir / PYPROJECT)
    base_table, _ = perfgate_table(base_dir / PYPROJECT)
    watched = [*HARNESS, *WORKLOADS, *GITHUB, store,
               *(p for p in settings.workloads_path if not Path(p).is_absolute())]
    changes = tree_changes(head_dir, base_dir, watched)
    return classify(changes, baselines_dir=store,
                    workload_paths=[p for p in settings.workloads_path if not Path(p).is_absolute()],
                    settings=settings_changes(head_table, base_table, True))


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
    if changes.harness:
        commands.append(workflow_command(
            "warning", f"this pull request changes the harness or its pins ({', '.join(changes.harness[:20])}); "
                       "the gate runs the base commit's", title="perfgate: harness edited"))
    if changes.github:
        commands.append(workflow_command(
            "warning", f"this pull request changes {', '.join(changes.github[:20])}",
            title="perfgate: workflows edited"))
    return commands


# --- judging ------------------------------------------------------------------------------

KILLED = ("the measuring job ended before it finished (killed, or its runner lost): what it left is not a "
          "measurement to judge")
"""The provisional run.json's failure, written before measuring and replaced when the job ends."""

MEASURING_OPTIONS = (("repeats", "--repeats"), ("steps", "--steps"), ("warmup", "--warmup"),
                     ("set", "--set"), ("data_root", "--data-root"), ("shard", "--shard"),
                     ("max_blocks", "--max-blocks"), ("budget", "--budget"))


@dataclass(frozen=True)
class Judged:
    outcome: GateOutcome
    settings: Settings
    traces: Mapping[str, TraceOutcome]
    run: GateRun | None = None
    """The gate's run (None when result files on disk were judged)."""
    names: tuple[str, ...] = ()
    base_only: tuple[str, ...] = ()
    """Paired: workloads the base tree defines that the pull request's does not."""
    shard: str | None = None
    """``I/N`` when this job measured one share of a sharded run."""


def judge(args: argparse.Namespace,
          settings_for: Callable[[Mapping[str, Any]], Settings],
          base: PairedSides | None = None) -> Judged:
    """Measure (or load) the pull request's results and judge them: paired against the base
    ``base`` (ABBA blocks in this job, both sides checked out as sibling trees once the
    workloads are selected), or against the base's stored baselines.

    With ``--trace-on-fail``, each regressed workload also gets a profiler trace (a separate
    run that never feeds the verdict) in ``<artifacts>/traces``.
    """
    if args.results:
        given = [flag for name, flag in MEASURING_OPTIONS if getattr(args, name)]
        if given:
            raise UsageError("--results judges result files on disk; "
                             f"it takes no measuring option ({', '.join(given)})")
        if args.measure_only:
            raise UsageError("--results judges result files on disk; --measure-only measures: choose one")
        settings = settings_for({})
        results = {r.workload: r for r in load_results_dir(Path(args.results))}
        names = select_results(results, list(args.workloads) or list(settings.workloads), args.results, "judge")
        outcome = judge_on_disk(results, names, settings, load_counters_beside(Path(args.results), names))
        return Judged(outcome, settings, {}, names=tuple(names))
    values = options.values_of(args)
    settings = settings_for(options.settings_cli(values))  # the base's settings, the options given on top
    options.require_gate_repeats(settings, values)
    share = selection.shard_of(args)
    device, selected = selection.jobs_of(args, settings, prefer_project=True, shard=False)
    jobs = selection.share_of(selected, share, quiet=args.quiet)
    # The base tree's workloads the pull request lacks: against the whole selection, not the share.
    base_only = _base_only(base.checkout, args, settings, selected) if base is not None else ()
    if share is not None and not jobs:
        # Nothing measured; the manifest still names the device, as the other shards' do.
        look = Look.single(settings.blocks, "block") if base is not None else Look.single(settings.repeats, "repeat")
        return Judged(GateOutcome((), settings.gate, look), dataclasses.replace(settings, device=device), {},
                      names=(), base_only=base_only, shard=str(share))
    if share is not None and args.measure_only:
        settings = _shard_settings(settings, [j.workload.name for j in jobs], [j.workload.name for j in selected])
    if base is not None:
        with base.trees() as trees:
            gate = options.paired_gate_in(trees, args, settings, device, jobs)
    else:
        gate = options.stored_gate(args, settings, device, jobs)
    traces: dict[str, TraceOutcome] = {}
    if args.trace_on_fail and not gate.interrupted:
        traces = trace_regressions(gate.outcome, jobs, device, cache_dir=options.cache_dir_of(args),
                                   trace_dir=Path(args.artifacts) / "traces", timeout_s=args.timeout)
    return Judged(gate.outcome, settings, traces, gate, tuple(j.workload.name for j in jobs), base_only,
                  shard=str(share) if share is not None else None)


def _shard_settings(settings: Settings, share: Sequence[str], selected: Sequence[str]) -> Settings:
    """A shard's measuring job decides where to stop each workload for the combined judge, which
    runs Holm over every shard's workloads: at the α of :func:`perfgate.model.shard.second_look_alpha`,
    so that a workload the shard stops as decided the judge decides at the same look or earlier,
    and each look the judge takes was measured. (Its own table is not the verdict.)"""
    if len(share) == len(selected):
        return settings

    def family(names: Sequence[str]) -> int:  # each workload and its gated phases
        return sum(1 + len(settings.for_workload(name).gate_phases) for name in names)

    alpha = second_look_alpha(settings.gate.alpha, family(share), family(selected))
    print(f"perfgate: this shard plans its looks at alpha {alpha:.3g}, as if the other shards' "
          f"{len(selected) - len(share)} workload(s) had p = 1 in the combined judge's Holm family",
          file=sys.stderr)
    return dataclasses.replace(settings, gate=dataclasses.replace(settings.gate, alpha=alpha))


def _base_only(tree: BaseTree, args: argparse.Namespace, settings: Settings, jobs: list[Any]) -> tuple[str, ...]:
    """The workloads the base tree defines (within the selection, if there is one) that the
    pull request's tree does not: removed or renamed, so the judge can name them."""
    from perfgate.store.discovery import discover

    paths = [tree.mirror(Path(p)) for p in (*settings.workloads_path, *args.workloads_path)]
    try:
        registry = discover([p for p in paths if p.exists()], project_dir=tree.mirror(Path.cwd()),
                            prefer_project=True)
    except PerfgateError:
        return ()  # the base's own workloads fail to load: the base side of each job says so
    head = {job.workload.name for job in jobs}
    wanted = set(settings.workloads) if settings.workloads else None
    return tuple(sorted(n for n in registry.workloads if n not in head and (wanted is None or n in wanted)))


@dataclass(frozen=True)
class PairedSides:
    """The paired design's base: the base checkout at ``--base-dir`` (``checkout``, mirroring
    the workspace; read for the workloads only the base defines) and the commit it holds
    (``base_commit``; None when it is no git checkout)."""

    checkout: BaseTree
    base_commit: str | None

    @contextlib.contextmanager
    def trees(self) -> Iterator[SiblingTrees]:
        """Both sides checked out as sibling worktrees of one shape in a temporary directory,
        as ``perfgate gate --against`` runs them, never from the workspace and ``--base-dir``
        themselves (the base checkout lies inside the head's workspace, at another depth):
        ``head/`` the workspace's HEAD commit, ``base/`` the commit ``--base-dir`` holds (out
        of its own repository), or, when ``--base-dir`` is no git checkout, the pull request's
        base commit out of the workspace's repository. Removed afterwards."""
        needed = "the paired design needs it to check out both sides"
        try:
            repo = repository_root(Path.cwd(), who="perfgate ci --design paired", needed=needed)
        except UsageError:
            repo = None
        if repo is None:
            # a workspace that is no git checkout (its files copied in place): both sides run
            # where they lie, the head from the workspace and the base from --base-dir
            here = Path.cwd().resolve()
            yield SiblingTrees(BaseTree(self.checkout.commit, here, here), self.checkout)
            return
        head = resolve_commit(repo, "HEAD", role="the pull request's checkout", needed=needed)
        if self.base_commit is not None:
            source, base = self.checkout.root, self.base_commit
        else:
            source, base = repo, resolve_commit(repo, self.checkout.commit, role="the pull request's base",
                                                needed=needed)
        with sibling_worktrees(repo, head, base, base_source=source) as trees:
            yield trees


def _clock_outcome(artifacts: Path) -> str | None:
    record = artifacts / "gpu-clocks.txt"
    try:
        first = record.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    return first.removeprefix("outcome: ").strip() or None


@dataclass
class Published:
    """Where the report went; filled in as each piece is written."""

    markdown: Path | None = None
    pr: PullRequest | None = None
    changes: InputChanges | None = None
    context: ReportContext | None = None


def _write_report(markdown: str, artifacts: Path, summary: Path | None, outcome: GateOutcome | None = None) -> Path:
    """report.md and comment.md (the same text: the comment as `perfgate judge` writes it)
    and, with the outcome, report.json in the artifacts directory, each written atomically;
    then the job summary. A report not written is a :class:`PublishError` (exit 2)."""
    report = artifacts / "report.md"
    publish(outcome, {"markdown": (report, artifacts / "comment.md"),
                      "json": artifacts / "report.json" if outcome is not None else None},
            markdown_text=markdown).check()
    if summary is not None:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown)
    return report


def _context(pr: PullRequest, base_commit: str | None, clocks: str | None,
             environ: Mapping[str, str]) -> ReportContext:
    run_id, run_url = run_link(environ)
    return ReportContext(base_ref=pr.base_ref, base_sha=pr.base_sha, pr_number=pr.number, head_sha=pr.head_sha,
                         base_verified=base_commit is not None, clocks=clocks, run_id=run_id, run_url=run_url)


def manifest_for(judged: Judged, pr: PullRequest, design: str, clocks: str | None,
                 interrupted: str | None = None) -> RunManifest:
    """What ``--measure-only`` writes beside the result files for the judge; ``interrupted``:
    the signal that ended the measuring early (the judge refuses such results)."""
    run = judged.run
    device = next((c.device for c in judged.outcome.comparisons if c.device), None) or judged.settings.device
    return RunManifest(
        design=design, device=device if device != "auto" else "cpu", workloads=judged.names,
        pr_number=pr.number, head_sha=pr.head_sha, head_ref=pr.head_ref, head_repo=pr.head_repo,
        base_sha=pr.base_sha, base_ref=pr.base_ref,
        errors=dict(run.errors) if run else {}, base_errors=dict(run.base_errors) if run else {},
        base_missing=run.base_missing if run else (), base_only=judged.base_only,
        notes=dict(run.notes) if run else {}, clocks=clocks, shard=judged.shard, interrupted=interrupted,
        windows_evidence=run.designed if run else None,
    )


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
    with interruptible() as interruption:
        try:
            return _run_ci(args, environ, out, err, done)
        except KeyboardInterrupt:  # outside the gate's looks (its set-up, a trace, the reports): no partial report
            return _interrupted(interruption, None, args, output, summary, artifacts, done, out, err)


def _run_ci(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO, err: TextIO, done: Published) -> int:
    output = _path_variable(environ, "GITHUB_OUTPUT")
    summary = _path_variable(environ, "GITHUB_STEP_SUMMARY")
    artifacts = Path(args.artifacts)
    try:
        if not args.measure_only:
            if summary is None:
                raise UsageError("GITHUB_STEP_SUMMARY is not set: perfgate ci writes its report to the job summary "
                                 "(outside GitHub, point it at a file)")
            if output is None:
                raise UsageError("GITHUB_OUTPUT is not set: perfgate ci writes the verdict to the step's outputs "
                                 "(outside GitHub, point it at a file)")
        for name, path in (("GITHUB_STEP_SUMMARY", summary), ("GITHUB_OUTPUT", output)):
            if path is not None and not path.parent.is_dir():
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
        base_commit = git_commit_of(base_dir)
        if base_commit is not None and base_commit != pr.base_sha:
            raise UsageError(f"--base-dir {base_dir} is at {base_commit[:12]}, not the pull request's base "
                             f"{pr.base_sha[:12]}: the baselines must come from the base branch")
        clocks = _clock_outcome(artifacts)
        done.context = context = _context(pr, base_commit, clocks, environ)
        settings_now = ci_settings(base_dir, {})
        done.changes = changes = input_changes(Path.cwd(), base_dir, settings_now)
        if not args.measure_only:
            for command in notice_commands(changes):
                print(command, file=out)
        paired = None
        if args.design == "paired" and not args.results:
            paired = PairedSides(BaseTree(pr.base_sha, base_dir.resolve(), Path.cwd().resolve()), base_commit)
        if args.measure_only:
            # Replaced by the real manifest when the job ends, by any path it can take; left
            # only when it was killed outright (SIGKILL, the runner lost): then the judge
            # refuses the folder instead of judging what a killed job left half-measured.
            write_json_atomic(Path(args.out) / MANIFEST_NAME, RunManifest(
                design=args.design, device="cpu", workloads=(), failure=KILLED, pr_number=pr.number,
                head_sha=pr.head_sha, base_sha=pr.base_sha, head_ref=pr.head_ref, head_repo=pr.head_repo,
                base_ref=pr.base_ref).to_dict())
        with interruptible() as interruption:
            judged = judge(args, lambda cli: ci_settings(base_dir, cli), paired)
        if judged.run is not None and judged.run.interrupted:
            return _interrupted(interruption, judged, args, output, summary, artifacts, done, out, err)
        outcome = judged.outcome
        print(gate_table(outcome), end="", file=out)
        if args.measure_only:
            manifest = manifest_for(judged, pr, args.design, clocks)
            write_json_atomic(Path(args.out) / MANIFEST_NAME, manifest.to_dict())
            print(f"perfgate: measured {len(judged.names)} workload(s) into {args.out}; the verdict is the "
                  "judge's (perfgate judge), not this job's", file=err)
            if output is not None:
                set_output(output, {"measured": "true", "exit-code": str(EXIT_OK)})
            return EXIT_OK
        markdown = compose(outcome, context, changes, traces=judged.traces, artifacts=artifacts)
        done.markdown = _write_report(markdown, artifacts, summary, outcome)
        for command in workflow_annotations(outcome):
            print(command, file=out)
        code = outcome.exit_code
        assert output is not None
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


def _interrupted(interruption: Interruption, judged: Judged | None, args: argparse.Namespace, output: Path | None,
                 summary: Path | None, artifacts: Path, done: Published, out: TextIO, err: TextIO) -> int:
    """An interrupted gate (Ctrl-C, the SIGTERM of a cancelled job) is never a verdict: its
    partial report under an INTERRUPTED headline, an error annotation, and the signal's exit
    code (130, 143). ``--measure-only``: run.json records ``interrupted`` (what was measured
    too, when the gate had begun), which the judge refuses; otherwise the report files say
    it and the step outputs are ``verdict=interrupted``."""
    code, name = interruption.exit_code, interruption.name
    if judged is not None and judged.run is not None:
        lines = interrupted_lines(judged.run, interruption)
    else:
        lines = [f"perfgate: INTERRUPTED by {name}: no verdict (exit code {code})",
                 "The gate was interrupted before it ran its course: run it again to its end for a verdict."]
    print("\n".join(lines), file=out)
    print(workflow_command("error", f"the gate was interrupted by {name} before it ran its course: no verdict",
                           title="perfgate interrupted"), file=out)
    try:
        if args.measure_only:
            pr = done.pr
            if judged is not None and pr is not None:
                manifest = manifest_for(judged, pr, args.design, done.context.clocks if done.context else None,
                                        interrupted=name)
            else:
                manifest = RunManifest(
                    design=args.design, device="cpu", workloads=(), interrupted=name,
                    failure=f"interrupted by {name} before the gate ran its course",
                    pr_number=pr.number if pr else None, head_sha=pr.head_sha if pr else None,
                    base_sha=pr.base_sha if pr else None, head_ref=pr.head_ref if pr else None,
                    head_repo=pr.head_repo if pr else None, base_ref=pr.base_ref if pr else None)
            write_json_atomic(Path(args.out) / MANIFEST_NAME, manifest.to_dict())
            print(f"perfgate: interrupted by {name}: {Path(args.out) / MANIFEST_NAME} records it, and the judge "
                  "refuses an interrupted run", file=err)
            if output is not None:
                set_output(output, {"measured": "false", "interrupted": name, "exit-code": str(code)})
            return code
        notice = []
        if done.changes is not None and done.context is not None:
            from perfgate.gate.inputs import notice_markdown

            notice = notice_markdown(done.changes, done.context.base_ref, done.context.base_sha)
        markdown = "\n".join([
            MARKER, "## perfgate: interrupted", "",
            f"**Check: fails** (exit code {code}): the gate was interrupted by {name} before it ran its course; "
            "what it measured is not a verdict. Run it again to its end.", "", *notice,
            *(f"- {inline(line)}" for line in lines[2:] if line), ""])
        values = {"verdict": "interrupted", "exit-code": str(code)}
        values["markdown"] = str(_write_report(markdown, artifacts, summary).resolve())
        if output is not None:
            set_output(output, values)
    except OSError as exc:  # PublishError is one: the exit code still says interrupted
        print(f"perfgate: error: could not write what the interruption leaves: {exc}", file=err)
    return code


def _fail(message: str, args: argparse.Namespace, output: Path | None, summary: Path | None,
          artifacts: Path, done: Published, out: TextIO, err: TextIO) -> int:
    print(f"perfgate: error: {terminal(message)}", file=err)
    print(workflow_command("error", message, title="perfgate error"), file=out)
    if args.measure_only:
        try:
            pr = done.pr
            manifest = RunManifest(design=args.design, device="cpu", workloads=(), failure=message[:4000],
                                   pr_number=pr.number if pr else None,
                                   head_sha=pr.head_sha if pr else None, base_sha=pr.base_sha if pr else None,
                                   head_ref=pr.head_ref if pr else None, head_repo=pr.head_repo if pr else None,
                                   base_ref=pr.base_ref if pr else None)
            write_json_atomic(Path(args.out) / MANIFEST_NAME, manifest.to_dict())
        except (OSError, ValueError) as exc:
            print(f"perfgate: error: could not write the run manifest: {exc}", file=err)
    markdown = error_report(message, done.changes, done.context)
    values = {"verdict": "error", "exit-code": str(EXIT_ERROR)}
    try:
        if summary is not None and not summary.parent.is_dir():
            summary = None
        values["markdown"] = str(_write_report(markdown, artifacts, summary).resolve())
    except OSError as exc:  # PublishError is one
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
    p = subparsers.add_parser(
        "ci", help="the pull-request gate as the GitHub workflow runs it (reads GITHUB_* variables)",
        description="Judge a pull request as .github/workflows/perfgate.yml does: settings, thresholds and "
                    "baselines from the base branch's checkout (--base-dir), the workloads from the current "
                    "directory (the pull request's checkout); report to $GITHUB_STEP_SUMMARY, the artifacts "
                    "directory and $GITHUB_OUTPUT (verdict, exit-code, markdown, inputs-changed).",
        epilog="exit codes: 0 pass, 1 regression, 2 error or bad input, 3 inconclusive",
    )
    options.add_run_options(p, repeats_help="repeats per workload at the first look (default: the base's "
                                         "[tool.perfgate] repeats, else 5)")
    p.add_argument("--base-dir", required=True, metavar="DIR",
                   help="a checkout of the pull request's base commit: baselines and [tool.perfgate] come from here")
    p.add_argument("--design", choices=["paired", "stored"], default="paired",
                   help="paired (default): measure the base checkout in this job, alternating with the pull "
                        "request in ABBA blocks; stored: compare with the base branch's stored baselines only")
    options.add_paired_options(p)
    p.add_argument("--trace-on-fail", action="store_true",
                   help="after a REGRESSION, take a profiler trace of that workload into <artifacts>/traces")
    p.add_argument("--artifacts", default="perfgate-artifacts", metavar="DIR",
                   help="where report.md, comment.md and report.json go (default: perfgate-artifacts)")
    p.add_argument("--results", metavar="DIR",
                   help="judge the result files in DIR instead of measuring (one look, full alpha)")
    options.add_selection_options(p, ("workloads_path",))
    p.add_argument("--measure-only", action="store_true",
                   help="measure and write the result files and run.json to --out, and nothing else: the verdict "
                        "comes from `perfgate judge` in a job that ran none of the pull request's code")
    p.add_argument("-v", "--verbose", action="store_true", help="show worker output on errors")
    add_script_options(p)  # --script PATH [-- ARGS]: the pull request's script against the base checkout's copy
    p.set_defaults(func=cmd_ci)
    return p
