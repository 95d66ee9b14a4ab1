"""The GPU path: launches the kernels of cupyconv/kernels on CuPy arrays.

Imported only when a CuPy array is passed (``import cupyconv`` works without
CuPy).  Kernels compile on first use through ``cupy.RawModule`` with one
name expression per template instantiation, memoized per device; CuPy's
on-disk cache keeps the compiled code across processes.  Every launch runs on
the arrays' device and CuPy's current stream.
"""

from __future__ import annotations

import cupy
import numpy

from . import _kernels
from ._geometry import Geometry

_i32 = numpy.int32
_i64 = numpy.int64


@cupy.memoize(for_each_device=True)
def _function(filename: str, name: str):
    module = cupy.RawModule(code=_kernels.source(filename), options=("-std=c++17",), name_expressions=(name,))
    return module.get_function(name)


@cupy.memoize(for_each_device=True)
def _multiprocessors() -> int:
    return cupy.cuda.Device().attributes["MultiProcessorCount"]


@cupy.memoize(for_each_device=True)
def _phase_table(flat):
    table = cupy.asarray(_kernels.phase_table_array(flat))
    # The upload is ordered on the current stream only; the memoized table may
    # later be read from other streams, so wait for it once, here.
    cupy.cuda.get_current_stream().synchronize()
    return table


def _contiguous4(array, shape4):
    return cupy.ascontiguousarray(array).reshape(shape4)


def _blocks_for(count: int) -> int:
    if count > _kernels.INT32_LIMIT:
        raise ValueError(f"problem too large: {count} thread blocks exceed the grid limit")
    return count


