// cbconsole's circuit breaker as a dsh plugin (plain ESM, no build step, like the original).
//
// Before every tool call of every agent, an async `tools/pre-execute` listener asks the guard over
// its Unix socket (agent id, parent, tool, args, call id) and remembers the verdict; the synchronous
// `ctx.tools.guard` then denies that same call with the guard's reason. A guard's denial is monotonic
// in dsh: nothing downstream can re-allow the call, and the model reads `Error: <reason>`.
//
// After an allowed call ran, a `tools/post-execute` listener reports a digest of its result (the text
// the model reads) to the guard, so a repeat whose output changed counts as progress; and when the
// guard allowed the call with a warning, it adds the warning as a user message right after the
// call's result (`additionalContexts`, the channel dsh's own repeat-tool-reminder uses).
//
// The operator's interrupt (pushed by the guard on this connection) cancels the agent:
// `agent.cancel({kind: 'hook', reason})` ends its turn, and every later call of it is denied
// (kind "interrupted"). When dsh disposes an agent, the guard is told to forget it, and when dsh shuts
// down, every agent it ran (a headless root is never disposed before the process exits).
//
// Guard unavailable, or a socket that is not ours (another user's, or in a directory others can
// write to: never connected to, see guard.mjs): fail open (configurable: failClosed), one log line
// per outage, never a throw into dsh. Args that cannot be serialized are sent as "unjudgeable"
// (allowed and counted).

import { randomUUID } from 'node:crypto'

import { GuardConnection, readSettings, resultDigest } from './guard.mjs'

export const name = 'circuit-breaker'
export const inject = ['tools', 'agents']

const VERSION = '0.1.0'

function agentIdOf(agent) {
  const id = agent?.id ?? agent?.session?.header?.id
  return typeof id === 'string' && id !== '' ? id : undefined
}

function parentOf(agent) {
  const parent = agent?.session?.header?.parentSession
  return typeof parent === 'string' && parent !== '' ? parent : null
}

// What the model reads of a result: its text blocks' text (a lone text block: exactly its text), or
// every block as JSON when some are not text (an image).
function resultText(result) {
  const content = result?.content
  if (!Array.isArray(content)) return content ?? null
  if (content.every((block) => block?.type === 'text' && typeof block.text === 'string')) {
    return content.map((block) => block.text).join('\n')
  }
  return content
}

// A user message as dsh's post-execute `additionalContexts` takes it: dsh sends it to the model right
// after the call's result. Frozen, as dsh's own messages are.
function warningMessage(text, tool) {
  return Object.freeze({
    id: randomUUID(),
    role: 'user',
    content: Object.freeze([Object.freeze({ type: 'text', text })]),
    source: Object.freeze({ kind: 'plugin', plugin: name, form: 'notice', summary: `circuit breaker warning: ${tool}` }),
  })
}

// cordis's FiberState: UNLOADING (5) and DISPOSED (4) are a context on its way out; ACTIVE is 2.
const FIBER_DISPOSED = 4
const FIBER_UNLOADING = 5

function shuttingDown(ctx) {
  try {
    const state = ctx.root?.fiber?.state
    return state === FIBER_UNLOADING || state === FIBER_DISPOSED
  } catch {
    return false
  }
}

function cancelReason(reason) {
  return `circuit breaker: interrupted by the operator${reason ? ` (${reason})` : ''}`
}

