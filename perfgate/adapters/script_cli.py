"""``perfgate run|rebaseline|gate|counters|trace --script PATH [-- ARGS]``: the command line's side of a script run.

The options (``--script``, ``--name``, the script's own arguments after ``--``) and what
they become: one job, measured by the runner as a workload is (counted, traced, gated paired
against the base commit's copy of the script), written as the same result file. See
docs/script.md. The job itself is made by :func:`perfgate.adapters.selection.script_jobs`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from perfgate.adapters.options import add_selection_options


def add_script_options(parser: argparse.ArgumentParser) -> None:
    """``--script``, ``--name``, and everything after the first ``--`` as the script's arguments.

    Without ``--script`` a ``--`` keeps its usual meaning (the rest are positional)."""
    add_selection_options(parser, ("script",))  # the row's --script PATH; its arguments are split off below
    parser.add_argument("--name", help="the workload name of a --script result (default: script-<file name>)")
    parser.set_defaults(script_args=[])
    parse = parser.parse_known_args

    def parse_known_args(args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        items = list(sys.argv[1:] if args is None else args)
        if "--" in items:
            at = items.index("--")
            parsed, rest = parse(items[:at], namespace)
            if getattr(parsed, "script", None) is not None:
                parsed.script_args = items[at + 1:]
                return parsed, rest
        return parse(items, namespace)

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign,assignment]  # argparse's method replaced on this one parser
