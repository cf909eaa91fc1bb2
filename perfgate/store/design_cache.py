"""The runner's own design evidence: what its last gates measured of each workload's noise and costs.

One JSON file per workload and device in :func:`design_dir` (``$PERFGATE_DESIGN_DIR``, else
``design/`` in the user's cache folder; not the job's ``$RUNNER_TEMP``, which GitHub empties
after every job: the evidence is what a runner learns across gates). It holds the
:class:`~perfgate.model.design.DesignEvidence` of the latest gates, newest last, at most
``keep``. It is data, never code, and read as untrusted: a file that is not this kind, or an
entry that is not valid evidence, is left out with a notice (the gate then designs from what
remains, or from nothing), and the next write replaces the file atomically. What a pull
request's job can do with it (it runs on the same runner) is move a later gate's windows
between two and eight: the time to a decision, never the error rates
(:mod:`perfgate.analysis.design`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

from perfgate.model.design import DesignEvidence
from perfgate.model.errors import FileFormatError
from perfgate.store.jsonfile import read_json, write_json_atomic

__all__ = ["DESIGN_KIND", "design_dir", "evidence_path", "load_evidence", "record_evidence"]

DESIGN_KIND = "perfgate-design-evidence"
SCHEMA_VERSION = 1
_SAFE = re.compile(r"[A-Za-z0-9._-]{1,80}")


def design_dir() -> Path:
    """``$PERFGATE_DESIGN_DIR``, else ``design/`` under ``$XDG_CACHE_HOME/perfgate`` (``~/.cache/perfgate``)."""
    env = os.environ.get("PERFGATE_DESIGN_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perfgate" / "design"


def evidence_path(directory: Path, workload: str, device: str) -> Path:
    """The file of ``workload`` on ``device``: its name when that is a plain file name, else a hash of it."""
    stem = f"{workload}@{device}"
    if not _SAFE.fullmatch(stem.replace("@", "-")):
        stem = "w-" + hashlib.sha256(stem.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return directory / f"{stem}.json"


def load_evidence(directory: Path, workload: str, device: str,
                  notice: Callable[[str], None] = lambda message: None) -> list[DesignEvidence]:
    """The recorded evidence of ``workload`` on ``device``, oldest first; [] when none is
    recorded. What cannot be read is left out and named through ``notice``."""
    path = evidence_path(directory, workload, device)
    if not path.exists():
        return []
    try:
        data = read_json(path, "design evidence")
    except FileFormatError as exc:
        notice(f"{exc}; designing as if it held nothing")
        return []
    if not isinstance(data, dict) or data.get("kind") != DESIGN_KIND or data.get("workload") != workload \
            or data.get("device") != device or not isinstance(data.get("gates"), list):
        notice(f"{path}: not {workload}'s design evidence on {device}; designing as if it held nothing")
        return []
    if data.get("schema_version") != SCHEMA_VERSION:
        notice(f"{path}: design evidence of schema {data.get('schema_version')!r}, this perfgate reads "
               f"{SCHEMA_VERSION}; designing as if it held nothing")
        return []
    found = []
    for i, entry in enumerate(data["gates"]):
        try:
            found.append(DesignEvidence.from_dict(entry))
        except (TypeError, ValueError) as exc:
            notice(f"{path}: entry {i + 1} left out: {exc}")
    return found


def record_evidence(directory: Path, workload: str, device: str, evidence: DesignEvidence, *, keep: int,
                    notice: Callable[[str], None] = lambda message: None) -> Path:
    """Append ``evidence`` to the workload's file, keeping the latest ``keep``; written atomically."""
    kept = [*load_evidence(directory, workload, device, notice), evidence][-keep:]
    path = evidence_path(directory, workload, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"kind": DESIGN_KIND, "schema_version": SCHEMA_VERSION, "workload": workload,
                             "device": device, "gates": [e.to_dict() for e in kept]})
    return path
