"""The front-end core of the command line: the options the commands share, and what they
become (settings, jobs, the cache folder, the contention policy, progress lines, the gate
request, the paired gate in a base tree). ``perfgate`` (``cli``), ``perfgate ci``,
``perfgate selftest``, ``perfgate counters`` and the pytest plugin all build on these, so
none of them imports another.

The gate's options are declared once, in :data:`GATE_OPTIONS`: each with its type, help,
default, the ``[tool.perfgate]`` key it sets and its check. The command line's ``--blocks``
and the pytest plugin's ``--perfgate-blocks`` are made from the same entry
(:func:`add_options`, :func:`add_pytest_options`), and :func:`settings_cli` checks the
values given, once, for every front end, before they become the ``cli`` of
:func:`perfgate.gate.config.load_settings`. What a command measures (``--set``,
``--data-root``, ``--against``, ...) is declared once too, in :data:`SELECTION_OPTIONS`:
``--set`` and ``--perfgate-set`` come from the same row (:func:`add_selection_options`,
:func:`add_pytest_options`).

Importing this module imports neither torch nor the gate's statistics (the pytest plugin
declares its options from it without ``--perfgate``): the gate is imported when it is used.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.model.errors import UsageError
from perfgate.model.workload import PHASES, parse_assignments
from perfgate.text.units import parse_duration

if TYPE_CHECKING:
    from perfgate.gate.config import Settings
    from perfgate.gate.gating import GateRequest, GateRun, MeasuringRequest
    from perfgate.gate.worktree import SiblingTrees
    from perfgate.measure.runner import Progress
    from perfgate.model.job import Job

ContentionCheck = Callable[[Mapping[str, Any] | None], str | None]


# --- the gate's options, declared once ------------------------------------------------------

Check = Callable[[Any, str], str | None]
"""Why a given value is refused (one line naming the option as the front end spells it), or None."""


@dataclass(frozen=True)
class GateOption:
    """One option of a table: ``--NAME`` on the command line, ``--perfgate-NAME`` in pytest
    (underscores as dashes), the same type, default, choices and help in both, unless the
    row says what pytest's declares otherwise (:attr:`in_pytest`)."""

    name: str
    """The argparse ``dest``; the pytest option's is ``perfgate_NAME``."""
    help: str
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    action: str | None = None
    """None (a value), ``"store_true"``, ``"append"`` or ``"extend"``."""
    key: str | None = None
    """The ``load_settings`` key it sets (None: it goes to the gate's request, not its settings)."""
    setting: Callable[[Any], Any] | None = None
    """The value of ``key`` for a value given (default: the value itself)."""
    check: Check | None = None
    path: bool = False
    """A file or folder: the pytest plugin reads it relative to where pytest was started."""
    nargs: str | None = None
    positional: bool = False
    """The command line's is a positional argument (``perfgate gate WORKLOAD...``); pytest's is
    still ``--perfgate-NAME`` (pytest's positional arguments are test paths)."""
    in_pytest: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """What pytest's option declares otherwise: ``help``, ``action``, ``nargs``, ``metavar``,
    ``default`` (a pytest option takes one value per use: ``--perfgate-set`` is repeated,
    where ``--set`` takes several)."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def pytest_flag(self) -> str:
        return "--perfgate-" + self.name.replace("_", "-")

    @property
    def pytest_dest(self) -> str:
        return f"perfgate_{self.name}"

    def fresh_default(self) -> Any:
        """The default, a new list for a tuple (argparse appends to the default given)."""
        return _fresh(self.default)

    def kwargs(self, help: str | None = None, *, pytest: bool = False) -> dict[str, Any]:
        """Keyword arguments of argparse's ``add_argument`` (``pytest``: of pytest's ``addoption``)."""
        spec: dict[str, Any] = {"help": self.help, "default": self.default, "action": self.action,
                                "nargs": self.nargs, "type": self.type, "metavar": self.metavar,
                                "choices": list(self.choices) if self.choices is not None else None}
        if pytest:
            spec.update(self.in_pytest)
        out: dict[str, Any] = {"help": spec["help"] if help is None else help}
        if pytest or not self.positional:  # argparse gives a positional ``*`` its own empty list
            out["default"] = _fresh(spec["default"])
        if spec["action"] is not None:
            out["action"] = spec["action"]
        if spec["action"] != "store_true":
            for name in ("nargs", "type", "metavar", "choices"):
                if spec[name] is not None:
                    out[name] = spec[name]
        return out

    def given(self, value: Any) -> bool:
        """True when ``value`` was given (a flag set, a list not empty)."""
        return value is not None and value is not False and value != []

    def setting_of(self, value: Any) -> Any:
        return value if self.setting is None else self.setting(value)


def _fresh(default: Any) -> Any:
    return list(default) if isinstance(default, tuple) else default


def _at_least(low: int, how: str) -> Check:
    return lambda value, flag: None if value >= low else how.format(flag=flag, value=value)


_AT_LEAST_ONE = _at_least(1, "{flag} must be at least 1")


def _positive_seconds(value: float, flag: str) -> str | None:
    return None if math.isfinite(value) and value > 0 else f"{flag} must be more than 0 seconds"


def _duration(value: str, flag: str) -> str | None:
    try:
        parse_duration(value, flag)
    except ValueError as exc:
        return str(exc)
    return None


def _blocks(value: int, flag: str) -> str | None:
    from perfgate.analysis.blocks import blocks_problem

    return blocks_problem(value, flag)


def _max_blocks(value: int, flag: str) -> str | None:
    return None if 2 <= value <= 500 else f"{flag} must be from 2 to 500 (blocks or repeats), got {value}"


def _cpu_share(value: float, flag: str) -> str | None:
    from perfgate.analysis.contention import ContentionPolicy

    try:
        ContentionPolicy(max_other_cpu_share=value)
    except ValueError as exc:
        return f"{flag}: {exc}"
    return None


def _options(*entries: GateOption) -> dict[str, GateOption]:
    return {entry.name: entry for entry in entries}


GATE_OPTIONS: Mapping[str, GateOption] = _options(
    # measuring
    GateOption("device", "where to measure (default: [tool.perfgate] device, else auto = cuda when available)",
               choices=("auto", "cpu", "cuda"), key="device"),
    GateOption("repeats", "repeats per workload at the first look (default: [tool.perfgate] repeats, else 5)",
               type=int, metavar="N", key="repeats", check=_AT_LEAST_ONE),
    GateOption("windows", "timed windows per repeat, each of the workload's steps, after one warmup (default: "
                          "[tool.perfgate] windows, else 1; perfgate calibrate recommends one)",
               type=int, metavar="N", key="windows", check=_AT_LEAST_ONE),
    GateOption("start", "how each repeat's fresh process starts: fork (from a template that has imported torch; "
                        "distributed repeats and scripts always start fresh), fresh (a new interpreter), or auto "
                        "(fork in a paired gate and calibrate, fresh against stored baselines) (default: "
                        "[tool.perfgate] start, else auto)", choices=("auto", "fork", "fresh"), key="start"),
    GateOption("out", "directory for result files (default: perfgate-results)", metavar="DIR",
               default="perfgate-results", path=True),
    GateOption("cache_dir", "synthetic data cache (default: $PERFGATE_CACHE_DIR or ~/.cache/perfgate)",
               metavar="DIR", path=True),
    GateOption("timeout", "give up on a repeat after this long (default: 3600)", type=float, metavar="SECONDS",
               default=3600.0, check=_positive_seconds),
    GateOption("no_telemetry", "do not sample NVML/psutil telemetry in a background thread during the window "
                               "(a repeat's contention by other processes is then not known)",
               action="store_true", default=False),
    # judging
    GateOption("baselines", "baseline store (default: [tool.perfgate] baselines, else baselines/)", metavar="DIR",
               key="baselines", setting=str, path=True),
    GateOption("markdown", "write the markdown report here", metavar="FILE", path=True),
    GateOption("json", "write the JSON report here", metavar="FILE", path=True),
    GateOption("html", "write a self-contained HTML report with plots (DIR/index.html)", metavar="DIR", path=True),
    GateOption("alpha", "family-wise false-alarm rate, one-sided (default 0.01)", type=float, metavar="ALPHA",
               key="alpha"),
    GateOption("delta", "smallest slowdown that fails, as a fraction (default 0.03)", type=float,
               metavar="FRACTION", key="delta"),
    GateOption("memory_threshold", "peak-memory growth that fails (default 0.10)", type=float, metavar="FRACTION",
               key="memory_threshold"),
    GateOption("phase_q", "false-discovery rate for flagging phases (default 0.10)", type=float, metavar="Q",
               key="phase_q"),
    GateOption("gate_phase", "also fail the gate on this phase (repeatable; default: phases only diagnose)",
               metavar="PHASE", action="append", default=(), choices=tuple(PHASES), key="gate_phases",
               setting=list),
    GateOption("fail_on_missing_baseline", "a workload without a baseline fails the gate (exit 2) instead of a "
                                           "loud notice", action="store_true", default=False,
               key="fail_on_missing_baseline", setting=lambda value: True),
    GateOption("inconclusive", "what an undecided gate does to the pull request (default: [tool.perfgate] "
                               "inconclusive, else pass)", choices=("pass", "fail"), key="inconclusive"),
    # looking
    GateOption("blocks", "ABBA blocks at the first look of a paired gate (default: [tool.perfgate] blocks, else 6)",
               type=int, metavar="N", key="blocks", check=_blocks),
    GateOption("max_blocks", "the most ABBA blocks (stored baseline: repeats) a workload is measured for; the gate "
                             "looks after each one (default: [tool.perfgate] max_blocks, else 30)",
               type=int, metavar="N", key="max_blocks", check=_max_blocks),
    GateOption("budget", "the most wall time the gate measures for, e.g. 20m, 90s, 1h (default: [tool.perfgate] "
                         "budget, else until max_blocks); the workloads undecided then are INCONCLUSIVE",
               metavar="DURATION", key="budget", check=_duration),
    GateOption("max_reruns", "blocks (stored baseline: repeats) measured again per workload when other processes "
                             "loaded the machine (default 3)", type=int, metavar="N", default=3,
               check=_at_least(0, "{flag} must be 0 or more")),
    GateOption("max_other_cpu_share", "a repeat is contended when other processes used more than this share of "
                                      "the CPUs during its window (default: perfgate.analysis.contention's)",
               type=float, metavar="SHARE", check=_cpu_share),
    GateOption("no_counters", "skip the counted run of each side (exact operator, FLOP and synchronisation "
                              "counts); [tool.perfgate] counters = false does the same",
               action="store_true", default=False, key="counters", setting=lambda value: False),
)
"""Every option of the gate, by name, in the order the help lists them."""

RUN_OPTIONS = ("device", "repeats", "windows", "start", "out", "cache_dir", "timeout", "no_telemetry")
"""How a workload is measured: every measuring command (``run``, ``gate``, ``ci``, ...)."""
JUDGING_OPTIONS = ("baselines", "markdown", "json", "html", "alpha", "delta", "memory_threshold", "phase_q",
                   "gate_phase", "fail_on_missing_baseline", "inconclusive")
"""How results are judged and reported: ``compare``, ``report``, ``gate``."""
LOOKING_OPTIONS = ("blocks", "max_blocks", "budget", "max_reruns", "max_other_cpu_share", "no_counters")
"""How long a gate measures, and what it measures again: ``gate``, ``ci``."""

SELECTION_OPTIONS: Mapping[str, GateOption] = _options(
    GateOption("workloads", "workloads (default: [tool.perfgate] workloads, else all)", metavar="WORKLOAD",
               nargs="*", positional=True,
               in_pytest={"nargs": None, "action": "append", "default": (), "metavar": "NAME[,NAME...]",
                          "help": "workloads to gate (comma-separated or repeatable; default: [tool.perfgate] "
                                  "workloads, else all discovered)"}),
    GateOption("workloads_path", "extra workload file or directory (repeatable); ./workloads/ is always searched",
               metavar="PATH", action="append", default=(),
               in_pytest={"help": "extra workload file or directory (repeatable); ./workloads/ of the rootdir "
                                  "is always searched"}),
    GateOption("script", "run this training script as it is (it does not import perfgate) and time its steps "
                         "through hooks in torch; its own arguments go after --", metavar="PATH",
               in_pytest={"action": "append", "default": (), "metavar": "'PATH [ARGS...]'",
                          "help": "a training script to gate as it is, with its arguments in the same quoted value "
                                  "(repeatable; its result is script-<file name>); [tool.perfgate] scripts lists "
                                  "them for every run"}),
    GateOption("against", "paired design: measure the base commit REF in the same job, alternating with the "
                          "working tree in ABBA blocks, and judge the difference (the stored baseline is then "
                          "shown, not deciding)", metavar="REF",
               in_pytest={"help": "paired design: measure the base commit REF in the same session, alternating "
                                  "with the working tree in ABBA blocks (default: judge against the stored "
                                  "baselines)"}),
    GateOption("allow_dirty", "measure a working tree with uncommitted changes as the head side",
               action="store_true", default=False,
               in_pytest={"help": "with --perfgate-against: measure a working tree with uncommitted changes as "
                                  "the head"}),
    GateOption("set", "override a workload parameter (repeatable); recorded in the result", metavar="KEY=VALUE",
               action="extend", nargs="+", default=(), in_pytest={"action": "append", "nargs": None}),
    GateOption("data_root", "real dataset location (default: generated synthetic stand-in)",
               metavar="[WORKLOAD=]DIR", action="append", default=()),
)
"""What a command measures: the workloads, their files, a script, the base commit of a paired
gate, the workloads' parameters and data, in the order pytest's help lists them. The command
line's ``--set`` and pytest's ``--perfgate-set`` are made from the same row
(:func:`add_selection_options`, :func:`add_pytest_options`); ``in_pytest`` says where
pytest's differs, ``positional`` that the command line's is ``WORKLOAD...``. These go to the
selection (:mod:`perfgate.adapters.selection`, :mod:`perfgate.adapters.pytest_jobs`), not
to the settings."""

DECLARED = "perfgate_gate_options"
"""The namespace attribute naming the table's options a parser declared (see :func:`add_options`)."""


