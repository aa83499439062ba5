"""Reworded calls and paced polls: what the `reworded` rule and the poll pacing read of a call's args.

`reworded_key` is a call's key in other words: the same search in another case, spacing, word order or with
hyphens, the same shell command with its flags clustered otherwise, quoted otherwise or with `./` before a
path, all give one key. It keeps what a healthy run changes on purpose: every word of a query (a narrowed
question has a word more or less), every number (a page, an offset, a line range), every path and every
positional word of a command. `sleeps` says whether a call waits on purpose before or while it runs (`sleep 30
&& gh run view …`, `kubectl wait`, a wait tool), which makes a repeat of it a poll. `may_write` says whether a
call may have changed what another call answers (a tool that writes, a command not known to only read), which
the `unchanged` rule needs.

Pure and cheap: a regular expression or two over the top-level string args, only when the rule is on.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import orjson

from breaker.keys import tool_class_name

_T = TypeVar("_T")

__all__ = [
    "COMMANDS",
    "REWORDED",
    "SEARCH_KEYS",
    "SHELL_KEYS",
    "SPELLED",
    "may_write",
    "paced",
    "reworded_key",
    "reworded_of",
    "runs",
    "searches",
    "shell_words",
    "sleeps",
    "slept",
    "wait_tool",
    "words",
    "writes",
    "writes_command",
]

# The args a tool searches by, of any tool: their words count as a set.
SEARCH_KEYS = frozenset(
    {"query", "q", "pattern", "search", "searchquery", "searchterm", "term", "keywords", "regex", "prompt", "question"}
)
# The args holding a shell command, of any tool (a string, or an argv list such as Codex's ["bash", "-lc", …]).
SHELL_KEYS = frozenset({"command", "cmd", "script", "commandline"})
# Args naming a path: `./src/` and `src` are one path.
PATH_KEYS = frozenset({"path", "dir", "directory", "cwd", "filepath", "file", "absolutepath", "dirpath", "target"})
# The same names as harnesses spell them (snake_case, camelCase): a call with none of them, of a tool that is not
# a search, has no other words than its own (the fast path, for most calls).
SPELLED = frozenset(
    {"search_query", "searchQuery", "search_term", "searchTerm", "command_line", "commandLine", "Query", "Command"}
    | SEARCH_KEYS
    | SHELL_KEYS
)
COMMANDS = frozenset({"command", "cmd", "script", "command_line", "commandLine", "Command", "code"})
_SEARCH_TOOL = re.compile(r"search|grep|google|bing|query|lookup")
_WAIT_TOOL = re.compile(r"wait|sleep")
_WRITE_TOOL = re.compile(r"write|edit|create|save|patch|replace|insert|delete|remove|rename|move|upload")
# A tool that runs commands or code (Bash, shell, run_shell_command, execute_bash, IPythonRunCellAction, run, …)
_RUN_TOOL = re.compile(r"bash|shell|exec|run|command|cmd|terminal|console|python|script|code")

_WORD = re.compile(r"[^\W\d_]+|\d+")  # runs of letters, runs of digits: `Qwen3.8` and `qwen 3.8` say the same
# A shell word: a control operator (`&&`, `|`, `;`: `cd x&& ls` is `cd x && ls`), or quoted strings and runs of
# anything else but blanks, quotes and operators, joined.
_SHELL_WORD = re.compile(r"""&&|\|\||[;|&]|(?:'[^']*'|"(?:\\.|[^"\\])*"|[^\s'";|&]+)+""")
_QUOTES = re.compile(r"""['"]""")
_ALTERNATIVE = re.compile(r"\\?\|")
# A flag cluster (`-rn`, `-Rni`, `-la`) or a long flag (`--color`, `--no-pager`): dropped, they restate the
# command; a flag holding a number or a value (`-n50`, `--max-count=5`) keeps it.
_FLAG = re.compile(r"-[A-Za-z]+|--[A-Za-z][\w-]*")
_SLEEP = re.compile(
    r"\b(?:sleep|Start-Sleep(?:\s+-(?:s|Seconds))?|timeout(?:\s+/t)?)\s+(\d+(?:\.\d+)?)\s*([smh]?)\b"
    r"|\btime\.sleep\(\s*(\d+(?:\.\d+)?)\s*\)"
)
_WAITS = re.compile(
    r"\bkubectl\s+(?:\S+\s+)*?(?:wait|rollout\s+status)\b|\bgh\s+(?:run|pr)\s+(?:watch|checks\b[^\n]*--watch)"
    r"|\b(?:docker|podman)\s+wait\b|\bwait-for(?:-it)?\b"
)
# What a command says it sleeps, for a clock: `sleep N`, `Start-Sleep N`, `time.sleep(N)`, and Windows' `timeout
# /t N` (or `timeout N` on its own). GNU's `timeout N command` is a limit on the command, not a sleep: not counted.
_SLEPT = re.compile(
    r"\b(?:sleep|Start-Sleep(?:\s+-(?:s|Seconds))?|timeout\s+/t)\s+(\d+(?:\.\d+)?)\s*([smh]?)\b"
    r"|\btimeout\s+(\d+)\s*(?:/nobreak\b|$|[;&|)])|\btime\.sleep\(\s*(\d+(?:\.\d+)?)\s*\)",
    re.MULTILINE,
)
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
MIN_SLEEP = 5.0  # seconds: a `sleep` this long or longer is a wait on purpose; `sleep 1` is a pause in a loop
_MAX_TEXT = 4096  # longer strings (a file's content, a heredoc) are compared as they are


