"""The dsh plugin's modules in Node 22, outside dsh: the socket path it computes, its settings, and its
edge cases against a real guard process (args JSON cannot carry, the operator's interrupt, a hung or
restarted guard, a throwing logger), driven by a stand-in dsh context. The real dsh runs are in
test_adapters_dsh.py; these reach the cases a real model run cannot provoke on demand.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from breaker.hook import plugin_dir
from breaker.paths import check_socket, default_operator_socket_path
from tests.conftest import request
from tests.guardproxy import GuardProxy, is_check
from tests.test_paths import HOSTILE, SQUATS, Squatter, expected_refusal, squatted
from tests.tiers import installed
from tests.waits import eventually

from . import harnesses

pytestmark = pytest.mark.e2e  # Node 22, from npm into the cache

PLUGIN = Path(plugin_dir())

# A stand-in for what the plugin uses of dsh: ctx.on, ctx.tools.guard, ctx.agents, ctx.logger, ctx.effect.
PRELUDE = textwrap.dedent("""
    import { apply } from %(index)s
    import * as guardModule from %(guard)s
    export const logs = []
    export function fakeCtx({ throwingLogger = false } = {}) {
      const listeners = new Map(), guards = [], known = new Map()
      const ctx = {
        listeners, guards, known,
        logger: { warn: (line) => { if (throwingLogger) throw new Error('logger broke'); logs.push(line) } },
        on(name, fn) { listeners.set(name, fn) },
        tools: { guard(fn) { guards.push(fn) } },
        agents: { get: (id) => known.get(id) },
        effect(fn) { ctx.dispose = fn() },
      }
      return ctx
    }
    export function agent(id, parent) {
      const a = { id, cancels: [], session: { header: parent ? { id, parentSession: parent } : { id } },
                  cancel(reason) { a.cancels.push(reason) } }
      return a
    }
    let n = 0
    export async function call(ctx, who, args, name = 'bash') {
      const exec = { callId: `call_${++n}`, name, arguments: args, agent: who }
      await ctx.listeners.get('tools/pre-execute')(exec, async () => ({ kind: 'allow' }))
      for (const g of ctx.guards) { const r = g(exec); if (r !== undefined) return r }
      return null
    }
    export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
    export { apply, guardModule }
""")


@pytest.fixture(scope="session")
def node() -> Path:
    return installed(harnesses.ensure_node22) / "node"


def run_node(
    node: Path, tmp_path: Path, body: str, *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run `body` (an async module body that sets `result`) with the prelude; returns `result`."""
    prelude = tmp_path / "prelude.mjs"
    prelude.write_text(
        PRELUDE
        % {"index": json.dumps((PLUGIN / "index.mjs").as_uri()), "guard": json.dumps((PLUGIN / "guard.mjs").as_uri())}
    )
    script = tmp_path / "scenario.mjs"
    script.write_text(
        "import { fakeCtx, agent, call, sleep, logs, apply, guardModule } from './prelude.mjs'\n"
        "const argv = process.argv.slice(2)\nlet result = {}\n"
        + textwrap.dedent(body)
        + "\nresult.logs = logs\nconsole.log(JSON.stringify(result))\nprocess.exit(0)\n"
    )
    out = subprocess.run([str(node), str(script), *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["stderr"] = out.stderr
    return result


def views(socket_path: Path) -> dict[str, dict[str, Any]]:
    state = request(default_operator_socket_path(socket_path), {"op": "snapshot", "id": 1})["state"]
    return {a["agent"]: a for a in state["agents"]}


# --- where the guard is --------------------------------------------------------------------------


@pytest.fixture
def tmpdirs(tmp_path) -> Iterator[dict[str, str]]:
    """Temp directories for $TMPDIR: "." a short one; "long" one whose sockets fit no platform;
    "darwin-long" one whose operator socket (`<tmp>/cbconsole-<uid>-operator/operator.sock`, the
    longer default) is 105 bytes: over macOS's 103-byte limit, within Linux's 107."""
    base = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))  # tmp_path's own length varies with the test id
    tail = len(f"/cbconsole-{os.getuid()}-operator/operator.sock")
    darwin_long = base / ("d" * (105 - tail - len(str(base)) - 1))
    long = tmp_path / ("l" * 100)
    for directory in (darwin_long, long):
        directory.mkdir()
    yield {".": str(tmp_path), "long": str(long), "darwin-long": str(darwin_long)}
    shutil.rmtree(base)


