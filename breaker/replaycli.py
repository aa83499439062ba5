"""The `cbreplay` command: a replay's table, JSON or verdicts (`breaker.replay`), the live feed, or `--compare`
(`breaker.compare`). Its own module, above both, so the replay and the compare mode import no command."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from breaker.config import ConfigError
from breaker.replay import (
    SEARCH_TOOLS,
    load_config,
    printable,
    render_json,
    render_problems,
    render_table,
    render_verdicts,
    replay,
)
from breaker.transcripts import FORMAT_ALIASES, FORMATS, Reading, TranscriptError, harness_of, read

__all__ = ["MAX_GAP", "feed", "main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cbreplay",
        description="Replay agent transcripts through the circuit breaker: the per-agent table (run time, tool "
        "calls, searches, worst repetition, failed calls) and where the breaker would have denied.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="transcript files, dsh session directories or trees")
    p.add_argument(
        "--format",
        choices=[*FORMATS, *FORMAT_ALIASES],
        metavar="{" + ",".join(FORMATS) + "}",
        help="read every file as this format, named after the harness that writes it (default: detect from "
        "content; claude and gemini are accepted for claude-code and gemini-cli)",
    )
    p.add_argument("--patch", action="append", default=[], metavar="FILE", help="a cordis patch layer (repeatable)")
    p.add_argument("--profile", metavar="NAME", help="the dsh profile whose patch layer to read ($DSH_HOME)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override one setting (duplicateLimit=3)"
    )
    p.add_argument("--search-tool", action="append", default=[], metavar="NAME", help="count NAME as a search tool too")
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="SETTING",
        help="compare settings over a corpus of traces (repeatable): KEY=VALUE pairs separated by commas, "
        "e.g. 'preset=recommended,repeatLimit=4', each on top of the --patch/--profile/--set config; "
        "PATHs are corpus directories (a MANIFEST.json labels each trace loop or healthy) or trace files",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the result as one JSON document")
    out.add_argument("--verdicts", action="store_true", help="print one JSON line per call, in input order")
    out.add_argument(
        "--feed", action="store_true", help="play the calls into the live guard (watch them in cbconsole) instead"
    )
    p.add_argument("--socket", metavar="PATH", help="with --feed: the guard's socket (default: the usual path)")
    p.add_argument(
        "--speed", type=float, default=1.0, help="with --feed: 1 = as recorded, 10 = ten times faster, 0 = at once"
    )
    return p


MAX_GAP = 5.0  # a longer pause in a transcript is shortened to this, so a replay never seems stuck


def feed(reading: Reading, socket_path: str | None, speed: float, out: Any = sys.stderr) -> tuple[int, int, int]:
    """Send every call to the live guard as its agent would have, paced by the recorded times / `speed`.

    Each check names the agent's harness (`claude-code` for a Claude Code transcript: the name cbhook
    gives it live) and its parent; calls JSONL names no harness, so the guard takes the connection's
    (`cbreplay`). Calls are sent in time order (interleaving agents as they ran); a call without a
    time follows the one before it. Returns (sent, denied, not checked because the guard was unavailable).
    """
    from breaker.client import GuardClient  # only the feed needs a socket

    client = GuardClient(socket_path, timeout=2.0, harness="cbreplay")
    last_t = 0.0
    timed = []
    for i, call in enumerate(reading.calls):
        last_t = call.t if call.t is not None else last_t
        timed.append((last_t, i, call))
    timed.sort(key=lambda item: (item[0], item[1]))
    start = time.monotonic()
    clock = 0.0  # transcript seconds already played (gaps shortened)
    previous = timed[0][0] if timed else 0.0
    sent = denied = 0
    for t, i, call in timed:
        clock += min(max(0.0, t - previous), MAX_GAP)
        previous = t
        if speed > 0:
            delay = clock / speed - (time.monotonic() - start)
            if delay > 0:
                time.sleep(delay)
        agent = reading.agents.get(call.agent)
        extra: dict[str, Any] = {}
        harness = harness_of(agent.format) if agent is not None else None
        if harness is not None:
            extra["harness"] = harness
        if agent is not None and agent.parent:
            extra["parent"] = agent.parent
        digest = reading.results.get(i)
        if digest is not None:  # a call id, for its result to find it
            extra["call_id"] = f"replay-{i}"
        decision = client.check(call.agent, call.tool, call.args, **extra)
        sent += 1
        denied += not decision.allowed
        if digest is not None and decision.allowed and not decision.fallback:
            client.result(call.agent, digest=digest, call_id=f"replay-{i}")
    client.close()
    print(f"cbreplay: fed {sent} calls to the guard; {denied} denied; {client.misses} not checked", file=out)
    return sent, denied, client.misses


def main(argv: Sequence[str] | None = None) -> int:
    """The `cbreplay` command. Exit 0 on success, 2 on a bad config, path or format."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return 130


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.compare:
        if args.verdicts or args.feed:
            what = "--verdicts" if args.verdicts else "--feed"
            print(
                f"cbreplay: error: --compare prints a table (or --json); it cannot be combined with {what}",
                file=sys.stderr,
            )
            return 2
        from breaker.compare import run  # the compare mode's own module: a plain replay never loads it

        return run(
            args.compare,
            args.paths,
            fmt=args.format,
            patches=args.patch,
            profile=args.profile,
            sets=args.set,
            as_json=args.json,
        )
    try:
        config, origin, notes = load_config(args.patch, args.profile, args.set)
    except ConfigError as exc:
        print(f"cbreplay: error: bad config: {printable(str(exc))}", file=sys.stderr)
        return 2
    try:
        reading = read(args.paths, args.format)
    except TranscriptError as exc:
        print(f"cbreplay: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    if args.feed:
        if args.speed < 0:
            print("cbreplay: error: --speed must be 0 (at once) or more", file=sys.stderr)
            return 2
        _sent, _denied, missed = feed(reading, args.socket, args.speed)
        problems = render_problems(reading, notes)
        if problems:
            sys.stderr.write(problems)
        return 1 if missed else 0
    result = replay(reading, config, search_tools=SEARCH_TOOLS + tuple(args.search_tool), verdicts=args.verdicts)
    try:
        if args.verdicts:
            sys.stdout.writelines(line + "\n" for line in render_verdicts(result))
        elif args.json:
            sys.stdout.write(render_json(result, origin, notes))
        else:
            sys.stdout.write(render_table(result, origin))
        sys.stdout.flush()
    except BrokenPipeError:  # `cbreplay ... | head`: the reader left; that is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    problems = render_problems(reading, notes)
    if problems:
        sys.stderr.write(problems)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
