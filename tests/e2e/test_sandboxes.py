"""The harnesses' own sandboxes keep a model's shell commands away from the operator socket, while the
harness's hooks (which run outside the sandbox, as the harness process) still reach the guard socket.

Two stand-in listeners answer on Unix sockets laid out like cbconsole's (`<run>/cbconsole/guard.sock`
and `<run>/cbconsole-operator/operator.sock`, each directory 0700). The fake model asks for one shell
call that tries to connect to both; a PreToolUse command hook tries the same from the harness side.
Both write one JSON line per socket (the hook to a file, the tool call to its output, which the model
reads back). See docs/sandboxes.md for what each setting does and why.

Codex brings its own bubblewrap (`codex-resources/bwrap`, used when none is on PATH); Claude Code's
sandbox needs the Debian packages `bubblewrap` and `socat` (the test fails, naming them, when absent).
Both need user namespaces. 1-2 s a Codex run, 2-5 s a Claude run here.
"""

from __future__ import annotations

import errno
import json
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.tiers import need_tools

from .fakemodel import FakeModel, ToolCall
from .harnesses import Harness
from .runs import Run, _home_env, _scratch, run_process

pytestmark = pytest.mark.e2e

MARK = "CBSBX "

PROBE = r'''
"""Connect to each Unix socket on argv; print (or append to --out FILE) one JSON line per socket."""
import json, socket, sys
args = sys.argv[1:]
out = None
if args[:1] == ["--out"]:
    out, args = args[1], args[2:]
lines = []
for path in args:
    rec = {"path": path, "ok": False, "stage": "socket", "errno": None, "reply": None}
    try:
        s = socket.socket(socket.AF_UNIX)
        rec["stage"] = "connect"
        s.settimeout(5)
        s.connect(path)
        rec["reply"] = s.recv(64).decode()
        rec["ok"] = True
        s.close()
    except OSError as e:
        rec["errno"] = e.errno
    lines.append("CBSBX " + json.dumps(rec))
text = "\n".join(lines) + "\n"
if out:
    open(out, "a").write(text)
else:
    sys.stdout.write(text)
'''


@dataclass
class Sockets:
    """Two listening stand-ins: the guard's socket and the operator's, in sibling 0700 directories."""

    run_dir: Path
    guard: Path
    operator: Path

    @property
    def operator_dir(self) -> Path:
        return self.operator.parent


def _serve(sock: socket.socket, answer: bytes, stop: threading.Event) -> None:
    sock.settimeout(0.1)
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        with conn:
            conn.sendall(answer)


@pytest.fixture
def sockets() -> Iterator[Sockets]:
    # A short directory: a Unix socket path must stay under 108 bytes, and pytest's tmp_path is long.
    run_dir = Path(tempfile.mkdtemp(prefix="cbsbx-", dir="/tmp"))
    guard_dir, operator_dir = run_dir / "cbconsole", run_dir / "cbconsole-operator"
    stop = threading.Event()
    listeners: list[socket.socket] = []
    threads: list[threading.Thread] = []
    try:
        for directory, name, answer in (
            (guard_dir, "guard.sock", b"guard"),
            (operator_dir, "operator.sock", b"operator"),
        ):
            directory.mkdir(mode=0o700)
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(str(directory / name))
            sock.listen(8)
            listeners.append(sock)
            thread = threading.Thread(target=_serve, args=(sock, answer, stop), daemon=True)
            thread.start()
            threads.append(thread)
        yield Sockets(run_dir, guard_dir / "guard.sock", operator_dir / "operator.sock")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=2)
        for sock in listeners:
            sock.close()
        shutil.rmtree(run_dir, ignore_errors=True)


@dataclass
class Probe:
    """One sandbox run: what the tool call and the hook each reached, keyed by socket path."""

    run: Run
    results: list[str]  # the tool results the model read back, as text
    tool: dict[str, dict[str, Any]]
    hook: dict[str, dict[str, Any]]


def _records(text: str) -> dict[str, dict[str, Any]]:
    out = {}
    for line in text.splitlines():
        if MARK in line:
            rec = json.loads(line[line.index(MARK) + len(MARK) :])
            out[rec["path"]] = rec
    return out


def _probe_commands(scratch: Path, sockets: Sockets) -> tuple[str, str, Path]:
    """The tool call's command line, the hook's command line, and the hook's output file."""
    script = scratch / "probe.py"
    script.write_text(PROBE)
    hook_out = scratch / "hook-probe.jsonl"
    targets = f"{sockets.guard} {sockets.operator}"
    return (
        f"{sys.executable} {script} {targets}",
        f"{sys.executable} {script} --out {hook_out} {targets}",
        hook_out,
    )


