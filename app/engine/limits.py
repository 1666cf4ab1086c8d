"""Every numeric setting's documented range, in one place, and the check that every door runs.

The engine (``GenConfig.validate``), the UI and API settings (``app.service.settings``), the Pair lab request, and
the command line (``bench``, ``tune``, ``models``) all check values here, so a bad value gets the same message
wherever it comes in: ``k_max must be between 1 and 64 (got 1000000000)``. What a valid draft length K is
(an integer in range or ``auto``) is decided by :func:`k_setting` alone. Bounds keep one request from
growing the process without limit (a draft length of a billion, a K range of a billion values). The
"Limits and errors" section of docs/api.md lists the same table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Union

from app.engine.errors import BadInput
from app.engine.names import AUTO_K, AutoK

K_LIMIT = 64  # the longest draft: beyond it the expected gain is nil even at 99 % acceptance
CTX_LIMIT = 1 << 20  # tokens of context (llama.cpp clamps further to the model's training context)
SEED_LIMIT = (1 << 64) - 1
LIST_CHARS = 512  # the longest comma list of K or p_min values a sweep takes
MESSAGES_LIMIT = 4096  # messages in one chat request (system, user and assistant turns together)
PROMPT_CHARS = 4 << 20  # characters of prompt text in one request (4 per token fill a 1M-token context)


class LimitError(BadInput, ValueError):
    """A setting outside its documented range; the message names the setting (also ``param``), the range and the
    value."""

    hint = 'see docs/api.md, "Limits and errors", for every range'


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float
    integer: bool = True
    lo_open: bool = False  # the bound itself is excluded
    hi_open: bool = False
    note: str = ""  # for the docs' table (docs/api.md)

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below

    def describe(self) -> str:
        lo, hi = _num(self.lo), _num(self.hi)
        if not self.lo_open and not self.hi_open:
            return f"between {lo} and {hi}"
        first = f"above {lo}" if self.lo_open else f"at least {lo}"
        last = f"below {hi}" if self.hi_open else f"at most {hi}"
        return f"{first} and {last}"


RANGES: dict[str, Range] = {
    "k": Range(1, K_LIMIT, note="or auto; the loop also stops a draft where the context ends"),
    "k_max": Range(1, K_LIMIT, note="the ceiling of auto K"),
    "p_min": Range(0.0, 1.0, integer=False, hi_open=True),
    "max_tokens": Range(1, CTX_LIMIT, note="generation also stops when the context is full"),
    "temperature": Range(0.0, 5.0, integer=False, note="0 = greedy"),
    "top_k": Range(0, 1_000_000, note="0 = off"),
    "top_p": Range(0.0, 1.0, integer=False, lo_open=True),
    "min_p": Range(0.0, 1.0, integer=False, hi_open=True),
    "repeat_penalty": Range(0.0, 10.0, integer=False, lo_open=True, note="1 = off"),
    "repeat_last_n": Range(0, CTX_LIMIT),
    "seed": Range(0, SEED_LIMIT, note="-1 or empty: a fresh seed each run"),
    "repeats": Range(1, 100),
    "ctx": Range(32, CTX_LIMIT, note="context size in tokens"),
    "threads": Range(0, 1024, note="0 = the physical cores"),
    "gpu_layers": Range(-1, 100_000, note="-1 = all"),
    "memory_gib": Range(0.0, 1 << 20, integer=False, note="--vram / --ram given for another machine"),
    "port": Range(1, 65535, note="--port of serve, worker and the API"),
    "cache_ram": Range(0, 1 << 24, note="--cache-ram: MiB of RAM for saved prompt states; 0 = off"),
    "run_id": Range(1, (1 << 63) - 1, note="a stored Pair lab run (tune --show, --compare)"),
    "body_mib": Range(0.0, 4096.0, integer=False, lo_open=True,
                      note="--max-body-mib, TANDEM_MAX_BODY_MIB: request body, MiB"),
    "rpc_timeout": Range(0.0, 86400.0, integer=False, lo_open=True, note="TANDEM_RPC_TIMEOUT, seconds"),
    "message_mib": Range(0.0, float(1 << 30), integer=False, lo_open=True,
                         note="worker --max-message-mib: the largest RPC message a client may send"),
    "idle_seconds": Range(0.0, 86400.0, integer=False, note="worker --idle-timeout / --hold-timeout; 0 = no limit"),
    "template_seconds": Range(0.0, 3600.0, integer=False, lo_open=True,
                              note="TANDEM_TEMPLATE_SECONDS: one chat template render, seconds"),
}


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else repr(x)


def shown(value: Any) -> str:
    """A value as a message quotes it: short, whatever the user sent."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, str) and len(value) > 40:
        value = value[:40]
    text = repr(value) if isinstance(value, (float, str)) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check(name: str, value: Any, range_name: str | None = None) -> Any:
    """``value`` if it is a number of the right kind inside the range of ``range_name`` (default: ``name``);
    else LimitError naming ``name``, the range and the value."""
    r = RANGES[range_name or name]
    kind = "an integer" if r.integer else "a number"
    ok_type = isinstance(value, int) if r.integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise LimitError(f"{name} must be {kind} {r.describe()} (got {shown(value)})", param=name)
    if not r.contains(value):
        raise LimitError(f"{name} must be {r.describe()} (got {shown(value)})", param=name)
    return value


def check_settings(values: Mapping[str, Any]) -> None:
    """Check every known setting in ``values`` (None is left to the caller: it means "the default")."""
    for name, value in values.items():
        if name == "k" and value is not None:
            k_setting(value)
        elif name in RANGES and value is not None:
            check(name, value)


