"""Talking to a GitHub Actions job: workflow commands, step outputs, the job summary, and
the check run's payload.

Every value that came from a pull request (a workload's name, a reason) is escaped so
that it cannot start a workflow command of its own or add an output line, and loses its
control characters (C0, DEL, C1; an ANSI escape sequence whole, an OSC 8 hyperlink or a
window title included), so that an annotation cannot recolour, retitle or link the log.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.analysis.outcome import GateOutcome
from perfgate.model.errors import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, UsageError
from perfgate.model.verdict import CHECK_CONCLUSIONS, POLICY, Verdict
from perfgate.text.inert import flatten

CHECK_RUN_NAME = "perfgate verdict"
"""The check run the judge reports beside the ``perfgate`` commit status."""
CHECK_RUN_TEXT_LIMIT = 65_535
"""GitHub's limit on a check run's ``output.summary``. The summary is kept within it in UTF-8
bytes, which are never fewer than its characters or UTF-16 code units, however GitHub counts."""
CHECK_RUN_TITLE_LIMIT = 255
CUT_NOTE = "\n\n**Report cut to fit the check run's limit; the full report is in the job summary and the artifacts.**\n"
_SHA = re.compile(r"[0-9a-f]{40}")


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _without_controls(text: str) -> str:
    """``text`` with its lines kept and, on each, the control characters and escape sequences
    removed (``perfgate.text.inert.flatten``)."""
    return "\n".join(flatten(line, max(len(line), 1)) if line else "" for line in _LINE_BREAK.split(text))


def workflow_command(command: str, message: str, **properties: str) -> str:
    """A GitHub workflow command (``::error title=...::message``), escaped so that text
    from a pull request (a workload's name, a reason) cannot start a command of its own,
    and free of control characters: the message keeps its line breaks (escaped), a
    property is one line."""
    props = ",".join(
        f"{key}={_escape_data(flatten(value, max(len(value), 1))).replace(':', '%3A').replace(',', '%2C')}"
        for key, value in properties.items() if value
    )
    return f"::{command}{' ' + props if props else ''}::{_escape_data(_without_controls(message))}"


def workflow_annotations(outcome: GateOutcome, *, levels: tuple[str, ...] = ("error", "warning", "notice")) -> list[str]:
    """One workflow annotation per workload whose verdict gets one (``VerdictPolicy.annotation``:
    an error when it fails the check under the gate's settings, else its notice level), of
    the ``levels`` asked for, saying the verdict line's deciding fact (at most 200 characters:
    the title names the workload and the verdict); a workload that was not judged says whether
    that fails the gate."""
    commands = []
    for c in outcome.comparisons:
        p = POLICY[c.verdict]
        kind = p.annotation(outcome.config)
        if kind is None or kind not in levels:
            continue
        reason = c.headline  # the deciding fact in one glance; the whole argument is in the report
        if c.verdict is Verdict.NO_BASELINE and not p.fails(outcome.config):
            reason += " (not judged; it does not fail the gate)"
        commands.append(workflow_command(kind, reason, title=f"perfgate {c.verdict.value}: {c.workload}"))
    return commands


def set_output(path: Path, values: Mapping[str, str]) -> None:
    """Append step outputs to ``$GITHUB_OUTPUT`` (multi-line values in the delimiter form)."""
    lines = []
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            delimiter = f"perfgate_{uuid.uuid4().hex}"
            lines += [f"{key}<<{delimiter}", value, delimiter]
        else:
            lines.append(f"{key}={value}")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def path_variable(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name, "").strip()
    return Path(value) if value else None


# --- the check run ------------------------------------------------------------------------------

def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def cut_text(text: str, limit: int = CHECK_RUN_TEXT_LIMIT, note: str = CUT_NOTE) -> str:
    """``text`` in at most ``limit`` UTF-8 bytes: whole when it fits; else its first whole
    lines with ``note`` after them, a ``<details>`` left open closed first (never half a
    character, half a line or an open fold)."""
    if _size(text) <= limit:
        return text
    closing = "\n</details>"
    budget = max(limit - _size(note) - _size(closing), 0)  # the report's folds are not nested
    head = text.encode("utf-8", "surrogatepass")[:budget].decode("utf-8", "ignore")
    head = head.rsplit("\n", 1)[0] if "\n" in head else ""
    opened = head.count("<details>") - head.count("</details>")
    head += closing * max(opened, 0)
    result = head + note
    return result if _size(result) <= limit else note.encode("utf-8")[:limit].decode("utf-8", "ignore")


def fit(render: Callable[[int], str], limit: int = CHECK_RUN_TEXT_LIMIT) -> str:
    """The longest rendering that fits ``limit`` UTF-8 bytes: ``render(n)`` gives a text of at
    most ``n`` characters (the report drops its details and passing tables first); a report
    of many multi-byte characters is rendered again with fewer, and cut (:func:`cut_text`)
    as a last resort."""
    budget = limit
    text = render(budget)
    for _ in range(4):
        size = _size(text)
        if size <= limit:
            return text
        budget = max(int(budget * limit / size) - 16, 1)
        text = render(budget)
    return cut_text(text, limit)


def check_run_payload(*, head_sha: str, conclusion: str, title: str, summary: str,
                      details_url: str | None = None, name: str = CHECK_RUN_NAME) -> dict[str, Any]:
    """The body of ``POST /repos/{owner}/{repo}/check-runs`` (``gh api ... --input FILE``): a
    completed check run on ``head_sha`` with its conclusion, the title (one line) and the
    summary (the markdown report, cut to GitHub's limit)."""
    if not _SHA.fullmatch(head_sha):
        raise ValueError(f"a check run needs the head commit's full sha, not {head_sha[:50]!r}")
    if conclusion not in CHECK_CONCLUSIONS:
        raise ValueError(f"{conclusion!r} is not one of the check run conclusions {', '.join(CHECK_CONCLUSIONS)}")
    one_line = " ".join(title.split())
    one_line = flatten(one_line, max(len(one_line), 1))  # no control character, no escape sequence
    if len(one_line) > CHECK_RUN_TITLE_LIMIT:
        one_line = one_line[:CHECK_RUN_TITLE_LIMIT - 1] + "…"
    payload: dict[str, Any] = {
        "name": name, "head_sha": head_sha, "status": "completed", "conclusion": conclusion,
        "output": {"title": one_line, "summary": cut_text(summary)},
    }
    if details_url:
        payload["details_url"] = details_url
    return payload


# --- a verdict belongs to the head commit -------------------------------------------------------

ACCEPT_LABEL = "perfgate: accept slowdown"
"""The label by which someone with write access accepts a REGRESSION recorded for the head commit."""
WRITE_PERMISSIONS = ("admin", "maintain", "write")
"""The collaborator permissions (``GET /repos/{owner}/{repo}/collaborators/{user}/permission``) that
may accept a slowdown: those that could merge it."""
_PERMISSIONS = (*WRITE_PERMISSIONS, "triage", "read", "none")
_STATES = ("success", "failure", "error", "pending")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")
_RECORD_BYTES = 1 << 20
_RECORDS = 1000


@dataclass(frozen=True)
class RecordedVerdict:
    """A ``perfgate`` commit status already set on the head commit, as the API lists it."""

    state: str
    description: str
    created_at: str
    creator: str = ""

    @property
    def regression(self) -> bool:
        """A REGRESSION the judge recorded (its description begins with the verdict's word)."""
        return self.state == "failure" and self.description.startswith("REGRESSION")


@dataclass(frozen=True)
class Acknowledgement:
    """Someone's acceptance of the slowdown: who (their permission, from the API), when, how."""

    by: str
    at: str
    permission: str
    via: str = "label"

    @property
    def may_accept(self) -> bool:
        return self.permission in WRITE_PERMISSIONS


@dataclass(frozen=True)
class HeadVerdict:
    """What the head commit's earlier verdicts and an acknowledgement make of this run's exit code."""

    exit_code: int
    note: str = ""
    description: str = ""
    """The commit status's line when it differs from the gate's headline, else empty."""


def _bad(option: str, path: Path, why: str) -> UsageError:
    return UsageError(f"{option} {path}: {why}")


def _read_small(option: str, path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_RECORD_BYTES + 1)
    except OSError as exc:
        raise _bad(option, path, f"cannot be read ({exc.strerror})") from None
    if len(raw) > _RECORD_BYTES:
        raise _bad(option, path, f"larger than {_RECORD_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(option, path, "not UTF-8 text") from None


def _field(option: str, path: Path, data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _bad(option, path, f"{where}: {key!r} is not a string")
    return value


def read_recorded_verdicts(path: Path, option: str = "--previous-verdicts") -> list[RecordedVerdict]:
    """The ``perfgate`` statuses already on the head commit: one JSON object a line
    (``state``, ``description``, ``created_at``, ``creator``), as the judge workflow writes them
    from the API. Read as untrusted: a line that is not such an object is a UsageError."""
    records = []
    lines = [line for line in _read_small(option, path).splitlines() if line.strip()]
    if len(lines) > _RECORDS:
        raise _bad(option, path, f"more than {_RECORDS} records")
    for number, line in enumerate(lines, 1):
        where = f"line {number}"
        try:
            data = json.loads(line)
        except ValueError:
            raise _bad(option, path, f"{where} is not JSON") from None
        if not isinstance(data, dict):
            raise _bad(option, path, f"{where} is not a JSON object")
        state, description, created = (_field(option, path, data, k, where)
                                       for k in ("state", "description", "created_at"))
        creator = data.get("creator", "")
        if not isinstance(creator, str):
            raise _bad(option, path, f"{where}: 'creator' is not a string")
        if state not in _STATES:
            raise _bad(option, path, f"{where}: state {flatten(state, 20)!r} is not a commit status state")
        if not _TIME.fullmatch(created):
            raise _bad(option, path, f"{where}: created_at is not a time like 2026-12-04T05:00:00Z")
        records.append(RecordedVerdict(state, flatten(description, 200), created, flatten(creator, 60)))
    return records


def read_acknowledgement(path: Path, option: str = "--acknowledgement") -> Acknowledgement | None:
    """An acceptance of the slowdown as the judge workflow found it through the API (the label,
    who applied it last and when, and that person's permission): a JSON object, or an empty
    file for none. Read as untrusted: anything else is a UsageError."""
    text = _read_small(option, path)
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError:
        raise _bad(option, path, "not JSON") from None
    if not isinstance(data, dict):
        raise _bad(option, path, "not a JSON object")
    by, at, permission = (_field(option, path, data, k, "the acknowledgement") for k in ("by", "at", "permission"))
    via = data.get("via", "label")
    if not _LOGIN.fullmatch(by):
        raise _bad(option, path, "'by' is not a GitHub login")
    if not _TIME.fullmatch(at):
        raise _bad(option, path, "'at' is not a time like 2026-12-04T05:00:00Z")
    if permission not in _PERMISSIONS:
        raise _bad(option, path, f"permission {flatten(permission, 20)!r} is not one GitHub reports")
    if via != "label":
        raise _bad(option, path, "'via' is not 'label'")
    return Acknowledgement(by, at, permission, via)


def head_verdict(exit_code: int, head_sha: str, recorded: Sequence[RecordedVerdict],
                 acknowledgement: Acknowledgement | None) -> HeadVerdict:
    """This run's exit code under the head commit's history: a REGRESSION recorded for the
    commit stands over re-runs (a pass or an inconclusive gate becomes exit 1) until someone
    with write access accepts it after it was recorded (then exit 0, naming who and when).
    An error stays an error; a new commit has no history."""
    first = min((r for r in recorded if r.regression), key=lambda r: r.created_at, default=None)
    sha = head_sha[:12]
    ack = acknowledgement
    if first is None:
        if ack is not None and exit_code == EXIT_REGRESSION:
            return HeadVerdict(exit_code, note=(
                f"The label {ACCEPT_LABEL!r} (applied by @{ack.by} at {ack.at}) accepts only a REGRESSION already "
                f"recorded for this commit: it counts from the next run of perfgate for {sha}."))
        return HeadVerdict(exit_code)
    if exit_code == EXIT_ERROR:
        return HeadVerdict(exit_code, note=f"A REGRESSION was recorded for {sha} at {first.created_at}.")
    if ack is not None and ack.may_accept and ack.at >= first.created_at:
        return HeadVerdict(EXIT_OK, note=(
            f"REGRESSION recorded for {sha} at {first.created_at}, accepted by @{ack.by} ({ack.permission} access) "
            f"with the label {ACCEPT_LABEL!r} at {ack.at}: the check passes. This run's own verdict is below."),
            description=f"pass: the REGRESSION of {first.created_at} accepted by @{ack.by} at {ack.at}")
    why = ""
    if ack is not None and not ack.may_accept:
        why = f" @{ack.by} applied the label {ACCEPT_LABEL!r} but has {ack.permission} access, not write."
    elif ack is not None:
        why = f" The label {ACCEPT_LABEL!r} was applied at {ack.at}, before the REGRESSION was recorded."
    note = (f"REGRESSION recorded for {sha} at {first.created_at} stands; re-running does not clear it. A new commit, "
            f"or the label {ACCEPT_LABEL!r} applied by someone with write access, does.{why}")
    return HeadVerdict(EXIT_REGRESSION, note=note,
                       description=f"REGRESSION recorded for {sha} at {first.created_at} stands; re-running does not "
                                   "clear it")