def add_options(parser: argparse.ArgumentParser, names: Iterable[str], *,
                help: Mapping[str, str] | None = None, defaults: Mapping[str, Any] | None = None) -> None:
    """Declare the table's options ``names`` on ``parser`` (``help`` replaces an option's
    help text there, ``defaults`` its default: ``perfgate counters --timeout`` gives up
    sooner, ``bisect --out`` keeps nothing unless given), and remember them: :func:`values_of`
    reads only what was declared, so a command's own option of the same name (``tune-loader
    --budget MINUTES``, declared with a ``dest`` of its own) is never taken for the gate's."""
    names = list(names)
    for name in names:
        option = GATE_OPTIONS[name]
        kwargs = option.kwargs((help or {}).get(name))
        if defaults is not None and name in defaults:
            kwargs["default"] = defaults[name]
        parser.add_argument(option.flag, dest=name, **kwargs)
    declared = parser.get_default(DECLARED) or ()
    parser.set_defaults(**{DECLARED: (*declared, *names)})


def values_of(args: argparse.Namespace) -> dict[str, Any]:
    """The table's values in ``args``: the options its parser declared from the table, or,
    for a parser that declared its options itself, every one it has."""
    declared = getattr(args, DECLARED, None)
    if declared is None:
        return {name: getattr(args, name) for name in GATE_OPTIONS if hasattr(args, name)}
    return {name: getattr(args, name) for name in declared}


