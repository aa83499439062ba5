"""`cbconsole setup HARNESS` on real files in a scratch home: merging, recognising its own entry, backups,
`--dry-run`, `--remove`, and refusing what it must not write. (The harnesses reading what it wrote are
run for real in tests/e2e.)"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from breaker.hook import plugin_dir
from breaker.wiring import codex
from breaker.wiring.dsh import HEADER
from breaker.wiring.harnesses import HOOKS, cbhook_command, find_cbhook, hook_file, settings_snippet
from breaker.wiring.setup import main

CBHOOK = find_cbhook()
COMMAND = cbhook_command(hook_file())  # what setup writes: `<this python> -I -S …/breaker/cbhook.py`
PLUGIN = os.path.join(plugin_dir(), "index.mjs")
JSON_HARNESSES = ["claude-code", "codex", "gemini", "cursor"]
FILES = {
    "claude-code": ".claude/settings.json",
    "codex": ".codex/hooks.json",
    "gemini": ".gemini/settings.json",
    "cursor": ".cursor/hooks.json",
    "dsh": ".dsh/cordis.patch.yml",
}


@pytest.fixture(autouse=True)
def _no_harness_homes(monkeypatch):
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "DSH_HOME"):
        monkeypatch.delenv(name, raising=False)


def setup(capsys, home: Path, harness: str, *args: str) -> tuple[int, str, str]:
    status = main([harness, "--home", str(home), *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def run(home: Path, harness: str, *args: str) -> int:
    """The command without capsys (inside hypothesis examples); its output goes nowhere."""
    from contextlib import redirect_stderr, redirect_stdout
    from io import StringIO

    with redirect_stdout(StringIO()), redirect_stderr(StringIO()):
        return main([harness, "--home", str(home), *args])


def only_inserted(old: str, new: str) -> bool:
    """Whether `new` is `old` with text added and none of its characters changed or removed."""
    ops = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    return all(tag in ("equal", "insert") for tag, *_ in ops)


def state(path: Path) -> tuple[bytes, int] | None:
    return (path.read_bytes(), path.stat().st_mtime_ns) if path.exists() else None


# -- the target: twice changes nothing, others' bytes kept, --remove gives the original back ---------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)
scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | names
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3), max_leaves=8
)
lint = {"type": "command", "command": "/usr/bin/mylint --strict"}
other_hook = st.fixed_dictionaries({"matcher": st.sampled_from(["Bash", "*", "Write|Edit"]), "hooks": st.just([lint])})


@st.composite
def settings_files(draw: Any, harness: str) -> str:
    """A settings file of the user's: other keys, other hooks (on our events too), in some layout."""
    top = draw(st.dictionaries(names.filter(lambda k: k not in ("hooks", "version", "model")), values, max_size=4))
    events = [h.event for h in HOOKS[harness]] + ["Stop", "Notification"]
    hooks = draw(st.dictionaries(st.sampled_from(events), st.lists(other_hook, min_size=1, max_size=2), max_size=3))
    if harness == "cursor":
        hooks = {event: [{"command": "/usr/bin/audit"}] for event in hooks}
    if hooks:
        top["hooks"] = hooks
    if not top:
        top["theme"] = "dark"
    indent = draw(st.sampled_from([None, 2, 4, "\t"]))
    return json.dumps(top, indent=indent, ensure_ascii=draw(st.booleans())) + draw(st.sampled_from(["", "\n"]))


