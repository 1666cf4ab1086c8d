"""The pair an API request names: the installed pairs, the names each answers to, and the gate that loads the
named pair on demand, one load at a time, with requests queued behind it (LM Studio's and Ollama's way: a
request that names another model gets that model).

An installed pair is a catalog pair whose two files are complete in the models folder (as the Models tab and
``launcher.py models list`` count them). A name is a pair id, its target's catalog or library id, or its target's
file name (with or without ``.gguf``), each also with Ollama's tag ``:latest``; the loaded pair also answers to
its listed id. An empty name means "whatever is loaded".

The :class:`Gate` admits requests first come, first served. A request for the loaded pair (or for none) is
admitted at once when nobody is ahead of it; a request for another pair waits until every admitted request has
reached the generation lock, then loads its pair through :func:`app.service.loading.load_into` (the UI's path,
with the loaded pair's GPU layers, context, threads and RPC workers) and warms it up. Requests behind it wait;
a load that fails is that request's error, and the previous pair stays loaded.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from app.engine.errors import TandemError
from app.models import library
from app.models.catalog import Catalog, load
from app.models.provision import installed_pair
from app.service.baseline import warm_up
from app.service.loading import PairOptions, load_into, say
from app.service.state import AppState

LATEST = ":latest"
SHOWN = 5  # installed ids an unknown-model error names


class UnknownModel(TandemError):
    """A request named a model that is neither loaded nor installed."""

    status, code, param = 404, "model_not_found", "model"


class LoadFailed(TandemError):
    """The pair a request named could not be loaded (the previous pair stays)."""

    status, code = 503, "model_load_failed"


@dataclass(frozen=True)
class Installed:
    """A catalog pair whose two files are here (or, ``custom``, the loaded pair that is no catalog pair)."""

    id: str
    target: Path
    draft: Optional[Path]
    names: tuple[str, ...] = ()  # every name it answers to (its id first)
    custom: bool = False  # loaded from Pair settings: reloaded, if need be, under no pair id

    @property
    def files(self) -> list[Path]:
        return [self.target] + ([self.draft] if self.draft is not None else [])

    def is_loaded(self, state: AppState) -> bool:
        """Whether ``state``'s pair is this one (its files; a catalog pair's id too)."""
        pair = state.pair
        if pair is None or (not self.custom and state.pair_id != self.id):
            return False
        draft = pair.draft.path if pair.draft is not None else None
        return _same(str(pair.target.path), self.target) and (
            draft is None if self.draft is None else draft is not None and _same(str(draft), self.draft))


def installed_pairs(cat: Optional[Catalog] = None) -> list[Installed]:
    """The catalog pairs whose target and draft files are complete in the models folder, in catalog order."""
    cat = cat or load()
    records = library.installed(cat, with_meta=False)
    out = []
    for p in cat.pairs.values():
        files = installed_pair(cat, p)
        if files is None:
            continue
        target, draft = files
        names = [p.id, p.target, target.name, target.stem]
        names += [r["id"] for r in records if _same(r["path"], target)]
        out.append(Installed(p.id, target, draft, tuple(dict.fromkeys(names))))
    return out


def base_name(name: str) -> str:
    """``name`` without spaces around it and without Ollama's default tag."""
    wanted = name.strip()
    return wanted[:-len(LATEST)] if wanted.endswith(LATEST) else wanted


def loaded_names(state: AppState, listed: str, library_ids: bool = True) -> list[str]:
    """Every name the loaded pair answers to: ``listed`` (its id in ``/v1/models``), its pair id, its target's
    file name and stem, and (``library_ids``) the library ids of its target file."""
    if state.pair is None:
        return []
    target = state.pair.target.path
    names = [listed, state.pair_id or "", target.name, target.stem]
    if library_ids:
        names += [r["id"] for r in library.installed(with_meta=False) if _same(r["path"], target)]
    return [n for n in dict.fromkeys(names) if n]


