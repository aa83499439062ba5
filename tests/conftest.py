"""Shared fixtures (a real guard process on a private socket, a private tmux), each test's own HOME, the tiers,
and the check that the run left the real HOME as it was (docs/testing.md)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests import tiers
from tests.e2e.harnesses import CACHE
from tests.isolation import UNSET, HomeRecord, loopback_env, pip_env, private_env
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
            "breaker.cli",
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
    tiers.need_tools(["tmux"])
    t = Tmux()
    yield t
    t.kill()


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test has a HOME and XDG directories of its own (and so its own default socket, state file, keymap,
    themes, and whatever a harness or a framework writes under ~): docs/testing.md."""
    for name, value in private_env(tmp_path_factory.mktemp("h")).items():
        monkeypatch.setenv(name, value)


# --- tiers, isolation and the summary: docs/testing.md ---------------------------------------------------------

REAL_ENV = pytest.StashKey[dict[str, str]]()
REAL_HOME = pytest.StashKey[HomeRecord]()
SESSION_DIR = pytest.StashKey[Path]()
LEFT_OUT = pytest.StashKey[dict[str, int]]()
HOME_CHANGES = pytest.StashKey[list[str]]()
HARNESS_RUNS: list[tuple[str, str, float]] = []  # (test, harness, seconds) of each real harness run
_STARTED = time.monotonic()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all",
        action="store_true",
        dest="all_tiers",
        help="run every tier, not only the fast one: " + ", ".join(t.marker for t in tiers.ASKED_FOR),
    )


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: `-n auto` (addopts)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """Two workers a core, 8 at most: a test spends about half its time waiting on a process, a socket or a
    screen (docs/testing.md has the figures). PYTEST_XDIST_AUTO_NUM_WORKERS still decides when it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(2 * cores, 8)


def _home_skips(config: pytest.Config) -> list[Path]:
    """Where tests write by design, should it be in the real HOME: the checkout, the e2e cache, the temp
    directory, pytest's base temp."""
    skips = [ROOT, CACHE, Path(tempfile.gettempdir())]
    if config.option.basetemp:
        skips.append(Path(config.option.basetemp))
    return skips


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") and config.option.basetemp:
        # xdist names a worker's base temp `popen-gw0`; `gw0` keeps the sockets that tests make under tmp_path
        # within the 107-byte limit, as they are without xdist (this runs before pytest's own tmp_path setup).
        base = Path(config.option.basetemp)
        config.option.basetemp = str(base.with_name(base.name.removeprefix("popen-")))
    real = dict(os.environ)
    if not hasattr(config, "workerinput"):  # the run's own process, not an xdist worker (its HOME is ours)
        config.stash[REAL_ENV] = real
        config.stash[REAL_HOME] = HomeRecord(real, _home_skips(config))
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_WorkerReports(config), "cb-worker-reports")
    session_dir = Path(tempfile.mkdtemp(prefix="cb-session-"))
    config.stash[SESSION_DIR] = session_dir
    for name in UNSET:
        os.environ.pop(name, None)
    os.environ.update(private_env(session_dir))
    os.environ.update(pip_env(real, CACHE))
    os.environ.update(loopback_env(real))


def pytest_unconfigure(config: pytest.Config) -> None:
    session_dir = config.stash.get(SESSION_DIR, None)
    if session_dir is not None:
        shutil.rmtree(session_dir, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if tiers.everything_asked(config):
        how = "this run's -m" if config.getoption("markexpr") else "every tier"
        ci = "; CI=true: a missing requirement fails" if tiers.in_ci() else ""
        return [f"tiers: {how}{ci}"]
    return ["tiers: the fast one (" + ", ".join(t.marker for t in tiers.ASKED_FOR) + " when asked for: --all)"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    left, counts = tiers.not_asked(config, items)
    if left:
        config.hook.pytest_deselected(items=left)
        gone = set(map(id, left))
        items[:] = [item for item in items if id(item) not in gone]
    config.stash[LEFT_OUT] = counts


@pytest.hookimpl(tryfirst=True)  # before the fixtures: a missing tool skips before a fixture trips on it
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs"):
        tiers.need_tools(mark.args)
    if item.get_closest_marker("e2e"):
        tiers.need_installs(item)
    if item.get_closest_marker("frameworks"):
        tiers.need_frameworks()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        for name, value in report.user_properties:
            if name == "harness_run":
                harness, seconds = value
                HARNESS_RUNS.append((report.nodeid.rsplit("::", 1)[-1], harness, seconds))


class _WorkerReports:
    """Under xdist, the tiers each worker left out (workers collect; the controller reports)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        counts = getattr(node, "workeroutput", {}).get("cb_left_out")
        if counts is not None:
            self.config.stash[LEFT_OUT] = counts


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        config.workeroutput["cb_left_out"] = config.stash.get(LEFT_OUT, {})  # type: ignore[attr-defined]
        return
    before = config.stash.get(REAL_HOME, None)
    if before is None:
        return
    real = config.stash[REAL_ENV]
    changes = before.changes(HomeRecord(real, _home_skips(config)))
    config.stash[HOME_CHANGES] = changes
    if changes:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    tr = terminalreporter
    if HARNESS_RUNS:
        tr.section("e2e harness runs")
        by_harness: dict[str, float] = {}
        for test, harness, seconds in HARNESS_RUNS:
            tr.write_line(f"{seconds:6.1f} s  {harness:7} {test}")
            by_harness[harness] = by_harness.get(harness, 0.0) + seconds
        tr.write_line(
            f"{len(HARNESS_RUNS)} runs, {sum(by_harness.values()):.1f} s in harnesses "
            f"({', '.join(f'{h} {s:.1f} s' for h, s in by_harness.items())}); "
            f"{time.monotonic() - _STARTED:.1f} s since the run started"
        )
    left = tiers.summary(config.stash.get(LEFT_OUT, {}))
    if left:
        tr.section("tiers not asked for (deselected)")
        for line in left:
            tr.write_line(line)
    changes = config.stash.get(HOME_CHANGES, [])
    if changes:
        home = config.stash[REAL_HOME].home
        tr.section(f"the real HOME was written to ({home}): FAILED", red=True, bold=True)
        for line in changes:
            tr.write_line(line)
        tr.write_line("a test wrote outside its own HOME (or another program wrote there meanwhile); docs/testing.md")
