"""Bucket selection: INTERNAL_S3_BUCKET, else S3_BUCKET; friends follow the chosen prefix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlocal import Config
from conftest import Cli
from memlocal.errors import ConfigError
from memlocal_sync.bucket import BucketSettings


def settings(env: dict[str, str], toml: str | None = None, tmp_path: Path | None = None) -> BucketSettings | None:
    path = None
    if toml is not None:
        assert tmp_path is not None
        path = tmp_path / "config.toml"
        path.write_text(toml)
    return BucketSettings.from_config(Config.load(path, environ=env))


def test_internal_bucket_wins_and_its_friends_come_with_it() -> None:
    s = settings({
        "INTERNAL_S3_BUCKET": "orca-internal", "INTERNAL_S3_ENDPOINT": "http://internal:9000",
        "S3_BUCKET": "tenant", "S3_ENDPOINT": "http://tenant:9000", "S3_REGION": "eu-west-1",
        "S3_ACCESS_KEY_ID": "tenant-key", "S3_SECRET_ACCESS_KEY": "tenant-secret",
    })
    assert s is not None
    assert (s.name, s.source, s.endpoint) == ("orca-internal", "env:INTERNAL_S3_BUCKET", "http://internal:9000")
    # The tenant bucket's region and keys are not the internal bucket's.
    assert s.region is None and s.access_key_id is None and s.secret_access_key is None


def test_s3_bucket_is_the_fallback_with_its_own_friends() -> None:
    s = settings({"S3_BUCKET": "dev", "S3_ENDPOINT": "http://minio:9000", "S3_REGION": "us-west-2",
                  "S3_ACCESS_KEY_ID": "k", "S3_SECRET_ACCESS_KEY": "s", "INTERNAL_S3_ENDPOINT": "http://nope"})
    assert s == BucketSettings("dev", "env:S3_BUCKET", "http://minio:9000", "us-west-2", "k", "s")


def test_no_bucket_means_none() -> None:
    assert settings({}) is None
    assert settings({"S3_ENDPOINT": "http://minio:9000"}) is None


def test_config_file_then_env(tmp_path: Path) -> None:
    toml = '[bucket]\nname = "from-file"\nendpoint = "http://file:9000"\nregion = "eu-central-1"\n'
    s = settings({}, toml, tmp_path)
    assert s is not None and (s.name, s.endpoint, s.region) == ("from-file", "http://file:9000", "eu-central-1")
    assert s.source.startswith("file:")
    s = settings({"INTERNAL_S3_BUCKET": "env-bucket", "INTERNAL_S3_REGION": "ap-south-1"}, toml, tmp_path)
    assert s is not None and (s.name, s.source, s.endpoint, s.region) == (
        "env-bucket", "env:INTERNAL_S3_BUCKET", "http://file:9000", "ap-south-1")


def test_half_a_key_pair_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="set both or neither"):
        settings({"S3_BUCKET": "dev", "S3_ACCESS_KEY_ID": "k"})


def test_config_show_and_sync_status_say_where_the_bucket_came_from(
        monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    monkeypatch.setenv("INTERNAL_S3_BUCKET", "orca-internal")
    monkeypatch.setenv("INTERNAL_S3_SECRET_ACCESS_KEY", "hush")
    monkeypatch.setenv("INTERNAL_S3_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("S3_BUCKET", "tenant")
    res = cli("config", "show", "--json")
    rows = {r["key"]: r for r in json.loads(res.stdout)["settings"]}
    assert rows["bucket.name"]["value"] == "orca-internal"
    assert rows["bucket.name"]["source"] == "env:INTERNAL_S3_BUCKET"
    assert rows["bucket.secret_access_key"]["value"] == "***"
    res = cli("sync", "status")
    assert res.exit_code == 0, res.output
    assert "bucket:      orca-internal (from env:INTERNAL_S3_BUCKET)" in res.output
    assert "hush" not in res.output