def resolve(state: AppState, name: str, listed: str,
            pairs: Optional[list[Installed]] = None) -> Optional[Installed]:
    """None where ``name`` is empty (whatever is loaded); else the pair it names: the loaded pair where it names
    that one, else an installed pair (a pair id first, then the first pair whose target it names). UnknownModel
    naming a few installed ids otherwise."""
    wanted = base_name(name)
    if not wanted:
        return None
    if wanted in loaded_names(state, listed, library_ids=False) or wanted in loaded_names(state, listed):
        return loaded(state, listed)  # (the cheap names first: the usual case reads no library)
    pairs = installed_pairs() if pairs is None else pairs
    found = next((p for p in pairs if p.id == wanted), None) or next((p for p in pairs if wanted in p.names), None)
    if found is not None:
        return found
    ids = ([listed] if state.pair is not None else []) + [p.id for p in pairs if p.id != listed]
    shown = ", ".join(ids[:SHOWN]) + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")
    raise UnknownModel(f"the model {name!r} does not exist here; installed: {shown or 'none'} "
                       "(GET /v1/models lists them all)")


def loaded(state: AppState, listed: str) -> Installed:
    """The loaded pair as a pair to ask for: a request naming it gets it even if another request's switch comes
    first."""
    assert state.pair is not None
    draft = state.pair.draft.path if state.pair.draft is not None else None
    return Installed(state.pair_id or listed, state.pair.target.path, draft, (listed,), custom=state.pair_id is None)


def load_installed(state: AppState, pair: Installed) -> None:
    """Load ``pair`` the way the Pair settings tab does, with the settings the current pair was loaded with."""
    o = state.target_options
    say(f"loading pair {pair.id}: an API request names it")
    try:
        load_into(state, PairOptions(pair.target, pair.draft, state.gpu_layers, o.n_ctx, o.n_threads, o.rpc),
                  pair_id=None if pair.custom else pair.id, announce=say)
        warm_up(state)
    except Exception as exc:
        state.load_error = f"could not load {pair.id}: {exc}"
        raise LoadFailed(state.load_error) from exc


@dataclass(eq=False)
class Ticket:
    """One request's place in the gate."""

    want: Optional[Installed]
    admitted: bool = False
    left: bool = False


@dataclass
class Gate:
    """Requests naming pairs, admitted first come, first served; one load at a time (module docstring)."""

    state: AppState
    load: Callable[[AppState, Installed], None] = load_installed
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _queue: deque = field(default_factory=deque)
    _users: int = 0  # admitted requests that have not yet reached the generation lock
    _loading: bool = False

    def join(self, want: Optional[Installed]) -> Ticket:
        ticket = Ticket(want)
        with self._cond:
            self._queue.append(ticket)
        return ticket

    def wait(self, ticket: Ticket, timeout: float) -> bool:
        """True once ``ticket`` is admitted (after loading its pair, if it is the one to load it); False after
        ``timeout`` seconds of waiting. A load that fails raises LoadFailed and gives up the ticket."""
        with self._cond:
            if not self._cond.wait_for(lambda: ticket.admitted or self._may_go(ticket), timeout):
                return False
            if ticket.admitted:
                return True
            if ticket.want is None or ticket.want.is_loaded(self.state):
                self._admit(ticket)
                return True
            self._loading = True
        try:
            self.load(self.state, ticket.want)
        except BaseException:
            with self._cond:
                self._loading = False
                if not ticket.left:  # (a caller that stopped waiting has already given it up)
                    self._queue.remove(ticket)
                    ticket.left = True
                self._cond.notify_all()
            raise
        with self._cond:
            self._loading = False
            if ticket.left:
                self._cond.notify_all()
                return False
            self._admit(ticket)
        return True

    def leave(self, ticket: Ticket) -> None:
        """The request reached the generation lock (or ended): a load may go ahead. Idempotent."""
        with self._cond:
            if ticket.left:
                return
            ticket.left = True
            if ticket.admitted:
                self._users -= 1
            else:
                self._queue.remove(ticket)
            self._cond.notify_all()

    def _may_go(self, ticket: Ticket) -> bool:
        if self._loading or not self._queue or self._queue[0] is not ticket:
            return False
        return ticket.want is None or ticket.want.is_loaded(self.state) or self._users == 0

    def _admit(self, ticket: Ticket) -> None:
        self._queue.remove(ticket)
        ticket.admitted = True
        self._users += 1
        self._cond.notify_all()


def _same(path: str, target: Path) -> bool:
    try:
        return target.resolve() == Path(path).resolve()
    except OSError:
        return False
