"""Variance components of the nested design (perfgate.analysis.stats.components), on seeded synthetic data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfgate.analysis.stats.components import LEVELS, Components, Window, components, paired_components

TRUE = {"block_sd": 0.03, "process_sd": 0.05, "window_sd": 0.03, "step_sd": 0.04}


def synthetic(seed: int, *, blocks: int = 8, processes: int = 8, windows: int = 6, steps: int = 20,
              unbalanced: bool = False, sds: dict[str, float] = TRUE, per_step: bool = True) -> list[Window]:
    """Log-normal step times with a known sd at each level; unbalanced: 2..processes processes
    per block, 1..windows windows per process, 5..steps steps per window."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(blocks):
        eb = rng.normal(0.0, sds["block_sd"])
        for p in range(int(rng.integers(2, processes + 1)) if unbalanced else processes):
            ep = rng.normal(0.0, sds["process_sd"])
            for w in range(int(rng.integers(1, windows + 1)) if unbalanced else windows):
                ew = rng.normal(0.0, sds["window_sd"])
                n = int(rng.integers(5, steps + 1)) if unbalanced else steps
                times = 40.0 * np.exp(eb + ep + ew + rng.normal(0.0, sds["step_sd"], n))
                out.append(Window(b, p, w, n, float(times.mean()), tuple(float(t) for t in times) if per_step else None))
    return out


def _within(c: Components, field: str, low: float, high: float) -> None:
    value = getattr(c, field)
    assert value is not None, field
    assert low * TRUE[field] <= value <= high * TRUE[field], (field, value)


