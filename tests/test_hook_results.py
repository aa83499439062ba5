"""`cbhook` after a call and on a warned allow: each harness's post event (Claude Code PostToolUse and
PostToolUseFailure, Codex PostToolUse, Gemini CLI AfterTool) becomes a `result` frame with a digest
of what the model reads; an allow with a warning prints it where the harness shows the model hook
text (Claude Code and Codex from PreToolUse, Gemini CLI from AfterTool); bad payloads and an
unavailable guard never block or crash. The payloads are those the real harnesses sent in the runs
of tests/e2e/test_warnings_e2e.py; the frames are checked on a recording socket, the behaviour
against a real guard process running the `recommended` preset.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from breaker import Config, Guard, keys
from breaker.hook import detect, parse_event, result_digest
from tests.test_hook import HOOK_MODULES, cbhook, claude_pre, codex_pre, gemini_before

RECOMMENDED = "- id: circuit-breaker\n  config:\n    preset: recommended\n"


# What the harnesses sent after a call (Claude Code 2.1.332, Codex 0.171.0, Gemini CLI 0.61.0).
def claude_post(output: str = "cbprobe4", tool_use_id: str = "toolu_1", **extra: Any) -> dict[str, Any]:
    return {
        **claude_pre(tool_use_id=tool_use_id),
        "hook_event_name": "PostToolUse",
        "effort": {"level": "medium"},
        "tool_response": {
            "stdout": output,
            "stderr": "",
            "interrupted": False,
            "isImage": False,
            "noOutputExpected": False,
        },
        "duration_ms": 23,
        **extra,
    }


def claude_failure(error: str = "Exit code 3\nfailing-out\nerr-text", tool_use_id: str = "toolu_1") -> dict[str, Any]:
    payload = {**claude_pre(tool_use_id=tool_use_id), "hook_event_name": "PostToolUseFailure"}
    return payload | {"error": error, "is_interrupt": False, "duration_ms": 27}


def codex_post(output: str = "cbprobe4\n", tool_use_id: str = "call_1") -> dict[str, Any]:
    return {**codex_pre(), "hook_event_name": "PostToolUse", "tool_response": output, "tool_use_id": tool_use_id}


def gemini_after(output: str = "cbprobe4", pgid: int = 18419) -> dict[str, Any]:
    llm = f"<untrusted_context>\nOutput: {output}\nProcess Group PGID: {pgid}\n</untrusted_context>"
    return {
        **gemini_before(),
        "hook_event_name": "AfterTool",
        "tool_response": {"llmContent": llm, "returnDisplay": output},
    }


# --- which event reports what (pure) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "harness"),
    [(claude_post(), "claude-code"), (claude_failure(), "claude-code"), (codex_post(), "codex")],
    ids=["claude", "claude-failure", "codex"],
)
def test_claude_and_codex_results_name_the_call_by_its_tool_use_id(payload, harness):
    assert detect(payload) == harness
    action, call = parse_event(harness, payload)
    assert action == "result" and call is not None
    assert (call.agent, call.call_id) == (payload["session_id"], payload["tool_use_id"])
    assert len(call.digest) == 16 and int(call.digest, 16) >= 0


def test_a_claude_subagents_result_is_its_own_agents():
    post = claude_post(agent_id="a0123456789abcdef", agent_type="general-purpose")
    call = parse_event("claude-code", post)[1]
    assert call is not None and call.agent == "s-1/a0123456789abcdef"


def test_a_gemini_result_names_the_call_by_tool_and_args_as_its_check_did():
    after = gemini_after()
    assert detect(after) == "gemini-cli"
    action, call = parse_event("gemini-cli", after)
    check = parse_event("gemini-cli", gemini_before())[1]
    assert action == "result" and call is not None and check is not None
    assert (call.agent, call.tool, call.args, call.call_id) == (check.agent, check.tool, check.args, None)


def test_digests_follow_the_text_the_model_reads():
    digest = lambda payload: parse_event(detect(payload) or "", payload)[1].digest  # noqa: E731
    # The same output gives the same digest; another output another.
    assert digest(claude_post("a")) == digest(claude_post("a", tool_use_id="toolu_2")) != digest(claude_post("b"))
    assert digest(codex_post("a\n")) != digest(codex_post("b\n"))
    assert digest(claude_failure("Exit code 1\na")) != digest(claude_failure("Exit code 1\nb"))
    # Codex's result is the output itself: the same digest the Python client computes for it.
    assert digest(codex_post("cbprobe4\n")) == keys.result_digest("cbprobe4\n")
    assert digest(claude_failure("E")) == keys.result_digest("E")


def test_what_changes_at_every_run_of_the_same_call_is_left_out_of_the_digest():
    digest = lambda payload: parse_event(detect(payload) or "", payload)[1].digest  # noqa: E731
    # Gemini CLI's shell output names a new process group each run: not a new result.
    assert digest(gemini_after("a", pgid=1)) == digest(gemini_after("a", pgid=2)) != digest(gemini_after("b"))
    # Claude Code's WebSearch carries its timing: the same search is the same result.
    search = {"query": "q", "results": ["r"], "durationSeconds": 1.25}
    first = claude_post(tool_name="WebSearch", tool_response=search)
    again = claude_post(tool_name="WebSearch", tool_response={**search, "durationSeconds": 3.5})
    other = claude_post(tool_name="WebSearch", tool_response={**search, "results": ["s"]})
    assert digest(first) == digest(again) != digest(other)


@pytest.mark.parametrize("value", ["", "cbprobe4\n", "é\ud800", {"b": [1, "x"], "a": None}, ["x", 2], None])
def test_result_digest_is_breaker_keys_own_for_strings_and_plain_json(value):
    assert result_digest(value) == keys.result_digest(value)


@pytest.mark.parametrize(
    ("payload", "harness"),
    [
        ({**claude_post(), "session_id": ""}, "claude-code"),
        ({k: v for k, v in codex_post().items() if k != "tool_name"}, "codex"),
        ({k: v for k, v in gemini_after().items() if k != "session_id"}, "gemini-cli"),
    ],
    ids=["claude-empty-session", "codex-no-tool", "gemini-no-session"],
)
def test_a_result_without_agent_or_tool_is_recognised_but_not_reported(payload, harness):
    assert parse_event(harness, payload) == ("result", None)


# --- the frames, on a recording socket -----------------------------------------------------------


class Recorder:
    """A socket of ours that records each frame and answers with the next scripted reply. cbhook's `hook` op
    is answered `unknown_op`, as by a guard from before the op: cbhook then sends its requests one by one
    (breaker/hookwire.py, the same code the guard runs for the op)."""

    def __init__(self, directory: Path, replies: list[dict[str, Any]]) -> None:
        directory.mkdir(mode=0o700)
        self.path = directory / "guard.sock"
        self.replies = replies
        self.frames: list[dict[str, Any]] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                frame = json.loads(data)
                if frame.get("op") == "hook":
                    error = {"code": "unknown_op", "message": "unknown op 'hook'"}
                    conn.sendall(json.dumps({"id": frame.get("id"), "error": error}).encode() + b"\n")
                    continue
                self.frames.append(frame)
                reply = self.replies.pop(0) if self.replies else {"ok": True, "matched": False, "warning": ""}
                conn.sendall(json.dumps({"id": frame.get("id"), **reply}).encode() + b"\n")

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Any]:
    made: list[Recorder] = []

    def make(*replies: dict[str, Any]) -> Recorder:
        r = Recorder(tmp_path / f"run{len(made)}", list(replies))
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


WARNING = "Circuit breaker warning (repeat): [bold]x[/bold] number 3 of 3"  # markup stays plain text


def test_a_claude_result_frame_carries_the_call_id_and_digest_and_no_args(recorder):
    r = recorder({"ok": True, "matched": True, "warning": WARNING})
    out = cbhook(claude_post(), socket_path=r.path)
    # The warning already went with the check (PreToolUse): nothing printed after the call.
    assert (out.returncode, out.stdout) == (0, b""), out
    (frame,) = r.frames
    assert frame == {
        "op": "result",
        "id": 1,
        "agent": "s-1",
        "digest": keys.result_digest(claude_post()["tool_response"]),
        "call_id": "toolu_1",
    }


def test_a_codex_result_frame_and_no_output_codex_could_reject(recorder):
    r = recorder({"ok": True, "matched": True, "warning": WARNING})
    out = cbhook(codex_post("x\n", "call_7"), socket_path=r.path)
    assert (out.returncode, out.stdout) == (0, b""), out
    (frame,) = r.frames
    assert (frame["op"], frame["call_id"], frame["digest"]) == ("result", "call_7", keys.result_digest("x\n"))


def test_a_gemini_result_frame_names_tool_and_args_and_prints_the_calls_warning_for_aftertool(recorder):
    r = recorder({"ok": True, "matched": True, "warning": WARNING})
    out = cbhook(gemini_after(), socket_path=r.path)
    assert out.returncode == 0, out
    shown = {"hookEventName": "AfterTool", "additionalContext": WARNING}
    assert json.loads(out.stdout) == {"hookSpecificOutput": shown}
    (frame,) = r.frames
    assert frame["op"] == "result" and "call_id" not in frame
    assert (frame["agent"], frame["tool"], frame["args"]) == ("g-1", "run_shell_command", gemini_before()["tool_input"])


def test_a_gemini_result_without_a_warning_prints_nothing(recorder):
    r = recorder({"ok": True, "matched": True, "warning": ""}, {"ok": True, "matched": False, "warning": ""})
    for _ in range(2):
        out = cbhook(gemini_after(), socket_path=r.path)
        assert (out.returncode, out.stdout) == (0, b""), out


@pytest.mark.parametrize(
    ("payload", "printed"),
    [
        (claude_pre(), {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": WARNING}}),
        (codex_pre(), {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": WARNING}}),
        (gemini_before(), None),  # BeforeTool has no channel to the model: AfterTool prints it
    ],
    ids=["claude", "codex", "gemini"],
)
def test_an_allow_with_a_warning_prints_it_where_the_harness_shows_the_model(recorder, payload, printed):
    r = recorder({"decision": "allow", "warning": WARNING, "rule": "repeat", "count": 3, "limit": 3})
    out = cbhook(payload, socket_path=r.path)
    assert out.returncode == 0, out
    assert (json.loads(out.stdout) if out.stdout else None) == printed
    # No permissionDecision: "allow" there would skip the harness's own permission prompt.
    assert b"permissionDecision" not in out.stdout


@pytest.mark.parametrize(
    "reply",
    [{"error": {"code": "bad_request", "message": "result: nope"}}, {"unexpected": True}, {"ok": True, "warning": 3}],
    ids=["error", "unexpected", "bad-warning"],
)
def test_a_result_reply_that_is_an_error_or_odd_is_logged_and_prints_nothing(recorder, reply):
    r = recorder(reply)
    out = cbhook(gemini_after(), "--fail-closed", socket_path=r.path)
    assert (out.returncode, out.stdout) == (0, b""), out
    if "ok" not in reply:
        assert b"not reported" in out.stderr


# --- never a block, never a crash ----------------------------------------------------------------


@pytest.mark.parametrize("fail_closed", [False, True], ids=["open", "closed"])
@pytest.mark.parametrize(
    "payload",
    [claude_post(), claude_failure(), codex_post(), gemini_after()],
    ids=["claude", "claude-failure", "codex", "gemini"],
)
def test_an_unavailable_guard_makes_a_result_print_nothing_and_exit_0_even_fail_closed(tmp_path, payload, fail_closed):
    args = ["--fail-closed"] if fail_closed else []
    start = time.monotonic()
    out = cbhook(payload, *args, socket_path=tmp_path / "none.sock")
    assert (out.returncode, out.stdout) == (0, b""), out
    assert time.monotonic() - start < 10  # no retries, no waiting for a guard that is not there
    (line,) = out.stderr.decode().splitlines()
    assert "cannot reach the guard" in line and "not reported" in line


@pytest.mark.parametrize("fail_closed", [False, True], ids=["open", "closed"])
def test_a_result_payload_without_its_ids_says_why_and_never_blocks(tmp_path, fail_closed):
    args = ["--fail-closed"] if fail_closed else []
    payload = {k: v for k, v in claude_post().items() if k != "tool_name"}
    out = cbhook(payload, *args, socket_path=tmp_path / "none.sock")
    assert (out.returncode, out.stdout) == (0, b""), out
    assert "no usable agent id or tool name; its result is not reported" in out.stderr.decode()


def test_a_gemini_result_whose_args_json_cannot_carry_is_not_sent(recorder):
    r = recorder()
    payload = json.dumps(gemini_after()).replace('"echo cbprobe4"', '"\\ud800"').encode()
    out = cbhook(payload, socket_path=r.path)
    assert (out.returncode, out.stdout) == (0, b"") and r.frames == [], out
    assert b"cannot be sent" in out.stderr


def test_a_result_call_loads_only_the_blake2_module_beyond_the_hooks_imports(recorder):
    r = recorder()
    code = (
        "import sys; before = set(sys.modules); from breaker import hook; "
        "status = hook.main(['--socket', sys.argv[1]]); print(status, sorted(set(sys.modules) - before))"
    )
    payload = json.dumps(claude_post()).encode()
    env = {**os.environ}
    out = subprocess.run([sys.executable, "-c", code, str(r.path)], input=payload, capture_output=True, env=env)
    status, _, added = out.stdout.decode().partition(" ")
    assert status == "0" and set(json.loads(added.replace("'", '"'))) <= HOOK_MODULES | {"_blake2"}, out
    assert len(r.frames) == 1


# --- against a real guard: warnings and progress --------------------------------------------------


def engine_verdicts(tool: str, outputs: list[str | None]) -> list[Any]:
    """The engine's verdicts under `recommended` for identical calls whose results are `outputs`
    (None: not reported), up to the first deny."""
    guard = Guard(Config.with_preset("recommended"))
    verdicts = []
    for n, output in enumerate(outputs):
        verdict = guard.check("a", tool, {"command": "echo cbprobe4"}, call_id=n)
        verdicts.append(verdict)
        if not verdict.allowed:
            break
        if output is not None:  # None: the result is never reported
            guard.result("a", output, call_id=n)
    return verdicts


def claude_loop(g: Any, outputs: list[str], prefix: str) -> list[dict[str, Any]]:
    """Run PreToolUse then PostToolUse through the real cbhook for each output, until a deny; what
    each PreToolUse printed (`{}` for nothing)."""
    printed = []
    for n, output in enumerate(outputs):
        pre = cbhook(claude_pre(tool_use_id=f"{prefix}{n}"), socket_path=g.socket)
        assert pre.returncode == 0, pre
        printed.append(json.loads(pre.stdout)["hookSpecificOutput"] if pre.stdout else {})
        if printed[-1].get("permissionDecision") == "deny":
            break
        post = cbhook(claude_post(output, tool_use_id=f"{prefix}{n}"), socket_path=g.socket)
        assert (post.returncode, post.stdout) == (0, b""), post
    return printed


def expected_output(verdict: Any) -> dict[str, Any]:
    """What cbhook's PreToolUse prints in Claude Code for the engine's verdict on a call."""
    if not verdict.allowed:
        return {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": verdict.reason}
    return {"hookEventName": "PreToolUse", "additionalContext": verdict.warning} if verdict.warning else {}


def test_claude_calls_whose_results_change_are_never_denied(guard_factory):
    g = guard_factory(patch_text=RECOMMENDED)
    outputs = [f"count {n}" for n in range(8)]
    verdicts = engine_verdicts("Bash", outputs)
    assert all(v.allowed for v in verdicts)
    # Without the results, the same calls are denied: the reports are what let them run.
    assert not all(v.allowed for v in engine_verdicts("Bash", [None] * 8))
    assert claude_loop(g, outputs, "p") == [expected_output(v) for v in verdicts]


def test_claude_calls_whose_result_stays_the_same_are_warned_then_denied_as_the_engine_says(guard_factory):
    g = guard_factory(patch_text=RECOMMENDED)
    verdicts = engine_verdicts("Bash", ["same"] * 8)
    assert any(v.warning for v in verdicts) and not verdicts[-1].allowed  # else this proves nothing
    assert claude_loop(g, ["same"] * 8, "c") == [expected_output(v) for v in verdicts]


def test_gemini_aftertool_shows_the_warning_its_beforetool_check_got(guard_factory):
    g = guard_factory(patch_text=RECOMMENDED)
    # Gemini CLI's real output: a new process group at each run, the same output.
    verdicts = engine_verdicts("run_shell_command", [gemini_after()["tool_response"]["llmContent"]] * 8)
    shown, denied = [], None
    for n in range(8):
        before = cbhook(gemini_before(), socket_path=g.socket)
        if before.stdout:
            denied = json.loads(before.stdout)
            break
        after = cbhook(gemini_after(pgid=100 + n), socket_path=g.socket)
        assert after.returncode == 0, after
        shown.append(json.loads(after.stdout)["hookSpecificOutput"]["additionalContext"] if after.stdout else "")
    assert any(shown) and denied is not None and denied["decision"] == "deny", shown
    assert shown == [v.warning for v in verdicts[:-1]]
    assert denied["reason"] == verdicts[-1].reason
