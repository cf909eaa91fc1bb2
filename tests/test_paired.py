"""The paired design: the block contrasts (the gate's estimate), the block model kept beside them, and the verdicts through ``compare``."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats as sps

from perfgate.analysis.blocks import ABBA, BAAB, BlockValue, block_log_ratio, block_model_log_ratio, block_order
from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig, Look
from perfgate.analysis.outcome import Entry, Pairing
from perfgate.analysis.stats.sequential import Schedule
from perfgate.model.verdict import Verdict
from tests.factories import ENV, make_result


SCHEDULE = Schedule(6, GateConfig().max_blocks)
FIRST = Look(6, SCHEDULE)
"""The paired gate's first look: 6 blocks, of up to max_blocks."""


def _abba(values_by_block: list[tuple[float, float, float, float]],
          alternate: bool = False) -> tuple[list[BlockValue], list[BlockValue]]:
    """Each block's four values in its running order: ABBA every block, or (``alternate``)
    ABBA and BAAB in turn, as the runner measures them."""
    base, head = [], []
    for j, four in enumerate(values_by_block):
        for arm, v in zip(block_order(j) if alternate else ABBA, four, strict=True):
            (base if arm == "base" else head).append(BlockValue(j, v))
    return base, head


def test_blocks_alternate_abba_and_baab():
    assert ABBA == ("base", "head", "head", "base") and BAAB == ("head", "base", "base", "head")
    assert [block_order(j) for j in range(4)] == [ABBA, BAAB, ABBA, BAAB]
    for j in range(6):  # two of each side in every block
        assert sorted(block_order(j)) == ["base", "base", "head", "head"]


def test_balanced_blocks_match_the_two_way_anova_by_hand():
    rng = np.random.default_rng(3)
    blocks = [tuple(float(x) for x in np.exp(rng.normal(math.log(100), 0.05, 4) + [0, 0.1, 0.1, 0]))
              for _ in range(6)]
    base, head = _abba(blocks)
    est = block_model_log_ratio(base, head)
    y = np.log(np.array(blocks))  # rows: blocks; columns: A B B A
    a, b = y[:, [0, 3]], y[:, [1, 2]]
    diff = b.mean() - a.mean()
    # residuals of the additive model: y - block mean - arm effect + grand mean
    arm = np.array([a.mean(), b.mean(), b.mean(), a.mean()]) - y.mean()
    resid = y - y.mean(axis=1, keepdims=True) - arm
    df = 4 * 6 - (6 + 1)
    mse = (resid**2).sum() / df
    se = math.sqrt(mse / 6)
    assert df == 3 * 6 - 1
    # equal noise in both arms: Satterthwaite's df over the three parts stays near 3J - 1
    assert 11 < est.df <= df
    assert est.ratio == pytest.approx(math.exp(diff), rel=1e-12)
    assert est.se_log == pytest.approx(se, rel=1e-10)
    assert est.p_slower == pytest.approx(sps.t.sf(diff / se, est.df), rel=1e-9)


def test_block_contrast_is_the_one_sample_t_on_contrasts():
    rng = np.random.default_rng(4)
    blocks = [tuple(float(x) for x in np.exp(rng.normal(4.6, 0.05, 4))) for _ in range(6)]
    base, head = _abba(blocks)
    y = np.log(np.array(blocks))
    d = y[:, [1, 2]].mean(axis=1) - y[:, [0, 3]].mean(axis=1)
    est = block_log_ratio(base, head)
    assert est.df == 5
    # The slower test is the plain one-sample t; the faster one is Hall-corrected (stricter)
    # when the contrasts (skewness G1) are right-skewed, plain otherwise.
    assert est.skew == pytest.approx(sps.skew(d, bias=False), rel=1e-9)
    assert est.p_slower == pytest.approx(sps.ttest_1samp(d, 0.0, alternative="greater").pvalue, rel=1e-9)
    less = sps.ttest_1samp(d, 0.0, alternative="less").pvalue
    assert est.p_faster > less if est.skew > 0 else est.p_faster == pytest.approx(less, rel=1e-9)
    # the same point estimate as the block model in a balanced design
    assert est.ratio == pytest.approx(block_model_log_ratio(base, head).ratio, rel=1e-12)


def test_linear_drift_inside_blocks_cancels():
    # every process 2% slower than the one before it, no noise, no change between arms
    blocks = [tuple(100.0 * math.exp(0.02 * (4 * j + k)) for k in range(4)) for j in range(6)]
    for alternate in (False, True):
        base, head = _abba(blocks, alternate)
        assert block_model_log_ratio(base, head).ratio == pytest.approx(1.0, abs=1e-12)
        assert block_log_ratio(base, head).ratio == pytest.approx(1.0, abs=1e-12)


