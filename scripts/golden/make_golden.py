#!/usr/bin/env python3
"""Golden values for tricklab's maths, computed by the published reference code.

    python3 scripts/golden/make_golden.py --airbench DIR --speedrun DIR --hlb DIR --page DIR \
        [--out tests/golden]
    python3 scripts/golden/make_golden.py --airbench DIR --speedrun DIR --hlb DIR --page DIR --check

(run it with the project's venv, e.g. `.venv/bin/python`: it needs torch and numpy, on CPU.)

Each DIR is the root of a fetched, unmodified copy of a reference repository, kept OUTSIDE
this repository. Never point this script at code copied into tricklab: it refuses any
directory inside the repository, and the reference code must not be vendored here.
Expected versions (no .git in the copies, so the sha256 of every file read is printed by
--check and recorded in each JSON's notes; a mismatch with the pinned hashes below is
reported, not fatal):

    --airbench  KellerJordan/cifar10-airbench  f1c599c   legacy/airbench94.py, airbench94_muon.py
    --speedrun  hiverge/cifar10-speedrun       5cd49b1   cifar10_speedrun.py
    --hlb       tysam-code/hlb-CIFAR10         ad103b4   main.py  (v0.7.0)
    --page      davidcpage/cifar10-fast        f79e8b8   new_dawn.py, torch_backend.py, core.py
    --ffcv      libffcv/ffcv-imagenet          4dd291a   train_imagenet.py, the 12 rn18/rn50 configs
    --fastai    cybertronai/imagenet18         25dad42   train.py, training/train_imagenet_nv.py
    --fujitsu   mlcommons/training_results_v0.6 f312518  Fujitsu's ResNet-50: JobScripts/parameters,
                common/fit.py, python/mxnet/lr_scheduler.py, python/mxnet/explorer/explorer.py
                (the three optional: without them ffcv.json, fastai.json and fujitsu.json are
                left as they are; `--only fujitsu` or `--only ffcv` makes that one alone)

The scripts are never imported (they load data / train at import time). Each one is parsed
with `ast`; the named top-level functions, classes and assignments (and statements of its
`main`) are compiled and executed in a namespace prepared here. `@torch.compile` decorators
are stripped; any API that modern torch lacks is substituted minimally. Every such change
is listed in the `notes` of the JSON it affects. Everything runs on CPU in float32 (bf16
where the reference computes in bf16) from deterministic splitmix64 inputs, whose seeds and
shapes (not values) are stored in the JSON.

Output: one file per recipe in --out: page-final.json, airbench94.json, airbench94-muon.json,
hiverge-speedrun.json, hlb.json, and with --ffcv ffcv.json (its lr per step and resolution
per epoch for three configs). See scripts/golden/SOURCES.md for what each value is.
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import math
import sys
import types
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATOR = "scripts/golden/make_golden.py"
N_TRAIN = 50000

FUJITSU = "Fujitsu/benchmarks/resnet/implementations/mxnet/"

REFS = {
    "airbench": dict(repo="KellerJordan/cifar10-airbench", commit="f1c599c",
                     files=["legacy/airbench94.py", "airbench94_muon.py"]),
    "speedrun": dict(repo="hiverge/cifar10-speedrun", commit="5cd49b1",
                     files=["cifar10_speedrun.py"]),
    "hlb": dict(repo="tysam-code/hlb-CIFAR10", commit="ad103b4", files=["main.py"]),
    "page": dict(repo="davidcpage/cifar10-fast", commit="f79e8b8",
                 files=["new_dawn.py", "torch_backend.py", "core.py", "dawn_utils.py"]),
    "fastai": dict(repo="cybertronai/imagenet18", commit="25dad42",
                   files=["train.py", "training/train_imagenet_nv.py"]),
    "fujitsu": dict(repo="mlcommons/training_results_v0.6", commit="f312518",
                    files=[FUJITSU + "JobScripts/parameters",
                           FUJITSU + "JobScripts/image_classification/common/fit.py",
                           FUJITSU + "python/mxnet/lr_scheduler.py",
                           FUJITSU + "python/mxnet/explorer/explorer.py"]),
    "ffcv": dict(repo="libffcv/ffcv-imagenet", commit="4dd291a",
                 files=["train_imagenet.py"] + [f"{a}_configs/{a}_{e}_epochs.yaml"
                                                for a in ("rn18", "rn50")
                                                for e in (16, 24, 32, 40, 56, 88)]),
}

# sha256 of the copies these goldens were first generated from.
PINNED_SHA256 = {
    "legacy/airbench94.py": "0b155e0ff0e696bc01ae136654ddae88a24cd053cd2b4313d44548c29ed6c91d",
    "airbench94_muon.py": "704e29251a5207d8aed8a35adf13f772ff386b90a712aaddc2a28854385b536e",
    "cifar10_speedrun.py": "d1e1f6991cc3e1758c0bbc0e728c86a4b3119dd42a9233075b2edb9735d0ba91",
    "main.py": "3e2d0c1512bcef3eebff979644a49038cd677e88efbafd67260f0642b2dff546",
    "new_dawn.py": "5a60b8de548468eafe5fedc21beb13625dc43ad1e06eb0befb7ae20c29ab237f",
    "torch_backend.py": "3ed1634428ac71606a131a83597bb9d7162f95609a4982a48334666769167761",
    "core.py": "5492c88ebbcdf392518bfbc62c697f6a457ad1b48ea0cb63df8c71bd635434b8",
    "dawn_utils.py": "063662df908cd690ea80821b8a64753d3830c3b39e4c6b5b45f39216ce8e11dc",
    "train_imagenet.py": "8e436942419277fbf82d04fab311b4e8f4883924b6273adf66263fee245f2576",
    "rn18_configs/rn18_16_epochs.yaml": "5000ce5dec983b1c13012eaead7defb744d571c41cf7505dac8433bba5f65a28",
    "rn18_configs/rn18_88_epochs.yaml": "548e830d94b537048def28c8fffdf7a2813a013e07877b3c7816c72df256dc6f",
    "rn50_configs/rn50_16_epochs.yaml": "d58645b77d098d876dc70a31b9cdcaab0d5e3e8ad20467b67e25b836229aec3f",
    "rn18_configs/rn18_24_epochs.yaml": "cf6f4b2e708f90d848e47e259e15a6e71ee9f38469ae43d6e46c89385a801d9f",
    "rn18_configs/rn18_32_epochs.yaml": "8ab365582e3a05c39be7698cb7a23eb1f0774da7d66c666df732fdec317970ed",
    "rn18_configs/rn18_40_epochs.yaml": "cbea52e4583f2983cf10e647eed12dd08d79b3118e4e0938a0446a8b1a6f6d7c",
    "rn18_configs/rn18_56_epochs.yaml": "17883b3320dba0936b4566b5c4cccf8876f041bcc6816decef2c5f9a0e83e721",
    "rn50_configs/rn50_24_epochs.yaml": "97fdfdb2ba6e2014cb6779b846baa61e3bddab59874df93c390425c9fe9bde47",
    "rn50_configs/rn50_32_epochs.yaml": "8bff976b84e8b342d0a56b26e4e7eb4a856eec9d82a10763dde02130df7e4d99",
    "rn50_configs/rn50_40_epochs.yaml": "11046da8e7c5559e09ae76b12d53efd304081ab75b1ed279d89f43c432a7358f",
    "rn50_configs/rn50_56_epochs.yaml": "f09f315708e4a71ad1d5e23086ef5a0c93f0053a9189b4ddae0e446182646de4",
    "rn50_configs/rn50_88_epochs.yaml": "cc2b10b787d627339c147fe3d1684352fdb1fd381683d846a1c152497f2f4869",
    FUJITSU + "JobScripts/parameters": "90be7cf70b308c4a36f6c0a64d7688b6962608f6906fe70fe766359120ef967b",
    FUJITSU + "JobScripts/image_classification/common/fit.py": "7fb93f0936272c832f25972e6e05ec5db579a4a14bf484b43cdc19405de7c636",
    FUJITSU + "python/mxnet/lr_scheduler.py": "0f6fd7ddb8c6a5161336fa0fa6109f136353203c605aa73cf6ba32b6dee26430",
    FUJITSU + "python/mxnet/explorer/explorer.py": "02fbb8b1f4980b6b434a25cc405b09ead509bed8314f1cbe5fba8e42be6ff53c",
}

# ImageNet's training images (ILSVRC-2012), for FFCV's steps per epoch.
IMAGENET_TRAIN = 1281167


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------
# Deterministic inputs (splitmix64), reproduced bit for bit by the Rust tests
# --------------------------------------------------------------------------

MASK = (1 << 64) - 1


def uniforms(seed, n):
    s = seed & MASK
    out = []
    for _ in range(n):
        s = (s + 0x9E3779B97F4A7C15) & MASK
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        out.append((z >> 11) * 2.0 ** -53)
    return out


def spec(seed, shape, lo=-1.0, hi=1.0):
    return {"seed": int(seed), "shape": [int(d) for d in shape], "lo": float(lo), "hi": float(hi)}


_GOLDEN_CACHE = {}


def golden(sp):
    """The float32 tensor an input spec stands for (row-major)."""
    import torch
    key = (sp["seed"], tuple(sp["shape"]), sp["lo"], sp["hi"])
    if key not in _GOLDEN_CACHE:
        n = math.prod(sp["shape"])
        lo, hi = sp["lo"], sp["hi"]
        vals = [lo + (hi - lo) * u for u in uniforms(sp["seed"], n)]
        _GOLDEN_CACHE[key] = torch.tensor(vals, dtype=torch.float64).view(sp["shape"]).float()
    return _GOLDEN_CACHE[key].clone()


def out_tensor(t):
    import torch
    t = t.detach().to(torch.float32).contiguous()
    vals = t.view(-1).tolist()
    assert all(math.isfinite(v) for v in vals), "non-finite golden value"
    return {"shape": list(t.shape), "values": vals}


# --------------------------------------------------------------------------
# Loading reference code by AST
# --------------------------------------------------------------------------


def _is_torch_compile(dec):
    f = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(f, ast.Attribute) and f.attr == "compile"
            and isinstance(f.value, ast.Name) and f.value.id == "torch")


def _legacy_add_supported():
    import torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.ones(1).add_(1.0, torch.ones(1))
        return True
    except Exception:
        return False


class _Rewriter(ast.NodeTransformer):
    """Strips @torch.compile and substitutes APIs modern torch lacks; logs each change."""

    def __init__(self, rel, notes, rewrite_legacy_add):
        self.rel, self.notes, self.rewrite_legacy_add = rel, notes, rewrite_legacy_add

    def _note(self, msg):
        if msg not in self.notes:
            self.notes.append(msg)

    def visit_FunctionDef(self, node):
        keep = []
        for d in node.decorator_list:
            if _is_torch_compile(d):
                self._note(f"{self.rel}:{node.lineno} `{node.name}`: stripped decorator "
                           f"@{ast.unparse(d)} (runs eagerly on CPU)")
            else:
                keep.append(d)
        node.decorator_list = keep
        self.generic_visit(node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "symeig"
                and isinstance(f.value, ast.Name) and f.value.id == "torch"):
            kws = {k.arg: k.value for k in node.keywords}
            upper = kws.get("upper")
            uplo = "L" if (isinstance(upper, ast.Constant) and upper.value is False) else "U"
            new = ast.Call(
                func=ast.Attribute(value=ast.Attribute(value=ast.Name("torch", ast.Load()),
                                                       attr="linalg", ctx=ast.Load()),
                                   attr="eigh", ctx=ast.Load()),
                args=node.args[:1], keywords=[ast.keyword("UPLO", ast.Constant(uplo))])
            self._note(f"{self.rel}:{node.lineno}: `{ast.unparse(node)}` -> `{ast.unparse(new)}` "
                       "(torch.symeig was removed from torch; eigh returns the same ascending "
                       "eigenvalues and eigenvector columns, reading the upper triangle as "
                       "symeig's default upper=True did)")
            return ast.copy_location(new, node)
        if (self.rewrite_legacy_add and isinstance(f, ast.Attribute) and f.attr == "add_"
                and len(node.args) == 2 and not node.keywords):
            new = ast.Call(func=f, args=[node.args[1]],
                           keywords=[ast.keyword("alpha", node.args[0])])
            self._note(f"{self.rel}:{node.lineno}: `{ast.unparse(node)}` -> `{ast.unparse(new)}` "
                       "(the deprecated add_(Number, Tensor) overload is gone in this torch)")
            return ast.copy_location(new, node)
        return node


class Ref:
    """One reference file, parsed, never imported."""

    def __init__(self, root: Path, rel: str, notes: list):
        self.rel = rel
        self.path = Path(root) / rel
        self.src = self.path.read_text()
        self.tree = ast.parse(self.src, filename=str(self.path))
        self.notes = notes
        self.rewrite_legacy_add = not _legacy_add_supported()

    # -- finding nodes
    def top(self, name):
        for n in self.tree.body:
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name:
                return n
            if isinstance(n, ast.Assign) and name in assigned_names(n):
                return n
        raise KeyError(f"{self.rel}: no top-level `{name}` (did the reference change?)")

    def method(self, cls, name):
        for n in self.top(cls).body:
            if isinstance(n, ast.FunctionDef) and n.name == name:
                return n
        raise KeyError(f"{self.rel}: no method {cls}.{name}")

    def nested(self, outer, name):
        for n in ast.walk(outer):
            if n is not outer and isinstance(n, ast.FunctionDef) and n.name == name:
                return n
        raise KeyError(f"{self.rel}: no def `{name}` inside `{outer.name}`")

    def registrations(self, dispatcher, typ):
        """Top-level `@dispatcher.register(typ) def _(...)` definitions."""
        want = f"{dispatcher}.register({typ})"
        found = [n for n in self.tree.body if isinstance(n, ast.FunctionDef)
                 and any(ast.unparse(d) == want for d in n.decorator_list)]
        if not found:
            raise KeyError(f"{self.rel}: no @{want}")
        return found

    # -- running nodes
    def _compile(self, mod):
        mod = _Rewriter(self.rel, self.notes, self.rewrite_legacy_add).visit(mod)
        ast.fix_missing_locations(mod)
        return mod

    def run(self, nodes, ns):
        mod = ast.Module(body=[copy.deepcopy(n) for n in nodes], type_ignores=[])
        exec(compile(self._compile(mod), str(self.path), "exec"), ns)

    def define(self, names, ns):
        self.run([self.top(n) for n in names], ns)

    def eval(self, expr, ns):
        mod = ast.Expression(body=copy.deepcopy(expr))
        return eval(compile(self._compile(mod), str(self.path), "eval"), ns)


def assigned_names(stmt):
    out = []
    if isinstance(stmt, ast.Assign):
        for t in stmt.targets:
            if isinstance(t, ast.Name):
                out.append(t.id)
            elif isinstance(t, ast.Tuple):
                out += [e.id for e in t.elts if isinstance(e, ast.Name)]
    elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        out.append(stmt.target.id)
    return out


def select(body, names=(), defs=(), extra=lambda s: False):
    """Statements of `body`, in source order, that assign one of `names`, define one of
    `defs`, or satisfy `extra`. Every name asked for must be found."""
    names, defs = set(names), set(defs)
    chosen, seen = [], set()
    for s in body:
        hit = set(assigned_names(s)) & names
        if isinstance(s, ast.Assign) and hit:
            chosen.append(s)
            seen |= hit
        elif isinstance(s, ast.FunctionDef) and s.name in defs:
            chosen.append(s)
            seen.add(s.name)
        elif extra(s):
            chosen.append(s)
    missing = (names | defs) - seen
    if missing:
        raise KeyError(f"statements not found: {sorted(missing)} (did the reference change?)")
    return chosen


def sets_key(stmt, key):
    """Does `stmt` contain an assignment `x[key] = ...`?"""
    for n in ast.walk(stmt):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)
                        and t.slice.value == key):
                    return True
    return False


def is_lr_logic(stmt):
    if sets_key(stmt, "lr"):
        return True
    return any(nm.startswith("lr_factor") for nm in assigned_names(stmt))


def epoch_loop(main):
    for s in ast.walk(main):
        if isinstance(s, ast.For) and isinstance(s.target, ast.Name) and s.target.id == "epoch":
            return s
    raise KeyError("no `for epoch in ...` loop in main")


def batch_loop(epoch_for):
    for s in ast.walk(epoch_for):
        if s is not epoch_for and isinstance(s, ast.For):
            return s
    raise KeyError("no batch loop inside the epoch loop")


def find_call(tree, pred):
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and pred(n):
            return n
    raise KeyError("call not found")


def kwarg(call, name):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    raise KeyError(name)


def after_counter(body, counter):
    """The statements of a batch-loop body after `counter += 1`."""
    for i, s in enumerate(body):
        if isinstance(s, ast.AugAssign) and assigned_names(s) == [counter]:
            return body[i + 1:]
    raise KeyError(f"no `{counter} += 1`")


def averaging_events(ref, stmts, ns, t, events):
    """Walks the averaging logic that follows the step counter in a batch loop: evaluates
    the reference's own conditions and decay expressions, records (t, 'snapshot') when a
    `X = NetworkEMA(..)`/`LookaheadState(..)` is created and (t, decay) on `.update(...)`."""
    for st in stmts:
        if isinstance(st, ast.If):
            r = averaging_events(ref, st.body if ref.eval(st.test, ns) else st.orelse,
                                 ns, t, events)
            if r:
                return r
        elif isinstance(st, ast.Assign) and isinstance(st.value, ast.Call):
            ns[assigned_names(st)[0]] = "snapshot"
            events.append([t, "snapshot"])
        elif (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)
              and isinstance(st.value.func, ast.Attribute) and st.value.func.attr == "update"):
            events.append([t, float(ref.eval(kwarg(st.value, "decay"), ns))])
        elif isinstance(st, ast.Continue):
            return "continue"
        elif isinstance(st, ast.Break):
            return "break"
        else:
            raise NotImplementedError(ast.unparse(st))
    return None


# --------------------------------------------------------------------------
# Small helpers shared by the recipes
# --------------------------------------------------------------------------


def base_ns():
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn
    return {"__name__": "golden_reference", "__builtins__": __builtins__, "torch": torch,
            "nn": nn, "F": F, "math": math, "ceil": math.ceil, "np": np}


class FakeLoader:
    """Stands in for a train loader in `len(train_loader)`: 50000 images, drop_last."""

    def __init__(self, batch_size):
        self.batch_size = batch_size

    def __len__(self):
        return N_TRAIN // self.batch_size()


class TorchProxy:
    """`torch` for one exec namespace, with a few functions replaced."""

    def __init__(self, **over):
        import torch
        self._torch, self._over = torch, over

    def __getattr__(self, name):
        return self._over[name] if name in self._over else getattr(self._torch, name)


def linear_net_module(W):
    """The TTA 'net': logits[n,k] = sum_{c,i,j} x[n,c,i,j] W[k,c,i,j]; ignores train/eval."""
    import torch

    class LinearNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("W", W)

        def forward(self, x, *args, **kwargs):
            return x.reshape(x.shape[0], -1) @ self.W.reshape(self.W.shape[0], -1).T

    return LinearNet()


def fp16_scalar_note(m):
    import torch
    h = torch.tensor(m, dtype=torch.float16).item()
    return {"value": m, "as_fp16": h,
            "cpu_foreach_mul": "buf = fp16(buf * fp16(momentum)) (what these goldens ran)",
            "cuda_foreach_mul": "buf = fp16(float(buf) * momentum)"}


def sgd_impl(group):
    if group.get("fused"):
        return "fused"
    if group.get("foreach"):
        return "foreach"
    return "default (single-tensor for-loop on CPU; foreach on CUDA, same maths)"


def group_of(opts, param):
    for opt in opts:
        for g in opt.param_groups:
            if any(p is param for p in g["params"]):
                return g
    raise KeyError("param not in any group")


def common_inputs():
    return dict(
        whiten_images=spec(3, [64, 3, 32, 32], -2.0, 2.0),
        tta_W=spec(12, [10, 3, 32, 32], -0.01, 0.01),
        tta_images=spec(13, [20, 3, 32, 32], -2.0, 2.0),
        loss_logits=spec(11, [32, 10], -3.0, 3.0),
        labels=[i % 10 for i in range(32)],
    )


def header(recipe, info, file, notes):
    import torch
    return {"recipe": recipe,
            "reference": {"repo": info["repo"], "commit": info["commit"], "file": file},
            "torch": torch.__version__, "generator": GENERATOR, "notes": notes}


def note_hashes(notes, root, rels):
    for rel in rels:
        h = sha256(Path(root) / rel)
        tag = "" if PINNED_SHA256.get(rel) == h else " (DIFFERS from the pinned hash)"
        notes.append(f"sha256 {rel} = {h}{tag}")


COMMON_NOTES = [
    "Inputs: splitmix64 uniforms, golden(seed, shape, lo, hi) built in float64 then cast to "
    "float32, row-major; only seeds and shapes are stored.",
    "Schedule lr of an 'sgd' group = the raw PyTorch/reference lr x batch_size x "
    "loss_per_example (the lr of a per-batch MEAN loss); 'muon' groups give the raw Muon lr. "
    "decay = the per-step coefficient c of the optimiser's decay term c*w.",
    "optimizer_steps: lr/decay are the schedule values (schedule units) of steps 0..k-1; "
    "extra.raw_lr is what the reference optimiser was actually given; grads are fed to the "
    "reference optimiser as they are (they are gradients of the reference's SUMMED loss). "
    "w[t] is the parameter after optimiser step t (0-based).",
    "Everything runs on CPU in float32 (bf16 where stated), where the references run on "
    "CUDA in fp16/bf16: values are the references' maths, not their rounding.",
    "tta: the 'net' is linear (logits = flatten(x) @ flatten(W).T) and ignores train/eval.",
]


# --------------------------------------------------------------------------
# airbench94 (legacy/airbench94.py)
# --------------------------------------------------------------------------


def recipe_airbench94(root):
    import torch
    from torch import nn
    rel = "legacy/airbench94.py"
    notes = list(COMMON_NOTES)
    ref = Ref(root, rel, notes)
    ns = base_ns()
    ref.define(["hyp", "Conv", "get_patches", "get_whitening_parameters",
                "init_whitening_conv", "infer"], ns)
    main = ref.top("main")
    inp = common_inputs()
    K = 3

    # --- main's own optimiser + LambdaLR, over stand-in params
    w_spec = spec(1, [16, 8, 3, 3])
    w = nn.Parameter(golden(w_spec))
    nb = nn.Parameter(torch.zeros(8))
    ns.update(other_params=[w], norm_biases=[nb],
              train_loader=FakeLoader(lambda: ns["batch_size"]))
    ref.run(select(main.body, names=["batch_size", "epochs", "momentum", "kilostep_scale", "lr",
                                     "wd", "lr_biases", "loss_fn", "total_train_steps",
                                     "param_configs", "optimizer", "scheduler", "alpha_schedule"],
                   defs=["get_lr"]), ns)
    notes.append("main(): norm_biases/other_params are stand-in parameters (a [16,8,3,3] "
                 "filter for `other`, an [8] vector for `norm_biases`); every other main "
                 "statement used (hyp, lr/wd arithmetic, param_configs, SGD, get_lr, LambdaLR, "
                 "alpha_schedule, loss_fn) is the script's own code.")
    B = ns["batch_size"]
    per_epoch = len(ns["train_loader"])
    total = ns["total_train_steps"]
    ep_loop = epoch_loop(main)
    n_epochs = len(ref.eval(ep_loop.iter, ns))
    T = min(total, n_epochs * per_epoch)
    opt, sched = ns["optimizer"], ns["scheduler"]
    groups = {"other": group_of([opt], w), "norm_biases": group_of([opt], nb)}
    sched_out = {g: {"kind": "sgd", "lr": [], "decay": []} for g in groups}

    # whitening-bias gradient flag: `model[0].bias.requires_grad = (epoch < ...)`
    wb_assign = next(s for s in ep_loop.body if isinstance(s, ast.Assign)
                     and ast.unparse(s.targets[0]).endswith("bias.requires_grad"))
    bl = batch_loop(ep_loop)
    avg_stmts = after_counter(bl.body, "current_steps")
    ns["lookahead_state"] = "constructed before the loop"
    events, whiten_bias_steps = [], 0
    raw_other, ws = [], []
    for s in range(T):
        ns["epoch"] = s // per_epoch
        if ref.eval(wb_assign.value, ns):
            whiten_bias_steps += 1
        for name, g in groups.items():
            sched_out[name]["lr"].append(g["lr"] * B * 1.0)
            sched_out[name]["decay"].append(g["lr"] * g["weight_decay"])
        if s < K:
            raw_other.append(groups["other"]["lr"])
            w.grad = golden(spec(100 + s, w_spec["shape"]))
        opt.step()
        w.grad = None
        if s < K:
            ws.append(out_tensor(w))
        sched.step()
        ns["current_steps"] = s + 1
        if averaging_events(ref, avg_stmts, ns, s + 1, events) == "break":
            break
    assert not any(e[1] == "snapshot" for e in events)
    g_other = groups["other"]
    optimizer_steps = [{
        "group": "other", "w0": w_spec,
        "grads": [spec(100 + t, w_spec["shape"]) for t in range(K)],
        "lr": sched_out["other"]["lr"][:K], "decay": sched_out["other"]["decay"][:K],
        "extra": {"optimizer": "torch.optim.SGD (main's param_configs, momentum, nesterov) "
                               "+ LambdaLR(get_lr)",
                  "momentum": g_other["momentum"], "nesterov": g_other["nesterov"],
                  "weight_decay_arg": g_other["weight_decay"], "raw_lr": raw_other,
                  "implementation": sgd_impl(g_other)},
        "w": ws}]
    notes.append("averaging: LookaheadState is built before training (and before "
                 "init_whitening_conv, main lines 393/403), so snapshot_step is null: the "
                 "average starts from the initial weights. Its update lerps EVERY half/float "
                 "state_dict entry (the frozen whitening weight too) and copies back; updates "
                 "are [t, alpha_schedule[t].item()] at t%5==0 (alpha_schedule is float32), "
                 "then [total, 1.0] after the last step; conditions and decays were evaluated "
                 "from main's own statements.")
    notes.append(f"whiten_bias_steps: main sets model[0].bias.requires_grad = "
                 f"`{ast.unparse(wb_assign.value)}` per epoch; the bias is in the `other` group "
                 "and keeps its momentum buffer afterwards (PyTorch SGD skips params without "
                 "grad).")

    # --- whitening
    layer = ns["Conv"](3, 24, 2, padding=0, bias=True)
    ns["init_whitening_conv"](layer, golden(inp["whiten_images"]))
    eps = ref.eval(ref.top("init_whitening_conv").args.defaults[0], ns)
    whitening = {"function": f"{rel}: init_whitening_conv (get_patches, get_whitening_parameters)",
                 "images": inp["whiten_images"],
                 "params": {"eps": eps, "kernel_size": 2, "out_channels": 24, "negated_copy": True,
                            "eigen_order": "descending (flip(0) of eigh)"},
                 "weight": out_tensor(layer.weight), "bias": None}
    notes.append("whitening: layer = the script's Conv(3, 24, 2, padding=0, bias=True) in "
                 "float32 (the run's layer is fp16); eps is init_whitening_conv's default, the "
                 "one main uses.")

    # --- tta
    tta = tta_infer(ns["infer"], inp, level=2)
    # --- loss
    loss_assign = next(s for s in ast.walk(main) if isinstance(s, ast.Assign)
                       and assigned_names(s) == ["loss"])
    logits = golden(inp["loss_logits"])
    labels = torch.tensor(inp["labels"])
    ns.update(outputs=logits, labels=labels)
    value = ref.eval(loss_assign.value, ns)
    loss = {"logits": inp["loss_logits"], "labels": inp["labels"],
            "smoothing": float(ns["loss_fn"].label_smoothing), "value": float(value.item()),
            "reduction": "sum", "loss_per_example": 1.0}
    notes.append(f"loss: main's `loss = {ast.unparse(loss_assign.value)}` with its loss_fn.")

    note_hashes(notes, root, [rel])
    doc = header("airbench94", REFS["airbench"], rel, notes)
    doc.update({
        "schedule": {"source": f"{rel}: main() (hyp, param_configs, torch.optim.SGD, get_lr, "
                               "LambdaLR stepped after each optimizer.step())",
                     "train_images": N_TRAIN, "batch_size": B, "steps_per_epoch": per_epoch,
                     "total_steps": T, "loss_per_example": 1.0, "groups": sched_out},
        "averaging": {"kind": "lookahead", "snapshot_step": None, "updates": events},
        "whiten_bias_steps": whiten_bias_steps,
        "optimizer_steps": optimizer_steps,
        "whitening": whitening, "tta": tta, "loss": loss})
    return doc


def tta_infer(infer, inp, level, selective=None):
    """Runs an airbench-style `infer(model, loader, tta_level)` on the linear net."""
    W = golden(inp["tta_W"])
    images = golden(inp["tta_images"])
    loader = types.SimpleNamespace(images=images, normalize=lambda x: x)
    logits = infer(linear_net_module(W), loader, tta_level=level)
    return {"net": "linear", "W": inp["tta_W"], "images": inp["tta_images"], "level": level,
            "selective_fraction": selective, "logits": out_tensor(logits)}


# --------------------------------------------------------------------------
# airbench94-muon (airbench94_muon.py) and hiverge-speedrun (cifar10_speedrun.py)
# --------------------------------------------------------------------------


def build_muon_main(ref, ns, main, bs_name, names, filter_params, head_w):
    """Executes the optimiser set-up statements of main over stand-in parameters."""
    import torch
    from torch import nn
    model = types.SimpleNamespace(
        whiten=types.SimpleNamespace(bias=nn.Parameter(torch.zeros(24))),
        head=types.SimpleNamespace(weight=head_w))
    nb = nn.Parameter(torch.zeros(8))
    ns.update(model=model, filter_params=filter_params, norm_biases=[nb],
              train_loader=FakeLoader(lambda: ns[bs_name]))
    stmts = select(main.body, names=names,
                   extra=lambda s: (isinstance(s, ast.For) and sets_key(s, "initial_lr"))
                   or (isinstance(s, ast.Assign) and sets_key(s, "momentum_buffer_dtype")))
    ref.run(stmts, ns)
    return {"whiten_bias": model.whiten.bias, "norm_biases": nb, "head": head_w}


def muon_schedule(ref, ns, main, bs_name, params, filters, K_head, K_filt, head_spec,
                  filt_specs, step_all, decoupled_wd):
    """Runs main's per-step lr assignments for every step, and the reference optimisers
    for the first few, exactly in main's order (lr assignment, then opt.step())."""
    B = ns[bs_name]
    per_epoch = len(ns["train_loader"])
    total = ns["total_train_steps"]
    ep_loop = epoch_loop(main)
    n_epochs = len(ref.eval(ep_loop.iter, ns))
    T = min(total, n_epochs * per_epoch)
    bl = batch_loop(ep_loop)
    lr_stmts = [s for s in bl.body if is_lr_logic(s)]
    wb_cmp = next(n for n in ast.walk(bl) if isinstance(n, ast.Compare)
                  and "whiten_bias_train_steps" in ast.unparse(n))
    opt1, opt2 = ns["optimizer1"], ns["optimizer2"]
    groups = {name: group_of([opt1], p) for name, p in params.items()}
    groups["filters"] = opt2.param_groups[0]
    sched = {name: {"kind": "muon" if name == "filters" else "sgd", "lr": [], "decay": []}
             for name in ["whiten_bias", "norm_biases", "head", "filters"]}
    head_w = params["head"]
    raw = {"head": [], "filters": []}
    w_head, w_filt, renorm_in_first = [], [], []
    whiten_bias_steps = 0
    for s in range(T):
        ns["step"] = s
        if ref.eval(wb_cmp, ns):
            whiten_bias_steps += 1
        ref.run(lr_stmts, ns)
        for name, g in groups.items():
            if name == "filters":
                sched[name]["lr"].append(g["lr"])
                sched[name]["decay"].append(g["lr"] * g.get("weight_decay", 0.0)
                                            if decoupled_wd else 0.0)
            else:
                sched[name]["lr"].append(g["lr"] * B * 1.0)
                sched[name]["decay"].append(g["lr"] * g["weight_decay"])
        if s < max(K_head, K_filt):
            if s < K_head:
                raw["head"].append(groups["head"]["lr"])
                head_w.grad = golden(spec(100 + s, head_spec["shape"]))
            if s < K_filt:
                raw["filters"].append(groups["filters"]["lr"])
                for p, sp in zip(filters, filt_specs(s)):
                    p.grad = golden(sp)
            step_all()
            if s < K_head:
                w_head.append(out_tensor(head_w))
            if s < K_filt:
                w_filt.append([out_tensor(p) for p in filters])
                if hasattr(opt2, "last_norm_step"):
                    if opt2.last_norm_step == opt2.step_count:
                        renorm_in_first.append(opt2.step_count)
    return dict(B=B, per_epoch=per_epoch, T=T, sched=sched, groups=groups, raw=raw,
                w_head=w_head, w_filt=w_filt, whiten_bias_steps=whiten_bias_steps,
                renorm_in_first=renorm_in_first, lr_stmts=lr_stmts, wb_cmp=wb_cmp)


