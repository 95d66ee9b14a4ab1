"""Problems with a spatial axis longer than a kernel's 32-bit lengths, as
pieces that are not.

Every kernel takes its row lengths as ``int``: a 64-bit build widens its
offsets, not its lengths.  A call whose input or output has an axis of 2**31
elements or more is therefore run as a sequence of ordinary problems along
that axis, each of which routes as any call does.  Pieces are exact
sub-problems, not approximations:

- forward: output positions ``[o0, o1)`` are the whole output of the input
  positions ``[lo, hi)`` (zeros where those lie outside the input) with
  padding ``o0 + p - lo * s`` and an output padding below the stride;
- backward: input positions ``[a, b)`` see exactly the grad_output positions
  ``[a * s - p, (b - 1) * s - p + d * (K - 1)]`` (zeros outside it), the
  output of ``[a, b)`` with no padding.

Pure Python (no CuPy), so that the pieces are checked on the CPU.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

from ._geometry import Geometry, make_geometry

# Kernels' lengths are int; pieces are also kept under this many elements per
# array, so that they take the 32-bit-index builds.
INT32_LIMIT = 2**31 - 1
PIECE_ELEMENTS = 1 << 30


def long_axis(geometry: Geometry, limit: int = INT32_LIMIT) -> Optional[int]:
    """The axis (0: height, 1: width) of the 2D working form whose input or
    output length passes `limit`, or None."""
    for axis in (1, 0):
        if max(geometry.in_size[axis], geometry.out_size[axis]) > limit:
            return axis
    return None


class Piece(NamedTuple):
    """One sub-problem along `axis`: its geometry, and where it reads and
    writes on that axis: forward reads input [lo, hi) (zeros outside the
    input) and writes output [o0, o1); backward reads grad_output [lo, hi)
    and writes grad_input [o0, o1)."""

    geometry: Geometry
    lo: int
    hi: int
    o0: int
    o1: int


def _sub_geometry(geometry: Geometry, axis: int, in_length: int, padding: int, output_padding: int) -> Geometry:
    def spatial(values):  # the working form's (H, W) as the user's spatial arguments
        return tuple(values) if geometry.spatial_dims == 2 else (values[1],)

    def along(values, value):
        values = list(values)
        values[axis] = value
        return spatial(values)

    return make_geometry(
        geometry.spatial_dims,
        (geometry.batch, geometry.in_channels) + along(geometry.in_size, in_length),
        (geometry.in_channels, geometry.out_channels_per_group) + spatial(geometry.kernel),
        None,
        spatial(geometry.stride), along(geometry.padding, padding), along(geometry.output_padding, output_padding),
        geometry.groups, spatial(geometry.dilation),
    )  # fmt: skip


def _others(geometry: Geometry, axis: int) -> Tuple[int, int]:
    """(input, output) elements a channel has per position of `axis`."""
    return geometry.batch * geometry.in_size[1 - axis], geometry.batch * geometry.out_size[1 - axis]


def forward_pieces(geometry: Geometry, axis: int, elements: int = PIECE_ELEMENTS) -> List[Piece]:
    """Output pieces of at most about `elements` elements each (input and
    output), covering the output along `axis` in order."""
    s, p, d = geometry.stride[axis], geometry.padding[axis], geometry.dilation[axis]
    reach = d * (geometry.kernel[axis] - 1)
    out_length = geometry.out_size[axis]
    in_rows, out_rows = _others(geometry, axis)
    per_out = max(1, elements // (out_rows * geometry.out_channels))
    per_in = max(1, elements // (in_rows * geometry.in_channels))
    step = max(1, min(per_out, s * per_in - reach - 2 * s))
    pieces = []
    for o0 in range(0, out_length, step):
        o1 = min(o0 + step, out_length)
        lo = (o0 + p - reach) // s  # floor: padding' = o0 + p - lo * s lies in [reach, reach + s)
        padding = o0 + p - lo * s
        span = (o1 - o0) + 2 * padding - reach - 1  # = (in' - 1) * s + output_padding'
        in_length, output_padding = span // s + 1, span % s
        sub = _sub_geometry(geometry, axis, in_length, padding, output_padding)
        assert sub.out_size[axis] == o1 - o0
        pieces.append(Piece(sub, lo, lo + in_length, o0, o1))
    return pieces


def backward_pieces(geometry: Geometry, axis: int, elements: int = PIECE_ELEMENTS) -> List[Piece]:
    """Input pieces of at most about `elements` elements each, covering the
    input along `axis` in order; each reads the grad_output positions its
    inputs reach (zeros outside grad_output)."""
    s, p, d = geometry.stride[axis], geometry.padding[axis], geometry.dilation[axis]
    reach = d * (geometry.kernel[axis] - 1)
    in_length = geometry.in_size[axis]
    in_rows, out_rows = _others(geometry, axis)
    per_in = max(1, elements // (in_rows * geometry.in_channels))
    per_out = max(1, (elements // (out_rows * geometry.out_channels) - reach - 1) // s + 1)
    step = max(1, min(per_in, per_out))
    pieces = []
    for a in range(0, in_length, step):
        b = min(a + step, in_length)
        sub = _sub_geometry(geometry, axis, b - a, 0, 0)
        lo = a * s - p
        pieces.append(Piece(sub, lo, lo + sub.out_size[axis], a, b))
    return pieces


def _index(axis: int, lo: int, hi: int) -> tuple:
    return (slice(None), slice(None)) + ((slice(lo, hi), slice(None)) if axis == 0 else (slice(None), slice(lo, hi)))


def window(xp, array4, axis: int, lo: int, hi: int):
    """array4[..., lo:hi] along the working form's `axis` as a new
    C-contiguous array, zeros where [lo, hi) passes the array's ends."""
    length = array4.shape[2 + axis]
    if 0 <= lo and hi <= length:
        return xp.ascontiguousarray(array4[_index(axis, lo, hi)])
    shape = list(array4.shape)
    shape[2 + axis] = hi - lo
    piece = xp.zeros(shape, dtype=array4.dtype)
    first, last = max(lo, 0), min(hi, length)
    if first < last:
        piece[_index(axis, first - lo, last - lo)] = array4[_index(axis, first, last)]
    return piece


