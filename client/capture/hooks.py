"""Agent hooks: capture a Claude Code session with no agent action and no tokens spent.

Two halves, both for Claude Code's hooks (its settings file's ``hooks`` ->
``EventName`` -> ``[{"matcher", "hooks": [{"type": "command", "command", "timeout"}]}]``):

* the settings: :func:`install` merges our entries into a settings file and
  :func:`uninstall` takes them out again, touching nothing else. An entry is ours when its
  command runs ``trusty_memory.client.cli.main hook claude-code`` (:func:`is_ours`), so a
  second install replaces ours in place rather than adding one, and a moved interpreter is
  still recognised. The file is replaced whole (a temporary file beside it, renamed over
  it, its mode kept; through a link to the link's target, as dotfile managers keep it), and
  a file that is not a JSON object is refused, never overwritten: it is the user's.
* the hook itself: :func:`run_hook`, what ``trusty-memory hook claude-code`` runs. At
  ``Stop``, ``SessionEnd`` and ``PreCompact`` it starts ``trusty-memory mine PALACE
  TRANSCRIPT [SUBAGENTS] --format claude-code`` detached and returns at once (SUBAGENTS:
  the session's ``subagents`` folder, :func:`subagent_folder`, and the ``agent-*.jsonl``
  files older Claude Code wrote beside it, :func:`older_sidechains`); at ``SessionStart`` it
  prints the palace's wake-up context (``wake_up.py``) as Claude Code's
  ``hookSpecificOutput.additionalContext`` within a second, or nothing (and starts the
  daemon in the background if none runs: ``spawn.start_daemon_behind``).

A hook must never break the agent. Claude Code reads a hook's exit status: 2 blocks (at
``Stop`` it feeds stderr to the model and keeps it talking), any other non-zero shows
stderr to the user. So whatever happens the hook exits 0 and writes nothing on stderr;
what it decided goes to ``hooks.log`` in the home's log folder. The installed command
ends in ``|| true`` for what runs before our code does (a removed interpreter, a usage
error after an upgrade).

The hook's JSON is untrusted input: a session's working directory is a repository
someone else may have written, and anything able to write the hook's stdin could write
anything. No field reaches a shell (the child's argv is a list, never ``shell=True``); the
event name must be one we installed; the session id must match :data:`SESSION_ID`; the
transcript is read only when :func:`checked_transcript` accepts it (a ``.jsonl`` regular
file, not a link, owned by this user, in a folder only this user can write, starting
like a transcript); the working directory is only ever a source of a palace *name*
(:func:`palace_for`), never a path that is opened.

Which palace: the one given at install (``--palace``), else the project's: the last
component of the project directory (``CLAUDE_PROJECT_DIR``, which Claude Code sets to the
project root, else the hook's ``cwd``), with every character outside the palace-name
alphabet replaced by ``-`` and leading dots dropped, at most 64 characters: what
``trusty-memory hooks palace DIR`` prints, and what to give ``serve --palace``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import select
import shlex
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from trusty_memory.common.config import load_config
from trusty_memory.common.launch import module_command
from trusty_memory.common.names import validate_palace_name
from trusty_memory.common.protocol import ErrorCode, TrustyError

AGENT = "claude-code"
CLI_MODULE = "trusty_memory.client.cli.main"
MINE_EVENTS = ("Stop", "SessionEnd", "PreCompact")
START_EVENT = "SessionStart"
EVENTS = (*MINE_EVENTS, START_EVENT)

# Seconds Claude Code gives each command before cancelling it. Ours return in well under
# one; the margin is for a machine under load, and a cancelled hook is harmless anyway.
MINE_TIMEOUT_S = 10
START_TIMEOUT_S = 5

MAX_INPUT = 1 << 20  # a hook's JSON is a few hundred bytes; a megabyte is plenty
INPUT_WAIT_S = 2.0  # Claude Code writes the JSON and closes stdin at once
WAKE_UP_WAIT_S = 0.8  # SessionStart answers within a second, or says nothing
MAX_PATH = 4096
HEAD_BYTES = 64 * 1024  # what is read of a transcript to see that it is one
SIDECHAINS_SEEN = 64  # older Claude Code's agent files looked at per hook, newest first
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
MAX_SETTINGS = 16 * 1024 * 1024
LOG_NAME = "hooks.log"  # what each hook run decided, one JSON line each
MINE_LOG_NAME = "capture.log"  # what the ``mine`` runs it started printed
LOG_KEEP = 1 << 20  # the log is rotated once past a megabyte (one old file kept)

_NOT_PALACE = re.compile(r"[^A-Za-z0-9_.-]+")
# The palace names a hook uses: ``common/names.py``'s alphabet and length, less a leading
# ``-`` (which ``mine``'s command line would read as an option). Checked here rather than
# through ``names``, whose import pulls in the protocol: a hook starts on every turn.
HOOK_PALACE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


class SettingsError(Exception):
    """A settings file we will not rewrite: not JSON, not an object, an odd ``hooks``."""


class Refused(Exception):
    """Hook input we do not act on; the message goes to the log, never to the agent."""


# -- the settings file ---------------------------------------------------------------


def default_settings() -> Path:
    """Claude Code's user settings: ``$CLAUDE_CONFIG_DIR/settings.json`` where that is
    set (Claude Code's own variable for moving its folder), else ``~/.claude/settings.json``."""
    base = os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude"
    return Path(base).expanduser() / "settings.json"


def hook_argv(palace: str | None = None) -> list[str]:
    """What the installed command runs: this interpreter with ``-P``, so a repository the
    agent opened (the hook's working directory) can never shadow our modules."""
    extra = ["--palace", palace] if palace else []
    return module_command(CLI_MODULE, "hook", AGENT, *extra)


def hook_command(palace: str | None = None) -> str:
    """The command line Claude Code runs through its shell, each word quoted."""
    return shlex.join(hook_argv(palace)) + " || true"


def is_ours(command: object) -> bool:
    """Whether a settings entry's command is a trusty-memory hook (any interpreter, any
    palace), recognised by its words: ``-m trusty_memory.client.cli.main hook claude-code``
    or a ``trusty-memory`` executable followed by ``hook claude-code``."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for i in range(len(words) - 1):
        if words[i : i + 4] == ["-m", CLI_MODULE, "hook", AGENT]:
            return True
        if os.path.basename(words[i]) == "trusty-memory" and words[i + 1 : i + 3] == [
            "hook",
            AGENT,
        ]:
            return True
    return False


def entries(palace: str | None = None) -> dict[str, dict[str, Any]]:
    """Our matcher group per event. ``Stop`` takes no matcher; the others get ``""``,
    which matches every source (``SessionStart`` after ``/clear`` or a compaction too, so
    the context comes back whenever the conversation was emptied)."""
    command = hook_command(palace)
    out: dict[str, dict[str, Any]] = {}
    for event in EVENTS:
        timeout = START_TIMEOUT_S if event == START_EVENT else MINE_TIMEOUT_S
        hook = {"type": "command", "command": command, "timeout": timeout}
        out[event] = {"hooks": [hook]} if event == "Stop" else {"matcher": "", "hooks": [hook]}
    return out


def fragment(palace: str | None = None) -> dict[str, Any]:
    """What to add to a settings file by hand (``hooks install --print``)."""
    return {"hooks": {event: [group] for event, group in entries(palace).items()}}


def read_settings(path: Path) -> dict[str, Any]:
    """The settings as a dict; ``{}`` when the file does not exist yet."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SETTINGS + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read it: {exc.strerror}") from None
    if len(raw) > MAX_SETTINGS:
        raise SettingsError(f"{path}: larger than {MAX_SETTINGS} bytes; left as it is")
    if not raw.strip():
        return {}
    try:
        settings = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SettingsError(
            f"{path} is not valid JSON ({exc}); left as it is: fix it, or add the hooks"
            " by hand (`trusty-memory hooks install --print`)"
        ) from None
    if not isinstance(settings, dict):
        kind = type(settings).__name__
        raise SettingsError(f"{path}: expected a JSON object, found {kind}; left as it is")
    return settings


