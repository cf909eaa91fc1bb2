"""A numpy-version-independent pickle writer, for the synthetic CIFAR batch files.

``pickle.dumps`` of a numpy array names ``numpy._core.multiarray._reconstruct`` under
numpy 2 and ``numpy.core.multiarray._reconstruct`` under numpy 1, so its bytes depend on
the numpy version, and the synthetic files' bytes are pinned. :func:`_pickle` writes
opcode by opcode instead; ``data`` is written as the call ``numpy.ndarray((n, 3072),
"uint8", bytearray(<raw bytes>))``, which both numpy 1 and 2 evaluate to the same
writable uint8 array, so torchvision's reader (``pickle.load(f, encoding="latin1")``,
then ``np.vstack`` of the ``data`` values) reads it unchanged.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class _Uint8Rows:
    """A (rows, cols) uint8 array, written by :func:`_pickle` as a call of ``numpy.ndarray``."""

    raw: bytes
    rows: int
    cols: int


def _pickle(obj: object) -> bytes:
    """A protocol-3 pickle of ``obj``, written opcode by opcode (no memo, no framing).

    Handles dicts, lists, str, ints 0 <= n < 2**31 and :class:`_Uint8Rows`; anything else
    is a ``TypeError``. The bytes depend on the value only, not on the Python or numpy
    version (see the module docstring).
    """
    out = bytearray(b"\x80\x03")  # PROTO 3
    _pickle_into(out, obj)
    out += b"."  # STOP
    return bytes(out)


def _pickle_into(out: bytearray, obj: object) -> None:
    if isinstance(obj, _Uint8Rows):
        if len(obj.raw) != obj.rows * obj.cols:
            raise ValueError("raw bytes do not fill the shape")
        out += b"cnumpy\nndarray\n("  # GLOBAL numpy.ndarray, MARK
        _pickle_into(out, obj.rows)
        _pickle_into(out, obj.cols)
        out += b"\x86"  # TUPLE2: the shape
        _pickle_into(out, "uint8")
        out += b"cbuiltins\nbytearray\nB" + struct.pack("<I", len(obj.raw)) + obj.raw  # GLOBAL, BINBYTES
        out += b"\x85R"  # TUPLE1, REDUCE: bytearray(raw), a writable buffer
        out += b"tR"  # TUPLE, REDUCE: numpy.ndarray(shape, "uint8", buffer)
    elif isinstance(obj, bool) or not isinstance(obj, (int, str, list, dict)):
        raise TypeError(f"cannot write {type(obj).__name__} values")
    elif isinstance(obj, int):
        if 0 <= obj < 1 << 8:
            out += b"K" + bytes([obj])  # BININT1
        elif 0 <= obj < 1 << 16:
            out += b"M" + struct.pack("<H", obj)  # BININT2
        elif 0 <= obj < 1 << 31:
            out += b"J" + struct.pack("<i", obj)  # BININT
        else:
            raise TypeError(f"cannot write the integer {obj}")
    elif isinstance(obj, str):
        encoded = obj.encode("utf-8")
        out += b"X" + struct.pack("<I", len(encoded)) + encoded  # BINUNICODE
    elif isinstance(obj, list):
        out += b"]"  # EMPTY_LIST
        if obj:
            out += b"("  # MARK
            for item in obj:
                _pickle_into(out, item)
            out += b"e"  # APPENDS
    else:
        out += b"}"  # EMPTY_DICT
        if obj:
            out += b"("  # MARK
            for key, value in obj.items():
                _pickle_into(out, key)
                _pickle_into(out, value)
            out += b"u"  # SETITEMS
