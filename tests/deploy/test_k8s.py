"""The Kubernetes manifests (deploy/k8s/) and the script that makes their Secrets.

Every object is validated by kubernetes-validate against the Kubernetes API's own schemas
(bundled with it, strict: an unknown field fails too), and the layout is checked across
the objects: the broker without palace workers of its own, the workers dialling the
broker's Service with the server's public key, each worker's volume as its home, every
key file a variable names present in the Secret mounted there. ``secrets.sh`` runs for
real (``kubectl`` needs no cluster for ``--dry-run=client``) on keys in the format
``trusty-memory keys`` writes (pyzmq's ``zmq.auth.create_certificates``).

Covers: deploy/k8s/broker.yaml deploy/k8s/palace-notes.yaml deploy/k8s/secrets.sh
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
import zmq.auth

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
SECRETS_SH = K8S / "secrets.sh"
VERSION = "1.30"  # the oldest Kubernetes still maintained when these were written
FRONTEND, BACKEND = 7601, 7602


def objects() -> list[dict]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def one(kind: str, name: str | None = None, docs=None) -> dict:
    matches = [
        o for o in (docs or objects())
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]  # fmt: skip
    assert len(matches) == 1, (kind, name, len(matches))
    return matches[0]


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def problems(docs: list[dict], version: str = VERSION) -> list[str]:
    found = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            found.append(f"{doc['kind']}/{doc['metadata']['name']}: {path}: {exc.message}")
    return found


@pytest.mark.parametrize("version", [VERSION, "1.37"])
def test_every_object_follows_the_kubernetes_schema(version):
    docs = objects()
    assert sorted(d["kind"] for d in docs) == ["Deployment", "Service", "Service", "StatefulSet"]
    assert problems(docs, version) == []


def test_the_validator_catches_broken_objects():
    docs = objects()
    deployment = copy.deepcopy(one("Deployment", docs=docs))
    deployment["spec"]["replicas"] = "one"
    statefulset = copy.deepcopy(one("StatefulSet", docs=docs))
    statefulset["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    said = problems([deployment, statefulset])
    assert len(said) == 2
    assert "replicas" in said[0] and "livenesProbe" in said[1]


def test_the_broker_serves_no_palace_itself():
    deployment = one("Deployment", "trusty-memory-broker")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    (broker,) = pod["containers"]
    assert broker["args"] == ["daemon"]
    env = env_of(broker)
    assert env["TRUSTY_MEMORY_LOCAL_WORKERS"] == "0"
    assert env["TRUSTY_MEMORY_BROKER_FRONTEND"] == f"tcp://0.0.0.0:{FRONTEND}"
    assert env["TRUSTY_MEMORY_BROKER_BACKEND"] == f"tcp://0.0.0.0:{BACKEND}"
    assert {p["name"]: p["containerPort"] for p in broker["ports"]} == {
        "frontend": FRONTEND, "backend": BACKEND,
    }  # fmt: skip
    service = one("Service", "trusty-memory-broker")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"frontend": (FRONTEND, "frontend"), "backend": (BACKEND, "backend")}


def test_each_palace_worker_owns_its_palace_on_its_volume():
    statefulset = one("StatefulSet")
    name = statefulset["metadata"]["name"]
    palace = statefulset["metadata"]["labels"]["trusty-memory/palace"]
    assert name == f"trusty-memory-palace-{palace}"
    spec = statefulset["spec"]
    assert spec["replicas"] == 1  # one writer per palace
    headless = one("Service", spec["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    worker, reader = spec["template"]["spec"]["containers"]
    broker = one("Service", "trusty-memory-broker")["metadata"]["name"]
    assert worker["args"] == ["worker", "--broker", f"tcp://{broker}:{BACKEND}", "--palace", palace]
    env = env_of(worker)
    # The broker's key from the environment, which `worker` reads as `--server-key`: no
    # $(VAR) in args, which podman's `kube play` passes on unexpanded.
    assert "$(" not in " ".join(worker["args"])
    assert env["TRUSTY_MEMORY_SERVER_KEY"] == {
        "configMapKeyRef": {"name": "trusty-memory", "key": "TRUSTY_MEMORY_SERVER_KEY"}
    }
    assert env["TRUSTY_MEMORY_DAEMON"] == f"tcp://{broker}:{FRONTEND}"
    (claim,) = spec["volumeClaimTemplates"]
    mount = next(m for m in worker["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    assert env["TRUSTY_MEMORY_HOME"] == mount["mountPath"] == "/data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "TRUSTY_MEMORY_LOCAL_WORKERS" not in env
    # The reader beside it: the same palace, key and volume (it reads the writer's files).
    assert reader["args"] == [*worker["args"], "--reader"]
    assert env_of(reader) == env
    assert reader["volumeMounts"] == worker["volumeMounts"]


def pods() -> list[dict]:
    return [o["spec"]["template"]["spec"] for o in objects() if "template" in o["spec"]]


def test_every_container_is_probed_and_unprivileged():
    for pod in pods():
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
        assert security["fsGroup"] == security["runAsGroup"]
        for container in pod["containers"]:
            for probe in ("livenessProbe", "readinessProbe"):
                assert container[probe]["exec"]["command"] == ["trusty-memory", "status"]
            assert container[probe]["timeoutSeconds"] >= 10  # a Python start under load
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert container["image"].startswith("trusty-memory:")


def mounted_secrets(pod: dict, container: dict) -> dict[str, dict]:
    """mount path -> the secret volume mounted there."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {
        m["mountPath"]: volumes[m["name"]]["secret"]
        for m in container["volumeMounts"]
        if "secret" in volumes.get(m["name"], {})
    }


