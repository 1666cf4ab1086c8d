#!/usr/bin/env python3
"""How much the draft model's guesses depend on reading the whole reply: its greedy agreement with the target
with the full context, and with a *hole* — all but the last W tokens of the reply so far skipped, as auto's
draft model did after a prompt-lookup stretch until it read everything (``CATCH_WINDOW``, duo.py).

For every prompt of a suite category (default: the edit prompts), plain decoding's reply ``y`` is fixed
(T = 0); at every sixth position i the draft model drafts greedily from ``prompt + y[:i]`` and the run of its
tokens equal to ``y[i:]`` is counted (at most 16), then again from ``prompt + y[:2] + y[i-W:i]`` for
W = 8, 16, 32 (the hole is ``y[2:i-W]``, at consecutive positions). Where the draft model can take the
target's cache (``kvshare.py``: one network at two precisions), a *shared* column drafts from a copy of the
target's cache of ``prompt + y[:i]`` instead of the draft model's own. Auto's draft model used to read through an
8-token window (``DraftModelProposer.use_window``); since these figures it reads everything.

``--bounds`` also prints, per prompt, the hindsight bound's gain (``app/lab/oracle.py``) as ``bench --proposer
auto,draft,lookup`` printed it while auto read through an 8-token window (cheap reading, yet the whole context's
agreement) and with the draft model reading everything it skipped (what the bound's agreement assumes), under
costs measured by one auto run per prompt.

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
WINDOW = 8  # the window auto read through before it read everything (the bound's windowed costs)
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


def bounds(pair: Pair, prompt: list[int], reply: list[int], cfg: GenConfig) -> tuple:
    """(gain with the 8-token window, gain reading everything): ``bench``'s hindsight gain both ways."""
    return tuple(hindsight_bound(pair, prompt, reply, cfg, window)[1] for window in (WINDOW, None))


def width(column: int, shared: bool) -> int:
    return 6 if column == 0 else 7 if shared and column == 1 else 10


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pair", nargs="?", default="demo-smollm2")
    parser.add_argument("--category", default="edit")
    parser.add_argument("--bounds", action="store_true", help="the hindsight gain, windowed and reading all")
    args = parser.parse_args(argv)
    _, target, draft = ensure_pair(args.pair)
    with Pair.load(target, draft) as pair:  # (the draft model's own cache unless a column says otherwise)
        encoded, _ = encode(pair, builtin_suite(args.category))
        auto = GenConfig(max_tokens=192, k="auto", proposer="auto")
        shared = pair.kv_share is not None
        print(f"{'prompt':16} {'full':>6} " + (f"{'shared':>7} " if shared else "") + " ".join(f"{f'hole W={w}':>10}" for w in HOLES)
              + ("   gain: windowed  reading all" if args.bounds else ""))
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
                g = bounds(pair, x, y, auto)
                gains.append(g)
                line += f"   {fmt(g[0], '.3f'):>14} {fmt(g[1], '.3f'):>12}"
            print(line + f"   ({len(at)} positions, a reply of {len(y)} tokens)")
        cols = [[v for r in rows for v in r[j]] for j in range(len(HOLES) + 1 + shared)]
        line = f"{'all':16} " + " ".join(f"{statistics.mean(c):{width(j, shared)}.1f}" for j, c in enumerate(cols))
        if gains:
            windowed, whole = (median([g[j] for g in gains]) for j in (0, 1))
            line += f"   {fmt(windowed, '.3f'):>14} {fmt(whole, '.3f'):>12} (median)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
