"""Golden trajectories (issue 36, item 1): a published script trained by its own code on
the CPU at a reduced size, from weights a seeded generator makes, with every random draw
it takes recorded; tests/golden/trajectory/<name>.json keeps the seeds, the draws (written
as tricklab's engine asks for them), the loss of every step and every variable's checksums
at checkpoints and after training. `src/train/trajectory_tests.rs` replays them through
tricklab's own plan and engine and must agree.

Each run is written twice: in float64 (`<recipe>.json`: the script's float32 turned to
float64 by named substitutions, the replay's plan in float64), where the whole run must
agree, and in float32 as published on a CPU (`<recipe>-float32.json`), where BatchNorm's
cancelling sums make any two summation orders drift apart after a few steps (the script
against itself at 2 threads: 1.3e-4 at step 4), so only the first steps are compared.

The two are recorded at different sizes (`FLOAT64` and `FLOAT32` below). The float64 runs
are replayed whole, which in float64 on one CPU thread is what the unit tests' time goes
on: they take 16 training images a class (160) and every batch 1/16 of the float32 runs'
(airbench94 64, Page 32, the others 16), so every recipe keeps its steps an epoch and with them its whole run: the same number
of steps, the same epochs, every phase its schedule names in epochs or steps (warm-up and
decay, the whitening bias's freeze, Lookahead/EMA starts and periods, CutMix's epochs, the
renormalisation interval, the last partial epoch) at the same steps, and the same
checkpoints. The test set is 1 image a class: the evaluations still run (and hlb's draw
its order), but no recorded number reads them. The five float64 replays went from 84-195 s
each (680 s) to 2-9 s (25 s) on one thread of a 2-core Xeon. The float32 files keep the
size they were recorded at (256 and 10 images a class, the larger batches): their tests
compare two steps, and at 1/16 of the batch the per-example lr of airbench94, airbench94_muon
and hiverge's record makes each SGD step 16x smaller, so a wrong setting (airbench94
without Nesterov, a 1% bias lr) would move their second step's loss by less than the
tolerance; the float64 replays see every such change at any size (checksums to 1e-6).

Each file also keeps `timed`, the named stages inside each of the script's timed regions
(its timer events, recorded in order with the stage markers), and `untimed`, those outside.

The script is read from a fetched copy (as make_golden.py reads it), changed only by the
substitutions scripts/peers/peer.py lists for a CPU run plus the ones below (which name
what they change), and executed; the repository keeps the recorded numbers, never the
script.

Three environment knobs are for measuring, not for the committed files:
TRAJECTORY_THREADS (default 1) runs the script on more threads, which is how the
float32 drift of the script against itself was measured. TRAJECTORY_EPOCHS (default
16 for airbench94, 8 for airbench94-muon, 7.59 for hiverge's record, 12.1 for hlb; Page's
new_dawn.py keeps its own 10, which its schedule is written in) shortens the run.
TRAJECTORY_ONLY (names, comma-separated) writes only those files.

usage: python3 scripts/golden/make_trajectory.py --airbench PEERS/cifar10-airbench \
           [--speedrun PEERS/cifar10-speedrun] [--hlb PEERS/hlb-CIFAR10] [--page PEERS/cifar10-fast] \
           --tricklab target/debug/tricklab --out tests/golden/trajectory
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "peers"))
sys.path.insert(0, str(REPO / "scripts" / "golden"))
import peer  # noqa: E402
from make_golden import uniforms  # noqa: E402

# The reduced runs: the embedded set's first `train_per_class` training and
# `test_per_class` test images a class, each script's batch (airbench94's 1024,
# airbench94_muon's 2000, hiverge's 1536, hlb's 1024, Page's 512) replaced by the one named
# here (where it differs from the script's, a named substitution), the net at 1/8 of its
# widths. The float64 runs are the ones replayed whole (the tests' time): 16 images a
# class and batches of 1/16 of FLOAT32's, the same steps an epoch (160 / 64 = 2.5 -> 2 as
# 2,560 / 1024; 10 at 16 as at 256; 5 at 32 as at 512), so the same run step for step.
# Narrower nets (x1/16) saved only a third more, and hlb's 4-channel net then amplified
# float64 rounding past the checksums' 1e-6 by the end (3e-6; every loss still to 2e-7);
# fewer images would leave some of Page's 81 crop chunks (even_splits of the set) empty.
# The float32 runs keep the size they were recorded at (module docstring). airbench94's
# lr and decay are per 1024 images (the step grows with the batch), as the recipe writes
# them (`lr_batch`, `wd_batch`), so the replay at 64 checks that scaling too.
class Size(NamedTuple):
    train_per_class: int
    test_per_class: int
    airbench94: int
    muon: int
    speedrun: int
    hlb: int
    page: int


FLOAT64 = Size(train_per_class=16, test_per_class=1, airbench94=64, muon=16, speedrun=16, hlb=16, page=32)
FLOAT32 = Size(train_per_class=256, test_per_class=10, airbench94=1024, muon=256, speedrun=256, hlb=256, page=512)


def size_of(float64):
    return FLOAT64 if float64 else FLOAT32


EPOCHS = int(os.environ.get("TRAJECTORY_EPOCHS", "16"))
WIDTH_MULT = 0.125
# Steps after which every variable's checksum is kept (1-based; the weights as the next
# step reads them, after the optimiser and any averaging).
CHECKPOINTS = (1, 2, 3, 4, 5, 6, 10, 20)


def uniform(seed, shape, lo, hi):
    """splitmix64 uniforms on [lo, hi), built in float64, rounded to float32, row-major
    (golden.rs `input`)."""
    import torch
    n = math.prod(shape)
    vals = [lo + (hi - lo) * u for u in uniforms(seed, n)]
    return torch.tensor(vals, dtype=torch.float64).view(shape).float()


def weight_spec(i, ours, ref_name, t):
    """A starting value for one variable: a constant where the reference's is one by
    construction (BatchNorm's fixed scale and running statistics), else uniform draws
    of a fan-in scale."""
    shape = list(t.shape)
    if ref_name.endswith("running_mean"):
        return {"name": ours, "reference": ref_name, "shape": shape, "fill": 0.0}
    if ref_name.endswith("running_var"):
        return {"name": ours, "reference": ref_name, "shape": shape, "fill": 1.0}
    if (".norm" in ref_name and ref_name.endswith("weight")) or ours.endswith(".bn.weight"):
        return {"name": ours, "reference": ref_name, "shape": shape, "fill": 1.0}
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else 16
    b = 1.0 / math.sqrt(fan_in)
    return {"name": ours, "reference": ref_name, "shape": shape, "seed": 7000 + i, "lo": -b, "hi": b}


def value_of(spec):
    import torch
    if "fill" in spec:
        return torch.full(spec["shape"], spec["fill"], dtype=torch.float32)
    return uniform(spec["seed"], spec["shape"], spec["lo"], spec["hi"])


def checksum(t):
    import torch
    d = t.detach().to(torch.float64).flatten()
    return {"sum": d.sum().item(), "sumsq": (d * d).sum().item(), "head": d[:4].tolist()}


# -- airbench94 -------------------------------------------------------------

def airbench94_names(ref):
    """The reference's state names -> tricklab's variable names."""
    if ref.startswith("0."):
        return "stem.whiten." + ref[2:]
    if ref.startswith("7."):
        return "head.weight"
    block, layer, what = ref.split(".")
    group = {"2": 1, "3": 2, "4": 3}[block]
    half = {"conv1": "a", "norm1": "a", "conv2": "b", "norm2": "b"}[layer]
    part = "conv" if layer.startswith("conv") else "bn"
    return f"body.group{group}.{half}.{part}.{what}"


def airbench94_draws(raw, n, pad):
    """The reference's draws as tricklab's engine asks for them.
    - epoch 0 flips every image with rand(n) < 0.5 before padding; tricklab draws the
      same mask as randint(2, [n]) once, before the first epoch;
    - each epoch crops with randint(-r, r+1, (n, 2)); tricklab draws one of (2r+1)^2
      offsets per image, row-major, and flips after cropping where the reference flips
      before: crop(pad(flip x), oy, ox) = flip(crop(pad x, oy, 2r - ox)), so a pre-flipped
      image's column offset is mirrored;
    - each epoch's order is randperm(n) after the crops in both."""
    side = 2 * pad + 1
    out, flip0 = [], None
    epoch = 0
    for kind, value in raw:
        if kind == "rand":
            flip0 = (value.flatten() < 0.5).long()
            out.append({"label": "flip mask (epoch 0)", "kind": "int", "high": 2, "shape": [n],
                        "values": flip0.tolist()})
        elif kind == "randint":
            oy = value[:, 0] + pad
            ox = value[:, 1] + pad
            ox = ox.where(flip0 == 0, 2 * pad - ox)
            out.append({"label": f"crop offsets (epoch {epoch})", "kind": "int", "high": side * side,
                        "shape": [n], "values": (oy * side + ox).tolist()})
        elif kind == "randperm":
            out.append({"label": f"order (epoch {epoch})", "kind": "perm", "values": value.tolist()})
            epoch += 1
        else:
            raise SystemExit(f"airbench94: unexpected draw {kind}")
    return out


class Recorder:
    """What a run records from the injection on: the weights it was given, every
    torch.rand/randint/randperm result, each step's loss and the checksums at the
    checkpoints and after training. The script calls it through `__peer__`."""

    def __init__(self, names, batch):
        import torch
        self.torch, self.names, self.batch = torch, names, batch
        self.weights, self.raw, self.losses = [], [], []
        self.checkpoints, self.final_sums, self.model = {}, {}, None
        self.real = {k: getattr(torch, k) for k in ("rand", "randint", "randperm")}
        # What the script does, in order: named stages and its timers' records.
        self.log = []

    def _recording(self, kind):
        def f(*args, **kwargs):
            out = self.real[kind](*args, **kwargs)
            self.raw.append((kind, out.clone()))
            return out
        return f

    def _state(self, model):
        return [(k, t) for k, t in model.state_dict().items() if not k.endswith("num_batches_tracked")]

    def start(self):
        """The draws recorded from here on (inject starts it where not called)."""
        torch = self.torch
        if getattr(self, "started", False):
            return
        self.started = True
        for k in self.real:
            setattr(torch, k, self._recording(k))
        self.real_like, self.real_random_ = torch.rand_like, torch.Tensor.random_
        real_like, real_random_ = self.real_like, self.real_random_

        def rand_like(*args, **kwargs):
            out = real_like(*args, **kwargs)
            self.raw.append(("rand", out.clone()))
            return out

        def random_(t, *args, **kwargs):
            out = real_random_(t, *args, **kwargs)
            self.raw.append(("random_", (out.clone(), args)))
            return out
        torch.rand_like, torch.Tensor.random_ = rand_like, random_

    def stop(self):
        torch = self.torch
        for k, fn in self.real.items():
            setattr(torch, k, fn)
        if getattr(self, "started", False):
            torch.rand_like, torch.Tensor.random_ = self.real_like, self.real_random_
        self.started = False

    def inject(self, model):
        """The seeded weights copied in, and the draws recorded from here on."""
        torch = self.torch
        for i, (name, t) in enumerate(model.state_dict().items()):
            if name.endswith("num_batches_tracked"):
                continue
            spec = weight_spec(i, self.names(name), name, t)
            with torch.no_grad():
                t.copy_(value_of(spec).to(t.dtype))
            self.weights.append(spec)
        self.model = model
        self.start()

    def stage(self, name):
        """A named stage begins (repeats of the same stage kept once)."""
        if not self.log or self.log[-1] != name:
            self.log.append(name)

    def regions(self):
        """The stages each timed region covers (a region runs from its start
        event's record to the next record of another event), and those outside."""
        timed, untimed, start, current = [], [], None, None
        for x in self.log:
            if isinstance(x, tuple):
                if start is None:
                    start, current = x[1], []
                elif x[1] != start:
                    timed.append(current)
                    start, current = None, None
            elif current is not None:
                if x not in current:
                    current.append(x)
            elif x not in untimed:
                untimed.append(x)
        return timed, untimed

    def before_step(self):
        self.stage("training")
        done = len(self.losses)
        if done in CHECKPOINTS:
            self.checkpoints[str(done)] = {self.names(k): checksum(t) for k, t in self._state(self.model)}

    def step_loss(self, loss):
        self.losses.append(loss.item() / self.batch)

    def final(self, model):
        self.stage("final evaluation")
        self.stop()
        self.final_sums = {self.names(k): checksum(t) for k, t in self._state(model)}

    def attach(self, rt):
        rt.inject, rt.before_step, rt.step_loss, rt.final, rt.stage, rt.start = (
            self.inject, self.before_step, self.step_loss, self.final, self.stage, self.start)
        made = rt.Event

        def event(**kwargs):
            e = made(**kwargs)
            record = e.record

            def logged(*args, **kw):
                self.log.append(("timer", id(e)))
                return record(*args, **kw)
            e.record = logged
            return e
        rt.Event = event


def stage_subs(f, evaluate_line=None, build_line=None):
    """Named-stage markers: the loader's epoch-0 preprocessing, and where given the
    per-epoch evaluation and the net's construction (the whitening, the training steps
    and the final evaluation are marked by the trajectory's own hooks)."""
    subs = [peer.Sub(f, "trajectory: the loader's epoch-0 preprocessing marked as a stage",
                     "        if self.epoch == 0:\n",
                     "        if self.epoch == 0:\n            __peer__.stage(\"preprocessing\")\n")]
    if evaluate_line:
        subs.append(peer.Sub(f, "trajectory: the per-epoch evaluation marked as a stage", evaluate_line,
                             evaluate_line.replace("val_acc = ", "__peer__.stage(\"per-epoch evaluation\"); val_acc = ", 1)))
    if build_line:
        subs.append(peer.Sub(f, "trajectory: the net's construction marked as a stage", build_line,
                             build_line.replace("model = ", "__peer__.stage(\"net build\"); model = ", 1)))
    return subs


def execute(f, text, rt, name):
    """The changed script as a module, its `__peer__` the runtime."""
    mod = types.ModuleType(name)
    mod.__dict__["__peer__"] = rt
    peer.seed_all(0)
    exec(compile(text, f, "exec"), mod.__dict__)
    return mod


def changed(repo, f, changes):
    text = (Path(repo) / f).read_text()
    for c in changes:
        if isinstance(c, peer.Sub):
            text = c.apply(text)
    return text


def recorded(recipe, f, repo, changes, rec, n, settings, extra_sets=(), draws=None):
    """The trajectory file's recipe-specific part."""
    return {
        "recipe": recipe,
        "reference": {"repo": "KellerJordan/cifar10-airbench", "commit": "f1c599c", "file": f,
                      "sha256": peer.sha256(str(Path(repo) / f))},
        "settings": dict(settings, set=list(extra_sets)),
        "changes": [c.describe() if isinstance(c, peer.Sub) else c for c in changes],
        "weights": rec.weights,
        "draws": (draws or airbench94_draws)(rec.raw, n, 2),
        "losses": rec.losses,
        "checkpoints": rec.checkpoints,
        "final": rec.final_sums,
        "timed": rec.regions()[0],
        "untimed": rec.regions()[1],
    }


def trajectory_airbench94(repo, data, tmp, float64):
    f = "legacy/airbench94.py"
    ctx = types.SimpleNamespace(cuda=False, warmup=False, compile=False)
    batch = size_of(float64).airbench94
    changes = peer.changes_airbench94(ctx) + ([
        peer.Sub(f, f"batch: 1024 -> {batch} (its lr is per 1024 examples and its decay per example, the "
                 "loss summed: the recipe writes them at 1024, `lr_batch` and `wd_batch`, so they follow)",
                 "'batch_size': 1024,", "'batch_size': __peer__.batch_size,"),
    ] if batch != 1024 else []) + [
        peer.Sub(f, f"widths x{WIDTH_MULT}: block1 64 -> {int(64 * WIDTH_MULT)}",
                 "'block1': 64,", "'block1': __peer__.widths[0],"),
        peer.Sub(f, f"widths x{WIDTH_MULT}: block2 256 -> {int(256 * WIDTH_MULT)}",
                 "'block2': 256,", "'block2': __peer__.widths[1],"),
        peer.Sub(f, f"widths x{WIDTH_MULT}: block3 256 -> {int(256 * WIDTH_MULT)}",
                 "'block3': 256,", "'block3': __peer__.widths[2],"),
        peer.Sub(f, "trajectory: the starting weights injected after the whitening fit, and the "
                 "draws recorded from there; the Lookahead state taken again from them (the script "
                 "takes it before the fit, so its first update at step 5 mixes 0.3% of the net as "
                 "built, whitening filter included, back in; tricklab's starts after the fit)",
                 "    init_whitening_conv(model[0], train_images)\n",
                 "    __peer__.stage(\"whitening\")\n"
                 "    init_whitening_conv(model[0], train_images)\n    __peer__.inject(model)\n"
                 "    lookahead_state = LookaheadState(model)\n"),
        peer.Sub(f, "trajectory: the weights recorded at the checkpoints, before the next step's forward pass",
                 "            outputs = model(inputs)\n",
                 "            __peer__.before_step()\n            outputs = model(inputs)\n"),
        peer.Sub(f, "trajectory: each step's loss recorded (loss.item(), a host sync)",
                 "            loss.backward()\n",
                 "            __peer__.step_loss(loss)\n            loss.backward()\n"),
        peer.Sub(f, "trajectory: the weights recorded after training, before the TTA evaluation",
                 "    tta_val_acc = evaluate(model, test_loader, tta_level=hyp['net']['tta_level'])",
                 "    __peer__.final(model)\n"
                 "    tta_val_acc = evaluate(model, test_loader, tta_level=hyp['net']['tta_level'])"),
    ] + stage_subs(f, "        val_acc = evaluate(model, test_loader, tta_level=0)\n", "    model = make_net()\n")
    if float64:
        changes += [
            peer.Sub(f, "float64: images `.float()` -> `.double()`",
                     "(self.images.float() / 255)", "(self.images.double() / 255)"),
            peer.Sub(f, "float64: `net.float()` -> `net.double()`", "net = net.float()", "net = net.double()"),
            peer.Sub(f, "float64: BatchNorm's `mod.float()` -> `mod.double()`",
                     "            mod.float()\n", "            mod.double()\n"),
            peer.Sub(f, "float64: the Lookahead decays in float64 (`torch.arange(...) / n` makes them "
                     "float32 in the script, about 1e-8 off; tricklab computes them in float64)",
                     "(torch.arange(total_train_steps+1) / total_train_steps)**3",
                     "(torch.arange(total_train_steps+1, dtype=torch.float64) / total_train_steps)**3"),
            peer.Sub(f, "float64: the Lookahead update takes float64 tensors too",
                     "if net_param.dtype in (torch.half, torch.float):",
                     "if net_param.dtype in (torch.half, torch.float, torch.double):"),
        ]
    text = changed(repo, f, changes)
    rt = peer.Runtime(False, EPOCHS, tmp, data)
    peer.write_airbench_pt(data, tmp)
    rt.batch_size = batch
    rt.widths = [int(64 * WIDTH_MULT), int(256 * WIDTH_MULT), int(256 * WIDTH_MULT)]
    rec = Recorder(airbench94_names, batch)
    rec.attach(rt)
    execute(f, text, rt, "peer_airbench94_trajectory").main(0)
    return recorded("airbench94", f, repo, changes, rec, len(data["train_labels"]),
                    {"epochs": EPOCHS, "batch_size": batch, "width_mult": WIDTH_MULT,
                     "dtype": "float64" if float64 else "float32"})


# -- airbench94-muon ---------------------------------------------------------

# The script's batch of 2000 would be a single step an epoch: at 16 of 160 images
# (float64) or 256 of 2,560 (float32) the run is 10 steps an epoch, 80 in all, the
# whitening bias training for 30. Its bias lr, head lr and decay are per example (summed
# loss, `wd = 2e-6 * batch_size`), and so are the recipe's (`lr_batch = 2000`), so the
# replay at 16 checks that too.
MUON_EPOCHS = int(os.environ.get("TRAJECTORY_EPOCHS", "8"))


def muon_names(ref):
    """airbench94_muon's state names -> tricklab's variable names."""
    if ref.startswith("whiten."):
        return "stem." + ref
    if ref.startswith("head."):
        return ref
    _, block, layer, what = ref.split(".")
    half = {"conv1": "a", "norm1": "a", "conv2": "b", "norm2": "b"}[layer]
    part = "conv" if layer.startswith("conv") else "bn"
    return f"body.group{block}.{half}.{part}.{what}"


def trajectory_muon(repo, data, tmp, float64):
    f = "airbench94_muon.py"
    ctx = types.SimpleNamespace(cuda=False, warmup=False, compile=False)
    w = [int(64 * WIDTH_MULT), int(256 * WIDTH_MULT), int(256 * WIDTH_MULT)]
    batch = size_of(float64).muon
    changes = peer.changes_muon(ctx) + [
        peer.Sub(f, f"widths x{WIDTH_MULT}: 64/256/256 -> {w[0]}/{w[1]}/{w[2]}",
                 "widths = dict(block1=64, block2=256, block3=256)",
                 f"widths = dict(block1={w[0]}, block2={w[1]}, block3={w[2]})"),
        peer.Sub(f, f"batch: 2000 -> {batch} (its lr and decay are per example: they follow)",
                 "    batch_size = 2000\n", f"    batch_size = {batch}\n"),
        peer.Sub(f, "trajectory: the starting weights injected after the whitening fit, and the "
                 "draws recorded from there",
                 "    model.init_whiten(train_images)\n",
                 "    __peer__.stage(\"whitening\")\n"
                 "    model.init_whiten(train_images)\n    __peer__.inject(model)\n"),
        peer.Sub(f, "trajectory: the weights recorded at the checkpoints, before the next step's forward pass",
                 "            outputs = model(inputs, whiten_bias_grad",
                 "            __peer__.before_step()\n            outputs = model(inputs, whiten_bias_grad"),
        peer.Sub(f, "trajectory: each step's loss kept as `loss` and recorded (loss.item(), a host sync)",
                 '            F.cross_entropy(outputs, labels, label_smoothing=0.2, reduction="sum").backward()\n',
                 '            loss = F.cross_entropy(outputs, labels, label_smoothing=0.2, reduction="sum")\n'
                 "            __peer__.step_loss(loss)\n            loss.backward()\n"),
        peer.Sub(f, "trajectory: the weights recorded after training, before the TTA evaluation",
                 "    tta_val_acc = evaluate(model, test_loader, tta_level=2)",
                 "    __peer__.final(model)\n    tta_val_acc = evaluate(model, test_loader, tta_level=2)"),
    ] + stage_subs(f, "        val_acc = evaluate(model, test_loader, tta_level=0)\n")
    if float64:
        changes += [
            peer.Sub(f, "float64: images `.float()` -> `.double()`",
                     "(self.images.float() / 255)", "(self.images.double() / 255)"),
            peer.Sub(f, "float64: CifarNet's `mod.float()` -> `mod.double()` (BatchNorm and the rest)",
                     "mod.float()", "mod.double()", 2),
            peer.Sub(f, "float64: Newton-Schulz in float64, not bf16 (a copy, as `.bfloat16()` makes one; "
                     "the replay's Muon iterates in the gradients' type)",
                     "    X = G.bfloat16()\n", "    X = G.to(torch.float64, copy=True)\n"),
        ]
    text = changed(repo, f, changes)
    rt = peer.Runtime(False, MUON_EPOCHS, tmp, data)
    peer.write_airbench_pt(data, tmp)
    rec = Recorder(muon_names, batch)
    rec.attach(rt)
    mod = execute(f, text, rt, "peer_muon_trajectory")
    import torch
    rec.stage("net build")
    model = mod.CifarNet().to(memory_format=torch.channels_last)
    mod.main(0, model)
    # The head divides by its input's width, 32 at 1/8 (`x.size(-1)`); the recipe
    # writes the published 1/256 as a constant.
    return recorded("airbench94-muon", f, repo, changes, rec, len(data["train_labels"]),
                    {"epochs": MUON_EPOCHS, "batch_size": batch, "width_mult": WIDTH_MULT,
                     "dtype": "float64" if float64 else "float32"},
                    [f"logit_scale.scale=1/{w[2]}"])


# -- hiverge-speedrun ---------------------------------------------------------

# The record's batch of 1536 would be one step an epoch: at 16 of 160 images (float64)
# or 256 of 2,560 (float32), 10 steps an epoch, ceil(7.59 x 10) = 76 in all, the
# whitening bias training for ceil(0.19 x 10) = 2 and Muon's renormalisation interval
# growing over the same 76 steps.
# Its lr and decay are per example (`wd = 1.0418e-6 * training_batch_size`), and so are
# the recipe's (`lr_batch = 1536`).
SPEEDRUN_EPOCHS = float(os.environ.get("TRAJECTORY_EPOCHS", "7.59"))


def speedrun_draws(raw, n, pad):
    """The record's draws as tricklab's engine asks for them.
    - epoch 0 flips with rand(n) < 0.5 before padding, as airbench94_muon;
    - each epoch crops with two rand(n) (rows, then columns) times 2r+1, truncated, of
      the padded image, then jitters with two rand(n, 1, 1, 1) (brightness, contrast),
      then shuffles with randperm; tricklab draws the crop as one of (2r+1)^2 offsets,
      then the order, then the jitter; a pre-flipped image's column is mirrored."""
    import torch
    side = 2 * pad + 1
    kinds = [k for k, _ in raw]
    if not kinds or kinds[0] != "rand" or (len(kinds) - 1) % 5:
        raise SystemExit(f"hiverge-speedrun: unexpected draws {kinds[:12]}")
    flip0 = (raw[0][1].flatten() < 0.5).long()
    out = [{"label": "flip mask (epoch 0)", "kind": "int", "high": 2, "shape": [n],
            "values": flip0.tolist()}]
    for epoch, i in enumerate(range(1, len(raw), 5)):
        (ky, y), (kx, x), (ku, u), (kv, v), (kp, perm) = raw[i:i + 5]
        if (ky, kx, ku, kv, kp) != ("rand", "rand", "rand", "rand", "randperm"):
            raise SystemExit(f"hiverge-speedrun: epoch {epoch}: unexpected draws {(ky, kx, ku, kv, kp)}")
        oy = (y * side).long()
        ox = (x * side).long()
        ox = ox.where(flip0 == 0, 2 * pad - ox)
        out.append({"label": f"crop offsets (epoch {epoch})", "kind": "int", "high": side * side,
                    "shape": [n], "values": (oy * side + ox).tolist()})
        out.append({"label": f"order (epoch {epoch})", "kind": "perm", "values": perm.tolist()})
        for name, t in (("brightness", u), ("contrast", v)):
            out.append({"label": f"jitter {name} (epoch {epoch})", "kind": "float",
                        "shape": list(t.shape), "values": t.to(torch.float32).flatten().tolist()})
    return out


def trajectory_speedrun(repo, data, tmp, float64):
    f = "cifar10_speedrun.py"
    ctx = types.SimpleNamespace(cuda=False, warmup=False, compile=False)
    w = [int(64 * WIDTH_MULT), int(256 * WIDTH_MULT), int(256 * WIDTH_MULT)]
    batch = size_of(float64).speedrun
    changes = peer.changes_speedrun(ctx) + [
        peer.Sub(f, "CIFAR_MEAN and CIFAR_STD kept in fp16 as published (the CPU adapter made them float32; "
                 "T.Normalize casts them to the images' type)",
                 "CIFAR_MEAN = torch.tensor((0.4914, 0.4822, 0.4465), dtype=torch.float32)\n"
                 "CIFAR_STD = torch.tensor((0.247, 0.2435, 0.2616), dtype=torch.float32)\n",
                 "CIFAR_MEAN = torch.tensor((0.4914, 0.4822, 0.4465), dtype=torch.half)\n"
                 "CIFAR_STD = torch.tensor((0.247, 0.2435, 0.2616), dtype=torch.half)\n"),
        peer.Sub(f, f"widths x{WIDTH_MULT}: 64/256/256 -> {w[0]}/{w[1]}/{w[2]}",
                 "widths = dict(block1=64, block2=256, block3=256)",
                 f"widths = dict(block1={w[0]}, block2={w[1]}, block3={w[2]})"),
        peer.Sub(f, f"batch: 1536 -> {batch} (its lr and decay are per example: they follow)",
                 "    training_batch_size = 1536\n", f"    training_batch_size = {batch}\n"),
        peer.Sub(f, "trajectory: the starting weights injected after the whitening fit, and the "
                 "draws recorded from there",
                 "        model.init_whiten(train_images)\n",
                 "        __peer__.stage(\"whitening\")\n"
                 "        model.init_whiten(train_images)\n        __peer__.inject(model)\n"),
        peer.Sub(f, "trajectory: the weights recorded at the checkpoints, before the next step's forward pass",
                 "            loss = forward_step(inputs, labels, whiten_bias_grad)\n",
                 "            __peer__.before_step()\n"
                 "            loss = forward_step(inputs, labels, whiten_bias_grad)\n"),
        peer.Sub(f, "trajectory: each step's loss recorded (loss.item(), a host sync)",
                 "            loss.backward()\n",
                 "            __peer__.step_loss(loss)\n            loss.backward()\n"),
        peer.Sub(f, "trajectory: the weights recorded after training, before the TTA evaluation",
                 '    __peer__.mark("train_end")\n',
                 '    __peer__.final(model)\n    __peer__.mark("train_end")\n'),
        peer.Sub(f, "trajectory: the accuracy reports after the timer marked as a stage",
                 "    train_acc = evaluate(model, train_loader, tta_level=0)\n",
                 "    __peer__.stage(\"accuracy reports\")\n"
                 "    train_acc = evaluate(model, train_loader, tta_level=0)\n"),
    ] + stage_subs(f)
    if float64:
        changes += [
            peer.Sub(f, "float64: images `.float()` -> `.double()`",
                     "(self.images.float() / 255)", "(self.images.double() / 255)"),
            peer.Sub(f, "float64: CifarNet's `mod.float()` -> `mod.double()`", "mod.float()", "mod.double()"),
            peer.Sub(f, "float64: Muon's momentum buffers in float64 (the CPU adapter's float32, the record's fp16)",
                     'optimizer2.param_groups[0]["momentum_buffer_dtype"] = torch.float32',
                     'optimizer2.param_groups[0]["momentum_buffer_dtype"] = torch.float64'),
            peer.Sub(f, "float64: Muon's test for its momentum buffers' type follows",
                     'group["momentum_buffer_dtype"] == torch.float32 else None',
                     'group["momentum_buffer_dtype"] == torch.float64 else None'),
            peer.Sub(f, "float64: the jitter's uniforms drawn in float32 as tricklab's engine draws them, "
                     "then in the images' type (the record draws them in the images' fp16)",
                     "device=device, dtype=dtype)", "device=device).to(dtype)", 2),
        ]
    text = changed(repo, f, changes)
    rt = peer.Runtime(False, SPEEDRUN_EPOCHS, tmp, data)
    peer.write_airbench_pt(data, tmp)
    rec = Recorder(muon_names, batch)
    rec.attach(rt)
    mod = execute(f, text, rt, "peer_speedrun_trajectory")
    import torch
    rec.stage("net build")
    model = mod.CifarNet().to(memory_format=torch.channels_last)
    mod.main(1, model)
    out = recorded("hiverge-speedrun", f, repo, changes, rec, len(data["train_labels"]),
                   {"epochs": SPEEDRUN_EPOCHS, "batch_size": batch, "width_mult": WIDTH_MULT,
                    "dtype": "float64" if float64 else "float32"},
                   [f"logit_scale.scale=1/{w[2]}"], speedrun_draws)
    out["reference"] = {"repo": "hiverge/cifar10-speedrun", "commit": "5cd49b1", "file": f,
                        "sha256": peer.sha256(str(Path(repo) / f))}
    return out


# -- hlb ---------------------------------------------------------------------

# hlb's batch of 1024 would be 2 steps an epoch of 2,560 images: at 16 of 160 (float64)
# or 256 of 2,560 (float32), 10 steps an epoch and ceil(10 x 12.1) = 121 in all (the last
# epoch's tenth is round(0.1 x 10) = 1 step), its EMA from epoch 2 and CutMix in the last
# 6 epochs. Its
# gradient step is per batch (the loss is scaled by 512/batchsize) and its decay per
# example (`6.687e-4 * batchsize`), as the recipe writes them (`wd_batch = 1024`).
HLB_EPOCHS = float(os.environ.get("TRAJECTORY_EPOCHS", "12.1"))


def hlb_names(ref):
    """hlb's state names -> tricklab's variable names."""
    if ref == "net_dict.initial_block.whiten.weight":
        return "stem.whiten.weight"
    if ref == "net_dict.linear.weight":
        return "head.weight"
    _, group, layer, what = ref.split(".")
    half = {"conv1": "a", "norm1": "a", "conv2": "b", "norm2": "b"}[layer]
    part = "conv" if layer.startswith("conv") else "bn"
    return f"body.group{group[-1]}.{half}.{part}.{what}"


def hlb_draws(raw, n, pad):
    """hlb's draws as tricklab's engine asks for them.
    - the whitening's sample order (make_net: randperm of the training set), then the
      epoch-0 flip mask tricklab draws whatever the flip (unused without alternating
      flip: recorded as zeros);
    - each epoch hlb shuffles (randperm), crops by mask centres random_(15, 19) for rows
      and columns (offsets 0-3 of tricklab's 0-4: TRICKS.md 3), flips with rand_like < 0.5,
      and mixes the whole set (randperm, then, in its CutMix epochs only, square centres
      random_(1, 31) for rows and columns; the partner order of an epoch without CutMix
      goes unused and is dropped); tricklab draws the crop as one of 25 offsets,
      the flip, the order, then CutMix's partner order and the squares' corners;
    - each evaluation's randperm of the test set is dropped: tricklab's evaluation draws
      nothing."""
    side = 2 * pad + 1
    if os.environ.get("TRAJECTORY_DEBUG"):
        print([(k, tuple(v.shape) if hasattr(v, "shape") else (tuple(v[0].shape), v[1])) for k, v in raw],
              file=sys.stderr)
    ev = [(k, v) for k, v in raw if not (k == "randperm" and v.numel() != n)]
    (k0, order0), rest = ev[0], ev[1:]
    if k0 != "randperm":
        raise SystemExit(f"hlb: the first draw is {k0}, not the whitening's sample order")
    out = [{"label": "whitening sample order", "kind": "perm", "values": order0.tolist()},
           {"label": "flip mask (epoch 0; unused without alternating flip)", "kind": "int", "high": 2,
            "shape": [n], "values": [0] * n}]
    i, epoch = 0, 0
    while i < len(rest):
        kinds = [k for k, _ in rest[i:i + 7]]
        if kinds[:4] != ["randperm", "random_", "random_", "rand"]:
            raise SystemExit(f"hlb: epoch {epoch}: unexpected draws {kinds}")
        order, (cy, _), (cx, _), flip = (v for _, v in rest[i:i + 4])
        oy, ox = cy - (16 - 1), cx - (16 - 1)
        out.append({"label": f"crop offsets (epoch {epoch})", "kind": "int", "high": side * side,
                    "shape": [n], "values": (oy * side + ox).tolist()})
        out.append({"label": f"flips (epoch {epoch})", "kind": "int", "high": 2, "shape": [n],
                    "values": (flip.flatten() < 0.5).long().tolist()})
        out.append({"label": f"order (epoch {epoch})", "kind": "perm", "values": order.tolist()})
        i += 4
        # `batch_cutmix` draws its partner order every epoch, and its squares only in
        # CutMix's epochs (their centres' bounds tell them from the next crop's).
        if kinds[4:7] == ["randperm", "random_", "random_"] and rest[i + 1][1][1] == (1, 31):
            partner, (my, _), (mx, _) = (v for _, v in rest[i:i + 3])
            out.append({"label": f"cutmix partners (epoch {epoch})", "kind": "perm", "values": partner.tolist()})
            for name, c in (("rows", my), ("columns", mx)):
                out.append({"label": f"cutmix square {name} (epoch {epoch})", "kind": "int", "high": 30,
                            "shape": [n], "values": (c - 1).tolist()})
            i += 3
        elif kinds[4:5] == ["randperm"]:
            i += 1  # the unused partner order of an epoch without CutMix: tricklab draws none
        epoch += 1
    return out


def trajectory_hlb(repo, data, tmp, float64):
    f = "main.py"
    n_test = len(data["test_labels"])
    ctx = types.SimpleNamespace(cuda=False, warmup=False, compile=False, test_images=n_test)
    base = int(64 * WIDTH_MULT)
    batch = size_of(float64).hlb
    changes = peer.changes_hlb(ctx) + [
        peer.Sub(f, "data: the training set kept in the export's order (the script's DataLoader shuffles it "
                 "once into data.pt; tricklab trains on the export's order: the same set, another fixed order)",
                 "shuffle=True, num_workers=2", "shuffle=False, num_workers=2"),
        peer.Sub(f, "normalisation: Page's CIFAR-10 constants, as tricklab's hlb recipe (hlb's own use the "
                 "data set's mean and std: a known difference, README)",
                 "        cifar10_std, cifar10_mean = torch.std_mean(train_dataset_gpu['images'], dim=(0, 2, 3))",
                 "        cifar10_std, cifar10_mean = (torch.tensor([62.99, 62.09, 66.70], dtype=torch.float64) / 255, "
                 "torch.tensor([125.31, 122.95, 113.87], dtype=torch.float64) / 255)\n"
                 "        _unused = (train_dataset_gpu['images'], dim:=(0, 2, 3))"),
        peer.Sub(f, f"widths x{WIDTH_MULT}: base_depth 64 -> {base}", "'base_depth': 64", f"'base_depth': {base}"),
        peer.Sub(f, f"batch: 1024 -> {batch} (its lr is per batch, its decay per example: they follow)",
                 "batchsize = 1024\n", f"batchsize = {batch}\n"),
        peer.Sub(f, "trajectory: draws recorded from main()'s net build on (its whitening's sample order); "
                 "the starting weights injected after it",
                 "    net = make_net()\n",
                 "    __peer__.start()\n    __peer__.stage(\"net build\")\n    net = make_net()\n"
                 "    __peer__.inject(net)\n"),
        peer.Sub(f, "trajectory: the weights recorded at the checkpoints, before the next step's forward pass",
                 "              ## Run everything through the network\n              outputs = net(inputs)\n",
                 "              __peer__.before_step()\n              outputs = net(inputs)\n"),
        peer.Sub(f, "trajectory: each step's loss recorded (loss.item(), a host sync), per example "
                 "(the loss is summed x 512/batchsize: / 512)",
                 "              loss.backward()\n",
                 "              __peer__.step_loss(loss)\n              loss.backward()\n"),
        peer.Sub(f, "trajectory: the per-epoch evaluation marked as a stage",
                 "          net.eval()\n", "          __peer__.stage(\"per-epoch evaluation\")\n          net.eval()\n"),
        peer.Sub(f, "trajectory: the weights recorded after training (after the last evaluation)",
                 "    return ema_val_acc #", "    __peer__.final(net)\n    return ema_val_acc #"),
    ]
    if float64:
        changes += [
            peer.Sub(f, "float64: the images' 8-bit values recovered from ToTensor's float32 (x 255, rounded) "
                     "and normalised in float64",
                     "            return (input_images - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)",
                     "            return ((input_images.double() * 255).round() / 255 - mean.view(1, -1, 1, 1))"
                     " / std.view(1, -1, 1, 1)"),
            peer.Sub(f, "float64: train images `.float()` -> `.double()`",
                     "data['train']['images'] = data['train']['images'].float()",
                     "data['train']['images'] = data['train']['images'].double()"),
            peer.Sub(f, "float64: test images `.float()` -> `.double()`",
                     "data['eval']['images']  = data['eval']['images'].float()",
                     "data['eval']['images']  = data['eval']['images'].double()"),
            peer.Sub(f, "float64: one-hot targets `.float()` -> `.double()`",
                     "F.one_hot(data['train']['targets']).float()", "F.one_hot(data['train']['targets']).double()"),
            peer.Sub(f, "float64: one-hot test targets `.float()` -> `.double()`",
                     "F.one_hot(data['eval']['targets']).float()", "F.one_hot(data['eval']['targets']).double()"),
            peer.Sub(f, "float64: `net.float()` -> `net.double()`", "    net.float() #", "    net.double() #"),
            peer.Sub(f, "float64: the EMA updates float64 tensors too",
                     "if incoming_net_parameter.dtype in (torch.half, torch.float):",
                     "if incoming_net_parameter.dtype in (torch.half, torch.float, torch.double):"),
        ]
    text = changed(repo, f, changes)
    rt = peer.Runtime(False, HLB_EPOCHS, tmp, data)
    rt.hlb_eval_batchsize = peer.hlb_eval_batchsize(n_test)
    rec = Recorder(hlb_names, 512)
    rec.attach(rt)
    mod = execute(f, text, rt, "peer_hlb_trajectory")
    mod.main()
    out = recorded("hlb", f, repo, changes, rec, len(data["train_labels"]),
                   {"epochs": HLB_EPOCHS, "batch_size": batch, "width_mult": WIDTH_MULT,
                    "dtype": "float64" if float64 else "float32"}, (), hlb_draws)
    out["reference"] = {"repo": "tysam-code/hlb-CIFAR10", "commit": "ad103b4", "file": f,
                        "sha256": peer.sha256(str(Path(repo) / f))}
    return out


# -- page-final (davidcpage/cifar10-fast new_dawn.py) --------------------------

# Page's final script at 32 of 160 images (float64; its own 512 of 2,560 for float32): 5
# steps an epoch, its 10 epochs 50 steps. Its lr schedule is in epochs (PiecewiseLinear
# over step / steps an epoch), its lr per example (÷ batch, the loss summed) and its decay
# × batch, as the recipe's per-batch values work out at any batch; GhostBatchNorm's 16
# splits are of 2 images at 32; its 81 crop options need at least 81 images (160 makes
# chunks of 1 and 2). The EMA's counter restarts every epoch
# (a fresh update_ema per train_epoch call), so at 5 steps an epoch it averages once an
# epoch, at the first step.
PAGE_EPOCHS = 10


def page_names(ref):
    """new_dawn.py's state names (Network's `/` paths as `_`) -> tricklab's."""
    node, what = ref.split(".")
    if node == "linear":
        return "head.weight"
    if node.startswith("prep_"):
        return {"prep_whiten": "stem.whiten", "prep_conv": "stem.proj", "prep_norm": "stem.bn"}[node] + "." + what
    parts = node.split("_")
    layer, kind = parts[0], parts[-1]
    where = parts[2] if len(parts) == 4 else "down"  # layerN_residual_resK_conv, or layerN_conv
    return f"body.{layer}.{where}.{'conv' if kind == 'conv' else 'bn'}.{what}"


def page_groups(name, n, k, assign, perm):
    """One of Page's chunked choices as tricklab's engine draws it.

    Page's `transformed` permutes the set (`perm`), cuts it into k even_splits chunks and
    gives chunk c option `assign[c]`; tricklab's `draws` with groups takes a chosen order
    of the options (Perm(options)) and puts image j in group floor(P[j]·k / n) for a
    Perm(n) P. The two cut the set into groups of the same sizes (k of n // k or
    n // k + 1), in another order, so each Page chunk is paired with a tricklab group of
    its size; chosen[group] is the chunk's option and P gives the chunk's images that
    group's slots. Returns those two draws, and each image's option (for the order)."""
    import torch
    bounds = list(map(int, page_groups.even_splits(n, k)))
    chunks = [perm[a:b].tolist() for a, b in zip(bounds, bounds[1:])]
    slots = [[] for _ in range(k)]
    for m in range(n):
        slots[m * k // n].append(m)
    by_size = lambda xs: sorted(range(k), key=lambda i: (len(xs[i]), i))
    pair = dict(zip(by_size(slots), by_size(chunks)))
    if any(len(slots[g]) != len(chunks[c]) for g, c in pair.items()):
        raise SystemExit(f"page-final: {name}: Page's chunk sizes do not match tricklab's groups")
    chosen = [assign[pair[g]] for g in range(k)]
    p = torch.empty(n, dtype=torch.long)
    for g, c in pair.items():
        p[torch.tensor(chunks[c])] = torch.tensor(slots[g])
    return chosen, p


def page_draws(raw, n, pad):
    """new_dawn.py's draws as tricklab's engine asks for them.
    - each epoch GPUBatches permutes the set, shuffles the 81 crop options and crops
      each of 81 chunks at its own; permutes again, shuffles the two flip options and
      flips one half; then shuffles the order (`transformed`, then `__iter__`); tricklab
      draws the crop choices and groups, the flip choices and groups, then the order;
    - the epoch-0 flip mask tricklab draws whatever the flip is recorded as zeros
      (unused without alternating flip);
    - the evaluations draw nothing (shuffle=False, no transforms).
    The padding is new_dawn.py's `pad(border=4)`, not the `pad` the airbench recordings
    pass (2)."""
    side = 2 * 4 + 1
    kinds = [k for k, _ in raw]
    if len(kinds) % 5 or kinds[:5] != ["randperm", "shuffle", "randperm", "shuffle", "randperm"]:
        raise SystemExit(f"page-final: unexpected draws {kinds[:10]}")
    out = [{"label": "flip mask (epoch 0; unused without alternating flip)", "kind": "int", "high": 2,
            "shape": [n], "values": [0] * n}]
    for epoch, i in enumerate(range(0, len(raw), 5)):
        (_, i1), (_, crops), (_, i2), (_, flips), (_, i3) = raw[i:i + 5]
        crop_of = [o["y0"] * side + o["x0"] for o in crops]
        chosen, p = page_groups(f"crops (epoch {epoch})", n, len(crops), crop_of, i1)
        out.append({"label": f"crop choices (epoch {epoch})", "kind": "perm", "values": chosen})
        out.append({"label": f"crop groups (epoch {epoch})", "kind": "perm", "values": p.tolist()})
        # The flip chunks are positions of the cropped set, which is in i1's order.
        flip_of = [1 if o["choice"] else 0 for o in flips]
        chosen, p = page_groups(f"flips (epoch {epoch})", n, len(flips), flip_of, i1[i2])
        out.append({"label": f"flip choices (epoch {epoch})", "kind": "perm", "values": chosen})
        out.append({"label": f"flip groups (epoch {epoch})", "kind": "perm", "values": p.tolist()})
        out.append({"label": f"order (epoch {epoch})", "kind": "perm", "values": i1[i2[i3]].tolist()})
    return out


class PageRecorder(Recorder):
    """What new_dawn.py's run records: Recorder's, plus its numpy shuffles of the
    augmentation options, its Timer's laps (the DAWNBench clock: a lap's seconds count
    unless it says include_in_total=False) and its train and valid steps."""

    def __init__(self, names, batch, total_steps, steps_per_epoch):
        super().__init__(names, batch)
        self.total_steps, self.steps_per_epoch = total_steps, steps_per_epoch
        self.first_batches, self.padded = [], None

    def regions(self):
        """The stages of each lap that counts (a lap runs from the Timer's previous
        call, or its creation, to this call), and the stages outside them. A stage goes
        on into a lap in which no other starts (new_dawn.py's test-set preprocessing is a
        lap of its own after the training set's)."""
        timed, untimed, current, active = [], [], None, None

        def add(xs, names):
            xs.extend(x for x in names if x not in xs)
        for x in self.log:
            if isinstance(x, tuple):
                if current is not None:
                    current = current or ([active] if active else [])
                    if x[1]:
                        timed.append(current)
                    else:
                        add(untimed, current)
                current = []
            else:
                active = x
                if current is None:
                    add(untimed, [x])
                elif x not in current:
                    current.append(x)
        add(untimed, current or [])
        covered = {s for r in timed for s in r}
        return timed, [s for s in untimed if s not in covered]

    def timer(self, base):
        rec = self

        class Timer(base):
            """core.Timer, each lap logged (same laps, same clock)."""

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                rec.log.append(("lap", False))

            def __call__(self, include_in_total=True):
                rec.log.append(("lap", include_in_total))
                return super().__call__(include_in_total)
        return Timer

    def train_step(self, batch, state):
        if batch:
            if len(self.losses) % self.steps_per_epoch == 0:
                self.first_batches.append(batch["input"].clone())
            self.before_step()

    def batches(self, real):
        """GPUBatches.__iter__, the padded training set it augments kept (for the check
        that the rewritten draws rebuild the script's batches)."""
        def f(batches):
            if batches.transforms:
                self.padded = batches.dataset["data"]
            return real(batches)
        return f

    def check(self, draws, side):
        """The draws as tricklab's engine reads them (pipeline.rs `augment_epoch`: each
        image's option is chosen[floor(P·k / n)]; crop, then flip; then the order) must
        rebuild the first batch of every epoch of the script's own."""
        import torch
        xp, n = self.padded, self.padded.shape[0]
        per = {d["label"]: d["values"] for d in draws}
        for epoch, want in enumerate(self.first_batches):
            def option(what):
                chosen = torch.tensor(per[f"{what} choices (epoch {epoch})"])
                p = torch.tensor(per[f"{what} groups (epoch {epoch})"])
                return chosen[p * len(chosen) // n]
            crop = option("crop")
            dy, dx = crop // side, crop % side
            x = torch.stack([xp[j, :, dy[j]:dy[j] + 32, dx[j]:dx[j] + 32] for j in range(n)])
            x = torch.where((option("flip") == 1).view(n, 1, 1, 1), x.flip(-1), x)
            got = x[torch.tensor(per[f"order (epoch {epoch})"])[:len(want)]]
            if not torch.equal(got, want):
                bad = (got != want).flatten(1).any(1).nonzero().flatten()[:5].tolist()
                raise SystemExit(f"page-final: epoch {epoch}: the rewritten draws do not rebuild the script's "
                                 f"first batch (images at {bad} differ)")

    def loss_step(self, batch, state):
        if batch:
            self.step_loss(state["output"]["loss"].sum())

    def valid_step(self, batch, state):
        if batch:
            self.stage("final evaluation" if len(self.losses) >= self.total_steps else "per-epoch evaluation")

    def shuffled(self, real):
        def f(xs, inplace=False):
            out = real(xs, inplace)
            self.raw.append(("shuffle", [dict(o) for o in out]))
            return out
        return f


def trajectory_page(repo, data, tmp, float64):
    import importlib
    import torch
    n = len(data["train_labels"])
    ch = {"prep": int(64 * WIDTH_MULT), "layer1": int(128 * WIDTH_MULT), "layer2": int(256 * WIDTH_MULT),
          "layer3": int(512 * WIDTH_MULT)}
    dtype = "torch.float64" if float64 else "torch.float32"
    batch = size_of(float64).page
    cast = "double" if float64 else "float"
    # The changes torch 2.11 and numpy 2 need in Page's modules, as the parity adapter makes them.
    libs = {name: [c for c in peer.page_lib_changes() if c.file == name]
            for name in ("core.py", "torch_backend.py", "dawn_utils.py")}
    f = "new_dawn.py"
    changes = [c for subs in libs.values() for c in subs] + [
        peer.Sub(f, "arguments: none from the command line; the log in the run's temp folder",
                 "    args = parser.parse_args()\n", "    args = parser.parse_args(['--log_dir', __peer__.data_dir])\n"),
        peer.Sub(f, "data: the export's images (uint8 NHWC, int64 labels, its order; no download)",
                 "cifar10(args.data_dir)", "__peer__.page_data()"),
        peer.Sub(f, "CPU: cuDNN's warm-up on random batches left out (forward and backward of a model that "
                 "is thrown away, no optimiser step; its batches are .cuda())",
                 "    for size in [batch_size, len(dataset['valid']['targets']) % batch_size]:\n"
                 "        warmup_cudnn(model, loss, random_batch(size))\n", "\n"),
    ] + ([
        peer.Sub(f, f"batch: 512 -> {batch} (its lr is per example, ÷ batch_size on the summed loss, and its "
                 "decay × batch_size: per step both are the same at any batch; GhostBatchNorm keeps its 16 "
                 f"splits, of {batch // 16} images)",
                 "    batch_size = 512\n", f"    batch_size = {batch}\n"),
    ] if batch != 512 else []) + [
        peer.Sub(f, "CPU: the Timer without torch.cuda.synchronize, each lap logged (__peer__.Timer, a "
                 "core.Timer subclass)", "    timer = Timer(synch=torch.cuda.synchronize)\n",
                 "    timer = __peer__.Timer()\n"),
        peer.Sub(f, f"{'float64' if float64 else 'CPU fp32'}: the data set in {dtype}, not fp16",
                 "        to(dtype=torch.float16),\n", f"        to(dtype={dtype}),\n"),
        peer.Sub(f, f"{'float64' if float64 else 'CPU fp32'}: the normalisation constants in {dtype}, not fp16",
                 "T = lambda x: torch.tensor(x, dtype=torch.float16, device=device)",
                 f"T = lambda x: torch.tensor(x, dtype={dtype}, device=device)"),
        peer.Sub(f, "trajectory: the upload and the preprocessing marked as stages",
                 "    dataset = map_nested(to(device), dataset)\n",
                 "    __peer__.stage(\"loading\")\n    dataset = map_nested(to(device), dataset)\n"
                 "    __peer__.stage(\"preprocessing\")\n"),
        peer.Sub(f, f"widths x{WIDTH_MULT} ({ch}); {'float64' if float64 else 'CPU fp32'}: the net "
                 f"`.{cast}()`, not `.half()`; trajectory: whitening and the net's build marked as stages, "
                 "the starting weights injected after them and the draws recorded from there",
                 "    Λ, V = eigens(patches(train_set['data'][:10000,:,4:-4,4:-4])) #center crop to remove padding\n"
                 "    model = Network(net(weight=1/16, conv_bn=conv_bn, prep=partial(whitening_block, Λ=Λ, V=V)))"
                 ".to(device).half()    \n",
                 "    __peer__.stage(\"whitening\")\n"
                 "    Λ, V = eigens(patches(train_set['data'][:10000,:,4:-4,4:-4])) #center crop to remove padding\n"
                 "    __peer__.stage(\"net build\")\n"
                 f"    model = Network(net(channels={ch!r}, weight=1/16, conv_bn=conv_bn, "
                 f"prep=partial(whitening_block, Λ=Λ, V=V))).to(device).{cast}()\n"
                 "    __peer__.inject(model)\n"),
        peer.Sub(f, "trajectory: a train step first that records the checkpoints, one after the forward pass "
                 "that records the summed loss (loss.item(), a host sync), and a valid step that marks the "
                 "evaluation as a stage",
                 "train_steps=(*default_train_steps, update_ema(momentum=0.99, update_freq=5)),\n"
                 "                                                          valid_steps=(forward_tta(",
                 "train_steps=(__peer__.train_step, *default_train_steps[:2], __peer__.loss_step, "
                 "*default_train_steps[2:], update_ema(momentum=0.99, update_freq=5)),\n"
                 "                                                          valid_steps=(__peer__.valid_step, forward_tta("),
        peer.Sub(f, "trajectory: the weights recorded after training (after the last evaluation, which reads "
                 "the EMA copy)", "    with open(os.path.join(", "    __peer__.final(model)\n    with open(os.path.join("),
    ]
    # Page's modules from changed copies in a folder of their own, then new_dawn.py run
    # as a module with `__peer__` the recorder's runtime.
    libdir = os.path.join(tmp, "page")
    os.makedirs(libdir)
    for name, subs in libs.items():
        Path(libdir, name).write_text(changed(repo, name, subs))
    for m in ("core", "torch_backend", "dawn_utils"):
        sys.modules.pop(m, None)
    sys.path.insert(0, libdir)
    try:
        tb = importlib.import_module("torch_backend")
        core = importlib.import_module("core")
        page_groups.even_splits = tb.even_splits
        rt = peer.Runtime(False, PAGE_EPOCHS, tmp, data)
        rec = PageRecorder(page_names, batch, PAGE_EPOCHS * (n // batch), n // batch)
        rec.attach(rt)
        rt.Timer = rec.timer(core.Timer)
        rt.train_step, rt.loss_step, rt.valid_step = rec.train_step, rec.loss_step, rec.valid_step
        rt.page_data = lambda: {
            "train": {"data": data["train_images"], "targets": data["train_labels"]},
            "valid": {"data": data["test_images"], "targets": data["test_labels"]},
        }
        tb.shuffled = rec.shuffled(tb.shuffled)
        tb.GPUBatches.__iter__ = rec.batches(tb.GPUBatches.__iter__)
        text = changed(repo, f, [c for c in changes if c.file == f])
        execute(f, text, rt, "peer_page_trajectory")
    finally:
        sys.path.remove(libdir)
        for m in ("core", "torch_backend", "dawn_utils"):
            sys.modules.pop(m, None)
    out = recorded("page-final", f, repo, changes, rec, n,
                   {"epochs": PAGE_EPOCHS, "batch_size": batch, "width_mult": WIDTH_MULT,
                    "dtype": "float64" if float64 else "float32"}, (), page_draws)
    rec.check(out["draws"], 9)
    out["reference"] = {"repo": "davidcpage/cifar10-fast", "commit": "f79e8b8", "file": f,
                        "sha256": peer.sha256(str(Path(repo) / f))}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--airbench", required=True, type=Path, help="KellerJordan/cifar10-airbench at f1c599c")
    ap.add_argument("--speedrun", type=Path, help="hiverge/cifar10-speedrun at 5cd49b1 (its trajectory is "
                    "written only when given)")
    ap.add_argument("--hlb", type=Path, help="tysam-code/hlb-CIFAR10 at ad103b4 (its trajectory is written "
                    "only when given)")
    ap.add_argument("--page", type=Path, help="davidcpage/cifar10-fast at f79e8b8 (its trajectory is written "
                    "only when given)")
    ap.add_argument("--tricklab", type=Path, default=REPO / "target" / "debug" / "tricklab",
                    help="the binary that exports the embedded images in its training order")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "golden" / "trajectory")
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(int(os.environ.get("TRAJECTORY_THREADS", "1")))  # sums in one order
    tmp = tempfile.mkdtemp(prefix="tricklab-trajectory-")
    try:
        exported = {}

        def data_of(size):
            """The embedded set's first images a class at `size`, exported once."""
            if size not in exported:
                export = os.path.join(tmp, f"export-{size.train_per_class}-{size.test_per_class}")
                subprocess.run([str(a.tricklab), "data", "export", "embedded", "--out", export,
                                "--train-per-class", str(size.train_per_class),
                                "--test-per-class", str(size.test_per_class)],
                               check=True, stdout=sys.stderr)
                exported[size] = peer.read_export(export)
            return exported[size]
        a.out.mkdir(parents=True, exist_ok=True)
        runs = []
        for name, repo, make in (("airbench94", a.airbench, trajectory_airbench94),
                                 ("airbench94-muon", a.airbench, trajectory_muon),
                                 ("hiverge-speedrun", a.speedrun, trajectory_speedrun),
                                 ("hlb", a.hlb, trajectory_hlb),
                                 ("page-final", a.page, trajectory_page)):
            if repo is not None:
                runs += [(name, repo, make, True), (f"{name}-float32", repo, make, False)]
        only = [x for x in os.environ.get("TRAJECTORY_ONLY", "").split(",") if x]
        for name, repo, make, float64 in runs:
            if only and name not in only:
                continue
            work = os.path.join(tmp, name)
            os.makedirs(work)
            size = size_of(float64)
            data = data_of(size)
            g = make(repo, data, work, float64)
            g.update({
                "torch": torch.__version__,
                "generator": "scripts/golden/make_trajectory.py",
                "data": {"set": "embedded", "train_per_class": size.train_per_class,
                         "test_per_class": size.test_per_class, "meta": data["meta"]},
                "notes": [
                    "on the CPU, one thread, in settings.dtype; weights: uniform(seed, shape, lo, hi) as golden.rs "
                    "`input` builds them, or a constant (fill); injected after the whitening fit",
                    "draws: the reference's own torch.rand/randint/randperm results from the injection "
                    "on, rewritten in the form and order tricklab's engine asks for them (each label "
                    "says which)",
                    "losses: each step's summed loss / batch, before its optimiser step",
                    "checkpoints: after steps " + ", ".join(map(str, CHECKPOINTS)) + " (the weights the "
                    "next step reads); final: after training (after the last Lookahead copy), before "
                    "the TTA evaluation; each as the float64 sum, sum of squares and first 4 values "
                    "of every variable",
                ],
            })
            path = a.out / f"{name}.json"
            # One line a key: the draws are long lists of small numbers.
            path.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in g.items())
                            + "\n}\n")
            print(f"{path}: {len(g['losses'])} steps, {len(g['draws'])} draws, "
                  f"loss {g['losses'][0]:.4f} -> {g['losses'][-1]:.4f}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
