"""The report never contradicts its own estimate, and names a bimodal side.

Real paired A/A reports read "time per step 15.73 → 15.52 ms (+1.4% [−1.2, +4.1])": the sides
were medians over repeats, the estimate the mean of per-block log contrasts. The sides are now
the ones the estimate compares (``perfgate.report.sides``); these tests build data whose
per-side medians and estimate disagree in sign, in both designs, and read the sides back from
the markdown, the terminal and the HTML. Then the bimodality detector
(``perfgate.analysis.modes``): its rates on unimodal and two-cluster samples (fixed seed), and
the line every report prints.
"""

from __future__ import annotations

import dataclasses
import html as htmlmod
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

import numpy as np
import pytest
from factories import make_result

from perfgate.analysis.blocks import BlockValue, block_log_ratio, block_order
from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig, Look
from perfgate.analysis.modes import MIN_PROCESSES, bimodal, two_clusters
from perfgate.analysis.outcome import Entry, GateOutcome, Pairing
from perfgate.analysis.stats.estimate import log_ratio
from perfgate.analysis.stats.sequential import Schedule
from perfgate.analysis.summary import summarise
from perfgate.report.html import panels, render_html
from perfgate.report.markdown import render_markdown
from perfgate.report.sides import row_sides
from perfgate.report.terminal import gate_table, run_table
from perfgate.report.wording import modes_lines
from perfgate.store.baselines import Lookup, updated_baseline

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
FIRST = Look(6, Schedule(6, GateConfig().max_blocks))
STEP = 99.5  # ms of the factories' phases at scale 1, before the 0.2 ms residual


# ---------------------------------------------------------------------------- data


def _with_blocks(result, blocks):
    return dataclasses.replace(result, repeats=tuple(dataclasses.replace(r, block=b)
                                                     for r, b in zip(result.repeats, blocks, strict=True)))


def _paired(seed: int, blocks: int = 6, jitter: float = 0.03, base_scales=None, head_scales=None):
    """Base and head in the runner's order (ABBA, BAAB, ...), A/A: the same machine noise law on
    both arms (``jitter``, sd of log per process), unless the scales are given."""
    rng = np.random.default_rng(seed)
    b_scales, h_scales, b_blocks, h_blocks = [], [], [], []
    for j in range(blocks):
        for arm in block_order(j):
            value = math.exp(rng.normal(0, jitter))
            (b_scales if arm == "base" else h_scales).append(value)
            (b_blocks if arm == "base" else h_blocks).append(j)
    b_scales, h_scales = base_scales or b_scales, head_scales or h_scales
    base = _with_blocks(make_result(repeat_scales=b_scales, seed=seed, jitter=0.002), b_blocks)
    head = _with_blocks(make_result(repeat_scales=h_scales, seed=seed + 1000, jitter=0.002), h_blocks)
    return base, head


def _step(result) -> list[float]:
    return [r.per_step_ms["step"] for r in result.repeats]


def _paired_disagreement(base, head) -> tuple[float, float]:
    """(the paired estimate's log ratio, log of median head / median base)."""
    est = block_log_ratio([BlockValue(r.block, r.per_step_ms["step"]) for r in base.repeats],
                          [BlockValue(r.block, r.per_step_ms["step"]) for r in head.repeats])
    return math.log(est.ratio), math.log(median(_step(head)) / median(_step(base)))


def _a_a_disagreeing(sign: int) -> tuple:
    """The first seed whose A/A paired data has an estimate of sign ``sign`` and medians moving
    the other way, by more than rounding can hide (0.3% each)."""
    for seed in range(500):
        base, head = _paired(seed)
        est, medians = _paired_disagreement(base, head)
        if sign * est > 0.003 and sign * medians < -0.003:
            return base, head
    raise AssertionError("no seed gave disagreeing medians")  # pragma: no cover


def _paired_outcome(base, head) -> GateOutcome:
    return compare([Entry("aa", dataclasses.replace(head, workload="aa"), None,
                          pairing=Pairing(dataclasses.replace(base, workload="aa"), "a1b2c3d4e5f6"))],
                   GateConfig(), look=FIRST)


