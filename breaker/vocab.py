"""The closed sets of words the guard says, on the wire and in its API, as `Literal` types: one place to read
them, and mypy holds the code to them. docs/glossary.md says what each word means. A deny's kind and a call's
outcome are the engine's (`Kind`, `Outcome`)."""

from __future__ import annotations

from typing import Literal

__all__ = ["CallDecision", "FindingStatus", "LayerOrigin", "Plane", "Status"]

Plane = Literal["harness", "operator"]
"""The socket a connection came in on; of a request, the least socket it may be sent on (`hello`'s `plane`)."""

Status = Literal["ok", "warned", "duplicate", "repeat", "cycle", "stall", "cap", "interrupted"]
"""An agent's status (an agent row's `status`): `ok`; `warned`, its last call was allowed with a warning; or a
deny kind, the kind its next call would meet or its last call met."""

CallDecision = Literal["allow", "warn", "deny", "pass"]
"""What became of one call (a followed call's `decision`, the metrics' checks): allowed; allowed with a warning;
denied; or allowed without being judged (exempt, outside `only`, paused or disabled)."""

FindingStatus = Literal["ok", "warn", "fail", "skip"]
"""A `cbconsole doctor` finding's status; `skip`: the harness is not installed here."""

LayerOrigin = Literal["bundle", "profile", "home", "patch"]
"""Where a patch layer comes from, in dsh's order: a bundle's, the profile's, `$DSH_HOME`'s, an explicit `--patch`."""
