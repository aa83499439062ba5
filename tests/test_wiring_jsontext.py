"""The JSON text editor setup uses: it reads what JSON.parse reads (and JSON with comments, as Gemini CLI
does), and its edits change only the span they edit: comments, order and spacing stay."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from breaker.wiring.jsontext import Document, JsonTextError, Number, dumps

keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6)
leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | keys
json_values = st.recursive(
    leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(keys, c, max_size=4), max_leaves=12
)
objects = st.dictionaries(keys, json_values, min_size=1, max_size=5)
layouts = st.sampled_from([None, 0, 1, 2, 4, "\t"])


@settings(max_examples=200, deadline=None)
@given(value=objects, indent=layouts, ascii_only=st.booleans())
def test_it_reads_every_json_object_as_json_loads_does(value, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    assert Document(text).value == json.loads(text)


def commented(text: str, marks: list[bool]) -> str:
    """`text` with a comment at the end of some of its lines (where JSONC allows one)."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        mark = marks[i % len(marks)] if marks else False
        out.append(f"{line} // note {i}" if mark and i < len(lines) - 1 else line)
    return "\n".join(out) + "\n/* end */\n"


@settings(max_examples=200, deadline=None)
@given(
    value=objects,
    indent=st.sampled_from([2, 4]),
    marks=st.lists(st.booleans(), min_size=1, max_size=5),
    new=json_values,
)
def test_with_comments_an_added_member_keeps_every_comment_and_every_other_value(value, indent, marks, new):
    text = commented(json.dumps(value, indent=indent), marks)
    doc = Document(text, comments=True)
    assert doc.value == value
    added = doc.set(("cbconsole-added",), new)
    for comment in re.findall(r"// note \d+|/\* end \*/", text):
        assert comment in added
    assert Document(added, comments=True).value == {**value, "cbconsole-added": new}
    assert Document(Document(added, comments=True).delete(("cbconsole-added",)), comments=True).value == value


@settings(max_examples=200, deadline=None)
@given(value=objects, indent=layouts, data=st.data())
def test_deleting_a_member_leaves_the_others_as_json(value, indent, data):
    key = data.draw(st.sampled_from(sorted(value)))
    text = json.dumps(value, indent=indent)
    out = Document(text).delete((key,))
    assert json.loads(out) == {k: v for k, v in value.items() if k != key}


def test_a_value_set_where_one_is_replaces_only_that_value():
    text = '{\n  "model": {"name": "x", "disableLoopDetection": false},  // mine\n  "a": 1\n}\n'
    out = Document(text, comments=True).set(("model", "disableLoopDetection"), True)
    assert out == text.replace("false", "true")


def test_new_members_follow_the_files_indentation_and_line_endings():
    text = '{\r\n\t"a": 1\r\n}\r\n'
    out = Document(text).set(("hooks", "X"), [1])
    assert out == '{\r\n\t"a": 1,\r\n\t"hooks": {\r\n\t\t"X": [1]\r\n\t}\r\n}\r\n'


def test_a_member_added_after_a_line_comment_goes_below_it():
    text = '{\n  "a": 1 // why a is 1\n}\n'
    assert Document(text, comments=True).set(("b",), 2) == '{\n  "a": 1, // why a is 1\n  "b": 2\n}\n'


def test_a_bom_is_kept():
    assert Document('\ufeff{"a": 1}').set(("b",), 2) == '\ufeff{"a": 1, "b": 2}'


@pytest.mark.parametrize(
    ("text", "comments", "line", "words"),
    [
        ('{\n  "a": 1,\n}', False, 3, "trailing comma"),
        ('{\n  "a": 1 // c\n}', False, 2, "a comment, which JSON does not allow"),
        ('{\n  "a": 1,\n  "b": [1, 2,]\n}', True, 3, "trailing comma before ']'"),
        ('{"a": /* open', True, 1, "never closed"),
        ("[1, 2]", False, 1, "not an object"),
        ('{"a": 1} x', False, 1, "after the end"),
        ('{"a": tru}', False, 1, "where a value was expected"),
        ('{\n\n "a" 1}', False, 3, "':' was expected"),
    ],
)
def test_what_is_not_json_is_refused_with_its_line(text, comments, line, words):
    with pytest.raises(JsonTextError) as err:
        Document(text, comments=comments)
    assert err.value.line == line and words in err.value.message


def test_duplicate_members_read_as_json_parse_does_the_last_one_wins():
    doc = Document('{"a": 1, "a": 2}')
    assert doc.value == {"a": 2} and doc.root.member("a").value.start == 14  # type: ignore[union-attr]


def test_a_blank_file_reads_as_an_empty_object_and_gets_one():
    doc = Document("  \n")
    assert doc.value == {} and json.loads(doc.set(("a",), 1)) == {"a": 1}


# -- numbers: read without trusting their length -------------------------------------------------


@pytest.mark.timeout(60)  # int() of a million digits is quadratic: this must finish, not hang
@pytest.mark.parametrize("digits", [5000, 1_000_000])
def test_an_integer_too_long_to_convert_is_kept_as_its_text_and_edits_keep_it_to_the_byte(digits):
    big = "-" + "7" * digits
    text = '{\n  "big": ' + big + ',\n  "list": [1, ' + big[1:] + "]\n}\n"
    doc = Document(text)
    assert doc.value == {"big": Number(big), "list": [1, Number(big[1:])]}
    added = doc.set(("hooks",), {"X": [1]})
    assert added.startswith(text[: text.rindex("]") + 1])  # every byte before the new member kept
    assert Document(added).get(("hooks",)) == {"X": [1]}
    assert Document(added).delete(("hooks",)) == text
    assert dumps({"n": Number(big)}) == '{"n": ' + big + "}"


def test_integers_up_to_640_digits_are_ints_and_other_numbers_read_as_json_loads_reads_them():
    numbers = ["0", "-0", "12", "9" * 640, "-" + "9" * 639, "1.5", "-2e-3", "1E400", "1" * 5000 + ".5"]
    text = "{" + ", ".join(f'"{i}": {n}' for i, n in enumerate(numbers)) + "}"
    assert Document(text).value == json.loads(text)
    assert Document('{"n": ' + "9" * 641 + "}").value == {"n": Number("9" * 641)}


def test_dumps_writes_what_json_dumps_writes_for_plain_values():
    value = {"a": [1, 2.5, None, True, {"b": 'ü"\n'}], "c": {}, "d": []}
    assert dumps(value) == json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
