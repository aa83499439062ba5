"""`cbreplay --compare`: settings side by side over a labelled corpus of traces, each trace replayed
under each setting on a fresh guard; the tables and the JSON that sum them up."""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from breaker.config import Config, ConfigError, Problem
from breaker.replay import WIDTH, load_config, printable, render_problems, replay
from breaker.transcripts import LABELS, Corpus, Reading, Trace, TranscriptError, read_corpus

__all__ = [
    "Candidate",
    "Comparison",
    "Group",
    "TraceOutcome",
    "compare",
    "comparison_dict",
    "load_candidates",
    "render_comparison",
    "render_corpus_problems",
    "run",
    "split_setting",
]


@dataclass(frozen=True)
class Candidate:
    """One setting of `--compare`: its name in the tables (A, B, …), its text, and the config it gives."""

    name: str
    text: str  # as given: KEY=VALUE pairs separated by commas ("" = the base config)
    config: Config


@dataclass(frozen=True)
class TraceOutcome:
    """One trace replayed under one setting: its calls, how many were denied, and the first stop."""

    trace: Trace
    calls: int
    denied: int
    first_stop: int | None  # the call (from 1, counted over the whole trace) of its first deny
    kind: str | None  # that deny's kind
    warned: int  # calls allowed with a warning
    warned_first: bool  # a warning came before the first deny
    first_warning: int | None  # the call (counted as first_stop is) of its first warning

    @property
    def first_action(self) -> int | None:
        """The call of the guard's first warning or deny, whichever came first."""
        acts = [n for n in (self.first_warning, self.first_stop) if n is not None]
        return min(acts) if acts else None

    @property
    def in_time(self) -> bool | None:
        """Warned or denied by the call the manifest expects a good detector to act by (None: it names none)."""
        if self.trace.expected_stop is None:
            return None
        return self.first_action is not None and self.first_action <= self.trace.expected_stop


@dataclass(frozen=True)
class Group:
    """The traces of one label under one setting: how many, how many stopped, the median first stop,
    how many of the stopped ones were warned first, how many were warned or denied in time (of those
    the manifest gives an expected stop), and how many were warned at all."""

    traces: int
    stopped: int
    median_first_stop: float | None
    warned_first: int
    in_time: int
    with_expected_stop: int
    warned: int  # traces with at least one warning, stopped or not


@dataclass
class Comparison:
    """Every setting over every trace that could be read."""

    candidates: list[Candidate]
    outcomes: dict[str, list[TraceOutcome]]  # candidate name -> one outcome per trace, in corpus order
    corpus: Corpus

    def group(self, name: str, label: str | None) -> Group:
        """The traces labelled `label` (None: unlabelled) under setting `name`."""
        mine = [o for o in self.outcomes[name] if o.trace.label == label]
        stopped = [o for o in mine if o.first_stop is not None]
        firsts = [o.first_stop for o in stopped if o.first_stop is not None]
        median = float(statistics.median(firsts)) if firsts else None
        timed = [o.in_time for o in mine if o.in_time is not None]
        warned_first = sum(o.warned_first for o in stopped)
        warned = sum(1 for o in mine if o.warned)
        return Group(len(mine), len(stopped), median, warned_first, sum(timed), len(timed), warned)


