"""``OutputRows`` of every kind, for the tests of the packed output (``schemas.udf.PACKED_OUTPUT``)."""

from __future__ import annotations

import pyarrow as pa

from schemas.udf import KIND_COLUMNS, UPSERT
from udfs.apply import OUTPUT_ARROW, OutputRows


def every_kind(*, packed: bool) -> OutputRows:
    """One row of each kind of ``KIND_COLUMNS`` with every column it fills set, each to a value
    of its own."""
    out = OutputRows("persistent://t/ns/x", 1, packed=packed)
    types = {f.name: f.type for f in OUTPUT_ARROW}
    for kind, columns in KIND_COLUMNS.items():
        values: dict[str, list] = {"subscription": [f"s-{kind}"]}
        for k, name in enumerate(columns):
            type_ = types[name]
            if pa.types.is_boolean(type_):
                values[name] = [k % 2 == 0]
            elif pa.types.is_string(type_):
                values[name] = [f"{kind}.{name}"]
            elif pa.types.is_binary(type_):
                values[name] = [f"{kind}.{name}".encode()]
            elif pa.types.is_list(type_):
                values[name] = [[k, k + 1]]
            else:
                values[name] = [100 * len(kind) + k]
        out.add(kind, UPSERT, 1, **values)
    return out
