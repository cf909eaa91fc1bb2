"""Talking to a GitHub Actions job: workflow commands, step outputs, the job summary, and
the check run's payload; and what the judge workflow read from the API, as untrusted files:
the head commit's recorded verdicts (each naming its pull request and base), the label that
accepts a slowdown (:func:`head_verdict`: one commit, one pull request, a second person), and
the measuring job's start and end.

Every value that came from a pull request (a workload's name, a reason) is escaped so
that it cannot start a workflow command of its own or add an output line, and loses its
control characters (C0, DEL, C1; an ANSI escape sequence whole, an OSC 8 hyperlink or a
window title included), so that an annotation cannot recolour, retitle or link the log.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfgate.analysis.outcome import GateOutcome
from perfgate.gate.config import ACCEPT_BY
from perfgate.model.errors import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION, UsageError
from perfgate.model.measuring_job import MeasuringJob
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


# --- a verdict belongs to the head commit, its pull request and its base -------------------------

ACCEPT_LABEL = "perfgate: accept slowdown"
"""The label by which a second person accepts a REGRESSION recorded for the head commit."""
WRITE_PERMISSIONS = ("admin", "maintain", "write")
"""The collaborator permissions (``GET /repos/{owner}/{repo}/collaborators/{user}/permission``) that
can merge a pull request."""
MAINTAIN_PERMISSIONS = ("admin", "maintain")
_PERMISSIONS = (*WRITE_PERMISSIONS, "triage", "read", "none")
_NEEDS = {"maintainers-or-code-owners": "maintain or admin access, or a code owner of a changed file with write access",
          "maintainers": "maintain or admin access",
          "code-owners": "a code owner of a changed file with write access",
          "writers": "write, maintain or admin access"}
"""What each ``[tool.perfgate] accept_by`` (:data:`perfgate.gate.config.ACCEPT_BY`) asks of the person."""
_STATES = ("success", "failure", "error", "pending")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")
_RECORD_BYTES = 1 << 20
_JOB_BYTES = 4096
_RECORDS = 1000
STATUS_LIMIT = 140
"""GitHub's limit on a commit status's description."""
_JUDGED_FOR = re.compile(r" \(#([1-9][0-9]{0,9}) into ([0-9a-f]{12})\)$")


def judged_for(pr: int, base_sha: str) -> str:
    """The tag that ends the description of every ``perfgate`` status the judge sets: the pull
    request and the base commit (its first 12 hex digits) the verdict is for, `` (#12 into
    abc123def456)``. The judge reads it back (:meth:`RecordedVerdict.recorded_for`), and so does
    the judge workflow's identify step, so that a verdict set for the same commit in another pull
    request, or against another base, never stands for this one."""
    return f" (#{pr} into {base_sha[:12]})"


def tagged(description: str, pr: int | None, base_sha: str | None, limit: int = STATUS_LIMIT) -> str:
    """``description`` ending with its tag (:func:`judged_for`), the description cut (with ...) so
    that the whole fits ``limit`` UTF-8 bytes, and so as many characters, with the tag whole
    (the workflow cuts the status's line at 140, in characters or bytes by its locale);
    unchanged when the pull request or the base commit is not known."""
    if pr is None or base_sha is None or not _SHA.fullmatch(base_sha):
        return description
    tag = judged_for(pr, base_sha)
    room = limit - len(tag)  # the tag is ASCII
    if _size(description) > room:
        description = description.encode("utf-8", "surrogatepass")[:room - 3].decode("utf-8", "ignore") + "..."
    return description + tag


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

    @property
    def judged_for(self) -> tuple[int, str] | None:
        """The pull request and base commit (12 hex digits) its tag names; None without a tag."""
        match = _JUDGED_FOR.search(self.description)
        return (int(match.group(1)), match.group(2)) if match else None

    def recorded_for(self, pr: int | None, base_sha: str | None) -> bool:
        """Set by the judge for pull request ``pr`` against ``base_sha``, as its tag says."""
        return pr is not None and base_sha is not None and self.judged_for == (pr, base_sha[:12])

    @property
    def where(self) -> str:
        """`` in pull request #11 against abc123def456``, or nothing without a tag."""
        found = self.judged_for
        return f" in pull request #{found[0]} against {found[1]}" if found else ""


@dataclass(frozen=True)
class Acknowledgement:
    """Someone's acceptance of the slowdown, as the judge workflow found it through the API: who
    applied the label last and when, with which permission, and what decides whether it counts:
    when the head commit became the pull request's head and who pushed it, the pull request's
    author, and the head commit's author and committer."""

    by: str
    at: str
    permission: str
    via: str = "label"
    head_since: str = ""
    """When the head commit became the pull request's head: the time of the head repository's latest
    activity on the head branch (``GET /repos/{owner}/{repo}/activity``), the push of this commit;
    empty when the workflow could not tell (then the label counts for nothing)."""
    pusher: str = ""
    """Who made that push (the activity's actor); empty when not known."""
    pr_author: str = ""
    """Who opened the pull request; empty when not known (then the label counts for nothing)."""
    commit_authors: tuple[str, ...] = ()
    """The head commit's author and committer, as GitHub matched them to accounts."""

    @property
    def may_accept(self) -> bool:
        """Write access or more, which every ``accept_by`` asks for."""
        return self.permission in WRITE_PERMISSIONS

    def allowed(self, accept_by: str, code_owner: bool) -> bool:
        """Whether the permission (and being a code owner) is enough under ``accept_by``."""
        maintainer = self.permission in MAINTAIN_PERMISSIONS
        owner = code_owner and self.may_accept
        return {"maintainers-or-code-owners": maintainer or owner, "maintainers": maintainer,
                "code-owners": owner, "writers": self.may_accept}[accept_by]


@dataclass(frozen=True)
class HeadVerdict:
    """What the head commit's earlier verdicts and an acknowledgement make of this run's exit code."""

    exit_code: int
    note: str = ""
    description: str = ""
    """The commit status's line when it differs from the gate's headline, else empty."""


def _bad(option: str, path: Path, why: str) -> UsageError:
    return UsageError(f"{option} {path}: {why}")


def _read_small(option: str, path: Path, limit: int = _RECORD_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise _bad(option, path, f"cannot be read ({exc.strerror})") from None
    if len(raw) > limit:
        raise _bad(option, path, f"larger than {limit} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(option, path, "not UTF-8 text") from None


def _json_object(option: str, path: Path, text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        raise _bad(option, path, "not JSON") from None
    if not isinstance(data, dict):
        raise _bad(option, path, "not a JSON object")
    return data


def _field(option: str, path: Path, data: dict[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _bad(option, path, f"{where}: {key!r} is not a string")
    return value


def _optional(option: str, path: Path, data: dict[str, Any], key: str, pattern: re.Pattern[str], what: str) -> str:
    """``data[key]``: absent or empty (not known), or a string that ``pattern`` matches whole."""
    value = data.get(key, "")
    if not isinstance(value, str):
        raise _bad(option, path, f"the acknowledgement: {key!r} is not a string")
    if value and not pattern.fullmatch(value):
        raise _bad(option, path, f"{key!r} is not {what}")
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
    """An acceptance of the slowdown as the judge workflow found it through the API: a JSON
    object (``by``, ``at``, ``permission``, ``via``: the label, who applied it last, when, with
    which permission; ``head_since``, ``pusher``: when the head commit became the pull request's
    head and who pushed it; ``pr_author``; ``commit_authors``: the head commit's author and
    committer), or an empty file for none. Read as untrusted: anything else is a UsageError; a
    field the workflow could not find is empty, and then the label counts for nothing."""
    text = _read_small(option, path)
    if not text.strip():
        return None
    data = _json_object(option, path, text)
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
    head_since = _optional(option, path, data, "head_since", _TIME, "a time like 2026-12-04T05:00:00Z")
    pusher = _optional(option, path, data, "pusher", _LOGIN, "a GitHub login")
    pr_author = _optional(option, path, data, "pr_author", _LOGIN, "a GitHub login")
    authors = data.get("commit_authors", [])
    if (not isinstance(authors, list) or len(authors) > 10
            or not all(isinstance(a, str) and _LOGIN.fullmatch(a) for a in authors)):
        raise _bad(option, path, "'commit_authors' is not a list of GitHub logins")
    return Acknowledgement(by, at, permission, via, head_since, pusher, pr_author, tuple(authors))


def _moment(option: str, path: Path, data: dict[str, Any], key: str) -> datetime:
    value = _field(option, path, data, key, "the measuring job")
    try:
        if not _TIME.fullmatch(value):
            raise ValueError(value)
        return datetime.strptime(value, _TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise _bad(option, path, f"{key} is not a time like 2026-12-04T05:00:00Z") from None


def read_measuring_job(path: Path, option: str = "--measuring-job") -> MeasuringJob:
    """The measuring job's start and end as the judge workflow read them from the Actions API
    (``GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs``; a sharded run's earliest start and
    latest end): the JSON object ``{"started_at": ..., "completed_at": ...}``. Read as untrusted
    (at most 4 KiB, those two keys only, times like 2026-12-04T05:00:00Z, the end not before the
    start): anything else is a UsageError."""
    text = _read_small(option, path, _JOB_BYTES)
    if not text.strip():
        raise _bad(option, path, "empty: the measuring job's start and end were not found")
    data = _json_object(option, path, text)
    extra = sorted(set(data) - {"started_at", "completed_at"})
    if extra:
        raise _bad(option, path, f"unknown key {flatten(extra[0], 40)!r}; allowed: completed_at, started_at")
    started, completed = (_moment(option, path, data, key) for key in ("started_at", "completed_at"))
    if completed < started:
        raise _bad(option, path, "completed_at is before started_at")
    return MeasuringJob(started, completed)


# --- code owners --------------------------------------------------------------------------------

CODEOWNERS_PLACES = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")
"""Where GitHub looks for the CODEOWNERS file, in its order: the first found is the one used."""
_CODEOWNERS_BYTES = 3 * 1024 * 1024
"""GitHub ignores a CODEOWNERS file larger than this."""


def _owner_pattern(pattern: str) -> re.Pattern[str] | None:
    """A CODEOWNERS pattern as GitHub applies it (gitignore's rules, less ``!`` and ``[ ]``;
    ``docs/*`` matches the files right under docs/ only) as a regular expression over a path."""
    if pattern.startswith("!") or "[" in pattern or "\\" in pattern:
        return None  # not supported by GitHub: the line is skipped
    directory = pattern.endswith("/")
    body = pattern.strip("/")
    if not body:
        return None
    anchored = "/" in pattern.rstrip("/")
    out, i = [], 0
    while i < len(body):
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("**", i):
            out.append(".*")
            i += 2
        elif body[i] == "*":
            out.append("[^/]*")
            i += 1
        elif body[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(body[i]))
            i += 1
    last = body.rsplit("/", 1)[-1]
    suffix = "/.*" if directory else "" if any(c in last for c in "*?") else "(?:/.*)?"
    return re.compile(("" if anchored else "(?:.*/)?") + "".join(out) + suffix)


def codeowners_rules(text: str) -> list[tuple[re.Pattern[str], frozenset[str]]]:
    """The rules of a CODEOWNERS file, in order: each pattern with the users it names (their logins
    in lower case, without ``@``; a team ``@org/name`` and an e-mail address name nobody here)."""
    rules = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        pattern = _owner_pattern(words[0])
        if pattern is None:
            continue
        owners: set[str] = set()
        for word in words[1:]:
            if word.startswith("#"):
                break
            if word.startswith("@") and _LOGIN.fullmatch(word[1:]):
                owners.add(word[1:].lower())
        rules.append((pattern, frozenset(owners)))
    return rules


def is_code_owner(base_dir: Path, login: str, paths: Iterable[str]) -> bool:
    """Whether the base commit's CODEOWNERS (the first of :data:`CODEOWNERS_PLACES` in ``base_dir``)
    names ``login`` itself as an owner of at least one of ``paths``: for each path the last rule
    that matches it decides, as on GitHub. A team is not resolved (the judge's token cannot read
    team membership): name people, or rely on maintain access."""
    for place in CODEOWNERS_PLACES:
        file = base_dir / place
        if file.is_symlink() or not file.is_file():
            continue
        try:
            with open(file, "rb") as handle:
                raw = handle.read(_CODEOWNERS_BYTES + 1)
        except OSError:
            return False
        if len(raw) > _CODEOWNERS_BYTES:
            return False
        rules = codeowners_rules(raw.decode("utf-8", "replace"))
        who = login.lower()
        for path in paths:
            owners = next((names for pattern, names in reversed(rules) if pattern.fullmatch(path)), frozenset())
            if who in owners:
                return True
        return False
    return False


# --- the head commit's verdict ------------------------------------------------------------------

def _same(a: str, b: str) -> bool:
    return bool(a) and a.lower() == b.lower()  # GitHub logins are case-insensitive


def _refusal(ack: Acknowledgement, sha: str, accepted: RecordedVerdict | None, first: RecordedVerdict,
             pr: int | None, base_sha: str | None, accept_by: str, code_owner: bool) -> str | None:
    """Why the label does not accept the REGRESSION (one line), or None when it does."""
    label = f"The label {ACCEPT_LABEL!r} (applied by @{ack.by} at {ack.at})"
    if not ack.head_since:
        return (f"{label} counts only when applied after {sha} became the pull request's head, and when that was "
                "is not known (the head repository's latest activity on the branch is not the push of this commit): "
                "push again to have it judged.")
    if ack.at <= ack.head_since:
        return (f"{label} is stale: {sha} became the pull request's head at {ack.head_since}, after it; remove the "
                "label and apply it again to accept this commit's REGRESSION.")
    if accepted is None:
        here = (f"pull request #{pr} against {base_sha[:12]}" if pr is not None and base_sha else
                "this pull request (its number and base are not known: give --expect-pr and --expect-base-sha)")
        return (f"{label} accepts only a REGRESSION recorded for {sha} in {here}, and none is yet (the one of "
                f"{first.created_at} was recorded{first.where or ' without naming its pull request'}): this run "
                "records one; apply the label again after it to accept it.")
    if ack.at < accepted.created_at:
        return (f"{label} was applied before the REGRESSION was recorded (at {accepted.created_at}) in this pull "
                "request.")
    if not ack.pr_author:
        return f"{label} counts for nothing: the pull request's author is not known, so a second person cannot be told."
    if _same(ack.by, ack.pr_author):
        return (f"{label} counts for nothing: @{ack.by} opened this pull request, and a slowdown is accepted by a "
                "second person, never its author.")
    if _same(ack.by, ack.pusher):
        return (f"{label} counts for nothing: @{ack.by} pushed {sha}, and a slowdown is accepted by a second person, "
                "never its pusher.")
    if any(_same(ack.by, a) for a in ack.commit_authors):
        return (f"{label} counts for nothing: @{ack.by} is {sha}'s author or committer, and a slowdown is accepted "
                "by a second person.")
    if not ack.allowed(accept_by, code_owner):
        owner = "a code owner of a changed file" if code_owner else "not a code owner of the files it changes"
        return (f"{label} counts for nothing: @{ack.by} has {ack.permission} access and is {owner}; "
                f"accept_by = {accept_by!r} asks for {_NEEDS[accept_by]}.")
    return None


def head_verdict(exit_code: int, head_sha: str, recorded: Sequence[RecordedVerdict],
                 acknowledgement: Acknowledgement | None, *, pr: int | None = None, base_sha: str | None = None,
                 accept_by: str = ACCEPT_BY[0], code_owner: bool = False) -> HeadVerdict:
    """This run's exit code under the head commit's history: a REGRESSION recorded for the
    commit (in any pull request, against any base) stands over re-runs (a pass or an
    inconclusive gate becomes exit 1) until the label accepts it (then exit 0, naming who and
    when). The label accepts it only when it was applied after the head commit became the pull
    request's head (an earlier one is stale: given for another head) and after a REGRESSION was
    recorded for the commit in this pull request (``pr``) against this base (``base_sha``), by a
    second person (not the pull request's author, nor the commit's pusher, author or committer)
    whom ``accept_by`` allows (``code_owner``: a code owner of a changed file). An error stays an
    error; a new commit has no history."""
    if accept_by not in _NEEDS:
        raise ValueError(f"accept_by {accept_by!r} is not one of {', '.join(ACCEPT_BY)}")
    regressions = [r for r in recorded if r.regression]
    first = min(regressions, key=lambda r: r.created_at, default=None)
    sha = head_sha[:12]
    ack = acknowledgement
    if first is None:
        if ack is not None and exit_code == EXIT_REGRESSION:
            return HeadVerdict(exit_code, note=(
                f"The label {ACCEPT_LABEL!r} (applied by @{ack.by} at {ack.at}) accepts only a REGRESSION already "
                f"recorded for this commit in this pull request: apply it again after this run's REGRESSION of "
                f"{sha}."))
        return HeadVerdict(exit_code)
    if exit_code == EXIT_ERROR:
        return HeadVerdict(exit_code, note=f"A REGRESSION was recorded for {sha} at {first.created_at}.")
    accepted = min((r for r in regressions if r.recorded_for(pr, base_sha)), key=lambda r: r.created_at, default=None)
    why = None if ack is None else _refusal(ack, sha, accepted, first, pr, base_sha, accept_by, code_owner)
    if ack is not None and accepted is not None and why is None:
        owner = ", a code owner" if code_owner else ""
        return HeadVerdict(EXIT_OK, note=(
            f"REGRESSION recorded for {sha} at {accepted.created_at} in this pull request, accepted by @{ack.by} "
            f"({ack.permission} access{owner}) with the label {ACCEPT_LABEL!r} at {ack.at}, after {sha} became its "
            "head: the check passes. This run's own verdict is below."),
            description=f"pass: the REGRESSION of {accepted.created_at} accepted by @{ack.by} at {ack.at}")
    where = "" if first.recorded_for(pr, base_sha) else first.where  # another pull request's, or another base's
    note = (f"REGRESSION recorded for {sha} at {first.created_at}{where} stands; re-running does not clear it. "
            f"A new commit does, or the label {ACCEPT_LABEL!r} applied after it by a second person with "
            f"{_NEEDS[accept_by]} (accept_by = {accept_by!r}).{' ' + why if why else ''}")
    return HeadVerdict(EXIT_REGRESSION, note=note,
                       description=f"REGRESSION recorded for {sha} at {first.created_at} stands; re-running does not "
                                   "clear it")
