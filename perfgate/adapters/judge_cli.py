"""``perfgate judge`` and ``perfgate validate-baselines``: the commands of the trusted judge job.

``perfgate judge`` reads what the measuring job left (the head's result files, the base
side's in ``base/``, and the manifest ``run.json``; one folder per shard of a sharded
run, combined into one) as untrusted input
(``perfgate.store.untrusted_folders``), judges it by the base commit's rules
(``perfgate.gate.judge``), and writes the report (``report.md``, ``report.json``) and the
comment (``comment.md``, every run-derived string made inert; ``perfgate.gate.comment``),
appends to the job summary, writes the step's outputs (``verdict``, ``exit-code``, ``state``
and ``description`` for a commit status, ``conclusion`` for a check run) and, with
``--check-run FILE``, the check run's payload for ``gh api .../check-runs --input FILE``.
What each verdict and exit code shows (the status state, the check run's conclusion; an
INCONCLUSIVE gate neutral or failing by ``[tool.perfgate] inconclusive``) is the policy of
``perfgate.model.verdict``; the exit code stays the gate's.

``perfgate validate-baselines`` checks a baseline folder downloaded from an untrusted job
before it is copied into the store.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from perfgate.adapters.publish import publish
from perfgate.analysis.outcome import GateOutcome
from perfgate.gate.comment import (
    ReportContext,
    compose,
    consequence,
    error_report,
    run_link,
    status_description,
)
from perfgate.gate.config import Settings
from perfgate.gate.github import (
    CHECK_RUN_TEXT_LIMIT,
    check_run_payload,
    fit,
    head_verdict,
    is_code_owner,
    path_variable,
    read_acknowledgement,
    read_measuring_job,
    read_recorded_verdicts,
    set_output,
    tagged,
    workflow_annotations,
    workflow_command,
)
from perfgate.gate.inputs import (
    HEAD_PYPROJECT_BYTES,
    PYPROJECT,
    InputChanges,
    classify,
    perfgate_table,
    perfgate_table_of,
    read_changed_files,
    relative_to,
    settings_changes,
)
from perfgate.gate.judge import TreeDefinitions, base_settings, git_commit_of, judge_measured
from perfgate.gate.shards import combine_shards
from perfgate.model.errors import EXIT_ERROR, EXIT_OK, PerfgateError, UsageError
from perfgate.model.manifest import DESIGNS, MANIFEST_NAME
from perfgate.model.verdict import RUN_POLICY
from perfgate.model.version import __version__
from perfgate.store.jsonfile import write_json_atomic
from perfgate.store.untrusted_folders import load_measured, validate_baselines
from perfgate.text.inert import terminal

# --- perfgate judge -----------------------------------------------------------------------------

def _changes(args: argparse.Namespace, base_dir: Path, settings: Settings) -> InputChanges | None:
    if not args.changed_files:
        return None
    changed = read_changed_files(Path(args.changed_files))
    base_table, _ = perfgate_table(base_dir / PYPROJECT)
    head: tuple[dict[str, Any], str | None] | None = None
    if args.head_pyproject:
        path = Path(args.head_pyproject)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"--head-pyproject {path}: cannot be read ({exc.strerror})") from None
        if len(data) > HEAD_PYPROJECT_BYTES:
            head = ({}, f"larger than {HEAD_PYPROJECT_BYTES} bytes; not read")
        else:
            try:
                head = perfgate_table_of(data.decode("utf-8"))
            except UnicodeDecodeError:
                head = ({}, "not UTF-8 text")
    store = relative_to(settings.baselines, base_dir) or "baselines"
    return classify(changed, baselines_dir=store,
                    workload_paths=[p for p in settings.workloads_path if not Path(p).is_absolute()],
                    settings=settings_changes(head, base_table, any(p == PYPROJECT for _, p in changed)))


def _folders(given: Sequence[str]) -> list[str]:
    """The results folders, one per shard; the same folder twice is a UsageError."""
    seen: dict[Path, str] = {}
    for folder in given:
        key = Path(folder).resolve()
        if key in seen:
            raise UsageError(f"{folder}: given twice (as {seen[key]}); give each shard's folder once")
        seen[key] = folder
    return list(given)


def _write(artifacts: Path, report: str, outcome: GateOutcome | None) -> None:
    """report.md and comment.md (the composed ``report``) and, with the outcome, report.json,
    each written atomically (:func:`perfgate.adapters.publish.publish`); a report not written
    is a :class:`~perfgate.adapters.publish.PublishError` (an OSError, exit 2)."""
    publish(outcome, {"markdown": (artifacts / "report.md", artifacts / "comment.md"),
                      "json": artifacts / "report.json" if outcome is not None else None},
            markdown_text=report).check()


def _head_sha(given: str | None) -> str | None:
    """A full commit sha (40 lower-case hex digits), or None."""
    return given if given is not None and len(given) == 40 and all(c in "0123456789abcdef" for c in given) else None


def _write_check_run(path: Path, *, head_sha: str, conclusion: str, title: str, summary: str,
                     details_url: str | None) -> None:
    """The check run's payload, for ``gh api --method POST repos/OWNER/REPO/check-runs --input FILE``."""
    write_json_atomic(path, check_run_payload(head_sha=head_sha, conclusion=conclusion, title=title,
                                              summary=summary, details_url=details_url))


