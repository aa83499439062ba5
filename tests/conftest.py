"""Shared fixtures: a real guard server process on a private socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from tests.waits import TIMEOUT, eventually

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class GuardProcess:
    """A `cbconsole --headless` child process and what it was started with."""

    socket: Path
    home: Path  # its DSH_HOME
    patch: Path  # a --patch layer file it reads: made empty at start if missing (a missing --patch is refused)
    log: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None

    @property
    def operator(self) -> Path:
        """The operator's socket: in the sibling directory `<run dir>-operator`, as the guard puts it."""
        return self.socket.parent.with_name(self.socket.parent.name + "-operator") / "operator.sock"

    @property
    def state_home(self) -> Path:
        """Its XDG_STATE_HOME: the state file survives a restart of this guard, and no other sees it."""
        return self.home.with_name(self.home.name + "-state")

    def start(self, wait: bool = True) -> GuardProcess:
        self.patch.touch()  # an empty layer: the tests write their settings into it later, and the guard reloads
        env = {
            **os.environ,
            "DSH_HOME": str(self.home),
            "PYTHONUNBUFFERED": "1",
            "XDG_STATE_HOME": str(self.state_home),
        }
        env.pop("CBCONSOLE_SOCKET", None)
        env.pop("CBCONSOLE_OPERATOR_SOCKET", None)
        cmd = [
            sys.executable,
            "-m",
            "console.cli",
            "--headless",
            "--socket",
            str(self.socket),
            "--patch",
            str(self.patch),
        ]
        self.proc = subprocess.Popen(
            cmd + self.args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(self.log, "ab")
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = TIMEOUT) -> None:
        def pong() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"guard exited with {self.proc.returncode}")
            return bool(request(self.socket, {"op": "ping", "id": 0}, timeout=1).get("pong"))

        try:
            eventually(pong, timeout=timeout, what=f"the guard to answer on {self.socket}", ignoring=(OSError,))
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its log:\n{self.log.read_text()}") from None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(5)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


def request(path: Path, message: dict, timeout: float = 5.0) -> dict:
    """One request on a fresh connection; returns the reply with the same id."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(orjson.dumps(message) + b"\n")
        buf = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"closed before replying; got {buf!r}")
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = orjson.loads(line)
                if msg.get("id") == message.get("id") and "event" not in msg:
                    return msg


class Conn:
    """A raw line-protocol connection for tests that need to see exactly what the server sends."""

    def __init__(self, path: Path, timeout: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buf = b""

    def send(self, data: bytes | dict) -> None:
        self.sock.sendall(data if isinstance(data, bytes) else orjson.dumps(data) + b"\n")

    def line(self) -> dict:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return orjson.loads(line)

    def ask(self, message: dict) -> dict:
        self.send(message)
        while True:
            msg = self.line()
            if "event" not in msg:
                return msg

    def closed(self) -> bool:
        """True if the server closed the connection (reads EOF) once buffered lines are consumed."""
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    return True
                self.buf += chunk
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def guard_factory(tmp_path: Path) -> Iterator:
    """Make guard processes (each with its own private socket dir); all are stopped at the end."""
    made: list[GuardProcess] = []
    counter = iter(range(1000))

    def make(*args: str, start: bool = True, patch_text: str | None = None) -> GuardProcess:
        n = next(counter)
        run = tmp_path / f"run{n}"
        run.mkdir(mode=0o700)
        home = tmp_path / f"dsh{n}"
        home.mkdir()
        patch = tmp_path / f"layer{n}.yml"
        if patch_text is not None:
            patch.write_text(patch_text)
        g = GuardProcess(run / "guard.sock", home, patch, tmp_path / f"guard{n}.log", list(args))
        made.append(g)
        if start:
            g.start()
        return g

    yield make
    for g in made:
        g.stop()


@pytest.fixture
def guard(guard_factory) -> GuardProcess:
    return guard_factory()


class Tmux:
    """A real terminal: a private tmux server (never the user's) with one session, "main"."""

    def __init__(self) -> None:
        self.name = f"cbtest-{uuid.uuid4().hex[:8]}"

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.name, *args], capture_output=True, text=True, check=True).stdout

    def start(self, command: str, width: int = 160, height: int = 45) -> None:
        self.run("new-session", "-d", "-s", "main", "-x", str(width), "-y", str(height), command)

    def screen(self) -> str:
        return self.run("capture-pane", "-t", "main", "-p")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "main", *keys)

    def pane_pid(self) -> int:
        return int(self.run("display-message", "-p", "-t", "main", "#{pane_pid}"))

    def wait_for(self, needle: str, timeout: float = 20.0) -> str:
        seen = [""]

        def shows() -> bool:
            seen[0] = self.screen()
            return needle in seen[0]

        try:
            eventually(shows, timeout=timeout, what=f"{needle!r} on screen")
        except AssertionError:
            raise AssertionError(f"{needle!r} never appeared on screen:\n{seen[0]}") from None
        return seen[0]

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.name, "kill-server"], capture_output=True)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    t = Tmux()
    yield t
    t.kill()


@pytest.fixture(autouse=True)
def _private_state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes a guard's state file (or a console's guard log) into the real $XDG_STATE_HOME, and no
    console reads the user's keymap or themes from the real $XDG_CONFIG_HOME."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
