"""``perfgate judge``: the verdict on a pull request's measurements, by trusted code.

The job that measures a pull request runs the pull request's code, so it cannot be
trusted with the verdict: its files are data. This module is the other half. It reads
what the measuring job left (the head's result files, the base side's in ``base/``, and
the manifest ``run.json``) as untrusted input (``perfgate.store.untrusted``: sizes, finite
numbers, safe names), and judges it by the base commit's rules: the base checkout's
``[tool.perfgate]`` and baselines, perfgate's defaults from the code running here (the
default branch's, in the judge workflow), and the looks replayed from the measured blocks
or repeats exactly as the gate plans them. Nothing the pull request wrote chooses the
design, the thresholds, α, the number of blocks or what must be measured.

What must be measured is the base's: every workload in the base's ``workloads``
selection, or (without one) every workload with a baseline for this device in the base's
store, every workload the base side measured, and every one the base tree defines that
the head lacks. A workload with no result is an ERROR naming it (removed or renamed by
the pull request, or skipped), unless the pull request removes its baseline, which
retires it in plain view of the reviewers.

It writes the report (``report.md``, ``report.json``) and the comment (``comment.md``,
every run-derived string made inert), appends to the job summary, and writes the step's
outputs (``verdict``, ``exit-code``, ``state`` and ``description`` for a commit status).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TextIO, TypeVar

from perfgate.analysis.compare import Counted, Entry, GateOutcome, Pairing, compare, stored_counted
from perfgate.analysis.decide import Verdict
from perfgate.analysis.stats import paired_look_correlation
from perfgate.gate.config import Settings, load_settings
from perfgate.gate.github import path_variable, set_output, workflow_command
from perfgate.gate.inputs import (
    HEAD_PYPROJECT_BYTES,
    PYPROJECT,
    InputChanges,
    classify,
    notice_markdown,
    perfgate_table,
    perfgate_table_of,
    read_changed_files,
    relative_to,
    settings_changes,
)
from perfgate.model.baseline import baseline_from_dict
from perfgate.model.counters import COUNTERS_SUFFIX, CounterSet, counters_from_dict
from perfgate.model.environment import Environment
from perfgate.model.errors import (
    EXIT_ERROR,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_REGRESSION,
    FileFormatError,
    PerfgateError,
    UsageError,
)
from perfgate.model.result import RunResult, result_from_dict
from perfgate.model.version import __version__
from perfgate.report.json_report import outcome_to_dict
from perfgate.report.markdown import GITHUB_COMMENT_LIMIT, MARKER, render_markdown
from perfgate.store.baselines import find_baseline
from perfgate.store.jsonfile import write_json_atomic, write_text_atomic
from perfgate.store.untrusted import KEY_RE, LIMITS, SHA_RE, Limits, list_folder, read_untrusted_json, safe_name
from perfgate.text.inert import code, inline, terminal

MANIFEST_NAME = "run.json"
MANIFEST_KIND = "perfgate.ci-run"
MANIFEST_SCHEMA_VERSION = 1
BASE_DIR_NAME = "base"
VERDICT_WORD = {EXIT_OK: "pass", EXIT_REGRESSION: "regression", EXIT_ERROR: "error",
                EXIT_INCONCLUSIVE: "inconclusive"}
STATUS_STATE = {EXIT_OK: "success", EXIT_INCONCLUSIVE: "success", EXIT_REGRESSION: "failure",
                EXIT_ERROR: "error"}
CHECK_LINE = {
    EXIT_OK: "**Check: passes.**",
    EXIT_REGRESSION: "**Check: fails** (exit code 1): a regression.",
    EXIT_ERROR: "**Check: fails as an error** (exit code 2): perfgate could not judge every workload. "
                "This is not a verdict on speed.",
    EXIT_INCONCLUSIVE: "**Check: neutral** (exit code 3): undecided after the planned looks; the check "
                       "passes with a warning. More repeats or baseline recordings decide it, not a re-run.",
}
DESIGNS = ("paired", "stored")


# --- the manifest the measuring job writes ------------------------------------------------

@dataclass(frozen=True)
class RunManifest:
    """What the measuring job says about its run: who it measured and what went wrong.

    Written by ``perfgate ci --measure-only``; read back as untrusted data. The judge
    uses it to name failures and the pull request, never to choose a rule.
    """

    design: str
    device: str
    workloads: tuple[str, ...]
    """The head's workloads the job set out to measure, in order."""
    pr_number: int | None = None
    head_sha: str | None = None
    head_ref: str | None = None
    head_repo: str | None = None
    base_sha: str | None = None
    base_ref: str | None = None
    errors: Mapping[str, str] = field(default_factory=dict)
    """Head workloads that could not be measured, with the message."""
    base_errors: Mapping[str, str] = field(default_factory=dict)
    """Paired: workloads whose base side could not be measured."""
    base_missing: tuple[str, ...] = ()
    """Paired: head workloads the base commit does not define (new workloads)."""
    base_only: tuple[str, ...] = ()
    """Paired: workloads the base commit defines that the head does not (removed or renamed)."""
    notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per workload, repeats or blocks measured again or kept although contended."""
    failure: str | None = None
    """The measuring job's own error, when it could not measure at all."""
    second_look_blocks: int | None = None
    clocks: str | None = None
    perfgate_version: str = __version__

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": MANIFEST_KIND,
            "schema_version": MANIFEST_SCHEMA_VERSION,
            "perfgate_version": self.perfgate_version,
            "design": self.design,
            "device": self.device,
            "workloads": list(self.workloads),
            "pr_number": self.pr_number, "head_sha": self.head_sha, "head_ref": self.head_ref,
            "head_repo": self.head_repo, "base_sha": self.base_sha, "base_ref": self.base_ref,
            "errors": dict(self.errors),
            "base_errors": dict(self.base_errors),
            "base_missing": list(self.base_missing),
            "base_only": list(self.base_only),
            "notes": {k: list(v) for k, v in self.notes.items()},
            "failure": self.failure,
            "second_look_blocks": self.second_look_blocks,
            "clocks": self.clocks,
        }


