#!/usr/bin/env python3
"""tricklab's CSV export as W&B offline runs, through wandb itself.

    python scripts/export/to_wandb.py CSV_FOLDER OUT

Called by `tricklab export FOLDER --to wandb-offline`. One offline run per
tricklab run (project "tricklab", name matrix/session/variant/seed-N, group
matrix/session/variant): the resolved configuration as its config, the step curves and
evaluations logged at their steps, the summary as the run summary. Nothing is
sent: `wandb sync OUT/wandb/offline-run-*` uploads later. Exit 4 when wandb is
not installed.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_csv import runs  # noqa: E402

try:
    import wandb
except ImportError:
    print("wandb is not installed", file=sys.stderr)
    sys.exit(4)


def main():
    src, out = sys.argv[1], Path(sys.argv[2]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ["WANDB_MODE"] = "offline"
    os.environ.setdefault("WANDB_SILENT", "true")
    n = 0
    for r in runs(src):
        group = r.name.rsplit("/", 1)[0]
        run = wandb.init(project="tricklab", name=r.name, group=group, dir=str(out),
                         config=r.params, mode="offline", reinit="finish_previous")
        rows = {}
        for step, _, values in r.steps:
            rows.setdefault(step, {}).update({f"train/{k}": v for k, v in values.items()})
        for epoch, values in r.evals:
            rows.setdefault(r.eval_step(epoch), {}).update({f"eval/{k}": v for k, v in values.items()})
        for step in sorted(rows):
            run.log(rows[step], step=step)
        for k, v in r.summary.items():
            run.summary[k] = v
        run.summary["tricklab/status"] = r.status
        run.finish(exit_code=0 if r.status == "done" else 1)
        n += 1
    print(f"{n} W&B offline runs: `wandb sync {out}/wandb/offline-run-*`")


if __name__ == "__main__":
    main()