def _hooks_of(settings: dict[str, Any], path: Path) -> dict[str, Any] | None:
    hooks = settings.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise SettingsError(f'{path}: "hooks" is not an object; left as it is')
    for event, groups in (hooks or {}).items():
        if not isinstance(groups, list):
            raise SettingsError(f"{path}: hooks.{event} is not a list; left as it is")
    return hooks


def _strip_ours(groups: list[Any], keep_first: dict[str, Any] | None) -> list[Any]:
    """``groups`` without our hooks; with ``keep_first``, the first of ours is replaced
    by it in place (so a reinstall moves nothing). A group we emptied is dropped; the
    others, and every entry that is not ours, stay as they were."""
    out: list[Any] = []
    kept = keep_first is None
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list) or not any(
            isinstance(h, dict) and is_ours(h.get("command")) for h in inner
        ):
            out.append(group)
            continue
        new_inner = []
        for hook in inner:
            if isinstance(hook, dict) and is_ours(hook.get("command")):
                if not kept:
                    new_inner.append(keep_first)
                    kept = True
                continue
            new_inner.append(hook)
        if new_inner:
            out.append({**group, "hooks": new_inner})
    return out


def merged(settings: dict[str, Any], palace: str | None, path: Path) -> dict[str, Any]:
    """``settings`` with our entries in (each event once), everything else untouched."""
    out = copy.deepcopy(settings)
    hooks = _hooks_of(out, path)
    if hooks is None:
        hooks = out["hooks"] = {}
    for event, group in entries(palace).items():
        groups = hooks.get(event, [])
        ours = group["hooks"][0]
        present = any(
            isinstance(g, dict)
            and isinstance(g.get("hooks"), list)
            and any(isinstance(h, dict) and is_ours(h.get("command")) for h in g["hooks"])
            for g in groups
        )
        if present:
            hooks[event] = _strip_ours(groups, ours)
        else:
            hooks[event] = [*groups, group]
    return out


