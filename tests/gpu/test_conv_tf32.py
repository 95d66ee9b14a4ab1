"""The float32 wgmma kernels of cupyconv/kernels/conv_tf32.py (Hopper only):
conv_wgmma_tf32 (its one-phase and FOLD builds), conv_tf32_stream and
conv_tf32_multicast: their results, 64-bit indices, repeated and remembered
calls, and the problems their rules take and decline."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import (
    _ON_HOPPER_ONLY,
    _fast_calls,
    _is_hopper,
    _lift,
    _spy,
    check_backward,
    check_forward,
    poisoned_allocations,
)
from sweep import Case

import cupyconv
import cupyconv.settings
from cupyconv import _kernels

if HAVE_GPU:
    import cupyconv._remember  # (cupyconv._remember.FAST_FORWARD below: the remembered calls' tables)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


# conv_wgmma_tf32: float32 "tf32", one stride-1 phase (forward and
# grad_input), 2 to 4 taps.  Source rows of every alignment (forward: the
# input's width; grad_input: the output's, in brackets), so that rows start
# at every offset from a vector and windows straddle row starts; padding
# beyond a vector, dilation (the taps' reach), output padding, channel tails
# in the slices and in the 128-channel tile, two tiles, groups, rows shorter
# than a vector, rows ending inside an item.
CONV_TF32_CASES = [
    Case("ct_p2like", 1, 2, 128, 128, (3,), (1000,)),  # 1000 (1002)
    Case("ct_tails_d3", 1, 3, 72, 80, (3,), (1001,), padding=6, dilation=3),  # 1001 (995)
    Case("ct_two_tiles", 1, 2, 64, 160, (2,), (301,), padding=1, output_padding=1, dilation=2),  # 301 (302)
    Case("ct_g2", 1, 2, 128, 192, (3,), (263,), padding=1, groups=2, bias=False),  # 263 (263)
    Case("ct_short_rows", 1, 9, 64, 72, (4,), (3,), padding=1),  # 3 (4)
    Case("ct_d2_pad", 1, 2, 128, 96, (3,), (390,), padding=2, dilation=2),  # 390 (390): the largest weight tile, 4 x 3 atoms
]


def _spy_conv_tf32(override, multiprocessors=None):
    """The passes (forward, grad_input) conv_wgmma_tf32 ran (any number of
    rows; grad_input_phase off at stride 1).  With `multiprocessors`, its
    grid is sized for that many, so that each block works through many
    items."""
    override(use_conv_tf32="anywhere")
    override(grad_input_phase_stride_one=False)
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _spy(override, "_conv_tf32", lambda p: p.op)


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("case", CONV_TF32_CASES, ids=str)
def test_conv_tf32_kernel(case, multiprocessors, settings_override):
    """conv_wgmma_tf32's forward pass and grad_input in "tf32" against
    float64, with the usual tolerance, in poisoned memory: both passes run on
    it (on Hopper)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_conv_tf32(settings_override, multiprocessors)
    check_forward(case, ("float32", "tf32"))
    check_backward(case, ("float32", "tf32"))
    assert ran == ["forward", "grad_input"]