@pytest.mark.parametrize("harness", JSON_HARNESSES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_setup_keeps_every_byte_of_a_users_file_changes_nothing_when_run_again_and_remove_restores_it(harness, data):
    text = data.draw(settings_files(harness))
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        path = home / FILES[harness]
        path.parent.mkdir(parents=True)
        path.write_text(text)
        assert run(home, harness) == 0
        new = path.read_text()
        assert only_inserted(text, new)
        value = json.loads(new)
        for event, groups in settings_snippet(harness, COMMAND)["hooks"].items():
            assert groups[0] in value["hooks"][event]  # ours, added to whatever the event already held
        assert {k: v for k, v in value.items() if k not in ("hooks", "model", "version")} == {
            k: v for k, v in json.loads(text).items() if k not in ("hooks", "model", "version")
        }
        before = state(path)
        assert run(home, harness) == 0
        assert state(path) == before  # not even rewritten
        assert run(home, harness, "--remove") == 0
        assert path.read_text() == text
        assert not (path.parent / (path.name + ".cbconsole-backup")).exists()


@pytest.mark.parametrize("harness", [*JSON_HARNESSES, "dsh"])
def test_setup_creates_a_missing_file_says_what_it_did_and_remove_deletes_it_again(capsys, tmp_path, harness):
    status, out, err = setup(capsys, tmp_path, harness)
    assert (status, err) == (0, "")
    path = tmp_path / FILES[harness]
    assert f"+++ {path}" in out and "--- /dev/null" in out  # the diff of what it wrote
    assert "now asks the guard before every tool call" in out
    status, out, _ = setup(capsys, tmp_path, harness)
    assert status == 0 and "already set up; nothing changed" in out
    status, out, _ = setup(capsys, tmp_path, harness, "--remove")
    assert status == 0 and not path.exists()
    assert list(tmp_path.rglob("*.cbconsole-backup")) == []
    status, out, _ = setup(capsys, tmp_path, harness, "--remove")
    assert status == 0 and "holds no cbconsole entries" in out


def test_the_hooks_call_this_installations_cbhook_by_its_absolute_path(capsys, tmp_path):
    setup(capsys, tmp_path, "claude-code", "--socket", "/run/g.sock", "--fail-closed")
    value = json.loads((tmp_path / FILES["claude-code"]).read_text())
    command = value["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert command == f"{sys.executable} -I -S {hook_file()} --socket /run/g.sock --fail-closed"
    assert os.path.isabs(command.split()[0]) and os.access(command.split()[0], os.X_OK)


def test_the_hook_command_setup_writes_runs_cbhook_without_the_console_script(capsys, tmp_path):
    setup(capsys, tmp_path, "claude-code")
    value = json.loads((tmp_path / FILES["claude-code"]).read_text())
    command = value["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    out = subprocess.run(command + " --help", shell=True, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("usage: cbhook"), out


def test_given_a_cbhook_program_setup_writes_it_as_before(capsys, tmp_path):
    setup(capsys, tmp_path, "claude-code", "--cbhook", str(CBHOOK))
    value = json.loads((tmp_path / FILES["claude-code"]).read_text())
    assert value["hooks"]["PreToolUse"][0]["hooks"][0]["command"] == str(CBHOOK)
    setup(capsys, tmp_path, "claude-code")  # and back to the fast form, in place
    value = json.loads((tmp_path / FILES["claude-code"]).read_text())
    assert [g["hooks"][0]["command"] for g in value["hooks"]["PreToolUse"]] == [COMMAND]


def test_a_hook_that_calls_another_cbhook_is_updated_in_place_and_a_second_one_is_taken_out(capsys, tmp_path):
    path = tmp_path / FILES["claude-code"]
    path.parent.mkdir()
    old = {"type": "command", "command": "/old/venv/bin/cbhook", "timeout": 30}
    path.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}, old]},
                        {"matcher": "*", "hooks": [{"type": "command", "command": "cbhook --fail-closed"}]},
                    ]
                }
            },
            indent=2,
        )
    )
    status, _out, _ = setup(capsys, tmp_path, "claude-code")
    assert status == 0
    groups = json.loads(path.read_text())["hooks"]["PreToolUse"]
    # The first cbhook hook, where the user put it (matcher and timeout theirs), now calls this cbhook;
    # the second would count every call twice, so it went.
    assert groups == [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}, {**old, "command": COMMAND}]}
    ]


def test_an_invalid_file_is_refused_naming_the_file_and_the_line_and_nothing_is_changed(capsys, tmp_path):
    cases = {
        "claude-code": '{\n  "model": "opus",\n  "hooks": {"PreToolUse": []},\n}\n',  # a trailing comma
        "gemini": '{\n  // ok\n  "a": 1 /* unclosed\n}\n',
        "cursor": '{"version": 1, "hooks": {"sessionEnd": {"command": "x"}}}',  # a list expected
        "dsh": "- id: circuit-breaker\n  config: [unclosed\n",
    }
    for harness, text in cases.items():
        path = tmp_path / FILES[harness]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        status, out, err = setup(capsys, tmp_path, harness)
        assert status == 1 and out == ""
        assert err.startswith(f"cbconsole setup: {path}:"), err
        assert "line " in err and "nothing was changed" in err.lower(), err
        assert path.read_text() == text
        assert list(path.parent.glob("*.cbconsole-backup")) == []
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('model = "x"\n[hooks\n')
    status, out, err = setup(capsys, tmp_path, "codex")
    assert status == 1 and f"{config}: is not valid TOML" in err and "line 2" in err
    assert not (tmp_path / FILES["codex"]).exists()  # nothing written, hooks.json included


def test_a_file_of_another_user_reached_through_a_symlink_is_refused_and_left_alone(capsys, tmp_path):
    theirs = tmp_path / "theirs.json"
    if os.geteuid() == 0:
        theirs.write_text("{}\n")
        os.chown(theirs, 65534, 65534)
    else:
        theirs = Path("/etc/passwd")  # root's: another user's file for anyone else
    before = theirs.read_bytes()
    (tmp_path / ".claude").mkdir()
    (tmp_path / FILES["claude-code"]).symlink_to(theirs)
    status, _out, err = setup(capsys, tmp_path, "claude-code")
    assert status == 1 and "the file it points to belongs to another user" in err, err
    assert theirs.read_bytes() == before


