"""The records the engine builds and the wire carries — an agent's row, a repeated key — and the one
decoder that reads any such record back from JSON by its fields' declared types.

On the floor below the engine and the protocol, so both use the same types: the engine fills a row, the
session adds what only it knows (harness, parent), the protocol writes it and a client reads it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

__all__ = ["AgentRow", "KeyRow", "from_json"]


# -- the decoder --------------------------------------------------------------------------------------

_MISSING = object()
Read = Callable[[Any], Any]  # a field's value as the wire gave it -> its value, or _MISSING if unusable


def _scalar(kind: type) -> Read:
    if kind is float:
        return lambda v: float(v) if type(v) is float or type(v) is int else _MISSING
    return lambda v: v if type(v) is kind else _MISSING


_SCALARS = {"str": str, "int": int, "float": float, "bool": bool}
_NESTED: dict[str, Any] = {}  # record types other records hold, by name (see `nested`)


def nested(cls: Any) -> Any:
    """Register a record type that other records hold (`list[Name]`, `Name | None`), for `from_json`."""
    _NESTED[cls.__name__] = cls
    return cls


def _reader(annotation: str) -> Read:
    """How to read a value of the type `annotation` names (as written in a record's class body)."""
    kind = annotation.replace(" ", "")
    if kind.endswith("|None"):
        inner = _reader(kind[: -len("|None")])
        return lambda v: None if v is None else inner(v)
    if kind in _SCALARS:
        return _scalar(_SCALARS[kind])
    if kind == "dict[str,int]":
        return lambda v: {k: n for k, n in v.items() if type(n) is int} if type(v) is dict else _MISSING
    if kind.startswith("dict["):
        return lambda v: v if type(v) is dict else _MISSING
    if kind == "list[str]":
        return lambda v: [s for s in v if type(s) is str] if type(v) is list else _MISSING
    if kind.startswith("list[") and kind[5:-1] in _NESTED:
        row = _NESTED[kind[5:-1]]
        return lambda v: (
            [r for r in (row.from_json(i) for i in v if type(i) is dict) if r is not None]
            if type(v) is list
            else _MISSING
        )
    if kind in _NESTED:
        row = _NESTED[kind]
        return lambda v: (row.from_json(v) if type(v) is dict else None) or _MISSING
    if kind == "Any":
        return lambda v: v
    raise TypeError(f"no reader for a field of type {annotation}")


# A record's fields as (name, reader, default, factory): built once per record type.
_PLANS: dict[type, list[tuple[str, Read, Any, Any]]] = {}


def _plan(cls: type) -> list[tuple[str, Read, Any, Any]]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = [
            (f.name, _reader(str(f.type)), f.default, f.default_factory) for f in fields(cls) if f.init
        ]
    return plan


T = TypeVar("T")


def from_json(cls: type[T], obj: dict[str, Any]) -> T | None:
    """A record of type `cls` from a JSON object, each field read by its declared type: a field missing or
    of another type takes its default, and a record whose field without a default is unusable is None
    (never an exception: a client reads what a newer or older guard sends)."""
    values: dict[str, Any] = {}
    for name, read, default, factory in _plan(cls):
        value = obj.get(name, _MISSING)
        if value is not _MISSING:
            value = read(value)
        if value is _MISSING:
            if default is MISSING and factory is MISSING:
                return None
            continue
        values[name] = value
    return cls(**values)


# -- the records -------------------------------------------------------------------------------------


@nested
@dataclass(slots=True, kw_only=True)
class AgentRow:
    """One agent: the engine's picture of it (`Guard.agent_view`), and its row in a state frame."""

    agent: str
    harness: str = ""  # the harness that first checked for it (the session knows it; the engine does not)
    parent: str | None = None  # the agent that spawned it, as its harness said
    calls: int = 0
    window_fill: int = 0
    window: int = 0
    cap: int = 0  # the cap in force for it (its own override, else the config's)
    worst_count: int = 0
    worst_tool: str = ""
    worst_preview: str = ""
    duplicate_limit: int = 0  # the duplicate limit in force for it
    denies: dict[str, int] = field(default_factory=dict)  # deny kind -> its calls denied (its trip is the first)
    # "ok"; "warned" (its last call was allowed with a warning); or a deny kind: "interrupted",
    # "cap" (its budget is spent), the rule that denied its last call, or "duplicate" (its most
    # repeated call is at the limit: the next one is denied)
    status: str = "ok"
    last_tool: str = ""
    last_seen: float | None = None
    interrupt_reason: str | None = None
    warns: dict[str, int] = field(default_factory=dict)  # rule -> calls allowed with its warning
    rule: str = ""  # the rule behind the status: the one that warned or denied ("" for "ok")
    override: dict[str, int] = field(default_factory=dict)  # the operator's limits for it (cap, limit above
    # already are the ones in force)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> AgentRow | None:
        return from_json(cls, obj)


@nested
@dataclass(slots=True, kw_only=True)
class KeyRow:
    """One repeated call: which agent, which tool, its preview, how often it is in that agent's window."""

    agent: str
    tool: str = ""
    preview: str = ""
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"agent": self.agent, "tool": self.tool, "preview": self.preview, "count": self.count}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> KeyRow | None:
        return from_json(cls, obj)
