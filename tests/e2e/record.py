"""Record the transcript fixtures with the real harnesses: `python -m tests.e2e.record [names...]`.

Each harness runs a loop against the fake model with the stand-in guard denying calls, and its own
transcript files are copied to `tests/fixtures/transcripts/<name>/` under their on-disk layout.
dsh's zstd files are copied byte for byte; JSONL files have their bulk shortened
(system prompts, tool schemas: see `trim_line`), each line staying valid JSON, other lines verbatim.
The stand-in's own log (hook stdin / plugin records) goes to `tests/e2e/samples/`.
Names: dsh-zstd dsh-plain claude codex gemini (all by default).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import harnesses
from .fakemodel import FakeModel, loop_script
from .runs import Run, run_claude, run_codex, run_dsh, run_gemini
from .scenarios import CLAUDE_SPAWN, DSH_SPAWN, claude_bash, dsh_bash, parent_child_script

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "transcripts"
SAMPLES = Path(__file__).resolve().parent / "samples"
SCRATCH = Path("/tmp/cbconsole-record")  # a fixed path, so the recorded cwd names are stable
TRIM = 1000
REASON = "STANDIN-DENY: the stand-in guard denied this repeated call"


def trim_line(line: str) -> str:
    """The same JSON line with bulk shortened, or the line itself when it has none.

    Bulk is strings over `TRIM` characters (system prompts) and tool schemas (a `tools` list of
    objects keeps each tool's name only). Tool calls and results are far below both.
    """
    trimmed = False

    def walk(value: Any, key: str = "") -> Any:
        nonlocal trimmed
        if isinstance(value, str) and len(value) > TRIM:
            trimmed = True
            return value[:200] + f"…[{len(value) - 200} chars trimmed by tests/e2e/record.py]"
        if key == "tools" and isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            trimmed = True
            return [{"name": _tool_name(v), "schema": "trimmed by tests/e2e/record.py"} for v in value]
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        return value

    out = walk(json.loads(line))
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")) if trimmed else line


def _tool_name(tool: dict[str, Any]) -> str:
    function = tool.get("function")
    name = tool.get("name") or (function.get("name") if isinstance(function, dict) else None)
    return str(name or tool.get("type") or "?")


def copy_trimmed(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    lines = src.read_text().splitlines()
    dst.write_text("".join(trim_line(line) + "\n" for line in lines if line.strip()))


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def save_samples(run: Run, name: str) -> None:
    SAMPLES.mkdir(exist_ok=True)
    copy_trimmed(run.log_path, SAMPLES / f"{name}.jsonl")


def check(run: Run) -> Run:
    if run.returncode != 0:
        raise SystemExit(f"recording failed:\n{run.describe()}")
    return run


def record_dsh(name: str, compression: str | None) -> None:
    h = harnesses.ensure_dsh()
    scratch = fresh(SCRATCH / name)
    log = scratch / "standin.jsonl"
    script = parent_child_script(
        spawn=DSH_SPAWN, parent_call=dsh_bash("parent"), child_call=dsh_bash("probe"), parent_calls=2,
        child_calls=10, child_ended=lambda: log.exists() and '"event":"subagent/end"' in log.read_text(),
    )  # fmt: skip
    with FakeModel(script) as fm:
        run = check(run_dsh(h, fm, scratch, deny_at=range(7, 11), reason=REASON, compression=compression))
    out = fresh(FIXTURES / name)
    for path in sorted(run.paths["sessions"].rglob("session.jsonl*")):
        dst = out / "sessions" / path.relative_to(run.paths["sessions"])
        if path.name.endswith(".zstd"):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dst)  # real frames, byte for byte
        else:
            copy_trimmed(path, dst)
    save_samples(run, f"{name}-plugin-records")


def record_claude() -> None:
    h = harnesses.ensure_claude()
    scratch = fresh(SCRATCH / "claude")
    log = scratch / "standin.jsonl"
    script = parent_child_script(
        spawn=CLAUDE_SPAWN, parent_call=claude_bash("parent"), child_call=claude_bash("probe"), parent_calls=2,
        child_calls=10, child_ended=lambda: log.exists() and '"SubagentStop"' in log.read_text(),
    )  # fmt: skip
    with FakeModel(script) as fm:
        run = check(run_claude(h, fm, scratch, deny_at=range(7, 11), reason=REASON))
    out = fresh(FIXTURES / "claude")
    projects = run.paths["projects"]
    for path in sorted(projects.rglob("*")):
        if path.is_file() and path.suffix in (".jsonl", ".json"):
            dst = out / "projects" / path.relative_to(projects)
            if path.suffix == ".jsonl":
                copy_trimmed(path, dst)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dst)
    save_samples(run, "claude-hook-stdin")


def record_codex() -> None:
    h = harnesses.ensure_codex()
    scratch = fresh(SCRATCH / "codex")
    with FakeModel(loop_script(8)) as fm:
        run = check(run_codex(h, fm, scratch, deny_at=(7, 8), reason=REASON))
    out = fresh(FIXTURES / "codex")
    for path in sorted(run.paths["sessions"].rglob("rollout-*.jsonl")):
        copy_trimmed(path, out / "sessions" / path.relative_to(run.paths["sessions"]))
    save_samples(run, "codex-hook-stdin")


def record_gemini() -> None:
    h = harnesses.ensure_gemini()
    scratch = fresh(SCRATCH / "gemini")
    with FakeModel(loop_script(4)) as fm:
        run = check(run_gemini(h, fm, scratch, deny_at=(3, 4), reason=REASON))
    out = fresh(FIXTURES / "gemini")
    tmp = run.paths["gemini_dir"] / "tmp"
    for path in sorted(tmp.glob("*/chats/*")):
        copy_trimmed(path, out / "tmp" / path.relative_to(tmp))
    save_samples(run, "gemini-hook-stdin")


RECORDERS: dict[str, Callable[[], None]] = {
    "dsh-zstd": lambda: record_dsh("dsh-zstd", None),
    "dsh-plain": lambda: record_dsh("dsh-plain", "none"),
    "claude": record_claude,
    "codex": record_codex,
    "gemini": record_gemini,
}


def main(argv: list[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or list(RECORDERS)
    for name in names:
        if name not in RECORDERS:
            print(f"unknown fixture {name!r}; known: {', '.join(RECORDERS)}", file=sys.stderr)
            return 2
    for name in names:
        RECORDERS[name]()
        files = sorted(p for p in (FIXTURES / name).rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in files)
        print(f"{name}: {len(files)} files, {size / 1024:.1f} KiB in {FIXTURES / name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
