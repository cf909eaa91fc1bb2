"""``perfgate init [DIR]``: set a repository up for perfgate.

It writes an example workload (the README's "Writing your own workload"), an empty
``baselines/`` store with a short README, the ``[tool.perfgate]`` settings, the GitHub
workflows (tests on a hosted runner, the measurement on a self-hosted T4, the judge that
posts the comment and sets the ``perfgate`` commit status, the rebaseline workflow) and
a ``.github/CODEOWNERS`` proposal for the gate's inputs. Every file comes from
``perfgate/adapters/templates/``, the same files perfgate's own ``.github/workflows/`` is tested
against.

With ``--shards N`` (2 or more), the measuring and judging workflows are the sharded
ones (``templates/workflows-sharded/``): a GitHub Actions matrix of N jobs, each on its
own runner measuring its share (``perfgate ci --shard I/N``), and the judge as the fan-in
that downloads every shard's results and judges them together (``perfgate judge DIR...``).

It never overwrites a file: each one is reported as created or kept. ``pyproject.toml``
is written only when the repository has none (then it holds the ``[tool.perfgate]`` table
alone); an existing one is never edited, and when it lacks the table the command prints
the table to add. CODEOWNERS likewise: when the repository has one (in any of the three
places GitHub looks), the rules it lacks are printed, not written. The owners come from
``--owners``; without it the rules are written commented out, with a placeholder owner,
because GitHub reports an active rule whose owner does not exist as an error.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from perfgate.model.errors import EXIT_ERROR, EXIT_OK, PerfgateError, UsageError
from perfgate.model.shard import MAX_SHARDS

TEMPLATES = Path(__file__).resolve().parent / "templates"
PYPROJECT_TEMPLATE = "tool_perfgate.toml"
# (file written in the repository, template it is copied from)
FILES: tuple[tuple[str, str], ...] = (
    ("workloads/my_model.py", "workloads/my_model.py.tmpl"),
    ("baselines/README.md", "baselines/README.md"),
    ("pyproject.toml", PYPROJECT_TEMPLATE),
    (".github/workflows/ci.yml", "workflows/ci.yml"),
    (".github/workflows/perfgate.yml", "workflows/perfgate.yml"),
    (".github/workflows/perfgate-judge.yml", "workflows/perfgate-judge.yml"),
    (".github/workflows/rebaseline.yml", "workflows/rebaseline.yml"),
    (".github/workflows/perfgate-history.yml", "workflows/perfgate-history.yml"),
    (".github/actionlint.yaml", "actionlint.yaml"),
)
# With --shards N: these files come from the sharded templates, with N written in.
SHARDED: dict[str, str] = {
    ".github/workflows/perfgate.yml": "workflows-sharded/perfgate.yml",
    ".github/workflows/perfgate-judge.yml": "workflows-sharded/perfgate-judge.yml",
}
# The lines of the sharded templates that hold the number of shards (2 in the templates).
SHARDS_LINE = '  PERFGATE_SHARDS: "{n}"\n'
MATRIX_LINE = "        shard: [{shards}]\n"
# CODEOWNERS is rendered from its template (owners, the configured paths), not copied.
CODEOWNERS = ".github/CODEOWNERS"
CODEOWNERS_TEMPLATE = "CODEOWNERS"
# Where GitHub looks for the file, in its order: any of them counts as existing.
CODEOWNERS_LOCATIONS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")
PLACEHOLDER_OWNER = "@your-org/your-team"
# A GitHub user (@name) or team (@org/team). User and organisation names: letters, digits
# and single inner hyphens, at most 39 characters; a team's slug: letters, digits, '-', '_'.
OWNER_RE = re.compile(r"@[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}(?:/[A-Za-z0-9][A-Za-z0-9_-]{0,99})?")
# A repository path that CODEOWNERS takes as it is (no spaces, globs, escapes or comments).
PLAIN_PATH_RE = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")
CREATED, KEPT = "created", "kept"


@dataclass(frozen=True)
class Scaffolded:
    path: str              # relative to the repository
    status: str            # CREATED or KEPT
    note: str = ""
    add_settings: bool = False  # an existing pyproject.toml without [tool.perfgate]
    add_lines: str = ""    # lines to add to an existing file (CODEOWNERS)


WORKLOADS_LINE = 'workloads = ["my-model"]         # the workloads the gate runs (default: every one found)\n'
EXAMPLE_WORKLOAD = "workloads/my_model.py"


def settings_text(scripts: Sequence[str] = ()) -> str:
    """The ``[tool.perfgate]`` table ``init`` writes: with ``scripts`` (each ``"PATH ARGS"``),
    they are what the gate runs, in place of the example workload."""
    text = template_text(PYPROJECT_TEMPLATE)
    if not scripts:
        return text
    assert WORKLOADS_LINE in text
    listed = ", ".join(json.dumps(s) for s in scripts)  # a JSON string is a TOML basic string
    return text.replace(WORKLOADS_LINE, f"scripts = [{listed}]  # the training scripts the gate runs as they are "
                                        "(docs/script.md)\n")


def parse_scripts(values: Sequence[str] | None, target: Path) -> tuple[str, ...]:
    """``--script "PATH [ARGS...]"`` values, checked: split as a shell would, the file there in
    ``target``, one name per script; a UsageError otherwise (nothing is written)."""
    from perfgate.model.script import Script, script_words

    scripts: list[str] = []
    names: dict[str, str] = {}
    for value in values or ():
        path, args = script_words(value, "--script")
        if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
            raise UsageError(f"--script {path}: give the path inside the repository, relative to it")
        if not (target / path).is_file():
            raise UsageError(f"--script {path}: no such file in {target.resolve()}")
        name = Script(Path(path)).default_name()
        if name in names:
            raise UsageError(f"--script {path}: its results would be {name}, as {names[name]}'s are")
        names[name] = path
        scripts.append(shlex.join([path, *args]))
    return tuple(scripts)


def template_text(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def parse_shards(value: str | None) -> int:
    """``--shards N``: the number of runners the gate is sharded over (None: 1, unsharded)."""
    if value is None:
        return 1
    if not re.fullmatch(r"[0-9]{1,6}", value.strip()) or not 1 <= int(value) <= MAX_SHARDS:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise UsageError(f"--shards {shown!r}: expected a number of runners from 1 to {MAX_SHARDS}")
    return int(value)


def render_sharded(text: str, shards: int) -> str:
    """A sharded template with ``shards`` written in: ``PERFGATE_SHARDS`` and, in the
    measuring workflow, the matrix's list of shards."""
    template_line, line = SHARDS_LINE.format(n=2), SHARDS_LINE.format(n=shards)
    if text.count(template_line) != 1:
        raise ValueError("a sharded template must set PERFGATE_SHARDS once")
    text = text.replace(template_line, line)
    matrix = MATRIX_LINE.format(shards="1, 2")
    if text.count(matrix) > 1:
        raise ValueError("a sharded template holds one matrix of shards at most")
    return text.replace(matrix, MATRIX_LINE.format(shards=", ".join(str(i) for i in range(1, shards + 1))))


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


