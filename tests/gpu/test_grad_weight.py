"""grad_weight's tensor-core families: grad_weight_wgmma (16-bit, Hopper),
grad_weight_window (16-bit) and grad_weight_wgmma_tf32 (float32, Hopper):
every mode and tile where they apply, splits, 64-bit indices, the same bits
on repeated runs, and the shapes grad_weight_wgmma_tf32 takes by default."""

from __future__ import annotations

import pytest
from gpu_available import HAVE_GPU
from helpers import (
    _ON_HOPPER_ONLY,
    _PHASE_P1,
    _PHASE_P2,
    _PHASE_P4,
    FLOAT32_MODES,
    _check_float32_grad_weight_repeats,
    _check_phase_routing,
    _force_tile,
    _is_hopper,
    _spy,
    check_backward,
    check_backward_deterministic,
)
from oracle import MODES
from sweep import GRAD_WEIGHT_TF32_CASES, GRAD_WEIGHT_WINDOW_CASES, Case

from cupyconv import _kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


# grad_weight_wgmma: 16-bit, stride 1, input rows of whole 16-byte vectors,
# up to 8 taps; grad_output rows of every copy size (the id's out width),
# padding both sides, channel tails in both tiles, groups, rows of positions
# that end inside a 128-position item, several splits.
GRAD_WEIGHT_WGMMA_CASES = [
    Case("gww_p1like", 1, 3, 32, 64, (5,), (1000,), dilation=3),  # out 1012: 8-byte copies
    Case("gww_p2like", 1, 2, 128, 128, (3,), (1000,)),  # out 1002: 4-byte copies, 2 x 2 tiles
    Case("gww_tails_pad", 1, 2, 40, 72, (4,), (520,), padding=2, dilation=2),  # out 522: 4-byte copies
    Case("gww_g2", 1, 2, 64, 48, (4,), (264,), padding=3, dilation=2, groups=2, bias=False),  # out 264: 16-byte copies
    Case("gww_k8", 1, 3, 24, 40, (8,), (400,), padding=5, dilation=2),  # out 404
    Case("gww_k4_op", 1, 2, 96, 20, (4,), (136,), padding=1, output_padding=1, dilation=2),  # out 141: 16-bit odd, off
]


def _spy_grad_weight_wgmma(override):
    return _spy(override, "_grad_weight_wgmma", lambda p: p.geometry)


@pytest.mark.parametrize("mode", [("float16", "highest"), ("bfloat16", "highest")], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", GRAD_WEIGHT_WGMMA_CASES, ids=str)
def test_grad_weight_wgmma_kernel(case, mode, settings_override):
    """grad_weight_wgmma's gradients against float64 (the usual tolerances),
    where it applies: everywhere on Hopper but odd 16-bit grad_output rows."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_wgmma(settings_override)
    check_backward(case, mode)
    assert bool(ran) == (case.name != "gww_k4_op")


@pytest.mark.parametrize("tile", _kernels.GRAD_WEIGHT_WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WGMMA_CASES if c.name in ("gww_p2like", "gww_tails_pad", "gww_g2")], ids=str)
def test_every_grad_weight_wgmma_tile(case, tile, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran, picked = _spy_grad_weight_wgmma(settings_override), _force_tile(settings_override, "grad_weight_wgmma", tile)
    check_backward(case, ("float16", "highest"))
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WGMMA_CASES if c.name in ("gww_p1like", "gww_g2")], ids=str)
def test_grad_weight_wgmma_64_bit_index(case, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_wgmma(settings_override)
    settings_override(index_type="long long")
    check_backward(case, ("bfloat16", "highest"))
    assert ran


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WGMMA_CASES if c.name in ("gww_p1like", "gww_p2like", "gww_g2")], ids=str)
def test_grad_weight_wgmma_is_bitwise_deterministic(case, dtype, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_wgmma(settings_override)
    check_backward_deterministic(case, (dtype, "highest"))
    assert ran


def _spy_grad_weight_window(override):
    """The calls grad_weight_window served (with grad_weight_taps and
    grad_weight_wgmma, which go first where they apply, turned off)."""
    override(use_grad_weight_taps=False)
    override(use_grad_weight_wgmma=False)
    return _spy(override, "_grad_weight_window", lambda p: p.geometry)  # the geometry


SIXTEEN_BIT_MODES = [m for m in MODES if m[0] in ("float16", "bfloat16")]


@pytest.mark.parametrize("mode", SIXTEEN_BIT_MODES, ids=["-".join(m) for m in SIXTEEN_BIT_MODES])
@pytest.mark.parametrize("case", GRAD_WEIGHT_WINDOW_CASES, ids=str)
def test_grad_weight_window_kernel(case, mode, settings_override):
    """grad_weight_window's gradients against float64, with the usual tolerances."""
    ran = _spy_grad_weight_window(settings_override)
    check_backward(case, mode)
    assert ran, "grad_weight_window did not run"


@pytest.mark.parametrize("tile", _kernels.GRAD_WEIGHT_WINDOW_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float16", "highest"), ("bfloat16", "highest")], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WINDOW_CASES if c.name in ("gw_fold8", "gw_k9_d4", "gw_s2_g2")], ids=str)
def test_every_grad_weight_window_tile(case, mode, tile, settings_override):
    ran, picked = _spy_grad_weight_window(settings_override), _force_tile(settings_override, "grad_weight_window", tile)
    check_backward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WINDOW_CASES if c.name in ("gw_fold8", "gw_s2_d2_ragged")], ids=str)
