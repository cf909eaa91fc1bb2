"""perfgate.analysis.decide: every verdict from constructed data, Holm, the sequential looks, the config."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from scipy import stats as st

from perfgate.analysis.decide import (
    GateConfig,
    Look,
    alpha_for_look,
    decide_time,
    flag_phases,
    level_text,
    pass_level,
)
from perfgate.analysis.memory import decide_memory
from perfgate.analysis.stats import LogRatio, confidence_interval, log_ratio, min_detectable_slowdown
from perfgate.analysis.stats.sequential import Schedule
from perfgate.model.verdict import Verdict

CFG = GateConfig(min_effect=0.0)
"""The Holm mechanics with hand-made p-values: the tests against no change (min_effect 0)."""
SCHEDULE = Schedule(6, CFG.max_blocks)
"""The paired gate's default looks: the first at 6 blocks, then one after every block up to max_blocks."""
FIRST = Look(6, SCHEDULE)
LAST = Look(CFG.max_blocks, SCHEDULE)
SINGLE = Look.single()
LEVEL1 = SCHEDULE.level(0.01, 6)
"""The first look's nominal level for a lone hypothesis (about 0.0029 of the total 0.01)."""


def est(ratio: float, p_slower: float, *, half: float = 0.02, df: float = 8.0, p_two: float | None = None) -> LogRatio:
    """A hand-made estimate: CI ratio * exp(+-half), se chosen to match."""
    return LogRatio(
        ratio=ratio,
        ci_low=ratio * math.exp(-half),
        ci_high=ratio * math.exp(half),
        p_slower=p_slower,
        p_faster=1.0 - p_slower,
        p_two_sided=p_two if p_two is not None else min(1.0, 2 * min(p_slower, 1 - p_slower)),
        se_log=half / 2.3,
        df=df,
        n_current=5,
        n_baseline=5,
        recordings=1,
        within_sd_log=0.01,
        between_sd_log=0.01,
        confidence=0.95,
    )


def runs(shift: float, sd: float = 0.01, seed: int = 0, n: int = 5) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    base = np.exp(math.log(100) + rng.normal(0, sd, n))
    cur = np.exp(math.log(100) + shift + rng.normal(0, sd, n))
    return cur, [base]


def one(estimate: LogRatio, config: GateConfig = CFG, look: Look | None = FIRST):
    return decide_time({"w": estimate}, config, look)["w"]


# --- each verdict -------------------------------------------------------------------------


def test_regression_from_data() -> None:
    d = one(log_ratio(*runs(math.log(1.10))))
    assert d.verdict is Verdict.REGRESSION
    assert re.fullmatch(
        r"time per step \+\d+\.\d% \[\+\d+\.\d, \+\d+\.\d\] \(99\.426% CI, the level of this look's test\), "
        r"p=\S+ < 0\.0029 \(Holm, look 1 of 25, 6 blocks\), above δ=3%",
        d.reason,
    ), d.reason
    assert d.alpha_used == pytest.approx(LEVEL1) and not d.goes_on
    assert (d.look, d.looks, d.count) == (1, 25, 6)
    alone = one(log_ratio(*runs(math.log(1.10))), look=SINGLE)
    assert alone.verdict is Verdict.REGRESSION and alone.alpha_used == 0.01
    assert re.search(r"\(98% CI, the level of this look's test\), p=\S+ < 0\.01 \(Holm, one look\), "
                     r"above δ=3%$", alone.reason), alone.reason
    assert (alone.look, alone.looks, alone.count) == (1, 1, 1)


def test_regression_reason_has_the_numbers() -> None:
    d = one(est(1.061, 0.0004, half=0.028))
    assert d.reason == ("time per step +6.1% [+1.4, +11.0] (99.426% CI, the level of this look's test), "
                        "p=0.0004 < 0.0029 (Holm, look 1 of 25, 6 blocks), above δ=3%")
    single = one(est(1.061, 0.0004, half=0.028), look=None)
    assert single.reason == ("time per step +6.1% [+2.4, +9.9] (98% CI, the level of this look's test), "
                             "p=0.0004 < 0.01 (Holm, one look), above δ=3%")


