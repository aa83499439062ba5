"""A scripted fake model on 127.0.0.1 speaking each harness's wire dialect, recording every request.

Dialects (picked by the request path):
- ``chat``: OpenAI chat completions, ``POST .../chat/completions`` (dsh).
- ``anthropic``: Anthropic messages, ``POST /v1/messages`` (Claude Code; it adds ``?beta=true``).
- ``responses``: OpenAI responses, ``POST /v1/responses`` (Codex CLI).
- ``gemini``: ``POST /v1beta/models/<m>:streamGenerateContent?alt=sse`` and ``:generateContent``
  (Gemini CLI; the latter is its model router and other JSON side questions).

A *script* decides the reply to each request that offers tools: a callable taking a `ModelRequest`
and returning a `ToolCall`, a list of them (parallel calls), or a `Text` (final answer); or a list of
such replies used in order. Requests without tools (titles, summaries, routers) get a short text.
The default script is `loop_script()`: the same call again and again, then a final text.

The step of a conversation is counted from its own history (`ModelRequest.prior_calls`), not from a
global counter, so a subagent's conversation and its parent's each count on their own.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Text:
    text: str


Reply = ToolCall | Text | list[ToolCall]


@dataclass
class ModelRequest:
    """One request as the harness sent it, with what the scripts need already extracted."""

    index: int
    dialect: str  # chat | anthropic | responses | gemini | gemini-json | other
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    raw: str  # the decoded body text
    body: Any  # parsed JSON, or None
    tools: list[str]  # names of the tools offered
    prior_calls: int  # tool calls the model already made in this conversation
    tool_results: list[str]  # the tool results in this conversation, as text, oldest first
    system: str  # the system prompt, flattened to text
    last_user: str  # the newest user text (not tool results)
    user_texts: list[str] = field(default_factory=list)  # every user text of the conversation, oldest first
    reply: Reply | None = None  # what we answered (set after scripting)
    time: float = field(default_factory=time.time)

    @property
    def has_tools(self) -> bool:
        return bool(self.tools)

    @property
    def last_tool_result(self) -> str:
        return self.tool_results[-1] if self.tool_results else ""


Script = Callable[[ModelRequest], Reply]


def default_call(dialect: str, step: int) -> ToolCall:
    """The probe call of the seed's example, in each dialect's own tool: `echo cbprobe4`."""
    if dialect == "chat":  # dsh's bash tool; the model rewrites `description` each time
        return ToolCall("bash", {"command": "echo cbprobe4", "description": f"Run probe step {step}"})
    if dialect == "anthropic":
        return ToolCall("Bash", {"command": "echo cbprobe4", "description": f"Run probe step {step}"})
    if dialect == "responses":
        return ToolCall("exec_command", {"cmd": "echo cbprobe4"})
    if dialect == "gemini":
        return ToolCall("run_shell_command", {"command": "echo cbprobe4", "description": f"Run probe step {step}"})
    raise ValueError(f"no default tool call for dialect {dialect!r}")


def loop_script(
    n: int = 10,
    call: Callable[[str, int], ToolCall] = default_call,
    final: str = "Done: ran the probe {n} times.",
) -> Script:
    """The same tool call (step 1..n, by the conversation's own history), then a final text."""

    def script(req: ModelRequest) -> Reply:
        if req.prior_calls < n:
            return call(req.dialect, req.prior_calls + 1)
        return Text(final.format(n=n))

    return script


def sequence_script(replies: Sequence[Reply], then: str = "Done.") -> Script:
    """Reply i to the conversation's step i (its prior tool calls); then a final text."""

    def script(req: ModelRequest) -> Reply:
        step = req.prior_calls
        # A parallel batch counts as several prior calls: find the reply whose calls are all used up.
        used = 0
        for reply in replies:
            if used == step:
                return reply
            used += len(reply) if isinstance(reply, list) else 1 if isinstance(reply, ToolCall) else 0
            if used > step:
                break
        return Text(then)

    return script


# --- helpers to flatten each dialect's content to text -------------------------------------------


def _text_of(value: Any) -> str:
    """Every string inside a JSON value, joined (for tool results whose shape varies)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(t for t in (_text_of(v) for v in value) if t)
    if isinstance(value, dict):
        if "text" in value and isinstance(value["text"], str):
            return value["text"]
        return "\n".join(t for t in (_text_of(v) for v in value.values()) if t)
    return ""


def _parse_chat(body: dict) -> tuple[list[str], int, list[str], str, list[str]]:
    tools = [t.get("function", {}).get("name", "") for t in body.get("tools") or []]
    calls, results, system, users = 0, [], "", []
    for m in body.get("messages") or []:
        role = m.get("role")
        if role == "assistant":
            calls += len(m.get("tool_calls") or [])
        elif role == "tool":
            results.append(_text_of(m.get("content")))
        elif role in ("system", "developer"):
            system += _text_of(m.get("content")) + "\n"
        elif role == "user":
            users.append(_text_of(m.get("content")))
    return tools, calls, results, system, users


def _parse_anthropic(body: dict) -> tuple[list[str], int, list[str], str, list[str]]:
    tools = [t.get("name", "") for t in body.get("tools") or []]
    calls, results, users = 0, [], []
    for m in body.get("messages") or []:
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if m.get("role") == "assistant":
            calls += sum(1 for b in blocks if b.get("type") == "tool_use")
        else:
            texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
            for b in blocks:
                if b.get("type") == "tool_result":
                    results.append(_text_of(b.get("content")))
            if texts and not any(b.get("type") == "tool_result" for b in blocks):
                users.append("\n".join(texts))
    return tools, calls, results, _text_of(body.get("system")), users


def _parse_responses(body: dict) -> tuple[list[str], int, list[str], str, list[str]]:
    tools = [t.get("name") or t.get("type", "") for t in body.get("tools") or []]
    calls, results, users = 0, [], []
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type", "message")
        if kind in ("function_call", "custom_tool_call", "local_shell_call"):
            calls += 1
        elif kind in ("function_call_output", "custom_tool_call_output"):
            results.append(_text_of(item.get("output")))
        elif kind == "message" and item.get("role") == "user":
            users.append(_text_of(item.get("content")))
    return tools, calls, results, _text_of(body.get("instructions")), users


def _parse_gemini(body: dict) -> tuple[list[str], int, list[str], str, list[str]]:
    tools = [d.get("name", "") for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []]
    calls, results, users = 0, [], []
    for c in body.get("contents") or []:
        parts = c.get("parts") or []
        if c.get("role") == "model":
            calls += sum(1 for p in parts if "functionCall" in p)
        else:
            for p in parts:
                if "functionResponse" in p:
                    results.append(_text_of(p["functionResponse"].get("response")))
            texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
            if texts:
                users.append("\n".join(texts))
    system = _text_of((body.get("systemInstruction") or body.get("system_instruction") or {}).get("parts"))
    return tools, calls, results, system, users


_PARSERS = {"chat": _parse_chat, "anthropic": _parse_anthropic, "responses": _parse_responses}


def dialect_of(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if ":streamGenerateContent" in path:
        return "gemini"
    if ":generateContent" in path:
        return "gemini-json"
    if ":countTokens" in path:
        return "gemini-count"
    if path.endswith("/messages/count_tokens"):
        return "anthropic-count"
    return "other"


# --- the server ----------------------------------------------------------------------------------


class FakeModel:
    """Start with `with FakeModel(script) as fm:`; `fm.url` is the base URL, `fm.requests` the log."""

    def __init__(self, script: Script | Sequence[Reply] | None = None, *, side_text: str = "Probe title") -> None:
        if script is None:
            script = loop_script()
        elif not callable(script):
            script = sequence_script(list(script))
        self.script: Script = script
        self.side_text = side_text
        self.requests: list[ModelRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> FakeModel:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fakemodel", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the fake model is not running"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # queries for tests
    def agentic(self) -> list[ModelRequest]:
        """The requests that offered tools (the agents' turns), in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.has_tools]

    def containing(self, text: str) -> list[ModelRequest]:
        """The requests whose body contains `text` (JSON-escaped or not)."""
        escaped = json.dumps(text)[1:-1]
        with self._lock:
            return [r for r in self.requests if text in r.raw or escaped in r.raw]

    def tool_results(self) -> list[str]:
        """Every distinct tool-result text any request carried, in first-seen order."""
        seen: dict[str, None] = {}
        for r in self.agentic():
            for t in r.tool_results:
                seen.setdefault(t, None)
        return list(seen)

    def dump(self, path: str) -> None:
        """Write the request log as JSONL (for debugging a failed run)."""
        with open(path, "w") as f, self._lock:
            for r in self.requests:
                f.write(
                    json.dumps(
                        {
                            "index": r.index,
                            "dialect": r.dialect,
                            "path": r.path,
                            "tools": r.tools,
                            "prior_calls": r.prior_calls,
                            "reply": repr(r.reply),
                            "body": r.body,
                        }
                    )
                    + "\n"
                )

    # scripting
    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}{uuid.uuid4().hex[:12]}"

    def record(self, handler: BaseHTTPRequestHandler, raw: bytes) -> ModelRequest:
        parts = urlsplit(handler.path)
        text = _decode(raw, handler.headers.get("Content-Encoding", ""))
        try:
            body = json.loads(text) if text else None
        except ValueError:
            body = None
        dialect = dialect_of(parts.path)
        tools: list[str] = []
        calls, results, system, users = 0, [], "", []
        if isinstance(body, dict):
            if dialect in _PARSERS:
                tools, calls, results, system, users = _PARSERS[dialect](body)
            elif dialect in ("gemini", "gemini-json"):
                tools, calls, results, system, users = _parse_gemini(body)
        with self._lock:
            req = ModelRequest(
                index=len(self.requests),
                dialect=dialect,
                method=handler.command,
                path=parts.path,
                query=parse_qs(parts.query),
                headers={k.lower(): v for k, v in handler.headers.items()},
                raw=text,
                body=body,
                tools=tools,
                prior_calls=calls,
                tool_results=results,
                system=system,
                last_user=users[-1] if users else "",
                user_texts=users,
            )
            self.requests.append(req)
        return req

    def decide(self, req: ModelRequest) -> Reply:
        if not req.has_tools:  # titles, summaries: not the agent's turn
            return Text(self.side_text)
        return self.script(req)


def _decode(raw: bytes, encoding: str) -> str:
    encoding = encoding.lower().strip()
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    elif encoding == "deflate":
        raw = zlib.decompress(raw)
    elif encoding == "zstd":
        import zstandard

        raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    elif encoding == "br":
        raise ValueError("brotli request bodies are not supported by the fake model")
    return raw.decode("utf-8", errors="replace")


def _calls(reply: Reply) -> list[ToolCall]:
    if isinstance(reply, ToolCall):
        return [reply]
    if isinstance(reply, list):
        return reply
    return []


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A harness that exits (or is killed) while a request is pending resets the connection: normal.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the request log is the record
        pass

    def _read(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def do_GET(self) -> None:
        req = self.fake.record(self, b"")
        if req.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "fake"}]})
        else:
            self._json(404, {"error": {"message": f"fake model: no GET {req.path}", "type": "not_found"}})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        req = self.fake.record(self, self._read())
        body = req.body if isinstance(req.body, dict) else {}
        if req.dialect == "anthropic-count":
            req.reply = Text("")
            return self._json(200, {"input_tokens": 100})
        if req.dialect == "gemini-count":
            req.reply = Text("")
            return self._json(200, {"totalTokens": 100})
        if req.dialect == "gemini-json":
            text = _gemini_json_answer(body, self.fake.side_text)
            req.reply = Text(text)
            return self._json(200, _gemini_chunk([{"text": text}], "STOP"))
        if req.dialect == "other":
            req.reply = None
            return self._json(404, {"error": {"message": f"fake model: no POST {req.path}", "type": "not_found"}})
        try:
            reply = self.fake.decide(req)
        except Exception as e:  # a broken script must show in the harness output, not hang it
            reply = Text(f"fake model script error: {e!r}")
        req.reply = reply
        stream = bool(body.get("stream")) or req.dialect in ("gemini", "responses")
        writer = getattr(self, f"_reply_{req.dialect}")
        writer(reply, stream, body)

    # each dialect's answer ------------------------------------------------------------------------

    def _sse(self, events: Iterable[tuple[str | None, Any]]) -> None:
        chunks = []
        for name, data in events:
            payload = data if isinstance(data, str) else json.dumps(data)
            chunks.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
        self._send(200, "".join(chunks).encode(), "text/event-stream")

    def _reply_chat(self, reply: Reply, stream: bool, body: dict) -> None:
        fake, model = self.fake, body.get("model", "fake-model")
        cid, created = fake.new_id("chatcmpl-"), int(time.time())
        calls = _calls(reply)
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        tool_calls = [
            {
                "index": i,
                "id": fake.new_id("call_"),
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args)},
            }
            for i, c in enumerate(calls)
        ]
        finish = "tool_calls" if calls else "stop"
        text = reply.text if isinstance(reply, Text) else None
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if tool_calls:
                message["tool_calls"] = [{k: v for k, v in t.items() if k != "index"} for t in tool_calls]
            return self._json(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                },
            )

        def chunk(delta: dict, finish_reason: str | None = None, **extra: Any) -> tuple[None, dict]:
            return None, {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                **extra,
            }

        events = [chunk({"role": "assistant", "content": ""})]
        if text is not None:
            events.append(chunk({"content": text}))
        for t in tool_calls:
            head = {
                "index": t["index"],
                "id": t["id"],
                "type": "function",
                "function": {"name": t["function"]["name"], "arguments": ""},
            }
            events.append(chunk({"tool_calls": [head]}))
            events.append(
                chunk({"tool_calls": [{"index": t["index"], "function": {"arguments": t["function"]["arguments"]}}]})
            )
        events.append(chunk({}, finish))
        events.append(
            (
                None,
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                },
            )
        )
        events.append((None, "[DONE]"))
        self._sse(events)

    def _reply_anthropic(self, reply: Reply, stream: bool, body: dict) -> None:
        fake, model = self.fake, body.get("model", "claude-fake")
        mid = fake.new_id("msg_")
        calls = _calls(reply)
        blocks: list[dict] = []
        if isinstance(reply, Text):
            blocks.append({"type": "text", "text": reply.text})
        for c in calls:
            blocks.append({"type": "tool_use", "id": fake.new_id("toolu_"), "name": c.name, "input": c.args})
        stop = "tool_use" if calls else "end_turn"
        usage = {
            "input_tokens": 100,
            "output_tokens": 10,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        if not stream:
            return self._json(
                200,
                {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
        events: list[tuple[str | None, Any]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": mid,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {**usage, "output_tokens": 1},
                    },
                },
            ),
        ]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                events.append(
                    (
                        "content_block_start",
                        {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                    )
                )
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}},
                    )
                )
            else:
                start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                events.append(
                    ("content_block_start", {"type": "content_block_start", "index": i, "content_block": start})
                )
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": i,
                            "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])},
                        },
                    )
                )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 10},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        self._sse(events)

    def _reply_responses(self, reply: Reply, stream: bool, body: dict) -> None:
        fake, model = self.fake, body.get("model", "fake-model")
        rid = fake.new_id("resp_")
        items: list[dict] = []
        if isinstance(reply, Text):
            items.append(
                {
                    "type": "message",
                    "id": fake.new_id("msg_"),
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for c in _calls(reply):
            items.append(
                {
                    "type": "function_call",
                    "id": fake.new_id("fc_"),
                    "call_id": fake.new_id("call_"),
                    "name": c.name,
                    "arguments": json.dumps(c.args),
                    "status": "completed",
                }
            )
        usage = {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110,
        }
        base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model}
        done = {**base, "status": "completed", "output": items, "usage": usage}
        if not stream:
            return self._json(200, done)
        seq = itertools.count()
        events: list[tuple[str | None, Any]] = [
            (
                "response.created",
                {
                    "type": "response.created",
                    "sequence_number": next(seq),
                    "response": {**base, "status": "in_progress", "output": []},
                },
            ),
        ]
        for i, item in enumerate(items):
            added = dict(item, status="in_progress")
            if item["type"] == "function_call":
                added["arguments"] = ""
            else:
                added["content"] = []
            events.append(
                (
                    "response.output_item.added",
                    {
                        "type": "response.output_item.added",
                        "sequence_number": next(seq),
                        "output_index": i,
                        "item": added,
                    },
                )
            )
            if item["type"] == "message":
                events.append(
                    (
                        "response.output_text.delta",
                        {
                            "type": "response.output_text.delta",
                            "sequence_number": next(seq),
                            "item_id": item["id"],
                            "output_index": i,
                            "content_index": 0,
                            "delta": item["content"][0]["text"],
                        },
                    )
                )
            events.append(
                (
                    "response.output_item.done",
                    {
                        "type": "response.output_item.done",
                        "sequence_number": next(seq),
                        "output_index": i,
                        "item": item,
                    },
                )
            )
        events.append(
            ("response.completed", {"type": "response.completed", "sequence_number": next(seq), "response": done})
        )
        self._sse(events)

    def _reply_gemini(self, reply: Reply, stream: bool, body: dict) -> None:
        if isinstance(reply, Text):
            parts: list[dict] = [{"text": reply.text}]
        else:
            parts = [
                {"functionCall": {"id": self.fake.new_id("gc_"), "name": c.name, "args": c.args}} for c in _calls(reply)
            ]
        self._sse([(None, _gemini_chunk(parts, "STOP"))])


def _gemini_chunk(parts: list[dict], finish: str) -> dict:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
        "modelVersion": "gemini-fake",
    }


