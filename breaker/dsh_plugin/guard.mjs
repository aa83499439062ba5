// The guard's socket from Node: where it is (as breaker/paths.py computes it) and one persistent
// connection speaking the newline-delimited JSON protocol (PROTOCOL.md), with a stated failure mode.
//
// A socket is checked before every (re)connect, as breaker.paths.check_socket does: one in a
// directory another user owns or can write to, or owned by another user, is never connected to (in
// /tmp another user can create `cbconsole-<uid>` first and answer for the guard); the failure mode
// applies, as when the guard is away.
//
// Fail open by default: a check the guard cannot answer within the timeout is allowed and counted,
// with one log line when the guard goes away and one when it is back. `failClosed` denies instead.
// Every check asks: a timeout gives up on that request alone, never on the next ones (one slow
// answer must not become a second of unjudged calls). A check the guard answers with an error (args
// it cannot read) is asked again as unjudgeable, so the call is counted, never let through uncounted.
// Nothing here throws at its caller, and nothing keeps Node alive when no request is waiting.

import { createHash } from 'node:crypto'
import { accessSync, constants, lstatSync, readFileSync, statSync } from 'node:fs'
import { createConnection } from 'node:net'
import { homedir } from 'node:os'
import { dirname, join, resolve } from 'node:path'

export const PROTOCOL_VERSION = 1
export const MAX_FRAME = 8 * 1024 * 1024 // the guard's frame limit (breaker.protocol.MAX_FRAME)
export const DEFAULT_TIMEOUT_MS = 500
const MAX_REPLY_BUFFER = 64 * 1024 * 1024

function expandUser(path) {
  if (path === '~') return homedir()
  if (path.startsWith('~/')) return join(homedir(), path.slice(2))
  return path
}

function isDir(path) {
  try {
    return statSync(path).isDirectory()
  } catch {
    return false
  }
}

// Python's tempfile.gettempdir(): $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp, the cwd — the
// first directory we may write into.
function tempDir(env) {
  for (const dir of [env.TMPDIR, env.TEMP, env.TMP, '/tmp', '/var/tmp', '/usr/tmp', process.cwd()]) {
    if (!dir) continue
    const abs = resolve(dir)
    try {
      accessSync(abs, constants.W_OK | constants.X_OK)
      if (isDir(abs)) return abs
    } catch {
      // not writable: the next candidate
    }
  }
  return resolve(process.cwd())
}

/** The longest socket path `platform` can use, in bytes: `sun_path` is 108 bytes on Linux, 104 on
 * macOS and the BSDs, one of them for the NUL (breaker.paths.sun_path_max). */
export function sunPathMax(platform = process.platform) {
  return platform.startsWith('linux') || platform.startsWith('android') ? 107 : 103
}

/** `$CBCONSOLE_SOCKET`, else `$XDG_RUNTIME_DIR/cbconsole/guard.sock`, else `<tmp>/cbconsole-<uid>/guard.sock`,
 * with `/tmp` for `<tmp>` when the operator's socket beside it would be too long a path for `platform`. */
export function defaultSocketPath(env = process.env, platform = process.platform) {
  if (env.CBCONSOLE_SOCKET) return expandUser(env.CBCONSOLE_SOCKET)
  const runtime = env.XDG_RUNTIME_DIR
  if (runtime && isDir(runtime)) return join(runtime, 'cbconsole', 'guard.sock')
  const directory = `cbconsole-${process.getuid?.() ?? 0}`
  let tmp = tempDir(env)
  if (Buffer.byteLength(join(tmp, `${directory}-operator`, 'operator.sock')) > sunPathMax(platform)) tmp = '/tmp'
  return join(tmp, directory, 'guard.sock')
}

// `uid 1001 (mallory)` from /etc/passwd, or `uid 1001` (Node has no getpwuid). Only on a refusal.
function owner(uid) {
  try {
    for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const fields = line.split(':')
      if (fields.length > 2 && fields[2] === String(uid)) return `uid ${uid} (${fields[0]})`
    }
  } catch {
    // no passwd file: the number alone
  }
  return `uid ${uid}`
}

function kind(st) {
  if (st.isSymbolicLink()) return 'a symlink'
  if (st.isFile()) return 'a regular file'
  if (st.isDirectory()) return 'a directory'
  if (st.isSocket()) return 'a socket'
  return 'a special file'
}

/** Why the socket at `path` must not be connected to, or null (breaker.paths.check_socket): its
 * directory (not followed if a symlink) must be ours and not writable by group or others, and the
 * socket a socket of ours. A missing directory or socket is null: connecting then says the guard is away. */
