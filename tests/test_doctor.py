"""`cbconsole doctor`'s checks on real files and a real guard (the real harnesses: tests/e2e/test_doctor_e2e.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from breaker.hook import plugin_dir
from breaker.wiring import doctor
from breaker.wiring.harnesses import Places, cbhook_command, find_cbhook, hook_file, settings_snippet
from breaker.wiring.setup import main as setup
from tests.test_setup import put

CBHOOK = find_cbhook()
assert CBHOOK is not None
COMMAND = cbhook_command(hook_file())  # the form setup writes


@pytest.fixture(autouse=True)
def _no_harness_homes(monkeypatch):
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "DSH_HOME"):
        monkeypatch.delenv(name, raising=False)


def places(home: Path, **env: str) -> Places:
    return Places.of(str(home), environ={"HOME": str(home), "PATH": "", **env})


def settings(harness: str, home: Path, value: dict) -> list[doctor._Settings]:
    path = places(home).settings_file(harness)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    found: list[doctor.Finding] = []
    read = doctor._read_settings(harness, path, found)
    assert found == [] and read is not None
    return [read]


def statuses(checks: list[doctor.Finding]) -> list[tuple[str, str]]:
    return [(c.status, c.check) for c in checks]


def test_hooks_that_run_this_installations_cbhook_as_setup_writes_them_are_ok(tmp_path):
    files = settings("claude-code", tmp_path, settings_snippet("claude-code", COMMAND))
    assert statuses(doctor.check_hooks("claude-code", files, CBHOOK, places(tmp_path), None)) == [
        ("ok", "claude-code.hook")
    ]


def test_hooks_that_call_the_cbhook_program_work_and_doctor_says_how_to_make_them_fast(tmp_path):
    files = settings("claude-code", tmp_path, settings_snippet("claude-code", str(CBHOOK)))
    checks = doctor.check_hooks("claude-code", files, CBHOOK, places(tmp_path), None)
    assert statuses(checks) == [("ok", "claude-code.hook"), ("warn", "claude-code.hook")]
    assert f"setup now writes `{COMMAND}`" in checks[1].message and checks[1].fix == "cbconsole setup claude-code"


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("cbhook", "runs `cbhook` by name"),
        ("/gone/venv/bin/cbhook", "does not exist"),
        ("OTHER", "another installation's cbhook"),
        ("python3 -I -S /x/breaker/cbhook.py", "runs `python3` by name"),
        ("/gone/venv/bin/python -I -S /gone/breaker/cbhook.py", "/gone/venv/bin/python, which does not exist"),
        ("PYTHON -I -S /gone/breaker/cbhook.py", "/gone/breaker/cbhook.py, which does not exist"),
        ("OTHER.py", "another installation's cbhook"),
    ],
)
def test_a_hook_that_may_not_reach_this_cbhook_fails_with_the_setup_command(tmp_path, command, words):
    if command == "OTHER":
        other = tmp_path / "venv2" / "bin" / "cbhook"
        other.parent.mkdir(parents=True)
        shutil.copy(CBHOOK, other)  # type: ignore[arg-type]
        command = str(other)
    if command == "OTHER.py":
        other = tmp_path / "site" / "breaker" / "cbhook.py"
        other.parent.mkdir(parents=True)
        shutil.copy(hook_file(), other)
        command = f"{sys.executable} -I -S {other}"
    command = command.replace("PYTHON", sys.executable)
    files = settings("codex", tmp_path, settings_snippet("codex", command))
    (check,) = doctor.check_hooks("codex", files, CBHOOK, places(tmp_path), None)
    assert check.status == "fail" and words in check.message, check
    assert check.fix == "cbconsole setup codex"


def test_no_hook_is_a_failure_and_a_missing_post_hook_a_warning(tmp_path):
    (check,) = doctor.check_hooks("gemini", [], CBHOOK, places(tmp_path), None)
    assert check.status == "fail" and "no BeforeTool hook" in check.message and "not checked" in check.message
    value = settings_snippet("gemini", COMMAND)
    del value["hooks"]["AfterTool"]
    checks = doctor.check_hooks("gemini", settings("gemini", tmp_path, value), CBHOOK, places(tmp_path), None)
    assert statuses(checks) == [("ok", "gemini.hook"), ("warn", "gemini.hook")]
    assert "AfterTool" in checks[1].message


def test_cbhook_twice_on_one_event_fails_because_every_call_would_count_twice(tmp_path):
    value = settings_snippet("cursor", str(CBHOOK))
    value["hooks"]["beforeShellExecution"] *= 2
    checks = doctor.check_hooks("cursor", settings("cursor", tmp_path, value), CBHOOK, places(tmp_path), None)
    assert ("fail", "cursor.hook") in statuses(checks) and "twice" in checks[-1].message


def test_settings_that_are_not_json_fail_naming_the_file_and_line(tmp_path):
    path = places(tmp_path).settings_file("claude-code")
    path.parent.mkdir()
    path.write_text('{\n  "hooks": {},\n}\n')
    found: list[doctor.Finding] = []
    assert doctor._read_settings("claude-code", path, found) is None
    (check,) = found
    assert check.status == "fail" and f"{path}: line 3" in check.message


def test_switches_that_turn_every_hook_off_fail(tmp_path):
    claude = settings("claude-code", tmp_path, {"disableAllHooks": True})
    assert statuses(doctor.check_claude(claude, [])) == [("fail", "claude-code.hooks-off")]
    command = str(CBHOOK)
    gemini = settings("gemini", tmp_path, {"hooksConfig": {"enabled": False, "disabled": [command]}})
    checks = doctor.check_gemini(gemini, command, places(tmp_path))
    assert statuses(checks) == [
        ("fail", "gemini.hooks-off"),
        ("fail", "gemini.hooks-off"),
        ("warn", "gemini.loop-detector"),
    ]


def test_gemini_with_its_loop_detector_off_draws_no_warning(tmp_path):
    files = settings("gemini", tmp_path, {"model": {"disableLoopDetection": True}})
    assert doctor.check_gemini(files, None, places(tmp_path)) == []


def test_an_unproven_version_warns_with_the_proven_one_to_install():
    check = doctor.check_version("codex", Path("/usr/bin/codex"), "0.172.0")
    assert check.status == "warn" and "0.171.0" in check.message
    assert check.fix.startswith("npm install -g @openai/codex@0.171.0")
    assert doctor.check_version("codex", Path("/usr/bin/codex"), "0.171.0").status == "ok"


def test_the_version_is_read_from_the_npm_package_without_running_the_program(tmp_path):
    package = tmp_path / "node_modules" / "@google" / "gemini-cli"
    (package / "bundle").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@google/gemini-cli", "version": "0.61.0"}))
    program = package / "bundle" / "gemini.js"
    program.write_text("#!/bin/false\n")  # would fail if run
    program.chmod(0o755)
    link = tmp_path / "node_modules" / ".bin" / "gemini"
    link.parent.mkdir()
    link.symlink_to(program)
    assert doctor.version_of(link, places(tmp_path), "gemini") == "0.61.0"


# -- dsh -----------------------------------------------------------------------------------------


def test_dsh_after_setup_is_ok_and_its_guard_socket_is_the_one_checked(tmp_path):
    assert setup(["dsh", "--home", str(tmp_path), "--socket", "/run/x/guard.sock"]) == 0
    sockets: set[Path] = set()
    checks = doctor.check_dsh(places(tmp_path), sockets, Path("/default.sock"))
    assert statuses(checks) == [("ok", "dsh.plugin")] and sockets == {Path("/run/x/guard.sock")}


def test_dsh_without_the_plugin_or_the_hmr_row_fails_and_a_broken_layer_names_its_line(tmp_path):
    layer = tmp_path / ".dsh" / "cordis.patch.yml"
    layer.parent.mkdir()
    layer.write_text("- id: circuit-breaker\n  config:\n    duplicateLimit: 4\n")
    checks = doctor.check_dsh(places(tmp_path), set(), Path("/d.sock"))
    assert statuses(checks) == [("fail", "dsh.plugin"), ("fail", "dsh.hmr")]
    assert all(c.fix == "cbconsole setup dsh" for c in checks)
    layer.write_text("[]\n- id: circuit-breaker\n")  # rows appended after `[]`: invalid YAML
    (broken, *_rest) = doctor.check_dsh(places(tmp_path), set(), Path("/d.sock"))
    assert broken.status == "fail" and f"{layer}:2" in broken.message and "dsh refuses to start" in broken.message


def test_dsh_plugin_row_naming_a_missing_file_fails(tmp_path):
    layer = tmp_path / ".dsh" / "cordis.patch.yml"
    layer.parent.mkdir()
    layer.write_text(
        "- insert:\n    - id: circuit-breaker\n      name: /gone/breaker/dsh_plugin/index.mjs\n"
        "- id: hmr\n  disabled: false\n  config: {root: []}\n"
    )
    checks = doctor.check_dsh(places(tmp_path), set(), Path("/d.sock"))
    assert statuses(checks) == [("fail", "dsh.plugin")] and "does not exist" in checks[0].message
    assert os.path.isfile(os.path.join(plugin_dir(), "index.mjs"))


# -- the guard, and the command ------------------------------------------------------------------


def test_the_guard_check_says_whether_it_answers(guard, tmp_path):
    assert doctor.check_guard(guard.socket).status == "ok"
    missing = doctor.check_guard(tmp_path / "none" / "guard.sock")
    assert missing.status == "fail" and "not running" in missing.message and "cbconsole --headless" in missing.fix
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "guard.sock").write_text("")
    unsafe = doctor.check_guard(shared / "guard.sock")
    assert unsafe.status == "fail" and "can be written by other users" in unsafe.message


def test_doctor_exits_1_when_a_check_fails_and_prints_json_for_scripts(guard, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no harness installed
    monkeypatch.setenv("CBCONSOLE_SOCKET", str(tmp_path / "none" / "guard.sock"))
    assert doctor.main(["--home", str(tmp_path), "--json"]) == 1
    checks = json.loads(capsys.readouterr().out)
    assert [(c["check"], c["status"]) for c in checks] == [
        ("guard", "fail"),
        *[(h, "skip") for h in ("claude-code", "codex", "gemini", "dsh", "cursor")],
    ]
    assert doctor.main(["--home", str(tmp_path), "--socket", str(guard.socket)]) == 0
    out = capsys.readouterr().out
    assert "ok    guard" in out and "Nothing failed." in out


# -- files doctor cannot use: a failed check naming the file, never a traceback ----------------------


def installed(home: Path) -> None:
    """Programs where an installer puts them (~/.local/bin) that print a proven version and exit: doctor
    checks each harness's files (and, Codex's app-server not answering, reads config.toml itself)."""
    bin_dir = home / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    for name, version in (("claude", "2.1.332"), ("codex", "0.171.0"), ("gemini", "0.61.0"), ("dsh", "0.1.0-rc.8")):
        (bin_dir / name).write_text(f"#!/bin/sh\necho {version}\n")
        (bin_dir / name).chmod(0o755)


def doctor_json(capsys, home: Path) -> tuple[int, list[dict]]:
    capsys.readouterr()  # what setup printed before
    status = doctor.main(["--home", str(home), "--json"])
    return status, json.loads(capsys.readouterr().out)


def failed(checks: list[dict], name: str) -> list[str]:
    return [c["message"] for c in checks if c["check"] == name and c["status"] == "fail"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CBCONSOLE_SOCKET", str(tmp_path / "none" / "guard.sock"))
    installed(tmp_path)
    return tmp_path


@pytest.mark.timeout(120)  # int() is quadratic in the digits: a million must not hang doctor
@pytest.mark.parametrize("digits", [5000, 1_000_000])
@pytest.mark.parametrize("harness", ["claude-code", "codex", "gemini"])
def test_settings_holding_a_huge_integer_are_read_and_their_hooks_checked(capsys, home, harness, digits):
    assert setup(["codex" if harness == "codex" else harness, "--home", str(home)]) == 0
    path = places(home).settings_file(harness)
    text = path.read_text()
    path.write_text(text.replace("{", '{\n  "big": ' + "7" * digits + ",", 1))
    _status, checks = doctor_json(capsys, home)
    assert [c["status"] for c in checks if c["check"] == f"{harness}.hook"] == ["ok"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("digits", [5000, 1_000_000])
def test_a_codex_config_toml_holding_a_huge_integer_fails_the_trust_check_naming_the_file(capsys, home, digits):
    assert setup(["codex", "--home", str(home)]) == 0
    config = home / ".codex" / "config.toml"
    config.write_text(config.read_text() + "big = " + "7" * digits + "\n")
    status, checks = doctor_json(capsys, home)
    (message,) = failed(checks, "codex.trust")
    assert status == 1 and message.startswith(f"{config}: line ") and "more than 4,300 digits" in message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("digits", [5000, 1_000_000])
def test_a_dsh_layer_holding_a_huge_integer_fails_naming_the_file_and_line(capsys, home, digits):
    layer = home / ".dsh" / "cordis.patch.yml"
    layer.parent.mkdir()
    layer.write_text("# mine\n- id: session-persistence-jsonl\n  config: {n: " + "7" * digits + "}\n")
    status, checks = doctor_json(capsys, home)
    (message,) = failed(checks, "dsh.layer")
    assert status == 1 and message.startswith(f"{layer}:2: ")


HOSTILE = {  # (a JSON settings file, a dsh layer)
    "nested 100,000 deep": ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "- " + "[" * 100_000),
    "a NUL byte": ('{"a": 1}\x00', "- id: x\x00\n"),
    "not UTF-8": (b'{"a": "\xff"}', b"- id: \xff\n"),
    "over 4 MiB": ('{"a": "' + "x" * (5 * 1024 * 1024) + '"}', "- id: " + "x" * (5 * 1024 * 1024) + "\n"),
    "a FIFO": ("a FIFO", "a FIFO"),
    "a directory": ("a directory", "a directory"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("harness", ["claude-code", "codex", "gemini", "dsh"])
def test_a_settings_file_doctor_cannot_read_is_a_failed_check_naming_it(capsys, home, harness, kind):
    path = places(home).dsh_layer() if harness == "dsh" else places(home).settings_file(harness)
    path.parent.mkdir(parents=True)
    put(path, HOSTILE[kind][1 if harness == "dsh" else 0])
    status, checks = doctor_json(capsys, home)
    name = "dsh.layer" if harness == "dsh" else f"{harness}.settings"
    (message,) = failed(checks, name)
    assert status == 1 and message.startswith(str(path)), message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["nested 100,000 deep", "a NUL byte", "not UTF-8", "a directory"])
def test_a_codex_config_toml_doctor_cannot_read_fails_the_trust_check_naming_it(capsys, home, kind):
    assert setup(["codex", "--home", str(home)]) == 0
    config = home / ".codex" / "config.toml"
    config.unlink()
    contents = {"nested 100,000 deep": "a = " + "[" * 100_000 + "]" * 100_000, "a NUL byte": "a = 1\x00"}
    put(config, contents.get(kind, b'a = "\xff"\n' if kind == "not UTF-8" else kind))
    status, checks = doctor_json(capsys, home)
    (message,) = failed(checks, "codex.trust")
    assert status == 1 and message.startswith(f"{config}: "), message


@pytest.mark.timeout(60)  # a FIFO read would block for ever
@pytest.mark.parametrize(
    "manifest",
    ["a FIFO", b'{"dsh": "\xff"}', '{"dsh": ' + "[" * 100_000 + "]" * 100_000 + "}", "a directory"],
    ids=["fifo", "not-utf8", "nested", "directory"],
)
def test_a_dsh_profile_whose_package_json_cannot_be_read_is_a_warning_naming_it(capsys, home, manifest):
    assert setup(["dsh", "--home", str(home)]) == 0
    path = home / ".dsh" / "profiles" / "web" / "package.json"
    path.parent.mkdir(parents=True)
    put(path, manifest)
    _status, checks = doctor_json(capsys, home)
    (check,) = [c for c in checks if c["check"] == "dsh.profile"]
    assert check["status"] == "warn" and check["message"].startswith(str(path)) and "profile web" in check["message"]


def test_a_dsh_profile_with_the_bundle_is_read_past_a_huge_integer_in_its_package_json(tmp_path):
    profile = tmp_path / ".dsh" / "profiles" / "web"
    profile.mkdir(parents=True)
    manifest = {"n": 0, "dsh": {"profile": {"bundles": ["cbconsole-circuit-breaker"]}}}
    (profile / "package.json").write_text(json.dumps(manifest).replace("0", "7" * 5000))
    assert setup(["dsh", "--home", str(tmp_path), "--profile", "web"]) == 0
    checks = doctor.check_dsh(places(tmp_path), set(), Path("/d.sock"))
    assert statuses(checks)[0] == ("ok", "dsh.plugin")


def test_a_dsh_layer_that_holds_no_list_fails_because_dsh_refuses_to_start_with_it(tmp_path):
    assert setup(["dsh", "--home", str(tmp_path)]) == 0
    layer = tmp_path / ".dsh" / "cordis.patch.yml"
    layer.write_text("# everything taken out by hand\n")
    checks = doctor.check_dsh(places(tmp_path), set(), Path("/d.sock"))
    assert ("fail", "dsh.layer") in statuses(checks)
    assert any(f"{layer}: holds no list" in c.message for c in checks)


def test_a_socket_that_answers_ping_with_an_error_fails_the_guard_check(tmp_path):
    import socket
    import threading

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    path = run / "guard.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()

    def answer() -> None:  # not a guard: whatever is asked, an error
        conn, _ = server.accept()
        with conn:
            request = json.loads(conn.recv(65536).split(b"\n")[0])
            conn.sendall(json.dumps({"id": request["id"], "error": {"code": "nope", "message": "no"}}).encode() + b"\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        check = doctor.check_guard(path)
    finally:
        server.close()
    assert check.status == "fail" and "answered ping with an error (nope: no)" in check.message


# -- what doctor takes as "installed", and Claude Code's every settings file --------------------------


@pytest.mark.parametrize("left", ["nothing", "setup's hooks.json", "setup's hooks.json and its notes"])
def test_an_empty_or_leftover_cursor_directory_is_not_taken_as_cursor_installed(capsys, home, left):
    cursor = home / ".cursor"
    if left == "nothing":
        cursor.mkdir()
    else:
        assert setup(["cursor", "--home", str(home)]) == 0
        if left == "setup's hooks.json":
            (cursor / "hooks.json.cbconsole-created").unlink()
    _status, checks = doctor_json(capsys, home)
    assert [(c["status"], c["message"]) for c in checks if c["harness"] == "cursor"] == [
        ("skip", "Cursor is not installed here")
    ]


@pytest.mark.parametrize("sign", ["argv.json", "extensions", "a hooks.json hook of the user's"])
def test_a_cursor_directory_with_cursors_own_files_is_cursor_installed_and_checked(capsys, home, sign):
    cursor = home / ".cursor"
    cursor.mkdir()
    if sign == "extensions":
        (cursor / sign).mkdir()
    elif sign == "argv.json":
        (cursor / sign).write_text("{}")
    else:
        (cursor / "hooks.json").write_text('{"version": 1, "hooks": {"stop": [{"command": "/usr/bin/audit"}]}}')
    _status, checks = doctor_json(capsys, home)
    assert failed(checks, "cursor.hook") and "Cursor is installed, but" in failed(checks, "cursor.hook")[0]


HOOKS_OFF = {  # where a `disableAllHooks: true` is: the file, under the home (~), the project (P) or managed (M)
    "the user's settings.local.json": "~/.claude/settings.local.json",
    "the project's settings.json": "P/.claude/settings.json",
    "the project's settings.local.json": "P/.claude/settings.local.json",
    "managed-settings.json": "M/managed-settings.json",
    "a managed-settings.d drop-in": "M/managed-settings.d/50-policy.json",
}


def claude_places(home: Path, tmp_path: Path) -> Places:
    """The home and a project in it, with a managed-settings directory of the test's own."""
    (tmp_path / "project").mkdir(exist_ok=True)
    return dataclasses.replace(places(home), project=tmp_path / "project", claude_managed=tmp_path / "managed")


