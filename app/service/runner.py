"""Runs generations for the front ends: the engine's event stream, consumed in a worker thread, summarised
live.

The worker holds ``AppState.generation_lock`` (one generation at a time per loaded pair) and feeds a queue; the
caller (a Gradio handler, an API request) drains it and yields a :class:`Live` snapshot a few times a second. If
the caller is cancelled or its client goes away, the stop switch is set, so the worker ends within one
speculative step and releases the lock itself.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Generator, Optional, Sequence

from app.engine.events import DoneEvent, StepEvent, StopReason, StrEnum, TokenEvent
from app.engine.llama.promptcache import Recall
from app.engine.loop import GenConfig
from app.engine.names import ProposerName
from app.engine.pair import Pair
from app.engine.stats import Stats
from app.engine.summary import Summary
from app.errors import NoPairLoaded, ui_message
from app.lab.parting import divergence
from app.service.state import AppState

_START, _END = "start", "end"


class RunStatus(StrEnum):
    """Where a stream of jobs stands (the first item of each snapshot ``stream`` yields)."""

    WAITING = "waiting"  # another generation holds the pair
    RUNNING = "running"
    DONE = "done"


@dataclass
class Live:
    """What one generation looks like so far."""

    speculative: bool
    baseline_tps: Optional[float] = None
    tokens: list = field(default_factory=list)  # TokenEvents
    stats: Stats = field(default_factory=Stats)
    done: Optional[DoneEvent] = None
    error: Optional[str] = None
    exception: Optional[BaseException] = None  # what ``error`` describes (for callers that map it, e.g. to HTTP)
    started: Optional[float] = None  # wall time the job began (prefill included)
    last: Optional[float] = None  # wall time of the latest step
    times: list = field(default_factory=list)  # wall time each token arrived (Compare's race replay)
    draft_texts: dict = field(default_factory=dict)  # token index → the draft's rejected proposal, as text
    cached: Optional[int] = None  # prompt tokens the KV cache already held (reused, not processed again)
    restored: int = 0  # of them, those a saved prompt state put back (the prompt cache: promptcache.py)
    pieces: dict = field(default_factory=dict)  # token id → its bytes, for the logprobs' alternatives
    parting: Optional["Parting"] = None  # where two greedy jobs' outputs parted, and how close the target was there
    tree: Optional[StepEvent] = None  # the latest step that verified a tree draft (its nodes: ``branches``)
    drafter: Optional[str] = None  # what proposed the tokens a model drafted, in words ("EAGLE-3 head"; the inspector's)

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def running(self) -> bool:
        return self.started is not None and self.done is None and self.error is None

    @property
    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        end = self.last if not self.running else time.perf_counter()
        return max((end or self.started) - self.started, 0.0)

    @property
    def decode_start(self) -> Optional[float]:
        """Wall time decoding began (prompt processing done), once a step has arrived."""
        return self.stats.t_first

    def summary(self) -> Summary:
        """The engine's final stats once done; a live estimate before (decode time from wall clock)."""
        if self.done is not None:
            return self.done.stats
        return self.stats.summary(self.baseline_tps, wall=True)

    def add(self, ev, now: float) -> None:
        if isinstance(ev, TokenEvent):
            self.tokens.append(ev)
            self.times.append(now)
        elif isinstance(ev, DraftText):
            self.draft_texts[ev.index] = ev.text
        elif isinstance(ev, Drafting):
            self.drafter = ev.words
        elif isinstance(ev, PromptCache):
            self.cached, self.restored = ev.cached, ev.restored
        elif isinstance(ev, Pieces):
            self.pieces.update(ev.pieces)
        elif isinstance(ev, StepEvent):
            self.stats.add(ev, now)
            self.last = now
            if ev.branches:
                self.tree = ev
        elif isinstance(ev, DoneEvent):
            self.done = ev
            self.last = now

    def as_tokens(self) -> list[dict]:
        return [{"text": t.text, "kind": t.kind} for t in self.tokens]


@dataclass(frozen=True)
class DraftText:
    index: int  # the corrected token's position in the reply
    text: str  # what the draft had proposed there


@dataclass(frozen=True)
class Drafting:
    words: Optional[str]  # what drafts for the job's proposer, in words (None: prompt lookup only, or plain)


