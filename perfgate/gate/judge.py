"""Judging a pull request's measurements by the base commit's rules, in trusted code.

The job that measures a pull request runs the pull request's code, so it cannot be
trusted with the verdict: its files are data (read by ``perfgate.store.untrusted_folders``).
This module judges them by the base commit's rules: the base checkout's
``[tool.perfgate]`` and baselines, perfgate's defaults from the code running here (the
default branch's, in the judge workflow), and the looks replayed from the measured blocks
or repeats exactly as the gate plans them. Nothing the pull request wrote chooses the
design, the thresholds, α, the number of blocks or what must be measured.

What must be measured is the base's: every workload in the base's ``workloads``
selection, or (without one) every workload with a baseline for this device in the base's
store, and every workload the base tree's own workload files define (read as data,
``perfgate.store.definitions``); a result for a workload no tree defines is refused, and
run.json's lists choose nothing. A workload with no result is an ERROR naming it,
unless the pull request removes its definition, or every baseline that gates it on this
device (matched by full path), which retires it in plain view of the reviewers.

How it was measured is the base's too: each result must be measured with the windows, the
parameters (no ``--set``, ``--steps``, ``--warmup``) and the process start the base's
settings give, a script's result must be the base's ``scripts`` entry of its name (its path,
with no link in it, and its arguments), and run.json's decision rule must be the judge's;
an undecided workload whose files end before its last planned look is stopped at the budget
only when the base sets one and the files show it spent, else an ERROR. A reference workload
installed with perfgate is judged only when the base selects it, and a base side's result
only for a workload the base gates or its own tree defines.

A sharded run (each runner measuring its share, ``--shard I/N``) leaves one folder per
shard; :func:`combine_shards` makes them one measurement, so that they are judged as one
run, with Holm over all the shards' workloads.

The command ``perfgate judge`` is ``perfgate.adapters.judge_cli``; the report it writes is
composed by ``perfgate.gate.comment``.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.analysis.compare import stored_counted
from perfgate.analysis.driver import PlannedLast, budget_spent, drive, recorded_seconds, schedule_for
from perfgate.analysis.outcome import Counted, Entry, GateOutcome, Pairing
from perfgate.gate.config import ScriptEntry, Settings, load_settings
from perfgate.gate.gating import paired_error
from perfgate.gate.inputs import PYPROJECT, InputChanges
from perfgate.measure.script_job import linked_part
from perfgate.model.counters import COUNTERS_SUFFIX
from perfgate.model.errors import UsageError
from perfgate.model.manifest import DECISION_RULE, MANIFEST_NAME, RunManifest
from perfgate.model.result import RunResult
from perfgate.model.script import ARGS_PARAM, script_path_of
from perfgate.model.shard import parse_shard
from perfgate.store.baselines import find_baseline
from perfgate.store.definitions import Definitions, head_definitions, reference_definitions, tree_definitions
from perfgate.store.untrusted import KEY_RE, safe_name
from perfgate.store.untrusted_folders import Measured
from perfgate.text.units import duration as duration_text

# --- the base's rules ------------------------------------------------------------------------

def base_settings(base_dir: Path, cli: Mapping[str, Any] | None = None) -> Settings:
    """Settings, thresholds and the baseline store from the base checkout's pyproject.toml.

    ``workloads_path`` and ``scripts`` entries name code, which is the pull request's: they
    are taken at the same place in the pull request's checkout (the current directory). The
    base decides which scripts are gated; the head side runs the pull request's copy, the
    paired base side the base checkout's.
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
    head, base = Path.cwd().resolve(), base_dir.resolve()
    scripts = []
    for script in settings.scripts:
        linked = linked_part(script.root, script.path)
        if linked is not None:
            raise UsageError(f"{script.given} {script.path}: {linked} is a symbolic link in the base checkout; a "
                             "script is gated as the file its own path names, never through a link")
        try:
            scripts.append(dataclasses.replace(script, root=head / script.root.relative_to(base)))
        except ValueError:
            scripts.append(script)
    return dataclasses.replace(settings, workloads_path=tuple(paths), scripts=tuple(scripts))


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


def baselines_of(settings: Settings, device: str) -> dict[str, list[str]]:
    """Per workload, the base's baseline files for ``device`` (``<key>/<name>.json``, relative to the store)."""
    found: dict[str, list[str]] = {}
    store = settings.baselines
    if store.is_dir():
        for path in sorted(store.glob(f"{device}-*/*.json")):
            if path.name.endswith(COUNTERS_SUFFIX) or path.is_symlink() or not path.is_file():
                continue
            if KEY_RE.fullmatch(path.parent.name):
                try:
                    safe_name(path.stem, "baseline")
                except ValueError:
                    continue
                found.setdefault(path.stem, []).append(f"{path.parent.name}/{path.name}")
    return found


