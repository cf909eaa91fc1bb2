"""Where a script run's hooks attach to torch: the patches and global hooks that tell
:class:`perfgate.measure.script_hooks.ScriptHooks` what the script calls (the phases and the
boundaries described there), installed for one run and undone after it, and undone first
thing in any process forked while they are installed.

``script_hooks`` holds the state the hooks share and what they conclude; this module holds
only the attaching: a patch per torch entry point (``nn.Module.__call__``, ``Tensor.to``/
``cuda``/``backward``, ``torch.autograd.backward``, the DataLoader iterator's ``__next__``
and ``__iter__``, ``zero_grad``, gradient clipping, the LR schedulers' and GradScaler's
``step``, Lightning's closure) and the optimizer step hooks.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from perfgate.measure.script_hooks import (
    CLIPS,
    COPIES,
    LIGHTNING_CLOSURES,
    SCALER_SKIPS,
    SCHEDULER_STEPS,
    ZERO_GRADS,
    ScriptHooks,
    ScriptStop,
)
from perfgate.measure.timeline import BACKWARD, DATA, H2D, NO_TIMELINE, OPTIMIZER

_MISSING = object()


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name = value`` for the duration; what was there before (or its absence) comes back."""
    before = owner.__dict__.get(name, _MISSING)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if before is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


