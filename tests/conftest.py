"""Shared fixtures. Feature-specific fixtures live in their own plugin modules listed below."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from memlocal import MemoryBank

# Plugin modules with fixtures for one area each (S3 server, fake Anthropic API, ...).
pytest_plugins: list[str] = ["anthropic_fake", "s3server"]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's config, database, bucket or API key."""
    for var in list(os.environ):
        if var.startswith(("MEMLOCAL_", "ANTHROPIC_", "INTERNAL_S3_", "S3_", "AWS_")):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    # boto3 must never find real credentials or reach a real endpoint from a test.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memlocal.db"


@pytest.fixture
def bank(db_path: Path) -> Iterator[MemoryBank]:
    with MemoryBank(db_path) as b:
        yield b