def without_ours(settings: dict[str, Any], path: Path) -> dict[str, Any]:
    """``settings`` with every trusty-memory hook taken out; an event list or a ``hooks``
    object that held only ours goes too, so an install then an uninstall gives back what
    was there."""
    out = copy.deepcopy(settings)
    hooks = _hooks_of(out, path)
    if not hooks:
        return out
    for event in list(hooks):
        groups = _strip_ours(hooks[event], None)
        if groups == hooks[event]:
            continue
        if groups:
            hooks[event] = groups
        else:
            del hooks[event]
    if not hooks:
        del out["hooks"]
    return out


def write_settings(path: Path, settings: dict[str, Any]) -> Path:
    """Replace the settings file whole: a temporary file in its folder, fsynced, renamed
    over it. A link is followed to its target (replacing the link would cut a dotfile
    manager's tie to it); the file's mode is kept (0600 for a new one). Returns the file
    written."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o600
    data = (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode()
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(target.parent, os.O_RDONLY)  # the rename itself made durable
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return target


@dataclass
class Change:
    """What ``install``/``uninstall`` did: the file, and whether it was rewritten."""

    path: Path
    changed: bool


def checked_palace(name: str) -> str:
    """A palace name for a hook: a valid one that does not start with ``-``, which the
    ``mine`` command line would read as an option. ``TrustyError`` otherwise."""
    validate_palace_name(name)
    if not HOOK_PALACE.fullmatch(name):
        raise TrustyError(
            ErrorCode.INVALID_PALACE_NAME, f"palace name {name!r} starts with '-': name another"
        )
    return name


def install(path: Path, palace: str | None = None) -> Change:
    """Merge our hook entries into the settings at ``path``; rewrites it only when that
    changes something, so installing twice leaves the file as the first install did."""
    if palace is not None:
        checked_palace(palace)
    settings = read_settings(path)
    new = merged(settings, palace, path)
    if new == settings and path.exists():
        return Change(path, False)
    return Change(write_settings(path, new), True)


def uninstall(path: Path) -> Change:
    """Take every trusty-memory hook out of the settings at ``path``, nothing else."""
    if not path.exists():
        return Change(path, False)
    settings = read_settings(path)
    new = without_ours(settings, path)
    if new == settings:
        return Change(path, False)
    return Change(write_settings(path, new), True)


# -- the hook's input ----------------------------------------------------------------


def read_input(stream: BinaryIO, limit: int = MAX_INPUT, wait_s: float = INPUT_WAIT_S) -> bytes:
    """stdin whole, at most ``limit`` bytes and ``wait_s`` seconds: a hook run by hand on a
    terminal, or fed forever, gives up rather than hang the agent."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        raise Refused("no stdin") from None
    deadline = time.monotonic() + wait_s
    chunks: list[bytes] = []
    total = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Refused(f"stdin not closed within {wait_s:g}s")
        try:
            ready, _, _ = select.select([fd], [], [], remaining)
        except (OSError, ValueError):
            raise Refused("stdin unreadable") from None
        if not ready:
            raise Refused(f"stdin not closed within {wait_s:g}s")
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise Refused(f"stdin larger than {limit} bytes")
        chunks.append(chunk)


