"""JSON settings files edited as text: every byte we do not change stays as it was (order, spacing, comments).

A small parser records where each value is in the text; an edit replaces, inserts or deletes one span
and the text is parsed again. `comments=True` reads JSON with `//` and `/* */` comments, as Gemini CLI
reads its settings (strip-json-comments, then JSON.parse: no trailing commas); comments are kept where
they are, and a member added after a value that ends in a line comment goes on its own line below it.
New text follows the file's own indentation and line endings.

Numbers are read without trusting their length: an integer of more than 640 digits is kept as its text
(`Number`), which an edit writes back unchanged. Python's `int()` refuses more than 4,300 digits and is
quadratic in them; a settings file's number is never that long, but a hostile or odd one must not crash
or stall setup and doctor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Document", "JsonTextError", "Member", "Node", "Number", "dumps"]

MAX_DEPTH = 200  # settings files nest a few levels; past this the file is not a settings file
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
# The least `sys.set_int_max_str_digits` accepts: int() of this many digits never raises, whatever the
# process set, and takes microseconds. Longer integers stay text.
MAX_INT_DIGITS = 640
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_WS = " \t\n\r"


class JsonTextError(ValueError):
    """The text is not what its format allows: the message says what was found, `line`/`column` where."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line} column {column}: {message}")
        self.message = message
        self.line = line
        self.column = column


@dataclass
class Node:
    """One value in the text: `start`/`end` bound its own characters (a string with its quotes)."""

    kind: str  # "object", "array", "string", "number", "literal"
    start: int
    end: int
    members: list[Member] = field(default_factory=list)  # an object's, in text order
    items: list[Node] = field(default_factory=list)  # an array's

    def member(self, key: str) -> Member | None:
        """The member named `key` (the last one, as JSON.parse keeps the last of duplicates)."""
        found = None
        for m in self.members:
            if m.key == key:
                found = m
        return found


@dataclass
class Member:
    """`"key": value` in an object."""

    key: str
    start: int  # the key's opening quote
    value: Node

    @property
    def end(self) -> int:
        return self.value.end


@dataclass(frozen=True, slots=True)
class Number:
    """A JSON number kept as its text: an integer too long to convert (see the module's docstring)."""

    text: str


