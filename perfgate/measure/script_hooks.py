"""The hooks of a script run, and the phase each moment of the script belongs to.

perfgate measures an unmodified training script by watching what it calls in torch:

``data_wait``
    inside ``__next__`` of a DataLoader's iterator (``_BaseDataLoaderIter.__next__``, the
    time the loop waits for the batch);
``h2d``
    inside ``Tensor.to``/``Tensor.cuda`` called on a *batch tensor*, a tensor the
    DataLoader yielded (found in the batch's tuples, lists, mappings and dataclasses);
``forward``
    from the start of an outermost ``nn.Module.__call__`` (one not inside another module
    call) until the next backward, optimizer step, ``zero_grad`` or DataLoader batch: the
    model *and* the loss computed from its output, as a workload's
    ``loss_fn(model(x), y)``; a batch tensor moved inside it stays ``h2d``. Also from the
    start of a *training-step closure* (below) to its first backward;
``backward``
    inside ``Tensor.backward``/``torch.autograd.backward``;
``optimizer``
    inside ``Optimizer.step`` (torch's global step hooks), ``Optimizer.zero_grad``/
    ``nn.Module.zero_grad``, gradient clipping (``torch.nn.utils.clip_grad_norm_``,
    ``clip_grad_value_``, ``clip_grads_with_norm_``: what Lightning's ``gradient_clip_val``,
    the Hugging Face Trainer's ``max_grad_norm`` and Accelerate call) and a learning-rate
    scheduler's ``step`` (``torch.optim.lr_scheduler``): the work of updating the weights
    from the gradients, each counted per step so that the result names them.

A *training-step closure* is the callable passed to ``optimizer.step(closure)`` and, when
PyTorch Lightning is loaded, Lightning's automatic-optimization ``Closure`` however it is
called (inside the optimizer's step, or directly on a batch that only accumulates). It
runs the user's ``training_step`` and then backward, so its time up to the first
backward (or ``zero_grad``) is forward even before the first module call: work at the top
of a Lightning ``training_step`` is the user's step, not the optimizer's. After its
backward the closure's time is in no phase, as between a plain loop's backward and its
optimizer step; when it returns, the optimizer's own time resumes.

Phases nest: a forward and backward inside ``optimizer.step(closure)`` are forward and
backward. The end of an outermost ``optimizer.step()`` (one not inside another's, so a
wrapping optimizer counts once) is the boundary between two steps. Several forward and
backward passes before one optimizer step (gradient accumulation) add up within that
step. What no hook sees is in no phase: the residual of the step.

The precision of each measured step is read at its first forward pass: the autocast
dtype in effect for the run's device (read again at the first inner module call, since
Accelerate, and so the Hugging Face Trainer, enters autocast inside the model's
``forward``), else the dtype of the called module's parameters.

After ``warmup_steps`` steps the window opens; after ``steps`` more it closes and the hook
at that boundary raises :class:`ScriptStop`, a ``BaseException`` the script's own ``except
Exception`` does not catch, which the runner catches around ``runpy.run_path``. A script
with no optimizer step in :data:`MAX_BATCHES_WITHOUT_STEP` batches, or with a second
optimizer stepping, is stopped the same way with the reason in :attr:`ScriptHooks.failure`.

The hooks act in the script's process only. A process forked from it while they are
installed (a DataLoader worker with the ``fork`` start method, forked inside the window when a
non-persistent loader starts an epoch there) undoes every patch and disarms the timeline
before it runs anything else (``os.register_at_fork``): a torchvision transform in a worker is
an ``nn.Module`` call, and it must neither switch the phase nor record a CUDA event there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch

from perfgate.measure.timeline import (
    BACKWARD,
    DATA,
    FORWARD,
    H2D,
    IDLE,
    OPTIMIZER,
    Timeline,
    WindowTimes,
)

MAX_BATCHES_WITHOUT_STEP = 1000
"""DataLoader batches without any optimizer step before a script is stopped as one perfgate cannot time."""

_MAX_TENSORS_PER_BATCH = 256
_PRUNE_AT = 4096


class ScriptStop(BaseException):
    """Raised from a hook to stop the script: the window is complete, or it cannot be measured."""


COUNTS = ("batches", "samples", "forwards", "backwards", "h2d_copies", "zero_grads", "grad_clips",
          "lr_scheduler_steps", "scaler_skips")
"""What the hooks count per measured step, in this order (a list per step, cheap to bump).
``scaler_skips``: ``GradScaler.step`` calls that skipped the optimizer's step (an fp16
overflow): such a step has no boundary and merges with the next, which holds them."""
BATCHES, SAMPLES, FORWARDS, BACKWARDS, COPIES, ZERO_GRADS, CLIPS, SCHEDULER_STEPS, SCALER_SKIPS = range(len(COUNTS))
_NO_COUNTS = (0,) * len(COUNTS)

PRECISION_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}
"""A dtype as a workload's ``precision`` names it (fp64, not a workload precision, for a script in doubles)."""

