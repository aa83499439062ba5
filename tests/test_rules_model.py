"""The rules beyond the seed's against a naive reference model: whole lists, recounted every call.

The engine keeps running tallies (runs in a row, cycle runs per period, occurrences from before a
result changed, a window that evicts); the model keeps every call ever tried and every result ever
reported and recomputes each rule from them. Hypothesis drives random sequences of calls and results
over two agents and compares every verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from breaker import Config, Guard


@dataclass
class Model:
    config: Config
    allowed: list[str] = field(default_factory=list)  # every allowed call, in order
    tried: list[str] = field(default_factory=list)  # every call judged by the duplicate/repeat/cycle rules
    reset_at: dict[str, int] = field(default_factory=dict)  # key -> index in `allowed` its count restarts at
    cycles_from: int = 0  # index in `tried` from which cycle runs count (a result that changed resets them)
    results: dict[str, str] = field(default_factory=dict)

    def window(self) -> list[tuple[int, str]]:
        start = max(0, len(self.allowed) - self.config.window)
        return [(i, self.allowed[i]) for i in range(start, len(self.allowed))]

    def check(self, key: str) -> str:
        c = self.config
        in_window = [i for i, k in self.window() if k == key]
        seen = len([i for i in in_window if i > self.reset_at.get(key, -1)]) if c.progress else len(in_window)
        # runs in a row: the trailing allowed calls equal to key, from its restart on
        in_row = 0
        for i in range(len(self.allowed) - 1, -1, -1):
            if self.allowed[i] != key or (c.progress and i <= self.reset_at.get(key, -1)):
                break
            in_row += 1
        # cycles: for each period, the trailing tried calls (this one included) that repeat the call p before
        t = [*self.tried, key]
        same = 0
        for k in reversed(self.tried[-c.cycle_period :]):
            if k != key:
                break
            same += 1
        best_len = best_p = 0
        for p in range(2, c.cycle_period + 1):
            run = 0
            j = len(t) - 1
            while j - p >= 0 and j >= self.cycles_from and t[j] == t[j - p]:
                run += 1
                j -= 1
            if run and same < p - 1 and (not best_p or (run + p) * best_p > best_len * p):
                best_len, best_p = run + p, p
        self.tried.append(key)
        if seen >= c.duplicate_limit:
            return "D"
        if c.repeat_limit and in_row >= c.repeat_limit:
            return "R"
        # the call completing cycleLimit rounds, once three calls in a row repeated
        end = max(c.cycle_limit * best_p, best_p + 3)
        if c.cycle_limit and best_p and best_len >= end:
            return "C"
        self.allowed.append(key)
        if c.repeat_warn and in_row >= c.repeat_limit - min(c.repeat_warn, c.repeat_limit) and c.repeat_limit:
            return "r"
        cycle_warn = c.cycle_warn if c.cycle_limit else 0
        if best_p and cycle_warn and best_len >= end - cycle_warn:
            return "c"
        if c.duplicate_warn and seen >= c.duplicate_limit - c.duplicate_warn:
            return "d"
        return "."

    def result(self, key: str, digest: str) -> None:
        if key not in [k for _, k in self.window()]:
            return
        if not self.config.progress:
            return
        previous = self.results.get(key)
        self.results[key] = digest
        if previous is not None and previous != digest:
            latest = max(i for i, k in self.window() if k == key)
            self.reset_at[key] = latest
            self.cycles_from = len(self.tried)

    def forget_gone(self) -> None:
        """A key that left the window takes its last result and restart with it."""
        present = {k for _, k in self.window()}
        for key in [k for k in self.results if k not in present]:
            del self.results[key]
            self.reset_at.pop(key, None)


def outcome(v) -> str:
    if not v.allowed:
        return (v.kind or "?")[0].upper()
    return v.rule[0] if v.warning else "."


configs = st.builds(
    Config,
    duplicate_limit=st.integers(1, 6),
    duplicate_warn=st.integers(0, 3),
    repeat_limit=st.integers(0, 4),
    repeat_warn=st.integers(0, 2),
    cycle_limit=st.integers(0, 3),
    cycle_warn=st.integers(0, 2),
    cycle_period=st.integers(2, 5),
    window=st.integers(1, 12),
    max_calls_per_agent=st.just(0),
    progress=st.booleans(),
)
steps = st.lists(
    st.tuples(
        st.sampled_from(["check", "check", "result"]),
        st.sampled_from("ab"),
        st.sampled_from("abc"),
        st.sampled_from("xy"),
    ),
    min_size=20,
    max_size=120,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, steps)
def test_the_engine_judges_as_the_naive_model_does(config, script):
    guard = Guard(config)
    models = {"a": Model(config), "b": Model(config)}
    last_allowed: dict[str, str] = {}
    for i, (op, agent, key, digest) in enumerate(script):
        model = models[agent]
        if op == "check":
            v = guard.check(agent, "bash", {"k": key}, call_id=i)
            expected = model.check(key)
            model.forget_gone()
            assert outcome(v) == expected, (i, script[: i + 1])
            if v.allowed:
                last_allowed[agent] = key
        elif agent in last_allowed:
            # the result of its latest allowed call of `key`, by tool and args
            guard.result(agent, digest, tool="bash", args={"k": key})
            model.result(key, digest)
