"""perfgate.analysis.decide: every verdict from constructed data, Holm, the two looks, the config."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from scipy import stats as st

from perfgate.analysis.decide import GateConfig, alpha_for_look, decide_memory, decide_time, flag_phases
from perfgate.analysis.stats import (
    LogRatio,
    confidence_interval,
    log_ratio,
    min_detectable_slowdown,
    two_look_error,
    two_look_levels,
)
from perfgate.model.verdict import Verdict

CFG = GateConfig()


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


def one(estimate: LogRatio, config: GateConfig = CFG, look: int = 1):
    return decide_time({"w": estimate}, config, look)["w"]


# --- each verdict -------------------------------------------------------------------------


def test_regression_from_data() -> None:
    d = one(log_ratio(*runs(math.log(1.10))))
    assert d.verdict is Verdict.REGRESSION
    assert re.fullmatch(
        r"time per step \+\d+\.\d% \[\+\d+\.\d, \+\d+\.\d\] \(99\.0% CI, the level of this look's test\), p=\S+ < 0\.005 "
        r"\(Holm, look 1 of 2\), above δ=3%",
        d.reason,
    ), d.reason
    assert d.alpha_used == 0.005 and not d.second_look


def test_regression_reason_has_the_numbers() -> None:
    d = one(est(1.061, 0.0004, half=0.028))
    assert d.reason == ("time per step +6.1% [+1.9, +10.5] (99.0% CI, the level of this look's test), p=0.0004 < 0.005 "
                        "(Holm, look 1 of 2), above δ=3%")


def test_pass_from_data() -> None:
    # Same job, no day term: with one recording and the assumed 1% day sd worth 4 df, an
    # unchanged run's 95% bound sits near +4% and only a run that came out faster passes.
    # The PASS bound is spent over the two looks: one-sided 1.25% each (98.75%).
    d = one(log_ratio(*runs(0.0, sd=0.003), assumed_day_sd_log=0.0))
    assert d.verdict is Verdict.PASS
    assert re.search(r"\(99\.0% CI, the level of this look's test\): upper 98\.75% bound \+0\.\d% below δ=3%$",
                     d.reason), d.reason
    assert d.estimate.ci_high < d.pass_bound < 1.03


def test_improved_from_data() -> None:
    d = one(log_ratio(*runs(math.log(0.90))))
    assert d.verdict is Verdict.IMPROVED
    assert re.search(r"time per step -\d+\.\d% .* < 0\.005 \(Holm, look 1 of 2\), faster by more than δ=3%; consider rebaselining", d.reason)


def test_inconclusive_plans_one_second_look_then_stops() -> None:
    first = one(est(1.035, 0.03, half=0.05))
    assert first.verdict is Verdict.INCONCLUSIVE and first.second_look
    assert "not significant (p=0.03, Holm-adjusted 0.03 > α=0.005, look 1 of 2)" in first.reason
    assert "the upper 98.75% bound +9.9% reaches above δ=3%" in first.reason
    assert re.search(r"this run could detect about \+\d+\.\d%; second look planned$", first.reason)
    last = one(est(1.035, 0.03, half=0.05), look=2)
    assert last.verdict is Verdict.INCONCLUSIVE and not last.second_look
    assert last.reason.endswith("undecided after look 2 of 2")


def test_an_undetectable_slowdown_is_said_in_words() -> None:
    d = one(est(1.5, 0.2, half=3.0, df=1.0))
    assert d.verdict is Verdict.INCONCLUSIVE and d.mde == math.inf
    assert "a slowdown up to 10× is not detectable with this noise; second look planned" in d.reason
    assert "could detect about" not in d.reason


def test_significant_but_small_slowdown_passes_when_the_bound_is_below_delta() -> None:
    d = one(est(1.015, 1e-5, half=0.007))
    assert d.verdict is Verdict.PASS
    assert "upper 98.75% bound +2.4% below δ=3%; slower (p=1.0e-05, Holm, look 1 of 2) but by less than δ=3%" in d.reason


def test_significant_but_not_above_delta_is_inconclusive() -> None:
    d = one(est(1.025, 1e-4, half=0.015))
    assert d.verdict is Verdict.INCONCLUSIVE
    assert "slower (p=0.0001, Holm, look 1 of 2) but the estimate is not above δ=3%" in d.reason


def test_large_but_not_significant_is_not_a_regression() -> None:
    assert one(est(1.08, 0.006, half=0.07)).verdict is Verdict.INCONCLUSIVE


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
    e = reported(0.0051)
    assert (round((e.ci_low - 1) * 100, 1), round((e.ci_high - 1) * 100, 1)) == (3.2, 16.9)
    d = one(e)
    assert d.verdict is Verdict.INCONCLUSIVE and "not significant (p=0.0051" in d.reason
    assert "(99.0% CI, the level of this look's test)" in d.reason
    low, _ = printed_interval(d.reason)
    assert low <= 0.0, d.reason  # the interval agrees with the test: it reaches 0
    assert "upper 98.75% bound +18.5% reaches above δ=3%" in d.reason  # the PASS bound, spent over two looks
    r = one(reported(0.004))
    assert r.verdict is Verdict.REGRESSION and printed_interval(r.reason)[0] > 0.0, r.reason
    # exactly at the test's edge: the 99% interval clears 1 when p < 0.005 and only then
    assert confidence_interval(reported(0.0049), 0.99)[0] > 1.0 > confidence_interval(reported(0.0051), 0.99)[0]


def test_the_interval_level_follows_the_holm_step() -> None:
    ests = {"a": reported(0.0010), "b": reported(0.0020), "c": reported(0.30, ratio=1.01)}
    d = decide_time(ests, CFG, 1)
    assert "(99.667% CI, the level of this look's test)" in d["a"].reason  # 1 - 2 * 0.005 / 3
    assert "(99.5% CI, the level of this look's test)" in d["b"].reason  # 1 - 2 * 0.005 / 2
    assert "(99.0% CI, the level of this look's test)" in d["c"].reason
    level = 1 - 2 * 0.005 / 3
    low, high = confidence_interval(ests["a"], level)
    assert printed_interval(d["a"].reason) == (round((low - 1) * 100, 1), round((high - 1) * 100, 1))


# --- Holm over workloads and the two looks ------------------------------------------------


def test_borderline_p_is_significant_alone_but_not_among_four() -> None:
    alone = decide_time({"a": est(1.08, 0.004)}, CFG, 1)
    assert alone["a"].verdict is Verdict.REGRESSION
    assert "p=0.004 < 0.005 (Holm, look 1 of 2)" in alone["a"].reason
    four = decide_time({"a": est(1.08, 0.004), "b": est(1.0, 0.5), "c": est(1.0, 0.5), "d": est(1.0, 0.5)}, CFG, 1)
    assert four["a"].verdict is Verdict.INCONCLUSIVE
    assert "Holm-adjusted 0.016 > α=0.005" in four["a"].reason
    assert four["a"].p_holm_slower == pytest.approx(0.016)


def test_holm_thresholds_step_down() -> None:
    ests = {"a": est(1.1, 0.0010), "b": est(1.1, 0.0020), "c": est(1.1, 0.30)}
    d = decide_time(ests, CFG, 1)
    assert d["a"].verdict is Verdict.REGRESSION and "p=0.001 < 0.0017 (Holm" in d["a"].reason
    assert d["b"].verdict is Verdict.REGRESSION and "p=0.002 < 0.0025 (Holm" in d["b"].reason
    assert d["c"].verdict is Verdict.INCONCLUSIVE


def test_alpha_is_split_between_the_two_looks() -> None:
    assert alpha_for_look(CFG, 1) == alpha_for_look(CFG, 2) == 0.005
    single = GateConfig(looks=1)
    assert alpha_for_look(single, 1) == 0.01
    with pytest.raises(ValueError, match="look must be between 1 and 1"):
        alpha_for_look(single, 2)
    with pytest.raises(ValueError, match="look must be between 1 and 2"):
        alpha_for_look(CFG, 0)
    e = est(1.08, 0.007)
    assert one(e, single).verdict is Verdict.REGRESSION
    assert "look 1 of 1" in one(e, single).reason
    assert one(e, CFG, 1).verdict is Verdict.INCONCLUSIVE
    assert one(e, CFG, 2).verdict is Verdict.INCONCLUSIVE
    with pytest.raises(ValueError):
        one(e, CFG, 3)


def test_correlated_looks_spend_alpha_by_a_boundary() -> None:
    """Equal split (rho=None) keeps today's 0.005 per look; a correlation buys a larger
    level at each look with the same total: 0.00569 at rho 0.71, 0.00745 at 0.95."""
    assert alpha_for_look(CFG, 1, rho=None) == alpha_for_look(CFG, 2) == 0.005
    for rho in (0.71, 0.95):
        level = two_look_levels(0.01, rho)[0]
        assert alpha_for_look(CFG, 1, rho=rho) == alpha_for_look(CFG, 2, rho=rho) == level > 0.005
    assert alpha_for_look(GateConfig(looks=1), 1, rho=0.95) == 0.01
    e = est(1.08, 0.0055)
    assert one(e).verdict is Verdict.INCONCLUSIVE
    d = decide_time({"w": e}, CFG, 1, rho=0.95)["w"]
    assert d.verdict is Verdict.REGRESSION, d.reason
    assert d.alpha_used == pytest.approx(two_look_levels(0.01, 0.95)[0])
    assert f"p=0.0055 < {d.alpha_used:.2g} (Holm, look 1 of 2)" in d.reason
    assert d.p_holm_slower == pytest.approx(0.0055)


def test_holm_steps_use_the_boundary_at_each_step_level() -> None:
    """Step s compares with the boundary for alpha / s, not the boundary for alpha over s:
    the looks are less alike far in the tail, so the latter would overspend."""
    rho = 0.71
    ests = {"a": est(1.1, 0.0010), "b": est(1.1, 0.0020), "c": est(1.1, 0.30)}
    d = decide_time(ests, CFG, 1, rho=rho)
    step1, step2 = two_look_levels(0.01 / 3, rho)[0], two_look_levels(0.01 / 2, rho)[0]
    assert step1 < two_look_levels(0.01, rho)[0] / 3
    assert two_look_error(step1, rho) == pytest.approx(0.01 / 3, rel=1e-9)
    assert d["a"].verdict is Verdict.REGRESSION and f"< {step1:.2g} (Holm" in d["a"].reason
    assert d["b"].verdict is Verdict.REGRESSION and f"< {step2:.2g} (Holm" in d["b"].reason
    assert d["c"].verdict is Verdict.INCONCLUSIVE
    assert d["c"].mde == pytest.approx(min_detectable_slowdown(ests["c"], step1, 0.8))


def test_second_look_keeps_the_whole_family_with_decided_workloads_at_p_one() -> None:
    e = est(1.08, 0.002)
    assert decide_time({"a": e}, CFG, 2)["a"].verdict is Verdict.REGRESSION
    d = decide_time({"a": e, "b": est(1.2, 1e-6)}, CFG, 2, already_decided={"b", "c", "d"})
    assert set(d) == {"a"}  # decided workloads get no new decision
    assert d["a"].verdict is Verdict.INCONCLUSIVE  # 0.002 > 0.005 / 4
    assert d["a"].reason.endswith("undecided after look 2 of 2")
    assert d["a"].p_holm_slower == pytest.approx(0.008)
    assert decide_time({}, CFG, 1) == {}


def test_mde_is_reported_at_the_first_holm_step() -> None:
    e = log_ratio(*runs(0.02, sd=0.02))
    d = decide_time({"a": e, "b": e}, CFG, 1)["a"]
    assert d.mde == pytest.approx(min_detectable_slowdown(e, 0.005 / 2, 0.8))
    assert d.mde > one(e).mde


def test_alpha_is_reachable_with_five_repeats_for_eight_workloads() -> None:
    """Eight clear 12% slowdowns, 5 vs 5 repeats, one recording, defaults: all caught at look 1."""
    rng = np.random.default_rng(42)
    ests = {}
    for w in range(8):
        base = np.exp(rng.normal(math.log(100), 0.01, 5))
        cur = np.exp(rng.normal(math.log(112), 0.01, 5))
        ests[f"w{w}"] = log_ratio(cur, [base])
    decisions = decide_time(ests, CFG, 1)
    assert all(d.verdict is Verdict.REGRESSION for d in decisions.values()), [d.reason for d in decisions.values()]
    smallest_level = alpha_for_look(CFG, 1) / 8
    assert max(e.p_slower for e in ests.values()) < smallest_level
    # an exact rank test could not: 5 vs 5 has 252 orderings, so its one-sided p >= 1/252
    floor = st.mannwhitneyu(np.arange(5) + 10, np.arange(5), alternative="greater", method="exact").pvalue
    assert floor == pytest.approx(1 / 252) and floor > smallest_level


# --- config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("alpha", 0.0), ("alpha", 0.6), ("alpha", math.nan), ("delta", 0.0), ("delta", 1.5),
        ("confidence", 1.0), ("looks", 3), ("looks", 0), ("looks", True), ("power", 0.0),
        ("phase_q", 1.0), ("phase_min_share", -0.1), ("memory_threshold", 0.0),
        ("assumed_day_sd_log", -0.01), ("assumed_day_sd_log", math.inf), ("day_prior_df", -1.0),
        ("outlier_sd", 0.0), ("gate_phases", "forward"), ("gate_phases", (1,)),
        ("fail_on_missing_baseline", "yes"), ("second_look_repeats", 0),
    ],
)
def test_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"GateConfig\.{field} "):
        GateConfig(**{field: value})


def test_config_defaults_and_coercion() -> None:
    c = GateConfig(gate_phases=["forward", "backward"], outlier_sd=None, day_prior_df=math.inf)  # type: ignore[arg-type]
    assert c.gate_phases == ("forward", "backward")
    assert (CFG.alpha, CFG.delta, CFG.confidence, CFG.looks, CFG.phase_q) == (0.01, 0.03, 0.95, 2, 0.10)
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
