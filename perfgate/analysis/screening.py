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


def median_clock(repeats: Sequence[Repeat]) -> float | None:
    """The median of the repeats' median SM clocks (None: no repeat sampled one)."""
    clocks = [r.sm_clock_mhz for r in repeats if r.sm_clock_mhz is not None]
    return median(clocks) if clocks else None
