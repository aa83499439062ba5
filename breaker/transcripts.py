"""Transcript readers: dsh sessions, Claude Code, Codex, Gemini CLI and plain calls JSONL, as calls per
agent with their results' digests; and corpora of labelled traces (a directory with a MANIFEST.json).

A transcript's format is named after the harness that writes it (`claude-code`, `gemini-cli`, ...), and
an agent gets the id that harness's adapter gives it live, so an agent has one id live and in replay.
"""

from __future__ import annotations

import gc
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import zstandard

from breaker.keys import result_digest

__all__ = [
    "FORMATS",
    "FORMAT_ALIASES",
    "LABELS",
    "MANIFEST",
    "Agent",
    "Corpus",
    "Reading",
    "RecordedCall",
    "Skip",
    "Trace",
    "TranscriptError",
    "decompress",
    "detect",
    "format_name",
    "harness_of",
    "read",
    "read_corpus",
    "result_value",
]

# The formats, each named after the harness that writes it; `calls` is ours (one call per line).
FORMATS = ("dsh", "claude-code", "codex", "gemini-cli", "calls")
FORMAT_ALIASES = {"claude": "claude-code", "gemini": "gemini-cli"}  # the names before harness names were used
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_DETECT_LINES = 50  # objects looked at to tell a format (Claude files may open with bookkeeping lines)
_SKIPS_KEPT = 1000  # malformed lines listed individually; beyond that only counted


class TranscriptError(Exception):
    """A path cannot be read as a transcript: which path, and why."""


def format_name(name: str) -> str | None:
    """The format called `name` (a format, or an older alias such as `claude`); None if there is none."""
    name = FORMAT_ALIASES.get(name, name)
    return name if name in FORMATS else None


def harness_of(fmt: str) -> str | None:
    """The harness whose transcripts are in format `fmt`; None for calls JSONL, which no harness writes."""
    return None if fmt == "calls" else fmt


class RecordedCall(NamedTuple):
    """One tool call read from a transcript, in input order: who made it, which tool, its args, when
    (seconds, or None)."""

    agent: str
    tool: str
    args: Any
    t: float | None


@dataclass
class Agent:
    """One agent found in the input: its id, its parent's id, where it came from, its time span and failures."""

    id: str
    parent: str | None
    format: str
    source: str
    failed: int | None = 0  # None: the format records no results
    first: float | None = None
    last: float | None = None
    calls: int = 0
    results: int = 0  # calls whose result the transcript records (and replay can report)

    def seen(self, t: float | None) -> None:
        if t is None:
            return
        if self.first is None or t < self.first:
            self.first = t
        if self.last is None or t > self.last:
            self.last = t

    @property
    def run_time(self) -> float | None:
        return None if self.first is None or self.last is None else self.last - self.first


@dataclass(frozen=True)
class Skip:
    """A line that was skipped: which file, which line (1-based; in the decompressed text for zstd), why."""

    source: str
    line: int
    reason: str


