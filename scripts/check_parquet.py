#!/usr/bin/env python3
"""Reads a tricklab results folder with pyarrow, the way a notebook would.

    .venv/bin/python scripts/check_parquet.py RESULTS_FOLDER

For runs.parquet and every steps/*.parquet: the schema has no view types
(string_view, binary_view: what polars' embedded Arrow schema used to carry,
and what pyarrow cannot filter on), a filter on a string column
(`pq.read_table(f, filters=[("variant", "==", v)])`) returns exactly the rows
a full read has for that value, `finished_at` is a timestamp and `tricks` a
list of strings. Prints one JSON line of what it checked; exits 1 naming the
file and the problem otherwise. Run by the integration tests (`make test`).
"""

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def fail(path, why):
    print(f"{path}: {why}", file=sys.stderr)
    sys.exit(1)


def check(path, column):
    schema = pq.read_schema(path)
    for field in schema:
        t = field.type
        if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
            fail(path, f"column `{field.name}` is {t}: pyarrow cannot filter on it")
    full = pq.read_table(path)
    values = full.column(column).to_pylist()
    if not values:
        fail(path, "no rows")
    value = values[0]
    got = pq.read_table(path, filters=[(column, "==", value)])
    want = sum(1 for v in values if v == value)
    if got.num_rows != want:
        fail(path, f"filter {column} == {value!r} gave {got.num_rows} rows, not {want}")
    return schema, full.num_rows


def main():
    folder = Path(sys.argv[1])
    runs = folder / "runs.parquet"
    schema, rows = check(runs, "variant")
    if not pa.types.is_timestamp(schema.field("finished_at").type):
        fail(runs, f"finished_at is {schema.field('finished_at').type}, not a timestamp")
    tricks = schema.field("tricks").type
    if not (pa.types.is_list(tricks) or pa.types.is_large_list(tricks)) or not (
        pa.types.is_string(tricks.value_type) or pa.types.is_large_string(tricks.value_type)
    ):
        fail(runs, f"tricks is {tricks}, not a list of strings")
    for name in ("lr", "batch_size", "label_smoothing", "precision"):
        if name not in schema.names:
            fail(runs, f"no `{name}` column")
    steps = sorted((folder / "steps").glob("*.parquet"))
    for f in steps:
        check(f, "variant")
    print(json.dumps({"runs": rows, "step_files": len(steps), "pyarrow": pa.__version__}))


if __name__ == "__main__":
    main()
