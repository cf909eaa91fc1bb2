"""Malformed result, baseline and pyproject files: one line, exit code 2, never a traceback.

A file a pull request's code wrote (a result, a downloaded baseline, its pyproject.toml)
may hold anything JSON or TOML can: a 400-digit integer where a count belongs, a block
number below -2**63, a duration of 1e300 ms against one of 1e-300 ms (whose ratio
overflows), a setting of the wrong type, an array nested 200,000 deep. The readers
bound every value they accept, so whatever reaches the arithmetic after them is what it
can take; everything else ends in one ``perfgate: error:`` line naming the file and the
path of the bad value, exit code 2, through ``perfgate compare``, ``perfgate judge`` and
``perfgate validate-baselines`` alike. Besides the corpus of cases each reproduced by an
attack review, hypothesis replaces any value of a valid document by a hostile one, and
the command must still end in a verdict or in that one line.
"""

from __future__ import annotations

import copy
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from factories import define_workloads, make_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_judge import BASE_SETTINGS, paired, write_run
from test_judge import run as judge

from perfgate.adapters.cli import main
from perfgate.gate.config import MAX_TOML_DEPTH, load_settings, parse_toml
from perfgate.model.errors import PerfgateError, UsageError
from perfgate.store import jsonfile
from perfgate.store.jsonfile import WriteError, write_json_atomic
from perfgate.store.results import save_result

HUGE = 10**400
BELOW_INT64 = -9223372036854775809
Doc = dict[str, Any]


@pytest.fixture(autouse=True)
def no_ci_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GITHUB_RUN_ID", "GITHUB_REPOSITORY", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def no_config(tmp_path: Path) -> list[str]:
    return ["--config", str(tmp_path / "absent-pyproject.toml")]


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("perfgate: error: "), err
    return lines[0]


def result_doc(seed: int = 0, **kw: Any) -> Doc:
    return make_result("tiny", seed=seed, **kw).to_dict()


def write_doc(path: Path, doc: Doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def store_of(tmp_path: Path) -> Path:
    """A baseline store holding ``tiny``, recorded by ``perfgate rebaseline``."""
    store = tmp_path / "baselines"
    if not store.exists():
        source = tmp_path / "recorded"
        source.mkdir()
        save_result(make_result("tiny", seed=1), source / "tiny.json")
        main(["rebaseline", "--from-results", str(source), "--reason", "r", "--baselines", str(store),
              *no_config(tmp_path)])
    return store


def baseline_file(store: Path) -> Path:
    (path,) = store.glob("*/tiny.json")
    return path


# --- the corpus: each case an attack review reproduced ----------------------------------------

def _steps(value: float) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        for r in d["repeats"]:
            r["phases_ms"]["step"] = [value] * len(r["phases_ms"]["step"])
    return mutate


def _set(path: str, value: object) -> Callable[[Doc], None]:
    """Set the value at ``path`` (``repeats.0.phases_ms.step.3``), creating objects on the way."""
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]

    def mutate(d: Doc) -> None:
        node: Any = d
        for k in keys[:-1]:
            if isinstance(k, str) and node.get(k) is None:
                node[k] = {}
            node = node[k]
        node[keys[-1]] = value
    return mutate


def _both(*mutations: Callable[[Doc], None]) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        for m in mutations:
            m(d)
    return mutate


