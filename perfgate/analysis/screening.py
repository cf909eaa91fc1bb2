"""Which repeats a comparison leaves out, by one rule for both sides.

A repeat is left out when NVML reported a thermal or hardware slowdown during its window
(``Repeat.throttle_reason``; the software power cap does not count): the GPU did not run at
the speed the code asked of it, for a reason outside the code. The rule is the same for
the current or head side, the base side of a paired gate and a stored baseline's
recordings, and it reads only the repeat's own events.

A clock *level* is never a reason. An earlier rule dropped head repeats whose SM clock was
more than 5% off the other side's median and screened the other side by events only; in
simulation (clock dips in 20% of processes on both sides) that moved the A/A estimate by
-1.4% and let a real 4% slowdown PASS in 7% of gates instead of 0.2%, and a change that
lowers the clock by itself (more power per step) was left out as noise. The clock a change
causes is part of its cost; both sides' clocks are reported beside the verdict instead.

Leaving out is capped: when more than ``GateConfig.max_left_out`` of one side's repeats
slowed down, the workload is an ERROR, "runner unfit", naming the reason: what is left is
not a measurement of the code, and an attacker's flags must not thin a side until nothing
can be decided.

In the paired design a repeat that slowed down leaves its whole ABBA block out, on both sides
(:func:`screen_blocks`): the estimate is built from the blocks' contrasts, and leaving out one
side's repeat alone lets whoever sets the flags choose which of the head's and which of the
base's repeats are kept (the head's slowest and the base's fastest quarter hid a +4.5%
slowdown). The cap counts every repeat so left out, on each side.

A result measured on the CPU has no GPU to slow down: a slowdown flag in one is not a
reason to leave anything out but a sign that the file was edited, and the judge refuses it
(:func:`gpu_flags_problem`).

Pure: no torch, no files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import TypeVar

from perfgate.model.repeat import Repeat

R = TypeVar("R", bound=Repeat)


@dataclass(frozen=True)
class Screened:
    """What screening one side left out, and what the report says of it."""

    left_out: int
    total: int
    note: str | None
    """"2 of 12 head repeats left out: thermal (hw_thermal_slowdown) in repeat 3, 7"; None: none."""
    unfit: str | None
    """Why the side is unfit to judge (more left out than the cap allows); None: fit."""


def screen(repeats: Sequence[R], side: str, max_left_out: float, *,
           numbers: Sequence[int] | None = None) -> tuple[tuple[R, ...], Screened]:
    """``repeats`` less those a slowdown event marks, and the account of it.

    ``numbers`` (1-based, default the position) name the repeats in the note; ``side`` is
    "head", "base", "current" or "baseline"."""
    numbers = list(numbers) if numbers is not None else list(range(1, len(repeats) + 1))
    why: dict[str, list[int]] = {}
    kept = []
    for number, r in zip(numbers, repeats, strict=True):
        reason = r.throttle_reason
        if reason is None:
            kept.append(r)
        else:
            why.setdefault(reason, []).append(number)
    out = len(repeats) - len(kept)
    note = None
    unfit = None
    if out:
        parts = [f"{reason} in repeat {', '.join(map(str, n))}" for reason, n in why.items()]
        note = f"{out} of {len(repeats)} {side} repeat(s) left out: {'; '.join(parts)}"
        if out > max_left_out * len(repeats) or not kept:
            unfit = (f"runner unfit: {out} of {len(repeats)} {side} repeats slowed down "
                     f"({', '.join(why)}), more than the {max_left_out * 100:g}% that may be left out "
                     "(max_left_out); fix the runner's cooling or power, or gate elsewhere")
    return tuple(kept), Screened(out, len(repeats), note, unfit)


def gpu_flags_problem(repeats: Sequence[Repeat], device: str, workload: str, side: str) -> str | None:
    """Why a ``cpu`` result's repeats cannot hold GPU slowdown flags (``slowdown_reasons``
    non-empty, or ``throttled: true``), naming the workload, the side and the repeats; None
    when they hold none or the device has a GPU."""
    if device != "cpu":
        return None
    flagged = [(r.index + 1, r.throttle_reason) for r in repeats if r.throttle_reason is not None]
    if not flagged:
        return None
    numbers = ", ".join(str(n) for n, _ in flagged[:10]) + (f" and {len(flagged) - 10} more" if len(flagged) > 10 else "")
    return (f"GPU slowdown flags on a CPU run: {workload}'s {side} side was measured on cpu, but its repeat(s) "
            f"{numbers} record {flagged[0][1]}; a CPU run has no GPU to slow down, and flags would choose which "
            "repeats are left out")


def screen_blocks(head: Sequence[R], base: Sequence[R], max_left_out: float, *,
                  head_numbers: Sequence[int] | None = None, base_numbers: Sequence[int] | None = None
                  ) -> tuple[tuple[R, ...], tuple[R, ...], tuple[str, ...], str | None]:
    """The paired design's screen: every ABBA block in which a repeat of either side slowed down
    is left out whole, on both sides. Returns both sides' kept repeats, the notes (what was
    left out and why), and why the workload is unfit (None: fit): more than ``max_left_out`` of
    either side's repeats left out, or none left. A repeat without a block (not a paired
    measurement) is left out alone, as :func:`screen` does."""
    sides = {"head": (list(head), list(head_numbers) if head_numbers is not None else list(range(1, len(head) + 1))),
             "base": (list(base), list(base_numbers) if base_numbers is not None else list(range(1, len(base) + 1)))}
    blocks: set[int] = set()
    why: dict[str, dict[str, list[int]]] = {}
    for side, (repeats, numbers) in sides.items():
        for number, r in zip(numbers, repeats, strict=True):
            reason = r.throttle_reason
            if reason is None:
                continue
            why.setdefault(side, {}).setdefault(reason, []).append(number)
            if r.block is not None:
                blocks.add(r.block)
    if not why:
        return tuple(head), tuple(base), (), None
    flagged = {side: {n for numbers in reasons.values() for n in numbers} for side, reasons in why.items()}
    kept: dict[str, tuple[R, ...]] = {}
    out: dict[str, int] = {}
    for side, (repeats, numbers) in sides.items():
        kept[side] = tuple(r for n, r in zip(numbers, repeats, strict=True)
                           if r.block not in blocks and n not in flagged.get(side, set()))
        out[side] = len(repeats) - len(kept[side])
    events = "; ".join(f"{side} {reason} in repeat {', '.join(map(str, numbers))}"
                       for side, reasons in why.items() for reason, numbers in reasons.items())
    shown = ", ".join(map(str, sorted(blocks)))
    left = " and ".join(f"{out[side]} of {len(sides[side][0])} {side} repeat(s)" for side in sides)
    note = (f"{left} left out: block {shown} on both sides ({events}); a block is left out whole"
            if blocks else f"{left} left out: {events}")
    unfit = None
    over = [side for side in sides if out[side] > max_left_out * len(sides[side][0]) or not kept[side]]
    if over:
        reasons = ", ".join(dict.fromkeys(reason for reasons in why.values() for reason in reasons))
        unfit = (f"runner unfit: {left} left out (block {shown}: {reasons}), more than the "
                 f"{max_left_out * 100:g}% that may be left out (max_left_out); a slowed-down repeat leaves its "
                 "whole ABBA block out on both sides; fix the runner's cooling or power, or gate elsewhere"
                 if blocks else
                 f"runner unfit: {left} slowed down ({reasons}), more than the {max_left_out * 100:g}% that may "
                 "be left out (max_left_out); fix the runner's cooling or power, or gate elsewhere")
    return kept["head"], kept["base"], (note,), unfit


def median_clock(repeats: Sequence[Repeat]) -> float | None:
    """The median of the repeats' median SM clocks (None: no repeat sampled one)."""
    clocks = [r.sm_clock_mhz for r in repeats if r.sm_clock_mhz is not None]
    return median(clocks) if clocks else None