export function checkSocket(path, uid = process.getuid?.()) {
  if (uid === undefined) return null // no uids here (Windows)
  const target = resolve(path)
  const directory = dirname(target)
  const why = `not trusting the guard's socket ${target}:`
  for (const [name, subject, wanted] of [
    [directory, `its directory ${directory}`, 'a directory'],
    [target, 'it', 'a socket'],
  ]) {
    let st
    try {
      st = lstatSync(name)
    } catch (error) {
      if (error?.code === 'ENOENT' || error?.code === 'ENOTDIR') return null
      return `${why} cannot check ${subject}: ${error?.code ?? error?.message}`
    }
    if (kind(st) !== wanted) return `${why} ${subject} is ${kind(st)} owned by ${owner(st.uid)}, not ${wanted}`
    if (st.uid !== uid) return `${why} ${subject} belongs to ${owner(st.uid)}, not to you (uid ${uid})`
    if (wanted === 'a directory' && st.mode & 0o022) {
      const mode = (st.mode & 0o7777).toString(8).padStart(4, '0')
      return `${why} ${subject} can be written by other users (mode ${mode}), who could put their own socket there`
    }
  }
  return null
}

// The keys this plugin reads itself, with the defaults and range of breaker/config.py's SETTINGS
// (tests/test_schema.py runs readSettings in Node and fails if they drift apart).
const DEFAULT_ENABLED = true
const DEFAULT_FAIL_CLOSED = false
const MIN_TIMEOUT_MS = 1
const MAX_TIMEOUT_MS = 60000

/** The plugin's settings from its row's `config` (the guard server validates the same keys and
 * reports errors; here a bad value falls back to its default with a warning). */
export function readSettings(config, env = process.env, warn = () => {}) {
  const c = config !== null && typeof config === 'object' ? config : {}
  const settings = { enabled: DEFAULT_ENABLED, failClosed: DEFAULT_FAIL_CLOSED, timeoutMs: DEFAULT_TIMEOUT_MS, socket: '' }
  if (typeof c.enabled === 'boolean') settings.enabled = c.enabled
  else if (c.enabled !== undefined) warn(`enabled: expected true or false, found ${show(c.enabled)}; using ${DEFAULT_ENABLED}`)
  if (typeof c.failClosed === 'boolean') settings.failClosed = c.failClosed
  else if (c.failClosed !== undefined) warn(`failClosed: expected true or false, found ${show(c.failClosed)}; using ${DEFAULT_FAIL_CLOSED}`)
  const t = c.guardTimeoutMs
  if (Number.isInteger(t) && t >= MIN_TIMEOUT_MS && t <= MAX_TIMEOUT_MS) settings.timeoutMs = t
  else if (t !== undefined) {
    const range = `from ${MIN_TIMEOUT_MS.toLocaleString('en-US')} to ${MAX_TIMEOUT_MS.toLocaleString('en-US')}`
    warn(`guardTimeoutMs: expected an integer ${range}, found ${show(t)}; using ${DEFAULT_TIMEOUT_MS}`)
  }
  if (typeof c.guardSocket === 'string' && c.guardSocket !== '') settings.socket = expandUser(c.guardSocket)
  else if (c.guardSocket !== undefined && c.guardSocket !== '') warn(`guardSocket: expected a string (the socket's path), found ${show(c.guardSocket)}; using the default`)
  if (!settings.socket) settings.socket = defaultSocketPath(env)
  return settings
}

