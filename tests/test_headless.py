"""`cbconsole --headless` as a process: it loads no code from where it runs, refuses a layer that is not there,
and stops cleanly on a signal with or without a state file."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from breaker.client import GuardClient
from breaker.paths import python_child
from console.app import CBConsole
from console.session import DemoGuard, GuardOptions, GuardSession, OwnGuard, ReplayGuard
from tests.conftest import ROOT, request
from tests.waits import eventually, eventually_async

CBCONSOLE = Path(sys.executable).with_name("cbconsole")  # the installed entry point, as a user runs it

# A module an agent could write into its workspace: importing it leaves a mark, and breaks whatever imported it.
TRAP = """\
import os, pathlib
pathlib.Path(os.environ["CB_TRAP_MARK"], __name__).touch()
raise ImportError("a module from the working directory was imported: " + __name__)
"""
TRAPPED = ("orjson", "yaml", "uvloop", "watchfiles", "zstandard")


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """An agent's workspace holding modules named as the guard's dependencies, and where their marks go."""
    place, marks = tmp_path / "workspace", tmp_path / "marks"
    place.mkdir()
    marks.mkdir()
    for name in TRAPPED:
        (place / f"{name}.py").write_text(TRAP)
    yield place, marks
    assert sorted(p.name for p in marks.iterdir()) == [], "a module of the working directory ran"


def guard_env(tmp_path: Path, marks: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CBCONSOLE_")}
    return {**env, "CB_TRAP_MARK": str(marks), "DSH_HOME": str(tmp_path / "dsh"), **more}


@pytest.mark.parametrize("state", ["default", "none"])
def test_a_headless_guard_started_in_an_agents_workspace_imports_nothing_from_it(tmp_path, workspace, state):
    """The guard re-executes itself with its state file's hash seed (`state` default): as `python -P`."""
    place, marks = workspace
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    sock = run / "guard.sock"
    env = guard_env(tmp_path, marks, XDG_STATE_HOME=str(tmp_path / "state"), PYTHONUNBUFFERED="1")
    extra = ["--state", "none"] if state == "none" else []
    log = tmp_path / "guard.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [str(CBCONSOLE), "--headless", "--socket", str(sock), *extra], cwd=place, env=env, stderr=err
        )
    try:
        eventually(lambda: sock.exists() or proc.poll() is not None, what="the guard to listen")
        assert proc.poll() is None, log.read_text()
        client = GuardClient(sock, harness="pytest", timeout=10)
        assert [client.check("w-1", "read", {"p": 1}).fallback for _ in range(2)] == [False, False]
        client.close()
        if state == "default":  # it did re-execute itself: the seed is in its environment
            assert b"PYTHONHASHSEED=" in Path(f"/proc/{proc.pid}/environ").read_bytes()
    finally:
        proc.terminate()
        proc.wait(15)


def test_a_child_python_drops_empty_and_relative_pythonpath_entries_and_never_has_the_cwd(tmp_path, workspace):
    place, marks = workspace
    command, env = python_child("breaker.headless", {**os.environ, "PYTHONPATH": f"{os.pathsep}rel{os.pathsep}/abs"})
    assert command[:4] == [sys.executable, "-P", "-m", "breaker.headless"]
    assert "" not in env["PYTHONPATH"].split(os.pathsep) and "rel" not in env["PYTHONPATH"].split(os.pathsep)
    assert "/abs" in env["PYTHONPATH"].split(os.pathsep)
    # The same start, with a module that imports what the guard imports, from the workspace.
    probe = [*command[:2], "-c", "import sys, orjson, yaml; print(repr(sys.path))"]
    out = subprocess.run(probe, cwd=place, env={**env, "CB_TRAP_MARK": str(marks)}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert str(place) not in out.stdout and "''" not in out.stdout


def test_a_child_python_of_a_source_tree_run_is_given_the_tree_by_its_absolute_path(tmp_path, workspace):
    """`python -m breaker.cli` in a checkout with nothing installed found the code in the current directory: its
    children get that directory by name (never `.`), and still find nothing else there."""
    place, marks = workspace
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / "pkg" / "child.py").write_text("import sys\nprint(sys.modules['pkg'].__file__)\n")
    (tree / "pkg" / "parent.py").write_text(
        "import os, subprocess, sys\n"
        "from breaker.paths import python_child\n"
        "command, env = python_child('pkg.child')\n"
        "os.chdir(sys.argv[1])\n"
        "sys.exit(subprocess.run(command, env=env).returncode)\n"
    )
    env = {**os.environ, "CB_TRAP_MARK": str(marks), "PYTHONPATH": str(ROOT)}  # breaker from the test's tree
    out = subprocess.run(
        [sys.executable, "-m", "pkg.parent", str(place)], cwd=tree, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tree / "pkg" / "__init__.py")