def test_pass_from_data() -> None:
    # Same job, no day term: with one recording and the assumed 1% day sd worth 4 df, an
    # unchanged run's 95% bound sits near +4% and only a run that came out faster passes.
    # The PASS bound is spent over the looks as α is: one-sided 0.72% at the first of 25.
    d = one(log_ratio(*runs(0.0, sd=0.003), assumed_day_sd_log=0.0))
    assert d.verdict is Verdict.PASS
    assert pass_level(CFG, FIRST) == pytest.approx(SCHEDULE.level(0.025, 6))
    assert level_text(1 - pass_level(CFG, FIRST)) == "99.283"
    assert re.search(r"\(99\.426% CI, the level of this look's test\): upper 99\.283% bound \+0\.\d% below δ=3%$",
                     d.reason), d.reason
    assert d.estimate.ci_high < d.pass_bound < 1.03
    alone = one(log_ratio(*runs(0.0, sd=0.003), assumed_day_sd_log=0.0), look=SINGLE)
    assert pass_level(CFG, SINGLE) == pytest.approx(0.025)
    assert alone.verdict is Verdict.PASS and alone.reason.endswith("below δ=3%")
    assert "upper 97.5% bound +0." in alone.reason
    assert alone.pass_bound < d.pass_bound  # the single look's bound is the narrower one


def test_improved_from_data() -> None:
    d = one(log_ratio(*runs(math.log(0.90))))
    assert d.verdict is Verdict.IMPROVED
    assert re.search(r"time per step -\d+\.\d% .* < 0\.0029 \(Holm, look 1 of 25, 6 blocks\), faster by more than "
                     r"δ=3%; consider rebaselining", d.reason), d.reason
    assert d.level_faster == pytest.approx(LEVEL1)


def test_inconclusive_measures_on_until_the_last_planned_look() -> None:
    first = one(est(1.035, 0.03, half=0.05))
    assert first.verdict is Verdict.INCONCLUSIVE and first.goes_on
    assert "not significant (p=0.03 > its Holm step's level 0.0029, look 1 of 25, 6 blocks)" in first.reason
    assert "the upper 99.283% bound +10.8% reaches above δ=3%" in first.reason
    assert re.search(r"this look could detect about \+\d+\.\d%; measuring on$", first.reason), first.reason
    later = one(est(1.035, 0.03, half=0.05), look=Look(7, SCHEDULE))
    assert later.goes_on and (later.look, later.count) == (2, 7) and later.reason.endswith("; measuring on")
    assert "look 2 of 25, 7 blocks" in later.reason
    last = one(est(1.035, 0.03, half=0.05), look=LAST)
    assert last.verdict is Verdict.INCONCLUSIVE and not last.goes_on
    assert last.reason.endswith("undecided at the last planned look (look 25 of 25, 30 blocks)")
    single = one(est(1.035, 0.03, half=0.05), look=None)
    assert single.verdict is Verdict.INCONCLUSIVE and not single.goes_on
    assert "not significant (p=0.03 > its Holm step's level 0.01, one look)" in single.reason
    assert single.reason.endswith("undecided at the last planned look (one look)")


def test_an_undetectable_slowdown_is_said_in_words() -> None:
    d = one(est(1.5, 0.2, half=3.0, df=1.0))
    assert d.verdict is Verdict.INCONCLUSIVE and d.mde == math.inf
    assert "a slowdown up to 10× is not detectable with this noise; measuring on" in d.reason
    assert "could detect about" not in d.reason


def test_significant_but_small_slowdown_passes_when_the_bound_is_below_delta() -> None:
    d = one(est(1.015, 1e-5, half=0.007))
    assert d.verdict is Verdict.PASS
    assert ("upper 99.283% bound +2.5% below δ=3%; slower (p=1.0e-05, Holm, look 1 of 25, 6 blocks) but by less "
            "than δ=3%") in d.reason


