from __future__ import annotations

import shlex
import shutil
import signal
import sys
from pathlib import Path

import pytest
from factories import BASE_SETTINGS, define_workloads, fake, git

FIXTURES = Path(__file__).parent / "fixtures"

# The history store's engines (``backend``, parametrized SQLite and PostgreSQL) and the
# session's PostgreSQL server (``postgres``): tests/pg_server.py.
pytest_plugins = ["pg_server"]


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as an interactive shell delivers it, whatever started the suite: a background
    job of a non-interactive shell (``cmd &``, ``nohup``) starts with SIGINT ignored, which
    Python then leaves ignored and every process it starts inherits, so the tests that
    interrupt a gate (tests/test_interrupted.py, tests/test_process_groups.py) would wait
    out their repeats' timeouts instead. A handler, unlike an ignored signal, is reset to
    the default in a started program."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def design_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own design folder (``windows = "auto"``'s evidence): never the user's cache,
    and never what another test's gates left."""
    folder = tmp_path_factory.mktemp("design")
    monkeypatch.setenv("PERFGATE_DESIGN_DIR", str(folder))
    return folder


@pytest.fixture
def tiny_path(tmp_path: Path) -> Path:
    """A workloads directory holding the tiny test workloads."""
    target = tmp_path / "tiny_workloads"
    target.mkdir()
    shutil.copy(FIXTURES / "tiny_workloads.py", target / "tiny_workloads.py")
    return target


# The fixtures several test modules share; pytest finds them here, so no test imports one.
# A module that needs another meaning defines its own, which wins there (test_shard.py's and
# test_counters.py's ``base``, test_ci.py's and test_script_gate.py's ``repo``).


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The base commit's folder the judge reads its rules from: settings, no baselines yet,
    the workload ``tiny`` defined (tests/test_judge.py and the judge's other tests)."""
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "pyproject.toml").write_text(BASE_SETTINGS)
    (folder / "baselines").mkdir()
    define_workloads(folder, "tiny")
    return folder


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """Fake commands first on a workflow step's PATH (tests/test_workflows.py): a ``sudo``
    that refuses, and the hosted runner's ``python3`` as this test's Python."""
    directory = tmp_path / "bin"
    directory.mkdir()
    fake(directory, "sudo", f'echo "$*" >> "{tmp_path}/sudo-calls"\necho "sudo: a password is required" >&2\nexit 1\n')
    # The hosted runner's python3, as this test's Python (3.11: tomllib).
    fake(directory, "python3", f'exec {shlex.quote(sys.executable)} "$@"\n')
    return directory


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch git repository holding the tiny workloads, one commit, as the working
    directory (tests/test_paired_gate.py, tests/test_counter_gate.py)."""
    root = tmp_path / "project"
    (root / "workloads").mkdir(parents=True)
    shutil.copy(FIXTURES / "tiny_workloads.py", root / "workloads" / "tiny_workloads.py")
    (root / ".gitignore").write_text("perfgate-results/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "tiny workload")
    monkeypatch.chdir(root)
    monkeypatch.setenv("PERFGATE_CACHE_DIR", str(tmp_path / "cache"))
    return root


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects anything, so that it sees the added marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every ``extended`` test is ``slow`` too, and tests marked ``gpu`` are skipped, with the
    reason, where torch has no usable CUDA device.

    The two lanes: ``pytest -m "not slow"`` is the fast one (under three minutes on a shared
    2-core machine). A command-line ``-m`` replaces pyproject's ``-m "not extended"``, so
    the fast lane leaves out the extended runs only because they are slow as well; the
    README's ``pytest -q`` keeps pyproject's selection and runs everything but ``extended``.
    """
    for item in items:
        if item.get_closest_marker("extended") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False here")
    for item in gpu_items:
        item.add_marker(skip)
