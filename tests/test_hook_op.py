"""The `hook` op: cbhook forwards a harness's payload as it came and the guard reads it (breaker/hookwire.py),
so the process started per tool call needs no JSON parser.

What cbhook prints must not depend on who read the payload. Each payload here goes once to a guard through
the op and once to another guard through a proxy that answers the op `unknown_op`, as a guard from before
the op would, so that cbhook reads the payload itself and sends its requests one by one. The exit status,
stdout, stderr and what each guard recorded must be the same, call by call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from breaker import hook, hookwire
from breaker.protocol import HOOK_HARNESSES, HookCall, ProtocolError, decode_request
from breaker.wire import HOOK_BRACKETS_MAX, HOOK_PAYLOAD_MAX
from tests.guardproxy import CHECK, HOOK, GuardProxy
from tests.test_hook import (
    ROOT,
    agent_views,
    big_call,
    cbhook,
    claude_pre,
    codex_pre,
    cursor_shell,
    dsh_bridge_pre,
    gemini_before,
)
from tests.test_hook_results import claude_failure, claude_post, codex_post, gemini_after

WARNING_LAYER = "- id: circuit-breaker\n  config:\n    preset: recommended\n"


def nested(depth: int) -> bytes:
    return json.dumps(claude_pre("s-deep")).encode().replace(b'"step"', b"[" * depth + b"1" + b"]" * depth)


# (payload, cbhook's arguments): a session of calls in order, and payloads each side must read alike.
STEPS: list[tuple[object, tuple[str, ...]]] = [
    *[(claude_pre("s-a"), ()) for _ in range(7)],  # six allowed, the seventh denied
    (claude_post(tool_use_id="toolu_1"), ()),
    (claude_failure(), ()),
    (claude_pre("s-a", agent_id="a-sub", agent_type="general-purpose"), ()),
    ({**claude_pre("s-a"), "hook_event_name": "SubagentStop", "agent_id": "a-sub"}, ()),
    ({**claude_pre("s-a"), "hook_event_name": "Stop"}, ()),
    *[(codex_pre("c-a"), ()) for _ in range(4)],
    (codex_post("x\n", "call_1"), ()),
    *[(gemini_before("g-a"), ()) for _ in range(3)],
    (gemini_after(), ()),
    ({**gemini_before("g-a"), "hook_event_name": "SessionEnd"}, ()),
    (cursor_shell("conv-a"), ()),
    (dsh_bridge_pre(), ()),
    (claude_pre("s-forced"), ("--harness", "codex")),
    (claude_pre("s-closed"), ("--fail-closed",)),
    # Payloads that are not a call, or not JSON: the failure mode decides, in the same words.
    (b"", ()),
    (b"   \n", ("--fail-closed",)),
    (b"not json", ()),
    (b"not json", ("--fail-closed",)),
    (b"[1, 2]", ("--fail-closed",)),
    (b'{"hook_event_name": "Mystery"}', ("--fail-closed",)),
    ({**claude_pre(), "session_id": ""}, ("--fail-closed",)),
    # Odd but readable: numbers past 64 bits, NaN, a lone surrogate, nesting, line breaks and tabs.
    (big_call("s-big", "1" + "0" * 309 + "1"), ()),
    (json.dumps(claude_pre("s-nan")).encode().replace(b'"step"', b"NaN"), ()),
    (json.dumps(claude_pre("s-sur")).encode().replace(b'"step"', b'"\\ud800"'), ()),
    (nested(100), ()),
    (json.dumps(claude_pre("s-pretty"), indent="\t").encode(), ()),
    (json.dumps(claude_pre("s-esc", command='say "hi"\\n\\there')).encode(), ()),
    # What the op does not carry, read by cbhook alike: past its limits, not UTF-8, a raw control character.
    (nested(HOOK_BRACKETS_MAX), ()),
    (claude_pre("s-long", command="y" * HOOK_PAYLOAD_MAX), ()),
    (json.dumps(claude_pre("s-latin")).encode().replace(b"cbprobe4", b"caf\xe9"), ()),
    (json.dumps(claude_pre("s-ctl")).encode().replace(b"cbprobe4", b"a\x01b"), ("--fail-closed",)),
]


def test_the_guard_reading_the_payload_answers_as_cbhook_reading_it_itself(guard_factory, tmp_path):
    op_guard = guard_factory(patch_text=WARNING_LAYER)
    own_guard = guard_factory(patch_text=WARNING_LAYER)
    via_op = GuardProxy(op_guard.socket, tmp_path / "op" / "guard.sock", hook_op=True)
    older = GuardProxy(own_guard.socket, tmp_path / "older" / "guard.sock")
    try:
        for n, (payload, args) in enumerate(STEPS):
            got = cbhook(payload, *args, socket_path=via_op.path)
            want = cbhook(payload, *args, socket_path=older.path)
            assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr), (n, got)
        # The op carried every payload but the two past its limits: only those were read by cbhook and sent
        # as checks (the two the guard could not take, not UTF-8 and a raw control character, are not JSON).
        assert via_op.sent(HOOK) == len(STEPS) - 2
        assert via_op.sent(CHECK) == 2
        assert older.sent(CHECK) > 20
    finally:
        via_op.close()
        older.close()
    fields = ("harness", "calls", "status", "window_fill", "worst_count", "last_tool", "parent", "rule")
    ours = {a: {f: v.get(f) for f in fields} for a, v in agent_views(op_guard.socket).items()}
    theirs = {a: {f: v.get(f) for f in fields} for a, v in agent_views(own_guard.socket).items()}
    assert ours == theirs and {"s-a", "c-a", "conv-a", "s-big", "s-nan", "s-sur"} <= set(ours)


def test_a_deny_through_the_op_against_a_real_guard(guard):
    outs = [cbhook(claude_pre("s-d"), socket_path=guard.socket) for _ in range(7)]
    assert [(o.returncode, o.stdout, o.stderr) for o in outs[:6]] == [(0, b"", b"")] * 6, outs
    assert json.loads(outs[6].stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert agent_views(guard.socket)["s-d"]["calls"] == 6


# --- the frame and its reply ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [b"{}", b'{"a": "q\\"uote\\\\ back\\u00e9"}', b'{\n\t"a":\r\n 1}', '{"é": "\U0001f600"}'.encode(), b""],
)
def test_the_frame_carries_the_payloads_very_bytes(payload):
    frame = hook.hook_frame(payload, "codex", True)
    assert frame is not None and frame.endswith(b"\n") and b"\n" not in frame[:-1]
    req = decode_request(frame[:-1])
    assert isinstance(req, HookCall)
    assert (req.payload.encode(), req.harness, req.fail_closed) == (payload, "codex", True)


def test_a_payload_past_the_ops_limits_is_read_by_cbhook():
    assert hook.hook_frame(b'"' + b"y" * (HOOK_PAYLOAD_MAX - 4) + b'"', None, False) is not None  # `"` is 2 bytes
    assert hook.hook_frame(b'"' + b"y" * (HOOK_PAYLOAD_MAX - 3) + b'"', None, False) is None
    assert hook.hook_frame(b'"' + b"\\" * (HOOK_PAYLOAD_MAX // 2 + 1) + b'"', None, False) is None  # escaped: 2x
    assert hook.hook_frame(b"[" * (HOOK_BRACKETS_MAX + 1), None, False) is None


def test_the_guard_refuses_a_payload_past_the_limits_or_an_unknown_harness():
    def frame(**fields: object) -> bytes:
        return json.dumps({"op": "hook", "id": 3, **fields}).encode()

    for bad in (
        frame(payload="y" * (HOOK_PAYLOAD_MAX + 1)),
        frame(payload="[" * (HOOK_BRACKETS_MAX + 1)),
        frame(payload="{}", harness="vim"),
        frame(harness="codex"),
        frame(payload=3),
        frame(payload="{}", fail_closed="yes"),
    ):
        with pytest.raises(ProtocolError) as err:
            decode_request(bad)
        assert (err.value.code, err.value.request_id) == ("bad_request", 3), bad
    assert set(HOOK_HARNESSES) == set(hookwire.TOOL_EVENTS)


def test_the_reply_is_read_without_json():
    out, err = '{"x": "é"}\n', "cbhook: a line\n"
    line = b'{"id":1,"exit":2,"stdout":"%s","stderr":"%s"}' % (out.encode().hex().encode(), err.encode().hex().encode())
    assert hook._hook_reply(line) == (2, out.encode(), err.encode())
    assert hook._hook_reply(b'{"id":1,"exit":0,"stdout":"zz","stderr":""}') is None
    assert hook._hook_reply(b'{"id":1,"exit":0}') is None


# --- the socket checks, repeated cheaply ----------------------------------------------------------


def test_the_cheap_socket_check_passes_only_what_breaker_paths_passes(tmp_path):
    from breaker.paths import check_socket

    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    for d in (mine, shared):
        (d / "file").write_text("")
        os.symlink(d / "file", d / "link")
    import socket

    made = []
    for d in (mine, shared):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(d / "g.sock"))
        made.append(s)
    try:
        for path in [
            *(f"{d}/{n}" for d in (mine, shared) for n in ("g.sock", "file", "link", "missing")),
            f"{mine}/../mine/g.sock",
            f"{mine}//g.sock",
            "relative/g.sock",
            f"{tmp_path}/missing/g.sock",
        ]:
            if hook._socket_ok(path):
                assert check_socket(path) is None, path
        assert hook._socket_ok(f"{mine}/g.sock") and not hook._socket_ok(f"{shared}/g.sock")
    finally:
        for s in made:
            s.close()


# --- the form `cbconsole setup` writes ------------------------------------------------------------


def test_python_I_S_runs_the_hook_file_without_the_workspaces_code(guard, tmp_path):
    # An agent's workspace holding its own `breaker` package and `json.py`: never imported.
    work = tmp_path / "work"
    (work / "breaker").mkdir(parents=True)
    (work / "breaker" / "__init__.py").write_text("raise SystemExit('the workspace breaker ran')\n")
    (work / "json.py").write_text("raise SystemExit('the workspace json ran')\n")
    argv = [sys.executable, "-I", "-S", str(ROOT / "breaker" / "cbhook.py"), "--socket", str(guard.socket)]
    env = {**os.environ, "PYTHONPATH": str(work)}
    for _ in range(7):
        out = subprocess.run(
            argv, input=json.dumps(claude_pre("s-IS")).encode(), capture_output=True, cwd=work, env=env
        )
        assert out.returncode == 0 and out.stderr == b"", out
    assert json.loads(out.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert agent_views(guard.socket)["s-IS"]["calls"] == 6


def test_the_hook_file_imports_nothing_when_imported():
    out = subprocess.run(
        [sys.executable, "-c", "import breaker.cbhook, sys; print('breaker.hook' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(ROOT),
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("tmpdir", ["plain", "plain/", "unset"])
def test_a_temp_directory_holding_the_guards_directory_is_found_without_tempfile(tmp_path, tmpdir):
    base = tmp_path / "t"
    (base / f"cbconsole-{os.getuid()}").mkdir(parents=True, mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("CBCONSOLE_SOCKET", "XDG_RUNTIME_DIR", "TEMP", "TMP")}
    env["TMPDIR"] = str(base) + ("/" if tmpdir.endswith("/") else "")
    if tmpdir == "unset":
        del env["TMPDIR"]
    code = (
        "import sys; from breaker import hook; print(hook.socket_path()); print('tempfile' in sys.modules); "
        "from breaker import paths; print(paths.default_socket_path())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    ours, imported, theirs = out.stdout.splitlines()
    assert ours == theirs
    if tmpdir != "unset" or Path(f"/tmp/cbconsole-{os.getuid()}").is_dir():
        assert imported == "False"


def test_the_largest_hook_frame_stays_under_the_size_the_judge_takes():
    from breaker.judge import JUDGE_FROM

    frame = hook.hook_frame(b"y" * HOOK_PAYLOAD_MAX, "gemini-cli", True)
    assert frame is not None and len(frame) < JUDGE_FROM
