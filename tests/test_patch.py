"""The cordis patch layer: finding our row, dsh's precedence, and comment-preserving atomic writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from breaker import Config, ConfigError
from breaker.patch import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    NO_FILE,
    Loaded,
    PatchConflict,
    PatchError,
    PatchSources,
    Tagged,
    _Loader,
    clean_stale_temps,
    load,
    read_layer,
    read_text,
    write_config,
)
from tests.waits import eventually


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "dsh"
    (h / "profiles" / "web").mkdir(parents=True)
    return h


def sources(home: Path, *patches: Path, profile: str | None = "web") -> PatchSources:
    return PatchSources.from_env(profile=profile, patches=patches, environ={"DSH_HOME": str(home)})


def put(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dedent(text))
    return path


# -- reading ---------------------------------------------------------------------------------------


def test_row_inside_an_insert_list_is_read(home):
    put(
        home / "cordis.patch.yml",
        """
        - insert:
            - id: other
              name: x
            - id: circuit-breaker
              name: /abs/plugin.mjs
              config:
                duplicateLimit: 3
        """,
    )
    loaded = load(sources(home))
    assert loaded.config.duplicate_limit == 3
    assert loaded.config_from.origin == "home"


def test_bare_id_override_row_is_read(home):
    put(
        home / "profiles/web/cordis.patch.yml",
        """
        - id: circuit-breaker
          config:
            maxCallsPerAgent: 50
            incidentLog: /workspace/.circuit-breaker-incidents.jsonl
        """,
    )
    c = load(sources(home)).config
    assert (c.max_calls_per_agent, c.incident_log) == (50, "/workspace/.circuit-breaker-incidents.jsonl")


def test_no_layers_at_all_gives_the_defaults(tmp_path):
    loaded = load(sources(tmp_path / "nothing-here"))
    assert loaded.config == Config() and loaded.config_from is None and not loaded.disabled


def test_dsh_home_defaults_to_dot_dsh_in_the_home_directory():
    s = PatchSources.from_env(environ={})
    assert s.dsh_home == Path("~/.dsh").expanduser()


def test_precedence_profile_then_home_then_patch_files_later_wins(home, tmp_path):
    row = "- id: circuit-breaker\n  config:\n    duplicateLimit: {}\n"
    (home / "profiles/web/cordis.patch.yml").write_text(row.format(2))
    assert load(sources(home)).config.duplicate_limit == 2
    (home / "cordis.patch.yml").write_text(row.format(3))
    assert load(sources(home)).config.duplicate_limit == 3
    p1, p2 = tmp_path / "one.yml", tmp_path / "two.yml"
    p1.write_text(row.format(4))
    p2.write_text(row.format(5))
    assert load(sources(home, p1)).config.duplicate_limit == 4
    assert load(sources(home, p1, p2)).config.duplicate_limit == 5
    assert load(sources(home, p2, p1)).config.duplicate_limit == 4


def test_a_later_config_replaces_the_earlier_one_whole(home):
    put(
        home / "profiles/web/cordis.patch.yml",
        """
        - id: circuit-breaker
          config: {duplicateLimit: 2, window: 50}
        """,
    )
    put(
        home / "cordis.patch.yml",
        """
        - id: circuit-breaker
          config: {maxCallsPerAgent: 10}
        """,
    )
    loaded = load(sources(home))
    assert (loaded.config.duplicate_limit, loaded.config.window, loaded.config.max_calls_per_agent) == (6, 200, 10)
    assert any("replaced whole" in n for n in loaded.notes)


def test_a_later_row_without_config_keeps_the_earlier_config(home):
    put(home / "profiles/web/cordis.patch.yml", "- id: circuit-breaker\n  config: {window: 40}\n")
    put(home / "cordis.patch.yml", "- id: circuit-breaker\n  disabled: false\n")
    loaded = load(sources(home))
    assert loaded.config.window == 40 and loaded.config_from.origin == "profile"
    assert [layer.origin for layer in loaded.row_in] == ["profile", "home"]


def test_disabled_true_turns_the_guard_off(home):
    put(home / "cordis.patch.yml", "- id: circuit-breaker\n  disabled: true\n  config: {window: 40}\n")
    loaded = load(sources(home))
    assert loaded.disabled and loaded.config.enabled and not loaded.effective.enabled
    assert loaded.effective.window == 40


def test_disabled_must_be_a_boolean(home):
    put(home / "cordis.patch.yml", "- id: circuit-breaker\n  disabled: 'yes please'\n")
    with pytest.raises(ConfigError, match=r"cordis.patch.yml:1: disabled: expected true or false"):
        load(sources(home))


def test_js_tags_in_other_rows_never_break_reading(home):
    put(
        home / "cordis.patch.yml",
        """
        - id: tools
          config:
            mode: !!js process.env.DSH_TOOLS_MODE
        - insert:
            - id: headless-runner
              config:
                task: !!js ctx.headlessStartup.task
                weird: !custom {a: 1}
            - id: circuit-breaker
              config:
                window: 77
        - id: session-persistence-jsonl
          config:
            compression: !!js "process.env.X === undefined ? 'zstd' : 'none'"
        """,
    )
    assert load(sources(home)).config.window == 77


def test_a_js_expression_in_our_own_config_is_an_error_naming_the_key(home):
    put(
        home / "cordis.patch.yml",
        """
        - id: circuit-breaker
          config:
            duplicateLimit: !!js process.env.LIMIT
        """,
    )
    with pytest.raises(ConfigError) as info:
        load(sources(home))
    assert info.value.keys == ["duplicateLimit"]
    assert "!!js" in str(info.value) and "cordis.patch.yml:3" in str(info.value)


def test_bad_value_error_names_file_line_and_key(home):
    put(home / "cordis.patch.yml", "# comment\n- id: circuit-breaker\n  config:\n    window: 0\n")
    with pytest.raises(ConfigError) as info:
        load(sources(home))
    assert str(info.value).startswith(f"{home / 'cordis.patch.yml'}:4: window: expected an integer")


def test_yaml_syntax_error_names_file_and_line(home):
    put(home / "cordis.patch.yml", "- id: circuit-breaker\n  config:\n    window: [1, 2\n")
    with pytest.raises(PatchError) as info:
        load(sources(home))
    assert info.value.path == str(home / "cordis.patch.yml") and info.value.line is not None
    assert "not valid YAML" in str(info.value)


def test_top_level_mapping_is_a_clear_error(home):
    put(home / "cordis.patch.yml", "circuit-breaker:\n  duplicateLimit: 3\n")
    with pytest.raises(PatchError, match="a list of entries"):
        load(sources(home))


def test_empty_and_comment_only_files_hold_no_row(home):
    (home / "cordis.patch.yml").write_text("")
    (home / "profiles/web/cordis.patch.yml").write_text("# nothing yet\n")
    assert load(sources(home)).config == Config()


def test_non_utf8_file_is_a_clear_error(home):
    (home / "cordis.patch.yml").write_bytes(b"- id: circuit-breaker\n  config: {denyMessage: \xff\xfe}\n")
    with pytest.raises(PatchError, match="not UTF-8"):
        load(sources(home))


def test_a_directory_where_the_file_should_be_is_a_clear_error(home):
    (home / "cordis.patch.yml").mkdir()
    with pytest.raises(PatchError, match="is a directory"):
        load(sources(home))


def test_settings_yaml_circuit_breaker_section_is_warned_about(home):
    put(home / "settings.yaml", "circuit-breaker:\n  duplicateLimit: 3\n")
    loaded = load(sources(home))
    assert loaded.config.duplicate_limit == 6  # it has no effect, as in dsh
    note = next(n for n in loaded.notes if "settings.yaml" in n)
    assert "no effect" in note and "cordis.patch.yml" in note


def test_tolerant_loader_keeps_unknown_tags_as_values():
    data = yaml.load("a: !!js process.env.X\nb: !foo [1]\n", Loader=_Loader)
    assert data == {"a": Tagged("tag:yaml.org,2002:js", "process.env.X"), "b": Tagged("!foo", [1])}
    assert data["a"].yaml_tag == "!!js"


def test_read_layer_reports_the_form_of_each_row(tmp_path):
    f = put(
        tmp_path / "p.yml",
        """
        - insert:
            - id: circuit-breaker
        - id: circuit-breaker
          config: {window: 9}
        """,
    )
    assert [(r.form, r.line) for r in read_layer(f)] == [("insert", 2), ("override", 3)]


YAML_ALPHABET = st.sampled_from(
    [
        *"- :{}[],#!&*|>'\"\n  \tidconfigwnrlbsktu0123456789",
        *["!!js ", "circuit-breaker", "- id: ", "config:", "\n  ", "insert:", "%", "@", "`", "\\", "<<: ", "? "],
        *["---\n", "..."],
    ]
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(YAML_ALPHABET, max_size=60).map("".join))
def test_random_yaml_never_raises_anything_but_a_config_error(tmp_path_factory, text):
    home = tmp_path_factory.mktemp("rnd")
    (home / "cordis.patch.yml").write_text(text)
    try:
        load(PatchSources(dsh_home=home))
    except ConfigError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=8,
    )
)
def test_random_row_contents_never_raise_anything_but_a_config_error(tmp_path_factory, junk):
    home = tmp_path_factory.mktemp("rnd")
    doc = [{"id": "circuit-breaker", "config": junk}, {"insert": [{"id": "circuit-breaker", "disabled": junk}]}]
    (home / "cordis.patch.yml").write_text(yaml.safe_dump(doc))
    try:
        load(PatchSources(dsh_home=home))
    except ConfigError:
        pass


def test_deeply_nested_yaml_is_an_error_not_a_crash(home):
    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  config: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigError):
        load(sources(home))


# -- writing ---------------------------------------------------------------------------------------

MIXED = dedent("""
    # Profile overrides. Do not reorder: the insert must come after the hmr row.
    - id: hmr
      disabled: false   # needed for user-layer watching
      config: {root: []}

    - id: tools
      config:
        mode: !!js process.env.DSH_TOOLS_MODE   # keep this expression

    - insert:
        # the plugin row
        - id: circuit-breaker
          name: /opt/cb/plugin.mjs
          config:
            duplicateLimit: 6     # the seed's default
            exempt:
              - todo_write        # planning is never a loop
              - ask_user_question
            incidentLog: /workspace/.circuit-breaker-incidents.jsonl
        # a row after ours
        - id: web-open
          name: dsh-web-open

    - id: session-persistence-jsonl
      config:
        compression: !!js "process.env.DSH_SNAPSHOT === undefined ? 'zstd' : 'none'"
    # trailing comment
    """)


def row_span(text: str) -> tuple[int, int]:
    """Character span from our row's first line to the line of the row after it."""
    start = text.index("    - id: circuit-breaker")
    end = text.index("    # a row after ours")
    return start, end


