"""The kernel choice, pinned: every launch of the routing snapshot's calls
(tests/routing_snapshot.py) on described sm_80 and sm_90 devices, recorded
on the CPU, must match the kept snapshot.  A change that means to move a
choice regenerates it (`python tests/routing_snapshot.py record sm_90
tests/data/routing-sm_90.json.gz`, the same for sm_80) and says why in its
commit; a refactor leaves it as it is."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("device", ["sm_80", "sm_90"])
def test_routing_matches_the_snapshot(device):
    snapshot = os.path.join(HERE, "data", f"routing-{device}.json.gz")
    root = os.path.dirname(HERE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = subprocess.run(
        [sys.executable, os.path.join(HERE, "routing_snapshot.py"), "compare", device, snapshot],
        check=False, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-4000:]
    assert "the same launches" in result.stdout
