"""What a request asks its output to be, as the engine's :class:`GrammarSpec`: OpenAI's ``response_format``
(``json_object``; ``json_schema`` with ``name``, ``schema``, ``strict``) and llama.cpp server's extension fields
``grammar`` (GBNF) and ``json_schema`` (a schema). Checked before the request waits its turn: a malformed
format or a schema the converter cannot express is a 400 naming the field.
"""

from __future__ import annotations

from typing import Any, Optional

from app.engine.decoding.grammar import GrammarError, GrammarSpec


def _bad(message: str, param: str) -> GrammarError:
    return GrammarError(message, param=param)


def _from_response_format(fmt: dict[str, Any]) -> Optional[GrammarSpec]:
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        schema = fmt.get("schema")  # llama.cpp also accepts a schema here
        return GrammarSpec.json_schema(schema) if isinstance(schema, dict) else GrammarSpec.json_object()
    if kind == "json_schema":
        inner = fmt.get("json_schema")
        if not isinstance(inner, dict):
            raise _bad("response_format json_schema needs 'json_schema': {'name': ..., 'schema': {...}}",
                       "response_format.json_schema")
        schema = inner.get("schema")
        if schema is None:
            return GrammarSpec.json_object()  # OpenAI allows a name alone: any JSON
        if not isinstance(schema, dict):
            raise _bad("response_format.json_schema.schema must be a JSON schema object",
                       "response_format.json_schema.schema")
        return GrammarSpec.json_schema(schema)
    raise _bad(f"response_format type must be 'text', 'json_object' or 'json_schema', not {kind!r}",
               "response_format.type")


def grammar_of(response_format: Optional[dict], grammar: Optional[str],
               json_schema: Optional[dict]) -> Optional[GrammarSpec]:
    """The one grammar a request asks for (None: free text); GrammarError (400) for a bad or double ask."""
    asked = [name for name, v in (("response_format", response_format), ("grammar", grammar),
                                  ("json_schema", json_schema)) if v is not None]
    if response_format is not None and response_format.get("type") in (None, "text"):
        asked.remove("response_format")
    if len(asked) > 1:
        raise _bad(f"give one of {', '.join(asked)}, not both", asked[1])
    if not asked:
        return None
    try:
        if grammar is not None:
            spec = GrammarSpec.gbnf(grammar)
        elif json_schema is not None:
            spec = GrammarSpec.json_schema(json_schema)
        else:
            spec = _from_response_format(response_format or {})
        if spec is not None:
            spec.to_gbnf()  # a schema the converter cannot express fails here, before the queue
    except GrammarError as exc:
        raise _bad(str(exc), exc.param if exc.param != GrammarError.param else asked[0]) from None
    return spec


def response_schema(response_format: Optional[dict]) -> Optional[dict]:
    """The JSON schema of a reply that calls no tool (the engine's tool grammar honours it), if one is given."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    inner = response_format.get("json_schema")
    schema = inner.get("schema") if isinstance(inner, dict) else None
    return schema if isinstance(schema, dict) else None