def test_a_symlinked_settings_file_is_edited_through_the_link(capsys, tmp_path):
    target = tmp_path / "dotfiles" / "claude.json"
    target.parent.mkdir()
    target.write_text('{"model": "opus"}\n')
    (tmp_path / ".claude").mkdir()
    link = tmp_path / FILES["claude-code"]
    link.symlink_to(target)
    assert setup(capsys, tmp_path, "claude-code")[0] == 0
    assert link.is_symlink() and "PreToolUse" in json.loads(target.read_text())["hooks"]


def test_a_read_only_file_and_a_directory_are_refused(capsys, tmp_path):
    path = tmp_path / FILES["gemini"]
    path.parent.mkdir()
    path.write_text("{}\n")
    path.chmod(0o444)
    status, _out, err = setup(capsys, tmp_path, "gemini")
    assert status == 1 and "is read-only" in err
    path.chmod(0o644)
    path.unlink()
    path.mkdir()
    status, _out, err = setup(capsys, tmp_path, "gemini")
    assert status == 1 and "is a directory" in err


def test_dry_run_prints_the_diff_and_writes_nothing(capsys, tmp_path):
    path = tmp_path / FILES["codex"]
    path.parent.mkdir()
    path.write_text('{"hooks": {}}\n')
    status, out, _ = setup(capsys, tmp_path, "codex", "--dry-run")
    assert status == 0 and '"PreToolUse"' in out and "dry run: nothing was written" in out
    assert path.read_text() == '{"hooks": {}}\n' and not (path.parent / "config.toml").exists()


def test_project_scope_and_the_harnesses_own_home_variables(capsys, tmp_path, monkeypatch):
    project = tmp_path / "repo"
    project.mkdir()
    assert main(["claude-code", "--project", str(project), "--home", str(tmp_path / "h")]) == 0
    assert (project / ".claude" / "settings.json").exists() and not (tmp_path / "h" / ".claude").exists()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "elsewhere"))
    assert main(["claude", "--home", str(tmp_path / "h")]) == 0
    assert (tmp_path / "elsewhere" / "settings.json").exists()
    capsys.readouterr()
    assert main(["dsh", "--project", str(project)]) == 1
    assert "dsh has no project settings" in capsys.readouterr().err
    assert main(["vim", "--home", str(tmp_path)]) == 1
    assert "unknown harness 'vim'" in capsys.readouterr().err


# -- Gemini CLI ----------------------------------------------------------------------------------


def test_gemini_comments_are_kept_and_its_loop_detector_is_turned_off_and_back_to_the_users_value(capsys, tmp_path):
    path = tmp_path / FILES["gemini"]
    path.parent.mkdir()
    text = (
        "{\n"
        "  // auth for the API key\n"
        '  "security": {"auth": {"selectedType": "gemini-api-key"}}, // keep\n'
        "  /* the model */\n"
        '  "model": {\n'
        '    "name": "gemini-3",\n'
        '    "disableLoopDetection": false\n'
        "  }\n"
        "}\n"
    )
    path.write_text(text)
    status, out, _ = setup(capsys, tmp_path, "gemini")
    assert status == 0 and "loop detector is now off" in out
    new = path.read_text()
    for comment in ("// auth for the API key", "// keep", "/* the model */"):
        assert comment in new
    assert '"disableLoopDetection": true' in new and '"BeforeTool"' in new
    assert setup(capsys, tmp_path, "gemini", "--remove")[0] == 0
    assert path.read_text() == text  # false again, as the user had it


def test_gemini_keep_loop_detector_leaves_it_as_it_is(capsys, tmp_path):
    setup(capsys, tmp_path, "gemini", "--keep-loop-detector")
    assert "model" not in json.loads((tmp_path / FILES["gemini"]).read_text())


# -- Codex CLI: the trust --------------------------------------------------------------------------


def test_the_trust_hash_is_the_one_codex_0_171_0_reports_for_the_same_hook():
    # `codex app-server` (0.171.0) answered hooks/list with these currentHash values for a hooks.json
    # holding exactly these two hooks (tests/e2e/test_doctor_e2e.py checks setup's records with it live).
    handler = {"type": "command", "command": "/x/cbhook", "timeout": 10}
    group = {"matcher": "*", "hooks": [handler]}
    assert codex.trust_hash("PreToolUse", group, handler) == (
        "sha256:72f5021e4e63c59cda863d09d74f4a5f8fddfae2baf2f80520bdee32fa0f514c"
    )
    assert codex.trust_hash("PostToolUse", group, handler) == (
        "sha256:44d724226eac608ca19bcb4f1c1a9e4f069d49ec1c77fe489181e0812939a863"
    )
    assert codex.hook_key(Path("/h/.codex/hooks.json"), "PreToolUse", 0, 1) == "/h/.codex/hooks.json:pre_tool_use:0:1"


