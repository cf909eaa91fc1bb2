"""One publisher for the gate's reports: markdown, JSON and HTML, each written atomically.

Every front end that writes a report (``perfgate gate``/``compare``/``report``, ``perfgate
ci``, the pytest plugin, ``perfgate judge``) hands the outcome to :func:`publish` with the
paths it was given. Each report is rendered before anything is written, and each file is
written to a temporary file beside it and renamed into place
(:func:`perfgate.store.jsonfile.write_text_atomic`): a write the system refuses (a full
disk, a folder that is a file) leaves no partial file and the previous one, if any, as it
was. A file that cannot be written does not stop the others; the caller gets both lists
and decides what a missing report means (the command line exits 2, the pytest plugin says
so in its summary and keeps every verdict).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from perfgate.model.errors import PerfgateError
from perfgate.store.jsonfile import WriteError, dumps, write_text_atomic

if TYPE_CHECKING:
    from perfgate.analysis.outcome import GateOutcome
    from perfgate.store.traces import TraceOutcome


class PublishError(PerfgateError, OSError):
    """A report that could not be written (exit 2), naming each one and why; an
    :class:`OSError` too, as :class:`~perfgate.store.jsonfile.WriteError` is, for callers that
    handle an unwritable file themselves."""


class Publication(NamedTuple):
    """What :func:`publish` wrote, and what it could not (``PATH: why``, one line each)."""

    written: tuple[Path, ...]
    unwritten: tuple[str, ...]

    def check(self) -> None:
        """Raise :class:`PublishError` when a report was not written."""
        if self.unwritten:
            raise PublishError("report NOT written: " + "; ".join(self.unwritten))


def _paths(given: str | Path | Sequence[str | Path] | None) -> list[Path]:
    if given is None:
        return []
    if isinstance(given, (str, Path)):
        return [Path(given)]
    return [Path(p) for p in given]


def _why(path: Path, exc: OSError) -> str:
    if isinstance(exc, WriteError) and not exc.strerror:
        return exc.message
    return f"{path}: {exc.strerror or exc}"


def publish(outcome: GateOutcome | None, *, markdown: str | Path | Sequence[str | Path] | None = None,
            json: str | Path | None = None, html: str | Path | None = None, markdown_text: str | None = None,
            traces: Mapping[str, TraceOutcome] | None = None) -> Publication:
    """Write the reports asked for, each atomically.

    ``markdown``: one path or several (``report.md`` and ``comment.md``), each the
    markdown report of ``outcome`` with trace links relative to its folder, or
    ``markdown_text`` when the caller composed it (``perfgate ci``'s comment, an error
    report, where ``outcome`` may be None). ``json``: the JSON report. ``html``: a folder,
    written as ``html/index.html``.
    """
    from perfgate.report.html import INDEX, render_html
    from perfgate.report.json_report import outcome_to_dict
    from perfgate.report.markdown import render_markdown

    if outcome is None and (json is not None or html is not None or (markdown is not None and markdown_text is None)):
        raise ValueError("publish: only a composed markdown text can be written without an outcome")
    texts: list[tuple[Path, str]] = []  # every report rendered before any file is written
    for path in _paths(markdown):
        if markdown_text is not None:
            text = markdown_text
        else:
            assert outcome is not None  # refused above: without an outcome, only a composed text is written
            text = render_markdown(outcome, traces=traces, relative_to=path.parent.resolve())
        texts.append((path, text))
    if outcome is not None and json is not None:
        texts.append((Path(json), dumps(outcome_to_dict(outcome))))
    if outcome is not None and html is not None:
        texts.append((Path(html) / INDEX, render_html(outcome)))
    written: list[Path] = []
    unwritten: list[str] = []
    for path, text in texts:
        try:
            write_text_atomic(path, text)
        except OSError as exc:  # WriteError is one: a full disk, a folder that is a file
            unwritten.append(_why(path, exc))
        else:
            written.append(path)
    return Publication(tuple(written), tuple(unwritten))
