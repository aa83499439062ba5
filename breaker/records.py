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
#
# Each record type gets a decoder written from its fields once (as `dataclasses` writes `__init__`): one
# type test per field, inline, as fast as a hand-written `from_json`, and never out of step with the fields.

_MISSING = object()
_NESTED: dict[str, Any] = {}  # record types other records hold, by name (see `nested`)


def nested(cls: Any) -> Any:
    """Register a record type that other records hold (`list[Name]`, `Name | None`), for `from_json`."""
    _NESTED[cls.__name__] = cls
    return cls


def _convert(kind: str, names: dict[str, Any]) -> list[str]:
    """Lines that turn `v` (present in the frame) into a value of the type `kind` names, or into M if it cannot
    be one. `names` takes the record types the lines use."""
    if kind.endswith("|None"):
        return ["if v is not None:", *("    " + line for line in _convert(kind[: -len("|None")], names))]
    if kind in ("str", "int", "bool"):
        return [f"if type(v) is not {kind}: v = M"]
    if kind == "float":
        return ["if type(v) is int: v = float(v)", "elif type(v) is not float: v = M"]
    if kind == "dict[str,int]":
        return ["v = {k: n for k, n in v.items() if type(n) is int} if type(v) is dict else M"]
    if kind.startswith("dict["):
        return ["if type(v) is not dict: v = M"]
    if kind == "list[str]":
        return ["v = [x for x in v if type(x) is str] if type(v) is list else M"]
    if kind.startswith("list[") and kind[5:-1] in _NESTED:
        names[kind[5:-1]] = _NESTED[kind[5:-1]]
        read = f"{kind[5:-1]}.from_json"
        return [f"v = [r for r in (map({read}, [i for i in v if type(i) is dict])) if r is not None] "
                "if type(v) is list else M"]  # fmt: skip
    if kind in _NESTED:
        names[kind] = _NESTED[kind]
        return [f"v = ({kind}.from_json(v) if type(v) is dict else None) or M"]
    if kind == "Any":
        return []
    raise TypeError(f"no decoder for a field of type {kind}")


def _decoder(cls: type) -> Callable[[dict[str, Any]], Any]:
    names: dict[str, Any] = {"M": _MISSING, "cls": cls}
    lines = ["def decode(obj):", "    get = obj.get", "    kw = {}"]
    for f in fields(cls):
        if not f.init:
            continue
        required = f.default is MISSING and f.default_factory is MISSING
        lines += [f"    v = get({f.name!r}, M)", "    if v is not M:"]
        lines += ["        " + line for line in _convert(str(f.type).replace(" ", ""), names)]
        lines += ["        if v is not M:", f"            kw[{f.name!r}] = v"]
        if required:
            lines += ["    if v is M:", "        return None"]
    lines.append("    return cls(**kw)")
    exec("\n".join(lines), names)  # our own source, written from our own field types
    return names["decode"]


_DECODERS: dict[type, Callable[[dict[str, Any]], Any]] = {}
T = TypeVar("T")


def from_json(cls: type[T], obj: dict[str, Any]) -> T | None:
    """A record of type `cls` from a JSON object, each field read by its declared type: a field missing or
    of another type takes its default, and a record whose field without a default is unusable is None
    (never an exception: a client reads what a newer or older guard sends)."""
    decode = _DECODERS.get(cls)
    if decode is None:
        decode = _DECODERS[cls] = _decoder(cls)
    return decode(obj)


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
    status: str = "ok"  # a breaker.vocab.Status (read as any string: a newer guard may say more)
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