def test_grad_weight_window_64_bit_index(case, settings_override):
    ran = _spy_grad_weight_window(settings_override)
    settings_override(index_type="long long")
    check_backward(case, ("bfloat16", "highest"))
    assert ran


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WINDOW_CASES if c.name in ("gw_fold8", "gw_s2_g2", "gw_s4_p7")], ids=str)
def test_grad_weight_window_is_bitwise_deterministic(case, dtype, settings_override):
    ran = _spy_grad_weight_window(settings_override)
    check_backward_deterministic(case, (dtype, "highest"))
    assert ran


def _spy_grad_weight_tf32(override, multiprocessors=None):
    """The geometries grad_weight_wgmma_tf32 served (small problems too, and
    with grad_weight_taps, which goes first in TF32 where it applies, turned
    off: X2-like shapes); with `multiprocessors`, its splits are sized for
    that many."""
    override(use_grad_weight_taps=False)
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)  # (a problem carries it: plans are made for it)
    return _spy(override, "_grad_weight_tf32", lambda p: p.geometry)


@pytest.mark.parametrize("mode", FLOAT32_MODES, ids=["highest", "tf32"])
@pytest.mark.parametrize("case", GRAD_WEIGHT_TF32_CASES, ids=str)
def test_grad_weight_tf32_kernel(case, mode, settings_override):
    """grad_weight_wgmma_tf32's gradients (3xTF32 and TF32) against float64,
    with the usual tolerances, in poisoned memory, where it applies: on
    Hopper, but not to input rows that are not whole 16-byte vectors."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_tf32(settings_override)
    check_backward(case, mode)
    assert bool(ran) == (case.name != "gwt_odd_rows")


@pytest.mark.parametrize("multiprocessors", [1, 4096], ids=["long_splits", "one_item_splits"])
@pytest.mark.parametrize(
    "case", [c for c in GRAD_WEIGHT_TF32_CASES if c.name in ("gwt_p2like", "gwt_tails_pad", "gwt_g2", "gwt_fold_x2like", "gwt_fold_tails")], ids=str
)
def test_grad_weight_tf32_splits_and_64_bit_index(case, multiprocessors, settings_override):
    """Blocks that sum many items, or one each, with 64-bit indices."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_tf32(settings_override, multiprocessors)
    settings_override(index_type="long long")
    check_backward(case, ("float32", "highest"))
    assert ran


@pytest.mark.parametrize("precision", ["highest", "tf32"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TF32_CASES if c.name in ("gwt_p2like", "gwt_g2", "gwt_fold_g2")], ids=str)
def test_grad_weight_tf32_is_bitwise_deterministic(case, precision, settings_override):
    """Several splits summed by sum_splits in order: the same bits on every run."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_tf32(settings_override)
    _check_float32_grad_weight_repeats(case, precision)
    assert ran


def test_grad_weight_tf32_routing(settings_override):
    """On Hopper, float32 P2-like problems (stride 1, 128 channels) take
    grad_weight_wgmma_tf32 in both tensor-core modes at the default size
    rule, X2-like ones (stride 8, 16 taps) in "highest" only (ahead of
    grad_weight_taps, which keeps "tf32"), H4-like ones (stride 2, where
    grad_weight_taps does not apply) in both; P1- and P4-like ones (32 input
    channels) and 16-bit types do not."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    shapes = [
        (_PHASE_P2, True),
        (Case("x2", 1, 2, 128, 64, (16,), (512,), stride=8, padding=4), ("highest",)),
        (Case("h4", 1, 2, 128, 64, (4,), (4096,), stride=2, padding=1), True),
        (_PHASE_P1, False),
        (_PHASE_P4, False),
    ]
    _check_phase_routing(settings_override, "_grad_weight_tf32", (False, True, False), shapes, 7)