def add_selection_options(parser: argparse.ArgumentParser, names: Iterable[str], *,
                          help: Mapping[str, str] | None = None) -> None:
    """Declare the selection options ``names`` (:data:`SELECTION_OPTIONS`) on ``parser``
    (``help`` replaces an option's help text there). They are not the gate's: :func:`values_of`
    leaves them to the selection."""
    for name in names:
        option = SELECTION_OPTIONS[name]
        kwargs = option.kwargs((help or {}).get(name))
        if option.positional:
            parser.add_argument(name, **kwargs)
        else:
            parser.add_argument(option.flag, dest=name, **kwargs)


def add_pytest_options(group: Any) -> None:
    """Declare every option of both tables in the pytest plugin's group, as ``--perfgate-NAME``:
    the selection's (:data:`SELECTION_OPTIONS`), then the gate's (:data:`GATE_OPTIONS`)."""
    for option in (*SELECTION_OPTIONS.values(), *GATE_OPTIONS.values()):
        group.addoption(option.pytest_flag, dest=option.pytest_dest, **option.kwargs(pytest=True))


def pytest_values(getoption: Callable[[str], Any], here: Path) -> dict[str, Any]:
    """The table's values of a pytest run, its files and folders relative to ``here`` (where
    pytest was started)."""
    values = {}
    for option in GATE_OPTIONS.values():
        value = getoption(option.pytest_dest)
        values[option.name] = str(here / value) if option.path and value is not None else value
    return values


