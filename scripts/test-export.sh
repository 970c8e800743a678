#!/usr/bin/env bash
# `make test-export`: a tiny session read by polars and DuckDB, and exported to
# MLflow and W&B (offline) through their own libraries, then read back with them.
#   bash scripts/test-export.sh TRICKLAB_BINARY PYTHON
set -euo pipefail
bin=$(realpath "$1"); py=$(realpath -s "$2"); repo=$(pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$bin" run tests/fixtures/tiny.toml --headless --results "$tmp/res" --repeats 2 >/dev/null
dir=$(ls -d "$tmp"/res/tiny-test/*/ | tail -1)
"$py" scripts/check_readers.py "$dir"
"$bin" export "$dir" --to mlflow --out "$tmp/mlruns" --python "$py"
"$bin" export "$dir" --to wandb-offline --out "$tmp/wandb" --python "$py"
MLFLOW_ALLOW_FILE_STORE=true "$py" - "$tmp" <<'PY'
import sys
from pathlib import Path
from mlflow.tracking import MlflowClient
tmp = Path(sys.argv[1])
c = MlflowClient(tracking_uri=(tmp / "mlruns").as_uri())
exp = c.get_experiment_by_name("tricklab")
runs = c.search_runs([exp.experiment_id])
assert len(runs) == 4, len(runs)
for r in runs:
    assert r.data.params["label_smoothing"] in ("0", "0.0", "0.2"), r.data.params
    loss = c.get_metric_history(r.info.run_id, "train/loss")
    assert loss and all(m.value == m.value for m in loss), r.info.run_name
    assert "acc_tta" in r.data.metrics, r.data.metrics
offline = sorted((tmp / "wandb" / "wandb").glob("offline-run-*"))
assert len(offline) == 4, offline
assert all(list(d.glob("*.wandb")) for d in offline)
print(f"mlflow: {len(runs)} runs with params and curves; wandb: {len(offline)} offline runs")
PY
