"""The wire (docs/sync.md, "The wire"): obstore for the objects, boto3/botocore for the credential
chain, the probe and the listing; nothing of the sync speaks HTTP or signs a request itself. What
goes on the wire is checked through the test proxy (a real HTTP hop) on moto_server and SeaweedFS:
the conditional headers of ``create`` and ``replace``, the Range of a ``get``, and credentials
from boto3's chain when none are configured. The contract suite (tests/test_bucket_contract.py)
checks the answers on every backend."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from s3server import ACCESS_KEY, SECRET_KEY, S3, FaultProxy

from memlocal_sync.bucket import Bucket, BucketSettings, BucketUnavailable, PreconditionFailed

SYNC = Path(__file__).resolve().parents[1] / "memlocal_sync"
# Modules that would mean a hand-written HTTP client or signer.
PROTOCOL_MODULES = {"socket", "ssl", "http", "http.client", "hmac", "urllib3", "h11", "httpx", "requests"}


def _bucket(s3: S3, endpoint: str, *, keys: bool = True) -> Bucket:
    settings = BucketSettings(name=s3.bucket, source="test", endpoint=endpoint, region="us-east-1",
                              access_key_id=ACCESS_KEY if keys else None, secret_access_key=SECRET_KEY if keys else None)
    return Bucket(settings, timeout_s=5.0, attempts=2, deadline_s=10.0)


def test_nothing_in_the_sync_speaks_http_or_signs_requests() -> None:
    for path in sorted(SYNC.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name not in PROTOCOL_MODULES and name.split(".")[0] not in {"socket", "ssl", "hmac"}, \
                    f"{path.name} imports {name}"


@pytest.mark.s3_servers()
def test_conditions_and_ranges_go_on_the_wire(s3: S3, fault_proxy: FaultProxy) -> None:
    seen: list[tuple[str, str, dict[str, str]]] = []

    def record(method: str, path: str, headers: dict[str, str]) -> bool:
        seen.append((method, path, {k.lower(): v for k, v in headers.items()}))
        return False

    fault_proxy.before(record)
    b = _bucket(s3, fault_proxy.endpoint)
    try:
        key = "memory/p/mem-00000001.json"
        etag = b.create(key, b'{"a": 1}')
        with pytest.raises(PreconditionFailed):
            b.create(key, b'{"a": 2}')
        new = b.replace(key, b'{"a": 3}', etag)
        with pytest.raises(PreconditionFailed):
            b.replace(key, b'{"a": 4}', etag)
        assert b.get(key, 100) == (b'{"a": 3}', new)
    finally:
        b.close()
    puts = [h for m, _p, h in seen if m == "PUT"]
    assert [h.get("if-none-match") for h in puts] == ["*", "*", None, None]
    assert [h.get("if-match") for h in puts] == [None, None, etag, etag]
    assert all(h.get("content-type") == "application/json" for h in puts)
    gets = [h for m, p, h in seen if m == "GET" and p.split("?")[0].endswith(".json")]
    assert [h.get("range") for h in gets] == ["bytes=0-100"]
    assert all("authorization" in h for _m, _p, h in seen)  # signed (by obstore and botocore, not by us)


@pytest.mark.s3_servers()
def test_credentials_come_from_boto3s_chain_when_none_are_configured(
        s3: S3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Only the environment: no shared files, no instance metadata (nothing leaves the machine).
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    b = _bucket(s3, s3.endpoint, keys=False)
    try:
        etag = b.create("memory/p/mem-00000002.json", b"{}")
        assert b.get("memory/p/mem-00000002.json", 10) == (b"{}", etag)
        assert [o.key for o in b.list("memory/").objects] == ["memory/p/mem-00000002.json"]
    finally:
        b.close()
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    b = _bucket(s3, s3.endpoint, keys=False)
    try:
        with pytest.raises(BucketUnavailable, match="no credentials"):
            b.get("memory/p/mem-00000002.json", 10)
    finally:
        b.close()
