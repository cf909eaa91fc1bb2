"""Each repeat's process group dies with the repeat (perfgate.measure.child.wait_group).

A workload whose build starts a sleeping grandchild (``sleep``, left running on purpose):
once the repeat has ended, by answering, by failing or because the gate was interrupted
while it ran, that grandchild is gone, forked from a template or started fresh alike.
Real processes on a tiny workload; the grandchild is found by its pid and its own
command line, never by a duration.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from perfgate.measure.child import wait_group
from perfgate.measure.runner import run_one
from perfgate.measure.template import Starter
from perfgate.model.errors import WorkloadError
from perfgate.model.job import Job
from perfgate.store.discovery import discover

pytestmark = pytest.mark.slow

WORKLOAD = '''
import os, subprocess, time
from perfgate import BuildContext, Built, DataSource, Params, Workload


def build(ctx: BuildContext) -> Built:
    import torch
    from torch.utils.data import TensorDataset
    from perfgate.measure.loader import make_loader

    p = ctx.params
    sleeper = subprocess.Popen(["sleep", p.extra["seconds"]], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(p.extra["record"], "a") as f:
        f.write(f"{os.getpid()} {sleeper.pid}\\n")
    if p.extra["then"] == "fail":
        raise RuntimeError("the build fails after starting its helper")
    if p.extra["then"] == "hang":
        time.sleep(600)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 3, 8, 8, generator=g), torch.randint(0, 4, (32,), generator=g))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 4))
    source = DataSource("synthetic", "memory", "seed-0", "generator-seed", 32, "random tensors")
    return Built(model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss(),
                 make_loader(data, ctx), source)


LEAVES = Workload(
    name="leaves", version=1, description="starts a sleeping grandchild and leaves it running", build=build,
    params=Params(batch_size=8, input_size=8, warmup_steps=1, steps=2, num_threads=1,
                  extra={"record": "", "seconds": "600", "then": "measure"}),
)
'''


def _state(pid: int) -> tuple[str, str] | None:
    """(state letter, command line) of a live process ``pid``; None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0], cmdline


def alive(pid: int, seconds: str) -> bool:
    """Is the grandchild ``pid`` (``sleep SECONDS``) still running? A zombie is not."""
    state = _state(pid)
    return state is not None and state[0] not in ("Z", "X") and f"sleep {seconds}" in state[1]


def settled_alive(pid: int, seconds: str) -> bool:
    """:func:`alive`, once a SIGKILL sent just now has had time to land (the kernel delivers
    it asynchronously): polled, never timed; True only when it stays alive throughout."""
    for _ in range(100):
        if not alive(pid, seconds):
            return False
        time.sleep(0.02)
    return True


@pytest.fixture()
def leaves(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "leaves_workload.py").write_text(WORKLOAD)
    # a duration no other process on the machine sleeps for: the command line names ours
    return root, f"{600 + uuid.uuid4().int % 10_000}.{os.getpid() % 1000}"


def job_in(root: Path, **extra: str) -> Job:
    workload = discover([root / "leaves_workload.py"], project_dir=root).get("leaves")
    params = workload.resolve("cpu", extra)
    return Job(workload, params, dict(extra))


def recorded(record: Path) -> list[tuple[int, int]]:
    """(the repeat's pid, its grandchild's) for each repeat that started one."""
    if not record.exists():
        return []
    return [(int(a), int(b)) for a, b in (line.split() for line in record.read_text().splitlines() if line.strip())]


def grandchildren(record: Path) -> list[int]:
    return [grandchild for _, grandchild in recorded(record)]


def repeat_gone(pid: int) -> bool:
    """The repeat's own process has ended and been reaped (or its pid now names something else)."""
    for _ in range(100):
        state = _state(pid)
        if state is None or "perfgate" not in state[1]:
            return True
        time.sleep(0.02)
    return False


def kill_left(pids: list[int], seconds: str) -> None:
    for pid in pids:  # never leave one behind, whatever the assertion said
        if alive(pid, seconds):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("start", ["fork", "fresh"])
