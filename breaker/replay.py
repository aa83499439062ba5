"""Replay real transcripts through the guard (their results too): the per-agent table and where it would have
denied, as text, JSON or one line per call. The `cbreplay` command is `breaker.replaycli`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
import yaml

from breaker.config import BY_KEY, Config, ConfigError, Problem, describe_value
from breaker.engine import Guard
from breaker.keys import preview, tool_class_name
from breaker.normalise import slept
from breaker.patch import PatchSources, load
from breaker.transcripts import (
    Agent,
    Reading,
)

__all__ = [
    "SEARCH_TOOLS",
    "WIDTH",
    "AgentResult",
    "FirstDeny",
    "FirstWarning",
    "Replay",
    "VerdictLine",
    "duration",
    "load_config",
    "printable",
    "render_json",
    "render_problems",
    "render_table",
    "render_verdicts",
    "replay",
    "short_ids",
    "to_dict",
]

# Web search tools of the harnesses we read (compared as `exempt` compares: case, `_` and `-` ignored).
SEARCH_TOOLS = ("web_search", "WebSearch", "google_web_search")
WIDTH = 100  # the table stays readable in a 100-column terminal
_SORT = orjson.OPT_SORT_KEYS


# -- the config -----------------------------------------------------------------------------------


def load_config(
    patches: Sequence[str] = (),
    profile: str | None = None,
    sets: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> tuple[Config, str, list[str]]:
    """The config to replay with, where it came from, and notes for the user. Raises ConfigError.

    Without `patches` or `profile` this is the built-in defaults (no layer file is read). With
    either, dsh's layers are merged (`$DSH_HOME`, the profile, each --patch). Then each `--set
    key=value` overrides one key; the value is YAML (`3`, `false`, `[a, b]`).
    """
    notes: list[str] = []
    if patches or profile:
        loaded = load(PatchSources.from_env(profile=profile, patches=patches, environ=environ))
        config = loaded.effective
        notes.extend(loaded.notes)
        origin = str(loaded.config_from.path) if loaded.config_from else "built-in defaults (no config in the layers)"
    else:
        config = Config()
        origin = "built-in defaults"
    if sets:
        # Only what differs from the preset: `--set preset=recommended` then brings the preset's values,
        # and a key set in a layer or by another --set still wins over them.
        mapping = config.to_mapping(only_changed=True)
        for item in sets:
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(Problem(item, "KEY=VALUE (e.g. duplicateLimit=3)", describe_value(item), "--set"))
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError as exc:
                problem = getattr(exc, "problem", None) or "unreadable"
                raise ConfigError(
                    Problem(key, "a YAML value (3, false, [a, b])", f"{raw!r} ({problem})", "--set")
                ) from None
            mapping[key] = value
        config = Config.from_mapping(mapping, where="--set")
        origin += " with --set " + " ".join(sets)
        notes.extend(w for w in config.warnings if w not in notes)
    return config, origin, notes


# -- the replay -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstDeny:
    """An agent's first would-be deny: which call (from 1), how long into its run, why, and the call."""

    index: int
    after: float | None  # seconds since the agent's first record
    kind: str
    count: int
    limit: int
    tool: str
    args: Any


@dataclass(frozen=True)
class FirstWarning(FirstDeny):
    """An agent's first call allowed with a warning; `kind` is the rule that warned."""


@dataclass
class AgentResult:
    """One agent's row: what its transcript shows and what the guard would have done."""

    agent: Agent
    calls: int = 0
    searches: int = 0
    distinct_searches: int = 0
    worst: int = 0
    worst_tool: str = ""
    worst_args: Any = None
    denied: int = 0
    denied_by_kind: dict[str, int] = field(default_factory=dict)
    first_deny: FirstDeny | None = None
    warned: int = 0  # calls allowed with a warning
    warned_by_rule: dict[str, int] = field(default_factory=dict)
    first_warning: FirstWarning | None = None


@dataclass
class Replay:
    """The replay of one Reading under one config: a row per agent, and (if asked) every verdict in input order."""

    config: Config
    rows: list[AgentResult]
    verdicts: list[VerdictLine] | None
    reading: Reading

    @property
    def calls(self) -> int:
        return sum(r.calls for r in self.rows)

    @property
    def denied(self) -> int:
        return sum(r.denied for r in self.rows)


class VerdictLine(NamedTuple):
    """One call's verdict in replay: the agent, the call's number in its run (from 1), the tool,
    allowed or not, the deny kind (None if allowed), and the rule that warned (None if none)."""

    agent: str
    number: int
    tool: str
    allowed: bool
    kind: str | None
    warned: str | None


class _Tally:
    __slots__ = ("calls", "counts", "denied", "distinct", "first", "first_warn", "kinds", "searches", "warns")

    def __init__(self) -> None:
        self.calls = 0
        self.searches = 0
        self.distinct: set[object] = set()  # query texts (or call keys)
        self.counts: dict[int, list[Any]] = {}  # call key -> [count, tool, args of its first occurrence]
        self.denied = 0
        self.kinds: dict[str, int] = {}
        self.first: tuple[int, Any, str, int, int, str, Any] | None = None
        self.warns: dict[str, int] = {}
        self.first_warn: tuple[int, Any, str, int, int, str, Any] | None = None


def replay(
    reading: Reading, config: Config, *, search_tools: Iterable[str] = SEARCH_TOOLS, verdicts: bool = False
) -> Replay:
    """Feed every call, in input order, into one Guard with `config` (now = the call's time); tally per agent.

    A call without a time comes when the agent's call before it ended as far as the trace can say: that call's
    time plus the seconds its command sleeps (`breaker.normalise.slept`; 0 when it does not sleep, or was denied
    and so never ran: back to back). So a check after a separate `sleep 30` call comes 30 s after it, as the live
    guard's clock sees it.

    A call's recorded result (`reading.results`) is reported to the guard right after the call is
    allowed, before that agent's next call, as a harness reports it live (rules with `progress` use
    it). A denied call's recorded result is not reported: the tool would not have run.
    """
    guard = Guard(config)
    check = guard.check
    results = reading.results
    report = guard.result
    ignore = frozenset(config.ignore_args)
    searchy = frozenset(map(tool_class_name, search_tools))
    is_search: dict[str, bool] = {}
    tallies: dict[str, _Tally] = {}
    out: list[VerdictLine] | None = [] if verdicts else None
    dumps = orjson.dumps
    last_agent: str | None = None
    tally = _Tally()
    counts = tally.counts
    last_call: dict[str, tuple[float, Any, int | None]] = {}  # agent -> its last call's time, args if it ran, key
    sleeps: dict[int, float] = {}  # a call's key -> the seconds it sleeps (worked out once per distinct call)
    for i, (agent, tool, args, t) in enumerate(reading.calls):
        now = t if t is not None else _untimed(last_call.get(agent), sleeps)
        if results:
            v = check(agent, tool, args, now, call_id=i)
            if v.allowed and i in results:
                report(agent, results[i], call_id=i)
        else:
            v = check(agent, tool, args, now)
        key = guard.checked_key if v.counted else v.key  # (a plain allowed call's verdict is shared: no key)
        if v.allowed:
            last_call[agent] = (now, args, key)
        else:  # a denied call did not run: it slept no time
            last_call[agent] = (now, None, None)
        if agent != last_agent:  # transcripts come agent by agent: look the tally up only on a change
            last_agent = agent
            found = tallies.get(agent)
            if found is None:
                found = tallies[agent] = _Tally()
            tally = found
            counts = tally.counts
        n = tally.calls = tally.calls + 1
        # The key as the engine compares calls: the ignoreArgs names left out of the top-level object.
        # the engine's own digest when it computed one: the same comparison, done once
        if key is None:
            same = args
            if ignore and type(args) is dict and not ignore.isdisjoint(args):
                same = {k: val for k, val in args.items() if k not in ignore}
            try:
                key = hash(dumps((tool, same), option=_SORT))
            except Exception:  # unserializable args: each such call counts as its own
                key = hash((tool, n, id(args)))
        entry = counts.get(key)
        if entry is None:
            counts[key] = [1, tool, args]
        else:
            entry[0] += 1
        search = is_search.get(tool)
        if search is None:
            search = is_search[tool] = tool_class_name(tool) in searchy
        if search:
            # dsh's web_search takes `queries` (1-4, repeats collapsed): one call can be several searches,
            # as in the seed's table (1,200 searches in 626 calls). The others take one `query`.
            queries = args.get("queries") if type(args) is dict else None
            if type(queries) is list and queries and all(type(q) is str for q in queries):
                unique = set(queries)
                tally.searches += len(unique)
                tally.distinct.update(unique)
            else:
                query = args.get("query") if type(args) is dict else None
                tally.searches += 1
                tally.distinct.add(query if type(query) is str else key)
        warned = None
        if not v.allowed:
            tally.denied += 1
            kind: str = v.kind or "deny"
            tally.kinds[kind] = tally.kinds.get(kind, 0) + 1
            if tally.first is None:
                tally.first = (n, t, kind, v.count, v.limit, tool, args)
        elif v.warning:
            warned = v.rule or "warn"
            tally.warns[warned] = tally.warns.get(warned, 0) + 1
            if tally.first_warn is None:
                tally.first_warn = (n, t, warned, v.count, v.limit, tool, args)
        if out is not None:
            out.append(VerdictLine(agent, n, tool, v.allowed, v.kind, warned))

    rows = []
    for info in _tree_order(reading.agents):
        done = tallies.get(info.id)
        row = AgentResult(info)
        if done is not None:
            row.calls, row.searches, row.distinct_searches = done.calls, done.searches, len(done.distinct)
            worst = max(done.counts.values(), key=lambda e: e[0])
            row.worst, row.worst_tool, row.worst_args = worst[0], worst[1], worst[2]
            row.denied, row.denied_by_kind = done.denied, dict(done.kinds)
            if done.first is not None:
                n, t, kind, count, limit, tool, args = done.first
                after = t - info.first if t is not None and info.first is not None else None
                row.first_deny = FirstDeny(n, after, kind, count, limit, tool, args)
            row.warned, row.warned_by_rule = sum(done.warns.values()), dict(done.warns)
            if done.first_warn is not None:
                n, t, rule, count, limit, tool, args = done.first_warn
                after = t - info.first if t is not None and info.first is not None else None
                row.first_warning = FirstWarning(n, after, rule, count, limit, tool, args)
        rows.append(row)
    return Replay(config, rows, out, reading)


def _untimed(before: tuple[float, Any, int | None] | None, sleeps: dict[int, float]) -> float:
    """When a call without a time comes: its agent's call `before` it (time, args if it ran, key) ended, the
    seconds that call sleeps after it began (the first call of an agent: 0)."""
    if before is None:
        return 0.0
    began, args, key = before
    if key is None:
        return began + slept(args)
    seconds = sleeps.get(key)
    if seconds is None:
        seconds = sleeps[key] = slept(args)
    return began + seconds


def _tree_order(agents: Mapping[str, Agent]) -> list[Agent]:
    """Agents in input order, each subagent right after its parent (when its parent was read too)."""
    children: dict[str, list[Agent]] = {}
    roots = []
    for agent in agents.values():
        if agent.parent is not None and agent.parent in agents and agent.parent != agent.id:
            children.setdefault(agent.parent, []).append(agent)
        else:
            roots.append(agent)
    out: list[Agent] = []
    seen: set[str] = set()
    stack = list(reversed(roots))
    while stack:
        agent = stack.pop()
        if agent.id in seen:
            continue
        seen.add(agent.id)
        out.append(agent)
        stack.extend(reversed(children.get(agent.id, [])))
    out.extend(a for a in agents.values() if a.id not in seen)  # a parent cycle: keep them all
    return out


# -- output ---------------------------------------------------------------------------------------

# Control characters and bidi overrides in untrusted text (tool names, args, ids) are shown escaped,
# so a transcript cannot move the cursor, recolour the terminal or reorder what is printed.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """Untrusted text made safe to print in a terminal: control and bidi characters escaped."""
    return _UNSAFE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )


def duration(seconds: float | None) -> str:
    """`12.5s`, `4m 10s`, `1h 08m`; `-` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


# dsh `session-<uuid>` and bare uuids, Claude Code's session uuids and 17-hex agent ids: the prefix and
# 8 hex digits tell them apart.
_HEX_ID = re.compile(r"\A((?:session-|agent-)?[0-9a-f]{8})[0-9a-f-]{4,}\Z", re.I)


def _short(agent_id: str, width: int) -> str:
    parts = [_HEX_ID.match(p) for p in agent_id.split("/")]
    if all(parts):  # a Claude Code subagent, `<session>/<agent>`: each part a hex prefix, `width` in all
        return "/".join(m.group(1) for m in parts if m)[:width]
    return agent_id if len(agent_id) <= width else agent_id[: width - 1] + "…"


def short_ids(ids: Iterable[str], width: int = 16) -> dict[str, str]:
    """Display names for agent ids: a hex id (a UUID, `session-<uuid>`, a Claude Code agent id) shows its
    first 8 hex digits, like a short git hash, and `<session>/<agent>` both parts so, cut to `width`
    (`5b8e2c1d/a972903`); another long id is cut with `…`. Where two would look alike, both keep their
    full id."""
    ids = list(dict.fromkeys(ids))
    out = {i: _short(i, width) for i in ids}
    shown: dict[str, list[str]] = {}
    for i, s in out.items():
        shown.setdefault(s, []).append(i)
    for same in shown.values():
        if len(same) > 1:
            for i in same:
                out[i] = i
    return {i: printable(s) for i, s in out.items()}


def _n(value: int) -> str:
    return f"{value:,}"


def _config_line(config: Config, origin: str) -> str:
    parts = [
        f"duplicateLimit {config.duplicate_limit}",
        f"window {config.window}",
        f"maxCallsPerAgent {config.max_calls_per_agent or 'off'}",
    ]
    changed = config.to_mapping(only_changed=True)
    for key in ("exempt", "only", "ignoreArgs"):
        if key in changed:
            parts.append(f"{key} [{', '.join(changed[key])}]")
    if not config.enabled:
        parts.append("enabled false (the guard allows everything)")
    lines = ["config: " + ", ".join(parts), *("  " + extra for extra in _rules_lines(config)), f"  from: {origin}"]
    return "\n".join(printable(line) for line in lines)


def _rules_lines(config: Config) -> list[str]:
    """The rules beyond the seed's that `config` turns on (none: []): the preset, repeat, polls, stall,
    reworded, unchanged, cycle, progress, per-tool overrides; and the warnings, on a line of their own."""
    parts = []
    if config.preset != "seed":
        parts.append(f"preset {config.preset}")
    if config.repeat_limit:
        parts.append(f"repeatLimit {config.repeat_limit}")
    if config.poll_limit:
        parts.append(f"pollLimit {config.poll_limit} ({config.poll_gap} s)")
    if config.stall_limit:
        parts.append(f"stallLimit {config.stall_limit}")
    if config.reword_limit:
        parts.append(f"rewordLimit {config.reword_limit}")
    if config.unchanged_limit:
        parts.append(f"unchangedLimit {config.unchanged_limit}")
    if config.cycle_limit:
        period = f" (cyclePeriod {config.cycle_period})" if config.cycle_period != BY_KEY["cyclePeriod"].default else ""
        parts.append(f"cycleLimit {config.cycle_limit}{period}")
    if config.progress:
        parts.append("progress")
    if config.tools:
        tools = "; ".join(f"{t}: " + " ".join(f"{k} {v}" for k, v in o) for t, o in config.tools)
        parts.append(f"tools {{{tools}}}")
    warns = [
        f"{key} {value}"
        for key, value in (
            ("duplicateWarn", config.duplicate_warn),
            ("repeatWarn", config.repeat_warn),
            ("stallWarn", config.stall_warn),
            ("rewordWarn", config.reword_warn),
            ("unchangedWarn", config.unchanged_warn),
            ("cycleWarn", config.cycle_warn),
            ("capWarn", config.cap_warn),
        )
        if value
    ]
    out = ["rules: " + ", ".join(parts)] if parts else []
    return out + (["warn: " + ", ".join(warns)] if warns else [])


def render_table(result: Replay, origin: str = "built-in defaults") -> str:
    """The seed's table, one row per agent, then where the breaker would have stopped each agent."""
    rows = result.rows
    reading = result.reading
    names = short_ids([r.agent.id for r in rows] + [r.agent.parent for r in rows if r.agent.parent])
    formats = sorted({f for _, f in reading.files})
    lines = [
        f"cbreplay: {len(rows)} agent{'s' if len(rows) != 1 else ''}, {_n(result.calls)} tool calls, "
        f"from {len(reading.files)} file{'s' if len(reading.files) != 1 else ''} ({', '.join(formats)})",
        _config_line(result.config, origin),
        "",
    ]
    aw = max([5] + [len(names[r.agent.id]) for r in rows])
    pw = max([6] + [len(names[r.agent.parent]) for r in rows if r.agent.parent])
    header = (
        f"{'agent':<{aw}}  {'parent':<{pw}}  {'run time':>8}  {'calls':>6}  {'searches (distinct)':>19}  "
        f"{'worst rep':>9}  {'failed':>6}  {'denied':>6}"
    )
    lines += [header, "-" * len(header)]
    for r in rows:
        a = r.agent
        searches = f"{_n(r.searches)} ({_n(r.distinct_searches)})" if r.searches else "0"
        failed = "-" if a.failed is None else _n(a.failed)
        lines.append(
            f"{names[a.id]:<{aw}}  {names[a.parent] if a.parent else '-':<{pw}}  {duration(a.run_time):>8}  "
            f"{_n(r.calls):>6}  {searches:>19}  {_n(r.worst):>9}  {failed:>6}  {_n(r.denied):>6}"
        )
    lines += ["", "Where the breaker would have stopped each agent:"]
    pad = "    "
    for r in rows:
        name = names[r.agent.id]
        if r.first_deny is None:
            lines.append(f"{name}: no deny, all {_n(r.calls)} calls allowed")
        else:
            d = r.first_deny
            after = f", {duration(d.after)} in" if d.after is not None else ""
            lines.append(f"{name}: first deny at call {_n(d.index)}{after}: {d.kind} {d.count}/{d.limit}")
            lines.append(pad + printable(preview(d.tool, d.args, WIDTH - len(pad))))
            kinds = f" ({', '.join(f'{k} {_n(v)}' for k, v in sorted(r.denied_by_kind.items()))})"
            lines.append(f"{pad}would have denied {_n(r.denied)} of {_n(r.calls)} calls{kinds}")
        if r.first_warning is not None:
            w = r.first_warning
            rules = ", ".join(f"{k} {_n(v)}" for k, v in sorted(r.warned_by_rule.items()))
            lines.append(
                f"{pad}warned on {_n(r.warned)} call{'s' if r.warned != 1 else ''} ({rules}); "
                f"the first at call {_n(w.index)}: {w.kind} {w.count}/{w.limit}"
            )
        if r.worst > 1:
            text = f"{pad}worst repetition {_n(r.worst)}x: "
            lines.append(text + printable(preview(r.worst_tool, r.worst_args, WIDTH - len(text))))
    total_denied = sum(1 for r in rows if r.first_deny is not None)
    lines += [
        "",
        f"total: {_n(result.calls)} calls, {_n(result.denied)} would have been denied; "
        f"{total_denied} of {len(rows)} agent{'s' if len(rows) != 1 else ''} tripped the breaker",
    ]
    return "\n".join(lines) + "\n"


def _ms(seconds: float | None) -> float | None:
    """Seconds rounded to the millisecond the transcripts record (epoch arithmetic leaves float dust)."""
    return None if seconds is None else round(seconds, 3)


def to_dict(result: Replay, origin: str = "built-in defaults", notes: Sequence[str] = ()) -> dict[str, Any]:
    """The replay as plain data (what `--json` prints)."""
    agents = []
    for r in result.rows:
        a = r.agent
        d = r.first_deny
        w = r.first_warning
        agents.append(
            {
                "agent": a.id,
                "parent": a.parent,
                "format": a.format,
                "source": a.source,
                "runTime": _ms(a.run_time),
                "calls": r.calls,
                "searches": r.searches,
                "distinctSearches": r.distinct_searches,
                "worstRepetition": {
                    "count": r.worst,
                    "tool": r.worst_tool,
                    "preview": preview(r.worst_tool, r.worst_args),
                }
                if r.worst
                else None,
                "failed": a.failed,
                "denied": r.denied,
                "deniedByKind": r.denied_by_kind,
                "firstDeny": {
                    "index": d.index,
                    "after": _ms(d.after),
                    "kind": d.kind,
                    "count": d.count,
                    "limit": d.limit,
                    "tool": d.tool,
                    "preview": preview(d.tool, d.args),
                }
                if d
                else None,
                "results": a.results,
                "warned": r.warned,
                "warnedByRule": r.warned_by_rule,
                "firstWarning": {
                    "index": w.index,
                    "after": _ms(w.after),
                    "rule": w.kind,
                    "count": w.count,
                    "limit": w.limit,
                    "tool": w.tool,
                    "preview": preview(w.tool, w.args),
                }
                if w
                else None,
            }
        )
    reading = result.reading
    return {
        "config": result.config.to_mapping(),
        "configFrom": origin,
        "files": [{"path": p, "format": f} for p, f in reading.files],
        "agents": agents,
        "calls": result.calls,
        "denied": result.denied,
        "skippedLines": reading.skipped_count,
        "skipped": [{"source": s.source, "line": s.line, "reason": s.reason} for s in reading.skipped],
        "warnings": list(notes) + reading.warnings,
    }


def render_json(result: Replay, origin: str = "built-in defaults", notes: Sequence[str] = ()) -> str:
    return orjson.dumps(to_dict(result, origin, notes), option=orjson.OPT_INDENT_2).decode() + "\n"


def render_verdicts(result: Replay) -> Iterable[str]:
    """One JSON line per call, in input order: {"agent","index","tool","decision","kind"} (index from 1),
    and on an allowed call that carried a warning `"warn": true` and the `"rule"` that warned."""
    dumps = orjson.dumps
    for agent, index, tool, allowed, kind, warned in result.verdicts or ():
        line: dict[str, Any] = {
            "agent": agent,
            "index": index,
            "tool": tool,
            "decision": "allow" if allowed else "deny",
            "kind": kind,
        }
        if warned is not None:
            line["warn"] = True
            line["rule"] = warned
        yield dumps(line).decode()


def render_problems(reading: Reading, notes: Sequence[str] = (), per_file: int = 10) -> str:
    """Warnings, then the skipped lines with their numbers (at most `per_file` listed per file)."""
    lines = [f"cbreplay: note: {printable(n)}" for n in notes]
    lines += [f"cbreplay: warning: {printable(w)}" for w in reading.warnings]
    if reading.skipped_count:
        lines.append(f"cbreplay: skipped {_n(reading.skipped_count)} malformed line(s):")
        by_file: dict[str, list[str]] = {}
        for s in reading.skipped:
            by_file.setdefault(s.source, []).append(f"line {s.line}: {s.reason}")
        for source, items in by_file.items():
            lines += [f"  {printable(source)}: {printable(i)}" for i in items[:per_file]]
            if len(items) > per_file:
                lines.append(f"  {printable(source)}: … and {len(items) - per_file} more")
        if reading.skipped_count > len(reading.skipped):
            lines.append(f"  … and {reading.skipped_count - len(reading.skipped)} more not listed")
    return "\n".join(lines) + ("\n" if lines else "")