def gated_by_base(settings: Settings, device: str) -> dict[str, str]:
    """The workloads the base gates on ``device``, each with why: its ``workloads``
    selection, or else every workload with a baseline for the device in its store."""
    scripts = {entry.job_name: f"the base's `[tool.perfgate] scripts` lists {entry.path}" for entry in settings.scripts}
    if settings.workloads:
        return {name: scripts.get(name, "the base's `[tool.perfgate] workloads` lists it") for name in settings.workloads}
    return {**{name: f"the base has its baseline {paths[0]}" for name, paths in baselines_of(settings, device).items()},
            **scripts}


# --- shards: several measuring jobs' folders judged as one run ------------------------------

_AGREE = ("design", "device", "pr_number", "head_sha", "head_ref", "head_repo", "base_sha", "base_ref",
          "decision_rule")
"""What every shard's manifest must say alike: one run of one pull request."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _owned(measured: Measured) -> set[str]:
    """The workloads a shard's folder holds or names as its own (``base_only``, the base
    tree's workloads the pull request lacks, is the same in every shard)."""
    names = {*measured.head, *measured.base, *measured.head_counters, *measured.base_counters}
    manifest = measured.manifest
    if manifest is not None:
        names.update((*manifest.workloads, *manifest.errors, *manifest.base_errors, *manifest.base_missing,
                      *manifest.notes))
    return names


def _check_shares(manifests: Sequence[tuple[str, RunManifest]]) -> None:
    """The folders of a sharded run must be every share of it once (``shard`` I/N in each
    manifest, one N, each I from 1 to N): Holm over fewer would judge a part as the whole.
    A one-line :class:`UsageError` otherwise; nothing to check when no manifest names a share."""
    shares = [(where, parse_shard(m.shard, "shard")) for where, m in manifests if m.shard is not None]
    if not shares:
        return
    if len(shares) != len(manifests):
        plain = next(where for where, m in manifests if m.shard is None)
        raise UsageError(f"the folders are not one sharded run: {shares[0][0]} is shard {shares[0][1]}, "
                         f"{plain} is not a shard")
    counts = {share.count for _, share in shares}
    if len(counts) != 1:
        raise UsageError("the folders are not one sharded run: they split it into "
                         + " and ".join(str(n) for n in sorted(counts)) + " shards")
    count = counts.pop()
    seen: dict[int, str] = {}
    for where, share in shares:
        if share.index in seen:
            raise UsageError(f"shard {share} twice: {seen[share.index]} and {where}")
        seen[share.index] = where
    missing = [str(i) for i in range(1, count + 1) if i not in seen]
    if missing:
        raise UsageError(f"shard {', '.join(missing)} of {count} missing (given: "
                         f"{', '.join(f'{i}/{count}' for i in sorted(seen))}); judge every shard's folder together, "
                         "or Holm would run over part of the run")


def _combined_manifest(parts: Sequence[tuple[str, Measured]]) -> RunManifest | None:
    manifests = [(where, m.manifest) for where, m in parts]
    lacking = [where for where, m in manifests if m is None]
    if len(lacking) == len(manifests):
        return None
    if lacking:
        having = next(where for where, m in manifests if m is not None)
        raise UsageError(f"{lacking[0]}: no {MANIFEST_NAME}, but {having} has one; every shard's folder needs its "
                         "manifest")
    first_where, first = manifests[0]
    assert first is not None
    for where, manifest in manifests[1:]:
        assert manifest is not None
        for name in _AGREE:
            if getattr(manifest, name) != getattr(first, name):
                raise UsageError(f"the shards are not of one run: {name} is {_shown(getattr(first, name))} in "
                                 f"{first_where} and {_shown(getattr(manifest, name))} in {where}")
    _check_shares([(where, m) for where, m in manifests if m is not None])
    every = [m for _, m in manifests if m is not None]
    failures = [f"{where}: {m.failure}" for where, m in manifests if m is not None and m.failure]
    clocks = {where: m.clocks for where, m in manifests if m is not None and m.clocks}
    one_clock = len(set(clocks.values())) == 1
    return dataclasses.replace(
        first,
        workloads=tuple(sorted(n for m in every for n in m.workloads)),
        errors={k: v for m in every for k, v in m.errors.items()},
        base_errors={k: v for m in every for k, v in m.base_errors.items()},
        base_missing=tuple(sorted(n for m in every for n in m.base_missing)),
        base_only=tuple(sorted({n for m in every for n in m.base_only})),
        notes={k: v for m in every for k, v in m.notes.items()},
        failure="; ".join(failures) or None,
        # any shard interrupted makes the whole run interrupted (the first shard's alone would hide it)
        interrupted=next((m.interrupted for m in every if m.interrupted), None),
        clocks=(next(iter(clocks.values())) if one_clock
                else "; ".join(f"{Path(where).name}: {c}" for where, c in clocks.items()) or None),
    )


