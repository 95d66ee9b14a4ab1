"""conv_tiny (the smallest forward passes): what it takes under its limits
(with autotuning on and 64-bit indices too), and the small passes on the
kernels they take with it off."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import _ops, _to_gpu, check_forward
from oracle import MODES, numpy_dtype
from sweep import CASES

import cupyconv
import cupyconv.settings
from cupyconv import _geometry

if HAVE_GPU:
    import cupyconv._remember  # (cupyconv._remember.FAST_FORWARD below: the remembered calls' tables)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def _spy_tiny(monkeypatch):
    """The geometries conv_tiny's plans are made for (a list that fills as
    calls plan), with the small launches' caches cleared so that each new
    signature plans afresh."""
    from cupyconv import _cuda
    from cupyconv.kernels import conv_tiny

    made, original = [], conv_tiny._tiny_plan.__wrapped__
    monkeypatch.setattr(conv_tiny, "_tiny_plan", lambda *args: made.append(args[0]) or original(*args))
    _cuda._small_forward_launch.cache_clear()
    cupyconv._remember.FAST_FORWARD.clear()
    return made


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_past_tiny(case, mode, monkeypatch, settings_override):
    """The small forward passes on the kernels they take with conv_tiny off
    (conv_gemm, conv_mma, depthwise_forward)."""
    settings_override(tiny_max_output=0)
    made = _spy_tiny(monkeypatch)
    check_forward(case, mode)
    assert not made


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_basic", "1d_groups2_s2", "2d_per_axis", "2d_dw_per_axis")], ids=str)
def test_tiny_routes(case, mode, monkeypatch):
    """conv_tiny takes the small passes under both of its limits, with
    autotuning on too (it has no tiles: the same launch, the same bits) and
    with 64-bit indices; a pass over either limit goes past it."""
    from cupyconv import _autotune
    from cupyconv.kernels import rules

    made = _spy_tiny(monkeypatch)
    check_forward(case, mode)
    assert made
    dtype = numpy_dtype(mode[0])
    x, w, b = (_to_gpu(a, dtype) for a in case.arrays(numpy.random.default_rng(33), dtype))
    fn = _ops(case).forward
    y = fn(x, w, b, **case.kwargs, precision=mode[1])
    with monkeypatch.context() as m:
        m.setattr(_autotune, "enabled", lambda: True)
        m.setattr(_autotune, "choose", lambda signature, *args, **kwargs: pytest.fail(f"{signature} tuned"))
        assert cupy.array_equal(fn(x, w, b, **case.kwargs, precision=mode[1]), y)
    with cupyconv.settings.override(index_type="long long"):
        count = len(made)
        check_forward(case, mode)
        assert len(made) == count + 1
    geometry = _geometry.geometry_of(case.dims, x.shape, w.shape, b.shape, case.stride, case.padding, case.output_padding, case.groups, case.dilation)
    for name, value in (("tiny_max_output", y.size - 1), ("tiny_max_products", rules._products_per_output(geometry, "forward") - 1e-9)):
        with cupyconv.settings.override(**{name: value}):
            count = len(made)
            check_forward(case, mode)
            assert len(made) == count, name