def drafter_words(pair: Pair, cfg: GenConfig) -> Optional[str]:
    """What proposes the tokens a model drafts under ``cfg`` on ``pair``, as the inspector names it: the target's
    MTP head, or the draft's kind (a draft model, the assistant drafter, an EAGLE-3 head, a DFlash block); None
    where only prompt lookup drafts or nothing does."""
    if not cfg.speculative or pair.proposer_kind(cfg) == ProposerName.LOOKUP:
        return None
    if cfg.proposer in (ProposerName.MTP, ProposerName.TREE) and pair.draft is None:
        return "MTP head"
    return str(pair.draft_kind) if pair.draft_kind is not None else None


@dataclass(frozen=True)
class PromptCache:
    cached: int  # prompt tokens the KV cache held for the job: expected as it begins, as read once the prompt is in
    restored: int = 0  # of them, those a saved prompt state put back


@dataclass(frozen=True)
class Parting:
    position: int  # the first token where the outputs differ
    gap: float  # the target's top-1 minus top-2 logit there
    near_tie: bool  # the gap is under what batched passes measurably move this reply's gaps (``parting.py``)
    rounding: Optional[float] = None  # that measured move


@dataclass(frozen=True)
class Pieces:
    pieces: dict  # token id → bytes (decoded in the worker: piece() is not thread-safe)


class _PromptRead:
    """Once the prompt is in: how much of it the target's cache held, as counted by what it decoded (the last
    prompt token is read by the first decode step, so it never counts as held)."""

    def __init__(self, pair: Pair, tokens: Sequence[int], restored: int, q: queue.Queue, index: int):
        self.target, self.n, self.restored, self.q, self.index = pair.target, len(tokens), restored, q, index
        self.before = pair.target.decoded

    def __call__(self, seconds: float) -> None:
        held = max(0, self.n - 1 - (self.target.decoded - self.before))
        self.q.put((PromptCache(held, min(self.restored, held)), self.index, time.perf_counter()))


def _pieces(pair: Pair, ev: TokenEvent) -> Optional[Pieces]:
    lp = ev.logprob
    if lp is None:
        return None
    return Pieces({t: pair.target.piece(t) for t in {lp.token, *(alt.token for alt in lp.top)}})


def _text(pair: Pair, token: int) -> str:
    """A proposal's text; a special token (an end-of-turn copied by prompt lookup) by its name, not as nothing."""
    return pair.target.piece(token, special=True).decode("utf-8", errors="replace")


@dataclass
class Job:
    cfg: GenConfig
    reset: bool = False  # start from a cold KV cache (fair timing in Compare)
    prefill: bool = False  # only read the prompt into the caches (an editor's warm-up): no tokens, at once


PromptFn = Callable[[Pair], Sequence[int]]