def parse_owners(values: Sequence[str] | None) -> tuple[str, ...]:
    """The owners given to ``--owners`` (each value holds one or more handles, separated by
    commas or spaces), checked; a bad one is a :class:`UsageError`."""
    owners: list[str] = []
    for value in values or ():
        handles = [h for h in re.split(r"[,\s]+", value) if h]
        if not handles:
            raise UsageError("--owners: empty; give GitHub users or teams, e.g. --owners @org/team")
        for handle in handles:
            if not OWNER_RE.fullmatch(handle):
                shown = handle if len(handle) <= 60 else handle[:57] + "..."
                raise UsageError(f"--owners: {shown!r} is not a GitHub user or team (@name or @org/team)")
            if handle.lower() not in (o.lower() for o in owners):
                owners.append(handle)
    return tuple(owners)


def _codeowners_path(value: object) -> str | None:
    """``value`` (a path from [tool.perfgate], relative to the repository) as a CODEOWNERS
    path (``/perf/baselines``), or None when it is not a plain path inside the repository."""
    if not isinstance(value, str):
        return None
    path = PurePosixPath(value.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts:
        return None
    relative = path.as_posix().removeprefix("./").strip("/")
    if relative in ("", ".") or not PLAIN_PATH_RE.fullmatch(relative):
        return None
    return "/" + relative


def gate_paths(target: Path) -> list[str]:
    """The paths CODEOWNERS should cover that come from ``[tool.perfgate]``: the baseline
    store (``/baselines/`` by default) and any extra workload paths. An unreadable
    pyproject.toml or a path outside the repository leaves the default."""
    table: dict[str, Any] = {}
    try:
        with open(target / "pyproject.toml", "rb") as handle:
            tool = tomllib.load(handle).get("tool")
        if isinstance(tool, dict) and isinstance(tool.get("perfgate"), dict):
            table = tool["perfgate"]
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
        pass
    baselines = _codeowners_path(table.get("baselines", "baselines")) or "/baselines"
    extra = table.get("workloads_path", ())
    workload_paths = []
    for value in [extra] if isinstance(extra, str) else extra if isinstance(extra, list) else ():
        path = _codeowners_path(value)
        if path is None or path == "/workloads":
            continue
        # A file is owned by its path; a folder (or one not there yet) by its contents too.
        path = path if (target / path[1:]).is_file() else path + "/"
        if path not in workload_paths:
            workload_paths.append(path)
    return [f"{baselines}/", *workload_paths]


def codeowners_rules(target: Path) -> list[str]:
    """The paths of the template's rules, in order, with the configured ones filled in."""
    baselines, *workload_paths = gate_paths(target)
    paths: list[str] = []
    for line in template_text(CODEOWNERS_TEMPLATE).splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        path = line.split()[0]
        expanded = {"{{baselines}}": [baselines], "{{workloads_path}}": workload_paths}.get(path, [path])
        paths.extend(p for p in expanded if p not in paths)
    return paths


def _rule_lines(paths: Sequence[str], owners: Sequence[str]) -> list[str]:
    width = max(len(p) for p in paths)
    return [f"{path.ljust(width)}  {' '.join(owners)}" for path in paths]


def render_codeowners(target: Path, owners: Sequence[str]) -> str:
    """The CODEOWNERS file ``init`` writes: the template's comments, then its rules, with
    ``owners``; without owners, every rule commented out, with a placeholder owner, under a
    first line that says to replace it and uncomment."""
    rules = _rule_lines(codeowners_rules(target), owners or [PLACEHOLDER_OWNER])
    lines = []
    if not owners:
        lines.append(f"# Replace {PLACEHOLDER_OWNER} below with your owners (GitHub users or teams, "
                     "e.g. @org/perf-owners) and uncomment the rules.")
    in_rules = False
    for line in template_text(CODEOWNERS_TEMPLATE).splitlines():
        if line.strip() and not line.startswith("#"):
            if not in_rules:
                lines.extend(rules if owners else ["# " + rule for rule in rules])
                in_rules = True
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def _active_paths(text: str) -> set[str]:
    """The paths of the active rules of a CODEOWNERS file (any owner), without a trailing
    slash: ``/baselines`` owns the folder as ``/baselines/`` does."""
    paths = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            paths.add(line.split()[0].rstrip("/"))
    return paths


def _codeowners(target: Path, owners: Sequence[str]) -> Scaffolded:
    existing = next((loc for loc in CODEOWNERS_LOCATIONS
                     if (target / loc).exists() or (target / loc).is_symlink()), None)
    paths = codeowners_rules(target)
    if existing is None:
        path = target / CODEOWNERS
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # "x": a file that appeared since the check above is still not overwritten.
            with open(path, "x", encoding="utf-8") as handle:
                handle.write(render_codeowners(target, owners))
        except FileExistsError:
            existing = CODEOWNERS
        else:
            return Scaffolded(CODEOWNERS, CREATED, "" if owners else "rules commented out: no --owners given")
    try:
        text = (target / existing).read_text(encoding="utf-8", errors="replace")
        active = _active_paths(text)
        missing = [p for p in paths if p.rstrip("/") not in active]
        note = (f"exists without rules for {', '.join(missing)}; not edited: add the lines below"
                if missing else "exists and has rules for the gate's inputs")
    except OSError as exc:
        missing = paths
        note = f"exists but could not be read ({exc}); add the lines below"
    lines = "\n".join(_rule_lines(missing, owners or [PLACEHOLDER_OWNER])) + "\n" if missing else ""
    return Scaffolded(existing, KEPT, note, add_lines=lines)


def scaffold(target: Path, owners: Sequence[str] = (), shards: int = 1,
             scripts: Sequence[str] = ()) -> list[Scaffolded]:
    """Write the missing files into ``target`` (created if needed); never overwrite one.
    ``owners`` (checked by :func:`parse_owners`) own the CODEOWNERS rules; ``shards``
    above 1 writes the sharded measuring and judging workflows for that many runners;
    ``scripts`` (checked by :func:`parse_scripts`) are gated in place of an example workload."""
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: not a directory")
    target.mkdir(parents=True, exist_ok=True)
    done = []
    for relative, template in FILES:
        if scripts and relative == EXAMPLE_WORKLOAD:
            continue
        path = target / relative
        if path.exists() or path.is_symlink():
            note, add = _pyproject_note(path) if relative == "pyproject.toml" else ("exists", False)
            done.append(Scaffolded(relative, KEPT, note, add))
            continue
        sharded = shards > 1 and relative in SHARDED
        if sharded:
            text = render_sharded(template_text(SHARDED[relative]), shards)
        else:
            text = settings_text(scripts) if template == PYPROJECT_TEMPLATE else template_text(template)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # "x": a file that appeared since the check above is still not overwritten.
            with open(path, "x", encoding="utf-8") as handle:
                handle.write(text)
        except FileExistsError:
            done.append(Scaffolded(relative, KEPT, "exists"))
            continue
        done.append(Scaffolded(relative, CREATED, f"sharded over {shards} runners" if sharded else ""))
    # Last: it reads the baseline store's location from the pyproject.toml now in place.
    done.append(_codeowners(target, owners))
    return done


def next_steps(target: Path, done: Sequence[Scaffolded] = (), owners: Sequence[str] = (),
               shards: int = 1, scripts: Sequence[str] = ()) -> list[str]:
    first = (
        f"Try the script{'s' if len(scripts) > 1 else ''} here: `perfgate run --device cpu` runs "
        f"{', '.join(scripts)} as {'they are' if len(scripts) > 1 else 'it is'} (perfgate's docs/script.md): "
        f"{'each' if len(scripts) > 1 else 'it'} must step one torch.optim optimizer, and train for 10 warmup + "
        "50 measured steps at least (or set them with --warmup/--steps)."
        if scripts else
        "Edit workloads/my_model.py to build your model, optimizer and data (perfgate's README, "
        "\"Writing your own workload\"), and list it in [tool.perfgate] workloads.")
    steps = [
        first,
        "The measuring workflow installs the base commit's project with its constraints.txt, ci.yml and "
        "the rebaseline run `pip install -c constraints.txt -e .`, and the judge and the history's recording "
        "job (a hosted runner, when PERFGATE_HISTORY_URL is set) install the perfgate "
        "that constraints.txt pins: your pyproject.toml's [project] must depend on perfgate and torch, "
        "and constraints.txt pins the environment, perfgate included. Otherwise edit the workflows' "
        "\"Install\" steps.",
        "Register the T4 runner as an ephemeral runner (one job per fresh VM or container; perfgate's "
        "README, \"Setting up the T4 runner\") with the labels self-hosted, linux, x64, gpu, t4, and create "
        "the label perfgate:run (a maintainer applies it to let a fork's pull request run).",
        "Record the first baseline: run the \"perfgate rebaseline\" workflow (or `perfgate rebaseline "
        "--device cuda --reason \"first baseline\"` on the runner) and merge the pull request it opens.",
        "Make the `perfgate` commit status a required check in the default branch's protection "
        "(Settings > Branches, or a ruleset: \"Require status checks to pass\"), with GitHub Actions as its "
        "expected source, and require a review from Code Owners. The \"perfgate judge\" workflow sets it "
        "(pass, regression, error; pending while a fork waits for its label) once that workflow is on the "
        "default branch: it is the verdict, not the measuring job's own check. Do not require the `perfgate "
        "verdict` check run in this setup (a workflow job of that name is a check run of that name). A pull "
        "request that edits its workflows can still write a check or status named `perfgate`: the Code "
        "Owners review of .github/ is the control, and a dedicated GitHub App as the expected source of the "
        "check closes it (perfgate's docs/ci.md, \"The required check\"). Create the label "
        "`perfgate: accept slowdown`: applied after a REGRESSION by someone other than the pull request's "
        "author and the commit's pusher, with maintain or admin access or a code owner of a changed file "
        "(`accept_by` in [tool.perfgate]), it accepts that commit's slowdown in that pull request; a push "
        "makes it stale.",
    ]
    if shards > 1:
        steps.insert(3, f"The gate is sharded over {shards} runners: register {shards} alike ones (the same GPU, "
                        "driver, CUDA and CPU, so that one baseline holds on all). To change the number, edit "
                        "PERFGATE_SHARDS and the matrix's shard list in perfgate.yml and PERFGATE_SHARDS in "
                        "perfgate-judge.yml together.")
    codeowners = next((d for d in done if d.path in CODEOWNERS_LOCATIONS), None)
    if codeowners is not None:
        if codeowners.status == CREATED and not owners:
            review = (f"Review {codeowners.path}: replace {PLACEHOLDER_OWNER} with your owners and uncomment "
                      "the rules (or delete it and run `perfgate init --owners @org/team`)")
        elif codeowners.add_lines:
            review = f"Review {codeowners.path}: add the lines printed above"
        else:
            review = f"Review {codeowners.path}"
        steps.append(review + ", then turn on \"Require review from Code Owners\" in the same branch "
                              "protection, so that edits to the gate's inputs need an owner's review.")
    if not (target / "constraints.txt").exists():
        steps.insert(1, "There is no constraints.txt yet: create it from your reference environment, e.g. "
                        "`pip freeze --exclude-editable > constraints.txt`.")
    return steps


def cmd_init(args: argparse.Namespace) -> int:
    target = Path(args.directory)
    try:
        owners = parse_owners(args.owners)
        shards = parse_shards(args.shards)
        scripts = parse_scripts(args.scripts, target)
        done = scaffold(target, owners, shards, scripts)
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
        print(settings_text(scripts), end="")
    for d in done:
        if d.add_lines:
            where = "" if owners else (f", with your owners in place of {PLACEHOLDER_OWNER} "
                                       "(or run again with --owners @org/team)")
            print(f"\nAdd to {d.path}{where}, below any broader rule:\n")
            print(d.add_lines, end="")
    print("\nNext steps:")
    for number, step in enumerate(next_steps(target, done, owners, shards, scripts), 1):
        print(f"  {number}. {step}")
    return EXIT_OK


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``perfgate init`` to the ``perfgate`` command line."""
    p = subparsers.add_parser(
        "init", help="set a repository up for perfgate: example workload, baselines/, settings, workflows, "
                     "CODEOWNERS",
        description="Write an example workload (or, with --script, list your training scripts in the settings "
                    "instead), an empty baselines/ store, the [tool.perfgate] settings "
                    "(only into a new pyproject.toml; an existing one is never edited), the GitHub "
                    "workflows and a .github/CODEOWNERS for the gate's inputs. Existing files are never "
                    "overwritten; each file is reported as created or kept.",
    )
    p.add_argument("directory", nargs="?", default=".", metavar="DIR",
                   help="the repository to set up (default: the current directory)")
    p.add_argument("--owners", action="append", metavar="HANDLES",
                   help="the owners of the gate's inputs in CODEOWNERS: GitHub users or teams (@name, "
                        "@org/team), separated by commas or spaces, or the option repeated. Without it "
                        "the CODEOWNERS rules are written commented out, with a placeholder owner")
    p.add_argument("--shards", metavar="N",
                   help="shard the gate over N self-hosted runners: perfgate.yml runs a matrix of N jobs, each "
                        "measuring its share of the workloads (perfgate ci --shard I/N), and perfgate-judge.yml "
                        "downloads every shard's results and judges them together, Holm over all workloads "
                        "(default 1: one runner measures them all)")
    # init's own --script, not the selection's row (one script run now, its arguments after --): the
    # scripts init lists in [tool.perfgate] scripts, each with its arguments in one quoted value
    p.add_argument("--script", dest="scripts", action="append", metavar="'PATH [ARGS...]'",
                   help="gate this training script as it is (repeatable; the path inside DIR, then its arguments, "
                        "in one quoted value): [tool.perfgate] scripts lists it, and no example workload is written")
    p.set_defaults(func=cmd_init)
    return p
