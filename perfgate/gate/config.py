"""Settings from ``[tool.perfgate]`` in pyproject.toml, merged with command-line options.

Precedence: a command-line option, then the workload's own table
(``[tool.perfgate.workload.NAME]``), then ``[tool.perfgate]``, then the defaults. Only
thresholds that can differ per workload without breaking the multiple-testing
correction are allowed in a workload table (``delta``, ``memory_threshold``,
``gate_phases``, ``phase_q``, ``phase_min_share``, and the counters' ``flops_threshold``,
``launch_threshold``, ``counters_off``); α, the looks (``max_blocks``, ``budget``,
``spending_gamma``), ``inconclusive`` and ``counters`` (the counted runs on or off) belong to
the whole run. With a ``budget``, a paired gate spends α over the share of it measured, all of
it at the look the budget ends (:meth:`Settings.budget_spending`).

The TOML is read by :func:`parse_toml`, which a pull request's pyproject.toml cannot crash:
a file nested deeper than :data:`MAX_TOML_DEPTH` levels (an array inside 200,000 arrays,
a table 1,200 levels down) is one UsageError line naming the file, like a file that is
not TOML or not UTF-8.
"""

from __future__ import annotations

import dataclasses
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.analysis.blocks import blocks_problem
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.design import PILOT_WINDOWS
from perfgate.model.design import AUTO_WINDOWS
from perfgate.model.errors import UsageError
from perfgate.model.script import SCRIPTS_SETTING, Script, script_words
from perfgate.model.workload import PHASES
from perfgate.text.units import parse_duration

if TYPE_CHECKING:
    from perfgate.analysis.driver import BudgetSpending

GATE_KEYS = {f.name for f in dataclasses.fields(GateConfig)}
PER_WORKLOAD_KEYS = {"delta", "memory_threshold", "gate_phases", "phase_q", "phase_min_share",
                     "flops_threshold", "launch_threshold", "counters_off", "straggler_share"}
RUN_KEYS = {"baselines", "history", "workloads", "repeats", "device", "workloads_path", "blocks", "budget",
            "windows", "start", "scripts", "accept_by"}
ACCEPT_BY = ("maintainers-or-code-owners", "maintainers", "code-owners", "writers")
"""Who may accept a recorded REGRESSION with the label ``perfgate: accept slowdown``
(``accept_by``; the first is the default): someone with maintain or admin access, or a code
owner (in the base commit's CODEOWNERS) of a file the pull request changes with at least
write access; maintainers only; code owners only; anyone with write access. Never the pull
request's author, nor the head commit's pusher, author or committer
(``perfgate.gate.github.head_verdict``)."""
DEFAULT_WINDOWS = AUTO_WINDOWS
DEFAULT_BUDGET = "10m"
"""The design a gate gets where no setting says otherwise is the one ``perfgate init`` writes:
a paired gate's windows designed from the runner's evidence and a 10-minute budget whose α is
spent over the share measured (without them a paired gate timed one window a process and
stopped at 30 blocks, the weakest gate perfgate has). A ``perfgate run`` and a stored gate
without a ``windows`` setting time one window a repeat, as before (``windows = "auto"``
written in the settings gives them the pilot's windows)."""
NO_BUDGET = ("none", "off")
"""``budget = "none"``: no wall-time budget; the looks end at ``max_blocks``."""
START_MODES = ("auto", "fork", "fresh")
"""How a repeat's process starts (``perfgate.measure.template``): forked from a template that
has imported torch, or a new interpreter; ``auto``: forked in a paired gate (where a
template's effect, common to the four processes of its block, cancels from the block's
contrast), fresh where repeats are compared with a stored baseline (where it would not:
docs/repeats.md)."""
MAX_WINDOWS = 100
REPLACED_KEYS = {
    "looks": "the gate now looks after every block until each workload is decided; set max_blocks "
             "(the most blocks) and budget (the most wall time) instead",
    "second_look_repeats": "the gate now looks after every repeat until each workload is decided; set max_blocks "
                           "(the most repeats) and budget instead",
}
MAX_TOML_DEPTH = 64
"""Tables and arrays nested in a pyproject.toml at most: ``[tool.perfgate.workload.NAME]``
and its lists are five levels; other tools' tables a few more."""


