"""The taps kernels (cupyconv/kernels/grad_input_taps.py, grad_weight_taps.py):
grad_input_taps and grad_weight_taps in every tensor-core mode and tile,
split and unsplit reductions with 64-bit indices, and the same bits on
repeated runs."""

from __future__ import annotations

import contextlib

import pytest
from gpu_available import HAVE_GPU
from helpers import (
    TENSOR_CORE_MODES,
    _force_tile,
    _spy,
    check_backward,
    check_backward_deterministic,
)
from sweep import CASES, GRAD_INPUT_TAPS_CASES, GRAD_WEIGHT_TAPS_CASES

from cupyconv import _kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


@contextlib.contextmanager
def _taps_min_chunks(override, min_chunks):
    """The taps kernels' reductions split into pieces of at least min_chunks
    stages (their cached plans re-made on entry and exit; the setting stays
    until the test ends)."""
    from cupyconv.kernels import grad_input_taps

    override(grad_input_taps_min_chunks=min_chunks)
    grad_input_taps._taps_plan.cache_clear()
    try:
        yield
    finally:
        grad_input_taps._taps_plan.cache_clear()


def _spy_grad_input_taps(override):
    """The calls grad_input_taps served."""
    return _spy(override, "_grad_input_taps", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", GRAD_INPUT_TAPS_CASES + [c for c in CASES if c.name == "1d_vocoder"], ids=str)
def test_grad_input_taps_kernel(case, mode, settings_override):
    """grad_input_taps's gradients against float64, with the usual tolerances;
    gi_long's reduction is split across blocks (sum_splits adds the partials)."""
    ran = _spy_grad_input_taps(settings_override)
    check_backward(case, mode)
    assert ran, "grad_input_taps did not run"


@pytest.mark.parametrize("tile", _kernels.GRAD_INPUT_TAPS_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "highest"), ("float32", "tf32"), ("float16", "highest")], ids=["float32", "tf32", "float16"])
@pytest.mark.parametrize("case", [c for c in GRAD_INPUT_TAPS_CASES if c.name in ("gi_fold8", "gi_g2_op4", "gi_long")], ids=str)
def test_every_grad_input_taps_tile(case, mode, tile, settings_override):
    ran, picked = _spy_grad_input_taps(settings_override), _force_tile(settings_override, "grad_input_taps", tile)
    check_backward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("min_chunks", [1, 10**6], ids=["split", "unsplit"])
@pytest.mark.parametrize("case", [c for c in GRAD_INPUT_TAPS_CASES if c.name in ("gi_k64_s16", "gi_unbatched")], ids=str)
def test_grad_input_taps_split_and_64_bit_index(case, min_chunks, settings_override):
    """Splits of one stage each (every block a partial), or none, with 64-bit indices."""
    ran = _spy_grad_input_taps(settings_override)
    settings_override(index_type="long long")
    with _taps_min_chunks(settings_override, min_chunks):
        check_backward(case, ("bfloat16", "highest"))
    assert ran


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_INPUT_TAPS_CASES if c.name in ("gi_long", "gi_g2_op4")], ids=str)
def test_grad_input_taps_is_bitwise_deterministic(case, dtype, settings_override):
    ran = _spy_grad_input_taps(settings_override)
    check_backward_deterministic(case, (dtype, "highest"))
    assert ran


def _spy_grad_weight_taps(override):
    """The calls grad_weight_taps served."""
    return _spy(override, "_grad_weight_taps", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", GRAD_WEIGHT_TAPS_CASES, ids=str)
def test_grad_weight_taps_kernel(case, mode, settings_override):
    """grad_weight_taps's gradients against float64, with the usual tolerances."""
    ran = _spy_grad_weight_taps(settings_override)
    check_backward(case, mode)
    assert ran, "grad_weight_taps did not run"


@pytest.mark.parametrize("tile", _kernels.GRAD_WEIGHT_TAPS_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "highest"), ("float32", "tf32"), ("bfloat16", "highest")], ids=["float32", "tf32", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TAPS_CASES if c.name in ("gwt_fold8", "gwt_g2_op4", "gwt_k64_s16")], ids=str)
def test_every_grad_weight_taps_tile(case, mode, tile, settings_override):
    ran, picked = _spy_grad_weight_taps(settings_override), _force_tile(settings_override, "grad_weight_taps", tile)
    check_backward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("min_chunks", [1, 10**6], ids=["split", "unsplit"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TAPS_CASES if c.name in ("gwt_long", "gwt_unbatched")], ids=str)
def test_grad_weight_taps_split_and_64_bit_index(case, min_chunks, settings_override):
    """Splits of one stage each (every block a partial), or none, with 64-bit indices."""
    ran = _spy_grad_weight_taps(settings_override)
    settings_override(index_type="long long")
    with _taps_min_chunks(settings_override, min_chunks):
        check_backward(case, ("float16", "highest"))
    assert ran


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TAPS_CASES if c.name in ("gwt_long", "gwt_g2_op4")], ids=str)
def test_grad_weight_taps_is_bitwise_deterministic(case, dtype, settings_override):
    ran = _spy_grad_weight_taps(settings_override)
    with _taps_min_chunks(settings_override, 1):  # split, so that sum_splits's order is under test
        check_backward_deterministic(case, (dtype, "highest"))
    assert ran