def _stored_outcome(current, recordings) -> GateOutcome:
    baseline = None
    for i, rec in enumerate(recordings):
        baseline = updated_baseline(baseline, rec, f"recording {i + 1}", append=True, now=NOW)
    lookup = Lookup(baseline, Path("baselines/x/tiny.json"))
    return compare([Entry("tiny", current, lookup)], GateConfig(), look=Look.single(len(current.repeats), "repeat"))


# ---------------------------------------------------------------------------- reading the formats back

_NUMBER = r"([0-9.]+(?:e[+-]?[0-9]+)?)"
_STATISTIC = re.compile(rf"time per step {_NUMBER} → {_NUMBER} ms \(([+-][0-9.]+)%")
_SAMPLES = re.compile(rf"samples/s {_NUMBER} → {_NUMBER} \(([+-][0-9.]+)%\)")


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _check_line(text: str) -> None:
    """The statistics line: time per step and samples/s move as the estimate says."""
    found = _STATISTIC.search(text)
    assert found, text
    before, after, change = (float(g) for g in found.groups())
    assert _sign(after - before) in (0, _sign(change)), found.group(0)
    sps = _SAMPLES.search(text)
    assert sps, text
    s_before, s_after, s_change = (float(g) for g in sps.groups())
    assert _sign(s_after - s_before) in (0, _sign(s_change)), sps.group(0)
    assert _sign(s_change) in (0, -_sign(change)), (found.group(0), sps.group(0))


def _check_row(before: str, after: str, change: str) -> None:
    pct = float(re.match(r"\**([+-][0-9.]+)%", change.strip()).group(1))  # type: ignore[union-attr]
    b, a = float(before.strip("* ")), float(after.strip("* "))
    assert _sign(a - b) in (0, _sign(pct)), (before, after, change)


def _markdown_rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and "% [" in line]


def _terminal_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 4 and re.match(r"[+-][0-9.]+% \[", cells[3]):
            rows.append(cells)
    return rows


