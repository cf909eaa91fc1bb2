"""One publisher for the gate's reports: markdown, JSON and HTML, each written atomically.

Every front end that writes a report (``perfgate gate``/``compare``/``report``, ``perfgate
ci``, the pytest plugin, ``perfgate judge``) hands the outcome to :func:`publish` with the
paths it was given, by format (:data:`FORMATS`: a new format is one entry there). Each report is rendered before anything is written, and each file is
written to a temporary file beside it and renamed into place
(:func:`perfgate.store.jsonfile.write_text_atomic`): a write the system refuses (a full
disk, a folder that is a file) leaves no partial file and the previous one, if any, as it
was. A file that cannot be written does not stop the others; the caller gets both lists
and decides what a missing report means (the command line exits 2, the pytest plugin says
so in its summary and keeps every verdict).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

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


Paths: TypeAlias = "str | Path | Sequence[str | Path] | None"
"""Where one format goes: a path, several (``report.md`` and ``comment.md``), or None (not asked for)."""


def _markdown(outcome: GateOutcome, path: Path, traces: Mapping[str, TraceOutcome] | None) -> tuple[Path, str]:
    from perfgate.report.markdown import render_markdown

    return path, render_markdown(outcome, traces=traces, relative_to=path.parent.resolve())


def _json(outcome: GateOutcome, path: Path, traces: Mapping[str, TraceOutcome] | None) -> tuple[Path, str]:
    from perfgate.report.json_report import outcome_to_dict

    return path, dumps(outcome_to_dict(outcome))


def _html(outcome: GateOutcome, path: Path, traces: Mapping[str, TraceOutcome] | None) -> tuple[Path, str]:
    from perfgate.report.html import INDEX, render_html

    return path / INDEX, render_html(outcome)


Render = Callable[["GateOutcome", Path, "Mapping[str, TraceOutcome] | None"], tuple[Path, str]]

FORMATS: Mapping[str, Render] = {"markdown": _markdown, "json": _json, "html": _html}
"""Each report format, by the name its option has (``--markdown FILE``, ``--json FILE``,
``--html DIR``): the file it writes for a path given, and its text. ``markdown`` links each
trace relative to its file's folder; ``html`` is a folder, written as ``DIR/index.html``."""


def _paths(given: Paths) -> list[Path]:
    if given is None:
        return []
    if isinstance(given, (str, Path)):
        return [Path(given)]
    return [Path(p) for p in given]


def _why(path: Path, exc: OSError) -> str:
    if isinstance(exc, WriteError) and not exc.strerror:
        return exc.message
    return f"{path}: {exc.strerror or exc}"


def publish(outcome: GateOutcome | None, reports: Mapping[str, Paths], *, markdown_text: str | None = None,
            traces: Mapping[str, TraceOutcome] | None = None) -> Publication:
    """Write the reports asked for, each atomically.

    ``reports``: by format of :data:`FORMATS`, the path or paths it goes to (None: not asked
    for). ``markdown_text``: the markdown when the caller composed it (``perfgate ci``'s and
    ``perfgate judge``'s comment, an error report, where ``outcome`` may be None).
    """
    unknown = sorted(set(reports) - set(FORMATS))
    if unknown:
        raise ValueError(f"publish: no report format {', '.join(unknown)} (formats: {', '.join(FORMATS)})")
    asked = {name: _paths(given) for name, given in reports.items()}
    if outcome is None and any(paths and not (name == "markdown" and markdown_text is not None)
                               for name, paths in asked.items()):
        raise ValueError("publish: only a composed markdown text can be written without an outcome")
    texts: list[tuple[Path, str]] = []  # every report rendered before any file is written
    for name in FORMATS:  # in the formats' order, whatever the order asked
        for path in asked.get(name, ()):
            if name == "markdown" and markdown_text is not None:
                texts.append((path, markdown_text))
            else:
                assert outcome is not None  # refused above: without an outcome, only a composed text is written
                texts.append(FORMATS[name](outcome, path, traces))
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