@pytest.mark.parametrize("unbalanced", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_recovers_known_sds(seed: int, unbalanced: bool) -> None:
    c = components(synthetic(seed, unbalanced=unbalanced))
    _within(c, "step_sd", 0.9, 1.1)
    _within(c, "window_sd", 0.7, 1.4)
    _within(c, "process_sd", 0.5, 1.6)
    assert c.block_sd is not None and c.block_sd <= 3 * TRUE["block_sd"]
    assert c.balanced is (not unbalanced)
    assert c.blocks == 8


@pytest.mark.parametrize("unbalanced", [False, True])
def test_variances_are_unbiased_on_average(unbalanced: bool) -> None:
    # The method of moments is unbiased for the variances; over 20 designs their mean is
    # within a quarter of the truth (the window value is the log of a mean, a hair above).
    cs = [components(synthetic(seed, unbalanced=unbalanced)) for seed in range(20)]
    for field in ("process_sd", "window_sd", "step_sd"):
        mean_var = float(np.mean([getattr(c, field) ** 2 for c in cs]))
        assert 0.75 <= mean_var / TRUE[field] ** 2 <= 1.25, (field, mean_var)


def test_balanced_case_is_the_nested_anova() -> None:
    ws = synthetic(3, blocks=4, processes=3, windows=4, steps=10)
    c = components(ws)
    logs = np.log([[[[t for t in w.step_times] for w in ws if w.block == b and w.process == p]  # type: ignore[union-attr]
                     for p in range(3)] for b in range(4)])  # blocks × processes × windows × steps
    x = np.log([[[w.time_per_step for w in ws if w.block == b and w.process == p] for p in range(3)] for b in range(4)])
    ms_s = float(((logs - logs.mean(axis=3, keepdims=True)) ** 2).sum() / (4 * 3 * 4 * 9))
    ms_w = float(((x - x.mean(axis=2, keepdims=True)) ** 2).sum() / (4 * 3 * 3))
    pm = x.mean(axis=2)
    ms_p = float(((pm - pm.mean(axis=1, keepdims=True)) ** 2).sum() / (4 * 2))
    bm = pm.mean(axis=1)
    ms_b = float(((bm - bm.mean()) ** 2).sum() / 3)
    assert c.step_sd == pytest.approx(math.sqrt(ms_s))
    assert c.window_sd == pytest.approx(math.sqrt(max(ms_w - ms_s / 10, 0)))
    assert c.process_sd == pytest.approx(math.sqrt(max(ms_p - ms_w / 4, 0)))
    assert c.block_sd == pytest.approx(math.sqrt(max(ms_b - ms_p / 3, 0)))
    assert (c.block_df, c.process_df, c.window_df, c.step_df) == (3, 8, 36, 432)
    assert (c.blocks, c.processes, c.windows, c.steps) == (4, 12, 48, 480)


def test_missing_levels_are_none_never_zero() -> None:
    one_block = components(synthetic(0, blocks=1))
    assert one_block.block_sd is None and one_block.process_sd is not None
    one_window = components(synthetic(0, windows=1))
    assert one_window.window_sd is None and one_window.process_sd is not None and one_window.step_sd is not None
    # the windows' variation is held by the process level then
    assert one_window.process_sd > TRUE["process_sd"] * 0.8
    no_steps = components(synthetic(0, per_step=False))
    assert no_steps.step_sd is None and no_steps.window_sd is not None
    one_process = components(synthetic(0, processes=1))
    assert one_process.process_sd is None and one_process.block_sd is not None
    text = one_window.describe()
    assert "between windows not estimated (one window per process)" in text
    assert "between steps not estimated" in no_steps.describe()
    assert "between blocks" not in one_block.describe()  # one group: nothing to say
    # variance_of_mean counts a level not estimated as 0 (the level above holds it)
    assert one_window.variance_of_mean(1, 10, 20) == pytest.approx(
        one_window.process_sd ** 2 + one_window.step_sd ** 2 / 200)  # type: ignore[operator]


def test_negative_estimate_is_clamped_and_named() -> None:
    # Every process has the same mean of its windows: the process sum of squares is 0, less
    # than the windows alone would give, so the moment estimate is negative.
    ws = []
    for b in range(2):
        for p in range(4):
            for w, v in enumerate((9.0, 11.0) if p % 2 else (11.0, 9.0)):
                ws.append(Window(b, p, w, 10, v))
    c = components(ws)
    assert "process" in c.clamped and set(c.clamped) <= set(LEVELS)
    assert c.process_sd == 0.0
    assert "between processes 0% (negative estimate set to 0)" in c.describe()
    assert c.window_sd is not None and c.window_sd > 0 and "window" not in c.clamped


def test_describe_is_one_short_line() -> None:
    c = components(synthetic(1, blocks=1, processes=12, windows=12, steps=20))
    text = c.describe()
    assert "\n" not in text
    assert text.startswith("between processes ")
    assert text.endswith("(12 processes × 12 windows × 20 steps)")
    assert "between windows " in text and "between steps " in text
    assert "unbalanced" in components(synthetic(1, unbalanced=True)).describe()


def test_variance_of_mean() -> None:
    c = Components(0.01, 0.04, 0.03, 0.02, 2, 8, 16, 320, True)
    assert c.variance_of_mean(1, 1, 1) == pytest.approx(0.04**2 + 0.03**2 + 0.02**2)
    assert c.variance_of_mean(2, 3, 10) == pytest.approx((0.04**2 + 0.03**2 / 3 + 0.02**2 / 30) / 2)
    for bad in ((0, 1, 1), (1, 0, 1), (1, 1, 1.5)):
        with pytest.raises(ValueError, match="positive integer"):
            c.variance_of_mean(*bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("windows, match", [
    ([], "no windows"),
    ([Window(0, 0, 0, 10, 0.0)], "finite and > 0"),
    ([Window(0, 0, 0, 10, -1.0)], "finite and > 0"),
    ([Window(0, 0, 0, 10, math.nan)], "finite and > 0"),
    ([Window(0, 0, 0, 10, math.inf)], "finite and > 0"),
    ([Window(0, 0, 0, 2, 1.0, (1.0, math.nan))], "a step time"),
    ([Window(0, 0, 0, 2, 1.0, (1.0, 0.0))], "a step time"),
    ([Window(0, 0, 0, 3, 1.0, (1.0, 1.0))], "2 step times for 3 steps"),
    ([Window(0, 0, 0, 0, 1.0)], "steps must be a positive integer"),
    ([Window(0, 0, 0, 2, 1.0), Window(0, 0, 0, 2, 1.1)], "given twice"),
    ([Window(0, 0, 0, 2, 1.0, side="base"), Window(0, 0, 1, 2, 1.1)], "on every window or on none"),
])
def test_bad_input_raises_one_line(windows: list[Window], match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        components(windows)
    assert "\n" not in str(err.value)


def test_paired_removes_each_sides_mean_before_the_blocks() -> None:
    # Head is 20% slower throughout; the blocks themselves barely differ. Without the sides
    # the head-vs-base difference would look like a big between-cell effect.
    rng = np.random.default_rng(7)
    values: dict[int, dict[str, list[list[float]]]] = {}
    for b in range(10):
        eb = rng.normal(0.0, 0.005)
        values[b] = {side: [list(40.0 * (1.2 if side == "head" else 1.0)
                                 * np.exp(eb + rng.normal(0.0, 0.03) + rng.normal(0.0, 0.01, 4)))
                            for _ in range(2)] for side in ("base", "head")}
    c = paired_components(values, steps=20)
    assert c.paired and c.step_sd is None
    assert c.blocks == 10 and c.processes == 40 and c.windows == 160 and c.steps == 3200
    assert c.block_sd is not None and c.block_sd < 0.03
    assert c.process_sd is not None and 0.015 < c.process_sd < 0.05
    assert c.window_sd is not None and 0.005 < c.window_sd < 0.02
    assert "each side's mean removed" in c.describe()
    # the same windows without their sides: the 20% shows up between the (block) units
    flat = [Window(b, (side, p), k, 20, v) for b, sides in values.items() for side, ps in sides.items()
            for p, ws in enumerate(ps) for k, v in enumerate(ws)]
    assert components(flat).process_sd > 0.05  # type: ignore[operator]
    with pytest.raises(ValueError, match="no window values"):
        paired_components({}, steps=20)
