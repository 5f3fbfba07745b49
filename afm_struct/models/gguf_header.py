"""A bounds-checked reader of the GGUF header.

``mx.load`` trusts the file and can crash the process on a truncated or corrupt GGUF, so the
header (metadata and tensor table) is walked in Python first and every tensor is checked to
lie inside the file.  Only then is the file handed to MLX.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError

_LENGTH = struct.Struct("<Q")  # a string's byte count
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
# ggml type → (block elements, block bytes), for the types llama.cpp writes.
_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
           9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
           14: (256, 210), 15: (256, 292), 30: (1, 2), 39: (32, 17)}
TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
              10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16",
              39: "MXFP4"}
# What ``mx.load`` reads: Q4_0/Q4_1/Q8_0 into MLX's affine layout, floats as they are (BF16 is
# read as float16 by MLX, so :mod:`gguf` re-reads it exactly from the file).
MLX_TYPES = frozenset({0, 1, 2, 3, 8, 30})
BF16 = 30
MXFP4 = 39  # gpt-oss's expert weights as llama.cpp converts them


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: numpy-order shape, ggml type, absolute byte offset."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def type_name(self) -> str:
        """The ggml type's name (``Q4_K``), or its number when unknown."""
        return TYPE_NAMES.get(self.ggml_type, f"type {self.ggml_type}")


@dataclass(frozen=True)
class GGUFHeader:
    """``general.architecture`` and the tensor table of a checked file."""

    architecture: str | None
    tensors: tuple[TensorInfo, ...]


class _Reader:
    def __init__(self, data: bytes | mmap.mmap, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ModelLoadError(f"{self.path} is truncated or corrupt (header runs past the end)")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str) -> int | float | bool:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = int(self.scalar("Q"))
        return self.take(n).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Step over ``count`` strings, checking each length against the end of the data.

        The string arrays are the vocabulary (tokens, merges: ~100k strings in SmolLM2's file),
        and no caller reads them from here (MLX reads the metadata); decoding each into a list
        that was thrown away cost ~0.5 s of CPU per load."""
        data, pos, end = self.data, self.pos, len(self.data)
        unpack = _LENGTH.unpack_from
        for _ in range(count):
            if pos + 8 > end:
                break
            pos += 8 + unpack(data, pos)[0]
            if pos > end:
                break
        else:
            self.pos = pos
            return
        raise ModelLoadError(f"{self.path} is truncated or corrupt (header runs past the end)")

    def value(self, vtype: int) -> object:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            item_type, count = int(self.scalar("I")), int(self.scalar("Q"))
            if count > len(self.data):
                raise ModelLoadError(f"{self.path} is corrupt (array of {count} items)")
            if item_type in _SCALARS:  # skip numeric arrays without building them
                self.take(count * struct.calcsize(_SCALARS[item_type]))
                return None
            if item_type == 8:
                self.skip_strings(count)
                return None
            return [self.value(item_type) for _ in range(count)] if item_type != 9 else None
        raise ModelLoadError(f"{self.path} is corrupt (unknown metadata type {vtype})")


def check_gguf(path: Path) -> str | None:
    """Validate the header and tensor bounds of ``path``; return ``general.architecture``."""
    return read_header(path).architecture


def read_header(path: Path) -> GGUFHeader:
    """Validate the header and tensor bounds of ``path``; return its architecture and tensors."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            # Mapped, not read: the header is a few MB at most (vocabularies) and only its pages
            # are touched; reading the file (as before, capped at 256 MB) copied the weights too.
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    if data is None:
        return _read_header(_Reader(b"", path), path, size)
    with data:
        return _read_header(_Reader(data, path), path, size)


def _read_header(r: _Reader, path: Path, size: int) -> GGUFHeader:
    """The header walked from the start of ``r`` (``size``: the file's, for the tensor bounds)."""
    if r.take(4) != b"GGUF":
        raise ModelLoadError(f"{path} is not a GGUF file (bad magic bytes)")
    version = int(r.scalar("I"))
    if version not in (2, 3):
        raise ModelLoadError(f"{path} has unsupported GGUF version {version}")
    n_tensors, n_kv = int(r.scalar("Q")), int(r.scalar("Q"))
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        raise ModelLoadError(f"{path} is corrupt (implausible header counts)")
    arch, alignment = None, 32
    for _ in range(n_kv):
        key = r.string()
        value = r.value(int(r.scalar("I")))
        if key == "general.architecture":
            arch = str(value)
        elif key == "general.alignment" and isinstance(value, int) and value > 0:
            alignment = value
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = int(r.scalar("I"))
        if n_dims > 8:
            raise ModelLoadError(f"{path} is corrupt (tensor {name} has {n_dims} dims)")
        dims = [int(r.scalar("Q")) for _ in range(n_dims)]
        ttype, offset = int(r.scalar("I")), int(r.scalar("Q"))
        tensors.append((name, dims, ttype, offset))
    data_start = (r.pos + alignment - 1) // alignment * alignment
    infos = []
    for name, dims, ttype, offset in tensors:
        count = 1
        for d in dims:
            count *= d
        per_block, block_bytes = _BLOCKS.get(ttype, (1, 0))
        end = data_start + offset + (count + per_block - 1) // per_block * block_bytes
        if end > size:
            raise ModelLoadError(f"{path} is truncated: tensor {name} ends past the end of the file "
                                 "(re-download or reinstall the model)")
        # GGUF lists dimensions innermost first; numpy and MLX shapes are the other way round.
        infos.append(TensorInfo(name, tuple(reversed(dims)), ttype, data_start + offset))
    return GGUFHeader(arch, tuple(infos))
