"""The wgmma kernels of cupyconv/kernels/conv_wgmma.py (Hopper only):
conv_wgmma, conv_wgmma_resident (its fill, its row copies, grids far smaller
than the work), conv_wgmma_split and conv_wgmma_x3, wherever they fit, on
every tile; and which wgmma kernel (conv_fold and the conv_tf32 kernels
among them) benchmark-like shapes take with no threshold changed."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import (
    _ON_HOPPER_ONLY,
    TENSOR_CORE_MODES,
    _force_tile,
    _is_hopper,
    _spy,
    _spy_fill,
    _to_gpu,
    check_backward,
    check_forward,
)
from oracle import exact_backward, numpy_dtype
from sweep import CASES, FILL_CASES, WINDOW_CASES, Case, relative_error

import cupyconv
from cupyconv import _kernels, reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def _spy_wgmma(override):
    """The passes (forward, grad_input) conv_wgmma ran (wherever it fits, not
    only where its routing rule sends it; conv_wgmma_resident, conv_wgmma_tf32
    and, at stride 1, grad_input_phase off)."""
    override(use_resident=False)
    override(use_conv_tf32=False)
    override(grad_input_phase_stride_one=False)
    override(wgmma_max_rows=1 << 30)
    override(wgmma_min_taps=0)
    return _spy(override, "_wgmma", lambda p: p.op)


def _spy_resident(override, multiprocessors=None):
    """The passes (forward, grad_input) conv_wgmma_resident ran (wherever it
    fits; conv_wgmma_tf32, routed ahead of it in "tf32", kept off).  With
    `multiprocessors`, its grid is sized for that many, so that each block
    works through many (image, column tile) items.  float32
    grad_input at stride 1 stays off grad_input_phase, which is routed ahead
    of it where one tile of input channels covers a group.  conv_wgmma_split,
    routed ahead of it in 16-bit, is kept off (_spy_split turns it on)."""
    override(use_resident=True)
    override(use_resident_anywhere=True)
    override(use_split=False)
    override(use_conv_tf32=False)
    override(grad_input_phase_stride_one=False)
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _spy(override, "_resident", lambda p: p.op)


# The wgmma kernels run the modes with one product per pair (not float32
# "highest").  Each test below runs for both: conv_wgmma (wherever it fits)
# and conv_wgmma_resident (wherever it fits; with a grid sized for 2
# multiprocessors in the tile and index tests, so that blocks take several
# items).
WGMMA_MODES = [m for m in TENSOR_CORE_MODES if m != ("float32", "highest")]
WGMMA_KERNELS = ["conv_wgmma", "conv_wgmma_resident"]


def _spy_wgmma_kernel(override, kernel, multiprocessors=None):
    return _spy_resident(override, multiprocessors) if kernel == "conv_wgmma_resident" else _spy_wgmma(override)


@pytest.mark.parametrize("kernel", WGMMA_KERNELS)
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", WINDOW_CASES + [c for c in CASES if c.name in ("1d_vocoder", "1d_fold_s4_p6")], ids=str)
def test_wgmma_kernel(case, mode, kernel, settings_override):
    """A wgmma kernel's forward pass and grad_input, where it applies."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_kernel(settings_override, kernel)
    check_forward(case, mode)
    check_backward(case, mode)
    if case in WINDOW_CASES:
        assert "forward" in ran, f"{kernel} did not run the forward pass"