@dataclass(frozen=True)
class ShardedMeasured(Measured):
    """The folders of a sharded run combined, each shard's own measurement kept: every shard
    planned its own last look from its own first block and budget (:func:`planned_last`)."""

    shards: tuple[Measured, ...] = ()


def combine_shards(parts: Sequence[tuple[str, Measured]]) -> Measured:
    """The folders of a sharded run (``perfgate ci --measure-only --shard I/N`` on each
    runner, or ``perfgate run --shard I/N``), each named by where it came from, as one
    measurement: judged together, Holm runs over all their workloads.

    A workload in two folders, manifests of different runs, or a folder without the
    manifest the others have is a one-line :class:`UsageError` naming both folders."""
    if not parts:
        raise UsageError("no results folder given")
    owner: dict[str, str] = {}
    for where, measured in parts:
        for name in sorted(_owned(measured)):
            if name in owner:
                raise UsageError(f"{name}: in both {owner[name]} and {where}; each workload belongs to one shard")
            owner[name] = where
    if len(parts) == 1:
        manifest = parts[0][1].manifest
        if manifest is not None:
            _check_shares([(parts[0][0], manifest)])
        return parts[0][1]
    every = [m for _, m in parts]
    return ShardedMeasured(
        _combined_manifest(parts),
        {k: v for m in every for k, v in m.head.items()},
        {k: v for m in every for k, v in m.base.items()},
        {k: v for m in every for k, v in m.head_counters.items()},
        {k: v for m in every for k, v in m.base_counters.items()},
        shards=tuple(every),
    )


# --- what the results may hold: the base's names, rule and design -----------------------------

def check_rule(manifest: RunManifest | None) -> None:
    """The measuring job stopped each workload by its perfgate's decision rule, which the judge
    replays with its own: results of another rule (or of a perfgate that did not record its rule)
    are refused, naming both versions. A live decision the judge's rule does not reproduce would
    otherwise read as a run cut short, or stopped at the budget."""
    if manifest is None or manifest.decision_rule == DECISION_RULE:
        return
    from perfgate.model.version import __version__

    theirs = "not recorded" if manifest.decision_rule is None else str(manifest.decision_rule)
    raise UsageError(f"the results were measured by perfgate {_shown(manifest.perfgate_version)} (decision rule "
                     f"{theirs}); this judge is perfgate {__version__} (decision rule {DECISION_RULE}): the "
                     "measuring job stopped each workload by a rule the judge does not replay; measure with a "
                     "perfgate of the judge's rule (update the base branch)")


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_names(measured: Measured, defined: TreeDefinitions, gated: Mapping[str, str]) -> None:
    """Every result is of a workload the base gates (its selection, baselines or scripts) or a tree
    defines; a base side's result is of one the base gates or its own tree defines (the base commit
    cannot measure what only the pull request defines); a reference workload installed with
    perfgate is judged only when the base selects it (or its baselines, or its own files, name it).
    A one-line :class:`UsageError` naming them otherwise: results nobody asked for would pad the
    Holm family (each is one more workload to correct for)."""
    both = {*measured.head, *measured.base}
    undefined = sorted(n for n in both if n not in defined and n not in gated)
    reference = [n for n in undefined if n in defined.reference]
    undefined = [n for n in undefined if n not in defined.reference]
    if undefined:
        scripts = [n for n in undefined if script_path_of(
            (measured.head.get(n) or measured.base[n]).workload_source) is not None]
        hint = (f"; {', '.join(scripts[:5])} {'is a script' if len(scripts) == 1 else 'are scripts'}' result(s): a "
                "script is judged when the base's [tool.perfgate] scripts lists it (its path and arguments)") if scripts else ""
        raise UsageError(f"results for workloads neither the base nor the pull request defines: {_listed(undefined)}; "
                         "a result is judged only for a workload one of the trees defines (read as data, never run)"
                         f"{hint}")
    if reference:
        raise UsageError(f"results for perfgate's reference workloads {_listed(reference)}, which the base does not "
                         "select: a reference workload is judged only when the base's [tool.perfgate] workloads "
                         "names it (or the base has its baseline for this device)")
    foreign = sorted(n for n in measured.base if n not in defined.base and n not in gated)
    if foreign:
        raise UsageError(f"base-side results for workloads the base tree does not define: {_listed(foreign)}; the "
                         "base side measures the base commit's own workloads, and a workload only the pull request "
                         "defines has none")