def test_significant_but_not_above_delta_is_inconclusive() -> None:
    d = one(est(1.025, 1e-4, half=0.015))
    assert d.verdict is Verdict.INCONCLUSIVE and d.goes_on
    assert "slower (p=0.0001, Holm, look 1 of 25, 6 blocks) but the estimate is not above δ=3%" in d.reason


def test_large_but_not_significant_is_not_a_regression() -> None:
    assert one(est(1.08, 0.006, half=0.07)).verdict is Verdict.INCONCLUSIVE
    assert one(est(1.08, 0.006, half=0.07), look=LAST).verdict is Verdict.INCONCLUSIVE


def test_outliers_set_aside_are_named_in_the_reason() -> None:
    cur, base = runs(math.log(1.10), seed=3)
    base[0][3] *= 1.3
    d = one(log_ratio(cur, base))
    assert d.verdict is Verdict.REGRESSION
    assert d.reason.endswith("; 1 outlier repeat set aside (baseline recording 1 #4)")


def test_a_slow_current_repeat_is_named_and_kept() -> None:
    cur, base = runs(0.0, seed=4)
    cur[2] *= 1.3
    e = log_ratio(cur, base)
    assert e.outliers_current == (2,)
    d = one(e)
    assert d.reason.endswith("; current repeat 3 looks like an outlier (kept)"), d.reason
    assert "set aside" not in d.reason


def reported(p_slower: float, ratio: float = 1.0985, df: float = 6.0) -> LogRatio:
    """An estimate whose p, interval, se and df agree (the report's numbers, rebuilt)."""
    se = math.log(ratio) / st.t.isf(p_slower, df)
    half = se * st.t.ppf(0.975, df)
    e = est(ratio, p_slower, half=half, df=df)
    return dataclasses.replace(e, se_log=se)


def printed_interval(reason: str) -> tuple[float, float]:
    low, high = re.match(r"time per step [+-]\d+\.\d% \[([+-]\d+\.\d), ([+-]\d+\.\d)\]", reason).groups()
    return float(low), float(high)


def test_the_printed_interval_has_the_level_of_the_test_beside_it() -> None:
    """A report said ``+9.8% [+3.2, +16.9] (95% CI) ... not significant (p=0.0051 > α=0.005)``:
    a 95% interval clear of 0 beside a test at 0.5% that is not significant."""
    e = reported(0.0030)
    assert e.ci_low > 1.0  # its 95% interval is clear of 0
    d = one(e)
    assert d.verdict is Verdict.INCONCLUSIVE and "not significant (p=0.003" in d.reason
    assert "(99.426% CI, the level of this look's test)" in d.reason
    low, _ = printed_interval(d.reason)
    assert low <= 0.0, d.reason  # the interval agrees with the test: it reaches 0
    assert "upper 99.283% bound +18.7% reaches above δ=3%" in d.reason  # the PASS bound, spent over the looks
    r = one(reported(0.0025))
    assert r.verdict is Verdict.REGRESSION and printed_interval(r.reason)[0] > 0.0, r.reason
    # exactly at the test's edge: the look's interval clears 1 when p < its level and only then
    level = 1 - 2 * LEVEL1
    assert confidence_interval(reported(LEVEL1 * 0.98), level)[0] > 1.0 > confidence_interval(
        reported(LEVEL1 * 1.02), level)[0]
    # the same at the single look (α = 0.01, a 98% interval)
    s = one(reported(0.0102), look=SINGLE)
    assert s.verdict is Verdict.INCONCLUSIVE and "(98% CI, the level of this look's test)" in s.reason
    assert printed_interval(s.reason)[0] <= 0.0, s.reason
    assert one(reported(0.0098), look=SINGLE).verdict is Verdict.REGRESSION


