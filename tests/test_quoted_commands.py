"""Every command printed for a person is quoted word by word (``shlex.join``).

The "reproduce" and "rebaseline" commands of the comment, the check run's summary and the
HTML report name a script's recorded arguments, the workload, the device and the overrides:
all of them come from a result file, which the pull request's job wrote. Copied into a
shell, no argument may end the command (``;``), run another (``$(...)``, a backtick) or
start a line of its own (a newline): parsed back with ``shlex``, the printed command gives
the argv it stands for, and its only control operator is perfgate's own ``&&``.
"""

from __future__ import annotations

import dataclasses
import html
import re
import shlex
from pathlib import Path

import pytest
from factories import make_result

from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry, Lookup
from perfgate.model.script import ARGS_PARAM
from perfgate.report.html import render_html
from perfgate.report.markdown import rebaseline_command, render_markdown, reproduce_command, script_argv

HOSTILE = [
    ["--epochs", "1; touch x"],
    ["--out", "$(touch x)"],
    ["--tag", "`touch x`"],
    ["--note", "a\ntouch x"],
    ["--lr", "0.1 x", "&&", "|", "> f"],
    ["it's", '"q"', "\\"],
]


def words(command: str, *, quotes: bool = False) -> list[str]:
    """``command`` as a shell reads it: words, and control operators (``;``, ``&&``, ``|``...) as
    tokens of their own; with ``quotes`` the words keep their quotes, so a quoted ``'&&'`` is
    not the operator ``&&``."""
    lexer = shlex.shlex(command, posix=not quotes, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


OPERATORS = {";", "&&", "|", "&", ";;", "||", ">", "<", ">>", "(", ")", "\n"}


def script_comparison(recorded: str, workload: str = "script-train"):
    base = make_result(workload)
    result = dataclasses.replace(base, workload_source="script:train.py sha256:" + "a" * 64,
                                 params={**base.params, ARGS_PARAM: recorded}, overrides={"steps": 20})
    outcome = compare([Entry(workload, result, Lookup(None, Path("b.json")))], GateConfig())
    return outcome, outcome.comparisons[0]


@pytest.mark.parametrize("argv", HOSTILE, ids=lambda a: repr(a)[:30])
def test_a_scripts_arguments_come_back_as_the_argv_they_were(argv: list[str]) -> None:
    """What a run records (``shlex.join`` of the arguments) is printed quoted: the command
    parses back to the same argv, and nothing in an argument is a shell operator."""
    _, c = script_comparison(shlex.join(argv))
    run = ["perfgate", "run", "--script", "train.py", "--name", "script-train", "--device", "cpu",
           "--set", "steps=20", "--", *argv]
    assert words(reproduce_command(c)) == [*run, "&&", "perfgate", "compare", "script-train"]
    assert words(rebaseline_command(c)) == [*run, "&&", "perfgate", "rebaseline", "script-train", "--from-results",
                                            "perfgate-results", "--reason", "<why this change is intended>"]


def test_a_hand_written_argument_string_is_quoted_not_pasted() -> None:
    """A result file is not bound to record what a run would: ``--epochs 1; touch x`` as the
    recorded string (case 6) is shown split and quoted, never pasted after ``--``."""
    _, c = script_comparison("--epochs 1; touch x")
    command = reproduce_command(c)
    assert "-- --epochs '1;' touch x &&" in command
    assert [t for t in words(command, quotes=True) if t in OPERATORS] == ["&&"]
    _, unclosed = script_comparison("it's $(touch x)")  # does not split: one argument, shown whole
    assert script_argv("it's $(touch x)") == ["it's $(touch x)"]
    tokens = words(reproduce_command(unclosed))
    assert tokens[tokens.index("--") + 1:tokens.index("&&")] == ["it's $(touch x)"]


def test_the_workload_name_and_the_overrides_are_quoted_too() -> None:
    name = "w; touch x"
    base = make_result(name)
    result = dataclasses.replace(base, overrides={"steps": "$(touch x)"})
    outcome = compare([Entry(name, result, Lookup(None, Path("b.json")))], GateConfig())
    c = outcome.comparisons[0]
    assert words(reproduce_command(c)) == ["perfgate", "gate", name, "--device", "cpu", "--set", "steps=$(touch x)"]
    assert words(rebaseline_command(c))[:3] == ["perfgate", "rebaseline", name]


def _markdown_commands(text: str) -> list[str]:
    return [line[4:] for line in text.splitlines() if line.startswith("    perfgate ")]


@pytest.mark.parametrize("argv", HOSTILE, ids=lambda a: repr(a)[:30])
def test_the_reports_show_the_commands_inert(argv: list[str]) -> None:
    """In the markdown (comment, check run summary) and the HTML report, every printed
    command holds exactly one ``&&`` (perfgate's) and no other control operator, on one line."""
    outcome, _ = script_comparison(shlex.join(argv))
    commands = _markdown_commands(render_markdown(outcome))
    assert commands, "the report prints the reproduce and rebaseline commands"
    for command in commands:
        assert [t for t in words(command, quotes=True) if t in OPERATORS] == ["&&"], command
        assert "\n" not in command
    page = render_html(outcome)
    shown = [html.unescape(m) for m in re.findall(r"<pre[^>]*>(.*?)</pre>", page, flags=re.S)]
    printed = [block for block in shown if "perfgate run --script" in block]
    assert printed
    for block in printed:  # a block may hold several commands; a newline inside quotes is part of an argument
        operators = [t for t in words(block, quotes=True) if t in OPERATORS]
        assert operators == ["&&"] * block.count("perfgate run --script"), block


@pytest.mark.parametrize("argv", HOSTILE, ids=lambda a: repr(a)[:30])
def test_the_terminal_run_table_names_the_scripts_arguments_quoted(argv: list[str]) -> None:
    from perfgate.analysis.summary import summarise
    from perfgate.report.terminal import run_table

    base = make_result("script-train")
    result = dataclasses.replace(base, workload_source="script:train.py sha256:" + "a" * 64,
                                 params={**base.params, ARGS_PARAM: shlex.join(argv)})
    line = next(line for line in run_table(result, summarise(result)).splitlines() if "the script" in line)
    shown = line.split(" -- ", 1)[1].split(", ")[0] if ", " in line.split(" -- ", 1)[1] else line.split(" -- ", 1)[1]
    assert "\n" not in shown
    if "\n" not in " ".join(argv):  # a newline is shown escaped by the terminal's inert text
        assert shlex.split(shown) == argv


@pytest.mark.parametrize("recorded", ["--epochs 1; touch x", "--out $(touch x) && rm -rf y", "a | b > f"])
def test_the_terminal_run_table_quotes_a_hand_written_argument_string(recorded: str) -> None:
    from perfgate.analysis.summary import summarise
    from perfgate.report.terminal import run_table

    base = make_result("script-train")
    result = dataclasses.replace(base, workload_source="script:train.py sha256:" + "a" * 64,
                                 params={**base.params, ARGS_PARAM: recorded})
    line = next(line for line in run_table(result, summarise(result)).splitlines() if "the script" in line)
    shown = line.split(" -- ", 1)[1]
    assert not OPERATORS & set(words(shown, quotes=True)), shown
    assert shlex.split(shown) == shlex.split(recorded)