@pytest.mark.parametrize("mode", ["own", "demo", "replay"])
async def test_the_consoles_guard_and_feeders_started_in_an_agents_workspace_import_nothing_from_it(
    tmp_path, workspace, monkeypatch, mode
):
    """The console's children: its guard (which re-executes itself with its state file's seed), the demo's agents,
    the replay feeder. The console runs in the workspace, with an empty PYTHONPATH entry (the current directory)."""
    place, marks = workspace
    monkeypatch.chdir(place)
    monkeypatch.setenv("CB_TRAP_MARK", str(marks))
    monkeypatch.setenv("PYTHONPATH", os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh"))
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    sock = run / "guard.sock"
    options = GuardOptions(log_path=tmp_path / "g.log")
    session: GuardSession
    if mode == "own":
        session = OwnGuard(sock, options=options)
    elif mode == "demo":
        session = DemoGuard(log_path=tmp_path / "g.log")
    else:
        transcripts = ROOT / "tests" / "fixtures" / "transcripts" / "dsh-zstd" / "sessions"
        session = ReplayGuard(sock, [str(transcripts)], speed=0, options=options)
    app = CBConsole(session)
    async with app.run_test(size=(120, 40)) as pilot:
        wanted = 1 if mode == "own" else 2  # the demo's agents and the replay's reach the guard through its socket

        async def running_with_agents() -> bool:
            if mode == "own" and app.state.guard_status == "running" and not app.state.agents:
                await asyncio.to_thread(lambda: GuardClient(sock, timeout=10).check("w-1", "read", {"p": 1}))
            return len(app.state.agents) >= wanted and app.state.guard_status == "running"

        await eventually_async(
            running_with_agents, timeout=60, what=f"{mode}: the guard running with {wanted} agent(s)", pilot=pilot
        )
        guard = app.session.supervisor
        assert guard is not None and guard.pid is not None
        assert b"-P" in Path(f"/proc/{guard.pid}/cmdline").read_bytes().split(b"\0")
        await pilot.press("q")


# -- every `python -m` child of ours goes through python_child --------------------------------------------


def unsafe_python_launches(source: str) -> list[int]:
    """Lines of `source` that start a Python with `-m` or a script without `-P` or `-I` (such a child has its
    working directory, or its script's, on `sys.path`): a list or tuple holding "-m" or starting with
    `sys.executable`, or an f-string that runs `{sys.executable}` (a shell command)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List | ast.Tuple):
            words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            first = node.elts[0] if node.elts else None
            runs_python = isinstance(first, ast.Attribute) and first.attr == "executable"
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            words = set(text.split())
            runs_python = any(
                isinstance(v, ast.FormattedValue)
                and isinstance(v.value, ast.Attribute)
                and v.value.attr == "executable"
                for v in node.values
            )
        else:
            continue
        if ("-m" in words or runs_python) and not words & {"-P", "-I"}:
            found.append(node.lineno)
    return sorted(found)


def test_the_scan_finds_a_python_child_started_with_its_working_directory_on_its_path():
    planted = (
        "import os, subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'breaker.replay'])\n"
        "os.execv(sys.executable, [sys.executable, 'script.py'])\n"
        "cmd = ['-m', 'console.demo']\n"
        "os.system(f'{sys.executable} -m breaker.headless')\n"
        "fine = [sys.executable, '-P', '-m', 'x']\n"
    )
    assert unsafe_python_launches(planted) == [2, 3, 4, 5]


def test_no_python_child_of_the_product_has_its_working_directory_on_its_path():
    sources = sorted([*(ROOT / "breaker").rglob("*.py"), *(ROOT / "console").rglob("*.py")])
    assert len(sources) > 40
    found = {str(p.relative_to(ROOT)): lines for p in sources if (lines := unsafe_python_launches(p.read_text()))}
    assert found == {}, "start it with breaker.paths.python_child (`python -P`)"


# -- a layer named on the command line is there ---------------------------------------------------------------


def run_cbconsole(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CBCONSOLE), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("mode", [["--headless"], []], ids=["headless", "console"])
def test_a_patch_file_that_does_not_exist_is_refused_naming_its_path(tmp_path, mode):
    env = {**os.environ, "DSH_HOME": str(tmp_path / "dsh"), "XDG_RUNTIME_DIR": str(tmp_path)}
    out = run_cbconsole(*mode, "--patch", "nosuch.yml", env=env, cwd=tmp_path)
    assert out.returncode == 2
    assert f"--patch nosuch.yml: there is no file {tmp_path / 'nosuch.yml'}" in out.stderr
    assert "create it first (touch" in out.stderr
    assert not (tmp_path / "cbconsole").exists()  # nothing started: no socket directory made


@pytest.mark.parametrize("mode", [["--headless"], []], ids=["headless", "console"])
def test_a_profile_that_does_not_exist_is_refused_naming_the_directory_looked_for(tmp_path, mode):
    home = tmp_path / "dsh"
    (home / "profiles" / "web").mkdir(parents=True)
    env = {**os.environ, "DSH_HOME": str(home), "XDG_RUNTIME_DIR": str(tmp_path)}
    out = run_cbconsole(*mode, "--profile", "wbe", env=env, cwd=tmp_path)
    assert out.returncode == 2
    assert f"--profile wbe: there is no profile directory {home / 'profiles' / 'wbe'}" in out.stderr
    assert "the profiles there: web" in out.stderr


def test_a_patch_that_names_a_directory_is_refused(tmp_path):
    env = {**os.environ, "DSH_HOME": str(tmp_path / "dsh"), "XDG_RUNTIME_DIR": str(tmp_path)}
    out = run_cbconsole("--headless", "--patch", str(tmp_path), env=env, cwd=tmp_path)
    assert out.returncode == 2 and f"{tmp_path} is a directory, not a patch layer file" in out.stderr


def test_an_empty_patch_file_is_an_empty_layer_that_edits_are_saved_to(guard):
    assert guard.patch.read_text() == ""
    reply = request(guard.operator, {"op": "config_set", "id": 1, "changes": {"duplicateLimit": 4}})
    assert reply["written"] == str(guard.patch) and "duplicateLimit: 4" in guard.patch.read_text()


# -- a signal stops it cleanly, state file or not -----------------------------------------------------------------


@pytest.mark.parametrize("state", ["none", "file"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_stops_the_guard_removing_both_sockets_and_saying_so(guard_factory, tmp_path, sig, state):
    g = guard_factory(*(["--state", "none"] if state == "none" else ["--state", str(tmp_path / "g.cbstate")]))
    assert request(g.socket, {"op": "ping", "id": 1})["pong"]
    assert g.stop(sig) == 0
    assert not g.socket.exists() and not g.operator.exists()
    assert "guard stopped" in g.log.read_text()