@pytest.mark.parametrize("kernel", WGMMA_KERNELS)
@pytest.mark.parametrize("tile", _kernels.WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_s1_d3", "1d_win_fold8", "1d_win_fold32")], ids=str)
def test_every_wgmma_tile(case, mode, tile, kernel, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran, picked = _spy_wgmma_kernel(settings_override, kernel, 2), _force_tile(settings_override, kernel, tile)
    check_forward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("kernel", WGMMA_KERNELS)
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_fold8", "1d_win_s2_d2")], ids=str)
def test_wgmma_64_bit_index(case, kernel, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_kernel(settings_override, kernel, 2)
    settings_override(index_type="long long")
    check_forward(case, ("bfloat16", "highest"))
    assert ran


def _spy_wgmma_x3(override):
    """The passes (forward, grad_input) conv_wgmma_x3 ran (wherever it fits,
    not only where its routing rule sends it; grad_input_phase off at stride 1)."""
    override(use_wgmma_x3=True)
    override(use_wgmma_x3_anywhere=True)
    override(grad_input_phase_stride_one=False)
    return _spy(override, "_wgmma_x3", lambda p: p.op)


@pytest.mark.parametrize("case", WINDOW_CASES + [c for c in CASES if c.name in ("1d_vocoder", "1d_fold_s4_p6")], ids=str)
def test_wgmma_x3_kernel(case, settings_override):
    """conv_wgmma_x3 (float32 "highest" as 3xTF32 on wgmma): the forward pass
    and grad_input, where it applies, under 1e-5 and within twice torch's
    error against float64, in poisoned memory."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_x3(settings_override)
    check_forward(case, ("float32", "highest"))
    check_backward(case, ("float32", "highest"))
    if case in WINDOW_CASES:
        assert "forward" in ran, "conv_wgmma_x3 did not run the forward pass"


@pytest.mark.parametrize("tile", _kernels.WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_s1_d3", "1d_win_fold8", "1d_win_fold32")], ids=str)
def test_every_wgmma_x3_tile(case, tile, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran, picked = _spy_wgmma_x3(settings_override), _force_tile(settings_override, "conv_wgmma_x3", tile)
    check_forward(case, ("float32", "highest"))
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_fold8", "1d_win_s2_d2")], ids=str)
def test_wgmma_x3_64_bit_index(case, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_x3(settings_override)
    settings_override(index_type="long long")
    check_forward(case, ("float32", "highest"))
    assert ran


# Longer rows and more images than WINDOW_CASES: tens of (image, column tile)
# items, some phases' last tiles ragged, a bias-only phase (stride 2,
# dilation 2), groups; and stride-1 rows of 1034 outputs (2 more than a
# multiple of 8), whose whole tiles take the fast epilogue with every row
# alignment (64 and 128 output channels: both tiles).
_MANY_ITEMS_CASES = [
    Case("1d_res_s1_d3", 1, 3, 40, 72, (5,), (1000,), padding=2, dilation=3),
    Case("1d_res_s1_rows64", 1, 2, 64, 64, (3,), (1032,)),
    Case("1d_res_s1_rows128", 1, 2, 32, 128, (3,), (1032,)),
    Case("1d_res_fold8", 1, 5, 48, 40, (16,), (232,), stride=8, padding=4),
    Case("1d_res_s2_d2", 1, 4, 32, 36, (3,), (600,), stride=2, padding=1, dilation=2),
    Case("1d_res_g2", 1, 3, 64, 64, (5,), (520,), stride=2, padding=1, output_padding=1, groups=2),
]


@pytest.mark.parametrize("multiprocessors", [1, 3])
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", WINDOW_CASES + _MANY_ITEMS_CASES + FILL_CASES, ids=str)
def test_resident_many_items_per_block(case, mode, multiprocessors, settings_override):
    """A grid far smaller than the work: each block runs the window pipeline
    across many items (and, with 3, items not in step between blocks)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_resident(settings_override, multiprocessors)
    check_forward(case, mode)
    assert "forward" in ran


@pytest.mark.parametrize("tile", _kernels.WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", FILL_CASES + [c for c in WINDOW_CASES if c.name in ("1d_win_s2_d2", "1d_win_s2_d4_op3")], ids=str)
def test_resident_fill(case, mode, tile, settings_override):
    """conv_wgmma_resident's fill (stride 2, dilation a multiple of it) on
    each tile, against float64 in poisoned memory: whole tiles of every row
    alignment, tiles cut by the rows' and the output's ends."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_resident(settings_override, 3)
    picked = _force_tile(settings_override, "conv_wgmma_resident", tile)
    keys = _spy_fill(settings_override)
    check_forward(case, mode)
    assert "forward" in ran and picked == [tile] and keys and keys[-1][-1] == "fill", (ran, picked, keys)


@pytest.mark.parametrize("case", [c for c in FILL_CASES if c.name in ("1d_fill_s2_d2", "1d_fill_g2_p0")], ids=str)
def test_resident_fill_64_bit_index(case, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran, keys = _spy_resident(settings_override, 2), _spy_fill(settings_override)
    settings_override(index_type="long long")
    check_forward(case, ("float16", "highest"))
    assert "forward" in ran and keys[-1][-1] == "fill" and keys[-1][2] == "long long"


@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
def test_fill_not_routed_past_one_row_tile(mode, settings_override):
    """Where the fill applies but the output channels (256) exceed a row
    tile, the pass takes the routes it took before the fill (the dilated
    fold), no fill build, and is right."""
    ran = settings_override.observe_launches()
    dtype = numpy_dtype(mode[0])
    rng = numpy.random.default_rng(34)
    x = rng.standard_normal((1, 32, 4096)).astype(dtype)
    w = rng.standard_normal((32, 256, 3)).astype(dtype)
    kwargs = dict(stride=2, padding=1, dilation=2)
    y = cupyconv.conv_transpose1d(_to_gpu(x, dtype), _to_gpu(w, dtype), **kwargs, precision=mode[1])
    convolutions = [name for name in ran if not name.startswith("pack_")]  # pack_window_weight<..., true> rounds to TF32
    assert convolutions and not any(name.endswith(", true>") for name in convolutions), ran
    oracle = reference.conv_transpose1d(x.astype(numpy.float64), w.astype(numpy.float64), **kwargs)
    limit = {"float32": 2e-3, "float16": 2e-3, "bfloat16": 2e-2}[mode[0]]
    assert relative_error(cupy.asnumpy(y).astype(numpy.float64), oracle) < limit


@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
def test_resident_without_fill_folds(mode, settings_override):
    """With use_fill off, the same problems take conv_wgmma_resident's
    folded route (the dilated kernel made dense), still right."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(use_fill=False)
    ran, keys = _spy_resident(settings_override, 3), _spy_fill(settings_override)
    check_forward(FILL_CASES[0], mode)
    assert "forward" in ran and keys and all(key[-1] != "fill" for key in keys)


# Source rows that are not whole 16-byte vectors: conv_wgmma_resident copies
# them in 8- or 4-byte pieces (_kernels.resident_copy_bytes).  Copy sizes of
# (the forward input's rows, grad_input's grad_output rows), 16-bit then
# float32: a (4, 16; 8, 16), b (8, 4; 16, 8), c (none, 4; 4, 8: odd 16-bit
# inputs stay off it), d (8, none; 16, 4; 128 output channels).  Padding, so
# that copies in it are zero-filled; ragged last tiles.
_ROW_COPY_CASES = [
    Case("1d_rows_a", 1, 2, 40, 64, (5,), (1002,), padding=1, dilation=2),
    Case("1d_rows_b", 1, 2, 32, 40, (5,), (1004,), padding=1, bias=False),
    Case("1d_rows_c", 1, 3, 48, 36, (4,), (1001,), dilation=3),
    Case("1d_rows_d", 1, 2, 64, 128, (4,), (996,), padding=3, output_padding=1, dilation=2),
]


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", _ROW_COPY_CASES, ids=str)
def test_resident_row_copies(case, mode, multiprocessors, settings_override):
    """conv_wgmma_resident's forward pass and grad_input on source rows of
    every copy size, against float64; and that it ran exactly the passes
    whose rows a copy size divides, with that size."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_resident(settings_override, multiprocessors)
    names = settings_override.observe_launches()
    check_forward(case, mode)
    check_backward(case, mode)
    (in_w,) = case.size
    out_w = in_w - 1 - 2 * case.padding + case.dilation * (case.kernel[0] - 1) + case.output_padding + 1
    expected = [(p, _kernels.resident_copy_bytes(w, mode[0])) for p, w in (("forward", in_w), ("grad_input", out_w))]
    expected = [(p, copy) for p, copy in expected if copy is not None]
    assert any(copy < 16 for _, copy in expected)
    assert ran == [p for p, _ in expected]
    copies = [int(n.rstrip(">").split(",")[-1]) for n in names if n.startswith("conv_wgmma_resident<")]
    assert copies == [copy for _, copy in expected]


# conv_wgmma_split (16-bit, 128 x 128 tiles, one stride-1 phase, no fold):
# P2's shape on short rows (4 channel slices; the forward input's rows 4-byte
# copies, grad_output's 16-byte ones), output channels that leave rows of the
# tile empty (72, 96: the warps past them write one by one or not at all),
# groups, 5 slices (the largest weight tile that fits), a last slice part
# padding (100 channels), 8-byte copies with an odd output row (every tile
# written one by one) and no bias, a dilation.  Ragged last column tiles.
_SPLIT_CASES = [
    Case("1d_split_p2", 1, 3, 128, 128, (3,), (1030,)),
    Case("1d_split_rows72_d3", 1, 2, 40, 72, (5,), (1000,), padding=2, dilation=3),
    Case("1d_split_g2", 1, 2, 192, 192, (4,), (520,), padding=1, groups=2),
    Case("1d_split_c160", 1, 2, 160, 128, (3,), (600,)),
    Case("1d_split_c100", 1, 2, 100, 96, (3,), (800,), padding=1),
    Case("1d_split_odd_rows", 1, 2, 64, 128, (2,), (1004,), bias=False),
]
SPLIT_MODES = [m for m in WGMMA_MODES if m[0] in _kernels.SPLIT_DTYPES]


def _spy_split(override, multiprocessors=None):
    """The names of the kernels launched from here on (observe_launches:
    conv_wgmma_split's builds among them), conv_wgmma_split on wherever
    conv_wgmma_resident would run with its tile (_spy_resident)."""
    _spy_resident(override, multiprocessors)
    override(use_split=True)
    return override.observe_launches()


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("mode", SPLIT_MODES, ids=["-".join(m) for m in SPLIT_MODES])
@pytest.mark.parametrize("case", _SPLIT_CASES, ids=str)
def test_split_kernel(case, mode, multiprocessors, settings_override):
    """conv_wgmma_split's forward pass (and grad_input, where it takes it)
    against float64, within twice torch's error, in poisoned memory; with 3
    multiprocessors' grid each block cycles its window buffers over many
    items."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_split(settings_override, multiprocessors)
    check_forward(case, mode)
    assert any(n.startswith("conv_wgmma_split<") for n in names), "conv_wgmma_split did not run the forward pass"
    check_backward(case, mode)


@pytest.mark.parametrize("mode", SPLIT_MODES, ids=["-".join(m) for m in SPLIT_MODES])
@pytest.mark.parametrize("case", _SPLIT_CASES, ids=str)
def test_split_matches_resident(case, mode, settings_override):
    """conv_wgmma_split's outputs are bitwise conv_wgmma_resident's: the same
    MMAs in the same order, the same rounding."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_split(settings_override, 3)
    rng = numpy.random.default_rng(22)
    dtype = numpy_dtype(mode[0])
    x, w, b = (_to_gpu(a, dtype) for a in case.arrays(rng, dtype))
    outputs, ran = [], []
    for split in (True, False):
        settings_override(use_split=split)
        names.clear()
        outputs.append(cupy.asnumpy(cupyconv.conv_transpose1d(x, w, b, **case.kwargs)))
        ran.append([n.split("<")[0] for n in names if n.startswith("conv_wgmma_")])
    assert ran == [["conv_wgmma_split"], ["conv_wgmma_resident"]]
    assert outputs[0].tobytes() == outputs[1].tobytes()


@pytest.mark.parametrize("case", [c for c in _SPLIT_CASES if c.name in ("1d_split_p2", "1d_split_rows72_d3")], ids=str)
def test_split_64_bit_index(case, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_split(settings_override, 3)
    settings_override(index_type="long long")
    check_forward(case, ("bfloat16", "highest"))
    assert any(n.startswith("conv_wgmma_split<") and "long long" in n for n in names)


@pytest.mark.parametrize("case", _ROW_COPY_CASES, ids=str)
def test_wgmma_x3_row_copies(case, settings_override):
    """conv_wgmma_x3's forward pass and grad_input on float32 source rows of
    every load size (16, 8 and 4 bytes: _ROW_COPY_CASES), under 1e-5 against
    float64 in poisoned memory; and that it ran both passes, each with the
    load size its rows allow."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_x3(settings_override)
    names = settings_override.observe_launches()
    check_forward(case, ("float32", "highest"))
    check_backward(case, ("float32", "highest"))
    (in_w,) = case.size
    out_w = in_w - 1 - 2 * case.padding + case.dilation * (case.kernel[0] - 1) + case.output_padding + 1
    assert ran == ["forward", "grad_input"]
    copies = [int(n.rstrip(">").split(",")[-1]) for n in names if n.startswith("conv_wgmma_x3<")]
    assert copies == [_kernels.resident_copy_bytes(w, "float32") for w in (in_w, out_w)]


# P1- and P2-like grad_input (batch 1) under the default thresholds: their
# grad_output rows (L + 12 and L + 2 elements) are not whole 16-byte vectors
# in 16-bit; conv_wgmma_resident (P1) and conv_wgmma_split (P2: 128 rows)
# copy them in 8- and 4-byte pieces.  P2's float32 rows (L + 2) are not
# either: "highest" takes conv_wgmma_x3 in 8-byte pieces, "tf32"
# conv_wgmma_tf32 (whole vectors from the aligned one below each window; copy
# None: it has no copy size).
_GRAD_INPUT_ROUTES = [
    (dict(x=(1, 32, 16384), w=(32, 64, 5), dilation=3), dtype, "conv_wgmma_resident", 8) for dtype in ("float16", "bfloat16")
] + [
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), dtype, "conv_wgmma_split", 4) for dtype in ("float16", "bfloat16")
] + [
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float32", "tf32"), "conv_wgmma_tf32", None),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float32", "highest"), "conv_wgmma_x3", 8),
]


@pytest.mark.parametrize("problem, mode, kernel, copy", _GRAD_INPUT_ROUTES, ids=str)
def test_resident_grad_input_routing(problem, mode, kernel, copy, settings_override):
    """On Hopper, P1- and P2-like grad_input take `kernel` with the copy size
    their rows allow (nowhere else a wgmma kernel); the result against
    float64 either way."""
    dtype, precision = (mode, None) if isinstance(mode, str) else mode
    names = settings_override.observe_launches()
    problem = dict(problem)
    x_shape, w_shape = problem.pop("x"), problem.pop("w")
    case = Case("p", 1, 1, w_shape[0], w_shape[1], (w_shape[2],), (x_shape[2],), **problem)
    rng = numpy.random.default_rng(33)
    x, w, _ = case.arrays(rng, numpy_dtype(dtype))
    out_w = x_shape[2] + problem.get("dilation", 1) * (w_shape[2] - 1)
    gy = rng.standard_normal((1, w_shape[1], out_w)).astype(numpy_dtype(dtype)).astype(numpy.float64)
    gx, _, _ = cupyconv.conv_transpose1d_backward(
        _to_gpu(gy, numpy_dtype(dtype)), _to_gpu(x, numpy_dtype(dtype)), _to_gpu(w, numpy_dtype(dtype)), **problem,
        output_mask=(True, False, False), precision=precision,
    )  # fmt: skip
    wgmma = [n for n in names if n.startswith("conv_wgmma")]
    if _is_hopper() and copy is None:
        assert wgmma == [_kernels.conv_tf32_name("int", w_shape[2])], names
    elif _is_hopper():
        prefix = f"{kernel}<int," if kernel == "conv_wgmma_x3" else f"{kernel}<{_kernels.CUDA_TYPE[dtype]}, int,"
        assert len(wgmma) == 1 and wgmma[0].startswith(prefix), names
        assert wgmma[0].endswith(f", {copy}>"), names
    else:
        assert wgmma == [], names
    oracle = exact_backward(case, gy, x, w)[0]
    limit = {"float32": 2e-3 if precision == "tf32" else 1e-5, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    assert relative_error(cupy.asnumpy(gx).astype(numpy.float64), oracle) < limit


# Benchmark-like shapes (batch 1) under the default thresholds, and the wgmma
# kernel each takes: conv_wgmma_resident for one-phase passes whose rows fit
# one row tile (P1-like in every mode) and, through its fill, for P4-like
# ones (stride 2, dilation 2) in tf32 and 16-bit; conv_wgmma_split for
# P2-like ones in 16-bit (128 rows: conv_wgmma_resident's 128 x 128 tile);
# conv_wgmma_tf32 for P2-like ones in tf32.  float32 "highest" takes
# conv_wgmma_x3 where its row rule sends it (P1-, P2-like; not X3-like,
# 16384 rows, nor P4-like, whose fill runs on conv_window).  X2-like takes
# conv_fold in 16-bit, conv_tf32_multicast in "tf32" and conv_tf32_stream in
# "highest".
_WGMMA_ROUTES = [
    (dict(x=(1, 32, 16384), w=(32, 64, 5), dilation=3), mode, "conv_wgmma_resident")
    for mode in (("float32", "tf32"), ("float16", "highest"), ("bfloat16", "highest"))
] + [
    (dict(x=(1, 32, 16384), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float16", "highest"), "conv_wgmma_resident"),
    (dict(x=(1, 32, 16384), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float32", "tf32"), "conv_wgmma_resident"),
    (dict(x=(1, 32, 16384), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float32", "highest"), None),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float16", "highest"), "conv_wgmma_split"),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("bfloat16", "highest"), "conv_wgmma_split"),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float32", "tf32"), "conv_wgmma_tf32"),
    (dict(x=(1, 32, 16384), w=(32, 64, 5), dilation=3), ("float32", "highest"), "conv_wgmma_x3"),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float32", "highest"), "conv_wgmma_x3"),
    (dict(x=(1, 512, 512), w=(512, 256, 16), stride=8, padding=4), ("float32", "highest"), "conv_tf32_stream"),
    (dict(x=(1, 512, 512), w=(512, 256, 16), stride=8, padding=4), ("float16", "highest"), "conv_fold"),
    (dict(x=(1, 512, 512), w=(512, 256, 16), stride=8, padding=4), ("bfloat16", "highest"), "conv_fold"),
    (dict(x=(1, 512, 512), w=(512, 256, 16), stride=8, padding=4), ("float32", "tf32"), "conv_tf32_multicast"),
    (dict(x=(1, 64, 64), w=(64, 64, 1024), stride=256, padding=384), ("float32", "highest"), None),
]


@pytest.mark.parametrize("problem, mode, expected", _WGMMA_ROUTES, ids=lambda v: v if isinstance(v, bool) else str(v))
def test_wgmma_routing(problem, mode, expected, settings_override):
    """Which benchmark-like 1D shapes take which wgmma kernel with no
    threshold changed (on Hopper; nowhere else), and that the result is right
    either way."""
    names = settings_override.observe_launches()
    problem = dict(problem)
    x_shape, w_shape = problem.pop("x"), problem.pop("w")
    dtype = numpy_dtype(mode[0])
    rng = numpy.random.default_rng(32)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    y = cupyconv.conv_transpose1d(_to_gpu(x, dtype), _to_gpu(w, dtype), **problem, precision=mode[1])
    ran = [name.split("<")[0] for name in names]
    wgmma = [name for name in ran if name.startswith(("conv_wgmma", "conv_fold", "conv_tf32_stream", "conv_tf32_multicast"))]
    assert wgmma == ([expected] if expected and _is_hopper() else []), ran
    oracle = reference.conv_transpose1d(x.astype(numpy.float64), w.astype(numpy.float64), **problem)
    limit = {"float32": 1e-5 if mode[1] == "highest" else 2e-3, "float16": 2e-3, "bfloat16": 2e-2}[mode[0]]
    assert relative_error(cupy.asnumpy(y).astype(numpy.float64), oracle) < limit