def writes(name: str) -> bool:
    """A tool of this class name writes (a file, an edit, a record): its result is an acknowledgement, the same
    whatever it wrote, so the stall rule does not count it by default."""
    return _WRITE_TOOL.search(name) is not None


def runs(name: str) -> bool:
    """A tool of this class name runs commands or code: whether a call of it may write is read from its args
    (`may_write`); a tool that neither runs nor `writes` by its name is taken to only read."""
    return _RUN_TOOL.search(name) is not None


def searches(name: str) -> bool:
    """A tool of this class name (breaker.keys.tool_class_name) searches: its string args are words."""
    return _SEARCH_TOOL.search(name) is not None


def words(text: str) -> str:
    """A search's words as a set: case, spacing, order, hyphens and punctuation ignored, numbers kept."""
    return " ".join(sorted(set(_WORD.findall(text.lower()))))


def _path(text: str) -> str:
    while text.startswith("./"):
        text = text[2:]
    return text.rstrip("/") or text


def shell_words(command: str) -> str:
    """A shell command with its flags, quotes and `./` left out: `grep -rn "foo" ./src/` is `grep foo src`."""
    out = []
    for word in _SHELL_WORD.findall(command):
        if _FLAG.fullmatch(word):
            continue
        if "=" in word and word.startswith("--"):
            word = word.split("=", 1)[1]
        quoted = _QUOTES.search(word) is not None
        word = _path(_QUOTES.sub("", word))
        if quoted and "|" in word:  # a quoted pattern's alternatives, in any order: `"b|a"` is `"a|b"`
            word = "|".join(sorted(set(_ALTERNATIVE.split(word))))
        out.append(word)
    return " ".join(out)


def _shell(value: Any) -> str | None:
    if isinstance(value, str):
        return shell_words(value) if len(value) <= _MAX_TEXT else value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if len(value) >= 3 and value[-2] in ("-c", "-lc"):  # ["bash", "-lc", "…"]: the command is the last one
            return _shell(value[-1])
        return _shell(" ".join(value))
    return None


def reworded_key(tool: str, args: Any) -> int | None:
    """The call's key in other words (see the module's doc), or None when its args cannot be keyed."""
    name = tool_class_name(tool)
    if isinstance(args, str):
        args = {"command": args} if "shell" in name or "bash" in name else {"query": args}
    if not isinstance(args, dict):
        try:
            return hash(orjson.dumps((name, args), option=orjson.OPT_SORT_KEYS))
        except Exception:
            return None
    searchy = _SEARCH_TOOL.search(name) is not None
    out: dict[str, Any] = {}
    for k, v in args.items():
        arg = tool_class_name(k) if isinstance(k, str) else k
        if arg in SHELL_KEYS and (shell := _shell(v)) is not None:
            v = shell
        elif isinstance(v, str) and len(v) <= _MAX_TEXT:
            if arg in SEARCH_KEYS or (searchy and arg not in PATH_KEYS):
                v = words(v)
            elif arg in PATH_KEYS:  # (a path of a call that searches or runs a command)
                v = _path(v.strip())
            else:
                v = " ".join(v.split())
        out[arg] = v
    try:
        return hash(orjson.dumps((name, out), option=orjson.OPT_SORT_KEYS))
    except Exception:
        return None