def run_judge(args: argparse.Namespace, environ: Mapping[str, str] | None = None,
              out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The whole of ``perfgate judge``; returns the exit code and never raises."""
    environ = os.environ if environ is None else environ
    out, err = out or sys.stdout, err or sys.stderr
    summary, output = path_variable(environ, "GITHUB_STEP_SUMMARY"), path_variable(environ, "GITHUB_OUTPUT")
    artifacts = Path(args.artifacts)
    changes: InputChanges | None = None
    context: ReportContext | None = None
    check_run = Path(args.check_run) if args.check_run else None
    head_sha = _head_sha(args.expect_head_sha)
    run_url: str | None = None
    if check_run is not None:
        try:
            check_run.unlink(missing_ok=True)  # an earlier run's payload is never posted for this one
        except OSError:
            pass
    try:
        base_dir = Path(args.base_dir)
        if not base_dir.is_dir():
            raise UsageError(f"--base-dir {base_dir}: not a directory (check out the base commit there)")
        settings = base_settings(base_dir)
        changes = _changes(args, base_dir, settings)
        measured = combine_shards([(folder, load_measured(Path(folder))) for folder in _folders(args.results)])
        manifest = measured.manifest
        if manifest is None and (args.expect_head_sha or args.expect_pr):
            raise UsageError(f"{', '.join(args.results)}: no {MANIFEST_NAME}, so the pull request and commit "
                             "cannot be checked")
        if manifest is not None:
            if args.expect_head_sha and manifest.head_sha != args.expect_head_sha:
                raise UsageError(f"the results are of commit {str(manifest.head_sha)[:12]}, not the expected "
                                 f"{args.expect_head_sha[:12]}")
            if args.expect_pr is not None and manifest.pr_number != args.expect_pr:
                raise UsageError(f"the results are of pull request #{manifest.pr_number}, not #{args.expect_pr}")
        base_commit = git_commit_of(base_dir)
        measured_base = manifest.base_sha if manifest else None
        if args.expect_base_sha and (measured_base != args.expect_base_sha or
                                     (base_commit is not None and base_commit != args.expect_base_sha)):
            raise UsageError(f"the results were measured against {str(measured_base)[:12]}, not the pull request's "
                             f"base {args.expect_base_sha[:12]}: an older base commit would apply older rules")
        if base_commit and measured_base and base_commit != measured_base:
            raise UsageError(f"the results were measured against {measured_base[:12]}, but --base-dir is at "
                             f"{base_commit[:12]}: judge with the base commit that was measured")
        against = base_commit or measured_base
        if head_sha is None and manifest is not None and not args.expect_head_sha:
            head_sha = _head_sha(manifest.head_sha)
        if check_run is not None and head_sha is None:
            raise UsageError("--check-run: the check run needs the head commit's full sha: give --expect-head-sha SHA "
                             "(40 hex digits), or results whose run.json names it")
        run_id, run_url = run_link(environ)
        context = ReportContext(
            base_ref=(manifest.base_ref if manifest and manifest.base_ref else "base"),
            base_sha=against or "unknown", pr_number=manifest.pr_number if manifest else None,
            head_sha=manifest.head_sha if manifest else None, base_verified=base_commit is not None,
            clocks=manifest.clocks if manifest else None, run_id=run_id, run_url=run_url,
            judged_by=f"Judged by perfgate {__version__}, outside the measuring job" + (
                f"s, their {len(args.results)} shards as one run." if len(args.results) > 1 else "."))
        recorded = read_recorded_verdicts(Path(args.previous_verdicts)) if args.previous_verdicts else []
        acknowledgement = read_acknowledgement(Path(args.acknowledgement)) if args.acknowledgement else None
        if (recorded or acknowledgement) and head_sha is None:
            raise UsageError("--previous-verdicts, --acknowledgement: they are the head commit's; give "
                             "--expect-head-sha SHA (40 hex digits)")
        job = read_measuring_job(Path(args.measuring_job)) if args.measuring_job else None
        pr_number = manifest.pr_number if manifest is not None and manifest.pr_number is not None else args.expect_pr
        code_owner = acknowledgement is not None and args.changed_files is not None and is_code_owner(
            base_dir, acknowledgement.by, [path for _, path in read_changed_files(Path(args.changed_files))])
        head_files = Path(args.head_files) if args.head_files else None
        if head_files is not None and not head_files.is_dir():
            raise UsageError(f"--head-files {head_files}: not a directory")
        definitions = TreeDefinitions.of(base_dir, settings, changes, head_files)
        judgement = judge_measured(measured, settings, design=args.design, against=against, changes=changes,
                                   definitions=definitions, job=job)
        outcome = judgement.outcome
        code_ = outcome.exit_code
        shown = consequence(outcome)  # the exit code under [tool.perfgate] inconclusive: status, check run
        history = head_verdict(code_, head_sha or "", recorded, acknowledgement, pr=pr_number, base_sha=against,
                               accept_by=settings.accept_by, code_owner=code_owner)
        policy = None
        if history.exit_code != code_:  # the head commit's recorded REGRESSION stands, or was accepted
            code_ = history.exit_code
            shown = policy = RUN_POLICY[code_]
        plain = history.description or status_description(outcome)
        headline = f"perfgate: {plain}" if history.description else outcome.headline
        description = tagged(plain, pr_number, against)  # which pull request and base the verdict is for
        report = compose(outcome, context, changes, retired=judgement.retired, policy=policy, note=history.note)
        _write(artifacts, report, outcome)
        if summary is not None:
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(report)
        if check_run is not None:
            assert head_sha is not None
            judged = context
            text = fit(lambda n: report if len(report) <= n else
                       compose(outcome, judged, changes, retired=judgement.retired, limit=n, policy=policy,
                               note=history.note), CHECK_RUN_TEXT_LIMIT)
            _write_check_run(check_run, head_sha=head_sha, conclusion=shown.conclusion, title=headline,
                             summary=text, details_url=run_url)
        print(terminal(headline), file=out)
        for command in workflow_annotations(outcome):
            print(command, file=out)
        if history.note:
            print(workflow_command("error" if shown.fails else "notice", history.note, title="perfgate head commit"),
                  file=out)
        if output is not None:
            set_output(output, {"verdict": shown.word, "exit-code": str(code_), "state": shown.state,
                                "conclusion": shown.conclusion, "description": description,
                                "inputs-changed": "true" if changes is not None and changes.any else "false"})
        return code_
    except Exception as exc:  # noqa: BLE001 - every failure ends as exit 2 with its report and outputs
        if isinstance(exc, PerfgateError):
            message = exc.message
        else:
            message = f"internal error: {type(exc).__name__}: {exc}"
            traceback.print_exc(file=err)
        print(f"perfgate: error: {terminal(message)}", file=err)
        report = error_report(message, changes, context)
        error = RUN_POLICY[EXIT_ERROR]
        try:
            _write(artifacts, report, None)
            if summary is not None:
                with open(summary, "a", encoding="utf-8") as handle:
                    handle.write(report)
        except OSError as write_error:
            print(f"perfgate: error: could not write the report: {write_error}", file=err)
        if check_run is not None and head_sha is not None:
            try:
                _write_check_run(check_run, head_sha=head_sha, conclusion=error.conclusion,
                                 title=f"perfgate: {error.headline}", summary=report, details_url=run_url)
            except (OSError, ValueError) as write_error:
                print(f"perfgate: error: could not write the check run: {write_error}", file=err)
        elif check_run is not None:
            print("perfgate: error: no check run written: the head commit is not known (--expect-head-sha)", file=err)
        if output is not None:
            try:
                set_output(output, {"verdict": error.word, "exit-code": str(EXIT_ERROR), "state": error.state,
                                    "conclusion": error.conclusion,
                                    "description": "perfgate could not judge this pull request (see the run)"})
            except OSError as write_error:
                print(f"perfgate: error: could not write the step outputs: {write_error}", file=err)
        return EXIT_ERROR


def cmd_judge(args: argparse.Namespace) -> int:
    return run_judge(args)


# --- perfgate validate-baselines ---------------------------------------------------------------

def cmd_validate_baselines(args: argparse.Namespace) -> int:
    try:
        files = validate_baselines(Path(args.folder))
    except PerfgateError as exc:
        print(f"perfgate: error: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    for rel in files:
        print(f"valid: {rel.as_posix()}")
    print(f"perfgate: {len(files)} file(s) valid in {args.folder}", file=sys.stderr)
    return EXIT_OK


# --- the command line ---------------------------------------------------------------------------

def add_parser(subparsers: Any) -> None:
    """Add ``perfgate judge`` and ``perfgate validate-baselines`` to the command line."""
    p = subparsers.add_parser(
        "judge", help="judge result files from an untrusted measuring job by the base commit's rules",
        description="Read RESULTS (the measuring job's <workload>.json files, base/<workload>.json and run.json; "
                    "one folder per shard of a sharded run) as untrusted data and judge them, as one run, with "
                    "the baselines and [tool.perfgate] of --base-dir. "
                    "Writes report.md, comment.md and report.json to --artifacts; under GitHub Actions also the "
                    "job summary and the step outputs verdict, exit-code, state, conclusion, description; with "
                    "--check-run FILE the payload of a check run.",
        epilog="exit codes: 0 pass, 1 regression, 2 error or bad input, 3 inconclusive")
    p.add_argument("results", nargs="+", metavar="RESULTS",
                   help="the folder the measuring job uploaded; with several (one per shard of a run measured "
                        "with --shard I/N), they are judged as one run, Holm over all their workloads, and a "
                        "workload in two of them is an error")
    p.add_argument("--base-dir", required=True, metavar="DIR",
                   help="a checkout of the base commit that was measured: baselines and thresholds come from here")
    p.add_argument("--design", choices=DESIGNS, default="paired",
                   help="the design to judge by (default paired); the results must have been measured for it")
    p.add_argument("--artifacts", default="perfgate-judged", metavar="DIR",
                   help="where report.md, comment.md and report.json go (default: perfgate-judged)")
    p.add_argument("--changed-files", metavar="FILE",
                   help="the pull request's changed files, 'status<TAB>path[<TAB>previous path]' per line (from "
                        "the GitHub API): the notice of edited gate inputs, and retired workloads")
    p.add_argument("--head-pyproject", metavar="FILE",
                   help="the pull request's pyproject.toml, as data: the notice names changed [tool.perfgate] keys")
    p.add_argument("--head-files", metavar="DIR",
                   help="the pull request's added and changed workload files at the head commit, at their "
                        "repository paths, fetched as data: parsed (never imported) for the workloads the pull "
                        "request defines; without it the head defines what the base does, less the workload "
                        "files it removes")
    p.add_argument("--expect-head-sha", metavar="SHA", help="refuse results measured of another commit")
    p.add_argument("--expect-base-sha", metavar="SHA",
                   help="refuse results measured against another base commit (the workflow passes the merge "
                        "base of the head with the base branch's tip, from the API, never run.json's word)")
    p.add_argument("--expect-pr", type=int, metavar="N", help="refuse results of another pull request")
    p.add_argument("--check-run", metavar="FILE",
                   help="write the JSON payload of the check run for the head commit (conclusion success, failure, "
                        "or neutral for an inconclusive gate under inconclusive = \"pass\"; the report as its "
                        "summary) for `gh api --method POST repos/OWNER/REPO/check-runs --input FILE`; also when "
                        "the judge fails (conclusion failure)")
    p.add_argument("--previous-verdicts", metavar="FILE",
                   help="the `perfgate` commit statuses already set on the head commit, one JSON object a line "
                        "(state, description, created_at, creator; from the API, read as untrusted data): a "
                        "REGRESSION recorded for the commit stands over re-runs (exit 1) until a new commit or "
                        "--acknowledgement. The judge ends the status description it writes with the pull request "
                        "and base commit it judged, ' (#12 into abc123def456)', and reads it back")
    p.add_argument("--acknowledgement", metavar="FILE",
                   help="who accepted the slowdown with the label 'perfgate: accept slowdown', as a JSON object "
                        "(by, at, permission from the collaborators permission API, via: label; head_since, pusher: "
                        "when the head commit became the pull request's head and who pushed it; pr_author; "
                        "commit_authors: the head commit's author and committer), or an empty file. It turns the "
                        "recorded REGRESSION into a pass naming who and when only when applied after the head "
                        "commit became the head and after a REGRESSION was recorded for it in this pull request "
                        "against this base, by neither the author nor the pusher, with the access the base's "
                        "[tool.perfgate] accept_by asks for (default: maintain or admin, or a code owner of a "
                        "changed file in the base's CODEOWNERS, read with --changed-files)")
    p.add_argument("--measuring-job", metavar="FILE",
                   help="the measuring job's start and end from the Actions API, as the JSON object "
                        "{\"started_at\": \"2026-12-04T05:00:00Z\", \"completed_at\": \"...\"} (a sharded run: its "
                        "shards' earliest start and latest end), read as untrusted data: a gate's recorded instants "
                        "and its wall-time budget are checked against it")
    p.set_defaults(func=cmd_judge)
    v = subparsers.add_parser(
        "validate-baselines", help="check a downloaded baseline folder before it is copied into the store",
        description="Every file must be README.md at the top or <environment key>/<workload>.json holding a "
                    "valid baseline of that workload and key; no links, bounded sizes.",
        epilog="exit codes: 0 valid, 2 a problem (named on one line)")
    v.add_argument("folder", metavar="DIR")
    v.set_defaults(func=cmd_validate_baselines)
