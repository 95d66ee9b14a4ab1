"""The general kernels every pass falls back to (conv_gemm, conv_mma,
grad_weight_mma, grad_weight_partial): conv_gemm's packed weight on small
problems, every tile the autotuner may pick (settings.tile), float32
"highest" as 3xTF32 on conv_mma and grad_weight_mma, and conv_mma_split."""

from __future__ import annotations

import pytest
from gpu_available import HAVE_GPU
from helpers import LARGE_CASES, TENSOR_CORE_MODES, _no_direct, check_backward, check_backward_deterministic, check_forward
from oracle import MODES
from sweep import CASES, Case

from cupyconv import _kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


PACKED_CASES = [c for c in CASES + LARGE_CASES if c.name in ("1d_vocoder", "2d_groups_dilation", "1d_wide_channels", "2d_per_axis", "1d_grouped_long")]


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", PACKED_CASES, ids=str)
def test_packed_weight(case, mode, settings_override):
    """conv_gemm reading the packed weight copy (large problems do) on small ones."""
    settings_override(pack_min_output=0)
    _no_direct(settings_override)
    check_forward(case, mode)
    check_backward(case, mode)


def _tile_modes():
    """(mode, tile) for every tile the autotuner may pick: CUDA-core tiles in
    float32 "highest", tensor-core tiles in tf32 and float16."""
    for tile in _kernels.GEMM_TUNE_TILES:
        yield ("float32", "highest"), tile
    for tile in _kernels.MMA_TUNE_TILES:
        yield ("float32", "tf32"), tile
        yield ("float16", "highest"), tile


@pytest.mark.parametrize("mode, tile", list(_tile_modes()), ids=lambda v: "-".join(map(str, v)))
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_wide_channels", "2d_groups_dilation")], ids=str)
def test_every_tile(case, mode, tile, settings_override):
    """Each candidate the autotuner times gives correct results (wherever it applies)."""
    settings_override(float32_highest="simt")  # float32 "highest" tests the CUDA-core tiles
    _no_direct(settings_override)
    families = ("conv_mma", "conv_gemm", "grad_weight_mma", "grad_weight_partial")
    settings_override(small_forward_max_output=0, tile=tuple((name, tile) for name in families))
    served = settings_override.observe_plans()
    check_forward(case, mode)
    check_backward(case, mode)
    assert any(p.op == "forward" and plan.tile == tile for p, plan in served), [(p.op, plan.family, plan.tile) for p, plan in served]


@pytest.mark.parametrize("case", [c for c in CASES + LARGE_CASES if c.name in ("1d_wide_channels", "2d_wide_channels", "1d_grouped_long")], ids=str)
def test_float32_highest_as_3xtf32_in_conv_mma_and_grad_weight_mma(case, settings_override):
    """float32 "highest" on the general tensor-core kernels (conv_mma,
    grad_weight_mma), for the passes that sum enough products to take 3xTF32:
    under 1e-5 and within twice torch's error, like the CUDA-core kernels."""
    from cupyconv.kernels import rules

    served = settings_override.observe_plans()
    check_forward(case, ("float32", "highest"))
    check_backward(case, ("float32", "highest"))
    taken = [(p.op, plan.family, rules._problem_passes(p)) for p, plan in served if p.op in ("forward", "grad_input", "grad_weight")]
    assert any(family in ("conv_mma", "grad_weight_mma") and passes == 3 for _, family, passes in taken), taken


@pytest.mark.parametrize("tile", _kernels.MMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", [c for c in CASES + LARGE_CASES if c.name in ("1d_wide_channels", "1d_grouped_long")], ids=str)
def test_every_3xtf32_tile(case, tile, settings_override):
    """conv_mma's and grad_weight_mma's 3xTF32 with each of their tiles
    (1d_wide_channels: forward and grad_input; 1d_grouped_long: grad_weight)."""
    from cupyconv.kernels import rules

    settings_override(small_forward_max_output=0, tile=(("conv_mma", tile), ("grad_weight_mma", tile)))
    served = settings_override.observe_plans()
    check_forward(case, ("float32", "highest"))
    check_backward(case, ("float32", "highest"))
    assert any(
        plan.family in ("conv_mma", "grad_weight_mma") and plan.tile == tile and rules._problem_passes(p) == 3 for p, plan in served
    ), [(p.op, plan.family, plan.tile) for p, plan in served]


# grad_input grids that leave most multiprocessors idle, with long reductions:
# a latent projection (1x1 input), a U-Net's innermost decoder (1x1 to 2x2),
# few channels (FCN-8s), grouped, strided 1D with a short input.
SPLIT_CASES = [
    Case("split_latent_1x1", 2, 16, 100, 256, (4, 4), (1, 1), bias=True),
    Case("split_unet_inner", 2, 4, 256, 256, (4, 4), (2, 2), stride=2, padding=1),
    Case("split_few_channels", 2, 2, 21, 21, (4, 4), (8, 8), stride=2),
    Case("split_grouped", 2, 4, 64, 128, (3, 3), (3, 3), stride=2, padding=1, output_padding=1, groups=2),
    Case("split_1d_short", 1, 2, 96, 512, (16,), (6,), stride=8, padding=4, dilation=1),
]


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids="-".join)
@pytest.mark.parametrize("case", SPLIT_CASES, ids=str)
def test_split_grad_input(case, mode, settings_override):
    """conv_mma_split (grad_input's reduction cut over idle multiprocessors,
    the float partials summed in split order) against float64, and bitwise
    the same on repeated runs; every case here does take it."""
    settings_override(families=("conv_mma", "grad_weight_mma", "grad_bias"))
    served = settings_override.observe_plans()
    check_backward(case, mode)
    splits = [plan for p, plan in served if p.op == "grad_input" and any("conv_mma_split" in s.launch.name for s in plan.steps)]
    assert splits, [(p.op, plan.family, [s.launch.name for s in plan.steps]) for p, plan in served]
    check_backward_deterministic(case, mode)
