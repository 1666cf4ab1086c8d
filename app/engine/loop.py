"""The decode loop: plain and speculative decoding as one generator of events.

Each step: the proposer drafts up to K tokens (cut after an end-of-generation token: nothing after it can be
emitted); the target decodes ``[last] + draft`` in one ``llama_decode``
with logits for those K+1 rows only; a verification rule (``verify.py``) accepts a prefix and supplies the
next token; the target's KV cache is rolled back past the rejected tokens (checked). Speculation off is the
same loop with an empty draft, so plain and speculative decoding share every line that could change output.

The target is anything with the ``Target`` protocol (``target.py``): the loaded ``Model``, or a fake in tests.
Invariant: the target's KV cache holds ``tokens[:-1]``; ``tokens[-1]`` is the pending token whose logits the
next pass computes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from app.engine import limits
from app.engine.llama.backend import ContextFullError, RollbackError
from app.engine.decoding.coupled import GumbelNoise, NoiseRows, coupled_accept, coupled_accept_by
from app.engine.control.draftlen import DraftLength
from app.engine.events import (ACCEPTED, BONUS, CORRECTED, LOOKUP, MODEL, PLAIN, DoneEvent, Event, StepEvent,
                               TokenEvent)
from app.engine.decoding.grammar import GrammarSpec, GrammarTrack, MaskedRows, compile_grammar
from app.engine.decoding.logprobs import MAX_TOP, token_logprob
from app.engine.drafters.lookup import PromptLookupProposer
from app.engine.drafters.protocol import Draft, Proposer, end_of_reply
from app.engine.decoding.sampling import SamplerSettings, distribution, greedy_token, make_rng, recent_window
from app.engine.stats import Stats, Summary
from app.engine.target import Target
from app.engine.decoding.text import Utf8Stream
from app.engine.decoding.verify import greedy_accept, rejection_sample, sample_and_match

RULES = ("rejection", "match", "coupled")  # verification rules at T > 0 (coupled: seeds hold, coupled.py)
PROPOSERS = ("auto", "draft", "lookup", "mtp")  # who drafts: both per step (duo.py), the draft model, lookup, the MTP head

# Defaults measured on the demo pair (2-core CPU, 256 tokens, T=0); see README "Choosing K".
DEFAULT_K_MAX = 16
DEFAULT_P_MIN = 0.0


@dataclass(frozen=True)
class GenConfig:
    max_tokens: int = 256
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    speculative: bool = True
    proposer: str = "auto"  # "auto" (lookup or the draft model, per step; lookup without a draft), "draft", "lookup", "mtp"
    k: Union[int, str] = "auto"  # a fixed draft length, or "auto"
    k_max: int = DEFAULT_K_MAX  # ceiling for auto
    p_min: float = DEFAULT_P_MIN  # auto: stop drafting below this draft confidence
    rule: str = "rejection"  # T > 0: "rejection" (exact speculative sampling), "match" (llama.cpp's) or
    # "coupled" (Gumbel-max with noise fixed by (seed, position): the same text with speculation on or off)
    grammar: Optional[GrammarSpec] = None  # the output must match this grammar (grammar.py)
    logprobs: Optional[int] = None  # None: off; n (0..20): each token's logprob and the n likeliest tokens

    def validate(self) -> "GenConfig":
        """Raise ValueError (``limits.LimitError``) naming a setting outside its documented range."""
        self.sampler.validate()
        limits.check("max_tokens", self.max_tokens)
        if self.k != "auto":
            if not isinstance(self.k, int) or isinstance(self.k, bool):
                raise limits.LimitError(f"k must be a positive integer or 'auto', not {self.k!r}")
            limits.check("k", self.k)
        limits.check("k_max", self.k_max)
        limits.check("p_min", self.p_min)
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, not {self.rule!r}")
        if self.proposer not in PROPOSERS:
            raise ValueError(f"proposer must be one of {PROPOSERS}, not {self.proposer!r}")
        if self.logprobs is not None and not (isinstance(self.logprobs, int) and 0 <= self.logprobs <= MAX_TOP):
            raise ValueError(f"top_logprobs must be an integer between 0 and {MAX_TOP}, not {self.logprobs!r}")
        if self.grammar is not None:
            self.grammar.to_gbnf()  # a schema the converter cannot express fails here
        return self


class _Rows:
    """Target distributions computed on first use (a rejection at position i never needs rows > i)."""

    def __init__(self, logits: Union[np.ndarray, MaskedRows], sampler: SamplerSettings, history: Sequence[int],
                 draft: Sequence[int]):
        self.logits, self.sampler, self.history, self.draft = logits, sampler, history, draft
        self.cache: dict[int, np.ndarray] = {}

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self.cache:
            context = list(recent_window(self.history, self.sampler)) + list(self.draft[:i])
            self.cache[i] = distribution(self.logits[i], self.sampler, context)
        return self.cache[i]

    def __len__(self) -> int:
        return len(self.draft) + 1


def judge(logits: Union[np.ndarray, MaskedRows], draft: Draft, history: Sequence[int], cfg: GenConfig,
          rng: np.random.Generator, noise: Optional[GumbelNoise] = None) -> tuple[int, int]:
    """(accepted count, next token) for one verification pass; ``logits`` has len(draft) + 1 rows (an array, or
    rows masked by a grammar on first use); ``noise``: the coupled rule's Gumbel noise."""
    s = cfg.sampler
    if s.greedy:
        if s.repeat_penalty == 1.0:
            best = np.argmax(logits, axis=1).tolist()
        else:
            recent = list(recent_window(history, s))
            best = [greedy_token(logits[i], s, recent + draft.tokens[:i]) for i in range(len(logits))]
        n = greedy_accept(draft.tokens, best)
        return n, best[n]
    p = _Rows(logits, s, history, draft.tokens)
    if cfg.rule == "match":
        return sample_and_match(p, draft.tokens, rng)
    if cfg.rule == "coupled" and noise is not None:
        g = NoiseRows(noise, len(history), logits.shape[1])
        untransformed = s.top_k == 0 and s.top_p == 1.0 and s.min_p == 0.0 and s.repeat_penalty == 1.0
        if isinstance(logits, MaskedRows) and untransformed:  # a grammar: no full mask where it can be helped
            return coupled_accept_by(lambda i: logits.gumbel_max(i, s.temperature, g[i]), draft.tokens)
        return coupled_accept(p, draft.tokens, g)
    return rejection_sample(p, draft.q, draft.tokens, rng)


