"""ResNet-18 on Imagenette (160 px): the JPEG-decoding reference workload.

torchvision's resnet18 with ten classes on Imagenette-style JPEG files, decoded and
augmented in the DataLoader (random resized crop, horizontal flip, normalisation), SGD.
This is the workload of the story perfgate grew from: on a T4 its step is easily bound by
the input pipeline. Data: an ImageFolder reader of the Imagenette ``train`` folder on
``--data-root`` when given, else deterministic synthetic JPEGs of varied sizes in the
same class-per-folder layout, decoded by the same reader.
"""

from __future__ import annotations

from perfgate import Built, BuildContext, Params, Workload

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def build(ctx: BuildContext) -> Built:
    import torch
    import torchvision
    from torchvision import transforms as T

    from perfgate import make_loader
    from perfgate.measure.datasets import imagenette, with_sample_delay

    p = ctx.params
    transform = T.Compose([
        T.RandomResizedCrop(p.input_size, antialias=True),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
    dataset, source = imagenette(ctx, transform)
    dataset = with_sample_delay(dataset, float(p.extra["sample_delay_ms"]))
    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=float(p.extra["lr"]), momentum=0.9)
    return Built(model, optimizer, torch.nn.CrossEntropyLoss(), make_loader(dataset, ctx), source)


RESNET18_IMAGENETTE = Workload(
    name="resnet18-imagenette",
    version=1,
    description="torchvision resnet18, Imagenette 160 px JPEGs decoded in the DataLoader, SGD, batch 64",
    build=build,
    params=Params(
        batch_size=64,
        input_size=160,
        warmup_steps=10,
        steps=60,
        num_workers=4,
        pin_memory=True,
        prefetch_factor=2,
        persistent_workers=True,
        cudnn_benchmark=True,
        extra={"lr": 0.05, "sample_delay_ms": 0.0},
    ),
    profiles={
        "cuda": {},
        # 2 CPU cores: 96 px crops at batch 16 keep a step near 0.25 s and a repeat near
        # 15 s; one loader worker decodes JPEGs beside the compute threads.
        "cpu": {"batch_size": 16, "input_size": 96, "warmup_steps": 3, "steps": 20,
                "num_workers": 1, "pin_memory": False, "prefetch_factor": 2,
                "persistent_workers": False, "cudnn_benchmark": False},
    },
)