def _launch_gemm(source4, weight, bias, out4, geometry: Geometry, phases, *, red_channels, out_channels, w_strides):
    """One conv_gemm launch over every (group, phase, row tile, column tile)."""
    flat, phases_h, phases_w = phases
    dtype = numpy.dtype(out4.dtype).name
    tile = _kernels.pick_tile(_kernels.GEMM_TILES, out_channels)
    index = _kernels.index_type(source4.size, out4.size, weight.size)
    counts = flat[0::9]
    cols_h, cols_w = max(counts[:phases_h]), max(counts[phases_h:])
    batch, _, in_h, in_w = source4.shape
    _, _, out_h, out_w = out4.shape
    m_tiles = -(-out_channels // tile.bm)
    col_tiles = -(-(batch * cols_h * cols_w) // tile.bn)
    blocks = _blocks_for(phases_h * phases_w * m_tiles * col_tiles * geometry.groups)
    kernel = _function("conv_gemm.cu", _kernels.gemm_name(dtype, index, tile))
    kernel(
        (blocks,),
        (tile.threads,),
        (
            source4, weight, bias, out4, _phase_table(flat),  # bias None: a null pointer
            _i32(phases_h), _i32(phases_w), _i32(batch), _i32(geometry.groups),
            _i32(red_channels), _i32(out_channels),
            _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w), _i32(geometry.kernel[1]),
            _i64(w_strides[0]), _i64(w_strides[1]), _i64(w_strides[2]),
            _i32(cols_h), _i32(cols_w), _i32(m_tiles), _i32(col_tiles),
        ),
    )  # fmt: skip


def forward(x, weight, bias, geometry: Geometry, precision: str):
    """conv_transpose on CuPy arrays; returns the output in the user's shape.

    Both precisions currently run the float32 SIMT kernels, which meet the
    "highest" accuracy; "tf32" only permits TF32 and never makes results worse.
    """
    with x.device:
        out4 = cupy.empty(geometry.output_shape4, dtype=x.dtype)
        if out4.size:
            x4 = _contiguous4(x, geometry.input_shape4)
            weight = cupy.ascontiguousarray(weight)
            bias = cupy.ascontiguousarray(bias) if bias is not None else None
            _launch_gemm(
                x4, weight, bias, out4, geometry, _kernels.forward_phases(geometry),
                red_channels=geometry.in_channels_per_group,
                out_channels=geometry.out_channels_per_group,
                w_strides=_kernels.gemm_weight_strides(geometry, "forward"),
            )  # fmt: skip
        return out4.reshape(geometry.output_shape)


def backward(grad_output, x, weight, geometry: Geometry, output_mask, precision: str):
    """(grad_input, grad_weight, grad_bias) on CuPy arrays, None where masked."""
    want_input, want_weight, want_bias = output_mask
    with grad_output.device:
        gy4 = _contiguous4(grad_output, geometry.output_shape4)
        grad_input = grad_weight = grad_bias = None
        if want_input:
            grad_input = _grad_input(gy4, cupy.ascontiguousarray(weight), geometry)
        if want_weight:
            grad_weight = _grad_weight(gy4, _contiguous4(x, geometry.input_shape4), geometry)
        if want_bias:
            grad_bias = _grad_bias(gy4, geometry)
        return grad_input, grad_weight, grad_bias


def _grad_input(gy4, weight, geometry: Geometry):
    grad4 = cupy.empty(geometry.input_shape4, dtype=gy4.dtype)
    if grad4.size:
        _launch_gemm(
            gy4, weight, None, grad4, geometry, _kernels.grad_input_phases(geometry),
            red_channels=geometry.out_channels_per_group,
            out_channels=geometry.in_channels_per_group,
            w_strides=_kernels.gemm_weight_strides(geometry, "grad_input"),
        )  # fmt: skip
    return grad4.reshape(geometry.user_shape(geometry.input_shape4))


def _splits(independent_blocks: int, positions: int, min_positions: int) -> int:
    """How many pieces to cut a reduction of `positions` into: enough blocks to
    keep every multiprocessor busy, none shorter than min_positions."""
    wanted = -(-4 * _multiprocessors() // max(independent_blocks, 1))
    return max(1, min(wanted, positions // max(min_positions, 1)))


def _sum_splits(workspace, out, count: int, splits: int):
    dtype = numpy.dtype(out.dtype).name
    blocks = max(1, min(-(-count // _kernels.REDUCE_THREADS), 8 * _multiprocessors()))
    _function("grad_weight.cu", _kernels.sum_splits_name(dtype))(
        (blocks,), (_kernels.REDUCE_THREADS,), (workspace, out, _i64(count), _i32(splits))
    )


def _grad_weight(gy4, x4, geometry: Geometry):
    dtype = numpy.dtype(gy4.dtype).name
    grad = cupy.empty(geometry.weight_shape4, dtype=gy4.dtype)
    rows = geometry.in_channels_per_group
    kernel_h, kernel_w = geometry.kernel
    columns = geometry.out_channels_per_group * kernel_h * kernel_w
    positions = x4.size // geometry.in_channels  # batch * H * W
    if positions == 0:  # empty batch: the sum over nothing
        grad[...] = 0
        return grad.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    tile = _kernels.pick_tile(_kernels.GRAD_WEIGHT_TILES, rows)
    m_tiles = -(-rows // tile.bm)
    col_tiles = -(-columns // tile.bn)
    splits = _splits(m_tiles * col_tiles * geometry.groups, positions, 32 * tile.bk)
    per_split = -(-positions // splits)
    per_split = -(-per_split // tile.bk) * tile.bk
    splits = -(-positions // per_split)
    workspace = cupy.empty((splits,) + grad.shape, dtype=numpy.float64)  # reductions sum in double
    index = _kernels.index_type(x4.size, gy4.size, workspace.size)
    blocks = _blocks_for(m_tiles * col_tiles * splits * geometry.groups)
    (sh, sw), (ph, pw), (dh, dw) = geometry.stride, geometry.padding, geometry.dilation
    batch, _, in_h, in_w = x4.shape
    _, _, out_h, out_w = gy4.shape
    _function("grad_weight.cu", _kernels.grad_weight_name(dtype, index, tile))(
        (blocks,),
        (tile.threads,),
        (
            x4, gy4, workspace, _i32(batch), _i32(geometry.groups),
            _i32(rows), _i32(geometry.out_channels_per_group),
            _i32(in_h), _i32(in_w), _i32(out_h), _i32(out_w), _i32(kernel_h), _i32(kernel_w),
            _i32(sh), _i32(sw), _i32(ph), _i32(pw), _i32(dh), _i32(dw),
            _i64(per_split), _i32(splits), _i32(m_tiles), _i32(col_tiles),
        ),
    )  # fmt: skip
    _sum_splits(workspace, grad, grad.size, splits)
    return grad.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))


def _grad_bias(gy4, geometry: Geometry):
    dtype = numpy.dtype(gy4.dtype).name
    channels = geometry.out_channels
    grad = cupy.empty((channels,), dtype=gy4.dtype)
    batch = geometry.batch
    plane = geometry.out_size[0] * geometry.out_size[1]
    total = batch * plane
    if total == 0:
        grad[...] = 0
        return grad
    splits = _splits(channels, total, 16 * _kernels.BIAS_THREADS)
    per_split = -(-total // splits)
    splits = -(-total // per_split)
    workspace = cupy.empty((splits, channels), dtype=numpy.float64)
    _function("grad_weight.cu", _kernels.grad_bias_name(dtype))(
        (_blocks_for(channels * splits),),
        (_kernels.BIAS_THREADS,),
        (gy4, workspace, _i32(batch), _i32(channels), _i64(plane), _i64(per_split), _i32(splits)),
    )
    _sum_splits(workspace, grad, channels, splits)
    return grad