def forward_by_pieces(xp, x4, y4, geometry: Geometry, axis: int, run, elements: int = PIECE_ELEMENTS) -> None:
    """Writes the forward pass into y4 piece by piece; run(sub_geometry,
    input piece) returns a piece's output (any shape of its size)."""
    for piece in forward_pieces(geometry, axis, elements):
        out = run(piece.geometry, window(xp, x4, axis, piece.lo, piece.hi))
        y4[_index(axis, piece.o0, piece.o1)] = out.reshape(piece.geometry.output_shape4)


def backward_by_pieces(xp, gy4, x4, geometry: Geometry, axis: int, wanted, run, grad_input4=None, elements: int = PIECE_ELEMENTS):
    """grad_input (written into grad_input4) and grad_weight (returned) piece
    by piece, as `wanted` = (grad_input?, grad_weight?); run(sub_geometry,
    grad_output piece, input piece or None, wanted) returns a piece's
    (grad_input, grad_weight).  grad_weight's pieces are summed in float64, in
    a fixed order, and rounded once."""
    want_input, want_weight = wanted
    grad_weight = None
    for piece in backward_pieces(geometry, axis, elements):
        gy_piece = window(xp, gy4, axis, piece.lo, piece.hi)
        x_piece = window(xp, x4, axis, piece.o0, piece.o1) if want_weight else None
        grad_input, partial = run(piece.geometry, gy_piece, x_piece, wanted)
        if want_input:
            grad_input4[_index(axis, piece.o0, piece.o1)] = grad_input.reshape(piece.geometry.input_shape4)
        if want_weight:
            partial = partial.astype(xp.float64)
            grad_weight = partial if grad_weight is None else grad_weight + partial
    return None if grad_weight is None else grad_weight.astype(gy4.dtype)
