"""docs/harnesses.md says what `cbconsole setup` writes, and the e2e tests run its setup lines: the page is
held to `breaker.wiring.harnesses` here, so a drift fails CI without running a harness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from breaker.hook import plugin_dir
from breaker.wiring.harnesses import NAMES, Places, settings_snippet
from breaker.wiring.setup import main as setup
from tests.e2e import docs


@pytest.mark.parametrize("harness", list(NAMES))
def test_each_harness_section_opens_with_its_setup_line_naming_the_file_it_edits(harness):
    assert docs.setup_line(harness) == ["cbconsole", "setup", harness]
    home = Path("/home/someone")
    where = Places.of(str(home), environ={"HOME": str(home)})
    edited = where.dsh_layer() if harness == "dsh" else where.settings_file(harness)
    assert "~/" + str(edited.relative_to(home)) in docs.block(harness, "sh")


@pytest.mark.parametrize("harness", ["claude-code", "codex", "gemini", "cursor"])
def test_the_settings_each_section_shows_are_what_setup_writes(harness):
    assert json.loads(docs.block(harness, "json")) == settings_snippet(harness, "cbhook")


def test_the_dsh_rows_the_section_shows_are_what_setup_writes(tmp_path, monkeypatch):
    monkeypatch.delenv("DSH_HOME", raising=False)
    assert setup(["dsh", "--home", str(tmp_path)]) == 0
    written = yaml.safe_load((tmp_path / ".dsh" / "cordis.patch.yml").read_text())
    shown = yaml.safe_load(docs.block("dsh", "yaml"))
    assert written[0]["insert"][0]["name"] == str(Path(plugin_dir()) / "index.mjs")
    shown[0]["insert"][0]["name"] = written[0]["insert"][0]["name"]  # the page shows a placeholder path
    assert shown == written
