#!/usr/bin/env python3
"""What a CUDA graph saves per launch on this machine's torch and CUDA (issue 48).

    python3 scripts/bench/graph_launch.py [--kernels 200] [--reps 200]

Times the same chain of small kernels (an in-place add on a 1,024-element
tensor, so each kernel's work is far under its launch) three ways, with CUDA
events, median of --reps: launched one by one from Python, captured once as a
torch.cuda.CUDAGraph and replayed, and the graph's replay alone with the chain
empty (one kernel), which is cudaGraphLaunch's own cost. pytorch#174575
reports graph launches slower under CUDA 13 in torch 2.10; this measures ours.
Prints one JSON line.
"""
import argparse
import json
import statistics

import torch


def timed(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3)  # microseconds
    return statistics.median(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kernels", type=int, default=200)
    p.add_argument("--reps", type=int, default=200)
    a = p.parse_args()
    x = torch.randn(1024, device="cuda")

    def chain(n):
        def f():
            for _ in range(n):
                x.add_(1e-7)
        return f

    def graphed(n):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            chain(n)()  # warm-up on the side stream, as capture wants
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            chain(n)()
        return g.replay

    for _ in range(3):
        chain(a.kernels)()
    torch.cuda.synchronize()
    eager_us = timed(chain(a.kernels), a.reps)
    graph_us = timed(graphed(a.kernels), a.reps)
    one_us = timed(graphed(1), a.reps)
    eager_one_us = timed(chain(1), a.reps)
    print(json.dumps({
        "torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0),
        "kernels": a.kernels, "reps": a.reps,
        "eager_us": round(eager_us, 2), "graph_replay_us": round(graph_us, 2),
        "eager_per_kernel_us": round(eager_us / a.kernels, 3),
        "graph_per_kernel_us": round(graph_us / a.kernels, 3),
        "graph_of_one_kernel_us": round(one_us, 2), "one_kernel_eager_us": round(eager_one_us, 2),
    }))


if __name__ == "__main__":
    main()
