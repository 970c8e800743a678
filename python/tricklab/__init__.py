"""Report a training script's steps, epochs and result to tricklab.

tricklab runs the script with TRICKLAB_EVENTS naming a file; this module
appends one JSON object a line to it (protocol version 1, docs/scripts.md).
Outside tricklab (no TRICKLAB_EVENTS) every call does nothing, so a script
runs as before; under torchrun only rank 0 (RANK unset or 0) writes. Standard library only; torch is used where the script has
it (bn_scale, and CUDA events for the clock).

    import tricklab
    clock = tricklab.Clock()
    for epoch in range(epochs):
        with clock:                      # training only: evaluation outside
            for step, batch in ...:
                ...
                tricklab.log(step=step, loss=loss, lr=lr, bn_scale=tricklab.bn_scale(model))
        tricklab.epoch(epoch=epoch + 1, acc=acc, seconds=clock.seconds())
    tricklab.final(acc=acc, seconds=clock.seconds())
"""

import json
import os
import time

__all__ = ["start", "log", "epoch", "final", "bn_scale", "Clock", "VERSION"]

VERSION = 1
_file = None
_announced = False


def _write(obj, announce=None):
    """Appends one line, flushed, so tricklab sees it as it is written; the
    first line is the protocol version (`announce`, where `start` gives it)."""
    global _file, _announced
    path = os.environ.get("TRICKLAB_EVENTS")
    if not path:
        return
    # Under torchrun (a run over several processes) every rank runs the
    # script: rank 0 alone reports, so that the run's lines are one process's.
    if os.environ.get("RANK", "0") != "0":
        return
    if _file is None:
        _file = open(path, "a", buffering=1, encoding="utf-8")
    if not _announced:
        _announced = True
        _file.write(json.dumps(announce or {"tricklab": VERSION}) + "\n")
    if obj is not None:
        _file.write(json.dumps(obj) + "\n")
    _file.flush()


def start(steps=None, epochs=None):
    """Says the run's planned length before its first step, for tricklab's
    progress and ETA (optional; call it once, first)."""
    line = {"tricklab": VERSION}
    if steps is not None:
        line["steps"] = int(steps)
    if epochs is not None:
        line["epochs"] = float(epochs)
    _write(None, announce=line)


def _number(x):
    """A float from a Python number or a one-element tensor (read once,
    where the script already holds it: call `log` where you would print)."""
    return float(x.item() if hasattr(x, "item") else x)


def log(step, loss, lr, bn_scale=None, images=None):
    """One training step's readings: the step (1-based), the loss, the
    learning rate, and optionally the mean BatchNorm scale and the training
    images seen so far."""
    obj = {"step": int(step), "loss": _number(loss), "lr": _number(lr)}
    if bn_scale is not None:
        obj["bn_scale"] = _number(bn_scale)
    if images is not None:
        obj["images"] = int(images)
    _write(obj)


def epoch(epoch, acc, seconds=None):
    """An evaluation after an epoch: accuracy as a fraction in [0, 1], and
    the training seconds so far on the script's clock."""
    obj = {"epoch": int(epoch), "acc": _number(acc)}
    if seconds is not None:
        obj["seconds"] = float(seconds)
    _write(obj)


def final(acc, seconds=None):
    """The run's result: its final accuracy (a fraction) and its training
    seconds. A run that sends none is recorded as failed."""
    obj = {"acc": _number(acc)}
    if seconds is not None:
        obj["seconds"] = float(seconds)
    _write({"final": obj})


def bn_scale(model):
    """The mean absolute scale of the model's BatchNorm layers (what the
    Live tab plots), or None for a model without any."""
    try:
        import torch
    except ImportError:
        return None
    scales = [
        m.weight.detach().abs().mean()
        for m in model.modules()
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.weight is not None
    ]
    if not scales:
        return None
    return float(torch.stack(scales).mean().item())


class Clock:
    """Training time, as hlb times it (docs/clocks.md): only what runs inside
    `with clock:` counts (keep evaluation outside). On a GPU it records CUDA
    events and synchronizes only when `seconds()` is read, so the steps
    inside are not held up; on a CPU it reads time.perf_counter."""

    def __init__(self):
        self._cuda = False
        try:
            import torch

            self._cuda = torch.cuda.is_available()
        except ImportError:
            pass
        self._spans = []
        self._host = 0.0
        self._start = None

    def __enter__(self):
        if self._cuda:
            import torch

            start = torch.cuda.Event(enable_timing=True)
            start.record()
            self._start = start
        else:
            self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self._cuda:
            import torch

            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._spans.append((self._start, end))
        else:
            self._host += time.perf_counter() - self._start
        self._start = None
        return False

    def seconds(self):
        """The seconds counted so far (on a GPU, one synchronization)."""
        if not self._cuda:
            return self._host
        if self._spans:
            self._spans[-1][1].synchronize()
        return sum(s.elapsed_time(e) for s, e in self._spans) / 1000.0
