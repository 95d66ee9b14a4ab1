"""grouped_forward and grouped_backward (few channels a group): every
tensor-core mode, short items on few multiprocessors, output masks, 64-bit
indices, grouped_backward's two float32 builds, the same bits on repeated
runs, and the shapes each rule takes."""

from __future__ import annotations

import functools

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import (
    LARGE_CASES,
    TENSOR_CORE_MODES,
    _ops,
    _served,
    check_backward,
    check_backward_deterministic,
    check_forward,
    poisoned_allocations,
)
from sweep import CASES, GROUPED_BACKWARD_CASES, GROUPED_FORWARD_CASES

from cupyconv import _geometry, _kernels

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def _spy_grouped_backward(monkeypatch, override, tiles=None, multiprocessors=None):
    """The geometries grouped_backward served (small problems too).  With
    `tiles`, its items are that many input positions or fewer (its cached
    plans re-made); with `multiprocessors`, its splits are sized for that
    many (problems carry it), so that blocks take several items."""
    from cupyconv import _registry
    from cupyconv.kernels import grouped_backward

    override(grouped_min_input=0)
    if tiles is not None:
        monkeypatch.setattr(grouped_backward, "GROUPED_TILES", tiles)  # read by its plans, grouped_backward_applies and _pipes
        monkeypatch.setattr(grouped_backward, "_grouped_backward_plan", functools.lru_cache(maxsize=None)(grouped_backward._grouped_backward_plan.__wrapped__))
        _registry._choose.cache_clear()  # (whether it applies depends on the tiles)
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _served(override, ("grouped_backward",), lambda p, plan: p.geometry)


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", GROUPED_BACKWARD_CASES, ids=str)
def test_grouped_backward_kernel(case, mode, monkeypatch, settings_override):
    """grouped_backward's gradients against float64 (float32 "highest" under
    1e-5, the others within twice torch's error)."""
    ran = _spy_grouped_backward(monkeypatch, settings_override)
    check_backward(case, mode)
    assert ran, "grouped_backward did not run"


@pytest.mark.parametrize("tiles, multiprocessors", [((64,), 1), ((128,), 3), ((512,), 2)], ids=["64-1", "128-3", "512-2"])
@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name in ("gb_p3", "gb_c8_s3_d2", "gb_unbatched")], ids=str)
def test_grouped_backward_items(case, tiles, multiprocessors, monkeypatch, settings_override):
    """Short items and few multiprocessors: blocks walk many items, items
    end inside a row and at an image's end."""
    ran = _spy_grouped_backward(monkeypatch, settings_override, tiles, multiprocessors)
    check_backward(case, ("float32", "highest"))
    check_backward(case, ("bfloat16", "highest"))
    assert ran


@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name in ("gb_p3", "gb_c4_m32")], ids=str)
def test_grouped_backward_output_mask(case, monkeypatch, settings_override):
    """grad_input alone and grad_weight alone (smaller staging, no weight or
    no x) give the bits of the full pass."""
    ran = _spy_grouped_backward(monkeypatch, settings_override)
    rng = numpy.random.default_rng(25)
    x, w, _ = case.arrays(rng, numpy.float32)
    out_shape = _ops(case).ref_forward(x, w, **case.kwargs).shape
    gy, xg, wg = (cupy.asarray(a.astype(numpy.float32)) for a in (rng.standard_normal(out_shape), x, w))
    backward = _ops(case).backward
    full = backward(gy, xg, wg, **case.kwargs, output_mask=(True, True, False))
    with poisoned_allocations():
        alone = [backward(gy, xg, wg, **case.kwargs, output_mask=mask)[i] for i, mask in enumerate(((True, False, False), (False, True, False)))]
    for a, b in zip(full[:2], alone):
        assert cupy.asnumpy(a).tobytes() == cupy.asnumpy(b).tobytes()
    assert len(ran) == 3


@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name in ("gb_p3", "gb_c8_s3_d2")], ids=str)
def test_grouped_backward_64_bit_index(case, monkeypatch, settings_override):
    ran = _spy_grouped_backward(monkeypatch, settings_override)
    settings_override(index_type="long long")
    check_backward(case, ("float16", "highest"))
    check_backward(case, ("float32", "highest"))  # the pipelined build
    assert ran


@pytest.mark.parametrize("pipe", [True, False], ids=["pipelined", "one-buffer"])
@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name != "gb_c4_m32"], ids=str)
def test_grouped_backward_float32_builds(case, pipe, monkeypatch, settings_override):
    """float32 with 8 or 16 channels a group runs the pipelined build (two
    cp.async staging buffers, grad_input's channels in two parts) unless
    grouped_pipe is off, then the one-buffer build: both against float64 in
    both float32 modes, and the launched names show which ran."""
    settings_override(grouped_pipe=pipe)
    ran = _spy_grouped_backward(monkeypatch, settings_override)
    launched = settings_override.observe_launches()
    for mode in (("float32", "highest"), ("float32", "tf32")):
        check_backward(case, mode)
    assert ran and all(_kernels.grouped_backward_pipes(geometry, "float32") for geometry in ran)
    builds = [name for name in launched if name.startswith("grouped_backward<")]
    assert builds and all(name.endswith(", true>") == pipe for name in builds)