def parse_input(raw: bytes) -> dict[str, Any]:
    """The hook's JSON object, with an event name we installed and a safe session id."""
    try:
        event = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise Refused("stdin is not JSON") from None
    if not isinstance(event, dict):
        raise Refused("stdin is not a JSON object")
    name = event.get("hook_event_name")
    if name not in EVENTS:
        raise Refused(f"not an event we handle: {_shown(name)}")
    session = event.get("session_id")
    if not isinstance(session, str) or not SESSION_ID.fullmatch(session):
        raise Refused(f"session_id is not a plain id: {_shown(session)}")
    return event


def palace_for(directory: object) -> str | None:
    """The palace of a project directory: its last component in the palace-name alphabet
    (other characters become ``-``; dots and dashes at the start and dashes at the end go,
    so the name never reads as an option; at most 64 characters); None when nothing is
    left (``/``, ``..``) or the value is not an absolute path."""
    if not isinstance(directory, str) or not directory or len(directory) > MAX_PATH:
        return None
    if "\0" in directory or not os.path.isabs(directory):
        return None
    name = os.path.basename(os.path.normpath(directory))
    name = _NOT_PALACE.sub("-", name).lstrip(".-")[:64].rstrip("-")
    return name if HOOK_PALACE.fullmatch(name) else None