def _script_entry_path(entry: ScriptEntry) -> str:
    """The path a script result of ``entry`` records (``script:PATH``): the entry's own path,
    relative to the project, normalised as the measuring job shows it."""
    return posixpath.normpath(entry.path)


def script_problem(name: str, result: RunResult, side: str, entry: ScriptEntry | None) -> str | None:
    """Why the ``side`` result of ``name`` is not the base's ``[tool.perfgate] scripts`` entry of
    that name (the file it names, with its arguments), or a script's result where the base gates
    a workload; None when it is what the entry runs."""
    recorded = script_path_of(result.workload_source)
    if entry is None:
        if recorded is None:
            return None
        return (f"the {side} side's result is of the script {_shown(recorded)}, but the base's [tool.perfgate] "
                f"scripts names no script {name!r}: a script's result is judged against the base's entry of its "
                "name (its path and arguments)")
    if recorded is None:
        return (f"the base's [tool.perfgate] scripts runs {name!r} as the script {_shown(entry.written)}, but the "
                f"{side} side's result is of a workload ({_shown(result.workload_source)})")
    expected = _script_entry_path(entry)
    if recorded != expected:
        return (f"script path: the base's [tool.perfgate] scripts entry names {_shown(expected)}, the {side} side's "
                f"result ran {_shown(recorded)}")
    args = result.params.get(ARGS_PARAM)
    if args != shlex.join(entry.args):
        return (f"script arguments: the base's [tool.perfgate] scripts entry gives {_shown(shlex.join(entry.args))}, "
                f"the {side} side's result ran with {_shown(args)}")
    return None


def design_problem(result: RunResult, side: str, settings: Settings, *, paired: bool) -> str | None:
    """The first way the ``side`` result was not measured as the base's settings design it, naming
    the field and both values; None when it was. Re-derived from the base's settings, never from
    what the result says it was asked: ``windows`` per repeat; no ``--set``, ``--steps`` or
    ``--warmup`` (the base's settings set no parameter, so its overrides are none); each process
    started as ``start`` gives (``fork`` or ``fresh``; a distributed workload's ranks always start
    fresh; a repeat that does not record it, as a script's, whose processes always start fresh,
    is not read)."""
    for repeat in result.repeats:
        if repeat.windows != settings.windows:
            return (f"windows: the base's settings give {settings.windows}, the {side} side's repeat "
                    f"{repeat.index + 1} holds {repeat.windows}")
    if result.overrides:
        given = ", ".join(f"{k}={v}" for k, v in sorted(result.overrides.items()))
        return (f"overrides (--set, --steps, --warmup): the base's settings give none, the {side} side's result "
                f"was measured with {_shown(given)}")
    start = settings.start_for(paired=paired)
    nproc = result.params.get("nproc_per_node")
    if isinstance(nproc, int) and not isinstance(nproc, bool) and nproc > 1:
        start = "fresh"  # each rank is a process torch.distributed.run starts, never a template's fork
    for repeat in result.repeats:
        started = repeat.torch_settings.get("process_start") if isinstance(repeat.torch_settings, Mapping) else None
        if started is not None and started != start:
            fallback = (" (a template that cannot fork falls back to fresh processes: set start = \"fresh\" in the "
                        "base's [tool.perfgate] for this runner)") if start == "fork" and started == "fresh" else ""
            return (f"start: the base's settings give {start}, the {side} side's repeat {repeat.index + 1} started "
                    f"{_shown(started)}{fallback}")
    return None


# --- judging: the looks replayed from the measured blocks or repeats --------------------------

@dataclass(frozen=True)
class Judgement:
    outcome: GateOutcome
    retired: tuple[str, ...] = ()
    """Workloads the base gates that the pull request retires by removing their definitions or baselines."""


def _keep(result: RunResult, keep: Any) -> RunResult | None:
    repeats = tuple(r for r in result.repeats if keep(r))
    return dataclasses.replace(result, repeats=repeats) if repeats else None


def _blocks(result: RunResult) -> set[int]:
    return {r.block for r in result.repeats if r.block is not None}


