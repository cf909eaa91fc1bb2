"""A verdict belongs to the head commit: a REGRESSION recorded for a commit stands over
re-runs of the measuring workflow for that commit, until a new commit or an acknowledgement
(the label ``perfgate: accept slowdown``, found by the judge workflow through the API, with
that person's permission), named in the comment with who and when. The acknowledgement
belongs to one commit, one pull request and a second person: applied after the commit became
the pull request's head, after a REGRESSION was recorded for it in this pull request against
this base (the tag ``(#7 into bbbbbbbbbbbb)`` that ends the status's description), by neither
the author nor the pusher, with the access ``[tool.perfgate] accept_by`` asks for. The files
that carry the history and the acknowledgement are read as untrusted: a bad one is a
one-line error and exit 2.
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
    codeowners_rules,
    head_verdict,
    is_code_owner,
    judged_for,
    read_acknowledgement,
    read_recorded_verdicts,
    tagged,
)
from perfgate.model.errors import UsageError

BASE_SHA = "b" * 40  # the base commit of test_judge's results (run.json), as is pull request #7
OTHER_BASE = "a" * 40
TAG = judged_for(7, BASE_SHA)
T0, T1, T2 = "2026-12-04T05:00:00Z", "2026-12-04T05:30:00Z", "2026-12-04T06:00:00Z"
T3, T4 = "2026-12-04T06:30:00Z", "2026-12-04T06:40:00Z"
REGRESSION = RecordedVerdict("failure", "REGRESSION (1 REGRESSION)" + TAG, T1, "github-actions[bot]")
PASSED = RecordedVerdict("success", "pass (1 PASS)" + TAG, T0, "github-actions[bot]")
SEEN = {"head_since": T0, "pusher": "author-1", "pr_author": "author-1", "commit_authors": ("author-1",)}
"""What the workflow found besides the label: the head commit pushed at T0 by the pull request's author."""
MAINTAINER = Acknowledgement("maintainer-1", T2, "maintain", **SEEN)  # type: ignore[arg-type]


def ack(by: str = "maintainer-1", at: str = T2, permission: str = "maintain", **seen: object) -> Acknowledgement:
    return Acknowledgement(by, at, permission, **{**SEEN, **seen})  # type: ignore[arg-type]


def verdict(code: int, recorded: list[RecordedVerdict], acknowledgement: Acknowledgement | None, **options: object):
    """``head_verdict`` for pull request #7 into BASE_SHA, as perfgate judge calls it."""
    return head_verdict(code, HEAD_SHA, recorded, acknowledgement, pr=7, base_sha=BASE_SHA,
                        **options)  # type: ignore[arg-type]


# --- the rule -----------------------------------------------------------------------------------

def test_a_new_commit_has_no_history() -> None:
    for code in (0, 1, 2, 3):
        assert verdict(code, [], None).exit_code == code
    assert verdict(0, [PASSED], None).exit_code == 0


@pytest.mark.parametrize("code", [0, 3, 1])
def test_a_recorded_regression_stands_over_a_rerun(code: int) -> None:
    result = verdict(code, [PASSED, REGRESSION], None)
    assert result.exit_code == 1
    assert result.note.startswith(f"REGRESSION recorded for {HEAD_SHA[:12]} at {T1} stands; re-running does not "
                                  "clear it")
    assert result.description.startswith("REGRESSION recorded for") and len(result.description) <= 140


def test_the_first_recorded_regression_is_named() -> None:
    later = RecordedVerdict("failure", "REGRESSION recorded for cccc stands" + TAG, T2)
    assert f"at {T1}" in verdict(0, [later, REGRESSION], None).note


def test_a_regression_recorded_in_another_pull_request_or_without_a_tag_stands_too() -> None:
    """A REGRESSION of this commit stands wherever it was recorded (failing closed); the note says where."""
    elsewhere = RecordedVerdict("failure", "REGRESSION (1 REGRESSION)" + judged_for(11, OTHER_BASE), T1)
    untagged = RecordedVerdict("failure", "REGRESSION (1 REGRESSION)", T1)
    result = verdict(0, [elsewhere], None)
    assert result.exit_code == 1 and f" in pull request #11 against {OTHER_BASE[:12]} stands" in result.note
    assert verdict(0, [untagged], None).exit_code == 1