def project_palace(event: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """The palace of the session's project: ``CLAUDE_PROJECT_DIR`` (the project root,
    which stays put when the agent changes directory), else the hook's ``cwd``."""
    for source in (env.get("CLAUDE_PROJECT_DIR"), event.get("cwd")):
        if source:
            palace = palace_for(source)
            if palace is None:
                raise Refused(f"no palace name in the project directory {_shown(source)}")
            return palace
    raise Refused("no project directory (neither CLAUDE_PROJECT_DIR nor cwd)")


def checked_transcript(value: object) -> str:
    """The transcript's real path, when it is safe to hand to ``mine``: an absolute
    ``.jsonl`` path that is itself a regular file (not a link, FIFO or device), owned by
    this user, in a folder no one else may write (so no one can swap it afterwards), and
    starting with a JSON object line, as Claude Code's transcripts do. Opened without
    following links and without blocking, and only its first ``HEAD_BYTES`` read."""
    return _checked(value)[0]


def _checked(value: object) -> tuple[str, bytes]:
    """``checked_transcript``'s real path, and the head it read."""
    if not isinstance(value, str) or not value or len(value) > MAX_PATH or "\0" in value:
        raise Refused(f"transcript_path is not a path: {_shown(value)}")
    if not os.path.isabs(value) or not value.endswith(".jsonl"):
        raise Refused(f"transcript_path is not an absolute .jsonl path: {_shown(value)}")
    try:
        first = os.lstat(value)
    except OSError as exc:
        raise Refused(f"transcript_path: {exc.strerror}: {_shown(value)}") from None
    if not stat.S_ISREG(first.st_mode):
        raise Refused(f"transcript_path is not a regular file: {_shown(value)}")
    real = os.path.realpath(value)  # a linked folder (~/.claude in a dotfile repo) is fine
    me = os.geteuid()
    try:
        folder = os.stat(os.path.dirname(real))
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise Refused(f"transcript_path: {exc.strerror}: {_shown(value)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (first.st_dev, first.st_ino):
            raise Refused(f"transcript_path changed while checked: {_shown(value)}")
        if st.st_uid != me:
            raise Refused(f"transcript_path is not this user's: {_shown(value)}")
        if folder.st_uid != me or folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise Refused(f"transcript_path's folder is writable by others: {_shown(value)}")
        head = os.read(fd, HEAD_BYTES)
    finally:
        os.close(fd)
    if not _looks_like_transcript(head):
        raise Refused(f"transcript_path does not start like a transcript: {_shown(value)}")
    return real, head


def _looks_like_transcript(head: bytes) -> bool:
    """The first line is a JSON object (one longer than the head only needs to start
    like one); an empty file has nothing to mine yet."""
    line, newline, _ = head.lstrip().partition(b"\n")
    if not line:
        return False
    if not newline:
        return line.startswith(b"{")
    try:
        first = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(first, dict) and isinstance(first.get("type"), str)


def _shown(value: object) -> str:
    """A value of the hook's input as the log shows it: quoted, at most 200 characters."""
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


# -- what the hook runs --------------------------------------------------------------


def subagent_folder(transcript: str) -> str | None:
    """The session's sub-agent transcripts: Claude Code 2.1 writes each sub-agent's
    conversation to ``<session>/subagents/agent-*.jsonl`` beside the session's file, and
    ``transcript_path`` names only the main one. Given only when both folders are real
    folders (not links), this user's, and writable by no one else: the standard the
    transcript itself is held to. ``transcript`` is the checked transcript's real path,
    so the session part is a plain id, never ``..``."""
    stem = os.path.basename(transcript).removesuffix(".jsonl")
    if not SESSION_ID.fullmatch(stem):
        return None
    session = os.path.join(os.path.dirname(transcript), stem)
    folder = os.path.join(session, "subagents")
    me = os.geteuid()
    for path in (session, folder):
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != me:
            return None
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None
    return folder


def older_sidechains(transcript: str) -> list[str]:
    """The session's sub-agent transcripts as Claude Code before 2.1 wrote them:
    ``agent-<id>.jsonl`` beside every session's file in the project folder, naming their
    session only inside (``sessionId`` on each line). Of the ``SIDECHAINS_SEEN`` agent
    files changed last (a project folder can hold thousands, and the hook must return at
    once), those whose first line names this session, each held to the transcript's own
    standard (``checked_transcript``)."""
    session = os.path.basename(transcript).removesuffix(".jsonl")
    if not SESSION_ID.fullmatch(session):
        return []
    try:
        with os.scandir(os.path.dirname(transcript)) as entries:
            agents = [
                (e.stat(follow_symlinks=False).st_mtime, e.path)
                for e in entries
                if e.name.startswith("agent-") and e.name.endswith(".jsonl")
            ]
    except OSError:
        return []
    found = []
    for _, path in sorted(agents, reverse=True)[:SIDECHAINS_SEEN]:
        try:
            real, head = _checked(path)
            first = json.loads(head.partition(b"\n")[0])
        except (Refused, ValueError, UnicodeDecodeError):
            continue
        if isinstance(first, dict) and first.get("sessionId") == session:
            found.append(real)
    return sorted(found)


def mine_argv(palace: str, transcript: str, *more: str) -> list[str]:
    """The one command a capture hook starts: mine this session's transcript (and its
    sub-agents' folder, when there is one) into the palace (incremental: a transcript
    mined before is read from where that stopped)."""
    return module_command(CLI_MODULE, "mine", palace, transcript, *more, "--format", AGENT)


def spawn_detached(argv: list[str], log: Path, cwd: Path) -> int:
    """Start ``argv`` with no tie to the hook: its own session (Claude Code cancelling the
    hook's process group does not reach it), stdin from /dev/null, output appended to
    ``log`` (never the hook's pipes, which Claude Code waits on until every holder closes
    them). The hook exits right after, so init (or the nearest subreaper) reaps the child."""
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd=cwd,
            close_fds=True,
            start_new_session=True,
        )
    finally:
        os.close(out)
    return proc.pid


def session_start_output(context: str) -> str:
    """SessionStart's answer: Claude Code adds ``additionalContext`` to the session."""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": START_EVENT, "additionalContext": context}},
        ensure_ascii=False,
    )


