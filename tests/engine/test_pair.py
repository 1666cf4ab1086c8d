"""The engine on the real demo models with the real llama.cpp: lossless, checked rollback, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.llama.backend import ContextFullError, Model
from app.lab.prompts import builtin_suite
from app.engine.events import ACCEPTED, BONUS, CORRECTED, PLAIN, DoneEvent, StepEvent, TokenEvent
from app.engine.loop import GenConfig
from app.engine.pair import Pair
from app.engine.decoding.sampling import SamplerSettings
from app.engine.decoding.text import Utf8Stream
from app.engine.llama.vocab import IncompatiblePair
from app.testing import load_options

from support.greedy import NEAR_TIE, argmax_misses, assert_same_greedy, checked_run, verdict

TOKENS = 48


def _run(pair: Pair, prompt, **kw):
    pair.reset()
    cfg = GenConfig(**kw)
    return checked_run(pair.target, prompt, cfg, pair.proposer(cfg))


@pytest.mark.parametrize("proposer,k,every", [("draft", "auto", 1), ("draft", 3, 3), ("lookup", 4, 3)])
def test_greedy_speculative_equals_plain_on_the_suite(smol_pair, proposer, k, every):
    for prompt in builtin_suite()[::every]:
        tokens = prompt.tokens(smol_pair)
        plain, _ = _run(smol_pair, tokens, max_tokens=TOKENS, speculative=False)
        spec, stats = _run(smol_pair, tokens, max_tokens=TOKENS, proposer=proposer, k=k)
        assert_same_greedy(smol_pair, tokens, plain, spec,
                           f"{prompt.id}: speculative output differs from plain ({proposer}, K={k})")
        if proposer == "draft":
            assert stats.drafted > 0


def test_greedy_outputs_may_part_only_at_a_near_tie_on_any_device():
    assert verdict(None, offloaded=False) is None and verdict(None, offloaded=True) is None
    tie = {"position": 62, "gap": 0.0031}  # seen on an AMD EPYC: edit-hints, auto, K = 4 and auto
    assert verdict(tie, offloaded=False) is None and verdict(tie, offloaded=True) is None
    clear = {"position": 7, "gap": 2 * NEAR_TIE}
    for offloaded in (False, True):
        assert "parted at token 7" in verdict(clear, offloaded) and "not a near-tie" in verdict(clear, offloaded)


def test_the_argmax_check_names_a_token_the_target_did_not_choose():
    rows = np.zeros((3, 5), dtype=np.float32)
    rows[0, 2], rows[1, 4], rows[2, 1] = 1.0, 1.0, 1.0  # the pass's choices: 2, then 4, then 1
    events = [TokenEvent(token=2, text="", kind=ACCEPTED, step=0), TokenEvent(token=4, text="", kind=ACCEPTED, step=0),
              TokenEvent(token=3, text="", kind=CORRECTED, step=0)]
    assert argmax_misses([rows], events[:2]) == []
    assert argmax_misses([rows], events) == ["step 0, row 2: token 3, argmax 1"]


def test_target_drafting_for_itself_accepts_nearly_everything(smol_paths):
    target, _ = smol_paths
    with Pair.load(target, target, load_options(n_ctx=1024)) as pair:
        prompt = builtin_suite("code")[0].tokens(pair)
        plain, _ = _run(pair, prompt, max_tokens=TOKENS, speculative=False)
        spec, stats = _run(pair, prompt, max_tokens=TOKENS, k=4, proposer="draft")
    assert spec == plain
    assert stats.acceptance_rate >= 0.95


def test_events_carry_provenance_and_timings(smol_pair):
    prompt = smol_pair.chat_prompt([{"role": "user", "content": "Count from one to twenty in words."}])
    smol_pair.reset()
    cfg = GenConfig(max_tokens=32, k=4, proposer="draft")  # the draft model's tokens carry their probabilities
    events = list(smol_pair.generate(prompt, cfg))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    steps = [e for e in events if isinstance(e, StepEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason in ("max_tokens", "eog")
    assert {t.kind for t in tokens} <= {ACCEPTED, CORRECTED, BONUS, PLAIN}
    assert any(t.kind == ACCEPTED for t in tokens)
    assert sum(s.emitted for s in steps) == len(tokens) == len(done.tokens)
    assert all(s.t_verify > 0 for s in steps)
    accepted = [t for t in tokens if t.kind == ACCEPTED]
    assert all(t.draft_pos is not None and 0 < t.draft_prob <= 1 for t in accepted)
    assert done.stats.acceptance_rate == pytest.approx(
        sum(s.accepted for s in steps) / sum(s.drafted for s in steps))


def test_logits_after_rejection_match_a_fresh_context(smol_paths):
    target_path, draft_path = smol_paths
    opts = load_options(n_ctx=512)
    with Model(target_path, opts) as target, Model(target_path, opts) as fresh:
        prompt = target.tokenize("The capital of France is", add_special=True)
        target.sync(prompt[:-1], need_logits=False)
        # verify a bogus draft: the target rejects it at the first position
        bogus = [target.tokenize(" banana", add_special=False)[0]] * 3
        logits = target.decode([prompt[-1]] + bogus, range(4))
        best = int(np.argmax(logits[0]))
        assert best != bogus[0]
        target.rollback(len(prompt))  # keep the prompt, drop the rejected drafts
        nxt = target.decode([best])[0].copy()
        ref = fresh.sync(prompt + [best])
        # batched and single-token kernels round differently: equal up to a small tolerance
        assert np.allclose(nxt, ref, atol=0.05, rtol=0.01)
        assert int(np.argmax(nxt)) == int(np.argmax(ref))


def test_incompatible_pair_is_refused_with_the_first_difference(smol_paths, gemma_paths):
    with pytest.raises(IncompatiblePair, match="vocabulary type differs"):
        Pair.load(smol_paths[0], gemma_paths[1], load_options(n_ctx=256))


def test_seeded_sampling_is_reproducible_and_exactness_path_runs(smol_pair):
    prompt = smol_pair.chat_prompt([{"role": "user", "content": "Tell me a short story about a robot."}])
    sampler = SamplerSettings(temperature=0.8, top_p=0.95, seed=42)
    a, sa = _run(smol_pair, prompt, max_tokens=32, sampler=sampler, k=4)
    b, _ = _run(smol_pair, prompt, max_tokens=32, sampler=sampler, k=4)
    c, sc = _run(smol_pair, prompt, max_tokens=32, sampler=sampler, k=4, rule="match")
    assert a == b and len(a) > 0 and len(c) > 0
    assert sa.drafted > 0 and sc.drafted > 0


def test_utf8_split_across_tokens_streams_whole_characters(smol_pair):
    text = "naïve café — 日本語 🙂🚀"
    ids = smol_pair.target.tokenize(text, add_special=False)
    pieces = [smol_pair.target.piece(t) for t in ids]
    assert any(p and not _valid_utf8(p) for p in pieces), "expected a character split across tokens"
    stream = Utf8Stream()
    chunks = [stream.feed(p) for p in pieces]
    assert "".join(chunks).strip() == text
    assert all("\ufffd" not in c for c in chunks)


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_prompt_past_the_context_is_a_clear_error(smol_paths):
    with Pair.load(smol_paths[0], smol_paths[1], load_options(n_ctx=256)) as pair:
        with pytest.raises(ContextFullError, match="context holds 256"):  # refused while tokenising
            pair.completion_prompt("word " * 400)
        prompt = pair.target.tokenize("word " * 400, parse_special=False)
        with pytest.raises(ContextFullError, match="context"):  # and by the loop, for tokens from elsewhere
            list(pair.generate(prompt, GenConfig(max_tokens=8)))
        # the pair keeps working afterwards
        out, _ = _run(pair, pair.completion_prompt("Hello"), max_tokens=4)
        assert len(out) == 4


def test_generation_stops_at_the_context_end(smol_paths):
    with Pair.load(smol_paths[0], smol_paths[1], load_options(n_ctx=256)) as pair:
        prompt = pair.completion_prompt("word " * 200)
        pair.reset()
        done = [ev for ev in pair.generate(prompt, GenConfig(max_tokens=500, k=8)) if isinstance(ev, DoneEvent)][-1]
        assert done.reason == "context"
        assert len(prompt) + len(done.tokens) == pair.target.n_ctx


def test_stop_event_ends_within_one_step(smol_pair):
    import threading

    stop = threading.Event()
    prompt = smol_pair.chat_prompt([{"role": "user", "content": "Write a long essay about rivers."}])
    smol_pair.reset()
    seen = []
    for ev in smol_pair.generate(prompt, GenConfig(max_tokens=200, k=4), stop=stop):
        seen.append(ev)
        if isinstance(ev, StepEvent) and ev.step == 1:
            stop.set()
    done = seen[-1]
    assert isinstance(done, DoneEvent) and done.reason == "stopped"
    assert max(e.step for e in seen if isinstance(e, StepEvent)) == 1


def test_chat_template_and_end_of_generation(smol_pair):
    prompt = smol_pair.chat_prompt([{"role": "user", "content": "Reply with just the word: yes"}])
    text = b"".join(smol_pair.target.piece(t, special=True) for t in prompt).decode()
    assert "<|im_start|>user" in text and text.rstrip().endswith("<|im_start|>assistant")
    smol_pair.reset()
    events = list(smol_pair.generate(prompt, GenConfig(max_tokens=64)))
    assert events[-1].reason == "eog"
    assert "<|im_end|>" not in "".join(e.text for e in events if isinstance(e, TokenEvent))


def test_greedy_with_a_repetition_penalty_stays_lossless(smol_pair):
    prompt = builtin_suite("code")[1].tokens(smol_pair)
    sampler = SamplerSettings(temperature=0, repeat_penalty=1.3, repeat_last_n=16)
    plain, _ = _run(smol_pair, prompt, max_tokens=TOKENS, sampler=sampler, speculative=False)
    for proposer in ("draft", "lookup"):
        spec, stats = _run(smol_pair, prompt, max_tokens=TOKENS, sampler=sampler, proposer=proposer, k=6)
        assert spec == plain, proposer


def test_bare_reference_loops_decode_what_tandem_decodes(smol_pair, smol_paths):
    """The benchmark's reference decoders must be lossless too, or comparing speed with them means nothing."""
    from app.lab.reference import bare_greedy, bare_speculative

    target_path, draft_path = smol_paths
    prompt = builtin_suite("code")[0].tokens(smol_pair)
    plain, _ = _run(smol_pair, prompt, max_tokens=TOKENS, speculative=False)
    tps, spec = bare_speculative(target_path, draft_path, prompt, TOKENS, k=4, n_ctx=1024)
    assert spec == plain and tps > 0
    assert bare_greedy(target_path, prompt, TOKENS, n_ctx=1024)[1] == plain


def test_a_prefill_leaves_both_caches_as_a_generation_would_find_them(smol_pair):
    """llama.cpp's n_predict 0 (an editor's warm-up): the prompt read into the target's and the draft model's
    caches, its last token pending; plain decoding leaves the draft model alone."""
    prompt = smol_pair.completion_prompt("def fibonacci(n):\n    ")
    smol_pair.reset()
    smol_pair.prefill(prompt, GenConfig(speculative=False))
    assert smol_pair.target.cached == prompt[:-1] and smol_pair.draft.cached == []
    smol_pair.prefill(prompt, GenConfig(proposer="draft"))
    assert smol_pair.draft.cached == prompt[:-1]
    assert smol_pair.target.missing(prompt[:-1]) == 0


def test_completion_prompts_parse_control_token_text_as_llamacpp_does(coder_pair):
    text = "<|fim_prefix|>def f(<|fim_suffix|>)<|fim_middle|>"
    fim = coder_pair.target.fim_tokens()
    ids = coder_pair.completion_prompt(text)
    assert [fim.pre, fim.suf, fim.mid] == [i for i in ids if coder_pair.target.is_control(i)]
    assert not any(coder_pair.target.is_control(i) for i in coder_pair.completion_prompt(text, special=False))