def test_the_interval_level_follows_the_holm_step() -> None:
    ests = {"a": reported(0.0002), "b": reported(0.0005), "c": reported(0.30, ratio=1.01)}
    d = decide_time(ests, CFG, FIRST)
    levels = {"a": SCHEDULE.level(0.01 / 3, 6), "b": SCHEDULE.level(0.01 / 2, 6), "c": LEVEL1}
    for name, level in levels.items():
        assert f"({level_text(1 - 2 * level)}% CI, the level of this look's test)" in d[name].reason
        assert d[name].level_slower == pytest.approx(level)
        low, high = confidence_interval(ests[name], 1 - 2 * level)
        assert printed_interval(d[name].reason) == (round((low - 1) * 100, 1), round((high - 1) * 100, 1))
    single = decide_time(ests, CFG)
    assert "(99.333% CI, the level of this look's test)" in single["a"].reason  # 1 - 2 * 0.01 / 3
    assert "(99.0% CI, the level of this look's test)" in single["b"].reason  # 1 - 2 * 0.01 / 2
    assert "(98% CI, the level of this look's test)" in single["c"].reason


# --- Holm over workloads and the sequential looks -----------------------------------------


def test_borderline_p_is_significant_alone_but_not_among_four() -> None:
    alone = decide_time({"a": est(1.08, 0.004)}, CFG)
    assert alone["a"].verdict is Verdict.REGRESSION
    assert "p=0.004 < 0.01 (Holm, one look)" in alone["a"].reason
    others = {"b": est(1.0, 0.5), "c": est(1.0, 0.5), "d": est(1.0, 0.5)}
    four = decide_time({"a": est(1.08, 0.004), **others}, CFG)
    assert four["a"].verdict is Verdict.INCONCLUSIVE
    assert "not significant (p=0.004 > its Holm step's level 0.0025, one look)" in four["a"].reason
    assert four["a"].level_slower == pytest.approx(0.0025)
    # the same at the first of the sequential looks, whose levels are smaller
    assert decide_time({"a": est(1.08, 0.002)}, CFG, FIRST)["a"].verdict is Verdict.REGRESSION
    seq = decide_time({"a": est(1.08, 0.002), **others}, CFG, FIRST)["a"]
    assert seq.verdict is Verdict.INCONCLUSIVE and seq.goes_on
    assert seq.level_slower == pytest.approx(SCHEDULE.level(0.0025, 6))


def test_holm_thresholds_step_down() -> None:
    ests = {"a": est(1.1, 0.0010), "b": est(1.1, 0.0020), "c": est(1.1, 0.30)}
    d = decide_time(ests, CFG)
    assert d["a"].verdict is Verdict.REGRESSION and "p=0.001 < 0.0033 (Holm" in d["a"].reason
    assert d["b"].verdict is Verdict.REGRESSION and "p=0.002 < 0.005 (Holm" in d["b"].reason
    assert d["c"].verdict is Verdict.INCONCLUSIVE
    # the step-down stops at the first p above its step's level: b's p is below its own
    # step's 0.005, but a's (the smallest) is above 0.01 / 3, so neither is rejected
    stopped = decide_time({"a": est(1.1, 0.0040), "b": est(1.1, 0.0045), "c": est(1.1, 0.30)}, CFG)
    assert stopped["a"].verdict is Verdict.INCONCLUSIVE and stopped["b"].verdict is Verdict.INCONCLUSIVE
    # b comes after the step that stopped Holm: it is shown at that step's level, below its p
    assert stopped["b"].level_slower == pytest.approx(0.01 / 3) and 0.0045 > stopped["b"].level_slower


def test_a_hypothesis_stopped_by_an_earlier_holm_step_says_so() -> None:
    """b (p = 0.0055) fails Holm's first step (0.005); a (p = 0.006) is below its own step's
    0.01 but is not rejected, as the step-down stopped: its reason must not claim p > 0.01."""
    d = decide_time({"a": est(1.1, 0.006), "b": est(1.1, 0.0055)}, CFG)
    assert d["a"].verdict is Verdict.INCONCLUSIVE
    assert "p=0.006 > its Holm step's level 0.01" not in d["a"].reason, d["a"].reason
    assert "p=0.006 > its Holm step's level 0.005" in d["a"].reason, d["a"].reason


