"""Run each real harness once against a fake model, in a scratch directory, with a stand-in guard.

The stand-ins are NOT our product: a tiny Python command hook (Claude Code, Codex, Gemini CLI) and a
tiny plain-ESM dsh plugin, written into the scratch directory at each run. Both log everything they
are given as JSONL and deny the Nth call of each agent, so a test can check the plumbing the real
guard will use: what the harness sends, how a deny is spelled, and what the model then reads.

Every harness runs with HOME, TMPDIR and its own home (DSH_HOME, CODEX_HOME) inside the scratch
directory, in its own process group, which is killed when the run ends (background helpers included).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .docs import setup_line
from .fakemodel import FakeModel
from .harnesses import Harness

TASK = "Run `echo cbprobe4` ten times, one tool call each time."
RUN_TIMEOUT = 120.0  # seconds for one harness run; a run here takes 1-6 s
CBCONSOLE = Path(sys.executable).with_name("cbconsole")


@dataclass(frozen=True)
class Setup:
    """Configure a run with `cbconsole setup` in its scratch home instead of writing settings here: the
    command line docs/harnesses.md gives for the harness, plus `--home`, `--socket` and `extra`."""

    argv: tuple[str, ...]
    socket: Path | None = None
    extra: tuple[str, ...] = ()

    @classmethod
    def from_docs(cls, harness: str, socket: Path | None = None, *extra: str) -> Setup:
        return cls(tuple(setup_line(harness)), socket, extra)


def run_setup(setup: Setup, home: Path, env: dict[str, str]) -> str:
    """Run the setup command (the venv's cbconsole) for a scratch home; its output. Fails loudly."""
    assert setup.argv[:2] == ("cbconsole", "setup"), setup.argv
    argv = [str(CBCONSOLE), *setup.argv[1:], "--home", str(home)]
    if setup.socket is not None:
        argv += ["--socket", str(setup.socket)]
    argv += list(setup.extra)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"`{' '.join(argv)}` exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


# --- the stand-in guards -------------------------------------------------------------------------

STANDIN_HOOK = r'''
"""Stand-in guard for command hooks (test code, not cbconsole): log stdin, deny the Nth call per agent."""
import fcntl, json, sys

config = json.load(open(sys.argv[1]))
event = json.load(sys.stdin)
name = event.get("hook_event_name")
tool_event = name in ("PreToolUse", "BeforeTool")
key = [event.get("session_id"), event.get("agent_id") or "main"]
with open(config["log"] + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # parallel tool calls fire their hooks concurrently
    n = 0
    if tool_event:
        try:
            with open(config["log"]) as f:
                n = sum(1 for line in f if (r := json.loads(line)).get("_tool_event") and r.get("_key") == key)
        except FileNotFoundError:
            pass
        n += 1
    with open(config["log"], "a") as f:
        f.write(json.dumps({**event, "_tool_event": tool_event, "_key": key, "_n": n}) + "\n")

deny = tool_event and n in config["deny_at"] and (event.get("agent_id") or not config.get("only_subagents"))
if deny:
    reason, fmt = config["reason"], config["format"]
    claude_deny = {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}
    if fmt == "claude":  # Claude Code; Codex takes the same
        print(json.dumps({"hookSpecificOutput": claude_deny}))
    elif fmt == "block":  # Codex's other spelling
        print(json.dumps({"decision": "block", "reason": reason}))
    elif fmt == "gemini":
        print(json.dumps({"decision": "deny", "reason": reason}))
    elif fmt == "stop":  # Claude Code: stop the agent loop, no deny
        print(json.dumps({"continue": False, "stopReason": config["stop_reason"]}))
    elif fmt == "stop+deny":
        print(json.dumps({"continue": False, "stopReason": config["stop_reason"], "hookSpecificOutput": claude_deny}))
    else:
        raise SystemExit(f"unknown format {fmt!r}")
'''

STANDIN_PLUGIN = r"""
// Stand-in guard for dsh (test code, not cbconsole): log what a plugin sees, deny the Nth call per agent
// from a synchronous ctx.tools.guard after an async tools/pre-execute listener, optionally cancel.
import { appendFileSync } from 'node:fs'

export const name = 'cb-standin'
export const inject = ['tools', 'agents']

function agentView(agent) {
  if (!agent) return null
  let header = null
  try { header = JSON.parse(JSON.stringify(agent.session?.header ?? null)) } catch (e) { header = String(e) }
  return { id: agent.id, status: agent.status, sessionId: agent.session?.id, header }
}

function plain(value) {
  try { return JSON.parse(JSON.stringify(value ?? null)) } catch (e) { return String(e) }
}

export function apply(ctx, config) {
  const log = (record) => appendFileSync(config.log, JSON.stringify({ time: Date.now(), ...record }) + '\n')
  const denyAt = new Set(config.denyAt ?? [])
  const counts = new Map()        // agent id -> calls seen
  const verdicts = new WeakMap()  // exec -> reason, decided in pre-execute, applied by the guard
  ctx.on('tools/pre-execute', async (exec, next) => {
    const agent = exec.agent
    const n = (counts.get(agent?.id) ?? 0) + 1
    counts.set(agent?.id, n)
    const isSubagent = Boolean(agent?.session?.header?.parentSession)
    log({ event: 'pre-execute', n, callId: exec.callId, rootCallId: exec.rootCallId, name: exec.name,
          arguments: plain(exec.arguments), execKeys: Object.keys(exec), agent: agentView(agent) })
    if (denyAt.has(n)) verdicts.set(exec, config.reason)
    if (config.cancelAt === n && (isSubagent || !config.cancelSubagentsOnly)) {
      log({ event: 'cancel', n, agent: agent?.id })
      agent.cancel({ kind: 'hook', reason: config.cancelReason })
    }
    return next()
  })
  ctx.tools.guard((exec) => {
    const reason = verdicts.get(exec)
    log({ event: 'guard', callId: exec.callId, agent: exec.agent?.id, reason: reason ?? null })
    return reason
  })
  for (const event of ['agent/created', 'agent/disposed']) {
    ctx.on(event, (payload) => log({ event, agent: agentView(payload?.agent) }))
  }
  for (const event of ['subagent/start', 'subagent/end']) {
    ctx.on(event, (info) => log({ event, info: plain(info) }))
  }
  log({ event: 'apply', config })
}
"""


# --- running a harness ---------------------------------------------------------------------------


class HarnessRunError(RuntimeError):
    """A harness run that did not finish in time (the message carries its output)."""


@dataclass
class Run:
    """One finished harness run."""

    harness: str
    argv: list[str]
    scratch: Path
    cwd: Path
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    fake: FakeModel
    log_path: Path
    paths: dict[str, Path] = field(default_factory=dict)
    setup_output: str = ""  # what `cbconsole setup` printed, when the run was configured by it

    def records(self, event: str | None = None) -> list[dict[str, Any]]:
        """The stand-in guard's log (hook stdin JSON, or the dsh plugin's records), oldest first."""
        if not self.log_path.exists():
            return []
        out = [json.loads(line) for line in self.log_path.read_text().splitlines() if line.strip()]
        if event is not None:
            out = [r for r in out if r.get("event", r.get("hook_event_name")) == event]
        return out

    def tool_calls(self) -> list[dict[str, Any]]:
        """The hook's tool events (PreToolUse / BeforeTool), oldest first."""
        return [r for r in self.records() if r.get("_tool_event")]

    def describe(self) -> str:
        """Everything useful to read when a test fails."""
        reqs = "\n".join(
            f"  #{r.index} {r.dialect} {r.path} tools={len(r.tools)} prior_calls={r.prior_calls} "
            f"last_result={r.last_tool_result[:120]!r} -> {r.reply!r}"
            for r in self.fake.requests
        )
        return (
            f"{self.harness} exited {self.returncode} after {self.seconds:.1f} s: {' '.join(self.argv)}\n"
            f"--- stdout (tail) ---\n{self.stdout[-3000:]}\n--- stderr (tail) ---\n{self.stderr[-3000:]}\n"
            f"--- model requests ---\n{reqs}"
        )


def _scratch(root: Path) -> dict[str, Path]:
    dirs = {name: root / name for name in ("home", "work", "tmp")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def _home_env(dirs: dict[str, Path]) -> dict[str, str]:
    """HOME, TMPDIR and the XDG directories inside the scratch dir: nothing touches the real home."""
    home = dirs["home"]
    return {"HOME": str(home), "TMPDIR": str(dirs["tmp"]), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state")}  # fmt: skip


def run_process(
    argv: Sequence[str], *, env: dict[str, str], cwd: Path, out_dir: Path, timeout: float = RUN_TIMEOUT
) -> tuple[int, str, str, float]:
    """Run in a new process group with output to files; kill the whole group when it ends."""
    stdout_path, stderr_path = out_dir / "stdout.txt", out_dir / "stderr.txt"
    start = time.monotonic()
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            try:  # the harness's own leftovers (background shells, helpers) go with it
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    seconds = time.monotonic() - start
    stdout, stderr = stdout_path.read_text(errors="replace"), stderr_path.read_text(errors="replace")
    if code is None:
        raise HarnessRunError(
            f"`{' '.join(argv)}` did not finish within {timeout:.0f} s and was killed\n"
            f"--- stdout (tail) ---\n{stdout[-3000:]}\n--- stderr (tail) ---\n{stderr[-3000:]}"
        )
    return code, stdout, stderr, seconds


def _write_hook(
    scratch: Path,
    *,
    fmt: str,
    deny_at: Sequence[int],
    only_subagents: bool = False,
    reason: str = "STANDIN-DENY-3",
    stop_reason: str = "STANDIN-STOP-3",
) -> tuple[str, Path]:
    """Write the stand-in hook and its config; returns its command line and its log path."""
    script, config, log = scratch / "standin_hook.py", scratch / "standin_hook.json", scratch / "standin.jsonl"
    script.write_text(STANDIN_HOOK)
    config.write_text(
        json.dumps(
            {
                "log": str(log),
                "format": fmt,
                "deny_at": list(deny_at),
                "reason": reason,
                "stop_reason": stop_reason,
                "only_subagents": only_subagents,
            }
        )
    )
    return f"{sys.executable} {script} {config}", log


# --- dsh -----------------------------------------------------------------------------------------


def run_dsh(
    harness: Harness,
    fake: FakeModel,
    scratch: Path,
    *,
    deny_at: Sequence[int] = (3,),
    reason: str = "STANDIN-DENY-3",
    cancel_at: int | None = None,
    cancel_subagents_only: bool = False,
    cancel_reason: str = "STANDIN-CANCEL",
    compression: str | None = None,
    task: str = TASK,
    timeout: float = RUN_TIMEOUT,
) -> Run:
    """`dsh --profile headless --patch hmr.yml --patch standin.yml TASK` with the stand-in plugin."""
    log = scratch / "standin.jsonl"
    plugin = scratch / "standin-plugin.mjs"
    scratch.mkdir(parents=True, exist_ok=True)
    plugin.write_text(STANDIN_PLUGIN)
    config: dict[str, Any] = {
        "log": str(log),
        "denyAt": list(deny_at),
        "reason": reason,
        "cancelReason": cancel_reason,
        "cancelSubagentsOnly": cancel_subagents_only,
    }
    if cancel_at is not None:
        config["cancelAt"] = cancel_at
    rows: list[dict[str, Any]] = [{"insert": [{"id": "cb-standin", "name": str(plugin), "config": config}]}]
    return run_dsh_with(
        harness,
        fake,
        scratch,
        rows,
        compression=compression,
        task=task,
        timeout=timeout,
        log=log,
        overlay="standin.yml",
    )


def run_dsh_with(
    harness: Harness,
    fake: FakeModel,
    scratch: Path,
    rows: list[dict[str, Any]] | None = None,
    *,
    patches: Sequence[Path] = (),
    profile: str = "headless",
    compression: str | None = None,
    task: str = TASK,
    timeout: float = RUN_TIMEOUT,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    overlay: str = "overlay.yml",
    setup: Setup | None = None,
    hmr: bool = True,
) -> Run:
    """`dsh --profile PROFILE --patch hmr.yml [--patch FILE]... [--patch overlay.yml] TASK`: the overlay
    holds `rows` (e.g. a plugin's insert row); `patches` are more layer files, in order; `env` adds
    to the run's environment (DSH_HOME stays the scratch one). With `setup`, `cbconsole setup dsh`
    writes the plugin's and the hmr row into `$DSH_HOME/cordis.patch.yml` first, and no hmr.yml is
    given (nor with `hmr=False`: a layer of the test's holds the row)."""
    dirs = _scratch(scratch)
    dsh_home = scratch / "dsh-home"
    dsh_home.mkdir(exist_ok=True)
    # The HMR row: without it every profile run fails with "user patch-layer watching requires the
    # Cordis HMR service". Patch files are YAML; JSON is YAML, so no YAML writer is needed.
    hmr_file = scratch / "hmr.yml"
    hmr_file.write_text(json.dumps([{"id": "hmr", "disabled": False, "config": {"root": []}}], indent=1) + "\n")
    rows = list(rows or [])
    home_env = {**_home_env(dirs), "DSH_HOME": str(dsh_home)}
    setup_output = run_setup(setup, dirs["home"], harness.env(home_env)) if setup is not None else ""
    if compression is not None:
        # A later row's `config` replaces the bundle's whole, so `root` (a !!js in the bundle) is restated.
        rows.append(
            {
                "id": "session-persistence-jsonl",
                "config": {"root": str(dsh_home / "sessions"), "compression": compression},
            }
        )
    with_hmr = hmr and setup is None
    argv = [str(harness.exe), "--profile", profile] + (["--patch", str(hmr_file)] if with_hmr else [])
    for patch in patches:
        argv += ["--patch", str(patch)]
    if rows:
        overlay_path = scratch / overlay
        overlay_path.write_text(json.dumps(rows, indent=1) + "\n")
        argv += ["--patch", str(overlay_path)]
    argv.append(task)
    run_env = harness.env({**home_env, "DEEPSEEK_BASE_URL": fake.url, "DEEPSEEK_API_KEY": "dummy", **(env or {})})
    code, out, err, secs = run_process(argv, env=run_env, cwd=dirs["work"], out_dir=scratch, timeout=timeout)
    return Run(
        "dsh",
        argv,
        scratch,
        dirs["work"],
        code,
        out,
        err,
        secs,
        fake,
        log or scratch / "standin.jsonl",
        {"dsh_home": dsh_home, "sessions": dsh_home / "sessions"},
        setup_output,
    )


def dsh_sessions(run: Run) -> dict[str, Path]:
    """Session files by agent id (the directory name): `sessions/--<cwd>--/<id>/session.jsonl[.zstd]`."""
    found = glob.glob(str(run.paths["sessions"] / "*" / "*" / "session.jsonl*"))
    return {Path(p).parent.name: Path(p) for p in sorted(found)}


def read_dsh_session(path: Path) -> list[dict[str, Any]]:
    """A dsh session log's records: zstd (concatenated frames, one per append batch) or plain JSONL."""
    raw = path.read_bytes()
    if path.name.endswith(".zstd"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True).read()
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


# --- Claude Code ---------------------------------------------------------------------------------


def run_claude(
    harness: Harness,
    fake: FakeModel,
    scratch: Path,
    *,
    fmt: str = "claude",
    deny_at: Sequence[int] = (3,),
    only_subagents: bool = False,
    reason: str = "STANDIN-DENY-3",
    task: str = TASK,
    timeout: float = RUN_TIMEOUT,
    hooks: dict[str, Any] | None = None,
    setup: Setup | None = None,
) -> Run:
    """`claude -p TASK --settings hooks.json` with the stand-in on PreToolUse and the lifecycle hooks,
    or with `hooks` (a settings file's "hooks" value) instead of the stand-in; or, with `setup`,
    `claude -p TASK` after `cbconsole setup claude-code` wrote the user's ~/.claude/settings.json."""
    dirs = _scratch(scratch)
    log = scratch / "standin.jsonl"
    setup_output = run_setup(setup, dirs["home"], harness.env(_home_env(dirs))) if setup is not None else ""
    if hooks is None and setup is None:
        command, log = _write_hook(scratch, fmt=fmt, deny_at=deny_at, only_subagents=only_subagents, reason=reason)
        hook = {"type": "command", "command": command, "timeout": 30}
        hooks = {
            "PreToolUse": [{"matcher": "*", "hooks": [hook]}],
            **{event: [{"hooks": [hook]}] for event in ("SubagentStart", "SubagentStop", "Stop", "SessionEnd")},
        }
    settings_path = scratch / "claude-settings.json"
    argv = [str(harness.exe), "-p", task, "--output-format", "stream-json", "--verbose"]
    if setup is None:
        settings_path.write_text(json.dumps({"hooks": hooks}, indent=1))
        argv += ["--settings", str(settings_path)]
    argv += ["--allowedTools", "Bash"]
    env = harness.env(
        {
            **_home_env(dirs),
            "ANTHROPIC_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": "dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
    )
    code, out, err, secs = run_process(argv, env=env, cwd=dirs["work"], out_dir=scratch, timeout=timeout)
    return Run(
        "claude",
        argv,
        scratch,
        dirs["work"],
        code,
        out,
        err,
        secs,
        fake,
        log,
        {"projects": dirs["home"] / ".claude" / "projects"},
        setup_output,
    )


def stream_events(run: Run) -> list[dict[str, Any]]:
    """The JSON lines a harness printed with `--json` / `--output-format stream-json`."""
    out = []
    for line in run.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


# --- Codex CLI -----------------------------------------------------------------------------------


def run_codex(
    harness: Harness,
    fake: FakeModel,
    scratch: Path,
    *,
    fmt: str = "claude",
    deny_at: Sequence[int] = (3,),
    reason: str = "STANDIN-DENY-3",
    task: str = TASK,
    timeout: float = RUN_TIMEOUT,
    hooks: dict[str, Any] | None = None,
    setup: Setup | None = None,
    bypass_trust: bool = True,
) -> Run:
    """`codex exec --json --dangerously-bypass-hook-trust TASK` with `$CODEX_HOME/hooks.json` (the
    stand-in's, or `hooks` as that file's "hooks" value); or, with `setup`, `codex exec --json TASK`
    (hooks run only if trusted) after `cbconsole setup codex` wrote hooks.json and the trust."""
    dirs = _scratch(scratch)
    codex_home = scratch / "codex-home"
    codex_home.mkdir(exist_ok=True)
    log = scratch / "standin.jsonl"
    if hooks is None and setup is None:
        command, log = _write_hook(scratch, fmt=fmt, deny_at=deny_at, reason=reason)
        hook = {"type": "command", "command": command, "timeout": 30}
        hooks = {
            "PreToolUse": [{"matcher": "*", "hooks": [hook]}],
            "SessionStart": [{"hooks": [hook]}],
            "Stop": [{"hooks": [hook]}],
        }
    if setup is None:
        (codex_home / "hooks.json").write_text(json.dumps({"hooks": hooks}, indent=1))
    (codex_home / "config.toml").write_text(
        'model = "fake-model"\nmodel_provider = "fake"\napproval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\n\n[model_providers.fake]\nname = "fake"\n'
        f'base_url = "{fake.url}/v1"\nwire_api = "responses"\nenv_key = "CB_FAKE_MODEL_KEY"\n'
    )
    home_env = {**_home_env(dirs), "CODEX_HOME": str(codex_home)}
    setup_output = run_setup(setup, dirs["home"], harness.env(home_env)) if setup is not None else ""
    trust = ["--dangerously-bypass-hook-trust"] if bypass_trust and setup is None else []
    argv = [str(harness.exe), "exec", "--json", "--skip-git-repo-check", *trust, task]
    env = harness.env({**home_env, "CB_FAKE_MODEL_KEY": "dummy"})
    code, out, err, secs = run_process(argv, env=env, cwd=dirs["work"], out_dir=scratch, timeout=timeout)
    return Run(
        "codex",
        argv,
        scratch,
        dirs["work"],
        code,
        out,
        err,
        secs,
        fake,
        log,
        {"codex_home": codex_home, "sessions": codex_home / "sessions"},
        setup_output,
    )


# --- Gemini CLI ----------------------------------------------------------------------------------


def run_gemini(
    harness: Harness,
    fake: FakeModel,
    scratch: Path,
    *,
    fmt: str = "gemini",
    deny_at: Sequence[int] = (3,),
    reason: str = "STANDIN-DENY-3",
    task: str = TASK,
    timeout: float = RUN_TIMEOUT,
    hooks: dict[str, Any] | None = None,
    setup: Setup | None = None,
) -> Run:
    """`gemini -p TASK --yolo` with `~/.gemini/settings.json` hooks (timeouts in ms): the stand-in's,
    or `hooks` as the settings' "hooks" value; or, with `setup`, those `cbconsole setup gemini` merges
    into the settings (auth and privacy) written here first."""
    dirs = _scratch(scratch)
    log = scratch / "standin.jsonl"
    if hooks is None and setup is None:
        command, log = _write_hook(scratch, fmt=fmt, deny_at=deny_at, reason=reason)
        hook = {"type": "command", "command": command, "timeout": 30000}
        hooks = {
            "BeforeTool": [{"matcher": ".*", "hooks": [hook]}],
            "AfterAgent": [{"hooks": [hook]}],
            "SessionEnd": [{"hooks": [hook]}],
        }
    settings: dict[str, Any] = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},  # no usage pings to Google from a test
    }
    if setup is None:
        settings["hooks"] = hooks
    gemini_dir = dirs["home"] / ".gemini"
    gemini_dir.mkdir(exist_ok=True)
    (gemini_dir / "settings.json").write_text(json.dumps(settings, indent=1))
    setup_output = run_setup(setup, dirs["home"], harness.env(_home_env(dirs))) if setup is not None else ""
    argv = [str(harness.exe), "-p", task, "--output-format", "stream-json", "--yolo"]
    env = harness.env(
        {
            **_home_env(dirs),
            "GEMINI_API_KEY": "dummy",
            "GOOGLE_GEMINI_BASE_URL": fake.url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
    )
    code, out, err, secs = run_process(argv, env=env, cwd=dirs["work"], out_dir=scratch, timeout=timeout)
    return Run(
        "gemini", argv, scratch, dirs["work"], code, out, err, secs, fake, log, {"gemini_dir": gemini_dir}, setup_output
    )
