"""The container image, the compose stack and the Kubernetes manifests, run by real engines.

``test_container.py`` checks the recipes as files; here they are built and run:

* the image from ``deploy/container/Dockerfile``: its daemon answers ``status``, an MCP
  session on the host (``trusty-memory serve --daemon tcp://...`` driven by the official
  SDK) reaches it over tcp with CURVE, the keys mounted as files as the recipes mount
  them; it runs as uid 10001 and holds no compiler and no torch; a palace survives
  ``docker restart`` and ``docker rm`` + ``run`` on the same volume; ``kill -9`` of its
  daemon under write load loses nothing acknowledged;
* ``deploy/compose.yaml`` brought up: the team daemon and a remote palace worker in two
  containers, a client on the host over CURVE; ``kill -9`` of the worker's container
  under load loses nothing acknowledged, and writes resume when it is back;
* ``deploy/k8s/`` played by podman (``kube play``, the same image): the broker's
  Deployment and the palace's StatefulSet in two pods, the worker and reader registering
  over CURVE, an MCP round trip from the host, ``kill -9`` of the broker under load
  losing nothing acknowledged. What podman cannot play is listed in
  ``manifests_for_podman`` and deploy/README.md.

Under each ``kill -9``, no write may fail either (``assert_no_write_errors``).

Opt-in (``TRUSTY_MEMORY_TEST_CONTAINER=1``, as root): it builds an image (minutes) and
starts ``dockerd`` when none answers (without its bridge). Every container runs with the
host network, every address on loopback; and where Docker Hub or PyTorch's CPU index
cannot be reached (this machine reaches package registries only) the test builds
stand-ins, never changing the recipe (each is said in a warning and in the figures):

* the base image (``python:3.11-slim-bookworm``): a debootstrap'ed bookworm with Debian's
  python3.11, cached in ``$TRUSTY_MEMORY_TEST_CONTAINER_CACHE`` (``/var/cache/trusty-memory``)
  and imported under the recipe's tag;
* PyTorch's CPU index: the CPU torch wheel on this machine's disk (and the wheels it
  depends on) served on 127.0.0.1:17613 during the build, named to pip in the base image's
  ``/etc/pip.conf`` (a layer the test adds, with this machine's certificate authorities);
  the CUDA build on PyPI is never a candidate, since pip only looks there for the rest.

The builder is Docker's classic one (``DOCKER_BUILDKIT=0``): no buildx here, and BuildKit
would fetch the ``# syntax=`` frontend from Docker Hub. Figures (build time, image size,
round trips over CURVE, recovery after ``kill -9``) are printed and written to
``bench/out/container-engine.json``; deploy/README.md has them and the command.

Covers: deploy/container/Dockerfile deploy/compose.yaml deploy/k8s/broker.yaml
    deploy/k8s/palace-notes.yaml workers/remote.py
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import _short_tmp
from tests.conftest import wait_until as _wait_until
from tests.engine.test_small_install import HEAVY
from tests.engine.test_tcp import cli, free_port, serve_session
from tests.mcp.conftest import tool_json
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config, load_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(5400),
    pytest.mark.skipif(
        os.environ.get("TRUSTY_MEMORY_TEST_CONTAINER") != "1",
        reason="opt-in: TRUSTY_MEMORY_TEST_CONTAINER=1 (as root; builds an image: minutes)",
    ),
]

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "container" / "Dockerfile"
COMPOSE = REPO / "deploy" / "compose.yaml"
CACHE = Path(os.environ.get("TRUSTY_MEMORY_TEST_CONTAINER_CACHE", "/var/cache/trusty-memory"))
DATA_ROOT = os.environ.get("TRUSTY_MEMORY_TEST_DOCKER_ROOT", "/var/lib/docker")
IMAGE = "trusty-memory:engine-test"
STAND_IN = "trusty-memory-test/bookworm-python:3.11"  # the debootstrap'ed base, before the layer
HUB_COPY = "trusty-memory-test/hub-base:latest"  # the real base, kept under a name of ours
WHEEL_PORT = 17613  # fixed: it is written into the base image's pip.conf (a layer cache key)
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
STAND_IN_PACKAGES = "python3,python3-venv,python3.11-dev,python-is-python3,ca-certificates"
FIGURES_FILE = REPO / "bench" / "out" / "container-engine.json"
FIGURES: dict[str, object] = {}
MODEL_STAGE: list[str] = []  # the build's `model` stage image (a tag of ours)
CLASSIC = {**os.environ, "DOCKER_BUILDKIT": "0", "COMPOSE_DOCKER_CLI_BUILD": "0"}

# Docker's commands are slow to ask: every half second is often enough.
wait_until = functools.partial(_wait_until, interval=0.5)


def docker(
    *args: str, timeout: float = 120, check: bool = True, **kw
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, env=CLASSIC, **kw
    )
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stderr.strip()[-3000:]}")
    return done


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
    }


@pytest.fixture(scope="module", autouse=True)
def figures() -> Iterator[dict]:
    yield FIGURES
    FIGURES_FILE.parent.mkdir(parents=True, exist_ok=True)
    FIGURES_FILE.write_text(json.dumps(FIGURES, indent=2) + "\n")
    print("\ncontainer figures:", json.dumps(FIGURES, indent=2))


# -- the engine -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[None]:
    """A Docker engine: the one that answers, or a ``dockerd`` started here (no bridge,
    no iptables: containers use the host network) and stopped at the end."""
    if shutil.which("docker") is None:
        pytest.fail("no docker client (apt-get install docker.io)")
    if docker("info", check=False, timeout=30).returncode == 0:
        yield
        return
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        pytest.fail("no Docker engine answers, and none can be started (needs root and dockerd)")
    log = open("/tmp/tm-dockerd.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false",
         "--data-root", DATA_ROOT],
        stdout=log, stderr=log,
    )  # fmt: skip
    try:
        wait_until(lambda: docker("info", check=False, timeout=30).returncode == 0, 90,
                   "dockerd to answer (see /tmp/tm-dockerd.log)")  # fmt: skip
        FIGURES["engine"] = "dockerd started by the test (--bridge=none --iptables=false)"
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- the base image and the torch wheel ---------------------------------------------------


def base_tag() -> str:
    """The final stage's base, as the Dockerfile names it (its ARG defaults filled in)."""
    text = DOCKERFILE.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    base = re.findall(r"^FROM (\S+)$", text, re.M)[-1]
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)