@pytest.mark.parametrize(
    ("env", "platform"),
    [
        ({"CBCONSOLE_SOCKET": "~/cb/guard.sock"}, "linux"),
        ({"CBCONSOLE_SOCKET": "/run/x/guard.sock", "XDG_RUNTIME_DIR": "."}, "linux"),
        ({"XDG_RUNTIME_DIR": "."}, "linux"),
        ({"XDG_RUNTIME_DIR": "/does/not/exist", "TMPDIR": "."}, "linux"),
        ({"TMPDIR": "."}, "linux"),
        ({"TMPDIR": "/does/not/exist", "TEMP": "."}, "linux"),
        ({}, "linux"),
        ({"TMPDIR": "long"}, "linux"),
        ({"TMPDIR": "darwin-long"}, "linux"),
        ({"TMPDIR": "darwin-long"}, "darwin"),
        ({"TMPDIR": "."}, "darwin"),
    ],
    ids=[
        "env",
        "env-over-xdg",
        "xdg",
        "xdg-missing",
        "tmpdir",
        "tmpdir-missing",
        "nothing",
        "tmpdir-too-long",
        "tmpdir-long-for-macos-on-linux",
        "tmpdir-long-for-macos-on-macos",
        "tmpdir-on-macos",
    ],
)
def test_the_plugin_computes_the_socket_path_python_does(node, tmp_path, tmpdirs, env, platform):
    # Both read their real environment (Python's tempfile does), so each runs with `env` as its own.
    env = {k: tmpdirs.get(v, v) for k, v in env.items()}
    env["HOME"] = str(tmp_path / "home")
    body = "result.path = guardModule.defaultSocketPath(process.env, argv[0])"
    got = run_node(node, tmp_path, body, platform, env=env)["path"]
    code = "import sys; from breaker.paths import default_socket_path; print(default_socket_path(platform=sys.argv[1]))"
    want = subprocess.run([sys.executable, "-c", code, platform], capture_output=True, text=True, check=True, env=env)
    assert got == want.stdout.strip()
    fallback = f"/tmp/cbconsole-{os.getuid()}/guard.sock"
    if env.get("TMPDIR") == tmpdirs["long"] or (env.get("TMPDIR") == tmpdirs["darwin-long"] and platform == "darwin"):
        assert got == fallback
    elif env.get("TMPDIR") == tmpdirs["darwin-long"]:
        assert got == f"{tmpdirs['darwin-long']}/cbconsole-{os.getuid()}/guard.sock"


def test_bad_settings_fall_back_to_their_defaults_with_a_warning_naming_the_key(node, tmp_path):
    body = """
    const warnings = []
    result.s = guardModule.readSettings({ failClosed: 'yes', guardTimeoutMs: 0, guardSocket: 7 },
                                        { CBCONSOLE_SOCKET: '/x/g.sock' }, (w) => warnings.push(w))
    result.warnings = warnings
    result.good = guardModule.readSettings({ failClosed: true, guardTimeoutMs: 60000, guardSocket: '/y.sock' }, {})
    result.none = guardModule.readSettings(null, { CBCONSOLE_SOCKET: '/z.sock' })
    """
    r = run_node(node, tmp_path, body)
    assert r["s"] == {"enabled": True, "failClosed": False, "timeoutMs": 500, "socket": "/x/g.sock"}
    assert [w.split(":")[0] for w in r["warnings"]] == ["failClosed", "guardTimeoutMs", "guardSocket"]
    assert r["good"] == {"enabled": True, "failClosed": True, "timeoutMs": 60000, "socket": "/y.sock"}
    assert r["none"]["socket"] == "/z.sock"


# --- a socket that may not be the guard's -----------------------------------------------------------


