"""``perfgate tune-loader``: measure one workload under DataLoader settings and recommend one.

:func:`tune_loader` measures each repeat through :func:`perfgate.measure.runner.measure`
(one fresh process, telemetry off), imported inside it so that importing this module does
not load torch; it runs the two-stage search of :mod:`perfgate.tune.search` with that and
returns a :class:`TuneResult`, which renders as the report of :mod:`perfgate.tune.table`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.model.errors import PerfgateError
from perfgate.model.workload import Params, Workload, apply_overrides
from perfgate.tune.budget import DEFAULT_REPEATS
from perfgate.tune.decision import DEFAULT_ALPHA, DEFAULT_MARGIN, Recommendation, SettingResult
from perfgate.tune.search import Failure, Sample, run_tuning
from perfgate.tune.settings import Setting, changed_keys, current_setting, describe
from perfgate.tune.table import render_tune_table


@dataclass(frozen=True)
class TuneResult:
    """What ``perfgate tune-loader`` found for one workload; :meth:`render` is its report."""

    workload: str
    device: str
    cores: int
    current: Mapping[str, Any]
    results: tuple[SettingResult, ...]
    recommendation: Recommendation
    budget_s: float
    spent_s: float
    """Sum of the repeats' wall times."""
    repeats: int
    """Repeats measured in all."""
    notes: tuple[str, ...] = ()
    title: str = ""

    def render(self) -> str:
        return render_tune_table(self.results, self.recommendation, title=self.title, notes=self.notes)

    @property
    def exit_code(self) -> int:
        return self.recommendation.exit_code


def tune_loader(workload: Workload, params: Params, device: str, *, budget_s: float, cache_dir: Path,
                progress: Callable[[Any], None] = lambda p: None, data_root: Path | None = None,
                overrides: Mapping[str, Any] | None = None, cores: int | None = None,
                repeats: int = DEFAULT_REPEATS, alpha: float = DEFAULT_ALPHA, margin: float = DEFAULT_MARGIN,
                timeout_s: float = 3600.0) -> TuneResult:
    """Measure ``workload`` under DataLoader settings around ``params`` and recommend one.

    ``params`` are the resolved parameters (profile and the user's ``--set`` applied);
    ``overrides`` the user's ``--set`` values, kept in the recommended ``--set`` line.
    ``device`` is ``"cpu"`` or ``"cuda"`` (already resolved). Each repeat is one call of
    :func:`perfgate.measure.runner.measure` with one job and one repeat (a fresh process,
    telemetry off, no result file), so settings of one workload never share a name;
    ``progress`` receives its :class:`~perfgate.measure.runner.Progress` events with the
    setting in the workload field and the round as the repeat. Raises
    :class:`~perfgate.model.errors.WorkloadError` when the current setting cannot be measured.
    """
    from perfgate.measure.runner import Progress, measure
    from perfgate.model.job import Job

    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    current = current_setting(params)
    base_overrides = dict(overrides or {})

    def measure_one(setting: Setting, round_: int, rounds: int) -> Sample | Failure:
        changed = {k: setting[k] for k in changed_keys(setting, current)}
        job_params = apply_overrides(params, changed, workload=workload.name)
        label = f"{workload.name} {describe(setting, current)}"

        def relay(event: Any) -> None:
            progress(Progress(label, round_, rounds, event.status, event.seconds, event.step_median_ms, event.message))

        began = time.perf_counter()
        try:
            outcome = measure([Job(workload, job_params, {**base_overrides, **changed}, data_root)], device=device,
                              repeats=1, cache_dir=cache_dir, out_dir=None, progress=relay, timeout_s=timeout_s,
                              telemetry=False)
        except PerfgateError as exc:
            return Failure(exc.message, time.perf_counter() - began)
        seconds = time.perf_counter() - began
        if workload.name in outcome.errors:
            return Failure(outcome.errors[workload.name].message, seconds)
        repeat = outcome.results[workload.name].repeats[0]
        share = repeat.shares["data_wait"]
        return Sample(repeat.samples_per_s, seconds, share, repeat.loader_restarts, dict(repeat.loader_settings))

    results, rec, notes, spent, count = run_tuning(
        params, device, cores, measure_one, budget_s=budget_s, repeats=repeats, alpha=alpha, margin=margin,
        overrides=base_overrides)
    title = (f"tune-loader {workload.name} v{workload.version} on {device} ({cores} cores): {count} repeats "
             f"x {params.steps} steps, batch {params.batch_size}, alternating order; "
             f"{spent / 60:.1f} of {budget_s / 60:.1f} min budget")
    return TuneResult(workload.name, device, cores, current, tuple(results), rec, budget_s, spent, count,
                      tuple(notes), title)
