"""A DataLoader built from a workload's pinned parameters.

Workloads call :func:`make_loader` so that every reference and user workload gets the
same sampling: a seeded random order that yields exactly as many full batches as the
warmup and the measured window need, so the window never crosses an epoch boundary (a
restart of the workers inside it would be measured as data wait).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from perfgate.model.workload import BuildContext


def _seed_worker(worker_id: int) -> None:
    # Each worker derives its seeds from the loader's base seed, so augmentation is
    # reproducible across repeats and processes.
    import random

    import numpy as np

    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)


def make_loader(dataset: Dataset[Any], ctx: BuildContext, **kwargs: Any) -> DataLoader[Any]:
    """DataLoader with the workload's batch and loader settings and a seeded sampler.

    Extra keyword arguments (``collate_fn`` for example) go to ``DataLoader`` unchanged.
    """
    params = ctx.params
    batches = params.warmup_steps + params.steps
    generator = torch.Generator()
    generator.manual_seed(params.seed)
    # Without replacement, RandomSampler concatenates permutations when more samples are
    # asked for than the dataset holds.
    sampler = RandomSampler(dataset, num_samples=batches * params.batch_size, generator=generator)
    return DataLoader(
        dataset,
        sampler=sampler,
        drop_last=True,
        worker_init_fn=_seed_worker,
        generator=generator,
        **params.loader_settings(),
        **kwargs,
    )
