"""conv_direct, forced onto every case (its thresholds lifted): every mode
and tile, blocks of several tiles, 64-bit indices, its weight pack, and the
benchmark-like shapes it takes with no threshold changed."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import (
    LARGE_CASES,
    _force_tile,
    _to_gpu,
    check_forward,
    poisoned_allocations,
)
from oracle import MODES, numpy_dtype
from sweep import CASES, Case, relative_error

import cupyconv
from cupyconv import _geometry, _kernels, reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_direct_weight_pack(dtype):
    """pack_direct_weight (conv_direct's weight in one launch) against
    _kernels.pack_direct_weight in NumPy, converted to the accumulator type
    and padded with zeros to each tile's rows: bitwise, in poisoned memory."""
    from cupyconv import _launch
    from cupyconv.kernels import conv_direct

    geometry = _geometry.make_geometry(2, (2, 6, 9, 10), (6, 20, 3, 2), None, (2, 3), (1, 0), 0, 2, (1, 2))
    w = numpy.random.default_rng(35).standard_normal((6, 20, 3, 2)).astype(numpy_dtype(dtype))
    acc = numpy.float64 if dtype == "float64" else numpy.float32
    view = _kernels.pack_direct_weight(w, geometry).astype(acc)
    for tile in _kernels.DIRECT_TILES:
        m_pad = -(-view.shape[4] // tile.bm) * tile.bm
        expected = numpy.concatenate([view, numpy.zeros(view.shape[:4] + (m_pad - view.shape[4],), acc)], axis=4)
        with poisoned_allocations():
            plan, shape = conv_direct._direct_weight_plan(geometry, dtype, tile.bm)
            packed = cupy.empty(shape, dtype=acc)
            _launch._launch(plan, (cupy.asarray(w), packed))
            got = cupy.asnumpy(packed)
        assert got.dtype == acc and got.shape == expected.shape, (tile, got.dtype, got.shape, expected.shape)
        assert (got.view(numpy.uint8) == expected.view(numpy.uint8)).all(), tile


# conv_direct, forced onto every case (small calls included): a row tail of
# channels in each tile, a long row (several column tiles), strides 1 to 6,
# groups, no bias, a 2D P5-like stride-5 problem and a P4-like 1D one.
DIRECT_CASES = CASES + LARGE_CASES + [
    Case("2d_s5_d2_tall", 2, 2, 8, 40, (3, 3), (12, 70), stride=5, padding=1, dilation=2),
    Case("1d_s2_d2_long", 1, 2, 12, 70, (3,), (700,), stride=2, padding=1, dilation=2, bias=False),
    Case("1d_s3_k7_g3", 1, 2, 9, 12, (7,), (300,), stride=3, padding=4, output_padding=2, groups=3),
]


def _spy_direct(override):
    """conv_direct on every forward pass, small ones included; returns the
    names of the kernels launched from here on (observe_launches)."""
    override(direct_max_products_tensor_cores=10**9, direct_max_products_cuda_cores=10**9, direct_max_products_full_rows=10**9)
    override(direct_min_output=0)
    override(small_forward_max_output=0)
    override(use_grouped_forward=False)
    override(use_window_fill=False)
    return override.observe_launches()


def _directs(names) -> list:
    """The conv_direct launches among `names` (one a forward pass it served)."""
    return [name for name in names if name.startswith("conv_direct<")]


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", DIRECT_CASES, ids=str)
def test_direct_kernel(case, mode, settings_override):
    """conv_direct's forward pass in every dtype and mode, against float64."""
    ran = _spy_direct(settings_override)
    check_forward(case, mode)
    if case.batch != 0 and case.in_channels != case.groups:  # empty outputs launch nothing; depthwise has its stencil
        assert _directs(ran), "conv_direct did not run"


@pytest.fixture
def direct_tiles_per_block(monkeypatch):
    """Sets the tiles each conv_direct block walks; its plans are made afresh
    before and after."""
    from cupyconv.kernels import conv_direct

    plans = conv_direct._direct_plan  # the cached function, before any spy wraps it

    def use(per_block):
        monkeypatch.setattr(conv_direct, "direct_tiles_per_block", lambda tiles, multiprocessors: per_block)  # (read by _direct_plan)
        plans.cache_clear()

    yield use
    plans.cache_clear()


@pytest.mark.parametrize("per_block", [1, 3])
@pytest.mark.parametrize("mode", [("float32", "highest"), ("bfloat16", "highest")], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in DIRECT_CASES if c.name in ("2d_s5_d2_tall", "1d_s2_d2_long", "2d_per_axis", "1d_s3_k7_g3")], ids=str)
def test_direct_blocks_of_several_tiles(case, mode, per_block, settings_override, direct_tiles_per_block):
    """Blocks of 1 tile and of 3 (runs that cross rows and end mid-class)."""
    ran = _spy_direct(settings_override)
    direct_tiles_per_block(per_block)
    check_forward(case, mode)
    assert _directs(ran)


@pytest.mark.parametrize("tile", _kernels.DIRECT_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "highest"), ("float16", "highest"), ("float64", "highest")], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("case", [c for c in DIRECT_CASES if c.name in ("1d_mid_channels", "2d_s5_d2_tall", "1d_s3_k7_g3")], ids=str)
def test_every_direct_tile(case, mode, tile, settings_override):
    ran, picked = _spy_direct(settings_override), _force_tile(settings_override, "conv_direct", tile)
    check_forward(case, mode)
    assert _directs(ran) and picked, "the tile under test did not run"


