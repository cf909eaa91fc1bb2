"""A DataLoader built from a workload's pinned parameters.

Workloads call :func:`make_loader` so that every reference and user workload gets the
same sampling: a seeded random order that yields exactly as many full batches as the
warmup and the measured windows need (``warmup_steps + windows * steps``, ``windows`` from
the :class:`BuildContext`), so no window crosses an epoch boundary (a restart of the
workers inside it would be measured as data wait).
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler
from torch.utils.data.distributed import DistributedSampler

from perfgate.model.workload import BuildContext


def _seed_worker(worker_id: int) -> None:
    # Each worker derives its seeds from the loader's base seed, so augmentation is
    # reproducible across repeats and processes.
    import random

    import numpy as np

    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


class RankShare(DistributedSampler[Any]):
    """Under ``torch.distributed.run``: this rank's share of one seeded random order, exactly
    ``per_rank`` samples (rank r takes every world-th index from the r-th), so each rank reads
    its own samples and, like the single-process sampler, never runs out inside the window."""

    def __init__(self, dataset: Dataset[Any], per_rank: int, seed: int) -> None:
        super().__init__(dataset, shuffle=True, seed=seed, drop_last=True)
        self.per_rank = per_rank

    def __iter__(self) -> Any:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        # a map-style dataset (make_loader's): sized, as RandomSampler needs
        order = RandomSampler(cast(Sized, self.dataset), num_samples=self.per_rank * self.num_replicas,
                              generator=generator)
        return iter(list(order)[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return self.per_rank


def make_loader(dataset: Dataset[Any], ctx: BuildContext, **kwargs: Any) -> DataLoader[Any]:
    """DataLoader with the workload's batch and loader settings and a seeded sampler of
    ``warmup_steps + ctx.windows * steps`` batches (under ``torch.distributed.run``, this
    rank's share of it: :class:`RankShare`).

    Extra keyword arguments (``collate_fn`` for example) go to ``DataLoader`` unchanged.
    """
    params = ctx.params
    batches = params.warmup_steps + max(1, ctx.windows) * params.steps  # every window's steps (--windows)
    generator = torch.Generator()
    generator.manual_seed(params.seed)
    # Without replacement, RandomSampler concatenates permutations when more samples are
    # asked for than the dataset holds.
    # a map-style dataset, the one kind make_loader takes: sized, as RandomSampler needs
    sampler: Sampler[int] = RandomSampler(cast(Sized, dataset), num_samples=batches * params.batch_size,
                                          generator=generator)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        sampler = RankShare(dataset, batches * params.batch_size, params.seed)
    return DataLoader(
        dataset,
        sampler=sampler,
        drop_last=True,
        worker_init_fn=_seed_worker,
        generator=generator,
        **params.loader_settings(),
        **kwargs,
    )