def test_codex_trust_goes_into_config_toml_keeping_its_bytes_and_follows_a_changed_hook(capsys, tmp_path):
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    text = '# mine\nmodel = "o5"\n\n[projects."/src/app"]\ntrust_level = "trusted"  # yes\n'
    config.write_text(text)
    assert setup(capsys, tmp_path, "codex")[0] == 0
    new = config.read_text()
    assert new.startswith(text)
    hooks_json = tmp_path / FILES["codex"]
    states = tomllib.loads(new)["hooks"]["state"]
    hooks = json.loads(hooks_json.read_text())["hooks"]
    for event in ("PreToolUse", "PostToolUse"):
        group = hooks[event][0]
        key = f"{hooks_json}:{codex.event_label(event)}:0:0"
        assert states[key] == {"trusted_hash": codex.trust_hash(event, group, group["hooks"][0])}
    # Another cbhook path is another hook to Codex: setup updates both the hook and its trust, in place.
    other = tmp_path / "bin" / "cbhook"
    other.parent.mkdir()
    shutil.copy(CBHOOK, other)  # type: ignore[arg-type]
    assert setup(capsys, tmp_path, "codex", "--cbhook", str(other))[0] == 0
    states = tomllib.loads(config.read_text())["hooks"]["state"]
    assert len(states) == 2
    group = json.loads(hooks_json.read_text())["hooks"]["PreToolUse"][0]
    assert group["hooks"][0]["command"] == str(other)
    assert states[f"{hooks_json}:pre_tool_use:0:0"]["trusted_hash"] == codex.trust_hash(
        "PreToolUse", group, group["hooks"][0]
    )
    assert setup(capsys, tmp_path, "codex", "--remove")[0] == 0
    assert config.read_text() == text and not hooks_json.exists()


def test_codex_trust_of_other_hooks_and_their_states_is_left_alone(tmp_path):
    path = tmp_path / "config.toml"
    text = '[hooks.state."/h/hooks.json:stop:0:0"]\ntrusted_hash = "sha256:theirs"\nenabled = true\n'
    new = codex.record_trust(path, text, {"/h/hooks.json:pre_tool_use:1:0": "sha256:ours"}, set())
    assert new.startswith(text)
    back = codex.record_trust(path, new, {}, {"/h/hooks.json:pre_tool_use:1:0"})
    assert back == text


# -- dsh ------------------------------------------------------------------------------------------


def dsh_rows(path: Path) -> list[Any]:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor(None, lambda loader, node: ("tagged", node.tag, loader.construct_scalar(node)))
    return yaml.load(path.read_text(), Loader=Loader)


def test_dsh_setup_turns_the_brackets_dsh_plugin_add_leaves_into_a_valid_block_list(capsys, tmp_path):
    path = tmp_path / ".dsh" / "profiles" / "web" / "cordis.patch.yml"
    path.parent.mkdir(parents=True)
    text = "# Your patch layer for this dsh profile.\n[]\n"
    path.write_text(text)
    assert setup(capsys, tmp_path, "dsh", "--profile", "web")[0] == 0
    assert path.read_text().startswith("# Your patch layer for this dsh profile.\n- insert:")
    assert dsh_rows(path) == [
        {"insert": [{"id": "circuit-breaker", "name": PLUGIN}]},
        {"id": "hmr", "disabled": False, "config": {"root": []}},
    ]
    with path.open("a") as f:  # a user's row, appended as the docs once said: the file stays valid
        f.write("- id: circuit-breaker\n  config:\n    duplicateLimit: 4\n")
    assert dsh_rows(path)[-1] == {"id": "circuit-breaker", "config": {"duplicateLimit": 4}}


def test_dsh_setup_keeps_other_rows_tags_and_comments_and_puts_the_insert_before_the_override(capsys, tmp_path):
    path = tmp_path / FILES["dsh"]
    path.parent.mkdir()
    text = (
        "# mine\n"
        "- id: circuit-breaker\n"
        "  config:\n"
        "    duplicateLimit: 4   # tuned\n"
        "- id: session-persistence-jsonl\n"
        "  config: {root: !!js \"home('sessions')\"}\n"
    )
    path.write_text(text)
    status, out, _ = setup(capsys, tmp_path, "dsh")
    assert status == 0 and "added the `hmr` row" in out
    new = path.read_text()
    assert only_inserted(text, new)
    rows = dsh_rows(path)
    assert [r.get("id", "insert" if "insert" in r else None) for r in rows] == [
        "insert",
        "circuit-breaker",
        "session-persistence-jsonl",
        "hmr",
    ]
    assert rows[2]["config"]["root"][0] == "tagged"
    before = state(path)
    assert setup(capsys, tmp_path, "dsh")[0] == 0 and state(path) == before
    assert setup(capsys, tmp_path, "dsh", "--remove")[0] == 0
    assert path.read_text() == text


