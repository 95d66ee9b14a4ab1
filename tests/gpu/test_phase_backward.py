"""The phase rewrite (phase_backward: a 16-bit 1D backward pass whose dilation
is a multiple of its stride, run as a stride-1 problem on one phase of
grad_output), its phase_gather kernel, and the shapes it takes."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import _ops, _served, check_backward, poisoned_allocations
from sweep import CASES, PHASE_BACKWARD_CASES, WINDOW_CASES

from cupyconv import _geometry

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def _spy_phase_backward(override):
    """The geometries whose backward pass ran as a stride-1 problem on one
    phase of grad_output (small problems included)."""
    override(use_phase_backward="anywhere")
    return _served(override, ("phase_backward",), lambda p, plan: p.geometry)


PHASE_MODES = [("float16", "highest"), ("bfloat16", "highest")]


@pytest.mark.parametrize("mode", PHASE_MODES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", PHASE_BACKWARD_CASES + [c for c in CASES + WINDOW_CASES if c.name in ("1d_big_padding", "1d_win_s2_d4_op3")], ids=str)
def test_phase_backward(case, mode, settings_override):
    """The backward pass as a stride-1 problem on grad_output's one phase
    (float16 and bfloat16): gradients against float64 within twice torch's
    error, poisoned outputs."""
    ran = _spy_phase_backward(settings_override)
    check_backward(case, mode)
    assert ran, "the phase rewrite did not run"


@pytest.mark.parametrize("index", ["int", "long long"])
@pytest.mark.parametrize("case", PHASE_BACKWARD_CASES + [c for c in CASES if c.name == "1d_big_padding"], ids=str)
def test_phase_gather(case, index, settings_override):
    """phase_gather gives bitwise the NumPy gather of the rewrite (zeros at
    the ends included), in poisoned memory, with both index types."""
    from cupyconv.kernels import phase_gather

    settings_override(index_type=index)  # _launch._index_type's answer, "int" too, whatever the sizes
    lead = () if case.batch is None else (case.batch,)
    geometry = _geometry.make_geometry(
        1, lead + (case.in_channels,) + case.size, (case.in_channels, case.out_channels // case.groups) + case.kernel, None,
        case.stride, case.padding, case.output_padding, case.groups, case.dilation,
    )  # fmt: skip
    phase = phase_gather._phase_backward_geometry(geometry)
    gy = numpy.random.default_rng(35).standard_normal(geometry.output_shape4).astype(numpy.float16)
    expected = phase_gather._phase_grad_output(gy, geometry, *phase)
    with poisoned_allocations():
        gathered = phase_gather._phase_grad_output(cupy.asarray(gy), geometry, *phase)
    assert gathered.shape == expected.shape and cupy.asnumpy(gathered).tobytes() == expected.tobytes()


def test_phase_backward_output_mask_and_routing(settings_override):
    """grad_input alone and grad_weight alone give the bits of the full pass;
    P4's shape takes the rewrite, small problems and stride 2 with dilation 3
    do not."""
    from cupyconv.kernels import phase_gather

    case = PHASE_BACKWARD_CASES[0]
    ran = _spy_phase_backward(settings_override)
    rng = numpy.random.default_rng(34)
    x, w, _ = case.arrays(rng, numpy.float16)
    out_shape = _ops(case).ref_forward(x, w, **case.kwargs).shape
    gy, xg, wg = (cupy.asarray(a.astype(numpy.float16)) for a in (rng.standard_normal(out_shape), x, w))
    backward = _ops(case).backward
    full = backward(gy, xg, wg, **case.kwargs)
    with poisoned_allocations():
        alone = [backward(gy, xg, wg, **case.kwargs, output_mask=mask)[i] for i, mask in enumerate(((True, False, False), (False, True, False)))]
    for a, b in zip(full[:2], alone):
        assert cupy.asnumpy(a).tobytes() == cupy.asnumpy(b).tobytes()
    assert len(ran) == 3
    settings_override.undo()

    def routed(x_shape, w_shape, stride, padding, dilation, dtype="float16"):
        geometry = _geometry.make_geometry(1, x_shape, w_shape, None, stride, padding, 0, 1, dilation)
        return phase_gather._phase_backward_routed(geometry, dtype) is not None

    assert routed((16, 32, 131072), (32, 64, 3), 2, 1, 2) and routed((16, 32, 131072), (32, 64, 3), 2, 1, 2, "bfloat16")
    assert not routed((16, 32, 131072), (32, 64, 3), 2, 1, 2, "float32")  # the copy costs more than it saves
    assert not routed((1, 32, 256), (32, 64, 3), 2, 1, 2)  # 64 x 513 outputs
    assert not routed((16, 32, 131072), (32, 64, 3), 2, 1, 3)