RESULT_CASES = [
    pytest.param(_set("repeats.0.phases_ms.step.3", HUGE), "repeats[0].phases_ms.step[3]", id="step-400-digits"),
    pytest.param(_set("repeats.1.window_s", HUGE), "repeats[1].window_s", id="window-400-digits"),
    pytest.param(_set("repeats.0.peak_memory_bytes", HUGE), "repeats[0].peak_memory_bytes", id="peak-400-digits"),
    pytest.param(_set("repeats.0.peak_memory_bytes", 2**53 + 1), "repeats[0].peak_memory_bytes", id="peak-over-2**53"),
    pytest.param(_set("repeats.0.block", BELOW_INT64), "repeats[0].block", id="block-below-int64"),
    pytest.param(_set("repeats.0.block", -1), "repeats[0].block", id="block-negative"),
    pytest.param(_set("repeats.0.block", 10**6), "repeats[0].block", id="block-10**6"),
    pytest.param(_set("repeats.0.index", HUGE), "repeats[0].index", id="index-400-digits"),
    pytest.param(_set("repeats.0.samples_per_s", HUGE), "repeats[0].samples_per_s", id="throughput-400-digits"),
    pytest.param(_set("repeats.0.samples_per_s", 1e-300), "repeats[0].samples_per_s", id="throughput-1e-300"),
    pytest.param(_set("repeats.0.loader_restarts", HUGE), "repeats[0].loader_restarts", id="restarts-400-digits"),
    pytest.param(_set("workload_version", HUGE), "workload_version", id="version-400-digits"),
    pytest.param(_set("schema_version", HUGE), "newer than this perfgate", id="schema-400-digits"),
    pytest.param(_set("repeats.0.torch_settings.synchronizes", 5), "repeats[0].torch_settings.synchronizes",
                 id="synchronizes-5"),
    pytest.param(_set("repeats.0.torch_settings.synchronizes", [{}]), "repeats[0].torch_settings.synchronizes[0]",
                 id="synchronizes-object"),
    pytest.param(_set("repeats.0.torch_settings.cuda_window.device_steps_over_window", HUGE),
                 "repeats[0].torch_settings.cuda_window.device_steps_over_window", id="window-ratio-400-digits"),
    pytest.param(_both(_set("repeats.0.loader_restarts", 1), _set("repeats.0.loader_settings.num_workers", "x")),
                 "repeats[0].loader_settings.num_workers", id="restart-with-workers-x"),
    pytest.param(_set("repeats.0.loader_settings.num_batches", HUGE), "repeats[0].loader_settings.num_batches",
                 id="batches-400-digits"),
    pytest.param(_set("repeats.0.loader_settings.persistent_workers", "no"),
                 "repeats[0].loader_settings.persistent_workers", id="persistent-workers-string"),
    pytest.param(_set("environment.torch", 5), "environment.torch", id="environment-torch-5"),
    pytest.param(_set("environment.cpu_count", HUGE), "environment.cpu_count", id="environment-cpus-400-digits"),
    pytest.param(_steps(1e300), "repeats[0].phases_ms.step[0]", id="steps-1e300"),
    pytest.param(_steps(1e-300), "repeats[0].phases_ms.step[0]", id="steps-1e-300"),
    pytest.param(_steps(1.7e308), "repeats[0].phases_ms.step[0]", id="steps-1.7e308"),
]


@pytest.mark.parametrize(("mutate", "where"), RESULT_CASES)
def test_a_malformed_result_through_compare_is_one_line(capsys, tmp_path: Path, mutate, where: str) -> None:
    store = store_of(tmp_path)
    doc = result_doc(seed=2)
    mutate(doc)
    path = write_doc(tmp_path / "results" / "tiny.json", doc)
    code, _, err = cli(capsys, "compare", "--results", str(path.parent), "--baselines", str(store),
                       *no_config(tmp_path))
    line = one_error_line(err)
    assert code == 2
    assert str(path) in line and where in line, line
    assert len(line) < 600


@pytest.mark.parametrize(("mutate", "where"), RESULT_CASES)
def test_a_malformed_result_through_judge_is_one_line(tmp_path: Path, mutate, where: str) -> None:
    base = tmp_path / "base"
    (base / "baselines").mkdir(parents=True)
    (base / "pyproject.toml").write_text(BASE_SETTINGS)
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    doc = json.loads((folder / "tiny.json").read_text())
    mutate(doc)
    write_doc(folder / "tiny.json", doc)
    code, _, err, comment = judge(tmp_path, folder, base)
    errors = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert code == 2
    assert len(errors) == 1 and where in errors[0] and str(folder / "tiny.json") in errors[0], err
    assert "## perfgate: error" in comment


