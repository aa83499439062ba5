"""The guard's settings: the one table of the circuit-breaker row's `config` keys, and what it drives.

`SETTINGS` is the single source of every setting's key, type, range, default, help and the part that
reads it. Validation, `Config`'s defaults, the console's config form and the settings table in
docs/configuration.md all come from it (a test keeps the docs and the dsh plugin's defaults equal to
it). To add a setting: one `Setting` row, one typed `Config` field (the import fails until both
agree), then `python -m breaker.config --write-docs`.
"""

from __future__ import annotations

import difflib
import re
import reprlib
import sys
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, cast

__all__ = [
    "AGENT_LIMITS",
    "BY_KEY",
    "DEFAULT_DENY_MESSAGE",
    "KEYS",
    "PATCH_ONLY_KEYS",
    "SETTINGS",
    "Config",
    "ConfigError",
    "Kind",
    "Part",
    "Problem",
    "Setting",
    "check_fields",
    "describe_value",
    "docs_with_settings",
    "metrics_address",
    "settings_markdown",
]

DEFAULT_WARN_MESSAGE = (
    "Circuit breaker warning ({rule}): this {tool} call is number {count} of the {limit} {how} the guard "
    "allows; it denies any more. Repeating it will not get you anything new: use what you already have, "
    "change your approach, or report that you are stuck."
)

DEFAULT_DENY_MESSAGE = (
    "Circuit breaker ({kind}): {tool} denied at {count}/{limit}. This agent has either run this "
    "exact call too many times or used up its tool-call budget, and running it again will not give "
    "a different result. Stop repeating it: use what you already have, take a different approach, "
    "or report that you are stuck."
)

# Upper bounds keep a typo (an extra zero or three) from turning into a memory problem.
MAX_WINDOW = 100_000
MAX_LIMIT = 1_000_000_000
MAX_AGENTS = 1_000_000
MAX_GUARD_TIMEOUT_MS = 60_000
MAX_PERIOD = 8  # the longest cycle the cycle rule looks for: each period costs a comparison per call

# Per-tool overrides (`tools`): the keys one tool may set, and the setting whose range each follows.
TOOL_KEYS: dict[str, str] = {
    "duplicateLimit": "duplicateLimit",
    "duplicateWarn": "duplicateWarn",
    "repeatLimit": "repeatLimit",
    "repeatWarn": "repeatWarn",
    "stallLimit": "stallLimit",
    "stallWarn": "stallWarn",
    "pollGap": "pollGap",
    "pollLimit": "pollLimit",
    "rewordLimit": "rewordLimit",
    "rewordWarn": "rewordWarn",
    "unchangedLimit": "unchangedLimit",
    "unchangedWarn": "unchangedWarn",
    "maxCalls": "maxCallsPerAgent",  # a cap on this tool's calls, per agent
    "maxCallsWarn": "capWarn",
    "progress": "progress",
}

Kind = Literal["bool", "int", "names", "str", "argv", "choice", "tools", "address"]
"""A setting's type: true/false; an integer in a range; a list of tool or argument names; a string;
a command (argv: a fixed program, then its arguments); one word of a fixed set; per-tool overrides
(a mapping of tool names to some of the rules' settings); a TCP address to listen on (HOST:PORT or
PORT, "" for none)."""
Part = Literal["engine", "server", "dsh plugin"]
"""Who reads a setting: the engine's decisions, the guard server process, or the dsh plugin (in dsh's process)."""

ToolOverrides: typing.TypeAlias = tuple[tuple[str, tuple[tuple[str, int | bool], ...]], ...]
"""Per-tool overrides, normalised (hashable, ordered): ((tool, ((key, value), ...)), ...)."""
Value: typing.TypeAlias = bool | int | str | tuple[str, ...] | ToolOverrides

_KINDS: tuple[Kind, ...] = typing.get_args(Kind)
_PARTS: tuple[Part, ...] = typing.get_args(Part)


