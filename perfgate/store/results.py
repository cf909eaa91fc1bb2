"""Result files: one ``<workload>.json`` per measured workload in a results folder."""

from __future__ import annotations

from pathlib import Path

from perfgate.model.result import RunResult, result_from_dict
from perfgate.store.jsonfile import load_document, write_json_atomic


def load_result(path: Path) -> RunResult:
    return load_document(path, "result", result_from_dict)


def save_result(result: RunResult, path: Path) -> None:
    write_json_atomic(path, result.to_dict())


def result_path(out_dir: Path, workload: str) -> Path:
    return out_dir / f"{workload}.json"