@pytest.mark.parametrize("layout", SQUATS)
def test_a_squatted_socket_is_never_connected_to_and_the_failure_mode_applies_with_one_line(node, tmp_path, layout):
    body = """
    const open = fakeCtx(), closed = fakeCtx()
    apply(open, { guardSocket: argv[0] })
    apply(closed, { guardSocket: argv[0], failClosed: true })
    const a = agent('session-squat')
    result.open = [await call(open, a, { command: 'ls' }), await call(open, a, { command: 'pwd' })]
    result.closed = [await call(closed, a, { command: 'ls' }), await call(closed, a, { command: 'pwd' })]
    result.why = guardModule.checkSocket(argv[0])
    open.dispose()
    closed.dispose()
    """
    with squatted(tmp_path / "cbconsole-0", layout) as squatter:
        why = check_socket(squatter.path)
        r = run_node(node, tmp_path, body, str(squatter.path))
    assert (squatter.connections, squatter.received) == (0, b"")
    assert why is not None and r["why"] == why  # the plugin's check says what breaker.paths says
    for part in expected_refusal(layout, squatter.path):
        assert part in why, why
    assert r["open"] == [None, None]
    assert r["closed"] == [f"Circuit breaker unavailable ({why}); tool calls are denied until it is back."] * 2
    lines = [line for line in r["logs"] if "guard unavailable" in line]
    unreachable = f"circuit-breaker: guard unavailable at {squatter.path} ({why})"
    assert lines == [  # one per connection's outage, naming the path and what is wrong with it
        f"{unreachable}: allowing tool calls (fail open) until it is back",
        f"{unreachable}: denying tool calls (fail closed) until it is back",
    ]
    assert HOSTILE not in json.dumps(r)


def test_a_squatter_taking_the_path_after_the_guard_stopped_is_not_reconnected_to(node, tmp_path, guard):
    body = """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0] })
    const a = agent('session-re')
    result.first = await call(ctx, a, { command: 'ls' })
    const { existsSync } = await import('node:fs')
    while (!existsSync(argv[1])) await sleep(20)           // the test swaps the guard for a squatter
    result.then = await call(ctx, a, { command: 'pwd' })
    ctx.dispose()
    """
    planted = tmp_path / "planted"
    outcome: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: outcome.update(run_node(node, tmp_path, body, str(guard.socket), str(planted)))
    )
    thread.start()
    eventually(lambda: "session-re" in views(guard.socket), what="the first call at the real guard")
    guard.stop()
    guard.socket.unlink(missing_ok=True)
    os.chmod(guard.socket.parent, 0o770)  # a group member could now put a socket here
    squatter = Squatter(guard.socket)
    try:
        planted.touch()
        thread.join(60)
    finally:
        squatter.close()
    assert (squatter.connections, squatter.received) == (0, b"")
    assert outcome["first"] is None and outcome["then"] is None  # allowed by the guard, then fail open
    (line,) = [line for line in outcome["logs"] if "guard unavailable" in line]
    assert f"its directory {guard.socket.parent} can be written by other users (mode 0770)" in line


# --- against a real guard --------------------------------------------------------------------------


def test_args_json_cannot_carry_are_allowed_and_counted_as_unjudgeable(node, tmp_path, guard):
    body = """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0] })
    const a = agent('session-odd')
    const cyclic = {}; cyclic.self = cyclic
    result.denials = []
    for (const args of [{ n: 10n }, cyclic, { s: 'x\\ud800y' }, { big: 'z'.repeat(9 * 1024 * 1024) }]) {
      for (let i = 0; i < 2; i++) result.denials.push(await call(ctx, a, args))
    }
    ctx.dispose()
    """
    r = run_node(node, tmp_path, body, str(guard.socket))
    assert r["denials"] == [None] * 8
    assert views(guard.socket)["session-odd"]["calls"] == 8  # counted, never matching each other


