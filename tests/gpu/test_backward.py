"""The backward pass of every case (sweep.CASES and helpers.LARGE_CASES) in
every mode, routed as the library routes it, against float64 in poisoned
memory (helpers.check_backward); and the same bits on repeated runs."""

from __future__ import annotations

import pytest
from gpu_available import HAVE_GPU
from helpers import LARGE_CASES, check_backward, check_backward_deterministic
from oracle import MODES
from sweep import CASES

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", CASES + LARGE_CASES, ids=str)
def test_backward(case, mode):
    check_backward(case, mode)


DETERMINISM_CASES = [c for c in CASES + LARGE_CASES if c.name in ("1d_wide_channels", "2d_groups_dilation", "1d_vocoder", "1d_dw_long", "2d_dw_large")]


@pytest.mark.parametrize("mode", [("float32", "highest"), ("float16", "highest")], ids=["float32", "float16"])
@pytest.mark.parametrize("case", DETERMINISM_CASES, ids=str)
def test_backward_is_bitwise_deterministic(case, mode):
    check_backward_deterministic(case, mode)