def test_alpha_is_spent_over_the_planned_looks() -> None:
    assert alpha_for_look(CFG, SINGLE) == 0.01 == alpha_for_look(CFG, Look.single(6))
    levels = [alpha_for_look(CFG, Look(c, SCHEDULE)) for c in SCHEDULE.counts]
    assert len(levels) == SCHEDULE.looks == 25
    assert levels[0] == pytest.approx(LEVEL1) and all(0 < x < 0.01 for x in levels)
    with pytest.raises(ValueError, match="no planned look at 5 blocks"):
        Look(5, SCHEDULE)
    with pytest.raises(ValueError, match="no planned look at 31 blocks"):
        Look(31, SCHEDULE)
    e = est(1.08, 0.007)
    assert one(e, look=SINGLE).verdict is Verdict.REGRESSION
    assert "(Holm, one look)" in one(e, look=SINGLE).reason
    assert one(e, look=FIRST).verdict is Verdict.INCONCLUSIVE
    assert one(e, look=LAST).verdict is Verdict.INCONCLUSIVE


def test_correlated_looks_spend_alpha_by_a_boundary() -> None:
    """The looks hold each other's blocks, so a boundary spends exactly α over them with every
    level well above Bonferroni's α / 25; the spending function's γ says how early."""
    levels = [SCHEDULE.level(0.01, c) for c in SCHEDULE.counts]
    assert min(levels) > 0.01 / len(levels) * 2
    assert sum(levels) > 0.01  # correlated looks: the levels add up to more than is spent
    e = est(1.08, 0.0025)
    d = one(e)
    assert d.verdict is Verdict.REGRESSION, d.reason
    assert d.alpha_used == pytest.approx(LEVEL1)
    assert f"p=0.0025 < {d.alpha_used:.2g} (Holm, look 1 of 25, 6 blocks)" in d.reason
    assert d.level_slower == pytest.approx(LEVEL1)
    # γ = -4 (close to O'Brien and Fleming's boundary) spends little early: the same p waits
    late = Schedule(6, 30, gamma=-4.0)
    assert late.level(0.01, 6) < 0.0025 < LEVEL1
    waits = one(e, look=Look(6, late))
    assert waits.verdict is Verdict.INCONCLUSIVE and waits.goes_on
    assert waits.alpha_used == pytest.approx(late.level(0.01, 6))


def test_holm_steps_use_the_boundary_at_each_step_level() -> None:
    """Step s compares with the boundary for alpha / s, not the boundary for alpha over s:
    the looks are less alike far in the tail, so the latter would overspend."""
    ests = {"a": est(1.1, 0.0001), "b": est(1.1, 0.0005), "c": est(1.1, 0.30)}
    d = decide_time(ests, CFG, LAST)
    step1, step2 = SCHEDULE.level(0.01 / 3, 30), SCHEDULE.level(0.01 / 2, 30)
    assert step1 < SCHEDULE.level(0.01, 30) / 3
    assert d["a"].verdict is Verdict.REGRESSION and f"< {step1:.2g} (Holm" in d["a"].reason
    assert d["b"].verdict is Verdict.REGRESSION and f"< {step2:.2g} (Holm" in d["b"].reason
    assert d["c"].verdict is Verdict.INCONCLUSIVE
    assert d["c"].mde == pytest.approx(min_detectable_slowdown(ests["c"], step1, 0.8))


def test_a_later_look_keeps_the_whole_family_with_decided_workloads_at_p_one() -> None:
    later = Look(7, SCHEDULE)
    e = est(1.08, 0.0010)
    assert decide_time({"a": e}, CFG, later)["a"].verdict is Verdict.REGRESSION
    d = decide_time({"a": e, "b": est(1.2, 1e-6)}, CFG, later, already_decided={"b", "c", "d"})
    assert set(d) == {"a"}  # decided workloads get no new decision
    assert d["a"].verdict is Verdict.INCONCLUSIVE and d["a"].goes_on  # 0.001 > its level for 0.01 / 4
    assert d["a"].reason.endswith("measuring on")
    assert d["a"].level_slower == pytest.approx(SCHEDULE.level(0.01 / 4, 7))
    last = decide_time({"a": e, "b": est(1.2, 1e-6)}, CFG, LAST, already_decided={"b", "c", "d"})
    assert last["a"].verdict is Verdict.INCONCLUSIVE and not last["a"].goes_on
    assert last["a"].reason.endswith("undecided at the last planned look (look 25 of 25, 30 blocks)")
    assert decide_time({}, CFG, FIRST) == {}