def test_an_error_stays_an_error() -> None:
    assert verdict(2, [REGRESSION], MAINTAINER).exit_code == 2


def test_a_failure_that_is_not_a_regression_does_not_stand() -> None:
    errored = RecordedVerdict("failure", "inconclusive (1 INCONCLUSIVE)", T0)
    broken = RecordedVerdict("error", "perfgate could not judge: REGRESSION", T0)
    assert verdict(0, [errored, broken], None).exit_code == 0


@pytest.mark.parametrize("code", [0, 1, 3])
def test_a_maintainer_after_the_record_accepts_it_naming_who_and_when(code: int) -> None:
    result = verdict(code, [REGRESSION], MAINTAINER)
    assert result.exit_code == 0
    assert "@maintainer-1" in result.note and T2 in result.note and T1 in result.note
    assert ACCEPT_LABEL in result.note and "(maintain access)" in result.note
    assert result.description == f"pass: the REGRESSION of {T1} accepted by @maintainer-1 at {T2}"
    assert len(tagged(result.description, 7, BASE_SHA)) <= 140


# --- case 1: the label belongs to the head it was given for --------------------------------------

def test_a_label_given_for_another_head_is_stale_when_the_commit_comes_back() -> None:
    """05:00 BAD (+6.5%) REGRESSION; 05:30 the author pushes MILD (REGRESSION); 06:00 a maintainer
    accepts MILD's; 06:30 the author force-pushes BAD again. The label, given for MILD, is older
    than BAD's return: it accepts nothing, and says so in one line."""
    bad = RecordedVerdict("failure", "REGRESSION (1 REGRESSION)" + TAG, T0, "github-actions[bot]")
    result = verdict(0, [bad], ack(at=T2, head_since=T3))
    assert result.exit_code == 1
    (why,) = [line for line in result.note.split(" The label ")[1:]]
    assert f"applied by @maintainer-1 at {T2}) is stale: {HEAD_SHA[:12]} became the pull request's head at {T3}" in why
    assert "\n" not in result.note and "remove the label and apply it again" in why
    # the controls: without the label BAD's REGRESSION stands; a label applied after BAD came back accepts it
    assert verdict(0, [bad], None).exit_code == 1
    assert verdict(0, [bad], ack(at=T4, head_since=T3)).exit_code == 0
    # the same label for the head it was given for (MILD, the head since 05:30) accepts MILD's REGRESSION
    assert verdict(1, [REGRESSION], ack(at=T2, head_since=T1, pusher="author-1")).exit_code == 0


def test_a_label_applied_the_second_the_head_was_pushed_is_stale_too() -> None:
    assert verdict(0, [REGRESSION], ack(at=T2, head_since=T2)).exit_code == 1


def test_without_the_time_the_head_was_pushed_the_label_counts_for_nothing() -> None:
    result = verdict(0, [REGRESSION], ack(head_since="", pusher=""))
    assert result.exit_code == 1 and "when that was is not known" in result.note


def test_the_label_accepts_only_a_regression_recorded_in_this_pull_request_against_this_base() -> None:
    for where in (judged_for(11, BASE_SHA), judged_for(7, OTHER_BASE), ""):
        recorded = RecordedVerdict("failure", "REGRESSION (1 REGRESSION)" + where, T1)
        result = verdict(0, [recorded], MAINTAINER)
        assert result.exit_code == 1, where
        assert f"accepts only a REGRESSION recorded for {HEAD_SHA[:12]} in pull request #7 against " \
               f"{BASE_SHA[:12]}, and none is yet" in result.note
    # a run of this pull request that found it standing records it here: a label applied after that accepts it
    here = RecordedVerdict("failure", f"REGRESSION recorded for {HEAD_SHA[:12]} at {T1} stands; re-running does not "
                                      "clear it" + TAG, T2)
    elsewhere = RecordedVerdict("failure", "REGRESSION (1 REGRESSION)" + judged_for(11, OTHER_BASE), T1)
    assert verdict(0, [elsewhere, here], ack(at=T3)).exit_code == 0
    # without the pull request and base, nothing is this pull request's
    plain = head_verdict(0, HEAD_SHA, [REGRESSION], MAINTAINER)
    assert plain.exit_code == 1 and "its number and base are not known" in plain.note