def _gemini_json_answer(body: dict, side_text: str) -> str:
    """Answers to Gemini CLI's JSON side questions: the model router, the next-speaker check..."""
    config = body.get("generationConfig") or {}
    schema = json.dumps(config.get("responseJsonSchema") or config.get("responseSchema") or {})
    if "complexity_score" in schema:
        return json.dumps({"complexity_reasoning": "A simple scripted probe.", "complexity_score": 10})
    if "next_speaker" in schema:
        return json.dumps({"reasoning": "The model finished its turn.", "next_speaker": "user"})
    if re.search(r'"(reasoning|confidence|unproductive_state_confidence)"', schema):
        return json.dumps(
            {
                "unproductive_state_analysis": "No loop.",
                "unproductive_state_confidence": 0.0,
                "reasoning": "fine",
                "confidence": 0.0,
            }
        )
    if schema not in ("{}", "null"):
        return "{}"
    return side_text


def main() -> None:
    """`python -m tests.e2e.fakemodel [N]`: serve the loop script (N calls) and log each request."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with FakeModel(loop_script(n)) as fm:
        print(f"fake model on {fm.url}", flush=True)
        seen = 0
        try:
            while True:
                time.sleep(0.2)
                for r in fm.requests[seen:]:
                    print(
                        f"#{r.index} {r.dialect} {r.path} tools={len(r.tools)} prior={r.prior_calls} -> {r.reply!r}",
                        flush=True,
                    )
                seen = len(fm.requests)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
