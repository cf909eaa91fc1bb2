"""One rank of a distributed repeat: the process group, the DDP wrapper, and the all-reduce's time.

A repeat with ``nproc_per_node`` > 1 runs its ranks under ``torch.distributed.run``
(:mod:`perfgate.measure.distributed`); each rank runs the ordinary repeat
(:func:`perfgate.measure.loop.run_repeat`) with the model wrapped here in
DistributedDataParallel and the timeline wrapped in a :class:`CommTimeline`.

What the all-reduce costs is recorded per step by a DDP communication hook
(:class:`CommTimer`) that launches each gradient bucket's all-reduce exactly as DDP's
default hook does and notes when it was launched (and, on the CPU, when it finished):

- ``comm``: the time backward waited for communication at its end, from the last bucket's
  launch to backward's return (the exposed part: what overlapping did not hide; it includes
  the few operations autograd and DDP run after the last bucket, so it is an upper bound);
- ``comm_total`` (CPU): the time any bucket's all-reduce was in flight, overlapped or not.

On CUDA the launch and backward's end are CUDA events on the current stream: the launch
event completes when the stream has computed that bucket's gradients, backward's end when
the stream has waited for the all-reduce (DDP's final wait makes it), so ``comm`` is
device time like the phases. ``comm_total`` is not recorded there: NCCL runs on its own
stream, which no event on the current stream times. The CUDA path has not been run on a
GPU at the time of writing; it is built to the same construction as the timeline.

DDP is made without the buffer sync per forward (``forward_sync_buffers=False``, before
torch 2.14 ``broadcast_buffers=False``): the default broadcasts BatchNorm's running
statistics from rank 0 at the start of every forward, a synchronisation that would time
a slow rank's lateness as the others' forward. Running statistics stay per rank.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from perfgate.measure.timeline import BACKWARD, DATA, Timeline, WindowTimes
from perfgate.model.errors import UsageError, WorkloadError


@dataclass(frozen=True)
class Rank:
    """Where this process stands in the distributed repeat (read from torchrun's environment)."""

    rank: int
    world_size: int
    local_rank: int
    backend: str


def rank_from_environment(device: str) -> Rank:
    """This process's rank as ``torch.distributed.run`` set it; a UsageError outside it."""
    try:
        return Rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]),
                    "nccl" if device == "cuda" else "gloo")
    except (KeyError, ValueError):
        raise UsageError("a distributed repeat's rank runs under torch.distributed.run (RANK, WORLD_SIZE and "
                         "LOCAL_RANK are not set)") from None


def join(rank: Rank, device: str, timeout_s: float) -> None:
    """Join the process group (gloo on the CPU, NCCL on CUDA); on CUDA this rank's device first."""
    if device == "cuda":
        if rank.local_rank >= torch.cuda.device_count():
            raise UsageError(f"rank {rank.rank}: no CUDA device {rank.local_rank} "
                             f"({torch.cuda.device_count()} visible)")
        torch.cuda.set_device(rank.local_rank)
    dist.init_process_group(rank.backend, timeout=timedelta(seconds=max(1.0, timeout_s)))


def leave() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def check_loader(loader: object, name: str) -> None:
    """Under DDP every rank must read its own share of the data: a map-style DataLoader must
    sample with a DistributedSampler (``perfgate.measure.loader.make_loader`` does)."""
    from torch.utils.data import DataLoader, IterableDataset
    from torch.utils.data.distributed import DistributedSampler

    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return
    # a BatchSampler's sampler (a batch_sampler of another kind has none: then not a DistributedSampler)
    sampler = getattr(loader.batch_sampler, "sampler", None) if loader.batch_sampler is not None else loader.sampler
    if not isinstance(sampler, DistributedSampler):
        raise WorkloadError(f"{name}: with nproc_per_node > 1 the DataLoader must sample with a "
                            f"DistributedSampler (got {type(sampler).__name__}); "
                            "perfgate.measure.loader.make_loader gives one under torch.distributed.run")