def _whole_blocks(head: RunResult, base: RunResult, limit: int) -> tuple[str | None, int]:
    """(why the blocks below ``limit`` are not measured whole, or None; how many there are).

    The invariant: every repeat carries a block ≥ 0; the blocks below ``limit`` run 0, 1, 2, …
    without a gap on both sides, each holding two repeats of each side (its ABBA or BAAB set).
    Anything else (a block with three head repeats, a gap, a side with a block the other
    lacks) is not a measurement this gate planned; leaving out slowed-down repeats happens
    later, capped, in the comparison. Blocks from ``limit`` on are not read."""
    counts: dict[str, dict[int, int]] = {}
    for side, result in (("head", head), ("base", base)):
        by_block: dict[int, int] = {}
        for r in result.repeats:
            if r.block is None:
                return "a repeat carries no ABBA block, which the paired design needs", 0
            if r.block < 0:
                return f"the {side} side holds block {r.block}, not a planned block", 0
            if r.block < limit:
                by_block[r.block] = by_block.get(r.block, 0) + 1
        counts[side] = by_block
    present = sorted({*counts["head"], *counts["base"]})
    total = present[-1] + 1 if present else 0
    for side in ("head", "base"):
        lacking = [b for b in range(total) if b not in counts[side]]
        if lacking:
            shown = ", ".join(str(b) for b in lacking[:8]) + (" …" if len(lacking) > 8 else "")
            return f"the {side} side lacks block(s) {shown} of the 0–{total - 1} measured", 0
        odd = sorted(b for b, n in counts[side].items() if n != 2)
        if odd:
            return (f"the {side} side holds {counts[side][odd[0]]} repeats in block {odd[0]}; an ABBA block holds "
                    "two of each side"), 0
    return None, total


def judged_device(measured: Measured, settings: Settings) -> str:
    """The device the gate judges: the base's ``device`` setting when it names one, else the
    device of the base's baselines when they are of one; only a base with neither (nothing
    device-specific to gate) takes the results' own. Every result must be of it, with an
    environment of it; the manifest (the measuring job's word) must agree, never choose."""
    configured = settings.device
    if configured not in ("auto", "cpu", "cuda"):
        raise UsageError(f"the base's [tool.perfgate] device is {configured!r}; expected auto, cpu or cuda")
    whose = "[tool.perfgate] device"
    if configured == "auto":
        having = [d for d in ("cpu", "cuda") if baselines_of(settings, d)]
        if len(having) > 1:
            raise UsageError("the base's [tool.perfgate] sets no device and its store holds baselines for both cpu and "
                             "cuda: set device in the base's settings, so that the measuring job's device never "
                             "chooses which baselines gate")
        if having:
            configured, whose = having[0], "its baselines' device; its [tool.perfgate] sets none"
    results = [*measured.head.values(), *measured.base.values()]
    if not results:
        raise UsageError("no results to judge: the measuring job measured nothing, which is never a pass")
    devices = {r.device for r in results}
    if len(devices) != 1:
        raise UsageError(f"the results mix devices ({', '.join(sorted(map(repr, devices)))}); a gate judges one")
    device = devices.pop()
    if device not in ("cpu", "cuda"):
        raise UsageError(f"the results are of device {device!r}; perfgate measures on cpu or cuda")
    if configured != "auto" and device != configured:
        raise UsageError(f"the base gates on {configured} ({whose}), but the results were measured "
                         f"on {device}: a runner whose {configured} could not be used is not a pass")
    manifest = measured.manifest
    if manifest is not None and manifest.device != device:
        raise UsageError(f"run.json says device {manifest.device!r}, the results are of {device}")
    for r in results:
        env = r.environment
        if env.device != device or (device == "cuda" and not (env.gpu_name and env.cuda)):
            raise UsageError(f"{r.workload}: its environment is of a {env.device} machine (gpu "
                             f"{env.gpu_name!r}), not the {device} it claims")
    return device


@dataclass(frozen=True)
class TreeDefinitions:
    """The workloads each tree defines in its own files (``perfgate.store.definitions``: parsed,
    never run), and the reference workloads this perfgate installs."""

    base: Definitions
    head: Definitions
    reference: Definitions = field(default_factory=Definitions)

    def __contains__(self, name: object) -> bool:
        """A tree defines ``name`` (the base's or the pull request's). The reference workloads
        installed with perfgate are not a tree's: they are judged when the base selects them."""
        return name in self.base or name in self.head

    def removed(self, name: str) -> bool:
        """The base's own files define ``name`` and the pull request's no longer do. A file
        the head holds but that cannot be parsed removes nothing: unreadable is not removed."""
        if name not in self.base or name in self.head:
            return False
        where = self.base.names[name]
        return not any(u.startswith(f"{where}: ") for u in self.head.unreadable)

    @classmethod
    def none(cls) -> TreeDefinitions:
        return cls(Definitions(), Definitions())

    @classmethod
    def of(cls, base_dir: Path, settings: Settings, changes: InputChanges | None,
           head_files: Path | None) -> TreeDefinitions:
        """The base checkout's definitions and the pull request's: the base's files less those it
        removes, with its own versions of those it adds or changes (``head_files``)."""
        paths = list(settings.workloads_path)  # the base's own settings: an absolute entry is read as given
        base = tree_definitions(base_dir, paths)
        removed = changes.workloads_removed if changes is not None else ()
        head = head_definitions(base_dir, paths, removed, head_files)
        return cls(base, head, reference_definitions())



