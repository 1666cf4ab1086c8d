"""The body of ``POST /infill``: llama.cpp's fields, checked with llama.cpp's messages where it has its own
(``input_prefix``, ``input_suffix``, ``input_extra``, ``prompt``), else as the OpenAI routes check theirs.

Fields Tandem reads: ``input_prefix``, ``input_suffix``, ``input_extra`` ([{"filename", "text"}]), ``prompt``,
``n_predict`` (or ``max_tokens`` / ``max_completion_tokens``; -1: until the context is full; 0: only read the
prompt into the cache), ``n_indent``, ``t_max_predict_ms``, ``stop``, ``stream``, ``response_fields``,
``return_tokens``, the sampling fields (``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed``,
``repeat_penalty``), Tandem's speculative settings (``speculative``, ``proposer``, ``k`` …) and
``stop_at_suffix`` (Tandem's: end where the model starts copying the suffix; on unless false). Anything else
(``samplers``, ``cache_prompt``, ``t_max_prompt_ms``, ``id_slot`` …) is accepted and named in the
``x-tandem-ignored`` header.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Union

from pydantic import Field, StrictBool, StrictInt, StrictStr, ValidationError

from app.engine.decoding.fim import Chunk
from app.engine.names import LookupMemory, Rule
from app.server import openai_schema as schema
from app.service import settings as S

Number = Union[StrictInt, float]
SAMPLING = ("temperature", "top_p", "seed", "speculative", "proposer", "k", "k_max", "p_min", "rule", "top_k",
            "min_p", "repeat_penalty", "lookup_memory")
EXTRA_SHAPE = '"input_extra" must be an array of {"filename": string, "text": string}'


class ExtraChunk(schema._Strict):
    text: StrictStr
    filename: Optional[StrictStr] = None


class InfillRequest(schema.TandemSettings):
    input_prefix: StrictStr
    input_suffix: StrictStr
    input_extra: list[ExtraChunk] = Field(default_factory=list)
    prompt: StrictStr = ""
    n_predict: Optional[StrictInt] = None
    max_tokens: Optional[StrictInt] = None  # llama.cpp's aliases of n_predict
    max_completion_tokens: Optional[StrictInt] = None
    n_indent: StrictInt = 0
    t_max_predict_ms: Number = -1
    stop: Union[StrictStr, list[StrictStr], None] = None
    stream: StrictBool = False
    response_fields: Optional[list[StrictStr]] = None
    return_tokens: StrictBool = False
    stop_at_suffix: StrictBool = True
    model: Optional[StrictStr] = None  # accepted (the loaded pair answers)
    temperature: Optional[Number] = None
    top_p: Optional[Number] = None
    seed: Optional[StrictInt] = None

    @property
    def chunks(self) -> list[Chunk]:
        return [Chunk(c.text, c.filename if c.filename is not None else "tmp") for c in self.input_extra]

    @property
    def predict(self) -> Optional[int]:
        """n_predict as the request gave it (its first of n_predict, max_completion_tokens, max_tokens)."""
        for value in (self.n_predict, self.max_completion_tokens, self.max_tokens):
            if value is not None:
                return value
        return None

    @property
    def stops(self) -> list[str]:
        words = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return [w for w in words if w]


def _llama_checks(data: Any) -> None:
    """llama.cpp's own checks of /infill, with its messages (post_infill in its server-context.cpp)."""
    if not isinstance(data, dict):
        raise schema.RequestError("the body must be a JSON object", code="invalid_type")
    if "prompt" in data and not isinstance(data["prompt"], str):
        raise schema.RequestError('"prompt" must be a string', param="prompt", code="invalid_value")
    for name in ("input_prefix", "input_suffix"):
        if name not in data:
            raise schema.RequestError(f'"{name}" is required', param=name, code="missing_required_parameter")
    extra = data.get("input_extra")
    if "input_extra" in data and not isinstance(extra, list):
        raise schema.RequestError(EXTRA_SHAPE, param="input_extra", code="invalid_value")
    for i, chunk in enumerate(extra or []):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise schema.RequestError('extra_context chunk must contain a "text" field with a string value',
                                      param=f"input_extra[{i}].text", code="invalid_value")
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise schema.RequestError('extra_context chunk\'s "filename" field must be a string',
                                      param=f"input_extra[{i}].filename", code="invalid_value")


def parse(raw: bytes) -> InfillRequest:
    """The request, or RequestError (400) naming what is wrong."""
    if not raw.strip():
        raise schema.RequestError("the request body is empty; send a JSON object")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise schema.RequestError(f"the body is not valid JSON: {exc}", code="invalid_json") from None
    _llama_checks(data)
    for name in ("n_predict", "max_tokens", "max_completion_tokens", "t_max_predict_ms", "seed"):
        if data.get(name) is None:
            data.pop(name, None)  # llama.cpp: null asks for the server's default
    try:
        req = InfillRequest.model_validate(data)
    except ValidationError as exc:
        raise schema._describe(exc) from None
    _ranges(req)
    return req


def _ranges(req: InfillRequest) -> None:
    """llama.cpp's hard limits, with its wording."""
    predict = req.predict
    if predict is not None and predict < -1:
        raise schema.RequestError(f"Field 'n_predict': Value must be between -1 <= value <= 2147483647, but got "
                                  f"{predict}", param="n_predict", code="invalid_value")
    if req.n_indent < 0:
        raise schema.RequestError(f"Field 'n_indent': Value must be between 0 <= value <= 2147483647, but got "
                                  f"{req.n_indent}", param="n_indent", code="invalid_value")
    if len(req.stops) > 16:
        raise schema.RequestError("at most 16 stop strings", param="stop", code="invalid_value")


def settings_of(req: InfillRequest, base: dict, n_ctx: int) -> dict:
    """The generation settings over the app's defaults (``base``); n_predict -1 runs until the context is full,
    0 (a warm-up) keeps the default (nothing is generated)."""
    chosen: dict[str, Any] = {name: getattr(req, name) for name in SAMPLING if getattr(req, name) is not None}
    # an editor asks again at the same spot after each keystroke: the suggestion it was shown last time, an
    # earlier request's reply, is the likeliest continuation, so /infill's lookup remembers the pair's requests
    chosen.setdefault("lookup_memory", LookupMemory.PAIR)
    predict = req.predict
    if predict is not None and predict != 0:
        chosen["max_tokens"] = n_ctx if predict == -1 else predict
    try:
        resolved = S.resolve(chosen, base)
    except S.SettingsError as exc:
        raise schema.RequestError(str(exc), param=exc.param if exc.param in chosen else None,
                                  code="invalid_value") from None
    if req.rule is None and resolved["seed"] is not None and resolved["temperature"] > 0:
        resolved["rule"] = Rule.COUPLED  # a seed holds whatever the speculation, as on the OpenAI routes
    return resolved


def ignored(req: InfillRequest) -> list[str]:
    return schema.ignored(req)