LIGHTNING_CLOSURES = ("lightning.pytorch.loops.optimization.automatic", "pytorch_lightning.loops.optimization.automatic")
"""Where PyTorch Lightning (the ``lightning`` package and the older ``pytorch_lightning``)
defines its automatic-optimization ``Closure``: when loaded, its calls are training-step
closures, also those made outside an optimizer step (a batch that only accumulates)."""

FRAMEWORKS = ("lightning", "pytorch_lightning", "transformers", "accelerate", "timm")
"""The training frameworks a script's result names when the script loaded them (with their versions)."""


def _first_dim(batch: Any, depth: int = 0) -> int | None:
    """The length of the first tensor in a batch: its samples."""
    if type(batch) is tuple or type(batch) is list:  # the usual (inputs, targets): no recursion
        first = batch[0] if batch else None
        if type(first) is torch.Tensor and first.dim() > 0:
            return int(first.shape[0])
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth > 4:
        return None
    if isinstance(batch, Mapping):
        items: Any = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        items = (getattr(batch, f.name) for f in dataclasses.fields(batch))
    else:
        return None
    for item in items:
        found = _first_dim(item, depth + 1)
        if found is not None:
            return found
    return None


class ScriptHooks:
    """The state the hooks share: the phase now, the phases it interrupted, the step count.

    ``timeline`` is told every switch of phase and every boundary; ``on_open`` runs just
    before the window opens (peak memory reset, sampler start), ``on_close`` just after it
    closed. ``device_type`` is the device whose autocast state is the step's precision.
    """

    def __init__(self, timeline: Timeline, *, warmup_steps: int, steps: int,
                 on_open: Callable[[], None] = lambda: None, on_close: Callable[[], None] = lambda: None,
                 max_batches_without_step: int = MAX_BATCHES_WITHOUT_STEP, device_type: str = "cpu") -> None:
        if warmup_steps < 1 or steps < 1:
            raise ValueError("a script run needs warmup_steps >= 1 and steps >= 1")
        self.timeline = timeline
        self.switch = timeline.switch
        self.warmup_steps = warmup_steps
        self.steps = steps
        self.on_open = on_open
        self.on_close = on_close
        self.max_batches_without_step = max_batches_without_step
        self.cur = IDLE
        self.stack: list[int] = []
        self.fwd_base = IDLE
        self.depth = 0
        self.opt_depth = 0
        self.steps_done = 0
        self.batches = 0
        self.exhausted = 0
        """Times a DataLoader iterator ran out (StopIteration)."""
        self.recording = False
        self.done = False
        self.stopping = False
        self.failure: str | None = None
        self.times: WindowTimes | None = None
        self.optimizer: weakref.ref[Any] | None = None
        self.optimizer_name = ""
        self.closure_depth = 0
        """Training-step closures running (one nested in another, Lightning's inside an optimizer's, counts once)."""
        self.closure_fresh = False
        """A closure's forward began and no module call has counted it as a forward pass yet."""
        self.named_depth = 0
        """Clipping or scheduler calls running (one calling another is booked and counted once)."""
        self.device_type = device_type
        self.probe = False
        """The step's precision is still to read (at its first forward pass, in the window)."""
        self.probe_module: Any = None
        self.first_parameter: dict[int, tuple[weakref.ref[Any], weakref.ref[torch.Tensor]]] = {}
        """Per outermost module (by id, with a weak reference to check it is the same one), its
        first floating-point parameter: read for its dtype each step instead of walking
        ``parameters()`` (``module.half()`` converts a parameter in place, so its dtype follows)."""
        """The module whose call began the forward pass, while the precision waits for an inner module call."""
        self.precisions: dict[str, int] = {}
        """The precision of each measured step (:meth:`read_precision`), counted by name."""
        self.precision_from: dict[str, int] = {}
        """Where each measured step's precision came from: ``autocast`` or ``parameters``."""
        self.count = [0] * len(COUNTS)
        self.window: list[int] = []
        """The measured steps' :data:`COUNTS`, one after the other (:meth:`window_counts` splits them)."""
        self.step_loss: Any = None
        """The last one-element tensor ``backward`` was called on in this step (a reference)."""
        self.losses: list[Any] = []
        """The loss of the first and of the last measured step, detached."""
        self.epochs_in_window = 0
        """DataLoader iterators begun inside the window (a new epoch, a loader restarted)."""
        self.batch_refs: dict[int, weakref.ref[torch.Tensor]] = {}
        self.iterators: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        """Every DataLoader iterator seen, with a weak reference to its DataLoader (None: not known)."""
        self.last_iterator: weakref.ref[Any] | None = None
        self.window_loader: Any = None
        """The DataLoader of the window's last batch, kept when the window closes (its settings are recorded)."""
        self.forked = False
        """True in a process forked while the hooks were installed: they are disarmed there."""

    # --- phases ---------------------------------------------------------------------

    def enter(self, region: int) -> None:
        cur = self.cur
        if cur == FORWARD and not self.depth and region != H2D:
            cur = self.fwd_base  # the forward (the loss after the model) ends where this region starts
        self.stack.append(cur)
        self.switch(self.cur, region)
        self.cur = region

    def exit(self) -> None:
        back = self.stack.pop()
        self.switch(self.cur, back)
        self.cur = back

    def start_forward(self, module: Any) -> None:
        """An outermost module call begins: forward, unless a data, h2d or backward region runs
        (the first module call of a closure's forward counts that forward pass)."""
        cur = self.cur
        if cur == IDLE or cur == OPTIMIZER:
            self.fwd_base = cur
            self.switch(cur, FORWARD)
            self.cur = FORWARD
        elif cur != FORWARD or not self.closure_fresh:
            return
        self.closure_fresh = False
        self.count[FORWARDS] += 1
        if self.probe:
            self.read_precision(module, outer=True)

    def closure_begin(self) -> bool:
        """A training-step closure begins: forward from here, to its first backward or
        ``zero_grad``; False (nothing done) inside another closure, a module call or a data,
        h2d or backward region."""
        cur = self.cur
        if self.closure_depth or self.depth or cur in (DATA, H2D, BACKWARD):
            return False
        self.closure_depth = 1
        self.stack.append(self.fwd_base if cur == FORWARD else cur)  # what resumes when it returns
        self.fwd_base = IDLE  # after its backward: in no phase, as after a plain loop's backward
        self.switch(cur, FORWARD)
        self.cur = FORWARD
        self.closure_fresh = True
        return True

    def closure_end(self) -> None:
        self.closure_depth = 0
        self.closure_fresh = False
        self.exit()

    def read_precision(self, module: Any, *, outer: bool) -> None:
        """The step's precision: the autocast dtype in effect, else (at an inner module call,
        or at the boundary when there was none) the dtype of the outermost module's parameters."""
        device = self.device_type
        if torch.is_autocast_enabled(device):
            name, source = PRECISION_NAMES.get(torch.get_autocast_dtype(device), "other"), "autocast"
        elif outer:  # Accelerate enters autocast inside forward: look again at the first inner call
            self.probe_module = module
            return
        else:
            dtype = self._parameter_dtype(self.probe_module)
            if dtype is None:
                self.probe_module = None
                return  # a module without parameters: read at the next forward pass
            name, source = PRECISION_NAMES.get(dtype, str(dtype).removeprefix("torch.")), "parameters"
        self.probe = False
        self.probe_module = None
        self.precisions[name] = self.precisions.get(name, 0) + 1
        self.precision_from[source] = self.precision_from.get(source, 0) + 1

    def _parameter_dtype(self, module: Any) -> Any:
        """The dtype of ``module``'s first floating-point parameter (None: it has none)."""
        known = self.first_parameter.get(id(module))
        if known is not None and known[0]() is module:
            parameter = known[1]()
            if parameter is not None:
                return parameter.dtype
        if not isinstance(module, torch.nn.Module):
            return None
        parameter = next((p for p in module.parameters() if p.is_floating_point()), None)
        if parameter is None:
            return None
        if len(self.first_parameter) > _PRUNE_AT:
            self.first_parameter.clear()
        self.first_parameter[id(module)] = (weakref.ref(module), weakref.ref(parameter))
        return parameter.dtype

    def precision(self) -> dict[str, Any]:
        """What the result records of the window's precision: the most common, and all when several."""
        if not self.precisions:
            return {}
        seen = dict(sorted(self.precisions.items(), key=lambda kv: -kv[1]))
        out: dict[str, Any] = {"precision": next(iter(seen)), "precision_from": max(
            self.precision_from, key=lambda name: self.precision_from[name])}
        if len(seen) > 1:
            out["precisions_seen"] = seen
        return out

    # --- what the hooks report ------------------------------------------------------

    def fail(self, reason: str) -> None:
        self.failure = reason
        self.stopping = True
        raise ScriptStop(reason)

    def on_batch(self, iterator: Any, batch: Any) -> None:
        self.batches += 1
        count = self.count
        count[BATCHES] += 1
        last = self.last_iterator
        if last is None or last() is not iterator:
            if iterator not in self.iterators:
                self.iterators[iterator] = None
            self.last_iterator = weakref.ref(iterator)
        if self.recording:
            count[SAMPLES] += _first_dim(batch) or 0
            if getattr(iterator, "_num_yielded", 0) == 1:
                self.epochs_in_window += 1  # its first batch: the loader (re)started in the window
        refs = self.batch_refs
        if len(refs) > _PRUNE_AT:
            for key in [k for k, r in refs.items() if r() is None]:
                del refs[key]
        self._mark(batch)
        if self.steps_done == 0 and self.batches >= self.max_batches_without_step:
            self.fail(f"saw 0 optimizer steps in {self.batches} DataLoader batches; perfgate marks the steps "
                      "with torch.optim optimizer steps")

    def _mark(self, batch: Any) -> None:
        """Remember the batch's tensors (weakly, by identity): a ``.to`` of one of them is ``h2d``."""
        refs = self.batch_refs
        ref = weakref.ref
        todo = [(batch, 0)]
        seen = 0
        while todo and seen < _MAX_TENSORS_PER_BATCH:
            value, depth = todo.pop()
            if isinstance(value, torch.Tensor):
                refs[id(value)] = ref(value)
                seen += 1
            elif depth > 4:
                continue
            elif isinstance(value, (list, tuple)):
                todo += [(item, depth + 1) for item in value]
            elif isinstance(value, Mapping):
                todo += [(item, depth + 1) for item in value.values()]
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                todo.extend((getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))

    def note_loss(self, tensor: Any) -> None:
        self.count[BACKWARDS] += 1
        self.step_loss = tensor

    def check_optimizer(self, optimizer: Any) -> None:
        known = self.optimizer() if self.optimizer is not None else None
        if known is None:
            self.optimizer = weakref.ref(optimizer)
            self.optimizer_name = type(optimizer).__name__
        elif known is not optimizer:
            self.fail(f"two optimizers stepped: {self.optimizer_name}, {type(optimizer).__name__}; perfgate times one")

    def _last_loader(self) -> Any:
        """The DataLoader whose iterator yielded the last batch (None: not known)."""
        iterator = self.last_iterator() if self.last_iterator is not None else None
        ref = self.iterators.get(iterator) if iterator is not None else None
        return ref() if ref is not None else None

    def step_end(self) -> None:
        """The end of an outermost optimizer step: a boundary; opens, or closes and stops."""
        self.steps_done += 1
        done = self.steps_done
        if done == self.warmup_steps:
            self.on_open()
            self.timeline.open(self.cur)
            self.recording = True
            self.probe = True
            self.count[:] = _NO_COUNTS
            self.step_loss = None
            return
        self.timeline.boundary(self.cur)
        if self.recording:
            if self.probe_module is not None:  # a forward pass with no inner module call
                self.read_precision(self.probe_module, outer=False)
            self.probe = True
            self.window.extend(self.count)
            last = done == self.warmup_steps + self.steps
            if len(self.window) == len(COUNTS) or last:
                self._keep_loss()
            if last:
                self.window_loader = self._last_loader()
                self.times = self.timeline.close()
                self.recording = False
                self.on_close()
                self.done = True
                self.stopping = True
                raise ScriptStop("the measured window is complete")
        self.count[:] = _NO_COUNTS
        self.step_loss = None

    def window_counts(self) -> list[list[int]]:
        """Per measured step, its :data:`COUNTS`."""
        flat, width = self.window, len(COUNTS)
        return [flat[i : i + width] for i in range(0, len(flat), width)]

    def _keep_loss(self) -> None:
        loss = self.step_loss
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self.losses.append(loss.detach())


# --- installing the hooks ---------------------------------------------------------------


def frameworks_loaded() -> dict[str, str]:
    """The training frameworks of :data:`FRAMEWORKS` the script loaded, with their versions."""
    found = {}
    for name in FRAMEWORKS:
        module = sys.modules.get(name)
        if module is not None:
            found[name] = str(getattr(module, "__version__", "") or "")
    return found


def end_loader_workers(h: ScriptHooks, *, join_s: float = 5.0) -> int:
    """Shut down the worker processes of every DataLoader iterator the script used, then end
    any other child process of this one that multiprocessing started (``join_s`` for all of
    them to exit, then terminated); how many had to be terminated."""
    import multiprocessing

    for iterator in list(h.iterators.keys()):
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            with contextlib.suppress(Exception):
                shutdown()
    import time

    deadline = time.monotonic() + join_s
    children = multiprocessing.active_children()
    for child in children:
        child.join(timeout=max(0.0, deadline - time.monotonic()))
    terminated = 0
    for child in children:
        if child.is_alive():
            child.terminate()
            child.join(timeout=join_s)
            terminated += 1
    return terminated
