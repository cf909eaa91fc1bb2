"""``perfgate history``: record runs in the history store, export it, find lasting steps.

- ``record --results DIR``: the results folder's runs (head side only) appended to the
  store in one transaction (``perfgate.store.history``);
- ``export --format csv|parquet|json``: the long table of ``perfgate.analysis.history.load``;
- ``changes [WORKLOAD]``: the lasting steps of each workload's per-run series
  (``run_series``, ``perfgate.analysis.changepoints.find_changes``,
  ``perfgate.report.changes.render_changes``), of the time per step unless
  ``--statistic median``;
- ``html DIR``: the dashboard (``perfgate.report.dashboard``);
- ``migrate``: create the store, or bring it forward to the current schema;
- ``copy SRC DST``: a whole store into another (SQLite into PostgreSQL and back).

The store is ``--history PATH|URL``, else ``PERFGATE_HISTORY_URL`` (the shared store a CI
secret names), else ``[tool.perfgate] history``, else ``perfgate-history.sqlite`` beside
the pyproject. A ``postgresql://`` URL is a PostgreSQL server; any other ``scheme://`` is
refused (``perfgate.store.history_sql.parse_location``). pandas is imported only by the commands
that need it, so ``perfgate`` starts as fast as before. A recorded run the store's reader
leaves out (a value ``record`` would not have stored, such as a ``created_at`` of
"yesterday") is named on stderr, one ``perfgate: warning:`` line per run, and the
commands go on with the others.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfgate.adapters import options
from perfgate.analysis.changepoints import ChangePoint, find_changes
from perfgate.gate.config import load_settings
from perfgate.model.baseline import DayVariation
from perfgate.model.errors import EXIT_OK, UsageError
from perfgate.model.manifest import DESIGNS
from perfgate.model.repeat import MEDIAN, PER_STEP, STATISTIC_WORDS, STATISTICS
from perfgate.model.result import ROWS, RunResult
from perfgate.report.changes import ChangeRow, render_changes
from perfgate.store.history import (
    HISTORY_SCHEMA_VERSION,
    Location,
    copy,
    migrate,
    read_rows,
    record,
    recordings_of,
    runner_name,
    write_export,
)
from perfgate.store.history_sql import URL_ENV, environment_url, looks_like_url, parse_location, sqlite_location
from perfgate.text.inert import terminal

FORMATS = ("csv", "parquet", "json")
MAX_BRANCH_CHARS = 200


STATISTIC_HELP = (f"the per-repeat statistic each run's value is the median of: {PER_STEP} (the time per step, the "
                  f"window's total over its steps: what the gate decides on; the default) or {MEDIAN} (the median "
                  "step; the only one kept in runs recorded before schema version 2)")


def store_of(args: argparse.Namespace) -> Location:
    """``--history``, else ``PERFGATE_HISTORY_URL``, else the ``history`` setting of
    ``--config``'s ``[tool.perfgate]`` (a path there is relative to the pyproject), else
    ``perfgate-history.sqlite`` beside it."""
    if args.history is not None:
        return parse_location(args.history, origin="--history")
    url = environment_url()
    if url is not None:
        return parse_location(url, origin=URL_ENV)
    pyproject = Path(args.config)
    settings = load_settings(pyproject)  # checks the whole table, as every command does
    written = _history_setting(pyproject)
    if written is not None and looks_like_url(written):
        return parse_location(written, origin=f"{pyproject} [tool.perfgate] history")
    return sqlite_location(settings.history)


def _history_setting(pyproject: Path) -> str | None:
    """``[tool.perfgate] history`` as written (the settings hold it as a path, which would
    fold a URL's ``//``); None when not there."""
    try:
        table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("perfgate", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
        return None  # load_settings has said what is wrong with a file it could read
    value = table.get("history") if isinstance(table, dict) else None
    return value if isinstance(value, str) else None


def _statistic(args: argparse.Namespace) -> str:
    return str(getattr(args, "statistic", PER_STEP))


def _branch(value: str | None) -> str | None:
    if value is None:
        return None
    branch = value.strip()
    if not branch or len(branch) > MAX_BRANCH_CHARS or any(ord(ch) < 32 or ord(ch) == 127 for ch in branch):
        raise UsageError(f"--branch: expected a branch name (1 to {MAX_BRANCH_CHARS} printable characters)")
    return branch


def cmd_record(args: argparse.Namespace) -> int:
    store = store_of(args)
    recordings = recordings_of(Path(args.results), design=args.design, branch=_branch(args.branch),
                               runner=runner_of(args.runner))
    run_ids = record(store, recordings)
    for run_id, r in zip(run_ids, recordings, strict=True):
        commit = (r.result.environment.git_commit or "unknown commit")[:12]
        dirty = " (dirty)" if r.result.environment.git_dirty else ""
        counted = ", with counters" if r.counters is not None else ""
        print(f"run {run_id}: {terminal(r.result.workload)} of {terminal(commit)}{dirty}, {r.design} design, "
              f"{len(r.result.repeats)} repeats{counted}")
    print(f"perfgate: recorded {len(run_ids)} run(s) in {store}", file=sys.stderr)
    return EXIT_OK


def runner_of(value: str | None) -> str | None:
    """``--runner`` checked, else the runner ``record`` names by default (:func:`runner_name`)."""
    if value is None:
        return runner_name()
    name = value.strip()
    if not name or len(name) > MAX_BRANCH_CHARS or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise UsageError(f"--runner: expected a runner name (1 to {MAX_BRANCH_CHARS} printable characters)")
    return name


def load_table(store: Location) -> Any:
    """The store as ``perfgate.analysis.history``'s table, each run its reader left out
    named on stderr (one line per run)."""
    from perfgate.analysis.history import frame  # pandas, only for the commands that need it

    rows = read_rows(store)
    for line in rows.skipped:
        print(f"perfgate: warning: {line}", file=sys.stderr)
    return frame(rows)


def day_history(value: str | bool, config: str) -> tuple[Location, Any]:
    """``rebaseline --day-history [PATH|URL]``: the store (the value, else the one ``history``
    commands use by default) and its table, read before anything is measured or written."""
    args = argparse.Namespace(history=None if value is True else value, config=config)
    store = store_of(args)
    return store, load_table(store)


def day_variations(store: Location, table: Any, results: Mapping[str, RunResult]) -> dict[str, DayVariation]:
    """Each result's workload's job-to-job variation measured from ``table`` (``--day-history``),
    said on stdout; a workload with too few runs there is a UsageError before any baseline is written."""
    from perfgate.analysis.day_variation import day_variation

    shown = terminal(str(store), 200)
    out = {}
    for name, result in results.items():
        day = day_variation(table, workload=name, workload_version=result.workload_version,
                            environment_key=result.environment.key(), source=shown)
        words = ", ".join(f"{STATISTIC_WORDS[k]} {v * 100:.2f}%" for k, v in day.sd_log.items())
        print(f"{name}: day-to-day variation from {day.runs} runs in {shown} ({day.first_date} to {day.last_date}): "
              f"{words}, {day.df} df")
        out[name] = day
    return out


def serialise(df: Any, fmt: str) -> bytes:
    """The table in ``fmt``: CSV (a header line, ISO dates), Parquet (pyarrow; the dtypes
    kept) or JSON (a list of records, ISO dates, null for missing values)."""
    if fmt == "csv":
        return str(df.to_csv(index=False)).encode("utf-8")
    if fmt == "json":
        return (str(df.to_json(orient="records", date_format="iso")) + "\n").encode("utf-8")
    try:
        return bytes(df.to_parquet(index=False, engine="pyarrow"))
    except ImportError:
        raise UsageError("--format parquet needs pyarrow (pip install pyarrow)") from None


def cmd_export(args: argparse.Namespace) -> int:
    if args.format == "parquet" and not args.out_file:
        raise UsageError("--format parquet writes a binary file: give --out FILE")
    store = store_of(args)
    df = load_table(store)
    data = serialise(df, args.format)
    if args.out_file:
        write_export(Path(args.out_file), data)
        print(f"perfgate: wrote {len(df)} rows ({df['run_id'].nunique()} runs) to {args.out_file}", file=sys.stderr)
    else:
        sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
    return EXIT_OK


def cmd_changes(args: argparse.Namespace) -> int:
    store = store_of(args)
    from perfgate.analysis.history import run_series

    df = load_table(store)
    if df.empty:
        raise UsageError(f"{store}: no run recorded yet")
    recorded = sorted(str(w) for w in df["workload"].unique())
    if args.workload is not None and args.workload not in recorded:
        raise UsageError(f"{terminal(args.workload)}: no runs in {store}; recorded: {', '.join(recorded) or 'none'}")
    if args.environment is not None and args.environment not in set(df["environment_key"].astype(str)):
        raise UsageError(f"--environment {terminal(args.environment)}: no runs of that environment key in {store}")
    rows: list[ChangeRow] = []
    skipped: list[str] = []
    searched = 0
    for workload in ([args.workload] if args.workload is not None else recorded):
        keys = sorted({str(k) for k in df.loc[df["workload"] == workload, "environment_key"]})
        for key in keys if args.environment is None else [k for k in keys if k == args.environment]:
            series = run_series(df, workload, args.phase, key, statistic=_statistic(args))
            if series.empty:
                continue
            searched += 1
            try:
                changes = find_changes([float(v) for v in series["value_ms"]])
            except ValueError as exc:  # too few runs for the method, or a value it cannot take
                skipped.append(f"{terminal(workload)} on {terminal(key)}, {args.phase}: {exc}")
                continue
            rows.extend(_change_rows(workload, key, args.phase, series, changes))
    if searched == 0:
        if _statistic(args) == PER_STEP:
            raise UsageError(f"no run in {store} holds a time per step (runs recorded before schema version 2 "
                             "hold the median step only: --statistic median)")
        raise UsageError(f"{terminal(args.workload)}: no runs on {terminal(args.environment)} in {store}")
    if len(skipped) == searched:
        raise UsageError(skipped[0] if searched == 1 else f"none of the {searched} series can be searched: "
                                                          f"{skipped[0]}")
    for line in skipped:
        print(f"perfgate: left out {line}", file=sys.stderr)
    print(f"{STATISTIC_WORDS[_statistic(args)]}: each run's value is the median over its repeats")
    print(render_changes(rows))
    return EXIT_OK


def _change_rows(workload: str, key: str, phase: str, series: Any, changes: list[ChangePoint]) -> list[ChangeRow]:
    """One row for ``render_changes`` per change point of ``series`` (``run_series``'s
    table): the commit of the last run before the step and of the first run after it
    (None where a run recorded none), the date of that run, the size and the confidence."""
    out = []
    for change in changes:
        before, after = series.iloc[change.index - 1], series.iloc[change.index]
        out.append(ChangeRow(workload=workload, environment_key=key, phase=phase,
                             commit_before=before["commit"] if isinstance(before["commit"], str) else None,
                             commit_after=after["commit"] if isinstance(after["commit"], str) else None,
                             date_after=after["date"].to_pydatetime(), ratio=change.ratio,
                             confidence=change.confidence))
    return out


def cmd_html(args: argparse.Namespace) -> int:
    store = store_of(args)
    from perfgate.report.dashboard import write_dashboard

    baselines = None if args.no_baselines else load_settings(
        Path(args.config), {"baselines": args.baselines}).baselines
    path = write_dashboard(load_table(store), Path(args.dir), baselines_root=baselines, title=args.title,
                           statistic=_statistic(args), by_runner=args.by_runner)
    print(f"perfgate: wrote {path}", file=sys.stderr)
    return EXIT_OK


def cmd_migrate(args: argparse.Namespace) -> int:
    store = store_of(args)
    before, after = migrate(store)
    if before == 0:
        print(f"perfgate: created the history store at {store} (schema version {after})", file=sys.stderr)
    elif before < after:
        print(f"perfgate: brought the history store at {store} from schema version {before} to {after}",
              file=sys.stderr)
    else:
        print(f"perfgate: the history store at {store} is at schema version {after} already", file=sys.stderr)
    return EXIT_OK


def cmd_copy(args: argparse.Namespace) -> int:
    source = parse_location(args.source, origin="SRC")
    destination = parse_location(args.destination, origin="DST")
    counts = copy(source, destination, replace=args.replace)
    print(f"perfgate: copied {counts['runs']} run(s) from {source} to {destination}: "
          f"{', '.join(f'{n} {table}' for table, n in counts.items())} rows, each table counted on both sides",
          file=sys.stderr)
    return EXIT_OK


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", metavar="PATH|URL",
                        help=f"the history store: an SQLite file, or postgresql://[user@]host[:port]/database "
                             f"(its password in PGPASSWORD, ~/.pgpass or a service file, never in the URL) "
                             f"(default: {URL_ENV}, else [tool.perfgate] history, else perfgate-history.sqlite "
                             "beside the pyproject)")
    parser.add_argument("--config", default="pyproject.toml", metavar="PYPROJECT",
                        help="where [tool.perfgate] is read from (default: ./pyproject.toml)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show more detail on errors")


def add_parser(subparsers: Any) -> None:
    """Add ``perfgate history`` and its commands ``record``, ``export``, ``changes``, ``html``, ``migrate``
    and ``copy``."""
    h = subparsers.add_parser(
        "history", help="record runs in the history store (SQLite or PostgreSQL), export it, find lasting steps",
        description="The history store keeps every recorded run of every workload (per repeat, the time per step, "
                    "median and share of each phase, samples/s, peak memory, counters per step, the runner) in one "
                    "SQLite file or on a PostgreSQL server shared by several runners.",
        epilog="exit codes: 0 done, 2 error or bad input (the store is then left as it was)")
    commands = h.add_subparsers(dest="history_command", required=True, metavar="COMMAND")

    r = commands.add_parser(
        "record", help="append the runs of a results folder to the history store",
        description="Append the runs in DIR (what perfgate run, gate and ci write there: <workload>.json with "
                    "<workload>.counters.json beside it; of a paired run the head side only, not base/) to the "
                    "history store, in one transaction: all of them or, on any error, none. A run already "
                    "recorded (same workload, commit, measurement time and environment key) is refused.",
        epilog="exit codes: 0 recorded, 2 error or bad input (nothing recorded). "
               "Example: perfgate history record --results perfgate-results --branch main")
    r.add_argument("--results", required=True, metavar="DIR", help="the results folder (perfgate run --out)")
    r.add_argument("--design", choices=DESIGNS,
                   help="the design the results were measured in; default: as measured (paired when in ABBA "
                        "blocks), and a different value is refused")
    r.add_argument("--branch", metavar="NAME", help="the branch the commit was measured on (recorded as given)")
    r.add_argument("--runner", metavar="NAME",
                   help="the runner that measured the results (default: RUNNER_NAME, else this machine's host name)")
    _store_options(r)
    r.set_defaults(func=cmd_record)

    e = commands.add_parser(
        "export", help="write the history as a table: one row per run, repeat and phase",
        description="Write the long table (one row per workload, run, repeat and phase: the columns of "
                    "perfgate.analysis.history.load) as CSV, Parquet or JSON records.",
        epilog="exit codes: 0 written, 2 error or bad input (no partial file is left)")
    e.add_argument("--format", required=True, choices=FORMATS, help="csv, parquet (needs --out) or json")
    # its own --out, one file of the table, not the gate's results folder
    e.add_argument("--out", dest="out_file", metavar="FILE", help="where to write (default: stdout for csv and json)")
    _store_options(e)
    e.set_defaults(func=cmd_export)

    c = commands.add_parser(
        "changes", help="lasting steps in each workload's per-run times, with their commit range",
        description="For each workload (or WORKLOAD) and environment key, the per-run series of a phase (the "
                    "median over each run's repeats of their time per step, or of their median step), and each "
                    "lasting step in it: the commits either side, its size and its confidence.",
        epilog="exit codes: 0 done (steps or none), 2 error or bad input (a series too short for the method)")
    c.add_argument("workload", nargs="?", metavar="WORKLOAD", help="one workload (default: every one recorded)")
    c.add_argument("--phase", default="step", choices=ROWS, help="the row whose series is searched (default: step)")
    c.add_argument("--environment", metavar="KEY", help="only the runs of this environment key")
    c.add_argument("--statistic", default=PER_STEP, choices=STATISTICS, help=STATISTIC_HELP)
    _store_options(c)
    c.set_defaults(func=cmd_changes)

    d = commands.add_parser(
        "html", help="write a static dashboard (index.html) of trend plots and change points",
        description="Write DIR/index.html: per workload and environment key, the per-run times of the step and "
                    "each phase, the change points with their commits, the stored baseline's level. One "
                    "self-contained file (no server; publishable to GitHub Pages).",
        epilog="exit codes: 0 written (also for an empty history), 2 error or bad input (nothing written)")
    d.add_argument("dir", metavar="DIR", help="the folder to write index.html into (created if missing)")
    options.add_options(d, ("baselines",), help={"baselines": "the baseline store (default: [tool.perfgate] "
                                                               "baselines)"})
    d.add_argument("--no-baselines", action="store_true", help="draw no baseline lines")
    d.add_argument("--title", default="perfgate history", help="the page's heading")
    d.add_argument("--statistic", default=PER_STEP, choices=STATISTICS, help=STATISTIC_HELP)
    d.add_argument("--by-runner", action=argparse.BooleanOptionalAction, default=True,
                   help="one series per runner where a workload's runs come from two or more runners, each with "
                        "its own change points (default); --no-by-runner draws all runs as one series")
    _store_options(d)
    d.set_defaults(func=cmd_html)

    m = commands.add_parser(
        "migrate", help="create the history store, or bring it forward to this perfgate's schema",
        description=f"Create the history store (SQLite or PostgreSQL) when it is missing or empty, or bring a store "
                    f"of an older schema forward to version {HISTORY_SCHEMA_VERSION}, in one transaction (the data "
                    "kept; version 1's runs keep their median step and have no time per step). A store of a "
                    "newer schema is refused. perfgate history record does the same before it records.",
        epilog="exit codes: 0 created, upgraded or already current, 2 error (the store left as it was)")
    _store_options(m)
    m.set_defaults(func=cmd_migrate)

    k = commands.add_parser(
        "copy", help="copy a whole history store into another (SQLite into PostgreSQL, and back)",
        description="Copy every run of SRC into DST (each an SQLite file or a postgresql:// URL), run ids kept, in "
                    "one transaction on DST, which is created or brought forward when needed. Each table of DST is "
                    "counted after the copy and must hold as many rows as SRC's, else nothing is written. DST "
                    "must hold no run, unless --replace. SRC is only read, and must be at the current schema "
                    "(perfgate history migrate --history SRC).",
        epilog="exit codes: 0 copied, 2 error or bad input (DST left as it was). Example: PGPASSWORD=... "
               "perfgate history copy perfgate-history.sqlite postgresql://recorder@db.internal/perfgate")
    k.add_argument("source", metavar="SRC", help="the store to copy from (a path or a postgresql:// URL)")
    k.add_argument("destination", metavar="DST", help="the store to copy into (a path or a postgresql:// URL)")
    k.add_argument("--replace", action="store_true", help="delete DST's runs first (in the same transaction)")
    k.add_argument("-v", "--verbose", action="store_true", help="show more detail on errors")
    k.set_defaults(func=cmd_copy)