@pytest.mark.parametrize("case", [c for c in CONV_TF32_CASES if c.name in ("ct_tails_d3", "ct_g2")], ids=str)
def test_conv_tf32_64_bit_index(case, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_conv_tf32(settings_override, 3)
    settings_override(index_type="long long")
    check_forward(case, ("float32", "tf32"))
    check_backward(case, ("float32", "tf32"))
    assert ran == ["forward", "grad_input"]


# conv_wgmma_tf32's FOLD builds: forward passes whose stride divides the
# kernel (dilation 1), 2 to 4 taps a sub-phase.  An X3-like fold of 256 (tiles
# of one channel's sub-phases, their columns trimmed at both ends, several
# items a tile), a fold of 128 with 3 taps, channel tails and an odd padding
# (every output pair misaligned: single stores), folds below a tile (a tile
# spans channels; the last one partial) with groups, an unbatched call and
# output padding, and P4's dilated fold.
CONV_TF32_FOLD_CASES = [
    Case("ctf_x3like", 1, 2, 64, 3, (1024,), (300,), stride=256, padding=384),
    Case("ctf_f128_odd", 1, 2, 40, 2, (384,), (150,), stride=128, padding=101, output_padding=5),
    Case("ctf_f4_g2", 1, 2, 48, 50, (8,), (500,), stride=4, padding=3, groups=2),
    Case("ctf_f2_unbatched", 1, None, 33, 70, (8,), (333,), stride=2, padding=1, output_padding=1),
    Case("ctf_p4like", 1, 2, 32, 64, (3,), (300,), stride=2, padding=1, dilation=2),  # the dilated fold (FOLD_DILATED)
]


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("case", CONV_TF32_FOLD_CASES, ids=str)
def test_conv_tf32_fold(case, multiprocessors, settings_override):
    """conv_wgmma_tf32's FOLD builds' forward pass in "tf32" against float64,
    with the usual tolerance, in poisoned memory (on Hopper; the rule lifted,
    so that small folds run it too)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_conv_tf32(settings_override, multiprocessors)
    names = settings_override.observe_launches()
    check_forward(case, ("float32", "tf32"))
    assert ran == ["forward"]
    ours = [n for n in names if n.startswith("conv_wgmma_tf32")]
    assert len(ours) == 1 and ours[0].endswith(", true>"), names


def test_conv_tf32_fold_rule(settings_override):
    """By default the FOLD builds take folds of settings.conv_tf32_min_fold or
    more (X3) and leave smaller ones (P4's 2, X2's 8) to the other kernels."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy(settings_override, "_conv_tf32", lambda p: p.geometry.stride[1])
    for case in CONV_TF32_FOLD_CASES:
        check_forward(case, ("float32", "tf32"))
    assert ran == [c.stride for c in CONV_TF32_FOLD_CASES if c.stride >= cupyconv.settings.current().conv_tf32_min_fold]
    assert len(ran) == 2  # (P4's fold of 2 is not among them)


# conv_tf32_stream: float32 forward passes in "tf32" and "highest" that fold
# into one record with 2 taps a sub-phase (kernel = 2 x stride), with sums of
# at least settings.tf32x3_min_products products (64 channels a group or more), so that
# "highest" takes 3xTF32 by the default rule.  An X2-like fold of 8 with a
# channel tail in the slices and a partial second tile of (channel,
# sub-phase) columns, a fold of 2 (unbatched, output padding, source rows of
# odd width, one channel past the slices), groups with a fold of 4 and no
# bias, a fold of 64 (two channels a tile), an odd padding (every output
# pair misaligned: single stores) and a column tail in the last item.
CONV_TF32_STREAM_CASES = [
    Case("cts_x2like", 1, 2, 72, 20, (16,), (300,), stride=8, padding=4),
    Case("cts_f2_unbatched", 1, None, 65, 70, (4,), (333,), stride=2, padding=1, output_padding=1),
    Case("cts_f4_g2", 1, 2, 144, 50, (8,), (500,), stride=4, padding=3, groups=2, bias=False),
    Case("cts_f64", 1, 2, 80, 3, (128,), (40,), stride=64, padding=10),
    Case("cts_odd_pad", 1, 3, 80, 16, (16,), (257,), stride=8, padding=3),
]


def _lift_conv_tf32_stream(override, multiprocessors=None):
    """conv_tf32_stream's rule lifted (any channel count: the resident FOLD
    tile would fit these), on small problems too (_lift)."""
    _lift(override, "_conv_tf32_stream")
    override(tf32x3_min_products=128)  # the default rule (_lift lowers it)
    override(use_conv_tf32_stream="anywhere")
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)