def test_a_label_applied_before_the_record_accepts_nothing() -> None:
    result = verdict(0, [REGRESSION], ack(at="2026-12-04T05:10:00Z"))
    assert result.exit_code == 1 and "before the REGRESSION was recorded" in result.note
    # and with no record yet, the first REGRESSION is recorded as it is, with a word on the label
    first = verdict(1, [], MAINTAINER)
    assert first.exit_code == 1 and "accepts only a REGRESSION already recorded" in first.note


# --- case 3: a second person accepts ------------------------------------------------------------

@pytest.mark.parametrize(("seen", "why"), [
    ({}, "@author-1 opened this pull request"),
    ({"pr_author": "Author-1"}, "@author-1 opened this pull request"),
    ({"pr_author": "someone-else"}, "@author-1 pushed"),
    ({"pr_author": "someone-else", "pusher": "bot-1"}, "is cccccccccccc's author or committer"),
    ({"pr_author": ""}, "the pull request's author is not known"),
])
@pytest.mark.parametrize("accept_by", ["maintainers-or-code-owners", "writers"])
def test_the_author_cannot_accept_their_own_slowdown(seen: dict[str, str], why: str, accept_by: str) -> None:
    """A same-repository pull request's author has write access: the permission is no second
    person. Nor is the pusher of the head commit, or its author or committer."""
    result = verdict(0, [REGRESSION], ack(by="author-1", permission="write", **seen), accept_by=accept_by)
    assert result.exit_code == 1 and why in result.note and "counts for nothing" in result.note
    # the controls: no label, the REGRESSION stands; a maintainer who is none of them accepts it (when the
    # pull request's author is known)
    assert verdict(0, [REGRESSION], None, accept_by=accept_by).exit_code == 1
    control = verdict(0, [REGRESSION], ack(**seen), accept_by=accept_by).exit_code
    assert control == (1 if seen.get("pr_author") == "" else 0)


@pytest.mark.parametrize(("accept_by", "permission", "owner", "accepted"), [
    ("maintainers-or-code-owners", "admin", False, True),
    ("maintainers-or-code-owners", "maintain", False, True),
    ("maintainers-or-code-owners", "write", False, False),
    ("maintainers-or-code-owners", "write", True, True),
    ("maintainers-or-code-owners", "triage", True, False),
    ("maintainers", "write", True, False),
    ("maintainers", "maintain", False, True),
    ("code-owners", "admin", False, False),
    ("code-owners", "write", True, True),
    ("writers", "write", False, True),
    ("writers", "triage", False, False),
    ("writers", "read", False, False),
    ("writers", "none", False, False),
])
def test_who_may_accept_is_the_bases_accept_by(accept_by: str, permission: str, owner: bool, accepted: bool) -> None:
    result = verdict(0, [REGRESSION], ack(permission=permission), accept_by=accept_by, code_owner=owner)
    assert result.exit_code == (0 if accepted else 1)
    if not accepted:
        assert f"has {permission} access and is" in result.note and f"accept_by = {accept_by!r} asks for" in result.note


def test_an_unknown_accept_by_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="accept_by"):
        verdict(0, [REGRESSION], MAINTAINER, accept_by="anyone")


# --- the tag: which pull request and base a status is for ------------------------------------------