def write_at(where: Places, short: str, value: dict) -> Path:
    roots = {"~": where.home, "P": where.project, "M": where.claude_managed}
    path = Path(str(roots[short[0]]) + short[1:])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return path


def hooks_off(where: Places) -> list[doctor.Finding]:
    return [c for c in doctor.run_checks(where) if c.check == "claude-code.hooks-off"]


@pytest.mark.parametrize("place", list(HOOKS_OFF))
def test_disable_all_hooks_in_any_claude_code_settings_file_that_applies_fails_naming_it(home, place):
    where = claude_places(home, home)
    assert setup(["claude-code", "--home", str(home)]) == 0
    path = write_at(where, HOOKS_OFF[place], {"disableAllHooks": True})
    (finding,) = hooks_off(where)
    assert finding.status == "fail" and finding.message.startswith(f"{path} ")
    assert "disableAllHooks: true" in finding.message and str(path) in finding.fix


def test_disable_all_hooks_turned_back_off_by_a_file_of_higher_precedence_is_not_reported(home):
    where = claude_places(home, home)
    assert setup(["claude-code", "--home", str(home)]) == 0
    write_at(where, "~/.claude/settings.local.json", {"disableAllHooks": True})
    write_at(where, "P/.claude/settings.local.json", {"disableAllHooks": False})
    assert hooks_off(where) == []
    write_at(where, "M/managed-settings.json", {"disableAllHooks": False})
    write_at(where, "M/managed-settings.d/10-a.json", {"disableAllHooks": True})
    (finding,) = hooks_off(where)  # a drop-in is merged over managed-settings.json: it decides
    assert "10-a.json (managed settings)" in finding.message and "runs no hook at all" in finding.message


def test_managed_hooks_only_fails_unless_the_managed_settings_hold_the_cbhook_hooks(home):
    where = claude_places(home, home)
    assert setup(["claude-code", "--home", str(home)]) == 0
    managed = write_at(where, "M/managed-settings.json", {"allowManagedHooksOnly": True})
    (finding,) = hooks_off(where)
    assert finding.status == "fail" and "runs only the managed settings' hooks" in finding.message
    managed.write_text(json.dumps({"allowManagedHooksOnly": True, **settings_snippet("claude-code", COMMAND)}))
    write_at(where, "~/.claude/settings.local.json", {"disableAllHooks": True})  # managed hooks still run
    assert hooks_off(where) == []
