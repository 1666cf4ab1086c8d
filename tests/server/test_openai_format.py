"""The API's pure parts: stop strings while streaming, the statistics conventions and request validation (no
server, no model)."""

from __future__ import annotations


import pytest

from app.engine.summary import Summary
from app.server import openai_format as F
from app.server import openai_schema as schema
from app.service import settings as S


def test_stop_strings_are_held_back_until_they_cannot_match():
    cut = F.Cut(["</s>", "\n\n"])
    assert cut.advance("abc<", final=False) == "abc"
    assert cut.advance("abc</", final=False) == ""
    assert cut.advance("abc</x", final=False) == "</x"
    assert cut.advance("abc</x\n", final=False) == ""
    assert cut.advance("abc</x\n\nmore", final=False) == ""
    assert cut.end == 6 and cut.advance("abc</x\n\nmore tokens", final=True) == ""
    plain = F.Cut([])
    assert plain.advance("ab", False) == "ab" and plain.advance("abcd", True) == "cd"


def test_tokens_through_counts_the_tokens_that_produce_the_text():
    pieces = ["He", "llo", "", " wor", "ld"]
    assert F.tokens_through(pieces, 0) == 0
    assert F.tokens_through(pieces, 2) == 1
    assert F.tokens_through(pieces, 3) == 2
    assert F.tokens_through(pieces, 6) == 4
    assert F.tokens_through(pieces, 99) == 5


def test_stats_in_both_conventions_are_consistent():
    summary = Summary(tokens=10, drafted=12, accepted=8, steps=3, tokens_per_s=50.0, t_total=0.2,
                      acceptance_rate=8 / 12, mean_accepted=10 / 3, per_position=[1.0, 0.5])
    st = F.lmstudio_stats(summary, speculative=True, draft_model="d.gguf", completion_tokens=10, ttft=0.1,
                          reason="max_tokens")
    assert st["total_draft_tokens_count"] == st["accepted_draft_tokens_count"] + st["rejected_draft_tokens_count"] \
        + st["ignored_draft_tokens_count"]
    assert st["stop_reason"] == "maxPredictedTokensReached" and F.FINISH["max_tokens"] == "length"
    tm = F.llamacpp_timings(summary, prompt_tokens=20, prompt_s=0.1, completion_tokens=10)
    assert (tm["draft_n"], tm["draft_n_accepted"], tm["predicted_n"]) == (12, 8, 10)
    assert tm["predicted_ms"] == pytest.approx(200.0) and tm["prompt_per_second"] == pytest.approx(200.0)
    plain = F.lmstudio_stats(summary, speculative=False, draft_model=None, completion_tokens=10, ttft=None,
                             reason="eog")
    assert "total_draft_tokens_count" not in plain and plain["stop_reason"] == "eosFound"


def test_tree_drafts_are_reported_in_both_conventions():
    """A tree's branch tokens (of the drafted ones), its passes, kept path and branch hits (proposer tree)."""
    summary = Summary(tokens=10, drafted=12, accepted=8, steps=3, tree_steps=2, tree_tokens=3, tree_accepted=6,
                      branch_hits=1)
    st = F.lmstudio_stats(summary, speculative=True, draft_model="d.gguf", completion_tokens=10, ttft=0.1,
                          reason="eog")
    assert (st["tree_target_passes"], st["tree_branch_tokens_count"], st["tree_accepted_path_length"],
            st["tree_branch_hits"]) == (2, 3, 3.0, 1)
    tm = F.llamacpp_timings(summary, prompt_tokens=20, prompt_s=0.1, completion_tokens=10)
    assert (tm["draft_tree_n"], tm["draft_tree_passes"], tm["draft_tree_branch_hits"]) == (3, 2, 1)
    chain = F.lmstudio_stats(Summary(tokens=4, drafted=4, accepted=3, steps=1), speculative=True, draft_model="d",
                             completion_tokens=4, ttft=0.1, reason="eog")
    assert chain["tree_target_passes"] == 0 and chain["tree_accepted_path_length"] is None


def test_requests_map_to_the_chat_settings():
    req = schema.parse(schema.ChatRequest, b'{"messages": [{"role": "developer", "content": "Be brief."},'
                       b' {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],'
                       b' "temperature": 0, "max_completion_tokens": 7, "k": "auto", "speculative": false,'
                       b' "stop": "END"}')
    resolved = schema.settings_of(req, S.defaults())
    assert (resolved["max_tokens"], resolved["temperature"], resolved["speculative"]) == (7, 0.0, False)
    assert schema.chat_messages(req, resolved) == [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "Hi"}]
    assert schema.stops(req) == ["END"]
    for body, param in ((b'{"prompt": "x", "n": 2}', "n"), (b'{"prompt": ["a", "b"]}', "prompt"),
                        (b'{"prompt": "x", "p_min": 1.5}', "p_min"), (b'{"prompt": "x", "echo": true}', "echo"),
                        (b'{"prompt": "x", "seed": "7"}', "seed")):
        with pytest.raises(schema.RequestError) as err:
            schema.settings_of(schema.parse(schema.CompletionRequest, body), S.defaults())
        assert err.value.param == param and err.value.status == 400
