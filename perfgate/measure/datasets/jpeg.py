"""A baseline JPEG encoder in integer arithmetic, for the synthetic Imagenette images.

libjpeg's fixed-point colour conversion, an integer DCT, the standard quality-scaled
quantisation and Huffman tables of the JPEG specification. PIL's encoder output depends
on the libjpeg it was built with (libjpeg-turbo, libjpeg 9, mozjpeg and their versions),
and the synthetic files' bytes are pinned; PNG or BMP instead would change what is
measured: the data path of the Imagenette workload is JPEG decoding, which dominates its
loader cost. The files are ordinary baseline JFIF JPEGs, decoded by PIL like real
Imagenette. The one float ``matmul``, the DCT, multiplies integers small enough (below
2**40) that every product and partial sum is exact in float64, so its result is the
integer one on every machine.
"""

from __future__ import annotations

import struct

import numpy as np

_ZIGZAG = np.array([
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
])  # fmt: skip
"""The natural (row-major) index of each coefficient in zigzag order."""

# The example quantisation tables of the JPEG specification (Annex K.1), natural order.
_LUMA_QUANT = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
])  # fmt: skip
_CHROMA_QUANT = np.array([
    17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99,
    24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99,
    *[99] * 32,
])  # fmt: skip

# The typical Huffman tables of the JPEG specification (Annex K.3): code counts per
# length 1..16, then the symbols in code order.
_DC_LUMA = ((0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0), tuple(range(12)))
_DC_CHROMA = ((0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0), tuple(range(12)))
_AC_LUMA = ((0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7D), bytes.fromhex(
    "01020300041105122131410613516107227114328191a1082342b1c11552d1f0"
    "2433627282090a161718191a25262728292a3435363738393a43444546474849"
    "4a535455565758595a636465666768696a737475767778797a83848586878889"
    "8a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5"
    "c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8"
    "f9fa"
))
_AC_CHROMA = ((0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77), bytes.fromhex(
    "000102031104052131061241510761711322328108144291a1b1c109233352f0"
    "156272d10a162434e125f11718191a262728292a35363738393a434445464748"
    "494a535455565758595a636465666768696a737475767778797a828384858687"
    "88898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3"
    "c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8"
    "f9fa"
))


def _dct_matrix() -> np.ndarray:
    """The 8-point DCT-II matrix ``c(u)/2 * cos((2x+1) u pi / 16)`` scaled by 2**14, rounded.

    Built from the rounded values of ``8192 cos(k pi / 16)``, k = 0..8, so no floating
    point is involved.
    """
    cos16 = (8192, 8035, 7568, 6811, 5793, 4551, 3135, 1598, 0)

    def cos(k: int) -> int:
        k %= 32
        k = 32 - k if k > 16 else k
        return -cos16[16 - k] if k > 8 else cos16[k]

    return np.array([[cos(4) if u == 0 else cos((2 * x + 1) * u) for x in range(8)] for u in range(8)],
                    dtype=np.int64)


_DCT = _dct_matrix()
_NBITS = np.array([int(n).bit_length() for n in range(1 << 12)], dtype=np.int64)