# Programs that only read (or only print): a command made of these alone, with no redirection into a file, cannot
# change what another call answers. Any other program may write (a test run, a script, an installer, `make`).
_READS = frozenset(
    {
        ":", "[", "[[", "ack", "ag", "basename", "cat", "cd", "cmp", "column", "comm", "cut", "date", "df", "diff",
        "dirname", "du", "echo", "egrep", "false", "fd", "fgrep", "file", "find", "free", "grep", "head", "hexdump",
        "hostname", "id", "jq", "less", "ls", "md5sum", "more", "nl", "od", "popd", "printenv", "printf", "ps",
        "pgrep", "pushd", "pwd", "readlink", "realpath", "rg", "sed", "sha1sum", "sha256sum", "sleep", "sort",
        "stat", "strings", "tail", "test", "tr", "tree", "true", "type", "uname", "uniq", "uptime", "wc", "whereis",
        "which", "whoami", "xxd", "yq",
    }
)  # fmt: skip
# git's subcommands that only read
_GIT_READS = frozenset(
    {"blame", "describe", "diff", "grep", "log", "ls-files", "reflog", "rev-parse", "shortlog", "show", "status"}
)
# flags that make a reading program write: `sed -i`, `find -delete`/`-exec`, `sort -o`
_WRITING_FLAG = re.compile(r"-i\S*|--in-place\S*|-delete|-exec(?:dir)?|-ok(?:dir)?|-fprint\S*|-fls|-o\S*|--output\S*")
_SIMPLE = re.compile(r"&&|\|\||[;|&\n]")  # what separates a command line's simple commands (outside quotes)
_QUOTED = re.compile(r"'[^']*'|\"(?:\\.|[^\"\\])*\"")
_REDIRECT = re.compile(r"\d*>>?(?!&)\s*(\S+)|&>>?\s*(\S+)")  # an output redirection and its target
_HARMLESS = re.compile(r"\d*>&\d*-?|&?\d*>>?\s*/dev/null")  # `2>&1`, `2>/dev/null`: no file written
_ASSIGN = re.compile(r"[A-Za-z_]\w*=\S*")  # `FOO=1 cmd`: an assignment before the command


def writes_command(command: str) -> bool:
    """The shell command line may write: some simple command in it is not a program that only reads (`_READS`,
    git's reading subcommands, `sed` without `-i`, `find` without `-delete`/`-exec`), it redirects output into a
    file (`> out`, `>> log`; `2>/dev/null` and `2>&1` do not), or it substitutes a command (`$(…)`, backquotes)."""
    if "`" in command or "$(" in command:
        return True
    bare = _QUOTED.sub("''", command)  # quoted text is an argument, never an operator
    for target in _REDIRECT.findall(bare):
        if (target[0] or target[1]) != "/dev/null":
            return True
    for simple in _SIMPLE.split(_HARMLESS.sub(" ", bare)):
        words = simple.split()
        while words and _ASSIGN.fullmatch(words[0]):
            words = words[1:]
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program not in _READS and program != "git":
            return True
        if program == "git":
            sub = next((w for w in words[1:] if not w.startswith("-")), "")
            if sub not in _GIT_READS:
                return True
        elif program in ("sed", "find", "sort") and any(_WRITING_FLAG.fullmatch(w) for w in words[1:]):
            return True
    return False


def _writes_args(tool: str, args: Any) -> bool:
    """Any command among the call's args may write (`writes_command`); Python code (an arg named `code`) may."""
    if isinstance(args, str):
        name = tool_class_name(tool)
        return writes_command(args) if "shell" in name or "bash" in name else False
    if isinstance(args, list):
        args = {"command": args}
    if not isinstance(args, dict):
        return False
    for k, v in args.items():
        if k not in COMMANDS:
            continue
        if k == "code":
            return True
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            v = v[-1] if len(v) >= 3 and v[-2] in ("-c", "-lc") else " ".join(v)
        if not isinstance(v, str) or writes_command(v):
            return True
    return False