def dumps(value: Any) -> str:
    """One value as compact, readable JSON on one line (`{"a": 1, "b": [2]}`); a `Number` as its text."""
    if isinstance(value, Number):
        return value.text
    if isinstance(value, dict) and value:
        return "{" + ", ".join(f"{_scalar(str(k))}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list) and value:
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    return _scalar(value)


def _scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _number(text: str) -> int | float | Number:
    """A number's value as json.loads gives it, or its text when it is an integer too long to convert."""
    if text.isdigit() or (text.startswith("-") and text[1:].isdigit()):
        return int(text) if len(text) <= MAX_INT_DIGITS else Number(text)
    return float(text)  # linear in the length, and never raises on what _NUMBER matched


class _Parser:
    def __init__(self, text: str, comments: bool) -> None:
        self.text = text
        self.comments = comments
        self.pos = 0

    def where(self, pos: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, pos) + 1
        return line, pos - (self.text.rfind("\n", 0, pos) + 1) + 1

    def fail(self, message: str, pos: int | None = None) -> JsonTextError:
        line, column = self.where(self.pos if pos is None else pos)
        return JsonTextError(message, line, column)

    def found(self) -> str:
        if self.pos >= len(self.text):
            return "the end of the file"
        return repr(self.text[self.pos : self.pos + 12].split("\n", 1)[0])

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            ch = text[self.pos]
            if ch in _WS:
                self.pos += 1
            elif ch == "/" and text.startswith(("//", "/*"), self.pos):
                if not self.comments:
                    raise self.fail("a comment, which JSON does not allow (this file is read as plain JSON)")
                if text.startswith("//", self.pos):
                    nl = text.find("\n", self.pos)
                    self.pos = n if nl < 0 else nl
                else:
                    close = text.find("*/", self.pos + 2)
                    if close < 0:
                        raise self.fail("a /* comment that is never closed")
                    self.pos = close + 2
            else:
                return

    def value(self, depth: int) -> tuple[Node, Any]:
        if depth > MAX_DEPTH:
            raise self.fail(f"values nested more than {MAX_DEPTH} deep")
        self.skip()
        text, start = self.text, self.pos
        if start >= len(text):
            raise self.fail("the end of the file where a value was expected")
        ch = text[start]
        if ch == "{":
            return self.obj(depth)
        if ch == "[":
            return self.arr(depth)
        if ch == '"':
            m = _STRING.match(text, start)
            if m is None:
                raise self.fail("a string that is not valid JSON (an unescaped control character or a bad escape?)")
            self.pos = m.end()
            return Node("string", start, m.end()), json.loads(m.group())
        m = _NUMBER.match(text, start)
        if m is not None:
            self.pos = m.end()
            return Node("number", start, m.end()), _number(m.group())
        for word, value in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, start):
                self.pos = start + len(word)
                return Node("literal", start, self.pos), value
        raise self.fail(f"{self.found()} where a value was expected")

    def obj(self, depth: int) -> tuple[Node, Any]:
        node = Node("object", self.pos, -1)
        out: dict[str, Any] = {}
        self.pos += 1
        self.skip()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            node.end = self.pos
            return node, out
        while True:
            self.skip()
            key_at = self.pos
            if not self.text.startswith('"', key_at):
                if self.text.startswith("}", key_at) and node.members:
                    raise self.fail("a trailing comma before '}', which JSON does not allow")
                raise self.fail(f"{self.found()} where a member name in double quotes was expected")
            key_node, key = self.value(depth + 1)
            self.skip()
            if not self.text.startswith(":", self.pos):
                raise self.fail(f"{self.found()} where ':' was expected after the member name {key!r}")
            self.pos += 1
            value_node, value = self.value(depth + 1)
            node.members.append(Member(key, key_node.start, value_node))
            out[key] = value
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                node.end = self.pos
                return node, out
            raise self.fail(f"{self.found()} where ',' or '}}' was expected after the member {key!r}")

    def arr(self, depth: int) -> tuple[Node, Any]:
        node = Node("array", self.pos, -1)
        out: list[Any] = []
        self.pos += 1
        self.skip()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            node.end = self.pos
            return node, out
        while True:
            self.skip()
            if self.text.startswith("]", self.pos) and node.items:
                raise self.fail("a trailing comma before ']', which JSON does not allow")
            item, value = self.value(depth + 1)
            node.items.append(item)
            out.append(value)
            self.skip()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                node.end = self.pos
                return node, out
            raise self.fail(f"{self.found()} where ',' or ']' was expected in a list")


Edit = tuple[int, int, str]