def test_mde_is_reported_at_the_first_holm_step() -> None:
    e = log_ratio(*runs(0.02, sd=0.02))
    d = decide_time({"a": e, "b": e}, CFG, FIRST)["a"]
    assert d.mde == pytest.approx(min_detectable_slowdown(e, SCHEDULE.level(0.01 / 2, 6), 0.8))
    assert d.mde > one(e).mde


def test_alpha_is_reachable_with_five_repeats_for_eight_workloads() -> None:
    """Eight clear 12% slowdowns, 5 vs 5 repeats, one recording, defaults: all caught at one
    look (results judged on disk), and at the stored gate's first look none passes."""
    rng = np.random.default_rng(42)
    ests = {}
    for w in range(8):
        base = np.exp(rng.normal(math.log(100), 0.01, 5))
        cur = np.exp(rng.normal(math.log(112), 0.01, 5))
        ests[f"w{w}"] = log_ratio(cur, [base])
    decisions = decide_time(ests, CFG, Look.single(5, "repeat"))
    assert all(d.verdict is Verdict.REGRESSION for d in decisions.values()), [d.reason for d in decisions.values()]
    smallest_level = alpha_for_look(CFG, SINGLE) / 8
    assert max(e.p_slower for e in ests.values()) < smallest_level
    # an exact rank test could not: 5 vs 5 has 252 orderings, so its one-sided p >= 1/252
    floor = st.mannwhitneyu(np.arange(5) + 10, np.arange(5), alternative="greater", method="exact").pvalue
    assert floor == pytest.approx(1 / 252) and floor > smallest_level
    stored = Schedule(5, CFG.max_blocks)
    first = decide_time(ests, CFG, Look(5, stored, "repeat"))
    assert all(d.verdict is Verdict.REGRESSION or d.goes_on for d in first.values())
    assert sum(d.verdict is Verdict.REGRESSION for d in first.values()) >= 4
    assert floor > stored.level(0.01, 5)  # even alone, a rank test could not decide at the first look


# --- config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("alpha", 0.0), ("alpha", 0.6), ("alpha", math.nan), ("delta", 0.0), ("delta", 1.5),
        ("confidence", 1.0), ("max_blocks", 1), ("max_blocks", 10_001), ("max_blocks", True),
        ("max_blocks", 6.0), ("spending_gamma", math.nan), ("spending_gamma", 41.0), ("spending_gamma", "1"),
        ("inconclusive", "maybe"), ("inconclusive", None), ("power", 0.0),
        ("phase_q", 1.0), ("phase_min_share", -0.1), ("memory_threshold", 0.0),
        ("assumed_day_sd_log", -0.01), ("assumed_day_sd_log", math.inf), ("day_prior_df", -1.0),
        ("outlier_sd", 0.0), ("gate_phases", "forward"), ("gate_phases", (1,)),
        ("fail_on_missing_baseline", "yes"),
    ],
)
def test_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"GateConfig\.{field} "):
        GateConfig(**{field: value})


def test_the_two_look_fields_are_gone() -> None:
    for field in ("looks", "second_look_repeats"):
        with pytest.raises(TypeError):
            GateConfig(**{field: 2})