def recipe_muon(root):
    import torch
    from torch import nn
    rel = "airbench94_muon.py"
    notes = list(COMMON_NOTES)
    ref = Ref(root, rel, notes)
    ns = base_ns()
    ref.define(["zeropower_via_newtonschulz5", "Muon", "infer"], ns)
    ref.run([ref.method("CifarNet", "init_whiten")], ns)
    main = ref.top("main")
    inp = common_inputs()

    head_spec, filt_spec = spec(1, [10, 16]), spec(1, [16, 8, 3, 3])
    head_w = nn.Parameter(golden(head_spec))
    filt = nn.Parameter(golden(filt_spec))
    params = build_muon_main(ref, ns, main, "batch_size",
                             ["batch_size", "bias_lr", "head_lr", "wd", "total_train_steps",
                              "whiten_bias_train_steps", "param_configs", "optimizer1",
                              "optimizer2", "optimizers", "step"], [filt], head_w)

    def step_all():
        for opt in ns["optimizers"]:
            opt.step()
        for p in list(params.values()) + [filt]:
            p.grad = None   # model.zero_grad(set_to_none=True)

    r = muon_schedule(ref, ns, main, "batch_size", params, [filt], 3, 3, head_spec,
                      lambda t: [spec(100 + t, filt_spec["shape"])], step_all,
                      decoupled_wd=False)
    T = r["T"]
    g_head, g_filt = r["groups"]["head"], r["groups"]["filters"]
    notes.append("main(): the model is a stand-in (whiten.bias [24], head.weight, one norm "
                 "bias [8], filter_params = the tested filter); the lr/wd arithmetic, "
                 "param_configs, optimizer1 (fused SGD), optimizer2 (Muon), initial_lr and "
                 "the in-loop lr assignments are main's own statements: "
                 + " | ".join(ast.unparse(s).replace("\n", " ") for s in r["lr_stmts"]))
    notes.append("schedule: the whiten_bias lr keeps following its formula after step "
                 "whiten_bias_train_steps (it goes negative); the bias gets no gradient then "
                 "(forward uses b.detach()), so the value is never used.")
    notes.append("Muon here has no weight decay: filters decay is 0 at every step. The "
                 "tested filter is fp32, so its momentum buffer is fp32 (the run's filters are "
                 "fp16, and so are their buffers); the bf16 Newton-Schulz output is added with "
                 "p.add_(update, alpha=-lr), i.e. in fp32.")
    notes.append("head: torch.optim.SGD(fused=True) as in main; fused SGD is supported on "
                 "CPU in this torch, so the fused kernel ran.")
    optimizer_steps = [
        {"group": "filters", "w0": filt_spec,
         "grads": [spec(100 + t, filt_spec["shape"]) for t in range(3)],
         "lr": r["sched"]["filters"]["lr"][:3], "decay": r["sched"]["filters"]["decay"][:3],
         "extra": {"optimizer": f"{rel}: Muon (main's optimizer2)",
                   "momentum": g_filt["momentum"], "nesterov": g_filt["nesterov"],
                   "raw_lr": r["raw"]["filters"], "renormalise_before_update": True,
                   "newton_schulz": "zeropower_via_newtonschulz5(steps=3), bf16"},
         "w": [x[0] for x in r["w_filt"]]},
        {"group": "head", "w0": head_spec,
         "grads": [spec(100 + t, head_spec["shape"]) for t in range(3)],
         "lr": r["sched"]["head"]["lr"][:3], "decay": r["sched"]["head"]["decay"][:3],
         "extra": {"optimizer": "torch.optim.SGD (main's optimizer1)",
                   "momentum": g_head["momentum"], "nesterov": g_head["nesterov"],
                   "weight_decay_arg": g_head["weight_decay"], "raw_lr": r["raw"]["head"],
                   "implementation": sgd_impl(g_head)},
         "w": r["w_head"]},
    ]

    # --- Newton-Schulz
    zp = ns["zeropower_via_newtonschulz5"]
    fn = ref.top("zeropower_via_newtonschulz5")
    coeffs = next(ast.literal_eval(s.value) for s in fn.body if isinstance(s, ast.Assign)
                  and assigned_names(s) == ["a", "b", "c"])
    ns_out = []
    for seed, shape in [(7, [16, 72]), (8, [72, 16])]:
        sp = spec(seed, shape)
        X = zp(golden(sp), steps=3)
        assert X.dtype == torch.bfloat16
        ns_out.append({"function": f"{rel}: zeropower_via_newtonschulz5",
                       "inputs": [sp],
                       "params": {"steps": 3, "eps": 1e-7, "coefficients": list(coeffs),
                                  "transposed": shape[0] > shape[1]},
                       "dtype": "bfloat16", "output": [out_tensor(X)]})
    notes.append("newton_schulz: computed in bf16 on CPU (the reference casts G.bfloat16()), "
                 "output cast to float32; CPU bf16 matmul accumulation may differ from CUDA's.")

    # --- whitening
    fake = types.SimpleNamespace(whiten=nn.Conv2d(3, 24, 2, padding=0, bias=True))
    ns["init_whiten"](fake, golden(inp["whiten_images"]))
    eps = ref.eval(ref.method("CifarNet", "init_whiten").args.defaults[0], ns)
    whitening = {"function": f"{rel}: CifarNet.init_whiten (method body, self = stand-in with "
                             "whiten = nn.Conv2d(3, 24, 2, padding=0, bias=True))",
                 "images": inp["whiten_images"],
                 "params": {"eps": eps, "kernel_size": 2, "out_channels": 24, "negated_copy": True,
                            "eigen_order": "ascending (eigh order, no flip)"},
                 "weight": out_tensor(fake.whiten.weight), "bias": None}

    tta = tta_infer(ns["infer"], inp, level=2)

    bw = find_call(main, lambda c: isinstance(c.func, ast.Attribute) and c.func.attr == "backward")
    ns.update(outputs=golden(inp["loss_logits"]), labels=torch.tensor(inp["labels"]))
    value = ref.eval(bw.func.value, ns)
    smoothing = ast.literal_eval(kwarg(bw.func.value, "label_smoothing"))
    loss = {"logits": inp["loss_logits"], "labels": inp["labels"], "smoothing": smoothing,
            "value": float(value.item()), "reduction": "sum", "loss_per_example": 1.0}
    notes.append(f"loss: main's `{ast.unparse(bw.func.value)}` (the tensor .backward() is "
                 "called on).")
    notes.append(f"whiten_bias_steps: steps with `{ast.unparse(r['wb_cmp'])}`.")
    notes.append("renorm_steps: Muon.step renormalises every filter (p *= sqrt(len(p))/||p||) "
                 "before every update, so every step 1..total is listed.")

    note_hashes(notes, root, [rel])
    doc = header("airbench94-muon", REFS["airbench"], rel, notes)
    doc.update({
        "schedule": {"source": f"{rel}: main() set-up (param_configs, optimizer1, optimizer2, "
                               "initial_lr) + its in-loop lr assignments",
                     "train_images": N_TRAIN, "batch_size": r["B"],
                     "steps_per_epoch": r["per_epoch"], "total_steps": T,
                     "loss_per_example": 1.0, "groups": r["sched"]},
        "whiten_bias_steps": r["whiten_bias_steps"],
        "renorm_steps": list(range(1, T + 1)),
        "optimizer_steps": optimizer_steps,
        "newton_schulz": ns_out,
        "whitening": whitening, "tta": tta, "loss": loss})
    return doc


