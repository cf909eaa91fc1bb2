"""Counter files: ``<workload>.counters.json`` beside a result file or a baseline."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from perfgate.model.counters import COUNTERS_SUFFIX, CounterSet, counters_from_dict
from perfgate.model.errors import FileFormatError
from perfgate.store.jsonfile import load_document, write_json_atomic


def counters_path(out_dir: Path, workload: str) -> Path:
    """``<out_dir>/<workload>.counters.json``, beside the workload's result file."""
    return Path(out_dir) / f"{workload}{COUNTERS_SUFFIX}"


def load_counters_beside(results_dir: Path, names: Iterable[str]) -> dict[str, CounterSet]:
    """The counted runs found beside result files (``<w>.counters.json``), by workload; a
    bad file is a FileFormatError, one that names another workload too."""
    out = {}
    for name in names:
        path = counters_path(results_dir, name)
        if path.is_file():
            counters = load_counters(path)
            if counters.workload != name:
                raise FileFormatError(f"{path}: holds the counters of {counters.workload!r}, not {name!r}")
            out[name] = counters
    return out


def save_counters(counters: CounterSet, out_dir: Path) -> Path:
    path = counters_path(out_dir, counters.workload)
    write_json_atomic(path, counters.to_dict())
    return path


def load_counters(path: Path) -> CounterSet:
    return load_document(Path(path), "counters", counters_from_dict)