def planned_last(measured: Measured, settings: Settings) -> PlannedLast | None:
    """The paired gate's last look as the measuring job planned it, re-derived from the base's
    settings (``budget``, ``max_blocks``, ``blocks``: :meth:`Settings.budget_plan`) and the first
    block its result files record, with the function the measuring gate uses
    (:meth:`perfgate.analysis.driver.BudgetPlan.planned`); never a count the artifact states.
    None: the looks end at ``max_blocks`` (no budget, or a one-look design).

    A sharded run: each shard planned from its own first block, on its own runner. The judge
    replays one schedule over all of them and takes the shortest plan: its boundary at each
    look is then no stricter than any shard's, so a workload a shard stopped as decided is
    decided there by the judge too, and no look the judge takes lies beyond what a shard
    measured."""
    plan = settings.budget_plan(paired=True)
    if plan is None:
        return None
    parts = measured.shards if isinstance(measured, ShardedMeasured) and measured.shards else (measured,)
    plans = [plan.planned([*part.head.values(), *part.base.values()]) for part in parts
             if part.head or part.base]
    if not plans:
        return plan.planned(())
    return min(plans, key=lambda p: (p.last, -(p.block_s or 0.0)))


def _with_notes(outcome: GateOutcome, notes: Mapping[str, Sequence[str]]) -> GateOutcome:
    comparisons = [dataclasses.replace(c, left_out=(*c.left_out, *notes[c.workload])) if notes.get(c.workload)
                   else c for c in outcome.comparisons]
    return dataclasses.replace(outcome, comparisons=tuple(comparisons))


def judge_measured(measured: Measured, settings: Settings, *, design: str, against: str | None = None,
                   changes: InputChanges | None = None, definitions: TreeDefinitions | None = None) -> Judgement:
    """The gate's outcome for what was measured, by the rules in ``settings`` (the base's)."""
    manifest = measured.manifest
    if manifest is not None and manifest.failure:
        raise UsageError(f"the measuring job could not measure: {manifest.failure}")
    if manifest is not None and manifest.interrupted:
        raise UsageError(f"the measuring job was interrupted ({manifest.interrupted}) before the gate ran its course: "
                         "what it measured until then is no verdict")
    if manifest is not None and manifest.design != design:
        raise UsageError(f"the results were measured for the {manifest.design} design; this judge applies the "
                         f"{design} design (the rule is the judge's, not the measuring job's)")
    check_rule(manifest)
    device = judged_device(measured, settings)
    defined = definitions or TreeDefinitions.none()
    gated = gated_by_base(settings, device)  # the base's own selection and store: trusted names
    check_names(measured, defined, gated)
    # The family: what the base gates, and what was measured of the workloads the trees
    # define. Never what run.json lists.
    expected: dict[str, None] = {}
    why: dict[str, str] = {}
    for name, reason in gated.items():
        expected.setdefault(name)
        why[name] = reason
    for name in sorted(defined.base.names):
        expected.setdefault(name)
        why.setdefault(name, f"the base defines it in {defined.base.names[name]}")
    for name in sorted({*measured.head, *(measured.base if design == "paired" else ())}):
        expected.setdefault(name)
        why.setdefault(name, "it was measured")
    if not expected:
        raise UsageError(f"nothing to judge: no results, and the base gates no workload on {device} (no "
                         "[tool.perfgate] workloads, no baselines for it); a gate that measured nothing is not a pass")
    gating = baselines_of(settings, device)
    retired = tuple(n for n in expected if n not in measured.head and not (manifest and n in manifest.errors)
                    and (defined.removed(n) or changes is not None and changes.removes_baselines(gating.get(n, ()))))
    names = [n for n in expected if n not in retired]
    errors: dict[str, str] = {}
    for name in names:
        failed = manifest.errors.get(name) if manifest is not None else None
        head_error = f"could not be measured: {failed}" if failed is not None else None
        if head_error is None and name not in measured.head:
            errors[name] = (f"no result for {name!r}, which the base branch gates ({why.get(name, 'listed')}): "
                            "the pull request removed or renamed it, or the measuring job skipped it. A workload "
                            "is retired by a pull request that removes its baseline")
            continue
        error = head_error if design != "paired" else paired_error(
            name, against or "?", head_error=head_error,
            base_error=manifest.base_errors.get(name) if manifest is not None else None,
            in_base=name in measured.base)
        if error is not None:
            errors[name] = error
    # The design is the base's: each result must be the base's scripts entry it is named after,
    # measured with the windows, parameters and process start the base's settings give.
    entries = {entry.job_name: entry for entry in settings.scripts}
    for name in names:
        if name in errors:
            continue
        sides = [("head", measured.head[name])]
        if design == "paired" and name in measured.base:
            sides.append(("base", measured.base[name]))
        for side, result in sides:
            problem = (script_problem(name, result, side, entries.get(name))
                       or design_problem(result, side, settings, paired=design == "paired"))
            if problem:
                errors[name] = f"not measured as the base's settings design it: {problem}"
                break
    config = settings.gate
    notes = manifest.notes if manifest else {}

    # Blocks, looks, α, δ, max_blocks and the budget are the judge's configuration alone (the
    # base's settings): nothing in run.json chooses where the gate stops. The judge replays every
    # look from the blocks in the files with its own boundary, planned to the last look the
    # measuring gate planned from the same settings and the first block the files record.
    paired = design == "paired"
    planned = planned_last(measured, settings) if paired else None
    last = planned.last if planned is not None else config.max_blocks
    replay = ReplayedBlocks(measured, settings, names, errors, against, limit=last) if paired else ReplayedRepeats(
        measured, settings, names, errors)
    try:
        schedule = schedule_for(dataclasses.replace(config, max_blocks=last), settings.blocks if paired
                                else settings.repeats, replay.unit)
    except ValueError as exc:
        raise UsageError(f"the base's [tool.perfgate]: {exc}") from None
    driven = drive(replay, names, config, schedule, per_workload=settings.per_workload, replay=True, plan=planned)
    return Judgement(_with_notes(driven.outcome, notes), retired)


