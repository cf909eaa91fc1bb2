"""perfgate.gate.config: ``[tool.perfgate]`` settings.

Precedence: command line > ``[tool.perfgate.workload.NAME]`` > ``[tool.perfgate]`` >
defaults. Mistakes in the file are a UsageError naming the file and the key; α and the
looks (``max_blocks``, ``budget``, ``spending_gamma``) belong to the whole run and are
refused in a workload table. The two-look keys (``looks``, ``second_look_repeats``) are
refused with what to set instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.analysis.compare import WORKLOAD_FIELDS
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.design import PILOT_WINDOWS
from perfgate.gate.config import PER_WORKLOAD_KEYS, Settings, load_settings
from perfgate.model.errors import EXIT_ERROR, UsageError


def pyproject(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "trainer"\nversion = "1.0"\n\n' + body, encoding="utf-8")
    return path


def usage_error(path: Path | None, cli: dict[str, object] | None = None) -> str:
    with pytest.raises(UsageError) as info:
        load_settings(path, cli)
    assert info.value.exit_code == EXIT_ERROR
    message = str(info.value)
    assert "\n" not in message
    return message


# --- defaults -------------------------------------------------------------------------------


INIT_DESIGN = {"budget_s": 600.0, "windows": 1, "windows_auto": True}
"""What a gate gets where no setting says otherwise: the design ``perfgate init`` writes (a paired
gate designs its windows; a run and a stored gate time one window a repeat)."""


def test_no_pyproject_gives_the_defaults(tmp_path: Path) -> None:
    for path in (None, tmp_path / "pyproject.toml"):
        settings = load_settings(path)
        assert settings == Settings(**INIT_DESIGN)
        assert settings.gate == GateConfig()
        assert settings.source == "defaults"
        assert settings.baselines == Path("baselines") and settings.repeats == 5
        assert settings.for_workload("anything") == GateConfig()


def test_a_pyproject_without_a_perfgate_table_gives_the_defaults(tmp_path: Path) -> None:
    settings = load_settings(pyproject(tmp_path, "[tool.ruff]\nline-length = 100\n"))
    # the default store sits beside the pyproject it was configured by
    assert settings == Settings(baselines=tmp_path / "baselines", history=tmp_path / "perfgate-history.sqlite",
                                **INIT_DESIGN)


# --- reading the tables ---------------------------------------------------------------------


def test_reads_the_global_table(tmp_path: Path) -> None:
    path = pyproject(tmp_path, """
[tool.perfgate]
alpha = 0.05
delta = 0.05
max_blocks = 12
budget = "20m"
spending_gamma = -2.0
inconclusive = "fail"
memory_threshold = 0.2
gate_phases = ["forward", "backward"]
fail_on_missing_baseline = true
baselines = "perf/baselines"
workloads = ["resnet18_cifar10", "tiny"]
repeats = 7
device = "cuda"
workloads_path = "perf/workloads"
""")
    settings = load_settings(path)
    gate = settings.gate
    assert (gate.alpha, gate.delta, gate.max_blocks, gate.memory_threshold) == (0.05, 0.05, 12, 0.2)
    assert (gate.spending_gamma, gate.inconclusive, settings.budget_s) == (-2.0, "fail", 1200.0)
    assert gate.gate_phases == ("forward", "backward")
    assert gate.fail_on_missing_baseline is True
    assert gate.phase_q == GateConfig().phase_q  # not set: the default
    # paths written in pyproject.toml are relative to it, not to the working directory
    assert settings.baselines == tmp_path / "perf/baselines"
    assert settings.workloads == ("resnet18_cifar10", "tiny")
    assert settings.repeats == 7 and settings.device == "cuda"
    assert settings.workloads_path == (str(tmp_path / "perf/workloads"),)
    assert str(path) in settings.source and "[tool.perfgate]" in settings.source


PRECEDENCE = """
[tool.perfgate]
delta = 0.05
memory_threshold = 0.2
repeats = 7

