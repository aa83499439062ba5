"""The public corpus of real agent traces (tests/fixtures/corpus, see its README): the manifest and the files agree.

These tests check the corpus's shape and provenance only. They never assert what a rule decides on it: the
rules are tuned and judged on this corpus elsewhere. The corpus README's counts and trace table and
docs/corpus.md's results table are generated here (from MANIFEST.json, and from `cbreplay --compare` on the
corpus); a test fails when a doc differs from what this file generates. Regenerate both with

    .venv/bin/python tests/test_corpus.py --write
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import statistics
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from breaker.replaycli import main
from breaker.transcripts import read

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
README = CORPUS / "README.md"
CORPUS_DOC = ROOT / "docs" / "corpus.md"
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


# The generated parts of the docs: each between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->`.
REGENERATE = ".venv/bin/python tests/test_corpus.py --write"
# docs/corpus.md's results table: `cbreplay --compare` with these settings, one row each (C-I take one rule
# out of `recommended` or loosen it: one row per rule, issue 23's reworded, polls and unchanged rules included).
COMPARE = [
    "preset=seed",
    "preset=recommended",
    "preset=recommended,progress=false",
    "preset=recommended,stallLimit=0",
    "preset=recommended,repeatLimit=3",
    "preset=recommended,cycleLimit=3",
    "preset=recommended,rewordLimit=0",
    "preset=recommended,pollLimit=0",
    "preset=recommended,unchangedLimit=0",
]


def _source_cell(source: dict) -> str:
    if source["commit"]:
        return f"[{source['repo']}]({source['url']}) @ `{source['commit'][:8]}`"
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", source["url"])
    return f"[{m.group(1)}#{m.group(2)}]({source['url']})" if m else f"[{source['repo']}]({source['url']})"


def counts_text() -> str:
    """One line: how many traces, loops, healthy runs and calls, and the traces' size."""
    loops = [e for e in MANIFEST if e["label"] == "loop"]
    calls = sum(e["calls"] for e in MANIFEST)
    size = sum((CORPUS / e["file"]).stat().st_size for e in MANIFEST)
    return (
        f"{len(MANIFEST)} traces: **{len(loops)} loops, {len(MANIFEST) - len(loops)} healthy runs**, {calls:,} calls "
        f"({sum(e['calls'] for e in loops):,} of them in loops), {size / 1024 / 1024:.1f} MB of JSONL."
    )


def trace_table() -> str:
    """The README's table of every trace, loops first, each group by file name."""
    rows = [
        "| file | label | calls | harness · model | source | what repeats |",
        "|---|---|---|---|---|---|",
    ]
    for e in sorted(MANIFEST, key=lambda e: (e["label"] != "loop", e["file"])):
        cells = [f"`{e['file']}`", e["label"], str(e["calls"]), f"{e['harness']} · {e['model']}"]
        cells += [_source_cell(e["source"]), e["summary"]]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def _setting_text(setting: str) -> str:
    pairs = [p.split("=", 1) for p in setting.split(",")]
    if len(pairs) == 1:
        return f"`{pairs[0][0]}: {pairs[0][1]}`"
    return ", ".join([pairs[0][1], *(f"`{k}: {v}`" for k, v in pairs[1:])])


@functools.cache
def compared() -> dict:
    """`cbreplay --compare --json` with the COMPARE settings over the corpus (run once per session)."""
    argv = [x for s in COMPARE for x in ("--compare", s)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, str(CORPUS), "--json"]) == 0
    return json.loads(out.getvalue())


