"""``perfgate bisect GOOD BAD WORKLOAD``: the command. The search, its steps and its judge
are :mod:`perfgate.gate.bisect`; this module turns the options into them and prints.

Exit codes: 0 the first slow commit found, 2 bad input or a step that could not be judged
(ERROR, INCOMPARABLE) or a BAD that is not slower than GOOD, 3 a step still INCONCLUSIVE at
``--max-blocks`` (the range narrowed so far is printed), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfgate.adapters import options, selection
from perfgate.adapters.script_cli import add_script_options
from perfgate.gate.bisect import (
    Bisection,
    Step,
    bisect,
    interruptible,
    paired_judge,
    plan_bisection,
    replay_log,
)
from perfgate.model.errors import EXIT_INCONCLUSIVE, EXIT_OK, UsageError
from perfgate.text.inert import terminal


@contextlib.contextmanager
def _results_dir(out: str | None) -> Iterator[Path]:
    """``--out DIR`` (kept), else a temporary directory removed at the end."""
    if out:
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="perfgate-bisect-") as scratch:
        yield Path(scratch)


def _judged(step: Step) -> None:
    judgement = step.judgement
    print(f"step {step.number}: {step.commit[:7]} {step.subject}: {judgement.verdict.value} at "
          f"{judgement.blocks} ABBA blocks: {terminal(judgement.reason)}", flush=True)


def _ended(result: Bisection) -> int:
    if result.exit_code == EXIT_OK:
        assert result.first_bad is not None
        print(f"first slow commit: {result.first_bad} {result.first_bad_subject}")
    elif result.exit_code == EXIT_INCONCLUSIVE:
        print(f"perfgate: inconclusive: {result.message}")
        print(f"the first slow commit is one of these {len(result.remaining)}, oldest first:")
        for commit in result.remaining:
            print(f"  {commit[:7]} {result.subjects.get(commit, '')}")
    else:
        print(f"perfgate: error: {result.message}", file=sys.stderr)
    return result.exit_code


def cmd_bisect(args: argparse.Namespace) -> int:
    settings = options.settings_of(args)
    blocks = args.blocks if args.blocks is not None else settings.blocks
    max_blocks = args.max_blocks if args.max_blocks is not None else max(blocks, min(4 * blocks, 500))
    # --blocks and --max-reruns are checked with the table's options (settings_of above), the
    # configured blocks with the settings; bisect() checks the blocks again, with --max-blocks.
    if max_blocks < blocks:
        raise UsageError(f"--max-blocks {max_blocks} is below --blocks {blocks}")
    if (args.workload is None) == (args.script is None):
        raise UsageError("perfgate bisect follows one workload: name it, or give --script PATH [-- ARGS]"
                         if args.workload is None else
                         f"--script bisects the script, not the workload {args.workload!r} named with it")
    plan = plan_bisection(Path.cwd(), args.good, args.bad)
    args.workloads = [args.workload] if args.workload is not None else []
    device, jobs = selection.jobs_of(args, settings)
    args.workload = jobs[0].workload.name  # a script's: script-<file name>, or --name
    quiet = args.quiet
    say = (lambda message: None) if quiet else (lambda message: print(f"perfgate: {message}", file=sys.stderr,
                                                                        flush=True))
    print(f"perfgate bisect: {terminal(args.workload)} between GOOD {plan.good[:7]} and BAD {plan.bad[:7]}: "
          f"{plan.commits} commit(s) after GOOD, one sequential paired gate per step, its looks from {blocks} to "
          f"{max_blocks} ABBA blocks",
          flush=True)
    with interruptible(), _results_dir(args.out) as out_dir:
        judge, check_good = paired_judge(
            jobs, project_dir=Path.cwd(),
            workload_paths=[Path(p) for p in (*settings.workloads_path, *args.workloads_path)],
            assignments=options.assignments_of(args), settings=settings, out_dir=out_dir, announce=say,
            measuring=options.measuring_request(options.values_of(args), device, settings.windows,
                                                progress=options.progress_printer(quiet), gate=True,
                                                windows_auto=settings.windows_auto))
        result = bisect(
            plan, judge, blocks=blocks, max_blocks=max_blocks, check_good=check_good,
            started=lambda number, commit, subject, left: say(
                f"step {number}: {commit[:7]} {subject} against GOOD {plan.good[:7]}"
                + (f" (about {left} more step(s) after this one)" if left else "")),
            judged=_judged)
    if args.log:
        Path(args.log).write_text(replay_log(result), encoding="utf-8")
        say(f"wrote {args.log} (git bisect replay takes it)")
    return _ended(result)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``perfgate bisect`` to the ``perfgate`` command line."""
    p = subparsers.add_parser(
        "bisect", help="find the first commit that made a workload slower: git's bisection, a paired gate per step",
        description="Bisect the commits after GOOD up to BAD: each step checks out git's midpoint in a temporary "
                    "worktree and judges it by a paired gate against GOOD (REGRESSION: bad; PASS or IMPROVED: "
                    "good; INCONCLUSIVE at its last look, --max-blocks: the search stops). Each step is one "
                    "sequential gate at the gate's alpha, spent over its looks from --blocks to --max-blocks. The "
                    "checkout you run it from is never touched.",
        epilog="exit codes: 0 first slow commit found, 2 error or bad input, 3 a step still inconclusive at "
               "--max-blocks (the range narrowed so far is printed); see docs/bisect.md",
    )
    p.add_argument("good", metavar="GOOD", help="a commit without the slowdown (an ancestor of BAD)")
    p.add_argument("bad", metavar="BAD", help="a commit with it")
    p.add_argument("workload", metavar="WORKLOAD", nargs="?",
                   help="the workload that became slower (or --script PATH: each commit's copy of the script)")
    options.add_options(p, ("device", "blocks", "max_blocks"), help={
        "blocks": "ABBA blocks at each step's first look (default: [tool.perfgate] blocks, else 6)",
        "max_blocks": "each step's gate looks after every block up to this many, then stays INCONCLUSIVE "
                      "(default: 4 x --blocks, at most 500)"})
    p.add_argument("--steps", type=int, help="measured steps per repeat (same as --set steps=N)")
    p.add_argument("--warmup", type=int, help="warmup steps per repeat (same as --set warmup_steps=N)")
    options.add_selection_options(p, ("set", "data_root"),
                                  help={"set": "override a workload parameter, on every commit alike"})
    options.add_options(p, ("alpha", "delta", "no_counters", "max_reruns", "max_other_cpu_share", "out"), help={
        "alpha": "each gate's false-alarm rate, one-sided (default 0.01)",
        "delta": "smallest slowdown that counts, as a fraction (default 0.03)",
        "no_counters": "skip each gate's counted runs ([tool.perfgate] counters = false does the same)",
        "max_reruns": "blocks measured again per gate when other processes loaded the machine (default 3)",
        "max_other_cpu_share": "a repeat is contended when other processes used more than this share of the CPUs",
        "out": "keep each step's result files under DIR/<commit>/ (default: a temporary folder, removed)"},
        defaults={"out": None})
    p.add_argument("--log", metavar="FILE", help="write the search as git bisect log does (git bisect replay FILE)")
    options.add_options(p, ("cache_dir", "timeout", "no_telemetry"), help={
        "no_telemetry": "do not sample NVML/psutil telemetry in a background thread during the window"})
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    add_script_options(p)  # --script PATH [-- ARGS]: each commit's own copy of the script
    options.add_common(p)
    p.set_defaults(func=cmd_bisect)
    return p

