"""Closing the terminal, or SIGHUP / SIGTERM, never leaves an orphan guard: real consoles in real terminals."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from breaker.client import GuardClient
from tests.conftest import ROOT, Tmux, request
from tests.waits import eventually

pytestmark = pytest.mark.needs("tmux")

ENDING = [signal.SIGHUP, signal.SIGTERM]


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_left(guard: int) -> None:
    """Stop a guard a test left serving (SIGTERM), once it is gone."""
    if alive(guard):
        os.kill(guard, signal.SIGTERM)
        eventually(lambda: not alive(guard), what="the guard to stop")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


class Terminal:
    """`cbconsole` in a real terminal (tmux) with its own state, runtime, temp and dsh directories."""

    def __init__(self, tmux: Tmux, root: Path) -> None:
        self.tmux = tmux
        self.root = root
        self.state = root / "state"
        self.runtime = root / "run"
        self.tmp = root / "tmp"
        self.home = root / "dsh"
        for d in (self.state, self.tmp, self.home, root / "config"):
            d.mkdir()
        self.runtime.mkdir(mode=0o700)
        self.config = root / "config"
        self.console_pid = 0

    @property
    def socket(self) -> Path:
        return self.runtime / "cbconsole" / "guard.sock"

    @property
    def log(self) -> Path:
        return self.state / "cbconsole" / "guard.log"

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def start(self, *args: str) -> int:
        env = {
            "XDG_STATE_HOME": self.state,
            "XDG_RUNTIME_DIR": self.runtime,
            "XDG_CONFIG_HOME": self.config,
            "TMPDIR": self.tmp,
            "DSH_HOME": self.home,
        }
        assigns = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items())
        # COLUMNS/LINES from the test runner would override the terminal size Textual reads
        console = f"env -u COLUMNS -u LINES -u CBCONSOLE_SOCKET {assigns} {sys.executable} -m breaker.cli"
        self.tmux.start(f"cd {ROOT} && {console} {shlex.join(args)}; echo CONSOLE-EXITED $?; sleep 60")
        shell = self.tmux.pane_pid()
        eventually(lambda: self._find_console(shell), what="the console process")
        self.console_pid = self._find_console(shell)
        return self.console_pid

    @staticmethod
    def _find_console(shell: int) -> int:
        for pid in descendants(shell):
            line = cmdline(pid)
            if "breaker.cli" in line and "--headless" not in line:
                return pid
        return 0

    def child(self, marker: str, timeout: float = 30.0) -> int:
        """The pid of the console's child whose command line has `marker`, once it is there."""

        def find() -> int:
            return next((p for p in children(self.console_pid) if marker in cmdline(p)), 0)

        eventually(find, what=f"the console's {marker} child", timeout=timeout)
        return find()

    def left_running(self) -> dict[int, str]:
        """Our Python processes (console, guard, demo driver) still running with a path of this terminal's."""
        found = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and alive(int(entry.name)):
                line = cmdline(int(entry.name))
                if line.startswith(sys.executable) and str(self.root) in line:
                    found[int(entry.name)] = line
        return found

    def demo_dirs(self) -> list[Path]:
        return list(self.tmp.glob("cbconsole-demo-*"))


@pytest.fixture
def term(tmux: Tmux) -> Iterator[Terminal]:
    # Its own short directory in /tmp, not tmp_path: the demo's sockets go under TMPDIR, and a socket path has at
    # most 107 bytes (pytest's directories, deeper under xdist, leave too few).
    root = Path(tempfile.mkdtemp(prefix="cbsig-", dir="/tmp"))
    t = Terminal(tmux, root)
    yield t
    for pid in t.left_running():  # a failed test leaves no orphan behind it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


def test_closing_the_terminal_stops_the_demo_guard_and_driver_and_removes_the_demo_files(term):
    console = term.start("--demo")
    guard = term.child("breaker.headless")
    driver = term.child("console.demo")
    # the simulated agents are checking with the guard
    term.tmux.wait_for("Agents — most dangerous first (5)", timeout=60)
    [demo_dir] = term.demo_dirs()
    assert (demo_dir / "h" / "guard.sock").exists()
    term.tmux.run("kill-session", "-t", "main")
    eventually(lambda: not alive(guard), what="the demo guard to exit")
    eventually(lambda: not alive(driver), what="the demo driver to exit")
    eventually(lambda: not alive(console), what="the console to exit")
    assert not demo_dir.exists()
    assert f"cbconsole exited on SIGHUP; it stopped the guard it started (pid {guard})" in term.log_text()