def may_write(key: int | None, tool: str, args: Any) -> bool:
    """A call of a tool that `runs` commands may write: a command among its args that is not known to only read
    (`writes_command`), or code; worked out once per distinct call."""
    if key is None:
        return _writes_args(tool, args)
    known = _WRITES.get(key)
    return _remember(_WRITES, key, _writes_args(tool, args)) if known is None else known


_WRITES: dict[int, bool] = {}  # a call's key -> it may write


def sleeps(tool: str, args: Any) -> bool:
    """The call waits on purpose: a wait tool, or a command that sleeps MIN_SLEEP seconds or more, or waits for
    something outside (`kubectl wait`, `gh run watch`): a repeat of it is a poll."""
    if _WAIT_TOOL.search(tool_class_name(tool)):
        return True
    values = args.values() if isinstance(args, dict) else (args,)
    for v in values:
        if isinstance(v, list):
            v = " ".join(x for x in v if isinstance(x, str))
        if not isinstance(v, str):
            continue
        if _WAITS.search(v):
            return True
        for m in _SLEEP.finditer(v):
            if m.group(3) is not None:
                seconds = float(m.group(3))
            else:
                seconds = float(m.group(1)) * _UNIT[m.group(2)]
            if seconds >= MIN_SLEEP:
                return True
    return False


def slept(args: Any) -> float:
    """The seconds a call's command says it sleeps, in all (0: none said): what replay's clock moves on by after
    the call when a trace has no times. Read from the args holding a command (`command`, `cmd`, `script`, `code`,
    …; args that are a string or an argv list); a wait whose length the text does not give (`kubectl wait`, a
    wait tool) adds nothing."""
    if type(args) is dict:
        if COMMANDS.isdisjoint(args):
            return 0.0
        values: Any = [args[k] for k in COMMANDS.intersection(args)]
    else:
        values = (args,)
    seconds = 0.0
    for v in values:
        if isinstance(v, list):
            v = " ".join(x for x in v if isinstance(x, str))
        if not isinstance(v, str):
            continue
        for m in _SLEPT.finditer(v):
            if m.group(1) is not None:
                seconds += float(m.group(1)) * _UNIT[m.group(2)]
            else:
                seconds += float(m.group(3) or m.group(4))
    return seconds


def paced(gap: float, tool: str, args: Any, now: float | None, previous: float | None, key: int) -> bool:
    """A repeat of the agent's last call (its key `key`) is a poll: it came `gap` seconds or more after the agent's
    previous call (both times known; `gap` 0: the spacing says nothing), or it waits on purpose (`sleeps`, worked
    out once per distinct call)."""
    if gap and now is not None and previous is not None and now - previous >= gap:
        return True
    if type(args) is dict and COMMANDS.isdisjoint(args) and not wait_tool(tool):
        return False  # no command to sleep in, not a wait tool: most calls, without a cache or a regex over args
    waits = _SLEEPS.get(key)
    return _remember(_SLEEPS, key, sleeps(tool, args)) if waits is None else waits


_SLEEPS: dict[int, bool] = {}  # a call's key -> it sleeps
_WAIT_TOOLS: dict[str, bool] = {}  # a tool's name as called -> it names a wait


def wait_tool(tool: str) -> bool:
    """The tool's name says it waits (`*wait*`, `*sleep*`, any case), worked out once per name."""
    waits = _WAIT_TOOLS.get(tool)
    return _remember(_WAIT_TOOLS, tool, _WAIT_TOOL.search(tool.lower()) is not None) if waits is None else waits


REWORDED: dict[int, int | None] = {}  # a call's key -> its key in other words (the same call keys the same)
REWORDED_MAX = 4096


def reworded_of(key: int, tool: str, args: Any) -> int | None:
    """`reworded_key` of a call whose exact key is `key`, worked out once per distinct call. (The engine asks only
    for a call of a tool that `searches`, or with a `SPELLED` arg: any other call is only itself, its own key.)"""
    norm = REWORDED.get(key, _UNSET)
    return _remember(REWORDED, key, reworded_key(tool, args)) if norm is _UNSET else norm  # type: ignore[return-value]


_UNSET = object()


def _remember(cache: dict[Any, _T], key: Any, value: _T) -> _T:
    """Keep `value` for `key` in a bounded cache (emptied when full), and return it."""
    if len(cache) >= REWORDED_MAX:
        cache.clear()
    cache[key] = value
    return value
