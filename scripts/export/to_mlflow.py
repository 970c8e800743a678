#!/usr/bin/env python3
"""tricklab's CSV export into an MLflow tracking store, through MLflow itself.

    python scripts/export/to_mlflow.py CSV_FOLDER OUT

Called by `tricklab export FOLDER --to mlflow`. One MLflow run per tricklab run
(experiment "tricklab", run name matrix/session/variant/seed-N): the resolved
configuration as params, the step curves (train/loss, train/lr,
train/bn_scale_mean) and evaluations (eval/test_acc, ...) as metrics at their
steps, the summary (acc, acc_tta, the clocks) as final metrics, the run's
status as a tag. Writes to the store at OUT (`mlflow ui --backend-store-uri
OUT`). Exit 4 when mlflow is not installed.
"""

import os
import sys
from pathlib import Path

# A folder store needs no server or database: what an offline export is for.
# MLflow 3.x keeps it readable but asks to opt in to writing one.
os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_csv import runs  # noqa: E402

try:
    import mlflow
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient
except ImportError:
    print("mlflow is not installed", file=sys.stderr)
    sys.exit(4)


def main():
    src, out = sys.argv[1], Path(sys.argv[2]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    uri = out.as_uri()
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("tricklab")
    exp_id = exp.experiment_id if exp else client.create_experiment("tricklab")
    n = 0
    for r in runs(src):
        run = client.create_run(exp_id, run_name=r.name, tags={"tricklab.status": r.status})
        rid = run.info.run_id
        ts = 0
        metrics = []
        for step, _, values in r.steps:
            metrics += [Metric(f"train/{k}", v, ts, step) for k, v in values.items()]
        for epoch, values in r.evals:
            step = r.eval_step(epoch)
            metrics += [Metric(f"eval/{k}", v, ts, step) for k, v in values.items()]
        metrics += [Metric(k, v, ts, r.last_step()) for k, v in r.summary.items()]
        params = [Param(k, str(v)[:500]) for k, v in r.params.items()]
        for i in range(0, max(len(metrics), 1), 1000):
            client.log_batch(rid, metrics=metrics[i:i + 1000], params=params if i == 0 else [],
                             tags=[RunTag("mlflow.runName", r.name)] if i == 0 else [])
        client.set_terminated(rid, status="FINISHED" if r.status == "done" else "FAILED")
        n += 1
    print(f"{n} MLflow runs in experiment tricklab: `mlflow ui --backend-store-uri {uri}`")


if __name__ == "__main__":
    main()
