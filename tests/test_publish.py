"""perfgate.adapters.publish: every report format written atomically, by one publisher."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from factories import make_result

from perfgate.adapters.cli import main
from perfgate.adapters.publish import Publication, PublishError, publish
from perfgate.analysis.compare import compare
from perfgate.analysis.decide import GateConfig
from perfgate.analysis.outcome import Entry
from perfgate.model.errors import PerfgateError
from perfgate.report.markdown import render_markdown
from perfgate.store import jsonfile
from perfgate.store.results import save_result


@pytest.fixture
def outcome():
    return compare([Entry("tiny", None, None, error="tiny: the builder failed on purpose")], GateConfig())


def test_every_format_is_written(tmp_path: Path, outcome) -> None:
    md, js, html = tmp_path / "a" / "r.md", tmp_path / "b" / "r.json", tmp_path / "page"
    done = publish(outcome, {"markdown": md, "json": js, "html": html})
    assert done == Publication((md, js, html / "index.html"), ())
    assert md.read_text(encoding="utf-8") == render_markdown(outcome, relative_to=md.parent.resolve())
    assert json.loads(js.read_text())["workloads"][0]["workload"] == "tiny"
    assert "tiny" in (html / "index.html").read_text()
    done.check()  # nothing unwritten: no error


def test_a_composed_text_goes_to_each_path_without_an_outcome(tmp_path: Path) -> None:
    paths = (tmp_path / "report.md", tmp_path / "comment.md")
    assert publish(None, {"markdown": paths}, markdown_text="## perfgate: error\n").written == paths
    assert [p.read_text() for p in paths] == ["## perfgate: error\n"] * 2
    with pytest.raises(ValueError):
        publish(None, {"json": tmp_path / "r.json"})
    with pytest.raises(ValueError, match="no report format pdf"):
        publish(None, {"pdf": tmp_path / "r.pdf"})


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write refused with ENOSPC after the temporary file was created."""
    real = os.fdopen

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(jsonfile.os, "fdopen", lambda fd, mode: Full(real(fd, mode)))


def test_a_refused_write_leaves_no_partial_file_and_the_old_one_intact(tmp_path: Path, outcome,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    md.write_text("previous report\n")
    _full_disk(monkeypatch)
    done = publish(outcome, {"html": tmp_path / "page", "json": js, "markdown": md})  # written in FORMATS' order
    assert done.written == ()
    assert len(done.unwritten) == 3 and all("No space left on device" in line for line in done.unwritten)
    assert done.unwritten[0].startswith(f"{md}: ")
    assert md.read_text() == "previous report\n"
    assert sorted(os.listdir(tmp_path)) == ["page", "r.md"]  # no temporary file, no partial JSON
    assert os.listdir(tmp_path / "page") == []
    with pytest.raises(PublishError) as caught:
        done.check()
    assert isinstance(caught.value, PerfgateError) and caught.value.exit_code == 2
    assert isinstance(caught.value, OSError)  # as a WriteError is, for callers that catch OSError
    assert "\n" not in caught.value.message and str(md) in caught.value.message


def test_one_file_that_cannot_be_written_does_not_stop_the_others(tmp_path: Path, outcome) -> None:
    (tmp_path / "taken").write_text("a file, so no report can go in a folder of that name")
    md, js = tmp_path / "taken" / "r.md", tmp_path / "r.json"
    done = publish(outcome, {"markdown": md, "json": js})
    assert done.written == (js,) and js.is_file()
    (line,) = done.unwritten
    assert line.startswith(f"{md}: ") and "\n" not in line


def test_the_command_line_exits_2_naming_a_report_it_could_not_write(capsys, tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    save_result(make_result("tiny"), results / "tiny.json")
    (tmp_path / "taken").write_text("a file")
    code = main(["compare", "--results", str(results), "--baselines", str(tmp_path / "none"),
                 "--markdown", str(tmp_path / "taken" / "r.md"), "--json", str(tmp_path / "r.json"),
                 "--config", str(tmp_path / "absent.toml")])
    out, err = capsys.readouterr()
    assert code == 2 and "tiny" in out  # the table is still shown
    lines = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert lines == [line for line in lines if "report NOT written: " in line and "taken" in line] and len(lines) == 1
    assert json.loads((tmp_path / "r.json").read_text())["workloads"][0]["workload"] == "tiny"


def test_perfgate_judge_writes_its_reports_through_publish(tmp_path: Path, outcome,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.adapters import judge_cli
    from perfgate.report.json_report import outcome_to_dict

    asked: list[dict[str, object]] = []
    real = judge_cli.publish
    monkeypatch.setattr(judge_cli, "publish", lambda *a, **kw: asked.append(a[1]) or real(*a, **kw))
    judge_cli._write(tmp_path, "## perfgate: PASS\n", outcome)
    assert [p.read_text() for p in (tmp_path / "report.md", tmp_path / "comment.md")] == ["## perfgate: PASS\n"] * 2
    assert (tmp_path / "report.json").read_text() == jsonfile.dumps(outcome_to_dict(outcome))
    judge_cli._write(tmp_path / "error", "## perfgate: error\n", None)
    assert sorted(os.listdir(tmp_path / "error")) == ["comment.md", "report.md"]
    assert len(asked) == 2
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(PublishError):
        judge_cli._write(tmp_path / "taken", "text", None)