def pytest_flag(name: str) -> str:
    return GATE_OPTIONS[name].pytest_flag


def cli_flag(name: str) -> str:
    return GATE_OPTIONS[name].flag


def check_values(values: Mapping[str, Any], flag: Callable[[str], str] = cli_flag) -> None:
    """Refuse a value given that its option's check refuses: one line, exit 2, naming the
    option as ``flag`` spells it (``--blocks``, ``--perfgate-blocks``)."""
    for name, value in values.items():
        option = GATE_OPTIONS[name]
        if option.check is not None and option.given(value):
            reason = option.check(value, flag(name))
            if reason is not None:
                raise UsageError(reason)


def settings_cli(values: Mapping[str, Any], flag: Callable[[str], str] = cli_flag) -> dict[str, Any]:
    """The ``cli`` of :func:`perfgate.gate.config.load_settings` from the table's ``values``
    (the options given, checked here, once, by :func:`check_values`)."""
    check_values(values, flag)
    cli: dict[str, Any] = {}
    for name, value in values.items():
        option = GATE_OPTIONS[name]
        if option.key is not None and option.given(value):
            cli[option.key] = option.setting_of(value)
    return cli


def value_or_default(values: Mapping[str, Any], name: str) -> Any:
    """``values[name]``, else the table's default (a front end that does not declare it)."""
    given = values.get(name)
    return GATE_OPTIONS[name].fresh_default() if given is None else given