def generate(target: Target, prompt: Sequence[int], cfg: GenConfig, proposer: Optional[Proposer] = None,
             stop: Optional[threading.Event] = None, baseline_tps: Optional[float] = None,
             on_prefill: Optional[Callable[[float], None]] = None,
             length: Optional[DraftLength] = None) -> Iterator[Event]:
    """Generate from ``prompt`` (token ids); yields TokenEvents and StepEvents, then one DoneEvent.

    ``proposer`` is used when ``cfg.speculative``; ``stop`` ends generation at the next step boundary;
    ``baseline_tps`` (plain tokens/s of this target here) lets the final stats carry speedup, c, v and bound;
    ``length``: a draft-length controller that carries what earlier generations measured (a fresh one for
    ``cfg.k`` if None). Raises ContextFullError (prompt too long), RollbackError (speculation on recurrent
    memory) and GrammarError (a grammar llama.cpp cannot parse) up front.
    """
    cfg.validate()
    if not prompt:
        raise ValueError("the prompt is empty")
    if len(prompt) >= target.n_ctx:
        raise ContextFullError(
            f"the prompt is {len(prompt)} tokens but the context holds {target.n_ctx}; "
            "shorten it or load the pair with a larger context"
        )
    spec = proposer if cfg.speculative else None
    reach = getattr(target, "rollback_limit", None)  # recurrent memory drops at most this many tokens a pass
    if spec is not None and target.recurrent and not reach:
        raise RollbackError(f"{target.path.name} has recurrent/hybrid memory of an architecture whose state "
                            "llama.cpp cannot roll back; turn speculation off for this model")
    rng = make_rng(cfg.sampler)
    sample_draft = not cfg.sampler.greedy and cfg.rule in ("rejection", "coupled")
    track = GrammarTrack(compile_grammar(target, cfg.grammar)) if cfg.grammar is not None else None
    noise = None
    if cfg.rule == "coupled" and not cfg.sampler.greedy:
        seed = cfg.sampler.seed if cfg.sampler.seed is not None else int(rng.integers(2 ** 63))
        noise = GumbelNoise(seed)
    length = length or DraftLength(cfg.k, cfg.k_max)
    length.begin()
    retest = getattr(spec, "retest_tokens", 0)
    if retest:  # its acceptance was measured on another text: a pause on it is re-tested
        length.retest(retest)
    mixes = spec is not None and getattr(spec, "mixes", False)  # the proposer chooses its drafter per step
    mixer: Any = spec  # a mixing proposer (duo.py) has bind() and finish() besides the protocol
    if mixes:
        mixer.bind(length)
    free: Optional[Proposer] = None  # prompt lookup for the controller's free probes

    t0 = time.perf_counter()
    target.sync(prompt[:-1], need_logits=False)
    if spec is not None:
        spec.begin(prompt, warm=length.warm)  # paused on a cost: the draft catches up only if drafting resumes
    if on_prefill:
        on_prefill(time.perf_counter() - t0)

    tokens = list(prompt)
    stream, stats = Utf8Stream(), Stats()
    text: list[str] = []
    emitted, step, reason = 0, 0, None
    end: Optional[int] = None  # the end-of-generation token the target chose, if it ended so
    while reason is None:
        if stop is not None and stop.is_set():
            reason = "stopped"
            break
        t_step = time.perf_counter()
        room = target.n_ctx - len(tokens)  # KV after the pass: len(tokens) + len(draft)
        if room < 1:
            reason = "context"
            break
        cap = min(cfg.max_tokens - emitted - 1, room - 1, reach or room) if spec is not None else 0
        k = min(length.k, cap)
        source = spec
        if k > 0 and length.free_probe and spec.name != PromptLookupProposer.name:
            if free is None:
                free = PromptLookupProposer()
                free.begin(prompt)
            source = free
        coupling = {"noise": noise} if noise is not None and getattr(source, "couples", False) else {}
        limit = min(length.k_max, cap) if mixes and source is spec and not length.wake else k
        draft = source.propose(tokens, limit, cfg.sampler, rng, sample_draft, **coupling) if limit > 0 else Draft()
        if track is not None:
            draft = _cut(draft, track.cut(draft.tokens))
        draft = _cut(draft, end_of_reply(draft.tokens, target.is_eog) or len(draft.tokens))
        if k == 0 and spec is not None and length.wake and hasattr(spec, "time_tokens"):
            draft.seconds = spec.time_tokens(tokens, length.wake)  # re-measure the sleeping draft's cost

        t_pass = time.perf_counter()
        batch = [tokens[-1]] + draft.tokens
        logits = target.decode(batch, range(len(batch)))
        plain_argmax = cfg.sampler.greedy and cfg.sampler.repeat_penalty == 1.0
        rows = logits if track is None else track.rows(logits, plain_argmax)
        n, nxt = judge(rows, draft, tokens, cfg, rng, noise)
        if track is not None:
            track.advance(n, nxt, target.is_eog(nxt))
        target.rollback(len(tokens) + n)
        t_verify = time.perf_counter() - t_pass

        events: list[Event] = []
        for i, tok in enumerate(draft.tokens[:n] + [nxt]):
            if target.is_eog(tok):
                reason, end = "eog", tok
                break
            kind = ACCEPTED if i < n else (CORRECTED if n < len(draft.tokens) else (BONUS if draft.tokens else PLAIN))
            tokens.append(tok)
            events.append(TokenEvent(
                token=tok, text=stream.feed(target.piece(tok)), kind=kind, step=step,
                draft_pos=i if i < len(draft.tokens) else None,
                draft_prob=draft.probs[i] if i < len(draft.probs) else None, index=emitted,
                draft_token=draft.tokens[i] if kind == CORRECTED and i < len(draft.tokens) else None,
                drafter=(LOOKUP if draft.from_lookup(i) else MODEL) if i < len(draft.tokens) else None,
                logprob=token_logprob(logits[i], tok, cfg.logprobs) if cfg.logprobs is not None else None,
            ))
            emitted += 1
            if emitted >= cfg.max_tokens:
                reason = "max_tokens"
                break
        probe = spec is not None and length.probing and bool(draft.tokens)  # (a probe may find nothing)
        paused = spec is not None and length.paused and not draft.tokens
        why = length.limit() if paused else None  # why this step was plain (the update may resume drafting)
        mixed = mixes and source is spec  # lookup's tokens (before or after the model's) are free for the controller
        length.update(len(draft.tokens), n, draft.seconds, t_verify, draft.synced, t_sync=draft.t_sync,
                      free=draft.lookup if mixed else 0, tail=draft.tail if mixed else 0)
        step_ev = StepEvent(step=step, drafted=len(draft.tokens), accepted=n, emitted=len(events),
                            t_draft=draft.seconds, t_verify=t_verify, k=k, t_step=time.perf_counter() - t_step,
                            paused=paused, probe=probe, limit=why, lookup=draft.lookup + draft.tail,
                            lookup_accepted=draft.lookup_kept(n), t_sync=draft.t_sync)
        stats.add(step_ev)
        step += 1
        text.extend(e.text for e in events)
        yield from events
        yield step_ev

    if mixes:
        mixer.finish(tokens, end)  # the reply's last tokens join lookup's memory
    tail = stream.flush()
    if tail:
        text.append(tail)
        yield TokenEvent(token=-1, text=tail, kind=PLAIN, step=step, index=emitted)
    stats.end(length.limit())
    yield DoneEvent(reason=reason or "stopped", stats=stats.summary(baseline_tps), text="".join(text),
                    tokens=tuple(tokens[len(prompt):]))


def _cut(draft: Draft, n: int) -> Draft:
    """The draft's first ``n`` tokens (those a grammar allows, those up to an end of generation)."""
    if n == len(draft.tokens):
        return draft
    return Draft(tokens=draft.tokens[:n], q=None if draft.q is None else draft.q[:n], probs=draft.probs[:n],
                 seconds=draft.seconds, synced=draft.synced, t_sync=draft.t_sync, lookup=min(draft.lookup, n),
                 tail=max(0, draft.tail - (len(draft.tokens) - n)))


def run(target: Target, prompt: Sequence[int], cfg: GenConfig, proposer: Optional[Proposer] = None,
        baseline_tps: Optional[float] = None, length: Optional[DraftLength] = None) -> tuple[list[int], Summary]:
    """Run a whole generation; (generated token ids, stats summary, with speedup if a baseline is given)."""
    done = None
    for ev in generate(target, prompt, cfg, proposer, baseline_tps=baseline_tps, length=length):
        if isinstance(ev, DoneEvent):
            done = ev
    assert done is not None
    return list(done.tokens), done.stats
