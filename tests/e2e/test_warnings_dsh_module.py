"""The dsh plugin's `tools/post-execute` listener in Node 22, outside dsh, against a real guard process
under the `recommended` preset: it reports each allowed call's result digest (so changing output is
progress), adds the guard's warning as a user message in `additionalContexts` while keeping what the
listeners after it decided, leaves denied calls alone, and never holds up or fails a call when the
guard is unavailable. The real dsh runs are in test_warnings_e2e.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from breaker import Config, Guard

from .test_adapters_dsh_module import node, run_node  # noqa: F401  (node is a fixture)

pytestmark = pytest.mark.e2e  # Node 22, from npm into the cache

RECOMMENDED = "- id: circuit-breaker\n  config:\n    preset: recommended\n"

# One call through the plugin as dsh runs it: pre-execute, the guards, the tool ("ran" with `output`),
# post-execute with `downstream` as what the listeners after the plugin decide.
STEP = """
let k = 0
async function step(ctx, who, output, downstream = { kind: 'accept' }, command = 'echo cbprobe4') {
  const exec = { callId: `c${++k}`, name: 'bash', arguments: { command }, agent: who }
  await ctx.listeners.get('tools/pre-execute')(exec, async () => ({ kind: 'allow' }))
  for (const g of ctx.guards) { const r = g(exec); if (r !== undefined) return { denied: r } }
  const result = Object.freeze({ isError: false, content: Object.freeze([{ type: 'text', text: output }]) })
  return { decision: await ctx.listeners.get('tools/post-execute')(exec, result, async () => downstream) }
}
"""


def engine(outputs: list[str | None]) -> list[Any]:
    """The engine's verdicts under `recommended` for identical calls whose results are `outputs`
    (None: not reported), up to the first deny."""
    guard = Guard(Config.with_preset("recommended"))
    verdicts = []
    for n, output in enumerate(outputs):
        verdict = guard.check("a", "bash", {"command": "echo cbprobe4"}, call_id=n)
        verdicts.append(verdict)
        if not verdict.allowed:
            break
        if output is not None:
            guard.result("a", output, call_id=n)
    return verdicts


def warning_of(step: dict[str, Any]) -> str | None:
    contexts = step.get("decision", {}).get("additionalContexts") or []
    return contexts[-1]["content"][0]["text"] if contexts else None


def test_results_that_change_are_progress_and_the_same_result_is_warned_then_denied(node, tmp_path, guard_factory):  # noqa: F811
    g = guard_factory(patch_text=RECOMMENDED)
    body = (
        STEP
        + """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0] })
    const who = agent('session-progress')
    result.changing = []
    for (let n = 1; n <= 8; n++) result.changing.push(await step(ctx, who, `${n}\\n`))
    result.same = []
    const other = agent('session-same')
    for (let n = 0; n < 8; n++) {
      const s = await step(ctx, other, 'cbprobe4\\n')
      result.same.push(s)
      if (s.denied) break
    }
    ctx.dispose()
    """
    )
    r = run_node(node, tmp_path, body, str(g.socket))
    # Each result reached the guard before the next check (no await between them here): all 8 ran,
    # warned only where the engine warns (before a call's result is known, it cannot tell progress).
    changing = engine([f"{n}\n" for n in range(1, 9)])
    assert all(v.allowed for v in changing) and not all(v.allowed for v in engine([None] * 8))
    assert [s["decision"]["kind"] for s in r["changing"]] == ["accept"] * 8, r["changing"]
    assert [warning_of(s) for s in r["changing"]] == [v.warning or None for v in changing]
    verdicts = engine(["cbprobe4\n"] * 8)
    assert any(v.warning for v in verdicts) and not verdicts[-1].allowed  # else this proves nothing
    assert [warning_of(s) for s in r["same"][:-1]] == [v.warning or None for v in verdicts[:-1]]
    assert r["same"][-1] == {"denied": verdicts[-1].reason}
    warned = next(s for s in r["same"] if warning_of(s))["decision"]["additionalContexts"][-1]
    assert warned["role"] == "user" and warned["source"]["kind"] == "plugin"
    assert warned["source"]["plugin"] == "circuit-breaker" and isinstance(warned["id"], str)


def test_the_warning_joins_what_later_listeners_decided(node, tmp_path, guard_factory):  # noqa: F811
    g = guard_factory(patch_text=RECOMMENDED)
    body = (
        STEP
        + """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0] })
    const who = agent('session-join')
    const theirs = { id: 'x', role: 'user', content: [{ type: 'text', text: 'THEIRS' }], source: { kind: 'plugin' } }
    const block = { kind: 'block', feedback: [{ type: 'text', text: 'blocked by another plugin' }],
                    additionalContexts: [theirs] }
    result.steps = []
    for (let n = 0; n < 8; n++) {
      const s = await step(ctx, who, 'same', block)
      result.steps.push(s)
      if (s.denied) break
    }
    ctx.dispose()
    """
    )
    r = run_node(node, tmp_path, body, str(g.socket))
    decisions = [s["decision"] for s in r["steps"] if "decision" in s]
    assert all(d["kind"] == "block" and d["feedback"][0]["text"] == "blocked by another plugin" for d in decisions)
    texts = [[c["content"][0]["text"] for c in d["additionalContexts"]] for d in decisions]
    assert all(t[0] == "THEIRS" for t in texts)  # theirs first, ours after
    assert any(len(t) == 2 and t[1].startswith("Circuit breaker warning") for t in texts), texts


@pytest.mark.parametrize("fail_closed", [False, True], ids=["open", "closed"])
def test_with_the_guard_unavailable_post_execute_returns_what_it_was_given(node, tmp_path, fail_closed):  # noqa: F811
    body = (
        STEP
        + """
    const ctx = fakeCtx()
    apply(ctx, { guardSocket: argv[0], failClosed: argv[1] === 'true' })
    const who = agent('session-away')
    const exec = { callId: 'c1', name: 'bash', arguments: { command: 'ls' }, agent: who }
    await ctx.listeners.get('tools/pre-execute')(exec, async () => ({ kind: 'allow' }))
    const downstream = { kind: 'accept' }
    const started = Date.now()
    const post = ctx.listeners.get('tools/post-execute')
    const decision = await post(exec, { isError: false, content: [] }, async () => downstream)
    result.same = decision === downstream
    result.ms = Date.now() - started
    ctx.dispose()
    """
    )
    r = run_node(node, tmp_path, body, str(tmp_path / "none" / "guard.sock"), str(fail_closed).lower())
    assert r["same"] is True and r["ms"] < 1000, r
    assert len([line for line in r["logs"] if "guard unavailable" in line]) == 1  # the check's line, no more


def test_result_digests_follow_the_text_and_differ_from_pythons_by_design(node, tmp_path):  # noqa: F811
    body = """
    const d = guardModule.resultDigest
    result.a = [d('cbprobe4\\n'), d('cbprobe4\\n'), d('cbprobe5\\n'), d({ b: 1 }), d(null)]
    """
    r = run_node(node, tmp_path, body)
    a, again, other, obj, none = r["a"]
    assert a == again != other and len({a, obj, none}) == 3
    assert all(len(x) == 16 and int(x, 16) >= 0 for x in r["a"])
