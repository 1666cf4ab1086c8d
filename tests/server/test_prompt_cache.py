"""The prompt cache through the real ``openai`` client against a real server on the demo pair: two conversations
alternate A, B, A, B, and the second visits take their earlier turn back from RAM (``cached_tokens`` covers it,
only the new tokens are read), with the greedy replies of a server without the cache."""

from __future__ import annotations

from typing import Optional

import pytest

from app.engine.llama.backend import common_prefix
from app.engine.llama.promptcache import PromptCache
from support.api_greedy import assert_same_greedy_text, greedy
from support.api_inproc import Served

openai = pytest.importorskip("openai")

STORY = ("I am writing a long story about the lighthouse keepers of the northern islands: their storms, their "
         "lamps, the supply boats and the letters they wrote home. ")
BREAD = ("I bake bread at home with rye flour, seeds and a slow overnight rise in a cold kitchen, and I want to "
         "understand every step of it. ")
OPENERS = {"a": STORY * 3 + "Give me a title.", "b": BREAD * 3 + "What goes wrong most often?"}


@pytest.fixture
def served(smol_pair):
    smol_pair.reset()
    s = Served(smol_pair)
    yield s
    s.close()
    smol_pair.reset()


def _alternate(served, cache: Optional[PromptCache] = None) -> list[tuple[list, object, int]]:
    """A, B, A, B through the client with ``cache`` as the server's (None: its own): (messages, reply, target
    tokens decoded)."""
    if cache is not None:
        served.state.prompt_cache = cache
    served.state.pair.reset()
    client, target = served.client(), served.state.pair.target
    talks = {k: [{"role": "user", "content": v}] for k, v in OPENERS.items()}
    visits = []
    for name in "abab":
        messages = list(talks[name])
        before = target.decoded
        reply = greedy(client.chat.completions.create, model="", messages=messages, max_tokens=20,
                       extra_body={"speculative": False})
        visits.append((messages, reply, target.decoded - before))
        talks[name] = messages + [{"role": "assistant", "content": reply.choices[0].message.content},
                                  {"role": "user", "content": "Go on."}]
    return visits


def test_alternating_conversations_take_their_prompts_back(served):
    before = served.get("/metrics")[2].decode()
    visits = _alternate(served)  # the server's own cache, as it starts: the default budget
    pair = served.state.pair
    for i in (2, 3):
        messages, reply, _ = visits[i]
        earlier, _, _ = visits[i - 2]
        shared = common_prefix(pair.chat_prompt(earlier), pair.chat_prompt(messages))
        usage, timings = reply.usage, reply.model_extra["timings"]
        assert usage.prompt_tokens_details.cached_tokens >= shared > usage.prompt_tokens // 2
        assert timings["cache_restored_n"] == usage.prompt_tokens_details.cached_tokens == timings["cache_n"]
        assert timings["prompt_n"] == usage.prompt_tokens - timings["cache_n"] <= usage.prompt_tokens - shared
    assert served.state.prompt_cache.restores == 2
    after = served.get("/metrics")[2].decode()
    assert _sample(after, "tandem_prompt_cache_restores_total") - _sample(before, "tandem_prompt_cache_restores_total") == 2

    plain = _alternate(served, PromptCache(0))  # --cache-ram 0: as before, one live cache
    for i, ((_, reply, _), (_, want, _)) in enumerate(zip(visits, plain)):
        assert_same_greedy_text(want.choices[0].message.content, reply, f"visit {i}")
    assert plain[2][1].usage.prompt_tokens_details.cached_tokens < shared  # without it: read again
    assert plain[2][1].model_extra["timings"]["cache_restored_n"] == 0


def test_the_engine_reads_only_the_new_tokens(served):
    """What the target decoded for each request: the prompt tokens ``timings.prompt_n`` says were read (the last
    one by the first step) and one token per step after it, no more."""
    for _, reply, decoded in _alternate(served, PromptCache(64 << 20)):
        timings = reply.model_extra["timings"]
        assert decoded == timings["prompt_n"] - 1 + reply.usage.completion_tokens


def _sample(text: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))