def require_gate_repeats(settings: Settings, values: Mapping[str, Any], flag: Callable[[str], str] = cli_flag) -> None:
    """A gate needs two repeats at its first look to know the run-to-run noise."""
    if settings.repeats < 2:
        where = flag("repeats") if values.get("repeats") is not None else settings.source
        raise UsageError(f"{where}: a gate needs at least 2 repeats to know its run-to-run noise")


def contention_policy(values: Mapping[str, Any], flag: Callable[[str], str] = cli_flag) -> ContentionCheck | None:
    """Why a repeat was contended by other processes (None: not contended), or None when
    off: without telemetry and without ``max_other_cpu_share``."""
    from perfgate.analysis.contention import ContentionPolicy, contention

    share = values.get("max_other_cpu_share")
    if share is None and value_or_default(values, "no_telemetry"):
        return None
    check_values({"max_other_cpu_share": share}, flag)
    policy = ContentionPolicy() if share is None else ContentionPolicy(max_other_cpu_share=share)
    return lambda telemetry: contention(telemetry, policy)


def measuring_request(values: Mapping[str, Any], device: str, windows: int, *,
                      progress: Callable[[Progress], None], gate: bool,
                      flag: Callable[[str], str] = cli_flag, windows_auto: bool = False) -> MeasuringRequest:
    """How a front end's repeats are measured, from its table values: the device, the cache,
    the timeout, the telemetry, ``windows`` per repeat (``windows_auto``: the settings say
    ``"auto"``, and a script times one window). ``gate``: with the gate's contention
    policy and ``max_reruns`` (a contended repeat is measured again); without, each repeat
    is measured once (``run``, ``rebaseline``, ``calibrate``)."""
    from perfgate.gate.gating import MeasuringRequest
    from perfgate.measure.runner import default_cache_dir

    cache = values.get("cache_dir")
    measuring = MeasuringRequest(
        device, Path(cache) if cache else default_cache_dir(), windows=windows, windows_auto=windows_auto,
        progress=progress,
        timeout_s=value_or_default(values, "timeout"), telemetry=not value_or_default(values, "no_telemetry"))
    if not gate:
        return measuring
    return dataclasses.replace(measuring, contention_check=contention_policy(values, flag),
                               max_reruns=value_or_default(values, "max_reruns"))