def test_a_position_effect_cancels_over_every_two_alternating_blocks():
    # the first process of every block 5% slower (a cold cache), nothing else: ABBA every
    # block puts it on the base side always; ABBA and BAAB in turn cancel it over two blocks
    blocks = [(105.0, 100.0, 100.0, 100.0)] * 6
    base, head = _abba(blocks)
    assert block_log_ratio(base, head).ratio < 0.99
    base, head = _abba(blocks, alternate=True)
    assert block_log_ratio(base, head).ratio == pytest.approx(1.0, abs=1e-12)


def test_unbalanced_blocks_are_fitted_and_one_armed_blocks_ignored():
    rng = np.random.default_rng(5)
    blocks = [tuple(float(x) for x in np.exp(rng.normal(4.6, 0.03, 4) + [0, 0.05, 0.05, 0])) for _ in range(6)]
    base, head = _abba(blocks)
    base = [v for v in base if not (v.block == 2 and v is base[4])]  # block 2 lost one base repeat
    head = [v for v in head if v.block != 5]  # block 5 holds base only
    est = block_model_log_ratio(base, head)
    assert est.n_current == 10 and est.n_baseline == 9
    assert 5 <= est.df <= 19 - 6  # 19 observations, 5 blocks + arm
    assert 1.02 < est.ratio < 1.09


def test_too_few_blocks_is_an_error():
    base, head = _abba([(100.0, 101.0, 102.0, 99.0)])
    with pytest.raises(ValueError, match="at least 2"):
        block_model_log_ratio(base, head)


def _paired_results(slow: float = 1.0, blocks: int = 6, seed: int = 0, drift: float = 0.0, jitter: float = 0.02):
    """Head and base results in the runner's order (ABBA, BAAB, ...), with optional drift of
    the machine per process."""
    rng = np.random.default_rng(seed)
    base_scales, head_scales, base_blocks, head_blocks = [], [], [], []
    for j in range(blocks):
        for k, arm in enumerate(block_order(j)):
            machine = math.exp(drift * (4 * j + k) + rng.normal(0, jitter))
            if arm == "base":
                base_scales.append(machine)
                base_blocks.append(j)
            else:
                head_scales.append(machine * slow)
                head_blocks.append(j)

    def with_blocks(result, blocks_):
        reps = tuple(dataclasses.replace(r, block=b) for r, b in zip(result.repeats, blocks_, strict=True))
        return dataclasses.replace(result, repeats=reps)

    base = with_blocks(make_result(repeat_scales=base_scales, seed=seed), base_blocks)
    head = with_blocks(make_result(repeat_scales=head_scales, seed=seed + 1), head_blocks)
    return base, head


def test_paired_verdicts_and_the_design_is_named():
    base, head = _paired_results(slow=1.25)
    outcome = compare([Entry("tiny", head, None, pairing=Pairing(base, "a1b2c3d4e5f6"))], GateConfig(), look=FIRST)
    c = outcome.comparisons[0]
    assert c.verdict is Verdict.REGRESSION
    assert c.design == "paired, 6 ABBA blocks against a1b2c3d"
    assert c.time.estimate.df == 5  # the block contrasts: J - 1
    assert c.since_baseline == "since the last rebaseline: no stored baseline for this environment"
    base, head = _paired_results(slow=1.0, jitter=0.005)
    c = compare([Entry("tiny", head, None, pairing=Pairing(base, "a1b2c3d"))], GateConfig(), look=FIRST).comparisons[0]
    assert c.verdict is Verdict.PASS


def test_paired_design_is_immune_to_drift_that_fools_welch():
    # the machine gets 1% slower per process: 24% over the job. Nothing changed.
    base, head = _paired_results(slow=1.0, drift=0.01, jitter=0.002)
    c = compare([Entry("tiny", head, None, pairing=Pairing(base, "abc1234"))], GateConfig(), look=FIRST).comparisons[0]
    assert c.verdict is Verdict.PASS
    assert c.time.estimate.ratio == pytest.approx(1.0, abs=0.005)


def test_paired_workload_change_is_incomparable():
    base, head = _paired_results()
    head = dataclasses.replace(head, params={"batch_size": 16, "steps": 10})
    c = compare([Entry("tiny", head, None, pairing=Pairing(base, "abc1234"))], GateConfig(), look=FIRST).comparisons[0]
    assert c.verdict is Verdict.INCOMPARABLE
    assert "param batch_size" in c.differences


