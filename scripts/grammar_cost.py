#!/usr/bin/env python3
"""What grammars and the coupled rule cost, measured on the models in TANDEM_HOME's models folder.

``python scripts/grammar_cost.py mask``: milliseconds for one full-vocabulary pass of llama.cpp's grammar
sampler (JSON grammar, in three states: the start of an object, inside a string, inside a number) on every
vocabulary found (SmolLM2 49k, Qwen2.5 152k, Gemma 3 262k).

``python scripts/grammar_cost.py decode``: tokens/s on the demo pair with and without a JSON-schema grammar,
plain and K = 4, at T = 0 (one warm-up run each; the median of three).

``python scripts/grammar_cost.py accept``: draft acceptance at T = 0.8 on the demo pair, exact rejection
sampling against the coupled rule (the draft's own Gumbel-max sample, and a greedy draft, q = onehot), K = 4,
64 tokens, over the built-in prompt suite with seeds 0, 1, 2.
"""

from __future__ import annotations

import statistics
import sys
import time

from app import paths
from app.engine.llama.backend import LoadOptions, Model
from app.engine.decoding.grammar import GrammarSpec, GrammarTrack, compile_grammar
from app.engine.loop import GenConfig, run
from app.engine.pair import Pair
from app.engine.drafters.draftmodel import DraftModelProposer
from app.engine.decoding.sampling import SamplerSettings
from app.models.provision import ensure_pair

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "tags"]}
STATES = {"object start": "", "inside a string": '{"name": "Ad', "inside a number": '{"name": "Ada", "age": 3'}
VOCABS = ("SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "gemma-3-270m-q4_k_m.gguf")
ASK = [{"role": "user", "content": "Describe a person as JSON: name, age and a few tags."}]


def mask() -> None:
    for name in VOCABS:
        path = paths.models_dir() / name
        if not path.is_file():
            print(f"{name}: not found, skipped")
            continue
        with Model(path, LoadOptions(n_ctx=256, n_threads=1)) as model:
            for state, prefix in STATES.items():
                track = GrammarTrack(compile_grammar(model, GrammarSpec.json_schema(SCHEMA)))
                for tok in model.tokenize(prefix, add_special=False, parse_special=False):
                    track.advance(0, tok, eog=False)
                g = track.state
                g.mask()
                times = []
                for _ in range(10):
                    t0 = time.perf_counter()
                    allowed = g.mask()
                    times.append(time.perf_counter() - t0)
                one = []
                for _ in range(200):
                    t0 = time.perf_counter()
                    g.allows(0)
                    one.append(time.perf_counter() - t0)
                print(f"{name} (vocab {model.n_vocab}), {state}: full pass {statistics.median(times) * 1e3:.2f} ms "
                      f"({int(allowed.sum())} allowed), one token {statistics.median(one) * 1e6:.1f} us")


def _tps(pair: Pair, prompt, cfg: GenConfig) -> tuple[float, int, float]:
    runs = []
    for i in range(4):
        pair.reset()
        t0 = time.perf_counter()
        tokens, stats = run(pair.target, prompt, cfg, pair.proposer(cfg))
        if i:
            runs.append((len(tokens) / (time.perf_counter() - t0), len(tokens), stats.acceptance_rate))
    runs.sort()
    return runs[1]


def decode() -> None:
    _, target, draft = ensure_pair("demo-smollm2")
    with Pair.load(target, draft, LoadOptions(n_ctx=2048)) as pair:
        prompt = pair.chat_prompt(ASK)
        for temp, rule in ((0.0, "rejection"), (0.8, "rejection"), (0.8, "coupled")):
            for spec in (dict(speculative=False), dict(k=4)):
                for grammar in (None, GrammarSpec.json_schema(SCHEMA)):
                    cfg = GenConfig(max_tokens=96, grammar=grammar, rule=rule,
                                    sampler=SamplerSettings(temperature=temp, seed=1), **spec)
                    tps, n, acc = _tps(pair, prompt, cfg)
                    print(f"T={temp} {rule if temp else ''}, {'K=4' if spec.get('k') else 'plain'}, "
                          f"{'json_schema' if grammar else 'no grammar'}: {tps:.1f} tokens/s ({n} tokens, "
                          f"acceptance {acc:.2f})")


class _GreedyDraft(DraftModelProposer):
    """The draft proposes its argmax (q = onehot), not its Gumbel-max sample."""
    couples = False

    def propose(self, history, k, sampler, rng, sample, **_):
        return super().propose(history, k, sampler, rng, False)


def accept(seeds: int = 3) -> None:
    from app.lab.bench import builtin_suite

    _, target, draft = ensure_pair("demo-smollm2")
    with Pair.load(target, draft, LoadOptions(n_ctx=2048)) as pair:
        suite = [(p, seed) for p in builtin_suite() for seed in range(seeds)]
        for label, rule, greedy_draft in (("rejection", "rejection", False), ("coupled", "coupled", False),
                                           ("coupled, greedy draft", "coupled", True)):
            drafted = accepted = emitted = steps = 0
            for p, seed in suite:
                cfg = GenConfig(max_tokens=64, k=4, rule=rule, sampler=SamplerSettings(temperature=0.8, seed=seed))
                proposer = _GreedyDraft(pair.draft) if greedy_draft else pair.proposer(cfg)
                pair.reset()
                tokens, stats = run(pair.target, p.tokens(pair), cfg, proposer)
                drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
                emitted, steps = emitted + len(tokens), steps + stats.steps
            print(f"{label}: acceptance {accepted / drafted:.3f} ({accepted}/{drafted} drafted), "
                  f"{emitted / steps:.2f} tokens per target pass")


if __name__ == "__main__":
    {"mask": mask, "decode": decode, "accept": accept}[sys.argv[1] if len(sys.argv) > 1 else "mask"]()
