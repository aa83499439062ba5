"""SECURITY.md names a test for every promise: each test it names exists, so the page cannot drift from the suite."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SECTION = "## Every promise and its proof"


def named_tests() -> list[tuple[str, str]]:
    """(test file, test function) for each test the promises table names; `::name` continues the last file."""
    text = (ROOT / "SECURITY.md").read_text()
    table = text[text.index(_SECTION) : text.index("## Residual risks")]
    found: list[tuple[str, str]] = []
    for row in table.splitlines():
        if not row.startswith("| ") or row.startswith("| promise"):
            continue
        current = None
        for ref in re.findall(r"`([^`]+)`", row.rsplit(" | ", 1)[-1]):
            match = re.fullmatch(r"((?:[\w/]+/)?test_\w+\.py)?::(test_\w+)(\[…\])?", ref)
            if match is None:
                continue
            current = match.group(1) or current
            assert current is not None, f"{ref} names no file"
            found.append((current, match.group(2)))
    return found


def test_every_test_security_md_names_exists():
    names = named_tests()
    assert len(names) > 60
    missing = []
    for file, function in names:
        source = ROOT / "tests" / file
        # a function, or a name bound to a test class (Hypothesis state machines: `test_x = Machine.TestCase`)
        pattern = rf"^((async )?def {function}\(|{function} = )"
        if not source.exists() or not re.search(pattern, source.read_text(), re.M):
            missing.append(f"{file}::{function}")
    assert not missing, f"SECURITY.md names tests that do not exist: {missing}"


def test_every_promise_row_names_at_least_one_test_or_benchmark():
    text = (ROOT / "SECURITY.md").read_text()
    table = text[text.index(_SECTION) : text.index("## Residual risks")]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| promise")]
    assert rows
    for row in rows:
        assert re.search(r"test_\w+\.py|bench_\w+\.py", row.rsplit(" | ", 1)[-1]), row