@pytest.mark.parametrize("sig", ENDING, ids=lambda s: s.name)
def test_a_signal_stops_the_guard_it_started_when_no_harness_uses_it(term, sig):
    console = term.start()
    term.tmux.wait_for("guard running", timeout=60)
    guard = term.child("breaker.headless")
    os.kill(console, sig)
    eventually(lambda: not alive(guard), what="the guard to exit")
    eventually(lambda: not alive(console), what="the console to exit")
    assert not term.socket.exists()
    assert f"cbconsole exited on {sig.name}; it stopped the guard it started (pid {guard})" in term.log_text()
    if sig == signal.SIGTERM:  # the terminal is still there: the console restored it and said how it ended
        term.tmux.wait_for(f"CONSOLE-EXITED {128 + sig}", timeout=60)


@pytest.mark.parametrize("sig", ENDING, ids=lambda s: s.name)
def test_a_signal_leaves_a_guard_that_harnesses_use_serving_and_says_so_in_its_log(term, sig):
    console = term.start()
    term.tmux.wait_for("guard running", timeout=60)
    guard = term.child("breaker.headless")
    dsh = GuardClient(term.socket, harness="dsh", timeout=30)
    claude = GuardClient(term.socket, harness="claude-code", timeout=30)
    try:
        assert dsh.check("sig-a", "read", {"p": 1}).fallback is False
        assert claude.check("sig-b", "read", {"p": 1}).fallback is False
        os.kill(console, sig)
        eventually(lambda: not alive(console), what="the console to exit")
        line = (
            f"cbconsole exited on {sig.name}; the guard keeps serving 2 harness connection(s) "
            f"(claude-code 1, dsh 1); stop it with kill {guard}"
        )
        assert line in term.log_text()
        assert alive(guard)
        looped = [dsh.check("sig-a", "web_search", {"q": "same"}) for _ in range(7)]
        assert [d.fallback for d in looped] == [False] * 7
        assert looped[-1].kind == "duplicate"  # judged by the guard, which still counts
        assert request(term.socket, {"op": "ping", "id": 2})["pong"]
    finally:
        dsh.close()
        claude.close()
        stop_left(guard)


def test_leave_running_keeps_the_guard_on_a_signal_as_on_quit(term):
    console = term.start("--leave-running")
    term.tmux.wait_for("guard running", timeout=60)
    guard = term.child("breaker.headless")
    try:
        os.kill(console, signal.SIGTERM)
        eventually(lambda: not alive(console), what="the console to exit")
        assert alive(guard)
        assert request(term.socket, {"op": "ping", "id": 1})["pong"]
        line = f"cbconsole exited on SIGTERM; the guard keeps serving (--leave-running); stop it with kill {guard}"
        assert line in term.log_text()
    finally:
        stop_left(guard)


@pytest.mark.parametrize("sig", ENDING, ids=lambda s: s.name)
def test_a_signal_never_touches_a_guard_the_console_attached_to(term, guard, sig):
    console = term.start("--socket", str(guard.socket))  # a guard already answers there: attach
    term.tmux.wait_for("guard attached", timeout=60)
    assert not any("breaker.headless" in cmdline(p) for p in children(console))
    os.kill(console, sig)
    eventually(lambda: not alive(console), what="the console to exit")
    assert guard.proc.poll() is None
    assert request(guard.socket, {"op": "ping", "id": 1})["pong"]
    assert "cbconsole exited" not in term.log_text()


@pytest.mark.parametrize("mode", ["own", "demo"])
@pytest.mark.parametrize("sig", ENDING, ids=lambda s: s.name)
def test_a_console_ended_while_its_guard_is_starting_leaves_nothing_behind(term, sig, mode):
    console = term.start(*(["--demo"] if mode == "demo" else []))
    guard = term.child("breaker.headless")  # the guard was just forked: it is not serving yet
    os.kill(console, sig)
    eventually(lambda: not alive(console), what="the console to exit")
    eventually(lambda: not alive(guard), what="the guard to exit")
    assert term.left_running() == {}
    assert term.demo_dirs() == []
    assert not term.socket.exists()