def test_config_defaults_and_coercion() -> None:
    c = GateConfig(gate_phases=["forward", "backward"], outlier_sd=None, day_prior_df=math.inf)  # type: ignore[arg-type]
    assert c.gate_phases == ("forward", "backward")
    assert (CFG.alpha, CFG.delta, CFG.confidence, CFG.max_blocks, CFG.phase_q) == (0.01, 0.03, 0.95, 30, 0.10)
    assert (CFG.spending_gamma, CFG.inconclusive, CFG.inconclusive_bound, CFG.green_bound) == (1.0, "bound", None, 0.06)
    assert (CFG.phase_min_share, CFG.memory_threshold, CFG.assumed_day_sd_log) == (0.01, 0.10, 0.01)
    with pytest.raises(AttributeError):
        CFG.alpha = 0.05  # type: ignore[misc]


# --- phases -------------------------------------------------------------------------------


def test_phases_are_flagged_by_benjamini_hochberg() -> None:
    phases = {
        "data_wait": est(1.30, 0.0, p_two=0.001),
        "forward": est(1.02, 0.0, p_two=0.04),
        "backward": est(0.99, 0.0, p_two=0.6),
        "optimizer": est(1.01, 0.0, p_two=0.045),
        "h2d": est(1.5, 0.0, p_two=0.0001),
        "missing": None,
    }
    shares = {"data_wait": 0.2, "forward": 0.3, "backward": 0.4, "optimizer": 0.09, "h2d": 0.004}
    flags = flag_phases(phases, 0.10, baseline_shares=shares, min_share=0.01)
    # tested: data_wait, forward, backward, optimizer -> BH q: 0.004, 0.06, 0.6, 0.06
    assert flags["data_wait"].flagged and flags["data_wait"].q_value == pytest.approx(0.004)
    assert flags["forward"].flagged and flags["optimizer"].flagged
    assert not flags["backward"].flagged and flags["backward"].tested
    assert flags["data_wait"].reason.startswith("data_wait +30.0% [") and "slower (BH q=0.004 <= 0.1)" in flags["data_wait"].reason
    assert not flags["h2d"].tested and not flags["h2d"].flagged
    assert flags["h2d"].reason == "not tested: 0.4% of the baseline step, below the 1% floor"
    assert not flags["missing"].tested and "no estimate" in flags["missing"].reason
    strict = flag_phases(phases, 0.05, baseline_shares=shares)
    assert strict["data_wait"].flagged and not strict["forward"].flagged


# --- memory -------------------------------------------------------------------------------


def test_memory_growth_above_threshold_is_a_regression() -> None:
    d = decide_memory([1150.0, 1150.0, 1151.0], [1000.0, 1001.0, 999.0], 0.10)
    assert d.verdict is Verdict.REGRESSION and d.ratio == pytest.approx(1.15)
    assert d.reason == "peak memory +15.0% (median of 3 vs 3 repeats), above the 10% threshold"
    ok = decide_memory([1050.0], [1000.0], 0.10)
    assert ok.verdict is Verdict.PASS and "within the 10% threshold" in ok.reason
    assert decide_memory([800.0], [1000.0]).verdict is Verdict.PASS


def test_missing_memory_is_not_a_verdict() -> None:
    for cur, base, where in (([], [1.0], "current run"), ([1.0], None, "baseline")):
        d = decide_memory(cur, base)
        assert d.verdict is None and d.ratio is None and where in d.reason
    assert decide_memory([1.0], [0.0]).verdict is None
    with pytest.raises(ValueError):
        decide_memory([-1.0], [1.0])


# --- the step's two statistics ------------------------------------------------------------


def _both(per_step: LogRatio, median_step: LogRatio):
    from perfgate.analysis.decide import FamilyKey, combine_statistics, family_keys

    step, median = family_keys("w", ())
    assert (step, median) == (FamilyKey("w", "per_step"), FamilyKey("w", "median"))
    d = decide_time({step: per_step, median: median_step}, CFG, FIRST)
    return combine_statistics([d[step], d[median]])


def test_the_family_keys_are_typed_and_read_as_before() -> None:
    from perfgate.analysis.decide import FamilyKey, family_keys

    keys = family_keys("resnet18", ("forward",))
    assert [str(k) for k in keys] == ["resnet18", "resnet18@median", "resnet18:forward"]
    assert [k.words() for k in keys] == ["time per step", "median step", "forward per step"]
    # a key's statistic is a field, never parsed back out of a name that happens to hold "@median"
    odd = FamilyKey("w@median")
    assert odd.statistic == "per_step" and odd.words() == "time per step"


