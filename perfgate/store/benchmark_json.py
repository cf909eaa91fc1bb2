"""pytest-benchmark JSON read as perfgate results, so micro-benchmarks get the same verdicts.

pytest-benchmark (``--benchmark-json FILE``, or ``--benchmark-save`` storage files) runs
every benchmark as a series of *rounds* in one pytest process and keeps, per benchmark,
its summary statistics and, unless saved without ``--benchmark-save-data``, the raw
round times (seconds per call). Each benchmark becomes one :class:`RunResult`:

- the workload name is derived from the pytest node id (``test_micro.py::test_sort[64]``
  becomes ``test_micro.test_sort-64``); the node id itself is kept in
  ``workload_source`` and ``data["benchmark"]``;
- the parameters are the benchmark's measuring options (timer, GC, warmup, rounds and
  time limits) and its ``params``, so a change in how it is measured is INCOMPARABLE.
  The round and iteration counts pytest-benchmark *chose* are not parameters: it derives
  them from the measured speed, so a real slowdown changes them;
- the environment comes from ``machine_info`` (torch and torchvision are ``"none"``
  unless a ``pytest_benchmark_update_machine_info`` hook adds ``torch``/``torchvision``);
- ``data`` names every source file with its sha256 and says which statistics apply.

The unit of analysis must be a process (see "How perfgate decides"), and one
pytest-benchmark file is one process. So:

- several files holding the same benchmark (one per pytest run, read together by
  :func:`load_results_dir` or :func:`load_benchmark_files`) give one result with one
  repeat per run, holding that run's rounds: ``statistics = "processes"``, judged exactly
  like perfgate's own workloads;
- one file with raw rounds gives ``BLOCKS`` repeats, each a contiguous block of rounds
  (batch medians): ``"round-blocks"``. Blocks see the noise inside the run, not the
  run-to-run variation;
- one file without raw rounds (or with too few for two blocks) gives one repeat holding
  the run's reported median, and the comparison uses the reported mean, sd and round
  count: ``"summary"``.

A micro-benchmark has no data-wait, copy, forward, backward or optimizer phase: those
series are zeros, which the comparison and the reports leave out, and there is no loss
(0.0) or peak memory (not measured). No torch here: this is the comparing side.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.model.benchmark import KIND, Statistics
from perfgate.model.environment import Environment
from perfgate.model.errors import FileFormatError
from perfgate.model.result import RepeatResult, RunResult, result_from_dict
from perfgate.model.schema import Fields
from perfgate.model.version import __version__
from perfgate.model.workload import PHASES
from perfgate.store.jsonfile import read_json

__all__ = [
    "BLOCKS",
    "KIND",
    "MIN_BLOCK_ROUNDS",
    "is_benchmark_json",
    "load_benchmark_file",
    "load_benchmark_files",
    "load_results_dir",
]


KNOWN_MAJOR_VERSIONS = (3, 4, 5)
"""pytest-benchmark releases whose JSON layout this reader knows (unchanged from 3.0 to 5.x)."""
BLOCKS = 10
"""Contiguous blocks of rounds per single-run result: 10 is the usual batch count of the
batch-means method (enough degrees of freedom, blocks long enough to absorb the
autocorrelation of consecutive rounds)."""
MIN_BLOCK_ROUNDS = 5
"""Fewer rounds per block than this and a block median is not a summary; below two such
blocks a single run is judged from its summary statistics instead."""
NO_TORCH = "none"
"""Torch version of a micro-benchmark: pytest-benchmark does not record it."""

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_STATS = ("min", "max", "mean", "stddev", "median", "iqr", "q1", "q3")


def is_benchmark_json(data: object) -> bool:
    """Whether a parsed JSON document is pytest-benchmark output (perfgate files have a
    ``kind``; pytest-benchmark's have ``benchmarks``/``machine_info`` and a ``version``).

    True also for a malformed pytest-benchmark file, so that reading it reports what is
    wrong with it rather than "not a perfgate result".
    """
    if not isinstance(data, dict) or "kind" in data:
        return False
    return "benchmarks" in data or ("machine_info" in data and "version" in data)


def workload_name(fullname: str) -> str:
    """A perfgate workload name for a pytest node id, deterministic and at most 64 chars.

    ``tests/bench/test_collate.py::TestLoader::test_collate[64-fast]`` becomes
    ``test_collate.testloader.test_collate-64-fast``: the module's file name without
    ``.py``, the class and function, then the parameter id. Too long a name is cut and
    ends in a hash of the node id, so it stays unique.
    """
    parts = fullname.split("::")
    module = parts[0].replace("\\", "/").rsplit("/", 1)[-1]
    module = module[:-3] if module.endswith(".py") else module
    tail = ".".join(parts[1:])
    param = ""
    if tail.endswith("]") and "[" in tail:
        tail, param = tail[:-1].split("[", 1)
    raw = ".".join(p for p in (module, tail) if p) + (f"-{param}" if param else "")
    name = re.sub(r"[^a-z0-9._-]+", "-", raw.lower())
    name = re.sub(r"-{2,}", "-", name).lstrip("._-").rstrip("-")
    digest = hashlib.sha256(fullname.encode()).hexdigest()[:8]
    if not name:
        return f"benchmark-{digest}"
    if len(name) > 64:
        name = f"{name[:55].rstrip('._-')}-{digest}"
    return name if _NAME_RE.match(name) else f"benchmark-{digest}"


@dataclass(frozen=True)
class _File:
    """What every benchmark of one file shares."""

    path: Path
    sha256: str
    version: str
    created_at: str
    environment: Environment
    commit: tuple[str | None, bool | None]


@dataclass(frozen=True)
class _Run:
    """One benchmark as one pytest-benchmark run (one process) measured it."""

    workload: str
    fullname: str
    file: _File
    params: Mapping[str, Any]
    timer: str
    rounds: int
    iterations: int
    stats_ms: Mapping[str, float]
    raw_ms: tuple[float, ...] | None

    def source(self) -> dict[str, Any]:
        return {
            "path": str(self.file.path),
            "sha256": self.file.sha256,
            "raw_rounds": self.raw_ms is not None,
            "rounds": self.rounds,
            "iterations": self.iterations,
            **{f"{k}_ms": v for k, v in self.stats_ms.items()},
        }


def _version(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"version: expected pytest-benchmark's version string, got {value!r}")
    match = re.match(r"^(\d+)\.\d+", value)
    if match is None or int(match.group(1)) not in KNOWN_MAJOR_VERSIONS:
        known = ", ".join(f"{v}.x" for v in KNOWN_MAJOR_VERSIONS)
        raise ValueError(
            f"pytest-benchmark format version {value!r} is not one perfgate reads ({known}); "
            "upgrade perfgate or re-run with a known pytest-benchmark"
        )
    return value


def _environment(data: dict[str, Any]) -> tuple[Environment, tuple[str | None, bool | None]]:
    info = Fields(data, "").sub("machine_info")
    cpu = info.data.get("cpu")
    if not isinstance(cpu, dict):
        cpu = {}
    brand = next((v for v in (cpu.get("brand_raw"), cpu.get("brand"), info.data.get("processor"),
                              info.data.get("machine")) if isinstance(v, str) and v.strip()), "unknown")
    count = cpu.get("count")
    count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
    python = info.get("python_version", str)
    implementation = info.get("python_implementation", str, optional=True) or "CPython"
    if implementation != "CPython":
        python = f"{implementation.lower()}-{python}"
    system = " ".join(v for v in (info.data.get("system"), info.data.get("release")) if isinstance(v, str))

    def optional_version(key: str) -> str:
        value = info.data.get(key)
        return value if isinstance(value, str) and value.strip() else NO_TORCH

    commit_info = data.get("commit_info")
    if not isinstance(commit_info, dict):
        commit_info = {}
    commit = commit_info.get("id")
    commit = commit if isinstance(commit, str) and commit not in ("", "unversioned", "unknown") else None
    dirty = commit_info.get("dirty")
    dirty = dirty if isinstance(dirty, bool) else None
    env = Environment(
        device="cpu",
        torch=optional_version("torch"),
        torchvision=optional_version("torchvision"),
        python=python,
        cpu_model=brand.strip(),
        cpu_count=count,
        os=system or "unknown",
        git_commit=commit,
        git_dirty=dirty,
    )
    return env, (commit, dirty)


def _benchmark(data: object, where: str, file: _File) -> _Run:
    f = Fields(data, where)
    name = f.get("name", str)
    fullname = f.get("fullname", str, optional=True) or name
    options = f.get("options", dict)
    params: dict[str, Any] = dict(sorted(options.items()))
    bench_params = f.get("params", dict, optional=True) or {}
    params.update({f"param.{k}": v for k, v in sorted(bench_params.items())})
    stats = f.sub("stats")
    values: dict[str, float] = {}
    for key in _STATS:
        value = stats.number(key)
        assert value is not None
        if value < 0:
            raise ValueError(f"{stats.where}.{key}: negative time {value}")
        values[key] = value
    for key in ("mean", "median"):
        if values[key] <= 0:
            raise ValueError(f"{stats.where}.{key}: expected a positive time, got {values[key]}")
    rounds = stats.get("rounds", int)
    iterations = stats.get("iterations", int)
    if rounds < 1 or iterations < 1:
        raise ValueError(f"{stats.where}: rounds and iterations must be >= 1, got {rounds} and {iterations}")
    raw = stats.data.get("data")
    raw_ms: tuple[float, ...] | None = None
    if raw is not None:
        if not isinstance(raw, list) or len(raw) != rounds:
            got = f"{len(raw)} values" if isinstance(raw, list) else type(raw).__name__
            raise ValueError(f"{stats.where}.data: expected the {rounds} round times, got {got}")
        for i, v in enumerate(raw):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{stats.where}.data[{i}]: expected a finite time >= 0, got {v!r}")
        if not (math.isclose(min(raw), values["min"], rel_tol=1e-9)
                and math.isclose(max(raw), values["max"], rel_tol=1e-9)):
            raise ValueError(f"{stats.where}: the raw round times do not match the file's min and max")
        raw_ms = tuple(float(v) * 1e3 for v in raw)
    timer = options.get("timer")
    return _Run(
        workload=workload_name(fullname),
        fullname=fullname,
        file=file,
        params=params,
        timer=str(timer) if timer is not None else "unknown",
        rounds=rounds,
        iterations=iterations,
        stats_ms={k: values[k] * 1e3 for k in ("mean", "stddev", "median", "iqr", "min", "max")},
        raw_ms=raw_ms,
    )


def _runs(data: object, path: Path, sha256: str) -> list[_Run]:
    """Every benchmark of one parsed file; raises ``ValueError`` saying what is wrong."""
    if not is_benchmark_json(data):
        raise ValueError("not pytest-benchmark JSON (no 'benchmarks' list and no 'machine_info'/'version')")
    assert isinstance(data, dict)
    version = _version(data.get("version"))
    benchmarks = Fields(data, "").get("benchmarks", list)
    if not benchmarks:
        raise ValueError("benchmarks: the file holds no benchmarks (did every benchmark fail or get skipped?)")
    environment, commit = _environment(data)
    created = data.get("datetime")
    file = _File(path, sha256, version, created if isinstance(created, str) else "", environment, commit)
    runs: dict[str, _Run] = {}
    for i, bench in enumerate(benchmarks):
        run = _benchmark(bench, f"benchmarks[{i}]", file)
        if run.workload in runs:
            raise ValueError(f"benchmarks {runs[run.workload].fullname!r} and {run.fullname!r} both map to "
                             f"the workload name {run.workload!r}; rename one")
        runs[run.workload] = run
    return list(runs.values())


def _read(path: Path, what: str) -> tuple[object, str]:
    data = read_json(path, what)
    return data, hashlib.sha256(path.read_bytes()).hexdigest()


def _repeat(index: int, run: _Run, step_ms: tuple[float, ...], calls: int) -> RepeatResult:
    total_ms = sum(step_ms) if len(step_ms) == calls else run.stats_ms["mean"] * calls
    window_s = total_ms * run.iterations / 1e3
    return RepeatResult(
        index=index,
        started_at=run.file.created_at,
        timing=f"pytest-benchmark {run.timer}",
        window_s=window_s,
        phases_ms={**{p: (0.0,) * len(step_ms) for p in PHASES}, "step": step_ms},
        samples_per_s=calls * run.iterations / window_s if window_s > 0 else 1e3 / run.stats_ms["mean"],
        peak_memory_bytes=None,
        peak_memory_kind="not measured",
        torch_settings={},
        loader_settings={},
    )


def _blocks(values: tuple[float, ...], k: int) -> list[tuple[float, ...]]:
    size, extra = divmod(len(values), k)
    out, start = [], 0
    for i in range(k):
        end = start + size + (1 if i < extra else 0)
        out.append(values[start:end])
        start = end
    return out


def _result(runs: Sequence[_Run]) -> RunResult:
    """One result from one run (blocks or summary) or several runs (one repeat per run)."""
    first = runs[0]
    data: dict[str, Any] = {
        "kind": KIND,
        "description": f"pytest-benchmark {first.fullname}",
        "benchmark": first.fullname,
        "pytest_benchmark_version": first.file.version,
        "sources": [r.source() for r in runs],
    }
    if len(runs) > 1:
        data["statistics"] = Statistics.PROCESSES
        data["processes"] = len(runs)
        repeats = tuple(
            _repeat(i, r, r.raw_ms, r.rounds) if r.raw_ms is not None
            else _repeat(i, r, (r.stats_ms["median"],), r.rounds)
            for i, r in enumerate(runs)
        )
    elif first.raw_ms is not None and first.rounds >= 2 * MIN_BLOCK_ROUNDS:
        k = min(BLOCKS, first.rounds // MIN_BLOCK_ROUNDS)
        data["statistics"] = Statistics.BLOCKS
        data["blocks"] = k
        repeats = tuple(_repeat(i, first, block, len(block)) for i, block in enumerate(_blocks(first.raw_ms, k)))
    else:
        data["statistics"] = Statistics.SUMMARY
        repeats = (_repeat(0, first, (first.stats_ms["median"],), first.rounds),)
    return RunResult(
        workload=first.workload,
        workload_version=1,
        workload_source=f"pytest-benchmark {first.fullname}",
        device="cpu",
        params=dict(first.params),
        overrides={},
        environment=first.file.environment,
        data=data,
        created_at=first.file.created_at,
        perfgate_version=__version__,
        repeats=repeats,
    )


def load_benchmark_file(path: Path) -> list[RunResult]:
    """One result per benchmark of one pytest-benchmark file (one run: blocks or summary)."""
    data, sha = _read(path, "pytest-benchmark JSON")
    try:
        runs = _runs(data, path, sha)
    except ValueError as exc:
        raise FileFormatError(f"{path}: {exc}") from None
    return [_result([r]) for r in runs]


def _merge(runs: Sequence[_Run]) -> RunResult:
    first = runs[0]
    seen: dict[tuple[Any, ...], _Run] = {}
    for run in runs:
        # --benchmark-json and --benchmark-save of one session hold the same measurements:
        # counting them as two runs would halve the run-to-run variation.
        fingerprint = (run.rounds, run.iterations, *sorted(run.stats_ms.items()))
        if fingerprint in seen:
            raise FileFormatError(
                f"{run.file.path}: {run.fullname} holds the same measurements as in {seen[fingerprint].file.path} "
                "(one pytest run saved twice?); keep one file per run"
            )
        seen[fingerprint] = run
    for other in runs[1:]:
        what = None
        if other.params != first.params:
            diff = sorted(k for k in set(first.params) | set(other.params)
                          if first.params.get(k) != other.params.get(k))
            what = f"options {', '.join(diff)}"
        elif other.file.environment.key() != first.file.environment.key():
            what = f"environment ({', '.join(first.file.environment.differences(other.file.environment))})"
        elif other.file.commit != first.file.commit:
            what = f"commit ({first.file.commit[0]} vs {other.file.commit[0]})"
        if what:
            raise FileFormatError(
                f"{other.file.path}: {first.workload} was measured differently in {first.file.path}: {what}; "
                "files read together must be runs of one commit on one machine with the same options"
            )
    return _result(runs)


def load_benchmark_files(paths: Sequence[Path]) -> list[RunResult]:
    """Several pytest-benchmark files, one pytest run each: a benchmark found in more than
    one file becomes one result with one repeat per run (``statistics = "processes"``)."""
    grouped: dict[str, list[_Run]] = {}
    for path in paths:
        data, sha = _read(path, "pytest-benchmark JSON")
        try:
            for run in _runs(data, path, sha):
                grouped.setdefault(run.workload, []).append(run)
        except ValueError as exc:
            raise FileFormatError(f"{path}: {exc}") from None
    return [_merge(runs) for runs in grouped.values()]


def load_results_dir(directory: Path) -> list[RunResult]:
    """Every ``*.json`` in ``directory``: perfgate results and pytest-benchmark files alike,
    told apart by content; pytest-benchmark files there are runs of one commit and are
    merged per benchmark (see :func:`load_benchmark_files`); counted runs' ``*.counters.json``
    are left out. Anything else, or two files
    holding the same workload, is a :class:`FileFormatError`."""
    if not directory.is_dir():
        raise FileFormatError(f"{directory}: results directory not found")
    files = sorted(p for p in directory.glob("*.json")
                   if not p.name.startswith(".") and not p.name.endswith(".counters.json"))  # counted runs' files
    results: list[RunResult] = []
    origin: dict[str, Path] = {}
    grouped: dict[str, list[_Run]] = {}
    for path in files:
        data, sha = _read(path, "result")
        try:
            if is_benchmark_json(data):
                for run in _runs(data, path, sha):
                    grouped.setdefault(run.workload, []).append(run)
                    origin.setdefault(run.workload, path)
                continue
            if not (isinstance(data, dict) and "kind" in data):
                raise ValueError("neither a perfgate result (no 'kind') nor pytest-benchmark JSON "
                                 "(no 'benchmarks')")
            result = result_from_dict(data)
        except ValueError as exc:
            raise FileFormatError(f"{path}: {exc}") from None
        if result.workload in origin:
            raise FileFormatError(f"{path}: workload {result.workload} is also in {origin[result.workload]}")
        origin[result.workload] = path
        results.append(result)
    for name, runs in grouped.items():
        clash = next((r for r in results if r.workload == name), None)
        if clash is not None:
            raise FileFormatError(f"{runs[0].file.path}: benchmark {runs[0].fullname} maps to workload {name}, "
                                  f"which a perfgate result in {directory} also holds")
        results.append(_merge(runs))
    return results
