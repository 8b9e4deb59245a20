"""JSON schemas generated from the typed inputs of tools, and input parsing against them.

A tool's input is a frozen dataclass; its fields are the JSON properties the model sees (a field
with a default is optional, a field's ``metadata["doc"]`` is its description). Parsing is strict
enough to give the model a useful error (missing, unknown or mistyped fields) and never raises
anything but ``ToolInputError``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from coder_es.errors import CoderESError

T = TypeVar("T")


class ToolInputError(CoderESError):
    """The model sent arguments that do not fit the tool's input schema."""


_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", bool: "boolean", float: "number"}


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0], True
    return tp, False


def json_schema(cls: type) -> dict[str, Any]:
    """The JSON schema (draft 2020-12 subset the providers accept) of a dataclass input type."""
    if not dataclasses.is_dataclass(cls):
        msg = f"{cls!r} is not a dataclass"
        raise TypeError(msg)
    hints = get_type_hints(cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        tp, optional = _unwrap_optional(hints[f.name])
        if tp not in _JSON_TYPES:
            msg = f"{cls.__name__}.{f.name}: unsupported field type {tp!r}"
            raise TypeError(msg)
        prop: dict[str, Any] = {"type": _JSON_TYPES[tp]}
        doc = f.metadata.get("doc")
        if doc:
            prop["description"] = doc
        if "minimum" in f.metadata:
            prop["minimum"] = f.metadata["minimum"]
        properties[f.name] = prop
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if not has_default and not optional:
            required.append(f.name)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def parse_input(cls: type[T], raw: Any) -> T:
    """An instance of ``cls`` from the model's JSON arguments; ``ToolInputError`` if they misfit."""
    if not isinstance(raw, dict):
        msg = f"arguments must be a JSON object, got {type(raw).__name__}"
        raise ToolInputError(msg)
    assert dataclasses.is_dataclass(cls)
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        msg = f"unknown argument(s) {', '.join(unknown)}; expected: {', '.join(fields)}"
        raise ToolInputError(msg)
    values: dict[str, Any] = {}
    for name, f in fields.items():
        tp, optional = _unwrap_optional(hints[name])
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if name not in raw or (raw[name] is None and (optional or has_default)):
            if not has_default and not optional:
                msg = f"missing required argument {name!r}"
                raise ToolInputError(msg)
            continue
        value = raw[name]
        # bool is an int subclass in Python; JSON keeps them apart, so do we.
        ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            msg = f"argument {name!r} must be a {_JSON_TYPES[tp]}, got {type(value).__name__}"
            raise ToolInputError(msg)
        minimum = f.metadata.get("minimum")
        if minimum is not None and value < minimum:
            msg = f"argument {name!r} must be at least {minimum}, got {value}"
            raise ToolInputError(msg)
        values[name] = value
    return cls(**values)


def doc(text: str, **extra: Any) -> dict[str, Any]:
    """Field metadata: ``field(default=None, metadata=doc("..."))``."""
    return {"doc": text, **extra}