@dataclass
class Reading:
    """Everything read from the paths: the calls in input order, their recorded results, the agents, and
    what went wrong on the way."""

    calls: list[RecordedCall] = field(default_factory=list)
    # call index (in `calls`) -> its result's digest (breaker.keys.result_digest), for the calls whose
    # result the transcript records
    results: dict[int, str] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    skipped: list[Skip] = field(default_factory=list)
    skipped_count: int = 0
    warnings: list[str] = field(default_factory=list)
    files: list[tuple[str, str]] = field(default_factory=list)  # (path, format) per file read

    def skip(self, source: str, line: int, reason: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < _SKIPS_KEPT:
            self.skipped.append(Skip(source, line, reason))

    def agent(self, id_: str, parent: str | None, fmt: str, source: str, failed: int | None = 0) -> Agent:
        """The agent `id_` of this source; an id already taken by another source gets a `#2`-style suffix."""
        found = self.agents.get(id_)
        if found is not None and found.source == source:
            return found
        name, n = id_, 1
        while name in self.agents and self.agents[name].source != source:
            n += 1
            name = f"{id_}#{n}"
        if name != id_:
            self.warnings.append(f"{source}: agent {id_} was already read from {self.agents[id_].source}; named {name}")
        if name not in self.agents:
            self.agents[name] = Agent(name, parent, fmt, source, failed)
        return self.agents[name]

    def add(self, agent: Agent, tool: str, args: Any, t: float | None) -> int:
        """Record one call; returns its index in `calls`, for its result to find it."""
        agent.calls += 1
        agent.seen(t)
        self.calls.append(RecordedCall(agent.id, tool, args, t))
        return len(self.calls) - 1

    def add_result(self, index: int | None, value: Any) -> None:
        """The recorded result of call `index` (None: a result whose call was not read, ignored); a
        result written again for the same call replaces the first."""
        if index is None or index >= len(self.calls):
            return
        if index not in self.results:
            self.agents[self.calls[index].agent].results += 1
        self.results[index] = result_digest(value)


# -- bytes ----------------------------------------------------------------------------------------


def _frame_end(data: bytes, at: int) -> int:
    """Where the zstd frame starting at `at` ends, from its headers alone (no decoding); -1 if `data` ends first.

    Raises ValueError when the bytes at `at` are not a frame. Follows RFC 8878: a frame header, then
    blocks of a 3-byte header each (last-block bit, type, size), then an optional 4-byte checksum.
    """
    size = len(data)
    if at + 4 > size:
        return -1
    magic = int.from_bytes(data[at : at + 4], "little")
    if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: 4-byte length, then that many bytes
        if at + 8 > size:
            return -1
        end = at + 8 + int.from_bytes(data[at + 4 : at + 8], "little")
        return end if end <= size else -1
    if magic != 0xFD2FB528:
        raise ValueError("not a zstd frame")
    if at + 5 > size:
        return -1
    fhd = data[at + 4]
    single = fhd >> 5 & 1
    fcs = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    pos = at + 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
    while True:
        if pos + 3 > size:
            return -1
        block = int.from_bytes(data[pos : pos + 3], "little")
        kind = block >> 1 & 3
        if kind == 3:
            raise ValueError("a reserved block type")
        pos += 3 + (1 if kind == 1 else block >> 3)
        if block & 1:
            break
    pos += 4 if fhd & 4 else 0
    return pos if pos <= size else -1


def decompress(data: bytes) -> tuple[bytes, str | None]:
    """All zstd frames of `data`, concatenated; with a warning (else None) when the stream ends early or is corrupt.

    Whatever was readable is returned: every frame before the damage, and the decodable start of a
    cut-off last frame. Frame boundaries come from the headers, so the complete frames are decoded
    in one call however many there are (dsh writes one per append batch).
    """
    dctx = zstandard.ZstdDecompressor()
    ends: list[int] = []
    at, problem = 0, None
    while at < len(data):
        try:
            end = _frame_end(data, at)
        except ValueError as exc:
            problem = f"zstd frame {len(ends) + 1} is unreadable ({exc}); read the {len(ends)} frames before it"
            break
        if end < 0:
            problem = f"the zstd stream is cut off in frame {len(ends) + 1}; read what came before the cut"
            break
        ends.append(end)
        at = end
    whole = ends[-1] if ends else 0
    try:
        out = [dctx.decompressobj(read_across_frames=True).decompress(data[:whole])] if whole else []
    except zstandard.ZstdError:
        out = []  # a damaged frame in the middle: decode frame by frame up to it
        start = 0
        for n, end in enumerate(ends):
            try:
                out.append(dctx.decompressobj().decompress(data[start:end]))
            except zstandard.ZstdError as exc:
                return b"".join(out), f"zstd frame {n + 1} is unreadable ({exc}); read the {n} frames before it"
            start = end
    if problem is not None and problem.startswith("the zstd stream is cut off"):
        try:  # the decodable start of the cut-off frame
            out.append(dctx.decompressobj().decompress(data[whole:]))
        except zstandard.ZstdError:
            pass
    return b"".join(out), problem


def _lines(data: bytes) -> list[tuple[int, bytes]]:
    """(line number from 1, line) for each line that is not blank."""
    return [(n, line) for n, line in enumerate(data.split(b"\n"), 1) if line and not line.isspace()]


def _parse_rows(
    rows: list[tuple[int, bytes]],
    source: str,
    reading: Reading,
    torn: bool,
    wanted: Callable[[bytes], bool] | None = None,
) -> list[tuple[int, Any]]:
    """(line number, object) for the JSON lines; a line that is not JSON is skipped and counted.

    `wanted`: parse only the lines it accepts (and always the first and the last); the others are
    passed over unread. `torn`: the text ends where a zstd stream was cut, so a last line that is not
    JSON is the torn tail of a record (dsh drops it too), not a malformed one.
    """
    out = []
    last = len(rows) - 1
    loads = orjson.loads
    if wanted is not None and last > 1:
        rows = [rows[0], *(r for r in rows[1:last] if wanted(r[1])), rows[last]]
        last = len(rows) - 1
    for i, (n, line) in enumerate(rows):
        try:
            out.append((n, loads(line)))
        except orjson.JSONDecodeError as exc:
            if torn and i == last:
                reading.warnings.append(f"{source}: line {n} was cut off by the end of the stream; left out")
                continue
            reading.skip(source, n, f"not JSON ({str(exc).split(':')[0]})")
    return out


def _dsh_wanted(line: bytes) -> bool:
    """dsh lines worth parsing: tool calls and results, and anything that does not even open like a record.

    The many chunk and message records hold no call; parsing them all would be most of the reading time.
    """
    return b"tool/" in line or not line.startswith(b"{")


# -- format detection -----------------------------------------------------------------------------

_CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_CLAUDE_TYPES = frozenset({"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation"})


def _kind(obj: Any) -> str | None:
    """The format one parsed line belongs to, if it tells."""
    if not isinstance(obj, dict):
        return None
    typ = obj.get("type")
    if typ == "session" and "id" in obj and ("createdAt" in obj or "version" in obj):
        return "dsh"
    if isinstance(typ, str) and "/" in typ and "seq" in obj and "data" in obj:
        return "dsh"
    if typ in _CODEX_TYPES and "payload" in obj:
        return "codex"
    if typ in _CLAUDE_TYPES and ("sessionId" in obj or "uuid" in obj or typ in ("summary", "file-history-snapshot")):
        return "claude-code"
    if "agent" in obj and "tool" in obj:
        return "calls"
    if "sessionId" in obj and "projectHash" in obj:  # a Gemini CLI chat: JSONL header, or a whole JSON document
        return "gemini-cli"
    return None


def detect(objects: Iterable[Any]) -> str | None:
    """The format of a file from its first parsed lines, or None if none of them tells."""
    for i, obj in enumerate(objects):
        kind = _kind(obj)
        if kind is not None:
            return kind
        if i >= _DETECT_LINES:
            break
    return None


# -- the formats ----------------------------------------------------------------------------------


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _iso(value: Any) -> float | None:
    """Seconds since the epoch from an ISO 8601 string (or a number of seconds), else None."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return _num(value)


def _json_args(raw: Any) -> Any:
    """Args given as a JSON string (dsh, Codex) parsed; a string that is not JSON stays the string."""
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


# Lines a harness adds to a tool's output that differ on every run of the same command (Codex: the
# output chunk's id and the wall time; Gemini CLI: the shell's process group and background pids, as
# cbhook leaves them out live; Claude Code: the `<timestamp>` its BashOutput stamps into every answer,
# in its transcripts and in calls JSONL converted from them). Left in, every result would look new and a
# polling loop would always seem to make progress.
_CLAUDE_VOLATILE = re.compile(r"^<timestamp>[^<\n]*</timestamp>\n?", re.M)
_VOLATILE = {
    "codex": re.compile(r"^(?:Chunk ID|Wall time): [^\n]*\n?", re.M),
    "gemini-cli": re.compile(r"^(?:Process Group PGID|Background PIDs): [^\n]*\n?", re.M),
    "claude-code": _CLAUDE_VOLATILE,
    "calls": _CLAUDE_VOLATILE,
}


# The guard's own deny text (its default deny message, or an interrupt) as a harness records it.
_GUARD_DENY = re.compile(r"Circuit breaker \((?:duplicate|repeat|cycle|cap|interrupted)\)")


def _blocked(value: Any, *prefixes: str) -> bool:
    """A recorded result (its text) that says the call was stopped before its tool ran: by this guard
    (its deny text, in any harness) or by what `prefixes` name. It is no result: the tool's output is
    unknown, and replay's own guard decides that call anyway."""
    if type(value) is not str:
        return False
    if prefixes and value.startswith(prefixes):
        return True
    return "Circuit breaker (" in value[:300] and _GUARD_DENY.search(value[:300]) is not None


def result_value(content: Any, fmt: str = "") -> Any:
    """What of a recorded result is digested: its text when it is text (a string, or a list of text
    blocks joined: Claude Code writes one output either way), else the JSON value as it is; with the
    harness's run-specific lines (`_VOLATILE`) left out."""
    if type(content) is list and content:
        if len(content) == 1:  # the usual case: one text block
            block = content[0]
            if type(block) is dict and block.get("type") == "text" and type(block.get("text")) is str:
                content = block["text"]
        elif all(type(b) is dict and b.get("type") == "text" and type(b.get("text")) is str for b in content):
            content = "".join(b["text"] for b in content)
    volatile = _VOLATILE.get(fmt)
    if volatile is not None and isinstance(content, str):
        content = volatile.sub("", content)
    return content


def _read_dsh(objs: list[tuple[int, Any]], source: str, path: Path, reading: Reading) -> None:
    header = objs[0][1] if objs and isinstance(objs[0][1], dict) and objs[0][1].get("type") == "session" else None
    if header is None:
        agent_id = path.parent.name if path.name.startswith("session.jsonl") else path.stem
        reading.warnings.append(f"{source}: no session header on line 1; agent named {agent_id} after the file")
        parent = None
    else:
        agent_id = str(header.get("id") or path.parent.name)
        parent = header.get("parentSession") if isinstance(header.get("parentSession"), str) else None
    agent = reading.agent(agent_id, parent, "dsh", source)
    if header is not None:
        created = _num(header.get("createdAt"))
        agent.seen(created / 1000 if created is not None else None)
    by_id: dict[str, int] = {}  # callId -> call index, for its tool/result
    for n, obj in objs:
        if not isinstance(obj, dict):
            reading.skip(source, n, "not a JSON object")
            continue
        typ = obj.get("type")
        ms = _num(obj.get("time"))
        if ms is None:
            ms = _num(obj.get("time0"))  # a packed chunk row
        t = ms / 1000 if ms is not None else None
        if typ == "tool/call":
            data = obj.get("data")
            if not isinstance(data, dict):
                data = {}
            name = data.get("name")
            if not isinstance(name, str) or not name:
                reading.skip(source, n, "a tool/call record without a tool name")
                continue
            index = reading.add(agent, name, _json_args(data.get("arguments")), t)
            call_id = data.get("callId")
            if isinstance(call_id, str):
                by_id[call_id] = index
        else:
            agent.seen(t)
            if typ == "tool/result":
                data = obj.get("data")
                if _dsh_failed(data):
                    agent.failed = (agent.failed or 0) + 1
                for call_id, content in _dsh_results(data):
                    value = result_value(content, "dsh")
                    if not _blocked(value):
                        reading.add_result(by_id.get(call_id), value)


def _dsh_results(data: Any) -> list[tuple[str, Any]]:
    """(callId, content) of each tool-result block in a tool/result record's message."""
    message = data.get("message") if isinstance(data, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    out = []
    for block in content:
        if isinstance(block, dict) and isinstance(block.get("toolCallId"), str) and "content" in block:
            out.append((block["toolCallId"], block["content"]))
    return out


def _dsh_failed(data: Any) -> bool:
    """dsh marks a failed result `isError` on the result block inside `data.message` (older shapes: on `data`)."""
    if not isinstance(data, dict):
        return False
    if data.get("isError") is True:
        return True
    message = data.get("message")
    if isinstance(message, dict):
        if message.get("isError") is True:
            return True
        content = message.get("content")
        if isinstance(content, list):
            return any(isinstance(b, dict) and b.get("isError") is True for b in content)
    return False


_CLAUDE_AGENT_FILE = re.compile(r"agent-(.+)\.jsonl\Z")


def _claude_subagent(session: str, agent_id: str) -> str:
    """A subagent's id as cbhook sends it live (breaker.hook.subagent_id, a floor above; the test
    test_a_claude_code_subagent_has_one_id_live_and_in_replay keeps them equal on a real recording)."""
    return f"{session}/{agent_id}"


def _read_claude(objs: list[tuple[int, Any]], source: str, path: Path, reading: Reading) -> None:
    """A Claude Code session file, or one of its `<session>/subagents/agent-<id>.jsonl` files.

    The main agent is the session id; a subagent is `<session id>/<agent id>` with the session as its
    parent, as cbhook names them from the hooks' `session_id` and `agent_id`. A subagent file's lines
    carry both (`sessionId`, `agentId`); its name and directory stand in when they do not.
    """
    session = next((o["sessionId"] for _, o in objs if isinstance(o, dict) and isinstance(o.get("sessionId"), str)), "")
    file_agent = _CLAUDE_AGENT_FILE.match(path.name)
    if file_agent and not session and path.parent.name == "subagents":
        session = path.parent.parent.name
    main_id = session or path.stem
    by_id: dict[str, int] = {}  # tool_use id -> call index, for its tool_result
    agents: dict[str, Agent] = {}
    fallback: tuple[str, str | None] = (main_id, None)
    if file_agent:  # with no session to be found, only the file's own name is left (no hook sent such an id)
        fallback = (_claude_subagent(session, file_agent.group(1)), session) if session else (path.stem, None)

    def agent_for(obj: dict[str, Any]) -> Agent:
        sub = obj.get("agentId")
        if isinstance(sub, str) and sub and (obj.get("isSidechain") or file_agent) and (session or not file_agent):
            name, parent = _claude_subagent(main_id, sub), main_id
        else:
            name, parent = fallback
        found = agents.get(name)
        if found is None:
            found = agents[name] = reading.agent(name, parent, "claude-code", source)
        return found

    for n, obj in objs:
        if not isinstance(obj, dict):
            reading.skip(source, n, "not a JSON object")
            continue
        typ = obj.get("type")
        t = _iso(obj.get("timestamp"))
        if typ not in ("assistant", "user"):
            continue
        agent = agent_for(obj)
        agent.seen(t)
        message = obj.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use" and typ == "assistant":
                name = block.get("name")
                if not isinstance(name, str) or not name:
                    reading.skip(source, n, "a tool_use block without a tool name")
                    continue
                call_id = block.get("id")
                if isinstance(call_id, str):
                    if call_id in by_id:  # the same block written again (streamed message rewritten)
                        continue
                    by_id[call_id] = reading.add(agent, name, block.get("input"), t)
                else:
                    reading.add(agent, name, block.get("input"), t)
            elif kind == "tool_result":
                if block.get("is_error") is True:
                    agent.failed = (agent.failed or 0) + 1
                use_id = block.get("tool_use_id")
                # `toolDenialKind`: a permission rule, a hook or the user stopped the call; no tool ran
                if isinstance(use_id, str) and "content" in block and "toolDenialKind" not in obj:
                    value = result_value(block["content"], "claude-code")
                    if not _blocked(value, "PreToolUse:"):
                        reading.add_result(by_id.get(use_id), value)


_CODEX_BLOCKED = ("Command blocked by ", "Tool call blocked by ")
_EXIT = re.compile(r"(?:Exit code|Process exited with code):? (-?\d+)")


def _codex_failed(output: Any) -> bool:
    """A Codex call output that says the call failed: blocked by a hook, or a non-zero exit code.

    Codex sets no error flag: a denied call's output reads `Command blocked by PreToolUse hook: ...`,
    a command's `Process exited with code N` (older versions: JSON with `metadata.exit_code`).
    """
    if isinstance(output, dict):
        if output.get("success") is False:
            return True
        output = output.get("content", output.get("output"))
    if not isinstance(output, str):
        return False
    if output.startswith(_CODEX_BLOCKED):
        return True
    if output.startswith("{"):
        try:
            parsed = orjson.loads(output)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            meta = parsed.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            return isinstance(code, int) and code != 0
    m = _EXIT.search(output[:200])
    return m is not None and m.group(1) != "0"


def _codex_output(output: Any) -> Any:
    """A Codex call output as digested: its text without the lines that change on every run (the
    chunk id, the wall time; in the older JSON shape, `metadata.duration_seconds`)."""
    if isinstance(output, dict):
        output = output.get("content", output.get("output", output))
    if isinstance(output, str) and output.startswith("{"):
        try:
            parsed = orjson.loads(output)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("metadata"), dict):
            parsed["metadata"] = {k: v for k, v in parsed["metadata"].items() if k != "duration_seconds"}
            return parsed
    return result_value(output, "codex")


def _read_codex(objs: list[tuple[int, Any]], source: str, path: Path, reading: Reading) -> None:
    meta: dict[str, Any] = {}
    for _, o in objs:
        if isinstance(o, dict) and o.get("type") == "session_meta" and isinstance(o.get("payload"), dict):
            meta = o["payload"]
            break
    agent_id = str(meta.get("id") or path.stem)
    agent = reading.agent(agent_id, None, "codex", source)
    agent.seen(_iso(meta.get("timestamp")))
    by_id: dict[str, int] = {}  # call_id -> call index, for its output
    for n, obj in objs:
        if not isinstance(obj, dict):
            reading.skip(source, n, "not a JSON object")
            continue
        t = _iso(obj.get("timestamp"))
        agent.seen(t)
        payload = obj.get("payload")
        if obj.get("type") != "response_item" or not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        index: int | None = None
        if kind in ("function_call", "custom_tool_call"):
            name = payload.get("name")
            if not isinstance(name, str) or not name:
                reading.skip(source, n, f"a {kind} without a tool name")
                continue
            raw = payload.get("arguments") if kind == "function_call" else payload.get("input")
            index = reading.add(agent, name, _json_args(raw) if kind == "function_call" else raw, t)
        elif kind == "local_shell_call":
            index = reading.add(agent, "local_shell", payload.get("action"), t)
        elif kind == "web_search_call":
            action = payload.get("action")
            reading.add(agent, "web_search", action if action is not None else {}, t)  # Codex records no output
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = payload.get("output")
            if _codex_failed(output):
                agent.failed = (agent.failed or 0) + 1
            call_id = payload.get("call_id")
            if isinstance(call_id, str) and output is not None and not _blocked(output, *_CODEX_BLOCKED):
                reading.add_result(by_id.get(call_id), _codex_output(output))
        call_id = payload.get("call_id")
        if index is not None and isinstance(call_id, str):
            by_id[call_id] = index


_GEMINI_BLOCKED = "Tool execution blocked"  # a BeforeTool hook denied the call


def _gemini_result(parts: list[Any]) -> Any:
    """A Gemini CLI call's result as digested: the `response` of each functionResponse part (not its
    id, which names the call), string values without the shell's process group line."""
    out: list[Any] = []
    for part in parts:
        fr = part.get("functionResponse") if isinstance(part, dict) else None
        response = fr.get("response") if isinstance(fr, dict) else part
        if isinstance(response, dict):
            response = {k: result_value(v, "gemini-cli") for k, v in response.items()}
        out.append(result_value(response, "gemini-cli"))
    return out[0] if len(out) == 1 else out


def _read_gemini(objs: list[tuple[int, Any]], source: str, path: Path, reading: Reading) -> None:
    """Gemini CLI chat records: a header line, messages, and `$set` updates.

    A message is written again under the same `id` as it grows (first without, then with its
    `toolCalls`): the last record of each id counts, in the place of its first. A whole-document
    chat file (older versions) is the header with a `messages` list, read the same way.
    """
    header: dict[str, Any] = {}
    messages: dict[Any, tuple[int, dict[str, Any]]] = {}
    for n, obj in objs:
        if not isinstance(obj, dict):
            reading.skip(source, n, "not a JSON object")
            continue
        update = obj.get("$set")
        if isinstance(update, dict):
            obj = update
        elif "id" in obj and "type" in obj:
            messages[obj["id"] if isinstance(obj["id"], str) else ("line", n)] = (n, obj)
            continue
        for key, value in obj.items():
            if key == "messages" and isinstance(value, list):
                messages.clear()
                for k, msg in enumerate(value):
                    if not isinstance(msg, dict):
                        reading.skip(source, n, f"message {k + 1} is not a JSON object")
                        continue
                    messages[msg.get("id") if isinstance(msg.get("id"), str) else ("line", n, k)] = (n, msg)
            else:
                header[key] = value
    agent = reading.agent(str(header.get("sessionId") or path.stem), None, "gemini-cli", source)
    agent.seen(_iso(header.get("startTime")))
    for n, msg in messages.values():
        t = _iso(msg.get("timestamp"))
        agent.seen(t)
        calls = msg.get("toolCalls")
        if not isinstance(calls, list):
            continue
        for call in calls:
            name = call.get("name") if isinstance(call, dict) else None
            if not isinstance(name, str) or not name:
                reading.skip(source, n, "a tool call without a tool name")
                continue
            # The message's time is when the model asked; the call's own `timestamp` is when it finished.
            index = reading.add(agent, name, call.get("args"), t if t is not None else _iso(call.get("timestamp")))
            if call.get("status") == "error":
                agent.failed = (agent.failed or 0) + 1
            if isinstance(call.get("result"), list) and not _blocked(call.get("resultDisplay"), _GEMINI_BLOCKED):
                reading.add_result(index, _gemini_result(call["result"]))
    agent.seen(_iso(header.get("lastUpdated")))


def _read_calls(objs: list[tuple[int, Any]], source: str, path: Path, reading: Reading) -> None:
    agents: dict[str, Agent] = {}
    for n, obj in objs:
        if not isinstance(obj, dict):
            reading.skip(source, n, "not a JSON object")
            continue
        name, tool = obj.get("agent"), obj.get("tool")
        if not isinstance(name, str) or not name or not isinstance(tool, str) or not tool:
            reading.skip(source, n, 'not a call: needs "agent" and "tool" strings')
            continue
        t: float | None = None
        if "t" in obj:
            t = _iso(obj["t"])
            if t is None:
                reading.skip(source, n, '"t" is not a number of seconds')
                continue
        agent = agents.get(name)
        if agent is None:
            agent = agents[name] = reading.agent(name, None, "calls", source, failed=None)
        index = reading.add(agent, tool, obj.get("args", {}), t)
        result = obj.get("result")
        if result is not None:  # absent or null: no result recorded
            reading.add_result(index, result_value(result, "calls") if type(result) is str else result)


# -- paths ----------------------------------------------------------------------------------------

_MAX_FILE = 4 * 1024**3  # a sanity bound, not a budget


def _read_bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > _MAX_FILE:
            raise TranscriptError(f"{path}: {size:,} bytes is too large to be a transcript")
        return path.read_bytes()
    except IsADirectoryError:
        raise TranscriptError(f"{path}: is a directory") from None
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot be read: {exc.strerror or exc}") from None


def read_file(path: Path, reading: Reading, fmt: str | None = None, *, strict: bool = True) -> str | None:
    """Read one transcript file into `reading` as format `fmt` (one of FORMATS; None: detect it);
    returns its format.

    An unknown format raises TranscriptError when `strict` (a file the user named), else the file
    is passed over and None returned (a file met while walking a directory).
    """
    source = str(path)
    mark = (len(reading.warnings),)
    data = _read_bytes(path)
    torn = False
    zstd_warning = None
    if data.startswith(_ZSTD_MAGIC):
        data, zstd_warning = decompress(data)
        if zstd_warning:
            reading.warnings.append(f"{source}: {zstd_warning}")
            torn = True
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if fmt in ("gemini-cli", None) and _whole_document(data):
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            doc = None
        if fmt == "gemini-cli" or _kind(doc) == "gemini-cli":
            if not isinstance(doc, dict):
                raise TranscriptError(f"{source}: not a Gemini CLI chat (neither one JSON object nor JSON lines)")
            _read_gemini([(1, doc)], source, path, reading)
            reading.files.append((source, "gemini-cli"))
            return "gemini-cli"
    rows = _lines(data)
    head = []
    for _, line in rows[:_DETECT_LINES]:
        try:
            head.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            pass
    kind = fmt or detect(head)
    if kind is None:
        del reading.warnings[mark[0] :]  # nothing here is ours
        if not strict:
            return None
        what = "no JSON lines" if not head else "none of its first lines looks like a transcript"
        if zstd_warning:
            what = f"{zstd_warning}; nothing in it is readable as a transcript"
        raise TranscriptError(
            f"{source}: unknown format ({what}); expected a dsh session, a Claude Code, Codex or Gemini CLI "
            'transcript, or calls JSONL ({"agent","tool","args"} per line). Use --format to force one.'
        )
    objs = _parse_rows(rows, source, reading, torn, _dsh_wanted if kind == "dsh" else None)
    _READERS[kind](objs, source, path, reading)
    reading.files.append((source, kind))
    return kind


def _whole_document(data: bytes) -> bool:
    """One JSON document, maybe spread over lines, rather than JSON lines: the first line is not JSON by itself."""
    start = len(data) - len(data.lstrip())
    if data[start : start + 1] not in (b"{", b"["):
        return False
    end = data.find(b"\n", start)
    try:
        orjson.loads(data[start : end if end >= 0 else len(data)])
    except orjson.JSONDecodeError:
        return True
    return False


_READERS = {
    "dsh": _read_dsh,
    "claude-code": _read_claude,
    "codex": _read_codex,
    "gemini-cli": _read_gemini,
    "calls": _read_calls,
}

_TRANSCRIPT_NAMES = re.compile(r".*\.(jsonl|jsonl\.zstd|jsonl\.zst|zst|zstd|json)\Z")


def _walk(root: Path) -> list[Path]:
    """Transcript-looking files under a directory: each directory's files (sorted) before its subdirectories,
    so a Claude Code session comes before `<session>/subagents/`."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        found.extend(Path(dirpath, f) for f in sorted(filenames) if _TRANSCRIPT_NAMES.match(f))
    return found


def _claude_subagents(path: Path) -> list[Path]:
    sub = path.with_suffix("") / "subagents"
    return sorted(sub.glob("agent-*.jsonl")) if sub.is_dir() else []


def read(paths: Iterable[str | os.PathLike[str]], fmt: str | None = None) -> Reading:
    """Read every path (files, session directories, whole trees) into one Reading, each file as format
    `fmt` (a name of FORMATS or FORMAT_ALIASES; None: detect each). Raises TranscriptError."""
    # Parsing builds many small objects and no cycles: the cyclic collector would only rescan them
    # (a third of the reading time, measured); it runs again as soon as the reading is done.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read(paths, fmt)
    finally:
        if was_enabled:
            gc.enable()


def _read(paths: Iterable[str | os.PathLike[str]], fmt: str | None) -> Reading:
    if fmt is not None:
        name = format_name(fmt)
        if name is None:
            raise TranscriptError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
        fmt = name
    reading = Reading()
    done: set[Path] = set()
    passed_over = 0
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise TranscriptError(f"{path}: no such file or directory")
        if path.is_dir():
            files = _walk(path)
            if not files:
                raise TranscriptError(f"{path}: no transcript files in this directory")
            for f in files:
                real = f.resolve()
                if real in done:
                    continue
                done.add(real)
                try:
                    if read_file(f, reading, fmt, strict=False) is None and not f.name.endswith(".json"):
                        passed_over += 1  # other JSON files (settings, Claude's .meta.json) are expected
                except TranscriptError as exc:  # one bad file in a tree does not hide the others
                    reading.warnings.append(f"{exc}; passed over")
            continue
        real = path.resolve()
        if real in done:
            continue
        done.add(real)
        kind = read_file(path, reading, fmt)
        if kind == "claude-code":
            for sub in _claude_subagents(path):
                if sub.resolve() not in done:
                    done.add(sub.resolve())
                    read_file(sub, reading, "claude-code")
    if passed_over:
        reading.warnings.append(f"passed over {passed_over} file(s) in the directories given: not transcripts")
    if not reading.files:
        raise TranscriptError("no transcript found in the paths given")
    return reading


# -- corpora --------------------------------------------------------------------------------------

MANIFEST = "MANIFEST.json"
LABELS = ("loop", "healthy")  # what a corpus trace is: an agent stuck in a loop, or a run that was fine
_FILE_FIELDS = ("file", "path", "name", "trace")  # where a manifest entry may name its file (first found)
_LIST_FIELDS = ("traces", "entries", "files", "corpus")  # where a manifest object may hold its entries


@dataclass(frozen=True)
class Trace:
    """One trace of a corpus: one transcript file (a Claude Code session with its subagents), its label
    from the manifest (None: unlabelled), and what went wrong reading it ("" if nothing)."""

    name: str  # as the manifest names it, else the path given or found
    path: str
    label: str | None = None
    reason: str = ""  # the manifest's words on why it has this label
    source: str = ""  # where it came from: the manifest's `source` (its `url` when it is an object)
    expected_stop: int | None = None  # a loop: the call by which a good detector should have acted
    loop_start: int | None = None  # a loop: the call its repeating pattern starts at
    reading: Reading | None = None  # None when it could not be read (see `error`)
    error: str = ""


@dataclass
class Corpus:
    """Traces to compare settings over, in the order given (a manifest's in its order, then the
    files it does not name), and problems that left a trace or a manifest entry out."""

    traces: list[Trace] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "file:line: what" — something was left out
    warnings: list[str] = field(default_factory=list)  # read anyway


@dataclass(frozen=True)
class _Entry:
    """One manifest entry: its file (relative to the manifest's directory), label, and notes."""

    file: str
    label: str | None
    reason: str
    source: str
    expected_stop: int | None
    loop_start: int | None
    line: int

    def trace(self, path: Path, reading: Reading | None, error: str = "") -> Trace:
        return Trace(
            self.file,
            str(path),
            self.label,
            self.reason,
            self.source,
            self.expected_stop,
            self.loop_start,
            reading,
            error,
        )


def _item_lines(text: str, holder: str | None) -> list[int]:
    """The line (from 1) each item of a manifest's entry list starts on: the top-level list, or the
    list under the key `holder`. [] if the text cannot be walked (the lines then default to 1)."""
    decoder = json.JSONDecoder()
    try:
        if holder is None:
            pos = text.index("[")
        else:
            m = re.search(r'"' + re.escape(holder) + r'"\s*:\s*\[', text)
            if m is None:
                return []
            pos = m.end() - 1
        pos += 1
        lines: list[int] = []
        while True:
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]  # \s* always matches
            if text[pos] == "]":
                return lines
            lines.append(text.count("\n", 0, pos) + 1)
            _, pos = decoder.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos] == ",":
                pos += 1
    except (ValueError, IndexError):
        return []


