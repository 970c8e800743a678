#!/usr/bin/env python3
"""A results folder read the ways a notebook reads it (`make test-export`):
polars (Python) and DuckDB filter runs.parquet by a string column and agree
with pyarrow, group by a typed config column, and read every step file.

    python scripts/check_readers.py RESULTS_FOLDER
"""
import sys, glob
import polars as pl, duckdb, pyarrow.parquet as pq
d = sys.argv[1]
runs = f"{d}/runs.parquet"
steps = sorted(glob.glob(f"{d}/steps/*.parquet"))
v = pl.read_parquet(runs)["variant"][0]
a = pl.scan_parquet(runs).filter(pl.col("variant") == v).collect()
b = duckdb.sql(f"select count(*) from '{runs}' where variant = '{v}'").fetchall()[0][0]
c = pq.read_table(runs, filters=[("variant", "==", v)]).num_rows
g = pl.read_parquet(runs).group_by("label_smoothing").len().sort("label_smoothing")
s = duckdb.sql(f"select variant, count(*) from read_parquet({steps!r}) group by variant order by variant").fetchall()
t = duckdb.sql(f"select typeof(finished_at), typeof(tricks) from '{runs}' limit 1").fetchall()[0]
print(f"polars {pl.__version__}: {a.height} rows of {v!r}; duckdb {duckdb.__version__}: {b}; pyarrow: {c}")
print("group_by label_smoothing:", g.rows())
print("duckdb over step files:", s)
print("duckdb types finished_at/tricks:", t)
assert a.height == b == c > 0
