"""`cbhook`: harness detection for every harness, each harness's deny, the lifecycle events, and what it
does with an unavailable guard and with garbage, empty and huge stdin. The pure parts are checked in
process; everything that talks to a guard runs the real `cbhook` command against a real guard process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from breaker import hook
from breaker.hook import answer, detect, parse_event
from breaker.paths import default_operator_socket_path
from breaker.wire import MAX_FRAME
from tests.conftest import request
from tests.guardproxy import GuardProxy, is_check
from tests.test_paths import (
    HOSTILE,
    NEEDS_ROOT,
    NOBODY,
    SQUATS,
    expected_refusal,
    foreign_listener,
    owner_text,
    received_by,
    squatted,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "tests" / "e2e" / "samples"
CBHOOK = Path(sys.executable).with_name("cbhook")


# The recorded samples' files are named by tests/e2e's short labels; cbhook uses the harness names.
SAMPLE_FILES = {"claude-code": "claude", "codex": "codex", "gemini-cli": "gemini"}


def samples(harness: str) -> list[dict[str, Any]]:
    """Hook payloads recorded from the real harness (the stand-in's own `_` keys removed)."""
    lines = (SAMPLES / f"{SAMPLE_FILES[harness]}-hook-stdin.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("_")} for line in lines]


def claude_pre(session: str = "s-1", command: str = "echo cbprobe4", **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": f"/home/u/.claude/projects/-w/{session}.jsonl",
        "cwd": "/w",
        "prompt_id": "p-1",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "step"},
        "tool_use_id": "toolu_1",
        **extra,
    }


def codex_pre(session: str = "c-1") -> dict[str, Any]:
    return {
        "session_id": session,
        "turn_id": "t-1",
        "transcript_path": f"/c/sessions/rollout-{session}.jsonl",
        "cwd": "/w",
        "hook_event_name": "PreToolUse",
        "model": "m",
        "permission_mode": "bypassPermissions",
        "tool_name": "Bash",
        "tool_input": {"command": "echo cbprobe4"},
        "tool_use_id": "call_1",
    }


def gemini_before(session: str = "g-1") -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "/g/chats/session-x.jsonl",
        "cwd": "/w",
        "hook_event_name": "BeforeTool",
        "timestamp": "2026-11-30T01:05:00.885Z",
        "tool_name": "run_shell_command",
        "tool_input": {"command": "echo cbprobe4", "description": "d"},
    }


def dsh_bridge_pre(agent: str = "session-0b1c2d3e-0000-4000-8000-000000000001") -> dict[str, Any]:
    """What @deepseek-ai/dsh-hooks-claude-code 0.0.1-rc.5 sends (its preToolPayload): no prompt_id,
    permission_mode or effort; `session_id` is the calling dsh agent's id."""
    return {
        "session_id": agent,
        "transcript_path": f"/h/sessions/--w--/{agent}/session.jsonl.zstd",
        "cwd": "/w",
        "hook_event_name": "PreToolUse",
        "tool_name": "bash",
        "tool_input": {"command": "echo cbprobe4"},
        "tool_use_id": "call_9",
    }


def cursor_shell(conversation: str = "conv-1", command: str = "echo cbprobe4") -> dict[str, Any]:
    return {
        "hook_event_name": "beforeShellExecution",
        "conversation_id": conversation,
        "generation_id": "gen-1",
        "workspace_roots": ["/w"],
        "command": command,
        "cwd": "/w",
    }


DENYING_LAYER = "- id: circuit-breaker\n  config:\n    duplicateLimit: 1\n"


