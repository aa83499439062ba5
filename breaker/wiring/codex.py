"""Codex CLI's hook trust: the hash Codex records for a trusted hook, and edits of `config.toml` that
record it (or take it out) and keep every other byte.

Codex 0.171.0 runs a hook from hooks.json only once the user trusted it: `$CODEX_HOME/config.toml`
holds `[hooks.state."<hooks.json path>:<event>:<group>:<handler>"]` with `trusted_hash =
"sha256:<hex>"`, the SHA-256 of the hook's normalized identity as compact JSON with sorted keys
(`{"event_name": "pre_tool_use", "hooks": [{"async": false, "command": …, "timeout": 10, "type":
"command"}], "matcher": "*"}`). An untrusted hook is skipped without a word, and headless `codex exec`
has no prompt: only `--dangerously-bypass-hook-trust` (which runs every enabled hook, trusted or not,
for that one run) gets past it. Recording the hash is what trusting the hook in codex's `/hooks`
writes. `cbconsole doctor` asks Codex itself (`codex app-server`, `hooks/list`) which hooks it trusts.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

from breaker.wiring.files import SetupError

__all__ = ["event_label", "hook_key", "record_trust", "trust_hash"]


def event_label(event: str) -> str:
    """Codex's name for an event in trust keys and hashes: `PreToolUse` is `pre_tool_use`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def hook_key(hooks_json: Path, event: str, group: int, handler: int) -> str:
    """The key of a hook's trust record (Codex's own: the file, the event, the positions)."""
    return f"{hooks_json}:{event_label(event)}:{group}:{handler}"


def trust_hash(event: str, group: dict[str, Any], handler: dict[str, Any]) -> str:
    """The `trusted_hash` Codex 0.171.0 computes for one command hook of a matcher group."""
    timeout = handler.get("timeout", handler.get("timeoutSec"))
    normalized: dict[str, Any] = {
        "type": "command",
        "command": handler.get("command"),
        "timeout": max(1, int(timeout)) if isinstance(timeout, int) and not isinstance(timeout, bool) else 600,
        "async": bool(handler.get("async", False)),
    }
    if isinstance(handler.get("statusMessage"), str):
        normalized["statusMessage"] = handler["statusMessage"]
    identity: dict[str, Any] = {"event_name": event_label(event), "hooks": [normalized]}
    if isinstance(group.get("matcher"), str):
        identity["matcher"] = group["matcher"]
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _basic(key: str) -> str:
    """A TOML basic string."""
    out = key.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\u{ord(m.group()):04x}", out) + '"'


def _header(key: str) -> re.Pattern[str]:
    literal = f"'{key}'" if "'" not in key and "\n" not in key else None
    names = re.escape(_basic(key)) + (f"|{re.escape(literal)}" if literal else "")
    return re.compile(rf"^[ \t]*\[[ \t]*hooks[ \t]*\.[ \t]*state[ \t]*\.[ \t]*(?:{names})[ \t]*\][ \t]*(?:#.*)?$", re.M)


_HASH_LINE = re.compile(r"^([ \t]*trusted_hash[ \t]*=[ \t]*)(\"[^\"\n]*\"|'[^'\n]*')([ \t]*(?:#.*)?)$", re.M)
_ANY_HEADER = re.compile(r"^[ \t]*\[", re.M)


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(
            path, f"is not valid TOML ({exc}); nothing was changed. Fix it, then run setup again"
        ) from None
    except ValueError as exc:  # tomllib's int() refuses more digits than sys.get_int_max_str_digits()
        limit = sys.get_int_max_str_digits()
        long = re.search(rf"(?<![\w.])[+-]?[0-9](?:_?[0-9]){{{limit},}}", text) if limit else None
        if long is None:
            raise SetupError(path, f"cannot be read as TOML ({exc}); nothing was changed") from None
        raise SetupError(
            path,
            f"line {text.count(chr(10), 0, long.start()) + 1}: holds an integer of more than {limit:,} digits, "
            "which is not valid TOML (its integers are 64-bit; Codex refuses the file too); nothing was changed. "
            "Fix it, then run setup again",
        ) from None
    except RecursionError:
        raise SetupError(
            path,
            "nests arrays or inline tables too deeply to be read (a config.toml nests a few levels); nothing was "
            "changed. Fix it, then run setup again",
        ) from None


