"""The one place the app's state lives (no module-level globals holding components or models).

One AppState per running app, shared by its front ends: the UI's tabs receive it in ``build(state)``, the API
is bound to it. It holds the loaded pair and how it
was loaded, the generation lock (one generation at a time per loaded pair), per-session stop switches and the
key of the plain-decoding baselines (stored by ``app.lab.baselines``). Each browser session's chat history and
comparisons live in that session's ``gr.State``.
"""

from __future__ import annotations

import platform
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from app.engine.llama.backend import BackendError, LoadOptions
from app.engine.llama.devices import active_backend
from app.engine.llama.promptcache import PromptCache
from app.engine.pair import Pair
from app.lab import baselines
from app.models import standin
from app.service.fifo import FifoLock, Readers

Progress = Callable[[float, str], None]  # (fraction 0..1, description)


@dataclass
class Activity:
    """What holds the generation lock, in words a waiting user reads ("Make it faster's quick sweep"), with its
    progress where the holder reports one."""

    what: str
    done: int = 0
    total: int = 0
    eta_s: Optional[float] = None

    def words(self) -> str:
        parts = [f"run {self.done} of {self.total}"] if self.total else []
        if self.eta_s is not None:
            parts.append(f"about {max(self.eta_s, 1):.0f} s left")
        return self.what + (f" ({', '.join(parts)})" if parts else "")


@dataclass
class AppState:
    pair: Optional[Pair] = None
    pair_id: Optional[str] = None
    target_path: Optional[str] = None
    draft_path: Optional[str] = None
    defaults: dict[str, Any] = field(default_factory=dict)  # generation settings (tuned ones land here)
    generation_lock: FifoLock = field(default_factory=FifoLock)  # first come, first served
    target_options: LoadOptions = field(default_factory=lambda: LoadOptions(n_ctx=4096, n_gpu_layers=-1))
    draft_options: Optional[LoadOptions] = None
    load_error: Optional[str] = None  # why the last load failed (shown in the pair tab)
    gpu_layers: tuple = ("auto", "auto")  # (target, draft) as asked: a number of layers or "auto"
    gpu_choice: Optional[Any] = None  # the offload.Choice the loaded pair was loaded with
    recent: dict[str, Any] = field(default_factory=dict)  # latest Compare per pair+settings (service/speedup.py)
    offer: Optional[Any] = None  # a stand-in pair offered or loaded where the pair cannot pay (service/firstrun.py)
    _stops: dict[str, threading.Event] = field(default_factory=dict)
    # called with (DoneEvent, GenConfig) after every generation the runner completes (e.g. the /metrics counters)
    observers: list[Callable[[Any, Any], None]] = field(default_factory=list)
    _switch_lock: threading.Lock = field(default_factory=threading.Lock)
    readers: Readers = field(default_factory=Readers)  # prompts tokenised outside the generation lock
    # saved prompt states of the loaded pair (llama.cpp's --cache-ram); the runner recalls them before each job
    prompt_cache: PromptCache = field(default_factory=PromptCache)
    activity: Optional[Activity] = None  # what holds the generation lock, where its holder says (else None)

    def apply_defaults(self, settings: dict[str, Any]) -> None:
        """Make ``settings`` (k, p_min, proposer, draft, …) the defaults of Chat and Compare."""
        self.defaults.update(settings)

    # --- generation slots ------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.generation_lock.locked()

    def holder(self) -> str:
        """What a generation waiting now waits for, in words (with progress where known)."""
        act = self.activity
        if act is not None and self.busy:
            return act.words()
        return "an API client's reply, a benchmark or a measurement"

    @contextmanager
    def doing(self, activity: Activity) -> Iterator[Activity]:
        """Name what holds the generation lock while the block runs (its holder may update its progress)."""
        self.activity = activity
        try:
            yield activity
        finally:
            if self.activity is activity:
                self.activity = None

    def stop_event(self, session: str) -> threading.Event:
        """A fresh stop switch for ``session``'s next generation."""
        ev = threading.Event()
        self._stops[session] = ev
        return ev

    def armed_stop_event(self, session: str) -> threading.Event:
        """The switch armed when the user pressed Send (so a Stop pressed before the generation starts is not
        lost), or a fresh one."""
        return self._stops.get(session) or self.stop_event(session)

    def stop_all(self) -> None:
        """Every session's switch flipped (the app is shutting down): running generations end at their next step."""
        for ev in list(self._stops.values()):
            ev.set()

    def request_stop(self, session: str) -> bool:
        ev = self._stops.get(session)
        if ev is None:
            return False
        ev.set()
        return True

    # --- the pair --------------------------------------------------------------------------------------

    def describe_pair(self) -> dict:
        """Facts about the loaded pair for the UI (no engine objects)."""
        if self.pair is None:
            return {"loaded": False, "error": self.load_error}
        t, d = self.pair.target, self.pair.draft
        info = {
            "loaded": True, "pair_id": self.pair_id, "backend": backend_name(),
            "target": _model_facts(t, self.target_options.n_gpu_layers),
            "draft": _model_facts(d, (self.draft_options or LoadOptions(n_gpu_layers=-1)).n_gpu_layers)
            if d is not None else None,
            "n_ctx": t.n_ctx, "threads": t.n_threads, "error": self.load_error,
            "standin": self.target_caption(),
        }
        return info

    def target_caption(self) -> Optional[str]:
        """"stand-in: <source>'s text at the cost of a <size> model" when the loaded target is a stand-in
        (``app.models.standin``): its text is the small model's, only its cost is the big one's."""
        return standin.caption(self.pair.target.path) if self.pair is not None else None

    def load(self, target_path: str | Path, draft_path: Optional[str | Path], target_options: LoadOptions,
             draft_options: Optional[LoadOptions] = None, pair_id: Optional[str] = None,
             progress: Optional[Progress] = None) -> None:
        """Switch to a new pair. Waits for a running generation; on failure the previous pair stays loaded
        (and working) and the error propagates with its reason."""
        say = progress or (lambda f, d: None)
        for path in (target_path, draft_path):
            if path is not None:
                check_gguf(path)
        with self._switch_lock:
            say(0.05, "waiting for the running generation to finish")
            with self.generation_lock, self.readers.exclusive(), \
                    self.doing(Activity(f"loading the pair {Path(target_path).name}")):
                old = self.pair
                say(0.2, f"loading {Path(target_path).name}" + (f" + {Path(draft_path).name}" if draft_path else ""))
                try:
                    new = Pair.load(target_path, draft_path, target_options, draft_options)
                except BackendError:
                    if old is None:
                        raise
                    # Perhaps both pairs do not fit in memory: free the old one and try again; restore it on failure.
                    say(0.4, "not enough room beside the current pair; unloading it and retrying")
                    old.close()
                    self.pair = None
                    try:
                        new = Pair.load(target_path, draft_path, target_options, draft_options)
                    except BaseException:
                        say(0.7, "restoring the previous pair")
                        self.pair = Pair.load(self.target_path, self.draft_path, self.target_options,
                                              self.draft_options)
                        raise
                    old = None
                say(0.9, "freeing the previous pair")
                self.prompt_cache.clear()  # states of the previous pair's contexts
                if old is not None:
                    old.close()
                self.pair, self.pair_id = new, pair_id
                self.target_path = str(target_path)
                self.draft_path = str(draft_path) if draft_path else None
                self.target_options, self.draft_options = target_options, draft_options
                self.load_error = None
                say(1.0, "loaded")

    def unload(self) -> None:
        with self._switch_lock, self.generation_lock, self.readers.exclusive():
            if self.pair is not None:
                self.pair.close()
            self.pair = None
            self.prompt_cache.clear()

    # --- baselines ---------------------------------------------------------------------------------------

    def baseline_key(self) -> Optional[str]:
        """Baselines are per target file, load options and machine."""
        if self.pair is None:
            return None
        t = self.pair.target
        o = self.target_options
        split = f"|rpc={','.join(o.rpc)}" if o.rpc else ""  # a split target runs at the network's speed
        return (f"{t.path.name}|{t.size_bytes}|ngl={o.n_gpu_layers}{split}|threads={t.n_threads}|ctx={t.n_ctx}|"
                f"{backend_name()}|{platform.node()}|{platform.machine()}")

    def baseline(self) -> Optional[dict]:
        key = self.baseline_key()
        return baselines.get(key) if key else None

    def baseline_tps(self) -> Optional[float]:
        b = self.baseline()
        return float(b["tps"]) if b else None

    def save_baseline(self, tps: float, tokens: int) -> dict:
        key = self.baseline_key()
        if key is None:
            raise RuntimeError("no pair is loaded")
        return baselines.save(key, tps, tokens, self.pair.target.path.name, backend_name())