class Document:
    """A JSON (or JSON-with-comments) text whose top level is an object, and edits to it.

    `text` excludes a UTF-8 BOM (kept in `bom`). An empty or blank text reads as `{}`. Each edit
    method returns the new full text (BOM included) and leaves this document as it was.
    """

    def __init__(self, text: str, *, comments: bool = False) -> None:
        self.bom = "\ufeff" if text.startswith("\ufeff") else ""
        self.text = text[len(self.bom) :]
        self.comments = comments
        self.blank = self.text.strip() == ""
        self.nl, self.unit = "\n", "  "
        if self.blank:
            self.root, self.value = Node("object", 0, 0), {}
            return
        parser = _Parser(self.text, comments)
        root, value = parser.value(0)
        parser.skip()
        if parser.pos < len(self.text):
            raise parser.fail(f"{parser.found()} after the end of the top-level value")
        if root.kind != "object":
            raise parser.fail("a top-level value that is not an object ({...}); a settings file is one object", 0)
        self.root, self.value = root, value
        self.nl = "\r\n" if self.text.count("\r\n") * 2 > self.text.count("\n") else "\n"
        self.unit = self._indent_unit()

    # -- reading ---------------------------------------------------------------------------------

    def node(self, path: tuple[str | int, ...]) -> Node | None:
        """The node at `path` (member names and list indices), or None."""
        node: Node | None = self.root
        for step in path:
            if node is None:
                return None
            if isinstance(step, str):
                if node.kind != "object":
                    return None
                m = node.member(step)
                node = m.value if m is not None else None
            else:
                node = node.items[step] if node.kind == "array" and 0 <= step < len(node.items) else None
        return node

    def get(self, path: tuple[str | int, ...], default: Any = None) -> Any:
        return lookup(self.value, path, default)

    def line_of(self, node: Node) -> int:
        return self.text.count("\n", 0, node.start) + 1

    # -- editing ---------------------------------------------------------------------------------

    def set(self, path: tuple[str, ...], value: Any) -> str:
        """The text with `value` at `path` (member names): replaced where it is, else added to the
        deepest existing object on the way, with the objects in between."""
        node = self.node(path)
        if node is not None:
            return self._apply([(node.start, node.end, self._render(value, self._line_indent(node.start)))])
        depth = len(path) - 1
        while depth > 0 and self.node(path[:depth]) is None:
            depth -= 1
        parent = self.node(path[:depth])
        if parent is None or parent.kind != "object":
            raise ValueError(f"{'.'.join(path[:depth]) or 'the top level'} is not an object")
        nested: Any = value
        for key in reversed(path[depth + 1 :]):
            nested = {key: nested}
        return self._apply(self._insert_member(parent, path[depth], nested))

    def append(self, path: tuple[str | int, ...], value: Any) -> str:
        """The text with `value` added at the end of the list at `path`."""
        node = self.node(path)
        if node is None or node.kind != "array":
            raise ValueError(f"{path!r} is not a list")
        return self._apply(self._insert_item(node, value))

    def replace(self, node: Node, value: Any) -> str:
        return self._apply([(node.start, node.end, self._render(value, self._line_indent(node.start)))])

    def delete(self, path: tuple[str | int, ...]) -> str:
        """The text without the member or list item at `path` (and the comma that went with it)."""
        parent = self.node(path[:-1])
        last = path[-1]
        if parent is None:
            raise ValueError(f"{path!r} is not in the file")
        if isinstance(last, str):
            indices = [i for i, m in enumerate(parent.members) if m.key == last]
            if not indices:
                raise ValueError(f"{path!r} is not in the file")
            spans = [(m.start, m.end) for m in parent.members]
            return self._apply(self._delete_element(parent, spans, indices[-1]))
        spans = [(item.start, item.end) for item in parent.items]
        return self._apply(self._delete_element(parent, spans, last))

    # -- text helpers ----------------------------------------------------------------------------

    def _apply(self, edits: list[Edit]) -> str:
        text = self.text
        for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
            text = text[:start] + new + text[end:]
        return self.bom + text

    def _indent_unit(self) -> str:
        """The file's indentation step: that of the first member on a line of its own (default 2 spaces)."""
        for node in self._containers(self.root):
            children = [m.start for m in node.members] or [i.start for i in node.items]
            if children and "\n" in self.text[node.start : children[0]]:
                outer, inner = self._line_indent(node.start), self._line_indent(children[0])
                if len(inner) > len(outer) and inner.startswith(outer):
                    return inner[len(outer) :]
        return "  "

    def _containers(self, node: Node) -> Iterator[Node]:
        if node.kind in ("object", "array"):
            yield node
            for child in [m.value for m in node.members] + node.items:
                yield from self._containers(child)

    def _line_indent(self, pos: int) -> str:
        start = self.text.rfind("\n", 0, pos) + 1
        m = re.match(r"[ \t]*", self.text[start:pos])
        return m.group() if m else ""

    def _line_end(self, pos: int) -> int:
        for i in range(pos, len(self.text)):
            if self.text[i] in "\r\n":
                return i
        return len(self.text)

    def _multiline(self, node: Node, first_child: int) -> bool:
        return "\n" in self.text[node.start : first_child]

    def _render(self, value: Any, indent: str, *, compact: bool = False) -> str:
        """Objects one member a line (at `indent` plus the file's step); lists and values on one line."""
        if compact or not isinstance(value, dict) or not value or self._one_line_file():
            return dumps(value)
        inner = indent + self.unit
        body = ",".join(f"{self.nl}{inner}{dumps(k)}: {self._render(v, inner)}" for k, v in value.items())
        return "{" + body + self.nl + indent + "}"

    def _one_line_file(self) -> bool:
        return not self.blank and "\n" not in self.text[self.root.start : self.root.end]

    def _after_last(self, last_end: int, indent: str, new: str) -> list[Edit]:
        """Edits that add `new` on a line of its own after a container's last child ending at `last_end`:
        the comma goes right after the child, the new line after any comment closing that line."""
        rest = self.text[last_end : self._line_end(last_end)]
        stripped = rest.strip()
        ends_in_comment = stripped.startswith("//") or (
            stripped.startswith("/*") and stripped.endswith("*/") and "*/" not in stripped[2:-2]
        )
        line = self.nl + indent + new
        if stripped == "":
            return [(last_end, last_end, "," + line)]
        if ends_in_comment:
            at = self._line_end(last_end)
            return [(last_end, last_end, ","), (at, at, line)]
        return [(last_end, last_end, "," + line)]

    def _insert_member(self, obj: Node, key: str, value: Any) -> list[Edit]:
        if obj.members:
            last = obj.members[-1]
            if self._multiline(obj, obj.members[0].start):
                indent = self._line_indent(last.start)
                return self._after_last(last.end, indent, f"{dumps(key)}: {self._render(value, indent)}")
            return [(last.end, last.end, f", {dumps(key)}: {self._render(value, '', compact=True)}")]
        if self.blank:
            body = f"{dumps(key)}: {self._render(value, '  ')}"
            return [(0, len(self.text), "{\n  " + body + "\n}\n")]
        base = self._line_indent(obj.start)
        indent = base + self.unit
        member = f"{dumps(key)}: {self._render(value, indent)}"
        inner = self.text[obj.start + 1 : obj.end - 1]
        if inner.strip() == "":
            if self._one_line_file():
                return [(obj.start + 1, obj.end - 1, member)]
            return [(obj.start + 1, obj.end - 1, self.nl + indent + member + self.nl + base)]
        return [(obj.start + 1, obj.start + 1, self.nl + indent + member)]  # only comments inside: ours first

    def _insert_item(self, arr: Node, value: Any) -> list[Edit]:
        text = dumps(value)
        if arr.items:
            last = arr.items[-1]
            if self._multiline(arr, arr.items[0].start):
                return self._after_last(last.end, self._line_indent(last.start), text)
            return [(last.end, last.end, ", " + text)]
        inner = self.text[arr.start + 1 : arr.end - 1]
        if inner.strip() == "":
            return [(arr.start + 1, arr.end - 1, text)]
        return [(arr.start + 1, arr.start + 1, text)]  # only comments inside: ours first

    def _gap_start(self, pos: int) -> int:
        """Just past the last character before `pos` that is not whitespace."""
        while pos > 0 and self.text[pos - 1] in _WS:
            pos -= 1
        return pos

    def _comma_between(self, start: int, end: int) -> int:
        parser = _Parser(self.text, self.comments)
        parser.pos = start
        parser.skip()
        if not self.text.startswith(",", parser.pos) or parser.pos >= end:  # pragma: no cover - parsed text
            raise ValueError("no comma between two members")
        return parser.pos

    def _delete_element(self, container: Node, spans: list[tuple[int, int]], i: int) -> list[Edit]:
        start, end = spans[i]
        if i > 0:
            comma = self._comma_between(spans[i - 1][1], start)
            gap = self._gap_start(start)
            if gap == comma + 1:
                return [(comma, end, "")]
            return [(comma, comma + 1, ""), (gap, end, "")]
        if len(spans) > 1:
            comma = self._comma_between(end, spans[1][0])
            if self.text[comma + 1 : spans[1][0]].strip(_WS) == "":
                return [(start, spans[1][0], "")]
            after = comma + 1
            while after < len(self.text) and self.text[after] in " \t":
                after += 1
            return [(start, after, "")]
        inner_start, inner_end = container.start + 1, container.end - 1
        if self.text[inner_start:start].strip() == "" and self.text[end:inner_end].strip() == "":
            return [(inner_start, inner_end, "")]
        return [(self._gap_start(start), end, "")]


def lookup(value: Any, path: tuple[str | int, ...], default: Any = None) -> Any:
    """The value at `path` (object keys and list indexes) inside `value`, or `default` where there is none."""
    for step in path:
        if isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(step, int) and isinstance(value, list) and 0 <= step < len(value):
            value = value[step]
        else:
            return default
    return value