def test_the_tag_names_the_pull_request_and_base_and_always_fits() -> None:
    assert TAG == " (#7 into bbbbbbbbbbbb)"
    assert tagged("pass (1 PASS)", 7, BASE_SHA) == "pass (1 PASS) (#7 into bbbbbbbbbbbb)"
    long = tagged("x" * 200, 2**31 - 1, BASE_SHA)
    assert len(long) == 140 and long.endswith("xx... (#2147483647 into bbbbbbbbbbbb)")
    wide = tagged("δ" * 100, 7, BASE_SHA)  # within 140 bytes, so within 140 characters whichever the shell counts
    assert len(wide.encode()) <= 140 and wide.endswith("δ..." + TAG)
    assert tagged("pass", None, BASE_SHA) == tagged("pass", 7, None) == tagged("pass", 7, "main") == "pass"
    recorded = RecordedVerdict("success", long, T0)
    assert recorded.judged_for == (2**31 - 1, BASE_SHA[:12]) and recorded.recorded_for(2**31 - 1, BASE_SHA)
    assert not recorded.recorded_for(7, BASE_SHA) and not recorded.recorded_for(None, None)
    assert RecordedVerdict("success", "pass (#7 into bbbb)", T0).judged_for is None


# --- code owners --------------------------------------------------------------------------------

CODEOWNERS = """# the default owners, then narrower rules: the last match wins
*                 @org/everyone
/perfgate/        @Lead-1 @org/perf
*.md              @docs-1
docs/*            @docs-2
apps/             @apps-1
**/logs           @logs-1
/perfgate/gate/   @gate-1 # the gate's owner
/perfgate/gate/vendored.py
"""


@pytest.mark.parametrize(("login", "paths", "owner"), [
    ("lead-1", ["perfgate/analysis/x.py"], True),
    ("LEAD-1", ["perfgate/analysis/x.py"], True),
    ("lead-1", ["perfgate/gate/x.py"], False),  # a later rule names another owner
    ("gate-1", ["perfgate/gate/x.py"], True),
    ("gate-1", ["perfgate/gate/vendored.py"], False),  # the last rule names nobody
    ("gate-1", ["README.md", "perfgate/gate/x.py"], True),  # one changed file is enough
    ("docs-1", ["perfgate/README.md", "README.md"], True),
    ("docs-2", ["docs/a.txt"], True),
    ("docs-2", ["docs/deep/a.txt"], False),  # docs/* is the files right under docs/ only
    ("apps-1", ["src/apps/deep/x.py"], True),
    ("logs-1", ["a/b/logs/x.txt"], True),
    ("org", ["perfgate/analysis/x.py"], False),  # a team is not resolved
    ("nobody", ["x.py"], False),
])
def test_code_owners_are_read_from_the_bases_codeowners_as_github_does(tmp_path: Path, login: str,
                                                                       paths: list[str], owner: bool) -> None:
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "CODEOWNERS").write_text(CODEOWNERS)
    (tmp_path / "CODEOWNERS").write_text("* @" + login + "\n")  # not read: .github/CODEOWNERS comes first
    assert is_code_owner(tmp_path, login, paths) is owner


def test_without_a_codeowners_file_nobody_is_a_code_owner(tmp_path: Path) -> None:
    assert not is_code_owner(tmp_path, "lead-1", ["x.py"])
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "CODEOWNERS").write_text("!negated @x\n[abc] @x\nx.py @lead-1 someone@example.com\n")
    assert is_code_owner(tmp_path, "lead-1", ["x.py"])
    assert len(codeowners_rules("!negated @x\n[abc] @x\n")) == 0


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
    tagged_line = tmp_path / "tagged.jsonl"
    tagged_line.write_text(json.dumps({"state": "success", "description": "pass (1 PASS)" + TAG, "created_at": T0}))
    (recorded,) = read_recorded_verdicts(tagged_line)
    assert recorded.recorded_for(7, BASE_SHA) and recorded.judged_for == (7, BASE_SHA[:12])
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
    ({"by": "x", "at": T2, "permission": "write", "head_since": "05:00"}, "'head_since' is not a time"),
    ({"by": "x", "at": T2, "permission": "write", "head_since": 5}, "'head_since' is not a string"),
    ({"by": "x", "at": T2, "permission": "write", "pusher": "a b"}, "'pusher' is not a GitHub login"),
    ({"by": "x", "at": T2, "permission": "write", "pr_author": "../x"}, "'pr_author' is not a GitHub login"),
    ({"by": "x", "at": T2, "permission": "write", "commit_authors": "x"}, "'commit_authors' is not a list"),
    ({"by": "x", "at": T2, "permission": "write", "commit_authors": ["x", 3]}, "'commit_authors' is not a list"),
    ({"by": "x", "at": T2, "permission": "write", "commit_authors": ["x y"]}, "'commit_authors' is not a list"),
    ({"by": "x", "at": T2, "permission": "write", "commit_authors": ["x"] * 11}, "'commit_authors' is not a list"),
])
def test_a_bad_acknowledgement_is_refused(tmp_path: Path, data: object, message: str) -> None:
    path = tmp_path / "ack.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(UsageError, match=message):
        read_acknowledgement(path)