@dataclass(frozen=True, slots=True)
class Setting:
    """One key of the circuit-breaker row's `config`, with everything code, form and docs say about it."""

    key: str  # camelCase, as written in the patch layer and sent in `config_set`
    kind: Kind
    default: Value
    help: str  # one line of plain text: the config form's help and the docs table's description
    used_by: tuple[Part, ...]
    low: int = 0  # kind "int": the smallest value allowed
    high: int = 0  # kind "int": the largest
    # Its effect reaches outside the guard (runs a program, writes a file, opens a port, sends data away): set
    # only in the patch file the user edits, never over a socket. `patch_only` says why, in a few words.
    patch_only: str = ""
    choices: tuple[str, ...] = ()  # kind "choice": the words allowed
    default_text: str = ""  # the docs' words for a default too long for a table cell (shown in full below it)
    attr: str = field(init=False)  # the Config attribute: the key in snake_case

    def __post_init__(self) -> None:
        object.__setattr__(self, "attr", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", self.key).lower())
        wrong = []
        if not re.fullmatch(r"[a-z][A-Za-z0-9]*", self.key):
            wrong.append("the key is not camelCase")
        if self.kind not in _KINDS:
            wrong.append(f"the kind is not one of {', '.join(_KINDS)}")
        if self.kind == "choice" and self.default not in self.choices:
            wrong.append(f"the default {self.default!r} is not one of its choices")
        if self.kind == "int" and not self.low <= self.high:
            wrong.append(f"low ({self.low}) is above high ({self.high})")
        if not self.help or "\n" in self.help:
            wrong.append("the help is not one line")
        if not self.used_by or not set(self.used_by) <= set(_PARTS):
            wrong.append(f"used_by is not a non-empty tuple of {', '.join(_PARTS)}")
        if wrong:
            raise ValueError(f"setting {self.key!r}: " + "; ".join(wrong))

    @property
    def expected(self) -> str:
        """What a valid value is, in the words every error about this setting uses."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "int":
            return f"an integer from {self.low:,} to {self.high:,}"
        if self.kind == "names":
            return "a list of tool or argument names (non-empty strings)"
        if self.kind == "argv":
            return (
                "a command as a list of strings (a fixed program first, then its arguments; no shell), or [] for none"
            )
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "tools":
            return "a mapping of tool names to some of " + ", ".join(TOOL_KEYS)
        if self.kind == "address":
            return "HOST:PORT, or PORT alone for 127.0.0.1:PORT, or empty for off"
        return "a string"

    def check(self, value: Any, problems: list[Problem], where: str = "") -> Any:
        """The value, normalised (lists become tuples); or, if it is invalid, a Problem appended and the value as is."""
        found: str
        if self.kind == "choice":
            if isinstance(value, str) and value in self.choices:
                return value
            found = describe_value(value)
        elif self.kind == "tools":
            return _check_tools(self, value, problems, where)
        elif self.kind == "bool":
            if isinstance(value, bool):
                return value
            found = describe_value(value)
        elif self.kind == "int":
            if isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high:
                return value
            found = describe_value(value)
        elif self.kind == "str":
            if isinstance(value, str):
                return value
            found = describe_value(value)
        elif self.kind == "address":
            if isinstance(value, str) and (value == "" or metrics_address(value) is not None):
                return value
            found = describe_value(value)
        elif self.kind == "names":
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
                return tuple(value)
            if isinstance(value, (list, tuple)):
                found = f"a list holding {describe_value(next(v for v in value if not (isinstance(v, str) and v)))}"
            else:
                found = describe_value(value)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):  # argv
            interpreter = _interpreter(value)
            if not value or (value[0] and not _has_placeholder(value[0]) and interpreter is None):
                return tuple(value)
            # The program itself must be the operator's: an agent id comes from a harness, untrusted. Spliced
            # into a shell's (or any interpreter's) code, an id like `$(...)` would run as a program.
            if not value[0]:
                found = "a list whose first element (the program) is empty"
            elif _has_placeholder(value[0]):
                found = (
                    f"a list whose first element (the program) is {describe_value(value[0])}, which holds a placeholder"
                )
            else:
                found = (
                    f"{{agent}} or {{reason}} given to {interpreter!r}, which would run them as code "
                    "(use $CBCONSOLE_AGENT and $CBCONSOLE_REASON from its environment instead)"
                )
        elif isinstance(value, (list, tuple)):
            found = f"a list holding {describe_value(next(v for v in value if not isinstance(v, str)))}"
        else:
            found = describe_value(value)
        problems.append(Problem(self.key, self.expected, found, where))
        return value


# Programs that run an argument as code. An interrupt command that names one may give it `{agent}` and
# `{reason}` only after its code (the script, or the text after `-c`/`-e`): as the positional arguments a
# script reads (`sh -c 'kill "$1"' sh {agent}`), never inside the code itself. Wrappers are seen through
# (`env sh -c ...`, `sudo bash -c ...`). The second set builds a shell command line from all of its
# arguments, so no placeholder may reach them at all.
INTERPRETERS = frozenset(
    "sh bash dash zsh ksh mksh ash yash fish csh tcsh rc es busybox toybox python pypy perl ruby node nodejs deno "
    "bun php lua luajit tclsh wish awk gawk mawk nawk osascript".split()
)
SHELL_LINE_BUILDERS = frozenset("ssh su script xargs parallel expect make cmd pwsh powershell".split())


def _has_placeholder(arg: str) -> bool:
    return "{agent}" in arg or "{reason}" in arg


def _program_name(arg: str) -> str:
    name = arg.rsplit("/", 1)[-1]
    return re.sub(r"[0-9.]+$", "", name) or name  # python3.11 -> python, bash5 -> bash


def _interpreter(argv: Sequence[str]) -> str | None:
    """The program of `argv` that would run `{agent}` or `{reason}` as code, if any (see INTERPRETERS)."""
    if not any(_has_placeholder(a) for a in argv):
        return None
    for i, arg in enumerate(argv):
        name = _program_name(arg)
        if name in SHELL_LINE_BUILDERS:
            return arg.rsplit("/", 1)[-1]
        if name not in INTERPRETERS:
            continue
        # Its code is its first argument that is not an option (the text after -c or -e, or a script's path):
        # options before it may take it as their value, so the placeholders must all come after it.
        code = next((j for j in range(i + 1, len(argv)) if not argv[j].startswith("-") or argv[j] == "-"), len(argv))
        if "--" in argv[i + 1 : code]:
            code = argv.index("--", i + 1) + 1
        if any(_has_placeholder(a) for a in argv[i : code + 1]):
            return arg.rsplit("/", 1)[-1]
        return None
    return None


PRESETS: dict[str, dict[str, Value]] = {
    # The original plugin's rules, bit for bit: every key at its default.
    "seed": {},
    # Stops back-to-back repeats at the third, A-B-A-B cycles in their third round (longer ones as they complete
    # their second), a tool stuck on one result, the same call in other words at its fourth wording, and the
    # same call a third time after two of it got one result with nothing written between; warns the model once before
    # each deny; lets a repeat whose result changed run (a progressing poll), and a repeat that waits
    # (30 s apart, or sleeping) poll up to 30 times unchanged. Measured on the public corpus
    # (docs/corpus.md); docs/guard.md says why each value.
    "recommended": {
        "duplicateWarn": 1,
        "repeatLimit": 2,
        "repeatWarn": 1,
        "pollGap": 30,
        "pollLimit": 30,
        "stallLimit": 7,
        "stallWarn": 1,
        "rewordLimit": 3,
        "rewordWarn": 1,
        "unchangedLimit": 2,
        "cycleLimit": 2,
        "cycleWarn": 1,
        "capWarn": 30,
        "progress": True,
    },
}

SETTINGS: tuple[Setting, ...] = (
    Setting(
        key="preset",
        kind="choice",
        default="seed",
        choices=("seed", "recommended"),
        used_by=("engine",),
        help="the defaults the other keys start from: seed (the original rules) or recommended; keys you set win",
    ),
    Setting(
        key="enabled",
        kind="bool",
        default=True,
        used_by=("engine", "dsh plugin"),
        help="master switch: false allows every call unjudged",
    ),
    Setting(
        key="duplicateLimit",
        kind="int",
        default=6,
        low=1,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="deny after this many identical calls in the window",
    ),
    Setting(
        key="duplicateWarn",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="warn the model on the last this many identical calls duplicateLimit allows (0 = never)",
    ),
    Setting(
        key="repeatLimit",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="deny after this many identical calls in a row (0 = no such rule)",
    ),
    Setting(
        key="repeatWarn",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="warn the model on the last this many calls in a row repeatLimit allows (0 = never)",
    ),
    Setting(
        key="pollGap",
        kind="int",
        default=0,
        low=0,
        high=86_400,
        used_by=("engine",),
        help="a repeat this many seconds or more after the agent's last call is a poll, as one that sleeps (0 = never)",
    ),
    Setting(
        key="pollLimit",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="deny a poll after this many polls in a row with no new result (the repeat rule's limit for polls)",
    ),
    Setting(
        key="stallLimit",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="deny a tool's call after this many of its calls in a row got the same result, any args (0 = off)",
    ),
    Setting(
        key="stallWarn",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="warn the model on the last this many calls stallLimit allows (0 = never)",
    ),
    Setting(
        key="rewordLimit",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="deny the same call in other words after this many wordings of it in a row (0 = no such rule)",
    ),
    Setting(
        key="rewordWarn",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="warn the model on the last this many wordings rewordLimit allows (0 = never)",
    ),
    Setting(
        key="unchangedLimit",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="deny a call once this many of its identical calls in a row got the same result with nothing written "
        "since (0 = no such rule)",
    ),
    Setting(
        key="unchangedWarn",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="warn the model on the last this many identical calls unchangedLimit allows (0 = never)",
    ),
    Setting(
        key="cycleLimit",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="deny the call that completes this many rounds of a short cycle (A-B-C-A-B-C…), once three calls in a "
        "row repeated (0 = no such rule)",
    ),
    Setting(
        key="cycleWarn",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="warn the model on the last this many calls of a cycle cycleLimit allows (0 = never)",
    ),
    Setting(
        key="cyclePeriod",
        kind="int",
        default=4,
        low=2,
        high=MAX_PERIOD,
        used_by=("engine",),
        help="the longest cycle, in calls, the cycle rule looks for",
    ),
    Setting(
        key="window",
        kind="int",
        default=200,
        low=1,
        high=MAX_WINDOW,
        used_by=("engine",),
        help="how many recent calls each agent remembers",
    ),
    Setting(
        key="maxCallsPerAgent",
        kind="int",
        default=300,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="lifetime calls per agent; reached = stopped for good (0 = no cap)",
    ),
    Setting(
        key="capWarn",
        kind="int",
        default=0,
        low=0,
        high=MAX_LIMIT,
        used_by=("engine",),
        help="warn the model on the last this many calls maxCallsPerAgent allows (0 = never)",
    ),
    Setting(
        key="progress",
        kind="bool",
        default=False,
        used_by=("engine",),
        help=(
            "a repeat whose result differs from the last identical call's is progress: it restarts the count"
            " (not for a tool whose name says it writes)"
        ),
    ),
    Setting(
        key="tools",
        kind="tools",
        default=(),
        used_by=("engine",),
        help="per-tool overrides, e.g. {bash: {repeatLimit: 6}, web_search: {maxCalls: 50}}; names match as exempt",
    ),
    Setting(
        key="exempt",
        kind="names",
        default=("todo_write", "ask_user_question", "exit_plan_mode"),
        used_by=("engine",),
        help="tools the guard ignores",
    ),
    Setting(
        key="only",
        kind="names",
        default=(),
        used_by=("engine",),
        help="if set, the guard judges only these tools (overrides exempt)",
    ),
    Setting(
        key="ignoreArgs",
        kind="names",
        default=("description", "explanation", "reason", "thought", "purpose"),
        used_by=("engine",),
        help="top-level argument names left out when comparing calls",
    ),
    Setting(
        key="denyMessage",
        kind="str",
        default=DEFAULT_DENY_MESSAGE,
        used_by=("engine",),
        help="the deny text; {tool} {count} {limit} {kind} {agent} are filled in",
        default_text="a text telling the model to stop repeating (below)",
    ),
    Setting(
        key="warnMessage",
        kind="str",
        default=DEFAULT_WARN_MESSAGE,
        used_by=("engine",),
        help="the warning text; {tool} {count} {limit} {rule} {how} {agent} are filled in",
        default_text="a text telling the model the next identical call will be denied (below)",
    ),
    Setting(
        key="incidentLog",
        kind="str",
        default="",
        used_by=("server",),
        help="append-only JSONL of each agent's first deny of each kind (empty = off)",
        patch_only="writes a file wherever it names",
    ),
    Setting(
        key="maxAgents",
        kind="int",
        default=10_000,
        low=1,
        high=MAX_AGENTS,
        used_by=("engine",),
        help="how many agents are tracked at once (the least recently active is forgotten first)",
    ),
    Setting(
        key="failClosed",
        kind="bool",
        default=False,
        used_by=("dsh plugin",),
        help="deny tool calls while the guard is unavailable (cannot be asked)",
    ),
    Setting(
        key="guardTimeoutMs",
        kind="int",
        default=500,
        low=1,
        high=MAX_GUARD_TIMEOUT_MS,
        used_by=("dsh plugin",),
        help="how long a tool call waits for the guard's answer, in milliseconds",
    ),
    Setting(
        key="guardSocket",
        kind="str",
        default="",
        used_by=("dsh plugin",),
        help="the guard's socket (empty = the default path)",
    ),
    Setting(
        key="metrics",
        kind="address",
        default="",
        used_by=("server",),
        help="serve Prometheus metrics at http://HOST:PORT/metrics (cbconsole --headless --metrics wins over it)",
        patch_only="opens a TCP port other users and the network can reach",
    ),
    Setting(
        key="otelEvents",
        kind="bool",
        default=False,
        used_by=("server",),
        help="export each deny and warning as an OpenTelemetry event (needs cbconsole[otel]; OTEL_* variables)",
        patch_only="sends agent ids, tool names and deny texts to a collector",
    ),
    Setting(
        key="interruptCommand",
        kind="argv",
        default=(),
        used_by=("server",),
        help="argv the guard runs on an operator interrupt, {agent} and {reason} filled in",
        patch_only="runs a program",
    ),
)

BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
# The limits an operator may give one agent of its own (the `override` op, `Guard.override`): its cap, and its
# duplicate limit for every tool (a per-tool duplicateLimit included). The global config is not touched.
AGENT_LIMITS = ("maxCallsPerAgent", "duplicateLimit")
KEYS: dict[str, str] = {s.key: s.attr for s in SETTINGS}  # camelCase key -> Config attribute, in table order
PATCH_ONLY_KEYS: tuple[str, ...] = tuple(s.key for s in SETTINGS if s.patch_only)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a setting: which key, what was expected, what was found."""

    key: str
    expected: str
    found: str
    where: str = ""  # "file:line" when the setting came from a file

    def __str__(self) -> str:
        head = f"{self.where}: " if self.where else ""
        return f"{head}{self.key}: expected {self.expected}, found {self.found}"


_MAX_LISTED = 20  # problems spelled out in a ConfigError's message (`problems` keeps them all)


class ConfigError(ValueError):
    """A setting (or several) is invalid; `problems` lists each one, naming the key."""

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem("config", "a valid circuit-breaker config", problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        # A file can hold thousands of bad keys; the message lists the first few and counts the rest.
        shown = "; ".join(str(p) for p in self.problems[:_MAX_LISTED])
        more = len(self.problems) - _MAX_LISTED
        super().__init__(shown + (f"; and {more:,} more problems" if more > 0 else ""))

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.problems]


def describe_value(value: Any, limit: int = 60) -> str:
    """A short, unambiguous description of a found value for error messages.

    Built from a bounded walk of the value (a few levels, a few items each), never from a full
    `repr()`: a value read from YAML can share one list thousands of times over (aliases) or hold
    an integer too long to print, and an error message must stay cheap to build either way.
    """
    tag = getattr(value, "yaml_tag", None)
    if isinstance(tag, str):
        inner = _clip(_BoundedRepr(limit).repr(getattr(value, "value", "")), limit)
        return f"a {_clip(tag, 40)} expression ({inner}), which only dsh can evaluate"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        return f"an integer of about {_digits(value):,} digits"
    kind = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a mapping"}.get(
        type(value), f"a {_clip(type(value).__name__, 40)}"
    )
    return f"{_clip(_BoundedRepr(limit).repr(value), limit)} ({kind})"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _key_name(key: Any) -> str:
    """An unknown key as error text, as written (a YAML key can be a number, a date, or very long)."""
    return _clip(key, 60) if isinstance(key, str) else _clip(_BoundedRepr(60).repr(key), 60)


