"""Call keys: what makes two tool calls "the same", as a fixed-size digest, plus a short preview."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["call_key", "canonical", "preview", "strip_ignored", "tool_class_name"]

_SORT = orjson.OPT_SORT_KEYS


def strip_ignored(args: Any, ignore: frozenset[str]) -> Any:
    """Drop the annotation-only names (`ignoreArgs`) from a top-level object; other args pass as-is."""
    if ignore and isinstance(args, dict) and not ignore.isdisjoint(args):
        return {k: v for k, v in args.items() if k not in ignore}
    return args


def canonical(tool: str, args: Any) -> bytes:
    """Canonical JSON of `[tool, args]`, object keys sorted at every depth; raises TypeError if unserializable."""
    return orjson.dumps((tool, args), option=_SORT)


def call_key(tool: str, args: Any, ignore: frozenset[str] = frozenset()) -> int | None:
    """The digest the window remembers for a call, or None when the args cannot be serialized.

    The digest is the interpreter's keyed 64-bit SipHash of the canonical bytes: a fixed size
    whatever the args weigh, keyed per process (so it cannot be aimed at from outside), and a
    false match between two different calls in one 200-call window is about 1 in 10^15.
    """
    try:
        return hash(orjson.dumps((tool, strip_ignored(args, ignore)), option=_SORT))
    except Exception:  # orjson raises TypeError subclasses; anything it cannot judge fails open
        return None


def tool_class_name(tool: str) -> str:
    """How `exempt` and `only` compare names: case, `_` and `-` ignored (dsh `todo_write` = Claude `TodoWrite`)."""
    return tool.lower().replace("_", "").replace("-", "")


def preview(tool: str, args: Any, width: int = 100) -> str:
    """A one-line human preview of a call, e.g. `web_search query="qwen loops"`, at most `width` chars."""
    if isinstance(args, dict):
        parts = []
        size = len(tool)
        for k, v in args.items():
            part = f"{k}={_short_json(v, width)}"
            parts.append(part)
            size += len(part) + 1
            if size > width:
                break
        text = f"{tool} {' '.join(parts)}" if parts else tool
    elif args is None:
        text = tool
    else:
        text = f"{tool} {_short_json(args, width)}"
    text = " ".join(text.split())  # newlines and tabs would break a one-line display
    return text if len(text) <= width else text[: width - 1] + "…"


def _short_json(value: Any, width: int) -> str:
    if isinstance(value, str):
        value = value[: width + 1]
    try:
        return orjson.dumps(value).decode()[: width + 1]
    except Exception:
        return "<unserializable>"