def test_steps_of_1e300_against_1e_300_in_the_judge_are_one_line(tmp_path: Path) -> None:
    """The ratio of the two sides overflows a float: refused at the reader, on either side."""
    base = tmp_path / "base"
    (base / "baselines").mkdir(parents=True)
    (base / "pyproject.toml").write_text(BASE_SETTINGS)
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    for path, value in ((folder / "tiny.json", 1e300), (folder / "base" / "tiny.json", 1e-300)):
        doc = json.loads(path.read_text())
        _steps(value)(doc)
        write_doc(path, doc)
    code, _, err, _ = judge(tmp_path, folder, base)
    errors = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert code == 2 and len(errors) == 1 and "phases_ms.step[0]" in errors[0], err


def _raw(value: str) -> Callable[[Doc], None]:
    def mutate(d: Doc) -> None:
        rep = d["recordings"][0]["repeats"][0]
        rep["phases_ms"]["step"] = " ".join([value] * len(rep["phases_ms"]["step"].split()))
    return mutate


BASELINE_CASES = [
    pytest.param(_set("recordings.0.repeats.0.peak_memory_bytes", HUGE), "recordings[0].repeats[0].peak_memory_bytes",
                 id="peak-400-digits"),
    pytest.param(_set("recordings.0.repeats.0.samples_per_s", HUGE), "recordings[0].repeats[0].samples_per_s",
                 id="throughput-400-digits"),
    pytest.param(_set("recordings.0.repeats.0.block", BELOW_INT64), "recordings[0].repeats[0].block",
                 id="block-below-int64"),
    pytest.param(_set("recordings.0.repeats.0.per_step_ms.step", HUGE), "recordings[0].repeats[0].per_step_ms.step",
                 id="per-step-400-digits"),
    pytest.param(_set("recordings.0.repeats.0.shares.forward", HUGE), "recordings[0].repeats[0].shares.forward",
                 id="share-400-digits"),
    pytest.param(_set("recordings.0.repeats.0.sm_clock_mhz", HUGE), "recordings[0].repeats[0].sm_clock_mhz",
                 id="clock-400-digits"),
    pytest.param(_set("workload_version", HUGE), "workload_version", id="version-400-digits"),
    pytest.param(_raw("1e-300"), "recordings[0].repeats[0].phases_ms.step[0]", id="steps-1e-300"),
    pytest.param(_raw("1e300"), "recordings[0].repeats[0].phases_ms.step[0]", id="steps-1e300"),
    pytest.param(_raw("1" * 400), "recordings[0].repeats[0].phases_ms.step[0]", id="steps-400-digits"),
]


@pytest.mark.parametrize(("mutate", "where"), BASELINE_CASES)
def test_a_malformed_baseline_through_compare_is_one_line_and_untouched(capsys, tmp_path: Path, mutate,
                                                                        where: str) -> None:
    store = store_of(tmp_path)
    path = baseline_file(store)
    doc = json.loads(path.read_text())
    mutate(doc)
    write_doc(path, doc)
    before = path.read_bytes()
    results = tmp_path / "results"
    results.mkdir()
    save_result(make_result("tiny", seed=2), results / "tiny.json")
    code, _, err = cli(capsys, "compare", "--results", str(results), "--baselines", str(store), *no_config(tmp_path))
    line = one_error_line(err)
    assert code == 2 and str(path) in line and where in line, line
    assert path.read_bytes() == before


@pytest.mark.parametrize(("mutate", "where"), BASELINE_CASES)
def test_validate_baselines_refuses_a_malformed_baseline_with_one_line(capsys, tmp_path: Path, mutate,
                                                                       where: str) -> None:
    path = baseline_file(store_of(tmp_path))
    doc = json.loads(path.read_text())
    mutate(doc)
    write_doc(path, doc)
    code, out, err = cli(capsys, "validate-baselines", str(path.parent.parent))
    line = one_error_line(err)
    assert code == 2 and str(path) in line and where in line, line
    assert "valid:" not in out


