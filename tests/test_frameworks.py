"""Real training frameworks in script mode: PyTorch Lightning and the Hugging Face Trainer
measured unmodified (``perfgate run --script``), and a timm model written as a workload.

The framework scripts below are the recipes of docs/frameworks.md, character for character
(a test checks it). Each is written to a temporary folder and run through the command line,
one fresh process per repeat, as a user runs it; they are marked slow (the default lane
runs them, the fast lane does not) and take about 10 s each here, most of it importing
torch and the framework. What they check is the booking the frameworks need (work at the
top of Lightning's ``training_step`` is forward, not optimizer; clipping and scheduler steps
named and booked as optimizer), the precision read from autocast, and the counts per step,
with wide margins and never a wall-clock limit.

The tests before them run small plain-torch scripts in this process (the fast lane): the
same rules without a framework, so that a failure names the rule, not Lightning.

The frameworks are the ``frameworks`` extra (scripts/setup.sh installs it). Without it the
framework tests are skipped, except under CI (``CI`` set, as .ci/run runs), where a missing
framework fails: a green CI must have run them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest
from factories import make_result

from perfgate.adapters.cli import main
from perfgate.analysis.diagnose import PHASE_HINTS, diagnose, script_residual_note
from perfgate.model.errors import WorkloadError

DOCS = Path(__file__).resolve().parent.parent / "docs" / "frameworks.md"


def needs(*modules: str) -> pytest.MarkDecorator:
    """Skip without ``modules`` installed, except under CI, where their absence fails the test."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing and os.environ.get("CI"):
        return pytest.mark.usefixtures()  # run, and fail on the import: CI must have the extra
    return pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)} (the frameworks extra)")


# --- the recipes (docs/frameworks.md holds the same text) -------------------------------------

LIGHTNING_SCRIPT = '''\
"""A small Lightning training script: a CNN on random images, trained by pytorch_lightning.Trainer."""

import argparse
import time

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="32-true")  # or bf16-mixed
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--clip", type=float, default=None)
parser.add_argument("--busy-ms", type=float, default=0.0)  # work before the model call in training_step
parser.add_argument("--width", type=int, default=8)  # the CNN's channels
parser.add_argument("--image", type=int, default=8)  # the images' side
parser.add_argument("--max-steps", type=int, default=1000)
args = parser.parse_args()


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, args.width, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(args.width * 4, 10))

    def training_step(self, batch, batch_idx):
        end = time.perf_counter() + args.busy_ms / 1e3
        while time.perf_counter() < end:  # a stand-in for the step's own work before the model
            pass
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


data = TensorDataset(torch.randn(512, 3, args.image, args.image), torch.randint(0, 10, (512,)))
trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=args.max_steps, precision=args.precision,
                     accumulate_grad_batches=args.accumulate, gradient_clip_val=args.clip,
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)
trainer.fit(Net(), DataLoader(data, batch_size=16, shuffle=True))
'''

HF_SCRIPT = '''\
"""A small Hugging Face Trainer script: a tiny BERT made from a config (no download), random tokens."""

import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--bf16", action="store_true")
parser.add_argument("--max-steps", type=int, default=1000)
parser.add_argument("--out", default="hf-out")
args = parser.parse_args()


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 2048, length: int = 32) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 1000, (n, length), generator=generator)
        self.labels = torch.randint(0, 2, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=64, num_labels=2)
training = TrainingArguments(output_dir=args.out, max_steps=args.max_steps, per_device_train_batch_size=16,
                             gradient_accumulation_steps=args.accumulate, bf16=args.bf16, use_cpu=True,
                             report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             dataloader_num_workers=0)
Trainer(model=BertForSequenceClassification(config), args=training, train_dataset=Tokens()).train()
'''

