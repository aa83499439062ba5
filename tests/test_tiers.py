"""The suite's own rules, run on a small suite of their own in a child pytest with this suite's conftest: a test
that writes into the real HOME fails the run and is named; each test has a HOME and a runtime directory of
its own; a tier not asked for is left out and listed; a missing tool skips with one line, or fails under
`CI=true`, which also asks for every tier."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from tests.conftest import ROOT
from tests.isolation import loopback_env

SUITE = textwrap.dedent("""
    import json, os
    from pathlib import Path

    import pytest


    def record(name):
        keys = ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR")
        Path(os.environ["RECORD_TO"], name).write_text(json.dumps({k: os.environ[k] for k in keys}))


    def test_one_writes_under_its_own_home_as_crewai_does():
        record("one")
        (Path.home() / ".config" / "crewai").mkdir(parents=True)
        (Path(os.environ["XDG_DATA_HOME"]) / "work").mkdir(parents=True)


    def test_two_writes_into_the_real_home_when_told_to():
        record("two")
        if os.environ.get("LEAK_TO"):
            Path(os.environ["LEAK_TO"]).mkdir()


    @pytest.mark.e2e
    def test_runs_a_real_harness():
        pass


    @pytest.mark.needs("tmux")
    def test_drives_tmux():
        pass
""")


def run_suite(tmp_path: Path, *args: str, **env: str) -> tuple[int, str]:
    """The small suite in a child pytest: its "real" HOME is a directory of this test's, tmux is not on PATH."""
    suite = tmp_path / "suite"
    for d in (suite, tmp_path / "records", tmp_path / "real-home" / ".local" / "share", tmp_path / "bin"):
        d.mkdir(parents=True, exist_ok=True)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n  e2e\n  needs\n")
    (suite / "test_small.py").write_text(SUITE)
    child = {
        **{k: v for k, v in os.environ.items() if k not in ("CI", "LEAK_TO") and not k.startswith("XDG_")},
        "HOME": str(tmp_path / "real-home"),
        "PATH": str(tmp_path / "bin"),
        "PYTHONPATH": str(ROOT),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # only this suite's conftest: no xdist, no Textual snapshots
        "RECORD_TO": str(tmp_path / "records"),
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-ra", "-q", *args],
        cwd=suite,
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_test_that_writes_into_the_real_home_fails_the_run_and_the_path_is_named(tmp_path):
    leak = tmp_path / "real-home" / ".local" / "share" / "leaky"
    code, out = run_suite(tmp_path, "-m", "not needs", LEAK_TO=str(leak))
    assert code == 1, out
    assert "the real HOME was written to" in out and f"new      {leak}" in out, out
    assert "3 passed, 1 deselected" in out  # every test passed: the check alone failed the run


def test_tests_writing_only_their_own_homes_pass_and_each_had_its_own(tmp_path):
    code, out = run_suite(tmp_path, "-m", "not needs")
    assert code == 0, out
    assert "the real HOME" not in out, out
    one, two = (json.loads((tmp_path / "records" / name).read_text()) for name in ("one", "two"))
    real = str(tmp_path / "real-home")
    for env in (one, two):
        assert all(not value.startswith(real) for value in env.values()), env
        assert env["XDG_CONFIG_HOME"] == env["HOME"] + "/.config" and env["XDG_DATA_HOME"].startswith(env["HOME"])
    assert all(one[k] != two[k] for k in one), (one, two)
    assert os.stat(one["XDG_RUNTIME_DIR"]).st_mode & 0o777 == 0o700


def test_a_tier_not_asked_for_is_listed_and_a_missing_tool_skips_with_one_line(tmp_path):
    code, out = run_suite(tmp_path)
    assert code == 0, out
    assert "1 e2e tests (run the real harnesses" in out and "pytest -m e2e" in out, out
    assert "SKIPPED [1] " in out and "needs tmux on PATH: apt-get install tmux (root), or bash .ci/run" in out, out
    assert "2 passed, 1 skipped, 1 deselected" in out, out


def test_under_ci_every_tier_runs_and_a_missing_tool_fails(tmp_path):
    code, out = run_suite(tmp_path, CI="true")
    assert code == 1, out
    assert "ERROR test_small.py::test_drives_tmux" in out and "[CI=true: a missing requirement fails]" in out, out
    assert "3 passed, 1 error" in out, out  # the e2e test ran


def test_a_proxy_the_user_set_for_the_internet_is_not_asked_for_the_tests_loopback_servers():
    env = loopback_env({"no_proxy": "corp.example"})
    assert env["no_proxy"].split(",")[0] == "corp.example"  # the user's own entries are kept
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dead = "http://127.0.0.1:9"  # a proxy nothing listens on: a request sent there fails
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{server.server_port}/', timeout=9).status)",
        ],
        env={**os.environ, "http_proxy": dead, "HTTP_PROXY": dead, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    server.shutdown()
    assert child.stdout.strip() == "200", child.stderr
    assert "127.0.0.1" in os.environ["no_proxy"].split(",")  # and the run itself has it
