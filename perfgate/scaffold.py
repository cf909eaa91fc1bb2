"""``perfgate init [DIR]``: set a repository up for perfgate.

It writes an example workload (the README's "Writing your own workload"), an empty
``baselines/`` store with a short README, the ``[tool.perfgate]`` settings and the GitHub
workflows (tests on a hosted runner, the gate on a self-hosted T4, the sticky comment,
the rebaseline workflow). Every file comes from ``perfgate/templates/``, the same files
perfgate's own ``.github/workflows/`` is tested against.

It never overwrites a file: each one is reported as created or kept. ``pyproject.toml``
is written only when the repository has none (then it holds the ``[tool.perfgate]`` table
alone); an existing one is never edited, and when it lacks the table the command prints
the table to add.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.errors import EXIT_ERROR, EXIT_OK, PerfgateError, UsageError

TEMPLATES = Path(__file__).resolve().parent / "templates"
PYPROJECT_TEMPLATE = "tool_perfgate.toml"
# (file written in the repository, template it is copied from)
FILES: tuple[tuple[str, str], ...] = (
    ("workloads/my_model.py", "workloads/my_model.py.tmpl"),
    ("baselines/README.md", "baselines/README.md"),
    ("pyproject.toml", PYPROJECT_TEMPLATE),
    (".github/workflows/ci.yml", "workflows/ci.yml"),
    (".github/workflows/perfgate.yml", "workflows/perfgate.yml"),
    (".github/workflows/perfgate-comment.yml", "workflows/perfgate-comment.yml"),
    (".github/workflows/rebaseline.yml", "workflows/rebaseline.yml"),
    (".github/actionlint.yaml", "actionlint.yaml"),
)
CREATED, KEPT = "created", "kept"


@dataclass(frozen=True)
class Scaffolded:
    path: str              # relative to the repository
    status: str            # CREATED or KEPT
    note: str = ""
    add_settings: bool = False  # an existing pyproject.toml without [tool.perfgate]


def template_text(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def _pyproject_note(path: Path) -> tuple[str, bool]:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
        return f"exists but could not be read as TOML ({exc}); add the [tool.perfgate] table below", True
    tool = data.get("tool")
    if isinstance(tool, dict) and "perfgate" in tool:
        return "exists and has [tool.perfgate]", False
    return "exists without [tool.perfgate], not edited: add the table below", True


def scaffold(target: Path) -> list[Scaffolded]:
    """Write the missing files into ``target`` (created if needed); never overwrite one."""
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: not a directory")
    target.mkdir(parents=True, exist_ok=True)
    done = []
    for relative, template in FILES:
        path = target / relative
        if path.exists() or path.is_symlink():
            note, add = _pyproject_note(path) if relative == "pyproject.toml" else ("exists", False)
            done.append(Scaffolded(relative, KEPT, note, add))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # "x": a file that appeared since the check above is still not overwritten.
            with open(path, "x", encoding="utf-8") as handle:
                handle.write(template_text(template))
        except FileExistsError:
            done.append(Scaffolded(relative, KEPT, "exists"))
            continue
        done.append(Scaffolded(relative, CREATED))
    return done


def next_steps(target: Path) -> list[str]:
    steps = [
        "Edit workloads/my_model.py to build your model, optimizer and data (perfgate's README, "
        "\"Writing your own workload\"), and list it in [tool.perfgate] workloads.",
        "The workflows install your repository with `pip install -c constraints.txt -e .`: your "
        "pyproject.toml's [project] must depend on perfgate and torch, and constraints.txt pins the "
        "environment (the pip cache is keyed on it). Otherwise edit the \"Install\" steps of "
        "perfgate.yml, rebaseline.yml and ci.yml.",
        "Register the T4 runner with the labels self-hosted, linux, x64, gpu, t4, and create the label "
        "perfgate:run (a maintainer applies it to let a fork's pull request run).",
        "Record the first baseline: run the \"perfgate rebaseline\" workflow (or `perfgate rebaseline "
        "--device cuda --reason \"first baseline\"` on the runner) and merge the pull request it opens.",
    ]
    if not (target / "constraints.txt").exists():
        steps.insert(1, "There is no constraints.txt yet: create it from your reference environment, e.g. "
                        "`pip freeze --exclude-editable > constraints.txt`.")
    return steps


def cmd_init(args: argparse.Namespace) -> int:
    target = Path(args.directory)
    try:
        done = scaffold(target)
    except PerfgateError as exc:
        print(f"perfgate: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"perfgate: error: {target}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"perfgate init: {target.resolve()}")
    width = max(len(d.path) for d in done)
    for d in done:
        print(f"  {d.status:<7}  {d.path.ljust(width)}  ({d.note})" if d.note else f"  {d.status:<7}  {d.path}")
    if any(d.add_settings for d in done):
        print("\nAdd to pyproject.toml:\n")
        print(template_text(PYPROJECT_TEMPLATE), end="")
    print("\nNext steps:")
    for number, step in enumerate(next_steps(target), 1):
        print(f"  {number}. {step}")
    return EXIT_OK


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``perfgate init`` to the ``perfgate`` command line."""
    p = subparsers.add_parser(
        "init", help="set a repository up for perfgate: example workload, baselines/, settings, workflows",
        description="Write an example workload, an empty baselines/ store, the [tool.perfgate] settings "
                    "(only into a new pyproject.toml; an existing one is never edited) and the GitHub "
                    "workflows. Existing files are never overwritten; each file is reported as created or kept.",
    )
    p.add_argument("directory", nargs="?", default=".", metavar="DIR",
                   help="the repository to set up (default: the current directory)")
    p.set_defaults(func=cmd_init)
    return p