def stream(state: AppState, prompt: PromptFn, jobs: Sequence[Job], stop: threading.Event,
           interval: float = 0.1, judge: bool = False) -> Generator[tuple[RunStatus, list[Live]], None, None]:
    """Yield (status, lives) while the jobs run one after another under the generation lock.

    status is a RunStatus: waiting (another generation holds the pair), running or done. Errors (prompt past the
    context, no pair, bad template…) end the run with ``Live.error`` set on the job that failed. ``judge``: when
    two greedy jobs' outputs differ, measure the target's top-two gap where they part (``Live.parting``): a
    near-tie that batched and one-token passes round differently, or a real fault."""
    baseline = state.baseline_tps()
    lives = [Live(speculative=j.cfg.speculative, baseline_tps=baseline) for j in jobs]
    q: queue.Queue = queue.Queue()

    def tokenised() -> tuple[Optional[Pair], list[int]]:
        # before the lock: a long prompt is tokenised while another request generates (the pair is kept
        # from being swapped meanwhile), and its client leaving abandons it (the prompt's cancel switch)
        with state.readers.shared():
            pair = state.pair
            return pair, ([] if pair is None else list(prompt(pair)))

    def work() -> None:
        try:
            first, tokens = tokenised()
        except Exception as exc:  # shown to the user; the app keeps running
            q.put((exc, None, None))
            q.put((_END, None, None))
            return
        with state.generation_lock:
            q.put((_START, None, None))
            try:
                pair = state.pair
                if pair is None:
                    raise NoPairLoaded(state.load_error or "no pair is loaded yet; choose one in Pair settings")
                if pair is not first:  # the pair was switched while this request waited
                    tokens = list(prompt(pair))
                dones: list[DoneEvent] = []
                for i, job in enumerate(jobs):
                    if stop.is_set():
                        break
                    if job.reset:
                        pair.reset()
                    q.put((_START, i, time.perf_counter()))
                    # a cold start (Compare's fair timing) takes nothing from the prompt cache
                    recalled = Recall(0) if job.reset or not tokens else pair.recall(tokens, state.prompt_cache)
                    q.put((PromptCache(recalled.reused, recalled.restored), i, time.perf_counter()))
                    q.put((Drafting(drafter_words(pair, job.cfg)), i, time.perf_counter()))
                    read = _PromptRead(pair, tokens, recalled.restored, q, i)
                    if job.prefill:
                        pair.prefill(tokens, job.cfg)
                        read(0.0)
                        q.put((DoneEvent(reason=StopReason.MAX_TOKENS), i, time.perf_counter()))
                        continue
                    for ev in pair.generate(tokens, job.cfg, stop=stop, baseline_tps=lives[i].baseline_tps,
                                            on_prefill=read):
                        if isinstance(ev, TokenEvent) and ev.logprob is not None:  # (before the token's snapshot)
                            q.put((_pieces(pair, ev), i, time.perf_counter()))
                        q.put((ev, i, time.perf_counter()))
                        # the draft's rejected proposal, decoded here: piece() is not thread-safe
                        if isinstance(ev, TokenEvent) and ev.draft_token is not None:
                            q.put((DraftText(ev.index, _text(pair, ev.draft_token)), i, time.perf_counter()))
                        if isinstance(ev, DoneEvent):
                            dones.append(ev)
                            _notify(state, ev, job.cfg)
                if judge and not stop.is_set():
                    parted = _parting(pair, tokens, jobs, dones)
                    if parted is not None:
                        q.put((parted, None, time.perf_counter()))
            except Exception as exc:  # shown to the user; the app keeps running
                q.put((exc, None, None))
            finally:
                q.put((_END, None, None))

    finished = False
    try:
        if state.busy:
            yield RunStatus.WAITING, lives
        threading.Thread(target=work, name="tandem-generate", daemon=True).start()
        current, last_yield, status = 0, 0.0, RunStatus.WAITING
        while True:
            try:
                item, idx, now = q.get(timeout=interval)
            except queue.Empty:
                yield status, lives  # also while waiting: the caller may see its client gone and stop
                continue
            if item == _START:
                status = RunStatus.RUNNING
                if idx is not None:
                    current = idx
                    lives[idx].started = now
                yield status, lives
                continue
            if item == _END:
                break
            if isinstance(item, Exception):
                lives[current].error = ui_message(item)
                lives[current].exception = item
                continue
            if isinstance(item, Parting):
                for live in lives:
                    live.parting = item
                continue
            lives[idx].add(item, now)
            if time.perf_counter() - last_yield >= interval or isinstance(item, DoneEvent):
                last_yield = time.perf_counter()
                yield status, lives
        finished = True
        yield RunStatus.DONE, lives
    finally:
        if not finished:
            stop.set()  # the client went away or cancelled: let the worker end and free the pair


def _parting(pair: Pair, tokens: Sequence[int], jobs: Sequence[Job], dones: Sequence[DoneEvent]
             ) -> Optional[Parting]:
    if len(dones) != 2 or len(jobs) != 2 or not all(j.cfg.sampler.greedy for j in jobs):
        return None
    parted = divergence(pair, tokens, dones[0].tokens, dones[1].tokens)
    return None if parted is None else Parting(parted["position"], parted["gap"], parted["near_tie"], parted["rounding"])


def _notify(state: AppState, done: DoneEvent, cfg: GenConfig) -> None:
    for observer in list(state.observers):
        try:
            observer(done, cfg)
        except Exception:  # pragma: no cover - an observer (metrics) must never break a generation
            pass
