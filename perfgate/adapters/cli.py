"""The ``perfgate`` command line: one function per subcommand, each returning an exit code.

Errors raised on purpose (:class:`perfgate.model.errors.PerfgateError`) become one line on
stderr and their exit code (2 for bad input and failures, never a verdict); ``--verbose``
adds the traceback or the worker's output.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from statistics import median
from collections.abc import Sequence
from pathlib import Path

from perfgate.adapters import bisect_cli, ci, counters_cli, doctor, history_cli, judge_cli, scaffold, selftest
from perfgate.adapters.options import (
    add_common,
    add_gate_options,
    add_options,
    add_paired_options,
    add_run_options,
    add_selection_options,
    cache_dir_of,
    measuring_request,
    paired_gate_in,
    progress_printer,
    require_gate_repeats,
    settings_of,
    stored_gate,
    values_of,
)
from perfgate.adapters.publish import FORMATS, Publication, publish
from perfgate.adapters.selection import jobs_of, registry_of
from perfgate.adapters.script_cli import add_script_options
from perfgate.analysis.outcome import GateOutcome
from perfgate.analysis.summary import summarise
from perfgate.gate.config import Settings
from perfgate.gate.frontend import (
    Interruption,
    checked_out,
    interruptible,
    interrupted_lines,
    judge_on_disk,
    select_results,
    trace_regressions,
)
from perfgate.gate.gating import GateRun, count_each
from perfgate.measure.runner import Progress, ProgressStatus, RunOutcome, resolve_device
from perfgate.measure.template import Starter
from perfgate.measure.trace import check_trace_dir, trace_job
from perfgate.model.benchmark import Statistics
from perfgate.model.counters import CounterSet
from perfgate.model.errors import EXIT_ERROR, EXIT_OK, CudaUnavailable, PerfgateError, UsageError
from perfgate.model.job import Job
from perfgate.model.result import RunResult
from perfgate.model.trace import TraceSchedule
from perfgate.model.version import __version__
from perfgate.report.calibration import PROCESSES_PER_GROUP, calibration_report, design_advice
from perfgate.report.html import INDEX
from perfgate.report.terminal import gate_table, run_table
from perfgate.store.baselines import (
    baseline_counters_path,
    baseline_path,
    load_baseline,
    save_baseline,
    updated_baseline,
)
from perfgate.store.benchmark_json import load_benchmark_files, load_results_dir
from perfgate.store.counters import load_counters_beside, save_counters
from perfgate.store.pyproject_edit import SettingsFile, edited, read_settings_file, write_edited
from perfgate.store.traces import TraceOutcome, render_operator_table
from perfgate.text.units import ms
from perfgate.tune import DEFAULT_REPEATS, MIN_REPEATS, tune_loader


def _err(message: str) -> None:
    print(f"perfgate: error: {message}", file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    registry = registry_of(args)
    device = resolve_device(args.device)
    for workload in registry.select(args.workloads):
        params = workload.resolve(device)
        print(f"{workload.name}  v{workload.version}  ({device} profile)")
        if workload.description:
            print(f"  {workload.description}")
        print(f"  source: {workload.source}")
        values = params.to_dict()
        width = max(len(k) for k in values)
        for key in sorted(values):
            print(f"    {key.ljust(width)}  {values[key]}")
    return EXIT_OK


def _measure(args: argparse.Namespace, settings: Settings, repeats: int) -> tuple[list[Job], RunOutcome, str]:
    device, jobs = jobs_of(args, settings)
    measuring = measuring_request(values_of(args), device, settings.windows, progress=progress_printer(args.quiet),
                                  gate=False, windows_auto=settings.windows_auto)
    with Starter(settings.start_for(paired=False),
                 warn=lambda line: print(f"perfgate: {line}", file=sys.stderr)) as starter:
        outcome = measuring.repeats(jobs, repeats, starter=starter, out_dir=Path(args.out))
    return jobs, outcome, device


def _report_errors(args: argparse.Namespace, errors: dict[str, PerfgateError]) -> None:
    for exc in errors.values():
        _err(exc.message)
        if args.verbose and exc.detail:
            print(exc.detail, file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    jobs, outcome, _ = _measure(args, settings, settings.repeats)
    for job in jobs:
        result = outcome.results.get(job.workload.name)
        if result is not None:
            print(run_table(result, summarise(result),
                            straggler_share=settings.for_workload(job.workload.name).straggler_share))
    if outcome.results:
        print(f"results written to {args.out}/ ({', '.join(f'{n}.json' for n in outcome.results)})")
    _report_errors(args, outcome.errors)
    return EXIT_ERROR if outcome.errors else EXIT_OK


def cmd_rebaseline(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    reason = args.reason.strip()
    if not reason:
        raise UsageError("--reason must say why the baseline changes")
    errors: dict[str, PerfgateError] = {}
    counted: dict[str, CounterSet] = {}
    if args.from_results and args.script is not None:
        raise UsageError("--from-results records result files already measured; --script measures the script "
                         "(give one of them)")
    history = None if args.day_history is None else history_cli.day_history(args.day_history, args.config)
    if args.from_results:
        results = {r.workload: r for r in load_results_dir(Path(args.from_results))}
        if args.workloads:
            missing = [w for w in args.workloads if w not in results]
            if missing:
                raise UsageError(f"no result for {', '.join(missing)} in {args.from_results}")
            results = {w: results[w] for w in args.workloads}
        if not results:
            raise UsageError(f"{args.from_results}: no result files")
        if settings.gate.counters:  # --no-counters turns it off in the settings
            counted = load_counters_beside(Path(args.from_results), results)
    else:
        if settings.repeats < 2:
            raise UsageError("a baseline needs at least 2 repeats to know its run-to-run noise")
        jobs, outcome, device = _measure(args, settings, settings.repeats)
        results, errors = outcome.results, outcome.errors
        if settings.gate.counters:
            # stored beside the baseline (and written to --out); a failure is a warning
            counted = count_each(
                jobs, results, device=device, cache_dir=cache_dir_of(args), out_dir=Path(args.out),
                timeout_s=args.timeout,
                announce=lambda name: print(f"{name}: one counted run (exact counters) to store beside the "
                                            "baseline", file=sys.stderr),
                failed=lambda name, message: _err(f"warning: {message}; the baseline is recorded without counters"))
    injected = sorted(n for n, r in results.items() if "inject_ms" in r.overrides)
    if injected:
        raise UsageError(f"{', '.join(injected)}: a result with injected slowdowns (perfgate selftest) cannot be a baseline")
    for name, result in results.items():
        # A pytest-benchmark file without several runs is judged from its summary
        # statistics (mean, sd, rounds), so one "repeat" is all it can have.
        if len(result.repeats) < 2 and result.data.get("statistics") != Statistics.SUMMARY:
            raise UsageError(f"{name}: a baseline needs at least 2 repeats, the result has {len(result.repeats)}")
        c = counted.get(name)
        if c is not None and (c.device != result.device or c.workload_version != result.workload_version):
            raise UsageError(f"{name}: its counted run is of {c.device} v{c.workload_version}, the result of "
                             f"{result.device} v{result.workload_version}: count the same code and device again")
    days = history_cli.day_variations(*history, results) if history is not None else {}
    for name, result in results.items():
        key = result.environment.key()
        path = baseline_path(settings.baselines, key, name)
        existing = load_baseline(path) if path.exists() else None
        baseline = updated_baseline(existing, result, reason, append=args.append, max_recordings=args.max_recordings,
                                    day_variation=days.get(name))
        save_baseline(baseline, settings.baselines)
        kept = len(baseline.recordings)
        what = "appended to" if args.append and existing else ("replaced" if existing else "created")
        print(f"{what} {path}: {kept} recording(s), {len(result.repeats)} repeats, "
              f"step median {ms(summarise(result).median_ms['step'])} ms")
        counters_file = baseline_counters_path(settings.baselines, key, name)
        if name in counted:
            save_counters(counted[name], counters_file.parent)
            print(f"  with its counted run {counters_file} ({counted[name].steps} steps)")
        elif counters_file.exists() and not (args.append and existing):
            # The recordings are replaced: counters of the code they replace would gate the new code.
            counters_file.unlink()
            print(f"  removed {counters_file}: the counted run of the replaced baseline")
    _report_errors(args, errors)
    return EXIT_ERROR if errors else EXIT_OK


def _said(done: Publication, html: str | None) -> bool:
    """Name the HTML page written and each report not written on stderr; True when all were."""
    for path in done.written:
        if html and path == Path(html) / INDEX:
            print(f"perfgate: wrote {path}", file=sys.stderr)
    for problem in done.unwritten:
        _err(f"report NOT written: {problem}")
    return not done.unwritten


def _publish(args: argparse.Namespace, outcome: GateOutcome, traces: dict[str, TraceOutcome] | None = None) -> int:
    """The table on stdout and the reports asked for (each written atomically); the gate's
    exit code, or 2 when a report could not be written."""
    print(gate_table(outcome), end="")
    done = publish(outcome, {name: getattr(args, name) for name in FORMATS}, traces=traces)
    return outcome.exit_code if _said(done, args.html) else EXIT_ERROR


def _compare_on_disk(args: argparse.Namespace) -> GateOutcome:
    """Judge result files already on disk: a single look at the full alpha."""
    settings = settings_of(args)
    if not args.results and not args.benchmark_json:
        raise UsageError("compare needs --results DIR and/or --benchmark-json FILE")
    # Several --results folders (the shards of one run, each measured with --shard I/N) are
    # judged as one family: Holm over all their workloads.
    results: dict[str, RunResult] = {}
    came_from: dict[str, str] = {}
    sources = [(folder, load_results_dir(Path(folder))) for folder in dict.fromkeys(args.results)]
    sources.append(("--benchmark-json", load_benchmark_files([Path(p) for p in args.benchmark_json])))
    for where, loaded in sources:
        for result in loaded:
            if result.workload in results:
                raise UsageError(f"{result.workload}: given twice (in {came_from[result.workload]} and {where})")
            results[result.workload] = result
            came_from[result.workload] = where
    names = select_results(results, args.workloads, ", ".join(args.results) or "the files given", "compare")
    head_counters: dict[str, CounterSet] = {}
    for folder in dict.fromkeys(args.results):
        head_counters.update(load_counters_beside(Path(folder), [n for n in names if came_from[n] == folder]))
    return judge_on_disk(results, names, settings, head_counters)


def cmd_compare(args: argparse.Namespace) -> int:
    return _publish(args, _compare_on_disk(args))


def cmd_report(args: argparse.Namespace) -> int:
    """Only the HTML page: bad input is exit 2, any verdict is 0 (the gate decides, not this)."""
    if not args.html:
        raise UsageError("report needs --html DIR")
    outcome = _compare_on_disk(args)
    return EXIT_OK if _said(publish(outcome, {"html": args.html}), args.html) else EXIT_ERROR


def _paired_gate(args: argparse.Namespace, settings: Settings, device: str, jobs: list[Job]) -> GateRun:
    """``gate --against REF``: the base commit in a temporary worktree, ABBA blocks, the paired verdict."""
    with checked_out(Path.cwd(), args.against, allow_dirty=args.allow_dirty) as tree:
        return paired_gate_in(tree, args, settings, device, jobs)


def _interrupted(args: argparse.Namespace, code: int, lines: list[str]) -> int:
    """An interrupted gate: its partial report on stdout, no report file written (a report
    holds a verdict), and the signal's exit code."""
    print("\n".join(lines))
    asked = [f"--{name}" for name in FORMATS if getattr(args, name)]
    if asked:
        _err(f"the gate was interrupted: no report written ({', '.join(asked)})")
    return code


