"""The dsh plugin (breaker/dsh_plugin) in the real dsh 0.1.0-rc.8 against a real guard process.

dsh is wired by the `cbconsole setup dsh` line docs/harnesses.md gives, run in each test's scratch home:
it writes the plugin's row and the hmr row into `$DSH_HOME/cordis.patch.yml`, and no other layer is
given to dsh (no `--patch hmr.yml`: setup's own row must be enough). The seed's story (six `echo
cbprobe4` run, the seventh and later are denied, the model reads why, one incident line names the
agent, and the guard forgets the root agent when dsh exits), a background subagent caught apart from
its parent, the operator's interrupt cancelling a looping agent, the guard being away, and the
install by `dsh plugin add` instead.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from breaker import Config, Guard
from breaker.hook import plugin_dir
from tests.conftest import GuardProcess, request
from tests.waits import eventually

from .fakemodel import FakeModel, ModelRequest, Reply, Text, ToolCall, loop_script
from .runs import Setup, dsh_sessions, read_dsh_session, run_dsh_with, run_process, run_setup
from .scenarios import DSH_SPAWN, dsh_bash, is_child, parent_child_script

pytestmark = pytest.mark.e2e

PLUGIN = Path(plugin_dir()) / "index.mjs"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def deny_reason(tool: str = "bash", limit: int = 6) -> str:
    """The guard's deny text for the call after `limit` identical ones, from the engine itself."""
    guard = Guard(Config(duplicate_limit=limit))
    for _ in range(limit):
        guard.check("a", tool, {"command": "echo cbprobe4"})
    verdict = guard.check("a", tool, {"command": "echo cbprobe4"})
    assert not verdict.allowed
    return verdict.reason


def plugin_guard(guard_factory, tmp_path: Path, **config: Any) -> GuardProcess:  # type: ignore[no-untyped-def]
    """A guard whose own patch layer configures the row (an incident log, and `config`); dsh is wired to
    its socket by `setup_dsh(g)`."""
    values = {"incidentLog": str(tmp_path / "incidents.jsonl"), **config}
    return guard_factory(patch_text=json.dumps([{"id": "circuit-breaker", "config": values}], indent=1) + "\n")


def setup_dsh(socket: Path | None, *extra: str) -> Setup:
    """`cbconsole setup dsh` as docs/harnesses.md gives it, for the guard at `socket` (None: the default)."""
    return Setup.from_docs("dsh", socket, *extra)