def _huffman_codes(table: tuple[tuple[int, ...], bytes | tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """(code, length) of every symbol of a table given as in the specification (Annex C)."""
    counts, symbols = table
    codes = np.zeros(256, dtype=np.int64)
    lengths = np.zeros(256, dtype=np.int64)
    code = k = 0
    for length, count in enumerate(counts, 1):
        for _ in range(count):
            codes[symbols[k]], lengths[symbols[k]] = code, length
            code += 1
            k += 1
        code <<= 1
    return codes, lengths


_DC_CODES, _DC_LENGTHS = (np.stack(pair) for pair in zip(*map(_huffman_codes, (_DC_LUMA, _DC_CHROMA)), strict=True))
_AC_CODES, _AC_LENGTHS = (np.stack(pair) for pair in zip(*map(_huffman_codes, (_AC_LUMA, _AC_CHROMA)), strict=True))


def _quant_table(base: np.ndarray, quality: int) -> np.ndarray:
    """libjpeg's scaling of a base table to ``quality`` (1-100), limited to baseline's 1-255."""
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return np.clip((base * scale + 50) // 100, 1, 255)


def _segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">HH", marker, len(payload) + 2) + payload


def _encode_jpeg(rgb: np.ndarray, quality: int) -> bytes:
    """A baseline JFIF JPEG of an (height, width, 3) uint8 RGB image: 4:2:0, standard tables.

    Integer arithmetic throughout, so the bytes are the same on every machine and with
    every numpy version.
    """
    height, width, _ = rgb.shape
    r, g, b = (rgb[..., c].astype(np.int32) for c in range(3))
    # libjpeg's fixed-point RGB -> YCbCr (jccolor.c); below 2**25, so int32 is enough.
    planes = [
        (19595 * r + 38470 * g + 7471 * b + 32768) >> 16,
        ((-11059 * r - 21709 * g + 32768 * b + 32767) >> 16) + 128,
        ((32768 * r - 27439 * g - 5329 * b + 32767) >> 16) + 128,
    ]
    ph, pw = -(-height // 16) * 16, -(-width // 16) * 16
    planes = [np.pad(p, ((0, ph - height), (0, pw - width)), mode="edge") for p in planes]
    for c in (1, 2):  # 2x2 chroma subsampling
        p = planes[c]
        planes[c] = (p[0::2, 0::2] + p[1::2, 0::2] + p[0::2, 1::2] + p[1::2, 1::2] + 2) >> 2
    my, mx = ph // 16, pw // 16
    luma = planes[0].reshape(my, 2, 8, mx, 2, 8).transpose(0, 3, 1, 4, 2, 5).reshape(my * mx, 4, 8, 8)
    chroma = [p.reshape(my, 8, mx, 8).transpose(0, 2, 1, 3).reshape(my * mx, 1, 8, 8) for p in planes[1:]]
    blocks = np.concatenate([luma, *chroma], axis=1).reshape(-1, 8, 8) - 128  # scan order: Y Y Y Y Cb Cr
    tables = np.tile(np.array([0, 0, 0, 0, 1, 1]), my * mx)
    components = np.tile(np.array([0, 0, 0, 0, 1, 2]), my * mx)
    quant = np.stack([_quant_table(_LUMA_QUANT, quality), _quant_table(_CHROMA_QUANT, quality)])
    # The DCT coefficients times 2**28. The float64 products and sums are of integers below
    # 2**40, so every one of them is exact whatever the summation order of the library:
    # the result is the integer one, only faster than numpy's integer matmul.
    dct = _DCT.astype(np.float64)
    scaled = (dct @ blocks.astype(np.float64) @ dct.T).astype(np.int64)
    divisor = quant[tables].reshape(-1, 8, 8) << 28
    coefs = np.sign(scaled) * ((np.abs(scaled) + divisor // 2) // divisor)
    zigzag = coefs.reshape(-1, 64)[:, _ZIGZAG].astype(np.int32)  # |coefficient| < 2**11
    header = b"".join([
        b"\xff\xd8",
        _segment(0xFFE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"),
        _segment(0xFFDB, b"".join(bytes([t]) + bytes(quant[t][_ZIGZAG].tolist()) for t in (0, 1))),
        _segment(0xFFC0, struct.pack(">BHHB", 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"),
        _segment(0xFFC4, b"".join(
            bytes([cls << 4 | t]) + bytes(spec[0]) + bytes(spec[1])
            for cls, t, spec in ((0, 0, _DC_LUMA), (1, 0, _AC_LUMA), (0, 1, _DC_CHROMA), (1, 1, _AC_CHROMA))
        )),
        _segment(0xFFDA, b"\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00"),
    ])  # fmt: skip
    return header + _entropy_coded(zigzag, tables, components) + b"\xff\xd9"


def _entropy_coded(zigzag: np.ndarray, tables: np.ndarray, components: np.ndarray) -> bytes:
    """The Huffman-coded scan of quantised blocks (n, 64) in zigzag order, byte-stuffed."""
    n = zigzag.shape[0]
    diff = np.empty(n, dtype=np.int64)
    for c in range(3):  # DC values are coded as differences within each component
        sel = components == c
        diff[sel] = np.diff(zigzag[sel, 0], prepend=0)

    def amplitude(value: np.ndarray, size: np.ndarray) -> np.ndarray:
        return np.where(value < 0, value + (1 << size) - 1, value)

    size = _NBITS[np.abs(diff)]
    values = [(_DC_CODES[tables, size] << size) | amplitude(diff, size)]
    lengths = [_DC_LENGTHS[tables, size] + size]
    keys = [np.arange(n, dtype=np.int64) * 1024]
    # AC: (run of zeros, size) symbols, a ZRL (0xF0) for every 16 zeros of a longer run,
    # and an end of block (0x00) after the last non-zero coefficient unless it is the 63rd.
    block, j = np.nonzero(zigzag[:, 1:])
    pos = j + 1
    value = zigzag[block, pos]
    first = np.ones(block.size, dtype=bool)
    first[1:] = block[1:] != block[:-1]
    prev = np.where(first, 0, np.roll(pos, 1))
    run = pos - prev - 1
    size = _NBITS[np.abs(value)]
    if size.size and size.max() > 10:
        raise ValueError("an AC coefficient is out of baseline range")
    table = tables[block]
    symbol = (run & 15) << 4 | size
    values.append((_AC_CODES[table, symbol] << size) | amplitude(value, size))
    lengths.append(_AC_LENGTHS[table, symbol] + size)
    keys.append(block * 1024 + pos * 8 + 4)
    zrl = run >> 4
    owner = np.repeat(np.arange(block.size), zrl)
    nth = np.arange(owner.size) - np.repeat(np.cumsum(zrl) - zrl, zrl)
    values.append(_AC_CODES[table[owner], 0xF0])
    lengths.append(_AC_LENGTHS[table[owner], 0xF0])
    keys.append(block[owner] * 1024 + pos[owner] * 8 + nth)
    last = np.zeros(n, dtype=np.int64)
    ends = np.ones(block.size, dtype=bool)
    ends[:-1] = block[1:] != block[:-1]
    last[block[ends]] = pos[ends]
    eob = np.flatnonzero(last < 63)
    values.append(_AC_CODES[tables[eob], 0x00])
    lengths.append(_AC_LENGTHS[tables[eob], 0x00])
    keys.append(eob * 1024 + 64 * 8)

    order = np.argsort(np.concatenate(keys), kind="stable")
    value_all = np.concatenate(values)[order]
    length_all = np.concatenate(lengths)[order]
    # Each code (at most 27 bits) lies within the five bytes from its first bit's byte.
    # Codes do not share bits, so adding each one's byte parts sets every byte exactly.
    end = np.cumsum(length_all)
    start = end - length_all
    total = int(end[-1])
    aligned = value_all << (40 - (start & 7) - length_all)
    first = start >> 3
    nbytes = -(-total // 8)
    data = np.zeros(nbytes + 4, dtype=np.int64)
    for k in range(5):  # bincount sums in float64, exactly for these small integers
        part = (aligned >> (32 - 8 * k)) & 0xFF
        data += np.bincount(first + k, weights=part, minlength=nbytes + 4).astype(np.int64)
    data = data[:nbytes].astype(np.uint8)
    if total % 8:
        data[-1] |= (1 << (8 - total % 8)) - 1  # the last byte is padded with 1 bits
    return np.insert(data, np.flatnonzero(data == 0xFF) + 1, 0).tobytes()  # 0xFF is followed by 0x00
