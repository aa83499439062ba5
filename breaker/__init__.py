"""cbconsole's guard side: the circuit-breaker engine, its config and patch layer, and the incident log.

Nothing under `breaker` imports the console or Textual: hooks and harness plugins import it and
must start fast. For the same reason the names below are imported on first use (PEP 562): `cbhook`
starts once per tool call and imports `breaker.hook`, which must not pay for the engine. Nor for
`importlib` or `__future__` (0.5 ms together at a `python -I -S` start): annotations here are strings.
"""

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs a hook ~2 ms per tool call
if TYPE_CHECKING:
    from typing import Any

    from breaker.config import Config, ConfigError
    from breaker.engine import Guard, GuardView, Verdict
    from breaker.incidents import IncidentLog
    from breaker.records import AgentRow, KeyRow

__all__ = ["AgentRow", "Config", "ConfigError", "Guard", "GuardView", "IncidentLog", "KeyRow", "Verdict"]
__version__ = "0.1.0"

_WHERE = {
    "Config": "breaker.config",
    "ConfigError": "breaker.config",
    "AgentRow": "breaker.records",
    "Guard": "breaker.engine",
    "GuardView": "breaker.engine",
    "KeyRow": "breaker.records",
    "Verdict": "breaker.engine",
    "IncidentLog": "breaker.incidents",
}


def __getattr__(name: str) -> "Any":
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'breaker' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> "list[str]":
    return sorted([*globals(), *_WHERE])
