"""The one-phase float32 backward families (cupyconv/kernels/grad_weight_phase.py
and grad_input_phase.py): grad_weight_phase, grad_input_phase and the fused
build of both gradients (grad_phase_fused): every phase case in both float32
tensor-core modes, splits, 64-bit indices, the same bits on repeated runs,
and the shapes each takes by default."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import (
    _PHASE_P1,
    _PHASE_P2,
    _PHASE_P4,
    _PHASE_S2_D3,
    FLOAT32_MODES,
    _check_float32_grad_weight_repeats,
    _check_phase_routing,
    _is_hopper,
    _ops,
    _spy,
    check_backward,
)
from sweep import GRAD_WEIGHT_PHASE_CASES, Case

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


def _spy_grad_weight_phase(override, multiprocessors=None):
    """The geometries grad_weight_phase served (small problems too); with
    `multiprocessors`, its splits are sized for that many (problems carry it)."""
    override(use_grad_weight_phase="anywhere")
    override(use_grad_phase_fused=False)  # grad_weight_phase itself, not its GX build
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _spy(override, "_grad_weight_phase", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", FLOAT32_MODES, ids=["highest", "tf32"])
@pytest.mark.parametrize("case", GRAD_WEIGHT_PHASE_CASES, ids=str)
def test_grad_weight_phase_kernel(case, mode, settings_override):
    """grad_weight_phase's gradients (3xTF32 and TF32) against float64, with
    the usual tolerances, in poisoned memory."""
    ran = _spy_grad_weight_phase(settings_override)
    check_backward(case, mode)
    assert ran, "grad_weight_phase did not run"


@pytest.mark.parametrize("multiprocessors", [1, 4096], ids=["long_splits", "one_item_splits"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_PHASE_CASES if c.name in ("gwp_p4like", "gwp_tails_g2", "gwp_k12")], ids=str)
def test_grad_weight_phase_splits_and_64_bit_index(case, multiprocessors, settings_override):
    """Blocks that sum many items, or one each, with 64-bit indices."""
    ran = _spy_grad_weight_phase(settings_override, multiprocessors)
    settings_override(index_type="long long")
    check_backward(case, ("float32", "highest"))
    assert ran


@pytest.mark.parametrize("precision", ["highest", "tf32"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_PHASE_CASES if c.name in ("gwp_p1like", "gwp_tails_g2")], ids=str)
def test_grad_weight_phase_is_bitwise_deterministic(case, precision, settings_override):
    """Several splits summed by sum_splits in order: the same bits on every run."""
    ran = _spy_grad_weight_phase(settings_override)
    _check_float32_grad_weight_repeats(case, precision)
    assert ran


def _spy_grad_input_phase(override):
    """The geometries grad_input_phase served (small problems and stride 1 too)."""
    override(use_grad_input_phase="anywhere")
    override(use_grad_phase_fused=False)  # grad_input_phase itself
    return _spy(override, "_grad_input_phase", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", FLOAT32_MODES, ids=["highest", "tf32"])
@pytest.mark.parametrize("case", GRAD_WEIGHT_PHASE_CASES, ids=str)
def test_grad_input_phase_kernel(case, mode, settings_override):
    """grad_input_phase's gradients (3xTF32 and TF32) against float64, with
    the usual tolerances, in poisoned memory (on grad_weight_phase's cases:
    the same one-phase problems)."""
    ran = _spy_grad_input_phase(settings_override)
    check_backward(case, mode)
    assert ran, "grad_input_phase did not run"


@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_PHASE_CASES if c.name in ("gwp_p4like", "gwp_tails_g2")], ids=str)
def test_grad_input_phase_64_bit_index(case, settings_override):
    ran = _spy_grad_input_phase(settings_override)
    settings_override(index_type="long long")
    check_backward(case, ("float32", "highest"))
    assert ran


# grad_weight_phase's GX build (grad_input and grad_weight in one pass): the
# phase cases whose groups fit one tile each way with up to 3 taps (stride 1
# with vectors and channel tails, P4's fold, one tap at stride 4, no batch,
# two groups).
GRAD_PHASE_FUSED_CASES = [c for c in GRAD_WEIGHT_PHASE_CASES if c.name in ("gwp_p4like", "gwp_k1_s4", "gwp_unbatched", "gwp_tails_vec", "gwp_g2_one_tile")]


def _spy_grad_phase_fused(override, multiprocessors=None):
    """The geometries grad_weight_phase's GX build served (small problems
    too); with `multiprocessors`, its splits are sized for that many."""
    override(use_grad_phase_fused="anywhere")
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _spy(override, "_grad_phase_fused", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", FLOAT32_MODES, ids=["highest", "tf32"])
@pytest.mark.parametrize("case", GRAD_PHASE_FUSED_CASES, ids=str)
def test_grad_phase_fused_kernel(case, mode, settings_override):
    """Both gradients from grad_weight_phase's GX build (3xTF32 and TF32)
    against float64, with the usual tolerances, in poisoned memory."""
    ran = _spy_grad_phase_fused(settings_override)
    check_backward(case, mode)
    assert ran, "the GX build did not run"


@pytest.mark.parametrize("multiprocessors", [1, 4096], ids=["long_splits", "one_item_splits"])
@pytest.mark.parametrize("case", [c for c in GRAD_PHASE_FUSED_CASES if c.name in ("gwp_p4like", "gwp_unbatched")], ids=str)
def test_grad_phase_fused_splits_and_64_bit_index(case, multiprocessors, settings_override):
    ran = _spy_grad_phase_fused(settings_override, multiprocessors)
    settings_override(index_type="long long")
    check_backward(case, ("float32", "highest"))
    assert ran


@pytest.mark.parametrize("precision", ["highest", "tf32"])
@pytest.mark.parametrize("case", [c for c in GRAD_PHASE_FUSED_CASES if c.name in ("gwp_p4like", "gwp_tails_vec")], ids=str)
def test_grad_phase_fused_is_bitwise_deterministic(case, precision, settings_override):
    """Both gradients of the GX build (grad_weight's splits summed in order,
    grad_input's halves added in a fixed order): the same bits on every run."""
    rng = numpy.random.default_rng(29)
    x, w, _ = case.arrays(rng, numpy.float32)
    gy = cupy.asarray(rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(numpy.float32))
    xg, wg = cupy.asarray(x.astype(numpy.float32)), cupy.asarray(w.astype(numpy.float32))
    ran = _spy_grad_phase_fused(settings_override)
    def both():
        grads = _ops(case).backward(gy, xg, wg, **case.kwargs, output_mask=(True, True, False), precision=precision)[:2]
        return [cupy.asnumpy(a).tobytes() for a in grads]

    first = both()
    assert ran
    for _ in range(4):
        assert both() == first


def test_grad_phase_fused_routing(settings_override):
    """Both gradients of a float32 P4-like problem take the GX build in
    "tf32" only; P1 (stride 1, 5 taps), one gradient alone and P2 do not,
    and 16-bit types take their phase rewrite before it is asked."""
    served = settings_override.observe_plans()
    for case, dtype, mask, expected in [
        (_PHASE_P4, "float32", (True, True, False), {"tf32": True, "highest": False}),
        (_PHASE_P4, "float32", (True, False, False), {"tf32": None, "highest": None}),
        (_PHASE_P1, "float32", (True, True, False), {"tf32": False, "highest": False}),
        (_PHASE_P2, "float32", (True, True, False), {"tf32": False, "highest": False}),
        (_PHASE_P4, "float16", (True, True, False), {"highest": None}),  # the 16-bit phase rewrite comes first
    ]:
        rng = numpy.random.default_rng(5)
        x, w, _ = case.arrays(rng, numpy.float32)
        xg, wg = cupy.asarray(x.astype(dtype)), cupy.asarray(w.astype(dtype))
        gy = cupy.ones(_ops(case).ref_forward(x, w, **case.kwargs).shape, dtype=dtype)
        for precision, want in expected.items():
            served.clear()
            _ops(case).backward(gy, xg, wg, **case.kwargs, output_mask=mask, precision=precision)
            joint = [plan.family for p, plan in served if p.op == "backward"]
            # True: it ran; False: asked (both gradients, no joint family before it) and declined; None: not asked
            got = True if "grad_phase_fused" in joint else None if joint or mask[:2] != (True, True) else False
            assert got == want, (case.name, dtype, mask, precision, [(p.op, plan.family) for p, plan in served])


def test_grad_input_phase_routing(settings_override):
    """float32 P4-like problems (stride 2) and stride-1 problems with one tile
    of input channels a group (P1) take grad_input_phase in both tensor-core
    modes; wider stride-1 groups (P2), 16-bit types and a dilation that is
    not a multiple of the stride do not."""
    shapes = [
        (_PHASE_P4, True),
        (_PHASE_P1, True),
        (Case("p2", 1, 2, 128, 128, (3,), (1024,), padding=1), False),
        (_PHASE_S2_D3, False),
    ]
    _check_phase_routing(settings_override, "_grad_input_phase", (True, False, False), shapes, 6)


def test_grad_weight_phase_routing(settings_override):
    """float32 P1- and P4-like problems take grad_weight_phase in both
    tensor-core modes, P2's 4 x 2 channel tiles in "tf32" only where
    grad_weight_wgmma_tf32 does not take them (before Hopper); 16-bit ones, a
    dilation that is not a multiple of the stride and few channels do not."""
    shapes = [
        (_PHASE_P1, True),
        (_PHASE_P4, True),
        (_PHASE_S2_D3, False),
        (Case("c8", 1, 2, 8, 64, (3,), (4096,), padding=1), False),
        (_PHASE_P2, False if _is_hopper() else ("tf32",)),
    ]
    _check_phase_routing(settings_override, "_grad_weight_phase", (False, True, False), shapes, 5)