def _depth_beyond(value: object, limit: int) -> bool:
    """True when ``value`` (parsed TOML) holds tables or arrays nested deeper than ``limit``;
    walked without recursion, so the check cannot exhaust the stack it protects."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """``text`` (the contents of ``where``) as TOML; one UsageError line naming ``where`` when
    it is not valid TOML or is nested deeper than :data:`MAX_TOML_DEPTH` levels. tomllib
    parses arrays and inline tables recursively: a deep one ends its recursion, which is
    caught; a deep table header parses, and the walk after it refuses the result."""
    too_deep = f"{where}: not read: tables or arrays nested deeper than {MAX_TOML_DEPTH} levels"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: not valid TOML: {' '.join(str(exc).split())[:200]}") from None
    except RecursionError:
        raise UsageError(too_deep) from None
    if _depth_beyond(data, MAX_TOML_DEPTH):
        raise UsageError(too_deep)
    return data


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at ``path`` (:func:`parse_toml`); UsageError when it cannot be read or
    is not UTF-8 text."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not valid TOML: not UTF-8 text") from None
    return parse_toml(text, str(path))


@dataclass(frozen=True)
class ScriptEntry:
    """One training script ``[tool.perfgate] scripts`` gates like a workload: ``"train.py
    --max-steps 80"`` (the path, then its arguments, split as a shell would) or ``{ path =
    "train.py", args = ["--max-steps", "80"], name = "train" }``. The path is relative to
    ``root`` (the pyproject's folder); the name defaults to ``script-<file name>``."""

    path: str
    args: tuple[str, ...] = ()
    name: str | None = None
    root: Path = Path(".")
    given: str = SCRIPTS_SETTING
    """Where it was named, for messages (``--perfgate-script``, a test's marker)."""

    @property
    def job_name(self) -> str:
        """The name its results and baseline go by."""
        return self.name or Script(Path(self.path)).default_name()

    @property
    def written(self) -> str:
        """The entry as a command line would give it (``train.py --max-steps 80``)."""
        return shlex.join([self.path, *self.args])


def _script_entries(value: object, where: str, root: Path) -> tuple[ScriptEntry, ...]:
    """``scripts``, checked: a list of ``"PATH ARGS"`` strings or ``{path, args, name}`` tables."""
    shape = (f"{where}: scripts must be a list of \"PATH [ARGS...]\" strings or {{ path = \"...\", args = [...], "
             "name = \"...\" } tables")
    if not isinstance(value, list):
        raise UsageError(shape)
    entries = []
    for item in value:
        if isinstance(item, str):
            if not item.strip():
                raise UsageError(f"{where}: scripts: an empty entry names no script")
            path, args = script_words(item, f"{where}: scripts:")
            entries.append(ScriptEntry(path, args, None, root))
        elif isinstance(item, dict):
            extra = sorted(set(item) - {"path", "args", "name"})
            if extra:
                raise UsageError(f"{where}: scripts: unknown key {extra[0]!r} in a script's table; allowed: args, "
                                 "name, path")
            file, args, name = item.get("path"), item.get("args", []), item.get("name")
            if not isinstance(file, str) or not file:
                raise UsageError(f"{where}: scripts: a script's table needs path = \"the script's file\"")
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise UsageError(f"{where}: scripts: {file}: args must be a list of strings")
            if name is not None and not isinstance(name, str):
                raise UsageError(f"{where}: scripts: {file}: name must be a string")
            entries.append(ScriptEntry(file, tuple(args), name, root))
        else:
            raise UsageError(shape)
    return tuple(entries)


@dataclass(frozen=True)
class Settings:
    gate: GateConfig = field(default_factory=GateConfig)
    per_workload: Mapping[str, GateConfig] = field(default_factory=dict)
    baselines: Path = Path("baselines")
    history: Path = Path("perfgate-history.sqlite")
    """The history store of ``perfgate history`` (an SQLite file); a relative path written in
    pyproject.toml is relative to the pyproject's folder, one given on the command line to the cwd."""
    workloads: tuple[str, ...] = ()
    repeats: int = 5
    blocks: int = 6
    """ABBA blocks at the first look of a paired gate (four processes each)."""
    budget_s: float | None = None
    """The most wall time a gate measures for (``budget = "20m"``; :data:`DEFAULT_BUDGET` when no
    setting gives one); None (``budget = "none"``): until ``max_blocks``. In a paired gate α is
    spent over the share of it measured (:meth:`budget_spending`)."""
    max_blocks_given: bool = False
    """``max_blocks`` was set (``[tool.perfgate]`` or ``--max-blocks``), not the default: with a
    budget it caps the looks instead of :data:`~perfgate.analysis.driver.MAX_PLANNED`."""
    windows: int = 1
    """Timed windows per repeat, each of the workload's ``steps`` (``windows = 3``); with
    ``windows = "auto"``, :data:`~perfgate.analysis.design.PILOT_WINDOWS`, what a run or a stored
    gate times and what a paired gate's workload gets before this runner has evidence for it."""
    windows_auto: bool = False
    """``windows = "auto"``: a paired gate designs each workload's windows from this runner's
    evidence (:mod:`perfgate.analysis.design`) and the judge re-derives them."""
    start: str = "auto"
    """How each repeat's fresh process starts (:data:`START_MODES`; :meth:`start_for`)."""
    device: str = "auto"
    workloads_path: tuple[str, ...] = ()
    scripts: tuple[ScriptEntry, ...] = ()
    """Training scripts gated beside the workloads (``[tool.perfgate] scripts``)."""
    accept_by: str = ACCEPT_BY[0]
    """Who may accept a recorded REGRESSION with the label (:data:`ACCEPT_BY`); the judge reads the base's."""
    source: str = "defaults"

    def start_for(self, *, paired: bool) -> str:
        """``fork`` or ``fresh``: ``start``, with ``auto`` forking only in the paired design."""
        if self.start != "auto":
            return self.start
        return "fork" if paired else "fresh"

    def for_workload(self, name: str) -> GateConfig:
        return self.per_workload.get(name, self.gate)

    def budget_spending(self, *, paired: bool) -> BudgetSpending | None:
        """How a paired gate spends α over its budget: a look after every block from ``blocks``
        up to ``max_blocks`` when it was given, else up to
        :data:`~perfgate.analysis.driver.MAX_PLANNED`, each spending up to the share of the budget
        its blocks measured, the look the budget ends spending the rest
        (:class:`~perfgate.analysis.driver.BudgetSpending`). The measuring gate and the judge (from
        the base's settings) both spend by it.

        None (the looks end at ``max_blocks``, α spent over them): no budget; the stored design
        (its estimate holds the baseline's variance, which more current repeats do not shrink, so
        a longer gate buys little); or a one-look design (``max_blocks`` not above ``blocks``)."""
        from perfgate.analysis.driver import MAX_PLANNED, BudgetSpending

        if not paired or self.budget_s is None or self.gate.max_blocks <= self.blocks:
            return None
        cap = self.gate.max_blocks if self.max_blocks_given else MAX_PLANNED
        return BudgetSpending(self.budget_s, self.blocks, cap, self.max_blocks_given)


def _gate_config(values: Mapping[str, Any], where: str, base: GateConfig | None = None) -> GateConfig:
    data = dict(values)
    if "gate_phases" in data:
        phases = data["gate_phases"]
        if not isinstance(phases, list) or not all(isinstance(p, str) for p in phases):
            raise UsageError(f"{where}: gate_phases must be a list of phase names")
        unknown = [p for p in phases if p not in PHASES]
        if unknown:
            raise UsageError(f"{where}: unknown phase {unknown[0]!r} in gate_phases; phases: {', '.join(PHASES)}")
        data["gate_phases"] = tuple(phases)
    if "counters_off" in data:
        off = data["counters_off"]
        if not isinstance(off, list) or not all(isinstance(c, str) for c in off):
            raise UsageError(f"{where}: counters_off must be a list of counter names")
        data["counters_off"] = tuple(off)
    try:
        return dataclasses.replace(base, **data) if base else GateConfig(**data)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None


def load_settings(pyproject: Path | None, cli: Mapping[str, Any] | None = None) -> Settings:
    """Read ``[tool.perfgate]`` from ``pyproject`` (if it exists) and apply CLI values.

    ``cli`` holds only the options the user actually gave (None values are ignored).
    """
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    table: dict[str, Any] = {}
    source = "defaults"
    if pyproject is not None and pyproject.is_file():
        tool = read_toml(pyproject).get("tool", {})
        if not isinstance(tool, dict):
            raise UsageError(f"{pyproject}: [tool] must be a table")
        table = tool.get("perfgate", {})
        if not isinstance(table, dict):
            raise UsageError(f"{pyproject}: [tool.perfgate] must be a table")
        if table:
            source = f"{pyproject} [tool.perfgate]"
    where = f"{pyproject} [tool.perfgate]"
    per_workload_tables = table.pop("workload", {})
    replaced = sorted(k for k in table if k in REPLACED_KEYS)
    given = sorted(k for k in cli if k in REPLACED_KEYS)
    for tables in per_workload_tables.values() if isinstance(per_workload_tables, dict) else ():
        if isinstance(tables, dict):
            replaced += sorted(k for k in tables if k in REPLACED_KEYS)
    if replaced or given:
        key = (replaced or given)[0]
        origin = where if replaced else "command line"
        raise UsageError(f"{origin}: {key!r} is no longer a setting: {REPLACED_KEYS[key]}")
    unknown = set(table) - GATE_KEYS - RUN_KEYS
    if unknown:
        allowed = ", ".join(sorted(GATE_KEYS | RUN_KEYS | {"workload"}))
        raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r}; allowed: {allowed}")
    gate_values = {k: v for k, v in table.items() if k in GATE_KEYS}
    cli_gate = {k: v for k, v in cli.items() if k in GATE_KEYS}
    global_config = _gate_config(gate_values, where)
    gate = _gate_config(cli_gate, "command line", global_config)

    if not isinstance(per_workload_tables, dict):
        raise UsageError(f"{where}: [tool.perfgate.workload] must hold one table per workload")
    per_workload: dict[str, GateConfig] = {}
    for name, values in per_workload_tables.items():
        w_where = f"{pyproject} [tool.perfgate.workload.{name}]"
        if not isinstance(values, dict):
            raise UsageError(f"{w_where}: must be a table")
        bad = set(values) - PER_WORKLOAD_KEYS
        if bad:
            raise UsageError(f"{w_where}: {sorted(bad)[0]!r} cannot be set per workload; "
                             f"allowed: {', '.join(sorted(PER_WORKLOAD_KEYS))}")
        config = _gate_config(values, w_where, global_config)
        per_workload[name] = _gate_config(cli_gate, "command line", config)

    def run_value(key: str, default: Any) -> Any:
        return cli.get(key, table.get(key, default))

    workloads = run_value("workloads", ())
    if isinstance(workloads, str) or not all(isinstance(w, str) for w in workloads):
        raise UsageError(f"{where}: workloads must be a list of workload names")
    repeats = run_value("repeats", 5)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise UsageError(f"{where}: repeats must be an integer >= 1, got {repeats!r}")
    blocks = run_value("blocks", 6)
    problem = blocks_problem(blocks, "--blocks" if "blocks" in cli else f"{where}: blocks")
    if problem is not None:
        raise UsageError(problem)
    windows = run_value("windows", DEFAULT_WINDOWS)
    windows_auto = windows == AUTO_WINDOWS
    if windows_auto:
        # "auto" written: a run and a stored gate time the pilot's windows too; unset: a paired
        # gate designs its windows, and a run or a stored gate times one window a repeat
        windows = PILOT_WINDOWS if "windows" in cli or "windows" in table else 1
    if isinstance(windows, bool) or not isinstance(windows, int) or not 1 <= windows <= MAX_WINDOWS:
        origin = "--windows" if "windows" in cli else f"{where}: windows"
        raise UsageError(f"{origin} must be an integer from 1 to {MAX_WINDOWS} or \"{AUTO_WINDOWS}\", got {windows!r}")
    start = run_value("start", "auto")
    if start not in START_MODES:
        origin = "--start" if "start" in cli else f"{where}: start"
        raise UsageError(f"{origin} must be one of {', '.join(START_MODES)}, got {start!r}")
    accept_by = table.get("accept_by", ACCEPT_BY[0])
    if accept_by not in ACCEPT_BY:
        raise UsageError(f"{where}: accept_by must be one of {', '.join(repr(a) for a in ACCEPT_BY)}, "
                         f"got {accept_by!r}")
    budget = run_value("budget", DEFAULT_BUDGET)
    try:
        budget_s = None if budget in NO_BUDGET else parse_duration(budget, "--budget" if "budget" in cli else
                                                                   f"{where}: budget")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    paths = run_value("workloads_path", ())
    paths = (paths,) if isinstance(paths, str) else tuple(paths)
    # Paths written in pyproject.toml are relative to it; the command line's to the cwd.
    here = pyproject.parent if pyproject is not None and pyproject.is_file() else Path(".")
    baselines = Path(cli["baselines"]) if "baselines" in cli else here / table.get("baselines", "baselines")
    if not isinstance(table.get("history", ""), str):
        raise UsageError(f"{where}: history must be the path of the history store, got {table['history']!r}")
    history = Path(cli["history"]) if "history" in cli else here / table.get("history", "perfgate-history.sqlite")
    if "workloads_path" not in cli:
        paths = tuple(str(here / p) for p in paths)
    scripts = _script_entries(table["scripts"], where, here.resolve()) if "scripts" in table else ()
    return Settings(
        gate=gate,
        per_workload=per_workload,
        baselines=baselines,
        history=history,
        workloads=tuple(workloads),
        repeats=repeats,
        blocks=blocks,
        budget_s=budget_s,
        max_blocks_given="max_blocks" in gate_values or "max_blocks" in cli_gate,
        windows=windows,
        windows_auto=windows_auto,
        start=start,
        device=run_value("device", "auto"),
        workloads_path=paths,
        scripts=scripts,
        accept_by=accept_by,
        source=source,
    )
