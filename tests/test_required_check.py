"""Case 1: the required check is the judge's, and no workflow of perfgate's takes its name.

GitHub matches a required check by name among check runs and commit statuses alike, and
every workflow job is a check run named by its ``name:`` (or its id). The judge writes the
commit status ``perfgate`` and the check run ``perfgate verdict``; no job of any workflow
perfgate ships (this repository's, the templates ``perfgate init`` writes, the sharded
ones) may be named like either, and the docs, the README and ``perfgate init``'s output
tell users to require the status, never the check run a job could fill, except with a
dedicated app as its expected source.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_workflows import ALL, ROOT, jobs, step_script, template

from perfgate.adapters.scaffold import next_steps
from perfgate.gate.github import CHECK_RUN_NAME

STATUS_CONTEXT = "perfgate"
REQUIRED = {STATUS_CONTEXT, CHECK_RUN_NAME}


def job_names(text: str) -> dict[str, str]:
    """Each job's check-run name: its ``name:``, else its id."""
    names = {}
    for job_id, body in jobs(text).items():
        found = re.search(r"^    name: (.*)$", body, re.M)
        names[job_id] = found.group(1).strip().strip("'\"") if found else job_id
    return names


def same(name: str, required: str) -> bool:
    return " ".join(name.split()).casefold() == required.casefold()


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_no_job_is_named_like_the_required_check(path: Path) -> None:
    names = job_names(path.read_text())
    assert names, path
    for job_id, name in names.items():
        for required in REQUIRED:
            assert not same(name, required), f"{path.name}: job {job_id} is named {name!r}, like the required check"
            # a matrix job's name is followed by its values in parentheses: never the bare name either
            assert not same(re.sub(r"\s*\(.*\)$", "", name), required) or "(" in name, name


def test_the_check_would_catch_a_job_named_like_the_required_check() -> None:
    forged = template("perfgate.yml") + "  verdict:\n    name: perfgate verdict\n    runs-on: ubuntu-latest\n"
    assert any(same(n, CHECK_RUN_NAME) for n in job_names(forged).values())
    bare = template("perfgate.yml") + "  perfgate:\n    runs-on: ubuntu-latest\n"
    assert any(same(n, STATUS_CONTEXT) for n in job_names(bare).values())


@pytest.mark.parametrize("path", [p for p in ALL if p.name == "perfgate-judge.yml"],
                         ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_the_judge_writes_the_required_names(path: Path) -> None:
    text = path.read_text()
    status = step_script(text, "Set the commit status")
    assert f'-f context="{STATUS_CONTEXT}"' in status
    check = step_script(text, "Report the check run")
    assert f'name="{CHECK_RUN_NAME}"' in check


def _sentences(text: str) -> list[str]:
    flat = " ".join(text.split())
    return re.split(r"(?<=[.;:])\s+", flat)


@pytest.mark.parametrize("where", ["README.md", "docs/ci.md", "perfgate init"])
def test_the_docs_require_the_judges_status_and_the_check_run_only_from_an_app(where: str, tmp_path: Path) -> None:
    text = "\n".join(next_steps(tmp_path)) if where == "perfgate init" else (ROOT / where).read_text()
    flat = " ".join(text.split())
    assert re.search(r"require the (`perfgate` commit status|commit status `perfgate`)", flat, re.I) or \
        "Make the `perfgate` commit status a required check" in flat, where
    assert "expected source" in flat, where
    for sentence in _sentences(text):
        if re.search(r"\brequire\b", sentence, re.I) and f"`{CHECK_RUN_NAME}`" in sentence:
            assert re.search(r"expected source|do not require", sentence, re.I), f"{where}: {sentence}"