def test_dsh_setup_on_a_profile_with_the_bundle_adds_only_the_hmr_row(capsys, tmp_path):
    profile = tmp_path / ".dsh" / "profiles" / "web"
    profile.mkdir(parents=True)
    (profile / "package.json").write_text(json.dumps({"dsh": {"profile": {"bundles": ["cbconsole-circuit-breaker"]}}}))
    status, out, _ = setup(capsys, tmp_path, "dsh", "--profile", "web")
    assert status == 0 and "already loads the plugin as a bundle" in out
    assert dsh_rows(profile / "cordis.patch.yml") == [{"id": "hmr", "disabled": False, "config": {"root": []}}]


def test_dsh_plugin_row_of_another_installation_is_pointed_at_this_one(capsys, tmp_path):
    path = tmp_path / FILES["dsh"]
    path.parent.mkdir()
    path.write_text(
        "- insert:\n    - id: circuit-breaker\n      name: /old/site-packages/breaker/dsh_plugin/index.mjs\n"
        "- id: hmr\n  disabled: false\n  config: {root: []}\n"
    )
    assert setup(capsys, tmp_path, "dsh")[0] == 0
    assert dsh_rows(path)[0] == {"insert": [{"id": "circuit-breaker", "name": PLUGIN}]}


def test_setup_starts_without_the_console_or_a_guard(tmp_path):
    import subprocess

    code = (
        "import sys\n"
        "from breaker.cli import main\n"
        f"status = main(['setup', 'cursor', '--home', {str(tmp_path)!r}, '--dry-run'])\n"
        "print(status, sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'console')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "0 []"


def test_the_modes_setup_writes_follow_the_file(capsys, tmp_path):
    path = tmp_path / FILES["claude-code"]
    path.parent.mkdir()
    path.write_text("{}\n")
    path.chmod(0o600)
    setup(capsys, tmp_path, "claude-code")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((path.parent / "settings.json.cbconsole-backup").stat().st_mode) == 0o600


# -- --remove: the original's bytes only when the file is exactly what setup wrote -------------------

# (harness, the file the user edits, its text before setup, the user's edits after setup: (old, new) text)
ORIGINALS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("claude-code", FILES["claude-code"], '{\n  "model": "opus"\n}\n', [("{\n", "{\n\n"), ('"opus"', '"sonnet"')]),
    ("codex", FILES["codex"], '{\n  "hooks": {},\n  "x": 1\n}\n', [("{\n", "{\n\n"), ('"x": 1', '"x": 2')]),
    (
        "codex",
        ".codex/config.toml",
        '# mine\nmodel = "o5"\n',
        [("# mine\n", "# mine\n# added later\n"), ('"o5"', '"o6"')],
    ),
    (
        "gemini",
        FILES["gemini"],
        '{\n  // mine\n  "theme": "dark",\n  "model": {"disableLoopDetection": false}\n}\n',
        [("// mine\n", "// mine\n  // added later\n"), ('"dark"', '"light"')],
    ),
    (
        "cursor",
        FILES["cursor"],
        '{\n  "version": 1,\n  "hooks": {}\n}\n',
        [("{\n", "{\n\n"), ('"hooks"', '"x": 2,\n  "hooks"')],
    ),
    (
        "dsh",
        FILES["dsh"],
        "# mine\n- id: session-persistence-jsonl\n  config: {root: x}\n",
        [("# mine\n", "# mine\n# added later\n"), ("root: x", "root: y")],
    ),
    ("dsh", FILES["dsh"], "# what `dsh plugin add` writes\n[]\n", [("\n", "\n# added later\n")]),  # setup's block list
    ("dsh", FILES["dsh"], "[{id: x, config: {a: 1}}]\n", [("[", "# added later\n["), ("a: 1", "a: 2")]),  # a flow list
]


def setups_entries(home: Path) -> list[str]:
    """The files under `home` (backups aside) that still hold something setup writes."""
    marks = ("cbhook", "hooks.state", "circuit-breaker", 'disableLoopDetection": true')
    return [
        str(p)
        for p in home.rglob("*")
        if p.is_file() and not p.name.endswith(".cbconsole-backup") and any(m in p.read_text() for m in marks)
    ]


@pytest.mark.parametrize(
    ("harness", "file", "original", "edit"),
    [(h, f, o, e) for h, f, o, edits in ORIGINALS for e in edits],
    ids=[f"{h}:{Path(f).name}:{e[1].strip()[:14]}" for h, f, o, edits in ORIGINALS for e in edits],
)
def test_remove_after_the_user_changed_the_file_takes_out_only_setups_entries_and_keeps_the_users_edit(
    capsys, tmp_path, harness, file, original, edit
):
    path = tmp_path / file
    path.parent.mkdir(parents=True)
    path.write_text(original)
    assert setup(capsys, tmp_path, harness)[0] == 0
    text = path.read_text()
    assert edit[0] in text and text != original
    path.write_text(text.replace(*edit, 1))  # a comment, a blank line, another value: the user's since
    status, out, err = setup(capsys, tmp_path, harness, "--remove")
    assert (status, err) == (0, "")
    assert path.read_text() == original.replace(*edit, 1)  # the edit kept; setup's entries gone, and only them
    assert setups_entries(tmp_path) == []
    backup = path.parent / (path.name + ".cbconsole-backup")
    assert backup.read_text() == original and f"{backup} is kept" in out