def _spy_conv_tf32_stream(override, multiprocessors=None):
    """The names of the kernels the calls from here on launch
    (observe_launches), conv_tf32_stream's rule lifted (_lift_conv_tf32_stream)."""
    _lift_conv_tf32_stream(override, multiprocessors)
    return override.observe_launches()


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("precision", ["tf32", "highest"])
@pytest.mark.parametrize("case", CONV_TF32_STREAM_CASES, ids=str)
def test_conv_tf32_stream(case, precision, multiprocessors, settings_override):
    """conv_tf32_stream's forward pass in "tf32" (TF32) and "highest"
    (3xTF32) against float64, with the usual tolerances, in poisoned memory:
    the kernel ran, the build of the mode's passes (on Hopper).
    (conv_tf32_multicast, which takes most TF32 passes, is off here.)"""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(use_conv_tf32_multicast=False)
    names = _spy_conv_tf32_stream(settings_override, multiprocessors)
    check_forward(case, ("float32", precision))
    ours = [n for n in names if n.startswith("conv_tf32_stream")]
    assert ours == [_kernels.conv_tf32_stream_name("int", 2, 1 if precision == "tf32" else 3)], names


@pytest.mark.parametrize("precision", ["tf32", "highest"])
def test_conv_tf32_stream_64_bit_index(precision, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(use_conv_tf32_multicast=False)
    names = _spy_conv_tf32_stream(settings_override, 3)
    settings_override(index_type="long long")
    check_forward(CONV_TF32_STREAM_CASES[0], ("float32", precision))
    assert [n for n in names if n.startswith("conv_tf32_stream")] == [_kernels.conv_tf32_stream_name("long long", 2, 1 if precision == "tf32" else 3)]


# conv_tf32_multicast: the TF32 passes of conv_tf32_stream's cases with a
# fold of 4 to 32 and source rows of whole 16-byte vectors.  An X2-like fold
# of 8 with a channel tail in the slices, a partial tile of (channel,
# sub-phase) columns and an odd count of items (a cluster's second block
# runs its pair's first window and stores nothing); two groups of 32
# channels with a fold of 4 and no bias; unbatched with output padding, a
# fold of 16; a fold of 32 (8 channels a tile); an odd padding (every output
# vector misaligned: single stores) with 3 items; and channels in one slice.
CONV_TF32_MULTICAST_CASES = [
    Case("cm_x2like", 1, 3, 72, 20, (16,), (300,), stride=8, padding=4),
    Case("cm_f4_g2", 1, 2, 64, 100, (8,), (500,), stride=4, padding=3, groups=2, bias=False),
    Case("cm_f16_unbatched", 1, None, 40, 20, (32,), (64,), stride=16, padding=5, output_padding=3),
    Case("cm_f32", 1, 2, 24, 10, (64,), (40,), stride=32, padding=7),
    Case("cm_odd_pad", 1, 1, 48, 16, (16,), (260,), stride=8, padding=3),
    Case("cm_one_slice", 1, 2, 12, 40, (16,), (128,), stride=8, padding=0),
]


@pytest.mark.parametrize("multiprocessors", [None, 2, 12])
@pytest.mark.parametrize("case", CONV_TF32_MULTICAST_CASES, ids=str)
def test_conv_tf32_multicast(case, multiprocessors, settings_override):
    """conv_tf32_multicast's forward pass in "tf32" against float64, with the
    usual tolerances, in poisoned memory, on grids of one cluster (every unit
    in turn: the buffers' phases wrap many times), of six (12
    multiprocessors) and the device's: the kernel ran, its fold's build (on
    Hopper)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_conv_tf32_stream(settings_override, multiprocessors)
    check_forward(case, ("float32", "tf32"))
    ours = [n for n in names if n.startswith("conv_tf32")]
    assert ours == [_kernels.conv_tf32_multicast_name("int", case.stride)], names


def test_conv_tf32_multicast_64_bit_index(settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_conv_tf32_stream(settings_override, 2)
    settings_override(index_type="long long")
    check_forward(CONV_TF32_MULTICAST_CASES[0], ("float32", "tf32"))
    assert [n for n in names if n.startswith("conv_tf32")] == [_kernels.conv_tf32_multicast_name("long long", 8)]


@pytest.mark.parametrize(
    "case",
    [
        Case("cm_no_f2", 1, 2, 32, 20, (4,), (200,), stride=2, padding=1),  # a fold of 2
        Case("cm_no_f64", 1, 2, 32, 3, (128,), (40,), stride=64, padding=10),  # a fold of 64
        Case("cm_no_row", 1, 2, 32, 20, (16,), (301,), stride=8, padding=4),  # rows not whole 16-byte vectors
        Case("cm_no_groups", 1, 2, 40, 20, (8,), (200,), stride=4, padding=1, groups=2),  # 20 channels a group
    ],
    ids=str,
)
def test_conv_tf32_multicast_declines(case, settings_override):
    """What conv_tf32_multicast has no build or tensor map for goes to
    conv_tf32_stream, right either way."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_conv_tf32_stream(settings_override)
    check_forward(case, ("float32", "tf32"))
    assert [n for n in names if n.startswith("conv_tf32")] == [_kernels.conv_tf32_stream_name("int", 2, 1)], names


def test_conv_tf32_multicast_repeats_bitwise(monkeypatch, settings_override):
    """Runs of the same call give the same bits, and from the fourth call on
    the remembered replay (a new output and a new packed weight: both tensor
    maps rewritten) answers, in poisoned memory, with the checked path's."""
    from cupyconv import _remember
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    from cupyconv import _cuda

    _lift_conv_tf32_stream(settings_override)
    # a spy on _launch, not observe_launches: that would turn remembered calls off
    names, original = [], _cuda._launch
    monkeypatch.setattr(_cuda, "_launch", lambda plan, arrays: names.append(plan.name) or original(plan, arrays))
    case = CONV_TF32_MULTICAST_CASES[0]
    x, w, b = (cupy.asarray(a.astype(numpy.float32)) for a in case.arrays(numpy.random.default_rng(5), numpy.float32))
    cupyconv._remember.FAST_FORWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    runs = [cupyconv.conv_transpose1d(x, w, b, **case.kwargs, precision="tf32") for _ in range(3)]
    assert names.count(_kernels.conv_tf32_multicast_name("int", 8)) == 3
    answered = _fast_calls(monkeypatch, _remember._Replay)
    with poisoned_allocations():
        runs += [cupyconv.conv_transpose1d(x, w, b, **case.kwargs, precision="tf32") for _ in range(2)]
        cupy.cuda.get_current_stream().synchronize()
    assert answered == [True, True]
    assert all(bool((r == runs[0]).all()) for r in runs[1:])


def test_conv_tf32_stream_rule(settings_override):
    """By default conv_tf32_stream takes the folds whose resident FOLD tile
    does not fit (256 channels x 2 taps: X2-like), in both float32 tensor-core
    modes, and leaves those whose tile fits (64 channels) and 16-bit types
    to the other kernels; the result against float64 either way."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy(settings_override, "_conv_tf32_stream", lambda p: p.geometry.in_channels)
    settings_override(tf32x3_min_products=128)
    wide = Case("cts_wide", 1, 1, 256, 16, (16,), (200,), stride=8, padding=4)
    narrow = Case("cts_narrow", 1, 1, 64, 16, (16,), (200,), stride=8, padding=4)
    for case in (wide, narrow):
        for mode in (("float32", "tf32"), ("float32", "highest"), ("float16", "highest")):
            check_forward(case, mode)
    assert ran == [256, 256]
    assert cupyconv.settings.current().use_conv_tf32_stream is True


def test_conv_tf32_is_not_for_other_problems(settings_override):
    """conv_wgmma_tf32 declines what it has no build or record for: float32
    "highest", 16-bit types, strided passes that do not fold (a stride that
    does not divide the kernel), 1 or 5 taps (a phase); grad_input
    of a strided pass; the result against float64 either way."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_conv_tf32(settings_override)
    cases = [
        (CONV_TF32_CASES[0], ("float32", "highest")),
        (CONV_TF32_CASES[0], ("float16", "highest")),
        (Case("ct_s2", 1, 2, 32, 136, (5,), (200,), stride=2, padding=1), ("float32", "tf32")),
        (Case("ct_s2_k10", 1, 2, 32, 136, (10,), (200,), stride=2), ("float32", "tf32")),
        (Case("ct_k1", 1, 2, 32, 136, (1,), (200,)), ("float32", "tf32")),
        (Case("ct_k5", 1, 2, 32, 136, (5,), (200,)), ("float32", "tf32")),
    ]
    for case, mode in cases:
        check_forward(case, mode)
        check_backward(case, mode)
    assert ran == []