def parse_number(name: str, text: str, range_name: str | None = None) -> Any:
    """A command-line or form value: parsed (int or float, as the range wants) and checked."""
    r = RANGES[range_name or name]
    try:
        value = int(text) if r.integer else float(text)
    except (TypeError, ValueError):
        kind = "an integer" if r.integer else "a number"
        raise LimitError(f"{name} must be {kind} {r.describe()} (got {shown(text)})", param=name) from None
    return check(name, value, range_name)


def form_int(name: str, value: Any, range_name: str | None = None) -> int:
    """An integer setting from a form field (an int, a whole float such as 4096.0, or text), checked."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str):
        text = value.strip()
        return form_int(name, float(text), range_name) if _whole_float(text) else parse_number(name, text, range_name)
    return check(name, value, range_name)


def _whole_float(text: str) -> bool:
    try:
        return "." in text and float(text).is_integer()
    except ValueError:
        return False


def k_setting(value: Any, text: bool = False, name: str = "k") -> Union[int, AutoK]:
    """The one rule for a draft length K, wherever it comes in: ``auto`` (``AUTO_K``) or an integer in
    ``RANGES["k"]``. ``text``: the value came from a person or a JSON body (a form, the command line, the API),
    so the word ``auto`` in any case with spaces around it, an integer written as text (" 8 ") and a whole
    float (8.0) are taken too; without it (the engine's own setting, a catalog entry) only ``auto`` and ints
    are. LimitError (``param``: ``name``) otherwise: ``k must be between 1 and 64 (got 100)`` for an integer
    out of range, ``k must be a positive integer or 'auto', not 'many'`` for anything else."""
    given = value
    if text and isinstance(value, str):
        word = value.strip()
        if word.lower() == AUTO_K:
            return AUTO_K
        try:
            value = int(word)
        except ValueError:
            raise _not_k(name, given) from None
    elif text and isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value == AUTO_K:
        return AUTO_K
    if isinstance(value, bool) or not isinstance(value, int):
        raise _not_k(name, given)
    return check(name, value, "k")


def _not_k(name: str, value: Any) -> LimitError:
    return LimitError(f"{name} must be a positive integer or 'auto', not {shown(value)}", param=name)


def k_list(text: str) -> Iterator[Any]:
    """The K values of a list like '1-4,6,8,auto', one at a time, each checked before it is produced: a
    range is checked by its ends, so '1-1000000000' fails at once instead of building a billion values."""
    text = str(text)
    if len(text) > LIST_CHARS:
        raise LimitError(f"the K list is {len(text)} characters; at most {LIST_CHARS}")
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.lower() == AUTO_K:
            yield AUTO_K
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise LimitError(f"K must be integers, ranges like 1-12, or 'auto'; not {shown(part)}") from None
        k_setting(a, name="K")
        k_setting(b, name="K")
        if b < a:
            raise LimitError(f"bad K range {part!r}: the first value must not exceed the last")
        yield from range(a, b + 1)


def table() -> list[tuple[str, str, str]]:
    """(setting, range, note) rows, for the docs' table (docs/api.md) and ``--help`` texts."""
    return [(name, r.describe(), r.note) for name, r in RANGES.items()]


# --- request size: checked before any tokenisation, so an oversized request costs milliseconds ------------

def check_chat_size(messages: Any) -> None:
    """LimitError when a chat has more than MESSAGES_LIMIT messages or more than PROMPT_CHARS characters of
    text (string contents and the text parts of content lists). Pure and fast (it stops at the first limit
    crossed), so a server can call it before it takes the generation lock; ``Pair.chat_prompt`` calls it too."""
    try:
        n = len(messages)
    except TypeError:
        return  # not a list: the caller's type checks say so
    if n > MESSAGES_LIMIT:
        raise LimitError(f"the chat has {n} messages; at most {MESSAGES_LIMIT} are taken in one request")
    chars = 0
    for m in messages:
        chars += _text_chars(m.get("content") if isinstance(m, Mapping) else None)
        if chars > PROMPT_CHARS:
            raise LimitError(f"the chat holds more than {PROMPT_CHARS} characters of text; at most "
                             f"{PROMPT_CHARS} are taken in one request")


def check_prompt_size(text: Any) -> None:
    """LimitError when a completion prompt is longer than PROMPT_CHARS characters."""
    if isinstance(text, str) and len(text) > PROMPT_CHARS:
        raise LimitError(f"the prompt is {len(text)} characters; at most {PROMPT_CHARS} are taken in one request")


def _text_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, (list, tuple)):
        return sum(len(p["text"]) for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return 0


# --- one value from the command line or the environment ---------------------------------------------------

def port(text: Any) -> int:
    """A TCP port, 1 - 65535: ``port must be between 1 and 65535 (got 70000)``."""
    return parse_number("port", str(text).strip())


def run_id(text: Any) -> int:
    """A Pair lab run id (an SQLite row id): a huge number is refused here, not by an OverflowError inside SQLite."""
    return parse_number("run id", str(text).strip(), "run_id")


def env_number(name: str, default: float, range_name: str) -> float:
    """A number from the environment variable ``name`` (``default`` when unset or empty), checked against
    ``range_name``: ``TANDEM_RPC_TIMEOUT must be a number above 0 and at most 86400 (got 'abc')``."""
    import os

    text = os.environ.get(name, "").strip()
    return default if not text else parse_number(name, text, range_name)