def secret_files() -> list[tuple[str, str, str]]:
    """(variable, secret name, key in it) for every key file a container is told of."""
    found = []
    for pod in pods():
        for container in pod["containers"]:
            secrets = mounted_secrets(pod, container)
            for variable, value in env_of(container).items():
                if not variable.endswith(("_SECRET_FILE", "_KEYS_DIR")):
                    continue
                folder, _, key = value.rpartition("/")
                if variable.endswith("_KEYS_DIR"):
                    folder, key = value, ""
                assert folder in secrets, f"{variable}={value} is in no secret mount"
                secret = secrets[folder]
                assert secret["defaultMode"] == 0o440  # group-readable: fsGroup
                found.append((variable, secret["secretName"], key))
    return found


def test_key_files_come_from_secrets():
    files = secret_files()
    variables = sorted({v for v, _, _ in files})
    assert variables == [
        "TRUSTY_MEMORY_CLIENT_KEYS_DIR",
        "TRUSTY_MEMORY_CLIENT_SECRET_FILE",
        "TRUSTY_MEMORY_SERVER_SECRET_FILE",
    ]
    for pod in pods():
        for container in pod["containers"]:
            for item in container["env"]:
                assert "secretKeyRef" not in item.get("valueFrom", {}), "keys go in files"


def make_keys(root: Path, palaces: list[str], allow: list[str]) -> None:
    """Key homes as `trusty-memory keys init` leaves them (pyzmq's certificate files)."""
    broker = root / "broker" / "keys"
    (broker / "clients").mkdir(parents=True)
    zmq.auth.create_certificates(broker, "server")
    zmq.auth.create_certificates(broker, "client")
    for palace in palaces:
        folder = root / f"palace-{palace}" / "keys"
        folder.mkdir(parents=True)
        zmq.auth.create_certificates(folder, "client")
    for name in allow:  # keys add NAME PUBLIC_KEY
        home = root / ("broker" if name == "probe" else name) / "keys"
        shutil.copy(home / "client.key", broker / "clients" / f"{name}.key")
    zmq.auth.create_certificates(broker / "clients", "alice")
    (broker / "clients" / "alice.key_secret").unlink()  # a team member's public key only


def run_secrets(keys: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SECRETS_SH), "--print", str(keys)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl")


@needs_kubectl
def test_secrets_sh_makes_every_secret_the_manifests_read(tmp_path):
    make_keys(tmp_path, ["notes"], allow=["probe", "palace-notes"])
    done = run_secrets(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # every identity is allowed in: no warning
    made = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert problems(made) == []
    secrets = {d["metadata"]["name"]: d for d in made if d["kind"] == "Secret"}
    for variable, name, key in secret_files():
        assert name in secrets, f"{variable}: no Secret {name}"
        if key:
            assert key in secrets[name]["data"], f"{variable}: {name} has no {key}"
    for pod in pods():
        for volume in pod["volumes"]:
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets
    assert sorted(secrets["trusty-memory-clients"]["data"]) == [
        "alice.key", "palace-notes.key", "probe.key",
    ]  # fmt: skip
    config = one("ConfigMap", docs=made)
    public, _ = zmq.auth.load_certificate(tmp_path / "broker" / "keys" / "server.key")
    assert config["data"]["TRUSTY_MEMORY_SERVER_KEY"] == public.decode()
    # the server's secret key is in the server's Secret alone
    import base64

    server_secret = (tmp_path / "broker" / "keys" / "server.key_secret").read_bytes()
    holders = [n for n, s in secrets.items() if server_secret in
               [base64.b64decode(v) for v in s["data"].values()]]  # fmt: skip
    assert holders == ["trusty-memory-server"]


@needs_kubectl
def test_secrets_sh_says_what_is_missing(tmp_path):
    make_keys(tmp_path, ["notes"], allow=["probe"])
    done = run_secrets(tmp_path)
    assert done.returncode == 0
    assert "palace-notes's key is not allowed in: trusty-memory keys add palace-notes" in (
        done.stderr
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = run_secrets(empty)
    assert missing.returncode == 1
    assert "server.key_secret is missing: run TRUSTY_MEMORY_HOME=" in missing.stderr
    usage = subprocess.run(["bash", str(SECRETS_SH)], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and "usage:" in usage.stderr