def _finish(run: Run, fake: FakeModel, hook_out: Path, *, complete: bool = True) -> Probe:
    """Parse both probes; `complete`: the tool call and the hook each reported on both sockets."""
    assert run.returncode == 0, run.describe()
    results = fake.tool_results()
    assert results, f"the model never read a tool result\n{run.describe()}"
    tool = _records("\n".join(results))
    hook = _records(hook_out.read_text()) if hook_out.exists() else {}
    if complete:
        assert len(tool) == 2, f"tool output: {results!r}\n{run.describe()}"
        assert len(hook) == 2, f"hook output: {hook!r}\n{run.describe()}"
    return Probe(run, results, tool, hook)


def _assert_hook_reaches_both(probe: Probe, sockets: Sockets) -> None:
    # The hook runs as the harness process, outside the sandbox: both sockets answer.
    assert probe.hook[str(sockets.guard)]["reply"] == "guard", probe.hook
    assert probe.hook[str(sockets.operator)]["reply"] == "operator", probe.hook


# --- Codex ----------------------------------------------------------------------------------------


def _run_codex(
    harness: Harness,
    scratch: Path,
    sockets: Sockets,
    sandbox_toml: str,
    extra_args: dict[str, Any] | None = None,
    *,
    complete: bool = True,
) -> Probe:
    """`codex exec` with `sandbox_toml` in config.toml; one exec_command call and a PreToolUse hook."""
    dirs = _scratch(scratch)
    command, hook_command, hook_out = _probe_commands(scratch, sockets)
    codex_home = scratch / "codex-home"
    codex_home.mkdir(exist_ok=True)
    hook = {"type": "command", "command": hook_command, "timeout": 30}
    (codex_home / "hooks.json").write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}))
    with FakeModel([ToolCall("exec_command", {"cmd": command, **(extra_args or {})})]) as fake:
        (codex_home / "config.toml").write_text(
            'model = "fake-model"\nmodel_provider = "fake"\napproval_policy = "never"\n'
            f"{sandbox_toml}\n\n"
            '[model_providers.fake]\nname = "fake"\n'
            f'base_url = "{fake.url}/v1"\nwire_api = "responses"\nenv_key = "CB_FAKE_MODEL_KEY"\n'
        )
        argv = [str(harness.exe), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-hook-trust", "probe"]
        env = harness.env({**_home_env(dirs), "CODEX_HOME": str(codex_home), "CB_FAKE_MODEL_KEY": "dummy"})
        code, out, err, secs = run_process(argv, env=env, cwd=dirs["work"], out_dir=scratch, timeout=60)
        run = Run("codex", argv, scratch, dirs["work"], code, out, err, secs, fake, hook_out)
        return _finish(run, fake, hook_out, complete=complete)


def test_codex_workspace_write_denies_every_unix_connect_but_the_hook_reaches_both(codex, tmp_path, sockets, timed):
    probe = _run_codex(codex, tmp_path, sockets, 'sandbox_mode = "workspace-write"')
    timed(probe.run)
    for path in (sockets.guard, sockets.operator):  # seccomp: connect() -> EPERM, whatever the path
        rec = probe.tool[str(path)]
        assert (rec["ok"], rec["stage"], rec["errno"]) == (False, "connect", errno.EPERM), rec
    _assert_hook_reaches_both(probe, sockets)


def test_codex_network_access_opens_every_unix_socket_to_the_tool_call(codex, tmp_path, sockets, timed):
    # The documented hole: with network access the seccomp filter is gone and nothing checks the path.
    toml = 'sandbox_mode = "workspace-write"\n\n[sandbox_workspace_write]\nnetwork_access = true'
    probe = _run_codex(codex, tmp_path, sockets, toml)
    timed(probe.run)
    assert probe.tool[str(sockets.operator)]["reply"] == "operator", probe.tool
    assert probe.tool[str(sockets.guard)]["reply"] == "guard", probe.tool


def test_codex_permission_profile_masks_the_operator_directory_even_with_network(codex, tmp_path, sockets, timed):
    toml = (
        'default_permissions = "cbconsole"\n\n'
        '[permissions.cbconsole]\nextends = ":workspace"\n\n'
        f'[permissions.cbconsole.filesystem]\n"{sockets.operator_dir}" = "none"\n\n'
        "[permissions.cbconsole.network]\nenabled = true"
    )
    probe = _run_codex(codex, tmp_path, sockets, toml)
    timed(probe.run)
    assert probe.tool[str(sockets.guard)]["reply"] == "guard", probe.tool  # network on: other sockets answer
    op = probe.tool[str(sockets.operator)]  # an empty mode-000 tmpfs over the directory
    assert (op["ok"], op["stage"], op["errno"]) == (False, "connect", errno.EACCES), op
    _assert_hook_reaches_both(probe, sockets)


def test_codex_exec_cannot_escalate_out_of_the_sandbox(codex, tmp_path, sockets, timed):
    # `codex exec` runs with approval "never": a call asking for escalation is refused, not run.
    escalate = {"sandbox_permissions": "require_escalated", "justification": "need the operator socket"}
    probe = _run_codex(codex, tmp_path, sockets, 'sandbox_mode = "workspace-write"', escalate, complete=False)
    timed(probe.run)
    assert probe.tool == {}, probe.results  # the command never ran
    assert "cannot ask for escalated permissions" in probe.results[0], probe.results
    _assert_hook_reaches_both(probe, sockets)  # the hook still ran first


# --- Claude Code ----------------------------------------------------------------------------------


@pytest.fixture
def claude_sandbox_deps() -> None:
    """Claude Code's Linux sandbox needs bubblewrap and socat on PATH (Codex brings its own bubblewrap)."""
    need_tools(["bwrap", "socat"])


BASE_SANDBOX = {
    "enabled": True,
    "failIfUnavailable": True,
    "allowUnsandboxedCommands": False,
    "autoAllowBashIfSandboxed": True,
}


def _run_claude(
    harness: Harness,
    scratch: Path,
    sockets: Sockets,
    sandbox: dict[str, Any],
    extra_input: dict[str, Any] | None = None,
) -> Probe:
    """`claude -p` with settings {"sandbox": sandbox}; one Bash call and a PreToolUse hook."""
    dirs = _scratch(scratch)
    command, hook_command, hook_out = _probe_commands(scratch, sockets)
    hook = {"type": "command", "command": hook_command, "timeout": 30}
    settings = {"sandbox": sandbox, "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}
    settings_path = scratch / "claude-settings.json"
    settings_path.write_text(json.dumps(settings, indent=1))
    call = ToolCall("Bash", {"command": command, "description": "probe the sockets", **(extra_input or {})})
    with FakeModel([call]) as fake:
        argv = [str(harness.exe), "-p", "probe", "--output-format", "stream-json", "--verbose",
                "--settings", str(settings_path), "--allowedTools", "Bash"]  # fmt: skip
        env = harness.env(
            {
                **_home_env(dirs),
                "ANTHROPIC_BASE_URL": fake.url,
                "ANTHROPIC_API_KEY": "dummy",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            }
        )
        code, out, err, secs = run_process(argv, env=env, cwd=dirs["work"], out_dir=scratch, timeout=60)
        run = Run("claude", argv, scratch, dirs["work"], code, out, err, secs, fake, hook_out)
        return _finish(run, fake, hook_out)


@pytest.mark.needs("bwrap", "socat")
def test_claude_sandbox_blocks_unix_sockets_but_the_hook_reaches_both(
    claude, claude_sandbox_deps, tmp_path, sockets, timed
):
    probe = _run_claude(claude, tmp_path, sockets, BASE_SANDBOX)
    timed(probe.run)
    for path in (sockets.guard, sockets.operator):  # seccomp: socket(AF_UNIX) itself -> EPERM
        rec = probe.tool[str(path)]
        assert (rec["ok"], rec["stage"], rec["errno"]) == (False, "socket", errno.EPERM), rec
    _assert_hook_reaches_both(probe, sockets)


@pytest.mark.needs("bwrap", "socat")
def test_claude_allow_all_unix_sockets_plus_deny_read_hides_only_the_operator_directory(
    claude, claude_sandbox_deps, tmp_path, sockets, timed
):
    sandbox = {
        **BASE_SANDBOX,
        "network": {"allowAllUnixSockets": True},
        "filesystem": {"denyRead": [str(sockets.operator_dir)]},
    }
    probe = _run_claude(claude, tmp_path, sockets, sandbox)
    timed(probe.run)
    assert probe.tool[str(sockets.guard)]["reply"] == "guard", probe.tool
    op = probe.tool[str(sockets.operator)]  # an empty tmpfs over the directory
    assert (op["ok"], op["stage"], op["errno"]) == (False, "connect", errno.ENOENT), op
    _assert_hook_reaches_both(probe, sockets)


@pytest.mark.needs("bwrap", "socat")
def test_claude_allow_unix_sockets_list_is_ignored_on_linux(claude, claude_sandbox_deps, tmp_path, sockets, timed):
    sandbox = {**BASE_SANDBOX, "network": {"allowUnixSockets": [str(sockets.guard), str(sockets.guard.parent)]}}
    probe = _run_claude(claude, tmp_path, sockets, sandbox)
    timed(probe.run)
    rec = probe.tool[str(sockets.guard)]  # macOS-only setting: the guard socket stays blocked on Linux
    assert (rec["ok"], rec["stage"], rec["errno"]) == (False, "socket", errno.EPERM), rec


@pytest.mark.needs("bwrap", "socat")
def test_claude_dangerously_disable_sandbox_is_ignored_when_unsandboxed_commands_are_off(
    claude, claude_sandbox_deps, tmp_path, sockets, timed
):
    probe = _run_claude(claude, tmp_path, sockets, BASE_SANDBOX, {"dangerouslyDisableSandbox": True})
    timed(probe.run)
    for path in (sockets.guard, sockets.operator):
        assert probe.tool[str(path)]["ok"] is False, probe.tool
