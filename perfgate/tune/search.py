"""The two-stage search of ``perfgate tune-loader``: which settings are measured, in what order, how often.

The advisor measures short, unprofiled repeats (one fresh process each, telemetry off) of
one workload under several DataLoader settings. It works in two stages:

1. **num_workers sweep.** The current setting and the worker counts from 0 up to the core
   count (all of them up to 8 cores, a ladder above), everything else as it is now.
2. **Around the fastest of stage 1** (highest median throughput): ``pin_memory`` toggled
   (CUDA only: pinned memory speeds up host-to-GPU copies and nothing else, so on the CPU
   it is skipped rather than measured as noise), ``prefetch_factor`` 2 or 4, and
   ``persistent_workers`` toggled (it only keeps workers alive between epochs; it is
   skipped when the measured window never restarted the loader, because it cannot change
   what is measured then). The fastest of stage 1 is measured again beside its variants.

A setting the DataLoader refuses (``prefetch_factor`` or ``persistent_workers`` with
``num_workers=0``) is skipped with the reason (:mod:`perfgate.tune.settings`); a setting
that fails when measured, or that the workload's builder does not pass on to its
DataLoader, is skipped with what happened. The run goes on.

Order: every round measures the current setting and each candidate of the stage once, in
alternating order (forward, then reversed, ...), so a burst of load on a shared machine
spreads over all of them. Each candidate is compared with the current setting measured in
the same rounds, paired by round (:mod:`perfgate.tune.decision`).

Budget: :func:`~perfgate.tune.budget.plan_stage` chooses how many settings and rounds of a
stage fit (stage 1 once its first round gave the repeat times, stage 2 in what stage 1
left); a round is not started when it would end more than 20% past the budget (the repeats
ran slower than estimated).

:func:`run_tuning` is pure apart from the ``measure_one`` it is given: the measuring one,
with torch in a fresh process, is made by :func:`perfgate.tune.advisor.tune_loader`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from perfgate.model.errors import WorkloadError
from perfgate.model.workload import Params
from perfgate.tune.budget import DEFAULT_REPEATS, MIN_REPEATS, plan_stage
from perfgate.tune.decision import DEFAULT_ALPHA, DEFAULT_MARGIN, Recommendation, SettingResult, recommend
from perfgate.tune.settings import (
    DEFAULT_PREFETCH,
    Setting,
    candidate_settings,
    current_setting,
    describe,
    effective,
    setting_key,
    skip_reason,
    value_text,
)


@dataclass(frozen=True)
class Sample:
    """One measured repeat of one setting."""

    samples_per_s: float
    seconds: float
    """Wall time of the repeat, process start-up included: what the budget is spent on."""
    data_wait_share: float | None = None
    loader_restarts: int = 0
    loader_settings: Mapping[str, Any] = field(default_factory=dict)
    """The settings read back from the DataLoader the builder made."""


@dataclass(frozen=True)
class Failure:
    """A repeat that could not be measured."""

    message: str
    seconds: float = 0.0


MeasureOne = Callable[[Setting, int, int], "Sample | Failure"]
"""``measure_one(setting, round, rounds)``: one repeat of the workload with ``setting``; ``round``
of ``rounds`` is its place in the stage (for progress; round 1 shows the most rounds planned)."""


def _mismatch(asked: Mapping[str, Any], ran: Mapping[str, Any]) -> str | None:
    """Which asked-for loader setting the built DataLoader does not have (keys it reports only)."""
    keys = ["num_workers", "pin_memory"]
    if int(asked["num_workers"]) > 0:
        keys += ["prefetch_factor", "persistent_workers"]
    wanted = {"prefetch_factor": asked["prefetch_factor"] if asked["prefetch_factor"] is not None else DEFAULT_PREFETCH}
    diffs = []
    for key in keys:
        if key not in ran:
            continue
        want = wanted.get(key, asked[key])
        if ran[key] != want:
            diffs.append(f"{key}={value_text(want)} asked, {value_text(ran[key])} ran")
    return "; ".join(diffs) or None


class _Tuning:
    """The two-stage, budgeted, alternating-order measurement behind :func:`run_tuning`.

    Settings are kept by their values (:func:`~perfgate.tune.settings.setting_key`); two
    settings that build the same DataLoader (:func:`~perfgate.tune.settings.effective`) are
    measured once. Rounds are numbered across both stages (stage 2 carries on from the last
    round of stage 1); each repeat records its round, the block that
    :func:`~perfgate.tune.decision.recommend` pairs by.
    """

    def __init__(self, params: Params, device: str, cores: int, measure_one: MeasureOne, budget_s: float,
                 repeats: int, min_repeats: int) -> None:
        self.params, self.device, self.cores = params, device, cores
        self.measure_one, self.budget_s = measure_one, budget_s
        self.repeats, self.min_repeats = repeats, min_repeats
        self.current = current_setting(params)
        self.cur = setting_key(self.current)
        self.settings: dict[tuple[Any, ...], Setting] = {}
        self.stage_of: dict[tuple[Any, ...], int] = {}
        self.samples: dict[tuple[Any, ...], list[Sample]] = {}
        self.rounds_of: dict[tuple[Any, ...], list[int]] = {}
        self.current_by_round: dict[int, float] = {}
        self.skipped: dict[tuple[Any, ...], str] = {}
        self.spent = 0.0
        self.round = 0
        self.stage1_rounds = repeats
        self.notes: list[str] = []

    def _register(self, setting: Setting, stage: int) -> bool:
        """Add ``setting``; False when one that builds the same DataLoader is already there."""
        if any(effective(s) == effective(setting) for s in self.settings.values()):
            return False
        self.settings[setting_key(setting)] = setting
        self.stage_of[setting_key(setting)] = stage
        return True

    # one repeat ------------------------------------------------------------
    def _one(self, setting: Setting, shown: int, rounds: int) -> bool:
        """One repeat of ``setting`` in the current round (``shown`` of ``rounds`` in its stage, for progress)."""
        key = setting_key(setting)
        outcome = self.measure_one(setting, shown, rounds)
        self.spent += outcome.seconds
        if isinstance(outcome, Failure):
            if key == self.cur:
                raise WorkloadError(f"the current setting ({describe(self.current)}) could not be measured: "
                                    f"{outcome.message}")
            self.skipped[key] = f"failed when measured: {outcome.message}"
            return False
        wrong = _mismatch(setting, outcome.loader_settings)
        if wrong and key != self.cur:
            self.skipped[key] = (f"the workload's DataLoader did not take this setting ({wrong}): its builder "
                                 "sets the loader itself, so tune it there")
            return False
        if wrong:
            self.notes.append(f"the current parameters ask for {describe(self.current)} but the DataLoader "
                              f"ran with {wrong}")
        self.samples.setdefault(key, []).append(outcome)
        self.rounds_of.setdefault(key, []).append(self.round)
        if key == self.cur:
            self.current_by_round[self.round] = outcome.samples_per_s
        return True

    def _alive(self, settings: Sequence[Setting]) -> list[Setting]:
        return [s for s in settings if setting_key(s) not in self.skipped]

    def _repeat_s(self, setting: Setting) -> float:
        own = [x.seconds for x in self.samples.get(setting_key(setting), [])]
        return median(own) if own else self._typical_s()

    def _typical_s(self) -> float:
        every = [x.seconds for xs in self.samples.values() for x in xs]
        return max(median(every), 1e-9) if every else 1e-9

    def _rounds(self, settings: Sequence[Setting], first: int, last: int) -> None:
        """Rounds ``first..last`` (1-based within the stage) over ``settings``, alternating order.

        A round is not started when it would end more than 20% past the budget (the
        repeats ran slower than the first round said); the notes say so.
        """
        for r in range(first, last + 1):
            alive = self._alive(settings)
            if len(alive) < 2:
                return
            estimate = sum(self._repeat_s(s) for s in alive)
            if self.spent + estimate > self.budget_s * 1.2:
                stage = self.stage_of[setting_key(alive[-1])]
                self.notes.append(f"stopped before round {r} of stage {stage}: the repeats "
                                  f"ran slower than estimated ({self.spent:.0f} s of {self.budget_s:.0f} s spent)")
                return
            self.round += 1
            order = alive if self.round % 2 == 1 else list(reversed(alive))
            for s in order:
                self._one(s, r, last)

    # stages ----------------------------------------------------------------
    def stage1(self) -> list[Setting]:
        candidates = [s for s in candidate_settings(self.params, self.device, self.cores) if self._register(s, 1)]
        # Round 1: each setting once, the current first. The second setting is started if
        # min_repeats rounds of the two fit the budget, each later one only if the full
        # number of rounds of everything so far still does (repeats before breadth).
        self.round = 1
        measured: list[Setting] = []
        for i, s in enumerate(candidates):
            if i > 0:
                rounds = self.min_repeats if i == 1 else self.repeats
                need = self.spent + self._typical_s() + (rounds - 1) * (i + 1) * self._typical_s()
                if need > self.budget_s:
                    self.skipped[setting_key(s)] = (f"not measured: over the budget ({self.budget_s:.0f} s; "
                                                    f"a repeat takes about {self._typical_s():.0f} s)")
                    continue
            if self._one(s, 1, self.repeats):
                measured.append(s)
        others = [s for s in measured if setting_key(s) != self.cur]
        # the mean repeat time of the round: rounds x settings x mean is the round's sum
        repeat_s = sum(self._repeat_s(s) for s in measured) / len(measured)
        plan = plan_stage(self.budget_s, repeat_s, len(others), fixed=1, repeats=self.repeats,
                          min_repeats=self.min_repeats, spent_s=self.spent, done_rounds=1)
        if plan.rounds == 0:
            for s in others:
                self.skipped[setting_key(s)] = (f"measured once only: two rounds do not fit the budget "
                                                f"({self.budget_s:.0f} s; a repeat takes about "
                                                f"{self._typical_s():.0f} s)")
            self.notes.append("the budget allows one round only; nothing can be judged")
            return []
        kept = [self.current, *others[:plan.kept]]
        for s in others[plan.kept:]:
            self.skipped[setting_key(s)] = (f"measured once only: the budget holds {plan.kept + 1} settings x "
                                            f"{plan.rounds} repeats (about {self._typical_s():.0f} s each)")
        self.stage1_rounds = plan.rounds
        self._rounds(kept, 2, plan.rounds)
        return kept

    def stage2(self, kept1: Sequence[Setting]) -> None:
        measured = [s for s in self._alive(kept1) if len(self.samples.get(setting_key(s), [])) >= self.min_repeats]
        if not measured:
            return
        # the direction to search in: the highest median throughput (a median, so one slow
        # repeat of three does not send stage 2 around the wrong setting)
        best = max(measured, key=lambda s: median(x.samples_per_s for x in self.samples[setting_key(s)]))
        restarted = any(x.loader_restarts > 0 for xs in self.samples.values() for x in xs)
        variants = []
        for s in candidate_settings(self.params, self.device, self.cores, around=best):
            if setting_key(s) in self.settings:
                continue
            reason = skip_reason(s, best, self.device, loader_restarted=restarted)
            if reason:
                self.settings[setting_key(s)] = s
                self.stage_of[setting_key(s)] = 2
                self.skipped[setting_key(s)] = reason
            elif self._register(s, 2):
                variants.append(s)
        if not variants:
            return
        # The fastest of stage 1 is measured again beside its variants: it gets more repeats,
        # and the variants meet it in the same rounds.
        fixed = [self.current] if setting_key(best) == self.cur else [self.current, best]
        remaining = self.budget_s - self.spent
        # a variant is expected to take as long as the setting it varies; the current its own time
        repeat_s = (self._repeat_s(self.current) + self._repeat_s(best)) / 2
        plan = plan_stage(remaining, repeat_s, len(variants), fixed=len(fixed),
                          repeats=self.stage1_rounds, min_repeats=self.min_repeats)
        if plan.rounds == 0 and len(fixed) == 2:
            fixed = [self.current]
            plan = plan_stage(remaining, repeat_s, len(variants), fixed=1,
                              repeats=self.stage1_rounds, min_repeats=self.min_repeats)
        for s in variants[plan.kept:]:
            self.skipped[setting_key(s)] = (f"not measured: over the budget ({max(remaining, 0):.0f} s left after "
                                            f"stage 1, a repeat takes about {repeat_s:.0f} s)")
        if plan.rounds:
            self._rounds([*fixed, *variants[:plan.kept]], 1, plan.rounds)

    # results ---------------------------------------------------------------
    def results(self) -> list[SettingResult]:
        out = []
        for key, s in self.settings.items():
            samples = self.samples.get(key, [])
            shares = [x.data_wait_share for x in samples if x.data_wait_share is not None]
            reference: tuple[float, ...] = ()
            if key != self.cur:
                reference = tuple(self.current_by_round[r] for r in self.rounds_of.get(key, [])
                                  if r in self.current_by_round)
            out.append(SettingResult(
                setting=s,
                stage=self.stage_of[key],
                samples_per_s=tuple(x.samples_per_s for x in samples) if key not in self.skipped else (),
                reference=reference,
                data_wait_share=median(shares) if shares else None,
                skipped=self.skipped.get(key),
                is_current=key == self.cur,
                rounds=tuple(self.rounds_of.get(key, [])) if key not in self.skipped else (),
            ))
        return out


def run_tuning(params: Params, device: str, cores: int, measure_one: MeasureOne, *, budget_s: float,
               repeats: int = DEFAULT_REPEATS, min_repeats: int = MIN_REPEATS, alpha: float = DEFAULT_ALPHA,
               margin: float = DEFAULT_MARGIN, overrides: Mapping[str, Any] | None = None,
               ) -> tuple[list[SettingResult], Recommendation, list[str], float, int]:
    """The two stages with any ``measure_one``; returns (results, recommendation, notes, seconds spent, repeats).

    Pure apart from what ``measure_one`` does: the budget is spent in the seconds each
    :class:`Sample` reports, so it can be driven with constructed measurements.
    """
    if not (budget_s > 0):
        raise ValueError(f"the budget must be positive, got {budget_s!r}")
    tuning = _Tuning(params, device, cores, measure_one, budget_s, repeats, min_repeats)
    kept = tuning.stage1()
    tuning.stage2(kept)
    results = tuning.results()
    notes = list(dict.fromkeys(tuning.notes))
    if device != "cuda" and not any("pin_memory" in (r.skipped or "") for r in results):
        notes.append("pin_memory is not tried on the CPU: it only speeds up copies to a CUDA device")
    notes.append("throughput is samples per second of the measured window, one fresh process per repeat; each "
                 "setting is compared with the current one measured in the same rounds (alternating order), "
                 "paired by round: a slowdown of the machine shared by a round cancels")
    count = sum(len(v) for v in tuning.samples.values())
    return results, recommend(results, alpha=alpha, margin=margin, overrides=overrides), notes, tuning.spent, count