def _key_lines(text: str, keys: Iterable[str]) -> list[int]:
    """The line (from 1) of each key of a manifest that maps file names to entries."""
    out = []
    for key in keys:
        m = re.search(re.escape(orjson.dumps(key).decode()) + r"\s*:", text)
        out.append(text.count("\n", 0, m.start()) + 1 if m else 1)
    return out


_WS = re.compile(r"\s*")


def _manifest(path: Path, corpus: Corpus) -> list[_Entry]:
    """A corpus manifest's entries; each problem goes to `corpus.errors` as `file:line: what`.

    Accepted shapes: a list of entries; an object holding that list under `traces` (or `entries`,
    `files`, `corpus`); or an object mapping each file name to its entry. An entry is an object with
    the file under `file` (or `path`, `name`, `trace`) and its `label` (`loop` or `healthy`; absent
    or null: unlabelled), optional `reason` and `source`; other fields are passed over.
    """
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        corpus.errors.append(f"{path}: cannot be read: {exc.strerror or exc}")
        return []
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        corpus.errors.append(f"{path}:{getattr(exc, 'lineno', 1)}: not JSON ({str(exc).split(':')[0]})")
        return []
    items: list[tuple[Any, Any]] = []  # (file name given by a mapping's key or None, entry)
    lines: list[int] = []  # the line each entry starts on
    if isinstance(doc, list):
        items = [(None, e) for e in doc]
        lines = _item_lines(text, None)
    elif isinstance(doc, dict):
        holder = next((k for k in _LIST_FIELDS if isinstance(doc.get(k), list)), None)
        if holder is not None:
            items = [(None, e) for e in doc[holder]]
            lines = _item_lines(text, holder)
        else:
            items = [(k, v) for k, v in doc.items() if isinstance(v, dict)]
            lines = _key_lines(text, (k for k, _ in items))
    if len(lines) != len(items):
        lines = [1] * len(items)
    if not items:
        corpus.errors.append(
            f"{path}:1: no entries (expected a list of {{file, label}} objects, or one under "
            f"{', '.join(_LIST_FIELDS)}, or an object mapping each file to its entry)"
        )
        return []
    out: list[_Entry] = []
    for n, ((key, entry), line) in enumerate(zip(items, lines, strict=True), 1):
        if not isinstance(entry, dict):
            corpus.errors.append(f"{path}:{line}: entry {n} is not an object (found {type(entry).__name__})")
            continue
        name = key if key is not None else next((entry[k] for k in _FILE_FIELDS if k in entry), None)
        if not isinstance(name, str) or not name:
            corpus.errors.append(f"{path}:{line}: entry {n} names no file (expected {' or '.join(_FILE_FIELDS)})")
            continue
        label = entry.get("label")
        if label is not None and not isinstance(label, str):
            corpus.errors.append(f"{path}:{line}: {name}: label must be a string (loop or healthy), not {label!r}")
            continue
        if label is not None and label not in LABELS:
            corpus.warnings.append(f"{path}:{line}: {name}: label {label!r} is neither loop nor healthy; unlabelled")
            label = None
        reason, source = entry.get("reason"), entry.get("source")
        if isinstance(source, dict):
            source = source.get("url") or orjson.dumps(source).decode()
        expected = entry.get("expected_stop_by")
        if isinstance(expected, dict):
            expected = expected.get("call")
        out.append(
            _Entry(
                name,
                label,
                reason if isinstance(reason, str) else "",
                source if isinstance(source, str) else "",
                _count(expected),
                _count(entry.get("loop_starts_at")),
                line,
            )
        )
    return out