TIMM_WORKLOAD = '''\
"""A timm ResNet-18 as a perfgate workload: random 64x64 images, AdamW; --set extra_blocks=N
appends N more residual blocks to its last stage (a change the gate should see)."""

from perfgate import Built, BuildContext, DataSource, Params, Workload


def build(ctx: BuildContext) -> Built:
    import timm
    import torch
    from timm.models.resnet import BasicBlock
    from torch.utils.data import TensorDataset

    from perfgate.measure.loader import make_loader

    p = ctx.params
    g = torch.Generator().manual_seed(p.seed)
    dataset = TensorDataset(torch.randn(512, 3, p.input_size, p.input_size, generator=g),
                            torch.randint(0, 10, (512,), generator=g))
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    for _ in range(int(p.extra["extra_blocks"])):
        model.layer4.append(BasicBlock(512, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = DataSource(kind="synthetic", path="memory", content_hash=f"randn-seed-{p.seed}",
                      hash_method="generator-seed", num_samples=len(dataset))
    return Built(model=model, optimizer=optimizer, loss_fn=torch.nn.CrossEntropyLoss(),
                 loader=make_loader(dataset, ctx), data=data)


TIMM_RESNET18 = Workload(
    name="timm-resnet18",
    version=1,
    description="timm's ResNet-18 on random 64x64 images",
    build=build,
    params=Params(
        batch_size=16, input_size=64, warmup_steps=2, steps=6, seed=0, precision="fp32",
        memory_format="contiguous", num_workers=0, pin_memory=False, prefetch_factor=2,
        persistent_workers=False, cudnn_benchmark=True, deterministic=False, allow_tf32=False,
        num_threads=1, extra={"extra_blocks": 0},
    ),
)
'''


def test_the_docs_hold_the_tested_recipes() -> None:
    text = DOCS.read_text()
    for recipe in (LIGHTNING_SCRIPT, HF_SCRIPT, TIMM_WORKLOAD):
        assert recipe in text


# --- the rules on plain torch, in this process (fast lane) ------------------------------------

PLAIN = '''\
import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--mode", default="closure")
parser.add_argument("--busy-ms", type=float, default=0.0)
args = parser.parse_args()


def busy(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


class AutocastInside(nn.Module):  # as Accelerate wraps a model's forward
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.b(torch.relu(self.a(x)))


torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(4096, 16), torch.randint(0, 4, (4096,)))
loader = torch.utils.data.DataLoader(data, batch_size=16)
if args.mode == "autocast-inside":
    model = AutocastInside()
else:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
if args.mode == "bf16-params":
    model = model.to(torch.bfloat16)
dtype = next(model.parameters()).dtype
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
slow_lr = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: busy(args.busy_ms) or 1.0)


def slow_parameters():  # the clipping call itself takes the time
    busy(args.busy_ms)
    yield from model.parameters()


for x, y in loader:
    if args.mode == "closure":
        def closure():
            busy(args.busy_ms)  # before any module call: the user's training step, so forward
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            return loss

        optimizer.step(closure)
    elif args.mode == "clip-and-schedule":
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(slow_parameters(), 1.0)
        optimizer.step()
        slow_lr.step()
    else:
        optimizer.zero_grad()
        if args.mode == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x), y)
        else:
            loss = nn.functional.cross_entropy(model(x.to(dtype)).float(), y)
        loss.backward()
        optimizer.step()
'''


def run_plain(tmp_path: Path, *args: str, name: str = "plain_loop.py", text: str = PLAIN,
              steps: int = 6) -> tuple[Any, dict[str, Any]]:
    """One repeat of a plain-torch script in this process: (RepeatResult, its script record)."""
    from perfgate.measure.script_job import script_job, script_of
    from perfgate.measure.script_run import run_script_repeat

    path = tmp_path / name
    path.write_text(text)
    job = script_job(script_of(str(path), list(args), tmp_path), "cpu",
                     {"warmup_steps": "2", "steps": str(steps), "num_threads": "1"})
    repeat, _ = run_script_repeat(job.script, job.params, "cpu", name=job.workload.name, index=0, telemetry=False)
    return repeat, repeat.torch_settings["script"]


def test_work_before_the_model_in_an_optimizer_closure_is_forward_not_optimizer(tmp_path: Path) -> None:
    repeat, script = run_plain(tmp_path, "--mode", "closure", "--busy-ms", "8")
    m = repeat.medians_ms
    assert m["forward"] >= 8 * 0.9  # the closure's busy-wait, before its first module call
    assert m["optimizer"] < 8 * 0.3
    assert (script["forwards_per_step"], script["backwards_per_step"]) == (1, 1)


def test_clipping_and_scheduler_steps_are_booked_as_optimizer_and_counted(tmp_path: Path) -> None:
    repeat, script = run_plain(tmp_path, "--mode", "clip-and-schedule", "--busy-ms", "4")
    m = repeat.medians_ms
    assert m["optimizer"] >= 2 * 4 * 0.9  # the slow clipping call and the slow scheduler step
    assert m["step"] - sum(m[p] for p in ("data_wait", "h2d", "forward", "backward", "optimizer")) < 4 * 0.5
    assert (script["grad_clips_per_step"], script["lr_scheduler_steps_per_step"]) == (1, 1)