def test_pass_is_the_time_per_steps_bound_alone_with_the_median_a_regression_detector() -> None:
    """PASS needs the time per step's upper bound below δ and no REGRESSION of the median
    step: a median step whose bound reaches above δ no longer keeps unchanged code undecided."""
    tight, wide = est(1.0, 0.5, half=0.005), est(1.01, 0.3, half=0.09)
    d = _both(tight, wide)
    assert d.verdict is Verdict.PASS and d.statistic == "per_step"
    assert "median step +1.0% (inconclusive, shown, not required to pass)" in d.reason
    # the median's REGRESSION still fails the step, whatever the time per step says
    slow_median = est(1.2, 1e-9, half=0.01)
    assert _both(tight, slow_median).verdict is Verdict.REGRESSION
    assert _both(tight, slow_median).statistic == "median"
    # the time per step undecided: so is the step, whatever the median's bound
    assert _both(wide, tight).verdict is Verdict.INCONCLUSIVE


def test_a_regression_must_be_significant_beyond_min_effect_times_delta() -> None:
    """min_effect 0.5 (the default): the test's null reaches up to δ/2, so +3.5% measured to a
    1.2% standard error is significant against no change (p ≈ 0.005) but not beyond +1.5%
    (p ≈ 0.06), while +6% is; the reason names the threshold, the printed interval clears it."""
    config = GateConfig()
    assert config.min_effect == 0.5
    precise = LogRatio(ratio=1.035, ci_low=1.0, ci_high=1.1, p_slower=1e-9, p_faster=1.0, p_two_sided=2e-9,
                       se_log=0.012, df=20.0, n_current=10, n_baseline=10, recordings=1, within_sd_log=0.01,
                       between_sd_log=0.0, confidence=0.95)
    d = decide_time({"w": precise}, config, SINGLE)["w"]
    assert d.verdict is Verdict.INCONCLUSIVE
    plain = decide_time({"w": precise}, GateConfig(min_effect=0.0), SINGLE)["w"]
    assert plain.verdict is Verdict.REGRESSION  # against no change it would have failed
    far = dataclasses.replace(precise, ratio=1.06)
    d = decide_time({"w": far}, config, SINGLE)["w"]
    assert d.verdict is Verdict.REGRESSION and "for a slowdown of more than 1.5% (Holm, one look), above δ=3%" in d.reason
    low = float(re.search(r"\[\+(\d+\.\d),", d.reason).group(1))
    assert low > 1.5
    with pytest.raises(ValueError, match="GateConfig.min_effect must be in"):
        GateConfig(min_effect=1.0)


def test_a_stored_looks_levels_follow_its_information_not_its_count() -> None:
    """A stored estimate whose variance is mostly the baseline's and the day's: more current
    repeats add little, so the first look already spends nearly all of α; a paired-like one
    (all of its variance in the current repeats) spends by the count, as a z schedule does."""
    from perfgate.analysis.decide import information

    schedule = Schedule(5, 30, pivot="information")
    counted = Schedule(5, 30)
    day_bound = dataclasses.replace(est(1.0, 0.5), se_log=0.015, current_sd_log=0.01, n_current=5)
    fractions = information(day_bound, schedule.counts)
    assert fractions is not None and fractions[0] > 0.9 and fractions[-1] == 1.0
    first = decide_time({"w": day_bound}, CFG, Look(5, schedule, "repeat"))["w"]
    assert first.alpha_used > 0.009 > counted.level(0.01, 5) * 3
    current_bound = dataclasses.replace(day_bound, se_log=0.01 / math.sqrt(5))
    same = decide_time({"w": current_bound}, CFG, Look(5, schedule, "repeat"))["w"]
    assert same.alpha_used == pytest.approx(counted.level(0.01, 5), rel=0.05)
