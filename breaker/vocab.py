"""The closed sets of words the guard says, on the wire and in its API, as `Literal` types: one place to read
them, and mypy holds the code to them. docs/glossary.md says what each word means. A deny's kind and a call's
outcome are here too; the engine (breaker/rules.py) judges by them."""

from __future__ import annotations

from typing import Literal

__all__ = ["FindingStatus", "Kind", "LayerOrigin", "Outcome", "Plane", "Rule", "Status"]

Plane = Literal["harness", "operator"]
"""The socket a connection came in on; of a request, the least socket it may be sent on (`hello`'s `plane`)."""

Rule = Literal["duplicate", "repeat", "cycle", "stall", "reworded", "cap"]
"""A rule: what denies a call, or warns the model before it would."""

Kind = Literal[Rule, "interrupted"]
"""Why a call was denied: a rule, or the operator's interrupt."""

Outcome = Literal["allow", "pass", "warn", "deny"]
"""How a check went, and what became of one call (a followed call's `decision`, the metrics' checks): judged and
allowed; allowed without being judged (exempt, outside `only`, paused or disabled); allowed with a warning; denied."""

Status = Literal["ok", "warned", Kind]
"""An agent's status (an agent row's `status`): `ok`; `warned`, its last call was allowed with a warning; or a
deny kind, the kind its next call would meet or its last call met."""

FindingStatus = Literal["ok", "warn", "fail", "skip"]
"""A `cbconsole doctor` finding's status; `skip`: the harness is not installed here."""

LayerOrigin = Literal["bundle", "profile", "home", "patch"]
"""Where a patch layer comes from, in dsh's order: a bundle's, the profile's, `$DSH_HOME`'s, an explicit `--patch`."""