def test_write_changes_only_our_row_and_keeps_everything_else_byte_for_byte(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(MIXED)
    new = Config.from_mapping(
        {
            "duplicateLimit": 3,
            "exempt": ["todo_write"],
            "window": 50,
            "incidentLog": "/workspace/.circuit-breaker-incidents.jsonl",
        }
    )
    write_config(f, new)
    after = f.read_text()
    s0, e0 = row_span(MIXED)
    s1, e1 = row_span(after)
    assert after[:s1] == MIXED[:s0]
    assert after[e1:] == MIXED[e0:]
    assert "duplicateLimit: 3     # the seed's default" in after  # the comment on a changed line stays
    assert "incidentLog: /workspace/.circuit-breaker-incidents.jsonl" in after
    assert load(PatchSources(patches=(f,))).config == new


def test_writing_the_same_config_leaves_the_file_byte_identical(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(MIXED)
    current = load(PatchSources(patches=(f,))).config
    write_config(f, current)
    assert f.read_text() == MIXED


def test_write_keeps_the_order_of_the_rows_keys(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(MIXED)
    write_config(f, Config.from_mapping({"incidentLog": "/x", "duplicateLimit": 2, "exempt": []}))
    after = f.read_text()
    assert after.index("duplicateLimit: 2") < after.index("exempt: []") < after.index("incidentLog: /x")


def test_write_adds_config_to_a_row_that_has_none(tmp_path):
    f = put(
        tmp_path / "p.yml",
        """
        - insert:
            - id: circuit-breaker
              name: /opt/cb/plugin.mjs   # path
        - id: other
        """,
    )
    write_config(f, Config(duplicate_limit=4))
    after = f.read_text()
    assert "name: /opt/cb/plugin.mjs   # path\n      config:\n        duplicateLimit: 4\n- id: other\n" in after
    assert load(PatchSources(patches=(f,))).config.duplicate_limit == 4


def test_write_appends_a_bare_override_row_when_the_file_has_none(tmp_path):
    original = "# mine\n- id: hmr\n  disabled: false\n"
    f = tmp_path / "p.yml"
    f.write_text(original)
    write_config(f, Config(window=100, exempt=("a", "b c")))
    after = f.read_text()
    assert after.startswith(original)
    assert after[len(original) :] == '- id: circuit-breaker\n  config:\n    window: 100\n    exempt: [a, "b c"]\n'


def test_write_creates_a_missing_file_and_its_directory(tmp_path):
    f = tmp_path / "new" / "profiles" / "web" / "cordis.patch.yml"
    write_config(f, Config(max_calls_per_agent=40))
    assert load(PatchSources(patches=(f,))).config.max_calls_per_agent == 40


def test_write_into_a_flow_style_config_and_a_flow_style_row(tmp_path):
    f = put(tmp_path / "a.yml", "- {id: circuit-breaker, name: x}\n- id: circuit-breaker\n  config: {window: 9}  # c\n")
    write_config(f, Config(window=10, duplicate_limit=2))
    assert f.read_text().endswith("config: {window: 10, duplicateLimit: 2}  # c\n")
    g = put(tmp_path / "b.yml", "- {id: circuit-breaker, name: x}  # flow row\n")
    write_config(g, Config(window=10))
    assert g.read_text() == "- {id: circuit-breaker, name: x, config: {window: 10}}  # flow row\n"


def test_write_puts_per_tool_overrides_as_a_flow_mapping_that_reads_back(tmp_path):
    f = tmp_path / "a.yml"
    odd = 'mcp: "x"#{y}'  # a tool name YAML would misread unquoted
    tools = {"bash": {"repeatLimit": 2, "progress": True}, odd: {"maxCalls": 5}}
    write_config(f, Config.from_mapping({"tools": tools, "preset": "recommended"}))
    text = f.read_text()
    assert "tools: {bash: {repeatLimit: 2, progress: true}, " in text and "preset: recommended" in text
    assert load(PatchSources(patches=(f,))).config.to_mapping()["tools"] == tools
    write_config(f, Config.from_mapping({"tools": {"bash": {"repeatLimit": 3}}}))  # an edit of the key in place
    assert load(PatchSources(patches=(f,))).config.to_mapping(only_changed=True) == {
        "tools": {"bash": {"repeatLimit": 3}}
    }


def test_write_replaces_a_null_config(tmp_path):
    f = put(tmp_path / "a.yml", "- id: circuit-breaker\n  config:\n- id: next\n")
    write_config(f, Config(window=10))
    assert f.read_text() == "- id: circuit-breaker\n  config:\n    window: 10\n- id: next\n"


def test_write_rewrites_a_config_with_unknown_keys_whole(tmp_path):
    f = put(tmp_path / "a.yml", "- id: circuit-breaker\n  config:\n    windw: 10\n    window: 5\n- id: next\n")
    write_config(f, Config(window=8))
    assert f.read_text() == "- id: circuit-breaker\n  config:\n    window: 8\n- id: next\n"


def test_write_changes_a_block_scalar_deny_message(tmp_path):
    f = put(
        tmp_path / "a.yml",
        """
        - id: circuit-breaker
          config:
            denyMessage: >
              Stop calling {tool}.
            window: 9
        """,
    )
    write_config(f, Config(deny_message='Say "no" to {tool}\nnow: \\ ok\u2028', window=9))
    assert load(PatchSources(patches=(f,))).config.deny_message == 'Say "no" to {tool}\nnow: \\ ok\u2028'
    assert "    window: 9\n" in f.read_text()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.builds(
        Config,
        duplicate_limit=st.integers(1, 50),
        window=st.integers(1, 1000),
        max_calls_per_agent=st.integers(0, 10_000),
        exempt=st.lists(st.text(min_size=1, max_size=8), max_size=3).map(tuple),
        ignore_args=st.lists(st.text(min_size=1, max_size=8), max_size=3).map(tuple),
        deny_message=st.text(max_size=40),
        incident_log=st.text(max_size=20),
        enabled=st.booleans(),
    )
)
def test_any_valid_config_written_reads_back_equal(tmp_path, config):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(MIXED)
    write_config(f, config)
    assert load(PatchSources(patches=(f,))).config == config
    after = f.read_text()
    assert after.startswith(MIXED[: row_span(MIXED)[0]]) and after.endswith(MIXED[row_span(MIXED)[1] :])


def test_write_refuses_a_file_it_cannot_parse_and_leaves_it_alone(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: [unclosed\n")
    with pytest.raises(PatchError):
        write_config(f, Config(window=5))
    assert f.read_text() == "- id: [unclosed\n"


def test_write_keeps_file_mode_and_symlinks(tmp_path):
    real = tmp_path / "real.yml"
    real.write_text("- id: circuit-breaker\n")
    real.chmod(0o640)
    link = tmp_path / "link.yml"
    link.symlink_to(real)
    write_config(link, Config(window=12))
    assert link.is_symlink() and (real.stat().st_mode & 0o777) == 0o640
    assert "window: 12" in real.read_text()


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    f = tmp_path / "p.yml"
    f.write_text(MIXED)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_config(f, Config(window=5))
    assert f.read_text() == MIXED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yml"]


def kill_mid_write(f: Path, marker: Path) -> None:
    """Run write_config in a child and SIGKILL it after the new text is in the temporary, before the rename."""
    child = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        from breaker import Config
        from breaker.patch import write_config
        real_fsync = os.fsync
        def slow_fsync(fd):
            Path({str(marker)!r}).write_text("x")
            time.sleep(60)   # killed here: the new text is written to the temporary, not yet renamed
        os.fsync = slow_fsync
        write_config({str(f)!r}, Config(window=5))
        """)
    proc = subprocess.Popen([sys.executable, "-c", child])

    def at_fsync() -> bool:
        if marker.exists():
            return True
        assert proc.poll() is None, "the writer exited before reaching fsync"
        return False

    eventually(at_fsync, what="the writer at its fsync")
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_crash_mid_write_leaves_the_old_file_whole(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(MIXED)
    kill_mid_write(f, tmp_path / "writing")
    assert f.read_text() == MIXED
    assert load(PatchSources(patches=(f,))).config.window == 200


# -- where edits go --------------------------------------------------------------------------------


def test_write_target_is_the_highest_user_layer_holding_the_row(home, tmp_path):
    bundle = put(tmp_path / "bundle.yml", "- insert:\n    - id: circuit-breaker\n      config: {window: 1}\n")
    s = PatchSources(dsh_home=home, profile="web", bundles=(bundle,))
    assert load(s).write_target() == home / "profiles/web/cordis.patch.yml"  # never the bundle
    put(home / "cordis.patch.yml", "- id: circuit-breaker\n")
    assert load(s).write_target() == home / "cordis.patch.yml"
    extra = tmp_path / "extra.yml"
    s2 = PatchSources(dsh_home=home, profile="web", patches=(extra,), bundles=(bundle,))
    assert load(s2).write_target() == home / "cordis.patch.yml"  # extra does not hold the row
    put(extra, "- id: circuit-breaker\n")
    assert load(s2).write_target() == extra


def test_a_write_to_the_target_takes_effect(home):
    put(home / "profiles/web/cordis.patch.yml", "- id: circuit-breaker\n  config: {window: 30}\n")
    put(home / "cordis.patch.yml", "- id: circuit-breaker\n  disabled: false\n")
    loaded: Loaded = load(sources(home))
    write_config(loaded.write_target(), loaded.config.replace(duplicate_limit=2))
    after = load(sources(home))
    assert (after.config.duplicate_limit, after.config.window) == (2, 30)


# -- limits on what a file may hold -----------------------------------------------------------------

# 15 lines that expand to 9^9 (387 million) strings: "billion laughs". Before the node limit, building
# the error text for `exempt: *i` froze the guard for 36 s.
ALIAS_BOMB = dedent("""
    - id: other
      config:
        a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
        b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
        c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
        d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
        e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
        f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
        g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
        h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
        i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
    - id: circuit-breaker
      config:
        exempt: *i
    """)


@pytest.mark.timeout(20)
def test_an_alias_bomb_is_a_patch_error_naming_the_node_limit(home):
    f = home / "cordis.patch.yml"
    f.write_text(ALIAS_BOMB)
    with pytest.raises(PatchError) as info:
        load(sources(home))
    assert info.value.path == str(f) and info.value.line is not None
    assert f"more than {MAX_NODES:,} YAML nodes with its aliases expanded" in str(info.value)


@pytest.mark.timeout(20)
def test_an_alias_bomb_in_another_row_is_refused_too_and_a_write_leaves_the_file_alone(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text(ALIAS_BOMB.replace("exempt: *i", "window: 9"))
    with pytest.raises(PatchError, match="YAML nodes with its aliases expanded"):
        load(PatchSources(patches=(f,)))
    with pytest.raises(PatchError, match="YAML nodes with its aliases expanded"):
        write_config(f, Config(window=5))
    assert f.read_text() == ALIAS_BOMB.replace("exempt: *i", "window: 9")


@pytest.mark.timeout(20)
def test_an_alias_bomb_in_settings_yaml_is_skipped_not_expanded(home):
    (home / "settings.yaml").write_text("circuit-breaker:\n" + textwrap.indent(ALIAS_BOMB, "  "))
    put(home / "cordis.patch.yml", "- id: circuit-breaker\n  config: {window: 40}\n")
    loaded = load(sources(home))
    assert loaded.config.window == 40
    assert not any("settings.yaml" in n for n in loaded.notes)  # dsh's file to judge; we only skip it


def test_aliases_within_the_node_limit_still_read(home):
    put(
        home / "cordis.patch.yml",
        """
        - id: other
          config:
            names: &names [a, b]
        - id: circuit-breaker
          config:
            exempt: *names
        """,
    )
    assert load(sources(home)).config.exempt == ("a", "b")


def test_a_recursive_alias_is_a_patch_error_not_an_endless_value(home):
    put(home / "cordis.patch.yml", "- id: other\n  config: &loop\n    self: *loop\n- id: circuit-breaker\n")
    with pytest.raises(PatchError, match=r"cordis.patch.yml:3: alias \*loop refers to the node that contains it"):
        load(sources(home))


@pytest.mark.parametrize(
    "nested",
    [
        "[" * 50_000 + "]" * 50_000,  # flow
        "\n" + "".join(" " * (4 + 2 * i) + f"k{i}:\n" for i in range(MAX_DEPTH + 5)) + " " * 300 + "x",  # block
    ],
    ids=["flow", "block"],
)
def test_nesting_deeper_than_the_limit_is_a_patch_error_naming_it(home, nested):
    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  config: " + nested + "\n")
    with pytest.raises(PatchError) as info:
        load(sources(home))
    assert f"nests deeper than {MAX_DEPTH} levels" in str(info.value) and info.value.line is not None


def test_nesting_within_the_limit_still_reads(home):
    depth = MAX_DEPTH - 10
    (home / "cordis.patch.yml").write_text(
        "- id: other\n  config: " + "[" * depth + "]" * depth + "\n- id: circuit-breaker\n  config: {window: 8}\n"
    )
    assert load(sources(home)).config.window == 8


def test_a_file_over_the_size_limit_is_a_patch_error_naming_it(home):
    f = home / "cordis.patch.yml"
    row = "- id: circuit-breaker\n"
    f.write_text(row + "#" * (MAX_FILE_BYTES - len(row)) + "\n")
    with pytest.raises(PatchError) as info:
        load(sources(home))
    assert info.value.path == str(f) and "is larger than 1 MiB" in str(info.value)


def test_a_file_at_the_size_limit_still_reads(home):
    row = "- id: circuit-breaker\n  config: {window: 8}\n"
    (home / "cordis.patch.yml").write_text(row + "#" * (MAX_FILE_BYTES - len(row) - 1) + "\n")
    assert load(sources(home)).config.window == 8


@pytest.mark.timeout(20)
def test_a_huge_base_60_integer_in_our_row_is_an_error_not_a_stall(home):
    # `1:1:1…` is a YAML 1.1 integer whose building is quadratic in its length: minutes at this size.
    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  config:\n    window: 1" + ":1" * 400_000 + "\n")
    with pytest.raises(PatchError, match="integer written with more than 4,300 characters") as info:
        load(sources(home))
    assert len(str(info.value)) < 300


@pytest.mark.timeout(20)
def test_a_fifo_in_place_of_a_layer_is_an_error_not_a_hang(home):
    os.mkfifo(home / "cordis.patch.yml")
    with pytest.raises(PatchError, match="is not a regular file"):
        load(sources(home))


def test_a_long_name_in_a_yaml_error_is_clipped(home):
    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  config: *" + "n" * 100_000 + "\n")
    with pytest.raises(PatchError, match="undefined alias") as info:
        load(sources(home))
    assert len(str(info.value)) < 400


def test_a_hex_integer_too_long_to_print_is_a_config_error_naming_the_key(home):
    # Python refuses to turn an int of more than 4,300 digits into text; the error text must not try.
    (home / "cordis.patch.yml").write_text("- id: circuit-breaker\n  config:\n    window: 0x" + "f" * 4000 + "\n")
    with pytest.raises(ConfigError) as info:
        load(sources(home))
    assert info.value.keys == ["window"] and "an integer of about 4,817 digits" in str(info.value)


# -- bytes and line endings -------------------------------------------------------------------------


def test_read_text_gives_the_decoded_text_without_a_bom_or_none_for_no_file(tmp_path):
    f = tmp_path / "p.yml"
    assert read_text(f) is None
    f.write_bytes(b"\xef\xbb\xbf- id: circuit-breaker\r\n")
    assert read_text(f) == "- id: circuit-breaker\r\n"


def test_write_keeps_a_utf8_bom(tmp_path):
    f = tmp_path / "p.yml"
    f.write_bytes(b"\xef\xbb\xbf# mine\n- id: circuit-breaker\n  config:\n    window: 9\n")
    write_config(f, Config(window=10))
    assert f.read_bytes() == b"\xef\xbb\xbf# mine\n- id: circuit-breaker\n  config:\n    window: 10\n"


def test_write_does_not_add_a_bom_to_a_file_without_one(tmp_path):
    f = tmp_path / "p.yml"
    f.write_bytes(b"- id: circuit-breaker\n")
    write_config(f, Config(window=10))
    assert f.read_bytes().startswith(b"- id: circuit-breaker\n")


# (text before our row, our row, text after it): the edit happens in the middle one.
CRLF_FILES = {
    "change a value": (
        "# mine\r\n- id: hmr\r\n  disabled: false\r\n",
        "- id: circuit-breaker\r\n  config:\r\n    window: 9   # w\r\n",
        "- id: next\r\n",
    ),
    "add a key": ("", "- id: circuit-breaker\r\n  config:\r\n    duplicateLimit: 6   # d\r\n", "- id: next\r\n"),
    "rewrite whole": ("", "- id: circuit-breaker\r\n  config:\r\n    windw: 9\r\n", "- id: next\r\n"),
    "add a config": ("", "- id: circuit-breaker\r\n  name: x   # n\r\n", "- id: next\r\n"),
    "append a row": ("# mine\r\n- id: hmr\r\n  disabled: false", "", ""),
}


@pytest.mark.parametrize(("head", "ours", "tail"), list(CRLF_FILES.values()), ids=list(CRLF_FILES))
def test_write_into_a_crlf_file_writes_only_crlf_lines(tmp_path, head, ours, tail):
    f = tmp_path / "p.yml"
    f.write_bytes((head + ours + tail).encode())
    new = Config(window=12, duplicate_limit=3, exempt=("a",))
    write_config(f, new)
    after = f.read_bytes().decode()
    assert "\n" not in after.replace("\r\n", "") and after.endswith("\r\n")  # no LF without its CR
    assert after.startswith(head) and after.endswith(tail)
    assert load(PatchSources(patches=(f,))).config == new


def test_write_into_a_mostly_crlf_file_uses_crlf(tmp_path):
    f = tmp_path / "p.yml"
    f.write_bytes(b"# one LF line\n- id: a\r\n  x: 1\r\n- id: circuit-breaker\r\n  config:\r\n    window: 9\r\n")
    write_config(f, Config(window=9, duplicate_limit=2))
    assert f.read_bytes().endswith(b"    window: 9\r\n    duplicateLimit: 2\r\n")


def test_write_into_a_cr_only_file_uses_cr(tmp_path):
    f = tmp_path / "p.yml"
    f.write_bytes(b"- id: circuit-breaker\r  config:\r    window: 9\r")
    write_config(f, Config(window=9, duplicate_limit=2))
    assert f.read_bytes() == b"- id: circuit-breaker\r  config:\r    window: 9\r    duplicateLimit: 2\r"
    assert load(PatchSources(patches=(f,))).config.duplicate_limit == 2


# -- links and permissions --------------------------------------------------------------------------


def test_write_refuses_a_read_only_file_and_says_how_to_fix_it(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n")
    f.chmod(0o444)
    with pytest.raises(PatchError) as info:
        write_config(f, Config(window=5))
    assert info.value.path == str(f)
    assert "is read-only (mode 0444)" in str(info.value) and "chmod u+w" in str(info.value)
    assert f.read_text() == "- id: circuit-breaker\n" and (f.stat().st_mode & 0o777) == 0o444


def test_write_refuses_a_file_without_its_owners_write_bit(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n")
    f.chmod(0o464)  # writable by the group only: not by its owner, who runs the guard
    with pytest.raises(PatchError, match="is read-only"):
        write_config(f, Config(window=5))
    assert f.read_text() == "- id: circuit-breaker\n"


def test_write_refuses_a_file_this_user_may_not_write(tmp_path, monkeypatch):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n")
    f.chmod(0o644)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if m == os.W_OK else real_access(p, m))  # as if not ours
    with pytest.raises(PatchError, match=r"is not writable by this user \(mode 0644, owner uid \d+\)"):
        write_config(f, Config(window=5))
    assert f.read_text() == "- id: circuit-breaker\n"


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a file to another user")
def test_write_refuses_another_users_file_even_as_root(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n")
    f.chmod(0o644)
    os.chown(f, 65534, 65534)  # root may write it, and a rename would make it root's
    with pytest.raises(PatchError, match=r"belongs to another user \(uid 65534\)"):
        write_config(f, Config(window=5))
    assert f.read_text() == "- id: circuit-breaker\n" and f.stat().st_uid == 65534


def test_a_directory_that_takes_no_new_file_is_a_patch_error_naming_it(tmp_path, monkeypatch):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n")

    def no_room(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", no_room)
    with pytest.raises(PatchError) as info:
        write_config(f, Config(window=5))
    assert str(info.value) == f"{f}: cannot be saved: no file can be created in {tmp_path} (Permission denied)"
    assert f.read_text() == "- id: circuit-breaker\n"


def test_write_refuses_a_hard_linked_file_and_suggests_a_symlink(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n")
    other = tmp_path / "other-name.yml"
    os.link(f, other)
    with pytest.raises(PatchError) as info:
        write_config(f, Config(window=5))
    assert "has 2 hard links" in str(info.value) and "ln -sf" in str(info.value)
    assert f.read_text() == other.read_text() == "- id: circuit-breaker\n"
    assert f.stat().st_ino == other.stat().st_ino


def test_write_through_a_symlink_to_another_directory_keeps_the_link(tmp_path):
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / "dsh").mkdir()
    real = tmp_path / "dotfiles" / "cordis.patch.yml"
    real.write_text("- id: circuit-breaker\n  config:\n    window: 9\n")
    link = tmp_path / "dsh" / "cordis.patch.yml"
    link.symlink_to(Path("..") / "dotfiles" / "cordis.patch.yml")
    assert write_config(link, Config(window=12)) == real
    assert link.is_symlink() and os.readlink(link) == str(Path("..") / "dotfiles" / "cordis.patch.yml")
    assert real.read_text() == "- id: circuit-breaker\n  config:\n    window: 12\n"
    assert [p.name for p in (tmp_path / "dotfiles").iterdir()] == ["cordis.patch.yml"]  # no temporary left


def test_writing_the_config_a_file_already_says_does_not_replace_it(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n  config: {window:   9}   # odd spacing stays\n")
    before = f.stat().st_ino
    write_config(f, Config(window=9))
    assert f.stat().st_ino == before  # no rename: no reload, no change of inode for watchers
    assert f.read_text() == "- id: circuit-breaker\n  config: {window:   9}   # odd spacing stays\n"


# -- temporaries a killed write left ----------------------------------------------------------------


def test_clean_stale_temps_removes_the_temporary_a_killed_write_left(tmp_path):
    f = tmp_path / "cordis.patch.yml"
    f.write_text(MIXED)
    kill_mid_write(f, tmp_path / "writing")
    (tmp_path / "writing").unlink()
    left = [p for p in tmp_path.iterdir() if p != f]
    assert len(left) == 1 and left[0].name.endswith(".cbtmp")
    assert clean_stale_temps(PatchSources(patches=(f,))) == left
    assert list(tmp_path.iterdir()) == [f] and f.read_text() == MIXED


def test_clean_stale_temps_removes_only_our_names(home, tmp_path):
    layer = home / "cordis.patch.yml"
    layer.write_text("- id: circuit-breaker\n")
    ours = home / ".cordis.patch.yml.ab3_x9zq.cbtmp"
    ours.write_text("half")
    others = [
        home / ".cordis.patch.yml.cbtmp",  # no random part
        home / ".cordis.patch.yml.abcdefghi.cbtmp",  # not 8 characters
        home / ".cordis.patch.yml.ABCDEFGH.cbtmp",  # not mkstemp's characters
        home / "cordis.patch.yml.abcdefgh.cbtmp",  # no leading dot
        home / ".settings.yaml.abcdefgh.cbtmp",  # beside another file
        home / ".cordis.patch.yml.abcdefgh.tmp",  # another suffix
    ]
    for p in others:
        p.write_text("not ours")
    (home / ".cordis.patch.yml.dirxxxxx.cbtmp").mkdir()  # not a regular file
    (home / ".cordis.patch.yml.linkxxxx.cbtmp").symlink_to(layer)
    assert clean_stale_temps(sources(home)) == [ours]
    assert not ours.exists() and all(p.exists() for p in others) and layer.exists()


def test_clean_stale_temps_looks_beside_the_target_of_a_symlinked_layer(home, tmp_path):
    real = tmp_path / "dotfiles" / "cordis.patch.yml"
    real.parent.mkdir()
    real.write_text("- id: circuit-breaker\n")
    (home / "cordis.patch.yml").symlink_to(real)
    stale = real.parent / ".cordis.patch.yml.zzzzzzzz.cbtmp"
    stale.write_text("half")
    assert clean_stale_temps(sources(home)) == [stale]


def test_clean_stale_temps_with_no_layer_directories_removes_nothing(tmp_path):
    assert clean_stale_temps(PatchSources(dsh_home=tmp_path / "absent", profile="web")) == []


# -- aliases in and around our row ------------------------------------------------------------------

SHARED = dedent("""
    - id: other
      config: &shared   # another plugin's config, anchored
        window: 5
        exempt: &names [a, b]
    """)


def test_write_to_a_config_that_is_an_alias_spells_it_out_and_leaves_the_anchor_alone(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text(SHARED + "- id: circuit-breaker\n  config: *shared\n- id: next\n")
    new = Config(window=7, exempt=("a", "b"))
    write_config(f, new)
    after = f.read_text()
    assert after.startswith(SHARED)
    assert after[len(SHARED) :] == "- id: circuit-breaker\n  config:\n    window: 7\n    exempt: [a, b]\n- id: next\n"
    assert load(PatchSources(patches=(f,))).config == new


def test_write_to_a_config_holding_an_alias_replaces_only_that_value(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text(SHARED + "- id: circuit-breaker\n  config:\n    window: 9   # w\n    exempt: *names\n")
    new = Config(window=8, exempt=("a", "c"))
    write_config(f, new)
    after = f.read_text()
    assert after.startswith(SHARED)
    assert after[len(SHARED) :] == "- id: circuit-breaker\n  config:\n    window: 8   # w\n    exempt: [a, c]\n"
    assert load(PatchSources(patches=(f,))).config == new


def test_write_keeps_an_alias_whose_value_does_not_change(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text(SHARED + "- id: circuit-breaker\n  config:\n    window: 9\n    exempt: *names\n")
    write_config(f, Config(window=8, exempt=("a", "b")))
    assert f.read_text().endswith("    window: 8\n    exempt: *names\n")


def test_write_to_a_config_with_a_merge_key_spells_it_out(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text(SHARED + "- id: circuit-breaker\n  config:\n    <<: *shared\n    duplicateLimit: 3\n")
    new = Config(window=5, exempt=("a", "b"), duplicate_limit=4)
    write_config(f, new)
    after = f.read_text()
    assert after.startswith(SHARED) and "<<" not in after
    assert load(PatchSources(patches=(f,))).config == new


def test_write_to_a_config_whose_anchor_only_it_uses_rewrites_it_whole(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n  config:\n    exempt: &e [a]\n    only: *e\n- id: next\n")
    new = Config(exempt=("b",), only=("a",))
    write_config(f, new)
    assert f.read_text().endswith("- id: next\n")
    assert load(PatchSources(patches=(f,))).config == new


def test_write_refuses_a_config_whose_anchor_another_row_uses(tmp_path):
    original = "- id: circuit-breaker\n  config: &cfg\n    window: 9\n- id: other\n  config: *cfg\n"
    f = tmp_path / "p.yml"
    f.write_text(original)
    with pytest.raises(PatchError) as info:
        write_config(f, Config(window=7))
    assert str(info.value).startswith(f"{f}:2: the circuit-breaker config holds the anchor &cfg, which line 5 uses")
    assert f.read_text() == original


def test_writing_the_same_config_to_an_anchored_config_another_row_uses_is_no_error(tmp_path):
    original = "- id: circuit-breaker\n  config: &cfg\n    window: 9\n- id: other\n  config: *cfg\n"
    f = tmp_path / "p.yml"
    f.write_text(original)
    write_config(f, Config(window=9))
    assert f.read_text() == original


def test_write_to_a_row_repeated_by_an_alias_edits_the_row_it_repeats(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- &cb\n  id: circuit-breaker\n  config:\n    window: 9\n- insert:\n    - *cb\n")
    write_config(f, Config(window=4))
    assert f.read_text() == "- &cb\n  id: circuit-breaker\n  config:\n    window: 4\n- insert:\n    - *cb\n"


def test_write_refuses_a_row_that_is_an_alias_of_text_inside_another_row(tmp_path):
    original = "- id: templates\n  config:\n    cb: &cb {id: circuit-breaker}\n- insert: [*cb]\n"
    f = tmp_path / "p.yml"
    f.write_text(original)
    with pytest.raises(PatchError, match=r"p.yml:4: the circuit-breaker row here comes through an alias \(\*cb\)"):
        write_config(f, Config(window=4))
    assert f.read_text() == original


def test_write_refuses_rows_inserted_from_a_list_inside_another_rows_config(tmp_path):
    original = dedent("""
        - id: templates
          config:
            rows: &rows
              - id: circuit-breaker
                config: {window: 5}
        - insert: *rows
        """)
    f = tmp_path / "p.yml"
    f.write_text(original)
    assert load(PatchSources(patches=(f,))).config.window == 5
    with pytest.raises(PatchError, match=r"p.yml:6: the circuit-breaker row here comes through an alias \(\*rows\)"):
        write_config(f, Config(window=4))
    assert f.read_text() == original


# -- writes that never revert a hand edit -----------------------------------------------------------


def test_a_hand_edit_after_the_base_was_read_is_a_conflict_and_survives(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n  config:\n    window: 9\n")
    base = read_text(f)
    f.write_text("- id: circuit-breaker\n  config:\n    window: 9\n    duplicateLimit: 2   # by hand\n")
    with pytest.raises(PatchConflict) as info:
        write_config(f, Config(window=5), based_on=base)
    assert info.value.path == str(f) and "not saved" in str(info.value)
    assert f.read_text().endswith("duplicateLimit: 2   # by hand\n")


def test_a_hand_edit_during_the_write_is_a_conflict_and_survives(tmp_path, monkeypatch):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n  config:\n    window: 9\n")
    real_fsync = os.fsync

    def fsync_then_edit_by_hand(fd):
        real_fsync(fd)
        if not f.read_text().endswith("# by hand\n"):  # after the temporary is written, before the rename
            f.write_text("- id: circuit-breaker\n  config:\n    window: 3   # by hand\n")

    monkeypatch.setattr(os, "fsync", fsync_then_edit_by_hand)
    with pytest.raises(PatchConflict):
        write_config(f, Config(window=5), based_on=read_text(f))
    assert f.read_text() == "- id: circuit-breaker\n  config:\n    window: 3   # by hand\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.yml"]  # the temporary is gone too


def test_a_file_replaced_by_an_editor_during_the_write_is_a_conflict_without_based_on(tmp_path, monkeypatch):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n")
    real_fsync = os.fsync
    edited = []

    def fsync_then_edit_by_hand(fd):
        real_fsync(fd)
        if not edited:
            edited.append(True)
            f.write_text("- id: circuit-breaker\n  disabled: true\n")

    monkeypatch.setattr(os, "fsync", fsync_then_edit_by_hand)
    with pytest.raises(PatchConflict):
        write_config(f, Config(window=5))
    assert f.read_text() == "- id: circuit-breaker\n  disabled: true\n"


def test_a_write_based_on_the_current_text_goes_through(tmp_path):
    f = tmp_path / "p.yml"
    f.write_bytes(b"\xef\xbb\xbf- id: circuit-breaker\r\n  config:\r\n    window: 9\r\n")
    write_config(f, Config(window=5), based_on=read_text(f))
    assert load(PatchSources(patches=(f,))).config.window == 5


def test_based_on_no_file_writes_a_new_file(tmp_path):
    f = tmp_path / "p.yml"
    assert read_text(f) is None
    write_config(f, Config(window=5), based_on=NO_FILE)
    assert load(PatchSources(patches=(f,))).config.window == 5


def test_based_on_no_file_is_a_conflict_with_a_file_made_since(tmp_path):
    f = tmp_path / "p.yml"
    f.write_text("- id: circuit-breaker\n  disabled: true\n")
    with pytest.raises(PatchConflict):
        write_config(f, Config(window=5), based_on=NO_FILE)
    assert f.read_text() == "- id: circuit-breaker\n  disabled: true\n"


def test_based_on_a_text_is_a_conflict_with_a_file_deleted_since(tmp_path):
    f = tmp_path / "p.yml"
    with pytest.raises(PatchConflict):
        write_config(f, Config(window=5), based_on="- id: circuit-breaker\n")
    assert not f.exists()
