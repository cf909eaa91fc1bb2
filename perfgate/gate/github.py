"""Talking to a GitHub Actions job: workflow commands, step outputs, the job summary, and
the check run's payload.

Every value that came from a pull request (a workload's name, a reason) is escaped so
that it cannot start a workflow command of its own or add an output line, and loses its
control characters (C0, DEL, C1; an ANSI escape sequence whole, an OSC 8 hyperlink or a
window title included), so that an annotation cannot recolour, retitle or link the log.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfgate.analysis.outcome import GateOutcome
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


def annotations(outcome: GateOutcome, *, levels: tuple[str, ...] = ("error", "warning", "notice")) -> list[str]:
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
