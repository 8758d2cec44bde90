"""The cyclic garbage collector, paused while the engine builds state.

A micro-batch allocates an object per pending ack, replay entry and message id: hundreds of
thousands of small containers that all stay alive. CPython's collector counts allocations and,
every few hundred, walks the young objects; every so often it walks everything alive. On the
generated mix that walking was a third of the engine's time, and on a redeliver-all of
1,000,000 pending acks a third as well, finding nothing: the engine's state holds no reference
cycles (dicts of tuples, dataclasses and lists that point only down). Reference counting frees
everything the engine drops, so pausing the cyclic collector changes no result, only when the
interpreter looks for cycles (the next collection after the pause, as usual).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Automatic cyclic collection off inside the block, restored as it was afterwards (nested
    blocks, or a caller that had it off already, are left as they were)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