@pytest.mark.parametrize(
    ("harness", "file", "original"),
    [(h, f, o) for h, f, o, _e in ORIGINALS],
    ids=[f"{h}:{Path(f).name}:{i}" for i, (h, f, _o, _e) in enumerate(ORIGINALS)],
)
def test_remove_when_nothing_changed_since_setup_puts_back_the_original_bytes_and_drops_the_backup(
    capsys, tmp_path, harness, file, original
):
    path = tmp_path / file
    path.parent.mkdir(parents=True)
    path.write_text(original)
    assert setup(capsys, tmp_path, harness)[0] == 0
    assert setup(capsys, tmp_path, harness, "--socket", "/run/other/guard.sock", "--fail-closed")[0] == 0
    assert setup(capsys, tmp_path, harness, "--remove")[0] == 0
    assert path.read_text() == original
    assert list(tmp_path.rglob("*.cbconsole-backup")) == [] and setups_entries(tmp_path) == []


@pytest.mark.parametrize(
    ("harness", "file", "mine", "left"),
    [
        ("gemini", FILES["gemini"], "  // mine\n", "{\n  // mine\n}\n"),
        ("claude-code", FILES["claude-code"], '  "theme": "dark",\n', '{\n  "theme": "dark"\n}\n'),
        ("cursor", FILES["cursor"], '  "theme": "dark",\n', '{\n  "theme": "dark"\n}\n'),
        ("codex", ".codex/config.toml", "# mine\n", "# mine\n"),
        ("dsh", FILES["dsh"], "# mine\n", f"# mine\n{HEADER}[]\n"),
    ],
)
def test_a_file_setup_created_stays_after_remove_with_what_the_user_added_to_it(
    capsys, tmp_path, harness, file, mine, left
):
    path = tmp_path / file
    assert setup(capsys, tmp_path, harness)[0] == 0
    text = path.read_text()
    at = text.index("\n") + 1 if text.startswith("{") else 0
    path.write_text(text[:at] + mine + text[at:])  # the user's line, first in the file setup created
    assert setup(capsys, tmp_path, harness, "--remove")[0] == 0
    assert path.read_text() == left  # theirs, and nothing of setup's but what holds it together
    assert setups_entries(tmp_path) == []


# -- odd and hostile files: a clear refusal naming the file, or the job done; never a traceback -------


@pytest.mark.timeout(120)  # int() is quadratic in the digits: a million must not hang setup
@pytest.mark.parametrize("digits", [5000, 1_000_000])
@pytest.mark.parametrize("harness", JSON_HARNESSES)
def test_a_settings_file_holding_a_huge_integer_is_set_up_and_removed_keeping_the_number_to_the_byte(
    capsys, tmp_path, harness, digits
):
    path = tmp_path / FILES[harness]
    path.parent.mkdir(parents=True)
    big = "7" * digits
    text = '{\n  "big": ' + big + ',\n  "small": [-' + big + "]\n}\n"
    path.write_text(text)
    status, _out, err = setup(capsys, tmp_path, harness)
    assert (status, err) == (0, "")
    assert path.read_text().startswith(text[: text.rindex("]") + 1])  # the numbers' bytes as they were
    assert setup(capsys, tmp_path, harness, "--remove")[0] == 0
    assert path.read_text() == text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("digits", [5000, 1_000_000])
def test_a_codex_config_toml_holding_a_huge_integer_is_refused_naming_the_file_and_line(capsys, tmp_path, digits):
    config = tmp_path / ".codex" / "config.toml"
    config.parent.mkdir()
    text = '# mine\nmodel = "o5"\nbig = ' + "7" * digits + "\n"
    config.write_text(text)
    for args in ((), ("--remove",)):
        status, out, err = setup(capsys, tmp_path, "codex", *args)
        assert status == 1 and out == ""
        assert err.startswith(f"cbconsole setup: {config}: line 3: holds an integer of more than 4,300 digits"), err
        assert config.read_text() == text and not (tmp_path / FILES["codex"]).exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("digits", [5000, 1_000_000])
def test_a_dsh_layer_holding_a_huge_integer_is_refused_naming_the_file_and_line(capsys, tmp_path, digits):
    path = tmp_path / FILES["dsh"]
    path.parent.mkdir()
    text = "# mine\n- id: session-persistence-jsonl\n  config: {n: " + "7" * digits + "}\n"
    path.write_text(text)
    status, out, err = setup(capsys, tmp_path, "dsh")
    assert status == 1 and out == ""
    assert err.startswith(f"cbconsole setup: {path}: line 2: ") and "4,300" in err, err
    assert path.read_text() == text


