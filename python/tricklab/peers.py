"""One training run of a published CIFAR-10 speedrun script, as its own code runs it.

    python3 -m tricklab.peers NAME --repo DIR --data DATADIR --seed S --epochs E
        [--device cpu|cuda|cuda:N] [--compile auto|on|off] [--compile-form published|graphs|fusion|both]
        [--warmup | --no-warmup] [--list-changes]

NAME is one of airbench94, airbench94-muon, hiverge-speedrun, hlb, page-final
(Page's own new_dawn.py) and page-final-simple (99991's simplification of it).
DIR is the root of a fetched copy of the script's repository (never copied
into tricklab; a script matrix's `dir`, which its tricks may have patched);
DATADIR a data set written by `tricklab data export` (a script matrix's
`{data}`). The script's source is read, a list of named textual substitutions
is applied (each must match exactly the expected number of times, else this
exits 3 with "the peer changed"), the result is executed as a module, and its
own `main`/`train` is called ONCE. Everything the script prints goes to
stderr; stdout gets exactly one JSON line at the end. Under tricklab
(TRICKLAB_EVENTS set) the run also reports through the event protocol: its
planned steps, each epoch the script itself prints, and its result on the
script's own clock.

`tricklab parity` and the script matrices in ablations/*-script.toml call it;
scripts/peers/README.md lists every substitution.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
import types

# --------------------------------------------------------------------------
# The peers
# --------------------------------------------------------------------------


class Peer:
    def __init__(self, name, repo, commit, files, batch_size, clock, compile_sites,
                 published_warmup, per_step_part, runner):
        self.name = name
        self.repo = repo  # GitHub owner/name
        self.commit = commit
        self.files = files  # {path in repo: sha256 at `commit`}; the first is the script
        self.script = next(iter(files))
        self.batch_size = batch_size
        self.clock = clock
        self.compile_sites = compile_sites  # does the published script use torch.compile?
        self.published_warmup = published_warmup
        self.per_step_part = per_step_part
        self.runner = runner


# sha256 of the files at the commits the adapter was written against.
SHA_AIRBENCH94 = "0b155e0ff0e696bc01ae136654ddae88a24cd053cd2b4313d44548c29ed6c91d"
SHA_AIRBENCH94_MUON = "704e29251a5207d8aed8a35adf13f772ff386b90a712aaddc2a28854385b536e"
SHA_SPEEDRUN = "d1e1f6991cc3e1758c0bbc0e728c86a4b3119dd42a9233075b2edb9735d0ba91"
SHA_HLB = "3e2d0c1512bcef3eebff979644a49038cd677e88efbafd67260f0642b2dff546"
SHA_NEW_DAWN = "5a60b8de548468eafe5fedc21beb13625dc43ad1e06eb0befb7ae20c29ab237f"
SHA_PAGE_CORE = "5492c88ebbcdf392518bfbc62c697f6a457ad1b48ea0cb63df8c71bd635434b8"
SHA_PAGE_TORCH_BACKEND = "3ed1634428ac71606a131a83597bb9d7162f95609a4982a48334666769167761"
SHA_PAGE_DAWN_UTILS = "063662df908cd690ea80821b8a64753d3830c3b39e4c6b5b45f39216ce8e11dc"
SHA_FAST_SIMPLE_TRAIN = "f6582527f1a15333cfbdec0506623bdfbc7b219b9d739d381c6949426e24aa1c"
SHA_FAST_SIMPLE_MODEL = "0cf3352991a284cbf63f3f0e44c07fc3bffe61c9d720298ad8c18e57681b88c3"


class PeerChanged(Exception):
    pass


class Sub:
    """A named textual substitution that must match exactly `count` times."""

    def __init__(self, file, why, old, new, count=1, regex=False):
        self.file, self.why, self.old, self.new = file, why, old, new
        self.count, self.regex = count, regex

    def apply(self, text):
        if self.regex:
            out, n = re.subn(self.old, self.new, text, flags=re.M)
        else:
            n = text.count(self.old)
            out = text.replace(self.old, self.new)
        if n != self.count:
            raise PeerChanged(
                f"{self.file}: the change `{self.why}` expects {self.count} match(es) of "
                f"{self.old!r} and found {n}: the script changed (another copy, or a matrix trick's patch took "
                f"that text away); check the script, or the patch, or update python/tricklab/peers.py"
            )
        return out

    def describe(self):
        return f"{self.file}: {self.why} (x{self.count})"


def note(text):
    """A change made by the adapter around the script rather than inside its text."""
    return f"adapter: {text}"


# -- substitutions shared by several peers ---------------------------------

def event_sub(file, cuda, count=2):
    if cuda:
        why = ("torch.cuda.Event -> __peer__.Event, a torch.cuda.Event subclass that also logs each "
               "elapsed_time() (same events, same record points; splits the clock into its regions)")
    else:
        why = ("torch.cuda.Event -> a time.perf_counter event recorded at the same points "
               "(the script's own clock regions kept)")
    return Sub(file, why, "torch.cuda.Event(enable_timing=True)",
               "__peer__.Event(enable_timing=True)", count)


def sync_sub(file, count, extra=""):
    return Sub(file, "torch.cuda.synchronize() -> no-op on the CPU" + extra,
               "torch.cuda.synchronize()", "__peer__.synchronize()", count)


def result_sub(file, ret_line, what):
    return Sub(file, f"instrumentation: `__peer__.result(locals())` inserted before `{ret_line.strip()}` "
               f"(reads {what})", ret_line, "    __peer__.result(locals())\n" + ret_line, 1)


COMPILE_RE = r"^[ \t]*@torch\.compile(\([^\n]*\))?[ \t]*\n"


def compile_sub(file, count):
    return Sub(file, "torch.compile off: `@torch.compile(...)` decorator lines removed", COMPILE_RE, "",
               count, regex=True)


# -- per peer ----------------------------------------------------------------

def changes_airbench94(c):
    f = "legacy/airbench94.py"
    ch = [
        Sub(f, "data: CifarLoader('cifar10', ...) -> a temp folder holding train.pt/test.pt written from "
            "--data (uint8 NHWC images, int64 labels, classes; the export's order; no download)",
            "CifarLoader('cifar10',", "CifarLoader(__peer__.data_dir,", 2),
        Sub(f, "epochs: hyp['opt']['train_epochs'] 9.9 -> E (--epochs)",
            "'train_epochs': 9.9,", "'train_epochs': __peer__.epochs,"),
        event_sub(f, c.cuda),
        result_sub(f, "    return tta_val_acc\n",
                   "current_steps, total_time_seconds, val_acc, tta_val_acc"),
    ]
    if not c.cuda:
        ch += [
            Sub(f, "CPU: torch.load map_location=torch.device(gpu) -> 'cpu'",
                "map_location=torch.device(gpu)", "map_location=torch.device('cpu')"),
            Sub(f, "CPU fp32: images `.half()` -> `.float()`",
                "(self.images.half() / 255)", "(self.images.float() / 255)"),
            Sub(f, "CPU fp32: `net.half().cuda()` -> `net.float()`",
                "net = net.half().cuda()", "net = net.float()"),
            sync_sub(f, 3),
        ]
    ch += [
        note("runs: one call main(0) (the __main__ block's 25 runs and its logs/ file are not run; "
             "its header line is printed)"),
        note("warm-up: main('warmup') on random labels, untimed, before the run (commented out in the "
             "published script, whose mean is over 25 runs in one process of which only the first pays "
             "cuDNN's autotuning; on by default on cuda for that reason, else because --warmup was given)")
        if c.warmup else
        note("no warm-up run (main('warmup') is commented out in the published script)"),
    ]
    return ch


def changes_muon(c):
    f = "airbench94_muon.py"
    ch = [
        Sub(f, 'data: CifarLoader("cifar10", ...) -> a temp folder holding train.pt/test.pt written from '
            "--data (uint8 NHWC images, int64 labels, classes; the export's order; no download)",
            'CifarLoader("cifar10",', "CifarLoader(__peer__.data_dir,", 2),
        Sub(f, "epochs: total_train_steps = ceil(8 * len(train_loader)) -> ceil(E * len(train_loader))",
            "total_train_steps = ceil(8 * len(train_loader))",
            "total_train_steps = ceil(__peer__.epochs * len(train_loader))"),
        event_sub(f, c.cuda),
        result_sub(f, "    return tta_val_acc\n", "step, time_seconds, val_acc, tta_val_acc"),
    ]
    if not c.cuda:
        ch += [
            Sub(f, 'CPU: torch.load map_location=torch.device("cuda") -> "cpu"',
                'map_location=torch.device("cuda")', 'map_location=torch.device("cpu")'),
            Sub(f, "CPU fp32: images `.half()` -> `.float()`",
                "(self.images.half() / 255)", "(self.images.float() / 255)"),
            Sub(f, "CPU fp32: CifarNet's `mod.half()` -> `mod.float()` (Newton-Schulz stays bf16 as published)",
                "mod.half()", "mod.float()"),
            sync_sub(f, 1),
        ]
    if not c.compile:
        ch.append(compile_sub(f, 1))
    ch += [
        note("runs: the __main__ protocol replayed by the adapter with one run: model = CifarNet()"
             + (".cuda()" if c.cuda else "") + ".to(memory_format=torch.channels_last)"
             + ("; model.compile(mode=\"max-autotune\")" if c.compile else
                " (model.compile(mode=\"max-autotune\") not called: compile off)")
             + ("; main(\"warmup\", model) untimed on random labels" if c.warmup else
                "; no main(\"warmup\", model) (warm-up off)")
             + "; main(0, model) once (the 200 runs and the logs/ file are not run)"),
    ]
    return ch


def changes_speedrun(c):
    f = "cifar10_speedrun.py"
    ch = [
        Sub(f, 'data: CifarLoader("cifar10", ...) -> a temp folder holding train.pt/test.pt written from '
            "--data (uint8 NHWC images, int64 labels, classes; the export's order; no download)",
            r'(CifarLoader\(\s*)"cifar10"', r"\1__peer__.data_dir", 2, regex=True),
        Sub(f, "epochs: total_train_steps = ceil(7.59 * len(train_loader)) -> ceil(E * len(train_loader))",
            "total_train_steps = ceil(7.59 * len(train_loader))",
            "total_train_steps = ceil(__peer__.epochs * len(train_loader))"),
        event_sub(f, c.cuda),
        Sub(f, "instrumentation: `__peer__.mark(\"train_start\")` before the training loop "
            + ("(a cuda event record, no sync)" if c.cuda else "(perf_counter)")
            + "; the script times whitening+training+TTA as one region",
            "    for epoch in range(ceil(total_train_steps / len(train_loader))):\n",
            "    __peer__.mark(\"train_start\")\n"
            "    for epoch in range(ceil(total_train_steps / len(train_loader))):\n"),
        Sub(f, "instrumentation: `__peer__.mark(\"train_end\")` after the training loop, before TTA",
            "    tta_val_acc = evaluate(model, test_loader, tta_level=2)\n    stop_timer()\n",
            "    __peer__.mark(\"train_end\")\n"
            "    tta_val_acc = evaluate(model, test_loader, tta_level=2)\n    stop_timer()\n"),
        result_sub(f, "    return (val_acc, tta_val_acc, time_seconds)\n",
                   "step, time_seconds, val_acc, tta_val_acc"),
    ]
    if not c.cuda:
        ch += [
            Sub(f, 'CPU: torch.load map_location=torch.device("cuda") -> "cpu"',
                'map_location=torch.device("cuda")', 'map_location=torch.device("cpu")'),
            Sub(f, 'CPU: the loader\'s index buffer device="cuda" -> "cpu"',
                'device="cuda"', 'device="cpu"'),
            Sub(f, "CPU: `.pin_memory()` of the loader's unused CPU buffer removed",
                ".pin_memory()", ""),
            Sub(f, "CPU fp32: `.half()` -> `.float()` (images; CifarNet's mod.half())",
                ".half()", ".float()", 2),
            Sub(f, "CPU fp32: `torch.half` -> `torch.float32` (normalisation constants, the pinned buffer, "
                "Muon's momentum_buffer_dtype and its `== torch.half` test, so momentum stays on; 2 type hints)",
                "torch.half", "torch.float32", 7),
            sync_sub(f, 2, " (one of them in the __main__ block, not run)"),
        ]
    if not c.compile:
        ch.append(compile_sub(f, 7))
    ch += [
        note("runs: the __main__ protocol replayed by the adapter with one run: model = CifarNet()"
             + (".cuda()" if c.cuda else "") + ".to(memory_format=torch.channels_last)"
             + ("; model.compile(mode=\"max-autotune\")" if c.compile else
                " (model.compile(mode=\"max-autotune\") not called: compile off)")
             + ("; main(\"warmup\", model) untimed on random images and labels" if c.warmup else
                "; no main(\"warmup\", model) (warm-up off)")
             + ("; torch.cuda.empty_cache(), synchronize(), _sleep(6000000000)" if c.cuda else "")
             + "; main(1, model) once (the other 199 runs are not run)"),
    ]
    return ch


def changes_hlb(c):
    f = "main.py"
    ch = [
        Sub(f, "data: hyp data_location 'data.pt' -> a fresh temp path, so the script's own build branch "
            "runs and writes it there",
            "'data_location': 'data.pt',", "'data_location': __peer__.hlb_data_pt,"),
        Sub(f, "data: torchvision CIFAR10 train set -> the --data export's train images as a Dataset "
            "(PIL image -> the script's ToTensor, int label; the export's order); the script's "
            "DataLoader(shuffle=True, num_workers=2) still shuffles it into data.pt, as published",
            "torchvision.datasets.CIFAR10('cifar10/', download=True,  train=True,  transform=transform)",
            "__peer__.torch_dataset(train=True, transform=transform)"),
        Sub(f, "data: torchvision CIFAR10 test set -> the --data export's test images (shuffle=False)",
            "torchvision.datasets.CIFAR10('cifar10/', download=False, train=False, transform=transform)",
            "__peer__.torch_dataset(train=False, transform=transform)"),
        Sub(f, "epochs: hyp['misc']['train_epochs'] 12.1 -> E (--epochs)",
            "'train_epochs': 12.1,", "'train_epochs': __peer__.epochs,"),
        result_sub(f, "    return ema_val_acc",
                   "current_steps, total_time_seconds, val_acc, ema_val_acc"),
    ]
    if c.test_images is None:
        ch.append(note("(only when the test set is not a multiple of 2500) main.py: eval_batchsize = 2500 "
                       "-> the largest divisor of the test set size <= 2500 (its assert needs equal batches)"))
    elif c.test_images % 2500 != 0:
        ch.append(Sub(f, f"eval: eval_batchsize = 2500 -> {hlb_eval_batchsize(c.test_images)}, the largest "
                      f"divisor of the {c.test_images} test images <= 2500 (its assert needs equal batches; "
                      f"the accuracy is the same mean)",
                      "eval_batchsize = 2500", "eval_batchsize = __peer__.hlb_eval_batchsize"))
    if not c.cuda:
        ch += [
            Sub(f, "CPU: hyp['misc']['device'] 'cuda' -> 'cpu'", "'device': 'cuda',", "'device': 'cpu',"),
            Sub(f, "CPU: torch.randperm(..., device='cuda') -> 'cpu' (get_batches, batch_cutmix)",
                "device='cuda'", "device='cpu'", 2),
            Sub(f, "CPU fp32: `.half()` -> `.float()` (train/eval images and one-hot targets in data.pt; "
                "net.half())", ".half()", ".float()", 5),
            event_sub(f, False),
            sync_sub(f, 3),
        ]
    ch += [
        note("runs: the module's top-level code (builds data.pt, prints the header) then main() once "
             "(the __main__ block's 25 runs are not run)"),
    ]
    return ch


def page_lib_changes():
    """What Page's core.py and torch_backend.py need under torch 2.11 and numpy 2 on any device.

    The golden trajectory (scripts/golden/make_trajectory.py) runs the same copies."""
    return [
        Sub("core.py", "pandas not installed here: `import pandas` kept out (only Table.df uses it, "
            "and nothing calls it)", "import pandas as pd\n", "pd = None\n"),
        Sub("core.py", "numpy 2 has no np.float: np.float64 (the type it aliased)",
            "isinstance(val, (float, np.float))", "isinstance(val, (float, np.float64))"),
        Sub("torch_backend.py", "torch.symeig (removed) -> torch.linalg.eigh (the same lower triangle, "
            "eigenvalues ascending as symeig's)", "torch.symeig(Σ, eigenvectors=True)", "torch.linalg.eigh(Σ)"),
        Sub("torch_backend.py", "torch 2's CPU convolutions keep a permuted (channels-last) input's "
            "layout, which GhostBatchNorm's `view` cannot take: the NHWC -> NCHW transpose made "
            "contiguous (the same values)",
            "    return x.permute([source.index(d) for d in target]) \n",
            "    return x.permute([source.index(d) for d in target]).contiguous()\n"),
        Sub("torch_backend.py", "numpy 2 has no np.float: np.float64 (the type it aliased)",
            ".astype(np.float) for", ".astype(np.float64) for"),
    ]


# Page's lr knots [0, E/5, E - 2] (epochs, ema_epochs = 10, 2) rise only while E/5 < E - 2.
PAGE_MIN_EPOCHS = 3


def changes_page(c):
    """davidcpage/cifar10-fast new_dawn.py, Page's final DAWNBench script, run as its main() runs it."""
    f = "new_dawn.py"
    cpu = not c.cuda
    ch = page_lib_changes() + [
        Sub(f, "arguments: none from the command line; its logs.tsv in the run's temp folder",
            "    args = parser.parse_args()\n", "    args = parser.parse_args(['--log_dir', __peer__.data_dir])\n"),
        Sub(f, "data: torchvision's CIFAR-10 (downloaded) -> the --data export's images (uint8 NHWC) and "
            "labels, in the export's order", "cifar10(args.data_dir)", "__peer__.page_data()"),
        Sub(f, "epochs: epochs = 10 -> E (--epochs, a whole number of at least 3, where its lr knots "
            "[0, E/5, E - ema_epochs] still rise); ema_epochs = 2 kept",
            "    epochs, ema_epochs = 10, 2\n", "    epochs, ema_epochs = __peer__.epochs_int, 2\n"),
        Sub(f, "clock: the script's Timer -> __peer__.Timer, a core.Timer subclass that also logs each lap "
            "(the same laps, the same synchronisation" + ("" if c.cuda else ", none on the CPU") + ")",
            "    timer = Timer(synch=torch.cuda.synchronize)\n",
            "    timer = __peer__.Timer(synch=torch.cuda.synchronize)\n" if c.cuda
            else "    timer = __peer__.Timer()\n"),
        Sub(f, "instrumentation: marks at the whitening fit, the net's build and the first epoch (inside "
            "the first training lap, which the DAWNBench total also counts), to split the clock into "
            "tricklab's stages",
            "    Λ, V = eigens(patches(train_set['data'][:10000,:,4:-4,4:-4])) #center crop to remove padding\n"
            "    model = Network(",
            "    __peer__.mark('whitening')\n"
            "    Λ, V = eigens(patches(train_set['data'][:10000,:,4:-4,4:-4])) #center crop to remove padding\n"
            "    __peer__.mark('net build')\n"
            "    model = Network("),
        Sub(f, "instrumentation: the mark before the first epoch", "    for epoch in range(epochs):\n",
            "    __peer__.mark('epochs')\n    for epoch in range(epochs):\n"),
        Sub(f, "instrumentation: the timer, the logs and the optimiser state kept before the logs are "
            "written (reads total_time, each epoch's valid acc, step_number)",
            "    with open(os.path.join(",
            "    __peer__.kept = dict(timer=timer, log=logs.log, state=state)\n    with open(os.path.join("),
        Sub(f, "runs: the module-level `main()` call removed; the adapter calls main() once",
            r"^main\(\)[ \t]*$", "", 1, regex=True),
    ]
    if cpu:
        ch += [
            Sub("torch_backend.py", "CPU: torch.cuda.synchronize() in warmup_cudnn only where CUDA is",
                "    torch.cuda.synchronize()\n",
                "    (torch.cuda.synchronize() if torch.cuda.is_available() else None)\n"),
            Sub(f, "CPU fp32: the random warm-up data in float32, not fp16",
                "astype(np.float16), device=device)", "astype(np.float32), device=device)"),
            Sub(f, "CPU fp32: the random warm-up batch on the device in float32, not `.cuda().half()`",
                "torch.Tensor(np.random.rand(batch_size,3,32,32)).cuda().half()",
                "torch.Tensor(np.random.rand(batch_size,3,32,32)).to(device).float()"),
            Sub(f, "CPU: the random warm-up targets on the device, not `.cuda()`",
                "torch.LongTensor(np.random.randint(0,10,batch_size)).cuda()",
                "torch.LongTensor(np.random.randint(0,10,batch_size)).to(device)"),
            Sub(f, "CPU fp32: both nets `.float()`, not `.half()` (which keeps BatchNorm in fp32)",
                ".to(device).half()", ".to(device).float()", 2),
            Sub(f, "CPU fp32: the data set in float32, not fp16", "        to(dtype=torch.float16),\n",
                "        to(dtype=torch.float32),\n"),
            Sub(f, "CPU fp32: the normalisation constants in float32, not fp16",
                "T = lambda x: torch.tensor(x, dtype=torch.float16, device=device)",
                "T = lambda x: torch.tensor(x, dtype=torch.float32, device=device)"),
        ]
    if not c.warmup:
        ch.append(Sub(f, "--no-warmup: the cuDNN warm-up (forward and backward on random batches, before the "
                      "timer) left out",
                      "    for size in [batch_size, len(dataset['valid']['targets']) % batch_size]:\n"
                      "        warmup_cudnn(model, loss, random_batch(size))\n", "\n"))
    ch.append(note("runs: main() once, as `python new_dawn.py` does (its cuDNN warm-up on random batches "
                   "before the timer" + (" kept" if c.warmup else " left out") + "); core.py, torch_backend.py "
                   "and dawn_utils.py imported from changed copies beside it"))
    return ch