def test_the_acknowledgement_carries_the_head_and_the_people(tmp_path: Path) -> None:
    path = tmp_path / "ack.json"
    path.write_text(json.dumps({"by": "maintainer-1", "at": T2, "permission": "maintain", "via": "label",
                                "head_since": T0, "pusher": "author-1", "pr_author": "author-1",
                                "commit_authors": ["author-1", "web-flow"]}))
    assert read_acknowledgement(path) == ack(commit_authors=("author-1", "web-flow"))
    # what the workflow could not find is empty: read, and then the label counts for nothing
    path.write_text(json.dumps({"by": "maintainer-1", "at": T2, "permission": "maintain", "head_since": "",
                                "pusher": "", "pr_author": "", "commit_authors": []}))
    bare = read_acknowledgement(path)
    assert bare == Acknowledgement("maintainer-1", T2, "maintain")
    assert verdict(0, [REGRESSION], bare).exit_code == 1


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


def acknowledgement(tmp_path: Path, given: Acknowledgement | None) -> Path:
    """The file the judge workflow writes (tests/test_workflows.py checks that it does)."""
    path = tmp_path / "ack.json"
    path.write_text("" if given is None else json.dumps({
        "by": given.by, "at": given.at, "permission": given.permission, "via": given.via,
        "head_since": given.head_since, "pusher": given.pusher, "pr_author": given.pr_author,
        "commit_authors": list(given.commit_authors)}))
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
    assert values["description"].endswith(TAG) and len(values["description"]) <= 140
    assert f"REGRESSION recorded for {HEAD_SHA[:12]} at {T1} stands; re-running does not clear it" in comment
    assert "**Check: fails** (exit code 1)" in comment and "**Check: passes.**" not in comment
    assert payload["conclusion"] == "failure" and payload["output"]["title"].startswith("perfgate: REGRESSION recorded")
    assert "::error title=perfgate head commit::REGRESSION recorded" in out


def test_an_acknowledged_regression_passes_naming_who_and_when(tmp_path: Path, base: Path) -> None:  # noqa: F811
    code, _, _, comment, values, payload = judged(
        tmp_path, base, "--previous-verdicts", str(history(tmp_path, REGRESSION)),
        "--acknowledgement", str(acknowledgement(tmp_path, MAINTAINER)), scale=1.3)
    assert code == 0
    assert values["state"] == "success" and values["conclusion"] == "success"
    assert values["description"] == f"pass: the REGRESSION of {T1} accepted by @maintainer-1 at {T2}{TAG}"
    assert payload["output"]["title"] == f"perfgate: pass: the REGRESSION of {T1} accepted by @maintainer-1 at {T2}"
    assert "accepted by @" in comment and "maintainer-1" in comment and T2 in comment
    assert "**Check: passes.**" in comment
    assert "REGRESSION" in comment  # this run's own verdict is still shown, below the note
    assert payload["conclusion"] == "success"


def test_every_status_the_judge_sets_names_its_pull_request_and_base(tmp_path: Path, base: Path) -> None:  # noqa: F811
    for scale, state in ((1.0, "success"), (1.3, "failure")):
        code, _, _, _, values, _ = judged(tmp_path / state, base, scale=scale)
        assert values["state"] == state and values["description"].endswith(" (#7 into bbbbbbbbbbbb)")


def test_a_reader_cannot_accept_it(tmp_path: Path, base: Path) -> None:  # noqa: F811
    code, _, _, comment, values, _ = judged(
        tmp_path, base, "--previous-verdicts", str(history(tmp_path, REGRESSION)),
        "--acknowledgement", str(acknowledgement(tmp_path, ack(by="drive-by", permission="read"))))
    assert code == 1 and values["state"] == "failure" and "drive-by has read access" in comment


