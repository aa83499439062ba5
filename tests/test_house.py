"""The house rules a reader of the whole code base asked for (issue 22), held by tests: one name means one class,
no module imports one that imports it back, and no class is too long to hold in one's head."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("breaker", "console")
MAX_CLASS_LINES = 500


def classes() -> list[tuple[str, str, int]]:
    """(file, class name, lines) of every class in breaker/ and console/, nested ones too."""
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.ClassDef):
                    assert node.end_lineno is not None
                    out.append((path.relative_to(ROOT).as_posix(), node.name, node.end_lineno - node.lineno + 1))
    return out


def test_no_two_classes_in_breaker_and_console_share_a_name():
    where: dict[str, list[str]] = defaultdict(list)
    for file, name, _lines in classes():
        where[name].append(file)
    assert len(where) > 100  # the walk found the house
    assert {name: files for name, files in where.items() if len(files) > 1} == {}


def test_no_class_is_over_500_lines():
    found = classes()
    assert any(name == "ServerSession" for _f, name, _n in found)
    long = {(file, name): lines for file, name, lines in found if lines > MAX_CLASS_LINES}
    assert long == {}


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every set of modules that import each other, directly or through others (Tarjan's strongly connected
    components of more than one module, or one that imports itself)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the number of modules (~100)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges[v]:
                found.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return found


@pytest.fixture(scope="module")
def house() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=False)


def test_no_module_of_breaker_or_console_imports_one_that_imports_it_back(house):
    assert "breaker.replay" in house.modules and "console.app" in house.modules
    assert cycles(house) == []


def test_the_cycle_finder_finds_a_cycle_through_a_third_module():
    graph = grimp.ImportGraph()
    for module in ("a", "a.one", "a.two", "a.three", "a.alone"):
        graph.add_module(module)
    graph.add_import(importer="a.one", imported="a.two")
    graph.add_import(importer="a.two", imported="a.three")
    graph.add_import(importer="a.three", imported="a.one")
    graph.add_import(importer="a.alone", imported="a.one")
    assert cycles(graph) == [["a.one", "a.three", "a.two"]]


def test_the_vocabularys_words_are_the_ones_the_code_says():
    """breaker.vocab's Literal types name the same sets as the code that makes the words (a new rule, plane or
    decision is added in both, or this fails)."""
    from typing import get_args

    from breaker import vocab
    from breaker.engine import DENY_KINDS
    from breaker.protocol import HARNESS, OPERATOR, OPS
    from breaker.tally import DECISIONS

    assert set(get_args(vocab.Status)) == {"ok", "warned", *DENY_KINDS}
    assert set(get_args(vocab.Plane)) == {HARNESS, OPERATOR} == {cls.plane for cls in OPS.values()}
    assert set(get_args(vocab.Outcome)) == set(DECISIONS)


def test_the_glossary_has_every_op_and_every_word_of_the_vocabulary():
    """docs/glossary.md names each op and each word of breaker.vocab's sets and the engine's kinds (in backticks or
    as an entry's bold word), so a new word on the wire gets its entry."""
    import re
    from typing import get_args

    from breaker import vocab
    from breaker.engine import DENY_KINDS
    from breaker.protocol import OPS

    text = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([^`]+)`", text)) | set(re.findall(r"\*\*([^*]+)\*\*", text))
    words = set(OPS) | set(DENY_KINDS)
    for kind in (vocab.Plane, vocab.Status, vocab.Outcome, vocab.FindingStatus, vocab.LayerOrigin):
        words |= set(get_args(kind))
    assert len(words) > 30
    assert sorted(words - named) == []


# Where a request may be written as a dict: the protocol itself, and cbhook's own encoder (hookwire's `_frame`,
# for the payloads cbhook reads itself), which must not import the protocol: it would load orjson and the config
# into a process that starts once per tool call (docs/architecture.md). cbhook's `hook` frame is a bytes template.
OP_DICTS_ALLOWED = {("breaker/protocol.py", None), ("breaker/hookwire.py", "_frame")}


def op_dicts(source: str, file: str) -> list[tuple[str, str | None, int]]:
    """(file, enclosing function, line) of each dict display with an "op" key and each dict(op=…) call."""
    found = []

    def walk(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "op" for k in child.keys):
                found.append((file, function, child.lineno))
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id == "dict"
                and any(k.arg == "op" for k in child.keywords)
            ):
                found.append((file, function, child.lineno))
            walk(child, inner)

    walk(ast.parse(source, file), None)
    return found


def test_no_request_is_written_as_a_dict_outside_the_protocol_layer():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += op_dicts(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    assert any(file == "breaker/hookwire.py" for file, _fn, _line in found)  # the scan sees cbhook's encoder
    places = {(file, None if file == "breaker/protocol.py" else function) for file, function, _line in found}
    assert places - OP_DICTS_ALLOWED == set()


def test_the_op_dict_scan_finds_a_dict_display_and_a_dict_call():
    source = 'def send(c):\n    c.write({"op": "ping", "id": 1})\n    c.write(dict(op="stats"))\n'
    assert op_dicts(source, "x.py") == [("x.py", "send", 2), ("x.py", "send", 3)]
