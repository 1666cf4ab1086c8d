"""Loading a pair, the one way every front end does it: choose the GPU layers (``models.offload.choose``), say
so, then load. :func:`load_pair` gives a standalone pair (the command lines); :func:`load_into` switches the
app's pair (Pair settings, the start of ``launcher.py`` and ``serve``); :func:`startup_pair` makes the chosen
catalog pair present first and never stops the app from starting.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from app.engine.llama.backend import LoadOptions
from app.engine.llama.promptcache import MIB, PromptCache, available_ram, budget_bytes
from app.engine.names import AUTO_K
from app.engine.pair import Pair
from app.errors import ui_message
from app.models import offload
from app.models.fit import Machine
from app.models.offload import Choice, Want
from app.models.provision import ensure_pair
from app.service.baseline import warm_up
from app.service.state import AppState, Progress, backend_name

PathLike = Union[str, Path]
Announce = Callable[[str], None]


def say(message: str) -> None:
    """A line of the app's own in the terminal."""
    print(f"[tandem] {message}", flush=True)


def _quiet(line: str) -> None:
    pass


@dataclass(frozen=True)
class PairOptions:
    """What to load: the two files, the GPU layers wanted for each (a number, -1 = all, or auto), the context,
    the threads and the RPC workers the target is split over."""

    target: PathLike
    draft: Optional[PathLike]
    gpu_layers: tuple[Want, Want] = (offload.AUTO, offload.AUTO)  # (target, draft)
    n_ctx: int = 4096
    n_threads: int = 0
    rpc: Optional[tuple[str, ...]] = None  # None: none (load_pair), the app's current workers (load_into)

    def plan(self, machine: Optional[Machine] = None) -> tuple[Choice, LoadOptions, Optional[LoadOptions]]:
        """The GPU layers chosen, and the (target, draft) load options they give (draft None without one)."""
        choice = offload.choose(self.target, self.draft, *self.gpu_layers, ctx=self.n_ctx, rpc=self.rpc or (),
                                machine=machine)
        topts, dopts = choice.options(LoadOptions(n_ctx=self.n_ctx, n_threads=self.n_threads))
        return choice, topts, dopts if self.draft is not None else None


def load_pair(options: PairOptions, announce: Announce = _quiet,
              machine: Optional[Machine] = None) -> tuple[Pair, Choice]:
    """Choose the GPU layers, say so (each RPC worker, then the choice) and load the pair."""
    choice, topts, dopts = options.plan(machine)
    for line in choice.workers:
        announce(f"RPC worker {line}")
    announce(choice.line)
    return Pair.load(options.target, options.draft, topts, dopts), choice


def load_into(state: AppState, options: PairOptions, pair_id: Optional[str] = None,
              progress: Optional[Progress] = None, announce: Announce = _quiet) -> str:
    """Make ``options`` the app's pair (the previous one stays if this load fails); returns the line that says
    what was chosen (also given to ``announce`` before loading)."""
    if options.rpc is None:
        options = replace(options, rpc=state.target_options.rpc)
    if state.pair is not None and set(state.target_options.rpc) & set(options.rpc or ()):
        announce("unloading the split pair first: an RPC worker serves one client at a time")
        state.unload()
    choice, topts, dopts = options.plan()
    announce(choice.line)
    state.load(options.target, options.draft, topts, dopts, pair_id=pair_id, progress=progress)
    state.gpu_layers, state.gpu_choice = tuple(options.gpu_layers), choice
    return choice.line


def app_state(gpu_layers: Sequence[Want] = (offload.AUTO, offload.AUTO), rpc: Sequence[str] = (),
              cache_ram_mib: Optional[int] = None) -> AppState:
    """A fresh app state with the command line's GPU layers, RPC workers and prompt cache budget in MiB (None: the
    default, ``promptcache.DEFAULT_MIB`` within the RAM free; 0: off), and no pair yet."""
    return AppState(target_options=LoadOptions(n_ctx=4096, n_gpu_layers=-1, rpc=tuple(rpc)),
                    gpu_layers=tuple(gpu_layers), prompt_cache=prompt_cache(cache_ram_mib))


def prompt_cache(mib: Optional[int] = None) -> PromptCache:
    """A prompt cache of ``mib`` MiB (None: the default), never more than its share of the RAM free now."""
    return PromptCache(budget_bytes(mib, available_ram()))


def cache_line(cache: PromptCache) -> str:
    """What the prompt cache may hold, in words, for the start-up lines."""
    if not cache.enabled:
        return "prompt cache: off (--cache-ram 0)"
    return (f"prompt cache: conversations' prompt states kept in up to {cache.budget // MIB} MiB of RAM "
            "(--cache-ram MiB; 0 turns it off)")


def startup_pair(state: AppState, pair_id: Optional[str], required: bool = False) -> None:
    """Make the demo (or chosen) pair present and load it; on failure the app starts and says why, or, where the
    pair is ``required`` (``serve``: nothing else can load one), the error is raised. A pair that loads but
    cannot run its first tokens is unloaded: every front end then says that no pair is ready."""
    try:
        say("checking the demo models (the first start downloads them, about a minute)")
        entry, target, draft = ensure_pair(pair_id)
        say(f"loading pair {entry.id}: target {target.name}, draft {draft.name} on {backend_name()}")
        load_into(state, PairOptions(target, draft, state.gpu_layers, state.target_options.n_ctx,
                                     rpc=state.target_options.rpc), pair_id=entry.id, announce=say)
        try:
            warm_up(state)
        except BaseException:
            state.unload()
            raise
        if entry.k not in (None, AUTO_K):
            state.defaults.setdefault("k", entry.k)
        say("pair loaded")
    except Exception as exc:
        state.load_error = ui_message(exc)
        if required:
            raise
        say(f"could not prepare the pair: {state.load_error}")
        say("the app starts anyway; choose a pair in Pair settings")