def _states(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise SetupError(path, "has a `hooks` that is not a table; nothing was changed")
    state = hooks.get("state", {})
    if not isinstance(state, dict):
        raise SetupError(path, "has a `hooks.state` that is not a table; nothing was changed")
    return state


def trusted(path: Path, text: str | None) -> dict[str, str]:
    """Every hook's recorded trust in a config.toml: key -> trusted_hash."""
    if not text:
        return {}
    out = {}
    for key, value in _states(path, _parse(path, text)).items():
        if isinstance(value, dict) and isinstance(value.get("trusted_hash"), str):
            out[key] = value["trusted_hash"]
    return out


def record_trust(path: Path, text: str | None, wanted: dict[str, str], drop: set[str]) -> str:
    """config.toml's text with `wanted` (key -> hash) recorded as trusted and the keys in `drop` no longer
    trusted; every other byte kept. SetupError if the file holds these records in a form this does not
    edit (an inline table): trust the hooks in codex's /hooks instead."""
    text = text or ""
    state = _states(path, _parse(path, text))
    nl = "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"
    for key in sorted(drop):
        entry = state.get(key)
        if not isinstance(entry, dict) or "trusted_hash" not in entry:
            continue
        header = _header(key).search(text)
        if header is None:
            raise _inline(path, key)
        start, end = _table(text, header)
        if set(entry) == {"trusted_hash"}:  # ours alone: the whole table goes, with the blank line before it
            if text[:start].endswith(nl * 2):
                start -= len(nl)
            elif start == 0 and text[end:].startswith(nl):
                end += len(nl)
            text = text[:start] + text[end:]
        else:
            line = _HASH_LINE.search(text, header.end(), end)
            if line is not None:
                text = text[: line.start()] + text[line.end() :].removeprefix(nl)
    for key, digest in wanted.items():
        entry = state.get(key)
        if isinstance(entry, dict) and entry.get("trusted_hash") == digest:
            continue
        header = _header(key).search(text)
        if header is None and key in state:
            raise _inline(path, key)
        if header is None:
            if text and not text.endswith(("\n", "\r")):
                text += nl
            text += (nl if text.strip() else "") + f"[hooks.state.{_basic(key)}]{nl}trusted_hash = {_basic(digest)}{nl}"
            continue
        _start, end = _table(text, header)
        line = _HASH_LINE.search(text, header.end(), end)
        if line is not None:
            text = text[: line.start(2)] + _basic(digest) + text[line.end(2) :]
        else:
            text = text[: header.end()] + f"{nl}trusted_hash = {_basic(digest)}" + text[header.end() :]
    after = trusted(path, text)
    if any(after.get(key) != digest for key, digest in wanted.items()) or any(key in after for key in drop):
        raise SetupError(
            path,
            "holds its hook settings in a form setup cannot extend (an inline `hooks` table?); nothing was changed. "
            "Trust the hooks in codex instead: start `codex` and review them in /hooks",
        )
    return text


def _table(text: str, header: re.Match[str]) -> tuple[int, int]:
    """From the header line's start to the next table header (or the end)."""
    nxt = _ANY_HEADER.search(text, header.end())
    return header.start(), (nxt.start() if nxt else len(text))


def _inline(path: Path, key: str) -> SetupError:
    return SetupError(
        path,
        f"records the trust of {key} in a form setup does not edit (an inline table); nothing was changed. "
        "Trust the hooks in codex instead: start `codex` and review them in /hooks",
    )