def test_paired_environment_differences_are_shown_with_base_python():
    base, head = _paired_results()
    base = dataclasses.replace(base, environment=dataclasses.replace(ENV, torch="2.13.0"))
    entry = Entry("tiny", head, None, pairing=Pairing(base, "abc1234"))
    c = compare([entry], GateConfig(), look=FIRST).comparisons[0]
    assert c.verdict is Verdict.INCOMPARABLE
    entry = Entry("tiny", head, None, pairing=Pairing(base, "abc1234", base_python="/opt/py/bin/python"))
    c = compare([entry], GateConfig(), look=FIRST).comparisons[0]
    assert c.verdict in (Verdict.PASS, Verdict.INCONCLUSIVE)
    assert c.environment_differences == {"torch": ("2.13.0", "2.14.1")}
    assert c.base_environment.torch == "2.13.0"


def test_reports_say_which_design_decided_and_show_the_stored_baseline_as_secondary(tmp_path):
    from perfgate.report.markdown import render_markdown
    from perfgate.report.terminal import gate_table
    from perfgate.store.baselines import Lookup, save_baseline, updated_baseline

    base, head = _paired_results(slow=1.25)
    stored = updated_baseline(None, make_result(repeats=5), "seed", append=False)
    path = save_baseline(stored, tmp_path)
    entry = Entry("tiny", head, Lookup(stored, path), pairing=Pairing(base, "a1b2c3d4e5f60718"))
    outcome = compare([entry], GateConfig(), look=FIRST)
    c = outcome.comparisons[0]
    assert c.since_baseline.startswith("since the last rebaseline: time per step +")
    assert "stored baseline, 1 recording; shown, not deciding" in c.since_baseline
    text = render_markdown(outcome)
    assert "**tiny** — **REGRESSION**: time per step +" in text  # the deciding fact; the design in its section
    assert "Decided by: paired, 6 ABBA blocks against a1b2c3d. Since the last rebaseline: time per step +" in text
    assert "| phase | base ms/step | head ms/step | change" in text
    assert "perfgate gate tiny --device cpu --against a1b2c3d4e5f60718" in text
    assert "block-to-block" in text and "removed by the design" in text
    table = gate_table(outcome)
    assert "  Decided by: paired, 6 ABBA blocks against a1b2c3d." in table
    assert "base ms" in table and "head ms" in table


def test_blocks_needed_is_the_first_block_count_whose_detectable_slowdown_fits():
    from perfgate.analysis.blocks import blocks_needed, paired_min_detectable

    j = blocks_needed(0.05, 0.03, 0.005)
    assert paired_min_detectable(0.05, j, 0.005) <= 0.03 < paired_min_detectable(0.05, j - 1, 0.005)
    assert blocks_needed(0.5, 0.001, 0.005, limit=50) is None


def test_paired_min_detectable_matches_simulated_power():
    # 80% of simulated block-contrast tests (the gate's) of the slowdown it names should be significant.
    from perfgate.analysis.blocks import paired_min_detectable

    rng = np.random.default_rng(7)
    sd, blocks, alpha = 0.05, 6, 0.005
    mde = paired_min_detectable(sd, blocks, alpha)
    hits = 0
    for _ in range(600):
        y = rng.normal(0, sd, (blocks, 4)) + np.array([0, 1, 1, 0]) * math.log1p(mde)
        base, head = _abba([tuple(float(v) for v in np.exp(row)) for row in y])
        hits += block_log_ratio(base, head).p_slower < alpha
    assert 0.70 < hits / 600 < 0.90


def test_calibrate_says_which_delta_this_machine_supports(monkeypatch):
    import functools

    from perfgate.report import calibration
    from perfgate.report.calibration import calibration_report

    noisy = make_result(repeat_scales=[1.0, 1.2, 0.85, 1.1, 0.9, 1.15, 0.8, 1.05], jitter=0.001)
    # The noisy report's lines asserted here are the paired design's; its simulated sequential
    # gates (which run to max_blocks at this noise) are fewer, the quiet reports' as they are.
    with monkeypatch.context() as m:
        m.setattr(calibration, "sequential_lines", functools.partial(calibration.sequential_lines, gates=10))
        text = calibration_report(noisy, GateConfig(), blocks=6)
    assert "paired design (ABBA blocks" in text
    assert "this machine supports delta of about" in text and "most gates of a true 3% slowdown" in text
    quiet = make_result(repeat_scales=[1.0, 1.002, 0.999, 1.001, 0.998, 1.0], jitter=0.001)
    report = calibration_report(quiet, GateConfig(), blocks=6)
    # the last planned look is at max_blocks
    assert "this machine supports delta of 3% with 30 blocks" in report
    assert "with 6 blocks and +0.1% with 30 blocks" in report
    assert "under the sequential gate (first look at 6 blocks, a look after every block up to max_blocks = 30" in report
    assert "unchanged code: 100% PASS" in report
    assert "this machine supports delta of 3% with 10 blocks" in calibration_report(
        quiet, GateConfig(max_blocks=10), blocks=6)


