"""The cycle rule's shortcut (`_Agent.clean`: a key new to the window is none of the agent's last calls) never changes
a verdict. Seeded random scripts of searches in several wordings, commands, waits, results, live config changes and
restores are judged alike by a guard that takes the shortcut and by one whose agents are kept from it before every
step. (Scripts like these found each of the cases that spoil the shortcut; a seeded generator rather than Hypothesis,
whose small examples rarely reach them. Four of the six are found here in seconds; the two rarest, a restore and a
window that stops being shorter than cyclePeriod, have scripts of their own in tests/test_rules.py.)"""

from __future__ import annotations

import random
from typing import Any

import pytest

from breaker import Config, ConfigError, Guard

WORDS = ["alpha beta", "beta alpha", "Alpha Beta", "alpha-beta", "gamma", "delta"]
COMMANDS = ["gh run view 1", "ls", "cat a.py", "make"]


def random_config(rnd: random.Random, mixed: bool) -> Config | None:
    """Under `recommended`, the cycle and reworded rules on with random limits; when `mixed`, every other rule's
    limits random too."""
    limits: dict[str, Any] = {
        "cycle_limit": rnd.randint(1, 3),
        "cycle_period": rnd.randint(2, 4),
        "reword_limit": rnd.randint(2, 4),
        "window": rnd.randint(1, 8),
        "poll_limit": rnd.choice([0, 2, 3]),
        "duplicate_limit": 100,
        "max_calls_per_agent": 0,
    }
    if mixed:
        limits.update(
            cycle_limit=rnd.randint(0, 3),
            reword_limit=rnd.randint(0, 4),
            duplicate_limit=rnd.choice([3, 8, 100]),
            max_calls_per_agent=rnd.choice([0, 0, 15]),
            progress=rnd.random() < 0.5,
            repeat_limit=rnd.randint(0, 4),
            stall_limit=rnd.randint(0, 4),
            unchanged_limit=rnd.choice([0, 2, 3]),
        )
    try:
        return Config.with_preset("recommended", **limits)
    except ConfigError:  # a warning above its limit, and the like: not a config
        return None


def kept_from_the_shortcut(guard: Guard) -> None:
    """White-box: every agent's flag the shortcut reads off, and both things that would set it again (a window
    shorter than cyclePeriod, new keys to wait for) made to say no, so that one fault in them cannot hide another."""
    guard._narrow = True
    for agent in guard.agents():
        state = guard._agents[agent]
        state.clean, state.taint = False, 10**9


def judged(v: Any) -> tuple[Any, ...]:
    return (v.allowed, v.kind, v.count, v.limit, v.warning, v.rule)


def one_script(rnd: random.Random, mixed: bool) -> None:
    """A script of 5-40 steps: when `mixed`, two agents, results, config changes and restores among the calls."""
    config = random_config(rnd, mixed)
    if config is None:
        return
    fast, slow = Guard(config), Guard(config)
    now = 0.0
    for i in range(rnd.randint(5, 40)):
        kept_from_the_shortcut(slow)
        roll = rnd.random() if mixed else 1.0
        agent = "a" if roll > 0.2 or rnd.random() < 0.5 else "b"
        if roll < 0.05:
            changed = random_config(rnd, mixed)
            if changed is not None:
                fast.config = slow.config = changed
            continue
        if roll < 0.08:
            for guard in (fast, slow):
                state = guard.export_agent(agent)
                if state is not None:
                    guard.restore_agent(state)
            continue
        now += rnd.choice([0.5, 40.0])
        tool, args = (
            ("web_search", {"query": rnd.choice(WORDS)})
            if rnd.random() < 0.8
            else ("bash", {"command": rnd.choice(COMMANDS)})
        )
        v = fast.check(agent, tool, args, now, call_id=i)
        assert judged(v) == judged(slow.check(agent, tool, args, now, call_id=i)), (i, agent, tool, args)
        if mixed and v.allowed and rnd.random() < 0.6:
            answer = rnd.choice(["r1", "r2", "r1"])
            assert fast.result(agent, answer, call_id=i) == slow.result(agent, answer, call_id=i)


@pytest.mark.parametrize("mixed", [False, True], ids=["calls", "calls-results-configs-restores"])
@pytest.mark.parametrize("seed", range(3))
def test_the_cycle_rules_shortcut_never_changes_a_verdict(seed: int, mixed: bool) -> None:
    rnd = random.Random(seed)
    for _ in range(3000 if mixed else 1000):
        one_script(rnd, mixed)