def check_gguf(path: str | Path) -> None:
    """Refuse a missing or non-GGUF file up front (before the current pair is touched)."""
    p = Path(path)
    if not p.is_file():
        raise BackendError(f"model file not found: {p}")
    with open(p, "rb") as f:
        if f.read(4) != b"GGUF":
            raise BackendError(f"{p.name} is not a GGUF model file")


def backend_name() -> str:
    try:
        return active_backend()
    except Exception:  # pragma: no cover - reporting only
        return "unknown"


def model_desc(desc: str) -> str:
    """llama.cpp's "<arch> <size class> <file type>" as "<arch> · file type <type>": the size class is guessed
    from the layer count (SmolLM2-135M's 30 layers read "256M") and would contradict the parameter count."""
    parts = desc.split(" ", 2)
    if len(parts) < 3:
        return desc
    return f"{parts[0]} · file type {parts[2].replace('all F32', 'F32')}"


def _model_facts(model, n_gpu_layers: int) -> dict:
    return {"file": model.path.name, "desc": model_desc(model.describe()), "size_bytes": model.size_bytes,
            "n_params": model.n_params, "n_ctx": model.n_ctx, "n_gpu_layers": n_gpu_layers}


def session_key(request, default: str = "anon") -> str:
    """The browser session a Gradio request comes from (``default`` for API calls without one)."""
    return getattr(request, "session_hash", None) or default