def split_setting(text: str) -> list[str]:
    """`preset=recommended,repeatLimit=4` as `--set` items: split at the commas outside brackets,
    braces and quotes, so `exempt=[a, b]` stays one item."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _candidate_name(n: int) -> str:
    return chr(ord("A") + n) if n < 26 else str(n + 1)


def load_candidates(
    texts: Sequence[str],
    patches: Sequence[str] = (),
    profile: str | None = None,
    sets: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> list[Candidate]:
    """The config of each `--compare` setting: the base (the layers and `--set`s, as for a replay) with
    its KEY=VALUE pairs on top. Raises ConfigError naming the setting."""
    out = []
    for n, text in enumerate(texts):
        try:
            config, _origin, _notes = load_config(patches, profile, [*sets, *split_setting(text)], environ)
        except ConfigError as exc:
            raise ConfigError(
                [Problem(p.key, p.expected, p.found, f"--compare {text!r}") for p in exc.problems]
            ) from None
        out.append(Candidate(_candidate_name(n), text, config))
    return out


def _outcome(trace: Trace, reading: Reading, config: Config) -> TraceOutcome:
    lines = replay(reading, config, verdicts=True).verdicts or []
    first = kind = first_warning = None
    denied = warned = 0
    for n, line in enumerate(lines, 1):
        if not line.allowed and line.kind != "interrupted":
            denied += 1
            if first is None:
                first, kind = n, line.kind
        elif line.warned is not None:
            warned += 1
            if first_warning is None:
                first_warning = n
    warned_first = first is not None and first_warning is not None and first_warning < first
    return TraceOutcome(trace, len(lines), denied, first, kind, warned, warned_first, first_warning)


def compare(corpus: Corpus, candidates: Sequence[Candidate]) -> Comparison:
    """Replay every trace that could be read under every setting, each on a fresh Guard."""
    outcomes: dict[str, list[TraceOutcome]] = {c.name: [] for c in candidates}
    for trace in corpus.traces:
        if trace.reading is None:
            continue
        for c in candidates:
            outcomes[c.name].append(_outcome(trace, trace.reading, c.config))
    return Comparison(list(candidates), outcomes, corpus)


_KIND_SHORT = {"duplicate": "dup", "repeat": "rep", "cycle": "cyc", "stall": "stl", "reworded": "rwd", "cap": "cap"}


def _n(value: int) -> str:
    return f"{value:,}"


def _median(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def _of(stopped: int, total: int) -> str:
    return f"{stopped} of {total}" if total else "-"


def render_comparison(result: Comparison, paths: Sequence[str] = ()) -> str:
    """The comparison as tables: per setting the loops and healthy runs stopped, the healthy runs warned, the
    median first stop,
    the loops warned first (and stopped in time, when the manifest says by when); then per trace the
    call each setting first denies. Within 100 columns for up to four settings."""
    traces = [t for t in result.corpus.traces if t.reading is not None]
    counts = {label: sum(1 for t in traces if t.label == label) for label in (*LABELS, None)}
    kinds = ", ".join(f"{counts[k]} {k}" for k in LABELS) + (f", {counts[None]} unlabelled" if counts[None] else "")
    timed = any(t.expected_stop is not None for t in traces if t.label == "loop")
    n = len(result.candidates)
    lines = [
        f"cbreplay --compare: {len(traces)} trace{'s' if len(traces) != 1 else ''} ({kinds}), "
        f"{n} setting{'s' if n != 1 else ''}",
        *([printable(f"  from: {', '.join(paths)}")] if paths else []),
        "",
    ]
    # (title, second title line, width): a cell is "12 of 14", a median "10.5"
    columns = [("loops", "stopped", 8), ("healthy", "stopped", 8), ("healthy", "warned", 8), ("median", "stop", 6)]
    columns.append(("warned", "first", 8))
    if timed:
        columns.append(("in", "time", 8))
    if counts[None]:
        columns.append(("unlabelled", "stopped", 10))
    texts = {c.name: printable(c.text or "(base config)") for c in result.candidates}
    rest = sum(2 + w for _, _, w in columns)
    sw = max(12, min(max(len(t) for t in texts.values()), WIDTH - 3 - rest))
    top = " " * (3 + sw) + "".join(f"  {a:>{w}}" for a, _, w in columns)
    header = f"   {'setting':<{sw}}" + "".join(f"  {b:>{w}}" for _, b, w in columns)
    lines += [top, header, "-" * len(header)]
    for c in result.candidates:
        loops, healthy = result.group(c.name, "loop"), result.group(c.name, "healthy")
        text = texts[c.name] if len(texts[c.name]) <= sw else texts[c.name][: sw - 1] + "…"
        cells = [
            _of(loops.stopped, loops.traces),
            _of(healthy.stopped, healthy.traces),
            _of(healthy.warned, healthy.traces),
            _median(loops.median_first_stop),
            _of(loops.warned_first, loops.stopped),
        ]
        if timed:
            cells.append(_of(loops.in_time, loops.with_expected_stop))
        if counts[None]:
            other = result.group(c.name, None)
            cells.append(_of(other.stopped, other.traces))
        widths = (w for _, _, w in columns)
        lines.append(f"{c.name:<2} {text:<{sw}}" + "".join(f"  {v:>{w}}" for v, w in zip(cells, widths, strict=True)))
    lines += [
        "",
        "stopped: traces with at least one deny (unlabelled: not labelled loop or healthy); healthy warned:",
        "  healthy runs allowed a call with a warning at least once",
        "median stop: the call of a loop's first deny, counted over its trace; the median over the loops",
        "  stopped. warned first: of the loops stopped, those warned before that deny",
    ]
    if timed:
        lines.append("in time: loops warned or denied by the manifest's expected_stop_by (the by column below)")
    lines += [
        "",
        "Per trace, the call each setting first denies (* warned before; warn N: warned from call N,",
        "  never denied; - neither):",
    ]
    cw = max(9, *(len(c.name) for c in result.candidates))
    fixed = f"  {'label':<10}  {'calls':>6}" + (f"  {'by':>4}" if timed else "")
    names = "".join(f"  {c.name:<{cw}}" for c in result.candidates)
    tw = max(16, min(max([5] + [len(t.name) for t in traces]), WIDTH - len(fixed) - len(names)))
    header = f"{'trace':<{tw}}{fixed}{names}".rstrip()
    lines += [header, "-" * len(header)]
    for j, trace in enumerate(traces):
        name = printable(trace.name)
        name = name if len(name) <= tw else "…" + name[-(tw - 1) :]
        calls = len(trace.reading.calls) if trace.reading is not None else 0
        row = f"{name:<{tw}}  {trace.label or 'unlabelled':<10}  {_n(calls):>6}"
        if timed:
            row += f"  {trace.expected_stop or '-':>4}"
        for c in result.candidates:
            o = result.outcomes[c.name][j]
            cell = "-"
            if o.first_stop is not None:
                kind = o.kind or "deny"
                cell = f"{_n(o.first_stop)} {_KIND_SHORT.get(kind, kind)}{'*' if o.warned_first else ''}"
            elif o.first_warning is not None:
                cell = f"warn {_n(o.first_warning)}"
            row += f"  {cell:<{cw}}"
        lines.append(row.rstrip())
    lines += ["", "settings:"]
    lines += [f"  {c.name}: {texts[c.name]}" for c in result.candidates]
    return "\n".join(lines) + "\n"


def comparison_dict(result: Comparison) -> dict[str, Any]:
    """The comparison as plain data (what `--compare … --json` prints)."""

    def group(g: Group) -> dict[str, Any]:
        return {
            "traces": g.traces,
            "stopped": g.stopped,
            "medianFirstStop": g.median_first_stop,
            "warnedFirst": g.warned_first,
            "inTime": g.in_time,
            "withExpectedStop": g.with_expected_stop,
            "warned": g.warned,
        }

    settings = []
    for c in result.candidates:
        settings.append(
            {
                "name": c.name,
                "setting": c.text,
                "config": c.config.to_mapping(only_changed=True),
                "loop": group(result.group(c.name, "loop")),
                "healthy": group(result.group(c.name, "healthy")),
                "unlabelled": group(result.group(c.name, None)),
                "traces": [
                    {
                        "trace": o.trace.name,
                        "label": o.trace.label,
                        "calls": o.calls,
                        "denied": o.denied,
                        "firstStop": o.first_stop,
                        "kind": o.kind,
                        "warned": o.warned,
                        "firstWarning": o.first_warning,
                        "warnedFirst": o.warned_first,
                        "inTime": o.in_time,
                    }
                    for o in result.outcomes[c.name]
                ],
            }
        )
    traces = []
    for t in result.corpus.traces:
        r = t.reading
        traces.append(
            {
                "trace": t.name,
                "path": t.path,
                "label": t.label,
                "reason": t.reason,
                "source": t.source,
                "expectedStopBy": t.expected_stop,
                "loopStartsAt": t.loop_start,
                "calls": len(r.calls) if r else None,
                "results": len(r.results) if r else None,
                "agents": len(r.agents) if r else None,
                "formats": sorted({f for _, f in r.files}) if r else [],
                "error": t.error or None,
                "skippedLines": r.skipped_count if r else 0,
            }
        )
    return {
        "settings": settings,
        "traces": traces,
        "errors": list(result.corpus.errors),
        "warnings": list(result.corpus.warnings)
        + [w for t in result.corpus.traces if t.reading is not None for w in t.reading.warnings],
    }


def render_corpus_problems(corpus: Corpus, per_file: int = 10) -> str:
    """The corpus's errors (what was left out), its warnings, and each trace's skipped lines."""
    lines = [f"cbreplay: error: {printable(e)}" for e in corpus.errors]
    lines += [f"cbreplay: warning: {printable(w)}" for w in corpus.warnings]
    for trace in corpus.traces:
        if trace.reading is not None:
            text = render_problems(trace.reading, (), per_file)
            if text:
                lines.append(text.rstrip("\n"))
    return "\n".join(lines) + ("\n" if lines else "")


def run(
    settings: Sequence[str],
    paths: Sequence[str],
    *,
    fmt: str | None = None,
    patches: Sequence[str] = (),
    profile: str | None = None,
    sets: Sequence[str] = (),
    as_json: bool = False,
) -> int:
    """`cbreplay --compare SETTING … PATH…`: each setting on top of the config `patches`, `profile` and
    `sets` give, over the traces in `paths` read as `fmt` (None: detected). Exit 0; 1 if a trace or
    manifest entry was left out; 2 on a bad setting or format, or when no trace could be read."""
    try:
        candidates = load_candidates(settings, patches, profile, sets)
    except ConfigError as exc:
        print(f"cbreplay: error: bad setting: {printable(str(exc))}", file=sys.stderr)
        return 2
    try:
        corpus = read_corpus(paths, fmt)
    except TranscriptError as exc:
        print(f"cbreplay: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    if not any(t.reading is not None for t in corpus.traces):
        sys.stderr.write(render_corpus_problems(corpus))
        print("cbreplay: error: no trace could be read in the paths given", file=sys.stderr)
        return 2
    result = compare(corpus, candidates)
    try:
        if as_json:
            sys.stdout.write(orjson.dumps(comparison_dict(result), option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            sys.stdout.write(render_comparison(result, [str(p) for p in paths]))
        sys.stdout.flush()
    except BrokenPipeError:  # `cbreplay --compare … | head`: the reader left; that is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    sys.stderr.write(render_corpus_problems(corpus))
    return 1 if corpus.errors else 0
