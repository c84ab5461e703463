"""TLS between nodes: two nodes with `[cluster] tls_cert`, `tls_key` and `ca` (a throwaway CA and node certificates
made here) serve HTTPS on their TCP port, advertise `https://` and route a session's work to each other over it,
verifying the peer against the CA; the cluster token is still required. A node that cannot verify its peer's
certificate sends it nothing and answers the request itself.

Skipped with the reason where PostgreSQL, Redis or the `cryptography` package is missing."""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import Daemon, start_daemon, wait_for
from tests.integration.test_scale import CLUSTER_CONFIG
from tests.shared_services import fresh_database, fresh_redis, require_postgres, require_redis

pytestmark = pytest.mark.timeout(300)

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

PEM = serialization.Encoding.PEM


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    path.chmod(0o600)


def make_ca(folder: Path, common: str = "compozy test CA") -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(common)).issuer_name(_name(common))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ca.pem").write_bytes(cert.public_bytes(PEM))
    return key, cert


def make_node_cert(folder: Path, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
                   node: str) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 and localhost, signed by the CA: (cert.pem, key.pem) in `folder`."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(node)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(PEM))
    _write_key(key, key_path)
    return cert_path, key_path


def tls_config(cert: Path, key: Path, ca: Path) -> str:
    return CLUSTER_CONFIG + f'tls_cert = "{cert}"\ntls_key = "{key}"\nca = "{ca}"\n'


def https(node: Daemon, ca: Path, **kwargs: object) -> httpx.Client:
    return httpx.Client(base_url=f"https://127.0.0.1:{node.port}", verify=ssl.create_default_context(cafile=str(ca)),
                        headers=node.auth, timeout=30, **kwargs)  # type: ignore[arg-type]


@dataclass
class TlsCluster:
    a: Daemon
    b: Daemon
    ca: Path
    start: Callable[[str, Path, Path, Path], Daemon]  # a node with its own certificate, key and CA bundle


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    require_postgres()
    require_redis()
    root = tmp_path_factory.mktemp("tls")
    ca_key, ca_cert = make_ca(root / "pki")
    ca = root / "pki" / "ca.pem"
    token = secrets.token_hex(24)
    started: list[Daemon] = []
    with fresh_database() as db_url, fresh_redis() as redis_url:
        def start(node: str, cert: Path, key: Path, bundle: Path) -> Daemon:
            env = {"DATABASE_URL": db_url, "REDIS_URL": redis_url, "COMPOZY_NODE_ID": node,
                   "COMPOZY_CLUSTER_TOKEN": token}
            daemon = start_daemon(root / node, extra_config=tls_config(cert, key, bundle), env_extra=env, timeout=120)
            started.append(daemon)
            return daemon

        try:
            a = start("node-a", *make_node_cert(root / "pki" / "node-a", ca_key, ca_cert, "node-a"), ca)
            b = start("node-b", *make_node_cert(root / "pki" / "node-b", ca_key, ca_cert, "node-b"), ca)
            yield TlsCluster(a, b, ca, start)
        finally:
            for daemon in reversed(started):
                daemon.stop()


def test_nodes_serve_https_advertise_it_and_route_work_to_each_other_over_it(tls: TlsCluster,
                                                                              workspace: Path) -> None:
    a, b, ca = tls.a, tls.b, tls.ca
    with https(a, ca) as on_a, https(b, ca) as on_b:
        nodes = {n["id"]: n for n in on_b.get("/api/status").json()["cluster"]["nodes"]}
        assert nodes["node-a"]["address"] == f"https://127.0.0.1:{a.port}"
        created = on_a.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace)},
                            headers={"x-compozy-placement": "here"})
        assert created.status_code == 201, created.text
        sid = created.json()["session"]["id"]
        workspace_id = created.json()["session"]["workspace_id"]
        wait_for(lambda: on_a.get(f"/api/sessions/{sid}").json()["session"]["state"] == "active", timeout=30,
                 what="the session active on A")
        # B holds no lease: the prompt goes to A over TLS, verified against the CA, with the cluster token.
        prompt = on_b.post(f"/api/workspaces/{workspace_id}/sessions/{sid}/prompt", json={"message": "stream 2"},
                           headers={"accept": "application/json"})
        assert prompt.status_code == 200, prompt.text
        assert prompt.headers["x-compozy-node"] == "node-a"
        read = on_b.get(f"/api/sessions/{sid}")
        assert read.status_code == 200 and read.headers["x-compozy-node"] == "node-a"

    # Plain HTTP on the TLS port is not served, and TLS does not stand in for the token.
    with pytest.raises(httpx.HTTPError), httpx.Client(base_url=f"http://127.0.0.1:{a.port}", timeout=5) as plain:
        plain.get("/healthz")
    with https(a, ca) as anonymous:
        anonymous.headers.pop("authorization")
        refused = anonymous.get("/api/status")
        assert refused.status_code == 401 and refused.json()["code"] == "auth_required"
        assert anonymous.get("/healthz").json() == {"status": "ok"}


def test_a_node_that_cannot_verify_its_peer_sends_it_nothing(tls: TlsCluster, tmp_path: Path,
                                                              workspace: Path) -> None:
    # Node C trusts another CA only: A's certificate fails verification, so C sends A neither the work nor the
    # cluster token, and answers itself (the owner named), the cause in its log.
    other_key, other_cert = make_ca(tmp_path / "other", "another CA")
    c = tls.start("node-c", *make_node_cert(tmp_path / "other", other_key, other_cert, "node-c"),
                  tmp_path / "other" / "ca.pem")
    with https(tls.a, tls.ca) as on_a:
        created = on_a.post("/api/sessions", json={"agent_name": "scripted", "workspace_path": str(workspace)},
                            headers={"x-compozy-placement": "here"})
        assert created.status_code == 201, created.text
        session = created.json()["session"]
        wait_for(lambda: on_a.get(f"/api/sessions/{session['id']}").json()["session"]["state"] == "active",
                 timeout=30, what="the session active on A")
    with https(c, tmp_path / "other" / "ca.pem") as on_c:
        answer = on_c.post(f"/api/workspaces/{session['workspace_id']}/sessions/{session['id']}/stop")
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "session_owned_elsewhere"
    assert "could not route" in c.log() and "CERTIFICATE_VERIFY_FAILED" in c.log()
    with https(tls.a, tls.ca) as on_a:
        assert on_a.get(f"/api/sessions/{session['id']}").json()["session"]["state"] == "active"