class _Replay:
    """What the judge's replays share: nothing is measured, and each look's entries are the
    workloads' own, or their error, or the first look's shortfall; an undecided workload whose
    files end before its last planned look is stopped at the budget only when they show it
    (:meth:`stopped_short`)."""

    unit = "block"
    measured: Measured
    settings: Settings
    errors: dict[str, str]
    limit: int

    def available(self, name: str) -> int:
        raise NotImplementedError

    def held(self, name: str) -> int:
        """The units of ``name`` its files hold."""
        raise NotImplementedError

    def entry(self, name: str, count: int) -> Entry:
        """``name``'s entry at ``count`` units (``count`` <= :meth:`held`)."""
        raise NotImplementedError

    def _part(self, name: str) -> Measured:
        """The measuring job's folder that holds ``name``: a shard of a sharded run (each
        shard stops at its own budget, on its own clock), else the whole run."""
        measured = self.measured
        if isinstance(measured, ShardedMeasured):
            for part in measured.shards:
                if name in part.head or name in part.base:
                    return part
        return measured

    def stopped_short(self, name: str, count: int, last: int, open_names: Sequence[str]) -> str | None:
        """None when the files show that the measuring job stopped ``name``, undecided at the look
        of ``count`` units, at the base's wall-time budget; else the ERROR that says why not.

        A measuring gate stops an undecided workload before its last planned look (``last``) only
        at its budget, which stops every workload still undecided at once, when the time measured
        and one more unit's would pass it. So: the base must set a budget; every other workload of
        the same run (the same shard) still undecided here holds as many units; and the wall time
        the run's repeats record (:func:`~perfgate.analysis.driver.recorded_seconds`) must show the
        budget spent (:func:`~perfgate.analysis.driver.budget_spent`). Anything else (a job that
        stopped early, a run cut short, a perfgate that decided by another rule) is no decision."""
        held = self.available(name)
        unit = self.unit
        head = (f"{name}: the results hold {held} {unit}(s), the base's settings plan looks up to {last} and the "
                f"boundary had not decided at {count}")
        budget = self.settings.budget_s
        if budget is None:
            return (f"{head}; the base sets no budget (max_blocks = {self.settings.gate.max_blocks}), so the gate "
                    f"measures to its last planned look: a run measured short of it is no decision")
        part = self._part(name)
        for other in open_names:
            if other != name and other not in self.errors and self.available(other) != held and (
                    other in part.head or other in part.base):
                return (f"{head}; {other}, undecided too, holds {self.available(other)}: a budget stops every "
                        f"workload still undecided at the same {unit}, so this run was not stopped by it")
        below = self.limit if unit == "block" else None
        seconds = recorded_seconds([*part.head.values(), *part.base.values()], below)
        if not budget_spent(seconds, held, budget):
            spent = "no recorded time" if seconds is None else f"about {duration_text(seconds)}"
            return (f"{head}; its {unit}s record {spent} of the base's budget of {duration_text(budget)}: the budget "
                    "was not spent, so the run was not stopped by it")
        return None

    def measure(self, names: Sequence[str], upto: int) -> None:
        raise AssertionError("a replay measures nothing")

    def seconds_per_unit(self, names: Sequence[str]) -> float | None:
        return None

    def notes(self, name: str) -> tuple[str, ...]:
        return ()

    def entries(self, names: Sequence[str], count: int) -> list[Entry]:
        out = []
        for name in names:
            if name in self.errors:
                out.append(Entry(name, None, None, error=self.errors[name]))
            elif self.held(name) < count:
                out.append(Entry(name, None, None, error=f"the first look was not measured whole: "
                                                         f"{self.held(name)} {self.unit}(s) of its {count}"))
            else:
                out.append(self.entry(name, count))
        return out


