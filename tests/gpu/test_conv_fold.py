"""conv_fold (Hopper only, 16-bit): its forward pass on grids of one block, a
few and one a multiprocessor; its weight read as given or packed; 64-bit
indices; and the problems its rule leaves to the other kernels."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import _is_hopper, _lift, _to_gpu, check_forward
from sweep import FOLD_CASES, WINDOW_CASES, Case

import cupyconv

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


# conv_fold: on Hopper only; grids of one block (every tile in turn, across
# row tiles), of a few (blocks that start inside a row compute the tile
# before for its carry) and of one block a multiprocessor.
FOLD_MODES = [("float16", "highest"), ("bfloat16", "highest")]


def _spy_fold(override, blocks=None):
    """The names of the kernels launched from here on (observe_launches),
    conv_fold on small problems too (_lift) with a grid of `blocks` (None:
    one block a multiprocessor)."""
    override(fold_blocks=blocks)
    _lift(override, "_fold")
    return override.observe_launches()


def _folds(names) -> int:
    """How many of `names` are conv_fold's (one a forward pass it served)."""
    return sum(name.startswith("conv_fold<") for name in names)


@pytest.mark.parametrize("blocks", [None, 1, 3, 5])
@pytest.mark.parametrize("mode", FOLD_MODES, ids=["-".join(m) for m in FOLD_MODES])
@pytest.mark.parametrize("case", FOLD_CASES + [c for c in WINDOW_CASES if c.name == "1d_win_fold8"], ids=str)
def test_fold_kernel(case, mode, blocks, settings_override):
    """conv_fold's forward pass against float64 in poisoned memory."""
    if not _is_hopper():
        pytest.skip("conv_fold runs on compute capability 9.0 only")
    ran = _spy_fold(settings_override, blocks)
    check_forward(case, mode)
    assert _folds(ran) == 1, ("conv_fold did not run", ran)


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("mode", FOLD_MODES, ids=["-".join(m) for m in FOLD_MODES])
def test_fold_weight_as_given(mode, raw, settings_override):
    """Kernels of 16 taps: conv_fold reads the weight as given (no
    pack_fold_weight launch) or, with use_fold_raw_weight off, packed;
    ragged input and output channels."""
    if not _is_hopper():
        pytest.skip("conv_fold runs on compute capability 9.0 only")
    names = _spy_fold(settings_override, 3)
    settings_override(use_fold_raw_weight=raw)
    for case in FOLD_CASES[:2]:
        check_forward(case, mode)
    assert _folds(names) == 2, names
    assert sum(name.startswith("pack_fold_weight") for name in names) == (0 if raw else 2), names


def test_fold_unaligned_weight_is_packed(settings_override):
    """A weight 2 bytes off a 16-byte boundary goes through pack_fold_weight,
    and gives the aligned (as given) weight's output bit for bit."""
    if not _is_hopper():
        pytest.skip("conv_fold runs on compute capability 9.0 only")
    names = _spy_fold(settings_override, 5)
    case = FOLD_CASES[1]
    rng = numpy.random.default_rng(41)
    x, w, b = (_to_gpu(a, numpy.float16) for a in case.arrays(rng, numpy.float16))
    shifted = cupy.empty(w.size + 1, dtype=w.dtype)[1:].reshape(w.shape)
    shifted[...] = w
    assert shifted.data.ptr % 16 == 2 and shifted.flags.c_contiguous
    aligned = cupyconv.conv_transpose1d(x, w, b, **case.kwargs)
    packed = cupyconv.conv_transpose1d(x, shifted, b, **case.kwargs)
    assert _folds(names) == 2 and [n.startswith("pack_fold_weight") for n in names] == [False, True, False], names
    assert bool(cupy.array_equal(aligned.view(numpy.uint16), packed.view(numpy.uint16)))


def test_fold_64_bit_index(settings_override):
    if not _is_hopper():
        pytest.skip("conv_fold runs on compute capability 9.0 only")
    ran = _spy_fold(settings_override, 3)
    settings_override(index_type="long long")
    check_forward(FOLD_CASES[1], ("bfloat16", "highest"))
    assert _folds(ran), ran


def test_fold_rules_out(settings_override):
    """Rows that are not whole 16-byte vectors, float32, other strides and
    dilations keep the other kernels (and are right)."""
    cases = [
        Case("fold_odd_rows", 1, 2, 64, 16, (16,), (250,), stride=8, padding=4),
        Case("fold_s4", 1, 2, 64, 16, (8,), (256,), stride=4, padding=2),
        Case("fold_d2", 1, 2, 64, 16, (16,), (256,), stride=8, padding=4, dilation=2),
        Case("fold_k17", 1, 2, 64, 16, (17,), (256,), stride=8, padding=4),
    ]
    ran = _spy_fold(settings_override)
    for case, mode in [(c, ("float16", "highest")) for c in cases] + [(FOLD_CASES[0], ("float32", "tf32"))]:
        check_forward(case, mode)
        assert not _folds(ran), (case, mode)
