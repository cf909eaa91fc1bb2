"""Change points in a per-run series (E-divisive means with a permutation test), and their table."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from perfgate.analysis.changepoints import ChangePoint, _best_splits, find_changes
from perfgate.report.changes import ChangeRow, render_changes


def noisy(seed: int, n: int, noise: float = 0.01, level: float = 100.0) -> np.ndarray:
    """``n`` runs of ``level`` ms with lognormal noise of ``noise`` (1% by default)."""
    return level * np.exp(np.random.default_rng(seed).normal(0.0, noise, n))


def with_step(seed: int, n: int = 40, step: float = 0.03) -> tuple[np.ndarray, int]:
    """A ``step`` (3%) slowdown at a seeded place, at least 10 runs from either end."""
    at = int(np.random.default_rng(10_000 + seed).integers(10, n - 9))
    return noisy(seed, n) * np.where(np.arange(n) >= at, 1 + step, 1.0), at


def found(changes: list[ChangePoint], at: int, ratio: float) -> bool:
    """A change within 2 runs of ``at`` whose size is within 1.5 points of ``ratio``."""
    return any(abs(c.index - at) <= 2 and abs(c.ratio - ratio) <= 0.015 for c in changes)


# --- the simulations ---------------------------------------------------------------------


def test_a_3_percent_step_in_1_percent_noise_over_40_runs_is_found_in_19_of_20_trials() -> None:
    hits = 0
    for seed in range(20):
        values, at = with_step(seed)
        hits += found(find_changes(values), at, 1.03)
    assert hits >= 19


def test_200_runs_of_pure_noise_raise_a_change_in_at_most_1_of_20_trials() -> None:
    raised = sum(bool(find_changes(noisy(500 + seed, 200))) for seed in range(20))
    assert raised <= 1


def test_a_step_up_then_back_down_are_both_found() -> None:
    shape = np.r_[np.ones(20), np.full(20, 1.03), np.ones(20)]
    both = 0
    for seed in range(10):
        changes = find_changes(noisy(900 + seed, 60) * shape)
        both += found(changes, 20, 1.03) and found(changes, 40, 1 / 1.03)
    assert both >= 9


def test_a_short_undone_regression_in_a_long_series_is_found_on_both_sides() -> None:
    # 8 slow runs in 100: the search over the segment's end finds the window itself
    values = noisy(7, 100) * np.where((np.arange(100) >= 60) & (np.arange(100) < 68), 1.05, 1.0)
    changes = find_changes(values)
    assert found(changes, 60, 1.05) and found(changes, 68, 1 / 1.05)


# --- what a change point says --------------------------------------------------------------


def test_a_change_point_holds_its_segments_medians_ratio_and_confidence() -> None:
    values = noisy(3, 60) * np.r_[np.ones(25), np.full(35, 1.05)]
    [change] = find_changes(values)
    assert change.index == 25 and (change.start, change.stop) == (0, 60)
    assert change.before == pytest.approx(float(np.median(values[:25])))
    assert change.after == pytest.approx(float(np.median(values[25:])))
    assert change.ratio == pytest.approx(change.after / change.before)
    assert change.p_value == pytest.approx(1 / 200)  # no shuffle of 199 reaches a 5-sigma step
    assert change.confidence == pytest.approx(1 - change.p_value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.index = 3  # type: ignore[misc]


def test_segments_are_bounded_by_the_neighbouring_changes() -> None:
    values = noisy(4, 60) * np.r_[np.ones(20), np.full(20, 1.06), np.full(20, 1.12)]
    first, second = find_changes(values)
    assert (first.start, first.index, first.stop) == (0, 20, 40)
    assert (second.start, second.index, second.stop) == (20, 40, 60)
    assert second.before == pytest.approx(float(np.median(values[20:40])))


def test_the_search_works_on_logarithms_so_a_power_or_a_unit_of_the_values_changes_nothing() -> None:
    # log(c·v^k) = log c + k·log v: on logarithms a unit (c) or a power (k) moves and scales
    # every distance alike, so the splits and the shuffles' ranks are the same; on the raw
    # values a power would change which split looks largest
    values = noisy(12, 60, noise=0.3) * np.where(np.arange(60) >= 30, 1.2, 1.0)  # wide noise: a weak step
    plain = find_changes(values, alpha=0.5)
    assert plain
    for other in (values * 1000.0, values ** 4):
        changes = find_changes(other, alpha=0.5)
        assert [(c.index, c.p_value) for c in changes] == [(c.index, c.p_value) for c in plain]


def test_the_same_input_gives_the_same_answer_and_the_seed_only_moves_the_p_values() -> None:
    values = noisy(11, 40) * np.where(np.arange(40) >= 20, 1.012, 1.0)  # a weak step: p well above the minimum
    first = find_changes(values, alpha=0.5)
    assert first and first == find_changes(values, alpha=0.5)
    other = find_changes(values, alpha=0.5, seed=1)
    assert [c.index for c in other][:1] == [c.index for c in first][:1]
    assert [c.p_value for c in other] != [c.p_value for c in first]


def test_every_reported_p_value_is_within_alpha_and_a_constant_series_has_no_change() -> None:
    for seed in range(5):
        values, _ = with_step(seed, step=0.01)
        assert all(c.p_value <= 0.05 for c in find_changes(values))
    assert find_changes([5.0] * 30) == []


def test_min_size_keeps_a_lone_outlying_run_from_being_a_change() -> None:
    values = noisy(5, 40)
    values[20] *= 1.5
    assert find_changes(values) == []


def test_the_statistic_is_the_energy_divergence_of_its_definition() -> None:
    # Q(τ, κ) = n·m/(n+m) (2/(nm) Σ|Xi-Yj| - 2/(n(n-1)) Σi<k |Xi-Xk| - 2/(m(m-1)) Σj<k |Yj-Yk|), maximised
    def q(x: np.ndarray, y: np.ndarray) -> float:
        n, m = len(x), len(y)
        between = np.abs(x[:, None] - y[None, :]).sum()
        within_x, within_y = np.abs(x[:, None] - x).sum() / 2, np.abs(y[:, None] - y).sum() / 2
        return n * m / (n + m) * (2 * between / (n * m) - within_x / (n * (n - 1) / 2) - within_y / (m * (m - 1) / 2))

    rng = np.random.default_rng(2)
    for min_size in (2, 4):
        x = rng.normal(size=24) + np.r_[np.zeros(9), np.ones(15)] * rng.uniform(0, 2)
        best = max((q(x[:t], x[t:k]), t) for t in range(min_size, 25 - min_size) for k in range(t + min_size, 25))
        value, tau = _best_splits(x[None, :], min_size)
        assert float(value[0]) == pytest.approx(best[0], rel=1e-9) and int(tau[0]) == best[1]


# --- bad input ----------------------------------------------------------------------------


def test_a_series_shorter_than_twice_min_size_is_a_value_error_that_says_so() -> None:
    with pytest.raises(ValueError, match=r"at least 10 runs \(2 × min_size 5\), got 9"):
        find_changes(noisy(0, 9))
    with pytest.raises(ValueError, match="at least 16 runs"):
        find_changes(noisy(0, 15), min_size=8)
    assert find_changes(noisy(0, 10)) == []  # exactly enough


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_value_that_has_no_logarithm_is_a_value_error_naming_the_run(bad: float) -> None:
    values = list(noisy(0, 12))
    values[4] = bad
    with pytest.raises(ValueError, match="finite positive values.*run 4"):
        find_changes(values)


@pytest.mark.parametrize("kwargs, message", [
    ({"min_size": 1}, "min_size must be an integer of at least 2"),
    ({"min_size": 2.5}, "min_size must be an integer"),
    ({"alpha": 0.0}, "alpha must be at least"),
    ({"alpha": 1.0}, "alpha must be at least"),
    ({"alpha": 0.001}, r"1/\(permutations \+ 1\) = 0.005"),
    ({"permutations": 0}, "permutations must be a positive integer"),
])
def test_parameters_out_of_range_are_value_errors(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        find_changes(noisy(0, 20), **kwargs)  # type: ignore[arg-type]


def test_a_table_of_values_or_text_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        find_changes([[1.0, 2.0]] * 10)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="sequence of numbers"):
        find_changes(["fast"] * 10)  # type: ignore[list-item]


# --- the table ----------------------------------------------------------------------------


def row(**overrides: object) -> ChangeRow:
    fields = dict(workload="resnet18", environment_key="cuda-h100-abc", phase="step",
                  commit_before="1111111111111111aaaa", commit_after="2222222222222222bbbb",
                  date_after=datetime(2026, 3, 4, 5, 6, tzinfo=timezone.utc), ratio=1.031, confidence=0.995)
    fields.update(overrides)
    return ChangeRow(**fields)  # type: ignore[arg-type]


def test_the_table_shows_the_commit_range_date_signed_size_and_confidence() -> None:
    text = render_changes([row(), row(workload="vit", phase="forward", ratio=0.95, confidence=0.98,
                                      date_after=datetime(2026, 3, 4, 12, 0, tzinfo=timezone(timedelta(hours=2))))])
    header, rule, first, second = text.split("\n")
    assert header.split()[:3] == ["workload", "environment", "phase"] and "confidence" in header
    assert set(rule) <= {"-", " "}
    assert first.split() == ["resnet18", "cuda-h100-abc", "step", "111111111111..222222222222", "2026-03-04", "05:06",
                             "+3.1%", "99.5%"]
    assert second.split()[-4:] == ["2026-03-04", "10:00", "-5.0%", "98.0%"]  # the date in UTC
    assert not text.endswith("\n")


def test_untrusted_names_and_commits_reach_the_terminal_inert() -> None:
    evil = row(workload="net\x1b[31mred\x1b]0;title\x07\nfake line", environment_key="env\rkey",
               commit_before="\x1b[2Jabc", commit_after=None, date_after=None)
    text = render_changes([evil])
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert len(text.split("\n")) == 3  # header, rule, one row: the name's newline is flattened
    assert "netred ⏎ fake line" in text
    assert "abc..?" in text and " — " in text  # no commit after, no date


def test_no_rows_say_so() -> None:
    assert render_changes([]) == "no lasting steps found"
