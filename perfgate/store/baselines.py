"""The baseline store: ``<root>/<environment key>/<workload>.json`` and its counted run beside it.

What ``perfgate rebaseline`` writes (a new baseline, or one more recording appended) and what the
gate looks up.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from perfgate.model.baseline import (
    DEFAULT_MAX_RECORDINGS,
    Baseline,
    DayVariation,
    Provenance,
    Recording,
    as_stored,
    baseline_from_dict,
    param_differences,
)
from perfgate.model.counters import CounterSet
from perfgate.model.errors import FileFormatError, UsageError
from perfgate.model.result import RunResult
from perfgate.model.version import __version__
from perfgate.store.counters import counters_path, load_counters
from perfgate.store.jsonfile import load_document, write_json_atomic


def ci_provenance() -> tuple[str | None, str | None]:
    """The CI run id and URL when running under a CI that sets them (GitHub Actions)."""
    run_id = os.environ.get("GITHUB_RUN_ID") or os.environ.get("CI_PIPELINE_ID") or os.environ.get("BUILD_ID")
    url = None
    if os.environ.get("GITHUB_RUN_ID") and os.environ.get("GITHUB_REPOSITORY"):
        server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
        url = f"{server}/{os.environ['GITHUB_REPOSITORY']}/actions/runs/{os.environ['GITHUB_RUN_ID']}"
    return run_id, url


def recording_from_result(result: RunResult, reason: str, *, now: datetime | None = None) -> Recording:
    run_id, url = ci_provenance()
    repeats = [as_stored(rep, i) for i, rep in enumerate(result.repeats)]
    return Recording(
        provenance=Provenance(
            commit=result.environment.git_commit,
            dirty=result.environment.git_dirty,
            date=(now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
            reason=reason,
            perfgate_version=__version__,
            ci_run_id=run_id,
            ci_run_url=url,
        ),
        environment=result.environment,
        data=dict(result.data),
        peak_memory_kind=result.repeats[0].peak_memory_kind,
        repeats=tuple(repeats),
    )


def baseline_path(root: Path, environment_key: str, workload: str) -> Path:
    return root / environment_key / f"{workload}.json"


def updated_baseline(existing: Baseline | None, result: RunResult, reason: str, *, append: bool,
                     max_recordings: int = DEFAULT_MAX_RECORDINGS, now: datetime | None = None,
                     day_variation: DayVariation | None = None) -> Baseline:
    """The baseline ``rebaseline`` writes: a new one, or ``existing`` with one more recording.

    ``day_variation`` (``--day-history``) is recorded with it; without one, an appended
    baseline keeps the variation it had and a new one has none (the gate assumes it)."""
    if not reason.strip():
        raise UsageError("--reason must say why the baseline changes")
    recording = recording_from_result(result, reason.strip(), now=now)
    recordings: tuple[Recording, ...] = (recording,)
    if append and existing is not None:
        problems = []
        if existing.workload_version != result.workload_version:
            problems.append(f"workload version {existing.workload_version} -> {result.workload_version}")
        problems += [f"{k} {a} -> {b}" for k, (a, b) in param_differences(existing.params, result.params).items()]
        if existing.environment_key != result.environment.key():
            problems.append(f"environment {existing.environment_key} -> {result.environment.key()}")
        if problems:
            raise UsageError(
                f"cannot append to the {result.workload} baseline: {'; '.join(problems)}; "
                "rebaseline without --append to replace it"
            )
        recordings = (*existing.recordings, recording)[-max_recordings:]
        if day_variation is None:
            day_variation = existing.day_variation
    return Baseline(
        workload=result.workload,
        workload_version=result.workload_version,
        device=result.device,
        environment_key=result.environment.key(),
        params=dict(result.params),
        recordings=recordings,
        day_variation=day_variation,
    )


def save_baseline(baseline: Baseline, root: Path) -> Path:
    path = baseline_path(root, baseline.environment_key, baseline.workload)
    write_json_atomic(path, baseline.to_dict())
    return path


def load_baseline(path: Path) -> Baseline:
    baseline = load_document(path, "baseline", baseline_from_dict)
    if not all(math.isfinite(v) for rec in baseline.recordings for r in rec.repeats
               for v in (*r.medians_ms.values(), *r.per_step_ms.values())):
        raise FileFormatError(f"{path}: baseline file holds a non-finite summary")
    return baseline


@dataclass(frozen=True)
class Lookup:
    """What the store holds for one workload in one environment."""

    baseline: Baseline | None
    path: Path
    other_environments: tuple[Baseline, ...] = ()
    """Baselines of the same workload recorded in other environments (for INCOMPARABLE)."""
    counters: CounterSet | None = None
    """The baseline's counted run (``<workload>.counters.json`` beside it), when recorded."""


def baseline_counters_path(root: Path, environment_key: str, workload: str) -> Path:
    """``<root>/<environment key>/<workload>.counters.json``: the counted run of a baseline."""
    return counters_path(Path(root) / environment_key, workload)


def find_baseline(root: Path, environment_key: str, workload: str) -> Lookup:
    path = baseline_path(root, environment_key, workload)
    if path.exists():
        counted = baseline_counters_path(root, environment_key, workload)
        counters = load_counters(counted) if counted.exists() else None
        if counters is not None and (counters.workload != workload or counters.device != environment_key.split("-")[0]):
            raise FileFormatError(f"{counted}: holds the counters of {counters.workload!r} on {counters.device}, "
                                  "not what its path says")
        return Lookup(load_baseline(path), path, counters=counters)
    others = []
    if root.is_dir():
        for candidate in sorted(root.glob(f"*/{workload}.json")):
            others.append(load_baseline(candidate))
    return Lookup(None, path, tuple(others))