export function apply(ctx, config) {
  // dsh's logger keeps lines in memory (the web UI shows them; headless shows nothing), so each
  // line also goes to stderr. They are rare: an outage and its end, an interrupt, a bad setting.
  const logger = ctx.logger
  const log = (line) => {
    try {
      if (typeof logger?.warn === 'function') logger.warn(line)
    } catch {
      // a broken logger must not break a tool call
    }
    try {
      process.stderr.write(`${line}\n`)
    } catch {
      // nor a closed stderr
    }
  }
  const settings = readSettings(config, process.env, (problem) => log(`circuit-breaker: config: ${problem}`))
  if (!settings.enabled) {
    log('circuit-breaker: enabled is false in its row: not asking the guard')
    return
  }

  const agents = new Map() // agent id -> WeakRef(agent): whom to cancel when the operator interrupts
  const verdicts = new WeakMap() // exec -> deny reason, decided in pre-execute, applied by the guard
  const allowed = new WeakMap() // exec -> {agent, callId, warning} of an allowed call, until its result

  function cancel(agent, reason) {
    try {
      agent?.cancel?.({ kind: 'hook', reason: cancelReason(reason) })
    } catch (error) {
      log(`circuit-breaker: could not cancel agent ${agentIdOf(agent)}: ${error?.message ?? error}`)
    }
  }

  const guard = new GuardConnection({
    path: settings.socket,
    timeoutMs: settings.timeoutMs,
    failClosed: settings.failClosed,
    harness: 'dsh',
    version: VERSION,
    log,
    onInterrupt(id, reason) {
      let agent = agents.get(id)?.deref()
      if (agent === undefined) {
        try {
          agent = ctx.agents?.get?.(id)
        } catch {
          agent = undefined
        }
      }
      if (agent === undefined) {
        log(`circuit-breaker: interrupt for agent ${id}, which this dsh process does not run`)
        return
      }
      log(`circuit-breaker: cancelling agent ${id} on the operator's interrupt${reason ? ` (${reason})` : ''}`)
      cancel(agent, reason)
    },
  })

  ctx.on('tools/pre-execute', async (exec, next) => {
    try {
      const agent = exec?.agent
      const id = agentIdOf(agent)
      if (id !== undefined) {
        if (!agents.has(id)) agents.set(id, new WeakRef(agent))
        const decision = await guard.check({
          agent: id,
          parent: parentOf(agent),
          tool: String(exec.name),
          args: exec.arguments,
          callId: typeof exec.callId === 'string' ? exec.callId : null,
        })
        if (!decision.allowed) {
          verdicts.set(exec, decision.reason)
          // The push may have been missed (a reconnect): the verdict itself says to stop.
          if (decision.kind === 'interrupted') cancel(agent, '')
        } else if (!decision.fallback) {
          allowed.set(exec, { agent: id, callId: typeof exec.callId === 'string' ? exec.callId : null, warning: decision.warning })
        }
      }
    } catch (error) {
      log(`circuit-breaker: pre-execute failed (${error?.message ?? error}); the call is not checked`)
    }
    return next()
  })

  ctx.on('tools/post-execute', async (exec, result, next) => {
    const downstream = await next()
    try {
      const call = allowed.get(exec)
      if (call === undefined) return downstream // denied, unchecked, or asked while the guard was away
      allowed.delete(exec)
      // Not awaited: the tool's result need not wait for the guard (see GuardConnection.result).
      guard.result({
        agent: call.agent,
        digest: resultDigest(resultText(result)),
        callId: call.callId,
        tool: String(exec.name),
        args: exec.arguments,
      })
      if (!call.warning) return downstream
      const contexts = [...(downstream?.additionalContexts ?? []), warningMessage(call.warning, String(exec.name))]
      return { ...downstream, additionalContexts: contexts }
    } catch (error) {
      log(`circuit-breaker: post-execute failed (${error?.message ?? error}); the result is not reported`)
      return downstream
    }
  })

  ctx.tools.guard((exec) => {
    try {
      return verdicts.get(exec)
    } catch {
      return undefined
    }
  })

  ctx.on('agent/disposed', (payload) => {
    try {
      const id = agentIdOf(payload?.agent)
      if (id === undefined) return
      agents.delete(id)
      guard.agentEnd(id)
    } catch {
      // the guard forgets idle agents by itself (maxAgents); never fail a dispose
    }
  })

  const close = () => {
    // dsh is shutting down (the root context unloads: not a reload of this row, during which the root stays
    // active): every agent it runs ends with it. A headless dsh exits without disposing its root agent (no
    // `agent/disposed`), so the guard is told here, or it would keep the finished agent until maxAgents.
    if (shuttingDown(ctx)) guard.endAll([...agents.keys()])
    guard.close()
  }
  if (typeof ctx.effect === 'function') ctx.effect(() => close, 'circuit-breaker: close the guard connection')
  else ctx.on('dispose', close)
}
