"""A guard on another machine through SSH's Unix-socket forwarding, for real: a private sshd on 127.0.0.1, the
forward made by the lines docs/console.md gives (read from it), and one console over that guard and a local one."""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from console.app import CBConsole
from console.command import _members
from console.screens.confirm import ConfirmScreen
from console.session import FleetSession
from console.state import agent_key
from console.widgets.agents import AgentsTable
from tests.conftest import ROOT, request
from tests.test_console_pilot import SIZE, loop
from tests.waits import eventually, eventually_async

DOC = ROOT / "docs" / "console.md"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def doc_lines() -> dict[str, str]:
    """The forwarding block of docs/console.md, by what each line does: mkdir, ssh, cbconsole."""
    text = DOC.read_text()
    block = text.split("<!-- ssh-forward:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    return {line.split()[0].split("=")[0]: line for line in lines}


def test_the_docs_forwarding_block_has_the_lines_this_test_runs():
    lines = doc_lines()
    assert set(lines) == {"host", "remote", "local", "mkdir", "ssh", "here", "cbconsole"}
    assert '-L "$local/operator.sock:$remote"' in lines["ssh"] and "ExitOnForwardFailure=yes" in lines["ssh"]
    assert lines["cbconsole"].startswith('cbconsole --attach "$host=$local/operator.sock"')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    """A private sshd on 127.0.0.1 that lets this user in with a key of the test's own, and an ssh config that
    names it `guardhost`."""

    def __init__(self, d: Path) -> None:
        self.dir, self.port, self.user = d, free_port(), getpass.getuser()
        for name in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
        (d / "authorized_keys").write_text((d / "client.pub").read_text())
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nPidFile {d / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
            "AllowStreamLocalForwarding yes\nX11Forwarding no\n"
        )
        (d / "ssh_config").write_text(
            f"Host guardhost\n  HostName 127.0.0.1\n  Port {self.port}\n  User {self.user}\n"
            f"  IdentityFile {d / 'client'}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
        )
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=open(d / "sshd.log", "wb"),
        )

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError("sshd exited")
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True

        try:
            eventually(listening, what=f"sshd to listen on port {self.port}", ignoring=(OSError,))
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{(d / 'sshd.log').read_text()}") from None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def sshd(tmp_path: Path):
    assert Path(SSHD).exists(), "sshd is not installed: .ci/run installs openssh-server"
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    server = Sshd(d)
    yield server
    server.stop()


def expand(line: str, env: dict[str, str]) -> list[str]:
    """A doc line as argv, its $variables and "$variables" replaced from `env`."""
    return [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], word) for word in shlex.split(line)]


@pytest.mark.needs("sshd", "ssh", "ssh-keygen")
async def test_a_remote_guards_operator_socket_forwarded_by_ssh_as_documented_is_watched_and_acted_on(
    guard_factory, sshd, tmp_path
):
    remote, here = guard_factory(), guard_factory()  # the "remote" guard is reached only through the forward
    lines = doc_lines()
    short_home = tempfile.mkdtemp(prefix="cbssh-", dir="/tmp")
    env = {
        "host": "guardhost",
        "remote": str(remote.operator),
        "HOME": short_home,  # a socket path has at most 107 bytes: pytest's own directories are too deep
        "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
    }
    env["local"] = expand(lines["local"].split("=", 1)[1], env)[0]
    subprocess.run(expand(lines["mkdir"], env), check=True)
    assert (os.stat(env["local"]).st_mode & 0o777) == 0o700
    argv = expand(lines["ssh"], env)
    assert argv[:3] == ["ssh", "-f", "-N"]
    # As documented, with this test's host config; in the foreground (no -f) so that the test can end it.
    forward = subprocess.Popen(["ssh", "-F", str(sshd.dir / "ssh_config"), *argv[2:]], stderr=subprocess.PIPE)
    forwarded = Path(env["local"]) / "operator.sock"
    try:

        def forwarding() -> bool:
            if forwarded.exists():
                return True
            assert forward.poll() is None, forward.stderr.read().decode() if forward.stderr else ""
            return False

        eventually(forwarding, what="the forwarded socket")
        assert (forwarded.stat().st_mode & 0o777) == 0o600 and forwarded.stat().st_uid == os.getuid()
        assert request(forwarded, {"op": "ping", "id": 1})["pong"] is True  # the remote guard's operator plane

        attach = expand(lines["cbconsole"], {**env, "here": str(here.socket.parent)})
        specs = [attach[i + 1] for i, word in enumerate(attach) if word == "--attach"]
        specs[1] = f"here={here.socket}"  # the local guard of this test (its own socket directory)
        members = _members(specs, here.socket, None)
        assert not isinstance(members, str)
        assert [m.name for m in members] == ["guardhost", "here"] and members[0].operator_socket == forwarded

        loop(remote, "far-agent", 7)
        loop(here, "near-agent", 1)
        app = CBConsole(FleetSession(members))
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one(AgentsTable)
            far = agent_key(0, "far-agent", fleet=True)
            await eventually_async(
                lambda: far in table.ordered_keys and table.row_count == 2, what="both guards' agents", pilot=pilot
            )
            assert table.get_cell(far, "guard").plain == "guardhost"
            assert table.get_cell(far, "status").plain == "duplicate"
            table.move_cursor(row=table.get_row_index(far))
            await pilot.press("i")
            await eventually_async(lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation", pilot=pilot)
            await pilot.press("y")
            state = lambda: request(remote.operator, {"op": "snapshot", "id": 1})["state"]["agents"]  # noqa: E731
            await eventually_async(
                lambda: state()[0]["status"] == "interrupted", what="interrupted through the forward", pilot=pilot
            )

            forward.terminate()  # the connection drops: that guard is shown unreachable, the other goes on
            forward.wait(10)
            forwarded.unlink(missing_ok=True)
            await eventually_async(
                lambda: app.state.guards[0].status == "unreachable", what="the remote shown gone", pilot=pilot
            )
            assert app.state.guards[1].status == "attached"
            forward = subprocess.Popen(["ssh", "-F", str(sshd.dir / "ssh_config"), *argv[2:]])
            await eventually_async(
                lambda: app.state.guards[0].status == "attached", what="back by itself", timeout=30, pilot=pilot
            )
            await asyncio.sleep(0)
    finally:
        forward.terminate()
        forward.wait(10)
        shutil.rmtree(short_home, ignore_errors=True)