@contextlib.contextmanager
def installed(h: ScriptHooks) -> Iterator[ScriptHooks]:
    """The hooks in torch for the duration; everything is restored after, also on an error.

    They act only in this process: a process forked while they are installed (a DataLoader
    worker, a bare ``os.fork``) undoes them first thing (:func:`_disarm_in_child`), so it
    runs torch unhooked and never touches the timeline."""
    is_compiling = torch.compiler.is_compiling
    module_call = torch.nn.Module.__call__
    tensor_to = torch.Tensor.to
    tensor_cuda = torch.Tensor.cuda
    tensor_backward = torch.Tensor.backward
    autograd_backward = torch.autograd.backward
    loader_next = _BaseDataLoaderIter.__next__
    loader_iter = DataLoader.__iter__
    optimizer_zero_grad = torch.optim.Optimizer.zero_grad
    module_zero_grad = torch.nn.Module.zero_grad
    refs_get = h.batch_refs.get
    enter, leave = h.enter, h.exit

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if h.depth:  # an inner module: nothing to do, unless the step's precision is still to read
            if not is_compiling() and h.probe_module is not None:  # compiling first: no guard on it
                h.read_precision(h.probe_module, outer=False)
            return module_call(self, *args, **kwargs)
        if is_compiling():  # dynamo tracing: nothing to do
            return module_call(self, *args, **kwargs)
        h.start_forward(self)
        h.depth = 1
        try:
            return module_call(self, *args, **kwargs)
        finally:
            h.depth = 0

    def mover(original: Callable[..., Any]) -> Callable[..., Any]:
        def move(self: Any, *args: Any, **kwargs: Any) -> Any:
            if is_compiling():  # before id(): dynamo would guard on this very tensor and recompile
                return original(self, *args, **kwargs)
            ref = refs_get(id(self))
            if ref is None or ref() is not self:
                return original(self, *args, **kwargs)
            enter(H2D)
            try:
                moved = original(self, *args, **kwargs)
            finally:
                leave()
            if moved is not self:
                h.count[COPIES] += 1
            return moved

        return move

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if is_compiling() or h.cur == BACKWARD:
            return tensor_backward(self, *args, **kwargs)
        enter(BACKWARD)
        h.note_loss(self)
        try:
            return tensor_backward(self, *args, **kwargs)
        finally:
            leave()

    def autograd(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if is_compiling() or h.cur == BACKWARD:
            return autograd_backward(tensors, *args, **kwargs)
        enter(BACKWARD)
        single = tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors
        h.note_loss(single)
        try:
            return autograd_backward(tensors, *args, **kwargs)
        finally:
            leave()

    def next_batch(self: Any) -> Any:
        if h.stopping:
            raise ScriptStop(h.failure or "the measured window is complete")
        enter(DATA)
        try:
            batch = loader_next(self)
        except StopIteration:
            h.exhausted += 1
            raise
        finally:
            leave()
        h.on_batch(self, batch)
        return batch

    def iterate(self: Any) -> Any:
        adopt_frameworks()
        iterator = loader_iter(self)
        with contextlib.suppress(TypeError):
            h.iterators[iterator] = weakref.ref(self)
        return iterator

    def zero_grad(original: Callable[..., Any]) -> Callable[..., Any]:
        def zero(self: Any, *args: Any, **kwargs: Any) -> Any:
            if is_compiling():
                return original(self, *args, **kwargs)
            enter(OPTIMIZER)
            h.count[ZERO_GRADS] += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                leave()

        return zero

    def training_step(closure: Callable[..., Any]) -> Callable[..., Any]:
        """``closure`` as a training-step closure: forward from its start (:meth:`ScriptHooks.closure_begin`)."""

        @functools.wraps(closure)
        def run(*args: Any, **kwargs: Any) -> Any:
            if is_compiling() or not h.closure_begin():
                return closure(*args, **kwargs)
            try:
                return closure(*args, **kwargs)
            finally:
                h.closure_end()

        return run

    def with_closure(args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        """The step's arguments with its closure (``step(closure)``, ``args[0]`` is the optimizer)
        as a training-step closure; None when it has none."""
        closure = kwargs.get("closure")
        if callable(closure):
            return args, {**kwargs, "closure": training_step(closure)}
        if "closure" not in kwargs and len(args) > 1 and callable(args[1]):
            return (args[0], training_step(args[1]), *args[2:]), kwargs
        return None

    adopted: set[str] = set()

    def adopt_frameworks() -> None:
        """Lightning's ``Closure`` as a training-step closure once Lightning is loaded (checked
        as each DataLoader iterator begins and at each optimizer step: two dictionary look-ups)."""
        for module_name in LIGHTNING_CLOSURES:
            module = sys.modules.get(module_name)
            if module is None or module_name in adopted:
                continue
            adopted.add(module_name)
            closure_type = getattr(module, "Closure", None)
            # a class that defines __call__ itself (any class is callable through its metaclass)
            if isinstance(closure_type, type) and any("__call__" in vars(k) for k in closure_type.__mro__[:-1]):
                stack.enter_context(_patched(closure_type, "__call__", training_step(closure_type.__call__)))

    def step_pre(optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        h.opt_depth += 1
        if h.opt_depth > 1:
            return None
        if h.stopping:
            raise ScriptStop(h.failure or "the measured window is complete")
        h.check_optimizer(optimizer)
        adopt_frameworks()
        enter(OPTIMIZER)
        return with_closure(args, kwargs)

    def booked(original: Callable[..., Any], counter: int) -> Callable[..., Any]:
        """``original`` (clipping, a scheduler's step) booked as optimizer and counted, once
        when one of them calls another."""

        @functools.wraps(original)
        def run(*args: Any, **kwargs: Any) -> Any:
            if is_compiling() or h.named_depth:
                return original(*args, **kwargs)
            h.named_depth = 1
            enter(OPTIMIZER)
            h.count[counter] += 1
            try:
                return original(*args, **kwargs)
            finally:
                leave()
                h.named_depth = 0

        return run

    scaler_step = torch.amp.GradScaler.step

    def scaled_step(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """``GradScaler.step``: when it returns without the optimizer having stepped (inf or NaN
        gradients), the skip is counted in the step now running, which the next boundary ends."""
        if is_compiling():
            return scaler_step(self, optimizer, *args, **kwargs)
        before = h.steps_done
        result = scaler_step(self, optimizer, *args, **kwargs)
        if h.steps_done == before:
            h.count[SCALER_SKIPS] += 1
        return result

    def step_post(optimizer: Any, args: Any, kwargs: Any) -> None:
        h.opt_depth -= 1
        if h.opt_depth > 0:
            return
        h.opt_depth = 0
        leave()
        h.step_end()

    with contextlib.ExitStack() as stack:
        _INSTALLED.append(_disarmer(h, stack))
        stack.callback(_INSTALLED.pop)
        stack.enter_context(_patched(torch.nn.Module, "__call__", call))
        stack.enter_context(_patched(torch.Tensor, "to", mover(tensor_to)))
        stack.enter_context(_patched(torch.Tensor, "cuda", mover(tensor_cuda)))
        stack.enter_context(_patched(torch.Tensor, "backward", backward))
        stack.enter_context(_patched(torch.autograd, "backward", autograd))
        stack.enter_context(_patched(_BaseDataLoaderIter, "__next__", next_batch))
        stack.enter_context(_patched(DataLoader, "__iter__", iterate))
        stack.enter_context(_patched(torch.optim.Optimizer, "zero_grad", zero_grad(optimizer_zero_grad)))
        stack.enter_context(_patched(torch.nn.Module, "zero_grad", zero_grad(module_zero_grad)))
        stack.enter_context(_patched(torch.amp.GradScaler, "step", scaled_step))
        for owner, name, wrapped in _booked_calls(booked):
            stack.enter_context(_patched(owner, name, wrapped))
        pre = register_optimizer_step_pre_hook(step_pre)
        stack.callback(pre.remove)
        post = register_optimizer_step_post_hook(step_post)
        stack.callback(post.remove)
        yield h


_INSTALLED: list[Callable[[], None]] = []
"""Per :func:`installed` running in this process (innermost last), what disarms it in a forked child."""


def _disarmer(h: ScriptHooks, stack: contextlib.ExitStack) -> Callable[[], None]:
    """What a process forked under the hooks runs first (:func:`_disarm_in_child`): the timeline
    and the window's callbacks become no-ops (a reference to a hooked call kept somewhere acts
    on nothing), then every patch is undone and the optimizer hooks removed, so the child runs
    torch as it was before the hooks."""

    def disarm() -> None:
        h.timeline = NO_TIMELINE
        h.switch = NO_TIMELINE.switch
        h.on_open = h.on_close = lambda: None
        h.forked = True
        stack.close()

    return disarm


def _disarm_in_child() -> None:
    """``os.register_at_fork(after_in_child=...)``: the hooks act only in the process that
    installed them. A DataLoader worker (fork start method) is forked from the script's
    process, often inside the window (a non-persistent loader's new epoch, a validation
    loader): torchvision transforms are ``nn.Module`` calls, and without this the worker's
    first transform would switch the copied timeline to forward and, on CUDA, record an
    event in a forked child of a CUDA process."""
    while _INSTALLED:
        disarm = _INSTALLED[-1]
        try:
            disarm()  # its stack's last callback pops it
        except BaseException:  # noqa: BLE001 - nothing may escape into the forked child's start
            pass
        if _INSTALLED and _INSTALLED[-1] is disarm:
            _INSTALLED.pop()


os.register_at_fork(after_in_child=_disarm_in_child)


def _booked_calls(booked: Callable[[Callable[..., Any], int], Callable[..., Any]]) -> list[tuple[Any, str, Any]]:
    """What to patch so that clipping and schedulers' steps are booked: (owner, name, the
    booked function). The clipping functions are patched where torch defines them and where
    ``torch.nn.utils`` re-exports them (one wrapper for both); a scheduler's ``step`` in each
    ``torch.optim.lr_scheduler`` class that defines its own."""
    from torch.nn.utils import clip_grad
    from torch.optim import lr_scheduler

    calls: list[tuple[Any, str, Any]] = []
    wrappers: dict[int, Any] = {}
    for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_"):
        for owner in (torch.nn.utils, clip_grad):
            original = owner.__dict__.get(name)
            if callable(original):
                wrapped = wrappers.setdefault(id(original), booked(original, CLIPS))
                calls.append((owner, name, wrapped))
    for value in list(vars(lr_scheduler).values()):
        if (isinstance(value, type) and issubclass(value, (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau))
                and callable(value.__dict__.get("step"))):
            calls.append((value, "step", booked(value.__dict__["step"], SCHEDULER_STEPS)))
    return calls
