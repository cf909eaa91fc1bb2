"""Measuring the paired design: base and head alternating in ABBA blocks, one job.

Each block runs, for every workload in turn, four fresh processes in the order base,
head, head, base in even blocks and head, base, base, head in odd ones
(``perfgate.analysis.blocks.block_order``), so linear drift of the machine inside a block
cancels from the head-minus-base contrast, and an effect of a process's place in its block
cancels over every two blocks. Each side runs in its own tree (the base
commit's worktree, the head's checkout) with the same installed perfgate, or the base
side under another interpreter (``--base-python``).

A repeat during which other processes loaded the machine (``contention_check`` says why)
costs its whole block: the block is measured again, up to ``max_reruns`` times per
workload, and every re-run is named. A block still contended at the limit is kept and
named, never silently averaged in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from perfgate.analysis.blocks import block_order
from perfgate.measure.runner import Progress, ProgressStatus, RunOutcome, assemble, run_one
from perfgate.measure.template import FRESH, Starter
from perfgate.model.errors import PerfgateError
from perfgate.model.job import Job
from perfgate.store.gitinfo import git_revision
from perfgate.store.results import result_path, save_result

__all__ = ["PairedOutcome", "Side", "base_results_dir", "measure_paired"]

ContentionCheck = Callable[[Mapping[str, Any] | None], "str | None"]
"""A repeat's telemetry → why it was contended (one line), or None."""


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its jobs by workload name and the tree they run in."""

    name: str
    """``"base"`` or ``"head"``."""
    jobs: Mapping[str, Job]
    project_dir: Path
    python: str | None = None


@dataclass
class PairedOutcome:
    head: RunOutcome = field(default_factory=RunOutcome)
    base: RunOutcome = field(default_factory=RunOutcome)
    reruns: dict[str, list[str]] = field(default_factory=dict)
    """Per workload, each block measured again and why ("block 3 measured again: ...")."""
    contended: dict[str, list[str]] = field(default_factory=dict)
    """Per workload, blocks kept although contended (the re-run limit was reached)."""
    blocks: dict[str, int] = field(default_factory=dict)
    """Per workload, the blocks completed in this call."""


def base_results_dir(out_dir: Path) -> Path:
    """Where the base side's result files go, beside the head's."""
    return out_dir / "base"


def measure_paired(
    head: Side,
    base: Side,
    names: Sequence[str],
    *,
    device: str,
    blocks: int,
    first_block: int = 0,
    cache_dir: Path,
    out_dir: Path | None,
    progress: Callable[[Progress], None] = lambda p: None,
    timeout_s: float = 3600.0,
    telemetry: bool = True,
    contention_check: ContentionCheck | None = None,
    max_reruns: int = 3,
    reruns_used: Mapping[str, int] | None = None,
    starter: Starter = FRESH,
    windows: int | Mapping[str, int] = 1,
) -> PairedOutcome:
    """Measure ``blocks`` ABBA blocks of every workload in ``names`` (numbered from ``first_block``).

    A side that fails for a workload stops that workload: the failure is in that side's
    ``errors``, and the other side's repeats measured so far are still assembled (and
    written), so a crashing base never hides the head's numbers. ``reruns_used``: blocks of
    each workload already measured again by earlier calls of the same gate, which count
    against ``max_reruns``. ``starter``: how each process starts; a forking starter is
    renewed at every block, and both sides start alike (a side under another interpreter
    makes both start fresh). ``windows``: the timed windows in each process, one count for every
    workload or a count per workload (a workload it does not name gets 1).
    """
    if blocks < 1:
        raise ValueError("blocks must be at least 1")
    sides = {"head": head, "base": base}
    gits = {s: git_revision(side.project_dir) for s, side in sides.items()}
    outcome = PairedOutcome()
    collected: dict[str, dict[str, list[tuple[int, dict[str, Any]]]]] = {
        n: {"head": [], "base": []} for n in names}
    if out_dir is not None:
        for name in names:
            result_path(out_dir, name).unlink(missing_ok=True)
            result_path(base_results_dir(out_dir), name).unlink(missing_ok=True)
    last = first_block + blocks
    if starter.forking and (head.python is not None or base.python is not None):
        starter = FRESH  # one side cannot fork from this interpreter's template: neither does the other
    run = _Runner(device, cache_dir, timeout_s, telemetry, starter, windows)
    for block in range(first_block, last):
        for name in names:
            if name in outcome.head.errors or name in outcome.base.errors:
                continue
            while True:
                # A template serves one block of one workload, a re-run included (a contended
                # block can stop after fewer than its four processes): its layout is a block's,
                # sampled over blocks, and never straddles two of them.
                starter.renew()
                may_rerun = (reruns_used or {}).get(name, 0) + len(outcome.reruns.get(name, [])) < max_reruns
                done, why, failed = _one_block(name, block, last, sides, gits, run, contention_check, progress,
                                               stop_early=may_rerun)
                if failed is not None:
                    failed_arm, exc = failed
                    getattr(outcome, failed_arm).errors[name] = exc
                    # what the other side measured in this block is kept: its result is still written
                    collected[name]["head"].extend((block, r) for arm, r in done
                                                   if arm == "head" and failed_arm == "base")
                    break
                if why is not None and may_rerun:
                    outcome.reruns.setdefault(name, []).append(f"block {block + 1} measured again: {why}")
                    continue
                if why is not None:
                    outcome.contended.setdefault(name, []).append(
                        f"block {block + 1} kept although contended (limit of {max_reruns} re-runs reached): {why}")
                for arm, response in done:
                    collected[name][arm].append((block, response))
                outcome.blocks[name] = outcome.blocks.get(name, 0) + 1
                break
    for name in names:
        for arm, side in sides.items():
            responses = collected[name][arm]
            side_outcome: RunOutcome = getattr(outcome, arm)
            if name in side_outcome.errors or not responses:
                continue
            try:
                result = assemble(side.jobs[name], device, [r for _, r in responses], [b for b, _ in responses])
            except PerfgateError as exc:
                side_outcome.errors[name] = exc
                continue
            if out_dir is not None:
                target = out_dir if arm == "head" else base_results_dir(out_dir)
                save_result(result, result_path(target, name))
            side_outcome.results[name] = result
    return outcome


@dataclass(frozen=True)
class _Runner:
    """How every repeat of this call runs (:func:`run_one`'s settings but the job's)."""

    device: str
    cache_dir: Path
    timeout_s: float
    telemetry: bool
    starter: Starter
    windows: int | Mapping[str, int]

    def __call__(self, side: Side, name: str, index: int, git: tuple[str | None, bool | None]) -> dict[str, Any]:
        windows = self.windows if isinstance(self.windows, int) else self.windows.get(name, 1)
        return run_one(side.jobs[name], self.device, index, self.cache_dir, git, self.timeout_s, self.telemetry,
                       project_dir=side.project_dir, python=side.python, starter=self.starter,
                       windows=windows)


def _head_rest(name: str, block: int, last: int, after: int, head: Side, git: tuple[str | None, bool | None],
               run: _Runner, progress: Callable[[Progress], None]) -> list[tuple[str, dict[str, Any]]]:
    """The head repeats of a block after ``after``, once the base side has failed in it."""
    done: list[tuple[str, dict[str, Any]]] = []
    order = block_order(block)
    for position in range(after + 1, len(order)):
        if order[position] != "head":
            continue
        label = f"block {block + 1}/{last} head"
        progress(Progress(name, block + 1, last, ProgressStatus.START, label=label))
        began = time.perf_counter()
        try:
            response = run(head, name, block * 4 + position, git)
        except PerfgateError:
            break
        progress(Progress(name, block + 1, last, ProgressStatus.DONE, time.perf_counter() - began,
                          median(response["repeat"]["phases_ms"]["step"]), label=label))
        done.append(("head", response))
    return done


def _one_block(
    name: str, block: int, last: int, sides: Mapping[str, Side], gits: Mapping[str, tuple[str | None, bool | None]],
    run: _Runner, contention_check: ContentionCheck | None, progress: Callable[[Progress], None], *,
    stop_early: bool,
) -> tuple[list[tuple[str, dict[str, Any]]], str | None, tuple[str, PerfgateError] | None]:
    """The four repeats of one block: (responses, why it was contended, (side, error) if one failed).

    With ``stop_early`` it stops at the first contended repeat, since the whole block is
    measured again anyway; without (no re-run left) it completes the block and says why.
    """
    done: list[tuple[str, dict[str, Any]]] = []
    first_why: str | None = None
    for position, arm in enumerate(block_order(block)):
        side = sides[arm]
        label = f"block {block + 1}/{last} {arm}"
        progress(Progress(name, block + 1, last, ProgressStatus.START, label=label))
        began = time.perf_counter()
        try:
            response = run(side, name, block * 4 + position, gits[arm])
        except PerfgateError as exc:
            progress(Progress(name, block + 1, last, ProgressStatus.FAILED, time.perf_counter() - began,
                              message=exc.message, label=label))
            if arm == "base":
                # The head's numbers are still wanted (and written): finish its repeats of this block.
                done += _head_rest(name, block, last, position, sides["head"], gits["head"], run, progress)
            return done, None, (arm, exc)
        steps = response["repeat"]["phases_ms"]["step"]
        progress(Progress(name, block + 1, last, ProgressStatus.DONE, time.perf_counter() - began, median(steps), label=label))
        done.append((arm, response))
        why = contention_check(response["repeat"].get("telemetry")) if contention_check else None
        if why is not None and first_why is None:
            first_why = f"{arm} repeat {position + 1} of the block: {why}"
            if stop_early:
                return done, first_why, None
    return done, first_why, None
