"""The one framing of the engine's four binary states, and the reader that decodes them.

Every state column (``cursors.state``, ``cursors.subscription_state``,
``topic_partitions.ledgers``, ``topic_partitions.producers_state``) starts with a three-byte
magic that names the state and a version byte, then little-endian fields. A value that a
damaged file, a foreign writer or a newer ackstate put there must fail as ``CorruptState``
naming the state, never as a ``struct.error``, ``IndexError`` or ``UnicodeDecodeError`` from
deep inside a decoder: the readers of these columns (``stats``, ``compact``, the apply UDF)
report ``CorruptState`` as such. So the decoders read through ``StateReader``, whose every
read checks its bounds.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from engine.errors import CorruptState

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")


def frame(magic: bytes, version: int) -> bytes:
    """The first bytes of an encoded state: its magic and its version."""
    return magic + _U8.pack(version)


class StateReader:
    """Reads one encoded state front to back; a read past its end, a wrong magic or version,
    a damaged field or bytes left over is ``CorruptState`` with ``what`` (``cursor state``).

    ``older`` lists earlier versions the decoder still reads; ``version`` is the one found."""

    __slots__ = ("data", "offset", "version", "what")

    def __init__(
        self,
        data: bytes | memoryview,
        magic: bytes,
        version: int,
        what: str,
        *,
        older: tuple[int, ...] = (),
    ) -> None:
        self.data = data
        self.what = what
        if bytes(data[: len(magic)]) != magic:
            raise CorruptState(f"{what}: bad magic")
        self.offset = len(magic)
        (found,) = self.unpack(_U8)
        if found != version and found not in older:
            raise CorruptState(f"{what}: unsupported version {found}")
        self.version = int(found)

    def corrupt(self, detail: str) -> CorruptState:
        """A ``CorruptState`` for a value the decoder found impossible (an unknown index)."""
        return CorruptState(f"{self.what}: {detail}")

    def _take(self, size: int) -> int:
        start = self.offset
        if size < 0 or start + size > len(self.data):
            raise self.corrupt(f"truncated at byte {start} (needs {size} more)")
        self.offset = start + size
        return start

    def unpack(self, layout: struct.Struct) -> tuple[Any, ...]:
        return layout.unpack_from(self.data, self._take(layout.size))

    def u32(self) -> int:
        return int(self.unpack(_U32)[0])

    def longs(self, count: int) -> tuple[int, ...]:
        """``count`` signed 64-bit integers."""
        return struct.unpack_from(f"<{count}q", self.data, self._take(8 * count))

    def int64s(self, count: int) -> np.ndarray:
        """``count`` signed 64-bit integers as an array that reads the bytes in place."""
        return np.frombuffer(self.data, dtype="<i8", count=count, offset=self._take(8 * count))

    def raw(self, size: int) -> bytes:
        start = self._take(size)
        return bytes(self.data[start : start + size])

    def text(self, size: int) -> str:
        try:
            return self.raw(size).decode()
        except UnicodeDecodeError as exc:
            raise self.corrupt("text that is not UTF-8") from exc

    def end(self) -> None:
        """Nothing may follow the last field."""
        if self.offset != len(self.data):
            raise self.corrupt("trailing bytes")
