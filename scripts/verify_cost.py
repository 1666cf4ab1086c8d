#!/usr/bin/env python3
"""What a verify pass of n tokens costs the target next to one plain step, in two patterns:

- *same*: n tokens decoded, rolled back, decoded again, always the same n (what a benchmark of one batch size
  sees; llama.cpp's CUDA backend replays a captured graph when nothing in the batch's shape changed);
- *alternating*: one plain step, then n tokens, then one plain step … (what speculative decoding does: the
  batch's shape changes at every pass, so a backend that captures graphs must capture or update them again).

``python scripts/verify_cost.py [PAIR] [--gpu-layers N] [--reps R]`` prints the median milliseconds per pass and
its ratio to a plain step (v(n), the figure auto K fits), for n = 1, 2, 3, 5, 9, 17. Run with
``GGML_CUDA_DISABLE_GRAPHS=1`` to see a CUDA build without graphs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engine.llama.backend import LoadOptions, Model  # noqa: E402
from app.models.provision import ensure_pair  # noqa: E402

SIZES = (1, 2, 3, 5, 9, 17)


def timed(model: Model, tokens: list[int], keep: int) -> float:
    t0 = time.perf_counter()
    model.decode(tokens, range(len(tokens)))
    seconds = time.perf_counter() - t0
    model.rollback(keep)
    return seconds


def measure(model: Model, prompt: list[int], n: int, reps: int, alternate: bool) -> float:
    """Median seconds of one n-token pass (after a warm-up), each rolled back to the prompt."""
    keep = model.n_past
    batch = (prompt * (n // len(prompt) + 1))[:n]
    times = []
    for i in range(reps + 2):
        if alternate:
            timed(model, batch[:1], keep)
        seconds = timed(model, batch, keep)
        if i >= 2:
            times.append(seconds)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pair", nargs="?", default="demo-smollm2")
    parser.add_argument("--gpu-layers", type=int, default=-1, help="-1: all (default)")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args(argv)
    _, target, _ = ensure_pair(args.pair)
    model = Model(target, LoadOptions(n_gpu_layers=args.gpu_layers))
    try:
        prompt = model.tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
        model.sync(prompt)
        step = measure(model, prompt, 1, args.reps, alternate=False)
        print(f"{target.name}, {args.gpu_layers} GPU layers: one plain step {step * 1e3:.3f} ms")
        print(f"{'n':>3}  {'same ms':>8} {'v(n)':>6}  {'alternating ms':>14} {'v(n)':>6}")
        for n in SIZES:
            same = measure(model, prompt, n, args.reps, alternate=False)
            alt = measure(model, prompt, n, args.reps, alternate=True)
            print(f"{n:>3}  {same * 1e3:8.3f} {same / step:6.2f}  {alt * 1e3:14.3f} {alt / step:6.2f}")
    finally:
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