[tool.perfgate.workload.big]
delta = 0.08
gate_phases = ["forward"]
"""


def test_a_workload_table_overrides_the_global_table_for_that_workload_only(tmp_path: Path) -> None:
    settings = load_settings(pyproject(tmp_path, PRECEDENCE))
    big, other = settings.for_workload("big"), settings.for_workload("other")
    assert big.delta == 0.08 and big.gate_phases == ("forward",)
    assert big.memory_threshold == 0.2  # global over defaults, inside the workload too
    assert big.alpha == GateConfig().alpha  # defaults under everything
    assert other == settings.gate
    assert other.delta == 0.05 and other.gate_phases == ()
    assert set(settings.per_workload) == {"big"}


def test_the_command_line_overrides_workload_and_global_tables(tmp_path: Path) -> None:
    settings = load_settings(pyproject(tmp_path, PRECEDENCE),
                             {"delta": 0.02, "repeats": 3, "alpha": 0.05, "memory_threshold": None})
    assert settings.gate.delta == 0.02
    assert settings.for_workload("big").delta == 0.02
    assert settings.for_workload("big").gate_phases == ("forward",)  # not given: the table's
    assert settings.for_workload("big").alpha == settings.gate.alpha == 0.05
    assert settings.repeats == 3
    assert settings.gate.memory_threshold == 0.2  # None means "not given"


@pytest.mark.parametrize(("value", "seconds"), [
    ('"20m"', 1200.0), ('"90s"', 90.0), ('"1.5h"', 5400.0), ('"2 min"', 120.0), ("45", 45.0), ("7.5", 7.5),
])
def test_the_budget_is_a_duration(tmp_path: Path, value: str, seconds: float) -> None:
    assert load_settings(pyproject(tmp_path, f"[tool.perfgate]\nbudget = {value}\n")).budget_s == seconds


def test_inits_budget_by_default_none_turns_it_off_and_the_command_line_overrides_the_file(tmp_path: Path) -> None:
    assert Settings().budget_s is None and load_settings(None).budget_s == 600.0
    assert load_settings(pyproject(tmp_path, '[tool.perfgate]\nbudget = "none"\n')).budget_s is None
    assert load_settings(None, {"budget": "off"}).budget_s is None
    written = load_settings(pyproject(tmp_path, '[tool.perfgate]\nwindows = "auto"\n'))
    assert (written.windows, written.windows_auto) == (PILOT_WINDOWS, True)
    path = pyproject(tmp_path, '[tool.perfgate]\nbudget = "20m"\nmax_blocks = 12\n')
    settings = load_settings(path, {"budget": "5m", "max_blocks": 40, "inconclusive": "fail"})
    assert settings.budget_s == 300.0 and settings.gate.max_blocks == 40 and settings.gate.inconclusive == "fail"
    assert load_settings(path, {"budget": None}).budget_s == 1200.0  # None: not given


def test_command_line_alone_over_the_defaults() -> None:
    settings = load_settings(None, {"delta": 0.07, "gate_phases": ["optimizer"], "baselines": "b"})
    assert settings.gate.delta == 0.07 and settings.gate.gate_phases == ("optimizer",)
    assert settings.baselines == Path("b")


# --- mistakes -------------------------------------------------------------------------------


def test_an_unknown_key_is_named_with_the_allowed_keys(tmp_path: Path) -> None:
    path = pyproject(tmp_path, "[tool.perfgate]\ndetla = 0.05\n")
    message = usage_error(path)
    assert str(path) in message
    assert "'detla'" in message
    assert "allowed:" in message
    for key in ("delta", "alpha", "gate_phases", "baselines", "repeats", "workload"):
        assert key in message.split("allowed:")[1]


def test_alpha_in_a_workload_table_is_refused(tmp_path: Path) -> None:
    path = pyproject(tmp_path, "[tool.perfgate.workload.big]\nalpha = 0.05\n")
    message = usage_error(path)
    assert "[tool.perfgate.workload.big]" in message
    assert "'alpha'" in message and "per workload" in message
    assert "delta" in message.split("allowed:")[1]


@pytest.mark.parametrize("key", ["max_blocks", "budget", "spending_gamma", "inconclusive", "looks", "repeats",
                                 "baselines"])
def test_run_wide_keys_are_refused_in_a_workload_table(tmp_path: Path, key: str) -> None:
    value = '"x"' if key in ("baselines", "budget", "inconclusive") else "1"
    message = usage_error(pyproject(tmp_path, f"[tool.perfgate.workload.big]\n{key} = {value}\n"))
    assert f"'{key}'" in message


@pytest.mark.parametrize(("key", "instead"), [("looks", "max_blocks"), ("second_look_repeats", "max_blocks")])
def test_the_two_look_keys_are_refused_with_what_to_set_instead(tmp_path: Path, key: str, instead: str) -> None:
    path = pyproject(tmp_path, f"[tool.perfgate]\n{key} = 2\n")
    message = usage_error(path)  # one line, exit 2
    assert str(path) in message and f"'{key}' is no longer a setting" in message
    assert instead in message and "budget" in message
    message = usage_error(None, {key: 2})
    assert f"'{key}' is no longer a setting" in message


@pytest.mark.parametrize("table", ["[tool.perfgate]", "[tool.perfgate.workload.big]"])
def test_an_unknown_phase_in_gate_phases_is_refused(tmp_path: Path, table: str) -> None:
    message = usage_error(pyproject(tmp_path, f'{table}\ngate_phases = ["forward", "fwd"]\n'))
    assert "'fwd'" in message and "gate_phases" in message
    assert "data_wait" in message  # lists the phases there are
    assert table.strip("[]") in message


def test_an_unknown_phase_on_the_command_line_is_refused() -> None:
    message = usage_error(None, {"gate_phases": ["forwards"]})
    assert "'forwards'" in message and "command line" in message


def test_gate_phases_must_be_a_list(tmp_path: Path) -> None:
    message = usage_error(pyproject(tmp_path, '[tool.perfgate]\ngate_phases = "forward"\n'))
    assert "gate_phases must be a list" in message


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = pyproject(tmp_path, "[tool.perfgate]\ndelta = \n")
    message = usage_error(path)
    assert str(path) in message and "not valid TOML" in message


def test_a_pyproject_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_bytes(b"[tool.perfgate]\ndelta = 0.05  # \xff\xfe\n")
    message = usage_error(path)
    assert str(path) in message and "not valid TOML" in message and "UTF-8" in message


@pytest.mark.parametrize(("line", "field"), [
    ("delta = 3", "delta"),
    ("alpha = 0.9", "alpha"),
    ("max_blocks = 1", "max_blocks"),
    ("max_blocks = 501", "max_blocks"),
    ("max_blocks = true", "max_blocks"),
    ("spending_gamma = 50", "spending_gamma"),
    ('inconclusive = "maybe"', "inconclusive"),
    ('budget = "20 parsecs"', "budget"),
    ("budget = 0", "budget"),
    ("budget = -5", "budget"),
    ('budget = "8d"', "budget"),
    ("budget = true", "budget"),
    ('memory_threshold = "10%"', "memory_threshold"),
    ('fail_on_missing_baseline = "yes"', "fail_on_missing_baseline"),
])
def test_an_invalid_threshold_names_the_file_and_the_field(tmp_path: Path, line: str, field: str) -> None:
    path = pyproject(tmp_path, f"[tool.perfgate]\n{line}\n")
    message = usage_error(path)
    assert str(path) in message and field in message


def test_an_invalid_threshold_in_a_workload_table_names_the_table(tmp_path: Path) -> None:
    message = usage_error(pyproject(tmp_path, "[tool.perfgate.workload.big]\ndelta = -0.1\n"))
    assert "[tool.perfgate.workload.big]" in message and "delta" in message


def test_an_invalid_command_line_value_names_the_command_line() -> None:
    message = usage_error(None, {"delta": 2.0})
    assert "command line" in message and "delta" in message
    message = usage_error(None, {"budget": "soon"})
    assert message.startswith("--budget: ") and "'soon'" in message


@pytest.mark.parametrize("body", [
    "[tool.perfgate]\nrepeats = 0\n",
    "[tool.perfgate]\nrepeats = true\n",
    '[tool.perfgate]\nworkloads = "tiny"\n',
    "[tool.perfgate]\nworkload = 3\n",
    "[tool.perfgate.workload]\nbig = 3\n",
    "[tool]\nperfgate = 3\n",
])
def test_malformed_run_settings_are_refused(tmp_path: Path, body: str) -> None:
    path = pyproject(tmp_path, body)
    assert str(path) in usage_error(path)


def test_a_workload_table_holds_exactly_what_compare_reads_per_workload() -> None:
    assert PER_WORKLOAD_KEYS == set(WORKLOAD_FIELDS)


def test_a_tool_key_that_is_not_a_table_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text('tool = "none"\n', encoding="utf-8")
    message = usage_error(path)
    assert str(path) in message and "[tool]" in message


# --- who may accept a slowdown ------------------------------------------------------------------

def test_accept_by_defaults_to_maintainers_or_code_owners_and_takes_the_four_values(tmp_path: Path) -> None:
    from perfgate.gate.config import ACCEPT_BY

    assert Settings().accept_by == "maintainers-or-code-owners" == ACCEPT_BY[0]
    assert load_settings(pyproject(tmp_path, "[tool.perfgate]\nrepeats = 3\n")).accept_by == ACCEPT_BY[0]
    assert ACCEPT_BY == ("maintainers-or-code-owners", "maintainers", "code-owners", "writers")
    for value in ACCEPT_BY:
        assert load_settings(pyproject(tmp_path, f'[tool.perfgate]\naccept_by = "{value}"\n')).accept_by == value


@pytest.mark.parametrize("value", ['"anyone"', '"Maintainers"', "1", '["writers"]', "true"])
def test_an_unknown_accept_by_is_one_line_naming_the_values(tmp_path: Path, value: str) -> None:
    path = pyproject(tmp_path, f"[tool.perfgate]\naccept_by = {value}\n")
    message = usage_error(path)
    assert message.startswith(f"{path} [tool.perfgate]: accept_by must be one of 'maintainers-or-code-owners', "
                              "'maintainers', 'code-owners', 'writers', got ")