def incidents(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "incidents.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def agents(g: GuardProcess) -> dict[str, dict[str, Any]]:
    state = request(g.operator, {"op": "snapshot", "id": 1})["state"]
    return {a["agent"]: a for a in state["agents"]}


def results_after_each_call(requests: list[ModelRequest]) -> list[str]:
    by_step: dict[int, str] = {}
    for r in requests:
        if r.prior_calls and r.tool_results:
            by_step.setdefault(r.prior_calls, r.tool_results[-1])
    return [by_step[k] for k in sorted(by_step)]


# --- the seed's story ------------------------------------------------------------------------------


def test_dsh_after_setup_six_echo_calls_run_the_seventh_is_denied_the_model_reads_why_and_the_root_is_forgotten(
    dsh, guard_factory, tmp_path, timed
):
    g = plugin_guard(guard_factory, tmp_path)
    during: dict[str, Any] = {}
    inner = loop_script(10)  # `echo cbprobe4`, a new `description` each time

    def script(req: ModelRequest) -> Reply:
        if req.prior_calls == 10 and not during:  # the last turn: what does the guard hold now?
            during.update(agents(g))
        return inner(req)

    with FakeModel(script) as fm:
        run = timed(run_dsh_with(dsh, fm, tmp_path / "dsh", setup=setup_dsh(g.socket)))
    assert run.returncode == 0, run.describe()
    assert "--patch" not in run.argv  # setup's rows in $DSH_HOME/cordis.patch.yml were all dsh needed
    assert "Done: ran the probe 10 times." in run.stdout

    denied = f"Error: {deny_reason()}"
    assert results_after_each_call(fm.agentic()) == ["cbprobe4\n"] * 6 + [denied] * 4, run.describe()

    (agent,) = dsh_sessions(run)  # the session directory is named by the agent's id
    assert re.fullmatch(f"session-{UUID}", agent)
    (line,) = incidents(tmp_path)
    assert {k: line[k] for k in ("kind", "tool", "count", "limit", "agent")} == {
        "kind": "duplicate",
        "tool": "bash",
        "count": 6,
        "limit": 6,
        "agent": agent,
    }
    seen = during[agent]
    assert (seen["harness"], seen["parent"], seen["calls"], seen["status"]) == ("dsh", None, 6, "duplicate")
    # dsh never disposes its root agent before a headless run exits; the plugin tells the guard as dsh unloads.
    assert agent not in agents(g)
    # On disk, dsh recorded the four denials as error results of the calls themselves.
    records = read_dsh_session(run.paths["sessions"].glob(f"*/{agent}/session.jsonl*").__next__())
    errors = [r for r in records if r["type"] == "tool/result" and r["data"]["message"]["content"][0]["isError"]]
    assert len(errors) == 4


def test_dsh_background_subagent_loop_is_caught_apart_from_its_parent(dsh, guard_factory, tmp_path, timed):
    g = plugin_guard(guard_factory, tmp_path)
    seen_during_run: dict[str, Any] = {}
    child_done = threading.Event()

    def child_ended() -> bool:
        return child_done.is_set()

    inner = parent_child_script(
        spawn=DSH_SPAWN,
        parent_call=dsh_bash("parent"),
        child_call=dsh_bash("child"),
        parent_calls=4,
        child_calls=9,
        child_ended=child_ended,
    )

    def script(req: ModelRequest) -> Reply:
        if is_child(req) and req.prior_calls == 9:  # the child's last turn: what does the guard hold now?
            seen_during_run.update(agents(g))
            child_done.set()
        return inner(req)

    with FakeModel(script) as fm:
        run = timed(run_dsh_with(dsh, fm, tmp_path / "dsh", setup=setup_dsh(g.socket)))
    assert run.returncode == 0, run.describe()
    assert "parent done" in run.stdout

    sessions = dsh_sessions(run)
    (root,) = [a for a in sessions if a.startswith("session-")]
    (child,) = [a for a in sessions if a != root]
    assert re.fullmatch(UUID, child)
    # Keyed apart: the parent's five identical calls and the child's first six all ran; the child's
    # 7th is its own 7th. Counted together, 11 identical calls would have tripped the parent too.
    denied = f"Error: {deny_reason()}"
    child_results = results_after_each_call([r for r in fm.agentic() if is_child(r)])
    assert child_results == ["cbprobe4\n"] * 6 + [denied] * 3, run.describe()
    parent_results = results_after_each_call([r for r in fm.agentic() if not is_child(r)])
    assert [r for r in parent_results if r.startswith("Error")] == [], run.describe()
    assert [(i["agent"], i["kind"]) for i in incidents(tmp_path)] == [(child, "duplicate")]
    # The guard knew the child's parent while it ran; it forgot the child when dsh disposed it, and the
    # root (spawn + 5 echoes) when dsh exited.
    assert seen_during_run[child]["parent"] == root and seen_during_run[child]["calls"] == 6
    assert seen_during_run[root]["parent"] is None
    assert agents(g) == {}


# --- the operator's interrupt ---------------------------------------------------------------------


def with_interrupt(inner, g: GuardProcess, *, child: bool, at_step: int, reason: str, replies: list):  # type: ignore[no-untyped-def]
    """Wrap a script: when the root's (or the child's) conversation has made `at_step` calls, the
    operator interrupts that agent as the console does, then the model holds its answer until dsh has
    gone (the cancel ended the run and its plugin's connection; the script fails after 60 s): the guard's
    push must cancel the agent while its model request is in flight."""

    def script(req: ModelRequest) -> Reply:
        if is_child(req) == child and req.prior_calls == at_step and not replies:
            (agent,) = [a for a, view in agents(g).items() if (view["parent"] is not None) == child]
            replies.append((agent, request(g.operator, {"op": "interrupt", "id": 9, "agent": agent, "reason": reason})))
            eventually(
                lambda: not request(g.operator, {"op": "stats", "id": 8})["stats"]["harnesses"],
                timeout=60,
                what="dsh gone",
            )
        return inner(req)

    return script


def test_dsh_operator_interrupt_cancels_a_looping_root_agent_and_its_later_calls_are_denied(
    dsh, guard_factory, tmp_path, timed
):
    g = plugin_guard(guard_factory, tmp_path)
    replies: list = []
    script = with_interrupt(loop_script(50), g, child=False, at_step=3, reason="looping on echo", replies=replies)
    with FakeModel(script) as fm:
        run = timed(run_dsh_with(dsh, fm, tmp_path / "dsh", setup=setup_dsh(g.socket)))
    (agent, reply), *_ = replies
    assert reply == {"id": 9, "ok": True, "notified": 1}  # the plugin's connection was told
    # Headless dsh reports a turn that did not complete: nothing printed, exit 1.
    assert run.returncode == 1 and run.stdout.strip() == "", run.describe()
    assert len(fm.agentic()) == 4, run.describe()  # 3 calls, then the request the cancel cut short
    assert f"circuit-breaker: cancelling agent {agent} on the operator's interrupt (looping on echo)" in run.stderr
    records = read_dsh_session(dsh_sessions(run)[agent])
    assert [r["data"]["step"] for r in records if r["type"] == "tool/call"] == [1, 2, 3]
    assert [(r["type"], r["data"]) for r in records[-2:]] == [
        ("step/start", {"turn": 1, "step": 4}),
        ("step/end", {"turn": 1, "step": 4}),
    ]  # the 4th step was cut short: no answer, no call; headless dsh exits without closing the turn
    # dsh exited and the plugin told the guard: the agent's counts are gone; the operator's interrupt
    # outlives it (only the operator lifts one), so it is still listed, as interrupted, with no calls
    view = agents(g)[agent]
    assert (view["calls"], view["status"]) == (0, "interrupted")
    later = request(g.socket, {"op": "check", "id": 2, "agent": agent, "tool": "bash", "args": {"command": "ls"}})
    assert (later["decision"], later["kind"]) == ("deny", "interrupted")


def test_dsh_operator_interrupt_during_a_subagents_tool_call_stops_it_and_the_parent_is_told(
    dsh, guard_factory, tmp_path, timed
):
    g = plugin_guard(guard_factory, tmp_path)
    replies: list = []
    child_call, parent_call = dsh_bash("child"), dsh_bash("parent", "echo parent")

    def interrupt_soon() -> None:
        def child_in_its_sleep() -> bool:  # the guard allowed its 4th call, `sleep 5`: it runs now
            return any(view["parent"] is not None and view["calls"] >= 4 for view in agents(g).values())

        eventually(child_in_its_sleep, timeout=60, what="the child in its sleep")
        (child,) = [a for a, view in agents(g).items() if view["parent"] is not None]
        replies.append(
            (child, request(g.operator, {"op": "interrupt", "id": 9, "agent": child, "reason": "stuck child"}))
        )

    def script(req: ModelRequest) -> Reply:
        if is_child(req):
            if req.prior_calls == 3:
                threading.Thread(target=interrupt_soon, daemon=True).start()
                return ToolCall("bash", {"command": "sleep 5; echo cbprobe4", "description": "Run child step 4"})
            return child_call(req.prior_calls + 1)  # loops until stopped
        if req.prior_calls == 0:
            return DSH_SPAWN
        if (replies and f"Background subagent {replies[0][0]} " in req.raw) or req.prior_calls > 40:
            return Text("parent done")  # the parent heard how its child ended
        time.sleep(0.2)  # paces the parent's loop while the child runs (at most 40 calls): not a wait for anything
        return parent_call(req.prior_calls)

    with FakeModel(script) as fm:
        run = timed(run_dsh_with(dsh, fm, tmp_path / "dsh", setup=setup_dsh(g.socket)))
    (child, reply), *_ = replies
    assert reply["notified"] == 1  # the plugin's connection was told
    assert run.returncode == 0 and "parent done" in run.stdout, run.describe()
    assert f"circuit-breaker: cancelling agent {child} on the operator's interrupt (stuck child)" in run.stderr
    assert len([r for r in fm.agentic() if is_child(r)]) == 4, run.describe()  # nothing after the cancel
    # dsh ends the child's turn as aborted by our hook, and tells the parent in its own words.
    turn_end = [r for r in read_dsh_session(dsh_sessions(run)[child]) if r["type"] == "turn/end"][-1]
    assert turn_end["data"]["reason"] == {
        "kind": "aborted",
        "reason": {"kind": "hook", "reason": "circuit breaker: interrupted by the operator (stuck child)"},
    }
    assert fm.containing(f"Background subagent {child} was stopped before it finished"), run.describe()
    # dsh disposed the child and the plugin told the guard: its counts are gone; the operator's interrupt
    # outlives it (only the operator lifts one), so it is still listed, as interrupted, with no calls
    assert (agents(g)[child]["status"], agents(g)[child]["calls"]) == ("interrupted", 0)


# --- the guard away ------------------------------------------------------------------------------


def test_dsh_guard_unavailable_fails_open_with_one_log_line(dsh, tmp_path, timed):
    with FakeModel(loop_script(4)) as fm:
        run = timed(run_dsh_with(dsh, fm, tmp_path / "dsh", setup=setup_dsh(tmp_path / "nobody" / "guard.sock")))
    assert run.returncode == 0, run.describe()
    assert results_after_each_call(fm.agentic()) == ["cbprobe4\n"] * 4
    lines = [line for line in (run.stdout + run.stderr).splitlines() if "guard unavailable" in line]
    assert len(lines) == 1, run.describe()
    assert "allowing tool calls (fail open)" in lines[0] and str(tmp_path / "nobody" / "guard.sock") in lines[0]


def test_dsh_guard_unavailable_with_fail_closed_denies_every_call(dsh, tmp_path, timed):
    absent = setup_dsh(tmp_path / "nobody" / "guard.sock", "--fail-closed")
    with FakeModel(loop_script(3)) as fm:
        run = timed(run_dsh_with(dsh, fm, tmp_path / "dsh", setup=absent))
    assert run.returncode == 0, run.describe()
    results = results_after_each_call(fm.agentic())
    assert len(results) == 3 and all(r.startswith("Error: Circuit breaker unavailable (") for r in results), results
    assert "denying tool calls (fail closed)" in run.stdout + run.stderr


def test_dsh_plugin_finds_the_guard_through_cbconsole_socket(dsh, guard_factory, tmp_path, timed):
    g = guard_factory(patch_text="- id: circuit-breaker\n  config:\n    duplicateLimit: 2\n")
    env = {"CBCONSOLE_SOCKET": str(g.socket)}  # setup without --socket: the row has no config, the defaults
    with FakeModel(loop_script(3)) as fm:
        run = timed(run_dsh_with(dsh, fm, tmp_path / "dsh", setup=setup_dsh(None), env=env))
    assert run.returncode == 0, run.describe()
    assert results_after_each_call(fm.agentic()) == ["cbprobe4\n"] * 2 + [f"Error: {deny_reason(limit=2)}"]


# --- installed as a bundle by `dsh plugin add` ----------------------------------------------------


def test_dsh_plugin_add_then_setup_on_that_profile_adds_the_hmr_row_and_the_users_appended_row_works(
    dsh, pnpm, guard_factory, tmp_path, timed
):
    import subprocess
    import sys

    path = subprocess.run(
        [sys.executable, "-m", "breaker.hook", "--dsh-plugin-path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert Path(path) == PLUGIN.parent
    scratch = tmp_path / "dsh"
    dsh_home = scratch / "dsh-home"
    dsh_home.mkdir(parents=True)
    env = dsh.env({"DSH_HOME": str(dsh_home), "HOME": str(tmp_path), "TMPDIR": str(tmp_path)})
    env["PATH"] = f"{pnpm.exe.parent}:{env['PATH']}"
    code, out, err, _ = run_process(
        [str(dsh.exe), "plugin", "--profile", "headless", "add", path], env=env, cwd=tmp_path, out_dir=tmp_path
    )
    assert code == 0, out + err
    profile = dsh_home / "profiles" / "headless"
    manifest = json.loads((profile / "package.json").read_text())
    assert manifest["dsh"]["profile"]["bundles"][-1] == "cbconsole-circuit-breaker"

    layer = profile / "cordis.patch.yml"
    assert layer.read_text().strip().endswith("\n[]")  # what `dsh plugin add` leaves for the user's rows

    # Setup on that profile adds only the hmr row (the bundle inserts the plugin's), as a block list
    # instead of the `[]`: the user's own row can then simply be appended, as a user would.
    said = run_setup(setup_dsh(None, "--profile", "headless"), tmp_path, env)
    assert "already loads the plugin as a bundle" in said and "added the `hmr` row" in said, said
    g = guard_factory(start=False)
    with layer.open("a") as f:
        f.write(f"- id: circuit-breaker\n  config:\n    duplicateLimit: 2\n    guardSocket: {g.socket}\n")
    g.home = dsh_home
    g.args = ["--profile", "headless"]
    g.start()
    assert request(g.operator, {"op": "config_get", "id": 1})["config"]["source"] == str(layer)
    with FakeModel(loop_script(3)) as fm:
        run = timed(run_dsh_with(dsh, fm, scratch, hmr=False))  # the profile layer's hmr row is enough
    assert run.returncode == 0, run.describe()
    assert results_after_each_call(fm.agentic()) == ["cbprobe4\n"] * 2 + [f"Error: {deny_reason(limit=2)}"]
    assert not (PLUGIN.parent / "node_modules").exists()  # pnpm linked the directory, wrote nothing into it
