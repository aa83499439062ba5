"""The public corpus of real agent traces (tests/fixtures/corpus, see its README): the manifest and the files agree.

These tests check the corpus's shape and provenance only. They never assert what a rule decides on it: the
rules are tuned and judged on this corpus elsewhere.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from breaker.replaycli import main
from breaker.transcripts import read

CORPUS = Path(__file__).resolve().parent / "fixtures" / "corpus"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text())
ENTRIES = {e["file"]: e for e in MANIFEST}
FILES = sorted(p.name for p in CORPUS.glob("*.jsonl"))
SHA = re.compile(r"[0-9a-f]{40}\Z")


def lines(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPUS / name).read_text().splitlines() if line.strip()]


def test_every_listed_file_exists_and_every_file_is_listed():
    assert len(ENTRIES) == len(MANIFEST), "a file is listed twice"
    assert sorted(ENTRIES) == FILES


def test_the_corpus_has_enough_of_each_label_and_stays_small():
    labels = [e["label"] for e in MANIFEST]
    assert set(labels) <= {"loop", "healthy"}
    assert labels.count("loop") >= 13
    assert labels.count("healthy") >= labels.count("loop")
    assert sum(p.stat().st_size for p in CORPUS.iterdir()) < 5 * 1024 * 1024


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_entry_has_label_reason_and_provenance(entry):
    assert entry["label"] in ("loop", "healthy")
    assert isinstance(entry["reason"], str) and len(entry["reason"]) > 40
    assert isinstance(entry["changes"], str) and entry["changes"]
    date.fromisoformat(entry["fetched"])
    source = entry["source"]
    assert set(source) >= {"url", "repo", "path", "commit", "issue", "license"}
    assert source["url"].startswith("https://github.com/")
    assert source["repo"] and source["license"]
    assert source["commit"] or source["issue"], "a source needs a commit or an issue"
    if source["commit"]:
        assert SHA.match(source["commit"]), source["commit"]
        assert source["path"] and source["commit"] in source["url"]
    if source["issue"]:
        assert source["issue"].startswith("https://github.com/")


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_loops_say_where_they_start_and_by_when_they_should_be_stopped(entry):
    calls = len(lines(entry["file"]))
    assert entry["calls"] == calls
    if entry["label"] == "healthy":
        assert "loop_starts_at" not in entry and "expected_stop_by" not in entry
        return
    start = entry["loop_starts_at"]
    assert isinstance(start, int) and 1 <= start <= calls
    stop = entry.get("expected_stop_by")
    if stop is not None:
        assert isinstance(stop["call"], int) and start <= stop["call"] <= calls
        assert isinstance(stop["why"], str) and stop["why"]


@pytest.mark.parametrize("name", FILES)
def test_every_line_is_a_call_in_the_calls_jsonl_format(name):
    previous: dict[str, float] = {}
    for obj in lines(name):
        assert set(obj) <= {"agent", "tool", "args", "t", "result"}, obj.keys()
        assert isinstance(obj["agent"], str) and obj["agent"]
        assert isinstance(obj["tool"], str) and obj["tool"]
        assert "args" in obj
        if "t" in obj:
            assert isinstance(obj["t"], int | float) and obj["t"] >= previous.get(obj["agent"], 0)
            previous[obj["agent"]] = obj["t"]
        if "result" in obj:
            assert isinstance(obj["result"], str)
    assert sorted({o["agent"] for o in lines(name)}) == ENTRIES[name]["agents"]


@pytest.mark.parametrize("name", FILES)
def test_the_calls_reader_reads_every_line(name):
    reading = read([CORPUS / name])
    assert reading.files == [(str(CORPUS / name), "calls")]
    assert reading.skipped_count == 0 and reading.warnings == []
    objs = lines(name)
    assert len(reading.calls) == len(objs)
    assert [(c.agent, c.tool, c.args) for c in reading.calls] == [(o["agent"], o["tool"], o["args"]) for o in objs]
    results = getattr(reading, "results", None)
    if results is not None:  # readers that record results read every `result` field
        assert len(results) == sum("result" in o for o in objs)


@pytest.mark.parametrize("name", FILES)
def test_cbreplay_verdicts_runs_on_every_file(name, capsys):
    assert main([str(CORPUS / name), "--verdicts"]) == 0
    out = capsys.readouterr()
    verdicts = [json.loads(line) for line in out.out.splitlines()]
    assert len(verdicts) == len(lines(name))
    assert all(v["decision"] in ("allow", "deny") for v in verdicts)


def test_the_installed_cbreplay_reads_the_whole_corpus():
    cbreplay = Path(sys.executable).with_name("cbreplay")
    if not cbreplay.exists():
        pytest.skip("cbreplay is not installed next to this interpreter")
    args = [str(cbreplay), *(str(CORPUS / name) for name in FILES), "--verdicts"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == sum(e["calls"] for e in MANIFEST)


def test_the_readme_table_lists_every_trace():
    readme = (CORPUS / "README.md").read_text()
    for entry in MANIFEST:
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{entry['file']}` |")), None)
        assert row is not None, entry["file"]
        assert f"| {entry['label']} |" in row and f"| {entry['calls']} |" in row
