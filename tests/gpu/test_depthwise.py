"""depthwise_forward with every warp walking runs of several chunks of a row."""

from __future__ import annotations

import pytest
from gpu_available import HAVE_GPU
from helpers import LARGE_CASES, check_forward
from sweep import Case

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


@pytest.fixture
def depthwise_chunk_runs(monkeypatch, settings_override):
    """depthwise_forward with every warp walking runs of up to 3 chunks of a
    row (the grid-size rule off, so small problems do too); the plans are
    made afresh before and after.  Returns the chunks per warp each plan took."""
    from cupyconv import _cuda
    from cupyconv.kernels import depthwise as depthwise_kernels

    monkeypatch.setattr(depthwise_kernels, "DEPTHWISE_WARP_CHUNKS", 3)  # read by depthwise_warp_chunks
    settings_override(tiny_max_output=0)  # so that the small cases reach depthwise_forward
    monkeypatch.setattr(depthwise_kernels, "DEPTHWISE_MIN_WARPS_PER_SM", 0)
    taken, original = [], depthwise_kernels.depthwise_warp_chunks
    monkeypatch.setattr(depthwise_kernels, "depthwise_warp_chunks", lambda *args: taken.append(original(*args)) or taken[-1])
    caches = (depthwise_kernels._depthwise_plan, _cuda._small_forward_launch)
    for cache in caches:
        cache.cache_clear()
    yield taken
    for cache in caches:
        cache.cache_clear()


# Depthwise problems whose output rows span 5 and 11 chunks of 128: runs of 3
# chunks per warp, the last one cut short by the row's end.
DEPTHWISE_LONG_ROWS = [
    LARGE_CASES[0],
    Case("2d_dw_wide", 2, 2, 3, 3, (3, 5), (4, 300), stride=(1, 2), padding=(1, 2), groups=3),
]


@pytest.mark.parametrize("mode", [("float32", "highest"), ("float16", "highest"), ("float64", "highest")], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("case", DEPTHWISE_LONG_ROWS, ids=str)
def test_depthwise_forward_in_runs_of_chunks(case, mode, depthwise_chunk_runs):
    """A warp of depthwise_forward does one row's setup for several chunks of
    it (big problems); every output is still written once, right."""
    check_forward(case, mode)
    assert depthwise_chunk_runs == [3], depthwise_chunk_runs
