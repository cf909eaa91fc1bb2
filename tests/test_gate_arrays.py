"""perfgate.analysis.gate_arrays: the paired rule on arrays agrees with the real driver, verdict for verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from perfgate.analysis.driver import drive, schedule_for
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.gate_arrays import (
    IMPROVED,
    INCONCLUSIVE,
    PASS,
    REGRESSION,
    TOO_NOISY,
    PairedDraws,
    draw_paired,
    head_mask,
    paired_verdicts,
)

NAMES = {INCONCLUSIVE: "INCONCLUSIVE", PASS: "PASS", REGRESSION: "REGRESSION", IMPROVED: "IMPROVED", TOO_NOISY: "TOO_NOISY"}
"""The array verdict codes by name (``perfgate.model.verdict.Verdict``)."""
from perfgate.analysis.outcome import Entry, Pairing
from perfgate.analysis.simulate import AGAINST, _Repeat, _repeat_result, _run_result
from perfgate.model.result import RepeatResult
from perfgate.model.workload import PHASES


def _series(mean_ms: float, median_ms: float) -> dict[str, tuple[float, ...]]:
    """Three steps whose mean is ``mean_ms`` and median ``median_ms`` exactly (phases left at 0)."""
    if mean_ms >= median_ms:
        steps = (median_ms, median_ms, 3 * mean_ms - 2 * median_ms)
    else:
        steps = (3 * mean_ms - 2 * median_ms, median_ms, median_ms)
    assert min(steps) > 0
    return {**{p: (0.0, 0.0, 0.0) for p in PHASES}, "step": steps}


class _Replayed:
    """The draws of one gate served to the real driver as measured blocks."""

    unit = "block"

    def __init__(self, draws: PairedDraws, gate: int) -> None:
        _, workloads, blocks = draws.shape
        heads = head_mask(blocks)
        self.names = [f"w{i}" for i in range(workloads)]
        self.blocks = blocks
        self.sides: dict[str, dict[str, list[RepeatResult]]] = {}
        for w, name in enumerate(self.names):
            sides: dict[str, list[RepeatResult]] = {"head": [], "base": []}
            for b in range(blocks):
                for k in range(4):
                    arm = "head" if heads[b, k] else "base"
                    mean, med = math.exp(draws.per_step[gate, w, b, k]), math.exp(draws.median[gate, w, b, k])
                    r = _Repeat(mean, False, b, _series(mean, med))
                    sides[arm].append(_repeat_result(len(sides[arm]), r, False))
            self.sides[name] = sides

    def measure(self, names: Sequence[str], upto: int) -> None:
        pass

    def available(self, name: str) -> int:
        return self.blocks

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        def upto(repeats: list[RepeatResult]):
            return _run_result("x", [], False, [r for r in repeats if r.block < count])

        out = []
        for n in names:
            head, base = upto(self.sides[n]["head"]), upto(self.sides[n]["base"])
            out.append(Entry(n, _named(head, n), None,
                             pairing=Pairing(_named(base, n), AGAINST)))
        return out

    def seconds_per_unit(self, names: Sequence[str]) -> float | None:
        return None

    def notes(self, name: str) -> tuple[str, ...]:
        return ()


def _named(result, name: str):
    import dataclasses

    return dataclasses.replace(result, workload=name)


def _real(draws: PairedDraws, gate: int, config: GateConfig, first: int) -> tuple[list[str], list[int]]:
    strategy = _Replayed(draws, gate)
    driven = drive(strategy, strategy.names, config, schedule_for(config, first, "block"))
    verdicts = [c.verdict.value for c in driven.outcome.comparisons]
    counts = [c.time.count if c.time is not None else -1 for c in driven.outcome.comparisons]
    return verdicts, counts


CELLS = [
    # (gates, workloads, first, max_blocks, sd, rho, slowdown, skew, slow steps)
    (120, 3, 2, 12, 0.05, 0.5, 0.0, 0.0, 0.01),
    (120, 1, 6, 14, 0.08, 0.0, 0.03, 0.02, 0.0),
    (140, 2, 3, 10, 0.03, 0.9, 0.06, 0.0, 0.01),
    (140, 3, 4, 9, 0.05, 1.0, -0.05, 0.0, 0.0),
]


@pytest.mark.slow
@pytest.mark.parametrize("cell", CELLS, ids=lambda c: f"W{c[1]}-first{c[2]}-rho{c[5]}-slow{c[6]}")
def test_the_array_rule_is_the_drivers_verdict_for_verdict(cell: tuple) -> None:
    """520 gates over four cells (every verdict, ties of the two statistics at ρ = 1, skewed
    heads, slow steps, first looks of 2 to 6 blocks): the same verdict and the same look."""
    gates, workloads, first, max_blocks, sd, rho, slowdown, skew, slow = cell
    config = GateConfig(max_blocks=max_blocks, delta=0.03)
    rng = np.random.default_rng(sum(int(abs(x) * 1000) for x in cell) + 7)
    draws = draw_paired(rng, gates, workloads, max_blocks, sd=sd, rho=rho, slowdown=slowdown, skew_rate=skew,
                        slow_step_rate=slow)
    arrays = paired_verdicts(draws, config, schedule_for(config, first, "block"))
    seen: set[str] = set()
    for g in range(gates):
        verdicts, counts = _real(draws, g, config, first)
        expected = [NAMES[int(v)] for v in arrays.verdict[g]]
        assert verdicts == expected, (g, verdicts, expected)
        assert counts == arrays.count[g].tolist(), (g, counts, arrays.count[g])
        seen.update(verdicts)
    assert len(seen) >= 2  # each cell reaches more than one verdict


def test_draws_hold_the_head_log_mean_where_the_slowdown_puts_it() -> None:
    rng = np.random.default_rng(0)
    d = draw_paired(rng, 4000, 1, 6, sd=0.05, slowdown=0.03, skew_rate=0.02, skew_factor=1.3)
    step, _ = d.contrasts()
    assert float(step.mean()) == pytest.approx(math.log1p(0.03), abs=0.002)
    # skewed: the contrasts' third moment is positive
    centred = step - step.mean()
    assert float((centred ** 3).mean()) > 0
    with pytest.raises(ValueError, match="rho must lie"):
        draw_paired(rng, 1, 1, 2, rho=1.5)
