"""Where things live and how big things may get.

Settings come from ``$TRUSTY_MEMORY_HOME/config.toml`` (all optional) with environment
variables on top, so a test or an ops script can point a whole daemon somewhere else by
setting ``TRUSTY_MEMORY_HOME`` alone. Every actor builds its ``Config`` the same way, which
is how a worker spawned by the broker finds the same sockets and files as its parent.

Example ``config.toml``::

    [broker]
    frontend = "ipc:///run/user/1000/trusty-memory/front.sock"   # or tcp://0.0.0.0:7601
    backend = "tcp://0.0.0.0:7602"   # palace workers, local or remote (trusty-memory worker)
    request_timeout_s = 30
    insecure = false          # true: plain tcp allowed, on a loopback address only (tests)
    local_workers = true      # false: palaces are served by remote workers only

    [client]                  # this home as a client of a daemon elsewhere
    daemon = "tcp://memory.example.net:7601"
    server_key = "..."        # that daemon's public key (`trusty-memory keys show --server`)

    [palace]
    idle_stop_s = 600
    idle_release_s = 60      # an idle worker drops its vector index (reloaded on demand)
    max_text_bytes = 65536
    context_vectors = true    # vector and BM25 words carry the episode predecessor's

    [embedder]
    pool_size = 1
    model = "minilm"          # "deterministic-test" only in fast unit tests
    bulk_nice = 10            # mine/import embed in a process of their own at this niceness

    [dreamer]
    enabled = true            # the daemon runs and supervises the dreamer
    idle_after_s = 900        # dream a palace once it has been idle this long

    [daemon]
    idle_exit_s = 1800        # a daemon a client started exits after this long unused

    [mcp]
    tools = "contract"        # "extended": serve also lists update, search, history, ...

    [limits]                  # what one request may carry (``LimitsSettings``)
    max_tags = 64
    max_kg_field_bytes = 4096

    [privacy]
    secrets = "redact"        # credentials in a write: "redact" | "refuse" | "keep"

    [http]                    # ``serve --http`` and ``ui`` (``HttpSettings``)
    header_timeout_s = 10     # a request head must arrive in full within this
    max_connections = 256
"""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

APP = "trusty-memory"


def default_home() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP, appauthor=False))


@dataclass(frozen=True)
class BrokerSettings:
    frontend: str = ""  # empty: ipc socket in the runtime dir
    backend: str = ""
    request_timeout_s: float = 30.0
    heartbeat_s: float = 1.0
    # A worker silent for this long is presumed dead (its process is killed and restarted).
    worker_expiry_s: float = 60.0
    # A busy worker heartbeats from a thread while it works (workers/base.py ``Pulse``),
    # for one piece of work this long at most: past it, a main thread that never returns
    # goes silent and is restarted. Longer than the longest client deadline (scrub: 1 h).
    worker_busy_max_s: float = 7200.0
    restart_backoff_max_s: float = 10.0
    max_queue: int = 10_000
    # A palace being deleted or renamed: how long its workers get to answer what they hold
    # and exit before they are killed (a long import batch, a large index snapshot).
    close_grace_s: float = 10.0
    # tcp endpoints: CURVE always, unless this is set and every tcp endpoint is loopback.
    insecure: bool = False
    # False: the broker starts no palace worker itself; remote workers
    # (``trusty-memory worker``) register for the palaces they serve.
    local_workers: bool = True
    # Palace worker processes (writers and readers) at most; 0: sized to this machine's
    # memory (``worker_budget``). Past it the least recently used idle palace stops first.
    max_workers: int = 0


MB_PER_WORKER_BUDGET = 64  # memory per palace process the default budget reserves
WORKER_BUDGET_RANGE = (16, 2048)


