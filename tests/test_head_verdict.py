"""A verdict belongs to the head commit: a REGRESSION recorded for a commit stands over
re-runs of the measuring workflow for that commit, until a new commit or an acknowledgement
by someone with write access (the label ``perfgate: accept slowdown``, found by the judge
workflow through the API, with that person's permission), named in the comment with who
and when. The files that carry the history and the acknowledgement are read as untrusted:
a bad one is a one-line error and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_judge import HEAD_SHA, paired, run, write_run

from perfgate.gate.github import (
    ACCEPT_LABEL,
    Acknowledgement,
    RecordedVerdict,
    head_verdict,
    read_acknowledgement,
    read_recorded_verdicts,
)
from perfgate.model.errors import UsageError

T0, T1, T2 = "2026-12-04T05:00:00Z", "2026-12-04T05:30:00Z", "2026-12-04T06:00:00Z"
REGRESSION = RecordedVerdict("failure", "REGRESSION (1 REGRESSION)", T1, "github-actions[bot]")
PASSED = RecordedVerdict("success", "pass (1 PASS)", T0, "github-actions[bot]")
WRITER = Acknowledgement("maintainer-1", T2, "write")


# --- the rule -----------------------------------------------------------------------------------

def test_a_new_commit_has_no_history() -> None:
    for code in (0, 1, 2, 3):
        assert head_verdict(code, HEAD_SHA, [], None).exit_code == code
    assert head_verdict(0, HEAD_SHA, [PASSED], None).exit_code == 0


@pytest.mark.parametrize("code", [0, 3, 1])
def test_a_recorded_regression_stands_over_a_rerun(code: int) -> None:
    verdict = head_verdict(code, HEAD_SHA, [PASSED, REGRESSION], None)
    assert verdict.exit_code == 1
    assert verdict.note.startswith(f"REGRESSION recorded for {HEAD_SHA[:12]} at {T1} stands; re-running does not "
                                   "clear it")
    assert verdict.description.startswith("REGRESSION recorded for") and len(verdict.description) <= 140


def test_the_first_recorded_regression_is_named() -> None:
    later = RecordedVerdict("failure", "REGRESSION recorded for cccc stands", T2)
    assert f"at {T1}" in head_verdict(0, HEAD_SHA, [later, REGRESSION], None).note


def test_an_error_stays_an_error() -> None:
    assert head_verdict(2, HEAD_SHA, [REGRESSION], WRITER).exit_code == 2


def test_a_failure_that_is_not_a_regression_does_not_stand() -> None:
    errored = RecordedVerdict("failure", "inconclusive (1 INCONCLUSIVE)", T0)
    broken = RecordedVerdict("error", "perfgate could not judge: REGRESSION", T0)
    assert head_verdict(0, HEAD_SHA, [errored, broken], None).exit_code == 0


@pytest.mark.parametrize("code", [0, 1, 3])
def test_write_access_after_the_record_accepts_it_naming_who_and_when(code: int) -> None:
    verdict = head_verdict(code, HEAD_SHA, [REGRESSION], WRITER)
    assert verdict.exit_code == 0
    assert "@maintainer-1" in verdict.note and T2 in verdict.note and T1 in verdict.note
    assert ACCEPT_LABEL in verdict.note
    assert verdict.description == f"pass: the REGRESSION of {T1} accepted by @maintainer-1 at {T2}"
    assert len(verdict.description) <= 140


@pytest.mark.parametrize("permission", ["admin", "maintain"])
def test_admins_and_maintainers_may_accept(permission: str) -> None:
    ack = Acknowledgement("lead", T2, permission)
    assert head_verdict(1, HEAD_SHA, [REGRESSION], ack).exit_code == 0


@pytest.mark.parametrize("permission", ["triage", "read", "none"])
def test_without_write_access_the_label_accepts_nothing(permission: str) -> None:
    verdict = head_verdict(0, HEAD_SHA, [REGRESSION], Acknowledgement("drive-by", T2, permission))
    assert verdict.exit_code == 1 and f"has {permission} access, not write" in verdict.note


def test_a_label_applied_before_the_record_accepts_nothing() -> None:
    verdict = head_verdict(0, HEAD_SHA, [REGRESSION], Acknowledgement("maintainer-1", T0, "write"))
    assert verdict.exit_code == 1 and "before the REGRESSION was recorded" in verdict.note
    # and with no record yet, the first REGRESSION is recorded as it is, with a word on the label
    first = head_verdict(1, HEAD_SHA, [], WRITER)
    assert first.exit_code == 1 and "accepts only a REGRESSION already recorded" in first.note


# --- the files, as untrusted input ---------------------------------------------------------------

def test_the_history_is_read_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.jsonl"
    lines = [{"state": "failure", "description": "REGRESSION (1 REGRESSION)", "created_at": T1,
              "creator": "github-actions[bot]"},
             {"state": "success", "description": "pass \x1b[31m(1 PASS)", "created_at": T0, "creator": ""}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    first, second = read_recorded_verdicts(path)
    assert first.regression and not second.regression
    assert "\x1b" not in second.description
    empty = tmp_path / "empty"
    empty.write_text("")
    assert read_recorded_verdicts(empty) == [] and read_acknowledgement(empty) is None


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "line 1 is not JSON"),
    ("[1]", "line 1 is not a JSON object"),
    ('{"state": "failure", "description": 5, "created_at": "' + T1 + '"}', "'description' is not a string"),
    ('{"state": "bogus", "description": "x", "created_at": "' + T1 + '"}', "is not a commit status state"),
    ('{"state": "failure", "description": "x", "created_at": "yesterday"}', "created_at is not a time"),
    ('{"state": "failure", "description": "x", "created_at": "' + T1 + '", "creator": 3}', "'creator' is not"),
])
def test_a_bad_history_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "verdicts.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        read_recorded_verdicts(path)


@pytest.mark.parametrize(("data", "message"), [
    ("not json", "not JSON"),
    ('["x"]', "not a JSON object"),
    ({"by": "a b", "at": T2, "permission": "write"}, "not a GitHub login"),
    ({"by": "../x", "at": T2, "permission": "write"}, "not a GitHub login"),
    ({"by": "x", "at": "now", "permission": "write"}, "'at' is not a time"),
    ({"by": "x", "at": T2, "permission": "owner"}, "is not one GitHub reports"),
    ({"by": "x", "at": T2, "permission": "write", "via": "comment"}, "'via' is not 'label'"),
    ({"at": T2, "permission": "write"}, "'by' is not a string"),
])
def test_a_bad_acknowledgement_is_refused(tmp_path: Path, data: object, message: str) -> None:
    path = tmp_path / "ack.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(UsageError, match=message):
        read_acknowledgement(path)


def test_an_oversized_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.jsonl"
    path.write_text("x" * ((1 << 20) + 1))
    with pytest.raises(UsageError, match="larger than"):
        read_recorded_verdicts(path)


# --- through perfgate judge ---------------------------------------------------------------------

def history(tmp_path: Path, *records: RecordedVerdict) -> Path:
    path = tmp_path / "verdicts.jsonl"
    path.write_text("".join(json.dumps({"state": r.state, "description": r.description, "created_at": r.created_at,
                                        "creator": r.creator}) + "\n" for r in records))
    return path


def acknowledgement(tmp_path: Path, ack: Acknowledgement | None) -> Path:
    path = tmp_path / "ack.json"
    path.write_text("" if ack is None else json.dumps({"by": ack.by, "at": ack.at, "permission": ack.permission,
                                                       "via": ack.via}))
    return path


def judged(tmp_path: Path, base: Path, *extra: str, scale: float = 1.0):  # noqa: F811
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", scale=scale, seed=1)}, {"tiny": paired("tiny", seed=2)})
    output, check = tmp_path / "output", tmp_path / "check-run.json"
    output.write_text("")
    code, out, err, comment = run(tmp_path, folder, base, "--expect-head-sha", HEAD_SHA, "--check-run", str(check),
                                  *extra, env={"GITHUB_OUTPUT": str(output)})
    values = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    payload = json.loads(check.read_text()) if check.exists() else None
    return code, out, err, comment, values, payload


def test_a_rerun_that_passes_does_not_clear_the_recorded_regression(tmp_path: Path, base: Path) -> None:  # noqa: F811
    control, *_ = judged(tmp_path / "control", base)
    assert control == 0  # the same results without the history pass
    code, out, _, comment, values, payload = judged(
        tmp_path, base, "--previous-verdicts", str(history(tmp_path, PASSED, REGRESSION)),
        "--acknowledgement", str(acknowledgement(tmp_path, None)))
    assert code == 1
    assert values["state"] == "failure" and values["exit-code"] == "1" and values["conclusion"] == "failure"
    assert values["description"].startswith(f"REGRESSION recorded for {HEAD_SHA[:12]} at {T1} stands")
    assert f"REGRESSION recorded for {HEAD_SHA[:12]} at {T1} stands; re-running does not clear it" in comment
    assert "**Check: fails** (exit code 1)" in comment and "**Check: passes.**" not in comment
    assert payload["conclusion"] == "failure" and payload["output"]["title"].startswith("perfgate: REGRESSION recorded")
    assert "::error title=perfgate head commit::REGRESSION recorded" in out


def test_an_acknowledged_regression_passes_naming_who_and_when(tmp_path: Path, base: Path) -> None:  # noqa: F811
    code, _, _, comment, values, payload = judged(
        tmp_path, base, "--previous-verdicts", str(history(tmp_path, REGRESSION)),
        "--acknowledgement", str(acknowledgement(tmp_path, WRITER)), scale=1.3)
    assert code == 0
    assert values["state"] == "success" and values["conclusion"] == "success"
    assert values["description"] == f"pass: the REGRESSION of {T1} accepted by @maintainer-1 at {T2}"
    assert "accepted by @" in comment and "maintainer-1" in comment and T2 in comment
    assert "**Check: passes.**" in comment
    assert "REGRESSION" in comment  # this run's own verdict is still shown, below the note
    assert payload["conclusion"] == "success"


def test_a_reader_cannot_accept_it(tmp_path: Path, base: Path) -> None:  # noqa: F811
    code, _, _, comment, values, _ = judged(
        tmp_path, base, "--previous-verdicts", str(history(tmp_path, REGRESSION)),
        "--acknowledgement", str(acknowledgement(tmp_path, Acknowledgement("drive-by", T2, "read"))))
    assert code == 1 and values["state"] == "failure" and "read access, not write" in comment


@pytest.mark.parametrize("which", ["--previous-verdicts", "--acknowledgement"])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, base: Path, which: str) -> None:  # noqa: F811
    bad = tmp_path / "bad"
    bad.write_text("{oops")
    code, _, err, _, values, payload = judged(tmp_path, base, which, str(bad))
    assert code == 2 and values["state"] == "error"
    lines = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert len(lines) == 1 and which in lines[0] and "\n" not in lines[0]
    assert payload["conclusion"] == "failure"