def gate_request(values: Mapping[str, Any], settings: Settings, device: str, jobs: Sequence[Job], *,
                 progress: Callable[[Progress], None], announce: Callable[[str], None],
                 flag: Callable[[str], str] = cli_flag) -> GateRequest:
    """The one gate request of a front end's table values: the same request, the same
    contention policy, from the command line and from pytest."""
    from perfgate.gate.gating import GateRequest

    measuring = measuring_request(values, device, settings.windows, progress=progress, gate=True, flag=flag,
                                  windows_auto=settings.windows_auto)
    return GateRequest(jobs=tuple(jobs), settings=settings, measuring=measuring,
                       out_dir=Path(value_or_default(values, "out")), announce=announce)


# --- what the command line's options become ---------------------------------------------------

def progress_printer(quiet: bool) -> Callable[[Progress], None]:
    def show(event: Progress) -> None:
        if quiet:
            return
        prefix = f"[{event.workload}] " + (event.label or f"repeat {event.repeat}/{event.repeats}")
        if event.status == "start":
            print(f"{prefix} ...", file=sys.stderr, flush=True)
        elif event.status == "done":
            print(f"{prefix} done in {event.seconds:.1f} s, step median {event.step_median_ms:.2f} ms",
                  file=sys.stderr, flush=True)
        else:
            print(f"{prefix} failed after {event.seconds:.1f} s", file=sys.stderr, flush=True)

    return show


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings of ``--config`` with the table's options given on the command line,
    checked once (:func:`settings_cli`)."""
    from perfgate.gate.config import load_settings

    return load_settings(Path(args.config), settings_cli(values_of(args)))


def cache_dir_of(args: argparse.Namespace) -> Path:
    from perfgate.measure.runner import default_cache_dir

    return Path(args.cache_dir) if args.cache_dir else default_cache_dir()


def announcer(quiet: bool = False) -> Callable[[str], None]:
    """``perfgate: MESSAGE`` lines on stderr (none when ``quiet``)."""
    if quiet:
        return lambda message: None
    return lambda message: print(f"perfgate: {message}", file=sys.stderr, flush=True)


def request_of(args: argparse.Namespace, settings: Settings, device: str, jobs: Sequence[Job]) -> GateRequest:
    """The one gate request of the command line's options (:func:`gate_request`)."""
    return gate_request(values_of(args), settings, device, jobs, progress=progress_printer(args.quiet),
                        announce=announcer())


