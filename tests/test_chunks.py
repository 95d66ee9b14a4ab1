"""Problems with an axis past 32-bit lengths run as pieces (cupyconv/_chunks.py).

The pieces are checked on the CPU two ways: on small problems cut into many
pieces (the same code the CUDA path runs, with the NumPy reference as each
piece's kernel), against the reference run whole in float64; and on problems
around 2**31 positions, without allocating them, for what the CUDA path
relies on: every piece's lengths fit a kernel's int, its arrays take the
32-bit-index builds, and the pieces tile the output (forward) or the input
(backward) exactly once, in order.
"""

from __future__ import annotations

import numpy
import pytest

from cupyconv import _chunks, _geometry, _kernels, reference

from sweep import CASES, FOLD_CASES, WINDOW_CASES, relative_error

LIMIT = _chunks.INT32_LIMIT


def _geometry_of(case):
    lead = () if case.batch is None else (case.batch,)
    return _geometry.make_geometry(
        case.dims, lead + (case.in_channels,) + case.size,
        (case.in_channels, case.out_channels // case.groups) + case.kernel, (case.out_channels,) if case.bias else None,
        case.stride, case.padding, case.output_padding, case.groups, case.dilation,
    )  # fmt: skip


SMALL = [c for c in CASES + WINDOW_CASES + FOLD_CASES if c.batch != 0]


@pytest.mark.parametrize("pieces", [2, 5, 40])
@pytest.mark.parametrize("case", SMALL, ids=str)
def test_pieces_compute_the_whole_problem(case, pieces):
    geometry = _geometry_of(case)
    elements = max(1, numpy.prod(geometry.output_shape4) // pieces)
    rng = numpy.random.default_rng(1)
    x, w, b = case.arrays(rng)
    x4, w4 = x.reshape(geometry.input_shape4), w.reshape(geometry.weight_shape4)
    gy4 = rng.standard_normal(geometry.output_shape4)
    for axis in (0, 1) if case.dims == 2 else (1,):
        y4 = numpy.full(geometry.output_shape4, numpy.nan)
        _chunks.forward_by_pieces(numpy, x4, y4, geometry, axis, lambda sub, xp: reference.forward(xp, w4, b, sub), elements)
        assert relative_error(y4, reference.forward(x4, w4, b, geometry)) < 1e-13

        def run(sub, gy_piece, x_piece, wanted):
            gi, gw, _ = reference.backward(gy_piece, x_piece if x_piece is not None else numpy.zeros(sub.input_shape4), w4, sub, wanted + (False,))
            return gi, gw

        grad_input4 = numpy.full(geometry.input_shape4, numpy.nan)
        grad_weight = _chunks.backward_by_pieces(numpy, gy4, x4, geometry, axis, (True, True), run, grad_input4, elements)
        gi, gw, _ = reference.backward(gy4, x4, w4, geometry, (True, True, False))
        assert relative_error(grad_input4, gi) < 1e-13
        assert relative_error(grad_weight, gw) < 1e-13


LONG = [
    # (spatial_dims, input shape, weight shape, stride, padding, output_padding, dilation)
    (1, (1, 1, 2**31 + 2**20), (1, 1, 3), 2, 0, 0, 1),  # the float16 call that overflowed
    (1, (1, 1, 2**30 + 1), (1, 1, 3), 2, 1, 1, 1),  # only the output passes 2**31
    (1, (2, 3, 2**31 - 1), (3, 2, 16), 8, 4, 0, 1),
    (1, (1, 2, 2**31 + 5), (2, 4, 5), 1, 2, 0, 3),
    (1, (1, 1, 2**32), (1, 1, 1), 1, 0, 0, 1),
    (1, (1, 1, 2**28), (1, 1, 1024), 256, 0, 0, 1),  # a stride far above the pieces' halo
    (2, (1, 1, 1, 2**31 + 3), (1, 1, 3, 3), (1, 2), 1, (0, 1), 1),
    (2, (1, 2, 2**31 + 3, 1), (2, 1, 2, 1), 1, 0, 0, (2, 1)),
]


@pytest.mark.parametrize("dims, shape, weight, stride, padding, output_padding, dilation", LONG)
def test_pieces_of_long_axes_fit_32_bit_kernels(dims, shape, weight, stride, padding, output_padding, dilation):
    geometry = _geometry.make_geometry(dims, shape, weight, None, stride, padding, output_padding, 1, dilation)
    axis = _chunks.long_axis(geometry)
    assert axis is not None
    forward = _chunks.forward_pieces(geometry, axis)
    backward = _chunks.backward_pieces(geometry, axis)
    for pieces, whole in ((forward, geometry.out_size[axis]), (backward, geometry.in_size[axis])):
        assert pieces[0].o0 == 0 and pieces[-1].o1 == whole
        assert all(a.o1 == b.o0 for a, b in zip(pieces, pieces[1:]))
        for piece in pieces:
            sub = piece.geometry
            assert _chunks.long_axis(sub) is None
            assert max(sub.in_size + sub.out_size) <= LIMIT
            sizes = (numpy.prod(sub.input_shape4), numpy.prod(sub.output_shape4), numpy.prod(sub.weight_shape4))
            assert _kernels.index_type(*sizes) == "int"
    for piece in forward:
        assert piece.geometry.out_size[axis] == piece.o1 - piece.o0
        assert 0 <= piece.geometry.output_padding[axis] < piece.geometry.stride[axis]
        assert piece.hi - piece.lo == piece.geometry.in_size[axis]
    for piece in backward:
        assert piece.geometry.in_size[axis] == piece.o1 - piece.o0
        assert piece.hi - piece.lo == piece.geometry.out_size[axis]
        assert piece.geometry.padding[axis] == 0 and piece.geometry.output_padding[axis] == 0


def test_short_axes_take_no_pieces():
    over = _geometry.make_geometry(1, (1, 1, 2**30), (1, 1, 2), None, 2, 0, 0, 1, 1)  # output 2**31
    assert over.out_size[1] == 2**31 and _chunks.long_axis(over) == 1
    under = _geometry.make_geometry(1, (1, 1, 2**30), (1, 1, 1), None, 2, 0, 0, 1, 1)  # output 2**31 - 1
    assert under.out_size[1] == LIMIT and _chunks.long_axis(under) is None
    many = _geometry.make_geometry(1, (64, 128, 2**20), (128, 128, 3), None, 1, 1, 0, 1, 1)  # 2**33 elements, short rows
    assert _chunks.long_axis(many) is None  # the 64-bit-index builds take it whole
    assert _kernels.index_type(numpy.prod(many.input_shape4)) == "long long"