def test_case_1_a_label_for_an_earlier_head_does_not_accept_the_commit_pushed_back(tmp_path: Path,
                                                                                   base: Path) -> None:  # noqa: F811
    """BAD's REGRESSION of 05:00, the label applied at 06:00 while MILD was the head, BAD force-pushed
    back at 06:30 and measured again (+30%): exit 1, with the stale label named in one line."""
    bad = RecordedVerdict("failure", "REGRESSION (1 REGRESSION)" + TAG, T0, "github-actions[bot]")
    verdicts = history(tmp_path, bad)
    code, out, _, comment, values, _ = judged(tmp_path, base, "--previous-verdicts", str(verdicts), "--acknowledgement",
                                              str(acknowledgement(tmp_path, ack(at=T2, head_since=T3))), scale=1.3)
    assert code == 1 and values["state"] == "failure"
    assert values["description"] == (f"REGRESSION recorded for {HEAD_SHA[:12]} at {T0} stands; re-running does not "
                                      f"clear it{TAG}")
    assert "is stale" in comment
    (annotation,) = [line for line in out.splitlines() if line.startswith("::error title=perfgate head commit::")]
    assert "is stale" in annotation
    # the control: the label applied after BAD came back accepts it
    (tmp_path / "control").mkdir()
    code, *_ = judged(tmp_path / "control", base, "--previous-verdicts", str(verdicts), "--acknowledgement",
                      str(acknowledgement(tmp_path / "control", ack(at=T4, head_since=T3))), scale=1.3)
    assert code == 0


def test_case_3_the_author_with_write_access_cannot_accept_their_own(tmp_path: Path, base: Path) -> None:  # noqa: F811
    verdicts = history(tmp_path, REGRESSION)
    code, _, _, comment, values, _ = judged(
        tmp_path, base, "--previous-verdicts", str(verdicts), "--acknowledgement",
        str(acknowledgement(tmp_path, ack(by="author-1", permission="write"))), scale=1.3)
    assert code == 1 and values["state"] == "failure" and "author-1 opened this pull request" in comment
    # the control: no label, exit 1 too
    code, *_ = judged(tmp_path / "control", base, "--previous-verdicts", str(verdicts), scale=1.3)
    assert code == 1


@pytest.mark.parametrize(("setting", "owner", "expected"), [
    ("", True, 0), ("", False, 1), ('accept_by = "writers"\n', False, 0), ('accept_by = "maintainers"\n', True, 1)])
def test_a_code_owner_may_accept_by_the_bases_codeowners(tmp_path: Path, base: Path, setting: str, owner: bool,
                                                         expected: int) -> None:  # noqa: F811
    """A reviewer with write access who owns a changed file (the base's CODEOWNERS, the changed
    files from --changed-files) accepts under the default accept_by; the base's accept_by decides."""
    (base / "pyproject.toml").write_text((base / "pyproject.toml").read_text() + setting)
    (base / "CODEOWNERS").write_text("* @org/all\n/train/ @reviewer-1\n" if owner else "* @reviewer-1\n/train/\n")
    changed = tmp_path / "changed.tsv"
    changed.write_text("modified\ttrain/model.py\t\n")
    code, _, _, comment, _, _ = judged(
        tmp_path, base, "--changed-files", str(changed), "--previous-verdicts", str(history(tmp_path, REGRESSION)),
        "--acknowledgement", str(acknowledgement(tmp_path, ack(by="reviewer-1", permission="write"))))
    assert code == expected, comment


@pytest.mark.parametrize("which", ["--previous-verdicts", "--acknowledgement"])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, base: Path, which: str) -> None:  # noqa: F811
    bad = tmp_path / "bad"
    bad.write_text("{oops")
    code, _, err, _, values, payload = judged(tmp_path, base, which, str(bad))
    assert code == 2 and values["state"] == "error"
    lines = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert len(lines) == 1 and which in lines[0] and "\n" not in lines[0]
    assert payload["conclusion"] == "failure"