def test_telemetry_values_a_float_cannot_hold_are_not_known(capsys, tmp_path: Path) -> None:
    """Telemetry is read leniently: a value it cannot use is unknown, never a traceback."""
    store = store_of(tmp_path)
    doc = result_doc(seed=2)
    for r in doc["repeats"]:
        r["telemetry"] = {"gpu": {"sm_clock_mhz": {"median": HUGE}, "power_cap_share": HUGE},
                          "machine": {"other_cpu_share": {"median": HUGE}, "other_gpu_processes": {"count": HUGE}}}
    path = write_doc(tmp_path / "results" / "tiny.json", doc)
    code, _, err = cli(capsys, "compare", "--results", str(path.parent), "--baselines", str(store),
                       *no_config(tmp_path))
    assert code in (0, 1, 3), err


# --- any value replaced by a hostile one ----------------------------------------------------------

HOSTILE = st.one_of(
    st.sampled_from([HUGE, -HUGE, BELOW_INT64, 2**63, 2**53 + 1, -1, 0, 1e300, -1e300, 1e-300, 1.7e308, 5e-324,
                     True, None, "", "x", "1e999", [], [{}], {}, {"a": HUGE}, [HUGE], ["x"], [1e300]]),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.lists(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5)),
             max_size=12),
)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:4]):
            out += _paths(v, (*prefix, i))
    return out


def _replace(doc: Doc, path: tuple[object, ...], value: object) -> Doc:
    out = copy.deepcopy(doc)
    node: Any = out
    for k in path[:-1]:
        node = node[k]
    if value is _DELETE:
        if isinstance(node, dict):
            del node[path[-1]]
        else:
            node.pop(path[-1])  # type: ignore[call-overload]
    else:
        node[path[-1]] = value
    return out


_DELETE = object()
RESULT_DOC = result_doc(seed=2)
RESULT_PATHS = _paths(RESULT_DOC)


def _compare_ends_in_a_verdict_or_one_line(capsys, config: Path, store: Path, results: Path, path: Path) -> None:
    """A verdict (an ERROR one too: a workload whose parameters no longer match is exit 2
    with its report), or the file refused with one error line naming it."""
    code, _, err = cli(capsys, "compare", "--results", str(results), "--baselines", str(store), "--config", str(config))
    assert code in (0, 1, 2, 3)
    errors = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    if errors:
        assert code == 2 and len(errors) == 1 and str(path) in errors[0], err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Doc]:
    """A store that no test modifies, and its baseline's document."""
    root = tmp_path_factory.mktemp("recorded")
    store = store_of(root)
    return store, json.loads(baseline_file(store).read_text())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(RESULT_PATHS), value=st.one_of(HOSTILE, st.just(_DELETE)))
def test_any_value_of_a_result_replaced_ends_in_a_verdict_or_one_line(capsys, tmp_path_factory, recorded, where,
                                                                      value) -> None:
    tmp_path = tmp_path_factory.mktemp("case")
    path = write_doc(tmp_path / "results" / "tiny.json", _replace(RESULT_DOC, where, value))
    _compare_ends_in_a_verdict_or_one_line(capsys, tmp_path / "absent.toml", recorded[0], path.parent, path)


