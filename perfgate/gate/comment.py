"""What ``perfgate judge`` and ``perfgate ci`` publish on a pull request, in perfgate's words.

The report (``report.md``, and the sticky ``comment.md``): the gate's markdown with the
check line, the notice of edited gate inputs, the retired workloads and a closing line of
who and what was judged (:class:`ReportContext`, every run-derived string shown inert);
the report when nothing could be judged; and the step's outputs for the commit status and
the check run: the verdict word, the status state, the check run's conclusion and the
one-line description. What each exit code shows is ``perfgate.model.verdict``'s policy
(:func:`consequence`), under the gate's own ``inconclusive`` setting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.analysis.outcome import GateOutcome
from perfgate.gate.inputs import InputChanges, notice_markdown
from perfgate.model.errors import EXIT_ERROR
from perfgate.model.verdict import POLICY, RUN_POLICY, RunPolicy, Verdict, run_policy
from perfgate.report.markdown import GITHUB_COMMENT_LIMIT, MARKER, render_markdown
from perfgate.text.inert import code, flatten, inline

VERDICT_WORD = {code_: p.word for code_, p in RUN_POLICY.items()}
"""The step output ``verdict`` for each exit code (``perfgate.model.verdict.RUN_POLICY``)."""
CHECK_LINE = {code_: p.check_line for code_, p in RUN_POLICY.items()}
"""The report's line on what the check does, for each exit code, with ``inconclusive = "pass"``."""


def consequence(outcome: GateOutcome) -> RunPolicy:
    """What this gate shows on the pull request: its headline word, status state, check run
    conclusion and check line, by its exit code under its own settings (``inconclusive``)."""
    return run_policy(outcome.exit_code, outcome.config)


@dataclass(frozen=True)
class ReportContext:
    """Who and what was judged, for the report's closing line (all of it shown inert)."""

    base_ref: str
    base_sha: str
    pr_number: int | None = None
    head_sha: str | None = None
    base_verified: bool = True
    clocks: str | None = None
    run_id: str | None = None
    run_url: str | None = None
    judged_by: str | None = None


def run_link(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """This workflow run's id and the link to it, from GitHub's variables; (None, None)
    outside a run or when a variable is not of the expected form."""
    run_id, repo = environ.get("GITHUB_RUN_ID"), environ.get("GITHUB_REPOSITORY")
    if not (run_id and repo and run_id.isdigit() and re.fullmatch(r"[\w.-]+/[\w.-]+", repo)):
        return None, None
    server = environ.get("GITHUB_SERVER_URL", "https://github.com")
    if not re.fullmatch(r"https://[\w.-]+(:\d+)?", server):
        server = "https://github.com"
    return run_id, f"{server}/{repo}/actions/runs/{run_id}"


def compose(outcome: GateOutcome, context: ReportContext, changes: InputChanges | None, *,
            retired: Sequence[str] = (), traces: Mapping[str, Any] | None = None,
            artifacts: Path | None = None, limit: int = GITHUB_COMMENT_LIMIT,
            policy: RunPolicy | None = None, note: str = "") -> str:
    """The whole report: the gate's markdown with the check line, the notice and the context,
    at most ``limit`` characters (as long as the check line and the context fit). ``policy``
    and ``note``: what the head commit's history makes of this run (``perfgate.gate.github.
    head_verdict``): its check line, and the note that says why, above it."""
    text = (f"Judged against the baselines and `[tool.perfgate]` of the base branch {code(context.base_ref)} "
            f"({code(context.base_sha[:12])}"
            f"{'' if context.base_verified else ', base checkout not verified as a git commit'})")
    if context.pr_number is not None and context.head_sha:
        text += f"; pull request #{context.pr_number} at {code(context.head_sha[:12])}"
    text += "."
    if context.judged_by:
        text += f" {context.judged_by}"
    if context.clocks:
        text += f" GPU clocks: {inline(context.clocks, limit=300)}."
    if context.run_id and context.run_url:
        text += f" Results and traces: the artifacts of [run {context.run_id}]({context.run_url})."
    retired_lines = []
    if retired:
        retired_lines = ["> [!NOTE]", "> **Retired by this pull request** (their definitions, or the baselines that "
                         f"gate them, are removed, so they are no longer gated): {', '.join(code(n) for n in retired)}.", ""]
    notice = notice_markdown(changes, context.base_ref, context.base_sha) if changes is not None else []
    noted = ["> [!IMPORTANT]", f"> {inline(note, limit=1000)}", ""] if note else []
    check_line = (policy or consequence(outcome)).check_line
    extra = ["", *noted, check_line, "", *notice, *retired_lines, f"<sub>{text}</sub>"]
    extra_text = "\n".join(extra)
    report = render_markdown(outcome, limit=limit - len(extra_text) - 2, traces=traces,
                             relative_to=artifacts.resolve() if artifacts is not None else None)
    head, _, rest = report.partition("\n")
    title, _, rest = rest.partition("\n")
    if head != MARKER or not title.startswith("## "):
        return f"{MARKER}\n{extra_text}\n{report}"
    return f"{head}\n{title}\n{extra_text}\n{rest}"


def error_report(message: str, changes: InputChanges | None, context: ReportContext | None) -> str:
    """The report when nothing could be judged: the error's check line, the notice (when
    the changes and the context are known) and the message, made inert."""
    notice = notice_markdown(changes, context.base_ref, context.base_sha) if changes and context else []
    error = RUN_POLICY[EXIT_ERROR]
    return "\n".join([MARKER, f"## perfgate: {error.headline}", "", error.check_line, "", *notice,
                      f"{POLICY[Verdict.ERROR].icon} {inline(message)}", ""])


def status_description(outcome: GateOutcome) -> str:
    """One line for the commit status (at most 140 characters; perfgate's words only, and
    never a control character)."""
    text = flatten(outcome.headline.removeprefix("perfgate: "), 10_000)
    return text if len(text) <= 140 else text[:139] + "…"
