"""First run on a GPU: where the loaded pair cannot pay, a stand-in target whose step is memory-bound.

On a GPU a 135M–270M target's step is bound by kernel launches (an H100: 1.8 ms, and a draft token about as
much), so drafting cannot save time however often the draft is right, and the Chat says "Speculation paused …
drafting cannot pay here". A stand-in of the same target (``models/standin.py``) writes the same text at a bigger
model's cost: its step reads f² times the weights. :func:`decide` is a pure function of what was measured (a
plain target step, a draft token), the machine (its GPUs and their free memory) and the stand-ins' estimates:

1. the loaded pair cannot pay where a draft token costs at least ``C_CANNOT_PAY`` of a target step, or, with no
   draft cost measured, where a GPU step takes under ``FAST_STEP_S``;
2. a stand-in's step is predicted, on a GPU, as the longer of the measured step (launches) and its weights read
   at the GPU's memory bandwidth (``models/bandwidth.py``); on a CPU, as the measured step scaled by its weights;
3. the smallest stand-in whose predicted c (a draft token over its step) is at most ``C_WANTED`` and that fits
   (a GPU: in the GPU's free memory, beside the draft) is chosen; none reaching it: the one with the lowest c
   under ``C_CANNOT_PAY``, offered as one that may pay a little; none fitting: nothing, with the figures;
4. it is *picked* (derived and loaded at start, saying why) on a GPU where it fits and no pair was asked for by
   name, else *offered*. A machine without a GPU is never switched by itself: the demo pairs pay on CPUs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from app import paths
from app.engine.decoding.sampling import SamplerSettings
from app.engine.loop import GenConfig
from app.engine.names import ProposerName, StrEnum
from app.errors import BadInput
from app.lab.bench import measure as measure_run
from app.models import bandwidth, fileops, fit, hardware, meta, standin
from app.models.advice import shape_from_meta
from app.models.catalog import Catalog, load as load_catalog
from app.models.fit import GIB, Machine
from app.models.provision import ensure_pair
from app.service.baseline import PROMPT, warm_up
from app.service.loading import PairOptions, load_into
from app.service.state import AppState, Progress

C_CANNOT_PAY = 0.5  # a draft token costing half a target step or more: a draft of acceptance ~0.8 gains < 5 %
C_WANTED = 0.2  # the stand-in's step should be worth five draft tokens or more
FAST_STEP_S = 0.004  # a GPU step this short is bound by kernel launches, not by the weights it reads
TOKENS = 32


class Action(StrEnum):
    NONE = "none"  # nothing to offer: the pair pays here, or no stand-in would pay and fit
    OFFER = "offer"  # a stand-in offered: the user decides
    PICK = "pick"  # a stand-in chosen at start (a GPU where it fits, no pair named)
    SWITCHED = "switched"  # the stand-in pair is loaded (picked or accepted)


@dataclass(frozen=True)
class Measured:
    t_step: float  # a plain target step, seconds
    t_draft: Optional[float] = None  # a draft token, seconds (None: not measured)


@dataclass(frozen=True)
class Candidate:
    pair_id: str
    factor: int
    params: int
    weights: int  # bytes on disk, read once a step
    memory: int  # target and draft together at the app's context
    caption: str  # "stand-in: SmolLM2-135M-Instruct's text at the cost of a 1.8B model"
    installed: bool = False


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str  # the paragraph a person reads
    from_pair: Optional[str] = None
    candidate: Optional[Candidate] = None
    t_step: float = 0.0
    t_draft: Optional[float] = None
    predicted_step: Optional[float] = None
    predicted_c: Optional[float] = None
    bandwidth: Optional[float] = None  # bytes/s the prediction used (GPU only)
    bandwidth_known: bool = False

    @property
    def pair_id(self) -> Optional[str]:
        return self.candidate.pair_id if self.candidate else None

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), pair_id=self.pair_id)


class NoOffer(BadInput):
    hint = "the offer is made at start, on a GPU where the loaded pair cannot pay"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def decide(measured: Measured, machine: Machine, candidates: Sequence[Candidate], source_weights: int,
           explicit: bool = False, from_pair: Optional[str] = None) -> Decision:
    """What to do about a pair measured at ``measured`` on ``machine`` (see the module's docstring): pure."""
    gpu = machine.gpus[0] if machine.gpus else None
    where = f"this GPU ({gpu.description or gpu.name})" if gpu else "this machine"
    t, td = measured.t_step, measured.t_draft
    c = td / t if td is not None and t > 0 else None

    def made(action: Action, why: str, **more: Any) -> Decision:
        return Decision(action, why, from_pair=from_pair, t_step=t, t_draft=td, **more)

    if c is not None and c < C_CANNOT_PAY:
        return made(Action.NONE, f"The loaded pair can pay on {where}: a draft token costs {c:.2f} of a target "
                                 f"step ({_ms(td or 0)} against {_ms(t)}).")
    if c is None and not (gpu and t < FAST_STEP_S):
        return made(Action.NONE, f"A target step takes {_ms(t)} on {where}: long enough for a draft to pay.")
    head = (f"On {where} the loaded pair cannot pay: a target step takes {_ms(t)} and a draft token "
            f"{_ms(td)} — a draft token costs {c:.2f} of a target step, so drafting cannot save time however often "
            "the draft is right." if c is not None and td is not None else
            f"On {where} a target step takes only {_ms(t)}: a model this small is bound by the GPU's kernel launches, "
            "where a draft token costs about as much as a target step, so drafting cannot save time.")
    bw, known = bandwidth.of([f"{g.name} {g.description}" for g in machine.gpus]) if gpu else (0.0, False)
    room = fit.gpu_budget(machine) if gpu else machine.ram_available
    scored = []
    for cand in sorted(candidates, key=lambda x: x.factor):
        step = max(t, cand.weights / (bw * bandwidth.EFFICIENCY)) if gpu else t * cand.weights / source_weights
        scored.append((cand, step, (td if td is not None else t) / step, cand.memory <= room))
    fitting = [s for s in scored if s[3]]
    chosen = next((s for s in fitting if s[2] <= C_WANTED), None)
    good = chosen is not None
    if chosen is None:
        chosen = min((s for s in fitting if s[2] < C_CANNOT_PAY), key=lambda s: s[2], default=None)
    if chosen is None:
        mem = "is free on the GPU" if gpu else "of memory is available"
        big = next((s for s in scored if s[2] <= C_WANTED), scored[-1] if scored else None)
        tail = (f" The smallest stand-in that would pay, {big[0].pair_id}, needs about {big[0].memory / GIB:.1f} GiB"
                f" and {room / GIB:.1f} GiB {mem}." if big else " No stand-in is in the catalog for it.")
        return made(Action.NONE, head + tail)
    cand, step, pc, _ = chosen
    assumed = "" if known or not gpu else f" (this GPU's memory bandwidth is not in Tandem's table: " \
                                           f"{bw / 1e9:.0f} GB/s assumed)"
    reads = (f"reads {_gb(cand.weights)} a step: about {_ms(step)} on this GPU{assumed}" if gpu else
             f"costs about {_ms(step)} a step here, {cand.weights / source_weights:.1f} times the weights")
    text = (f"{head} The stand-in {cand.pair_id} — {cand.caption[len('stand-in: '):]} — {reads}, where a draft "
            f"token costs about {pc:.2f} of a step: {'speculation can pay there' if good else 'it may pay a little'}"
            f", and every reply is still the small model's own text. "
            f"It takes {_gb(cand.weights)} on disk "
            f"({'already here' if cand.installed else 'derived once from the files Tandem has, about a minute'}) "
            f"and about {cand.memory / GIB:.1f} GiB of {'GPU ' if gpu else ''}memory.")
    pick = bool(gpu) and good and not explicit
    if not gpu:
        text += " This machine has no GPU, so Tandem does not switch pairs by itself."
    elif not pick:
        text += " You asked for the loaded pair by name, so it stays unless you switch." if explicit and good else ""
    return made(Action.PICK if pick else Action.OFFER, text, candidate=cand, predicted_step=step, predicted_c=pc,
                bandwidth=bw or None, bandwidth_known=known)


def candidates(state: AppState, cat: Optional[Catalog] = None) -> tuple[list[Candidate], int]:
    """The catalog's stand-in pairs of the loaded pair (its target widened, its draft), with their estimates at
    the app's context; and the loaded target's weights in bytes."""
    cat = cat or load_catalog()
    pair = cat.pairs.get(state.pair_id or "")
    if state.pair is None or pair is None or state.target_path is None:
        return [], 0
    source = Path(state.target_path)
    ctx = state.pair.target.n_ctx
    draft_memory = fit.parts(shape_from_meta("draft", meta.read(state.draft_path)[0]), ctx).total \
        if state.draft_path else 0
    label = cat.models[pair.target].name.split(" ")[0]
    out = []
    for p in cat.pairs.values():
        entry = cat.models[p.target]
        if not (entry.widen and entry.derive_from == pair.target and p.draft == pair.draft):
            continue
        est = standin.estimate(source, entry.widen, entry.ftype or "F32")
        out.append(Candidate(p.id, entry.widen, est.params, est.file_bytes, est.memory_bytes(ctx) + draft_memory,
                             f"stand-in: {label}'s text at the cost of a {est.params_label} model",
                             fileops.is_done(paths.models_dir() / entry.file)))
    return out, source.stat().st_size


def measure(state: AppState, tokens: int = TOKENS) -> Measured:
    """A plain target step and a draft token of the loaded pair, timed on a chat prompt (cold cache, greedy)."""
    with state.generation_lock:
        pair = state.pair
        if pair is None:
            raise NoOffer("no pair is loaded")
        ids = pair.chat_prompt(PROMPT)
        greedy = SamplerSettings(temperature=0.0)
        plain = measure_run(pair, ids, GenConfig(max_tokens=tokens, sampler=greedy, speculative=False), forget=False)
        t_draft = None
        if pair.draft is not None:
            spec = measure_run(pair, ids, GenConfig(max_tokens=tokens, sampler=greedy, proposer=ProposerName.DRAFT,
                                                    k=4), forget=False).stats
            if spec.drafted:
                t_draft = (spec.t_draft - spec.t_sync) / spec.drafted  # its own tokens, not the catch-up
        pair.reset(lookup=False)
    return Measured(1.0 / plain.tps, t_draft)


def check(state: AppState, machine: Optional[Machine] = None, measured: Optional[Measured] = None,
          explicit: bool = False) -> Decision:
    """Measure (unless given), decide, and keep the decision on the state (what the Chat's banner shows)."""
    machine = machine or hardware.detect()
    found, source_weights = candidates(state)
    decision = decide(measured or measure(state), machine, found, source_weights, explicit, state.pair_id)
    state.offer = decision if decision.action != Action.NONE else None
    return decision


def switch(state: AppState, pair_id: str, progress: Optional[Progress] = None) -> None:
    """Make ``pair_id`` present (a stand-in is derived once) and load it as the app's pair, warmed up."""
    say = progress or (lambda f, what: None)
    _, target, draft = ensure_pair(pair_id, progress=lambda done, total: say(0.8 * done / max(total, 1),
                                                                               f"preparing {pair_id}"))
    say(0.85, f"loading {pair_id}")
    load_into(state, PairOptions(target, draft, state.gpu_layers, state.target_options.n_ctx,
                                 rpc=state.target_options.rpc), pair_id=pair_id)
    warm_up(state)
    say(1.0, "loaded")


def accept(state: AppState, progress: Optional[Progress] = None) -> Decision:
    """Load the offered stand-in pair (deriving it first where it is missing); the decision, now switched."""
    offer = state.offer
    if offer is None or offer.pair_id is None or offer.action == Action.SWITCHED:
        raise NoOffer("no stand-in pair is on offer")
    switch(state, offer.pair_id, progress)
    state.offer = replace(offer, action=Action.SWITCHED)
    return state.offer


def back(state: AppState, progress: Optional[Progress] = None) -> Decision:
    """Load the pair the stand-in replaced; the stand-in is offered again."""
    offer = state.offer
    if offer is None or offer.action != Action.SWITCHED or offer.from_pair is None:
        raise NoOffer("no stand-in pair replaced another one")
    switch(state, offer.from_pair, progress)
    state.offer = replace(offer, action=Action.OFFER)
    return state.offer


def at_start(state: AppState, explicit: bool, announce: Callable[[str], None]) -> Optional[Decision]:
    """At the app's start, on a GPU only: measure the loaded pair, and pick or offer a stand-in where it cannot
    pay (one line each on the terminal). Never stops the app from starting."""
    try:
        machine = hardware.detect()
        if not machine.gpus or state.pair is None:
            return None
        decision = check(state, machine, explicit=explicit)
        if decision.action == Action.PICK:
            announce(f"{decision.why} Loading {decision.pair_id} for this first run.")
            accept(state, lambda f, what: None)
        elif decision.action == Action.OFFER:
            announce(f"{decision.why} The Chat offers it.")
        return decision
    except Exception as exc:  # noqa: BLE001 - the loaded pair stays; the app starts either way
        announce(f"could not check whether a stand-in target would pay here ({exc}); the loaded pair stays")
        return None
