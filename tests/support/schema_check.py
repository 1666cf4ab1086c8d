"""A JSON value checked against the JSON Schema subset the grammar and tool tests use, and by ``jsonschema``
itself where it is installed (it is not a dependency)."""

from __future__ import annotations


def conforms(value, schema: dict) -> bool:
    """The subset of JSON Schema these tests use (jsonschema itself is checked too where installed)."""
    kind = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list) and all(conforms(v, schema.get("items", {})) for v in value)
    if kind == "object":
        props = schema.get("properties", {})
        if not isinstance(value, dict) or not set(schema.get("required", ())) <= set(value):
            return False
        if schema.get("additionalProperties") is False and not set(value) <= set(props):
            return False
        return all(conforms(v, props.get(k, {})) for k, v in value.items())
    return True


def validate(value, schema: dict) -> None:
    assert conforms(value, schema), f"{value!r} does not match the schema"
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(value, schema)