@pytest.mark.parametrize(("mode", "precision", "source"), [
    ("plain", "fp32", "parameters"),
    ("autocast", "bf16", "autocast"),
    ("autocast-inside", "bf16", "autocast"),  # read again at the first inner module call
    ("bf16-params", "bf16", "parameters"),
])
def test_the_precision_is_the_autocast_state_in_effect_else_the_parameters(tmp_path: Path, mode: str,
                                                                          precision: str, source: str) -> None:
    _, script = run_plain(tmp_path, "--mode", mode)
    assert (script["precision"], script["precision_from"]) == (precision, source)
    assert "precisions_seen" not in script


def test_a_script_that_finishes_early_suggests_warmup_and_steps(tmp_path: Path) -> None:
    short = PLAIN.replace("for x, y in loader:", "for x, y in __import__('itertools').islice(loader, 4):")
    with pytest.raises(WorkloadError) as caught:
        run_plain(tmp_path, "--mode", "plain", text=short)
    message = caught.value.message
    assert "finished after 4 optimizer step(s)" in message and "lower --warmup/--steps" in message
    assert "\n" not in message


def test_a_default_name_turns_the_underscore_into_a_dash(tmp_path: Path) -> None:
    from perfgate.measure.script_job import script_job, script_of

    (tmp_path / "train_lightning.py").write_text("")
    job = script_job(script_of("train_lightning.py", [], tmp_path), "cpu", {})
    assert job.workload.name == "script-train-lightning"
    named = script_job(script_of("train_lightning.py", [], tmp_path), "cpu", {}, name="script-train_lightning")
    assert named.workload.name == "script-train_lightning"  # an old result's name, kept with --name


def test_a_scripts_residual_says_what_no_hook_sees_and_what_is_in_optimizer() -> None:
    result = make_result()
    slow = []
    for rep in result.repeats:
        step = tuple(v + 40.0 for v in rep.phases_ms["step"])
        settings = {"script": {"frameworks": {"transformers": "5.24.0", "accelerate": "1.15.0"},
                               "grad_clips_per_step": 1.0, "lr_scheduler_steps_per_step": 1.0}}
        slow.append(dataclasses.replace(rep, phases_ms={**rep.phases_ms, "step": step}, torch_settings=settings))
    script = dataclasses.replace(result, workload_source="script:train.py sha256:" + "0" * 64, repeats=tuple(slow))
    label = diagnose(script)[0]
    assert label.name == "RESIDUAL-HEAVY"
    assert "the HF Trainer's loop" in label.evidence and "Lightning" not in label.evidence
    assert "gradient clipping (1 a step) and LR scheduler steps (1 a step) are in optimizer" in label.evidence
    workload = dataclasses.replace(result, repeats=tuple(slow))  # a workload's residual has no such note
    assert script_residual_note(workload) == "" and "no hook" not in diagnose(workload)[0].evidence
    hostile = dataclasses.replace(script, repeats=tuple(dataclasses.replace(r, torch_settings={"script": 7})
                                                        for r in slow))
    assert script_residual_note(hostile) == "; in a script this is what no hook sees: logging, .item() and other " \
                                            "host syncs, a GradScaler's unscale and update"


def test_the_hints_name_what_a_lightning_or_trainer_user_changes() -> None:
    assert "dataloader_num_workers" in PHASE_HINTS["data_wait"] and "DataModule" in PHASE_HINTS["data_wait"]
    assert "fused" in PHASE_HINTS["optimizer"] and "max_grad_norm" in PHASE_HINTS["optimizer"]
    assert "gradient_clip_val" in PHASE_HINTS["optimizer"]


# --- the frameworks, through the command line (default lane) -----------------------------------


def run_script(tmp_path: Path, text: str, name: str, *args: str, steps: int = 8) -> dict[str, Any]:
    """One repeat of ``text`` as ``name`` through ``perfgate run --script``: the result file's contents."""
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out"
    code = main(["run", "--script", str(path), "--device", "cpu", "--repeats", "1", "--warmup", "3",
                 "--steps", str(steps), "--set", "num_threads=1", "--no-telemetry", "--out", str(out), "-q",
                 "--", *args])
    assert code == 0
    (result,) = out.glob("*.json")
    return json.loads(result.read_text())