def put(path: Path, what: str | bytes) -> None:
    """Where a file belongs: "a FIFO", "a directory", or a file holding `what` (text as UTF-8)."""
    if what == "a FIFO":
        os.mkfifo(path)
    elif what == "a directory":
        path.mkdir()
    else:
        path.write_bytes(what if isinstance(what, bytes) else what.encode("utf-8"))


HOSTILE_JSON = {
    "nested 100,000 deep": '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "a NUL byte": '{"a": 1}\x00',
    "not UTF-8": b'{"a": "\xff"}',
    "over 4 MiB": '{"a": "' + "x" * (5 * 1024 * 1024) + '"}',
}
HOSTILE_TOML = {
    "nested 100,000 deep": "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "a NUL byte": "a = 1\x00\n",
    "not UTF-8": b'a = "\xff"\n',
    "over 4 MiB": 'a = "' + "x" * (5 * 1024 * 1024) + '"\n',
}
HOSTILE_YAML = {
    "nested 100,000 deep": "- " + "[" * 100_000 + "]" * 100_000 + "\n",
    "a NUL byte": "- id: x\x00\n",
    "not UTF-8": b"- id: \xff\n",
    "over 4 MiB": "- id: " + "x" * (5 * 1024 * 1024) + "\n",
}
HOSTILE_FILES = [
    *[(h, FILES[h], HOSTILE_JSON) for h in JSON_HARNESSES],
    ("codex", ".codex/config.toml", HOSTILE_TOML),
    ("dsh", FILES["dsh"], HOSTILE_YAML),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", [*HOSTILE_JSON, "a FIFO", "a directory"])
@pytest.mark.parametrize(("harness", "file", "inputs"), HOSTILE_FILES, ids=[f"{h}:{f}" for h, f, _i in HOSTILE_FILES])
def test_a_file_setup_cannot_use_is_refused_naming_it_and_nothing_is_changed(
    capsys, tmp_path, harness, file, inputs, kind
):
    path = tmp_path / file
    path.parent.mkdir(parents=True)
    put(path, inputs.get(kind, kind))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    for args in ((), ("--remove",)):
        status, out, err = setup(capsys, tmp_path, harness, *args)
        assert status == 1 and out == "", (out, err)
        assert err.startswith(f"cbconsole setup: {path}: ") and "\n" == err[-1] and err.count("\n") == 1, err
        assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing created, nothing backed up


def test_a_dsh_plugin_row_without_a_name_is_refused_naming_the_file(capsys, tmp_path):
    path = tmp_path / FILES["dsh"]
    path.parent.mkdir()
    text = "- insert:\n    - id: circuit-breaker\n      config: {duplicateLimit: 4}\n"
    path.write_text(text)
    status, _out, err = setup(capsys, tmp_path, "dsh")
    assert status == 1 and err.startswith(f"cbconsole setup: {path}: ") and "has no `name`" in err, err
    assert path.read_text() == text


@pytest.mark.timeout(60)  # a FIFO read would block for ever
@pytest.mark.parametrize(
    "manifest",
    ["a FIFO", b'{"dsh": "\xff"}', '{"dsh": ' + "[" * 100_000 + "]" * 100_000 + "}", '{"n": ' + "7" * 5000 + "}"],
    ids=["fifo", "not-utf8", "nested", "huge-integer"],
)
def test_a_dsh_profile_whose_package_json_cannot_be_read_does_not_stop_setup(capsys, tmp_path, manifest):
    profile = tmp_path / ".dsh" / "profiles" / "web"
    profile.mkdir(parents=True)
    put(profile / "package.json", manifest)
    status, _out, err = setup(capsys, tmp_path, "dsh")
    assert (status, err) == (0, "")
    assert dsh_rows(tmp_path / FILES["dsh"])[0] == {"insert": [{"id": "circuit-breaker", "name": PLUGIN}]}


def test_a_directory_where_the_backup_goes_is_refused_before_anything_is_written(capsys, tmp_path):
    path = tmp_path / FILES["codex"]
    path.parent.mkdir()
    path.write_text("{}\n")
    (path.parent / "hooks.json.cbconsole-backup").mkdir()
    status, _out, err = setup(capsys, tmp_path, "codex")
    assert status == 1 and f"{path}.cbconsole-backup: is a directory" in err, err
    assert path.read_text() == "{}\n"
    assert not (path.parent / "config.toml").exists()  # not even the trust, which is written first


@pytest.mark.parametrize(
    ("harness", "file", "text"),
    [
        ("claude-code", FILES["claude-code"], "{}\n"),
        ("gemini", FILES["gemini"], "{\n}\n"),
        ("codex", ".codex/config.toml", ""),
        ("dsh", FILES["dsh"], "[]\n"),
    ],
)
def test_remove_leaves_a_file_setup_never_wrote_in_alone_even_an_empty_one(capsys, tmp_path, harness, file, text):
    path = tmp_path / file
    path.parent.mkdir(parents=True)
    path.write_text(text)
    status, out, _err = setup(capsys, tmp_path, harness, "--remove")
    assert status == 0 and "holds no cbconsole entries; nothing changed" in out
    assert path.read_text() == text


# -- what setup leaves behind, and the doctor line it ends with ----------------------------------------

DIRS = {"claude-code": ".claude", "codex": ".codex", "gemini": ".gemini", "cursor": ".cursor", "dsh": ".dsh"}


@pytest.mark.parametrize("harness", [*JSON_HARNESSES, "dsh"])
def test_remove_of_a_file_setup_created_also_removes_the_directories_it_created(capsys, tmp_path, harness):
    home = tmp_path / "home"
    home.mkdir()
    assert setup(capsys, home, harness)[0] == 0
    assert (home / DIRS[harness]).is_dir()
    status, out, _ = setup(capsys, home, harness, "--remove")
    assert status == 0 and f"removed the directory {home / DIRS[harness]}" in out
    assert list(home.iterdir()) == []  # nothing left: the home as it was


def test_setup_notes_every_directory_it_made_for_a_project_and_remove_takes_them_all_away(capsys, tmp_path):
    project = tmp_path / "project" / "deep"
    assert setup(capsys, tmp_path, "cursor", "--project", str(project))[0] == 0
    made = [tmp_path / "project", project, project / ".cursor"]
    assert (project / ".cursor" / "hooks.json.cbconsole-created").read_text() == "".join(f"{d}\n" for d in made)
    assert setup(capsys, tmp_path, "cursor", "--project", str(project), "--remove")[0] == 0
    assert list(tmp_path.iterdir()) == []  # project/deep/.cursor, project/deep and project were all setup's


@pytest.mark.parametrize("before", ["an empty directory", "a directory of the user's"])
def test_remove_never_removes_a_directory_that_existed_before_setup(capsys, tmp_path, before):
    cursor = tmp_path / ".cursor"
    cursor.mkdir()
    if before == "a directory of the user's":
        (cursor / "argv.json").write_text("{}")
    assert setup(capsys, tmp_path, "cursor")[0] == 0
    assert not (cursor / "hooks.json.cbconsole-created").exists()
    status, out, _ = setup(capsys, tmp_path, "cursor", "--remove")
    assert status == 0 and "removed the directory" not in out
    assert cursor.is_dir() and sorted(p.name for p in cursor.iterdir()) == (
        [] if before == "an empty directory" else ["argv.json"]
    )


def test_remove_keeps_a_directory_setup_created_that_now_holds_something_else(capsys, tmp_path):
    assert setup(capsys, tmp_path, "cursor")[0] == 0
    (tmp_path / ".cursor" / "cli-config.json").write_text("{}")  # Cursor, installed since
    status, out, _ = setup(capsys, tmp_path, "cursor", "--remove")
    assert status == 0 and "removed the directory" not in out
    assert sorted(p.name for p in (tmp_path / ".cursor").iterdir()) == ["cli-config.json"]


def test_a_note_naming_other_directories_removes_none_of_them(capsys, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert setup(capsys, tmp_path, "cursor")[0] == 0
    note = tmp_path / ".cursor" / "hooks.json.cbconsole-created"
    note.write_text(f"{elsewhere}\n{tmp_path}\n{tmp_path / '.cursor'}\n")
    assert setup(capsys, tmp_path, "cursor", "--remove")[0] == 0
    assert elsewhere.is_dir() and tmp_path.is_dir() and not (tmp_path / ".cursor").exists()


@pytest.mark.parametrize("extra", [[], ["--project", "proj dir"]])
def test_setup_ends_with_the_doctor_command_that_checks_what_it_wrote(capsys, tmp_path, monkeypatch, extra):
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "the home"
    status, out, _ = setup(capsys, home, "codex", *extra)
    assert status == 0
    line = out.splitlines()[-1]
    command = line.split("Check with: ", 1)[1]
    project = [] if not extra else ["--project", str(tmp_path / "proj dir")]
    assert shlex.split(command) == ["cbconsole", "doctor", "--home", str(home), *project]
    from breaker.wiring import doctor

    monkeypatch.chdir("/")  # it works from anywhere: absolute paths
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "codex").write_text("#!/bin/sh\necho 0.171.0\n")
    (tmp_path / "bin" / "codex").chmod(0o755)
    doctor.main([*shlex.split(command)[2:], "--json"])
    checks = json.loads(capsys.readouterr().out)
    (hook,) = [c for c in checks if c["check"] == "codex.hook"]
    settings = home / ".codex" / "hooks.json" if not extra else tmp_path / "proj dir" / ".codex" / "hooks.json"
    assert hook["status"] == "ok" and str(settings) in hook["message"]