def wake_up_within(
    palace: str, wait_s: float = WAKE_UP_WAIT_S, record: dict[str, Any] | None = None
) -> tuple[str | None, bool]:
    """The palace's wake-up text if the daemon gives it within ``wait_s``, else None; and
    whether the asking thread is still running (then the caller must leave with
    ``os._exit``, not wait for it). A local daemon that is not running is started in the
    background (``spawn.start_daemon_behind``; its pid goes in ``record``) and this session
    gets no context: a start takes seconds, and waiting for it would hold the session up."""
    from trusty_memory.client.autostart import frontend, is_local  # lazy: pyzmq: SessionStart only

    config = load_config()
    if is_local(config) and frontend(config) is None:
        # Started now, the daemon is up before the agent's first tool call (in the time a
        # person takes to type the first prompt) instead of that call waiting seconds for
        # the model, the SDK and the palace (BENCHMARKS.md, "Beside MemPalace"); it would
        # start at the first Stop anyway, to mine the turn.
        from trusty_memory.client.spawn import start_daemon_behind  # lazy: SessionStart only

        pid = start_daemon_behind(config)
        if record is not None:
            record["daemon_started"] = pid
        return None, False
    found: list[str | None] = []

    def ask() -> None:
        from trusty_memory.client.capture import wake_up  # lazy: SessionStart only
        from trusty_memory.client.sync import Client  # lazy: pyzmq: SessionStart only

        client = Client(config, autostart=False)
        try:
            found.append(wake_up.wake_up(client, palace, quiet_if_empty=True))
        except Exception as exc:  # a missing palace, a daemon going away: nothing to say
            found.append(None)
            _log({"event": START_EVENT, "palace": palace, "no_context": str(exc)[:200]})
        finally:
            client.close()

    thread = threading.Thread(target=ask, name="wake-up", daemon=True)
    thread.start()
    thread.join(wait_s)
    if thread.is_alive():
        return None, True
    return (found[0] if found else None), False


def run_hook(
    agent: str,
    palace: str | None,
    stdin: BinaryIO | None = None,
    stdout: Any = None,
    env: Mapping[str, str] | None = None,
    spawn: Callable[[list[str], Path, Path], int] = spawn_detached,
) -> int:
    """What ``trusty-memory hook AGENT`` does; always 0 (see the module's docstring). A
    refusal or an error is logged and otherwise silent."""
    stdin = stdin if stdin is not None else sys.stdin.buffer
    stdout = stdout if stdout is not None else sys.stdout
    env = env if env is not None else os.environ
    record: dict[str, Any] = {"agent": _shown(agent)[:40]}
    leave_now = False
    try:
        if agent != AGENT:
            raise Refused(f"not an agent we have hooks for: {_shown(agent)}")
        if palace is not None and not HOOK_PALACE.fullmatch(palace):
            raise Refused(f"not a palace name for a hook: {_shown(palace)}")
        event = parse_input(read_input(stdin))
        name = event["hook_event_name"]
        record.update(event=name, session=event["session_id"])
        palace = palace or project_palace(event, env)
        record["palace"] = palace
        if name == START_EVENT:
            context, leave_now = wake_up_within(palace, record=record)
            if context:
                stdout.write(session_start_output(context) + "\n")
                stdout.flush()
            record["context_chars"] = len(context or "")
        else:
            transcript = checked_transcript(event.get("transcript_path"))
            config = load_config()
            config.ensure_dirs()
            subagents = subagent_folder(transcript)
            older = older_sidechains(transcript)
            argv = mine_argv(palace, transcript, *([subagents] if subagents else []), *older)
            pid = spawn(argv, config.log_dir / MINE_LOG_NAME, config.home)
            record.update(transcript=transcript, mine_pid=pid)
            if subagents:
                record["subagents"] = subagents
            if older:
                record["sidechains"] = older
    except Refused as exc:
        record["refused"] = str(exc)
    except Exception as exc:  # a bug must not reach the agent either: logged, exit 0
        record["error"] = f"{type(exc).__name__}: {exc}"[:300]
    _log(record)
    if leave_now:  # the wake-up thread still waits on the daemon: do not wait for it
        os._exit(0)
    return 0


def _log(record: dict[str, Any]) -> None:
    """One JSON line in the home's ``logs/hooks.log`` (rotated past ``LOG_KEEP``); a log
    that cannot be written is given up on silently, like everything else here."""
    try:
        from datetime import UTC, datetime

        config = load_config()
        config.ensure_dirs()
        path = config.log_dir / LOG_NAME
        try:
            if path.stat().st_size > LOG_KEEP:
                os.replace(path, path.with_name(LOG_NAME + ".1"))
        except FileNotFoundError:
            pass
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        line = json.dumps({"at": at, "pid": os.getpid(), **record}, default=str)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except Exception:
        pass
