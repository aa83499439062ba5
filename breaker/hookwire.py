"""The hook dialects: what each harness's hook payload means and the answer in its words — for `cbhook`.

Pure, standard library only: the payload's bytes in; the requests to ask the guard (through an `ask`
given by the caller) and the text cbhook prints out. Both ends run it:

- the guard, for the `hook` op (PROTOCOL.md): cbhook forwards the harness's payload as it came and prints
  what the guard answers, so the one process started per tool call imports no JSON parser
  (breaker/hook.py); `serve` runs here with `ask` answered by the guard's own session;
- cbhook itself, when the guard cannot take the payload that way (a payload too big or too deep for the
  op, a guard that cannot be asked, an older guard): `ask` is then a socket round trip per request,
  as cbhook always did.

Either way the same code reads the payload and words the answer, so the two paths cannot drift apart.
"""

from __future__ import annotations

import json
import os

from breaker.wire import MAX_FRAME, GuardUnavailable

TYPE_CHECKING = False  # not typing's: cbhook imports this module when it reads a payload itself (~2 ms)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = [
    "END_EVENTS",
    "HEAD",
    "RESULT_EVENTS",
    "TOOL_EVENTS",
    "WARN_AFTER",
    "WARN_BEFORE",
    "HookRequest",
    "HookRun",
    "answer",
    "context",
    "detect",
    "dumps",
    "head_event",
    "loads",
    "parse_event",
    "result_digest",
    "serve",
    "subagent_id",
]

# The events each harness gets a decision for, those that report a call's result, and those that end
# an agent. Every other event (Stop, SessionStart, AfterAgent...) is answered with nothing and never
# reaches the guard.
TOOL_EVENTS = {
    "claude-code": {"PreToolUse"},
    "codex": {"PreToolUse"},
    "dsh": {"PreToolUse"},
    "gemini-cli": {"BeforeTool"},
    "cursor": {"beforeShellExecution", "beforeMCPExecution", "preToolUse"},
}
RESULT_EVENTS = {
    "claude-code": {"PostToolUse", "PostToolUseFailure"},  # a failed call's result is its `error` text
    "codex": {"PostToolUse"},  # it fires for failed commands too
    "dsh": {"PostToolUse", "PostToolUseFailure"},
    "gemini-cli": {"AfterTool"},  # no call id: the guard finds the call by its tool and args
    "cursor": set(),  # not reported: Cursor is not on npm, so its after-events were never seen for real
}
# Where an allow's warning reaches the model (each seen in a real run, tests/e2e/test_warnings_e2e.py):
# Claude Code and Codex take `additionalContext` from PreToolUse on an allow (Claude shows the model
# "PreToolUse:Bash hook additional context: <text>", Codex a developer message), so the warning goes
# with the check. Gemini CLI ignores it from BeforeTool but appends AfterTool's to the tool's result
# (`<hook_context>…</hook_context>`), so its warning goes with the result, as the `result` reply gives it.
# dsh's bridge and Cursor: none known (the dsh plugin shows warnings; see breaker/dsh_plugin).
WARN_BEFORE = {"claude-code", "codex"}
WARN_AFTER = {"gemini-cli"}
END_EVENTS = {
    "claude-code": {"SubagentStop", "SessionEnd"},
    "codex": set(),  # Codex has no session-end hook: its agents leave the guard by LRU (maxAgents)
    "dsh": {"SubagentStop"},  # the bridge runs no SessionEnd hooks
    "gemini-cli": {"SessionEnd"},
    "cursor": {"sessionEnd"},
}
_CURSOR_EVENTS = {
    "beforeShellExecution",
    "afterShellExecution",
    "beforeMCPExecution",
    "afterMCPExecution",
    "beforeReadFile",
    "afterFileEdit",
    "beforeSubmitPrompt",
    "afterAgentResponse",
    "afterAgentThought",
    "preToolUse",
    "postToolUse",
    "postToolUseFailure",
    "sessionStart",
    "sessionEnd",
    "subagentStart",
    "subagentStop",
    "preCompact",
    "stop",
}
_GEMINI_EVENTS = {
    "BeforeTool",
    "AfterTool",
    "BeforeAgent",
    "AfterAgent",
    "BeforeModel",
    "AfterModel",
    "BeforeToolSelection",
    "PreCompress",
}


# -- numbers exactly as the harness wrote them ------------------------------------------------------

