"""`cbconsole doctor` on a machine with the real harnesses installed (on PATH) and a scratch home.

Before setup it names every installed harness whose calls are not guarded, with the command that
fixes it, and exits 1; after running exactly those commands it finds nothing wrong, Codex's trust
included (asked of Codex itself: the hash setup records is the one Codex computes); a hook edited by
hand is no longer trusted by Codex, doctor says so, and setup trusts it again.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .harnesses import Harness
from .runs import CBCONSOLE

pytestmark = pytest.mark.e2e


def machine(home: Path, socket: Path, *harnesses: Harness) -> dict[str, str]:
    """The environment of a user with these harnesses on PATH (Node 22 first) and this guard's socket."""
    env = harnesses[0].env({"HOME": str(home), "CBCONSOLE_SOCKET": str(socket)})
    env["PATH"] = os.pathsep.join([*(str(h.exe.parent) for h in harnesses), env["PATH"]])
    return env


def doctor(env: dict[str, str], *args: str) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    """Exit status, and the checks by harness ("guard" for the guard's)."""
    proc = subprocess.run(
        [str(CBCONSOLE), "doctor", "--json", *args], env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.stderr == "", proc.stderr
    by: dict[str, list[dict[str, Any]]] = {}
    for check in json.loads(proc.stdout):
        by.setdefault(check["harness"] or "guard", []).append(check)
    return proc.returncode, by


def failing(checks: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["check"], c["fix"]) for c in checks if c["status"] == "fail"]


def test_doctor_names_each_unguarded_harness_and_its_fix_then_after_those_fixes_finds_nothing_wrong(
    dsh, claude, codex, gemini, guard_factory, tmp_path
):
    home = tmp_path / "home"
    home.mkdir()
    g = guard_factory()
    env = machine(home, g.socket, dsh, claude, codex, gemini)

    status, checks = doctor(env, "--home", str(home))
    assert status == 1
    assert [c["status"] for c in checks["guard"]] == ["ok"]
    fixes = {}
    for name in ("claude-code", "codex", "gemini", "dsh"):
        version = [c for c in checks[name] if c["check"] == f"{name}.version"]
        assert [c["status"] for c in version] == ["ok"], checks[name]  # the proven versions, found on PATH
        wrong = failing(checks[name])
        assert wrong, checks[name]
        (fix,) = {f for _check, f in wrong}
        assert fix == f"cbconsole setup {name}"  # the docs' line: HOME is the home checked
        fixes[name] = fix
    assert "is installed, but no PreToolUse hook" in checks["codex"][1]["message"]
    assert [c["status"] for c in checks["cursor"]] == ["skip"]  # not installed: nothing to guard

    for fix in fixes.values():  # exactly what doctor said to run
        proc = subprocess.run(
            [str(CBCONSOLE), *shlex.split(fix)[1:]], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    status, checks = doctor(env, "--home", str(home))
    assert status == 0, checks
    assert [c for cs in checks.values() for c in cs if c["status"] in ("fail", "warn")] == []
    trust = [c for c in checks["codex"] if c["check"] == "codex.trust"]
    assert [(c["status"], "asked with `codex app-server`" in c["message"]) for c in trust] == [("ok", True)]

    # A hook edited by hand (a longer timeout) is a modified hook to Codex: no longer trusted, so skipped.
    hooks_json = home / ".codex" / "hooks.json"
    hooks_json.write_text(hooks_json.read_text().replace('"timeout": 10}', '"timeout": 20}', 1))
    status, checks = doctor(env, "--home", str(home))
    assert status == 1
    (trust,) = [c for c in checks["codex"] if c["check"] == "codex.trust"]
    assert trust["status"] == "fail" and "PreToolUse (modified)" in trust["message"], trust
    proc = subprocess.run([str(CBCONSOLE), *shlex.split(fixes["codex"])[1:]], env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and "trusted_hash" in proc.stdout, proc.stdout + proc.stderr
    assert doctor(env, "--home", str(home))[0] == 0


def test_doctor_without_a_guard_fails_and_says_how_to_start_one(claude, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = machine(home, tmp_path / "nobody" / "guard.sock", claude)
    status, checks = doctor(env, "--home", str(home))
    assert status == 1
    (guard,) = checks["guard"]
    assert guard["status"] == "fail" and "the guard is not running" in guard["message"]
    assert "cbconsole --headless" in guard["fix"]
