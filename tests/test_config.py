"""Config keys, defaults and validation: every bad value names its key, what was expected and what was found."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from breaker import Config, ConfigError
from breaker.config import BY_KEY, DEFAULT_DENY_MESSAGE, DEFAULT_WARN_MESSAGE, KEYS, PRESETS, describe_value


def test_defaults_are_the_seeds():
    c = Config()
    assert c.to_mapping() == {
        "preset": "seed",
        "enabled": True,
        "duplicateLimit": 6,
        "duplicateWarn": 0,
        "repeatLimit": 0,
        "repeatWarn": 0,
        "pollGap": 0,
        "pollLimit": 0,
        "stallLimit": 0,
        "stallWarn": 0,
        "rewordLimit": 0,
        "rewordWarn": 0,
        "unchangedLimit": 0,
        "unchangedWarn": 0,
        "cycleLimit": 0,
        "cycleWarn": 0,
        "cyclePeriod": 4,
        "window": 200,
        "maxCallsPerAgent": 300,
        "capWarn": 0,
        "progress": False,
        "tools": {},
        "exempt": ["todo_write", "ask_user_question", "exit_plan_mode"],
        "only": [],
        "ignoreArgs": ["description", "explanation", "reason", "thought", "purpose"],
        "denyMessage": DEFAULT_DENY_MESSAGE,
        "warnMessage": DEFAULT_WARN_MESSAGE,
        "incidentLog": "",
        "maxAgents": 10_000,
        "failClosed": False,
        "guardTimeoutMs": 500,
        "guardSocket": "",
        "metrics": "",
        "otelEvents": False,
        "interruptCommand": [],
    }


def test_default_deny_message_has_the_seeds_placeholders():
    for placeholder in ("{tool}", "{count}", "{limit}"):
        assert placeholder in DEFAULT_DENY_MESSAGE


def test_from_mapping_takes_camel_case_keys():
    c = Config.from_mapping({"duplicateLimit": 3, "maxCallsPerAgent": 0, "exempt": ["a"], "incidentLog": "/x"})
    assert (c.duplicate_limit, c.max_calls_per_agent, c.exempt, c.incident_log) == (3, 0, ("a",), "/x")
    assert c.window == 200  # unspecified keys keep their defaults


def test_from_mapping_none_is_the_defaults():
    assert Config.from_mapping(None) == Config()


def test_round_trip_through_the_mapping():
    c = Config(duplicate_limit=2, exempt=("x",), only=("y",))
    assert Config.from_mapping(c.to_mapping()) == c


def test_only_changed_lists_the_keys_that_differ_from_the_defaults():
    assert Config(window=50).to_mapping(only_changed=True) == {"window": 50}


BAD_VALUES = {
    "preset": ["Recommended", "strict", "", None, 1, ["seed"]],
    "enabled": ["yes", 1, None, [True]],
    "duplicateLimit": [0, -1, 1.5, "6", True, None, 10**12],
    "duplicateWarn": [-1, "5", True, 1.5, 10**12],
    "repeatLimit": [-1, "3", False, 2.5],
    "repeatWarn": [-1, "3", None],
    "stallLimit": [-1, "6", 1.0],
    "pollGap": [-1, 86_401, "30", 1.5, True],
    "pollLimit": [-1, "30", None],
    "stallWarn": [-1, False],
    "rewordLimit": [-1, "3", 2.5, True],
    "rewordWarn": [-1, [1]],
    "unchangedLimit": [-1, "2", 2.5, True],
    "unchangedWarn": [-1, None],
    "cycleLimit": [-1, "3", True],
    "cycleWarn": [-2, [3]],
    "cyclePeriod": [0, 1, 9, "4", True],
    "window": [0, 100_001, 2.0, "200", False],
    "maxCallsPerAgent": [-1, 0.5, "300", True, 10**12],
    "capWarn": [-1, "270", None],
    "progress": ["true", 1, None],
    "tools": [3, "bash", ["bash"], True],
    "warnMessage": [None, 3, ["x"]],
    "exempt": ["todo_write", [1], [""], None, {"a": 1}, [None]],
    "only": ["bash", [["bash"]], 3],
    "ignoreArgs": ["description", [2], True],
    "denyMessage": [None, 3, ["x"]],
    "incidentLog": [None, 0, False, ["/tmp/x"]],
    "maxAgents": [0, -5, "many", 10**9],
    "failClosed": ["true", 0, None, [False]],
    "guardTimeoutMs": [0, -1, 60_001, 0.5, "500", True, None],
    "guardSocket": [None, 0, ["/run/x.sock"], False],
    "metrics": ["nope", ":9464", "127.0.0.1:65536", 9464, None, ["9464"]],
    "otelEvents": ["true", 1, None],
    "interruptCommand": [
        "kill {agent}",
        [""],
        ["", "x"],
        ["{agent}"],
        ["/bin/{reason}", "x"],
        [1],
        ["kill", None],
        {"argv": ["kill"]},
        None,
        True,
    ],
}


def test_every_key_has_bad_values_under_test():
    assert set(BAD_VALUES) == set(KEYS)


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in BAD_VALUES.items() for v in vs])
def test_bad_value_raises_config_error_naming_the_key_expected_and_found(key, value):
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({key: value})
    err = info.value
    assert err.keys == [key]
    problem = err.problems[0]
    assert problem.expected and problem.found
    assert key in str(err) and "expected" in str(err) and "found" in str(err)


def test_harness_side_keys_take_their_values():
    c = Config.from_mapping(
        {
            "failClosed": True,
            "guardTimeoutMs": 60_000,
            "guardSocket": "/run/user/1/cb.sock",
            "interruptCommand": ["tmux", "send-keys", "-t", "{agent}", "C-c", ""],
        }
    )
    assert c.fail_closed is True and c.guard_timeout_ms == 60_000 and c.guard_socket == "/run/user/1/cb.sock"
    # a list becomes a tuple (the config stays hashable); an empty argument after the program is allowed
    assert c.interrupt_command == ("tmux", "send-keys", "-t", "{agent}", "C-c", "")
    assert Config.from_mapping({"guardTimeoutMs": 1}).guard_timeout_ms == 1


def test_interrupt_command_round_trips_through_the_mapping_as_a_list():
    c = Config(interrupt_command=("kill", "-TERM", "{agent}"))
    assert c.to_mapping(only_changed=True) == {"interruptCommand": ["kill", "-TERM", "{agent}"]}
    assert Config.from_mapping(c.to_mapping()) == c


def test_an_interrupt_command_with_an_empty_program_says_so():
    with pytest.raises(ConfigError, match=r"interruptCommand: expected a command as a list of strings .* program"):
        Config.from_mapping({"interruptCommand": ["", "{agent}"]})


def test_a_shell_string_interrupt_command_is_refused_not_split():
    with pytest.raises(ConfigError, match=r"found 'kill \{agent\}' \(a string\)"):
        Config.from_mapping({"interruptCommand": "kill {agent}"})


def test_booleans_are_not_accepted_as_integers():
    with pytest.raises(ConfigError, match=r"duplicateLimit: expected an integer from 1 to .*, found true"):
        Config.from_mapping({"duplicateLimit": True})


def test_a_string_number_is_described_as_a_string():
    with pytest.raises(ConfigError, match=r"found '6' \(a string\)"):
        Config.from_mapping({"duplicateLimit": "6"})


def test_unknown_keys_are_reported_with_a_suggestion():
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({"duplicatelimit": 3, "windw": 5})
    assert info.value.keys == ["duplicatelimit", "windw"]
    assert "did you mean duplicateLimit?" in str(info.value)
    assert "did you mean window?" in str(info.value)


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({"window": 0, "enabled": "no", "bogus": 1})
    assert sorted(info.value.keys) == ["bogus", "enabled", "window"]


def test_a_non_mapping_config_is_an_error():
    with pytest.raises(ConfigError, match="config: expected a mapping"):
        Config.from_mapping(["duplicateLimit", 3])  # type: ignore[arg-type]


def test_direct_construction_validates_too():
    with pytest.raises(ConfigError, match="window"):
        Config(window=0)


def test_line_locations_prefix_the_problem():
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({"window": -1}, where="f.yml", lines={"window": "f.yml:7"})
    assert str(info.value).startswith("f.yml:7: window:")


def test_window_smaller_than_duplicate_limit_is_valid_but_warned():
    c = Config(window=3, duplicate_limit=6)
    assert any("can never trip" in w for w in c.warnings)
    assert not Config().warnings


def test_config_is_immutable_and_hashable():
    c = Config()
    with pytest.raises(AttributeError):
        c.window = 5  # type: ignore[misc]
    assert hash(c) == hash(Config())


@given(
    st.dictionaries(
        st.one_of(st.sampled_from(list(KEYS)), st.text(max_size=8)),
        st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
            lambda inner: st.one_of(
                st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
            ),
            max_leaves=5,
        ),
        max_size=6,
    )
)
def test_any_mapping_gives_a_config_or_a_config_error(mapping):
    try:
        c = Config.from_mapping(mapping)
    except ConfigError as err:
        assert err.problems
    else:
        assert isinstance(c, Config)


# -- error text stays short whatever the value ------------------------------------------------------


class Leaf:
    """A part of a value that counts how often an error message looks at it."""

    looked_at = 0

    def __repr__(self) -> str:
        Leaf.looked_at += 1
        return "leaf"


def test_describe_value_looks_at_a_few_parts_of_a_list_shared_many_times_over():
    # One inner list referenced 1,000 times (what YAML aliases build): a million leaves for repr().
    Leaf.looked_at = 0
    value = [[Leaf()] * 1_000] * 1_000
    text = describe_value(value)
    assert Leaf.looked_at <= 36  # 6 items wide, at each of the levels shown
    assert text.startswith("[[leaf, leaf,") and text.endswith(" (a list)") and len(text) <= 60 + len(" (a list)")


def test_describe_value_of_a_list_that_holds_itself_is_short():
    loop: list = [1]
    loop.append(loop)
    assert describe_value(loop) == "[1, [1, [1, [...]]]] (a list)"


def test_describe_value_of_an_integer_too_long_to_print_gives_its_size():
    assert describe_value(1 << 100_000) == "an integer of about 30,104 digits"
    assert describe_value([1 << 100_000]) == "[<an integer of about 30,104 digits>] (a list)"


def test_describe_value_clips_a_long_string_at_the_limit():
    text = describe_value("y" * 1_000_000)
    assert text == "'" + "y" * 58 + "… (a string)"


def test_describe_value_keeps_short_values_as_they_read():
    assert describe_value("6") == "'6' (a string)"
    assert describe_value(["a", 2, None]) == "['a', 2, None] (a list)"
    assert describe_value({"k": [1, 2]}) == "{'k': [1, 2]} (a mapping)"
    assert describe_value(1.5) == "1.5 (a number)"


def test_describe_value_of_a_tagged_value_looks_at_a_few_parts_of_it():
    class Tagged:  # the shape of breaker.patch.Tagged (`!foo [...]`), which config may not import
        yaml_tag = "!foo"
        value = [[Leaf()] * 1_000] * 1_000

    Leaf.looked_at = 0
    text = describe_value(Tagged())
    assert Leaf.looked_at <= 36
    assert text.startswith("a !foo expression ([[leaf,") and text.endswith("), which only dsh can evaluate")
    assert len(text) < 120


def test_an_unknown_key_too_long_for_a_message_is_clipped():
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({"k" * 1_000_000: 1, 1 << 100_000: 2})
    keys = ", ".join(KEYS)  # each problem names the keys it expected; the key itself is clipped
    assert len(str(info.value)) < 2 * len(keys) + 300
    assert info.value.problems[1].key == "<an integer of about 30,104 digits>"


def test_a_config_error_with_many_problems_spells_out_twenty_and_counts_the_rest():
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({f"bogus{i}": i for i in range(1_000)})
    assert len(info.value.problems) == 1_000  # every problem is kept for callers that list them
    message = str(info.value)
    assert message.count("an unknown key") == 20 and message.endswith("; and 980 more problems")


# -- presets and per-tool overrides ---------------------------------------------------------------


def test_the_seed_preset_is_the_default_and_changes_nothing():
    assert Config.from_mapping({"preset": "seed"}) == Config()


def test_the_recommended_preset_sets_its_values_and_keys_set_explicitly_win():
    c = Config.from_mapping({"preset": "recommended", "repeatLimit": 5})
    assert c.preset == "recommended" and c.repeat_limit == 5  # the explicit key wins
    for key, value in PRESETS["recommended"].items():
        if key != "repeatLimit":
            assert getattr(c, BY_KEY[key].attr) == value, key
    assert c.duplicate_limit == 6 and c.window == 200  # keys the preset does not set keep the seed's


def test_only_changed_is_measured_against_the_preset():
    c = Config.from_mapping({"preset": "recommended", "repeatLimit": 5})
    assert c.to_mapping(only_changed=True) == {"preset": "recommended", "repeatLimit": 5}
    assert Config.from_mapping(c.to_mapping(only_changed=True)) == c
    assert Config.with_preset("recommended") == Config.from_mapping({"preset": "recommended"})


def test_per_tool_overrides_are_normalised_and_round_trip():
    c = Config.from_mapping({"tools": {"bash": {"repeatLimit": 6, "progress": True}, "web_search": {"maxCalls": 50}}})
    assert c.tools == (("bash", (("repeatLimit", 6), ("progress", True))), ("web_search", (("maxCalls", 50),)))
    assert c.to_mapping(only_changed=True) == {
        "tools": {"bash": {"repeatLimit": 6, "progress": True}, "web_search": {"maxCalls": 50}}
    }
    assert Config.from_mapping(c.to_mapping()) == c
    hash(c)  # still hashable


@pytest.mark.parametrize(
    ("tools", "key", "expected"),
    [
        ({"bash": {"repeatLimt": 3}}, "tools.bash.repeatLimt", "one of duplicateLimit"),
        ({"bash": {"duplicateLimit": 0}}, "tools.bash.duplicateLimit", "an integer from 1"),
        ({"bash": {"maxCalls": "50"}}, "tools.bash.maxCalls", "an integer"),
        ({"bash": {"progress": 1}}, "tools.bash.progress", "true or false"),
        ({"bash": 6}, "tools.bash", "a mapping of settings"),
        ({"": {"repeatLimit": 3}}, "tools", "tool names"),
    ],
)
def test_a_bad_per_tool_override_is_named_down_to_its_key(tools, key, expected):
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({"tools": tools})
    assert info.value.keys == [key]
    assert expected in info.value.problems[0].expected


def test_every_bad_per_tool_override_is_named_at_once():
    with pytest.raises(ConfigError) as info:
        Config.from_mapping({"tools": {"bash": {"repeatLimit": -1, "nope": 1}, "grep": {"maxCalls": None}}})
    assert info.value.keys == ["tools.bash.repeatLimit", "tools.bash.nope", "tools.grep.maxCalls"]


def test_an_operators_change_of_preset_moves_the_keys_that_followed_the_old_one():
    c = Config.from_mapping({"duplicateLimit": 9, "repeatLimit": 0})  # seed; duplicateLimit set apart from it
    new = c.updated({"preset": "recommended"})
    assert new.preset == "recommended" and new.duplicate_limit == 9  # set apart: kept
    assert new.repeat_limit == PRESETS["recommended"]["repeatLimit"]  # followed seed's 0: now the new preset's
    assert new.to_mapping(only_changed=True) == {"preset": "recommended", "duplicateLimit": 9}
    back = new.updated({"preset": "seed"})
    assert back == Config(duplicate_limit=9)


def test_an_operators_change_without_a_preset_keeps_every_key_in_force():
    c = Config.from_mapping({"preset": "recommended", "repeatLimit": 5})
    new = c.updated({"window": 50})
    assert new.preset == "recommended" and new.repeat_limit == 5 and new.window == 50
    assert new.stall_limit == PRESETS["recommended"]["stallLimit"]
    with pytest.raises(ConfigError, match="window"):
        c.updated({"window": -1})