# (problem, mode, conv_direct expected) under the default thresholds: P5's
# shape (11.5 products per output) in every mode; P4's (48) in none (float32
# "highest" takes conv_window's fill: test_window_fill_routing; the others
# the tensor-core kernels); P3's (40, 8 output channels per group) not.
_ROUTES = [
    (dict(dims=2, x=(1, 32, 64, 128), w=(32, 64, 3, 3), stride=5, padding=1, dilation=2), mode, True)
    for mode in (("float32", "highest"), ("float32", "tf32"), ("float16", "highest"), ("bfloat16", "highest"), ("float64", "highest"))
] + [
    (dict(dims=1, x=(1, 32, 8192), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float32", "highest"), False),
    (dict(dims=1, x=(1, 32, 8192), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float32", "tf32"), False),
    (dict(dims=1, x=(1, 32, 8192), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float16", "highest"), False),
    (dict(dims=1, x=(2, 64, 8192), w=(64, 8, 5), stride=2, padding=1, output_padding=1, groups=4), ("float32", "highest"), False),
]


@pytest.mark.parametrize("problem, mode, expected", _ROUTES, ids=lambda v: v if isinstance(v, bool) else str(v))
def test_direct_routing(problem, mode, expected, settings_override):
    """Which benchmark-like shapes take conv_direct with no threshold
    changed, and that the result is right either way."""
    served = settings_override.observe_plans()
    problem = dict(problem)
    dims, x_shape, w_shape = problem.pop("dims"), problem.pop("x"), problem.pop("w")
    dtype = numpy_dtype(mode[0])
    rng = numpy.random.default_rng(31)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    fn = cupyconv.conv_transpose1d if dims == 1 else cupyconv.conv_transpose2d
    y = fn(_to_gpu(x, dtype), _to_gpu(w, dtype), **problem, precision=mode[1])
    assert any(plan.family == "conv_direct" for _, plan in served) == expected, [plan.family for _, plan in served]
    oracle = (reference.conv_transpose1d if dims == 1 else reference.conv_transpose2d)(x.astype(numpy.float64), w.astype(numpy.float64), **problem)
    limit = {"float64": 1e-12, "float32": 1e-5 if mode[1] == "highest" else 2e-3, "float16": 2e-3, "bfloat16": 2e-2}[mode[0]]
    assert relative_error(cupy.asnumpy(y).astype(numpy.float64), oracle) < limit


@pytest.mark.parametrize("case", [c for c in DIRECT_CASES if c.name in ("2d_s5_d2_tall", "1d_s3_k7_g3")], ids=str)
def test_direct_64_bit_index(case, settings_override):
    ran = _spy_direct(settings_override)
    settings_override(index_type="long long")
    check_forward(case, ("float32", "highest"))
    assert _directs(ran)
