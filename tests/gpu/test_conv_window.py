"""conv_window and its fill build (conv_window_fill), on small problems too
(their size rule lifted): every tensor-core mode, every tile
(settings.tile), 64-bit indices, and the route a P4-like problem takes by
default."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import (
    TENSOR_CORE_MODES,
    _force_tile,
    _spy,
    _spy_fill,
    check_backward,
    check_forward,
)
from sweep import CASES, FILL_CASES, WINDOW_CASES, relative_error

import cupyconv
from cupyconv import _kernels, reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def _spy_window(override):
    """The passes (forward, grad_input) conv_window ran (conv_wgmma and
    conv_wgmma_x3 kept off, so that on Hopper too every mode reaches conv_window; and
    grad_input_phase off at stride 1, where it is routed ahead of both)."""
    override(use_wgmma=False)
    override(use_wgmma_x3=False)
    override(grad_input_phase_stride_one=False)
    return _spy(override, "_window", lambda p: p.op)


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", WINDOW_CASES + [c for c in CASES if c.name in ("1d_vocoder", "1d_fold_s4_p6")], ids=str)
def test_window_kernel(case, mode, settings_override):
    """conv_window's forward pass and grad_input, where it applies."""
    ran = _spy_window(settings_override)
    check_forward(case, mode)
    check_backward(case, mode)
    if case in WINDOW_CASES:
        assert "forward" in ran, "conv_window did not run the forward pass"


@pytest.mark.parametrize("tile", _kernels.WINDOW_TUNE_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "highest"), ("float32", "tf32"), ("bfloat16", "highest")], ids=["float32", "tf32", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_s1_d3", "1d_win_fold8", "1d_win_fold32")], ids=str)
def test_every_window_tile(case, mode, tile, settings_override):
    ran, picked = _spy_window(settings_override), _force_tile(settings_override, "conv_window", tile)
    check_forward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_fold8", "1d_win_s2_d2")], ids=str)
def test_window_64_bit_index(case, settings_override):
    ran = _spy_window(settings_override)
    settings_override(index_type="long long")
    check_forward(case, ("float16", "highest"))
    assert ran


def _spy_window_fill(override):
    """Run conv_window's fill on small problems too; returns the keys
    conv_window's tile choice was asked for (ending in "fill" where the
    fill ran)."""
    override(window_min_output=0, window_min_columns=0)
    override(use_window_fill=True)
    return _spy_fill(override, "conv_window")


@pytest.mark.parametrize("tile", _kernels.WINDOW_TUNE_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", FILL_CASES + [c for c in WINDOW_CASES if c.name in ("1d_win_s2_d2", "1d_win_s2_d4_op3")], ids=str)
def test_window_fill(case, tile, settings_override):
    """conv_window's fill (float32 "highest" as 3xTF32) on every tile,
    against float64 in poisoned memory (under 1e-5)."""
    picked = _force_tile(settings_override, "conv_window_fill", tile)
    keys = _spy_window_fill(settings_override)
    check_forward(case, ("float32", "highest"))
    assert picked == [tile] and keys and keys[-1][-1] == "fill", (picked, keys)


def test_window_fill_64_bit_index(settings_override):
    keys = _spy_window_fill(settings_override)
    settings_override(index_type="long long")
    check_forward(FILL_CASES[0], ("float32", "highest"))
    assert keys[-1][-1] == "fill" and keys[-1][2] == "long long"


def test_window_fill_routing(settings_override):
    """A P4-like float32 "highest" forward pass takes conv_window's fill with
    no threshold changed (conv_direct with use_window_fill off), right
    either way."""
    ran = settings_override.observe_launches()
    rng = numpy.random.default_rng(33)
    x = rng.standard_normal((1, 32, 16384)).astype(numpy.float32)
    w = rng.standard_normal((32, 64, 3)).astype(numpy.float32)
    b = rng.standard_normal(64).astype(numpy.float32)
    kwargs = dict(stride=2, padding=1, dilation=2)
    oracle = reference.conv_transpose1d(x.astype(numpy.float64), w.astype(numpy.float64), b.astype(numpy.float64), **kwargs)
    for on, expected in ((True, "conv_window<float, int, 64, 128, 2, 4, 3, true>"), (False, "conv_direct<float, int,")):
        settings_override(use_window_fill=on)
        ran.clear()
        y = cupyconv.conv_transpose1d(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b), **kwargs, precision="highest")
        kernels = [name for name in ran if not name.startswith("pack_")]  # the packed weight first
        assert len(kernels) == 1 and kernels[0].startswith(expected), ran
        assert relative_error(cupy.asnumpy(y).astype(numpy.float64), oracle) < 1e-5