# Integers wider than this are described by their length: Python refuses to print one of more than
# 4,300 digits (sys.int_info.default_max_str_digits), and YAML's hex and base-60 forms can build one.
_MAX_INT_BITS = 128


def _digits(value: int) -> int:
    return int(abs(value).bit_length() * 0.30103) + 1


class _BoundedRepr(reprlib.Repr):
    """repr() that looks at most 3 levels deep and 6 items wide, with strings cut at the message's limit."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxset = self.maxfrozenset = self.maxdeque = self.maxarray = 6
        self.maxdict = 4
        self.maxstring = self.maxother = max(limit, 8)

    def repr1(self, x: Any, level: int) -> str:
        tag = getattr(x, "yaml_tag", None)
        if isinstance(tag, str):  # a tagged value inside a list: its tag, then its value, bounded
            return f"{_clip(tag, 20)} {self.repr1(getattr(x, 'value', None), level - 1)}"
        return super().repr1(x, level)

    def repr_str(self, x: str, level: int) -> str:
        # Cut before repr(): only the head is ever shown, so only the head is ever escaped.
        return _clip(repr(x[: self.maxstring]), self.maxstring)

    def repr_int(self, x: int, level: int) -> str:
        return repr(x) if x.bit_length() <= _MAX_INT_BITS else f"<an integer of about {_digits(x):,} digits>"

    def repr_bytes(self, x: bytes, level: int) -> str:
        return _clip(repr(x[: self.maxother]), self.maxother)

    def repr_instance(self, x: Any, level: int) -> str:
        # Only types a YAML loader builds get here (floats, dates, bytes); their repr() is short.
        return _clip(super().repr_instance(x, level), self.maxother)


_D: dict[str, Any] = {s.attr: s.default for s in SETTINGS}


@dataclass(frozen=True, slots=True)
class Config:
    """The guard's settings. `Config()` gives the defaults; every field is validated on creation.

    The fields are SETTINGS' rows, typed for mypy, their defaults taken from the table; the import
    checks that both list the same settings, in the same order, with the same types and defaults.
    """

    preset: str = _D["preset"]
    enabled: bool = _D["enabled"]
    duplicate_limit: int = _D["duplicate_limit"]
    duplicate_warn: int = _D["duplicate_warn"]
    repeat_limit: int = _D["repeat_limit"]
    repeat_warn: int = _D["repeat_warn"]
    poll_gap: int = _D["poll_gap"]
    poll_limit: int = _D["poll_limit"]
    stall_limit: int = _D["stall_limit"]
    stall_warn: int = _D["stall_warn"]
    reword_limit: int = _D["reword_limit"]
    reword_warn: int = _D["reword_warn"]
    unchanged_limit: int = _D["unchanged_limit"]
    unchanged_warn: int = _D["unchanged_warn"]
    cycle_limit: int = _D["cycle_limit"]
    cycle_warn: int = _D["cycle_warn"]
    cycle_period: int = _D["cycle_period"]
    window: int = _D["window"]
    max_calls_per_agent: int = _D["max_calls_per_agent"]
    cap_warn: int = _D["cap_warn"]
    progress: bool = _D["progress"]
    tools: ToolOverrides = _D["tools"]
    exempt: tuple[str, ...] = _D["exempt"]
    only: tuple[str, ...] = _D["only"]
    ignore_args: tuple[str, ...] = _D["ignore_args"]
    deny_message: str = _D["deny_message"]
    warn_message: str = _D["warn_message"]
    incident_log: str = _D["incident_log"]
    max_agents: int = _D["max_agents"]
    fail_closed: bool = _D["fail_closed"]
    guard_timeout_ms: int = _D["guard_timeout_ms"]
    guard_socket: str = _D["guard_socket"]
    metrics: str = _D["metrics"]
    otel_events: bool = _D["otel_events"]
    interrupt_command: tuple[str, ...] = _D["interrupt_command"]
    # Not settings: notes about a valid but suspicious config (e.g. a window too small to ever trip).
    warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        problems: list[Problem] = []
        for setting in SETTINGS:
            value = getattr(self, setting.attr)
            checked = setting.check(value, problems)
            if checked is not value:
                object.__setattr__(self, setting.attr, checked)
        if problems:
            raise ConfigError(problems)
        notes = []
        if self.window < self.duplicate_limit:
            notes.append(
                f"window ({self.window}) is smaller than duplicateLimit ({self.duplicate_limit}): "
                "the duplicate check can never trip"
            )
        if not self.enabled:
            notes.append("enabled is false: the guard allows every call")
        if notes:
            object.__setattr__(self, "warnings", tuple(notes))

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, Any] | None, *, where: str = "", lines: Mapping[str, str] | None = None
    ) -> Config:
        """Build from the patch layer's camelCase keys; unknown keys and bad values raise ConfigError.

        `where` names the source (e.g. a file) and `lines` gives a finer "file:line" per key.
        """
        lines = lines or {}
        if mapping is None:
            return cls()
        if not isinstance(mapping, Mapping):
            raise ConfigError(
                [Problem("config", "a mapping of circuit-breaker settings", describe_value(mapping), where)]
            )
        problems: list[Problem] = []
        kwargs: dict[str, Any] = {}
        preset = mapping.get("preset", "seed")
        for key, value in PRESETS.get(preset, {}).items() if isinstance(preset, str) else ():
            kwargs[BY_KEY[key].attr] = value  # the preset's values first; keys set in the mapping win
        for key, value in mapping.items():
            setting = BY_KEY.get(key) if isinstance(key, str) else None
            if setting is None:
                name = _key_name(key)
                hint = difflib.get_close_matches(name, list(KEYS), n=1)
                expected = "one of " + ", ".join(KEYS) + (f" (did you mean {hint[0]}?)" if hint else "")
                problems.append(Problem(name, expected, "an unknown key", lines.get(name, where)))
                continue
            kwargs[setting.attr] = setting.check(value, problems, lines.get(key, where))
        if problems:
            raise ConfigError(problems)
        return cls(**kwargs)

    @classmethod
    def with_preset(cls, preset: str, **attrs: Any) -> Config:
        """The preset's values (see PRESETS) with `attrs` (snake_case) on top."""
        base = {BY_KEY[k].attr: v for k, v in PRESETS[preset].items()}
        return cls(preset=preset, **{**base, **attrs})

    def to_mapping(self, *, only_changed: bool = False) -> dict[str, Any]:
        """The camelCase mapping in table order, as written to the patch layer (lists, not tuples;
        per-tool overrides as a mapping). `only_changed`: only what differs from the preset's values
        (the preset itself when it is not the default)."""
        out: dict[str, Any] = {}
        preset = PRESETS.get(self.preset, {})
        for setting in SETTINGS:
            value = getattr(self, setting.attr)
            if only_changed and value == preset.get(setting.key, setting.default):
                continue
            out[setting.key] = _plain(setting, value)
        return out

    def updated(self, changes: Mapping[str, Any]) -> Config:
        """This config with `changes` (camelCase keys, as an operator sends them) applied; ConfigError if
        a value is bad. A change of `preset` moves every key still at the old preset's value to the new
        preset's; a key set apart from its preset keeps its value."""
        base = self.to_mapping(only_changed="preset" in changes)
        return type(self).from_mapping({**base, **changes})

    def replace(self, **changes: Any) -> Config:
        """A copy with some attributes changed (validated like any Config)."""
        current = {s.attr: getattr(self, s.attr) for s in SETTINGS}
        current.update(changes)
        return type(self)(**current)