# -- the console killed outright (kill -9): nothing it could do, its guard sees to itself ----------------------


def test_a_kill_9_of_the_demo_console_stops_its_guard_and_driver_and_removes_the_demo_files(term):
    console = term.start("--demo")
    guard = term.child("breaker.headless")
    driver = term.child("console.demo")
    term.tmux.wait_for("Agents — most dangerous first (5)", timeout=60)
    [demo_dir] = term.demo_dirs()
    os.kill(console, signal.SIGKILL)
    eventually(lambda: not alive(guard), what="the demo guard to exit")
    eventually(lambda: not alive(driver), what="the demo driver to exit")
    eventually(lambda: not demo_dir.exists(), what="the demo's directory removed")
    assert term.left_running() == {}


def test_a_kill_9_of_the_console_stops_the_guard_it_started_when_no_harness_uses_it(term):
    console = term.start()
    term.tmux.wait_for("guard running", timeout=60)
    guard = term.child("breaker.headless")
    os.kill(console, signal.SIGKILL)
    eventually(lambda: not alive(guard), what="the guard to exit")
    assert not term.socket.exists()
    log = term.log_text()
    assert "the console that started this guard has ended: stopping" in log and "guard stopped" in log


def test_a_kill_9_of_the_console_leaves_a_guard_that_harnesses_use_serving_and_says_so_in_its_log(term):
    console = term.start()
    term.tmux.wait_for("guard running", timeout=60)
    guard = term.child("breaker.headless")
    dsh = GuardClient(term.socket, harness="dsh", timeout=30)
    try:
        assert dsh.check("k9-a", "read", {"p": 1}).fallback is False
        os.kill(console, signal.SIGKILL)
        line = "the console that started this guard has ended; the guard keeps serving 1 harness connection(s) "
        eventually(lambda: line in term.log_text(), what="the guard to say it keeps serving")
        assert f"('dsh' 1); stop it with kill {guard}" in term.log_text()
        looped = [dsh.check("k9-a", "web_search", {"q": "same"}) for _ in range(7)]
        assert [d.fallback for d in looped] == [False] * 7 and looped[-1].kind == "duplicate"
    finally:
        dsh.close()
        stop_left(guard)


def test_a_kill_9_with_leave_running_leaves_the_guard_serving(term):
    console = term.start("--leave-running")
    term.tmux.wait_for("guard running", timeout=60)
    guard = term.child("breaker.headless")
    assert "--parent-fd" not in cmdline(guard)  # it never watches the console
    try:
        os.kill(console, signal.SIGKILL)
        eventually(lambda: not alive(console), what="the console to exit")
        assert request(term.socket, {"op": "ping", "id": 1})["pong"] and alive(guard)
    finally:
        stop_left(guard)


def test_leaving_the_guard_running_on_quit_says_which_pid_runs_and_the_command_that_stops_it(term):
    term.start()
    term.tmux.wait_for("guard running", timeout=60)
    guard = term.child("breaker.headless")
    dsh = GuardClient(term.socket, harness="dsh", timeout=30)
    try:
        assert dsh.check("leave-a", "read", {"p": 1}).fallback is False
        term.tmux.wait_for("harnesses dsh 1")  # quitting asks: a harness uses the guard
        term.tmux.keys("q")
        term.tmux.wait_for("Leave the guard running")
        term.tmux.keys("l")
        screen = term.tmux.wait_for("CONSOLE-EXITED 0", timeout=60)
        assert f"the guard is still running (pid {guard}), serving harnesses on {term.socket}" in screen
        assert f"its log:     {term.log}" in screen
        [stop] = [line.split(":", 1)[1].strip() for line in screen.splitlines() if line.strip().startswith("stop it:")]
        assert stop == f"kill {guard}"
        assert alive(guard) and request(term.socket, {"op": "ping", "id": 1})["pong"]
        subprocess.run(shlex.split(stop), check=True)  # the command as printed stops it
        eventually(lambda: not alive(guard), what="the guard to stop")
    finally:
        dsh.close()
        stop_left(guard)
