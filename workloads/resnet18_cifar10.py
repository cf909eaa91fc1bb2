"""ResNet-18 on CIFAR-10: the small-image reference workload.

torchvision's resnet18 with ten classes, adapted for 32x32 inputs the usual way (a 3x3
stride-1 first convolution and no max-pool), SGD with momentum, the standard CIFAR
augmentation (random crop 32 with padding 4, horizontal flip, normalisation) and
cross-entropy. Data: torchvision's CIFAR10 reader on ``--data-root`` when given, else a
deterministic synthetic copy in the same file format, read by the same reader.

``resnet18-cifar10-ddp`` is the same workload on two ranks in DistributedDataParallel
(``nproc_per_node=2``; each rank reads its own share of the samples).

``resnet18-cifar10-compiled`` is the same workload with the model under
``torch.compile`` (default mode, the inductor backend), so that compile time, graph
breaks and recompiles are measured on a real model. Its first warmup step compiles (a
minute on a two-core CPU, less on a GPU); the counted run reports that time apart from
the counters. Inductor needs a C++ compiler on the CPU: without one the CPU profile
stops with a one-line error that says so and how to count without code generation
(``--set compile_backend=eager``: dynamo still traces, so graph breaks and recompiles
are still counted; the choice is a recorded parameter, so the two are never compared).
"""

from __future__ import annotations

import dataclasses

from perfgate import Built, BuildContext, Params, Workload

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def build(ctx: BuildContext) -> Built:
    import torch
    import torchvision
    from torchvision import transforms as T

    from perfgate import make_loader
    from perfgate.measure.datasets import cifar10, with_sample_delay

    p = ctx.params
    transform = T.Compose([
        T.RandomCrop(p.input_size, padding=4),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(CIFAR_MEAN, CIFAR_STD),
    ])
    dataset, source = cifar10(ctx, transform)
    dataset = with_sample_delay(dataset, float(p.extra["sample_delay_ms"]))
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = torch.nn.Identity()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=float(p.extra["lr"]), momentum=0.9, weight_decay=5e-4
    )
    backend = str(p.extra.get("compile_backend", "none"))
    if backend != "none":
        if backend == "inductor" and ctx.device == "cpu":
            _require_cpu_toolchain(ctx.workload)
        model = torch.compile(model, backend=backend, mode=None if backend != "inductor" else "default")
    return Built(model, optimizer, torch.nn.CrossEntropyLoss(), make_loader(dataset, ctx), source)


def _require_cpu_toolchain(name: str) -> None:
    """Inductor generates C++ for the CPU: say so in one line when no compiler is found."""
    import shutil

    from perfgate.model.errors import WorkloadError

    compiler = None
    try:
        from torch._inductor import config

        compiler = config.cpp.cxx[-1] if isinstance(config.cpp.cxx, tuple) else config.cpp.cxx
    except Exception:  # noqa: BLE001 - an older or newer torch: look for the usual names
        compiler = None
    candidates = [c for c in (compiler, "g++", "c++", "clang++") if c]
    if not any(shutil.which(c) for c in candidates):
        raise WorkloadError(
            f"{name}: torch.compile's inductor backend needs a C++ compiler on the CPU and none was found "
            f"(looked for {', '.join(dict.fromkeys(candidates))}); install g++, run on cuda, or compile "
            "without code generation: --set compile_backend=eager")


RESNET18_CIFAR10 = Workload(
    name="resnet18-cifar10",
    version=1,
    description="torchvision resnet18 (CIFAR stem), CIFAR-10 32x32, SGD momentum, batch 128",
    build=build,
    params=Params(
        batch_size=128,
        input_size=32,
        warmup_steps=20,
        steps=100,
        num_workers=4,
        pin_memory=True,
        prefetch_factor=2,
        persistent_workers=True,
        cudnn_benchmark=True,
        extra={"lr": 0.1, "sample_delay_ms": 0.0},
    ),
    profiles={
        "cuda": {},
        # 2 CPU cores: about 0.35 s a step at batch 16, so a repeat (start-up included)
        # stays near 15 s. Loading stays in the main process: a worker would compete
        # with the two compute threads for the same cores.
        "cpu": {"batch_size": 16, "warmup_steps": 3, "steps": 20, "num_workers": 0,
                "pin_memory": False, "prefetch_factor": None, "persistent_workers": False,
                "cudnn_benchmark": False},
    },
)


RESNET18_CIFAR10_COMPILED = Workload(
    name="resnet18-cifar10-compiled",
    version=1,
    description="resnet18-cifar10 under torch.compile (default mode, inductor): compile time, graph breaks, recompiles",
    build=build,
    params=dataclasses.replace(RESNET18_CIFAR10.params,
                               extra={**RESNET18_CIFAR10.params.extra, "compile_backend": "inductor"}),
    profiles=RESNET18_CIFAR10.profiles,
)


RESNET18_CIFAR10_DDP = Workload(
    name="resnet18-cifar10-ddp",
    version=1,
    description="resnet18-cifar10 on 2 ranks: DistributedDataParallel under torch.distributed.run "
                "(NCCL on CUDA, gloo on the CPU), batch 128 per rank",
    build=build,
    params=dataclasses.replace(RESNET18_CIFAR10.params, nproc_per_node=2),
    profiles={
        "cuda": {},
        # 2 CPU cores: one rank per core, one thread each; batch 8 per rank and 12 steps keep
        # a repeat (two ranks' start-up and a 45 MB all-reduce per step) near 20 s.
        "cpu": {**RESNET18_CIFAR10.profiles["cpu"], "batch_size": 8, "steps": 12},
    },
)
