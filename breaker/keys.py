"""Call keys: what makes two tool calls "the same", as a fixed-size digest, plus a short preview."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import orjson

__all__ = [
    "Judged",
    "call_digest",
    "call_key",
    "canonical",
    "key_bytes",
    "preview",
    "result_digest",
    "strip_ignored",
    "tool_class_name",
]

_SORT = orjson.OPT_SORT_KEYS
_dumps = orjson.dumps
_EncodeError = orjson.JSONEncodeError


def strip_ignored(args: Any, ignore: frozenset[str]) -> Any:
    """Drop the annotation-only names (`ignoreArgs`) from a top-level object; other args pass as-is."""
    if ignore and isinstance(args, dict) and not ignore.isdisjoint(args):
        return {k: v for k, v in args.items() if k not in ignore}
    return args


def canonical(tool: str, args: Any) -> bytes:
    """Canonical JSON of `[tool, args]`, object keys sorted at every depth; raises TypeError if unserializable."""
    return orjson.dumps((tool, args), option=_SORT)


def call_digest(tool: str, args: Any, ignore: frozenset[str] = frozenset()) -> int | None:
    """The digest the window remembers for a call, or None when the args cannot be serialized.

    The digest is the interpreter's keyed 64-bit SipHash of the canonical bytes (`key_bytes`): a fixed
    size whatever the args weigh, keyed by the process's hash seed (which `cbconsole --headless` keeps
    in its state file, so a restarted guard computes the same digests), and a false match between
    two different calls in one 200-call window is about 1 in 10^15.
    """
    data = key_bytes(tool, args, ignore)
    return None if data is None else hash(data)


def key_bytes(tool: str, args: Any, ignore: frozenset[str] = frozenset()) -> bytes | None:
    """The canonical bytes a call's digest is made of: JSON of `[tool, args]` without the `ignore`
    names, object keys sorted at every depth; None when the args cannot be serialized. The guard's
    judge process (breaker/judge.py) makes these for large frames, and the guard hashes them."""
    if ignore and isinstance(args, dict) and not ignore.isdisjoint(args):
        args = {k: v for k, v in args.items() if k not in ignore}
    try:
        return _dumps((tool, args), option=_SORT)
    except _EncodeError as exc:
        if "Recursion" not in str(exc):
            return None  # bytes, sets, Python integers beyond 64 bits: the guard cannot judge them, it fails open
        return _deep_canonical((tool, args))  # nested past orjson's 254 levels: still the same call
    except Exception:  # anything else orjson cannot judge fails open too
        return None


class Judged(NamedTuple):
    """A call whose args were read and keyed by the judge process: its digest (None: unjudgeable) and
    the preview shown for it. The engine takes it instead of the args."""

    key: int | None
    preview: str


call_key = call_digest  # the name replay and older callers use


def result_digest(result: Any) -> str:
    """What a harness reports of a call's result: 16 hex digits of BLAKE2b over its text (a string
    as is, bytes as they are, anything else as canonical JSON, or its repr when JSON cannot carry
    it). Every adapter digests the same way, so the same output always gives the same digest; the
    guard compares digests only, and never sees the content."""
    if isinstance(result, bytes):
        data = result
    elif isinstance(result, str):
        data = result.encode("utf-8", "surrogatepass")
    else:
        try:
            data = _dumps(result, option=_SORT)
        except Exception:
            data = repr(result).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8).hexdigest()


_MAX_INT = 2**64
_MAX_DEPTH = 4096  # deeper than any frame the guard accepts (1,024); a circular structure stops here


def _deep_canonical(value: Any) -> bytes | None:
    """Canonical JSON for values nested too deep for orjson, without recursion (object keys sorted,
    compact). None if it holds something JSON cannot carry, or is circular. Only self-consistency
    matters: a given structure always takes this path or always the other, so its digest is stable."""
    out: list[str] = []
    stack: list[tuple[bool, Any, int]] = [(False, value, 0)]  # (is literal text, item, depth)
    while stack:
        literal, item, depth = stack.pop()
        if literal:
            out.append(item)
        elif isinstance(item, str):
            out.append(orjson.dumps(item).decode())
        elif item is None or isinstance(item, bool):
            out.append("null" if item is None else "true" if item else "false")
        elif isinstance(item, int):
            if not -_MAX_INT < item < _MAX_INT:
                return None
            out.append(str(item))
        elif isinstance(item, float):
            out.append(repr(item) if item == item and item not in (float("inf"), float("-inf")) else "null")
        elif isinstance(item, orjson.Fragment):  # a number kept as its exact digits (protocol.loads_exact)
            out.append(orjson.dumps(item).decode())
        elif depth >= _MAX_DEPTH:
            return None
        elif isinstance(item, (list, tuple)):
            out.append("[")
            stack.append((True, "]", 0))
            for i, element in enumerate(reversed(item)):
                stack.append((False, element, depth + 1))
                if i < len(item) - 1:
                    stack.append((True, ",", 0))
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return None
            out.append("{")
            stack.append((True, "}", 0))
            keys = sorted(item, reverse=True)
            for i, k in enumerate(keys):
                stack.append((False, item[k], depth + 1))
                stack.append((True, orjson.dumps(k).decode() + ":", 0))
                if i < len(keys) - 1:
                    stack.append((True, ",", 0))
        else:
            return None
    return "".join(out).encode()


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