def test_a_repeat_that_ends_normally_leaves_no_grandchild(leaves: tuple[Path, str], tmp_path: Path,
                                                          start: str) -> None:
    root, seconds = leaves
    record = tmp_path / "pids.txt"
    try:
        with Starter(start, renew_every=None) as starter:
            response = run_one(job_in(root, record=str(record), seconds=seconds), "cpu", 0, tmp_path / "cache",
                               (None, None), 300.0, False, project_dir=root, starter=starter)
            assert response["ok"]
            assert response["repeat"]["torch_settings"]["process_start"] == start
            (pid,) = grandchildren(record)
            assert not settled_alive(pid, seconds), "the repeat's grandchild outlived it"
    finally:
        kill_left(grandchildren(record), seconds)


@pytest.mark.parametrize("start", ["fork", "fresh"])
def test_a_repeat_that_fails_leaves_no_grandchild(leaves: tuple[Path, str], tmp_path: Path, start: str) -> None:
    root, seconds = leaves
    record = tmp_path / "pids.txt"
    try:
        with Starter(start, renew_every=None) as starter:
            with pytest.raises(WorkloadError, match="the build fails after starting its helper"):
                run_one(job_in(root, record=str(record), seconds=seconds, then="fail"), "cpu", 0,
                        tmp_path / "cache", (None, None), 300.0, False, project_dir=root, starter=starter)
            (pid,) = grandchildren(record)
            assert not settled_alive(pid, seconds)
    finally:
        kill_left(grandchildren(record), seconds)


@pytest.mark.parametrize("start", ["fork", "fresh"])
def test_a_repeat_interrupted_while_it_runs_leaves_nothing_behind(leaves: tuple[Path, str], tmp_path: Path,
                                                                  start: str) -> None:
    """Ctrl-C in the parent while the repeat runs (its build hangs once the grandchild is
    started): the KeyboardInterrupt reaches the caller, and the repeat and its grandchild
    are gone once the starter is closed, as the gate closes it."""
    root, seconds = leaves
    record = tmp_path / "pids.txt"
    main = threading.get_ident()

    def interrupt_once_started() -> None:
        while not grandchildren(record):
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)

    watcher = threading.Thread(target=interrupt_once_started, daemon=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            with Starter(start, renew_every=None) as starter:
                watcher.start()
                run_one(job_in(root, record=str(record), seconds=seconds, then="hang"), "cpu", 0,
                        tmp_path / "cache", (None, None), 300.0, False, project_dir=root, starter=starter)
        watcher.join()
        ((repeat, pid),) = recorded(record)
        assert not settled_alive(pid, seconds)
        assert repeat_gone(repeat), "the interrupted repeat is still running"
    finally:
        kill_left(grandchildren(record), seconds)


def test_wait_group_kills_the_group_it_waits_for_and_reports_the_status(tmp_path: Path) -> None:
    """The helper alone: a shell that starts a sleeper in its group and exits 7."""
    import subprocess

    seconds = f"{700 + uuid.uuid4().int % 10_000}.5"
    proc = subprocess.Popen(["sh", "-c", f"sleep {seconds} & echo $! > {tmp_path / 'pid'}; exit 7"],
                            start_new_session=True)
    try:
        assert wait_group(proc.pid, 60.0) == 7
        pid = int((tmp_path / "pid").read_text())
        assert not settled_alive(pid, seconds)
    finally:
        proc.returncode = 7
        if (tmp_path / "pid").exists():
            kill_left([int((tmp_path / "pid").read_text())], seconds)


def test_wait_group_ends_a_child_at_its_timeout(tmp_path: Path) -> None:
    import subprocess

    seconds = f"{700 + uuid.uuid4().int % 10_000}.25"
    proc = subprocess.Popen(["sleep", seconds], start_new_session=True)
    assert wait_group(proc.pid, 0.2) is None
    proc.returncode = -9
    assert not settled_alive(proc.pid, seconds)