def _str_or_none(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where}{key}: expected a string")
    return value


def _names(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of workload names")
    return tuple(safe_name(v, f"{where}[{i}]") for i, v in enumerate(value))


def _messages(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object of workload names to messages")
    out = {}
    for key, message in value.items():
        safe_name(key, f"{where} key")
        if not isinstance(message, str):
            raise ValueError(f"{where}.{key}: expected a message string")
        out[key] = message
    return out


def manifest_from_dict(data: object) -> RunManifest:
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object at the top level")
    if data.get("kind") != MANIFEST_KIND:
        raise ValueError(f"not a {MANIFEST_KIND} file (kind is {str(data.get('kind'))[:40]!r})")
    version = data.get("schema_version")
    if version != MANIFEST_SCHEMA_VERSION:
        raise ValueError(f"schema_version {str(version)[:20]} is not {MANIFEST_SCHEMA_VERSION}")
    design = data.get("design")
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {', '.join(DESIGNS)}")
    device = data.get("device")
    if not isinstance(device, str) or not re.fullmatch(r"[a-z0-9:]{1,16}", device):
        raise ValueError("device: expected a device name such as cuda or cpu")
    pr = data
    number = pr.get("pr_number")
    if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
        raise ValueError("pr_number: expected a positive integer")
    shas = {}
    for key in ("head_sha", "base_sha"):
        value = _str_or_none(pr, key, "")
        if value is not None and not SHA_RE.fullmatch(value):
            raise ValueError(f"{key}: expected 40 hexadecimal digits")
        shas[key] = value
    notes_raw = data.get("notes") or {}
    if not isinstance(notes_raw, dict):
        raise ValueError("notes: expected an object")
    notes = {}
    for key, lines in notes_raw.items():
        safe_name(key, "notes key")
        if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines) or len(lines) > 100:
            raise ValueError(f"notes.{key}: expected a list of at most 100 strings")
        notes[key] = tuple(lines)
    second = data.get("second_look_blocks")
    if second is not None and (isinstance(second, bool) or not isinstance(second, int) or not 1 <= second <= 1000):
        raise ValueError("second_look_blocks: expected an integer from 1 to 1000")
    return RunManifest(
        design=design, device=device, workloads=_names(data.get("workloads", []), "workloads"),
        pr_number=number, head_sha=shas["head_sha"], head_ref=_str_or_none(pr, "head_ref", ""),
        head_repo=_str_or_none(pr, "head_repo", ""), base_sha=shas["base_sha"],
        base_ref=_str_or_none(pr, "base_ref", ""),
        errors=_messages(data.get("errors") or {}, "errors"),
        base_errors=_messages(data.get("base_errors") or {}, "base_errors"),
        base_missing=_names(data.get("base_missing") or [], "base_missing"),
        base_only=_names(data.get("base_only") or [], "base_only"),
        notes=notes, failure=_str_or_none(data, "failure", ""), second_look_blocks=second, clocks=_str_or_none(data, "clocks", ""),
        perfgate_version=_str_or_none(data, "perfgate_version", "") or "unknown",
    )


# --- reading what the measuring job left ----------------------------------------------------

@dataclass(frozen=True)
class Measured:
    manifest: RunManifest | None
    head: Mapping[str, RunResult]
    base: Mapping[str, RunResult]
    head_counters: Mapping[str, CounterSet] = field(default_factory=dict)
    """The head's counted runs (``<workload>.counters.json``)."""
    base_counters: Mapping[str, CounterSet] = field(default_factory=dict)
    """The base side's counted runs (``base/<workload>.counters.json``)."""


_ENV_TYPES: dict[str, tuple[type, ...]] = {"cpu_count": (int,), "git_dirty": (bool, type(None))}


def _check_environment(result: RunResult, where: str) -> None:
    for f in dataclasses.fields(Environment):
        value = getattr(result.environment, f.name)
        kinds = _ENV_TYPES.get(f.name, (str, type(None)))
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise ValueError(f"{where}environment.{f.name}: expected {' or '.join(k.__name__ for k in kinds)}")
    if not KEY_RE.fullmatch(result.environment.key()):
        raise ValueError(f"{where}environment: its key is not a safe folder name")


T = TypeVar("T", RunResult, CounterSet)


def _load_named(root: Path, files: Sequence[Path], limits: Limits, what: str, suffix: str,
                parse: Callable[[Any], T]) -> dict[str, T]:
    """Each file parsed as an untrusted document of one workload, which must be named
    ``<workload><suffix>``; one FileFormatError line naming the file otherwise."""
    out: dict[str, T] = {}
    for rel in files:
        path = root / rel
        data = read_untrusted_json(path, what, limits)
        try:
            document = parse(data)
            safe_name(document.workload, "workload")
            if rel.name != document.workload + suffix:
                raise ValueError(f"holds workload {document.workload!r}, but a {what} file is named after its "
                                 "workload")
            if isinstance(document, RunResult):
                _check_environment(document, "")
        except (ValueError, TypeError, AttributeError) as exc:
            raise FileFormatError(f"{path}: {exc}") from None
        out[document.workload] = document
    return out


def load_measured(directory: Path, limits: Limits = LIMITS) -> Measured:
    """The head's results, the base side's (``base/``), their counted runs' counters
    (``*.counters.json``) and the manifest, all checked."""
    files = list_folder(directory, limits)
    head_files, base_files = [], []
    head_counted, base_counted = [], []
    manifest = None
    for rel in files:
        parts = rel.parts
        if rel.name.endswith(COUNTERS_SUFFIX) and len(parts) == 1:
            head_counted.append(rel)
        elif rel.name.endswith(COUNTERS_SUFFIX) and len(parts) == 2 and parts[0] == BASE_DIR_NAME:
            base_counted.append(Path(parts[1]))
        elif rel == Path(MANIFEST_NAME):
            data = read_untrusted_json(directory / rel, "run manifest", limits)
            try:
                manifest = manifest_from_dict(data)
            except ValueError as exc:
                raise FileFormatError(f"{directory / rel}: {exc}") from None
        elif len(parts) == 1 and rel.suffix == ".json":
            head_files.append(rel)
        elif len(parts) == 2 and parts[0] == BASE_DIR_NAME and rel.suffix == ".json":
            base_files.append(Path(parts[1]))
        else:
            raise FileFormatError(f"{directory / rel}: unexpected file; a results folder holds <workload>.json, "
                                  f"{BASE_DIR_NAME}/<workload>.json, their <workload>{COUNTERS_SUFFIX} and "
                                  f"{MANIFEST_NAME} only")
    base = directory / BASE_DIR_NAME
    return Measured(manifest, _load_named(directory, head_files, limits, "result", ".json", result_from_dict),
                    _load_named(base, base_files, limits, "result", ".json", result_from_dict),
                    _load_named(directory, head_counted, limits, "counters", COUNTERS_SUFFIX, counters_from_dict),
                    _load_named(base, base_counted, limits, "counters", COUNTERS_SUFFIX, counters_from_dict))


# --- the base's rules ------------------------------------------------------------------------

def base_settings(base_dir: Path, cli: Mapping[str, Any] | None = None) -> Settings:
    """Settings, thresholds and the baseline store from the base checkout's pyproject.toml.

    ``workloads_path`` entries name code, which is the pull request's: they are taken at
    the same place in the pull request's checkout (the current directory).
    """
    pyproject = base_dir / PYPROJECT
    settings = load_settings(pyproject, cli or {})
    if not pyproject.is_file():
        settings = dataclasses.replace(settings, baselines=base_dir / "baselines")
    paths = []
    for entry in settings.workloads_path:
        try:
            paths.append(str(Path(entry).relative_to(base_dir)))
        except ValueError:
            paths.append(entry)
    return dataclasses.replace(settings, workloads_path=tuple(paths))


def git_commit_of(directory: Path) -> str | None:
    """The commit checked out in ``directory``, or None when it is not a git checkout."""
    if not (directory / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                               "-C", str(directory), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def gated_by_base(settings: Settings, device: str) -> dict[str, str]:
    """The workloads the base gates on ``device``, each with why: its ``workloads``
    selection, or else every workload with a baseline for the device in its store."""
    if settings.workloads:
        return {name: "the base's `[tool.perfgate] workloads` lists it" for name in settings.workloads}
    gated: dict[str, str] = {}
    store = settings.baselines
    if store.is_dir():
        for path in sorted(store.glob(f"{device}-*/*.json")):
            if path.name.endswith(COUNTERS_SUFFIX):
                continue  # a baseline's counted run, beside it
            if KEY_RE.fullmatch(path.parent.name) and path.is_file() and not path.is_symlink():
                name = path.stem
                try:
                    safe_name(name, "baseline")
                except ValueError:
                    continue
                gated.setdefault(name, f"the base has its baseline {path.parent.name}/{path.name}")
    return gated


# --- judging: the looks replayed from the measured blocks or repeats --------------------------

@dataclass(frozen=True)
class Judgement:
    outcome: GateOutcome
    retired: tuple[str, ...] = ()
    """Workloads the base gates that the pull request retires by removing their baselines."""


def _keep(result: RunResult, keep: Any) -> RunResult | None:
    repeats = tuple(r for r in result.repeats if keep(r))
    return dataclasses.replace(result, repeats=repeats) if repeats else None


def _blocks(result: RunResult) -> set[int]:
    return {r.block for r in result.repeats if r.block is not None}


def _missing_blocks(head: RunResult, base: RunResult, lo: int, hi: int) -> str | None:
    if any(r.block is None for r in (*head.repeats, *base.repeats)):
        return "a repeat carries no ABBA block, which the paired design needs"
    want = set(range(lo, hi))
    for side, result in (("head", head), ("base", base)):
        lacking = sorted(want - _blocks(result))
        if lacking:
            shown = ", ".join(str(b) for b in lacking[:8]) + (" …" if len(lacking) > 8 else "")
            return f"the {side} side lacks block(s) {shown} of the planned {lo}–{hi - 1}"
    return None


def _with_notes(outcome: GateOutcome, notes: Mapping[str, Sequence[str]]) -> GateOutcome:
    comparisons = [dataclasses.replace(c, left_out=(*c.left_out, *notes[c.workload])) if notes.get(c.workload)
                   else c for c in outcome.comparisons]
    return dataclasses.replace(outcome, comparisons=tuple(comparisons))


def judge_measured(measured: Measured, settings: Settings, *, design: str, against: str | None = None,
                   changes: InputChanges | None = None) -> Judgement:
    """The gate's outcome for what was measured, by the rules in ``settings`` (the base's)."""
    manifest = measured.manifest
    if manifest is not None and manifest.failure:
        raise UsageError(f"the measuring job could not measure: {manifest.failure}")
    if manifest is not None and manifest.design != design:
        raise UsageError(f"the results were measured for the {manifest.design} design; this judge applies the "
                         f"{design} design (the rule is the judge's, not the measuring job's)")
    devices = {r.device for r in (*measured.head.values(), *measured.base.values())}
    if manifest is not None:
        devices.add(manifest.device)
    if len(devices) != 1:
        raise UsageError("no results to judge" if not devices else
                         f"the results mix devices ({', '.join(sorted(devices))}); a gate judges one")
    device = devices.pop()
    expected = dict.fromkeys(manifest.workloads if manifest else ())
    why: dict[str, str] = {}
    for name, reason in gated_by_base(settings, device).items():
        expected.setdefault(name)
        why[name] = reason
    for name in sorted(measured.head):
        expected.setdefault(name)
    if design == "paired":
        for name in sorted(measured.base):
            expected.setdefault(name)
            why.setdefault(name, "the base side was measured")
        for name in manifest.base_only if manifest else ():
            expected.setdefault(name)
            why.setdefault(name, "the base commit defines it")
    retired = tuple(n for n in expected if n not in measured.head and changes is not None
                    and changes.removes_baseline_of(n) and not (manifest and n in manifest.errors))
    names = [n for n in expected if n not in retired]
    errors: dict[str, str] = {}
    for name in names:
        if manifest is not None and name in manifest.errors:
            errors[name] = f"could not be measured: {manifest.errors[name]}"
        elif name not in measured.head:
            errors[name] = (f"no result for {name!r}, which the base branch gates ({why.get(name, 'listed')}): "
                            "the pull request removed or renamed it, or the measuring job skipped it. A workload "
                            "is retired by a pull request that removes its baseline")
        elif design == "paired":
            if manifest is not None and name in manifest.base_errors:
                errors[name] = f"the base side ({(against or '?')[:7]}) failed: {manifest.base_errors[name]}"
            elif name not in measured.base:
                errors[name] = (f"the base commit {(against or '?')[:7]} has no workload {name!r} measured; a new "
                                f"workload is gated against a stored baseline once one is recorded "
                                f"(perfgate rebaseline {name})")
    config = settings.gate
    notes = manifest.notes if manifest else {}

    def lookup(result: RunResult) -> Any:
        return find_baseline(settings.baselines, result.environment.key(), result.workload)

    if design == "paired":
        first_blocks = settings.blocks
        extra = (manifest.second_look_blocks if manifest and manifest.second_look_blocks else None) or first_blocks
        rho = paired_look_correlation(first_blocks, first_blocks + extra) if config.looks == 2 else None

        def counted(name: str) -> Counted:
            if not config.counters:
                return Counted(note="not compared: counters = false in the base's [tool.perfgate]")
            base_c, head_c = measured.base_counters.get(name), measured.head_counters.get(name)
            lacking = [side for side, c in (("head", head_c), ("base", base_c)) if c is None]
            note = (f"not compared: no counted run of the {' and the '.join(lacking)} side"
                    f"{'s' if len(lacking) == 2 else ''} in the results" if lacking else None)
            return Counted(base_c, head_c, note)

        def entries(which: Sequence[str], hi: int, lo: int = 0) -> list[Entry]:
            out = []
            for name in which:
                if name in errors:
                    out.append(Entry(name, None, None, error=errors[name]))
                    continue
                head, base = measured.head[name], measured.base[name]
                problem = _missing_blocks(head, base, lo, hi)
                if problem:
                    look = "the first look" if lo == 0 else "the planned second look"
                    out.append(Entry(name, None, None, error=f"{look} was not measured whole: {problem}"))
                    continue
                h = _keep(head, lambda r: r.block is not None and r.block < hi)
                b = _keep(base, lambda r: r.block is not None and r.block < hi)
                out.append(Entry(name, h, lookup(head), pairing=Pairing(b, against or "base"),  # type: ignore[arg-type]
                                 counted=counted(name)))
            return out

        first = compare(entries(names, first_blocks), config, look=1, per_workload=settings.per_workload, rho=rho)
        second_entries = lambda again: entries(again, first_blocks + extra, first_blocks)  # noqa: E731
    else:
        repeats = settings.repeats
        extra = config.second_look_repeats or repeats
        rho = None

        def stored(which: Sequence[str], count: int, second: bool) -> list[Entry]:
            out = []
            for name in which:
                if name in errors:
                    out.append(Entry(name, None, None, error=errors[name]))
                    continue
                result = measured.head[name]
                ordered = sorted(result.repeats, key=lambda r: r.index)
                if len(ordered) < count:
                    look = "the planned second look" if second else "the first look"
                    out.append(Entry(name, None, None, error=f"{look} was not measured whole: {len(ordered)} "
                                                             f"repeat(s) of the planned {count}"))
                    continue
                kept = dataclasses.replace(result, repeats=tuple(ordered[:count]))
                found = lookup(result)
                out.append(Entry(name, kept, found,
                                 counted=stored_counted(found, measured.head_counters.get(name), config)))
            return out

        first = compare(stored(names, repeats, False), config, look=1, per_workload=settings.per_workload)
        second_entries = lambda again: stored(again, repeats + extra, True)  # noqa: E731
    first = _with_notes(first, notes)
    again = [c.workload for c in first.comparisons if c.second_look]
    if not again:
        return Judgement(first, retired)
    decided = [n for n in names if n not in again]
    second = compare(second_entries(again), config, look=2, already_decided=decided,
                     per_workload=settings.per_workload, rho=rho)
    second = _with_notes(second, notes)
    by_name = {c.workload: c for c in first.comparisons}
    by_name.update({c.workload: c for c in second.comparisons})
    return Judgement(GateOutcome(tuple(by_name[n] for n in names), config, look=2, rho=rho), retired)


# --- the report ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReportContext:
    """Who and what was judged, for the report's closing line (all of it shown inert)."""

    base_ref: str
    base_sha: str
    pr_number: int | None = None
    head_sha: str | None = None
    base_verified: bool = True
    clocks: str | None = None
    run_id: str | None = None
    run_url: str | None = None
    judged_by: str | None = None


def run_link(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    run_id, repo = environ.get("GITHUB_RUN_ID"), environ.get("GITHUB_REPOSITORY")
    if not (run_id and repo and run_id.isdigit() and re.fullmatch(r"[\w.-]+/[\w.-]+", repo)):
        return None, None
    server = environ.get("GITHUB_SERVER_URL", "https://github.com")
    if not re.fullmatch(r"https://[\w.-]+(:\d+)?", server):
        server = "https://github.com"
    return run_id, f"{server}/{repo}/actions/runs/{run_id}"


def compose(outcome: GateOutcome, context: ReportContext, changes: InputChanges | None, *,
            retired: Sequence[str] = (), traces: Mapping[str, Any] | None = None,
            artifacts: Path | None = None) -> str:
    """The whole report: the gate's markdown with the check line, the notice and the context."""
    text = (f"Judged against the baselines and `[tool.perfgate]` of the base branch {code(context.base_ref)} "
            f"({code(context.base_sha[:12])}"
            f"{'' if context.base_verified else ', base checkout not verified as a git commit'})")
    if context.pr_number is not None and context.head_sha:
        text += f"; pull request #{context.pr_number} at {code(context.head_sha[:12])}"
    text += "."
    if context.judged_by:
        text += f" {context.judged_by}"
    if context.clocks:
        text += f" GPU clocks: {inline(context.clocks, limit=300)}."
    if context.run_id and context.run_url:
        text += f" Results and traces: the artifacts of [run {context.run_id}]({context.run_url})."
    retired_lines = []
    if retired:
        retired_lines = ["> [!NOTE]", "> **Retired by this pull request** (their baselines are removed, so they "
                         f"are no longer gated): {', '.join(code(n) for n in retired)}.", ""]
    notice = notice_markdown(changes, context.base_ref, context.base_sha) if changes is not None else []
    extra = ["", CHECK_LINE[outcome.exit_code], "", *notice, *retired_lines, f"<sub>{text}</sub>"]
    extra_text = "\n".join(extra)
    report = render_markdown(outcome, limit=GITHUB_COMMENT_LIMIT - len(extra_text) - 2, traces=traces,
                             relative_to=artifacts.resolve() if artifacts is not None else None)
    head, _, rest = report.partition("\n")
    title, _, rest = rest.partition("\n")
    if head != MARKER or not title.startswith("## "):
        return f"{MARKER}\n{extra_text}\n{report}"
    return f"{head}\n{title}\n{extra_text}\n{rest}"


def error_report(message: str, changes: InputChanges | None, context: ReportContext | None) -> str:
    notice = notice_markdown(changes, context.base_ref, context.base_sha) if changes and context else []
    return "\n".join([MARKER, "## perfgate: error", "", CHECK_LINE[EXIT_ERROR], "", *notice,
                      f"💥 {inline(message)}", ""])


def status_description(outcome: GateOutcome) -> str:
    """One line for the commit status (at most 140 characters; perfgate's words only)."""
    text = outcome.headline.removeprefix("perfgate: ")
    return text if len(text) <= 140 else text[:139] + "…"


# --- the command --------------------------------------------------------------------------------

def _changes(args: argparse.Namespace, base_dir: Path, settings: Settings) -> InputChanges | None:
    if not args.changed_files:
        return None
    changed = read_changed_files(Path(args.changed_files))
    base_table, _ = perfgate_table(base_dir / PYPROJECT)
    head = None
    if args.head_pyproject:
        path = Path(args.head_pyproject)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"--head-pyproject {path}: cannot be read ({exc.strerror})") from None
        if len(data) > HEAD_PYPROJECT_BYTES:
            head = ({}, f"larger than {HEAD_PYPROJECT_BYTES} bytes; not read")
        else:
            try:
                head = perfgate_table_of(data.decode("utf-8"))
            except UnicodeDecodeError:
                head = ({}, "not UTF-8 text")
    store = relative_to(settings.baselines, base_dir) or "baselines"
    return classify(changed, baselines_dir=store,
                    workload_paths=[p for p in settings.workloads_path if not Path(p).is_absolute()],
                    settings=settings_changes(head, base_table, any(p == PYPROJECT for _, p in changed)))


def _write(artifacts: Path, report: str, outcome: GateOutcome | None) -> None:
    write_text_atomic(artifacts / "report.md", report)
    write_text_atomic(artifacts / "comment.md", report)
    if outcome is not None:
        write_json_atomic(artifacts / "report.json", outcome_to_dict(outcome))


def run_judge(args: argparse.Namespace, environ: Mapping[str, str] | None = None,
              out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The whole of ``perfgate judge``; returns the exit code and never raises."""
    environ = os.environ if environ is None else environ
    out, err = out or sys.stdout, err or sys.stderr
    summary, output = path_variable(environ, "GITHUB_STEP_SUMMARY"), path_variable(environ, "GITHUB_OUTPUT")
    artifacts = Path(args.artifacts)
    changes: InputChanges | None = None
    context: ReportContext | None = None
    try:
        base_dir = Path(args.base_dir)
        if not base_dir.is_dir():
            raise UsageError(f"--base-dir {base_dir}: not a directory (check out the base commit there)")
        settings = base_settings(base_dir)
        changes = _changes(args, base_dir, settings)
        measured = load_measured(Path(args.results))
        manifest = measured.manifest
        if manifest is None and (args.expect_head_sha or args.expect_pr):
            raise UsageError(f"{args.results}: no {MANIFEST_NAME}, so the pull request and commit cannot be checked")
        if manifest is not None:
            if args.expect_head_sha and manifest.head_sha != args.expect_head_sha:
                raise UsageError(f"the results are of commit {str(manifest.head_sha)[:12]}, not the expected "
                                 f"{args.expect_head_sha[:12]}")
            if args.expect_pr is not None and manifest.pr_number != args.expect_pr:
                raise UsageError(f"the results are of pull request #{manifest.pr_number}, not #{args.expect_pr}")
        base_commit = git_commit_of(base_dir)
        measured_base = manifest.base_sha if manifest else None
        if base_commit and measured_base and base_commit != measured_base:
            raise UsageError(f"the results were measured against {measured_base[:12]}, but --base-dir is at "
                             f"{base_commit[:12]}: judge with the base commit that was measured")
        against = base_commit or measured_base
        run_id, run_url = run_link(environ)
        context = ReportContext(
            base_ref=(manifest.base_ref if manifest and manifest.base_ref else "base"),
            base_sha=against or "unknown", pr_number=manifest.pr_number if manifest else None,
            head_sha=manifest.head_sha if manifest else None, base_verified=base_commit is not None,
            clocks=manifest.clocks if manifest else None, run_id=run_id, run_url=run_url,
            judged_by=f"Judged by perfgate {__version__}, outside the measuring job.")
        judgement = judge_measured(measured, settings, design=args.design, against=against, changes=changes)
        outcome = judgement.outcome
        report = compose(outcome, context, changes, retired=judgement.retired)
        _write(artifacts, report, outcome)
        if summary is not None:
            with open(summary, "a", encoding="utf-8") as handle:
                handle.write(report)
        code_ = outcome.exit_code
        print(outcome.headline, file=out)
        for c in outcome.comparisons:
            if c.verdict in (Verdict.REGRESSION, Verdict.ERROR, Verdict.INCOMPARABLE):
                print(workflow_command("error", c.reason[:1000], title=f"perfgate {c.verdict.value}: {c.workload}"),
                      file=out)
        if output is not None:
            set_output(output, {"verdict": VERDICT_WORD[code_], "exit-code": str(code_),
                                "state": STATUS_STATE[code_], "description": status_description(outcome),
                                "inputs-changed": "true" if changes is not None and changes.any else "false"})
        return code_
    except Exception as exc:  # noqa: BLE001 - every failure ends as exit 2 with its report and outputs
        if isinstance(exc, PerfgateError):
            message = exc.message
        else:
            message = f"internal error: {type(exc).__name__}: {exc}"
            traceback.print_exc(file=err)
        print(f"perfgate: error: {terminal(message)}", file=err)
        report = error_report(message, changes, context)
        try:
            _write(artifacts, report, None)
            if summary is not None:
                with open(summary, "a", encoding="utf-8") as handle:
                    handle.write(report)
        except OSError as write_error:
            print(f"perfgate: error: could not write the report: {write_error}", file=err)
        if output is not None:
            try:
                set_output(output, {"verdict": "error", "exit-code": str(EXIT_ERROR), "state": "error",
                                    "description": "perfgate could not judge this pull request (see the run)"})
            except OSError as write_error:
                print(f"perfgate: error: could not write the step outputs: {write_error}", file=err)
        return EXIT_ERROR


# --- validating a downloaded baseline folder ------------------------------------------------

def _validate_baseline_counters(root: Path, rel: Path, key: str, name: str, limits: Limits) -> None:
    """``<key>/<workload>.counters.json``: a valid counted run of that workload on the
    key's device, beside that workload's baseline."""
    path = root / rel
    try:
        safe_name(name, "file name")
        counters = counters_from_dict(read_untrusted_json(path, "counters", limits))
    except (ValueError, TypeError) as exc:
        raise FileFormatError(f"{path}: {exc}") from None
    if counters.workload != name or not key.startswith(f"{counters.device}-"):
        raise FileFormatError(f"{path}: holds the counters of {counters.workload!r} on {counters.device}, "
                              "not what its path says")
    if not (root / key / f"{name}.json").is_file():
        raise FileFormatError(f"{path}: a counted run with no baseline {key}/{name}.json beside it")


def validate_baselines(root: Path, limits: Limits = LIMITS) -> list[Path]:
    """Every file of a baseline folder from an untrusted job, checked: ``README.md`` at
    the top, else ``<environment key>/<workload>.json`` holding a valid baseline of that
    workload and key, or ``<environment key>/<workload>.counters.json`` holding its
    counted run. Returns the files; FileFormatError (one line) on the first problem."""
    files = list_folder(root, limits)
    for rel in files:
        parts = PurePosixPath(rel.as_posix()).parts
        if parts == ("README.md",):
            continue
        if len(parts) != 2 or not KEY_RE.fullmatch(parts[0]) or not parts[1].endswith(".json"):
            raise FileFormatError(f"{root / rel}: not <environment key>/<workload>.json")
        if parts[1].endswith(COUNTERS_SUFFIX):
            _validate_baseline_counters(root, rel, parts[0], parts[1][:-len(COUNTERS_SUFFIX)], limits)
            continue
        try:
            safe_name(parts[1][:-5], "file name")
        except ValueError as exc:
            raise FileFormatError(f"{root / rel}: {exc}") from None
        data = read_untrusted_json(root / rel, "baseline", limits)
        try:
            baseline = baseline_from_dict(data)
        except (ValueError, TypeError) as exc:
            raise FileFormatError(f"{root / rel}: {exc}") from None
        if baseline.workload != parts[1][:-5] or baseline.environment_key != parts[0]:
            raise FileFormatError(f"{root / rel}: holds {baseline.workload!r} for {baseline.environment_key!r}, "
                                  "not what its path says")
    return files


def cmd_validate_baselines(args: argparse.Namespace) -> int:
    try:
        files = validate_baselines(Path(args.folder))
    except PerfgateError as exc:
        print(f"perfgate: error: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    for rel in files:
        print(f"valid: {rel.as_posix()}")
    print(f"perfgate: {len(files)} file(s) valid in {args.folder}", file=sys.stderr)
    return EXIT_OK


def cmd_judge(args: argparse.Namespace) -> int:
    return run_judge(args)


def add_parser(subparsers: Any) -> None:
    """Add ``perfgate judge`` and ``perfgate validate-baselines`` to the command line."""
    p = subparsers.add_parser(
        "judge", help="judge result files from an untrusted measuring job by the base commit's rules",
        description="Read RESULTS (the measuring job's <workload>.json files, base/<workload>.json and run.json) "
                    "as untrusted data and judge them with the baselines and [tool.perfgate] of --base-dir. "
                    "Writes report.md, comment.md and report.json to --artifacts; under GitHub Actions also the "
                    "job summary and the step outputs verdict, exit-code, state, description.",
        epilog="exit codes: 0 pass, 1 regression, 2 error or bad input, 3 inconclusive")
    p.add_argument("results", metavar="RESULTS", help="the folder the measuring job uploaded")
    p.add_argument("--base-dir", required=True, metavar="DIR",
                   help="a checkout of the base commit that was measured: baselines and thresholds come from here")
    p.add_argument("--design", choices=DESIGNS, default="paired",
                   help="the design to judge by (default paired); the results must have been measured for it")
    p.add_argument("--artifacts", default="perfgate-judged", metavar="DIR",
                   help="where report.md, comment.md and report.json go (default: perfgate-judged)")
    p.add_argument("--changed-files", metavar="FILE",
                   help="the pull request's changed files, 'status<TAB>path[<TAB>previous path]' per line (from "
                        "the GitHub API): the notice of edited gate inputs, and retired workloads")
    p.add_argument("--head-pyproject", metavar="FILE",
                   help="the pull request's pyproject.toml, as data: the notice names changed [tool.perfgate] keys")
    p.add_argument("--expect-head-sha", metavar="SHA", help="refuse results measured of another commit")
    p.add_argument("--expect-pr", type=int, metavar="N", help="refuse results of another pull request")
    p.set_defaults(func=cmd_judge)
    v = subparsers.add_parser(
        "validate-baselines", help="check a downloaded baseline folder before it is copied into the store",
        description="Every file must be README.md at the top or <environment key>/<workload>.json holding a "
                    "valid baseline of that workload and key; no links, bounded sizes.",
        epilog="exit codes: 0 valid, 2 a problem (named on one line)")
    v.add_argument("folder", metavar="DIR")
    v.set_defaults(func=cmd_validate_baselines)
