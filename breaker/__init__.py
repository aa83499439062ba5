"""cbconsole's guard side: the circuit-breaker engine, its config and patch layer, and the incident log.

Nothing under `breaker` imports the console or Textual: hooks and harness plugins import it and
must start fast.
"""

from breaker.config import Config, ConfigError
from breaker.engine import AgentView, Guard, GuardView, KeyView, Verdict
from breaker.incidents import IncidentLog

__all__ = ["AgentView", "Config", "ConfigError", "Guard", "GuardView", "IncidentLog", "KeyView", "Verdict"]
__version__ = "0.1.0"
