"""The channels-last families, forced through settings.families: conv_nhwc
(forward and grad_input) and grad_weight_nhwc, on cases whose channels they
take: strides, padding, output padding, dilation, groups, phases with no
taps, output channels that fill no tile, every tile."""

from __future__ import annotations

import pytest
from gpu_available import HAVE_GPU
from helpers import _force_tile, check_backward, check_forward
from sweep import Case

from cupyconv.kernels.conv_nhwc import NHWC_TILES
from cupyconv.kernels.grad_weight_nhwc import GRAD_NHWC_TILES

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]

NHWC_MODES = [("float32", "tf32"), ("float16", "highest"), ("bfloat16", "highest")]

NHWC_CASES = [
    Case("nhwc_2d_s2_k4", 2, 2, 32, 24, (4, 4), (6, 5), stride=2, padding=1),
    Case("nhwc_2d_s1_k3", 2, 2, 16, 16, (3, 3), (9, 7), padding=1),
    Case("nhwc_2d_g2_d2", 2, 2, 32, 48, (3, 2), (5, 6), stride=(3, 2), padding=(1, 0), output_padding=(1, 1), dilation=(2, 1), groups=2),
    Case("nhwc_2d_stride_above_kernel", 2, 1, 16, 16, (2, 2), (4, 4), stride=3, output_padding=2),
    Case("nhwc_1d_s4", 1, 2, 40, 16, (8,), (20,), stride=4, padding=2),
    Case("nhwc_2d_co3", 2, 2, 64, 3, (4, 4), (8, 8), stride=2, padding=1, bias=True),
    Case("nhwc_2d_large", 2, 3, 72, 136, (3, 3), (20, 18), stride=2, padding=1, output_padding=1),
]


def _nhwc(settings_override):
    settings_override(families=("conv_nhwc", "grad_weight_nhwc"), nhwc_min_products=0, nhwc_min_products_tf32=0, nhwc_min_output=0)
    return settings_override.observe_plans()


@pytest.mark.parametrize("mode", NHWC_MODES, ids="-".join)
@pytest.mark.parametrize("case", NHWC_CASES, ids=str)
def test_conv_nhwc(case, mode, settings_override):
    served = _nhwc(settings_override)
    check_forward(case, mode)
    check_backward(case, mode)
    ran = {p.op for p, plan in served if plan.family in ("conv_nhwc", "grad_weight_nhwc")}
    # 3 output channels make no 16-byte rows for grad_input's reduction or grad_weight's columns
    expected = {"forward"} if case.out_channels == 3 else {"forward", "grad_input", "grad_weight"}
    assert ran == expected, [(p.op, plan.family) for p, plan in served]


@pytest.mark.parametrize("tile", NHWC_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "tf32"), ("bfloat16", "highest")], ids="-".join)
def test_every_nhwc_tile(tile, mode, settings_override):
    settings_override(families=("conv_nhwc",), nhwc_min_products=0, nhwc_min_products_tf32=0, nhwc_min_output=0)
    served = _force_tile(settings_override, "conv_nhwc", tile)
    case = NHWC_CASES[-1]
    check_forward(case, mode)
    check_backward(case, mode)
    assert len(served) == 2, served


@pytest.mark.parametrize("tile", GRAD_NHWC_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "tf32"), ("float16", "highest")], ids="-".join)
def test_every_grad_weight_nhwc_tile(tile, mode, settings_override):
    settings_override(families=("grad_weight_nhwc",), nhwc_min_products=0, nhwc_min_products_tf32=0, nhwc_min_output=0)
    served = _force_tile(settings_override, "grad_weight_nhwc", tile)
    check_backward(NHWC_CASES[-1], mode)
    assert len(served) == 1, served