# A literal of 20 digits or more may be past 64 bits. The standard library reads integers exactly, but
# refuses one over 4,300 digits (the whole payload would then be "not JSON", the call let through
# uncounted) and takes quadratic time below that (64 MiB of 4,300-digit integers: 5 s to read and
# write back, past a harness's hook timeout). Such literals are kept as the text they are and written
# back as is; finding one costs one pass of C over the payload (0.4 us for 500 bytes, 80 ms for 60 MB).
_DIGITS_ONLY = b" " * 48 + b"0" * 10 + b" " * 198  # bytes.translate: each digit to "0", the rest to " "
_LONG = 20  # digits


class _Number:
    """A number literal of the harness's payload, kept as it was written (an integer of _LONG digits or more)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _literal(text: str) -> Any:
    return int(text) if len(text) < _LONG else _Number(text)


def loads(data: bytes | str) -> Any:
    """JSON as the standard library reads it, but with each integer of _LONG digits or more kept exactly
    as written (a `_Number`, which `dumps` writes back as is), whatever its size."""
    if isinstance(data, str):
        import re  # already imported by json itself: free

        long = re.search(f"[0-9]{{{_LONG}}}", data) is not None
    else:
        long = b"0" * _LONG in data.translate(_DIGITS_ONLY)
    return json.loads(data, parse_int=_literal) if long else json.loads(data)


def dumps(value: Any, **options: Any) -> str:
    """json.dumps, writing each `_Number` as the literal it was. Raises TypeError or ValueError as json.dumps does."""
    numbers: list[str] = []
    mark = ""

    def number(found: Any) -> str:
        nonlocal mark
        if not isinstance(found, _Number):
            raise TypeError(f"Object of type {type(found).__name__} is not JSON serializable")
        if not mark:  # a string no payload holds: a nonce, made only when a number needs it
            mark = "\x00cbhook-number-" + os.urandom(12).hex()
        numbers.append(found.text)
        return mark

    text = json.dumps(value, default=number, **options)
    if numbers:
        parts = text.split(json.dumps(mark))
        if len(parts) != len(numbers) + 1:
            raise ValueError("a number literal could not be written back")
        text = "".join(part + digits for part, digits in zip(parts, numbers, strict=False)) + parts[-1]
    return text


# -- which harness sent this ----------------------------------------------------------------------


def detect(event: dict[str, Any]) -> str | None:
    """The harness that sent a hook payload (a key of TOOL_EVENTS), from its event name and field
    shapes; None if unknown.

    dsh's Claude-Code bridge sends Claude-shaped JSON; it differs from Claude Code by what it omits
    (`permission_mode`, `prompt_id`) and by its ids (`session-<uuid>` roots, a subagent's own id as
    `session_id`). Mistaking one for the other is harmless for a tool call: both take the same deny.
    """
    name = event.get("hook_event_name")
    if not isinstance(name, str):
        return None
    if name in _CURSOR_EVENTS or ("conversation_id" in event and "session_id" not in event):
        return "cursor"
    if name in _GEMINI_EVENTS:
        return "gemini-cli"
    session = event.get("session_id")
    if name == "SessionEnd":
        return "gemini-cli" if "timestamp" in event else "claude-code"
    if name in ("SubagentStop", "SubagentStart"):
        agent = event.get("agent_id")
        if (
            "agent_transcript_path" not in event
            and "permission_mode" not in event
            and (not session or session == agent)
        ):
            return "dsh"
        return "claude-code"
    if "turn_id" in event:  # Codex sends it with every tool event; Claude Code never does
        return "codex"
    if "model" in event and "prompt_id" not in event and "agent_id" not in event:
        return "codex"  # Codex's other mark; a Claude deny with `continue` would fail a Codex hook
    if "permission_mode" in event or "prompt_id" in event or "agent_id" in event:
        return "claude-code"
    transcript = event.get("transcript_path")
    if (
        (isinstance(session, str) and session.startswith("session-"))
        or transcript == ""
        or (isinstance(transcript, str) and transcript.endswith(("/session.jsonl", "/session.jsonl.zstd")))
    ):
        return "dsh"
    if "session_id" in event:
        return "claude-code"  # older Claude Code versions sent neither permission_mode nor prompt_id
    return None


class HookRequest:
    """What one hook event asks of the guard: to check one call (agent, tool, args, parent, call id),
    to take a call's result (the call, and its result's `digest`), or to forget an agent (the agent
    alone)."""

    __slots__ = ("agent", "args", "call_id", "digest", "parent", "tool")

    def __init__(
        self,
        agent: str,
        tool: str = "",
        args: Any = None,
        parent: str | None = None,
        call_id: Any = None,
        digest: str = "",
    ) -> None:
        self.agent = agent
        self.tool = tool
        self.args = args
        self.parent = parent
        self.call_id = call_id
        self.digest = digest


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_event(harness: str, event: dict[str, Any]) -> tuple[str, HookRequest | None]:
    """("check" | "result" | "end" | "ignore", the request) for a payload of `harness` (a key of
    TOOL_EVENTS). A tool event without a usable agent or tool gives ("check", None): the guard
    cannot judge it, and the failure mode decides; a result event without them gives ("result", None)."""
    name = event.get("hook_event_name")
    if name in TOOL_EVENTS[harness]:
        return "check", _tool_call(harness, name, event)
    if name in RESULT_EVENTS[harness]:
        call = _tool_call(harness, name, event)
        if call is not None:
            call.digest = result_digest(_result_of(harness, name, event))
        return "result", call
    if name in END_EVENTS[harness]:
        agent = _end_agent(harness, name, event)
        return ("end", HookRequest(agent)) if agent else ("ignore", None)
    return "ignore", None


def subagent_id(session: str, agent_id: str) -> str:
    """A Claude Code subagent's id in the guard: its session's id, `/`, the hook's `agent_id`.

    breaker.transcripts names the subagent of a recorded session the same way, so one agent has
    one id live and in replay."""
    return f"{session}/{agent_id}"


def _tool_call(harness: str, name: Any, event: dict[str, Any]) -> HookRequest | None:
    if harness == "cursor":
        agent = _text(event.get("conversation_id"))
        if name == "beforeShellExecution":
            command = event.get("command")
            if agent is None or not isinstance(command, str):
                return None
            args: dict[str, Any] = {"command": command}
            if isinstance(event.get("cwd"), str):
                args["cwd"] = event["cwd"]
            return HookRequest(agent, "Shell", args, call_id=_text(event.get("generation_id")))
        tool, tool_input = _text(event.get("tool_name")), event.get("tool_input")
        if isinstance(tool_input, str):  # beforeMCPExecution sends the MCP arguments as a JSON string
            try:
                tool_input = loads(tool_input)
            except ValueError:
                pass
        if agent is None or tool is None:
            return None
        return HookRequest(agent, tool, tool_input, call_id=_text(event.get("generation_id")))
    session, tool = _text(event.get("session_id")), _text(event.get("tool_name"))
    if session is None or tool is None:
        return None
    call_id = event.get("tool_use_id")
    call_id = call_id if isinstance(call_id, (str, int)) and not isinstance(call_id, bool) else None
    sub = _text(event.get("agent_id")) if harness == "claude-code" else None
    if sub is not None:  # a Claude Code subagent: keyed apart from the main agent, its parent named
        return HookRequest(subagent_id(session, sub), tool, event.get("tool_input"), parent=session, call_id=call_id)
    return HookRequest(session, tool, event.get("tool_input"), call_id=call_id)


# -- a call's result ------------------------------------------------------------------------------

# Lines of Gemini CLI's shell output that differ at every run of the same command: they would make
# every repeat look like progress.
_GEMINI_VOLATILE = ("Process Group PGID: ", "Background PIDs: ")


def _result_of(harness: str, name: Any, event: dict[str, Any]) -> Any:
    """What of a result event tells one result from another: the text the model reads where the
    payload has it, without what changes at every run (timings, process ids)."""
    if name == "PostToolUseFailure":
        return event.get("error")  # Claude Code: "Exit code 3\n<output>", as the model reads it
    response = event.get("tool_response")
    if harness == "gemini-cli" and isinstance(response, dict) and "llmContent" in response:
        response = response["llmContent"]  # what the model reads; `returnDisplay` is the user's
        if isinstance(response, str):
            lines = response.split("\n")
            return "\n".join(line for line in lines if not line.startswith(_GEMINI_VOLATILE))
    if isinstance(response, dict):
        # Claude Code's WebSearch and WebFetch results carry `durationSeconds` / `durationMs`: a
        # search repeated 555 times must not pass for progress because its timing changed.
        return {k: v for k, v in response.items() if not _is_timing(k)}
    if harness == "claude-code" and isinstance(response, str) and "<timestamp>" in response:
        lines = response.split("\n")  # BashOutput stamps a `<timestamp>…</timestamp>` line into every answer
        return "\n".join(x for x in lines if not (x.startswith("<timestamp>") and x.endswith("</timestamp>")))
    return response


def _is_timing(key: Any) -> bool:
    low = key.lower() if isinstance(key, str) else ""
    return "duration" in low or "elapsed" in low or low == "timestamp"


def result_digest(result: Any) -> str:
    """16 hex digits of BLAKE2b over a result's text: a string as is, anything else as compact JSON
    with sorted keys. Equal to breaker.keys.result_digest for a string; for other values it may
    differ from orjson's bytes in rare floats, which does not matter: one harness's results are
    only ever compared with each other. `_blake2` alone: `hashlib` costs ~5 ms per call to import."""
    try:
        from _blake2 import blake2b
    except ImportError:  # a Python built without it
        from hashlib import blake2b
    if isinstance(result, str):
        text = result
    else:
        try:
            text = dumps(result, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            text = repr(result)
    return blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def _end_agent(harness: str, name: Any, event: dict[str, Any]) -> str | None:
    if harness == "cursor":
        return _text(event.get("conversation_id"))
    session = _text(event.get("session_id"))
    if name == "SubagentStop":
        sub = _text(event.get("agent_id"))
        if harness == "dsh":  # the bridge names the child by its own dsh agent id
            return sub or session
        return subagent_id(session, sub) if session and sub else None
    return session


# -- the answer, in each harness's words ----------------------------------------------------------


def answer(harness: str, event_name: Any, reason: str, *, stop: bool = False) -> dict[str, Any]:
    """The JSON that denies a call in `harness`'s words; `stop` (an operator interrupt) also stops the
    agent where the harness has such a signal (Claude Code: `continue: false`, which alone would let
    the call run, so the deny goes with it)."""
    if harness == "gemini-cli":
        return {"decision": "deny", "reason": reason}
    if harness == "codex":
        # Codex 0.171.0 shows the model "Command blocked by PreToolUse hook: <reason>. Command: <cmd>": it adds
        # the period itself, so one the reason ends with would read "stuck.. Command:".
        reason = reason.rstrip()
        reason = reason[:-1] if reason.endswith(".") and not reason.endswith("..") else reason
    if harness == "cursor":
        return {"permission": "deny", "user_message": reason, "agent_message": reason}
    out: dict[str, Any] = {
        "hookSpecificOutput": {
            "hookEventName": event_name if isinstance(event_name, str) else "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    if stop and harness == "claude-code":
        # Codex counts unknown output fields as a failed hook (and runs the tool); dsh's bridge
        # records `continue` without halting (the dsh plugin cancels instead).
        out = {"continue": False, "stopReason": reason, **out}
    return out


def context(event_name: str, text: str) -> dict[str, Any]:
    """The JSON that shows the model `text` with an allowed call (Claude Code and Codex from
    PreToolUse, Gemini CLI from AfterTool; see WARN_BEFORE and WARN_AFTER). No `permissionDecision`:
    "allow" there would skip the harness's own permission prompt."""
    return {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": text}}


# -- the frames asked of the guard ---------------------------------------------------------------


def _encode(fields: dict[str, Any]) -> bytes:
    return (dumps(fields, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n").encode()


def _frame(op: str, request: HookRequest, harness: str, *, unjudgeable: bool = False) -> bytes:
    """The request's frame; b"" for a result the guard could not be sent (it is then not reported).
    `unjudgeable`: a check with its args as unjudgeable (the guard could not read them)."""
    fields: dict[str, Any] = {"op": op, "id": 1, "agent": request.agent}  # cbhook must not import the protocol
    if op == "check":
        fields.update(
            tool=request.tool, harness=harness, parent=request.parent, call_id=request.call_id, args=request.args
        )
        if unjudgeable:
            fields.update(args=None, args_unserializable=True)
    elif op == "result":
        fields["digest"] = request.digest
        if request.call_id is not None:
            fields["call_id"] = request.call_id  # the call's id, as its check sent it: no need for the args
        else:
            fields.update(tool=request.tool, args=request.args)
    try:
        frame = _encode(fields)
    except (ValueError, TypeError, UnicodeEncodeError, RecursionError):
        frame = b""  # NaN, a lone surrogate, absurd nesting: JSON the guard cannot read
    if op == "result" and len(frame) > MAX_FRAME:
        frame = b""  # args too big to send: its check was sent as unjudgeable, so nothing would match
    if op == "check" and (not frame or len(frame) > MAX_FRAME):
        # Args the guard cannot be sent are "unjudgeable": allowed and counted, as the engine does.
        fields.update(args=None, args_unserializable=True)
        try:
            frame = _encode(fields)
        except (ValueError, UnicodeEncodeError):  # the ids themselves: keep them, escaped, stable
            for key in ("agent", "tool", "parent"):
                if isinstance(fields.get(key), str):
                    fields[key] = fields[key].encode("utf-8", "backslashreplace").decode("utf-8")
            frame = _encode(fields)
    return frame


# -- one run: the payload in, the answer out -------------------------------------------------------


class HookRun:
    """One hook event, read and answered: `run(data)` gives (stdout text, exit status).

    `ask(frame)` sends one request frame (`_frame`) and gives the guard's reply; it raises
    GuardUnavailable when the guard cannot be asked. `log(message)` takes each line for stderr."""

    def __init__(
        self,
        ask: Callable[[bytes], dict[str, Any]],
        log: Callable[[str], None],
        *,
        fail_closed: bool = False,
        harness: str | None = None,
    ) -> None:
        self.ask = ask
        self.log = log
        self.fail_closed = fail_closed
        self.harness = harness  # a key of TOOL_EVENTS (--harness), or None: detect it per payload

    def run(self, data: bytes, *, oversized: str = "") -> tuple[str, int]:
        """`data` is stdin; `oversized` says why only its head is there (the rest was drained unread)."""
        harness = self.harness
        unjudgeable = False
        why = oversized
        if not why:
            try:
                event = loads(data)
            except RecursionError:
                why = "nested too deep to read"
            except ValueError:
                what = "empty" if not data.strip() else "not JSON"
                return self._cannot_judge(harness, None, f"the hook payload on stdin is {what}")
        if why:
            head = head_event(data)
            if head is None:
                return self._cannot_judge(harness, None, f"the hook payload is {why}")
            self.log(f"the hook payload is {why}: its call is sent with its args unjudgeable (counted)")
            event, unjudgeable = head, True
        if not isinstance(event, dict):
            return self._cannot_judge(harness, None, "the hook payload on stdin is not a JSON object")
        harness = harness or detect(event)
        if harness is None:
            return self._cannot_judge(None, None, "cannot tell which harness sent this payload (use --harness)")
        name = event.get("hook_event_name")
        action, request = parse_event(harness, event)
        if action == "ignore":
            return "", 0
        if request is None:
            what = f"the {harness} {name} payload has no usable agent id or tool name"
            if action == "result":  # the call already ran: nothing to allow or deny
                self.log(f"{what}; its result is not reported")
                return "", 0
            return self._cannot_judge(harness, name, what)
        if action == "result" and unjudgeable:
            self.log("a result the hook could not read is not reported")
            return "", 0
        if action == "result":
            return self._result(harness, str(name), request)
        if action == "end":
            try:
                self.ask(_frame("agent_end", request, harness))
            except GuardUnavailable as exc:
                self.log(f"{exc}; agent {request.agent!r} not forgotten")
            return "", 0
        try:
            reply = self.ask(_frame("check", request, harness, unjudgeable=unjudgeable))
            if "error" in reply and not unjudgeable:
                # The guard could not take the frame (args it cannot read): ask again with the args as
                # unjudgeable, so the call is counted (the cap applies) rather than let through uncounted.
                reply = self.ask(_frame("check", request, harness, unjudgeable=True))
        except GuardUnavailable as exc:
            return self._unavailable(harness, name, str(exc))
        decision = reply.get("decision")
        if decision == "allow":
            warning = reply.get("warning")
            if isinstance(warning, str) and warning and harness in WARN_BEFORE and isinstance(name, str):
                return _dump(context(name, warning)), 0
            return "", 0
        if decision == "deny":
            reason = reply.get("reason")
            reason = reason if isinstance(reason, str) and reason else "Circuit breaker: this call was denied."
            return _dump(answer(harness, name, reason, stop=reply.get("kind") == "interrupted")), 0
        return self._unavailable(harness, name, f"the guard answered {_wrong(reply)}")

    def _result(self, harness: str, name: str, request: HookRequest) -> tuple[str, int]:
        """Report a call's result; print the warning its check gave where the harness shows it only
        with the result. Never a deny: the call already ran."""
        frame = _frame("result", request, harness)
        if not frame:
            self.log(f"the result of a {request.tool} call of agent {request.agent!r} cannot be sent; not reported")
            return "", 0
        try:
            reply = self.ask(frame)
        except GuardUnavailable as exc:
            self.log(f"{exc}; the result of a {request.tool} call of agent {request.agent!r} is not reported")
            return "", 0
        if reply.get("ok") is not True:
            self.log(f"the guard answered {_wrong(reply)}; the result is not reported")
            return "", 0
        warning = reply.get("warning")
        if isinstance(warning, str) and warning and harness in WARN_AFTER:
            return _dump(context(name, warning)), 0
        return "", 0

    def _unavailable(self, harness: str, name: Any, why: str) -> tuple[str, int]:
        """The fallback for a call the guard could not be asked about (or answered with an error)."""
        if self.fail_closed:
            self.log(f"{why}; denying (--fail-closed)")
            reason = f"Circuit breaker unavailable ({why}); tool calls are denied until it is back."
            return _dump(answer(harness, name, reason)), 0
        self.log(f"{why}; allowing the call (fail open)")
        return "", 0

    def _cannot_judge(self, harness: str | None, name: Any, why: str) -> tuple[str, int]:
        if not self.fail_closed:
            self.log(f"{why}; allowing the call (fail open)")
            return "", 0
        reason = f"Circuit breaker could not judge this call ({why}); denied (--fail-closed)."
        self.log(reason)
        if harness is None:
            return "", 2  # every harness here treats exit 2 as "block", with stderr as the reason
        event = name if isinstance(name, str) else next(iter(TOOL_EVENTS[harness]))
        return _dump(answer(harness, event, reason)), 0


def _wrong(reply: dict[str, Any]) -> str:
    """What is wrong with a reply that is not the one asked for: its error, or the reply itself."""
    error = reply.get("error")
    if isinstance(error, dict):
        return f"{error.get('code')}: {error.get('message')}"
    return f"an unexpected reply {reply!r:.200}"


def _dump(value: dict[str, Any]) -> str:
    return json.dumps(value) + "\n"


# A payload the hook cannot read whole — past cbhook's MAX_STDIN, or nested deeper than Python's json goes — is
# still a tool call to count. Every harness writes the ids (session, event, tool) before the tool's
# input; the members before the first nested value are read alone, and the call is sent as
# unjudgeable: counted, the cap applies.
HEAD = 1 << 20  # bytes of such a payload looked at
_TOKEN = None  # the scanner's pattern, compiled on the rare path that needs it


def head_event(data: bytes) -> dict[str, Any] | None:
    """The payload's top-level members that come before its first nested value, or None."""
    import re  # json imports it already: free

    global _TOKEN
    if _TOKEN is None:
        _TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[{]')
    head = data[:HEAD].lstrip()
    if not head.startswith(b"{"):
        return None
    for found in _TOKEN.finditer(head, 1):
        if found.group() in (b"[", b"{"):  # the first nested value: a member `"key":` stands before it
            try:
                event = json.loads(head[: found.start()] + b"null}")
            except ValueError:
                return None
            return event if isinstance(event, dict) else None
    return None


# -- the guard's side of the `hook` op ---------------------------------------------------------------


def serve(payload: str, harness: str | None, fail_closed: bool, ask: Callable[[bytes], bytes]) -> tuple[int, str, str]:
    """The `hook` op: read `payload` (the harness's hook JSON, as cbhook forwarded it) as cbhook would,
    asking the guard through `ask` (a request frame in, the reply frame out, in-process), and give
    (exit status, stdout text, stderr text) for cbhook to print."""
    lines: list[str] = []

    def ask_guard(frame: bytes) -> dict[str, Any]:
        reply = json.loads(ask(frame))
        return reply if isinstance(reply, dict) else {}

    run = HookRun(
        ask_guard, lambda message: lines.append(f"cbhook: {message}\n"), fail_closed=fail_closed, harness=harness
    )
    data = payload.encode("utf-8", "surrogatepass")
    out, status = run.run(data)
    return status, out, "".join(lines)
