"""The operator's interrupt command (`interruptCommand`): for harnesses with no stop signal of their own,
the guard runs an argv (never a shell string) with `{agent}` and `{reason}` filled in, bounded in time
and output, logs how it ended, and is never affected by it."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

import pytest

from breaker import Config
from breaker.client import AsyncGuardClient
from breaker.protocol import Interrupt
from breaker.server import GuardServer, fill_command
from tests.conftest import request
from tests.waits import eventually, eventually_async


def layer(argv: list[str]) -> str:
    return json.dumps([{"id": "circuit-breaker", "config": {"interruptCommand": argv}}])


def test_placeholders_are_filled_in_one_pass_and_each_element_stays_one_argument():
    argv = fill_command(("kill", "-s", "{reason}", "{agent}", "x{agent}y{reason}"), "a b;c", "{agent} $(id)")
    assert argv == ["kill", "-s", "{agent} $(id)", "a b;c", "xa b;cy{agent} $(id)"]


def test_the_command_gets_the_agent_and_reason_as_literal_arguments_never_through_a_shell(guard_factory, tmp_path):
    out, pwned = tmp_path / "argv.json", tmp_path / "pwned"
    script = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"
    g = guard_factory(patch_text=layer([sys.executable, "-c", script, str(out), "{agent}", "--why={reason}"]))
    agent, reason = f"$(touch {pwned}); `touch {pwned}`", "looping {agent} | touch x"
    reply = request(g.operator, {"op": "interrupt", "id": 1, "agent": agent, "reason": reason})
    assert reply["ok"] is True
    # the file appears empty when the command opens it, and gets its one line (one write) when it ends
    written = eventually(lambda: out.exists() and out.read_text(), what="the command's output written")
    assert json.loads(written) == [agent, f"--why={reason}"]
    assert not pwned.exists()
    eventually(lambda: "interrupt command for agent" in g.log.read_text(), what="the command logged")
    assert "exited 0" in g.log.read_text()


def test_the_exit_status_and_output_are_logged(guard_factory):
    g = guard_factory(patch_text=layer(["/bin/sh", "-c", 'echo "stopping $1"; exit 3', "sh", "{agent}"]))
    request(g.operator, {"op": "interrupt", "id": 1, "agent": "agent-7"})
    eventually(lambda: "exited 3" in g.log.read_text(), what="the command's exit 3 logged")
    assert "interrupt command for agent 'agent-7' exited 3; output: 'stopping agent-7'" in g.log.read_text()


def test_a_command_that_cannot_start_is_logged_and_the_guard_goes_on(guard_factory, tmp_path):
    g = guard_factory(patch_text=layer([str(tmp_path / "no-such-program"), "{agent}"]))
    assert request(g.operator, {"op": "interrupt", "id": 1, "agent": "a1", "reason": "r"})["ok"] is True
    eventually(lambda: "could not start" in g.log.read_text(), what="the failed start logged")
    denied = request(g.socket, {"op": "check", "id": 2, "agent": "a1", "tool": "bash", "args": {}})
    assert (denied["decision"], denied["kind"]) == ("deny", "interrupted")
    assert request(g.socket, {"op": "check", "id": 3, "agent": "a2", "tool": "bash", "args": {}})["decision"] == "allow"


def test_output_beyond_4_kib_is_read_and_dropped_not_kept(guard_factory):
    g = guard_factory(patch_text=layer([sys.executable, "-c", "print('z' * 2_000_000)"]))
    request(g.operator, {"op": "interrupt", "id": 1, "agent": "a1"})
    eventually(lambda: "exited 0" in g.log.read_text(), what="the command's exit 0 logged")
    line = next(x for x in g.log.read_text().splitlines() if "interrupt command" in x)
    assert line.endswith("[...]'") and len(line) < 5000


def test_without_a_command_an_interrupt_runs_nothing(tmp_path):
    socket_path = tmp_path / "run" / "guard.sock"
    socket_path.parent.mkdir(mode=0o700)
    release = tmp_path / "release"

    async def commands_started_by_an_interrupt(config: Config) -> int:
        release.unlink(missing_ok=True)
        server = GuardServer(socket_path, config=config)
        await server.start()
        try:
            async with AsyncGuardClient(server.operator_path, timeout=5) as client:
                reply = await client.request(Interrupt(agent="a1", reason="r"))
                assert reply.notified == 0
                running = server.commands.in_flight  # a command's task is made before the reply is sent
            release.touch()
            await eventually_async(lambda: not server.commands.in_flight, what="the command to end")
            return running
        finally:
            await server.stop()

    assert asyncio.run(commands_started_by_an_interrupt(Config())) == 0
    # The same observation sees a command when there is one (it runs until the test releases it).
    waits = f"import pathlib, time\nwhile not pathlib.Path({str(release)!r}).exists(): time.sleep(0.02)"
    assert asyncio.run(commands_started_by_an_interrupt(Config(interrupt_command=(sys.executable, "-c", waits)))) == 1


def test_a_command_that_outlives_its_timeout_is_killed_with_its_children(tmp_path, caplog):
    pids = tmp_path / "pids"
    # The command starts a grandchild and both sleep: the whole process group must go.
    script = (
        "import os, subprocess, sys, time;"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}');"
        "time.sleep(60)"
    )
    socket_path = tmp_path / "run" / "guard.sock"
    socket_path.parent.mkdir(mode=0o700)

    async def scenario() -> None:
        server = GuardServer(socket_path, config=Config(interrupt_command=(sys.executable, "-c", script)))
        server.commands.timeout = 0.5
        await server.start()
        try:
            async with AsyncGuardClient(server.operator_path, timeout=5) as client:
                await client.request(Interrupt(agent="a1", reason="r"))
                decision = await client.check("a1", "bash", {})  # the guard answers while it runs
                assert decision.kind == "interrupted"
            await eventually_async(lambda: not server.commands.in_flight, what="the command killed at its timeout")
        finally:
            await server.stop()

    with caplog.at_level(logging.INFO, logger="cbconsole.guard"):
        asyncio.run(scenario())
    assert "timed out after 0.5 s and was killed" in caplog.text
    for pid in map(int, pids.read_text().split()):
        eventually(lambda pid=pid: not _alive(pid), what=f"pid {pid} to be gone")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_the_program_is_never_taken_from_the_agent_or_the_reason():
    with pytest.raises(ValueError, match=r"interruptCommand: .* which holds a placeholder"):
        Config.from_mapping({"interruptCommand": ["/usr/bin/{agent}", "x"]})
    assert fill_command(("{agent}", "{agent}"), "/tmp/evil", "") == ["{agent}", "/tmp/evil"]


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", "kill {agent}"],
        ["/bin/bash", "-lc", "echo {reason}"],
        ["sh", "-e", "-c", "{agent}"],
        ["env", "sh", "-c", "tmux kill-pane -t {agent}"],
        ["sudo", "-u", "me", "bash", "-c", "{agent}"],
        ["bash", "{agent}"],  # the script's path is code too
        ["/usr/bin/python3.11", "-c", "import os; os.system('{agent}')"],
        ["perl", "-p", "-e", "{agent}"],
        ["ssh", "host", "pkill -f {agent}"],  # ssh joins its arguments into a shell command line
        ["xargs", "kill", "{agent}"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_a_placeholder_in_an_interpreters_code_is_refused(argv):
    """`[sh, -c, "... {agent} ..."]` spliced a harness-chosen id into shell code: `$(...)` in an id ran."""
    with pytest.raises(ValueError, match=r"interruptCommand: .*which would run them as code.*CBCONSOLE_AGENT"):
        Config.from_mapping({"interruptCommand": argv})


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", 'kill "$1"', "sh", "{agent}"],  # the id as a positional argument: data, not code
        ["python3", "-c", "import sys; print(sys.argv[1])", "{agent}", "--why={reason}"],
        ["tmux", "send-keys", "-t", "{agent}", "C-c"],
        ["sh", "-c", 'echo "$CBCONSOLE_AGENT"'],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_an_interpreter_may_get_the_values_as_arguments_after_its_code(argv):
    assert Config.from_mapping({"interruptCommand": argv}).interrupt_command == tuple(argv)


def test_the_command_gets_the_agent_and_reason_in_its_environment(guard_factory, tmp_path):
    out, pwned = tmp_path / "env.txt", tmp_path / "pwned"
    script = f'printf "%s\\n%s" "$CBCONSOLE_AGENT" "$CBCONSOLE_REASON" > {out}'
    g = guard_factory(patch_text=layer(["/bin/sh", "-c", script]))
    agent, reason = f"$(touch {pwned})", "`touch {pwned}`; {agent}"
    assert request(g.operator, {"op": "interrupt", "id": 1, "agent": agent, "reason": reason})["ok"] is True
    eventually(lambda: out.exists() and out.read_text().count("\n") == 1, what="the command's two lines")
    assert out.read_text() == f"{agent}\n{reason}"
    assert not pwned.exists()


def test_a_shell_template_in_the_patch_file_is_refused_and_the_last_good_config_kept(guard_factory, tmp_path):
    pwned = tmp_path / "pwned"
    g = guard_factory(patch_text=layer(["sh", "-c", "echo {agent}"]))
    eventually(lambda: "as code" in g.log.read_text(), what="the refusal logged")
    values = request(g.operator, {"op": "config_get", "id": 1})["config"]["values"]
    assert values["interruptCommand"] == []
    request(g.operator, {"op": "interrupt", "id": 2, "agent": f"$(touch {pwned})"})
    denied = request(g.socket, {"op": "check", "id": 3, "agent": f"$(touch {pwned})", "tool": "bash", "args": {}})
    assert denied["kind"] == "interrupted" and not pwned.exists()