def cmd_gate(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    require_gate_repeats(settings, values_of(args))
    device, jobs = jobs_of(args, settings)
    with interruptible() as interruption:
        if args.against:
            gate = _paired_gate(args, settings, device, jobs)
        else:
            gate = stored_gate(args, settings, device, jobs)
    if gate.interrupted:
        return _interrupted(args, interruption.exit_code, interrupted_lines(gate, interruption))
    traces: dict[str, TraceOutcome] = {}
    if args.trace_on_fail:
        traces = trace_regressions(
            gate.outcome, jobs, device, cache_dir=cache_dir_of(args), trace_dir=Path(args.trace_dir),
            timeout_s=args.timeout,
            tracing=lambda name: print(f"perfgate: tracing {name} (a separate run, not part of the verdict)",
                                       file=sys.stderr),
            failed=lambda name, outcome: _err(f"trace of {name} failed: {outcome.error}"))
    return _publish(args, gate.outcome, traces)


def cmd_trace(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    device, jobs = jobs_of(args, settings)
    check_trace_dir(Path(args.trace_dir))
    try:
        schedule = TraceSchedule(wait=args.profile_wait, warmup=args.profile_warmup, active=args.profile_active,
                                 repeat=args.profile_repeat)
    except ValueError as exc:
        raise UsageError(f"bad profiler schedule: {exc}") from None
    failed = False
    for job in jobs:
        outcome = trace_job(job, device, cache_dir_of(args), Path(args.trace_dir), schedule=schedule,
                            row_limit=args.top, record_shapes=args.record_shapes, timeout_s=args.timeout)
        if outcome.result is None:
            failed = True
            _err(f"{job.workload.name}: {outcome.error}")
            continue
        print(render_operator_table(outcome.result.table, limit=args.top))
        print(f"{job.workload.name}: traces {', '.join(str(p) for p in outcome.result.traces)}; "
              f"operators {outcome.result.operators_json} (open the traces in https://ui.perfetto.dev)")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_tune_loader(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    if len(args.workloads) != 1:
        raise UsageError("tune-loader takes exactly one workload")
    if not (args.budget_minutes > 0):
        raise UsageError("--budget must be a positive number of minutes")
    repeats = args.repeats or DEFAULT_REPEATS
    if repeats < MIN_REPEATS:
        raise UsageError(f"tune-loader needs at least {MIN_REPEATS} repeats per setting")
    device, (job,) = jobs_of(args, settings)
    result = tune_loader(job.workload, job.params, device, budget_s=args.budget_minutes * 60.0, cache_dir=cache_dir_of(args),
                         progress=progress_printer(args.quiet), data_root=job.data_root,
                         overrides=job.overrides, repeats=repeats, timeout_s=args.timeout)
    print(result.render(), end="")
    return result.exit_code


CALIBRATE_WINDOWS = 4
"""Windows per process calibrate times when ``windows`` is not set above 1: enough to tell the
windows' variation from the processes'."""


def cmd_calibrate(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    if len(args.workloads) != 1:
        raise UsageError("calibrate takes exactly one workload")
    repeats = args.repeats or 12
    if repeats < 4:
        raise UsageError("calibrate needs at least 4 repeats (two A/A halves of 2)")
    if args.auto and not Path(args.config).exists():
        raise UsageError(f"--auto writes the design into {args.config}, which does not exist")
    # read now, before measuring: a file --auto cannot write is refused before the minutes of
    # measuring, and one edited meanwhile is not overwritten with an edit of this reading
    settings_file = read_settings_file(Path(args.config)) if args.auto else None
    windows = settings.windows if settings.windows > 1 else CALIBRATE_WINDOWS
    device, jobs = jobs_of(args, settings)
    seconds: list[float] = []
    printer = progress_printer(args.quiet)

    def progress(event: Progress) -> None:
        if event.status is ProgressStatus.DONE:
            seconds.append(event.seconds)
        printer(event)

    # calibrate sizes the paired gate: its processes start as a paired gate's do
    measuring = measuring_request(values_of(args), device, windows, progress=progress, gate=False)
    with Starter(settings.start_for(paired=True), renew_every=PROCESSES_PER_GROUP,
                 warn=lambda line: print(f"perfgate: {line}", file=sys.stderr)) as starter:
        outcome = measuring.repeats(jobs, repeats, starter=starter, out_dir=Path(args.out))
    _report_errors(args, outcome.errors)
    if outcome.errors:
        return EXIT_ERROR
    result = next(iter(outcome.results.values()))
    config = settings.for_workload(result.workload)
    print(calibration_report(result, config, power=args.power, blocks=settings.blocks))
    outside = [s - r.window_s for s, r in zip(seconds, result.repeats, strict=True)]
    forked = starter.templates > 0
    per_template = starter.template_s / starter.templates if forked else 0.0
    process_s = max(median(outside), 0.0) + (per_template / PROCESSES_PER_GROUP if forked else 0.0)
    how = (f"forked; {starter.templates} templates at {per_template:.1f} s each, a quarter counted per process"
           if forked else "started fresh")
    advice = design_advice(result, process_s, config, how=how)
    print("\n".join(advice.lines))
    if not args.auto:
        if advice.pinned is not None:
            print(f"\nperfgate calibrate --auto writes windows = {advice.pinned.windows} and blocks = "
                  f"{advice.pinned.blocks} into [tool.perfgate] of {args.config}")
        return EXIT_OK
    if advice.pinned is None:
        raise UsageError("--auto: no design to write (see above); nothing written")
    assert settings_file is not None
    return _write_design(settings_file, advice.pinned.windows, advice.pinned.blocks)


def _write_design(settings_file: SettingsFile, windows: int, blocks: int) -> int:
    """``windows`` and ``blocks`` into ``[tool.perfgate]`` of the file as it was read, checked
    as the settings they become before it is written (a file that would not load is left as
    it was), and written only if it still holds what was read
    (:mod:`perfgate.store.pyproject_edit`: links, mode and newlines kept)."""
    from perfgate.gate.config import load_settings, parse_toml

    pyproject = settings_file.path
    values = {"windows": windows, "blocks": max(blocks, 2)}
    text = edited(settings_file, values)
    parse_toml(text, str(pyproject))
    with tempfile.TemporaryDirectory(prefix="perfgate-calibrate-") as tmp:
        check = Path(tmp, "pyproject.toml")
        check.write_text(text, encoding="utf-8")
        loaded = load_settings(check)
    if (loaded.windows, loaded.blocks) != (values["windows"], values["blocks"]):
        raise UsageError(f"{pyproject}: the edited file would not hold the design; nothing written")
    write_edited(settings_file, text)
    print(f"wrote windows = {values['windows']} and blocks = {values['blocks']} into [tool.perfgate] of {pyproject}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfgate",
        description="A CI performance-regression gate for PyTorch training.",
        epilog="exit codes: 0 pass, 1 regression, 2 error or bad input, 3 inconclusive",
    )
    parser.add_argument("--version", action="version", version=f"perfgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list workloads and their parameters for the current device")
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD")
    add_options(p, ("device",), help={"device": "whose profile the parameters are resolved for (default: auto)"},
                defaults={"device": "auto"})
    add_common(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="measure workloads and write one result file per workload")
    add_run_options(p, repeats_help="fresh processes per workload (default: [tool.perfgate] repeats, else 5)")
    add_script_options(p)  # --script PATH [-- ARGS], --name
    add_common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("rebaseline", help="record baselines for the current environment")
    add_run_options(p, repeats_help="repeats to record (default: [tool.perfgate] repeats, else 5)")
    p.add_argument("--reason", required=True, help="why the baseline changes (recorded in its provenance)")
    p.add_argument("--append", action="store_true",
                   help="add a recording to the existing baseline (day-to-day noise) instead of replacing it")
    p.add_argument("--max-recordings", type=int, default=10, help="recordings kept with --append (default 10)")
    p.add_argument("--from-results", metavar="DIR", help="record from result files already on disk, without measuring")
    p.add_argument("--day-history", nargs="?", const=True, metavar="PATH|URL",
                   help="record this runner's day-to-day variation with the baseline, measured from the last 30 "
                        "stored-design runs of each workload in the history store (at least 5; default store: as "
                        "`perfgate history` finds it); the gate then uses it instead of the assumed 1%%")
    add_script_options(p)
    add_options(p, ("baselines", "no_counters"), help={
        "no_counters": "record no counted run beside the baseline ([tool.perfgate] counters = false does the same)"})
    add_common(p)
    p.set_defaults(func=cmd_rebaseline)

    p = sub.add_parser("compare", help="compare result files on disk with the baselines (one look, full alpha)")
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="workloads to compare (default: all results)")
    p.add_argument("--results", metavar="DIR", action="append", default=[],
                   help="directory of result files (perfgate run --out; pytest-benchmark JSON files are read too); "
                        "repeatable: the folders of a sharded run (--shard I/N) are judged as one, Holm over all")
    p.add_argument("--benchmark-json", action="append", default=[], metavar="FILE",
                   help="a pytest-benchmark JSON file (--benchmark-json output; repeatable: one file per run)")
    add_gate_options(p)
    add_common(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="write the HTML report (plots and tables) for result files on disk")
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="workloads (default: all results)")
    p.add_argument("--results", metavar="DIR", action="append", default=[],
                   help="directory of result files (repeatable)")
    p.add_argument("--benchmark-json", action="append", default=[], metavar="FILE", help="a pytest-benchmark JSON file")
    add_gate_options(p)
    add_common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("gate", help="run the workloads and compare them with the baselines (looks after every "
                                    "block until decided or the budget is spent)")
    add_run_options(p, repeats_help="repeats per workload at the first look (default: [tool.perfgate] repeats, else 5)")
    add_gate_options(p)
    add_selection_options(p, ("against", "allow_dirty"))
    add_paired_options(p)
    p.add_argument("--trace-on-fail", action="store_true",
                   help="after a REGRESSION, take a profiler trace of that workload (a separate run) and link it")
    p.add_argument("--trace-dir", default="perfgate-artifacts/traces", metavar="DIR",
                   help="where traces go (default: perfgate-artifacts/traces)")
    add_script_options(p)
    add_common(p)
    p.set_defaults(func=cmd_gate)

    p = sub.add_parser("calibrate", help="A/A repeats: this machine's run-to-run noise and the repeats a gate needs")
    add_run_options(p, repeats_help="A/A processes, in groups of four (default 12)")
    add_options(p, ("alpha", "delta"), help={"alpha": "family-wise alpha to size for (default 0.01)",
                                              "delta": "slowdown to detect, as a fraction (default 0.03)"})
    p.add_argument("--power", type=float, default=0.8, help="probability of detecting it (default 0.8)")
    p.add_argument("--auto", action="store_true",
                   help="write the recommended windows and blocks into [tool.perfgate] of --config")
    add_common(p)
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("trace", help="a short torch.profiler run with phase labels: Chrome traces and operator tables")
    add_run_options(p, repeats_help=argparse.SUPPRESS)
    p.add_argument("--trace-dir", default="perfgate-artifacts/traces", metavar="DIR",
                   help="where traces go (default: perfgate-artifacts/traces)")
    p.add_argument("--profile-wait", type=int, default=1, help="profiler schedule: steps skipped (default 1)")
    p.add_argument("--profile-warmup", type=int, default=1, help="profiler schedule: warmup steps (default 1)")
    p.add_argument("--profile-active", type=int, default=3, help="profiler schedule: recorded steps (default 3)")
    p.add_argument("--profile-repeat", type=int, default=1, help="profiler schedule: cycles, one trace each (default 1)")
    p.add_argument("--record-shapes", action="store_true", help="record operator input shapes (costs more)")
    p.add_argument("--top", type=int, default=15, help="operators listed per phase (default 15)")
    add_script_options(p)
    add_common(p)
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("tune-loader", help="measure DataLoader settings of one workload; recommend one only when "
                                            "it is faster than the current setting beyond the noise")
    add_run_options(p, repeats_help=f"repeats per setting (default {DEFAULT_REPEATS}, at least {MIN_REPEATS})")
    # its own --budget, minutes of tuning, not the gate's wall-time budget
    p.add_argument("--budget", dest="budget_minutes", type=float, default=10.0, metavar="MINUTES",
                   help="bound on the estimated time of all repeats, start-up included (default 10)")
    add_common(p)
    p.set_defaults(func=cmd_tune_loader)

    ci.add_parser(sub)
    bisect_cli.add_parser(sub)
    counters_cli.add_parser(sub)
    doctor.add_parser(sub)
    judge_cli.add_parser(sub)
    history_cli.add_parser(sub)
    scaffold.add_parser(sub)
    selftest.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    with interruptible() as interruption:  # Ctrl-C and SIGTERM: every cleanup runs, exit 130 or 143
        return _run_command(args, interruption)


def _run_command(args: argparse.Namespace, interruption: Interruption) -> int:
    try:
        return int(args.func(args))
    except PerfgateError as exc:
        if isinstance(exc, CudaUnavailable):
            from perfgate.gate.doctor.diagnosis import cuda_unavailable_reason

            exc = CudaUnavailable(f"{exc.message.removesuffix('; use --device cpu')}: {cuda_unavailable_reason()}; "
                                  "use --device cpu (perfgate doctor checks the machine)")
        _err(exc.message)
        if getattr(args, "verbose", False) and exc.detail:
            print(exc.detail, file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        _err(f"interrupted ({interruption.name})")
        return interruption.exit_code
    except BrokenPipeError:
        # The reader went away (`perfgate list | head`): stop quietly, as other CLIs do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
