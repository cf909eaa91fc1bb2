"""Result files: round trip, and every way a file can be bad gives one clear error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from factories import make_result

from perfgate.model.errors import FileFormatError
from perfgate.model.result import RESULT_SCHEMA_VERSION, merge_repeats
from perfgate.store.benchmark_json import load_results_dir
from perfgate.store.results import load_result, save_result


def test_round_trip(tmp_path: Path) -> None:
    result = make_result()
    path = tmp_path / "tiny.json"
    save_result(result, path)
    loaded = load_result(path)
    assert loaded == result
    text = path.read_text()
    assert text.endswith("}\n") and '  "kind": "perfgate.run-result"' in text
    data = json.loads(text)
    assert data["schema_version"] == RESULT_SCHEMA_VERSION
    assert len(data["repeats"][0]["phases_ms"]["forward"]) == 10  # every raw per-step value


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.json"
    path.write_text(text)
    return path


def valid(tmp_path: Path) -> dict:
    path = tmp_path / "valid.json"
    save_result(make_result(), path)
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: "", "file is empty"),
        (lambda d: json.dumps(d)[:200], "not valid JSON"),
        (lambda d: "hello", "not valid JSON"),
        (lambda d: "[1, 2]", "expected a JSON object"),
        (lambda d: json.dumps({**d, "kind": "something-else"}), "not a perfgate.run-result file"),
        (lambda d: json.dumps({**d, "schema_version": 99}), "schema version 99 is newer.*upgrade perfgate"),
        (lambda d: json.dumps({**d, "schema_version": "1"}), "schema_version must be a positive integer"),
        (lambda d: re.sub(r'"window_s": [0-9.e+-]+', '"window_s": NaN', json.dumps(d), count=1),
         "non-finite number NaN"),
        (lambda d: json.dumps({**d, "repeats": []}), "at least one repeat"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "environment"}), "missing field 'environment'"),
    ],
)
def test_bad_result_files_are_refused_with_the_file_named(tmp_path: Path, mutate, message: str) -> None:
    path = write(tmp_path, mutate(valid(tmp_path)))
    with pytest.raises(FileFormatError, match=message) as info:
        load_result(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_a_bad_series_is_named_precisely(tmp_path: Path) -> None:
    data = valid(tmp_path)
    data["repeats"][1]["phases_ms"]["forward"][3] = "fast"
    with pytest.raises(FileFormatError, match=r"repeats\[1\]\.phases_ms\.forward\[3\]: expected a number"):
        load_result(write(tmp_path, json.dumps(data)))
    data = valid(tmp_path)
    data["repeats"][0]["phases_ms"]["h2d"] = data["repeats"][0]["phases_ms"]["h2d"][:5]
    with pytest.raises(FileFormatError, match="different lengths"):
        load_result(write(tmp_path, json.dumps(data)))
    data = valid(tmp_path)
    data["repeats"][0]["phases_ms"]["step"][0] = -1.0
    with pytest.raises(FileFormatError, match="negative duration"):
        load_result(write(tmp_path, json.dumps(data)))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match="not found"):
        load_result(tmp_path / "absent.json")
    with pytest.raises(FileFormatError, match="results directory not found"):
        load_results_dir(tmp_path / "absent")


def test_merge_repeats_renumbers() -> None:
    merged = merge_repeats([make_result(repeats=3), make_result(repeats=2, seed=1)])
    assert [r.index for r in merged.repeats] == [0, 1, 2, 3, 4]


def test_an_older_schema_is_upgraded_in_memory_by_the_migration_chain() -> None:
    from perfgate.model.schema import migrate

    def v1_to_v2(doc: dict) -> dict:
        old = doc.pop("old")
        return {**doc, "renamed": old}

    def v2_to_v3(doc: dict) -> dict:
        return {**doc, "added": True}

    doc = {"kind": "k", "schema_version": 1, "old": 5}
    upgraded = migrate(dict(doc), "k", 3, {1: v1_to_v2, 2: v2_to_v3})
    assert upgraded == {"kind": "k", "schema_version": 3, "renamed": 5, "added": True}
    with pytest.raises(ValueError, match="newer than this perfgate understands"):
        migrate({"kind": "k", "schema_version": 4}, "k", 3, {})


def test_a_schema_1_result_reads_as_schema_3_once_its_repeats_say_how_they_started(tmp_path: Path) -> None:
    # tests/fixtures/schema_v1/result-tiny.json: written by the code of 1c356b8, with first_loss/last_loss;
    # repeats did not record process_start then (it was added to the fixture by hand: they were
    # fresh). Without it nothing in the file tells whether they were forked: refused in one line
    # naming the file and the repeat.
    v1 = Path(__file__).parent / "fixtures" / "schema_v1" / "result-tiny.json"
    raw = json.loads(v1.read_text())
    assert raw["schema_version"] == 1 and "first_loss" in raw["repeats"][0]
    unknown = json.loads(v1.read_text())
    for r in unknown["repeats"]:
        del r["torch_settings"]["process_start"]
    as_written = tmp_path / "v1-as-written.json"
    as_written.write_text(json.dumps(unknown))
    with pytest.raises(FileFormatError) as info:
        load_result(as_written)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{as_written}: repeats[0].torch_settings: no process_start (fork or fresh)")
    assert "nothing in it tells how the process started: measure it again" in message
    # with the starts recorded it reads, its losses dropped, and is written back as schema 3
    result = load_result(v1)
    assert len(result.repeats) == len(raw["repeats"])
    saved = tmp_path / "result-tiny.json"
    save_result(result, saved)
    data = json.loads(saved.read_text())
    assert data["schema_version"] == RESULT_SCHEMA_VERSION == 3
    assert not any({"first_loss", "last_loss"} & set(r) for r in data["repeats"])
    assert {r["torch_settings"]["process_start"] for r in data["repeats"]} == {"fresh"}
    assert load_result(saved).repeats == result.repeats


def _schema_2(result, **top: object) -> dict:
    data = {**result.to_dict(), "schema_version": 2, **top}
    for r in data["repeats"]:
        del r["torch_settings"]["process_start"]
    return data


def test_an_older_result_gets_the_start_it_can_only_have_had_or_is_refused() -> None:
    from perfgate.model.result import result_from_dict

    # a script's process runs the script as __main__: always fresh
    script = result_from_dict(_schema_2(make_result(), workload_source="script:train.py sha256:" + "a" * 64))
    assert {r.torch_settings["process_start"] for r in script.repeats} == {"fresh"}
    # a distributed workload's ranks are started by torch.distributed's launcher: always fresh
    ranks = make_result(params={"batch_size": 8, "steps": 10, "nproc_per_node": 2})
    assert {r.torch_settings["process_start"] for r in result_from_dict(_schema_2(ranks)).repeats} == {"fresh"}
    # any other repeat may have been forked: refused, naming the repeat
    with pytest.raises(ValueError, match=r"^repeats\[0\]\.torch_settings: no process_start \(fork or fresh\)"):
        result_from_dict(_schema_2(make_result()))
    # a start an older file did record is kept as it was
    kept = make_result().to_dict()
    kept["schema_version"] = 2
    assert {r.torch_settings["process_start"] for r in result_from_dict(kept).repeats} == {"fork"}


def test_every_repeat_of_a_schema_3_result_records_a_known_start() -> None:
    from perfgate.model.result import result_from_dict

    data = make_result().to_dict()
    del data["repeats"][2]["torch_settings"]["process_start"]
    with pytest.raises(ValueError, match=r"^repeats\[2\]\.torch_settings: missing process_start \(fork or fresh\)"):
        result_from_dict(data)
    data = make_result().to_dict()
    data["repeats"][1]["torch_settings"]["process_start"] = "spawn"
    with pytest.raises(ValueError, match=r"repeats\[1\]\.torch_settings\.process_start: expected one of fork, "
                                         r"fresh, got 'spawn'"):
        result_from_dict(data)