def changes_page_simple(c):
    f = "train.py"
    t = c.page_knots
    ch = [
        Sub(f, "data: torchvision CIFAR10(root, download=True) train set -> the --data export's train "
            "images/labels as .data (uint8 NHWC numpy) and .targets (the export's order)",
            "train = torchvision.datasets.CIFAR10(root=data_dir, download=True)",
            "train = __peer__.cifar10(train=True)"),
        Sub(f, "data: torchvision CIFAR10 test set -> the --data export's test images/labels",
            "valid = torchvision.datasets.CIFAR10(root=data_dir, train=False)",
            "valid = __peer__.cifar10(train=False)"),
        Sub(f, "epochs: epochs = 10 -> E (--epochs, a whole number)", "    epochs = 10\n",
            "    epochs = __peer__.epochs_int\n"),
        Sub(f, "lr schedule: warm-up knot 194 (2 of 10 epochs of 97 steps) -> "
            + (f"{t[0]}" if t else "round(0.2*T)") + " = round(194*T/970), at least 1, with T = E*(N//512) steps",
            "torch.linspace(0e+0, 2e-3, 194)", "torch.linspace(0e+0, 2e-3, __peer__.page_knots[0])"),
        Sub(f, "lr schedule: decay knot 582 (6 of 10 epochs of 97 steps) -> "
            + (f"{t[1]}" if t else "round(0.6*T)")
            + " = round(582*T/970), at least 1; the shape kept (linear up, linear down to 2e-4, flat to the end)",
            "torch.linspace(2e-3, 2e-4, 582)", "torch.linspace(2e-3, 2e-4, __peer__.page_knots[1])"),
        result_sub(f, "    return valid_acc\n", "batch_count, train_time, valid_acc"),
    ]
    pad_why = ("layout: `.contiguous()` after `nn.ReflectionPad2d(4)(train_data)`: on this device the pad "
               "keeps the NHWC-permuted (channels-last) strides of the data, the conv outputs follow, and "
               "GhostBatchNorm's `input.view(-1, c*16, h, w)` fails; torch 1.11's pad, which the published "
               "logs used, returned NCHW-contiguous (values unchanged)")
    if c.pad_keeps_strides is None:
        ch.append(note("(only where the device's reflection pad keeps channels-last strides, as torch 2.11's "
                       "CPU kernel does) train.py: " + pad_why))
    elif c.pad_keeps_strides:
        ch.append(Sub(f, pad_why, "    train_data = nn.ReflectionPad2d(4)(train_data)\n",
                      "    train_data = nn.ReflectionPad2d(4)(train_data).contiguous()\n"))
    if not c.cuda:
        ch.append(Sub(f, "CPU: torch.cuda.is_available() -> False (device cpu, fp32 by the script's own "
                      "rule, no cuda synchronize; also on a machine with a GPU)",
                      "torch.cuda.is_available()", "False", 3))
    ch.append(note("runs: train(seed=S) once (main()'s 100 runs and print_info are not run); model.py "
                   "imported unchanged as `model`"))
    if c.warmup:
        ch.append(note("warm-up: train(seed=S) once untimed before the timed train(seed=S) (the published "
                       "main() times 100 runs in one process, of which only the first pays cuDNN's "
                       "autotuning; on by default on cuda for that reason)"))
    return ch


