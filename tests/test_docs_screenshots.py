"""The screenshots in the README and docs/console.md are the console's snapshot tests' own pictures, so they
show what the console draws today: a change that moves a snapshot fails here until the docs' copy follows
(`cp` the snapshot over the docs file named below)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "tests" / "__snapshots__" / "test_console_snapshots"
SCREENSHOTS = {
    "docs/cbconsole.svg": "test_main_screen_snapshot[capped-and-interrupted-dark].svg",
    "docs/drilldown.svg": "test_drilldown_snapshot[120x40].svg",
    "docs/narrow.svg": "test_terminal_size_snapshot[80x24].svg",
}


@pytest.mark.parametrize("doc", sorted(SCREENSHOTS))
def test_each_docs_screenshot_is_the_snapshot_of_that_screen(doc):
    snapshot = SNAPSHOTS / SCREENSHOTS[doc]
    assert (ROOT / doc).read_bytes() == snapshot.read_bytes(), f"cp '{snapshot.relative_to(ROOT)}' {doc}"


@pytest.mark.parametrize("page", ["README.md", "docs/console.md"])
def test_the_pages_show_the_main_screen_the_drill_down_and_the_narrow_layout(page):
    text = (ROOT / page).read_text()
    prefix = "docs/" if page == "README.md" else ""
    for doc in SCREENSHOTS:
        assert f"]({prefix}{Path(doc).name})" in text, f"{page} does not show {doc}"