function show(value) {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

const ALLOW = Object.freeze({ allowed: true, kind: null, reason: '', fallback: false, warning: '' })
const NOT_REPORTED = Object.freeze({ matched: false, warning: '' })

/** 16 hex digits of a digest of a result's text, as the `result` op takes it (a string as is,
 * anything else as JSON). Node has no 8-byte BLAKE2b (OpenSSL's blake2b512 takes no length), and
 * BLAKE2b's output length is part of its parameters, so this is BLAKE2b-512 cut to 8 bytes: not
 * breaker.keys.result_digest's value for the same text. That does not matter: the guard compares a
 * call's digest only with the digests of the same agent's identical calls, all sent by this plugin. */
export function resultDigest(result) {
  let text
  if (typeof result === 'string') text = result
  else {
    try {
      text = JSON.stringify(result) ?? String(result)
    } catch {
      text = String(result)
    }
  }
  return createHash('blake2b512').update(text, 'utf8').digest('hex').slice(0, 16)
}

/** One connection to the guard, shared by every agent of this dsh process. */
export class GuardConnection {
  constructor({
    path,
    timeoutMs = DEFAULT_TIMEOUT_MS,
    failClosed = false,
    harness = 'dsh',
    version = '',
    onInterrupt = () => {},
    log = (line) => console.error(line),
  }) {
    this.path = path
    this.timeoutMs = timeoutMs
    this.failClosed = failClosed
    this.harness = harness
    this.version = version
    this.onInterrupt = onInterrupt
    this.log = log
    this.misses = 0
    this.closed = false
    this.downSince = null
    this.ids = 0
    this.socket = null
    this.connecting = null
    this.pending = new Map() // id -> { resolve, reject, timer }
    this.buffer = ''
  }

  /** Ask before a tool call: `{allowed, kind, reason, fallback}`. Never rejects. */
  async check({ agent, tool, args, parent = null, callId = null }) {
    const fields = { agent, tool, harness: this.harness, parent, call_id: callId, args }
    try {
      let reply = await this.request('check', fields)
      if (reply.error) {
        // The guard could not take the frame (JSON it cannot read: a lone surrogate, a number past
        // its range): ask again with the args as unjudgeable, so the call is counted and the cap
        // applies. An error to that too (the ids themselves) leaves the call to the failure mode.
        reply = await this.request('check', { ...fields, args: null, args_unserializable: true })
      }
      if (reply.decision === 'allow' || reply.decision === 'deny') this.healthy()
      if (reply.decision === 'allow') {
        if (typeof reply.warning === 'string' && reply.warning !== '') {
          return { allowed: true, kind: null, reason: '', fallback: false, warning: reply.warning }
        }
        return ALLOW
      }
      if (reply.decision === 'deny') {
        return {
          allowed: false,
          kind: reply.kind ?? null,
          reason: String(reply.reason || 'Circuit breaker: denied'),
          fallback: false,
          warning: '',
        }
      }
      throw new Error(reply.error ? `${reply.error.code}: ${reply.error.message}` : `unexpected reply ${show(reply).slice(0, 200)}`)
    } catch (error) {
      return this.miss(String(error?.message ?? error))
    }
  }

  /** Report a call's result after it ran: `{matched, warning}` (NOT_REPORTED when the guard
   * cannot be told). Never rejects, and never counts toward an outage: only checks do. The frame
   * is written on this connection before any later check's, and the guard answers a connection's
   * frames in order, so the next check already sees this result without anyone awaiting the reply. */
  async result({ agent, digest, callId = null, tool = null, args = null }) {
    // Named by its call id as its check sent it, else (no id) by its tool and args.
    const fields = callId !== null ? { agent, digest, call_id: callId } : { agent, digest, tool, args }
    try {
      const reply = await this.request('result', fields)
      if (reply.ok !== true) return NOT_REPORTED
      return { matched: reply.matched === true, warning: typeof reply.warning === 'string' ? reply.warning : '' }
    } catch {
      return NOT_REPORTED
    }
  }

  /** Tell the guard an agent is gone (frees its state). Fire and forget. */
  agentEnd(agent) {
    this.request('agent_end', { agent }).catch(() => {})
  }

  /** One request/reply. Rejects with an Error saying why the guard could not be asked. */
  async request(op, fields) {
    if (this.closed) throw new Error('the plugin is unloading')
    const id = ++this.ids
    let frameText = encode(op, id, fields)
    if (op === 'check' && (frameText === undefined || Buffer.byteLength(frameText) > MAX_FRAME)) {
      // Args the guard cannot be sent are "unjudgeable": allowed and counted, as the engine does.
      frameText = encode(op, id, { ...fields, args: null, args_unserializable: true })
    }
    if (frameText === undefined) throw new Error(`cannot encode the ${op} request`)
    let timer
    const reply = new Promise((resolve, reject) => {
      timer = setTimeout(() => {
        // Only this request gives up: the others on the connection wait on, and its late reply,
        // if one comes, finds no waiter and is dropped.
        this.pending.delete(id)
        reject(new Error(`no answer within ${this.timeoutMs} ms`))
      }, this.timeoutMs)
      this.pending.set(id, { resolve, reject, timer })
    })
    reply.catch(() => {}) // a rejection before we await it below is not "unhandled"
    try {
      const socket = await this.connect()
      socket.ref() // keep Node alive while an answer is due
      socket.write(frameText)
      return await reply
    } catch (error) {
      clearTimeout(timer)
      this.pending.delete(id)
      throw error
    } finally {
      if (this.pending.size === 0) this.socket?.unref()
    }
  }

  connect() {
    if (this.socket !== null) return Promise.resolve(this.socket)
    if (this.connecting !== null) return this.connecting
    const unsafe = checkSocket(this.path)
    if (unsafe !== null) return Promise.reject(new Error(unsafe))
    this.connecting = new Promise((resolve, reject) => {
      const socket = createConnection({ path: this.path })
      socket.setEncoding('utf8')
      const failed = (error) => {
        this.connecting = null
        socket.destroy()
        reject(new Error(`cannot reach the guard at ${this.path}: ${error.code ?? error.message}`))
      }
      socket.once('error', failed)
      socket.once('connect', () => {
        socket.off('error', failed)
        this.connecting = null
        if (this.closed) {
          socket.destroy()
          reject(new Error('the plugin is unloading'))
          return
        }
        this.socket = socket
        this.buffer = ''
        socket.on('data', (chunk) => this.received(socket, chunk))
        socket.on('error', (error) => this.lost(socket, error))
        socket.on('close', () => this.lost(socket, new Error('the guard closed the connection')))
        // Pipelined with the first request: the handshake costs no round trip.
        socket.write(
          encode('hello', ++this.ids, {
            harness: this.harness,
            version: this.version,
            pid: process.pid,
            role: 'harness',
            protocol: PROTOCOL_VERSION,
          }),
        )
        resolve(socket)
      })
    })
    return this.connecting
  }

  received(socket, chunk) {
    if (socket !== this.socket) return
    this.buffer += chunk
    let nl = this.buffer.indexOf('\n')
    while (nl >= 0) {
      const line = this.buffer.slice(0, nl)
      this.buffer = this.buffer.slice(nl + 1)
      nl = this.buffer.indexOf('\n')
      let msg
      try {
        msg = JSON.parse(line)
      } catch {
        continue
      }
      if (msg === null || typeof msg !== 'object') continue
      if (msg.event === 'interrupt') {
        try {
          this.onInterrupt(String(msg.agent ?? ''), String(msg.reason ?? ''))
        } catch (error) {
          this.log(`circuit-breaker: interrupt handler failed: ${error?.message ?? error}`)
        }
        continue
      }
      // Replies come in request order, so an error the guard could not tie to a request (a frame it
      // could not parse: `"id": null`) answers the oldest one waiting.
      const id = msg.id === null && msg.error ? this.pending.keys().next().value : msg.id
      const waiter = this.pending.get(id)
      if (waiter !== undefined) {
        this.pending.delete(id)
        clearTimeout(waiter.timer)
        waiter.resolve(msg)
      }
    }
    if (this.buffer.length > MAX_REPLY_BUFFER) this.drop(new Error('the guard sent an oversized frame'))
  }

  lost(socket, error) {
    if (socket === this.socket) this.drop(error)
  }

  drop(error) {
    const socket = this.socket
    this.socket = null
    this.buffer = ''
    socket?.destroy()
    for (const [id, waiter] of this.pending) {
      this.pending.delete(id)
      clearTimeout(waiter.timer)
      waiter.reject(error)
    }
  }

  miss(why) {
    this.misses += 1
    if (this.downSince === null) {
      this.downSince = Date.now()
      const mode = this.failClosed ? 'denying tool calls (fail closed)' : 'allowing tool calls (fail open)'
      this.log(`circuit-breaker: guard unavailable at ${this.path} (${why}): ${mode} until it is back`)
    }
    if (!this.failClosed) return { allowed: true, kind: null, reason: '', fallback: true, warning: '' }
    return {
      allowed: false,
      kind: 'unavailable',
      reason: `Circuit breaker unavailable (${why}); tool calls are denied until it is back.`,
      fallback: true,
      warning: '',
    }
  }

  /** Called after every answered check: logs the end of an outage once. */
  healthy() {
    if (this.downSince !== null) {
      const seconds = ((Date.now() - this.downSince) / 1000).toFixed(1)
      this.log(`circuit-breaker: guard back at ${this.path} after ${seconds} s; ${this.misses} call(s) were not checked`)
      this.downSince = null
      this.misses = 0
    }
  }

  /** Tell the guard these agents are gone, on the open connection, and close it once the frames are out:
   * for dsh shutting down, which leaves no time for replies (nor for a new connection). */
  endAll(agents) {
    const socket = this.socket
    if (socket === null || this.closed || agents.length === 0) return
    try {
      for (const agent of agents) socket.write(encode('agent_end', ++this.ids, { agent }))
      this.socket = null // so close() below does not destroy it before the writes are flushed
      socket.end()
    } catch {
      // a socket that broke meanwhile: the guard forgets idle agents by itself (maxAgents)
    }
  }

  close() {
    this.closed = true
    this.drop(new Error('the plugin is unloading'))
  }
}

function encode(op, id, fields) {
  try {
    return JSON.stringify({ op, id, ...fields }) + '\n'
  } catch {
    return undefined // BigInt, a cycle: the caller sends the args as unjudgeable
  }
}