@pytest.mark.parametrize("mode", [("float32", "highest"), ("float16", "highest")], ids=["float32", "float16"])
@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name in ("gb_p3", "gb_unbatched")], ids=str)
def test_grouped_backward_is_bitwise_deterministic(case, mode, monkeypatch, settings_override):
    ran = _spy_grouped_backward(monkeypatch, settings_override, multiprocessors=3)
    check_backward_deterministic(case, mode)
    assert ran


def _grouped_forward_takes(case) -> bool:
    lead = () if case.batch is None else (case.batch,)
    geometry = _geometry.make_geometry(
        case.dims, lead + (case.in_channels,) + case.size, (case.in_channels, case.out_channels // case.groups) + case.kernel, None,
        case.stride, case.padding, case.output_padding, case.groups, case.dilation,
    )  # fmt: skip
    return _kernels.grouped_forward_applies(geometry, "float32")


def _spy_grouped_forward(override):
    """The geometries grouped_forward served, small problems included (the
    size rule lifted, no remembered small launch)."""
    override(use_grouped_forward="anywhere")
    override(small_forward_max_output=0)
    return _served(override, ("grouped_forward",), lambda p, plan: p.geometry)


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", GROUPED_FORWARD_CASES + [c for c in CASES + LARGE_CASES if _grouped_forward_takes(c)], ids=str)
def test_grouped_forward_kernel(case, mode, settings_override):
    """grouped_forward's output against float64 (float32 "highest" under
    1e-5, the others within twice torch's error), every element written
    (poisoned memory)."""
    ran = _spy_grouped_forward(settings_override)
    check_forward(case, mode)
    assert ran, "grouped_forward did not run"


@pytest.mark.parametrize("case", [c for c in GROUPED_FORWARD_CASES if c.name in ("gf_p3", "gf_c2_m16_s3")], ids=str)
def test_grouped_forward_64_bit_index(case, settings_override):
    ran = _spy_grouped_forward(settings_override)
    settings_override(index_type="long long")
    check_forward(case, ("bfloat16", "highest"))
    assert ran


def test_grouped_forward_routing():
    """P3's shape takes grouped_forward in every mode but float64; wider
    groups, other output-channel counts, long strides, 2D problems and small
    outputs keep the other kernels."""
    from cupyconv.kernels import grouped_forward

    def routed(x_shape, w_shape, dtype="float32", dims=1, precision="highest", **kwargs):
        geometry = _geometry.make_geometry(
            dims, x_shape, w_shape, None, kwargs.get("stride", 1), kwargs.get("padding", 0), kwargs.get("output_padding", 0), kwargs.get("groups", 1), 1
        )  # fmt: skip
        return grouped_forward._grouped_forward_routed(geometry, dtype, precision)

    p3 = dict(stride=2, padding=1, output_padding=1, groups=4)
    assert all(routed((16, 64, 65536), (64, 8, 5), dtype, **p3) for dtype in ("float32", "float16", "bfloat16"))
    assert routed((16, 64, 65536), (64, 8, 5), precision="tf32", **p3)
    assert not routed((16, 64, 65536), (64, 8, 5), "float64", **p3)
    # 16 output channels a group at stride 4: float32 "highest" only
    assert routed((16, 64, 16384), (64, 16, 8), stride=4, groups=4)
    assert not any(routed((16, 64, 16384), (64, 16, 8), d, precision=p, stride=4, groups=4) for d, p in (("float32", "tf32"), ("float16", "highest")))
    assert not routed((1, 64, 128), (64, 8, 5), **p3)  # 8192 outputs
    assert not routed((4, 128, 4096), (128, 8, 5), stride=2, groups=4)  # 32 channels a group
    assert not routed((4, 64, 4096), (64, 6, 5), **p3)  # 6 output channels a group
    assert not routed((4, 64, 4096), (64, 8, 5), stride=5, groups=4)
    assert not routed((4, 64, 4096), (64, 8, 17), **p3)  # 17 taps
    assert not routed((4, 64, 4096), (64, 8, 1), stride=2, groups=64)  # depthwise: its stencil
    assert not routed((4, 64, 64, 64), (64, 8, 3, 3), dims=2, stride=2, groups=4)


def test_grouped_backward_routing():
    """P3's shape takes grouped_backward in every mode but float64; wider
    groups, 2D problems and small inputs keep the GEMMs."""
    from cupyconv.kernels import grouped_backward

    def routed(x_shape, w_shape, dtype="float32", dims=1, **kwargs):
        geometry = _geometry.make_geometry(dims, x_shape, w_shape, None, kwargs.get("stride", 1), kwargs.get("padding", 0), 0, kwargs.get("groups", 1), 1)
        return grouped_backward._grouped_backward_routed(geometry, dtype)

    p3 = dict(stride=2, padding=1, groups=4)
    assert all(routed((4, 64, 4096), (64, 8, 5), dtype, **p3) for dtype in ("float32", "float16", "bfloat16"))
    assert not routed((4, 64, 4096), (64, 8, 5), "float64", **p3)
    assert not routed((4, 64, 128), (64, 8, 5), **p3)  # 2**15 input elements
    assert not routed((4, 128, 4096), (128, 8, 5), stride=2, groups=4)  # 32 channels a group
    assert not routed((4, 64, 4096), (64, 16, 5), **p3)  # 16 output channels a group: 4 * 16 > 32 lanes
    assert not routed((4, 64, 4096), (64, 8, 9), **p3)  # 9 taps
    assert not routed((4, 64, 64, 64), (64, 8, 3, 3), dims=2, stride=2, groups=4)