def _html_rows(page: str) -> list[list[str]]:
    rows = []
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S):
        cells = [htmlmod.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        if len(cells) >= 4 and re.match(r"[+-][0-9.]+% \[", cells[3]):
            rows.append(cells)
    return rows


def _check_everywhere(outcome: GateOutcome) -> None:
    """Every format: the phase table's rows with an estimate (the step's among them) and the
    statistics line show sides that move as the estimate does; the figure's bars too."""
    c = outcome.comparisons[0]
    md = render_markdown(outcome)
    terminal = gate_table(outcome)
    page = render_html(outcome)
    for rows in (_markdown_rows(md), _terminal_rows(terminal), _html_rows(page)):
        assert any(r[0].strip("*") == "step" for r in rows)
        assert len(rows) >= 5  # the step and the phases with an estimate
        for r in rows:
            _check_row(r[1], r[2], r[3])
    _check_line(md.replace("&#91;", "[").replace("&#93;", "]"))
    _check_line(terminal)
    statistics = re.search(r'<p class="statistics">(.*?)</p>', page, re.S)
    assert statistics
    _check_line(htmlmod.unescape(statistics.group(1)))
    assert "Sides: geometric means" in md and "Sides: geometric means" in terminal and "Sides: geometric means" in page
    shown = [p for p in panels(c) if p.levels is not None]
    assert "step" in [p.row for p in shown]
    for panel in shown:  # the figure's bars: the same sides, beside the same estimate
        _check_row(f"{panel.levels[0]}", f"{panel.levels[1]}", panel.subtitle)


# ---------------------------------------------------------------------------- the sides


@pytest.mark.parametrize("sign", [1, -1])
def test_paired_a_a_sides_never_move_against_the_estimate(sign: int) -> None:
    base, head = _a_a_disagreeing(sign)
    est, medians = _paired_disagreement(base, head)
    assert _sign(est) == sign and _sign(medians) == -sign  # the medians alone would contradict the estimate
    outcome = _paired_outcome(base, head)
    c = outcome.comparisons[0]
    assert c.paired and _sign(c.time.estimate.ratio - 1) == sign
    _check_everywhere(outcome)


def test_a_paired_head_whose_medians_fall_while_its_estimate_rises() -> None:
    # eight head processes 1% faster, four 10% slower: the median falls, the paired estimate rises
    head = [0.99, 1.10, 0.99, 0.99, 0.99, 1.10, 0.99, 0.99, 1.10, 0.99, 0.99, 1.10]
    base, head_result = _paired(0, base_scales=[1.0] * 12, head_scales=head)
    c = _paired_outcome(base, head_result).comparisons[0]
    assert c.time.estimate.ratio > 1.02 and median(_step(head_result)) < median(_step(base))
    shown = row_sides(c, "step", "per_step", c.time.estimate)
    assert shown is not None and shown.after > shown.before
    # the head side is the head's own geometric mean, block by block: exactly base side × ratio
    # (up to the nine digits the base side's repeats are kept to as an in-memory baseline)
    blocks = sorted({r.block for r in head_result.repeats})
    head_level = np.mean([np.mean([math.log(r.per_step_ms["step"]) for r in head_result.repeats if r.block == b])
                          for b in blocks])
    assert shown.after == pytest.approx(math.exp(head_level), rel=1e-8)
    _check_everywhere(_paired_outcome(base, head_result))


@pytest.mark.parametrize("sign", [1, -1])
def test_stored_design_sides_never_move_against_the_estimate(sign: int) -> None:
    # three recordings of a steady baseline; the current run skewed so that its median moves
    # one way and its geometric mean (what log_ratio compares) the other
    few, many = (1.10, 0.99) if sign > 0 else (0.90, 1.01)
    current = make_result(repeat_scales=[many] * 8 + [few] * 4, seed=50, jitter=0.002)
    recordings = [make_result(repeat_scales=[1.0] * 5, seed=60 + i, jitter=0.002) for i in range(3)]
    est = log_ratio(_step(current), [_step(r) for r in recordings])
    assert _sign(est.ratio - 1) == sign
    assert _sign(median(_step(current)) - median(v for r in recordings for v in _step(r))) == -sign
    outcome = _stored_outcome(current, recordings)
    c = outcome.comparisons[0]
    assert not c.paired
    shown = row_sides(c, "step", "per_step", c.time.estimate)
    assert shown is not None
    assert shown.after == pytest.approx(math.exp(np.mean(np.log(_step(current)))), rel=1e-9)  # its own geometric mean
    _check_everywhere(outcome)


def test_a_baseline_repeat_set_aside_is_left_out_of_the_baseline_side() -> None:
    recordings = [make_result(repeat_scales=[1.0, 1.0, 1.0, 1.0, 1.0], seed=70 + i, jitter=0.002) for i in range(2)]
    recordings.append(make_result(repeat_scales=[1.0, 1.0, 1.0, 1.0, 1.5], seed=72, jitter=0.002))
    current = make_result(repeat_scales=[1.0] * 5, seed=73, jitter=0.002)
    c = _stored_outcome(current, recordings).comparisons[0]
    assert c.time.estimate.excluded_baseline == ((2, 4),)
    shown = row_sides(c, "step", "per_step", c.time.estimate)
    kept = [_step(r) for r in recordings]
    kept[2] = kept[2][:4]
    assert shown.before == pytest.approx(math.exp(np.mean([np.mean(np.log(v)) for v in kept])), rel=1e-9)


# ---------------------------------------------------------------------------- the modes detector


def _rate(draw, n: int, trials: int, rng: np.random.Generator) -> float:
    return sum(bimodal(draw(rng, n)) is not None for _ in range(trials)) / trials


UNIMODAL = {
    "normal": lambda rng, n: 20.0 + 0.4 * rng.standard_normal(n),
    "lognormal": lambda rng, n: 20.0 * np.exp(rng.normal(0.0, 0.05, n)),
    "heavy-tailed (t, 3 df)": lambda rng, n: 20.0 * np.exp(0.02 * rng.standard_t(3, n)),
}


@pytest.mark.parametrize("n", [12, 20, 30, 60])
def test_unimodal_sides_are_rarely_called_bimodal(n: int) -> None:
    rng = np.random.default_rng(20261130 + n)
    for name, draw in UNIMODAL.items():
        rate = _rate(draw, n, 1500, rng)
        assert rate < 0.01, f"{name}, {n} processes: named bimodal in {rate:.2%}"


def test_clear_two_cluster_sides_are_called_bimodal() -> None:
    rng = np.random.default_rng(7)

    def two(low: int, high: int, noise: float):
        return lambda rng, n: np.concatenate([22.5 * np.exp(rng.normal(0, noise, low)),
                                              25.5 * np.exp(rng.normal(0, noise, high))])

    assert _rate(two(9, 7, 0.01), 16, 400, rng) > 0.99
    assert _rate(two(6, 6, 0.015), 12, 400, rng) > 0.85  # modes 8 within-mode sds apart
    assert _rate(two(20, 10, 0.015), 30, 400, rng) > 0.99
    found = bimodal([22.5] * 9 + [25.5] * 7)  # no spread in either mode
    assert found is not None and (found.low_count, found.high_count) == (9, 7)
    assert found.low_ms == pytest.approx(22.5) and found.high_ms == pytest.approx(25.5)


def test_the_detector_says_nothing_it_cannot_know() -> None:
    assert two_clusters([22.5] * 4 + [25.5] * 3) is None  # fewer than MIN_PROCESSES
    assert MIN_PROCESSES == 8
    assert bimodal([20.0] * 12) is None  # one value: no second mode
    assert bimodal([22.5] * 11 + [25.5]) is None  # one slow process is an outlier, not a mode (share < 20%)
    assert two_clusters([1.0, 2.0, float("nan")] + [1.0] * 8) is None
    assert two_clusters([0.0] + [1.0] * 9) is None


# ---------------------------------------------------------------------------- the reports name it


def _bimodal_pair():
    low, high = (22.5 - 0.2) / STEP, (25.5 - 0.2) / STEP
    # an A/A pair of a bimodal workload: base 8 and 8, head 9 and 7 processes in the two modes
    base_scales = [low, high] * 8
    head_scales = [low, high] * 7 + [low, low]
    return _paired(3, blocks=8, base_scales=base_scales, head_scales=head_scales)


def test_every_report_names_a_bimodal_side() -> None:
    base, head = _bimodal_pair()
    outcome = _paired_outcome(base, head)
    c = outcome.comparisons[0]
    lines = modes_lines(c)
    assert [line.split(":")[0] for line in lines] == ["base", "head"]
    head_line = lines[1]
    assert head_line.startswith("head: bimodal time per step, 22.50 ms (9 processes) and 25.50 ms (7), 13.3% apart")
    assert head_line.endswith("the noise model assumes one mode; an undecided gate may come from it")
    assert f"⚠️ {head_line}." in render_markdown(outcome)
    assert f"  {head_line}" in gate_table(outcome)
    assert htmlmod.escape(head_line) in render_html(outcome)
    run = dataclasses.replace(head, params={**head.params, "precision": "fp32"})
    assert run_table(run, summarise(run)).count("this run: bimodal time per step, 22.50 ms (9 processes)") == 1


def test_a_unimodal_workload_gets_no_modes_line() -> None:
    base, head = _paired(5, blocks=8, jitter=0.01)
    outcome = _paired_outcome(base, head)
    assert modes_lines(outcome.comparisons[0]) == []
    assert "bimodal" not in render_markdown(outcome) + gate_table(outcome) + render_html(outcome)


def test_the_json_names_the_modes() -> None:
    from perfgate.report.json_report import outcome_to_dict

    base, head = _bimodal_pair()
    modes = outcome_to_dict(_paired_outcome(base, head))["workloads"][0]["modes"]
    assert [(m["side"], m["low_count"], m["high_count"]) for m in modes] == [("base", 8, 8), ("head", 9, 7)]
