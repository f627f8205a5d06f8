"""A small fleet on SeaweedFS (scripts/fleet.py): host processes saving, deleting, superseding,
pruning and syncing at random on one bucket, one of them killed with SIGKILL and started again,
then settled. Every host ends identical to the others and to the bucket, no acknowledged save is
lost, no acknowledged deletion comes back, and a pass that follows the change record with nothing
to do makes 2 requests plus one per new segment (docs/sync.md's cost model), 2 once settled. The 20-host run is ``bench.py``'s ``fleet`` section."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import support

from s3server import ACCESS_KEY, S3, SECRET_KEY

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _fleet() -> object:
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("_fleet_script", SCRIPTS / "fleet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # host processes for a few seconds, then a settling round
@pytest.mark.s3_servers("seaweedfs")
def test_a_fleet_with_a_kill_settles_identical_and_loses_nothing(s3: S3, tmp_path: Path) -> None:
    fleet = _fleet()
    result = fleet.run_fleet(s3.endpoint, s3.bucket, ACCESS_KEY, SECRET_KEY, tmp_path / "fleet",  # type: ignore[attr-defined]
                             hosts=3, seconds=6.0, kills=1, seed=11, spawn=support.spawn, stop=support.stop)
    assert result["kills"] == 1 and result["acknowledged_saves"] > 0
    assert result["settled"], result["not_settled"]
    assert result["identical"], result["differences"]
    assert result["lost"] == [] and result["resurrected"] == []
    assert result["errors"] == 0
    assert result["quiet_passes_beyond_model"] == [] and result["settled_pass_requests"] == {2: 3}