def recipe_speedrun(root):
    import torch
    from torch import nn
    rel = "cifar10_speedrun.py"
    notes = list(COMMON_NOTES)
    ref = Ref(root, rel, notes)
    ns = base_ns()
    ref.define(["_zeropower_via_newtonschulz5", "Muon", "infer"], ns)
    ref.run([ref.method("CifarNet", "init_whiten")], ns)
    main = ref.top("main")
    inp = common_inputs()
    names = ["training_batch_size", "bias_lr", "head_lr", "wd", "total_train_steps",
             "whiten_bias_train_steps", "param_configs", "optimizer1", "optimizer2",
             "optimizers", "step", "lr_factor1_base", "lr_factor2_base", "lr_factor1_initial",
             "lr_factors2_initial"]

    head_spec = spec(1, [10, 16])
    f_specs = [spec(1, [8, 4, 3, 3]), spec(2, [16, 8, 3, 3])]
    head_w = nn.Parameter(golden(head_spec))
    filts = [nn.Parameter(golden(sp)) for sp in f_specs]
    params = build_muon_main(ref, ns, main, "training_batch_size", names, filts, head_w)

    def step_all():
        for opt in ns["optimizers"]:
            opt.step()
            opt.zero_grad(set_to_none=True)

    def filt_grads(t):
        return [spec(100 + 10 * i + t, sp["shape"]) for i, sp in enumerate(f_specs)]

    r = muon_schedule(ref, ns, main, "training_batch_size", params, filts, 3, 4, head_spec,
                      filt_grads, step_all, decoupled_wd=True)
    T = r["T"]
    opt2 = ns["optimizer2"]
    g_head, g_filt = r["groups"]["head"], r["groups"]["filters"]
    notes.append("main(): the model is a stand-in (whiten.bias [24], head.weight, one norm "
                 "bias [8], filter_params = the tested filters); the lr/wd arithmetic, "
                 "param_configs, optimizer1 (fused SGD), optimizer2 (Muon) with "
                 "momentum_buffer_dtype = torch.half, initial_lr, the lr-factor precomputation "
                 "and the in-loop lr assignments are main's own statements: "
                 + " | ".join(ast.unparse(s).replace("\n", " ") for s in r["lr_stmts"]))
    notes.append("schedule: the whiten_bias lr keeps following its formula after step "
                 "whiten_bias_train_steps (it goes negative); the bias gets no gradient then, "
                 "so the value is never used.")
    notes.append("filters decay = lr(s) * weight_decay (decoupled): Muon.step multiplies the "
                 "params by (1 - lr*wd) AFTER the (optional) renormalisation and the update, "
                 "i.e. w <- (w*scale - lr*O) * (1 - lr*wd).")
    notes.append("head: torch.optim.SGD(fused=True) as in main; fused SGD is supported on "
                 "CPU in this torch, so the fused kernel ran.")
    notes.append("filters (fp16 momentum buffer): on CPU, torch._foreach_mul_(momentum_buffers, "
                 "momentum) rounds the Python scalar to the buffer dtype first (0.655 -> fp16 "
                 "0.65478515625) and multiplies in fp16, whereas CUDA's foreach kernel (the "
                 "reference's real device) multiplies in fp32 by 0.655 and rounds the product "
                 "to fp16. The w values here carry the CPU behaviour (checked: replaying the "
                 "step by hand with the fp16-rounded scalar reproduces them to ~1e-7; with the "
                 "fp32 scalar they differ by ~2e-5..6e-5 after steps 2-4). Everything else in "
                 "the step (fp16 buffer += fp16(grad), fp32 nesterov = grad + m*buf, batched "
                 "NS, renorm, decay) is the same on both devices.")
    optimizer_steps = [
        {"group": "filters", "w0": f_specs, "grads": [filt_grads(t) for t in range(4)],
         "lr": r["sched"]["filters"]["lr"][:4], "decay": r["sched"]["filters"]["decay"][:4],
         "extra": {"optimizer": f"{rel}: Muon (main's optimizer2, momentum_buffer_dtype=half)",
                   "momentum": g_filt["momentum"], "nesterov": g_filt["nesterov"],
                   "weight_decay_arg": g_filt["weight_decay"],
                   "total_train_steps": opt2.total_train_steps,
                   "step_count_offset": 0, "step_counts": [1, 2, 3, 4],
                   "renormalised_at_step_count": r["renorm_in_first"],
                   "momentum_buffer_dtype": "float16", "param_dtype": "float32",
                   "buffer_momentum_scalar": fp16_scalar_note(g_filt["momentum"]),
                   "max_D": opt2.max_D, "max_K": opt2.max_K, "raw_lr": r["raw"]["filters"]},
         "w": r["w_filt"]},
        {"group": "head", "w0": head_spec,
         "grads": [spec(100 + t, head_spec["shape"]) for t in range(3)],
         "lr": r["sched"]["head"]["lr"][:3], "decay": r["sched"]["head"]["decay"][:3],
         "extra": {"optimizer": "torch.optim.SGD (main's optimizer1)",
                   "momentum": g_head["momentum"], "nesterov": g_head["nesterov"],
                   "weight_decay_arg": g_head["weight_decay"], "raw_lr": r["raw"]["head"],
                   "implementation": sgd_impl(g_head)},
         "w": r["w_head"]},
    ]

    # --- renormalisation steps: the script's own Muon over a tiny fp32 filter
    tiny = nn.Parameter(golden(spec(21, [4, 2, 3, 3])))
    ns2 = base_ns()
    ns2.update({k: ns[k] for k in ["Muon", "_zeropower_via_newtonschulz5"]})
    build_muon_main(ref, ns2, main, "training_batch_size", names, [tiny],
                    nn.Parameter(torch.zeros(10, 16)))
    m2 = ns2["optimizer2"]
    assert m2.total_train_steps == T and m2.param_groups[0]["momentum_buffer_dtype"] == torch.half
    renorm = []
    for s in range(T):
        tiny.grad = golden(spec(22, [4, 2, 3, 3]))
        m2.step()
        if m2.last_norm_step == m2.step_count:
            renorm.append(m2.step_count)
    notes.append(f"renorm_steps: the script's Muon over a tiny fp32 [4,2,3,3] filter "
                 f"(momentum_buffer_dtype=half, total_train_steps={T}), step() called {T} times "
                 "with a gradient; listed are the step_count values at which last_norm_step "
                 "was set (norm_freq = 2 + int(15*step_count/total), due when step_count - "
                 "last_norm_step >= norm_freq). The rescale is to sqrt(C_out)/(||p||+1e-7) and "
                 "happens before the update at that step.")

    # --- Newton-Schulz (batched, padded)
    g_specs = [spec(7, [16, 8, 3, 3]), spec(9, [8, 4, 3, 3])]
    probe = ns["Muon"]([nn.Parameter(torch.zeros(sp["shape"])) for sp in g_specs],
                       total_train_steps=T)
    meta = [(m["original_shape"], m["reshaped_dims"][0], m["reshaped_dims"][1], i)
            for i, m in enumerate(probe.filter_params_meta)]
    outs = ns["_zeropower_via_newtonschulz5"]([golden(sp) for sp in g_specs], meta,
                                              probe.max_D, probe.max_K, 5, T)
    fn = ref.top("_zeropower_via_newtonschulz5")
    consts = {",".join(assigned_names(s)): ast.literal_eval(s.value) for s in fn.body
              if isinstance(s, ast.Assign) and isinstance(s.value, (ast.Constant, ast.Tuple))}
    ns_out = [{"function": f"{rel}: _zeropower_via_newtonschulz5",
               "inputs": g_specs,
               "params": {"filter_meta_data": [[list(m[0]), m[1], m[2], m[3]] for m in meta],
                          "max_D": probe.max_D, "max_K": probe.max_K, "current_step": 5,
                          "total_steps": T, "coefficients": list(consts["a,b,c"]),
                          "eps_stable": consts["eps_stable"], "eps_gms": consts["eps_gms"],
                          "initial_target_mag": consts["initial_target_mag"],
                          "final_target_mag": consts["final_target_mag"]},
               "dtype": "float32", "output": [out_tensor(o) for o in outs]}]
    notes.append("newton_schulz: inputs are the 4-D grads (seed 7 = the [16,72] matrix viewed "
                 "as [16,8,3,3]; seed 9 = [8,36] as [8,4,3,3]); filter_meta_data/max_D/max_K "
                 "are those the script's Muon computes for those two shapes (max_K rounded up "
                 "to a multiple of 16); float32, as the nesterov grads reaching it are fp32 "
                 "(fp32 grad + fp16 buffer).")

    # --- jitter
    aug = ast.literal_eval(kwarg(next(s for s in main.body if isinstance(s, ast.Assign)
                                      and assigned_names(s) == ["train_loader"]).value, "aug"))
    cj = aug["color_jitter"]
    x_sp, ub_sp, uc_sp = (spec(4, [6, 3, 4, 4]), spec(5, [6, 1, 1, 1], 0.0, 1.0),
                          spec(6, [6, 1, 1, 1], 0.0, 1.0))
    queue = [golden(ub_sp), golden(uc_sp)]

    def fake_rand(*size, **kw):
        t = queue.pop(0)
        assert list(t.shape) == list(size), (size, t.shape)
        return t.to(kw.get("dtype") or torch.float32)

    ns_j = base_ns()
    ns_j["torch"] = TorchProxy(rand=fake_rand)
    ref.define(["batch_color_jitter"], ns_j)
    jit_out = ns_j["batch_color_jitter"](golden(x_sp), cj["brightness_range"], cj["contrast_range"])
    assert not queue
    jitter = {"x": x_sp, "u_brightness": ub_sp, "u_contrast": uc_sp,
              "brightness_range": cj["brightness_range"], "contrast_range": cj["contrast_range"],
              "output": out_tensor(jit_out)}
    notes.append("jitter: batch_color_jitter with `torch.rand` replaced (in its exec namespace "
                 "only) by a queue returning u_brightness then u_contrast; float32 (the run's "
                 "images are fp16). Ranges are from main's train_loader aug dict.")

    # --- whitening
    fake = types.SimpleNamespace(whiten=nn.Conv2d(3, 24, 2, padding=0, bias=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch.svd deprecation
        ns["init_whiten"](fake, golden(inp["whiten_images"]))
    eps = ref.eval(ref.method("CifarNet", "init_whiten").args.defaults[0], ns)
    whitening = {"function": f"{rel}: CifarNet.init_whiten (method body; torch.svd of the "
                             "patch covariance)",
                 "images": inp["whiten_images"],
                 "params": {"eps": eps, "kernel_size": 2, "out_channels": 24, "negated_copy": True,
                            "eigen_order": "descending (SVD order)"},
                 "weight": out_tensor(fake.whiten.weight), "bias": None}
    notes.append("whitening: torch.svd (deprecated, still present) ran as written.")

    # --- tta (selective)
    tta = tta_infer(ns["infer"], inp, level=2, selective=0.25)
    W, imgs = golden(inp["tta_W"]), golden(inp["tta_images"])
    plain = linear_net_module(W)(imgs)
    conf = torch.softmax(plain, 1).max(1).values
    k = int(imgs.shape[0] * 0.25)
    chosen = sorted(torch.topk(conf, k, largest=False).indices.tolist())
    notes.append(f"tta: infer(tta_level=2) = the selective `tta`: plain logits for all, the "
                 f"int(0.25*n) = {k} least confident (max softmax) re-scored as the mean of 6 "
                 f"views (id, crop_tl, crop_br of the 1-px reflect pad, and their flips); "
                 f"images re-scored here (sorted): {chosen}.")

    # --- loss
    fwd = ref.nested(main, "forward_step")
    la = next(s for s in fwd.body if isinstance(s, ast.Assign) and assigned_names(s) == ["loss"])
    ns.update(outputs=golden(inp["loss_logits"]), labels=torch.tensor(inp["labels"]))
    value = ref.eval(la.value, ns)
    loss = {"logits": inp["loss_logits"], "labels": inp["labels"],
            "smoothing": ast.literal_eval(kwarg(la.value, "label_smoothing")),
            "value": float(value.item()), "reduction": "sum", "loss_per_example": 1.0}
    notes.append(f"loss: forward_step's `{ast.unparse(la.value)}`.")
    notes.append(f"whiten_bias_steps: steps with `{ast.unparse(r['wb_cmp'])}`.")

    note_hashes(notes, root, [rel])
    doc = header("hiverge-speedrun", REFS["speedrun"], rel, notes)
    doc.update({
        "schedule": {"source": f"{rel}: main() set-up (param_configs, optimizer1, optimizer2, "
                               "initial_lr, lr_factor*_base/initial) + its in-loop lr "
                               "assignments",
                     "train_images": N_TRAIN, "batch_size": r["B"],
                     "steps_per_epoch": r["per_epoch"], "total_steps": T,
                     "loss_per_example": 1.0, "groups": r["sched"]},
        "whiten_bias_steps": r["whiten_bias_steps"],
        "renorm_steps": renorm,
        "optimizer_steps": optimizer_steps,
        "newton_schulz": ns_out,
        "whitening": whitening, "jitter": jitter, "tta": tta, "loss": loss})
    return doc


# --------------------------------------------------------------------------
# hlb (hlb-CIFAR10 main.py)
# --------------------------------------------------------------------------


def recipe_hlb(root):
    import torch
    import torch.nn.functional as F
    from torch import nn
    rel = "main.py"
    notes = list(COMMON_NOTES)
    ref = Ref(root, rel, notes)
    ns = base_ns()
    ref.define(["batchsize", "bias_scaler", "hyp", "default_conv_kwargs", "Conv",
                "get_patches", "get_whitening_parameters", "init_whitening_conv",
                "set_whitening_conv", "SpeedyConvNet", "init_split_parameter_dictionaries",
                "loss_fn"], ns)
    main = ref.top("main")
    inp = common_inputs()
    K = 3

    # get_batches, run as written but with randperm kept on CPU
    def randperm(n, device=None, **kw):
        return torch.randperm(n, **kw)
    ns_b = dict(ns)
    ns_b["torch"] = TorchProxy(randperm=randperm)
    ref.define(["get_batches"], ns_b)
    fake_images = torch.zeros(N_TRAIN, 1, 1, 1)
    fake_data = {"train": {"images": fake_images}, "eval": {"images": fake_images,
                                                              "targets": torch.zeros(N_TRAIN)}}

    w_spec = spec(1, [16, 8, 3, 3])

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(golden(w_spec))
            self.bias = nn.Parameter(torch.zeros(8))

    net = Net()
    ns.update(data=fake_data, net=net)
    ref.run(select(main.body, names=["net_ema", "current_steps", "num_steps_per_epoch",
                                     "total_train_steps", "ema_epoch_start",
                                     "projected_ema_decay_val", "pct_start", "non_bias_params",
                                     "opt", "opt_bias", "initial_div_factor", "final_lr_ratio",
                                     "lr_sched", "lr_sched_bias"]), ns)
    notes.append("main(): `net` is a stand-in module with one non-bias parameter `weight` "
                 "[16,8,3,3] and one `bias` [8], split by the script's "
                 "init_split_parameter_dictionaries; `data['train']['images']` is a 50000-long "
                 "stand-in; everything else (hyp, the step counts, both SGDs, both OneCycleLRs, "
                 "the EMA conditions/decay) is main's own code.")
    opt, opt_bias = ns["opt"], ns["opt_bias"]
    lr_sched, lr_sched_bias = ns["lr_sched"], ns["lr_sched_bias"]
    total = ns["total_train_steps"]
    per_epoch = ns["num_steps_per_epoch"]
    ep_loop = epoch_loop(main)
    frac_assign = next(s for s in ep_loop.body if isinstance(s, ast.Assign)
                       and assigned_names(s) == ["epoch_fraction"])
    bl = batch_loop(ep_loop)
    lbs = next(s for s in bl.body if isinstance(s, ast.Assign)
               and assigned_names(s) == ["loss_batchsize_scaler"])
    lpe = float(ref.eval(lbs.value, ns))
    B = ns["batchsize"]
    avg_stmts = after_counter(bl.body, "current_steps")
    sched = {"non_bias": {"kind": "sgd", "lr": [], "decay": []},
             "bias": {"kind": "sgd", "lr": [], "decay": []}}
    gmap = {"non_bias": opt.param_groups[0], "bias": opt_bias.param_groups[0]}
    events, raw, ws = [], [], []
    s = 0
    batches_per_epoch = []
    for epoch in ref.eval(ep_loop.iter, ns):
        ns["epoch"] = epoch
        frac = ref.eval(frac_assign.value, ns)
        nb = sum(1 for _ in ns_b["get_batches"](fake_data, key="eval", batchsize=B,
                                                epoch_fraction=frac))
        batches_per_epoch.append(nb)
        for _ in range(nb):
            for name, g in gmap.items():
                sched[name]["lr"].append(g["lr"] * B * lpe)
                sched[name]["decay"].append(g["lr"] * g["weight_decay"])
            if s < K:
                raw.append(gmap["non_bias"]["lr"])
                net.weight.grad = golden(spec(100 + s, w_spec["shape"]))
            opt.step()
            opt_bias.step()
            lr_sched.step()
            lr_sched_bias.step()
            if s < K:
                ws.append(out_tensor(net.weight))
            net.weight.grad = None
            ns["current_steps"] += 1
            s += 1
            averaging_events(ref, avg_stmts, ns, s, events)
    T = s
    snaps = [e[0] for e in events if e[1] == "snapshot"]
    assert len(snaps) == 1 and events[0][1] == "snapshot"
    updates = [e for e in events if e[1] != "snapshot"]
    notes.append(f"schedule: total_steps = the batches main's loop actually takes: per epoch "
                 f"{batches_per_epoch} (get_batches run as written, on key='eval' over a "
                 f"50000-image stand-in so no CUDA augmentation runs; epoch_fraction = "
                 f"`{ast.unparse(frac_assign.value)}`); main's total_train_steps formula gives "
                 f"{total}" + ("" if total == T else " (DIFFERS)") + ". OneCycleLR lr is read "
                 "before each opt.step(), schedulers stepped after, as main does.")
    notes.append(f"loss_per_example = {lpe} = main's loss_batchsize_scaler "
                 f"(`{ast.unparse(lbs.value)}`): hlb's loss is the per-example CE summed and "
                 "scaled by it (the loss_scale_scaler multiply/divide cancels).")
    notes.append("averaging: `ema_copyback` = NetworkEMA: the first step t with "
                 "epoch >= ema_epoch_start and current_steps % every_n_steps == 0 only "
                 "snapshots (snapshot_step); later ones update with decay = "
                 "projected_ema_decay_val*(current_steps/total_train_steps)**decay_pow "
                 "(current_steps is a float) and copy back every parameter except norm weights "
                 "and the whitening conv.")
    g = gmap["non_bias"]
    optimizer_steps = [{
        "group": "non_bias", "w0": w_spec,
        "grads": [spec(100 + t, w_spec["shape"]) for t in range(K)],
        "lr": sched["non_bias"]["lr"][:K], "decay": sched["non_bias"]["decay"][:K],
        "extra": {"optimizer": "torch.optim.SGD(**non_bias_params) + OneCycleLR",
                  "momentum": g["momentum"], "nesterov": g["nesterov"],
                  "weight_decay_arg": g["weight_decay"], "raw_lr": raw,
                  "implementation": sgd_impl(g)},
        "w": ws}]

    # --- whitening
    make_net = ref.top("make_net")
    wcd = next(st for st in make_net.body if isinstance(st, ast.Assign)
               and assigned_names(st) == ["whiten_conv_depth"])
    depth = ref.eval(wcd.value, ns)
    ks = ns["hyp"]["net"]["whitening"]["kernel_size"]
    layer = ns["Conv"](3, depth, kernel_size=ks, padding=0)
    with torch.no_grad():
        ns["init_whitening_conv"](layer, golden(inp["whiten_images"]), num_examples=64,
                                  pad_amount=0, whiten_splits=16)
    eps = ref.eval(ref.top("set_whitening_conv").args.defaults[0], ns)
    whitening = {"function": f"{rel}: init_whitening_conv (get_patches, get_whitening_parameters "
                             "with torch.cov, chunk-mean of eigenvalues and eigenvectors) + "
                             "set_whitening_conv",
                 "images": inp["whiten_images"],
                 "params": {"eps": eps, "kernel_size": ks, "conv_out_channels": depth,
                            "out_channels": 2 * depth, "num_examples": 64, "pad_amount": 0,
                            "whiten_splits": 16, "chunks": 4, "negated_copy": True,
                            "eigen_order": "descending (flip(0) of eigh), averaged over chunks"},
                 "weight": out_tensor(layer.weight), "bias": None}
    notes.append("whitening: layer = the script's Conv(3, 12, kernel_size=2, padding=0) in "
                 "float32 (the run's net is fp16; eigens are computed in float32 either way); "
                 "whiten_splits is a chunk SIZE (split(16)): 64 images -> 4 chunks.")

    # --- tta: SpeedyConvNet's eval-mode flip average around the linear net
    Wt = golden(inp["tta_W"])
    nd = nn.ModuleDict({
        "initial_block": nn.ModuleDict({"whiten": nn.Identity(), "activation": nn.Identity()}),
        "conv_group_1": nn.Identity(), "conv_group_2": nn.Identity(),
        "conv_group_3": nn.Identity(), "pooling": nn.Identity(),
        "linear": linear_net_module(Wt)})
    model = ns["SpeedyConvNet"](nd).eval()
    with torch.no_grad():
        logits = model(golden(inp["tta_images"]))
    tta = {"net": "linear", "W": inp["tta_W"], "images": inp["tta_images"], "level": 1,
           "selective_fraction": None, "logits": out_tensor(logits)}
    notes.append("tta: the script's SpeedyConvNet.forward in eval mode (cat(x, flip(x)), "
                 "0.5*orig + 0.5*flipped) with every block an identity except `linear`.")

    # --- loss
    la = next(st for st in bl.body if isinstance(st, ast.Assign) and assigned_names(st) == ["loss"])
    labels = torch.tensor(inp["labels"])
    ns.update(outputs=golden(inp["loss_logits"]), targets=F.one_hot(labels, 10).float(),
              loss_batchsize_scaler=lpe)
    value = ref.eval(la.value, ns)
    loss = {"logits": inp["loss_logits"], "labels": inp["labels"],
            "smoothing": float(ns["loss_fn"].label_smoothing), "value": float(value.item()),
            "reduction": "sum", "loss_per_example": lpe}
    notes.append(f"loss: main's `loss = {ast.unparse(la.value)}` with one-hot float32 targets "
                 "(the run's are fp16 one-hot).")

    note_hashes(notes, root, [rel])
    doc = header("hlb", REFS["hlb"], rel, notes)
    doc.update({
        "schedule": {"source": f"{rel}: hyp, batchsize, bias_scaler, "
                               "init_split_parameter_dictionaries, main() (two SGDs + two "
                               "OneCycleLR), get_batches",
                     "train_images": N_TRAIN, "batch_size": B, "steps_per_epoch": per_epoch,
                     "total_steps": T, "loss_per_example": lpe, "groups": sched},
        "averaging": {"kind": "ema_copyback", "snapshot_step": snaps[0], "updates": updates},
        "optimizer_steps": optimizer_steps,
        "whitening": whitening, "tta": tta, "loss": loss})
    return doc


# --------------------------------------------------------------------------
# page-final (cifar10-fast new_dawn.py + torch_backend.py + core.py)
# --------------------------------------------------------------------------


def recipe_page(root):
    import collections
    import functools
    import itertools
    import torch
    from torch import nn
    notes = list(COMMON_NOTES)
    core = Ref(root, "core.py", notes)
    tb = Ref(root, "torch_backend.py", notes)
    nd = Ref(root, "new_dawn.py", notes)
    ns = base_ns()
    ns.update(namedtuple=collections.namedtuple, defaultdict=collections.defaultdict,
              singledispatch=functools.singledispatch, partial=functools.partial,
              count=itertools.count, chain=itertools.chain, copy=copy)
    core.define(["PiecewiseLinear", "Const", "flip_lr", "Crop", "FlipLR", "union", "path_iter",
                 "group_by_key", "sep", "normpath", "has_inputs", "pipeline", "build_graph"], ns)
    tb.run(tb.registrations("flip_lr", "torch.Tensor"), ns)
    tb.define(["Network", "Identity", "Add", "AddWeighted", "Mul", "Flatten", "BatchNorm",
               "GhostBatchNorm", "CrossEntropyLoss", "KLLoss", "Correct", "LogSoftmax",
               "label_smoothing_loss", "trainable_params", "nesterov_update", "zeros_like",
               "optimiser", "opt_step", "SGD", "reduce", "MODEL", "LOSS", "VALID_MODEL",
               "OUTPUT", "OPTS", "update_ema", "opt_steps", "forward_tta", "cov", "patches",
               "eigens", "whitening_filter", "chunks", "GPUBatches"], ns)
    nd.define(["batch_norm", "relu", "whitening_block"], ns)
    if not tb.rewrite_legacy_add:
        notes.append("torch_backend.py nesterov_update's `dw.add_(weight_decay, w)` and "
                     "`dw.add_(momentum, v)` use the deprecated add_(Number, Tensor) overload, "
                     "which this torch still accepts (with a warning): run as written, no "
                     "substitution. (Where torch lacks it, this script rewrites them to "
                     "add_(tensor, alpha=number) and says so here.)")
    main = nd.top("main")
    inp = common_inputs()
    K = 3

    w_spec = spec(1, [16, 8, 3, 3])

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(golden(w_spec))
            self.bias = nn.Parameter(torch.zeros(8))

    model = Model()
    ns.update(model=model, train_set={"data": range(N_TRAIN)})
    nd.run(select(main.body, names=["epochs", "ema_epochs", "lr_schedule", "batch_size",
                                    "train_transforms", "train_batches", "is_bias", "opts",
                                    "loss"]), ns)
    notes.append("new_dawn.py main(): `model` is a stand-in module with one non-bias parameter "
                 "`weight` [16,8,3,3] and one `bias` [8]; train_set is a 50000-long stand-in "
                 "(GPUBatches.__init__/__len__ only take its length). epochs, lr_schedule "
                 "(PiecewiseLinear), batch_size, GPUBatches, is_bias, the two SGD param_schedules "
                 "and the loss are main's own code; steps run through torch_backend's own "
                 "reduce/opt_steps/opt_step (step_number += 1 before the schedule is read, so "
                 "step s uses step_number s+1) and a fresh update_ema per epoch, as "
                 "train_epoch does.")
    B = ns["batch_size"]
    per_epoch = len(ns["train_batches"])
    epochs = ns["epochs"]
    opts = ns["opts"]
    real_update = ns["nesterov_update"]
    gnames = ["weights", "bn_biases"]
    assert len(opts) == 2 and opts[0]["weights"][0] is model.weight
    sched = {g: {"kind": "sgd", "lr": [], "decay": []} for g in gnames}
    raw, ws, extra_m = [], [], []
    cur = {"s": 0}

    def recorder(gname):
        def update(w, dw, v, lr, weight_decay, momentum):
            sched[gname]["lr"].append(float(lr) * B * 1.0)
            sched[gname]["decay"].append(float(lr) * float(weight_decay))
            if gname == "weights" and cur["s"] < K:
                raw.append(float(lr))
                extra_m.append((float(momentum), float(weight_decay)))
                real_update(w, dw, v, lr, weight_decay, momentum)
                ws.append(out_tensor(w))
        return update

    for o, g in zip(opts, gnames):
        o["update"] = recorder(g)

    def set_grads(batch, state):
        if not batch:
            return
        model.weight.grad = (golden(spec(100 + cur["s"], w_spec["shape"])) if cur["s"] < K
                             else torch.zeros_like(model.weight))
        model.bias.grad = torch.zeros_like(model.bias)

    class Holder(nn.Module):
        def __init__(self, v):
            super().__init__()
            self.register_buffer("x", torch.tensor([v], dtype=torch.float64))

    live, avg = Holder(1.0), Holder(0.0)
    events = []

    def watch(batch, state):
        if not batch:
            return
        cur["s"] += 1
        if avg.x.item() != 0.0:
            events.append(cur["s"])
            avg.x.zero_()

    ema_call = find_call(main, lambda c: isinstance(c.func, ast.Name) and c.func.id == "update_ema")
    state = {ns["OPTS"]: opts, ns["MODEL"]: live, ns["VALID_MODEL"]: avg}
    rho = None
    for epoch in range(epochs):
        ema = nd.eval(ema_call, ns)   # a fresh update_ema per epoch, as main's loop builds it
        cl = dict(zip(ema.__code__.co_freevars, (c.cell_contents for c in ema.__closure__)))
        rho = cl["rho"]
        batches = [{"batch": i} for i in range(per_epoch)]
        ns["reduce"](batches, state, (set_grads, ns["opt_steps"], ema, watch))
    T = cur["s"]
    assert T == epochs * per_epoch
    updates = [[t, rho] for t in events]
    notes.append(f"averaging: `ema_eval`: main passes `{ast.unparse(ema_call)}` inside the epoch "
                 "loop, so its counter restarts every epoch: it fires on batches 0, 5, 10, ... "
                 "of each epoch, after that batch's optimiser step, with rho = momentum**"
                 "update_freq; the average is VALID_MODEL (a deepcopy of the initial model, so "
                 "snapshot_step is null), used for evaluation only (no copy-back); it averages "
                 "every floating state_dict entry including BN running stats.")
    notes.append("page weights: nesterov_update(w, dw, v, lr, weight_decay, momentum): "
                 "dw = -lr*(dw + wd*w); v = m*v + dw; w += dw + m*v (lr inside the momentum "
                 "buffer); lr = lr_schedule(step/len(train_batches))/batch_size for weights, "
                 "*64/batch_size for biases; weight_decay 5e-4*batch_size (weights) and "
                 "5e-4*batch_size/64 (biases).")
    optimizer_steps = [{
        "group": "weights", "w0": w_spec,
        "grads": [spec(100 + t, w_spec["shape"]) for t in range(K)],
        "lr": sched["weights"]["lr"][:K], "decay": sched["weights"]["decay"][:K],
        "extra": {"optimizer": "torch_backend.nesterov_update via opt_step (main's opts[0])",
                  "momentum": extra_m[0][0], "weight_decay_arg": extra_m[0][1],
                  "raw_lr": raw, "step_number": list(range(1, K + 1)),
                  "in_place_grad": True, "dtype": "float32"},
        "w": ws}]

    # --- whitening: eigens(patches(x)) + new_dawn's whitening_block (whitening_filter)
    Lam, V = ns["eigens"](ns["patches"](golden(inp["whiten_images"])))
    blk = ns["whitening_block"](3, 64, Λ=Lam, V=V)
    wf = blk["whiten"]
    eps = nd.eval(nd.top("whitening_block").args.defaults[-1], ns)
    whitening = {"function": "torch_backend.py: eigens(patches(images)) (cov = X/sqrt(n-1), "
                             "no mean subtraction) + new_dawn.py whitening_block -> "
                             "whitening_filter(Λ, V, eps)",
                 "images": inp["whiten_images"],
                 "params": {"eps": eps, "kernel_size": 3, "padding": 1, "out_channels": 27,
                            "negated_copy": False, "eigen_order": "descending (flip(0))"},
                 "weight": out_tensor(wf.weight), "bias": None}

    # --- tta: forward_tta([(lambda x: x), flip_lr]) on the linear net
    W = golden(inp["tta_W"])
    lin = linear_net_module(W)

    class DictNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, inputs):
            return {"logits": self.lin(inputs["input"])}

    tta_call = find_call(main, lambda c: isinstance(c.func, ast.Name) and c.func.id == "forward_tta")
    step = nd.eval(tta_call, ns)
    st = {ns["MODEL"]: DictNet(), ns["VALID_MODEL"]: DictNet(), ns["LOSS"]: (lambda d: d)}
    with torch.no_grad():
        res = step({"input": golden(inp["tta_images"]), "target": None}, st)
    tta = {"net": "linear", "W": inp["tta_W"], "images": inp["tta_images"], "level": 1,
           "selective_fraction": None, "logits": out_tensor(res[ns["OUTPUT"]]["logits"])}
    notes.append(f"tta: main's `{ast.unparse(tta_call)}` step on VALID_MODEL (the linear net), "
                 "the loss replaced by identity to read the averaged logits.")

    # --- loss
    labels = torch.tensor(inp["labels"])
    outd = ns["loss"]({"logits": golden(inp["loss_logits"]), "target": labels})
    value = outd[ns["LOSS"]].sum()
    la = next(s for s in main.body if isinstance(s, ast.Assign) and assigned_names(s) == ["loss"])
    smoothing = ast.literal_eval(la.value.args[0])
    loss = {"logits": inp["loss_logits"], "labels": inp["labels"], "smoothing": smoothing,
            "value": float(value.item()), "reduction": "sum", "loss_per_example": 1.0}
    notes.append(f"loss: main's `{ast.unparse(la.value)}` node graph (log_softmax; "
                 "(1-a)*nll + a*mean(-logp)), output 'loss' summed as torch_backend.backward does.")

    note_hashes(notes, root, ["new_dawn.py", "torch_backend.py", "core.py"])
    doc = header("page-final", REFS["page"], "new_dawn.py", notes)
    doc.update({
        "schedule": {"source": "new_dawn.py main(): PiecewiseLinear lr_schedule, the two SGD "
                               "param_schedule lambdas, GPUBatches; torch_backend.py: opt_step, "
                               "reduce, update_ema",
                     "train_images": N_TRAIN, "batch_size": B, "steps_per_epoch": per_epoch,
                     "total_steps": T, "loss_per_example": 1.0, "groups": sched},
        "averaging": {"kind": "ema_eval", "snapshot_step": None, "updates": updates},
        "optimizer_steps": optimizer_steps,
        "whitening": whitening, "tta": tta, "loss": loss})
    return doc


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def _scalar(x):
    return x is None or isinstance(x, (bool, int, float, str))


def dumps(obj, ind=0):
    pad, pad1 = " " * ind, " " * (ind + 1)
    if _scalar(obj):
        if isinstance(obj, float):
            assert math.isfinite(obj), "non-finite value"
        return json.dumps(obj)
    if isinstance(obj, (list, tuple)):
        if all(_scalar(x) for x in obj):
            if any(isinstance(x, str) for x in obj) and sum(len(str(x)) for x in obj) > 100:
                return "[\n" + ",\n".join(pad1 + dumps(x) for x in obj) + "\n" + pad + "]"
            return "[" + ", ".join(dumps(x) for x in obj) + "]"
        if all(isinstance(x, (list, tuple)) and all(_scalar(y) for y in x) for x in obj):
            return "[\n" + ",\n".join(pad1 + dumps(x) for x in obj) + "\n" + pad + "]"
        return "[\n" + ",\n".join(pad1 + dumps(x, ind + 1) for x in obj) + "\n" + pad + "]"
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad1}{json.dumps(k)}: {dumps(v, ind + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    raise TypeError(type(obj))


def summarise(doc):
    sch = doc["schedule"]
    lines = [f"{doc['recipe']}: batch {sch['batch_size']}, {sch['steps_per_epoch']} steps/epoch, "
             f"{sch['total_steps']} steps"]
    for g, v in sch["groups"].items():
        lines.append(f"    {g:12s} {v['kind']:4s} lr {v['lr'][0]:.6g} -> {v['lr'][-1]:.6g}   "
                     f"decay {v['decay'][0]:.6g} -> {v['decay'][-1]:.6g}")
    if "whiten_bias_steps" in doc:
        lines.append(f"    whiten_bias_steps {doc['whiten_bias_steps']}")
    if "averaging" in doc:
        a = doc["averaging"]
        u = a["updates"]
        lines.append(f"    averaging {a['kind']}: snapshot {a['snapshot_step']}, {len(u)} updates "
                     f"(first {u[0]}, last {u[-1]})")
    if "renorm_steps" in doc:
        r = doc["renorm_steps"]
        lines.append(f"    renorm_steps: {len(r)} over {sch['total_steps']} steps"
                     + (f" ({r[:6]}...{r[-2:]})" if len(r) > 8 else f" {r}"))
    lines.append(f"    loss value {doc['loss']['value']:.6f}")
    return "\n".join(lines)


def ffcv_config(path: Path):
    """FFCV's two-level YAML configs (`section:` then `  key: value` lines), as fastargs reads them."""
    cfg, section = {}, None
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.strip().partition(":")
        if not line.startswith(" "):
            section = key
            continue
        value = value.strip()
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                pass
        cfg[f"{section}.{key}"] = value
    return cfg


def _strtobool(v):
    """distutils.util.strtobool (fit.py's argument type; distutils left Python in 3.12)."""
    v = v.lower()
    if v in ("y", "yes", "t", "true", "on", "1"):
        return 1
    if v in ("n", "no", "f", "false", "off", "0"):
        return 0
    raise ValueError(f"invalid truth value {v!r}")


def fujitsu_params(path: Path):
    """The command line JobScripts/parameters builds: its `PARAMS=( ... )` array, one
    `--name "value"  # comment` a line, as bash reads it."""
    import shlex
    text = path.read_text()
    body = text[text.index("PARAMS=(") + len("PARAMS=("):]
    body = body[:body.index("\n)")]
    argv = []
    for line in body.splitlines():
        argv += shlex.split(line, comments=True)
    return argv


def recipe_fujitsu(root):
    """Fujitsu's ResNet-50 lr as its MLPerf v0.6 code computes it, step by step: fit.py's
    own argument parser reads JobScripts/parameters; fit.py's `_get_lr_scheduler` builds
    MXNet's MultiFactorScheduler (lr_scheduler.py), whose linear warm-up is read at the
    optimiser's update count; fit.py's `fit` builds the explorer's parameters, and the
    explorer (explorer.py) is driven each iteration as `mlperf_fit` drives it; the lr the
    LARS kernel takes is the scheduler's times the explorer's `best_coeff`."""
    import argparse as _argparse
    import logging
    import os
    import re
    notes = []
    fit = Ref(root, FUJITSU + "JobScripts/image_classification/common/fit.py", notes)
    sched = Ref(root, FUJITSU + "python/mxnet/lr_scheduler.py", notes)
    expl = Ref(root, FUJITSU + "python/mxnet/explorer/explorer.py", notes)
    note_hashes(notes, root, REFS["fujitsu"]["files"])
    sns = {"logging": logging, "cos": math.cos, "pi": math.pi}
    sched.define(["LRScheduler", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler"], sns)
    ens = {"logging": logging, "math": math, "warnings": warnings, "os": os}
    expl.define(["Explorer", "register", "Linear"], ens)
    ns = {"math": math, "re": re, "logging": logging, "strtobool": _strtobool,
          "mx_resnet_print": lambda **kw: None,
          "mlperf_constants": types.SimpleNamespace(OPT_BASE_LR="", OPT_LR_WARMUP_EPOCHS=""),
          "mx": types.SimpleNamespace(lr_scheduler=types.SimpleNamespace(
              MultiFactorScheduler=sns["MultiFactorScheduler"], PolyScheduler=sns["PolyScheduler"]))}
    notes.append("fit.py's `from distutils.util import strtobool` read as an equal function "
                 "(distutils left Python in 3.12); mx_resnet_print (MLPerf logging) a no-op")
    fit.define(["add_fit_args", "get_epoch_size", "_get_lr_scheduler"], ns)
    parser = _argparse.ArgumentParser()
    ns["add_fit_args"](parser)
    # common/data.py's --num-examples, defaulted by train_imagenet.py's set_defaults.
    parser.add_argument("--num-examples", type=int, default=IMAGENET_TRAIN)
    argv = fujitsu_params(Path(root) / FUJITSU / "JobScripts/parameters")
    # The job script substitutes its seed for `_SEED_`; no seed reaches the lr.
    argv = ["0" if a == "_SEED_" else a for a in argv]
    notes.append("the parameters' `_SEED_` placeholders (the job script's seed) read as 0")
    args, _unknown = parser.parse_known_args(argv)
    notes.append("JobScripts/parameters' PARAMS array parsed by fit.py's add_fit_args parser "
                 "(the data and network options it does not define left out); num_examples "
                 "1281167 as train_imagenet.py's set_defaults")
    # BatchBase: 512 nodes x 4 processes (one a GPU).
    kv = types.SimpleNamespace(num_workers=2048)
    notes.append("kv.num_workers = 2048: JobScripts/BatchBase's 512 nodes of 4 processes, one a GPU")
    ns.update(args=args, kv=kv)
    fit_def = fit.top("fit")
    stmts = select(fit_def.body, names=("epoch_size", "lr", "total_steps", "warmup_steps",
                                         "explorer_params"),
                   extra=lambda st: isinstance(st, ast.If) and "decay_steps" in ast.unparse(st.test))
    fit.run(stmts, ns)
    ep = ns["explorer_params"]

    class Optimiser:
        """What the explorer sets on MXNet's SGD: the coefficients the LARS kernel reads."""
        best_coeff = best_wd_coeff = 1.0
        def _set_tmp_coeff(self, c): pass
        def _set_tmp_wd_coeff(self, c): pass
        def _set_cg(self, c): pass
        def _set_best_coeff(self, c): self.best_coeff = c
        def _set_best_wd_coeff(self, c): self.best_wd_coeff = c

    opt = Optimiser()
    explorer = ens["Explorer"].create_explorer(name=args.explorer, optimizer=opt,
                                               explorer_params=ep)
    notes.append("the explorer created as mlperf_fit creates it, in one process (rank 0's "
                 "coefficients, which set_best_coeff(0) gives every rank)")
    scheduler = ns["lr_scheduler"]
    num_update = 0
    lr, wd = [], []
    for epoch in range(args.num_epochs):
        for nbatch in range(ep["epoch_size"]):
            # mlperf_fit's order, smooth_decay on.
            if ep["smooth_decay"]:
                explorer.apply_lr_decay_iter()
                explorer.apply_wd_decay_iter()
            explorer.apply_wd_warmup()
            explorer.apply_burn_in()
            explorer.set_best_coeff(0)
            explorer.set_best_wd_coeff(0)
            # Optimizer._update_count, then _get_lrs at num_update; the kernel's
            # lr * best_coeff and wd * best_wd_coeff (wd passed as args.wd * args.lr).
            num_update += 1
            lr.append(float(scheduler(num_update)) * opt.best_coeff)
            wd.append(args.wd * args.lr * opt.best_wd_coeff)
    notes.append("lr[k] = MultiFactorScheduler(num_update = k + 1) * best_coeff after the "
                 "explorer's k-th iteration; decay[k] = wd * lr_peak * best_wd_coeff, the "
                 "coefficient of w in the kernel's momentum update (before the LARS ratio)")
    return {"recipe": "fujitsu-rn50",
            "reference": {"repo": REFS["fujitsu"]["repo"], "commit": REFS["fujitsu"]["commit"],
                          "file": FUJITSU + "JobScripts/image_classification/common/fit.py"},
            "generator": GENERATOR, "notes": notes,
            "gpus": kv.num_workers, "batch_per_gpu": args.batch_size,
            "global_batch": kv.num_workers * args.batch_size, "epochs": args.num_epochs,
            "steps_per_epoch": ep["epoch_size"], "warmup_steps": ep["warmup_step"],
            "decay_steps": ep["decay_steps"], "lr_peak": args.lr, "power": args.lr_decay,
            "end_lr_ratio": args.end_lr_ratio, "momentum": args.mom, "wd": args.wd,
            "label_smoothing": args.smooth_alpha, "lr": lr, "decay": wd}


def recipe_ffcv(root):
    """FFCV's lr at every epoch and at every step of some epochs, and its resolution of every epoch, from its own
    functions: `get_cyclic_lr`, `ImageNetTrainer.get_resolution` and the lr lines of
    `train_loop`, their `@param` decorators dropped and the config's values passed in."""
    import numpy as np
    notes = ["@param decorators removed; the config's values are passed as the arguments "
             "fastargs would bind (lr.lr, lr.lr_peak_epoch, training.epochs, resolution.*)"]
    ref = Ref(root, "train_imagenet.py", notes)

    def undecorated(node):
        node = copy.deepcopy(node)
        node.decorator_list = []
        return node

    ns = {"np": np}
    ref.run([undecorated(ref.top("get_cyclic_lr"))], ns)
    ref.run([undecorated(ref.method("ImageNetTrainer", "get_resolution"))], ns)
    train_loop = ref.method("ImageNetTrainer", "train_loop")
    lr_lines = select(train_loop.body, names=("lr_start", "lr_end", "iters", "lrs"))
    configs = {}
    for rel in REFS["ffcv"]["files"][1:]:
        c = ffcv_config(Path(root) / rel)
        epochs, lr = c["training.epochs"], c["lr.lr"]
        peak = c.get("lr.lr_peak_epoch", 2)
        world = c.get("dist.world_size", 1)
        batch = c["training.batch_size"] * world
        iters = IMAGENET_TRAIN // batch

        class Trainer:
            def get_lr(self, epoch):
                return ns["get_cyclic_lr"](epoch, lr, epochs, peak)

            train_loader = range(iters)

        # Every step of the first three epochs (the warm-up to the peak), the ramp's
        # and the last: the rest interpolate the same way between the epochs' values.
        kept = sorted({0, 1, 2, int(c["resolution.end_ramp"]) - 1, epochs - 1})
        lrs = {}
        for epoch in kept:
            loop_ns = {"np": np, "self": Trainer(), "epoch": epoch}
            ref.run(lr_lines, loop_ns)
            lrs[str(epoch)] = [float(v) for v in loop_ns["lrs"]]
        lr_epoch = [float(ns["get_cyclic_lr"](e, lr, epochs, peak)) for e in range(epochs + 1)]
        res = [int(ns["get_resolution"](None, e, c["resolution.min_res"], c["resolution.max_res"],
                                        c["resolution.end_ramp"], c["resolution.start_ramp"]))
               for e in range(epochs)]
        configs[Path(rel).stem] = {
            "epochs": epochs, "lr": lr, "lr_peak_epoch": peak, "batch_size": batch,
            "steps_per_epoch": iters, "min_res": c["resolution.min_res"],
            "max_res": c["resolution.max_res"], "start_ramp": c["resolution.start_ramp"],
            "end_ramp": c["resolution.end_ramp"], "val_res": c["validation.resolution"],
            "resolution": res, "lr_at_epoch": lr_epoch, "lr_steps_of_epoch": lrs,
        }
    return {"recipe": "ffcv", "generator": GENERATOR,
            "source": f"{REFS['ffcv']['repo']}@{REFS['ffcv']['commit']}",
            "sha256": {rel: sha256(Path(root) / rel) for rel in REFS["ffcv"]["files"]},
            "notes": notes, "imagenet_train_images": IMAGENET_TRAIN, "configs": configs}


def recipe_fastai(root):
    """fast.ai's ImageNet phases (the 18-minute DAWNBench entry): every schedule of
    train.py, the lr of steps through its own `Scheduler.get_lr` (train_imagenet_nv.py),
    and each epoch's side, global batch, crop scale and validation as its DataManager
    sets them."""
    import collections.abc
    notes = []
    launcher = Ref(root, "train.py", notes)
    names = ("NUM_GPUS", "lr", "scale_224", "scale_288", "bs", "bs_scale", "one_machine",
             "four_machines", "eight_machines", "sixteen_machines", "schedules")
    ns = {}
    launcher.run(select(launcher.tree.body, names=names), ns)
    trainer = Ref(root, "training/train_imagenet_nv.py", notes)
    notes.append("listify's `collections.Iterable` (removed in Python 3.10) read as "
                 "`collections.abc.Iterable`")
    tns = {"collections": types.SimpleNamespace(Iterable=collections.abc.Iterable),
           "copy": copy}
    trainer.define(["listify", "Scheduler"], tns)
    notes.append("the phases passed as train.py's launcher does: str(list) on the command "
                 "line, eval(args.phases) in train_imagenet_nv.py; split as its main does: "
                 "phases with 'bs' to the DataManager, with 'lr' to the Scheduler")
    notes.append("each epoch's data as DataManager.set_epoch sets it: the phase whose 'ep' "
                 "is the epoch; keep_dl changes the batch only; otherwise get_loaders' "
                 "defaults min_scale=0.08, rect_val=False; validation Resize(int(sz*1.14)) "
                 "then CenterCrop(sz) or rectangles (dataloader.py)")
    notes.append("steps an epoch: floor(1281167 / global batch) (tricklab's drop_last; the "
                 "reference keeps the last partial batch), the batch_tot Scheduler.get_lr "
                 "is given, with batch_curr = i + 1 as train() passes it")
    schedules = {}
    for machines, phases in ns["schedules"].items():
        phases = eval(str(phases))
        gpus = ns["NUM_GPUS"] * machines
        data = [copy.deepcopy(p) for p in phases if "bs" in p]
        sched = tns["Scheduler"](types.SimpleNamespace(param_groups=[]),
                                 [copy.deepcopy(p) for p in phases if "lr" in p])
        epochs = sched.tot_epochs
        cur, per_epoch, lr_first, starts = {}, [], [], set()
        for epoch in range(epochs):
            p = next((p for p in data if p["ep"] == epoch), None)
            if p is not None:
                starts.add(epoch)
                if p.get("keep_dl", False):
                    cur["bs"] = p["bs"]
                else:
                    cur = {"sz": p["sz"], "bs": p["bs"], "min_scale": p.get("min_scale", 0.08),
                           "rect_val": p.get("rect_val", False)}
            batch = cur["bs"] * gpus
            steps = IMAGENET_TRAIN // batch
            per_epoch.append({"epoch": epoch, "side": cur["sz"], "batch": batch, "steps": steps,
                              "min_scale": cur["min_scale"], "rect_val": cur["rect_val"],
                              "val_resize": int(cur["sz"] * 1.14)})
            lr_first.append(float(sched.get_lr(epoch, 1, steps)))
        for p in sched.phases:
            starts.update(int(e) for e in p["ep"] if e < epochs)
        kept = sorted(starts | {0, 1, epochs - 1})
        lr_steps = {str(e): [float(sched.get_lr(e, i + 1, per_epoch[e]["steps"]))
                             for i in range(per_epoch[e]["steps"])] for e in kept}
        # The schedule's own `lr`: what its first phase starts from.
        schedules[str(machines)] = {"gpus": gpus, "epochs": epochs,
                                    "lr": float(sched.phases[0]["lr"][0]),
                                    "per_epoch": per_epoch, "lr_first_step": lr_first,
                                    "lr_steps_of_epoch": lr_steps}
    return {"recipe": "fastai", "generator": GENERATOR,
            "source": f"{REFS['fastai']['repo']}@{REFS['fastai']['commit']}",
            "sha256": {rel: sha256(Path(root) / rel) for rel in REFS["fastai"]["files"]},
            "notes": notes, "imagenet_train_images": IMAGENET_TRAIN, "schedules": schedules}


# --------------------------------------------------------------------------
# Optimiser state across batch changes (issue 49, item 3)
# --------------------------------------------------------------------------

# fast.ai's phases change the batch (and tricklab's summed loss's scale with it):
# halved, then quadrupled, with the lr moving too.
OPTIM_BATCHES = [8, 8, 4, 4, 16, 16]
OPTIM_LRS = [0.1, 0.1, 0.05, 0.05, 0.2, 0.2]


def _lars_step(ps, state, lr, momentum=0.9, wd=5e-4, eta=0.001):
    """LARS as You et al. 2017 (arXiv 1708.03888) Algorithm 1 writes it, on the mean
    loss's gradient: local lr = eta·||w|| / (||g|| + wd·||w||) (1 where a norm is 0;
    1-D tensors get 1, tricklab's adapt_1d = false), v = m·v + lr·local·(g + wd·w),
    w -= v."""
    import torch
    with torch.no_grad():
        for i, w in enumerate(ps):
            g = w.grad
            wn, gn = w.norm(), g.norm()
            local = eta * wn / (gn + wd * wn) if w.dim() > 1 and wn > 0 and gn > 0 else 1.0
            v = state.setdefault(i, torch.zeros_like(w))
            v.mul_(momentum).add_(lr * local * (g + wd * w))
            w.sub_(v)


def _lamb_step(ps, state, lr, t, betas=(0.9, 0.999), eps=1e-6, wd=0.01):
    """LAMB as You et al. 2019 (arXiv 1904.00962) Algorithm 2 writes it, with Adam's
    bias correction: u = m_hat / (sqrt(v_hat) + eps) + wd·w, w -= lr·(||w|| / ||u||)·u
    (the ratio 1 where a norm is 0)."""
    import torch
    b1, b2 = betas
    with torch.no_grad():
        for i, w in enumerate(ps):
            g = w.grad
            m, v = state.setdefault(i, (torch.zeros_like(w), torch.zeros_like(w)))
            m.mul_(b1).add_((1 - b1) * g)
            v.mul_(b2).add_((1 - b2) * g * g)
            u = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps) + wd * w
            wn, un = w.norm(), u.norm()
            ratio = wn / un if wn > 0 and un > 0 else 1.0
            w.sub_(lr * ratio * u)


def recipe_optimisers():
    """Each optimiser that keeps state, stepped on a mean loss whose batch changes
    twice: torch.optim.SGD (heavy ball and Nesterov) and torch.optim.AdamW as PyTorch
    runs them, LARS and LAMB as their papers write them. Float64 throughout."""
    import torch
    import torch.nn.functional as F
    n, d, k = sum(OPTIM_BATCHES), 5, 3
    u = uniforms(4901, n * d + n + k * d + k)
    X = torch.tensor([2 * x - 1 for x in u[:n * d]], dtype=torch.float64).view(n, d)
    y = torch.tensor([int(x * k) for x in u[n * d:n * d + n]], dtype=torch.int64)
    W0 = torch.tensor([x - 0.5 for x in u[n * d + n:n * d + n + k * d]],
                      dtype=torch.float64).view(k, d)
    b0 = torch.tensor([x - 0.5 for x in u[n * d + n + k * d:]], dtype=torch.float64)
    runs = {
        # fused=True: tricklab's SGD is the fused kernel (native::fused_sgd).
        "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=5e-4,
                                          fused=True),
        "nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=5e-4,
                                               nesterov=True, fused=True),
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.1, betas=(0.9, 0.999), eps=1e-8,
                                              weight_decay=0.01),
        "lars": None,
        "lamb": None,
    }
    out = {}
    for name, make in runs.items():
        W = W0.clone().requires_grad_(True)
        b = b0.clone().requires_grad_(True)
        opt = make([W, b]) if make else None
        state, steps, at = {}, [], 0
        for t, (B, lr) in enumerate(zip(OPTIM_BATCHES, OPTIM_LRS), start=1):
            xb, yb = X[at:at + B], y[at:at + B]
            at += B
            for w in (W, b):
                w.grad = None
            F.cross_entropy(xb @ W.T + b, yb).backward()  # the batch's mean loss
            if opt:
                for g in opt.param_groups:
                    g["lr"] = lr
                opt.step()
            elif name == "lars":
                _lars_step([W, b], state, lr)
            else:
                _lamb_step([W, b], state, lr, t)
            steps.append({"weight": W.detach().view(-1).tolist(),
                          "bias": b.detach().view(-1).tolist()})
        out[name] = steps
    return {
        "what": "weights after each step of a mean-loss linear classifier whose batch "
                "changes (x1/2, then x4): torch.optim.SGD (fused), its Nesterov form and "
                "torch.optim.AdamW as PyTorch " + torch.__version__ + " runs them; LARS "
                "(You et al. 2017, Algorithm 1) and LAMB (You et al. 2019, Algorithm 2) as "
                "their papers write them; float64",
        "hyper": {"sgd": "momentum 0.9, weight decay 5e-4",
                  "nesterov": "momentum 0.9, weight decay 5e-4, nesterov",
                  "adamw": "betas (0.9, 0.999), eps 1e-8, weight decay 0.01",
                  "lars": "momentum 0.9, weight decay 5e-4, eta 0.001, 1-D tensors trust 1",
                  "lamb": "betas (0.9, 0.999), eps 1e-6, weight decay 0.01"},
        "batches": OPTIM_BATCHES,
        "lr": OPTIM_LRS,
        "x": X.view(-1).tolist(),
        "y": y.tolist(),
        "shape": [n, d, k],
        "weight0": W0.view(-1).tolist(),
        "bias0": b0.view(-1).tolist(),
        "steps": out,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--airbench", type=Path,
                    help="KellerJordan/cifar10-airbench at f1c599c")
    ap.add_argument("--speedrun", type=Path,
                    help="hiverge/cifar10-speedrun at 5cd49b1")
    ap.add_argument("--hlb", type=Path, help="tysam-code/hlb-CIFAR10 at ad103b4")
    ap.add_argument("--page", type=Path, help="davidcpage/cifar10-fast at f79e8b8")
    ap.add_argument("--ffcv", type=Path, help="libffcv/ffcv-imagenet at 4dd291a (optional)")
    ap.add_argument("--fastai", type=Path, help="cybertronai/imagenet18 at 25dad42 (optional)")
    ap.add_argument("--fujitsu", type=Path,
                    help="mlcommons/training_results_v0.6 at f312518 (optional)")
    ap.add_argument("--only", choices=["fujitsu", "ffcv", "optimisers"],
                    help="make that one file alone (the other references not needed; "
                         "optimisers.json needs none)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "golden")
    ap.add_argument("--check", action="store_true",
                    help="only verify the reference files exist and print their sha256")
    args = ap.parse_args(argv)
    if args.only == "optimisers":
        import torch
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "optimisers.json"
        path.write_text(dumps(recipe_optimisers()) + "\n")
        print(f"wrote {path}")
        return
    if args.only and not getattr(args, args.only):
        ap.error(f"--only {args.only} needs --{args.only}")
    if not args.only:
        for key in ("airbench", "speedrun", "hlb", "page"):
            if getattr(args, key) is None:
                ap.error(f"--{key} is required (or --only NAME)")

    roots = {} if args.only else {"airbench": args.airbench, "speedrun": args.speedrun,
                                  "hlb": args.hlb, "page": args.page}
    if args.ffcv:
        roots["ffcv"] = args.ffcv
    if args.fastai:
        roots["fastai"] = args.fastai
    if args.fujitsu:
        roots["fujitsu"] = args.fujitsu
    if args.only:
        roots = {args.only: roots[args.only]}
    ok = True
    for key, root in roots.items():
        r = root.resolve()
        if r == REPO_ROOT or REPO_ROOT in r.parents:
            sys.exit(f"--{key} {root}: inside this repository. Point it at a fetched copy "
                     "outside the repo; reference code must never be copied into tricklab.")
        for rel in REFS[key]["files"]:
            p = root / rel
            if not p.is_file():
                print(f"MISSING  --{key} {p}")
                ok = False
                continue
            h = sha256(p)
            pin = PINNED_SHA256.get(rel)
            tag = "pinned" if pin == h else "DIFFERS from pinned"
            print(f"{h}  {REFS[key]['repo']}@{REFS[key]['commit']}  {rel}  ({tag})")
    if not ok:
        sys.exit("reference files missing")
    if args.check:
        return

    import torch
    torch.manual_seed(0)
    warnings.filterwarnings("ignore", message=".*add_.*deprecated.*")
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [("page-final", recipe_page, args.page),
            ("airbench94", recipe_airbench94, args.airbench),
            ("airbench94-muon", recipe_muon, args.airbench),
            ("hiverge-speedrun", recipe_speedrun, args.speedrun),
            ("hlb", recipe_hlb, args.hlb)]
    if args.ffcv and args.only == "ffcv":
        doc = recipe_ffcv(args.ffcv)
        path = args.out / "ffcv.json"
        path.write_text(dumps(doc) + "\n")
        print(f"wrote {path}: {len(doc['configs'])} configs")
    if args.fujitsu and args.only in (None, "fujitsu"):
        doc = recipe_fujitsu(args.fujitsu)
        path = args.out / "fujitsu.json"
        path.write_text(dumps(doc) + "\n")
        print(f"wrote {path}: {len(doc['lr'])} steps, peak {max(doc['lr'])}, last {doc['lr'][-1]}")
    if args.only:
        return
    path = args.out / "optimisers.json"
    path.write_text(dumps(recipe_optimisers()) + "\n")
    print(f"wrote {path}")
    if args.fastai:
        doc = recipe_fastai(args.fastai)
        path = args.out / "fastai.json"
        path.write_text(dumps(doc) + "\n")
        print(f"wrote {path}: " + ", ".join(
            f"{m} machines {v['epochs']} epochs, lr {v['lr']}" for m, v in doc["schedules"].items()))
    if args.ffcv:
        doc = recipe_ffcv(args.ffcv)
        path = args.out / "ffcv.json"
        path.write_text(dumps(doc) + "\n")
        res = {k: v["resolution"] for k, v in doc["configs"].items()}
        print(f"wrote {path}: resolutions {res}")
    for name, fn, root in jobs:
        doc = fn(root)
        assert doc["recipe"] == name
        path = args.out / f"{name}.json"
        text = dumps(doc) + "\n"
        path.write_text(text)
        print(f"wrote {path} ({len(text) / 1e6:.2f} MB)")
        print(summarise(doc))
        if name == "hiverge-speedrun" and len(doc["renorm_steps"]) != 37:
            print(f"    NOTE: {len(doc['renorm_steps'])} renormalisations, not the 37 expected")


if __name__ == "__main__":
    main()