def test_an_interrupt_push_cancels_the_agent_with_a_hook_reason(node, tmp_path, guard):
    body = """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0] })
    const child = agent('7f3e2a10-0000-4000-8000-00000000000c', 'session-root')
    await call(ctx, child, { command: 'ls' })
    process.stdout.write('checked\\n')
    while (child.cancels.length === 0) await sleep(10)   // the test interrupts now
    result.cancels = child.cancels
    result.after = await call(ctx, child, { command: 'pwd' })
    ctx.dispose()
    """
    prelude_done = threading.Event()
    outcome: dict[str, Any] = {}

    def drive() -> None:
        outcome.update(run_node(node, tmp_path, body, str(guard.socket)))
        prelude_done.set()

    thread = threading.Thread(target=drive)
    thread.start()
    agent = "7f3e2a10-0000-4000-8000-00000000000c"
    eventually(lambda: agent in views(guard.socket), what="the child's first call at the guard")
    assert views(guard.socket)[agent]["parent"] == "session-root"
    reply = request(guard.operator, {"op": "interrupt", "id": 1, "agent": agent, "reason": "stuck"})
    assert reply["notified"] == 1
    thread.join(60)
    assert prelude_done.is_set()
    assert outcome["cancels"][0] == {"kind": "hook", "reason": "circuit breaker: interrupted by the operator (stuck)"}
    assert outcome["after"].startswith("Circuit breaker (interrupted)")
    assert len(outcome["cancels"]) == 2  # the denied call cancels again: a missed push cannot let it run on


def test_agent_disposed_makes_the_guard_forget_the_agent_and_calls_without_an_agent_pass(node, tmp_path, guard):
    body = """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0] })
    const a = agent('gone-soon')
    await call(ctx, a, { command: 'ls' })
    await call(ctx, agent('stays'), { command: 'ls' })
    ctx.listeners.get('agent/disposed')({ agent: a })
    result.noAgent = await call(ctx, undefined, { command: 'ls' })
    const { existsSync } = await import('node:fs')
    while (!existsSync(argv[1])) await sleep(20)   // dsh runs on: the test has seen the guard forget the agent
    ctx.dispose()
    """
    seen = tmp_path / "seen"
    outcome: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: outcome.update(run_node(node, tmp_path, body, str(guard.socket), str(seen)))
    )
    thread.start()
    try:  # the plugin's agent_end is fire and forget: the guard forgets the agent once it has read it
        eventually(lambda: set(views(guard.socket)) == {"stays"}, what="the guard to forget the disposed agent")
    finally:
        seen.touch()
        thread.join(60)
    assert outcome["noAgent"] is None
    assert set(views(guard.socket)) == {"stays"}


@pytest.mark.parametrize(("root_state", "forgotten"), [(5, True), (2, False)], ids=["dsh-exits", "row-reloaded"])
def test_when_dsh_shuts_down_the_guard_forgets_every_agent_but_a_reload_of_the_row_keeps_them(
    node, tmp_path, guard, root_state, forgotten
):
    # cordis's FiberState of the root context in the plugin's cleanup: 5 (UNLOADING) when dsh exits (a
    # headless run disposes no root agent first), 2 (ACTIVE) when only the plugin's row is reloaded.
    body = f"""
    const ctx = fakeCtx()
    ctx.root = {{ fiber: {{ state: {root_state} }} }}
    apply(ctx, {{ guardSocket: argv[0] }})
    await call(ctx, agent('session-root'), {{ command: 'ls' }})
    await call(ctx, agent('child', 'session-root'), {{ command: 'ls' }})
    ctx.dispose()
    """  # then the process exits at once, as dsh does: the frames must be out already
    run_node(node, tmp_path, body, str(guard.socket))
    operator = default_operator_socket_path(guard.socket)
    # Once the guard has seen the plugin's connection close, it has read every frame sent on it.
    eventually(lambda: not request(operator, {"op": "stats", "id": 1})["stats"]["harnesses"], what="the close seen")
    assert set(views(guard.socket)) == (set() if forgotten else {"session-root", "child"})