def _count(value: Any) -> int | None:
    """A call number from a manifest (a positive integer), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _read_trace(path: Path, fmt: str | None, strict: bool) -> Reading | None:
    """One trace's file (with a Claude Code session's subagents) into a Reading of its own; None when
    it is not a transcript and not `strict`. Raises TranscriptError."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        reading = Reading()
        kind = read_file(path, reading, fmt, strict=strict)
        if kind is None:
            return None
        if kind == "claude-code":
            for sub in _claude_subagents(path):
                read_file(sub, reading, "claude-code")
        return reading
    finally:
        if was_enabled:
            gc.enable()


def read_corpus(paths: Sequence[str | os.PathLike[str]], fmt: str | None = None) -> Corpus:
    """Traces from `paths`: directories (with a MANIFEST.json labelling their files, or without: every
    transcript file in them, unlabelled), a MANIFEST.json itself, or transcript files (labelled by the
    MANIFEST.json beside them, if it names them). Raises TranscriptError only for an unknown `fmt`;
    a path or entry that cannot be read is an error in `Corpus.errors` and the rest is still read."""
    if fmt is not None:
        name = format_name(fmt)
        if name is None:
            raise TranscriptError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
        fmt = name
    corpus = Corpus()
    done: set[Path] = set()
    manifests: dict[Path, dict[str, _Entry]] = {}

    def labels_of(directory: Path) -> dict[str, _Entry]:
        found = manifests.get(directory)
        if found is None:
            m = directory / MANIFEST
            entries = _manifest(m, corpus) if m.is_file() else []
            found = manifests[directory] = {str((directory / e.file).resolve()): e for e in entries}
        return found

    def add(path: Path, name: str, entry: _Entry | None, strict: bool = True) -> None:
        real = path.resolve()
        if real in done:
            return
        done.add(real)
        try:
            reading = _read_trace(path, fmt, strict)
        except TranscriptError as exc:
            where = f"{path.parent / MANIFEST}:{entry.line}: " if entry else ""
            corpus.errors.append(f"{where}{exc}")
            corpus.traces.append(entry.trace(path, None, str(exc)) if entry else Trace(name, str(path), error=str(exc)))
            return
        if reading is None:
            return  # a file in a directory that is not a transcript
        done.update(Path(p).resolve() for p, _ in reading.files)  # a Claude Code session's subagents
        corpus.traces.append(entry.trace(path, reading) if entry else Trace(name, str(path), reading=reading))

    for raw in paths:
        path = Path(raw).expanduser()
        if path.name == MANIFEST and path.is_file():
            path = path.parent
        if not path.exists():
            corpus.errors.append(f"{path}: no such file or directory")
            continue
        if path.is_dir():
            entries = labels_of(path)
            for real, entry in entries.items():
                target = path / entry.file
                if not target.exists():
                    corpus.errors.append(f"{path / MANIFEST}:{entry.line}: {entry.file}: no such file")
                    corpus.traces.append(entry.trace(target, None, "no such file"))
                    done.add(Path(real))
                    continue
                add(target, entry.file, entry)
            for f in _walk(path):
                if f.name != MANIFEST and f.resolve() not in done:
                    add(f, str(f.relative_to(path)), None, strict=False)
            continue
        named = labels_of(path.parent).get(str(path.resolve()))
        add(path, named.file if named else str(raw), named)
    return corpus
