"""The guard's settings: the circuit-breaker row's `config` keys, their defaults and validation."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["DEFAULT_DENY_MESSAGE", "KEYS", "Config", "ConfigError", "Problem", "describe_value"]

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


# camelCase key (as in the seed and the patch layer) -> Config attribute
KEYS: dict[str, str] = {
    "enabled": "enabled",
    "duplicateLimit": "duplicate_limit",
    "window": "window",
    "maxCallsPerAgent": "max_calls_per_agent",
    "exempt": "exempt",
    "only": "only",
    "ignoreArgs": "ignore_args",
    "denyMessage": "deny_message",
    "incidentLog": "incident_log",
    "maxAgents": "max_agents",
    # The harness side and the server's interrupt hook; the engine ignores these.
    "failClosed": "fail_closed",
    "guardTimeoutMs": "guard_timeout_ms",
    "guardSocket": "guard_socket",
    "interruptCommand": "interrupt_command",
}
_ATTR_TO_KEY = {v: k for k, v in KEYS.items()}


@dataclass(frozen=True, slots=True)
class Config:
    """The guard's settings. `Config()` gives the defaults; every field is validated on creation."""

    enabled: bool = True
    duplicate_limit: int = 6
    window: int = 200
    max_calls_per_agent: int = 300
    exempt: tuple[str, ...] = ("todo_write", "ask_user_question", "exit_plan_mode")
    only: tuple[str, ...] = ()
    ignore_args: tuple[str, ...] = ("description", "explanation", "reason", "thought", "purpose")
    deny_message: str = DEFAULT_DENY_MESSAGE
    incident_log: str = ""
    max_agents: int = 10_000
    fail_closed: bool = False  # the dsh plugin denies (instead of allowing) when the guard is unreachable
    guard_timeout_ms: int = 500  # how long the dsh plugin waits for the guard's answer
    guard_socket: str = ""  # "" = the per-user default path (breaker.paths.default_socket_path)
    interrupt_command: tuple[str, ...] = ()  # argv the server runs on an operator interrupt ({agent}, {reason})
    # Not settings: notes about a valid but suspicious config (e.g. a window too small to ever trip).
    warnings: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        problems: list[Problem] = []
        for attr, value in ((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "warnings"):
            key = _ATTR_TO_KEY[attr]
            checked = _check(key, value, problems)
            if checked is not value:
                object.__setattr__(self, attr, checked)
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
        for key, value in mapping.items():
            attr = KEYS.get(key) if isinstance(key, str) else None
            if attr is None:
                name = _key_name(key)
                hint = difflib.get_close_matches(name, list(KEYS), n=1)
                expected = "one of " + ", ".join(KEYS) + (f" (did you mean {hint[0]}?)" if hint else "")
                problems.append(Problem(name, expected, "an unknown key", lines.get(name, where)))
                continue
            kwargs[attr] = _check(key, value, problems, lines.get(key, where))
        if problems:
            raise ConfigError(problems)
        return cls(**kwargs)

    def to_mapping(self, *, only_changed: bool = False) -> dict[str, Any]:
        """The camelCase mapping, as written to the patch layer (lists, not tuples)."""
        default = _DEFAULT if only_changed else None
        out: dict[str, Any] = {}
        for key, attr in KEYS.items():
            value = getattr(self, attr)
            if default is not None and value == getattr(default, attr):
                continue
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def replace(self, **changes: Any) -> Config:
        """A copy with some attributes changed (validated like any Config)."""
        current = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "warnings"}
        current.update(changes)
        return type(self)(**current)


def _check(key: str, value: Any, problems: list[Problem], where: str = "") -> Any:
    """Validate one setting; returns the normalised value (lists become tuples)."""
    kind = _SCHEMA[key]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        problems.append(Problem(key, "true or false", describe_value(value), where))
    elif kind == "str":
        if isinstance(value, str):
            return value
        problems.append(Problem(key, "a string", describe_value(value), where))
    elif kind == "argv":
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            if not value or (value[0] and "{agent}" not in value[0] and "{reason}" not in value[0]):
                return tuple(value)
            # The program itself must be the operator's: an agent id comes from a harness, untrusted.
            found = "a list whose first element (the program) is " + (
                "empty" if not value[0] else f"{describe_value(value[0])}, which holds a placeholder"
            )
        elif isinstance(value, (list, tuple)):
            bad = next(v for v in value if not isinstance(v, str))
            found = f"a list holding {describe_value(bad)}"
        else:
            found = describe_value(value)
        problems.append(
            Problem(
                key,
                "a command as a list of strings (a fixed program first, then its arguments; no shell), or [] for none",
                found,
                where,
            )
        )
    elif kind == "names":
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
            return tuple(value)
        if isinstance(value, (list, tuple)):
            bad = next(v for v in value if not (isinstance(v, str) and v))
            found = f"a list holding {describe_value(bad)}"
        else:
            found = describe_value(value)
        problems.append(Problem(key, "a list of tool or argument names (non-empty strings)", found, where))
    else:
        low, high = kind
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return value
        problems.append(Problem(key, f"an integer from {low:,} to {high:,}", describe_value(value), where))
    return value


_SCHEMA: dict[str, Any] = {
    "enabled": "bool",
    "duplicateLimit": (1, MAX_LIMIT),
    "window": (1, MAX_WINDOW),
    "maxCallsPerAgent": (0, MAX_LIMIT),
    "exempt": "names",
    "only": "names",
    "ignoreArgs": "names",
    "denyMessage": "str",
    "incidentLog": "str",
    "maxAgents": (1, MAX_AGENTS),
    "failClosed": "bool",
    "guardTimeoutMs": (1, MAX_GUARD_TIMEOUT_MS),
    "guardSocket": "str",
    "interruptCommand": "argv",
}

_DEFAULT = Config()
