"""Logs a person can read (docs/sync.md, "Logs"): memlocal's own lines, libraries only from
WARNING, and never a credential, at any level."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import support
from memlocal.logs import redact_credentials
from s3server import ACCESS_KEY, SECRET_KEY, S3

# One save and one pass in a fresh process, logging as `memlocal sync daemon -v` does; with
# ``force`` the worst case: botocore's own DEBUG lines (signed headers) switched on afterwards,
# and a signed botocore request made.
_SCRIPT = """
import logging, sys
from memlocal.logs import configure_logging
from memlocal.faces.cli import main
configure_logging(verbose=True)
if sys.argv[1] == "force":
    logging.getLogger("botocore").setLevel(logging.DEBUG)
    logging.getLogger("urllib3").setLevel(logging.DEBUG)
for args in (["save", "-p", "logs", "a memory to push"], ["sync", "run"]):
    try:
        main(args, standalone_mode=False)
    except SystemExit:
        pass
if sys.argv[1] == "force":
    # The objects and their listing pages go through obstore (no Python log); the bucket's
    # remaining botocore call, a signed HEAD, makes sure the worst case is really logged.
    from memlocal.config import Config
    from memlocal_sync.bucket import Bucket, BucketSettings
    settings = BucketSettings.from_config(Config.load())
    assert settings is not None
    Bucket(settings, timeout_s=5.0, attempts=1).check()
"""


def _run(tmp_path: Path, mode: str) -> str:
    env = dict(os.environ, MEMLOCAL_DB=str(tmp_path / f"{mode}.db"))
    proc = support.run([sys.executable, "-c", _SCRIPT, mode], env=env, capture_output=True, text=True,
                          timeout=120)
    return proc.stderr


def test_verbose_shows_memlocal_debug_lines_and_no_library_chatter(s3: S3, tmp_path: Path) -> None:
    err = _run(tmp_path, "plain")
    assert "memlocal_sync" in err  # our own lines are there
    assert "botocore" not in err and "urllib3" not in err and "watchfiles" not in err
    assert SECRET_KEY not in err and "Signature=" not in err and ACCESS_KEY not in err


def test_no_credential_reaches_a_log_even_with_library_debug_forced_on(s3: S3, tmp_path: Path) -> None:
    err = _run(tmp_path, "force")
    assert "botocore" in err  # the worst case really logged request details
    assert SECRET_KEY not in err
    assert ACCESS_KEY not in err  # it is part of SigV4's Credential=...
    for line in err.splitlines():
        if "Signature=" in line:
            assert "Signature=[REDACTED]" in line


def test_redaction_of_credential_shapes() -> None:
    line = ("headers={'Authorization': b'AWS4-HMAC-SHA256 Credential=AKIAXXXX/20261130/us-east-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=abc123', 'X-Amz-Security-Token': 'tok'} Bearer s3cret.token")
    out = redact_credentials(line)
    for secret in ("AKIAXXXX", "abc123", "'tok'", "s3cret.token"):
        assert secret not in out