class ReplayedBlocks(_Replay):
    """The judge's strategy for the paired design: the blocks are read from the measured files.

    Every repeat must carry a block; the blocks below the judge's last planned look (``limit``:
    ``max_blocks``, or the budget's plan) must run 0, 1, 2, ... without a gap, each holding two
    repeats of each side (its ABBA or BAAB set); anything else is an ERROR naming it. Blocks
    from ``limit`` on are not read."""

    unit = "block"

    def __init__(self, measured: Measured, settings: Settings, names: Sequence[str], errors: Mapping[str, str],
                 against: str | None, limit: int | None = None) -> None:
        self.measured, self.settings, self.against = measured, settings, against
        self.errors = dict(errors)
        self.limit = settings.gate.max_blocks if limit is None else limit
        self.counts: dict[str, int] = {}
        for name in names:
            if name in self.errors:
                continue
            problem, count = _whole_blocks(measured.head[name], measured.base[name], self.limit)
            if problem:
                self.errors[name] = f"the blocks were not measured whole: {problem}"
            else:
                self.counts[name] = count

    def available(self, name: str) -> int:
        return self.counts.get(name, self.limit if name in self.errors else 0)

    def counted(self, name: str) -> Counted:
        if not self.settings.gate.counters:
            return Counted(note="not compared: counters = false in the base's [tool.perfgate]")
        base_c, head_c = self.measured.base_counters.get(name), self.measured.head_counters.get(name)
        # A base side counted and a head not: compare makes that an ERROR (missing_is_error).
        lacking = [side for side, c in (("head", head_c), ("base", base_c)) if c is None]
        note = (f"not compared: no counted run of the {' and the '.join(lacking)} side"
                f"{'s' if len(lacking) == 2 else ''} in the results" if lacking else None)
        return Counted(base_c, head_c, note)

    def held(self, name: str) -> int:
        return self.counts[name]

    def entry(self, name: str, count: int) -> Entry:
        head, base = self.measured.head[name], self.measured.base[name]
        h = _keep(head, lambda r: r.block is not None and r.block < count)
        b = _keep(base, lambda r: r.block is not None and r.block < count)
        return Entry(name, h, _lookup(self.settings, head),  # held() >= count: not None
                     pairing=Pairing(b, self.against or "base"), counted=self.counted(name))  # type: ignore[arg-type]  # as h


class ReplayedRepeats(_Replay):
    """The judge's strategy for the stored design: the current repeats are read from the
    measured files, in the order they were measured (their index)."""

    unit = "repeat"

    def __init__(self, measured: Measured, settings: Settings, names: Sequence[str],
                 errors: Mapping[str, str]) -> None:
        self.measured, self.settings, self.errors = measured, settings, dict(errors)
        self.limit = settings.gate.max_blocks

    def available(self, name: str) -> int:
        if name in self.errors:
            return self.limit
        return len(self.measured.head[name].repeats)

    def held(self, name: str) -> int:
        return len(self.measured.head[name].repeats)

    def entry(self, name: str, count: int) -> Entry:
        result = self.measured.head[name]
        kept = dataclasses.replace(result, repeats=tuple(sorted(result.repeats, key=lambda r: r.index)[:count]))
        found = _lookup(self.settings, result)
        return Entry(name, kept, found, counted=stored_counted(found, self.measured.head_counters.get(name),
                                                                self.settings.gate))


def _lookup(settings: Settings, result: RunResult) -> Any:
    return find_baseline(settings.baselines, result.environment.key(), result.workload)
