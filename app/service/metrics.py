"""Prometheus metrics (``GET /metrics``) with ``prometheus_client``, in a registry of their own.

Token counters grow with every generation the runner completes — API requests and the UI's chats alike
(``AppState.observers``); request counters and latency count the OpenAI-compatible endpoints; the queue
gauges read the generation lock when scraped. Names follow vLLM's / llama.cpp's speculative counters
(drafted, accepted, per position) under the ``tandem_`` prefix.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from app.engine.events import DoneEvent, Drafter
from app.engine.loop import GenConfig
from app.engine.names import ProposerName
from app.service.state import AppState

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self, state: AppState):
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.generations = Counter("tandem_generations", "Generations completed, by mode",
                                   ["mode"], registry=r)
        self.emitted = Counter("tandem_emitted_tokens", "Tokens generated (emitted by the target)", registry=r)
        self.drafted = Counter("tandem_draft_tokens", "Tokens proposed, by drafter (the draft model or lookup)",
                               ["drafter"], registry=r)
        self.accepted = Counter("tandem_accepted_tokens", "Drafted tokens the target accepted, by drafter",
                                ["drafter"], registry=r)
        self.passes = Counter("tandem_target_passes", "Target forward passes (one per decode step)", registry=r)
        self.drafts = Counter("tandem_drafts", "Decode steps that verified a non-empty draft", registry=r)
        self.tested_pos = Counter("tandem_draft_tokens_per_pos",
                                  "Drafted tokens the target judged, by position in the draft (0-based)",
                                  ["position"], registry=r)
        self.accepted_pos = Counter("tandem_accepted_tokens_per_pos",
                                    "Drafted tokens the target accepted, by position in the draft (0-based)",
                                    ["position"], registry=r)
        self.decode_seconds = Counter("tandem_decode_seconds", "Decode time, prompt processing excluded",
                                      registry=r)
        self.tokens_per_s = Gauge("tandem_tokens_per_second", "Decode tokens/s of the latest generation",
                                  registry=r)
        self.prompt_tokens = Counter("tandem_prompt_tokens", "Prompt tokens of API requests", registry=r)
        self.requests = Counter("tandem_requests", "OpenAI-compatible API requests, by endpoint and HTTP status",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("tandem_request_seconds", "API request time, queueing included", ["endpoint"],
                                 buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=r)
        queued = Gauge("tandem_queue_length", "Generations waiting for the pair (one runs at a time)", registry=r)
        queued.set_function(lambda: state.generation_lock.waiting)
        running = Gauge("tandem_generation_running", "1 while a generation holds the pair", registry=r)
        running.set_function(lambda: 1.0 if state.generation_lock.locked() else 0.0)
        r.register(_PromptCacheCollector(state))
        r.register(_DraftCollector(state))
        state.observers.append(self.observe)

    def observe(self, done: DoneEvent, cfg: GenConfig) -> None:
        """Count one finished generation (called by the runner's worker)."""
        s = done.stats
        self.generations.labels(mode="speculative" if cfg.speculative else "plain").inc()
        self.emitted.inc(s.tokens)
        lookup = s.lookup_drafted if cfg.proposer != ProposerName.LOOKUP else s.drafted  # (lookup alone: all)
        lookup_ok = s.lookup_accepted if cfg.proposer != ProposerName.LOOKUP else s.accepted
        self.drafted.labels(drafter=Drafter.MODEL).inc(s.drafted - lookup)
        self.drafted.labels(drafter=Drafter.LOOKUP).inc(lookup)
        self.accepted.labels(drafter=Drafter.MODEL).inc(s.accepted - lookup_ok)
        self.accepted.labels(drafter=Drafter.LOOKUP).inc(lookup_ok)
        self.passes.inc(s.steps)
        self.drafts.inc(s.spec_steps)
        for i, n in enumerate(s.tested_at):
            self.tested_pos.labels(position=str(i)).inc(n)
        for i, n in enumerate(s.accepted_at):
            self.accepted_pos.labels(position=str(i)).inc(n)
        self.decode_seconds.inc(s.t_total)
        if s.tokens:
            self.tokens_per_s.set(s.tokens_per_s)

    def request(self, endpoint: str, status: int, seconds: float, prompt_tokens: int = 0) -> None:
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()
        self.latency.labels(endpoint=endpoint).observe(seconds)
        if prompt_tokens:
            self.prompt_tokens.inc(prompt_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _PromptCacheCollector:
    """The prompt cache's counters and size, read from the state's cache when scraped (it may be replaced)."""

    def __init__(self, state: AppState):
        self.state = state

    def describe(self) -> list:
        return []  # names known only when collected: no duplicates to check at registration

    def collect(self):
        c = self.state.prompt_cache
        for name, text, value in (
                ("tandem_prompt_cache_restores", "Saved prompt states put back for a request", c.restores),
                ("tandem_prompt_cache_saves", "Prompt states saved before a request replaced them", c.saves),
                ("tandem_prompt_cache_evictions", "Saved prompt states dropped for room (least recently used)",
                 c.evicted)):
            yield CounterMetricFamily(name, text, value=value)
        yield GaugeMetricFamily("tandem_prompt_cache_bytes", "Bytes of RAM the saved prompt states hold", value=c.size)
        yield GaugeMetricFamily("tandem_prompt_cache_entries", "Saved prompt states", value=len(c.entries))
        yield GaugeMetricFamily("tandem_prompt_cache_limit_bytes", "The prompt cache's budget (0: off)",
                                value=c.budget)


class _DraftCollector:
    """What drafts for the loaded pair, read when scraped: ``tandem_draft_info{draft, kind}`` = 1 (``kind``: the
    words the app shows, e.g. "draft model", "EAGLE-3 head", "DFlash block"); no sample without a draft file.
    The token counters' ``drafter="draft"`` counts whatever this names."""

    def __init__(self, state: AppState):
        self.state = state

    def describe(self) -> list:
        return []

    def collect(self):
        pair = self.state.pair
        info = GaugeMetricFamily("tandem_draft_info", "The loaded pair's draft file and how it drafts",
                                 labels=["draft", "kind"])
        if pair is not None and pair.draft is not None and pair.draft_kind is not None:
            info.add_metric([pair.draft.path.name, str(pair.draft_kind)], 1.0)
        yield info
