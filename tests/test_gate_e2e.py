"""Real runs of a tiny CPU workload through the gate.

The same code measured twice, interleaved so that load on the shared machine hits both
alike, must never be called a REGRESSION; the same workload slowed by about 100% in its
forward phase (a delay of one step) must be, and the markdown must flag that phase. The
design decides on a 2-core shared runner, whose processes' log step times vary by 10–24%:
8 processes a side and a doubled step put the one look's Holm bound far below the
slowdown, where 6 a side and +30% were within its noise. (The gate's own procedure,
with its sequential looks, runs end to end in tests/test_pytest_plugin.py and tests/test_ci.py.)
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

import pytest

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry
from perfgate.measure.runner import measure
from perfgate.model.job import Job
from perfgate.model.result import merge_repeats
from perfgate.model.verdict import Verdict
from perfgate.report.markdown import render_markdown
from perfgate.store.baselines import find_baseline, save_baseline, updated_baseline
from perfgate.store.discovery import discover

pytestmark = pytest.mark.slow
# Heavier than the default tiny workload so a step is a few ms, not dominated by jitter.
SETTINGS = {"width": "32", "input_size": "32", "batch_size": "16", "steps": "16"}


def measure_interleaved(tiny_path: Path, tmp: Path, rounds: int, env_by_arm: list[dict[str, str]]):
    workload = discover([tiny_path], project_dir=tmp).get("tiny")
    params = workload.resolve("cpu", SETTINGS)
    job = Job(workload, params, {})
    arms: list[list] = [[] for _ in env_by_arm]
    for _ in range(rounds):
        for arm, env in enumerate(env_by_arm):
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                outcome = measure([job], device="cpu", repeats=1, cache_dir=tmp / "cache", out_dir=None,
                                  project_dir=tmp)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            assert not outcome.errors, {k: e.message for k, e in outcome.errors.items()}
            arms[arm].append(outcome.results["tiny"])
    return [merge_repeats(results) for results in arms]


@pytest.mark.extended
def test_aa_is_never_a_regression_and_a_slow_forward_is(tiny_path: Path, tmp_path: Path) -> None:
    # One first repeat sizes the slowdown: forward delayed by one whole step (the step doubled).
    (probe,) = measure_interleaved(tiny_path, tmp_path, 1, [{}])
    step_ms = median(v for r in probe.repeats for v in r.phases_ms["step"])
    delay = {"TINY_FORWARD_DELAY_MS": f"{step_ms:.4f}"}
    # Baseline, the same code again, and the slowed code, interleaved round by round so
    # that load on the shared machine hits all three alike.
    base, same, slow = measure_interleaved(tiny_path, tmp_path, 8, [{}, {}, delay])
    store = tmp_path / "baselines"
    save_baseline(updated_baseline(None, base, "A/A test", append=False, now=datetime.now(timezone.utc)), store)
    lookup = find_baseline(store, base.environment.key(), "tiny")
    # Measured in the same job: no day-to-day drift between the arms, one look at the full alpha.
    config = GateConfig(assumed_day_sd_log=0.0)  # compare() without a look: a single look

    aa = compare([Entry("tiny", same, lookup)], config).comparisons[0]
    # never a REGRESSION; undecided on a noisy machine, its check fails as too noisy only when
    # its interval does not rule out 2δ (its reason says so), else it passes or stays green
    assert aa.verdict in (Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.TOO_NOISY), aa.reason
    assert (aa.verdict is Verdict.TOO_NOISY) == (aa.upper_bound is None or aa.upper_bound >= 1 + 2 * config.delta)

    outcome = compare([Entry("tiny", slow, lookup)], config)
    ab = outcome.comparisons[0]
    assert ab.verdict is Verdict.REGRESSION, ab.reason
    assert outcome.exit_code == 1
    flags = {row.phase: row.flag for row in ab.phases if row.flag is not None}
    assert flags["forward"].flagged and flags["forward"].estimate.ratio > 1.3
    text = render_markdown(outcome)
    forward_line = next(line for line in text.splitlines() if line.startswith("| forward"))
    assert "⚠️ slower" in forward_line