def python_tag() -> str:
    version = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.M))
    return "cp" + version["PYTHON_VERSION"].replace(".", "")


def stand_in_tar() -> Path:
    """bookworm (minbase) with Debian's python3.11, venv and headers: what the recipe needs
    of python:3.11-slim-bookworm. Made once with debootstrap (~2 min), kept as a tar."""
    tar = CACHE / "bookworm-base.tar"
    if tar.is_file():
        return tar
    if shutil.which("debootstrap") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True)
    root = CACHE / "bookworm-base.partial"
    shutil.rmtree(root, ignore_errors=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={STAND_IN_PACKAGES}", "bookworm",
         str(root), "http://deb.debian.org/debian"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert made.returncode == 0, f"debootstrap bookworm failed: {made.stderr[-3000:]}"
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        for path in (root / junk).glob("*"):
            if path.is_dir() and not path.is_symlink():
                if path.name != "partial":
                    shutil.rmtree(path)
            else:
                path.unlink()
    subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", f"{tar}.partial", "."],
                   check=True)  # fmt: skip
    os.replace(f"{tar}.partial", tar)
    shutil.rmtree(root, ignore_errors=True)
    return tar


def torch_index_reachable() -> bool:
    try:
        with urllib.request.urlopen(f"{TORCH_INDEX}/torch/", timeout=15):
            return True
    except OSError:
        return False


def torch_pin() -> str:
    text = (REPO / "pyproject.toml").read_text()
    return re.search(r'"torch==([^"]+)"', text).group(1)


def local_torch_wheel() -> Path:
    """This machine's CPU torch wheel at the project's pin (never the CUDA build)."""
    name = f"torch-{torch_pin()}+cpu-{python_tag()}-{python_tag()}-*x86_64.whl"
    places = [os.environ.get("TRUSTY_MEMORY_TEST_TORCH_WHEEL_DIR", "")]
    places += [*os.environ.get("PIP_FIND_LINKS", "").split(), "/opt/wheels"]
    places += ["/opt/pypi/files", "/opt/pypi-more/files"]
    for place in filter(None, places):
        found = sorted(Path(place).glob(name))
        if found:
            return found[0]
    pytest.fail(f"PyTorch's CPU index is unreachable and no {name} lies in {places}")


def torch_wheels() -> Path:
    """The CPU torch wheel and the wheels it depends on (what PyTorch's CPU index would
    serve), in one folder: ``pip download`` of the local wheel, kept in the cache."""
    folder = CACHE / f"torch-{torch_pin()}-cpu-wheels"
    if (folder / ".complete").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    version = python_tag()[2:]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--dest", str(folder),
         "--only-binary=:all:", "--implementation", "cp",
         "--python-version", f"{version[0]}.{version[1:]}",
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
         str(local_torch_wheel())],
        check=True, timeout=900,
    )  # fmt: skip
    assert not [w for w in folder.glob("nvidia*")], "a CUDA wheel among torch's"
    (folder / ".complete").touch()
    return folder


