"""Case 9: control characters from a run reach no output of the judge.

``run.json``'s ``errors`` (and a workload's name, its exception text) are written by the
pull request's job. ESC sequences (colours, OSC 8 hyperlinks, a window title), BEL, the
8-bit CSI ``\\x9b`` and the other C0/C1 controls and DEL must not reach the ``::error``
annotations, the terminal lines, the step outputs (the status description), the check
run's title and summary, the job summary or the comment: they are removed (an escape
sequence whole), or written as escaped text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_judge import BASE_SHA, HEAD_SHA, paired, run, write_run
from factories import define_workloads

from perfgate.gate.github import workflow_command
from perfgate.model.manifest import RunManifest

OSC8 = "\x1b]8;;https://evil.invalid/\x1b\\click here\x1b]8;;\x1b\\"
HOSTILE_ERROR = f"\x1b[31mred\x1b[0m bell\x07 {OSC8} csi\x9b2J title\x1b]0;pwned\x07 del\x7f nul\x00 c1\x85\x90end"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Every C0 control but TAB and LF (the files' own line breaks), DEL and every C1 control."""


def assert_clean(text: str, where: str) -> None:
    found = CONTROL.findall(text)
    assert not found, f"{where}: control characters {found!r} in {text[:400]!r}"
    assert "evil.invalid" not in text or "\x1b" not in text, where


def test_workflow_commands_carry_no_control_character() -> None:
    command = workflow_command("error", HOSTILE_ERROR, title=f"perfgate ERROR: {OSC8}")
    assert_clean(command, "annotation")
    assert command.count("::") == 2 and "\n" not in command and "\r" not in command
    assert "red" in command and "end" in command  # the words stay readable
    line = workflow_command("error", "a%b\r\nc\rd\ne")
    assert line == "::error::a%25b%0Ac%0Ad%0Ae"  # % escaped, each line break kept as an escaped LF


def test_every_judge_output_is_free_of_control_characters(tmp_path: Path, base: Path) -> None:  # noqa: F811
    define_workloads(base, "other", file="workloads/other.py")
    manifest = RunManifest(design="paired", device="cpu", workloads=("tiny", "other"),
                           errors={"tiny": HOSTILE_ERROR}, pr_number=7, head_sha=HEAD_SHA, base_sha=BASE_SHA,
                           clocks=HOSTILE_ERROR)
    folder = write_run(tmp_path / "r", {"other": paired("other", seed=1)}, {"other": paired("other", seed=2)},
                       manifest)
    output, summary, check = tmp_path / "output", tmp_path / "summary", tmp_path / "check-run.json"
    output.touch()
    summary.touch()
    code, out, err, comment = run(tmp_path, folder, base, "--check-run", str(check), "--expect-head-sha", HEAD_SHA,
                                  env={"GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)})
    assert code == 2, comment
    assert "::error" in out  # the annotation of tiny's error is there, and clean
    assert "red" in comment and "end" in comment
    for where, text in [("stdout (terminal and annotations)", out), ("stderr", err), ("comment", comment),
                        ("step summary", summary.read_text()), ("step outputs", output.read_text()),
                        ("report.md", (tmp_path / "judged" / "report.md").read_text())]:
        assert_clean(text, where)
    payload = json.loads(check.read_text())
    assert_clean(payload["output"]["title"], "check run title")
    assert_clean(payload["output"]["summary"], "check run summary")
    outputs = output.read_text()
    assert "description=" in outputs


def test_an_error_before_the_verdict_is_clean_too(tmp_path: Path, base: Path) -> None:  # noqa: F811
    """A message of the error report (here a refused results folder naming the run's words)."""
    manifest = RunManifest(design="paired", device="cpu", workloads=("tiny",), pr_number=7,
                           head_sha=HEAD_SHA, base_sha=BASE_SHA, base_ref=f"main{OSC8}\x07")
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)}, manifest)
    output = tmp_path / "output"
    output.touch()
    code, out, err, comment = run(tmp_path, folder, base, "--expect-head-sha", "d" * 40,
                                  env={"GITHUB_OUTPUT": str(output)})
    assert code == 2
    for where, text in [("stdout", out), ("stderr", err), ("comment", comment), ("outputs", output.read_text())]:
        assert_clean(text, where)