def cbhook(
    payload: Any, *args: str, socket_path: Path | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[bytes]:
    """Run the real `cbhook` command with `payload` (an object as JSON, or raw bytes) on stdin."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    argv = [str(CBHOOK), *args]
    if socket_path is not None:
        argv += ["--socket", str(socket_path)]
    return subprocess.run(argv, input=data, capture_output=True, timeout=timeout)


def stdout_json(result: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert result.returncode == 0, result
    return json.loads(result.stdout)


def agent_views(socket_path: Path) -> dict[str, dict[str, Any]]:
    """Every agent the guard on `socket_path` knows, asked on its operator socket."""
    state = request(default_operator_socket_path(socket_path), {"op": "snapshot", "id": 1})["state"]
    return {a["agent"]: a for a in state["agents"]}


# --- detection (pure) ----------------------------------------------------------------------------


@pytest.mark.parametrize("harness", list(SAMPLE_FILES))
def test_every_recorded_tool_payload_is_detected_as_its_harness(harness):
    tool_events = [e for e in samples(harness) if e["hook_event_name"] in ("PreToolUse", "BeforeTool")]
    assert tool_events
    assert {detect(e) for e in tool_events} == {harness}


def test_recorded_lifecycle_payloads_end_the_right_agents():
    claude = samples("claude-code")
    (stop,) = [e for e in claude if e["hook_event_name"] == "SubagentStop"]
    (end,) = [e for e in claude if e["hook_event_name"] == "SessionEnd"]
    assert detect(stop) == "claude-code" and parse_event("claude-code", stop)[0] == "end"
    assert parse_event("claude-code", stop)[1].agent == f"{stop['session_id']}/{stop['agent_id']}"
    assert parse_event("claude-code", end)[1].agent == end["session_id"]
    (gemini_end,) = [e for e in samples("gemini-cli") if e["hook_event_name"] == "SessionEnd"]
    assert detect(gemini_end) == "gemini-cli"
    assert parse_event("gemini-cli", gemini_end)[1].agent == gemini_end["session_id"]


@pytest.mark.parametrize("harness", list(SAMPLE_FILES))
def test_recorded_events_that_are_not_tool_calls_or_ends_are_ignored(harness):
    for event in samples(harness):
        if event["hook_event_name"] in ("Stop", "SubagentStart", "SessionStart", "AfterAgent"):
            assert parse_event(detect(event) or harness, event) == ("ignore", None), event


def test_claude_subagent_calls_are_keyed_by_session_and_agent_id_with_the_session_as_parent():
    (sub,) = [e for e in samples("claude-code") if e["hook_event_name"] == "PreToolUse" and "agent_id" in e][:1]
    action, call = parse_event("claude-code", sub)
    assert action == "check" and call is not None
    assert call.agent == f"{sub['session_id']}/{sub['agent_id']}" and call.parent == sub["session_id"]
    main_call = parse_event("claude-code", claude_pre("s-9"))[1]
    assert main_call is not None and (main_call.agent, main_call.parent) == ("s-9", None)
    assert (main_call.tool, main_call.args["command"], main_call.call_id) == ("Bash", "echo cbprobe4", "toolu_1")


def test_dsh_bridge_payloads_are_told_apart_from_claude_code_and_keyed_by_the_dsh_agent_id():
    root = dsh_bridge_pre()
    assert detect(root) == "dsh"
    call = parse_event("dsh", root)[1]
    assert call is not None and call.agent == root["session_id"] and call.tool == "bash"
    child = dsh_bridge_pre("7f3e2a10-0000-4000-8000-00000000000c")  # a subagent: a bare uuid
    child["transcript_path"] = ""  # the bridge sends '' when persistence cannot locate the file
    assert detect(child) == "dsh"
    # Its SubagentStop names the child by its own id in both session_id and agent_id.
    stop = {
        **child,
        "hook_event_name": "SubagentStop",
        "agent_id": child["session_id"],
        "agent_type": "general-purpose",
    }
    stop.pop("tool_name"), stop.pop("tool_input"), stop.pop("tool_use_id")
    stop["stop_hook_active"] = False
    assert detect(stop) == "dsh"
    assert parse_event("dsh", stop)[1].agent == child["session_id"]


def test_codex_gemini_and_cursor_calls_are_keyed_by_their_session_or_conversation():
    assert parse_event("codex", codex_pre("c-7"))[1].agent == "c-7"
    assert parse_event("gemini-cli", gemini_before("g-7"))[1].agent == "g-7"
    shell = parse_event("cursor", cursor_shell("conv-7", "ls -la"))[1]
    assert (shell.agent, shell.tool, shell.args) == ("conv-7", "Shell", {"command": "ls -la", "cwd": "/w"})


def test_cursor_mcp_arguments_sent_as_a_json_string_are_compared_as_json():
    event = {
        "hook_event_name": "beforeMCPExecution",
        "conversation_id": "conv-2",
        "generation_id": "gen-2",
        "tool_name": "database_query",
        "tool_input": '{"query": "SELECT 1"}',
    }
    assert detect(event) == "cursor"
    call = parse_event("cursor", event)[1]
    assert (call.tool, call.args) == ("database_query", {"query": "SELECT 1"})
    assert parse_event("cursor", {"hook_event_name": "sessionEnd", "conversation_id": "conv-2"})[1].agent == "conv-2"


@pytest.mark.parametrize(
    "event",
    [{}, {"hook_event_name": 3}, {"session_id": "s"}, {"hook_event_name": "PreToolUse"}],
    ids=["empty", "number-event", "no-event", "no-session"],
)
def test_payloads_without_an_event_name_or_ids_are_not_judged(event):
    harness = detect(event)
    if harness is not None:
        assert parse_event(harness, event) in (("check", None), ("ignore", None))


# --- each harness's words (pure) -----------------------------------------------------------------


def test_claude_deny_is_a_pretooluse_permission_decision():
    assert answer("claude-code", "PreToolUse", "R") == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "R",
        }
    }


def test_an_interrupted_claude_agent_gets_continue_false_with_the_deny():
    out = answer("claude-code", "PreToolUse", "R", stop=True)
    assert out["continue"] is False and out["stopReason"] == "R"
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"  # `continue: false` alone lets the call run


def test_codex_gets_the_claude_deny_and_never_an_unknown_field():
    assert answer("codex", "PreToolUse", "R", stop=True) == answer("claude-code", "PreToolUse", "R")


def test_codex_deny_reason_loses_its_final_period_because_codex_adds_one_after_it():
    reason = answer("codex", "PreToolUse", "Stop repeating it, or report that you are stuck.")
    assert reason["hookSpecificOutput"]["permissionDecisionReason"] == "Stop repeating it, or report that you are stuck"
    assert answer("codex", "PreToolUse", "Wait...")["hookSpecificOutput"]["permissionDecisionReason"] == "Wait..."
    assert answer("claude-code", "PreToolUse", "Stop.")["hookSpecificOutput"]["permissionDecisionReason"] == "Stop."


def test_gemini_and_cursor_denies_are_their_own():
    assert answer("gemini-cli", "BeforeTool", "R") == {"decision": "deny", "reason": "R"}
    assert answer("cursor", "beforeShellExecution", "R") == {
        "permission": "deny",
        "user_message": "R",
        "agent_message": "R",
    }


# --- the socket path, the frame limit, the imports ---------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        {"CBCONSOLE_SOCKET": "~/cb/guard.sock", "HOME": "/home/u"},
        {"XDG_RUNTIME_DIR": "."},
        {"XDG_RUNTIME_DIR": "/does/not/exist", "TMPDIR": "."},
        {"TMPDIR": "."},
        {"TMPDIR": "long"},
        {},
    ],
    ids=["env", "xdg", "xdg-missing", "tmpdir", "tmpdir-too-long", "nothing"],
)
def test_default_socket_path_is_the_one_breaker_paths_computes(env, tmp_path):
    # Each runs with `env` as its real environment: Python's tempfile reads the process's own.
    long = tmp_path / ("l" * 100)  # its sockets would be over every platform's path limit
    long.mkdir()
    env = {k: {".": str(tmp_path), "long": str(long)}.get(v, v) for k, v in env.items()}
    env.setdefault("HOME", str(tmp_path / "home"))
    code = "from breaker import hook, paths; print(hook.socket_path()); print(paths.default_socket_path())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    ours, theirs = out.stdout.splitlines()
    assert ours == theirs
    if env.get("TMPDIR") == str(long):
        assert ours == f"/tmp/cbconsole-{os.getuid()}/guard.sock"


# What cbhook may load beyond Python's start-up: `time` and `_socket` are C modules; breaker.wire (the
# framing) imports nothing. Asking the guard to read the payload (the `hook` op) takes no more: no JSON
# parser, no `os`, no breaker.paths (its checks' "all is well" case is repeated in breaker.hook).
FAST_MODULES = {"breaker", "breaker.hook", "breaker.wire", "_socket", "time"}
# When cbhook reads the payload itself (an older guard, a payload too big for the op, no guard), it loads the
# dialects (breaker.hookwire), json, and breaker.paths, which keeps pathlib and tempfile out of its top.
HOOK_MODULES = FAST_MODULES | {
    "breaker.hookwire",
    "breaker.paths",
    "json",
    "json.decoder",
    "json.scanner",
    "json.encoder",
    "_json",
}


def test_importing_the_hook_loads_only_the_socket_module_beyond_python_startup():
    env = {**os.environ, "CBCONSOLE_SOCKET": "/nonexistent/guard.sock"}
    code = "import sys; before = set(sys.modules); import breaker.hook; print(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    added = set(json.loads(out.replace("'", '"')))
    assert added <= FAST_MODULES


def test_a_checked_call_loads_nothing_beyond_the_hooks_own_imports(guard):
    # The whole run: the socket checks, connect, the peer check, the exchange with a real guard.
    code = (
        "import sys; before = set(sys.modules); from breaker import hook; "
        "status = hook.main(['--socket', sys.argv[1]]); print(status, sorted(set(sys.modules) - before))"
    )
    payload = json.dumps(claude_pre("s-imports")).encode()
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.append({str(ROOT)!r}); {code}", str(guard.socket)],
        input=payload,
        capture_output=True,
        check=True,
    )
    status, _, added = out.stdout.decode().partition(" ")
    assert status == "0" and set(json.loads(added.replace("'", '"'))) <= FAST_MODULES, out
    assert agent_views(guard.socket)["s-imports"]["calls"] == 1  # it did ask the guard


# --- the real command against a real guard -------------------------------------------------------


def test_claude_pretooluse_six_allowed_silently_and_the_seventh_denied(guard):
    for i in range(6):
        result = cbhook(claude_pre(tool_use_id=f"t{i}"), socket_path=guard.socket)
        assert (result.returncode, result.stdout) == (0, b""), result
    out = stdout_json(cbhook(claude_pre(), socket_path=guard.socket))
    reason = out["hookSpecificOutput"]["permissionDecisionReason"]
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert reason.startswith("Circuit breaker (duplicate): Bash denied at 6/6.")
    view = agent_views(guard.socket)["s-1"]
    assert (view["harness"], view["calls"]) == ("claude-code", 6)


@pytest.mark.parametrize(
    ("payload", "check"),
    [
        (codex_pre(), lambda out: out["hookSpecificOutput"]["permissionDecision"] == "deny"),
        (gemini_before(), lambda out: out["decision"] == "deny" and "run_shell_command" in out["reason"]),
        (dsh_bridge_pre(), lambda out: out["hookSpecificOutput"]["permissionDecision"] == "deny"),
        (cursor_shell(), lambda out: out["permission"] == "deny" and out["agent_message"].startswith("Circuit")),
    ],
    ids=["codex", "gemini", "dsh-bridge", "cursor"],
)
def test_each_harness_gets_its_own_deny_from_a_real_guard(guard_factory, payload, check):
    g = guard_factory(patch_text=DENYING_LAYER)
    assert cbhook(payload, socket_path=g.socket).stdout == b""
    out = stdout_json(cbhook(payload, socket_path=g.socket))
    assert check(out), out
    assert "continue" not in out


@pytest.mark.parametrize("name", ["claude-code", "claude", "Claude"])
def test_harness_flag_forces_the_harness_and_its_old_alias_names_the_same_one(guard_factory, name):
    g = guard_factory(patch_text=DENYING_LAYER)
    payload = dsh_bridge_pre()  # detected as dsh's bridge on its own
    cbhook(payload, "--harness", name, socket_path=g.socket)
    out = stdout_json(cbhook(payload, "--harness", name, socket_path=g.socket))
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert agent_views(g.socket)[payload["session_id"]]["harness"] == "claude-code"


def test_every_harness_is_sent_to_the_guard_by_its_one_name():
    from breaker.hook import HARNESSES, TOOL_EVENTS, _frame

    assert set(HARNESSES.values()) == set(TOOL_EVENTS) == {"claude-code", "codex", "gemini-cli", "cursor", "dsh"}
    assert HARNESSES["claude"] == "claude-code" and HARNESSES["gemini"] == "gemini-cli"
    for payload in (claude_pre(), codex_pre(), gemini_before(), dsh_bridge_pre(), cursor_shell()):
        harness = detect(payload)
        assert harness in TOOL_EVENTS
        request = parse_event(harness, payload)[1]
        assert json.loads(_frame("check", request, harness))["harness"] == harness


def test_interrupted_claude_agent_is_denied_with_continue_false_and_its_subagent_too(guard):
    cbhook(claude_pre(), socket_path=guard.socket)
    request(guard.operator, {"op": "interrupt", "id": 1, "agent": "s-1", "reason": "looping"})
    out = stdout_json(cbhook(claude_pre(command="ls"), socket_path=guard.socket))
    assert out["continue"] is False and "looping" in out["stopReason"]
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    # The subagent is its own agent: not interrupted by its parent's interrupt...
    sub = claude_pre(agent_id="a0123456789abcdef", agent_type="general-purpose")
    assert cbhook(sub, socket_path=guard.socket).stdout == b""
    # ... until the operator interrupts it by its own id.
    request(guard.operator, {"op": "interrupt", "id": 2, "agent": "s-1/a0123456789abcdef", "reason": "child"})
    assert stdout_json(cbhook(sub, socket_path=guard.socket))["continue"] is False


def test_an_interrupted_codex_agent_is_denied_without_fields_codex_would_reject(guard):
    request(guard.operator, {"op": "interrupt", "id": 1, "agent": "c-1"})
    out = stdout_json(cbhook(codex_pre(), socket_path=guard.socket))
    assert set(out) == {"hookSpecificOutput"} and "interrupted" in out["hookSpecificOutput"]["permissionDecisionReason"]


def test_subagent_stop_and_session_end_free_the_agents_and_print_nothing(guard):
    sub = claude_pre(agent_id="a1", agent_type="general-purpose")
    cbhook(sub, socket_path=guard.socket)
    cbhook(claude_pre(), socket_path=guard.socket)
    assert {"s-1", "s-1/a1"} <= set(agent_views(guard.socket))
    stop = {"session_id": "s-1", "transcript_path": "/t", "cwd": "/w", "permission_mode": "default"}
    stop |= {"hook_event_name": "SubagentStop", "agent_id": "a1", "agent_type": "general-purpose"}
    stop |= {"agent_transcript_path": "/t/subagents/agent-a1.jsonl", "stop_hook_active": False}
    result = cbhook(stop, socket_path=guard.socket)
    assert (result.returncode, result.stdout) == (0, b"")
    assert set(agent_views(guard.socket)) == {"s-1"}
    end = {"session_id": "s-1", "transcript_path": "/t", "cwd": "/w", "hook_event_name": "SessionEnd", "reason": "exit"}
    assert cbhook(end, socket_path=guard.socket).stdout == b""
    assert agent_views(guard.socket) == {}


def test_lifecycle_events_never_deny_even_fail_closed_with_no_guard(tmp_path):
    end = {"session_id": "s-1", "transcript_path": "/t", "cwd": "/w", "hook_event_name": "SessionEnd", "reason": "x"}
    result = cbhook(end, "--fail-closed", socket_path=tmp_path / "none.sock")
    assert (result.returncode, result.stdout) == (0, b"")


def test_args_json_cannot_carry_are_sent_as_unjudgeable_and_counted(guard):
    nan = b'{"session_id":"s-nan","transcript_path":"/t","cwd":"/w","permission_mode":"default",'
    nan += b'"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"x":NaN},"tool_use_id":"t"}'
    surrogate = json.dumps(claude_pre("s-sur", command="\ud800")).encode()
    for payload, agent in ((nan, "s-nan"), (surrogate, "s-sur")):
        for _ in range(3):  # unjudgeable calls match nothing: never a duplicate
            result = cbhook(payload, socket_path=guard.socket)
            assert (result.returncode, result.stdout) == (0, b""), result
        assert agent_views(guard.socket)[agent]["calls"] == 3


# --- the guard away ------------------------------------------------------------------------------


def test_an_unavailable_guard_fails_open_with_one_stderr_line(tmp_path):
    result = cbhook(claude_pre(), socket_path=tmp_path / "none.sock")
    assert (result.returncode, result.stdout) == (0, b"")
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and "cannot reach the guard" in lines[0] and "fail open" in lines[0]


@pytest.mark.parametrize(
    ("payload", "key"),
    [(claude_pre(), "hookSpecificOutput"), (gemini_before(), "decision"), (cursor_shell(), "permission")],
    ids=["claude", "gemini", "cursor"],
)
def test_an_unavailable_guard_with_fail_closed_prints_the_harnesses_explicit_deny(tmp_path, payload, key):
    out = stdout_json(cbhook(payload, "--fail-closed", socket_path=tmp_path / "none.sock"))
    assert key in out and "Circuit breaker unavailable" in json.dumps(out)


def test_a_guard_that_never_answers_costs_the_timeout_then_fails_open(tmp_path):
    path = tmp_path / "hung.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    try:
        start = time.monotonic()
        result = cbhook(claude_pre(), "--timeout", "0.3", socket_path=path)
        took = time.monotonic() - start
    finally:
        server.close()
        for conn in accepted:
            conn.close()
    assert (result.returncode, result.stdout) == (0, b"")
    assert b"no answer from the guard" in result.stderr and b"within 0.3 s" in result.stderr
    assert took < 10  # bounded by --timeout, not by the harness's own hook timeout


def one_shot_peer(path: Path, *sends: bytes) -> socket.socket:
    """A listener on `path` that takes one connection, reads the request, and writes `sends` one by one."""
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            try:
                conn.recv(65536)
                for data in sends:
                    conn.sendall(data)
                    time.sleep(0.05)  # each part its own read on cbhook's side
                conn.recv(1)  # until cbhook closes
            except OSError:  # cbhook gave up first (EPIPE): what some tests expect
                pass

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_reply_split_across_reads_after_an_event_is_found_by_its_id(tmp_path):
    # The guard's answer to the `hook` op: what cbhook prints, as hex (breaker.protocol.HookReply).
    deny = json.dumps({"hookSpecificOutput": {"permissionDecisionReason": "R-split"}}).encode().hex()
    reply = b'{"id":1,"exit":0,"stdout":"%s","stderr":""}\n' % deny.encode()
    event = json.dumps({"event": "interrupt", "agent": "other", "reason": "x"}).encode() + b"\n"
    stray = json.dumps({"id": 7, "decision": "allow"}).encode() + b"\n"  # another request's reply
    server = one_shot_peer(tmp_path / "split.sock", event + stray + reply[:9], reply[9:30], reply[30:])
    try:
        out = stdout_json(cbhook(claude_pre(), socket_path=tmp_path / "split.sock"))
    finally:
        server.close()
    assert out["hookSpecificOutput"]["permissionDecisionReason"] == "R-split"


def test_an_oversized_reply_makes_the_guard_unavailable(tmp_path):
    server = one_shot_peer(tmp_path / "big.sock", b"[" + b" " * hook.MAX_REPLY, b"]\n")
    try:
        result = cbhook(claude_pre(), "--fail-closed", socket_path=tmp_path / "big.sock")
    finally:
        server.close()
    reason = stdout_json(result)["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("Circuit breaker unavailable (the guard at ") and "oversized reply" in reason


def test_a_peer_that_answers_garbage_makes_the_guard_unavailable(tmp_path):
    path = tmp_path / "junk.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)

    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"\xff\xfe not json\n")
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        out = stdout_json(cbhook(claude_pre(), "--fail-closed", socket_path=path))
    finally:
        server.close()
    assert "not JSON" in out["hookSpecificOutput"]["permissionDecisionReason"]


# --- a socket that may not be the guard's ---------------------------------------------------------


@pytest.mark.parametrize("layout", SQUATS)
def test_a_squatted_socket_is_never_connected_to_and_the_call_fails_open_naming_its_owner(tmp_path, layout):
    with squatted(tmp_path / "cbconsole-0", layout) as squatter:
        result = cbhook(claude_pre(), socket_path=squatter.path)
    assert (squatter.connections, squatter.received) == (0, b"")
    assert (result.returncode, result.stdout) == (0, b"")
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith(f"cbhook: not trusting the guard's socket {squatter.path}: ")
    assert line.endswith("; allowing the call (fail open)")
    for part in expected_refusal(layout, squatter.path):
        assert part in line, line


@pytest.mark.parametrize("layout", SQUATS)
def test_a_squatted_socket_with_fail_closed_gets_our_own_deny_and_never_the_squatters(tmp_path, layout):
    with squatted(tmp_path / "cbconsole-0", layout) as squatter:
        result = cbhook(claude_pre(), "--fail-closed", socket_path=squatter.path)
    assert (squatter.connections, squatter.received) == (0, b"")
    reason = stdout_json(result)["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith(f"Circuit breaker unavailable (not trusting the guard's socket {squatter.path}: ")
    assert reason.endswith("tool calls are denied until it is back.")
    assert HOSTILE not in (result.stdout + result.stderr).decode()


@NEEDS_ROOT
def test_the_default_socket_in_a_directory_another_user_made_in_tmp_is_refused(tmp_path):
    # The attack as reported: no XDG_RUNTIME_DIR, and another user made <tmp>/cbconsole-<uid> first.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "CBCONSOLE_SOCKET")}
    env["TMPDIR"] = str(tmp)
    with squatted(tmp / f"cbconsole-{os.getuid()}", "directory-of-another-user") as squatter:
        result = subprocess.run(
            [str(CBHOOK), "--fail-closed"], input=json.dumps(claude_pre()).encode(), capture_output=True, env=env
        )
    assert (squatter.connections, squatter.received) == (0, b"")
    reason = stdout_json(result)["hookSpecificOutput"]["permissionDecisionReason"]
    assert f"{squatter.path.parent} belongs to {owner_text(NOBODY)}" in reason and HOSTILE not in reason


def test_an_agent_end_is_not_sent_to_a_squatted_socket(tmp_path):
    end = {"session_id": "s-1", "transcript_path": "/t", "cwd": "/w", "hook_event_name": "SessionEnd", "reason": "x"}
    with squatted(tmp_path / "run", "directory-writable-by-group") as squatter:
        result = cbhook(end, socket_path=squatter.path)
    assert (squatter.connections, squatter.received) == (0, b"")
    assert (result.returncode, result.stdout) == (0, b"")
    assert b"not trusting the guard's socket" in result.stderr and b"not forgotten" in result.stderr


@NEEDS_ROOT
@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="SO_PEERCRED is Linux's")
def test_a_listener_running_as_another_user_is_sent_nothing_though_its_socket_file_is_ours(tmp_path):
    path = tmp_path / "guard.sock"
    with foreign_listener(path) as proc:
        result = cbhook(claude_pre(), "--fail-closed", socket_path=path)
        assert received_by(proc) == ""  # connected, asked the kernel who it is, closed: not one byte
    reason = stdout_json(result)["hookSpecificOutput"]["permissionDecisionReason"]
    assert f"the process serving it runs as {owner_text(NOBODY)}" in reason and HOSTILE not in reason


# --- the timeout is one deadline -------------------------------------------------------------------


@pytest.mark.timeout(120)  # a regression hangs until the dribbler stops: fail, never pass
@pytest.mark.parametrize("fail_closed", [False, True], ids=["fail-open", "fail-closed"])
def test_a_peer_dribbling_its_reply_cannot_hold_cbhook_past_its_timeout(tmp_path, fail_closed):
    # One byte every 0.1 s never lets a single read wait 0.5 s: only a total deadline ends this.
    path = tmp_path / "slow.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    stop, closed = threading.Event(), threading.Event()

    def dribble() -> None:
        conn, _ = server.accept()
        with conn:
            while not stop.is_set():
                try:
                    conn.sendall(b"x")
                except OSError:  # EPIPE: cbhook closed the connection
                    closed.set()
                    return
                stop.wait(0.1)

    threading.Thread(target=dribble, daemon=True).start()
    args = ["--timeout", "0.5", *(["--fail-closed"] if fail_closed else [])]
    try:
        result = cbhook(claude_pre(), *args, socket_path=path, timeout=20)
        assert closed.wait(20), "the dribbling peer never saw the connection closed"
    finally:
        stop.set()
        server.close()
    assert b"no answer from the guard" in result.stderr and b"within 0.5 s" in result.stderr
    if fail_closed:
        reason = stdout_json(result)["hookSpecificOutput"]["permissionDecisionReason"]
        assert reason.startswith("Circuit breaker unavailable (no answer from the guard")
    else:
        assert (result.returncode, result.stdout) == (0, b"")


# --- garbage, empty and huge stdin -----------------------------------------------------------------

GARBAGE = {
    "empty": b"",
    "whitespace": b"  \n\t ",
    "binary": bytes(range(256)) * 4,
    "truncated": json.dumps(claude_pre()).encode()[:-7],
    "array": b"[1, 2, 3]",
    "string": b'"PreToolUse"',
    "deep": b"[" * 200_000 + b"]" * 200_000,
    "bad-utf8": b'{"hook_event_name": "PreToolUse", "session_id": "\xff\xfe"}',
    "unknown-event": b'{"hook_event_name": "SomethingElse"}',
}


@pytest.mark.parametrize("data", list(GARBAGE.values()), ids=list(GARBAGE))
def test_garbage_on_stdin_is_allowed_with_a_stderr_line_and_never_a_traceback(data, tmp_path):
    result = cbhook(data, socket_path=tmp_path / "none.sock")
    assert (result.returncode, result.stdout) == (0, b""), result
    assert b"Traceback" not in result.stderr


@pytest.mark.parametrize(
    "data", [GARBAGE["binary"], GARBAGE["empty"], GARBAGE["deep"]], ids=["binary", "empty", "deep"]
)
def test_garbage_with_fail_closed_and_no_known_harness_blocks_by_exit_2(data, tmp_path):
    result = cbhook(data, "--fail-closed", socket_path=tmp_path / "none.sock")
    assert (result.returncode, result.stdout) == (2, b"")  # every harness here blocks on exit 2
    assert b"could not judge" in result.stderr


def test_garbage_with_fail_closed_and_a_named_harness_gets_that_harnesses_deny(tmp_path):
    out = stdout_json(cbhook(b"garbage", "--fail-closed", "--harness", "gemini-cli", socket_path=tmp_path / "x.sock"))
    assert out["decision"] == "deny" and "could not judge" in out["reason"]


def test_a_tool_payload_over_the_frame_limit_is_sent_as_unjudgeable_allowed_and_counted(guard):
    payload = claude_pre("s-big")
    payload["tool_input"] = {"content": "x" * (MAX_FRAME + 1024)}
    for _ in range(2):
        result = cbhook(payload, socket_path=guard.socket, timeout=60)
        assert (result.returncode, result.stdout) == (0, b""), result.stderr
    assert agent_views(guard.socket)["s-big"]["calls"] == 2


def raw_claude_pre(session: str, tool_input: bytes) -> bytes:
    """A Claude Code PreToolUse payload as the harness writes it, ids first, with `tool_input` as given."""
    head = json.dumps(claude_pre(session))[:-1].split(', "tool_input"')[0]
    return head.encode() + b', "tool_input": ' + tool_input + b', "tool_use_id": "toolu_1"}'


@pytest.mark.parametrize("depth", [2_000, 200_000])
def test_a_payload_nested_too_deep_to_read_is_counted_and_the_cap_applies(guard_factory, depth):
    """Nested past Python's json, a payload was "not JSON" and its call let through uncounted."""
    g = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    maxCallsPerAgent: 2\n")
    payload = raw_claude_pre("s-deep", b"[" * depth + b"]" * depth)
    got = [cbhook(payload, socket_path=g.socket, timeout=60) for _ in range(3)]
    assert [r.stdout for r in got[:2]] == [b"", b""], got[0].stderr
    assert json.loads(got[2].stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert b"nested too deep" in got[0].stderr
    assert agent_views(g.socket)["s-deep"]["calls"] == 2


def test_a_payload_over_64_mib_is_counted_from_its_ids(guard):
    payload = raw_claude_pre("s-huge", b'{"content": "' + b"y" * (hook.MAX_STDIN + 10) + b'"}')
    result = cbhook(payload, socket_path=guard.socket, timeout=120)
    assert (result.returncode, result.stdout) == (0, b""), result.stderr
    assert b"over 64 MiB" in result.stderr
    assert agent_views(guard.socket)["s-huge"]["calls"] == 1


def test_stdin_over_64_mib_is_drained_and_allowed(tmp_path):
    huge = b'{"hook_event_name": "PreToolUse", "tool_input": "' + b"y" * (hook.MAX_STDIN + 10) + b'"}'
    result = cbhook(huge, socket_path=tmp_path / "none.sock", timeout=120)
    assert (result.returncode, result.stdout) == (0, b"")
    assert b"over 64 MiB" in result.stderr


# --- flags -----------------------------------------------------------------------------------------


def test_dsh_plugin_path_prints_the_plugin_directory():
    result = subprocess.run([str(CBHOOK), "--dsh-plugin-path"], capture_output=True, text=True, check=True)
    path = Path(result.stdout.strip())
    manifest = json.loads((path / "package.json").read_text())
    assert manifest["dsh"]["bundle"]["patch"] == "./cordis.patch.yml" and (path / manifest["main"]).exists()


@pytest.mark.parametrize(
    "args",
    [["--bogus"], ["--timeout", "soon"], ["--timeout", "0"], ["--harness", "vim"], ["--socket"]],
    ids=["unknown", "timeout-text", "timeout-zero", "harness", "missing-value"],
)
def test_bad_arguments_exit_1_so_the_harness_reports_the_hook_and_runs_the_tool(args):
    result = cbhook(claude_pre(), *args)
    assert (result.returncode, result.stdout) == (1, b"")
    assert b"usage: cbhook" in result.stderr


def test_help_lists_every_flag():
    out = subprocess.run([str(CBHOOK), "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--socket", "--timeout", "--fail-closed", "--harness", "--dsh-plugin-path"):
        assert flag in out


# --- every call judged: big numbers and a guard that cannot read the args (issue 20) -------------

BIG = "1" + "0" * 309 + "1"  # 311 digits: orjson reads it as a float beyond a double's range
HUGE = "1" + "0" * 4998 + "7"  # 5,000 digits: past what the standard library reads by default (4,300)
CAPPED = "- id: circuit-breaker\n  config:\n    maxCallsPerAgent: 3\n"


def with_literal(payload: dict[str, Any], literal: str) -> bytes:
    """`payload` as JSON with its tool_input's `n` the number `literal`, exactly as written."""
    return json.dumps(payload).encode().replace(b'"@N@"', literal.encode())


def big_call(session: str, literal: str, i: int | None = None) -> bytes:
    payload = claude_pre(session)
    payload["tool_input"] = {"n": "@N@"} if i is None else {"n": "@N@", "i": i}
    return with_literal(payload, literal)


def test_number_literals_are_read_and_written_back_exactly_as_written():
    text = b'{"a": -%s, "b": [1.5, %s, {"c": %s}], "s": "\\u0000cbhook-number-", "n": 12, "f": 1e5}' % (
        HUGE.encode(),
        BIG.encode(),
        b"18446744073709551617",
    )
    value = hook.loads(text)
    assert value["n"] == 12 and value["f"] == 1e5 and value["s"] == "\x00cbhook-number-"
    assert hook.dumps(value, separators=(",", ":")) == (
        f'{{"a":-{HUGE},"b":[1.5,{BIG},{{"c":18446744073709551617}}],"s":"\\u0000cbhook-number-","n":12,"f":100000.0}}'
    )
    assert hook.loads(f'{{"x": {BIG}}}')["x"].text == BIG  # Cursor's MCP arguments come as a JSON string


@pytest.mark.parametrize("literal", [BIG, HUGE, "-" + HUGE], ids=["311-digits", "5000-digits", "negative"])
def test_a_big_integer_in_tool_input_reaches_the_guard_exactly_as_the_harness_wrote_it(guard, tmp_path, literal):
    proxy = GuardProxy(guard.socket, tmp_path / "proxy" / "guard.sock")
    try:
        result = cbhook(big_call("s-exact", literal), socket_path=proxy.path)
    finally:
        proxy.close()
    assert (result.returncode, result.stdout) == (0, b""), result
    assert any(b'"args":{"n":%s}' % literal.encode() in f for f in proxy.frames)


@pytest.mark.parametrize("literal", [BIG, HUGE], ids=["311-digits", "5000-digits"])
def test_a_call_with_a_big_integer_is_counted_and_the_cap_applies(guard_factory, literal):
    g = guard_factory(patch_text=CAPPED)
    outs = [cbhook(big_call("s-big", literal, i), socket_path=g.socket) for i in range(4)]
    assert [o.stdout for o in outs[:3]] == [b""] * 3, outs
    reason = stdout_json(outs[3])["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("Circuit breaker (cap)"), reason
    assert agent_views(g.socket)["s-big"]["calls"] == 3


@pytest.mark.parametrize("literal", [BIG, HUGE], ids=["311-digits", "5000-digits"])
def test_the_seventh_identical_call_with_a_big_integer_is_denied_as_a_duplicate(guard, literal):
    outs = [cbhook(big_call("s-dup", literal), socket_path=guard.socket) for _ in range(7)]
    assert [o.stdout for o in outs[:6]] == [b""] * 6, outs
    reason = stdout_json(outs[6])["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("Circuit breaker (duplicate)"), reason


@pytest.mark.parametrize(
    ("a", "b"),
    [(str(2**64 + 1), str(2**64 + 2)), (BIG, BIG[:-1] + "2"), (HUGE, HUGE[:-1] + "8")],
    ids=["2**64", "311-digits", "5000-digits"],
)
def test_args_differing_only_in_a_big_integer_are_not_duplicates(guard, a, b):
    outs = [cbhook(big_call("s-diff", n), socket_path=guard.socket) for n in [a] * 6 + [b, a]]
    assert [o.stdout for o in outs[:7]] == [b""] * 7, outs  # b is a new call
    reason = stdout_json(outs[7])["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("Circuit breaker (duplicate)"), reason  # a's 7th: judged exactly, not unjudgeable


def test_a_check_the_guard_answers_with_an_error_is_asked_again_as_unjudgeable_and_counted(guard, tmp_path):
    proxy = GuardProxy(guard.socket, tmp_path / "proxy" / "guard.sock")
    proxy.answer_next({"error": {"code": "bad_json", "message": "not valid JSON: injected"}})
    try:
        result = cbhook(claude_pre("s-retry"), "--fail-closed", socket_path=proxy.path)
    finally:
        proxy.close()
    assert (result.returncode, result.stdout) == (0, b""), result  # allowed by the guard: not the fail-closed deny
    assert agent_views(guard.socket)["s-retry"]["calls"] == 1
    (check,) = [f for f in proxy.frames if is_check(f)]
    assert b'"args":null' in check and b'"args_unserializable":true' in check