def test_json_and_html_carry_the_design(tmp_path):
    from perfgate.report.html import render_html
    from perfgate.report.json_report import outcome_to_dict

    base, head = _paired_results(slow=1.25)
    base = dataclasses.replace(base, environment=dataclasses.replace(ENV, torch="2.13.0"))
    entry = Entry("tiny", head, None, pairing=Pairing(base, "a1b2c3d4e5", base_python="/opt/py"))
    outcome = compare([entry], GateConfig(), look=FIRST)
    data = outcome_to_dict(outcome)["workloads"][0]
    assert data["design"] == "paired, 6 ABBA blocks against a1b2c3d"
    assert data["against"] == "a1b2c3d4e5"
    assert data["environment_differences"] == {"torch": ["2.13.0", "2.14.1"]}
    html = render_html(outcome)
    assert "Decided by: paired, 6 ABBA blocks against a1b2c3d." in html
    assert ">base ms/step<" in html and ">head ms/step<" in html
    assert "torch (base → head)" in html


def test_the_paired_looks_spend_alpha_over_the_planned_looks():
    from perfgate.analysis.stats.sequential import crossing_levels
    from perfgate.report.markdown import render_markdown

    base, head = _paired_results(slow=1.25)
    outcome = compare([Entry("tiny", head, None, pairing=Pairing(base, "abc1234"))], GateConfig(), look=FIRST)
    # blocks are independent: the looks' information is their block count over max_blocks's
    level = crossing_levels(0.01, tuple(c / 30 for c in range(6, 31)))[0]
    assert 0.001 < level < 0.01
    assert outcome.comparisons[0].time.alpha_used == pytest.approx(level)
    assert outcome.comparisons[0].verdict is Verdict.REGRESSION
    text = render_markdown(outcome)
    assert "spent over up to 25 looks (blocks 6–30, Hwang-Shih-DeCani γ=1); the last look taken at 6 blocks" in text
    single = compare([Entry("tiny", head, None, pairing=Pairing(base, "abc1234"))], GateConfig())
    assert single.comparisons[0].time.alpha_used == 0.01
    assert "one look ·" in render_markdown(single)


@pytest.mark.slow
def test_a_much_noisier_head_does_not_raise_false_alarms():
    # With 3J - 1 df the block model rejected 1.4% of A/A tests at 0.5% with a 10x noisier
    # head: its within-block spread understates it. The gate's block contrasts do not
    # pool the arms, so their level holds with no pre-test (J - 1 = 5 df, always).
    rng = np.random.default_rng(11)
    rejected, dfs = 0, []
    for _ in range(3000):
        y = rng.normal(0, 1, (6, 4)) * np.array([0.002, 0.02, 0.02, 0.002])
        base, head = _abba([tuple(float(v) for v in np.exp(row)) for row in y])
        est = block_log_ratio(base, head)
        dfs.append(est.df)
        rejected += est.p_slower < 0.005
    assert set(dfs) == {5.0}
    assert rejected / 3000 < 0.009  # 0.5% nominal; 3,000 draws leave about +-0.13%


def test_the_block_model_kept_for_the_simulation_has_satterthwaites_df_and_no_switch():
    rng = np.random.default_rng(12)
    kept = 0
    for _ in range(400):
        y = rng.normal(0, 0.02, (6, 4))
        base, head = _abba([tuple(float(v) for v in np.exp(row)) for row in y])
        kept += block_model_log_ratio(base, head).df > 5
    assert kept == 400  # equally noisy arms: near 3J - 1 = 17, never the contrasts' 5


def test_the_json_report_writes_what_is_not_finite_as_null():
    import json

    from perfgate.report.json_report import outcome_to_dict
    from perfgate.store.jsonfile import dumps

    base, head = _paired_results(slow=1.0, jitter=0.02)
    outcome = compare([Entry("tiny", head, None, pairing=Pairing(base, "abc1234"))], GateConfig(), look=FIRST)
    est = outcome.comparisons[0].time.estimate
    nan_est = dataclasses.replace(est, current_sd_log=math.nan)
    c = dataclasses.replace(outcome.comparisons[0],
                            time=dataclasses.replace(outcome.comparisons[0].time, estimate=nan_est, mde=math.inf))
    data = json.loads(dumps(outcome_to_dict(dataclasses.replace(outcome, comparisons=(c,)))))
    assert data["workloads"][0]["step"]["min_detectable_slowdown"] is None
    assert data["workloads"][0]["step"]["estimate"]["current_sd_log"] is None
