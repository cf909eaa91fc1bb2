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
shard; :func:`perfgate.gate.shards.combine_shards` makes them one measurement, so that they
are judged as one run, with Holm over all the shards' workloads.

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

from perfgate.analysis.design import choose_windows
from perfgate.analysis.screening import gpu_flags_problem
from perfgate.analysis.driver import drive, schedule_for
from perfgate.analysis.outcome import GateOutcome
from perfgate.gate.config import ScriptEntry, Settings, load_settings
from perfgate.gate.side_jobs import paired_error
from perfgate.gate.inputs import PYPROJECT, InputChanges
from perfgate.gate.replay import ReplayedBlocks, ReplayedRepeats, stamp_problem
from perfgate.measure.script_job import linked_part
from perfgate.model.counters import COUNTERS_SUFFIX
from perfgate.model.errors import UsageError
from perfgate.model.manifest import DECISION_RULE, RunManifest
from perfgate.model.measuring_job import MeasuringJob
from perfgate.model.result import RunResult, window_steps_problem
from perfgate.model.script import ARGS_PARAM, script_path_of
from perfgate.store.definitions import Definitions, head_definitions, reference_definitions, tree_definitions
from perfgate.store.untrusted import KEY_RE, safe_name
from perfgate.store.untrusted_folders import Measured
from perfgate.text.inert import short_repr

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
    raise UsageError(f"the results were measured by perfgate {short_repr(manifest.perfgate_version)} (decision rule "
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
        return (f"the {side} side's result is of the script {short_repr(recorded)}, but the base's [tool.perfgate] "
                f"scripts names no script {name!r}: a script's result is judged against the base's entry of its "
                "name (its path and arguments)")
    if recorded is None:
        return (f"the base's [tool.perfgate] scripts runs {name!r} as the script {short_repr(entry.written)}, but the "
                f"{side} side's result is of a workload ({short_repr(result.workload_source)})")
    expected = _script_entry_path(entry)
    if recorded != expected:
        return (f"script path: the base's [tool.perfgate] scripts entry names {short_repr(expected)}, the {side} side's "
                f"result ran {short_repr(recorded)}")
    args = result.params.get(ARGS_PARAM)
    if args != shlex.join(entry.args):
        return (f"script arguments: the base's [tool.perfgate] scripts entry gives {short_repr(shlex.join(entry.args))}, "
                f"the {side} side's result ran with {short_repr(args)}")
    return None


def expected_windows(name: str, settings: Settings, manifest: RunManifest | None, *, paired: bool,
                     script: bool) -> tuple[int | None, str | None]:
    """The windows per repeat the base's settings give ``name`` and, when they cannot be known,
    why. ``windows = "auto"`` in a paired gate: :func:`perfgate.analysis.design.choose_windows`
    applied to the evidence the measuring job recorded for the workload in ``run.json`` (a
    script: one window), never the windows the results say they have."""
    if not settings.windows_auto:
        return settings.windows, None
    if script:  # a script's steps are one window
        return 1, None
    if not paired:
        return settings.windows, None
    recorded = manifest.windows_evidence if manifest is not None else None
    if recorded is None or name not in recorded:
        return None, ('windows: the base\'s settings give "auto", and run.json records no design evidence for '
                      f"{name!r} (the measuring job did not design its windows)")
    return choose_windows(recorded[name]), None


def design_problem(result: RunResult, side: str, settings: Settings, *, paired: bool,
                   windows: int | None = None) -> str | None:
    """The first way the ``side`` result was not measured as the base's settings design it, naming
    the field and both values; None when it was. Re-derived from the base's settings, never from
    what the result says it was asked: ``windows`` per repeat, each of the workload's ``steps``
    (a result's windows are a label on its steps: twelve steps of a workload of 4 told as 6
    windows of 2 are refused, whatever windows the evidence in run.json gives); no ``--set``,
    ``--steps`` or ``--warmup`` (the base's settings set no parameter, so its overrides are
    none); no GPU slowdown flag on a CPU run (they would choose which repeats are left out);
    each process started as ``start`` gives (``fork`` or ``fresh``; a distributed workload's
    ranks and a script's process always start fresh), recorded by every repeat: one that does
    not record it is refused, never left unchecked."""
    expected = settings.windows if windows is None else windows
    given = "design" if settings.windows_auto and paired else "settings give"
    for repeat in result.repeats:
        if repeat.windows != expected:
            return (f"windows: the base's {given} {expected}, the {side} side's repeat "
                    f"{repeat.index + 1} holds {repeat.windows}")
    steps = window_steps_problem(result, side)
    if steps is not None:
        return steps
    flags = gpu_flags_problem(result.repeats, result.device, result.workload, side)
    if flags is not None:
        return flags
    if result.overrides:
        given = ", ".join(f"{k}={v}" for k, v in sorted(result.overrides.items()))
        return (f"overrides (--set, --steps, --warmup): the base's settings give none, the {side} side's result "
                f"was measured with {short_repr(given)}")
    start = settings.start_for(paired=paired)
    nproc = result.params.get("nproc_per_node")
    if isinstance(nproc, int) and not isinstance(nproc, bool) and nproc > 1:
        start = "fresh"  # each rank is a process torch.distributed.run starts, never a template's fork
    if script_path_of(result.workload_source) is not None:
        start = "fresh"  # a script runs as __main__, which a forked child would share with the template
    for repeat in result.repeats:
        started = repeat.torch_settings.get("process_start") if isinstance(repeat.torch_settings, Mapping) else None
        if started is None:
            return (f"start: the base's settings give {start}, the {side} side's repeat {repeat.index + 1} records "
                    "no process_start (every repeat records how its process started)")
        if started != start:
            fallback = (" (a template that cannot fork falls back to fresh processes: set start = \"fresh\" in the "
                        "base's [tool.perfgate] for this runner)") if start == "fork" and started == "fresh" else ""
            return (f"start: the base's settings give {start}, the {side} side's repeat {repeat.index + 1} started "
                    f"{short_repr(started)}{fallback}")
    return None


# --- judging: the looks replayed from the measured blocks or repeats --------------------------

@dataclass(frozen=True)
class Judgement:
    outcome: GateOutcome
    retired: tuple[str, ...] = ()
    """Workloads the base gates that the pull request retires by removing their definitions or baselines."""


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



def _with_notes(outcome: GateOutcome, notes: Mapping[str, Sequence[str]]) -> GateOutcome:
    comparisons = [dataclasses.replace(c, left_out=(*c.left_out, *notes[c.workload])) if notes.get(c.workload)
                   else c for c in outcome.comparisons]
    return dataclasses.replace(outcome, comparisons=tuple(comparisons))


def judge_measured(measured: Measured, settings: Settings, *, design: str, against: str | None = None,
                   changes: InputChanges | None = None, definitions: TreeDefinitions | None = None,
                   job: MeasuringJob | None = None) -> Judgement:
    """The gate's outcome for what was measured, by the rules in ``settings`` (the base's).

    ``job``: the measuring job's start and end as the Actions API reports them (the judge
    workflow passes them; None: a folder judged by hand, whose recorded instants are all there is)."""
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
        # what was measured first (a script the base does not list), then how (its windows)
        problem = next((p for side, result in sides if (p := script_problem(name, result, side, entries.get(name)))),
                       None)
        windows, unknown = expected_windows(name, settings, manifest, paired=design == "paired",
                                            script=name in entries)
        problem = problem or unknown or next(
            (p for side, result in sides
             if (p := design_problem(result, side, settings, paired=design == "paired", windows=windows))), None)
        if problem:
            errors[name] = f"not measured as the base's settings design it: {problem}"
    config = settings.gate
    notes = manifest.notes if manifest else {}

    # Blocks, looks, α, δ, max_blocks and the budget are the judge's configuration alone (the
    # base's settings): nothing in run.json chooses where the gate stops. The judge replays every
    # look from the blocks in the files with its own boundary, α spent over the share of the
    # budget the blocks' timed windows measured (as the measuring gate spent it), the last look
    # where the files end only when the measuring job ran for the budget (``job``, the Actions
    # API's times; by hand, the instants the files record). No instant a file records moves the
    # boundary, and a block beyond the last look the base's settings allow is refused.
    paired = design == "paired"
    plan = settings.budget_spending(paired=True) if paired else None
    if job is not None:
        stamps = stamp_problem(measured, job)
        if stamps is not None:
            raise UsageError(f"the results record {stamps}: not a measurement of this job")
    replay = ReplayedBlocks(measured, settings, names, errors, against, limit=plan.cap if plan else None,
                            job=job) if paired else ReplayedRepeats(measured, settings, names, errors, job=job)
    try:
        schedule = plan.schedule(config.spending_gamma) if plan is not None else schedule_for(
            config, settings.blocks if paired else settings.repeats, replay.unit)
    except ValueError as exc:
        raise UsageError(f"the base's [tool.perfgate]: {exc}") from None
    driven = drive(replay, names, config, schedule, per_workload=settings.per_workload, plan=plan)
    return Judgement(_with_notes(driven.outcome, notes), retired)