# --------------------------------------------------------------------------
# Runtime object the patched script sees as `__peer__`
# --------------------------------------------------------------------------


class CpuEvent:
    def __init__(self, rt):
        self.rt, self.t = rt, None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        s = end.t - self.t
        self.rt.intervals.append(s)
        return 1e3 * s


class Runtime:
    def __init__(self, cuda, epochs, tmp, data):
        import torch
        self.torch = torch
        self.cuda = cuda
        self.epochs = epochs
        self.epochs_int = int(epochs) if epochs is not None and float(epochs).is_integer() else None
        self.data_dir = tmp
        self.hlb_data_pt = os.path.join(tmp, "data.pt")
        self.data = data
        self.page_knots = None
        self.hlb_eval_batchsize = None
        self.reset()
        if cuda:
            rt = self

            class LoggingCudaEvent(torch.cuda.Event):
                def elapsed_time(self, end_event):
                    ms = super().elapsed_time(end_event)
                    rt.intervals.append(1e-3 * ms)
                    return ms

            self._cuda_event = LoggingCudaEvent

    def reset(self):
        self.intervals = []
        self.laps = []
        self.marks = {}
        self.results = None
        self.kept = None
        self.opt_steps = {}

    def Timer(self, synch=None):
        """Page's core.Timer, each lap also logged as (seconds, counted in the total)."""
        import core  # Page's, imported by new_dawn.py's `from core import *`
        rt = self

        class LapTimer(core.Timer):
            def __call__(self, include_in_total=True):
                dt = super().__call__(include_in_total)
                rt.laps.append((dt, include_in_total))
                return dt

        return LapTimer(synch)

    def Event(self, enable_timing=False, blocking=False, interprocess=False):
        if self.cuda:
            return self._cuda_event(enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
        return CpuEvent(self)

    def synchronize(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def mark(self, name):
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks[name] = e
        else:
            self.marks[name] = time.perf_counter()

    def mark_span(self, a, b):
        if self.cuda:
            self.torch.cuda.synchronize()
            return 1e-3 * self.marks[a].elapsed_time(self.marks[b])
        return self.marks[b] - self.marks[a]

    def result(self, loc):
        keep = (int, float, bool, str, type(None))
        self.results = {k: v for k, v in loc.items() if isinstance(v, keep)}

    # data in the shapes the scripts' own loaders produce
    def torch_dataset(self, train, transform=None):
        return ExportDataset(self.data, "train" if train else "test", transform)

    def page_data(self):
        """torch_backend.cifar10's dict: uint8 NHWC images and int64 labels a split."""
        d = self.data
        return {"train": {"data": d["train_images"], "targets": d["train_labels"]},
                "valid": {"data": d["test_images"], "targets": d["test_labels"]}}

    def cifar10(self, train):
        s = "train" if train else "test"
        return types.SimpleNamespace(data=self.data[s + "_images"], targets=self.data[s + "_labels"].tolist(),
                                     classes=list(self.data["classes"]))


def _dataset_base():
    import torch.utils.data
    return torch.utils.data.Dataset


class ExportDataset(_dataset_base()):
    """torchvision.datasets.CIFAR10's __getitem__ over the exported arrays."""

    def __init__(self, data, split, transform):
        self.data = data[split + "_images"]
        self.targets = data[split + "_labels"].tolist()
        self.classes = list(data["classes"])
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        from PIL import Image
        img = Image.fromarray(self.data[i])
        if self.transform is not None:
            img = self.transform(img)
        return img, self.targets[i]


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------


def read_export(d):
    import numpy as np
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    c, h, w = meta.get("channels"), meta.get("height"), meta.get("width")
    if (c, h, w) != (3, 32, 32):
        raise SystemExit(f"{d}: the published scripts need 32x32 RGB images, the export has {c}x{h}x{w}")
    classes = meta["classes"]
    if len(classes) != 10:
        raise SystemExit(f"{d}: the published scripts need 10 classes, the export has {len(classes)}")
    out = {"meta": meta, "classes": classes}
    for s in ("train", "test"):
        n = int(meta[s])
        img = np.fromfile(os.path.join(d, f"{s}_images.u8"), dtype=np.uint8)
        lab = np.fromfile(os.path.join(d, f"{s}_labels.u8"), dtype=np.uint8)
        if img.size != n * h * w * c or lab.size != n:
            raise SystemExit(f"{d}: {s} files hold {img.size} image bytes and {lab.size} labels; "
                             f"meta.json says {n} images of {h}x{w}x{c}")
        if lab.size and lab.max() >= 10:
            raise SystemExit(f"{d}: {s} label {lab.max()} out of range")
        out[s + "_images"] = img.reshape(n, h, w, c)
        out[s + "_labels"] = lab.astype(np.int64)
    return out


def write_airbench_pt(data, tmp):
    """What CifarLoader would have saved from torchvision: {'images','labels','classes'}."""
    import torch
    for s in ("train", "test"):
        torch.save({"images": torch.from_numpy(data[s + "_images"].copy()),
                    "labels": torch.from_numpy(data[s + "_labels"].copy()),
                    "classes": list(data["classes"])}, os.path.join(tmp, s + ".pt"))


def hlb_eval_batchsize(m):
    if m % 2500 == 0:
        return 2500
    return max(d for d in range(1, min(m, 2500) + 1) if m % d == 0)


# --------------------------------------------------------------------------
# Step counts the scripts' formulas give
# --------------------------------------------------------------------------


def hlb_epoch_steps(n, b, e):
    """Steps per epoch of hlb's loop, its fractional last epoch as its code does it."""
    steps = []
    for epoch in range(math.ceil(e)):
        frac = 1 if epoch + 1 < e else e % 1
        examples = n
        if frac < 1:
            examples = min(n, b * round(frac * n / b))
        steps.append(examples // b)
    return steps


def expected_steps(peer, n, e):
    b = peer.batch_size
    if peer.name == "hlb":
        return sum(hlb_epoch_steps(n, b, e))
    if peer.name in ("page-final", "page-final-simple"):
        return int(e) * (n // b)
    return math.ceil(e * (n // b))


def page_precheck(m):
    """new_dawn.py warms cuDNN up on a training-mode batch of len(valid) % 512 images, which its
    GhostBatchNorm splits into 16."""
    r = m % 512
    if r == 0 or r % 16:
        raise SystemExit(f"page-final: new_dawn.py warms up on a batch of {m} % 512 = {r} test images, which "
                         f"its GhostBatchNorm cannot split into 16; use a test set whose remainder by 512 is a "
                         f"positive multiple of 16 (e.g. 128 a class: 1280) or --no-warmup")


def hlb_precheck(n, m, e):
    b = 1024
    if m % 2500 != 0 and hlb_eval_batchsize(m) < 100:
        raise SystemExit(f"hlb: {m} test images have no divisor between 100 and 2500 to batch the eval by")
    ema_start = math.floor(e) - 10
    cur, ema = 0, False
    for epoch, k in enumerate(hlb_epoch_steps(n, b, e)):
        for _ in range(k):
            cur += 1
            if epoch >= ema_start and cur % 5 == 0:
                ema = True
        if epoch >= ema_start and not ema:
            raise SystemExit(
                f"hlb: with {n} training images and E={e} the run has {cur} step(s) by the end of epoch "
                f"{epoch} and no 5th step in an EMA epoch, so its net_ema is still None at that epoch's "
                f"evaluation and the published main() crashes; use more images or epochs "
                f"(steps per epoch follow its code: {hlb_epoch_steps(n, b, e)})")


# --------------------------------------------------------------------------
# Runners: the __main__ protocol of each script, one run
# --------------------------------------------------------------------------


def seed_all(s):
    import torch
    torch.manual_seed(s)
    random.seed(s)
    try:
        import numpy as np
        np.random.seed(s)
    except ImportError:
        pass


def run_airbench94(mod, rt, a):
    mod.print_columns(mod.logging_columns_list, is_head=True)
    if a.warmup:
        mod.main("warmup")
        rt.reset()
        seed_all(a.seed)
    t0 = time.perf_counter()
    mod.main(0)
    wall = time.perf_counter() - t0
    r = rt.results
    iv = rt.intervals
    want = 2 + math.ceil(a.epochs)
    if len(iv) != want:
        raise SystemExit(f"airbench94: {len(iv)} timed regions, expected {want}")
    return dict(steps=r["current_steps"], clock_s=r["total_time_seconds"], train_s=sum(iv[1:-1]),
                whiten_s=iv[0], tta_s=iv[-1], acc=r["val_acc"], acc_tta=r["tta_val_acc"], wall_s=wall)


def _model(mod, rt, a):
    import torch
    model = mod.CifarNet()
    if rt.cuda:
        model = model.cuda()
    model = model.to(memory_format=torch.channels_last)
    if a.compile_on:
        model.compile(mode="max-autotune")
    return model


def run_muon(mod, rt, a):
    model = _model(mod, rt, a)
    mod.print_columns(mod.logging_columns_list, is_head=True)
    if a.warmup:
        mod.main("warmup", model)
        rt.reset()
        seed_all(a.seed)
    t0 = time.perf_counter()
    mod.main(0, model)
    wall = time.perf_counter() - t0
    r = rt.results
    iv = rt.intervals
    want = 2 + math.ceil(r["total_train_steps"] / (len(rt.data["train_images"]) // 2000))
    if len(iv) != want:
        raise SystemExit(f"airbench94-muon: {len(iv)} timed regions, expected {want}")
    return dict(steps=r["step"], clock_s=r["time_seconds"], train_s=sum(iv[1:-1]), whiten_s=iv[0],
                tta_s=iv[-1], acc=r["val_acc"], acc_tta=r["tta_val_acc"], wall_s=wall)


def run_speedrun(mod, rt, a):
    import torch
    model = _model(mod, rt, a)
    mod.print_columns(mod.logging_columns_list, is_head=True)
    if a.warmup:
        mod.main("warmup", model)
        rt.reset()
        seed_all(a.seed)
    if rt.cuda:
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        torch.cuda._sleep(int(6000000000))
    t0 = time.perf_counter()
    mod.main(1, model)
    wall = time.perf_counter() - t0
    r = rt.results
    train_s = rt.mark_span("train_start", "train_end")
    return dict(steps=r["step"], clock_s=r["time_seconds"], train_s=train_s, acc=r["val_acc"],
                acc_tta=r["tta_val_acc"], wall_s=wall)


def run_hlb(mod, rt, a):
    t0 = time.perf_counter()
    mod.main()
    wall = time.perf_counter() - t0
    r = rt.results
    return dict(steps=int(r["current_steps"]), clock_s=r["total_time_seconds"], train_s=r["total_time_seconds"],
                acc=r["val_acc"], acc_tta=r["ema_val_acc"], wall_s=wall)


def run_page(mod, rt, a):
    """new_dawn.py's main(): DAWNBench's total_time is preprocessing + whitening + net build + the
    training laps; the evaluation laps are left out of it (include_in_total=False)."""
    t0 = time.perf_counter()
    mod.main()
    wall = time.perf_counter() - t0
    k = rt.kept
    laps = rt.laps
    want = 2 + 2 * rt.epochs_int
    if len(laps) != want or [inc for _, inc in laps[2:]] != [True, False] * rt.epochs_int:
        raise SystemExit(f"page-final: {len(laps)} timer laps {[inc for _, inc in laps]}, expected {want}: "
                         "2 preprocessing, then a training and an evaluation lap an epoch")
    whiten_s = rt.mark_span("whitening", "net build")
    build_s = rt.mark_span("net build", "epochs")
    train_laps = sum(dt for dt, inc in laps[2:] if inc)
    return dict(steps=k["state"]["optimisers"][0]["step_number"], clock_s=k["timer"].total_time,
                train_s=train_laps - whiten_s - build_s, prep_s=laps[0][0] + laps[1][0], whiten_s=whiten_s,
                build_s=build_s, acc=None, acc_tta=float(k["log"][-1]["valid"]["acc"]), wall_s=wall)


def run_page_simple(mod, rt, a):
    if a.warmup:
        mod.train(seed=a.seed)
        rt.reset()
    t0 = time.perf_counter()
    mod.train(seed=a.seed)
    wall = time.perf_counter() - t0
    r = rt.results
    return dict(steps=r["batch_count"], clock_s=r["train_time"], train_s=r["train_time"], acc=None,
                acc_tta=r["valid_acc"], wall_s=wall)


PEERS = {p.name: p for p in [
    Peer("airbench94", "KellerJordan/cifar10-airbench", "f1c599c",
         {"legacy/airbench94.py": SHA_AIRBENCH94}, 1024, "airbench", False, False,
         "training epochs (the airbench clock less its whitening and TTA regions)", run_airbench94),
    Peer("airbench94-muon", "KellerJordan/cifar10-airbench", "f1c599c",
         {"airbench94_muon.py": SHA_AIRBENCH94_MUON}, 2000, "airbench", True, True,
         "training epochs (the airbench clock less its whitening and TTA regions)", run_muon),
    Peer("hiverge-speedrun", "hiverge/cifar10-speedrun", "5cd49b1",
         {"cifar10_speedrun.py": SHA_SPEEDRUN}, 1536, "airbench", True, True,
         "training loop (adapter marks inside the script's single whitening+training+TTA region)",
         run_speedrun),
    Peer("hlb", "tysam-code/hlb-CIFAR10", "v0.7.0", {"main.py": SHA_HLB}, 1024, "hlb", False, False,
         "training epochs (the whole hlb clock: it times only training)", run_hlb),
    Peer("page-final", "davidcpage/cifar10-fast", "f79e8b8",
         {"new_dawn.py": SHA_NEW_DAWN, "core.py": SHA_PAGE_CORE, "torch_backend.py": SHA_PAGE_TORCH_BACKEND,
          "dawn_utils.py": SHA_PAGE_DAWN_UTILS}, 512, "dawn", False, True,
         "training epochs (DAWNBench's total_time less its preprocessing laps and the marked whitening "
         "and net build)", run_page),
    Peer("page-final-simple", "99991/cifar10-fast-simple", "da1f6a9",
         {"train.py": SHA_FAST_SIMPLE_TRAIN, "model.py": SHA_FAST_SIMPLE_MODEL}, 512, "page-simple", False,
         False, "training epochs (the whole train_time clock: it times only training)", run_page_simple),
]}

CHANGES = {
    "airbench94": changes_airbench94,
    "airbench94-muon": changes_muon,
    "hiverge-speedrun": changes_speedrun,
    "hlb": changes_hlb,
    "page-final": changes_page,
    "page-final-simple": changes_page_simple,
}


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# Peers whose published protocol times many runs in one process with no warm-up run of their own.
WARM_BY_PROTOCOL = ("airbench94", "page-final-simple")


def device_kind(text):
    """cpu or cuda: tricklab's `{device}` names the card (cuda:N), which
    CUDA_VISIBLE_DEVICES has already made the run's only one."""
    if text == "cpu":
        return "cpu"
    if text == "cuda" or re.fullmatch(r"cuda:\d+", text):
        return "cuda"
    raise argparse.ArgumentTypeError(f"{text!r}: use cpu, cuda or cuda:N")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=sorted(PEERS))
    p.add_argument("--repo", help="root of the fetched repository")
    p.add_argument("--data", help="folder written by `tricklab data export` (meta.json, *_images.u8, *_labels.u8)")
    p.add_argument("--seed", type=int, help="torch.manual_seed (and random/numpy) before the run")
    p.add_argument("--epochs", type=float, help="replaces the script's epoch count")
    p.add_argument("--device", type=device_kind, default="cpu",
                   help="cpu, or cuda (cuda:N as tricklab's {device} gives it: the run sees its card as cuda:0)")
    p.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                   help="auto: as published on cuda, off on cpu; on: keep torch.compile (inductor, CPU "
                        "backend on cpu); off: decorators and model.compile removed")
    p.add_argument("--compile-form", choices=sorted(COMPILE_FORMS), default="published",
                   help="with compile on, what torch.compile does at the script's mode=\"max-autotune\" sites "
                        "(the model; hiverge's forward_step): published (as written), graphs "
                        "(backend=\"cudagraphs\": CUDA graphs of the eager kernels, no fusion), fusion "
                        "(mode=\"max-autotune-no-cudagraphs\": Inductor's fused kernels, no graphs), both "
                        "(mode=\"max-autotune\", as published); its other sites keep their default mode")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None,
                   help="the untimed warm-up run on random data the script's protocol does first "
                        "(default: on for cuda, off for cpu)")
    p.add_argument("--list-changes", action="store_true", help="print the change list and exit")
    a = p.parse_args(argv)
    peer = PEERS[a.name]
    a.cuda = a.device == "cuda"
    a.compile_on = peer.compile_sites and (a.compile == "on" or (a.compile == "auto" and a.cuda))
    if a.warmup is None:
        # Each run here is its own process, but airbench94 and page-final-simple publish the mean of many runs
        # in one process (25 and 100), of which only the first pays cuDNN's autotuning and CUDA's lazy
        # module loading: on cuda one untimed run first stands for those, as tricklab warms its trainer.
        a.warmup = a.cuda and (peer.published_warmup or peer.name in WARM_BY_PROTOCOL)
    if not a.list_changes:
        missing = [k for k in ("repo", "data", "seed", "epochs") if getattr(a, k) is None]
        if missing:
            p.error("the following arguments are required to run: " + ", ".join("--" + m for m in missing))
        if a.epochs <= 0:
            p.error("--epochs must be positive")
    return a, peer


# torch.compile's gain split into its two parts (issue 48): each form replaces
# the keyword arguments of the torch.compile calls that the script makes with
# mode="max-autotune", the ones that replay CUDA graphs as published: the
# model's `model.compile(mode="max-autotune")` (nn.Module.compile calls
# torch.compile) and hiverge's `forward_step`. Its other sites (Newton-Schulz,
# the loader's helpers) keep their published default mode, fused without
# graphs, in every compiled form: cudagraph trees of several functions in one
# step overwrite each other's outputs (airbench94_muon's gradients were, on an
# H200, when its Newton-Schulz was graphed too).
COMPILE_FORMS = {
    "published": None,
    "graphs": {"backend": "cudagraphs"},
    "fusion": {"mode": "max-autotune-no-cudagraphs"},
    "both": {"mode": "max-autotune"},
}


def compile_form_note(form):
    kw = COMPILE_FORMS[form]
    return note(f"--compile-form {form}: torch.compile wrapped so that every call of the script with "
                f"mode=\"max-autotune\" (model.compile; hiverge's forward_step) runs with "
                f"{', '.join(f'{k}={v!r}' for k, v in kw.items())} instead; its other torch.compile sites "
                "keep their published default mode")


def wrap_compile(torch, form):
    """torch.compile with the form's backend/mode at every call site."""
    kw_form = COMPILE_FORMS[form]
    if kw_form is None:
        return None
    orig = torch.compile

    def compile_as_form(model=None, **kw):
        if kw.get("mode") == "max-autotune":
            kw.pop("mode")
            kw.pop("backend", None)
            kw.update(kw_form)
        return orig(model, **kw) if model is not None else orig(**kw)

    torch.compile = compile_as_form
    return orig


class Ctx:
    def __init__(self, a, peer, meta):
        self.cuda = a.cuda
        self.compile = a.compile_on
        self.warmup = a.warmup
        self.test_images = int(meta["test"]) if meta else None
        self.train_images = int(meta["train"]) if meta else None
        self.page_knots = None
        self.pad_keeps_strides = None
        if peer.name == "page-final-simple":
            if meta and a.epochs is not None:
                self.page_knots = page_knots(int(meta["train"]), a.epochs)
            self.pad_keeps_strides = pad_keeps_strides(a.cuda)


def pad_keeps_strides(cuda):
    """Does this device's ReflectionPad2d keep the channels-last strides of a permuted NHWC tensor?"""
    import torch
    if cuda and not torch.cuda.is_available():
        return None
    x = torch.zeros(2, 8, 8, 3, device="cuda" if cuda else "cpu").permute(0, 3, 1, 2)
    return not torch.nn.ReflectionPad2d(4)(x).is_contiguous()


def page_knots(n, e):
    total = int(e) * (n // 512)
    return (max(1, round(194 * total / 970)), max(1, round(582 * total / 970)))


def main(argv=None):
    a, peer = parse_args(sys.argv[1:] if argv is None else argv)
    meta = None
    if a.data:
        with open(os.path.join(a.data, "meta.json")) as f:
            meta = json.load(f)
    ctx = Ctx(a, peer, meta)
    changes = CHANGES[peer.name](ctx)
    extra = []
    if a.compile == "on" and not peer.compile_sites:
        extra.append(note("--compile on: the published script does not use torch.compile; nothing compiled"))
    if a.warmup and not peer.published_warmup and peer.name not in WARM_BY_PROTOCOL:
        extra.append(note("--warmup: the published script has no warm-up run; none done"))
        a.warmup = False
    if a.compile == "auto" and peer.compile_sites and not a.cuda:
        # The compile trick of a script matrix: its modes are GPU modes
        # (CUDA graphs, Triton kernels), so a CPU run is eager, and says so.
        extra.append(note("--compile auto on the CPU: eager (the published torch.compile modes are GPU modes)"
                          + (f"; --compile-form {a.compile_form} not applied" if a.compile_form != "published"
                             else "")))
        print(f"tricklab.peers: {peer.name}: compile auto runs eagerly on the CPU", file=sys.stderr)
    elif a.compile_form != "published":
        if not a.compile_on:
            raise SystemExit(f"--compile-form {a.compile_form}: compile is off here (--compile on, or auto on cuda)")
        extra.append(compile_form_note(a.compile_form))
    if a.compile_on and not a.cuda:
        extra.append(note("torch.compile kept on the CPU: inductor's CPU backend (C++/OpenMP codegen), "
                          "modes as published"))
    extra.append(note("seed: torch.manual_seed(S), random.seed(S), numpy.random.seed(S) before the script "
                      "is executed" + (", and again before the timed run after the warm-up"
                                       if a.warmup and peer.name != "page-final" else "")))
    if peer.name not in ("page-final", "page-final-simple"):
        extra.append(note("instrumentation: a global optimizer step post-hook counts optimiser steps "
                          "to cross-check the script's own step counter (one dict increment a step)"))
    extra.append(note("the script's stdout is sent to stderr; stdout carries one JSON line"))
    if events.enabled():
        extra.append(note("events: the planned steps, each epoch's readings the script prints "
                          "(print_training_details) and the result on the script's clock go to tricklab"))
    descs = [c.describe() if isinstance(c, Sub) else c for c in changes] + extra

    if a.list_changes:
        if a.repo:
            # check that every substitution still applies to this copy
            texts = {}
            for path in peer.files:
                with open(os.path.join(a.repo, path)) as f:
                    texts[path] = f.read()
            for c in changes:
                if isinstance(c, Sub):
                    texts[c.file] = c.apply(texts[c.file])
            for path, text in texts.items():
                compile(text, path, "exec")  # the patched source still parses
        print(f"{peer.name}: {peer.repo}@{peer.commit} {', '.join(peer.files)}; device {a.device}, "
              f"compile {'on' if a.compile_on else 'off'}, warm-up {'on' if a.warmup else 'off'}"
              + (" (all substitutions checked against --repo)" if a.repo else ""))
        for d in descs:
            print("- " + d)
        return 0

    # Everything from here prints to stderr; the JSON goes to the saved stdout.
    sys.stdout.flush()
    json_fd = os.dup(1)
    os.dup2(2, 1)
    t_start = time.perf_counter()

    import torch
    if a.cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if peer.name == "page-final-simple" and not float(a.epochs).is_integer():
        raise SystemExit("page-final-simple: train.py counts whole epochs (range(1, epochs + 1)); pass an integer "
                         "--epochs")
    if peer.name == "page-final" and not (float(a.epochs).is_integer() and a.epochs >= PAGE_MIN_EPOCHS):
        raise SystemExit(f"page-final: new_dawn.py counts whole epochs and its lr knots [0, E/5, E - 2] run "
                         f"backwards below {PAGE_MIN_EPOCHS}; pass --epochs {PAGE_MIN_EPOCHS} or more, not {a.epochs}")

    files = {}
    texts = {}
    for path in peer.files:
        full = os.path.join(a.repo, path)
        if not os.path.isfile(full):
            raise SystemExit(f"{full}: missing; --repo must be the root of {peer.repo}")
        files[path] = sha256(full)
        with open(full) as f:
            texts[path] = f.read()
    known = all(files[p] == peer.files[p] for p in peer.files)
    if not known:
        print(f"tricklab.peers: {peer.script} differs from {peer.repo}@{peer.commit} (a matrix "
              f"trick's patch, or another copy); the substitutions are checked anyway", file=sys.stderr)

    data = read_export(a.data)
    n, m = len(data["train_images"]), len(data["test_images"])
    if n < peer.batch_size:
        raise SystemExit(f"{peer.name}: {n} training images, fewer than one batch of {peer.batch_size}")
    if peer.name == "hlb":
        hlb_precheck(n, m, a.epochs)
    if peer.name == "page-final" and a.warmup:
        page_precheck(m)

    tmp = tempfile.mkdtemp(prefix=f"peer-{peer.name}-")
    src_dir = os.path.join(tmp, "src")
    old_argv = sys.argv
    try:
        rt = Runtime(a.cuda, a.epochs, tmp, data)
        rt.page_knots = ctx.page_knots
        rt.hlb_eval_batchsize = hlb_eval_batchsize(m)
        if peer.name in ("airbench94", "airbench94-muon", "hiverge-speedrun"):
            write_airbench_pt(data, tmp)

        for c in changes:
            if isinstance(c, Sub):
                texts[c.file] = c.apply(texts[c.file])
        script_text = texts[peer.script]

        # optimiser steps, counted for a cross-check with the script's own counter
        def count_step(opt, args, kwargs):
            rt.opt_steps[id(opt)] = rt.opt_steps.get(id(opt), 0) + 1
        from torch.optim.optimizer import register_optimizer_step_post_hook
        hook = register_optimizer_step_post_hook(count_step)

        restore_compile = wrap_compile(torch, a.compile_form)
        seed_all(a.seed)
        os.makedirs(src_dir)
        # The script's own modules (Page's core.py, torch_backend.py, dawn_utils.py; the simple
        # script's model.py), each as changed, importable from the folder the script runs in.
        for path, text in texts.items():
            with open(os.path.join(src_dir, os.path.basename(path)), "w") as f:
                f.write(text)
        sys.path.insert(0, src_dir)
        patched = os.path.join(src_dir, os.path.basename(peer.script))
        modname = "peer_" + peer.name.replace("-", "_")
        mod = types.ModuleType(modname)
        mod.__file__ = patched
        mod.__dict__["__peer__"] = rt
        sys.modules[modname] = mod
        sys.argv = [patched]
        events.start(expected_steps(peer, n, a.epochs), a.epochs)
        exec(compile(script_text, patched, "exec"), mod.__dict__)
        events.watch_epochs(mod, peer.name)
        res = peer.runner(mod, rt, a)
        hook.remove()
        if restore_compile is not None:
            torch.compile = restore_compile
    finally:
        sys.argv = old_argv
        if src_dir in sys.path:
            sys.path.remove(src_dir)
        shutil.rmtree(tmp, ignore_errors=True)

    steps = int(res["steps"])
    opt_steps = max(rt.opt_steps.values()) if rt.opt_steps else None
    if opt_steps is not None and opt_steps != steps:
        print(f"tricklab.peers: WARNING: the script counted {steps} steps, its optimisers {opt_steps}", file=sys.stderr)
    want = expected_steps(peer, n, a.epochs)
    if steps != want:
        print(f"tricklab.peers: WARNING: {peer.name} ran {steps} steps; its formula gives {want}", file=sys.stderr)
    plain = math.ceil(a.epochs * (n // peer.batch_size))
    dev = "cpu" if not a.cuda else f"cuda:0 {torch.cuda.get_device_name(0)}"
    out = {
        "peer": peer.name,
        "script": peer.script,
        "sha256": files[peer.script],
        "known_commit": known,
        "files": files,
        "upstream": f"{peer.repo}@{peer.commit}",
        "device": dev,
        "precision": "fp16" if a.cuda else "fp32",
        "compiled": bool(a.compile_on),
        "compile_form": a.compile_form if a.compile_on else None,
        "warmup": bool(a.warmup),
        "seed": a.seed,
        "epochs": a.epochs,
        "train_images": n,
        "test_images": m,
        "batch_size": peer.batch_size,
        "steps": steps,
        "optimizer_steps": opt_steps,
        "steps_expected": want,
        "steps_formula": plain,
        "steps_note": None if steps == plain else (
            "hlb: full epochs of N//B steps, then a last epoch of round(frac(E)*N/B) batches "
            "(none when E is whole)" if peer.name == "hlb" else f"{peer.name}: E*(N//512)"),
        "clock": peer.clock,
        "clock_s": res["clock_s"],
        "train_s": res["train_s"],
        "time_per_step_s": res["train_s"] / max(1, steps),
        "time_per_step_part": peer.per_step_part,
        "wall_s": res["wall_s"],
        "total_wall_s": time.perf_counter() - t_start,
        "acc": res["acc"],
        "acc_tta": res["acc_tta"],
        "changes": descs,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    for k in ("whiten_s", "tta_s", "prep_s", "build_s"):
        if k in res:
            out[k] = res[k]
    events.final(res["acc_tta"], res["clock_s"])
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(json_fd, (json.dumps(out) + "\n").encode())
    return 0


class _Events:
    """The run's readings for tricklab (its protocol, through the module
    this file belongs to), where TRICKLAB_EVENTS asks for them. Only what
    the script has already read on the host is sent: no step waits for it."""

    def enabled(self):
        return bool(os.environ.get("TRICKLAB_EVENTS"))

    def start(self, steps, epochs):
        if self.enabled():
            from tricklab import start
            start(steps=steps, epochs=epochs)

    # The scripts whose `print_training_details(variables, is_final_entry)`
    # takes the epoch's locals (hlb's, of the same name, takes formatted
    # columns and is left alone).
    EPOCH_ROWS = ("airbench94", "airbench94-muon", "hiverge-speedrun")

    def watch_epochs(self, mod, name):
        """airbench's scripts print each epoch's row from their locals
        (`print_training_details(locals(), ...)`): the same values go to
        tricklab as a step line and an epoch line."""
        shown = getattr(mod, "print_training_details", None)
        if not self.enabled() or shown is None or name not in self.EPOCH_ROWS:
            return
        import tricklab

        def print_and_report(variables, is_final_entry):
            shown(variables, is_final_entry)
            epoch = variables.get("epoch")
            if not isinstance(epoch, int) or isinstance(epoch, bool):
                return  # the final row ('eval'): its result comes with the run's
            step = variables.get("current_steps", variables.get("step"))
            loss, acc = variables.get("train_loss"), variables.get("val_acc")
            lr = next((o.param_groups[0]["lr"] for o in variables.values()
                       if hasattr(o, "param_groups") and o.param_groups), None)
            if isinstance(step, int) and loss is not None and lr is not None:
                tricklab.log(step=step, loss=loss, lr=lr)
            if acc is not None:
                seconds = variables.get("total_time_seconds", variables.get("time_seconds"))
                tricklab.epoch(epoch=epoch + 1, acc=acc, seconds=seconds)

        mod.print_training_details = print_and_report

    def final(self, acc, seconds):
        if self.enabled():
            from tricklab import final
            final(acc=acc, seconds=seconds)


events = _Events()


def entry():
    """The command line: 0 with the JSON line, 3 when the script changed."""
    try:
        return main()
    except PeerChanged as e:
        print(f"tricklab.peers: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(entry())