BASELINE_SKIPPED = ("environment",)
"""Not replaced here: the baseline reader passes the environment to ``Environment.from_dict``
unchecked (see test_a_baseline_environment_of_the_wrong_types_is_one_line)."""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), value=st.one_of(HOSTILE, st.just(_DELETE)))
def test_any_value_of_a_baseline_replaced_ends_in_a_verdict_or_one_line(capsys, tmp_path_factory, recorded,
                                                                        data, value) -> None:
    shared, doc = recorded
    where = data.draw(st.sampled_from([p for p in _paths(doc) if not set(p) & set(BASELINE_SKIPPED)]))
    tmp_path = tmp_path_factory.mktemp("case")
    store = tmp_path / "baselines"
    path = write_doc(store / baseline_file(shared).parent.name / "tiny.json", _replace(doc, where, value))
    results = tmp_path / "results"
    results.mkdir()
    save_result(make_result("tiny", seed=2), results / "tiny.json")
    _compare_ends_in_a_verdict_or_one_line(capsys, tmp_path / "absent.toml", store, results, path)


def test_a_baseline_environment_of_the_wrong_types_is_one_line(capsys, tmp_path: Path) -> None:
    store = store_of(tmp_path)
    path = baseline_file(store)
    doc = json.loads(path.read_text())
    doc["recordings"][0]["environment"]["python"] = 5
    write_doc(path, doc)
    results = tmp_path / "results"
    results.mkdir()
    save_result(make_result("tiny", seed=2), results / "tiny.json")
    code, _, err = cli(capsys, "compare", "--results", str(results), "--baselines", str(store), *no_config(tmp_path))
    assert code == 2 and "recordings[0].environment.python" in one_error_line(err)


# --- pyproject.toml ------------------------------------------------------------------------------

DEEP_TOML = [
    pytest.param("[tool.perfgate]\ndelta = " + "[" * 200_000 + "]" * 200_000 + "\n", id="array-200000-deep"),
    pytest.param("[tool.perfgate]\ndelta = " + "{a = " * 2_000 + "1" + "}" * 2_000 + "\n", id="inline-table-2000-deep"),
    pytest.param("[tool.perfgate.history" + ".a" * 1_200 + "]\n", id="table-1200-deep"),
    pytest.param("[tool.perfgate]\nhistory." + ".".join(["a"] * 1_200) + " = 1\n", id="dotted-key-1200-deep"),
]


@pytest.mark.parametrize("text", DEEP_TOML)
def test_a_pyproject_nested_too_deeply_is_one_line(capsys, tmp_path: Path, text: str) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(text)
    results = tmp_path / "results"
    results.mkdir()
    save_result(make_result("tiny"), results / "tiny.json")
    code, _, err = cli(capsys, "compare", "--results", str(results), "--config", str(pyproject))
    line = one_error_line(err)
    assert code == 2 and str(pyproject) in line and "nested deeper" in line, line
    with pytest.raises(UsageError, match="nested deeper"):
        load_settings(pyproject)


def test_a_pyproject_as_deep_as_allowed_is_read() -> None:
    nested = "[" * (MAX_TOML_DEPTH - 1) + "]" * (MAX_TOML_DEPTH - 1)  # below [tool]: 64 levels in all
    assert parse_toml(f"[tool]\nx = {nested}\n", "p.toml")["tool"]["x"] is not None
    with pytest.raises(UsageError, match="p.toml: not read"):
        parse_toml(f"[tool]\nx = [{nested}]\n", "p.toml")


@pytest.mark.parametrize("text", DEEP_TOML[:3])
def test_a_head_pyproject_nested_too_deeply_is_noted_not_a_traceback(tmp_path: Path, text: str) -> None:
    base = tmp_path / "base"
    (base / "baselines").mkdir(parents=True)
    (base / "pyproject.toml").write_text(BASE_SETTINGS)
    define_workloads(base, "tiny")
    folder = write_run(tmp_path / "r", {"tiny": paired("tiny", seed=1)}, {"tiny": paired("tiny", seed=2)})
    changed = tmp_path / "changed.tsv"
    changed.write_text("modified\tpyproject.toml\t\n")
    head = tmp_path / "head-pyproject.toml"
    head.write_text(text)
    code, _, err, _ = judge(tmp_path, folder, base, "--changed-files", str(changed), "--head-pyproject", str(head))
    assert code in (0, 1, 3), err  # the pull request's pyproject is data: its settings are noted, never fatal
    assert "Traceback" not in err and "internal error" not in err, err