def medians(result: dict[str, Any]) -> dict[str, float]:
    from statistics import median

    series = result["repeats"][0]["phases_ms"]
    return {k: median(v) for k, v in series.items()}


@pytest.mark.slow
@needs("pytorch_lightning")
@pytest.mark.parametrize(("precision", "accumulate", "recorded"), [("32-true", 1, "fp32"), ("bf16-mixed", 2, "bf16")])
def test_lightning_work_at_the_top_of_training_step_is_forward(tmp_path: Path, precision: str, accumulate: int,
                                                              recorded: str) -> None:
    """The issue's failure: a busy-wait first in ``training_step`` read as optimizer. Lightning
    runs training_step inside optimizer.step(closure), and on a batch that only accumulates
    calls its Closure directly: both are forward now."""
    busy = 15.0
    result = run_script(tmp_path, LIGHTNING_SCRIPT, "train_lightning.py", "--precision", precision,
                        "--accumulate", str(accumulate), "--clip", "1.0", "--busy-ms", str(busy))
    assert result["workload"] == "script-train-lightning"
    m = medians(result)
    assert m["forward"] >= accumulate * busy * 0.9
    assert m["optimizer"] < busy * 0.3
    script = result["repeats"][0]["torch_settings"]["script"]
    assert (script["batches_per_step"], script["forwards_per_step"], script["backwards_per_step"]) == \
        (accumulate, accumulate, accumulate)
    assert (script["grad_clips_per_step"], script["lr_scheduler_steps_per_step"]) == (1, 1)
    assert script["precision"] == recorded
    assert script["precision_from"] == ("autocast" if recorded == "bf16" else "parameters")
    assert result["params"]["precision"] == recorded  # the result's parameter, read, not a placeholder
    assert "pytorch_lightning" in script["frameworks"]


@pytest.mark.slow
@needs("transformers", "accelerate")
def test_the_hf_trainer_clips_and_schedules_in_optimizer_and_records_bf16(tmp_path: Path) -> None:
    result = run_script(tmp_path, HF_SCRIPT, "train_hf.py", "--bf16", "--accumulate", "2",
                        "--out", str(tmp_path / "hf-out"))
    script = result["repeats"][0]["torch_settings"]["script"]
    assert (script["batches_per_step"], script["forwards_per_step"], script["backwards_per_step"]) == (2, 2, 2)
    assert (script["grad_clips_per_step"], script["lr_scheduler_steps_per_step"]) == (1, 1)
    assert (script["precision"], script["precision_from"]) == ("bf16", "autocast")  # entered inside forward
    assert {"transformers", "accelerate"} <= set(script["frameworks"])
    m = medians(result)
    assert m["forward"] > m["optimizer"] > 0 and m["backward"] > 0


# --- timm as a workload (extended lane) -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.extended
@needs("timm")
def test_a_timm_resnet_as_a_workload_is_measured_and_two_extra_blocks_are_counted(tmp_path: Path) -> None:
    workloads = tmp_path / "workloads"
    workloads.mkdir()
    (workloads / "timm_resnet.py").write_text(TIMM_WORKLOAD)
    common = ["--device", "cpu", "--workloads-path", str(workloads), "--cache-dir", str(tmp_path / "cache")]
    out = tmp_path / "out"
    assert main(["run", "timm-resnet18", "--repeats", "1", "--out", str(out), "-q", *common]) == 0
    result = json.loads((out / "timm-resnet18.json").read_text())
    m = medians(result)
    assert all(m[p] > 0 for p in ("forward", "backward", "optimizer"))
    flops = []
    for blocks in (0, 2):
        counted = tmp_path / f"counted-{blocks}"
        assert main(["counters", "timm-resnet18", "--json", "--out", str(counted), "--set",
                     f"extra_blocks={blocks}", *common]) == 0
        (path,) = counted.rglob("*.json")
        flops.append(_forward_flops(json.loads(path.read_text())))
    assert flops[1] > flops[0] * 1.15  # two 512-channel blocks on a 2x2 map: about +25% of the FLOPs


def _forward_flops(counted: dict[str, Any]) -> float:
    return float(counted["phases"]["forward"]["flops"])
