"""The `perfgate verdict` check run: the payload `perfgate judge --check-run FILE` writes (its
conclusion from the verdict policy, the headline as its title, the report cut safely to
GitHub's 65535-character limit as its summary), and the judge workflow's step that posts
it, or a failure when there is no payload to trust."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from factories import fake
from test_judge import HEAD_SHA, paired, run, write_run
from test_workflows import HEAD, bash, sharded, step_script, template

import perfgate.adapters.judge_cli as judge_cli
from perfgate.gate.github import (
    CHECK_RUN_NAME,
    CHECK_RUN_TEXT_LIMIT,
    CUT_NOTE,
    check_run_payload,
    cut_text,
    fit,
)
from perfgate.model.verdict import Verdict

SHA = "a" * 40


def size(text: str) -> int:
    return len(text.encode("utf-8"))


# --- the payload ----------------------------------------------------------------------------------

def test_the_payload_is_a_completed_check_run_of_the_head_commit() -> None:
    payload = check_run_payload(head_sha=SHA, conclusion="neutral", title="perfgate: inconclusive (1 INCONCLUSIVE)",
                                summary="## report\n", details_url="https://github.com/acme/train/actions/runs/1")
    assert payload == {"name": CHECK_RUN_NAME, "head_sha": SHA, "status": "completed", "conclusion": "neutral",
                       "output": {"title": "perfgate: inconclusive (1 INCONCLUSIVE)", "summary": "## report\n"},
                       "details_url": "https://github.com/acme/train/actions/runs/1"}
    assert "details_url" not in check_run_payload(head_sha=SHA, conclusion="success", title="t", summary="s")


@pytest.mark.parametrize(("sha", "conclusion"), [("abc", "success"), ("A" * 40, "success"), (SHA, "error"),
                                                  (SHA, "pending"), (SHA + "\n", "success")])
def test_the_payload_refuses_a_short_sha_or_a_conclusion_github_has_not(sha: str, conclusion: str) -> None:
    with pytest.raises(ValueError):
        check_run_payload(head_sha=sha, conclusion=conclusion, title="t", summary="s")


def test_the_title_is_one_bounded_line() -> None:
    payload = check_run_payload(head_sha=SHA, conclusion="success", title="a\nb\r\n" + "x" * 400, summary="s")
    title = payload["output"]["title"]
    assert "\n" not in title and "\r" not in title and len(title) <= 255 and title.startswith("a b x")


def test_a_summary_that_fits_is_kept_whole() -> None:
    text = "é" * (CHECK_RUN_TEXT_LIMIT // 2)
    assert cut_text(text) == text and size(text) <= CHECK_RUN_TEXT_LIMIT


@pytest.mark.parametrize("unit", ["x", "é", "€", "🚀", "⚠️"], ids=["ascii", "2 bytes", "3 bytes", "4 bytes", "emoji"])
def test_a_long_summary_is_cut_at_a_line_within_the_limit_in_bytes(unit: str) -> None:
    lines = [f"| row {i} | {unit * 50} |" for i in range(5000)]
    text = "\n".join(["## perfgate: pass", "<details><summary>x</summary>", *lines, "</details>", ""])
    cut = cut_text(text)
    # UTF-8 bytes bound the characters and the UTF-16 units, however GitHub counts them
    assert size(cut) <= CHECK_RUN_TEXT_LIMIT and len(cut.encode("utf-16-le")) // 2 <= CHECK_RUN_TEXT_LIMIT
    assert cut.endswith(CUT_NOTE)
    body = cut[: -len(CUT_NOTE)]
    kept = body.split("\n")
    assert kept[-1] == "</details>"  # the open fold is closed
    assert all(line in text.split("\n") for line in kept)  # whole lines only, no half character
    assert len(kept) > 100


def test_fit_renders_again_with_less_before_it_cuts() -> None:
    calls: list[int] = []

    def render(budget: int) -> str:  # a report of 4-byte characters that drops rows to fit `budget` characters
        calls.append(budget)
        rows = max(budget // 11 - 1, 0)
        return "## title\n" + "".join("🚀" * 10 + "\n" for _ in range(rows))

    text = fit(render)
    assert size(text) <= CHECK_RUN_TEXT_LIMIT and CUT_NOTE not in text
    assert calls[0] == CHECK_RUN_TEXT_LIMIT and len(calls) > 1
    assert fit(lambda budget: "short") == "short"
    cut = fit(lambda budget: "x\n" * CHECK_RUN_TEXT_LIMIT)  # a render that ignores its budget is cut
    assert size(cut) <= CHECK_RUN_TEXT_LIMIT and cut.endswith(CUT_NOTE)


# --- perfgate judge --check-run -------------------------------------------------------------------

def judge_with_check_run(tmp_path: Path, results: Path, base: Path, *extra: str, env: dict[str, str] | None = None):
    path = tmp_path / "check-run.json"
    code, out, err, comment = run(tmp_path, results, base, "--check-run", str(path), *extra, env=env)
    return code, out, err, comment, (json.loads(path.read_text()) if path.exists() else None)


def relabel(monkeypatch: pytest.MonkeyPatch, verdict: Verdict) -> None:
    """The judge's real judgement, each workload's verdict replaced by ``verdict``."""
    real = judge_cli.judge_measured

    def judged(*args, **kwargs):
        judgement = real(*args, **kwargs)
        outcome = judgement.outcome
        outcome = dataclasses.replace(outcome, comparisons=tuple(
            dataclasses.replace(c, verdict=verdict, reason=f"relabelled {verdict.value}") for c in outcome.comparisons))
        return dataclasses.replace(judgement, outcome=outcome)

    monkeypatch.setattr(judge_cli, "judge_measured", judged)


def test_a_passing_gate_is_a_successful_check_run_with_the_report(tmp_path: Path, base: Path) -> None:
    same = write_run(tmp_path / "same", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    output = tmp_path / "output"
    output.touch()
    env = {"GITHUB_OUTPUT": str(output), "GITHUB_RUN_ID": "42", "GITHUB_REPOSITORY": "acme/train"}
    code, _, _, comment, payload = judge_with_check_run(tmp_path, same, base, "--expect-head-sha", HEAD_SHA, env=env)
    assert code == 0
    assert payload["name"] == CHECK_RUN_NAME and payload["head_sha"] == HEAD_SHA
    assert payload["status"] == "completed" and payload["conclusion"] == "success"
    assert payload["output"] == {"title": "perfgate: pass (1 PASS)", "summary": comment}
    assert payload["details_url"] == "https://github.com/acme/train/actions/runs/42"
    values = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert (values["state"], values["conclusion"], values["verdict"]) == ("success", "success", "pass")


def test_a_regression_is_a_failing_check_run(tmp_path: Path, base: Path) -> None:
    slower = write_run(tmp_path / "r", {"tiny": paired("tiny", scale=1.2, seed=1)}, {"tiny": paired("tiny", seed=2)})
    code, _, _, _, payload = judge_with_check_run(tmp_path, slower, base, "--expect-head-sha", HEAD_SHA)
    assert code == 1 and payload["conclusion"] == "failure"
    assert payload["output"]["title"].startswith("perfgate: REGRESSION")


@pytest.mark.parametrize(("setting", "conclusion", "state", "line"), [
    ("", "neutral", "success", "**Check: neutral** (exit code 3)"),
    ('inconclusive = "pass"\n', "neutral", "success", "**Check: neutral** (exit code 3)"),
    ('inconclusive = "fail"\n', "failure", "failure", "**Check: fails** (exit code 3)"),
], ids=["default", "pass", "fail"])
def test_an_inconclusive_gate_is_neutral_or_failing_by_the_base_setting(
        tmp_path: Path, base: Path, monkeypatch: pytest.MonkeyPatch, setting: str, conclusion: str, state: str,
        line: str) -> None:
    (base / "pyproject.toml").write_text((base / "pyproject.toml").read_text() + setting)
    relabel(monkeypatch, Verdict.INCONCLUSIVE)
    same = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    output = tmp_path / "output"
    output.touch()
    code, out, _, comment, payload = judge_with_check_run(tmp_path, same, base, "--expect-head-sha", HEAD_SHA,
                                                          env={"GITHUB_OUTPUT": str(output)})
    assert code == 3  # the exit code stays 3 whatever the setting: scripts keep working
    assert payload["conclusion"] == conclusion and payload["output"]["title"] == "perfgate: inconclusive (1 INCONCLUSIVE)"
    assert line in comment and line in payload["output"]["summary"]
    values = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert (values["exit-code"], values["verdict"], values["state"], values["conclusion"]) == (
        "3", "inconclusive", state, conclusion)
    kind = "error" if conclusion == "failure" else "warning"
    assert f"::{kind} title=perfgate INCONCLUSIVE%3A tiny::time per step " in out  # the verdict line's fact


def test_without_expect_head_sha_the_manifests_commit_is_used(tmp_path: Path, base: Path) -> None:
    same = write_run(tmp_path / "same", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    code, _, _, _, payload = judge_with_check_run(tmp_path, same, base)
    assert code == 0 and payload["head_sha"] == HEAD_SHA


def test_a_failing_judge_writes_a_failing_check_run(tmp_path: Path, base: Path) -> None:
    stale = tmp_path / "check-run.json"
    stale.write_text('{"conclusion": "success"}')  # an earlier run's: never left for this one
    code, _, err, comment, payload = judge_with_check_run(tmp_path, tmp_path / "missing", base,
                                                          "--expect-head-sha", HEAD_SHA)
    assert code == 2 and "perfgate: error:" in err
    assert payload["conclusion"] == "failure" and payload["head_sha"] == HEAD_SHA
    assert payload["output"] == {"title": "perfgate: error", "summary": comment}
    assert "**Check: fails as an error**" in comment


def test_a_judge_that_cannot_name_the_commit_writes_no_check_run(tmp_path: Path, base: Path) -> None:
    stale = tmp_path / "check-run.json"
    stale.write_text('{"conclusion": "success"}')
    code, _, err, _, payload = judge_with_check_run(tmp_path, tmp_path / "missing", base)
    assert code == 2 and payload is None and "no check run written" in err


def test_a_long_report_is_summarised_within_the_limit(tmp_path: Path, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = judge_cli.compose

    def long(outcome, context, changes, *, limit=65_536, **kwargs):  # noqa: ANN001 - the real one's signature
        report = real(outcome, context, changes, limit=limit, **kwargs)
        return report + "".join("🚀" * 20 + "\n" for _ in range(max(limit // 21 - len(report) // 21, 0)))

    monkeypatch.setattr(judge_cli, "compose", long)
    same = write_run(tmp_path / "same", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    code, _, _, comment, payload = judge_with_check_run(tmp_path, same, base, "--expect-head-sha", HEAD_SHA)
    assert code == 0
    summary = payload["output"]["summary"]
    assert size(comment) > CHECK_RUN_TEXT_LIMIT >= size(summary)
    assert summary.startswith(comment.split("\n", 3)[0])


# --- the judge workflow's step --------------------------------------------------------------------

@pytest.fixture(params=["single", "sharded"])
def check_step(request: pytest.FixtureRequest, tmp_path: Path, bin_dir: Path):  # noqa: F811 - the fixture
    """Runs "Report the check run" against a fake `gh` that records its arguments and the body."""
    text = template("perfgate-judge.yml") if request.param == "single" else sharded("perfgate-judge.yml")
    script = step_script(text, "Report the check run")
    fake(bin_dir, "gh", f"""\
        printf '%s\\n' "$@" > "{tmp_path}/gh-argv"
        for ((i = 1; i <= $#; i++)); do
          if [ "${{!i}}" = --input ]; then j=$((i + 1)); cp "${{!j}}" "{tmp_path}/posted.json"; fi
        done
        """)
    judged = tmp_path / "perfgate-judged"
    judged.mkdir()

    def run_step(payload: dict | str | None = None, **env: str):
        path = judged / "check-run.json"
        path.unlink(missing_ok=True)
        (tmp_path / "gh-argv").unlink(missing_ok=True)
        if payload is not None:
            path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
        variables = {"GH_TOKEN": "t", "GH_REPO": "acme/train", "HEAD_SHA": HEAD, "IDENTIFY_ERROR": "",
                     "BASE_ERROR": "", "CHECK_RUN": str(path), "GITHUB_SERVER_URL": "https://github.com",
                     "GITHUB_REPOSITORY": "acme/train", "GITHUB_RUN_ID": "123", **env}
        done = bash(script, tmp_path, variables, bin_dir)
        argv = (tmp_path / "gh-argv").read_text().split("\n")[:-1] if (tmp_path / "gh-argv").exists() else None
        return done, argv

    run_step.posted = tmp_path / "posted.json"
    run_step.tmp = tmp_path
    return run_step


def error_argv(summary: str) -> list[str]:
    return ["api", "--method", "POST", "repos/acme/train/check-runs", "-f", f"name={CHECK_RUN_NAME}",
            "-f", f"head_sha={HEAD}", "-f", "status=completed", "-f", "conclusion=failure",
            "-f", "details_url=https://github.com/acme/train/actions/runs/123",
            "-f", "output[title]=perfgate: error", "-f", f"output[summary]={summary}"]


@pytest.mark.parametrize("conclusion", ["success", "failure", "neutral"])
def test_the_step_posts_the_judges_payload(check_step, conclusion: str) -> None:
    payload = check_run_payload(head_sha=HEAD, conclusion=conclusion, title="perfgate: x", summary="## x\n$(id)`id`")
    done, argv = check_step(payload)
    assert done.returncode == 0, done.stderr
    assert argv[:4] == ["api", "--method", "POST", "repos/acme/train/check-runs"] and argv[4] == "--input"
    assert json.loads(check_step.posted.read_text()) == payload


@pytest.mark.parametrize("payload", [
    {"head_sha": "d" * 40},  # another commit's
    {"conclusion": "success; rm -rf /"},
    {"conclusion": "error"},
    {"name": "perfgate"},
    {"status": "in_progress"},
    "not json",
    "[]",
], ids=["other commit", "bad conclusion", "error", "name", "status", "not json", "list"])
def test_a_payload_that_is_not_the_judges_for_this_commit_is_a_failure(check_step, payload) -> None:
    if isinstance(payload, dict):
        payload = {**check_run_payload(head_sha=HEAD, conclusion="success", title="t", summary="s"), **payload}
    done, argv = check_step(payload)
    assert done.returncode == 0, done.stderr
    assert argv == error_argv("perfgate judge failed before a verdict (see the run)")


def test_no_payload_is_a_failure(check_step) -> None:
    done, argv = check_step(None)
    assert done.returncode == 0, done.stderr
    assert argv == error_argv("perfgate judge failed before a verdict (see the run)")


def test_an_identification_error_is_a_failure_whatever_the_payload(check_step) -> None:
    payload = check_run_payload(head_sha=HEAD, conclusion="success", title="t", summary="s")
    message = "pull request #7's base is $(touch pwned), not the measured `x`"
    done, argv = check_step(payload, IDENTIFY_ERROR=message)
    assert done.returncode == 0, done.stderr
    assert argv == error_argv(f"perfgate could not judge: {message}")
    assert not (check_step.tmp / "pwned").exists()
    done, argv = check_step(payload, BASE_ERROR="the measured base commit is not on the pull request's base branch")
    assert argv == error_argv("perfgate could not judge: the measured base commit is not on the pull request's "
                              "base branch")


def test_the_step_runs_when_the_status_does_and_needs_checks_write() -> None:
    for text in (template("perfgate-judge.yml"), sharded("perfgate-judge.yml")):
        assert "      checks: write         # report the `perfgate verdict` check run\n" in text
        steps = text.split("      - name: ")
        status = next(s for s in steps if s.startswith("Set the commit status"))
        check = next(s for s in steps if s.startswith("Report the check run"))
        condition = lambda step: step.split("if: >-\n", 1)[1].split("env:", 1)[0]  # noqa: E731
        # the status runs in every case the check run does, and also while a fork waits for its
        # label (a pending status; a check run has no pending conclusion, so it waits unreported)
        waiting = " || steps.identify.outputs.waiting == 'true'"
        assert waiting in condition(status) and waiting not in condition(check)
        assert condition(status).replace(waiting, "") == condition(check)
        assert f'name="{CHECK_RUN_NAME}"' in check
