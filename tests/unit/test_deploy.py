"""deploy/: the Kubernetes manifests against the Kubernetes schemas (kubernetes-validate, offline; `kubectl apply
--dry-run=client` needs an API server this machine does not have), the compose file's shape (no Docker Compose here:
parsed as YAML), the Dockerfile's user and extra, and both configs loaded by the daemon's own config reader."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from compozy_base.config.loader import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = DEPLOY / "kubernetes" / "compozy.yaml"
NODES = ("node1", "node2", "node3")


def manifests() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFESTS.read_text()) if doc}


def test_the_manifests_pass_the_kubernetes_schemas() -> None:
    validate = pytest.importorskip("kubernetes_validate")
    docs = [doc for doc in yaml.safe_load_all(MANIFESTS.read_text()) if doc]
    assert len(docs) == 5
    for doc in docs:
        validate.validate(doc, validate.latest_version(), strict=True)  # raises on any schema error


def test_a_statefulset_with_a_volume_per_pod_probes_and_the_token_from_a_secret() -> None:
    found = manifests()
    secret, statefulset = found["Secret"], found["StatefulSet"]
    assert {"COMPOZY_CLUSTER_TOKEN", "DATABASE_URL", "REDIS_URL"} <= set(secret["stringData"])
    spec = statefulset["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == "compozy-nodes"
    claim = spec["volumeClaimTemplates"][0]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    container = pod["containers"][0]
    assert {"name": claim["metadata"]["name"], "mountPath": "/var/lib/compozy"} in container["volumeMounts"]
    assert container["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}}]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    node_id = next(e for e in container["env"] if e["name"] == "COMPOZY_NODE_ID")
    assert node_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_the_compose_file_runs_three_nodes_with_volumes_of_their_own_on_postgres_and_redis() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "redis", *NODES}
    homes = set()
    for name in NODES:
        node = services[name]
        assert node["environment"]["COMPOZY_NODE_ID"] == name
        assert {"DATABASE_URL", "REDIS_URL", "COMPOZY_CLUSTER_TOKEN"} <= set(node["environment"])
        assert node["environment"]["DATABASE_URL"].startswith("postgresql://") and "@postgres:" in \
            node["environment"]["DATABASE_URL"]
        volume = next(v for v in node["volumes"] if v.endswith(":/var/lib/compozy"))
        homes.add(volume.split(":")[0])
        assert "/readyz" in " ".join(node["healthcheck"]["test"])
        assert set(node["depends_on"]) == {"postgres", "redis"}
    assert homes == set(NODES) and homes <= set(compose["volumes"])
    assert "COMPOZY_SESSIONS_DIR" not in (DEPLOY / "compose.yaml").read_text()  # nothing shared on disk


def test_the_image_runs_as_a_user_of_its_own_with_the_scale_extra() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert "'.[scale]'" in dockerfile
    assert re.search(r"^ENTRYPOINT .*compozy-entrypoint", dockerfile, re.MULTILINE)
    assert (DEPLOY / "entrypoint.sh").stat().st_mode & 0o111


@pytest.mark.parametrize("source", ["compose", "kubernetes"])
def test_the_shipped_configs_load_with_no_unknown_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      source: str) -> None:
    for name in ("COMPOZY_HTTP_PORT", "COMPOZY_HTTP_HOST", "COMPOZY_NODE_ID"):
        monkeypatch.delenv(name, raising=False)
    text = ((DEPLOY / "config.toml").read_text() if source == "compose"
            else manifests()["ConfigMap"]["data"]["config.toml"])
    (tmp_path / "config.toml").write_text(text.replace("@NODE_ID@", "node1"))  # as the entrypoint does
    config = load_config(tmp_path)
    assert config.unknown_keys == ()
    assert config.http_allow_remote and config.http_host == "0.0.0.0"
    assert "node1" in config.cluster.advertise_url