def results_table() -> str:
    """The command and, per setting, the loops and healthy runs stopped, as `cbreplay --compare --json` counts."""
    doc = compared()
    command = " \\\n  ".join(
        ["cbreplay " + " ".join(f"--compare {s}" for s in COMPARE[:2])]
        + [" ".join(f"--compare {s}" for s in COMPARE[i : i + 2]) for i in range(2, len(COMPARE), 2)]
        + ["tests/fixtures/corpus"]
    )
    rows = [
        "```sh",
        command,
        "```",
        "",
        "| | setting | loops stopped | healthy stopped | healthy warned | median stop | warned first | in time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for letter, setting in zip("ABCDEFGHIJ", doc["settings"], strict=False):
        loop, healthy = setting["loop"], setting["healthy"]
        median = loop["medianFirstStop"]
        cells = [
            letter,
            _setting_text(setting["setting"]),
            f"{loop['stopped']} of {loop['traces']}",
            f"{healthy['stopped']} of {healthy['traces']}",
            f"{healthy['warned']} of {healthy['traces']}",
            "-" if median is None else f"{median:g}",
            f"{loop['warnedFirst']} of {loop['stopped']}",
            f"{loop['inTime']} of {loop['withExpectedStop']}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _median(values: list[int]) -> str:
    return f"{statistics.median(values):g}"


def bounds_text() -> str:
    """Where `recommended` (row B) stops each loop against the call its manifest expects it stopped by: the
    median of those expected calls (the median first deny of a detector that stopped every loop exactly there),
    the loops stopped later and earlier than expected, and the median counted from each loop's first call."""
    setting = next(s for s in compared()["settings"] if s["setting"] == "preset=recommended")
    first = {t["trace"]: t["firstStop"] for t in setting["traces"] if t["label"] == "loop"}
    loops = sorted((e for e in MANIFEST if e["label"] == "loop"), key=lambda e: e["file"])
    expected = {e["file"]: e["expected_stop_by"]["call"] for e in loops}
    stopped = [e for e in loops if first[e["file"]] is not None]
    later = [e for e in stopped if first[e["file"]] > expected[e["file"]]]
    earlier = [e for e in stopped if first[e["file"]] < expected[e["file"]]]

    def named(group: list[dict]) -> str:
        return ", ".join(f"`{e['file']}` ({first[e['file']]}, expected by {expected[e['file']]})" for e in group)

    missed = [e for e in loops if first[e["file"]] is None]
    into = [first[e["file"]] - e["loop_starts_at"] + 1 for e in stopped]
    return (
        f"- The calls the {len(loops)} loops' manifests expect them stopped by have a median of "
        f"**{_median(list(expected.values()))}**: a detector that stopped every loop exactly where a careful reader "
        f"would, no earlier and no later, has that median first deny on this corpus.\n"
        f"- `recommended` stops {len(stopped) - len(later) - len(earlier)} loops at the expected call, "
        f"{len(earlier)} earlier ({named(earlier)}) and {len(later)} later ({named(later)})"
        + (f"; it misses {len(missed)}: " + ", ".join(f"`{e['file']}`" for e in missed) if missed else "")
        + ".\n"
        f"- Counted from each loop's first call (`loop_starts_at`) instead of the trace's, the median first deny is "
        f"call {_median(into)} of the loop."
    )


GENERATED: dict[Path, dict[str, Callable[[], str]]] = {
    README: {"counts": counts_text, "traces": trace_table},
    CORPUS_DOC: {"counts": counts_text, "results": results_table, "bounds": bounds_text},
}


def regenerated(path: Path) -> str:
    """The file's text with every generated part rebuilt; an error names a part whose markers are missing."""
    text = path.read_text()
    for name, build in GENERATED[path].items():
        begin, end = f"<!-- generated: {name} -->\n", f"\n<!-- end generated: {name} -->"
        start, stop = text.find(begin), text.find(end)
        if start < 0 or stop < start:
            raise ValueError(f"{path.name}: no '{begin.strip()}' ... '{end.strip()}' block")
        text = text[: start + len(begin)] + build() + text[stop:]
    return text


@pytest.mark.parametrize("path", list(GENERATED), ids=lambda p: p.name)
def test_the_generated_parts_of_the_docs_are_what_the_manifest_and_cbreplay_compare_give(path):
    assert path.read_text() == regenerated(path), f"{path.name} is stale: run {REGENERATE}"


def test_a_doc_without_its_generated_block_is_an_error_naming_the_block(tmp_path, monkeypatch):
    doc = tmp_path / "README.md"
    doc.write_text("# no markers here\n")
    monkeypatch.setitem(GENERATED, doc, {"traces": trace_table})
    with pytest.raises(ValueError, match=r"README\.md: no '<!-- generated: traces -->'"):
        regenerated(doc)


def test_the_trace_table_has_one_row_per_manifest_entry_loops_first():
    rows = trace_table().splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [
        f"| `{e['file']}`" for e in sorted(MANIFEST, key=lambda e: (e["label"] != "loop", e["file"]))
    ]
    assert all(r.count(" | ") == 5 for r in rows), "a cell with an unescaped pipe"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {REGENERATE}")
    for doc_path in GENERATED:
        doc_path.write_text(regenerated(doc_path))
        print(f"wrote {doc_path.relative_to(ROOT)}")
