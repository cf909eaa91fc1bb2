"""Script mode and a GradScaler that skips a step (an fp16 overflow): the skipped step calls
no ``optimizer.step()``, so it has no boundary and merges with the next; the hooks count the
skips, and the result names them (``torch_settings.script.scaler_skipped_steps``)."""

from __future__ import annotations

from pathlib import Path

SCRIPT = '''
import torch

model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu")
for i in range(1000):
    loss = model(torch.ones(4, 8)).sum()
    if i % 4 == 3:  # an overflow: inf gradients, the scaler skips the optimizer's step
        loss = loss * float("inf")
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
'''


def test_skipped_scaler_steps_are_counted_in_the_step_they_merge_with(tmp_path: Path) -> None:
    import torch

    from perfgate.measure.script_job import script_job, script_of
    from perfgate.measure.script_run import run_script_repeat

    before = torch.amp.GradScaler.step
    (tmp_path / "scaled.py").write_text(SCRIPT)
    job = script_job(script_of(str(tmp_path / "scaled.py"), [], tmp_path), "cpu",
                     {"warmup_steps": "2", "steps": "6", "num_threads": "1"})
    repeat, _ = run_script_repeat(job.script, job.params, "cpu", name=job.workload.name, index=0, telemetry=False)
    # iterations 0-1 warm up; the window's 6 optimizer steps are iterations 2, 4-6, 8, 9, and
    # iterations 3 and 7 overflow: two skips, each inside the step that follows it
    script = repeat.torch_settings["script"]
    assert repeat.steps == 6
    assert script["scaler_skipped_steps"] == 2 and script["scaler_skips_per_step"] == 0
    assert script["backwards_per_step"] == 1  # the median step; the two merged ones hold 2 each
    assert torch.amp.GradScaler.step is before  # the hook is gone after the run