def worker_budget(setting: int) -> int:
    """Palace worker processes allowed at once: ``[broker] max_workers``, or one per 64 MB
    of this machine's memory (384 on 24 GiB, 128 on 8 GiB), within 16..2048.

    An idle palace costs ~6.5 MB PSS and a busy one with a 100k-drawer index ~200 MB; 64 MB
    a process keeps a machine full of mostly idle palaces well inside its memory, where an
    unbounded count let 10,000 created palaces exhaust it (~2,000 processes on 24 GiB).
    """
    if setting > 0:
        return setting
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return WORKER_BUDGET_RANGE[0] * 8
    low, high = WORKER_BUDGET_RANGE
    return max(low, min(high, total // (MB_PER_WORKER_BUDGET * 2**20)))


@dataclass(frozen=True)
class ClientSettings:
    """Where a client finds its daemon when that is not this home's own."""

    daemon: str = ""  # e.g. tcp://HOST:7601; empty: the home's daemon (the frontend)
    server_key: str = ""  # the daemon's CURVE public key (Z85)


@dataclass(frozen=True)
class PalaceSettings:
    idle_stop_s: float = 600.0
    max_text_bytes: int = 64 * 1024
    max_top_k: int = 1000
    index_save_every: int = 2000  # writes between index snapshots
    ef_search: int = 64
    ef_construction: int = 200
    hnsw_m: int = 16
    batch_max: int = 256  # requests drained from the socket per loop turn
    # SQLite: FULL syncs each commit before the write is acknowledged, so it also survives
    # a power cut; NORMAL (about 0.7 ms faster a remember) survives kill -9 only.
    synchronous: str = "FULL"
    # Reader processes per palace beside its writer (``trusty-memory scale`` sets one
    # palace's own number, kept in its palace.json).
    readers: int = 0
    # Autoscale (``broker/autoscale.py``): above a palace's own readers, up to this many
    # while its requests pile up, each kept only if the palace then answers more per
    # second. 0 (or no more than ``readers``): off.
    max_readers: int = 0
    autoscale_up_inflight: float = 2.0  # mean requests in hand per worker that mean a queue
    autoscale_window_s: float = 3.0  # ... held this long before a reader is added
    autoscale_settle_s: float = 8.0  # a new reader's start, index load and one window
    autoscale_min_gain: float = 0.10  # answered/s it must add, or it goes again ...
    autoscale_hold_s: float = 300.0  # ... and the palace is not scaled up for this long
    autoscale_idle_s: float = 120.0  # an added reader goes after this long quiet
    # A reader catches up with other sessions' writes at most this often (0: at every
    # batch); a session's own writes are always seen (read-your-writes).
    reader_refresh_s: float = 0.0
    # Fork palace workers from a template process that has done their imports (shared
    # copy-on-write); false starts each one as a fresh interpreter.
    fork_workers: bool = True
    # Give a drawer written inside an episode (same room, within the episode window) a
    # vector that carries its predecessor's too; its stored text stays its own
    # (``workers/store/context.py``). The drawer's own vector is kept beside the mix, for the
    # dreamer's duplicate scan (``own_vector``). False: every vector is the drawer's own.
    context_vectors: bool = True
    # A new writer waits this long for a predecessor that lost its broker to exit.
    writer_lock_wait_s: float = 15.0
    # A palace worker that has had no request for this long lets its vector index go
    # (4.3 of the 10.6 MB a forked, idle 1k-drawer worker holds on its own) and loads it
    # again from the snapshot and the change log when a request needs vectors (~2 ms at
    # 1k drawers, ~22 ms at 10k: bench/idle_palaces.py). 0 keeps every index loaded.
    idle_release_s: float = 60.0
    # ... except an index of more drawers than this, whose load would cost more than a
    # wake (~0.24 s at 100k drawers, seconds at 1M).
    idle_release_max_drawers: int = 50_000


@dataclass(frozen=True)
class EmbedderSettings:
    pool_size: int = 1
    model: str = "minilm"
    batch_max: int = 128
    # Vectors of recent texts, so a repeated query or a retried write skips the model. ~2 KB
    # each: 4,096 cover a minute of writes at full speed for 8 MB; 20,000 cost 40 MB.
    cache_entries: int = 4096
    threads: int = 0  # compute threads per embedder; 0: the runtime decides (one per core)
    compiled: bool = True  # serve the compiled model (workers/embedder/compiled_model.py)
    compiled_dir: str = ""  # its cache; empty: the user cache dir
    # The bulk lane (``embed_bulk``: mine, import): its own process, started on demand at
    # this niceness (0-19; higher yields more CPU to interactive calls) and stopped after
    # this many seconds without bulk work.
    bulk_nice: int = 10
    bulk_idle_stop_s: float = 30.0


@dataclass(frozen=True)
class DreamerSettings:
    """The dreamer (``dreamer/``): when it runs and what a pass does."""

    enabled: bool = True  # the daemon starts and supervises it
    # A palace is dreamed once it has had no foreground request for this long (and has
    # had some since its last pass), and at least every ``every_s`` anyway, since decay
    # is driven by time alone.
    idle_after_s: float = 900.0
    every_s: float = 86_400.0
    poll_s: float = 5.0
    pass_budget_s: float = 600.0  # a pass stops (and records what it did) after this
    pause_s: float = 0.01  # between batches: foreground requests go first
    duplicate_threshold: float = 0.95
    neighbours: int = 8
    half_life_days: float = 90.0
    prune_below: float = 0.05
    prune_min_age_days: float = 30.0
    kg_decay: bool = False
    kg_half_life_days: float = 180.0
    # Batch sizes: each request should cost the writer ~10-50 ms, the longest a foreground
    # request waits behind the dream (see ``bench/dream.py``'s slowest_batch_ms).
    scan_batch: int = 64  # drawers per dream_scan request
    merge_batch: int = 16  # groups per dream_merge request
    decay_batch: int = 250  # drawers per dream_decay request


@dataclass(frozen=True)
class DaemonSettings:
    # A daemon that a client started (``serve``, the CLI, the Python client) exits once no
    # client has asked it anything for this long, so agents never leave one running for
    # good; the next call starts it again. 0 never exits. A daemon started any other way
    # (``trusty-memory daemon``, a service manager) keeps running regardless.
    idle_exit_s: float = 1800.0


@dataclass(frozen=True)
class McpSettings:
    """``serve``: which tools it lists. "contract" (the default): exactly the contract's
    ten; "extended": those plus update, search, history and the rest
    (``client/mcp/tools_extended.py``). ``TRUSTY_MEMORY_TOOLS`` overrides it, and
    ``serve --tools`` both."""

    tools: str = "contract"
    # The longest reply line ``serve`` passes on, in bytes; 0: the longest a legal reply can
    # be (``client/mcp/lines.line_limits``, ~1.07 GB with the defaults). A reply over it is
    # answered with an error that says to ask for fewer results: for agents that cannot
    # take a reply of a gigabyte.
    max_reply_bytes: int = 0


@dataclass(frozen=True)
class HttpSettings:
    """``serve --http`` and ``trusty-memory ui``: what one connection may hold, so another
    local user cannot exhaust them (``common/http_guard.py`` says how each is applied)."""

    # A request head must arrive in full within this of connecting, or of the previous
    # response's end, however its bytes trickle in; otherwise the connection is closed.
    header_timeout_s: float = 10.0
    # A keep-alive connection with no new request for this long is closed (uvicorn's
    # keep-alive timeout: whole seconds, at least 1).
    idle_timeout_s: float = 5.0
    # Open connections from one address (every local user is 127.0.0.1), and in all (held
    # to half of the process's descriptor limit less 128). Over either, the oldest
    # connection still waiting for its request head is closed to make room, or the
    # newcomer if none is.
    max_connections_per_peer: int = 128
    max_connections: int = 256


@dataclass(frozen=True)
class LimitsSettings:
    """What one request may carry, beyond ``[palace] max_text_bytes`` (a drawer's text).

    Only drawer text had a bound: 10,000 tags of 100 characters, a 100,000-character room
    and megabyte knowledge-graph fields were all stored (ten such drawers made a 30 MB
    palace file, and every recall that returned them carried them). Every string and list
    in a method's params is now bounded, when its params are decoded
    (``methods.decode_params``: every worker and the broker run it, so the MCP tools, the
    Python client, the command line and import all meet the same bounds), and a refusal
    names the field, the size, the limit and the setting, e.g.
    ``tags: 10000 tags, at most 64 ([limits] max_tags)``.

    Each default sits far above what a person or an agent writes, and well below what
    costs the daemon: sizes are UTF-8 bytes. Set them in ``[limits]`` or with
    ``TRUSTY_MEMORY_LIMITS_<NAME>`` (e.g. ``TRUSTY_MEMORY_LIMITS_MAX_TAGS=128``).
    """

    # Tags per drawer: a tag is a label to filter by, and agents attach a handful; each
    # tag is a row of ``drawer_tags`` and part of every hit returned.
    max_tags: int = 64
    # One tag (and the ``tag`` filter): a label, not a sentence.
    max_tag_bytes: int = 128
    # A room (and the ``room`` filter): the contract's rooms are one word; a custom room is
    # a name, and every distinct room is kept in memory by each worker.
    max_room_bytes: int = 256
    # A knowledge-graph subject, predicate, object or provenance: entity names, relation
    # names, short values and source ids (the contract's examples are under 30 bytes);
    # a fact's prose belongs in a drawer.
    max_kg_field_bytes: int = 4096
    # A recall or search query: the model reads 256 tokens (~1-2 KB of English) and
    # keyword search at most 32 words, so a longer query only costs time.
    max_query_bytes: int = 4096
    # A palace's description (its L0 identity text, returned with every recall).
    max_description_bytes: int = 4096
    # A drawer's metadata, as JSON: a few keys a caller filters or dedups by.
    max_metadata_bytes: int = 16 * 1024
    # Ids and other short tokens: drawer ids (a UUID is 36), cursors, archive entries,
    # times (RFC 3339 is at most 35), an export's kind, an archive reason.
    max_name_bytes: int = 256
    # Items in one request's batch: a palace_import's drawers and triples (the import
    # command sends 500 lines a request), an embed's texts (a worker sends at most twice
    # ``[palace] batch_max``), the drawer ids of a dream_merge, a reader's hit counts.
    max_batch_items: int = 100_000


SECRETS_MODES = ("redact", "refuse", "keep")


@dataclass(frozen=True)
class PrivacySettings:
    """``[privacy]``: what a palace does with a credential in a write
    (``common/credentials``, ``workers/secrets_guard.py``). ``secrets``: "redact" (the
    default) stores each one as a marker, ``[secret:aws-access-key #3f9a1c]``; "refuse"
    fails the write with an error naming the kind and where it is, storing nothing;
    "keep" stores it as written. ``TRUSTY_MEMORY_PRIVACY_SECRETS`` overrides it."""

    secrets: str = "redact"


@dataclass(frozen=True)
class Config:
    home: Path
    run_dir: Path
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    palace: PalaceSettings = field(default_factory=PalaceSettings)
    embedder: EmbedderSettings = field(default_factory=EmbedderSettings)
    dreamer: DreamerSettings = field(default_factory=DreamerSettings)
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    client: ClientSettings = field(default_factory=ClientSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    http: HttpSettings = field(default_factory=HttpSettings)

    @property
    def daemon_endpoint(self) -> str:
        """Where clients reach the daemon: ``[client] daemon``, else the frontend."""
        return self.client.daemon or self.frontend

    @property
    def palaces_dir(self) -> Path:
        return self.home / "palaces"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def frontend(self) -> str:
        return self.broker.frontend or f"ipc://{self.run_dir / 'front.sock'}"

    @property
    def backend(self) -> str:
        return self.broker.backend or f"ipc://{self.run_dir / 'back.sock'}"

    @property
    def mcp_socket(self) -> Path:
        """The MCP host's Unix socket (``client/mcp/host.py``), beside the broker's."""
        return self.run_dir / "mcp.sock"

    @property
    def start_lock(self) -> Path:
        """Starters queue here; in the home, so every environment queues on one file."""
        return self.home / "start.lock"

    def palace_dir(self, name: str) -> Path:
        """The directory of a palace; ``name`` must already be validated."""
        return self.palaces_dir / name

    def ensure_dirs(self) -> None:
        """Create the home's directories, each private to the user (memories hold secrets)."""
        for path in (self.home, self.palaces_dir, self.log_dir, self.run_dir):
            path.mkdir(mode=stat.S_IRWXU, parents=True, exist_ok=True)
        for path in (self.home, self.run_dir):
            os.chmod(path, stat.S_IRWXU)


def _section(cls: type, raw: dict[str, Any], env_prefix: str) -> Any:
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in raw:
            values[f.name] = raw[f.name]
        env = os.environ.get(f"{env_prefix}{f.name.upper()}")
        if env is not None:
            values[f.name] = env
    inst = cls()
    typed = {k: _typed(getattr(inst, k), v) for k, v in values.items()}
    return replace(inst, **typed)


def _typed(default: Any, value: Any) -> Any:
    """A setting in the type of its default; "0", "false", "no", "off" are False."""
    if isinstance(default, bool) and isinstance(value, str):
        return value.strip().lower() not in ("0", "false", "no", "off", "")
    return type(default)(value)


def env_flag(name: str) -> bool:
    """An on/off environment variable read as settings are: unset, "", "0", "false",
    "no" and "off" are off."""
    return _typed(False, os.environ.get(name, ""))


def _run_dir(home: Path) -> Path:
    """Where this environment would put a new daemon's sockets.

    Clients never rely on agreeing about it: the daemon that owns a home records the
    endpoints it bound in the home (``home.py``), and clients read them there.
    """
    explicit = os.environ.get("TRUSTY_MEMORY_RUN_DIR")
    if explicit:
        return Path(explicit)
    # A custom home gets its own runtime dir, so two homes never share a daemon.
    if "TRUSTY_MEMORY_HOME" not in os.environ and os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / APP
    return home / "run"


def load_config() -> Config:
    """Read the config file and environment. Cheap: no directories are created."""
    home = Path(os.environ.get("TRUSTY_MEMORY_HOME") or default_home()).expanduser()
    raw: dict[str, Any] = {}
    path = home / "config.toml"
    if path.exists():
        raw = tomllib.loads(path.read_text())
    return Config(
        home=home,
        run_dir=_run_dir(home),
        broker=_broker_section(raw.get("broker", {})),
        palace=_section(PalaceSettings, raw.get("palace", {}), "TRUSTY_MEMORY_PALACE_"),
        embedder=_section(EmbedderSettings, raw.get("embedder", {}), "TRUSTY_MEMORY_EMBEDDER_"),
        dreamer=_section(DreamerSettings, raw.get("dreamer", {}), "TRUSTY_MEMORY_DREAMER_"),
        daemon=_section(DaemonSettings, raw.get("daemon", {}), "TRUSTY_MEMORY_DAEMON_"),
        client=_client_section(raw.get("client", {})),
        mcp=_mcp_settings(raw.get("mcp", {})),
        limits=_section(LimitsSettings, raw.get("limits", {}), "TRUSTY_MEMORY_LIMITS_"),
        privacy=_privacy_settings(raw.get("privacy", {})),
        http=_section(HttpSettings, raw.get("http", {}), "TRUSTY_MEMORY_HTTP_"),
    )


def _broker_section(raw: dict[str, Any]) -> BrokerSettings:
    """``[broker]``; ``TRUSTY_MEMORY_LOCAL_WORKERS`` is also read, the name deployments use."""
    broker = _section(BrokerSettings, raw, "TRUSTY_MEMORY_BROKER_")
    if os.environ.get("TRUSTY_MEMORY_LOCAL_WORKERS") is not None:
        broker = replace(broker, local_workers=env_flag("TRUSTY_MEMORY_LOCAL_WORKERS"))
    return broker


def _client_section(raw: dict[str, Any]) -> ClientSettings:
    """``[client]``, with ``TRUSTY_MEMORY_DAEMON`` and ``TRUSTY_MEMORY_SERVER_KEY`` on top
    (the names ``serve --daemon``/``--server-key`` set, shared with remote workers)."""
    values: dict[str, str] = {k: str(raw[k]) for k in ("daemon", "server_key") if k in raw}
    for name, env in (
        ("daemon", "TRUSTY_MEMORY_DAEMON"),
        ("server_key", "TRUSTY_MEMORY_SERVER_KEY"),
    ):
        if os.environ.get(env):
            values[name] = os.environ[env]
    return ClientSettings(**values)


def _mcp_settings(raw: dict[str, Any]) -> McpSettings:
    settings = _section(McpSettings, raw, "TRUSTY_MEMORY_MCP_")
    if os.environ.get("TRUSTY_MEMORY_TOOLS"):  # the short name the docs give
        settings = replace(settings, tools=os.environ["TRUSTY_MEMORY_TOOLS"])
    return settings


def _privacy_settings(raw: dict[str, Any]) -> PrivacySettings:
    """``[privacy]``; a mode this program does not know is an error that says which ones
    it does, rather than a guess (a typo must not store secrets in clear)."""
    settings = _section(PrivacySettings, raw, "TRUSTY_MEMORY_PRIVACY_")
    mode = settings.secrets.strip().lower()
    if mode not in SECRETS_MODES:
        raise ValueError(
            f"[privacy] secrets (or TRUSTY_MEMORY_PRIVACY_SECRETS): unknown mode"
            f" {settings.secrets!r}; choose {', '.join(SECRETS_MODES)}"
        )
    return replace(settings, secrets=mode)