# --- a full disk -----------------------------------------------------------------------------------

def _full_disk_on_write(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.fdopen

    class Full:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(jsonfile.os, "fdopen", lambda fd, mode: Full(real(fd, mode)))


def _full_disk_on_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(jsonfile.os, "fsync", fsync)


def _full_disk_on_create(monkeypatch: pytest.MonkeyPatch) -> None:
    def mkstemp(**kw: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(jsonfile.tempfile, "mkstemp", mkstemp)


FULL = [pytest.param(_full_disk_on_write, id="write"), pytest.param(_full_disk_on_fsync, id="fsync"),
        pytest.param(_full_disk_on_create, id="create")]


@pytest.mark.parametrize("fill", FULL)
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_no_partial_file(tmp_path: Path, monkeypatch,
                                                                              fill) -> None:
    path = tmp_path / "out" / "report.json"
    path.parent.mkdir()
    path.write_text('{"previous": true}\n')
    fill(monkeypatch)
    with pytest.raises(WriteError) as caught:
        write_json_atomic(path, {"a": 1})
    assert isinstance(caught.value, PerfgateError) and caught.value.exit_code == 2
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC  # callers that catch OSError
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "no space left on device" in message.lower()
    assert path.read_text() == '{"previous": true}\n'
    assert os.listdir(path.parent) == ["report.json"]


@pytest.mark.parametrize("fill", FULL)
def test_rebaseline_on_a_full_disk_is_one_line_and_the_baseline_is_as_it_was(capsys, tmp_path: Path, monkeypatch,
                                                                             fill) -> None:
    store = store_of(tmp_path)
    path = baseline_file(store)
    before = path.read_bytes()
    results = tmp_path / "day2"
    results.mkdir()
    save_result(make_result("tiny", seed=5), results / "tiny.json")
    fill(monkeypatch)
    code, _, err = cli(capsys, "rebaseline", "--from-results", str(results), "--reason", "day 2", "--append",
                       "--baselines", str(store), *no_config(tmp_path))
    line = one_error_line(err)
    assert code == 2 and str(path) in line and "no space left on device" in line.lower(), line
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == ["tiny.json"]


@pytest.mark.parametrize("fill", FULL)
def test_compare_writing_its_json_report_on_a_full_disk_is_one_line(capsys, tmp_path: Path, monkeypatch,
                                                                    fill) -> None:
    store = store_of(tmp_path)
    results = tmp_path / "results"
    results.mkdir()
    save_result(make_result("tiny", seed=2), results / "tiny.json")
    report = tmp_path / "reports" / "report.json"
    fill(monkeypatch)
    code, _, err = cli(capsys, "compare", "--results", str(results), "--baselines", str(store), "--json",
                       str(report), *no_config(tmp_path))
    line = one_error_line(err)
    assert code == 2 and str(report) in line and "no space left on device" in line.lower(), line
    assert not report.exists() or os.listdir(report.parent) == []


@pytest.mark.slow
def test_run_with_its_results_folder_on_a_full_disk_is_one_line(capsys, tiny_path: Path, tmp_path: Path,
                                                                monkeypatch) -> None:
    out_dir = tmp_path / "out"
    _full_disk_on_fsync(monkeypatch)  # the repeats' own processes write as usual; the result does not fit
    code, _, err = cli(capsys, "run", "tiny", "--workloads-path", str(tiny_path), "--device", "cpu", "--repeats", "1",
                       "--steps", "4", "--out", str(out_dir), "--cache-dir", str(tmp_path / "cache"))
    errors = [line for line in err.splitlines() if line.startswith("perfgate: error:")]
    assert code == 2 and len(errors) == 1, err
    assert str(out_dir / "tiny.json") in errors[0] and "no space left on device" in errors[0].lower()
    assert "Traceback" not in err
    assert not out_dir.exists() or os.listdir(out_dir) == []