_TYPES: dict[str, Any] = {
    "bool": bool,
    "int": int,
    "str": str,
    "names": tuple[str, ...],
    "argv": tuple[str, ...],
    "choice": str,
    "tools": ToolOverrides,
    "address": str,
}


def metrics_address(text: str) -> tuple[str, int] | None:
    """`HOST:PORT`, `[IPv6]:PORT`, or `PORT` alone (loopback, 127.0.0.1) as (host, port); None if it is not one.
    Port 0 asks the system for a free port."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or not host:
        return None  # an IPv6 address needs brackets; ":PORT" names no host
    if not port.isdigit() or not 0 <= int(port) <= 65535 or not host or any(c.isspace() for c in host):
        return None
    return host, int(port)


def _plain(setting: Setting, value: Any) -> Any:
    """A value as the patch layer and the wire carry it: lists, and per-tool overrides as mappings."""
    if setting.kind == "tools":
        return {tool: dict(overrides) for tool, overrides in value}
    return list(value) if isinstance(value, tuple) else value


def _check_tools(setting: Setting, value: Any, problems: list[Problem], where: str) -> Any:
    """Per-tool overrides, normalised to ((tool, ((key, value), ...)), ...) in the order written."""
    if value == () or value is None:
        return ()
    if isinstance(value, tuple):  # already normalised (a Config made from another)
        value = {tool: dict(overrides) for tool, overrides in value}
    if not isinstance(value, Mapping):
        problems.append(Problem(setting.key, setting.expected, describe_value(value), where))
        return value
    out = []
    for tool, overrides in value.items():
        if not isinstance(tool, str) or not tool:
            problems.append(Problem(setting.key, "tool names (non-empty strings)", describe_value(tool), where))
            continue
        if not isinstance(overrides, Mapping):
            problems.append(Problem(f"{setting.key}.{tool}", "a mapping of settings", describe_value(overrides), where))
            continue
        checked = []
        for key, v in overrides.items():
            name = f"{setting.key}.{tool}.{_key_name(key)}"
            base = BY_KEY.get(TOOL_KEYS.get(key, "")) if isinstance(key, str) else None
            if base is None:
                problems.append(Problem(name, "one of " + ", ".join(TOOL_KEYS), "an unknown key", where))
                continue
            found: list[Problem] = []
            checked.append((key, base.check(v, found, where)))
            problems.extend(Problem(name, p.expected, p.found, p.where) for p in found)
        out.append((tool, tuple(checked)))
    return tuple(out)


def check_fields(cls: type, settings: Sequence[Setting]) -> None:
    """Raise TypeError unless `cls`'s fields (but `warnings`) are `settings`' attributes, in order, with
    each kind's type and the table's default: a setting added to one and not the other is named."""
    hints = typing.get_type_hints(cls)
    declared = {f.name: (hints[f.name], f.default) for f in fields(cls) if f.name != "warnings"}
    wanted = {s.attr: (_TYPES[s.kind], s.default) for s in settings}
    wrong = [f"setting {s.key} has no Config field {s.attr}" for s in settings if s.attr not in declared]
    wrong += [f"Config field {name} is not in SETTINGS" for name in declared if name not in wanted]
    for name in declared.keys() & wanted.keys():
        if declared[name] != wanted[name]:
            wrong.append(f"Config field {name} is {declared[name]} (type, default), SETTINGS says {wanted[name]}")
    if not wrong and list(declared) != list(wanted):
        wrong.append(f"Config's fields are in another order than SETTINGS': {list(declared)}")
    if wrong:
        raise TypeError("Config does not match SETTINGS: " + "; ".join(wrong))


check_fields(Config, SETTINGS)


# -- the docs' settings table ---------------------------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
TABLE_START = "<!-- settings table: generated by breaker.config.settings_markdown(); a test keeps it equal -->"
TABLE_END = "<!-- end -->"
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*\Z")


def _yaml(value: Value) -> str:
    """A default as it would be written in the patch file (YAML flow style)."""
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):  # per-tool overrides
        return "{" + ", ".join(f"{t}: {{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in o) + "}" for t, o in value) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_yaml(cast(str, v)) for v in value) + "]"
    if _PLAIN.match(value) and value.lower() not in {"true", "false", "null", "yes", "no", "on", "off"}:
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def settings_markdown(settings: Sequence[Setting] = SETTINGS) -> str:
    """The settings table of docs/configuration.md (and the full text of defaults too long for a cell)."""
    lines = ["| key | default | expected | read by | what it does |", "|---|---|---|---|---|"]
    for s in settings:
        default = s.default_text or f"`{_yaml(s.default)}`"
        what = s.help
        if s.patch_only:
            what += f". Set only in the patch file, never over a socket: it {s.patch_only}"
        lines.append(f"| `{s.key}` | {_cell(default)} | {_cell(s.expected)} | {', '.join(s.used_by)} | {_cell(what)} |")
    for s in settings:
        if s.default_text:
            lines += ["", f"The default `{s.key}`:", "", "```text", str(s.default), "```"]
    return "\n".join(lines) + "\n"


def docs_with_settings(text: str, settings: Sequence[Setting] = SETTINGS) -> str:
    """`text` (docs/configuration.md) with the block between the table's markers set to `settings_markdown()`."""
    start = text.find(TABLE_START)
    end = text.find(TABLE_END, start + len(TABLE_START)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise ValueError(f"the settings table's markers are missing: {TABLE_START} … {TABLE_END}")
    head = text[: start + len(TABLE_START)]
    return head + "\n" + settings_markdown(settings) + text[end:]


def main(argv: Sequence[str]) -> int:
    """`python -m breaker.config` prints the settings table; `--write-docs` puts it into docs/configuration.md."""
    if list(argv) == ["--write-docs"]:
        text = DOCS.read_text(encoding="utf-8")
        new = docs_with_settings(text)
        if new != text:
            DOCS.write_text(new, encoding="utf-8")
        print(f"{DOCS}: settings table {'updated' if new != text else 'already up to date'}")
        return 0
    if argv:
        print("usage: python -m breaker.config [--write-docs]", file=sys.stderr)
        return 2
    sys.stdout.write(settings_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
