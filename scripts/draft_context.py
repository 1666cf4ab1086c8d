#!/usr/bin/env python3
"""How much the draft model's guesses depend on reading the whole reply: its greedy agreement with the target
with the full context, and with a *hole* — all but the last W tokens of the reply so far skipped, as a draft
model that read only the end of a prompt-lookup stretch would have them (why auto's reads everything: duo.py).

For every prompt of a suite category (default: the edit prompts), plain decoding's reply ``y`` is fixed
(T = 0); at every sixth position i the draft model drafts greedily from ``prompt + y[:i]`` and the run of its
tokens equal to ``y[i:]`` is counted (at most 16), then again from ``prompt + y[:2] + y[i-W:i]`` for
W = 8, 16, 32 (the hole is ``y[2:i-W]``, at consecutive positions). Where the draft model can take the
target's cache (``kvshare.py``: one network at two precisions), a *shared* column drafts from a copy of the
target's cache of ``prompt + y[:i]`` instead of the draft model's own.

``--bounds`` also prints, per prompt, the hindsight bound's gain (``app/lab/oracle.py``) as ``bench --proposer
auto,draft,lookup`` prints it, under costs measured by one auto run per prompt.

``python scripts/draft_context.py [PAIR] [--category edit] [--bounds]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engine.loop import GenConfig, run  # noqa: E402
from app.engine.pair import Pair  # noqa: E402
from app.lab.bench import encode  # noqa: E402
from app.lab.drafters import hindsight_bound  # noqa: E402
from app.lab.prompts import builtin_suite  # noqa: E402
from app.engine.stats import median  # noqa: E402
from app.models.provision import ensure_pair  # noqa: E402
from app.numfmt import fmt  # noqa: E402

HOLES = (8, 16, 32)
K = 16


def agreement(pair: Pair, context: list[int], want: list[int], shared: bool = False) -> int:
    """Greedy draft tokens from ``context`` equal to ``want``, in a row (at most K); ``shared``: the draft model
    holds the target's cache of ``context`` (kvshare.py) instead of its own."""
    m = pair.draft
    m.reset()
    if shared:
        pair.target.reset()
        pair.target.sync(context[:-1], need_logits=False)
        if not pair.kv_share.pull():
            raise SystemExit(pair.kv_share.refused)
    m.sync(context[:-1], need_logits=False)
    tok, n = context[-1], 0
    for expected in want[:K]:
        tok = int(np.argmax(m.decode([tok])[0]))
        if tok != expected:
            break
        n += 1
    m.reset()
    return n


def width(column: int, shared: bool) -> int:
    return 6 if column == 0 else 7 if shared and column == 1 else 10


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pair", nargs="?", default="demo-smollm2")
    parser.add_argument("--category", default="edit")
    parser.add_argument("--bounds", action="store_true", help="the hindsight gain")
    args = parser.parse_args(argv)
    _, target, draft = ensure_pair(args.pair)
    with Pair.load(target, draft) as pair:  # (the draft model's own cache unless a column says otherwise)
        encoded, _ = encode(pair, builtin_suite(args.category))
        auto = GenConfig(max_tokens=192, k="auto", proposer="auto")
        shared = pair.kv_share is not None
        print(f"{'prompt':16} {'full':>6} " + (f"{'shared':>7} " if shared else "") + " ".join(f"{f'hole W={w}':>10}" for w in HOLES)
              + ("   gain" if args.bounds else ""))
        rows, gains = [], []
        for p, x in encoded:
            y, _ = run(pair.target, x, GenConfig(max_tokens=192, speculative=False))
            at = [i for i in range(12, len(y) - 4, 6) if i - max(HOLES) > 2]
            r = [[agreement(pair, x + y[:i], y[i:]) for i in at]]
            r += [[agreement(pair, x + y[:i], y[i:], shared=True) for i in at]] if shared else []
            r += [[agreement(pair, x + y[:2] + y[i - w:i], y[i:]) for i in at] for w in HOLES]
            line = f"{p.id:16} " + (" ".join(f"{statistics.mean(c):{width(j, shared)}.1f}"
                                             for j, c in enumerate(r)) if at else f"{'(too short)':>40}")
            if at:
                rows.append(r)
            if args.bounds:
                run(pair.target, x, auto, pair.proposer(auto), length=pair.draft_length(auto))  # measure costs
                g = hindsight_bound(pair, x, y, auto)[1]
                gains.append(g)
                line += f"   {fmt(g, '.3f'):>6}"
            print(line + f"   ({len(at)} positions, a reply of {len(y)} tokens)")
        cols = [[v for r in rows for v in r[j]] for j in range(len(HOLES) + 1 + shared)]
        line = f"{'all':16} " + " ".join(f"{statistics.mean(c):{width(j, shared)}.1f}" for j, c in enumerate(cols))
        if gains:
            line += f"   {fmt(median(gains), '.3f'):>6} (median)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
