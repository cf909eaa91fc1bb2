"""Synchronisations for the counted run: which aten calls force one, and where a call was made.

:func:`forces_sync` says whether an aten call makes the host wait for the device (a
value, a data-dependent shape, a blocking copy to the host); :func:`copy_kind` what a
copy operator copies; :class:`Locator` names the line of the workload's code that made
a call. The counting modes (:mod:`perfgate.measure.counting`) call them on every aten
call of the counted steps.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping
from types import FrameType
from typing import Any

# --- what forces a host synchronisation -------------------------------------------------

SYNC_OPS = frozenset({
    "aten::_local_scalar_dense",  # .item(), float(t), bool(t), int(t)
    "aten::nonzero",  # torch.nonzero, torch.where(cond), t.nonzero()
    "aten::masked_select",
    "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
    "aten::unique_dim_consecutive",
    "aten::bincount",  # its length is the largest value
    "aten::equal",  # returns a Python bool
})
"""Operators whose result the host must wait for: a value or a data-dependent shape."""
_MASK_INDEXED = frozenset({"aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"})
"""Indexing that synchronises when an index is a boolean (or byte) mask: it becomes nonzero()."""
_D2H = frozenset({"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"})


def _tensors(value: Any, out: list[Any]) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, out)
    return out


def _device_type(value: Any) -> str | None:
    import torch

    if value is None:
        return None
    return torch.device(value).type


def copy_kind(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    """(dtype conversion, device copy, device to host and blocking) of a copy operator."""
    import torch

    if name == "aten::_to_copy" and args and isinstance(args[0], torch.Tensor):
        src = args[0]
        dtype, device = kwargs.get("dtype"), _device_type(kwargs.get("device"))
        conversion = dtype is not None and dtype != src.dtype
        moved = device is not None and device != src.device.type
        return conversion, moved, moved and device == "cpu" and not kwargs.get("non_blocking", False)
    if name in ("aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize") and len(args) >= 2:
        dst, src = (args[0], args[1]) if name == "aten::copy_" else (args[1], args[0])
        if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor):
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            moved = dst.device.type != src.device.type
            return (dst.dtype != src.dtype, moved,
                    moved and dst.device.type == "cpu" and not bool(non_blocking))
    if name == "aten::_foreach_copy_" and len(args) >= 2:
        pairs = list(zip(args[0], args[1], strict=True))
        return (any(d.dtype != s.dtype for d, s in pairs), any(d.device != s.device for d, s in pairs), False)
    return False, False, False


def forces_sync(name: str, overload: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], device: str) -> bool:
    """Whether this aten call makes the host wait for the device.

    On CUDA only calls on device tensors count (``.item()`` of a CPU tensor waits for
    nothing). On the CPU nothing waits, and the same calls are counted as the stand-in:
    the same code on a GPU would synchronise there.
    """
    import torch

    if name in _D2H:
        return copy_kind(name, args, kwargs)[2]
    if name in SYNC_OPS or (name == "aten::repeat_interleave" and overload == "Tensor"
                            and kwargs.get("output_size") is None):
        pass
    elif name in _MASK_INDEXED and len(args) >= 2 and isinstance(args[1], (list, tuple)):
        if not any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in args[1]):
            return False
    else:
        return False
    return device == "cpu" or any(t.device.type != "cpu" for t in _tensors((args, kwargs), []))


# --- where in the Python code ---------------------------------------------------------

_PERFGATE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIRS = tuple({os.path.abspath(p) + os.sep for p in (sysconfig.get_paths().get("stdlib"),
                                                           sysconfig.get_paths().get("platstdlib")) if p})
NO_FRAME = "<no Python frame outside torch>"


class Locator:
    """``path:line`` of the first frame outside torch, perfgate and the standard library.

    When every frame is torch's or perfgate's (the step's own host-to-device copy, for
    example), the innermost perfgate line is named instead; when there is no Python
    frame at all outside torch (work on an autograd thread), :data:`NO_FRAME`. The frames
    of ``counting_file`` (the module whose dispatch mode and warning hook ask) are
    skipped like torch's: they are never the line that made the call.
    """

    def __init__(self, counting_file: str) -> None:
        import torch

        self.torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        self.counting_file = os.path.abspath(counting_file)
        self.cwd = os.path.abspath(os.getcwd()) + os.sep
        self._cache: dict[str, tuple[str, str]] = {}
        self.boundary: Any = None
        """The counting loop's frame: the callers above it are not the step's."""

    def _kind_and_name(self, filename: str) -> tuple[str, str]:
        cached = self._cache.get(filename)
        if cached is not None:
            return cached
        path = os.path.abspath(filename)
        if filename.startswith("<"):
            kind = "skip"
        elif path.startswith(self.torch_dir) or path == self.counting_file:
            kind = "skip"
        elif path.startswith(_PERFGATE_DIR):
            kind = "perfgate"
        elif path.startswith(_STDLIB_DIRS) and "-packages" not in path:
            kind = "skip"
        else:
            kind = "user"
        self._cache[filename] = (kind, self._display(path))
        return kind, self._cache[filename][1]

    def _display(self, path: str) -> str:
        if path.startswith(_PERFGATE_DIR):
            return os.path.relpath(path, os.path.dirname(_PERFGATE_DIR.rstrip(os.sep)))
        if path.startswith(self.cwd):
            return os.path.relpath(path, self.cwd)
        roots = [os.path.abspath(p) + os.sep for p in sys.path if p and path.startswith(os.path.abspath(p) + os.sep)]
        if roots:
            return os.path.relpath(path, max(roots, key=len))
        return path

    def locate(self) -> tuple[str, bool]:
        """The location, and whether it is the workload's own code (not torch's or perfgate's)."""
        frame: FrameType | None = sys._getframe(1)
        fallback = None
        while frame is not None and frame is not self.boundary:
            kind, name = self._kind_and_name(frame.f_code.co_filename)
            if kind == "user":
                return f"{name}:{frame.f_lineno}", True
            if kind == "perfgate" and fallback is None:
                fallback = f"{name}:{frame.f_lineno}"
            frame = frame.f_back
        return fallback or NO_FRAME, False