def assignments_of(args: argparse.Namespace) -> dict[str, object]:
    assignments: dict[str, object] = dict(parse_assignments(args.set))
    if args.steps is not None:
        assignments["steps"] = str(args.steps)
    if args.warmup is not None:
        assignments["warmup_steps"] = str(args.warmup)
    return assignments


def paired_gate_in(trees: SiblingTrees, args: argparse.Namespace, settings: Settings, device: str,
                   jobs: list[Job]) -> GateRun:
    """The paired gate of ``jobs`` (built from the working tree): each side run from its tree
    of ``trees``, the head's and the base's sibling checkouts of one shape."""
    from perfgate.gate.frontend import paired_gate

    if args.base_python and not Path(args.base_python).is_file():
        raise UsageError(f"--base-python {args.base_python}: no such interpreter")
    return paired_gate(
        request_of(args, settings, device, jobs), trees, project_dir=Path.cwd(),
        workload_paths=[Path(p) for p in (*settings.workloads_path, *args.workloads_path)],
        assignments=assignments_of(args), base_python=args.base_python)


def stored_gate(args: argparse.Namespace, settings: Settings, device: str, jobs: list[Job]) -> GateRun:
    """The gate of ``jobs`` against the stored baselines, with the command line's measuring options."""
    from perfgate.gate.gating import run_gate

    return run_gate(request_of(args, settings, device, jobs))


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and worker output on errors")
    add_selection_options(parser, ("workloads_path",))
    parser.add_argument("--config", default="pyproject.toml", metavar="PYPROJECT",
                        help="where [tool.perfgate] is read from (default: ./pyproject.toml)")


SHARD_HELP = ("measure only this runner's share I of N: with the selected workloads sorted by name, every "
              "N-th one starting at the I-th (1 <= I <= N). Each workload falls in exactly one share; a share "
              "with none measures nothing and exits 0. `perfgate judge DIR...` judges the shares' result "
              "folders together, with Holm over all their workloads")


SHARDED_COMMANDS = ("run", "gate", "ci")
"""The commands that take ``--shard``: the others measure one workload, or record baselines."""


def add_run_options(parser: argparse.ArgumentParser, *, repeats_help: str, shard: bool | None = None) -> None:
    """The measuring options (the table's :data:`RUN_OPTIONS` and the workload's own); ``shard``:
    also ``--shard I/N`` (None: for the commands :data:`SHARDED_COMMANDS`, named by the parser's
    last word)."""
    add_selection_options(parser, ("workloads",))
    if shard or shard is None and parser.prog.rsplit(" ", 1)[-1] in SHARDED_COMMANDS:
        parser.add_argument("--shard", metavar="I/N", help=SHARD_HELP)
    add_options(parser, ("device", "repeats", "windows", "start"), help={"repeats": repeats_help})
    parser.add_argument("--steps", type=int, help="measured steps per window (same as --set steps=N)")
    parser.add_argument("--warmup", type=int, help="warmup steps per repeat (same as --set warmup_steps=N)")
    add_selection_options(parser, ("set", "data_root"))
    add_options(parser, ("out", "cache_dir", "timeout", "no_telemetry"))
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    """How results are judged and reported (the table's :data:`JUDGING_OPTIONS`)."""
    add_options(parser, JUDGING_OPTIONS)


def add_paired_options(parser: argparse.ArgumentParser) -> None:
    """How long a gate measures and what it measures again (the table's :data:`LOOKING_OPTIONS`),
    and the paired design's base interpreter; shared by ``gate`` and ``ci``."""
    add_options(parser, LOOKING_OPTIONS)
    parser.add_argument("--base-python", metavar="PATH",
                        help="run the base side with this interpreter (it must have perfgate installed), e.g. "
                             "when the change upgrades torch; the report then shows both environments")
