"""What an agent buys with its own pacing and command text (SECURITY.md, Residual risks): under `recommended` a loop
that spaces itself `pollGap` apart or prepends `sleep 5 &&` is judged as polls — still judged and counted, denied
after `pollLimit` polls with no new result and by the cap, later than `repeat` would have; `pollLimit: 0` (and the
`seed` preset) trades it back, `pollGap: 0` takes the pacing alone out."""

from __future__ import annotations

from breaker import Config
from breaker.engine import Guard, Verdict

REC = Config.with_preset("recommended")
SLEPT = "sleep 5 && cat build/out.log"
PLAIN = "cat build/out.log"


def run(guard: Guard, command: str, n: int, spacing: float | None = None) -> tuple[str, Verdict]:
    """The same command `n` times (each `spacing` s after the last, or with no time), no result reported: '.'
    allowed, 'w' warned, else the deny's kind's first letter in capitals; and the last verdict."""
    out = []
    for i in range(n):
        v = guard.check("a", "bash", {"command": command}, None if spacing is None else 1000.0 + spacing * i)
        out.append(("w" if v.warning else ".") if v.allowed else (v.kind or "?")[0].upper())
    return "".join(out), v


def test_a_loop_that_prepends_sleep_5_is_judged_as_polls_and_denied_after_poll_limit():
    assert REC.poll_limit == 30
    out, last = run(Guard(REC), SLEPT, 34)
    # the first call is no repeat; polls 1-30 allowed, the 30th warned; the 31st poll and every one after denied
    assert out == "." * 30 + "w" + "RRR"
    assert (last.kind, last.count, last.limit, last.rule) == ("repeat", 30, 30, "repeat")


def test_a_loop_that_spaces_itself_poll_gap_apart_is_judged_as_polls_and_denied_after_poll_limit():
    out, _last = run(Guard(REC), PLAIN, 34, spacing=float(REC.poll_gap))
    assert out == "." * 30 + "w" + "RRR"
    assert run(Guard(REC), PLAIN, 3, spacing=REC.poll_gap - 1.0)[0] == ".wR"  # closer than pollGap: repeats


def test_the_cap_still_counts_every_poll():
    out, last = run(Guard(REC.updated({"maxCallsPerAgent": 20})), SLEPT, 22)
    assert out[20:] == "CC" and last.kind == "cap"


def test_with_poll_limit_0_the_same_loops_are_plain_repeats_denied_at_the_third_call():
    off = REC.updated({"pollLimit": 0})
    assert run(Guard(off), SLEPT, 4)[0] == ".wRR"
    assert run(Guard(off), PLAIN, 4, spacing=60.0)[0] == ".wRR"
    # the seed preset knows no polls: a sleeping loop is the duplicate it always was
    assert run(Guard(Config()), SLEPT, 8)[0] == "......DD"


def test_with_poll_gap_0_pacing_alone_buys_nothing_and_a_sleep_still_does():
    no_gap = REC.updated({"pollGap": 0})
    assert run(Guard(no_gap), PLAIN, 4, spacing=60.0)[0] == ".wRR"
    assert run(Guard(no_gap), SLEPT, 34)[0] == "." * 30 + "w" + "RRR"