@contextlib.contextmanager
def serving(folder: Path | None) -> Iterator[None]:
    """``folder`` over http on 127.0.0.1:WHEEL_PORT (pip's find-links) while building."""
    if folder is None:
        yield
        return

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", WHEEL_PORT), handler)
    except OSError as exc:
        pytest.fail(f"cannot serve the torch wheels on 127.0.0.1:{WHEEL_PORT}: {exc}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def base(engine) -> Path | None:
    """The recipe's base image under its own tag; returns the torch wheel folder to serve
    during builds (None: PyTorch's index is reachable)."""
    tag = base_tag()
    pulled = docker("pull", tag, check=False, timeout=600)
    if pulled.returncode == 0:
        docker("tag", tag, HUB_COPY)
        origin, said = HUB_COPY, f"{tag} from Docker Hub"
    else:
        if docker("image", "inspect", STAND_IN, check=False).returncode != 0:
            docker("import", "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["python3"]',
                   str(stand_in_tar()), STAND_IN, timeout=600)  # fmt: skip
        origin = STAND_IN
        said = (f"Docker Hub unreachable: {tag} is a local stand-in (debootstrap bookworm +"
                " Debian's python3.11)")  # fmt: skip
        warnings.warn(said, stacklevel=1)
    wheels = None if torch_index_reachable() else torch_wheels()
    if wheels is not None:
        note = (f"PyTorch's CPU index unreachable: the local {local_torch_wheel().name} (and"
                f" its dependencies) fed to the build from 127.0.0.1:{WHEEL_PORT}")  # fmt: skip
        warnings.warn(note, stacklevel=1)
        said += "; " + note
    FIGURES["base"] = said
    # This machine's pip settings on top: its certificate authorities (a proxy's included)
    # and, without PyTorch's index, the local wheels as find-links.
    context = _short_tmp("tmb-")
    try:
        shutil.copy("/etc/ssl/certs/ca-certificates.crt", context / "ca.crt")
        conf = "[global]\ncert = /etc/ssl/certs/trusty-memory-test-ca.crt\n"
        if wheels is not None:
            conf += f"find-links = http://127.0.0.1:{WHEEL_PORT}/\n"
        (context / "pip.conf").write_text(conf)
        (context / "Dockerfile").write_text(
            f"FROM {origin}\nCOPY ca.crt /etc/ssl/certs/trusty-memory-test-ca.crt\n"
            "COPY pip.conf /etc/pip.conf\n"
        )
        docker("build", "-q", "-t", tag, str(context), timeout=600)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return wheels


@pytest.fixture(scope="module")
def image(base) -> str:
    """The recipe built as users build it (from the repository root, host network)."""
    log = Path("/tmp/tm-container-build.log")
    started = time.monotonic()
    with serving(base), open(log, "w") as out:
        done = subprocess.run(
            ["docker", "build", "--network", "host", "-f", str(DOCKERFILE), "-t", IMAGE, "."],
            cwd=REPO, env=CLASSIC, stdout=out, stderr=subprocess.STDOUT, timeout=5000,
        )  # fmt: skip
    text = log.read_text(errors="replace")
    assert done.returncode == 0, text[-5000:]
    FIGURES["build_s"] = round(time.monotonic() - started, 1)
    FIGURES["build_steps_cached"] = f"{text.count('Using cache')} of {text.count('Step ')}"
    # The build stages' images, each what its last step made, kept under tags of ours: the
    # next build's cache, while those of earlier builds (untagged now) are pruned.
    for stage, last_step in (("model", "trusty-memory setup"),
                             ("serving", "--constraint /constraints.txt /src")):  # fmt: skip
        made = re.search(r"^ ---> ([0-9a-f]{12})$", text[text.index(last_step) :], re.M)
        docker("tag", made.group(1), f"{IMAGE}-{stage}-stage")
    MODEL_STAGE.append(f"{IMAGE}-model-stage")
    docker("image", "prune", "-f", timeout=600)
    size = int(docker("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    FIGURES["image_mb"] = round(size / 1e6, 1)
    base_size = int(docker("image", "inspect", "--format", "{{.Size}}", base_tag()).stdout)
    FIGURES["base_image_mb"] = round(base_size / 1e6, 1)
    return IMAGE


# -- keys, as the recipes hand them over ------------------------------------------------


def host_config(home: Path, endpoint: str, server_key: str) -> Config:
    """The config of a client in ``home`` on the host, for the daemon at ``endpoint``."""
    saved = dict(os.environ)
    os.environ.update(TRUSTY_MEMORY_HOME=str(home), TRUSTY_MEMORY_DAEMON=endpoint,
                      TRUSTY_MEMORY_SERVER_KEY=server_key)  # fmt: skip
    try:
        return load_config()
    finally:
        os.environ.clear()
        os.environ.update(saved)


class Keys:
    """A team home with its server pair, the host client's home, and the key files the
    containers get, owned by uid 10001 (the image's user) as the README asks."""

    def __init__(self) -> None:
        self.team = _short_tmp("tmk-")
        self.client = _short_tmp("tmh-")
        self.worker = _short_tmp("tmw-")
        for home in (self.team, self.client, self.worker):
            assert cli(home, "keys", "init").returncode == 0
        self.server_key = cli(self.team, "keys", "show", "--server").stdout.strip()
        for name, home in (("host", self.client), ("healthcheck", self.team),
                           ("palace-worker", self.worker)):  # fmt: skip
            key = cli(home, "keys", "show", "--client").stdout.strip()
            assert cli(self.team, "keys", "add", name, key).returncode == 0
        # The files as compose's secrets name them (deploy/team/ layout), for uid 10001.
        self.files = _short_tmp("tms-")
        keys = self.team / "keys"
        (self.files / "keys").mkdir()
        shutil.copy(keys / "server.key_secret", self.files / "keys" / "server.key_secret")
        shutil.copy(keys / "client.key_secret", self.files / "keys" / "client.key_secret")
        shutil.copytree(keys / "clients", self.files / "keys" / "clients")
        (self.files / "worker" / "keys").mkdir(parents=True)
        shutil.copy(self.worker / "keys" / "client.key_secret",
                    self.files / "worker" / "keys" / "client.key_secret")  # fmt: skip
        subprocess.run(["chown", "-R", "10001:10001", str(self.files)], check=True)

    def mounts(self) -> list[str]:
        """``docker run`` mounts at the places compose's secrets land."""
        k = self.files / "keys"
        pairs = (
            (k / "server.key_secret", "server_secret_key"),
            (k / "clients", "client_keys"),
            (k / "client.key_secret", "healthcheck_client_secret_key"),
        )
        return [arg for src, name in pairs for arg in ("-v", f"{src}:/run/secrets/{name}:ro")]

    def config(self, endpoint: str) -> Config:
        """The host client's config for the daemon at ``endpoint``."""
        return host_config(self.client, endpoint, self.server_key)

    def cleanup(self) -> None:
        for home in (self.team, self.client, self.worker, self.files):
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def keys() -> Iterator[Keys]:
    made = Keys()
    yield made
    made.cleanup()


# -- the image, run -----------------------------------------------------------------------


class Container:
    """``docker run IMAGE`` (the daemon) on the host network, its frontend on a loopback
    port, its home the named volume, its keys mounted files, restarted on failure."""

    def __init__(self, image: str, keys: Keys) -> None:
        self.image, self.keys = image, keys
        self.name = f"tm-engine-test-{os.getpid()}"
        self.volume = f"{self.name}-data"
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"

    def run(self) -> Container:
        env = {
            "TRUSTY_MEMORY_BROKER_FRONTEND": self.endpoint,
            "TRUSTY_MEMORY_SERVER_SECRET_FILE": "/run/secrets/server_secret_key",
            "TRUSTY_MEMORY_CLIENT_KEYS_DIR": "/run/secrets/client_keys",
            "TRUSTY_MEMORY_DAEMON": self.endpoint,  # the healthcheck's and `docker exec`'s
            "TRUSTY_MEMORY_SERVER_KEY": self.keys.server_key,
            "TRUSTY_MEMORY_CLIENT_SECRET_FILE": "/run/secrets/healthcheck_client_secret_key",
        }
        docker(
            "run", "-d", "--name", self.name, "--network", "host", "--restart", "on-failure",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true",
            "-v", f"{self.volume}:/data", *self.keys.mounts(),
            *[a for k, v in env.items() for a in ("-e", f"{k}={v}")], self.image,
        )  # fmt: skip
        return self

    def status(self) -> subprocess.CompletedProcess:
        """``trusty-memory status`` from the host client's home, over tcp with CURVE."""
        return cli(self.keys.client, "status", "--json", "--daemon", self.endpoint,
                   "--server-key", self.keys.server_key, timeout=60)  # fmt: skip

    def wait_answering(self, timeout: float = 240) -> float:
        started = time.monotonic()
        wait_until(lambda: self.status().returncode == 0, timeout,
                   f"the container's daemon to answer: {self.logs()}")  # fmt: skip
        return time.monotonic() - started

    def inspect(self, template: str) -> str:
        return docker("inspect", "--format", template, self.name).stdout.strip()

    def logs(self) -> str:
        done = docker("logs", "--tail", "30", self.name, check=False)
        return (done.stdout + done.stderr)[-4000:]

    def client(self) -> Client:
        return Client(self.keys.config(self.endpoint))

    def remove(self) -> None:
        docker("rm", "-f", self.name, check=False)


@pytest.fixture(scope="module")
def container(image, keys) -> Iterator[Container]:
    started = time.monotonic()
    box = Container(image, keys).run()
    try:
        box.wait_answering()
        FIGURES["run_to_status_s"] = round(time.monotonic() - started, 1)
        with box.client() as client:  # the embedder has loaded the build's compiled model
            client.palace_create("first")
            client.remember("first", "the first note of a new container")
        FIGURES["run_to_first_remember_s"] = round(time.monotonic() - started, 1)
        yield box
    finally:
        box.remove()
        docker("volume", "rm", "-f", box.volume, check=False)


COMPILERS = (
    "for c in cc c++ gcc g++ cpp clang x86_64-linux-gnu-gcc-12 x86_64-linux-gnu-g++-12; do"
    " command -v $c; done; dpkg-query -W -f '${Package}\\n'"
    " | grep -xE '(gcc|g\\+\\+|cpp|clang)(-[0-9]+)?|binutils(-.*)?|lib(gcc|stdc\\+\\+)-[0-9]+-dev'"
    "; true"
)


def in_image(image: str, *command: str) -> str:
    """``command`` in a throw-away container of ``image`` (as its user), its stdout."""
    done = docker("run", "--rm", "--network", "host", "--entrypoint", command[0], image,
                  *command[1:])  # fmt: skip
    return done.stdout


def heavy_packages(image: str, python: str = "python") -> set[str]:
    listed = in_image(image, python, "-m", "pip", "list", "--format=json")
    names = {d["name"].lower() for d in json.loads(listed)}
    return (names & set(HEAVY)) | {n for n in names if n.startswith("nvidia")}


def test_the_image_runs_as_10001_with_no_compiler_and_no_torch(image):
    user = docker("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip()
    assert user == "10001:10001"
    assert in_image(image, "/bin/sh", "-c", "id -u; id -g").split() == ["10001", "10001"]
    assert in_image(image, "/bin/sh", "-c", COMPILERS).split() == []
    assert heavy_packages(image) == set()
    names = in_image(image, "python", "-m", "pip", "list", "--format=freeze").lower()
    for needed in ("onnxruntime==", "tokenizers==", "trusty-memory==", "hnswlib=="):
        assert needed in names
    found = in_image(
        image, "python", "-c", "import importlib.util as u; print(u.find_spec('torch'))"
    )
    assert found.strip() == "None"
    # The same probes find the compiler and torch in the build stage that has them (the
    # `model` stage of the same build: the image its last step made, read from the log).
    model = MODEL_STAGE[0]
    assert {"gcc", "g++"} <= {
        Path(c).name for c in in_image(model, "/bin/sh", "-c", COMPILERS).split()
    }
    assert "torch" in heavy_packages(model, "/opt/trusty-memory/bin/python")
    sizes = in_image(image, "du", "-sm", "/opt/trusty-memory", "/home/trusty/.cache/trusty-memory")
    FIGURES["venv_and_model_mb"] = {
        path: int(mb) for mb, path in (line.split() for line in sizes.splitlines())
    }


def test_status_and_an_mcp_round_trip_over_curve(container, keys):
    status = json.loads(container.status().stdout)
    assert status["home"] == "/data"  # the container's home, not the host client's
    inside = docker("exec", container.name, "trusty-memory", "status")  # the healthcheck's command
    assert inside.returncode == 0, inside.stderr
    pid = int(container.inspect("{{.State.Pid}}"))
    assert "trusty_memory.broker" in Path(f"/proc/{pid}/cmdline").read_text()
    uids = Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[:4]
    assert uids == ["10001"] * 4, uids  # the daemon itself, as the host's kernel sees it

    pings: list[float] = []
    with container.client() as client:
        for i in range(220):
            started = time.perf_counter()
            assert client.ping()["pong"] is True
            if i >= 20:  # after the CURVE handshake and warm-up
                pings.append(time.perf_counter() - started)
    FIGURES["ping_over_curve"] = percentiles(pings)

    async def go() -> dict:
        flags = ("--palace", "boxed", "--daemon", container.endpoint,
                 "--server-key", keys.server_key)  # fmt: skip
        async with serve_session(keys.client, *flags) as session:
            stored = tool_json(await session.call_tool(
                "memory_remember", {"text": "the release train leaves on thursdays"}))  # fmt: skip
            assert stored["status"] == "stored" and stored["palace"] == "boxed"
            recalls = []
            for _ in range(40):
                started = time.perf_counter()
                found = tool_json(await session.call_tool(
                    "memory_recall", {"query": "when does the release train leave?"}))  # fmt: skip
                recalls.append(time.perf_counter() - started)
                assert found["results"][0]["drawer_id"] == stored["drawer_id"]
            return {"recall": percentiles(recalls[5:])}

    FIGURES["mcp_recall_host_to_container"] = asyncio.run(go())["recall"]
    # it lives in the container's home (the volume), not in the host client's
    assert "boxed" in palaces_in_home(["docker", "exec", container.name])
    assert not (keys.client / "palaces" / "boxed").exists()
    health = wait_until(
        lambda: container.inspect("{{.State.Health.Status}}") == "healthy", 150,
        "the HEALTHCHECK to report healthy",
    )  # fmt: skip
    assert health


def test_a_palace_survives_restart_and_a_new_container_on_the_volume(container):
    with container.client() as client:
        client.palace_create("durable")
        kept = client.remember("durable", "the backup key is in the red safe").drawer_id

    def still_there() -> None:
        with container.client() as client:
            ids = {d.drawer_id for d in client.list("durable", limit=1000).drawers}
            assert kept in ids
            assert client.recall("durable", "where is the backup key?").results[0].drawer_id == kept

    started = time.monotonic()
    docker("restart", container.name, timeout=120)
    container.wait_answering()
    FIGURES["docker_restart_to_answering_s"] = round(time.monotonic() - started, 1)
    still_there()

    container.remove()  # docker rm: the container goes, the volume stays
    assert container.volume in docker("volume", "ls", "--format", "{{.Name}}").stdout.split()
    started = time.monotonic()
    container.run()
    container.wait_answering()
    FIGURES["rm_and_run_to_answering_s"] = round(time.monotonic() - started, 1)
    still_there()


class WriteLoad:
    """Writes in a thread, one at a time, each ``(sent, answered, drawer_id)`` kept; the
    errors (answers naming a cause, never a hang) counted by message."""

    def __init__(self, make_client, palace: str) -> None:
        self.make_client, self.palace = make_client, palace
        self.acked: list[tuple[float, float, str]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        client = self.make_client()
        i = 0
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                stored = client.remember(self.palace, f"note {i} written under load")
                self.acked.append((sent, time.monotonic(), stored.drawer_id))
            except p.TrustyError as exc:
                self.errors.append(exc.message)
            i += 1
        client.close()

    def __enter__(self) -> WriteLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "a write hung"

    def recovery_after(self, moment: float) -> float:
        """Seconds from ``moment`` to the answer of the first write sent after it."""
        return min(answered for sent, answered, _ in self.acked if sent > moment) - moment

    def lost(self, client: Client) -> set[str]:
        stored = {d.drawer_id for d in client.list(self.palace, limit=100_000).drawers}
        return {drawer for _, _, drawer in self.acked} - stored


REQUEST_DEADLINE_S = 30.0  # [broker] request_timeout_s: how long a request may wait


def assert_no_write_errors(load: WriteLoad, recovery_s: float) -> None:
    """Not one write may fail across a ``kill -9``: the load has one write in flight at a
    time, the client sends a request again when its connection comes back, and a request
    waits for its palace in the daemon up to its deadline (30 s). So while the outage
    (measured: the first write sent after the kill answered ``recovery_s`` later) is
    inside that deadline, a failed write is a defect, not bad luck: the bound is 0. An
    outage past the deadline is a failure on its own, said as such."""
    assert recovery_s < REQUEST_DEADLINE_S, f"recovered after {recovery_s:.1f} s"
    assert load.errors == [], f"{len(load.errors)} writes failed: {load.errors[:5]}"


def palaces_in_home(exec_in: list[str]) -> set[str]:
    """The palaces in a container's home ``/data`` (``exec_in``: ``docker exec NAME`` or
    the like), read positively: ``/data`` must be there and listable (an ``ls`` that
    fails fails the test), and ``palaces/`` is read when the home has one."""
    home = subprocess.run([*exec_in, "ls", "-A", "/data"], capture_output=True, text=True,
                          timeout=60, env=CLASSIC)  # fmt: skip
    assert home.returncode == 0, f"{exec_in}: ls /data: {home.stderr}"
    if "palaces" not in home.stdout.split():
        return set()
    listed = subprocess.run([*exec_in, "ls", "/data/palaces"], capture_output=True, text=True,
                            timeout=60, env=CLASSIC)  # fmt: skip
    assert listed.returncode == 0, f"{exec_in}: ls /data/palaces: {listed.stderr}"
    return set(listed.stdout.split())


def test_kill_9_of_the_daemon_under_write_load_loses_nothing_acknowledged(container):
    with container.client() as client:
        client.palace_create("loaded")
    with WriteLoad(container.client, "loaded") as load:
        wait_until(lambda: len(load.acked) >= 30, 120, "30 acknowledged writes")
        pid = int(container.inspect("{{.State.Pid}}"))
        assert "trusty_memory.broker" in Path(f"/proc/{pid}/cmdline").read_text()
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)  # the container's PID 1: the container dies with it
        before = len(load.acked)
        # `restart: on-failure` brings it back (exit 137); the writes go on
        wait_until(lambda: len(load.acked) >= before + 30, 300,
                   f"writes after the restart: {load.errors[-3:]} {container.logs()}")  # fmt: skip
    assert int(container.inspect("{{.RestartCount}}")) >= 1
    FIGURES["daemon_kill_9"] = {
        "acknowledged": len(load.acked),
        "errors": len(load.errors),
        "recovery_s": round(load.recovery_after(killed_at), 1),
    }
    with container.client() as client:
        lost = load.lost(client)
    assert not lost, f"{len(lost)} acknowledged writes lost"
    assert_no_write_errors(load, load.recovery_after(killed_at))


# -- the compose stack ------------------------------------------------------------------


def compose_command() -> list[str]:
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    if plugin.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("no compose: neither `docker compose` nor docker-compose (apt-get install"
                " docker-compose)")  # fmt: skip


def compose_on_the_host_network(folder: Path) -> Path:
    """deploy/compose.yaml with two changes only, copied to ``folder``: no ``ports`` (the
    host network publishes nothing, and docker-compose 1.x refuses ports with it; an
    override cannot remove a list) and the build context made absolute (the copy lives
    elsewhere). Everything else is the recipe's, checked here."""
    recipe = yaml.safe_load(COMPOSE.read_text())
    copy = yaml.safe_load(COMPOSE.read_text())
    for service in copy["services"].values():
        service.pop("ports", None)
        if "build" in service:
            service["build"]["context"] = str(
                (COMPOSE.parent / service["build"]["context"]).resolve()
            )
    for name, service in copy["services"].items():
        original = recipe["services"][name]
        assert {k: v for k, v in service.items() if k not in ("ports", "build")} == {
            k: v for k, v in original.items() if k not in ("ports", "build")
        }
    assert {k: v for k, v in copy.items() if k != "services"} == {
        k: v for k, v in recipe.items() if k != "services"
    }
    path = folder / "compose.yaml"
    path.write_text(yaml.safe_dump(copy, sort_keys=False))
    return path


class Stack:
    """deploy/compose.yaml (less its ``ports``), with an override for this machine: the host
    network, so the frontend and the backend on loopback ports and the worker dialling the
    backend there; the secrets from the test's key files; an image tag of the test's."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.project = f"tmcompose{os.getpid()}"
        self.frontend = f"tcp://127.0.0.1:{free_port()}"
        self.backend = f"tcp://127.0.0.1:{free_port()}"
        self.dir = _short_tmp("tmo-")
        self.compose = compose_on_the_host_network(self.dir)
        self.override = self.dir / "override.yaml"
        files = keys.files
        self.override.write_text(json.dumps({
            "services": {
                "daemon": {
                    "image": "trusty-memory:compose-test",
                    "build": {"network": "host"},
                    "network_mode": "host",
                    "environment": {
                        "TRUSTY_MEMORY_BROKER_FRONTEND": self.frontend,
                        "TRUSTY_MEMORY_BROKER_BACKEND": self.backend,
                        "TRUSTY_MEMORY_DAEMON": self.frontend,
                    },
                },
                "worker": {
                    "image": "trusty-memory:compose-test",
                    "network_mode": "host",
                    "command": ["worker", "--broker", self.backend, "--palace", "team"],
                    "environment": {"TRUSTY_MEMORY_DAEMON": self.frontend},
                },
            },
            "secrets": {
                "server_secret_key": {"file": f"{files}/keys/server.key_secret"},
                "client_keys": {"file": f"{files}/keys/clients"},
                "healthcheck_client_secret_key": {"file": f"{files}/keys/client.key_secret"},
                "worker_client_secret_key": {"file": f"{files}/worker/keys/client.key_secret"},
            },
        }, indent=2))  # fmt: skip
        self.env = {**CLASSIC, "TRUSTY_MEMORY_SERVER_KEY": keys.server_key,
                    "TRUSTY_MEMORY_UID": "10001"}  # fmt: skip
        self.command = [*compose_command(), "-f", str(self.compose), "-f", str(self.override),
                        "-p", self.project]  # fmt: skip

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run([*self.command, *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip
        assert done.returncode == 0, f"compose {' '.join(args)}: {done.stderr[-4000:]}"
        return done

    def container(self, service: str) -> str:
        return self("ps", "-q", service).stdout.strip()

    def client(self) -> Client:
        return Client(self.keys.config(self.frontend))

    def remote_writer(self) -> dict | None:
        with self.client() as client:
            for service in client.status()["services"]:
                if service["name"] == "palace:team":
                    return next((w for w in service["workers"] if w["role"] == "writer"), None)
        return None

    def logs(self) -> str:
        done = subprocess.run([*self.command, "logs", "--tail", "20"], env=self.env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        return done.stdout[-4000:]


@pytest.fixture(scope="module")
def stack(image, keys, base) -> Iterator[Stack]:
    stack = Stack(keys)
    try:
        started = time.monotonic()
        with serving(base):  # the build is the image test's, from the cache
            done = stack("up", "-d", "--build", timeout=5000)
        FIGURES["compose_up_s"] = round(time.monotonic() - started, 1)
        said = done.stdout + done.stderr
        FIGURES["compose_build_steps_cached"] = (
            f"{said.count('Using cache')} of {said.count('Step ')}"
        )
        yield stack
    finally:
        subprocess.run([*stack.command, "down", "-v", "--timeout", "30"], env=stack.env,
                       capture_output=True, timeout=300)  # fmt: skip
        shutil.rmtree(stack.dir, ignore_errors=True)


def test_compose_runs_the_daemon_and_a_remote_worker(stack, keys):
    wait_until(lambda: cli(keys.client, "status", "--daemon", stack.frontend, "--server-key",
                           keys.server_key).returncode == 0, 240,
               f"the compose daemon to answer: {stack.logs()}")  # fmt: skip
    writer = wait_until(stack.remote_writer, 120, f"the remote worker: {stack.logs()}")
    assert writer["remote"] is True
    worker_id, daemon_id = stack.container("worker"), stack.container("daemon")
    assert worker_id and daemon_id and worker_id != daemon_id
    with stack.client() as client:
        stored = client.remember("team", "the on-call phone is in the drawer").drawer_id
        assert client.recall("team", "where is the on-call phone?").results[0].drawer_id == stored
    # the palace's files are in the worker's container, not the daemon's
    assert "team" in palaces_in_home(["docker", "exec", worker_id])
    assert "team" not in palaces_in_home(["docker", "exec", daemon_id])
    for service in (daemon_id, worker_id):
        wait_until(
            lambda s=service: docker("inspect", "--format", "{{.State.Health.Status}}",
                                     s).stdout.strip() == "healthy", 150,
            f"{service} healthy",
        )  # fmt: skip


def test_compose_kill_9_of_the_worker_container_loses_nothing_acknowledged(stack):
    wait_until(stack.remote_writer, 120, "the remote worker")
    worker_id = stack.container("worker")
    with WriteLoad(stack.client, "team") as load:
        wait_until(lambda: len(load.acked) >= 30, 120, "30 acknowledged writes")
        pid = int(docker("inspect", "--format", "{{.State.Pid}}", worker_id).stdout)
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)  # the worker container's init: the container dies
        before = len(load.acked)
        wait_until(lambda: len(load.acked) >= before + 30, 300,
                   f"writes after its return: {load.errors[-3:]} {stack.logs()}")  # fmt: skip
    restarts = docker("inspect", "--format", "{{.RestartCount}}", worker_id).stdout.strip()
    assert int(restarts) >= 1
    FIGURES["worker_container_kill_9"] = {
        "acknowledged": len(load.acked),
        "errors": len(load.errors),
        "recovery_s": round(load.recovery_after(killed_at), 1),
    }
    with stack.client() as client:
        lost = load.lost(client)
    assert not lost, f"{len(lost)} acknowledged writes lost"
    assert_no_write_errors(load, load.recovery_after(killed_at))
    assert stack.remote_writer()["remote"] is True


# -- deploy/k8s/ played by podman --------------------------------------------------------

K8S = REPO / "deploy" / "k8s"


class Podman:
    """Root podman with a containers.conf of the test's own (``CONTAINERS_CONF``): ``runc``
    (crun 1.8 refuses this machine's hybrid cgroups: "cgroups in hybrid mode not
    supported"), ``cgroupfs`` (no systemd), and no default ulimits (podman asks for
    ``RLIMIT_NOFILE``/``RLIMIT_NPROC`` above this sandbox's hard limits, which the runtime
    may not raise: "setrlimit `RLIMIT_NPROC`: Operation not permitted"); containers
    inherit the host's limits instead. Nothing else differs from a stock root podman."""

    def __init__(self) -> None:
        self.dir = _short_tmp("tmp-")
        conf = self.dir / "containers.conf"
        conf.write_text('[containers]\ndefault_ulimits = []\n'
                        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n')  # fmt: skip
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def __call__(self, *args: str, timeout: float = 120, check: bool = True,
                 input: str | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, input=input)  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: {done.stderr.strip()[-3000:]}")
        return done


def manifests_for_podman(frontend: str, backend: str, image: str) -> list[dict]:
    """``deploy/k8s/*.yaml`` as podman 4.3 (Debian 12) can play them, every change made
    here and nothing else:

    * Services are dropped: podman plays none (no cluster DNS, no virtual IP), so the
      names ``trusty-memory-broker`` and the worker's headless Service do not resolve;
      every address becomes a loopback one on the host network (``--network host``: the
      pods share the host's network namespace; the manifests' ``hostNetwork`` is not set);
      the broker's frontend and backend move to free ports (``0.0.0.0:7601/7602`` would
      take fixed ports on every interface);
    * the StatefulSet (a kind podman 4.3 does not play: "YAML document does not contain
      any supported kube kind") becomes its ordinal 0: a Pod ``NAME-0`` from its template,
      with ``restartPolicy: Always`` as a StatefulSet's pods have, and its volume claim
      template ``home`` a PersistentVolumeClaim ``home-NAME-0`` (a podman named volume);
    * the containers' ``ports`` are dropped (podman 4.3: "PortMappings can only be used
      with Bridge or slirp4netns networking"; on the host network they publish nothing);
    * each secret volume says ``optional: false`` (podman 4.3 dereferences a missing
      ``optional`` and panics in ``VolumeFromSecret``), which is Kubernetes' default;
    * the image is the test's build.
    """
    played: list[dict] = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "Service":
                continue
            if doc["kind"] == "StatefulSet":
                name = doc["metadata"]["name"]
                pod_spec = doc["spec"]["template"]["spec"]
                pod_spec.setdefault("restartPolicy", "Always")
                for claim in doc["spec"]["volumeClaimTemplates"]:
                    claim_name = f"{claim['metadata']['name']}-{name}-0"
                    played.append(
                        {
                            "apiVersion": "v1",
                            "kind": "PersistentVolumeClaim",
                            "metadata": {"name": claim_name},
                            "spec": claim["spec"],
                        }
                    )
                    pod_spec["volumes"].append(
                        {
                            "name": claim["metadata"]["name"],
                            "persistentVolumeClaim": {"claimName": claim_name},
                        }
                    )
                doc = {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {**doc["spec"]["template"]["metadata"], "name": f"{name}-0"},
                       "spec": pod_spec}  # fmt: skip
            spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc["spec"]
            for volume in spec["volumes"]:
                if "secret" in volume:
                    volume["secret"]["optional"] = False
            for container in spec["containers"]:
                container["image"] = image
                container.pop("ports", None)  # podman 4.3 refuses them with the host network
                container["args"] = [a.replace("tcp://trusty-memory-broker:7602", backend)
                                     for a in container["args"]]  # fmt: skip
                for env in container["env"]:
                    value = env.get("value", "")
                    value = value.replace("tcp://0.0.0.0:7601", frontend)
                    value = value.replace("tcp://0.0.0.0:7602", backend)
                    value = value.replace("tcp://127.0.0.1:7601", frontend)
                    value = value.replace("tcp://trusty-memory-broker:7601", frontend)
                    if "value" in env:
                        env["value"] = value
            played.append(doc)
    text = yaml.safe_dump_all(played)
    assert "trusty-memory-broker:" not in text and ":7601" not in text and ":7602" not in text
    return played


class K8sKeys:
    """Key homes made as deploy/README.md ("Kubernetes") makes them: ``KEYS/broker`` (the
    server pair, the probes' client pair) and ``KEYS/palace-notes`` (the worker's pair),
    ``probe`` and ``palace-notes`` allowed in; plus a host client ``host``, allowed too."""

    def __init__(self) -> None:
        self.dir = _short_tmp("tmq-")
        self.broker, self.palace = self.dir / "broker", self.dir / "palace-notes"
        self.client = _short_tmp("tmc-")
        for home in (self.broker, self.palace, self.client):
            assert cli(home, "keys", "init").returncode == 0
        for name, home in (("probe", self.broker), ("palace-notes", self.palace),
                           ("host", self.client)):  # fmt: skip
            key = cli(home, "keys", "show", "--client").stdout.strip()
            assert cli(self.broker, "keys", "add", name, key).returncode == 0
        self.server_key = cli(self.broker, "keys", "show", "--server").stdout.strip()

    def secrets(self) -> list[dict]:
        """What ``deploy/k8s/secrets.sh --print KEYS`` makes (kubectl's YAML)."""
        done = subprocess.run([str(K8S / "secrets.sh"), "--print", str(self.dir)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
        return [d for d in yaml.safe_load_all(done.stdout) if d]

    def config(self, endpoint: str) -> Config:
        return host_config(self.client, endpoint, self.server_key)

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.client, ignore_errors=True)


class Kube:
    """deploy/k8s/ played by ``podman kube play`` (``manifests_for_podman``), the Secrets
    made by ``secrets.sh`` and created as podman secrets, the image moved over from Docker
    (``docker save | podman load``: the same image, not a second build)."""

    BROKER_POD = "trusty-memory-broker-pod-0"  # podman names a Deployment's pod NAME-pod-0
    WORKER_POD = "trusty-memory-palace-notes-0"

    def __init__(self, podman: Podman, keys: K8sKeys, image: str) -> None:
        self.podman, self.keys = podman, keys
        self.frontend = f"tcp://127.0.0.1:{free_port()}"
        self.backend = f"tcp://127.0.0.1:{free_port()}"
        self.image = image
        self.file = podman.dir / "k8s.yaml"
        self.secret_names: list[str] = []

    def container(self, pod: str, name: str) -> str:
        return f"{pod}-{name}"

    def create_secrets(self) -> None:
        """Each Secret of ``secrets.sh`` as a podman secret in Kubernetes' own format, its
        ``data`` decoded first: podman 4.3 writes a ``data`` value into the mounted file as
        it stands (still base64, checked in the test), so the files it mounts are the
        key files themselves only when the secret holds them as plain text."""
        import base64

        for doc in self.keys.secrets():
            if doc["kind"] == "ConfigMap":
                self.configmap = doc
                continue
            assert doc["kind"] == "Secret"
            plain = {k: base64.b64decode(v).decode() for k, v in doc["data"].items()}
            body = {"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": doc["metadata"]["name"]}, "data": plain}  # fmt: skip
            name = doc["metadata"]["name"]
            self.podman("secret", "create", name, "-", input=yaml.safe_dump(body))
            self.secret_names.append(name)

    def play(self) -> None:
        docs = [self.configmap, *manifests_for_podman(self.frontend, self.backend, self.image)]
        self.file.write_text(yaml.safe_dump_all(docs))
        self.podman("kube", "play", "--network", "host", str(self.file), timeout=300)

    def pid(self, container: str) -> int:
        return int(self.podman("inspect", "--format", "{{.State.Pid}}", container).stdout)

    def logs(self, container: str) -> str:
        done = self.podman("logs", "--tail", "20", container, check=False)
        return (done.stdout + done.stderr)[-3000:]

    def client(self) -> Client:
        return Client(self.keys.config(self.frontend))

    def remote_roles(self) -> set[str]:
        with self.client() as client:
            for service in client.status()["services"]:
                if service["name"] == "palace:notes":
                    return {w["role"] for w in service["workers"] if w.get("remote")}
        return set()

    def down(self) -> None:
        if self.file.exists():
            self.podman("kube", "down", str(self.file), check=False, timeout=300)
        for pod in (self.BROKER_POD, self.WORKER_POD):
            self.podman("pod", "rm", "-f", "-t", "30", pod, check=False, timeout=300)
        for name in self.secret_names:
            self.podman("secret", "rm", name, check=False)


@pytest.fixture(scope="module")
def kube(image) -> Iterator[Kube]:
    if shutil.which("podman") is None:
        pytest.fail("no podman (apt-get install podman)")
    podman = Podman()
    volumes_before = set(podman("volume", "ls", "-q").stdout.split())
    started = time.monotonic()
    saved = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, env=CLASSIC)
    loaded = subprocess.run(["podman", "load"], stdin=saved.stdout, env=podman.env,
                            capture_output=True, text=True, timeout=900)  # fmt: skip
    saved.stdout.close()
    assert saved.wait(timeout=60) == 0 and loaded.returncode == 0, loaded.stderr
    FIGURES["podman_load_s"] = round(time.monotonic() - started, 1)
    version = podman("version", "--format", "{{.Client.Version}}").stdout.strip()
    FIGURES["podman"] = f"podman {version}, root, runc, cgroupfs, --network host"
    keys = K8sKeys()
    box = Kube(podman, keys, f"localhost/{image}")
    try:
        box.create_secrets()
        started = time.monotonic()
        box.play()
        wait_until(lambda: cli(keys.client, "status", "--daemon", box.frontend, "--server-key",
                               keys.server_key).returncode == 0, 240,
                   f"the broker pod to answer: {box.logs(box.BROKER_POD + '-broker')}")  # fmt: skip
        FIGURES["kube_play_to_status_s"] = round(time.monotonic() - started, 1)
        yield box
    finally:
        box.down()
        for volume in set(podman("volume", "ls", "-q").stdout.split()) - volumes_before:
            podman("volume", "rm", "-f", volume, check=False)
        left = set(podman("volume", "ls", "-q").stdout.split()) - volumes_before
        keys.cleanup()
        shutil.rmtree(podman.dir, ignore_errors=True)
        assert not left, f"volumes left behind: {left}"


def test_k8s_played_by_podman_serves_a_palace_over_curve_and_survives_kill_9(kube):
    """deploy/k8s/ in two pods (the broker's Deployment, the palace's StatefulSet as its
    ordinal 0): the worker and the reader register with the broker over CURVE with their
    Secret's key; an MCP session on the host (``serve --daemon tcp://...``, the official
    SDK) remembers and recalls, the palace's files landing on the worker's volume; then
    ``kill -9`` of the broker's process (its container's PID 1) under a stream of writes:
    podman restarts the container (the pod's ``restartPolicy: Always``), the worker
    registers again, the writes go on, and every acknowledged drawer is in the palace."""
    broker = kube.container(kube.BROKER_POD, "broker")
    worker = kube.container(kube.WORKER_POD, "worker")
    reader = kube.container(kube.WORKER_POD, "reader")
    wait_until(lambda: kube.remote_roles() >= {"writer", "reader"}, 180,
               f"the worker and the reader to register: {kube.logs(worker)}")  # fmt: skip
    # The Secrets mounted as the key files themselves (podman 4.3 would mount base64 text
    # from kubectl's `data`; see Kube.create_secrets), and the pods' uid the manifests'.
    mounted = kube.podman("exec", broker, "cat",
                          "/run/secrets/trusty-memory/server/server.key_secret").stdout  # fmt: skip
    assert mounted == (kube.keys.broker / "keys" / "server.key_secret").read_text()
    for container in (broker, worker, reader):
        ids = kube.podman("exec", container, "sh", "-c", "id -u; id -g").stdout.split()
        assert ids == ["10001", "10001"], (container, ids)
    assert "trusty_memory.broker" in Path(f"/proc/{kube.pid(broker)}/cmdline").read_text()

    async def round_trip() -> str:
        flags = ("--palace", "notes", "--daemon", kube.frontend,
                 "--server-key", kube.keys.server_key)  # fmt: skip
        async with serve_session(kube.keys.client, *flags) as session:
            stored = tool_json(await session.call_tool(
                "memory_remember", {"text": "the pager rota is pinned in the wiki"}))  # fmt: skip
            assert stored["status"] == "stored" and stored["palace"] == "notes"
            found = tool_json(await session.call_tool(
                "memory_recall", {"query": "where is the pager rota?"}))  # fmt: skip
            assert found["results"][0]["drawer_id"] == stored["drawer_id"]
            return stored["drawer_id"]

    asyncio.run(round_trip())
    # The palace is on the worker's volume (the claim's), and not in the broker's home.
    exec_in = ["podman", "exec"]
    with_conf = ["env", f"CONTAINERS_CONF={kube.podman.env['CONTAINERS_CONF']}", *exec_in]
    assert "notes" in palaces_in_home([*with_conf, worker])
    assert "notes" not in palaces_in_home([*with_conf, broker])
    assert not (kube.keys.client / "palaces" / "notes").exists()

    with WriteLoad(kube.client, "notes") as load:
        wait_until(lambda: len(load.acked) >= 30, 120, "30 acknowledged writes")
        pid = kube.pid(broker)
        assert "trusty_memory.broker" in Path(f"/proc/{pid}/cmdline").read_text()
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)  # the broker container's PID 1: the container dies
        before = len(load.acked)
        wait_until(lambda: len(load.acked) >= before + 30, 300,
                   f"writes after the restart: {load.errors[-3:]} {kube.logs(broker)}")  # fmt: skip
    restarts = kube.podman("inspect", "--format", "{{.RestartCount}}", broker).stdout.strip()
    assert int(restarts) >= 1
    recovery = load.recovery_after(killed_at)
    FIGURES["k8s_broker_kill_9"] = {
        "acknowledged": len(load.acked),
        "errors": len(load.errors),
        "recovery_s": round(recovery, 1),
    }
    with kube.client() as client:
        lost = load.lost(client)
    assert not lost, f"{len(lost)} acknowledged writes lost"
    assert_no_write_errors(load, recovery)
    wait_until(lambda: kube.remote_roles() >= {"writer", "reader"}, 120, "both registered again")