class CommTimer:
    """A DDP communication hook that times each bucket's all-reduce, per step.

    The hook is DDP's default (``allreduce_hook``: the bucket divided by the world size and
    all-reduced) with two notes around it. Steps begin with :meth:`next_step`; only the
    steps after :meth:`arm` are kept.
    """

    def __init__(self, *, cuda: bool, event_factory: Callable[[], Any] | None = None,
                 now: Callable[[], float] = time.perf_counter) -> None:
        self.cuda = cuda
        self._event_factory = event_factory
        self._now = now
        self._armed = False
        self._launches: list[Any] = []
        self._dones: list[float] = []
        self._warm_launches = 0
        self._pool: list[Any] = []
        self.steps: list[tuple[list[Any], list[float]]] = []
        """Per kept step: the bucket launches (times or events) and, on the CPU, their ends."""
        self.unpooled = 0
        """CUDA: events made inside the window because more buckets launched than warmup showed."""

    def stamp(self) -> Any:
        """Now: the host clock on the CPU; on CUDA an event recorded on the current stream (one
        made before the window, while the pool lasts)."""
        if not self.cuda:
            return self._now()
        event = self._pool.pop() if self._pool else None
        if event is None:
            self.unpooled += 1
            assert self._event_factory is not None
            event = self._event_factory()
        event.record()
        return event

    def hook(self) -> Callable[[Any, Any], Any]:
        """The hook to register. DDP checks its annotations against its own types, so the
        function it is given has none."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def timed_allreduce(state, bucket):
            return self._launch(allreduce_hook, state, bucket)

        return timed_allreduce

    def _launch(self, allreduce_hook: Callable[[Any, Any], Any], state: Any, bucket: Any) -> Any:
        if self._armed:
            self._launches.append(self.stamp())
        else:
            self._warm_launches += 1
        future = allreduce_hook(state, bucket)
        if self.cuda or not self._armed:
            return future
        dones = self._dones
        now = self._now

        def finished(done: Any) -> Any:
            dones.append(now())
            return done.value()

        return future.then(finished)

    def arm(self, steps: int, warmup_steps: int) -> None:
        """Keep what follows. On CUDA, make the window's events now: per step one per bucket
        seen in a warmup step, one for backward's end (:class:`CommTimeline`) and two spare, so
        none is made inside the window."""
        if self.cuda and self._event_factory is not None:
            per_step = math.ceil(self._warm_launches / max(1, warmup_steps)) + 3
            self._pool = [self._event_factory() for _ in range(steps * per_step)]
        self._armed = True

    def next_step(self) -> None:
        if not self._armed:
            return
        self._launches, self._dones = [], []
        self.steps.append((self._launches, self._dones))


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total * 1e3


class CommTimeline:
    """A timeline that also notes backward's end for the all-reduce timing.

    The switches are the wrapped timeline's; entering the data wait starts the timer's step
    and leaving backward takes the timer's :meth:`~CommTimer.stamp` (the time on the CPU, an
    event on CUDA) right after the wrapped timeline's own switch. ``close`` adds ``comm``
    (and ``comm_total`` on the CPU). Used for a window only (warmup runs the bare timeline).
    """

    def __init__(self, timeline: Timeline, timer: CommTimer, *, steps: int, warmup_steps: int) -> None:
        self._timeline = timeline
        self._timer = timer
        self._steps = steps
        self._warmup_steps = warmup_steps
        self.timing = timeline.timing
        self.boundary = timeline.boundary
        self._ends: list[Any] = []
        ends = self._ends.append
        inner_switch, next_step, mark_end = timeline.switch, timer.next_step, timer.stamp

        def switch(old: int, new: int) -> None:
            if new == DATA:
                next_step()
            inner_switch(old, new)
            if old == BACKWARD:
                ends(mark_end())

        self.switch = switch

    def open(self, current: int) -> None:
        self._timer.arm(self._steps, self._warmup_steps)
        self._timeline.open(current)

    def close(self) -> WindowTimes:
        times = self._timeline.close()
        steps = self._timer.steps
        if len(steps) != self._steps or len(self._ends) != self._steps:
            raise RuntimeError(f"all-reduce timing: {len(steps)} steps and {len(self._ends)} backward ends "
                               f"for {self._steps} steps")
        series = dict(times.series_ms)
        if self._timer.cuda:
            series["comm"] = [max(0.0, launches[-1].elapsed_time(end)) if launches else 0.0
                              for (launches, _), end in zip(steps, self._ends, strict=True)]
        else:
            series["comm"] = [max(0.0, (end - launches[-1]) * 1e3) if launches else 0.0
                              for (launches, _), end in zip(steps, self._ends, strict=True)]
            series["comm_total"] = [_union_ms(list(zip(launches, dones, strict=True))) if len(dones) == len(launches) else 0.0
                                    for launches, dones in steps]
        return WindowTimes(series, times.window_s, device_window_ratio=times.device_window_ratio, clamps=times.clamps)


def wrap(model: torch.nn.Module, device: str, rank: Rank, timer: CommTimer) -> torch.nn.Module:
    """``model`` (already on its device) in DistributedDataParallel with ``timer``'s hook."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    # No buffer broadcast per forward (see the module's note); torch 2.14 renamed the switch.
    # Any: one keyword or the other, by the installed torch's signature
    no_forward_sync: dict[str, Any] = ({"forward_sync_buffers": False}
                       if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
                       else {"broadcast_buffers": False})
    ddp = DistributedDataParallel(model, device_ids=[rank.local_rank] if device == "cuda" else None,
                                  **no_forward_sync)
    ddp.register_comm_hook(None, timer.hook())
    return ddp
