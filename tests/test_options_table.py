"""The gate's options, declared once (perfgate.adapters.options.GATE_OPTIONS), and the
selection's (perfgate.adapters.options.SELECTION_OPTIONS).

The command line (``perfgate gate``, ``ci``, ``selftest``) and the pytest plugin make their
options from the same tables, check a value given in one place, and build the same gate
request from it, contention policy included.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Any

import pytest

from perfgate.adapters import ci, options, pytest_plugin, selftest
from perfgate.adapters.cli import build_parser, main
from perfgate.adapters.options import (GATE_OPTIONS, JUDGING_OPTIONS, LOOKING_OPTIONS, RUN_OPTIONS,
                                       SELECTION_OPTIONS)
from perfgate.gate.config import Settings, load_settings
from perfgate.model.errors import UsageError

pytest_plugins = ["pytester"]

ADAPTERS = Path(__file__).resolve().parents[1] / "perfgate" / "adapters"
DECLARING = {"add_argument", "addoption", "add_parser", "add_options", "add_pytest_options", "ArgumentParser",
             "getgroup", "add_argument_group"}
"""The calls of a module that builds an argparse parser or declares pytest options."""


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def front_ends() -> dict[str, ast.Module]:
    """Every module of perfgate/adapters that builds a parser or declares pytest options, or
    reads the options of one (the gate's request, its values), by file name."""
    found = {}
    for path in sorted(ADAPTERS.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = {_called(n) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        if calls & DECLARING or "getoption" in calls:
            found[path.name] = tree
    return found


FRONT_ENDS = tuple(front_ends())


def own_flags(tree: ast.Module) -> set[str]:
    """The flags a module declares with a ``dest`` of their own: a command's own option."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in ("add_argument", "addoption") and any(
                k.arg == "dest" for k in node.keywords):
            out |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return out


TABLES = {**GATE_OPTIONS, **SELECTION_OPTIONS}
"""Every option a front end declares from a table, by name."""

OWN_DEST = {("init", "--script"): "scripts"}
"""A command's own option spelled as a selection row's flag, and its own ``dest``: ``init
--script 'PATH [ARGS...]'`` (repeatable) lists scripts in the settings it writes, where the
row's ``--script PATH`` runs one script now, its arguments after ``--``. It is not a table
option declared by hand (:func:`hand_declared` passes over another ``dest``)."""


def hand_declared(tree: ast.Module) -> list[tuple[int, str]]:
    """``add_argument``/``addoption`` calls that declare an option of either table (the gate's,
    the selection's) by its own flag, with its own ``dest`` (a command's own option of the
    same flag, such as ``tune-loader --budget MINUTES``, keeps another ``dest``): (line, flag).
    The command line's positional ``WORKLOAD...`` is no flag: ``compare`` and ``report`` name
    result files with theirs."""
    flags = {o.flag: name for name, o in TABLES.items() if not o.positional}
    flags.update({o.pytest_flag: name for name, o in TABLES.items()})
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _called(node) in ("add_argument", "addoption")):
            continue
        given = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        dest = next((k.value.value for k in node.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)),
                    None)
        for flag in given:
            name = flags.get(flag)
            if name is not None and dest in (None, name, f"perfgate_{name}"):
                out.append((node.lineno, flag))
    return out


def subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


def by_flag(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


class RecordingGroup:
    """What the plugin's ``pytest_addoption`` declares, as pytest's group receives it."""

    def __init__(self) -> None:
        self.options: dict[str, dict[str, Any]] = {}

    def addoption(self, *names: str, **kwargs: Any) -> None:
        (name,) = names
        self.options[name] = kwargs


class RecordingParser:
    def __init__(self) -> None:
        self.group = RecordingGroup()

    def getgroup(self, name: str, description: str = "") -> RecordingGroup:
        return self.group


def pytest_declared() -> dict[str, dict[str, Any]]:
    parser = RecordingParser()
    pytest_plugin.pytest_addoption(parser)  # type: ignore[arg-type]
    return parser.group.options


def argparse_kind(action: argparse.Action) -> str | None:
    if isinstance(action, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(action, argparse._ExtendAction):  # an _AppendAction too
        return "extend"
    if isinstance(action, argparse._AppendAction):
        return "append"
    return None


def all_parsers(parser: argparse.ArgumentParser | None = None, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command's parser of ``perfgate``, subcommands' included, by command words."""
    out = {}
    for action in (build_parser() if parser is None else parser)._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[prefix + name] = sub
                out.update(all_parsers(sub, prefix + name + " "))
    return out


def shape(action: argparse.Action) -> tuple[Any, ...]:
    """What an argparse action takes and gives, but its help."""
    return (action.dest, type(action), action.nargs, action.default, action.metavar, action.type, action.choices,
            action.required)


# --- one table, both parsers ------------------------------------------------------------------

def test_every_table_option_is_in_both_parsers_with_the_same_default_and_choices() -> None:
    gate = by_flag(subparser("gate"))
    declared = pytest_declared()
    assert set(GATE_OPTIONS) == {*RUN_OPTIONS, *JUDGING_OPTIONS, *LOOKING_OPTIONS}  # each in a group
    for name, option in GATE_OPTIONS.items():
        action = gate[option.flag]
        plugin = declared[option.pytest_flag]
        assert action.dest == name and plugin["dest"] == f"perfgate_{name}"
        assert action.default == plugin["default"] == option.fresh_default(), name
        assert action.choices == plugin.get("choices") == (list(option.choices) if option.choices else None), name
        assert action.type is plugin.get("type") is option.type, name
        assert argparse_kind(action) == plugin.get("action") == option.action, name
        assert action.metavar == plugin.get("metavar"), name
        assert action.help == plugin["help"] == option.help, name


def test_pytest_sees_the_table_defaults(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig()
    for option in GATE_OPTIONS.values():
        assert config.getoption(option.pytest_dest) == option.fresh_default(), option.name
    given = pytester.parseconfig("--perfgate-blocks", "4", "--perfgate-budget", "20m",
                                 "--perfgate-inconclusive", "fail", "--perfgate-gate-phase", "forward")
    assert [given.getoption(f"perfgate_{n}") for n in ("blocks", "budget", "inconclusive", "gate_phase")] == [
        4, "20m", "fail", ["forward"]]


def test_gate_and_ci_declare_the_measuring_and_looking_options_from_the_table() -> None:
    for command, names in (("gate", GATE_OPTIONS), ("ci", (*RUN_OPTIONS, *LOOKING_OPTIONS)),
                           ("compare", JUDGING_OPTIONS), ("run", RUN_OPTIONS)):
        flags = by_flag(subparser(command))
        for name in names:
            assert flags[GATE_OPTIONS[name].flag].dest == name, (command, name)
        args = subparser(command).parse_args([] if command != "ci" else ["--base-dir", "x"])
        assert set(getattr(args, options.DECLARED)) == set(names), command


@pytest.mark.parametrize("command", ["gate", "ci", "selftest"])
@pytest.mark.parametrize("flag", ["--looks", "--second-look-repeats", "--second-look-blocks"])
def test_the_two_look_options_are_gone(command: str, flag: str, capsys) -> None:
    argv = [command, *(["--base-dir", "x"] if command == "ci" else []), flag, "1"]
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2 and f"unrecognized arguments: {flag}" in capsys.readouterr().err
    assert not {"--perfgate-looks", "--perfgate-second-look-repeats"} & set(pytest_declared())


# --- checked once -------------------------------------------------------------------------------

BAD = [
    ("repeats", 0, "--repeats must be at least 1"),
    ("blocks", 1, "--blocks: the paired design needs at least 2 ABBA blocks"),
    ("max_blocks", 1, "--max-blocks must be from 2 to 500 (blocks or repeats), got 1"),
    ("budget", "0", "--budget: must be more than 0 and at most a week, got '0'"),
    ("budget", "soon", "--budget: expected a duration such as 20m, 90s or 1h, got 'soon'"),
    ("max_reruns", -1, "--max-reruns must be 0 or more"),
    ("max_other_cpu_share", 1.5, "--max-other-cpu-share: max_other_cpu_share must be in (0, 1]"),
    ("timeout", 0.0, "--timeout must be more than 0 seconds"),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_a_bad_value_is_one_line_named_as_each_front_end_spells_it(name: str, value: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        options.settings_cli({name: value})
    assert caught.value.message.startswith(message) and "\n" not in caught.value.message
    with pytest.raises(UsageError) as caught:
        options.settings_cli({name: value}, options.pytest_flag)
    assert caught.value.message.startswith(message.replace("--", "--perfgate-", 1))


@pytest.mark.parametrize(("name", "value", "message"), BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_perfgate_gate_refuses_it_before_anything_is_discovered(capsys, tmp_path: Path, name: str, value: Any,
                                                                  message: str) -> None:
    code = main(["gate", "no-such-workload", GATE_OPTIONS[name].flag, str(value),
                 "--config", str(tmp_path / "absent.toml")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"perfgate: error: {message}"), err


def test_every_front_end_says_the_same_about_blocks(capsys, tmp_path: Path, tiny_path: Path) -> None:
    message = "--blocks: the paired design needs at least 2 ABBA blocks"
    none = ["--config", str(tmp_path / "absent.toml")]
    parser = argparse.ArgumentParser(prog="perfgate")
    sub = parser.add_subparsers()
    ci.add_parser(sub)
    selftest.add_parser(sub)
    ci_args = parser.parse_args(["ci", "--base-dir", str(tmp_path), "--blocks", "1"])
    with pytest.raises(UsageError, match=re.escape(message)):
        ci.judge(ci_args, lambda cli: load_settings(None, cli))
    self_args = parser.parse_args(["selftest", "tiny", "--workloads-path", str(tiny_path), "--blocks", "1", *none])
    with pytest.raises(UsageError, match=re.escape(message)):
        self_args.func(self_args)
    assert main(["gate", "tiny", "--blocks", "1", *none]) == 2
    assert message in capsys.readouterr().err


def test_the_front_ends_are_found_in_the_package() -> None:
    assert {"options.py", "cli.py", "ci.py", "selftest.py", "bisect_cli.py", "counters_cli.py", "doctor.py",
            "pytest_plugin.py", "pytest_session.py"} <= set(FRONT_ENDS)
    assert "publish.py" not in FRONT_ENDS  # builds no parser


def test_no_front_end_declares_a_table_option_by_hand() -> None:
    declared = {name: {flag for _, flag in hand_declared(tree)} for name, tree in front_ends().items()}
    assert {name: flags for name, flags in declared.items() if flags} == {}
    # and the check sees one of either table, in either front end's spelling
    tree = ast.parse('p.add_argument("--blocks", type=int)\ng.addoption("--perfgate-timeout", type=float)\n'
                     'p.add_argument("--budget", dest="budget_minutes")\np.add_argument("--data-root")\n'
                     'g.addoption("--perfgate-set", action="append")\np.add_argument("workloads", nargs="*")\n')
    assert hand_declared(tree) == [(1, "--blocks"), (2, "--perfgate-timeout"), (4, "--data-root"),
                                   (5, "--perfgate-set")]


OLD_PLUGIN = """
def pytest_addoption(parser):
    group = parser.getgroup("perfgate", "perfgate: performance-regression gate for PyTorch training")
    group.addoption("--perfgate", action="store_true", default=False, help="run the perfgate workloads")
    group.addoption("--perfgate-workloads", action="append", default=[], metavar="NAME[,NAME...]", help="")
    group.addoption("--perfgate-workloads-path", action="append", default=[], metavar="PATH", help="")
    group.addoption("--perfgate-script", action="append", default=[], metavar="'PATH [ARGS...]'", help="")
    group.addoption("--perfgate-against", default=None, metavar="REF", help="")
    group.addoption("--perfgate-allow-dirty", action="store_true", default=False, help="")
    group.addoption("--perfgate-set", action="append", default=[], metavar="KEY=VALUE", help="")
    group.addoption("--perfgate-data-root", action="append", default=[], metavar="[WORKLOAD=]DIR", help="")
    add_pytest_options(group)
"""
"""The plugin's declarations before its selection options came from the table (help cut):
the gate's table alone did not know these flags, so none of them was caught."""


def test_the_plugin_s_old_hand_declarations_are_caught() -> None:
    assert [flag for _, flag in hand_declared(ast.parse(OLD_PLUGIN))] == [
        "--perfgate-workloads", "--perfgate-workloads-path", "--perfgate-script", "--perfgate-against",
        "--perfgate-allow-dirty", "--perfgate-set", "--perfgate-data-root"]
    assert hand_declared(front_ends()["pytest_plugin.py"]) == []


# --- the selection's options: one row, both front ends ----------------------------------------------

def test_every_selection_option_is_one_row_in_both_parsers() -> None:
    assert not set(SELECTION_OPTIONS) & set(GATE_OPTIONS)
    gate = subparser("gate")
    rows = argparse.ArgumentParser()
    options.add_selection_options(rows, SELECTION_OPTIONS)
    made = {action.dest: action for action in rows._actions}
    here = {action.dest: action for action in gate._actions}
    declared = pytest_declared()
    # in pytest's help as before: --perfgate, the selection's, then the gate's
    assert list(declared) == ["--perfgate", *(o.pytest_flag for o in SELECTION_OPTIONS.values()),
                              *(o.pytest_flag for o in GATE_OPTIONS.values())]
    for name, option in SELECTION_OPTIONS.items():
        assert shape(here[name]) == shape(made[name]) and here[name].help == made[name].help == option.help, name
        assert here[name].option_strings == ([] if option.positional else [option.flag]), name
        plugin = declared[option.pytest_flag]
        assert plugin == {"dest": option.pytest_dest, **option.kwargs(pytest=True)}, name
        # what pytest's does not say otherwise is the command line's
        for key in ("help", "metavar", "action"):
            if key not in option.in_pytest:
                assert plugin.get(key) == getattr(option, key), (name, key)
        assert "nargs" not in plugin, name  # one value per use: pytest's positional arguments are test paths


def test_pytest_sees_the_selection_defaults_and_values(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig()
    assert {name: config.getoption(o.pytest_dest) for name, o in SELECTION_OPTIONS.items()} == {
        "workloads": [], "workloads_path": [], "script": [], "against": None, "allow_dirty": False, "set": [],
        "data_root": []}
    given = pytester.parseconfig("--perfgate-workloads", "a,b", "--perfgate-set", "x=1", "--perfgate-set", "y=2",
                                 "--perfgate-script", "train.py --lr 1", "--perfgate-against", "HEAD~1",
                                 "--perfgate-allow-dirty", "--perfgate-data-root", "d", "tests")
    assert [given.getoption(f"perfgate_{n}") for n in ("workloads", "set", "script", "against", "allow_dirty",
                                                         "data_root")] == [
        ["a,b"], ["x=1", "y=2"], ["train.py --lr 1"], "HEAD~1", True, ["d"]]
    assert given.args == ["tests"]


def test_every_command_s_selection_option_matches_its_row() -> None:
    """Every command's selection option is its row's: the same dest, action, default and
    metavar, and the row's help unless the command says its own (``help=`` of
    :func:`~perfgate.adapters.options.add_selection_options`)."""
    rows = argparse.ArgumentParser()
    options.add_selection_options(rows, [name for name, o in SELECTION_OPTIONS.items() if not o.positional])
    made = by_flag(rows)
    own_help = {("bisect", "--set"), ("counters", "--set")}
    seen = set()
    for command, parser in all_parsers().items():
        for flag, action in by_flag(parser).items():
            if (command, flag) in OWN_DEST:  # a command's own option, not the row's (see OWN_DEST)
                assert action.dest == OWN_DEST[command, flag] != made[flag].dest, (command, flag)
                continue
            if flag in made:
                seen.add(flag)
                assert shape(action) == shape(made[flag]), (command, flag)
                assert (command, flag) in own_help or action.help == made[flag].help, (command, flag)
    assert seen == set(made)


def test_each_check_is_written_once_in_the_front_ends() -> None:
    text = {name: (ADAPTERS / name).read_text(encoding="utf-8") for name in FRONT_ENDS}
    for phrase in ("must be 0 or more", "must be at least 1", "a gate needs at least 2 repeats"):
        assert text["options.py"].count(phrase) == 1, phrase
    own = {name: own_flags(tree) for name, tree in front_ends().items()}
    for option in GATE_OPTIONS.values():  # a table option's value is refused by the table's check alone
        for flag in (option.flag, option.pytest_flag):
            where = [name for name, body in text.items() if name != "options.py" and flag not in own[name]
                     and re.search(rf"{flag}:? must\b|\"{flag}: ", body)]
            assert where == [], (flag, where)
    # the blocks: one check for the whole package, analysis.blocks.blocks_problem
    package = ADAPTERS.parent
    where = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py"))
             if "needs at least {MIN_BLOCKS} ABBA blocks" in p.read_text(encoding="utf-8")
             or "needs at least 2 ABBA blocks" in p.read_text(encoding="utf-8")
             or re.search(r"blocks\)? < 2\b", p.read_text(encoding="utf-8"))]
    assert where == ["analysis/blocks.py"], where
    for gone in ("--looks", "second_look_repeats", "second-look", "second_look_blocks", "perfgate-looks"):
        assert not [name for name, body in text.items() if gone in body], gone


def test_values_go_to_the_settings_under_their_keys() -> None:
    cli = options.settings_cli({"repeats": 3, "blocks": 4, "max_blocks": 12, "budget": "20m", "inconclusive": "fail",
                                "no_counters": True, "fail_on_missing_baseline": True, "gate_phase": ["forward"],
                                "baselines": "store", "device": "cpu", "out": "o", "max_reruns": 1,
                                "alpha": None, "markdown": None})
    assert cli == {"repeats": 3, "blocks": 4, "max_blocks": 12, "budget": "20m", "inconclusive": "fail",
                   "counters": False, "fail_on_missing_baseline": True, "gate_phases": ["forward"],
                   "baselines": "store", "device": "cpu"}
    settings = load_settings(None, cli)
    assert (settings.blocks, settings.gate.max_blocks, settings.budget_s, settings.gate.inconclusive,
            settings.gate.counters) == (4, 12, 1200.0, "fail", False)
    assert options.settings_cli({"no_counters": False, "fail_on_missing_baseline": False, "gate_phase": []}) == {}


def test_a_command_s_own_option_of_the_same_name_is_not_the_gate_s(tmp_path: Path) -> None:
    """``tune-loader --budget`` and ``selftest --budget`` are minutes of their own, not the
    gate's wall-time budget; ``bisect`` declares its options itself and they are read."""
    none = ["--config", str(tmp_path / "absent.toml")]
    for argv in (["tune-loader", "tiny", "--budget", "5"], ["selftest", "tiny", "--budget", "5"]):
        args = build_parser().parse_args([*argv, *none])
        assert "budget" not in options.values_of(args)
        assert options.settings_of(args).budget_s == 600.0  # the gate's own default, not the command's 5
    bisect = build_parser().parse_args(["bisect", "HEAD~1", "HEAD", "tiny", "--blocks", "3", "--alpha", "0.05",
                                        *none])
    settings = options.settings_of(bisect)
    assert settings.blocks == 3 and settings.gate.alpha == 0.05


# --- one request ----------------------------------------------------------------------------------

def test_the_command_line_and_pytest_build_the_same_request(tmp_path: Path, pytester: pytest.Pytester) -> None:
    settings = Settings()
    args = subparser("gate").parse_args(["--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"),
                                         "--max-reruns", "2", "--timeout", "60"])
    from_cli = options.request_of(args, settings, "cpu", [])
    config = pytester.parseconfig("--perfgate-cache-dir", str(tmp_path / "cache"), "--perfgate-out",
                                  str(tmp_path / "out"), "--perfgate-max-reruns", "2", "--perfgate-timeout", "60")
    values = options.pytest_values(config.getoption, tmp_path)
    from_pytest = options.gate_request(values, settings, "cpu", [], progress=lambda event: None,
                                       announce=lambda message: None, flag=options.pytest_flag)
    for request in (from_cli, from_pytest):
        m = request.measuring
        assert (m.cache_dir, request.out_dir, m.max_reruns, m.timeout_s, m.telemetry, m.windows) == (
            tmp_path / "cache", tmp_path / "out", 2, 60.0, True, settings.windows)
        assert m.contention_check is not None
        busy = {"machine": {"other_cpu_share": {"median": 0.9, "samples": 41}, "cpus": 8}}
        assert m.contention_check(busy) == from_cli.measuring.contention_check(busy) == (
            "other processes used 90% of the 8 CPUs during the window (median of 41 samples; limit 10%)")
        assert m.contention_check({"machine": {"other_cpu_share": {"median": 0.01}}}) is None


def test_the_contention_policy_follows_the_telemetry_and_the_share() -> None:
    assert options.contention_policy({}) is not None  # telemetry on by default
    assert options.contention_policy({"no_telemetry": True}) is None
    assert options.contention_policy({"no_telemetry": True, "max_other_cpu_share": 0.5}) is not None
    with pytest.raises(UsageError, match=re.escape("--perfgate-max-other-cpu-share: max_other_cpu_share")):
        options.contention_policy({"max_other_cpu_share": 0.0}, options.pytest_flag)
