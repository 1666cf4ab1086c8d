#!/usr/bin/env python3
"""The Markdown table of a ``scripts/gpu-check.sh`` run: ``python scripts/gpu_summary.py OUT_DIR``.

Reads what the script wrote (device.txt, tests.log, bench-*.json, fit-place.json, llama-bench-*.json,
llama-spec-n*.log); a step that did not run reads "not run". Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

SPEC_SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
SPEC_ACCEPT = re.compile(r"accept\s+=\s+([\d.]+)%")
PYTEST_TAIL = re.compile(r"^=* ?((?:\d+ (?:failed|passed|skipped|errors?|deselected|xfailed|xpassed|warnings?)"
                         r"(?:, )?)+ in [\d.]+s.*?) ?=*$", re.M)  # pytest's last line, with or without -q


def _json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _f(value: Optional[float], spec: str = ".1f", suffix: str = "") -> str:
    return "?" if value is None else f"{value:{spec}}{suffix}"


def _mib(n: Optional[int]) -> str:
    return "?" if n is None else f"{n / 2**20:.0f} MiB"


def bench_row(out: Path, name: str, what: str) -> Optional[tuple[str, str, str]]:
    r = _json(out / f"{name}.json")
    if r is None:
        return None
    same = {True: "yes", False: "NO", None: "-"}[r.get("identical")]
    text = (f"plain {_f(r.get('baseline_tps'))} t/s, speculative {_f(r.get('spec_tps'))} t/s, "
            f"**{_f(r.get('speedup'), '.2f', 'x')}**, acceptance {_f(r.get('acceptance_rate'), '.1%')}, "
            f"mean K {_f(r.get('mean_k'))}, paused {_f(r.get('paused'), '.0%')}, c {_f(r.get('c'), '.2f')}, "
            f"v {_f(r.get('v'), '.2f')}, efficiency {_f(r.get('efficiency'), '.2f')}, greedy spec == plain: {same}")
    ref = r.get("reference")
    if ref and ref.get("kind") == "bare-spec":
        text += f"; bare K = 8 loop {_f(ref.get('tps'))} t/s ({_f(ref.get('speedup'), '.2f', 'x')} over plain)"
    gpu = r.get("gpu") or {}
    placed = [f"{role} {s['layers_placed']}/{s['layers_total']}" for role in ("target", "draft")
              if (s := gpu.get(role))]
    if placed:
        text += f"; layers on the GPU: {', '.join(placed)}"
    return what, f"`{r.get('command', name)}`", text


def llama_spec_row(out: Path) -> Optional[tuple[str, str, str]]:
    runs = []
    for n in (2, 4, 8):
        try:
            log = (out / f"llama-spec-n{n}.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        speed, accept = SPEC_SPEED.search(log), SPEC_ACCEPT.search(log)
        runs.append(f"n-max {n}: {speed.group(3) if speed else '?'} t/s, accept {accept.group(1) if accept else '?'} %")
    if not runs:
        return None
    return ("llama.cpp's `llama-speculative-simple`, same pair and prompt (the reference)",
            "`llama-speculative-simple --spec-type draft-simple --spec-draft-n-max N -ngl 99 -ngld 99 --temp 0 "
            "--top-k 1`", "; ".join(runs))


def llama_bench_row(out: Path) -> Optional[tuple[str, str, str]]:
    found = []
    for which in ("target", "draft"):
        data = _json(out / f"llama-bench-{which}.json") or []
        tg = [t for t in data if isinstance(t, dict) and t.get("n_gen") and not t.get("n_prompt")]
        if tg:
            found.append(f"{which} {_f(tg[0].get('avg_ts'))} t/s")
    if not found:
        return None
    return "plain decoding in llama.cpp (`llama-bench` tg128)", "`llama-bench -ngl 99 -p 0 -n 128`", ", ".join(found)


def placement_row(out: Path) -> Optional[tuple[str, str, str]]:
    p = (_json(out / "fit-place.json") or {}).get("placement")
    if not p:
        return None
    sides = [f"{role}: {s['layers_placed']}/{s['layers_total']} layers, GPU {_mib(s['used_gpu_bytes'])} used vs "
             f"{_mib(s['estimated_gpu_bytes'])} estimated" for role in ("target", "draft") if (s := p.get(role))]
    return "what llama.cpp placed vs the fit estimate", f"`models fit --place {p.get('pair')}`", "; ".join(sides)


def tests_row(out: Path) -> tuple[str, str, str]:
    try:
        found = PYTEST_TAIL.findall((out / "tests.log").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        found = []
    return ("test suite, every layer on the GPU", "`TANDEM_TEST_GPU_LAYERS=-1 python launcher.py test`",
            found[-1] if found else "not run")


def summary(out: Path) -> str:
    try:
        device = (out / "device.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        device = []
    rows = [tests_row(out),
            bench_row(out, "bench-auto", "Tandem, built-in suite, `--k auto`"),
            bench_row(out, "bench-k8", "Tandem, built-in suite, `--k 8`, with the bare K = 8 loop"),
            bench_row(out, "bench-fib-auto", "Tandem, the reference's prompt, `--k auto`"),
            bench_row(out, "bench-fib-k8", "Tandem, the reference's prompt, `--k 8`"),
            llama_spec_row(out), llama_bench_row(out), placement_row(out)]
    lines = [f"Device: {device[0] if device else 'unknown'}", *[f"{d}  " for d in device[1:]], "",
             "| measurement | command | result |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in (r for r in rows if r)]
    missing = sum(1 for r in rows if r is None)
    if missing:
        lines.append(f"\n{missing} measurement(s) not run; see the logs in {out}.")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: gpu_summary.py OUT_DIR (the folder scripts/gpu-check.sh wrote)")
    print(summary(Path(sys.argv[1])))
