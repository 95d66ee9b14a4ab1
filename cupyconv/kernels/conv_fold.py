"""The host side of conv_fold: its families' rules and plans."""

from __future__ import annotations

import functools
import math

from .. import _kernels, settings
from .._geometry import Geometry
from .._launch import _i32, _i64, _Launch, _TensorMap
from .._plan import Buffer, Family, Plan, Step
from .rules import _gemm_index, _weight_dtype

_S = settings.current  # the routing settings in force



def _fold_applies(geometry: Geometry, dtype: str) -> bool:
    return (
        _S().use_fold and dtype in _kernels.FOLD_DTYPES and _kernels._is_1d(geometry) and geometry.groups == 1
        and geometry.stride[1] == _kernels.FOLD_STRIDE and geometry.dilation[1] == 1
        and _kernels.FOLD_STRIDE < geometry.kernel[1] <= _kernels.FOLD_TAPS and geometry.in_size[1] % 8 == 0
    )  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _fold_plan(geometry: Geometry, dtype: str, index: str, blocks: int, max_shared: int, raw: bool):
    """(conv_fold launch, pack_fold_weight launch, packed shape), or None
    where the weight tile and buffers do not fit in shared memory; with
    `raw` (16 taps, a 16-byte-aligned weight) conv_fold reads the weight as
    given, and there is no pack (None, None)."""
    channels_padded = _kernels.fold_channels_padded(geometry.in_channels)
    shared = _kernels.fold_shared_bytes(channels_padded)
    if shared > max_shared:
        return None
    in_w, out_w, padding = geometry.in_size[1], geometry.out_size[1], geometry.padding[1]
    batch, in_channels = geometry.batch, geometry.in_channels
    groups_q = -(-(out_w + padding) // _kernels.FOLD_STRIDE)  # output positions o + padding = 8q + r: q < groups_q
    tiles_per_row = -(-groups_q // _kernels.FOLD_BN)
    full_tiles = -(-in_w // _kernels.FOLD_BN)  # column tiles with input positions (the rest: no MMAs)
    row_tiles = -(-geometry.out_channels // (_kernels.FOLD_ROWS // _kernels.FOLD_TAPS))
    pairs = -(-row_tiles // _kernels.FOLD_CLUSTER)  # a cluster's blocks take the row tiles of a pair (an odd count's last: zeros)
    work = pairs * batch * tiles_per_row
    if pairs * _kernels.FOLD_CLUSTER * batch * tiles_per_row > _kernels.INT32_LIMIT or max(in_w, tiles_per_row * _kernels.FOLD_BN) > _kernels.INT32_LIMIT:
        return None  # its tile numbers and the tensor map's coordinates are int
    # clusters in equal parts of each pair where there are enough (conv_fold.cu)
    clusters = max(blocks // _kernels.FOLD_CLUSTER, 1)
    parts = clusters // pairs
    grid = _kernels.FOLD_CLUSTER * (pairs * parts if parts else clusters)
    tensor_map = _TensorMap(
        dims=(in_w, in_channels, batch), strides=(in_w * 2, in_w * 2 * in_channels), box=_kernels.FOLD_BOX,
    )  # fmt: skip
    scalars = (tensor_map,) + tuple(
        _i32(v) for v in (batch, channels_padded, geometry.out_channels, out_w, padding, tiles_per_row, full_tiles, in_channels, raw, work, parts)
    )  # fmt: skip
    launch = _Launch("conv_fold.cu", _kernels.fold_name(dtype, index), grid, _kernels.FOLD_BLOCK_THREADS, scalars, shared)
    if raw:
        return launch, None, None
    packed_shape = (pairs * _kernels.FOLD_CLUSTER * _kernels.FOLD_ROWS, channels_padded)
    total = math.prod(packed_shape)
    pack_scalars = (_i32(geometry.in_channels), _i32(geometry.out_channels), _i32(geometry.kernel[1]), _i32(channels_padded), _i64(total))
    pack_tiles = packed_shape[0] // _kernels.FOLD_TAPS * -(-channels_padded // _kernels.PACK_FOLD_CI)  # (output channel, input-channel tile)
    pack_blocks = max(1, min(pack_tiles, _kernels.PACK_MAX_BLOCKS))
    pack = _Launch("conv_fold.cu", _kernels.pack_fold_weight_name(dtype), pack_blocks, _kernels.PACK_THREADS, pack_scalars)
    return launch, pack, packed_shape


class ConvFold(Family):
    name, ops = "conv_fold", ("forward",)

    def _raw(self, p):
        return _S().use_fold_raw_weight and p.geometry.kernel[1] == _kernels.FOLD_TAPS and p.aligned("weight", 16)

    def _launches(self, p):
        s = _S()
        return _fold_plan(p.geometry, p.dtype, _gemm_index(p), s.fold_blocks or p.device.multiprocessors, p.device.max_shared, self._raw(p))

    def reject(self, p):
        if not _fold_applies(p.geometry, p.dtype):
            return "not a 16-bit 1D stride-8 pass of 9 to 16 taps, dilation 1, one group, rows of whole 16-byte vectors"
        if p.output_size < _S().window_min_output:
            return "output below window_min_output"
        if not p.aligned("source", 16):
            return "input not 16-byte aligned"
        if p.device.compute_capability != 90:
            return "needs compute capability 9.0"
        if self._launches(p) is None:
            return "its weight tile does not fit in shared memory, or its counts pass 32 bits"
        return None

    def plan(self, p, tile):
        launch, pack, packed_shape = self._launches(p)
        if pack is None:
            return Plan(self.name, "raw weight", (Step(launch, ("source", "weight", "bias", "out")),))
        steps = (Step(pack, ("weight", "t0")), Step(launch, ("source", "t0", "bias", "out")))
        return Plan(self.name, "packed weight", steps, (Buffer(packed_shape, _weight_dtype(p)),))
