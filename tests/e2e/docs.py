"""What docs/harnesses.md tells a user to run and write, read back for the tests that run it.

Each harness's section opens with a ```sh block holding its `cbconsole setup …` line (the end-to-end
tests run exactly that line, in a scratch home) and shows what setup writes in a ```json (or ```yaml)
block, which a test compares with what `breaker.wiring.harnesses` says setup writes.
"""

from __future__ import annotations

import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "harnesses.md"

# Each harness's section of the page, by its heading.
HEADINGS = {
    "dsh": "## dsh: the plugin",
    "claude-code": "### Claude Code (`claude-code`)",
    "codex": "### Codex CLI (`codex`)",
    "gemini": "### Gemini CLI (`gemini-cli`)",
    "cursor": "### Cursor (`cursor`)",
}


def section(harness: str) -> str:
    """The text of a harness's section, up to the next heading of the same or a higher level."""
    page = PAGE.read_text()
    heading = HEADINGS[harness]
    level = heading.split(" ", 1)[0]
    start = page.index(f"\n{heading}\n") + 1
    rest = page[start + len(heading) :]
    ends = [i for i in (rest.find(f"\n{h} ") for h in ("#" * n for n in range(1, len(level) + 1))) if i >= 0]
    return heading + (rest[: min(ends)] if ends else rest)


def block(harness: str, language: str) -> str:
    """The first fenced block of `language` in a harness's section."""
    text = section(harness)
    opening = f"```{language}\n"
    if opening not in text:
        raise AssertionError(f"docs/harnesses.md: the {harness} section has no ```{language} block")
    return text.split(opening, 1)[1].split("```", 1)[0]


def setup_line(harness: str) -> list[str]:
    """The `cbconsole setup …` command the section gives, as argv."""
    for line in block(harness, "sh").splitlines():
        if line.startswith("cbconsole setup "):
            return shlex.split(line.split("#", 1)[0])
    raise AssertionError(f"docs/harnesses.md: the {harness} section's sh block has no `cbconsole setup` line")
