"""The CSV export `tricklab export --to csv` writes, read back per run."""

import csv
from collections import defaultdict
from pathlib import Path

# Columns of runs.csv that are results, not hyperparameters.
METRICS = {"acc", "acc_tta", "dawn_s", "airbench_s", "hlb_s", "wall_s", "paused_s",
           "time_to_target_s", "final_train_loss"}


def _num(v):
    return float(v) if v not in ("", None) else None


class Run:
    def __init__(self, name, status, params, summary):
        self.name, self.status, self.params, self.summary = name, status, params, summary
        self.steps = []  # (step, epoch, {metric: value})
        self.evals = []  # (epoch, {metric: value})

    def eval_step(self, epoch):
        """An evaluation's step: the last recorded step of its epoch."""
        return max((s for s, e, _ in self.steps if e is not None and e <= epoch + 1e-9), default=0)

    def last_step(self):
        return max((s for s, _, _ in self.steps), default=0)


def runs(folder):
    """Every run of FOLDER/{runs,steps,evals}.csv, in runs.csv's order."""
    folder = Path(folder)
    by_name = {}
    with open(folder / "runs.csv", newline="") as f:
        for r in csv.DictReader(f):
            name, status = r.pop("run"), r.pop("status")
            summary = {k: _num(v) for k, v in r.items() if k in METRICS and v != ""}
            params = {k: v for k, v in r.items() if k not in METRICS and v != ""}
            by_name[name] = Run(name, status, params, summary)
    with open(folder / "steps.csv", newline="") as f:
        for r in csv.DictReader(f):
            values = {k: _num(r[k]) for k in ("loss", "lr", "bn_scale_mean") if r[k] != ""}
            by_name[r["run"]].steps.append((int(r["step"]), _num(r["epoch"]), values))
    with open(folder / "evals.csv", newline="") as f:
        for r in csv.DictReader(f):
            values = {k: _num(r[k]) for k in ("test_acc", "test_acc_tta", "train_s") if r[k] != ""}
            by_name[r["run"]].evals.append((_num(r["epoch"]), values))
    return list(by_name.values())
