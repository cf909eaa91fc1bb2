"""The folders an untrusted job leaves, read and checked file by file.

Two folders come from jobs that run a pull request's code or a GPU runner's: the results
folder of a measuring job (the head's ``<workload>.json``, the base side's under
``base/``, their ``<workload>.counters.json`` and the manifest ``run.json``), which
:func:`load_measured` reads for ``perfgate judge``; and a downloaded baseline folder,
which :func:`validate_baselines` checks for ``perfgate validate-baselines`` before it is
copied into the store. Every file is read with ``perfgate.store.untrusted`` (sizes,
finite numbers, safe names) and then its shape is checked; a problem is one
FileFormatError line naming the file.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from perfgate.model.baseline import baseline_from_dict
from perfgate.model.counters import COUNTERS_SUFFIX, CounterSet, counters_from_dict
from perfgate.model.environment import Environment
from perfgate.model.design import DesignEvidence
from perfgate.model.errors import FileFormatError, UsageError
from perfgate.model.manifest import (
    DESIGNS,
    INTERRUPT_SIGNALS,
    MANIFEST_KIND,
    MANIFEST_NAME,
    MANIFEST_SCHEMA_VERSION,
    RunManifest,
)
from perfgate.model.result import RunResult, result_from_dict
from perfgate.model.shard import parse_shard
from perfgate.store.untrusted import KEY_RE, LIMITS, SHA_RE, Limits, list_folder, read_untrusted_json, safe_name

BASE_DIR_NAME = "base"
"""The folder of a results folder that holds the base side's files (paired design)."""


# --- the manifest the measuring job writes, read back ---------------------------------------

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
    """The manifest from its dict form, each field checked as untrusted data; ValueError
    naming the field otherwise."""
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
    shard = _str_or_none(data, "shard", "")
    if shard is not None:
        try:
            shard = str(parse_shard(shard, "shard"))
        except UsageError as exc:
            raise ValueError(exc.message) from None
    interrupted = data.get("interrupted")
    if interrupted is not None and interrupted not in INTERRUPT_SIGNALS:
        raise ValueError(f"interrupted: expected null or one of {', '.join(INTERRUPT_SIGNALS)}")
    rule = data.get("decision_rule")
    if rule is not None and (isinstance(rule, bool) or not isinstance(rule, int) or not 1 <= rule <= 10**6):
        raise ValueError("decision_rule: expected null or an integer from 1 to 1000000")
    evidence_raw = data.get("windows_evidence")
    evidence: dict[str, DesignEvidence | None] | None = None
    if evidence_raw is not None:
        if not isinstance(evidence_raw, dict) or len(evidence_raw) > 10_000:
            raise ValueError("windows_evidence: expected an object")
        evidence = {}
        for key, entry in evidence_raw.items():
            safe_name(key, "windows_evidence key")
            try:
                evidence[key] = None if entry is None else DesignEvidence.from_dict(entry)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"windows_evidence.{key}: {exc}") from None
    # second_look_blocks: written (always null) by the perfgate of two looks; a run.json that
    # still has it is read as any other of schema 1, the key ignored (the looks are the judge's).
    return RunManifest(
        design=design, device=device, workloads=_names(data.get("workloads", []), "workloads"),
        pr_number=number, head_sha=shas["head_sha"], head_ref=_str_or_none(pr, "head_ref", ""),
        head_repo=_str_or_none(pr, "head_repo", ""), base_sha=shas["base_sha"],
        base_ref=_str_or_none(pr, "base_ref", ""),
        errors=_messages(data.get("errors") or {}, "errors"),
        base_errors=_messages(data.get("base_errors") or {}, "base_errors"),
        base_missing=_names(data.get("base_missing") or [], "base_missing"),
        base_only=_names(data.get("base_only") or [], "base_only"),
        notes=notes, failure=_str_or_none(data, "failure", ""),
        clocks=_str_or_none(data, "clocks", ""), shard=shard, interrupted=interrupted,
        perfgate_version=_str_or_none(data, "perfgate_version", "") or "unknown", decision_rule=rule,
        windows_evidence=evidence,
    )


# --- reading what the measuring job left ----------------------------------------------------

@dataclass(frozen=True)
class Measured:
    """What the measuring job left: its manifest (None without ``run.json``), the head's
    results and the base side's (``base/``), by workload."""

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