def test_a_hung_guard_is_asked_at_every_call_and_logged_once(node, tmp_path):
    path = tmp_path / "hung.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    received: list[bytes] = []

    def hang() -> None:  # reads every request and answers none
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(65536):
                received.append(data)

    threading.Thread(target=hang, daemon=True).start()
    body = """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0], guardTimeoutMs: 300 })
    const a = agent('session-h')
    result.denials = []
    for (let i = 0; i < 4; i++) result.denials.push(await call(ctx, a, { command: `ls ${i}` }))
    ctx.dispose()
    """
    try:
        r = run_node(node, tmp_path, body, str(path))
    finally:
        server.close()
    assert r["denials"] == [None] * 4  # fail open
    checks = b"".join(received).count(b'"op":"check"')
    assert checks == 4  # a timeout never stops the next call from asking
    unreachable = [line for line in r["logs"] if "guard unavailable" in line]
    assert len(unreachable) == 1 and "no answer within 300 ms" in unreachable[0]
    assert r["stderr"].count("guard unavailable") == 1  # dsh's logger is silent in headless: stderr too


def test_after_one_answer_came_too_late_the_next_check_is_judged_by_the_guard(node, tmp_path, guard):
    proxy = GuardProxy(guard.socket, tmp_path / "proxy" / "guard.sock")
    proxy.hold_next_reply()
    body = """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0], guardTimeoutMs: 300, failClosed: true })
    const a = agent('session-slow')
    result.denials = []
    for (let i = 0; i < 3; i++) result.denials.push(await call(ctx, a, { command: `ls ${i}` }))
    ctx.dispose()
    """
    try:
        r = run_node(node, tmp_path, body, str(proxy.path))
    finally:
        proxy.close()
    first, *rest = r["denials"]
    assert first.startswith("Circuit breaker unavailable (no answer within 300 ms")  # the late one
    assert rest == [None, None]  # judged by the guard at once, not by the failure mode
    assert views(guard.socket)["session-slow"]["calls"] == 3


def test_a_check_the_guard_answers_with_an_error_is_asked_again_as_unjudgeable_and_counted(node, tmp_path, guard):
    proxy = GuardProxy(guard.socket, tmp_path / "proxy" / "guard.sock")
    proxy.answer_next({"error": {"code": "bad_request", "message": "injected"}})
    body = """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0], failClosed: true })
    result.denial = await call(ctx, agent('session-err'), { command: 'ls' })
    ctx.dispose()
    """
    try:
        r = run_node(node, tmp_path, body, str(proxy.path))
    finally:
        proxy.close()
    assert r["denial"] is None  # allowed by the guard, not the fail-closed deny
    assert views(guard.socket)["session-err"]["calls"] == 1
    (check,) = [f for f in proxy.frames if is_check(f)]
    assert b'"args":null' in check and b'"args_unserializable":true' in check


def test_a_guard_that_comes_back_is_used_again_and_the_outage_end_is_logged(node, tmp_path, guard_factory):
    g = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    duplicateLimit: 1\n", start=False)
    body = """
    const ctx = fakeCtx({ throwingLogger: true })          // a broken dsh logger must not matter
    apply(ctx, { guardSocket: argv[0], failClosed: true })
    const a = agent('session-back')
    result.down = await call(ctx, a, { command: 'ls' })
    const { existsSync, writeFileSync } = await import('node:fs')
    writeFileSync(argv[1], 'down')
    while (!existsSync(argv[2])) await sleep(20)           // the test started the guard, and it answers
    result.first = await call(ctx, a, { command: 'ls' })
    result.second = await call(ctx, a, { command: 'ls' })
    ctx.dispose()
    """
    down, back = tmp_path / "down", tmp_path / "back"
    outcome: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: outcome.update(run_node(node, tmp_path, body, str(g.socket), str(down), str(back)))
    )
    thread.start()
    try:
        eventually(down.exists, what="the plugin's call while the guard is away")
        g.start()  # returns once the guard answers a ping
    finally:
        back.touch()
        thread.join(60)
    assert outcome["down"].startswith("Circuit breaker unavailable (")  # fail closed while it was away
    assert outcome["first"] is None and outcome["second"].startswith("Circuit breaker (duplicate)")
    assert "guard back at" in outcome["stderr"] and "1 call(s) were not checked" in outcome["stderr"]
