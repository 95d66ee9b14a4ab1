"""conv_direct.cu on the host: conv_direct's tiles, sizes as the kernel has
them, heuristic, name, weight layout and shared-memory layout.
"""

from __future__ import annotations

from typing import NamedTuple

from .._geometry import Geometry
from .common import CUDA_TYPE, instantiation_loop, pick_tile


class DirectTile(NamedTuple):
    """A conv_direct block: BM output channels (8 channel threads of BM / 8
    each) by 32 column threads, each taking TN consecutive columns of one
    phase at a time."""

    bm: int
    tn: int


DIRECT_TILES = (DirectTile(16, 8), DirectTile(32, 4), DirectTile(64, 4))
DIRECT_THREADS = 256
DIRECT_MAX_H_TAPS = 16  # conv_direct.cu keeps a row's H taps in arrays of 16
DIRECT_STAGE_BYTES = 80 * 1024  # the most shared memory the output tile may take
DIRECT_MAX_SLOT_GROUPS = 8  # CP is 4 * TN * k for k up to this
DIRECT_HEADER_BYTES = 912  # conv_direct.cu: the class's H taps, their first rows, the slots with W taps and their first taps, ahead of the arrays
DIRECT_MAX_STRIDE_W = 64  # conv_direct.cu lists up to this many slots (W phases)
DIRECT_WARPS = DIRECT_THREADS // 32  # the sums' units are dealt to these
DIRECT_FETCH = 8  # conv_direct.cu: input values a thread fetches per tile, at most
DIRECT_MAX_TILES_PER_BLOCK = 16
DIRECT_HEURISTIC_ROWS = 32  # the heuristic takes the narrowest tile covering min(M, this)
DIRECT_MIN_BLOCKS_PER_SM = 8  # tiles per block shrink (to 1) to keep at least this many blocks per multiprocessor


def direct_heuristic(out_channels: int) -> DirectTile:
    """conv_direct's tile without the autotuner: the narrowest covering up to
    DIRECT_HEURISTIC_ROWS output channels per group, so 16x8 for up to 16,
    else 32x4 (on H100, P5 and P4, 32x4 ran 0.58-0.65 ms
    and 1.66 ms against 64x4's 0.62-0.72 and 1.87-2.02: more blocks per
    multiprocessor; perf notes v11)."""
    return pick_tile(DIRECT_TILES, min(out_channels, DIRECT_HEURISTIC_ROWS))


def direct_name(dtype: str, index: str, tile: DirectTile) -> str:
    return f"conv_direct<{CUDA_TYPE[dtype]}, {index}, {tile.bm}, {tile.tn}>"


def direct_tiles_per_block(tiles: int, multiprocessors: int) -> int:
    """Tiles a conv_direct block walks (its weight staged once): up to
    DIRECT_MAX_TILES_PER_BLOCK, fewer while the grid would have under
    DIRECT_MIN_BLOCKS_PER_SM blocks per multiprocessor."""
    return max(1, min(DIRECT_MAX_TILES_PER_BLOCK, tiles // (DIRECT_MIN_BLOCKS_PER_SM * multiprocessors)))


def pack_direct_weight(weight, geometry: Geometry):
    """A view of `weight` ordered (groups, KH, KW, C, M), conv_direct's
    layout before M is padded to the tile."""
    k = geometry
    w = weight.reshape(k.groups, k.in_channels_per_group, k.out_channels_per_group, k.kernel[0], k.kernel[1])
    return w.transpose(0, 3, 4, 1, 2)


def direct_h_taps(geometry: Geometry) -> int:
    """The most H taps any output row of the forward pass has (input bounds
    ignored)."""
    kernel, stride, padding, dilation = geometry.kernel[0], geometry.stride[0], geometry.padding[0], geometry.dilation[0]
    return max(sum((r + padding - k * dilation) % stride == 0 for k in range(kernel)) for r in range(stride))


def direct_w_slots(geometry: Geometry) -> int:
    """How many W phases (conv_direct's slots) of the forward pass have a W
    tap: the others are bias alone."""
    kernel, stride, padding, dilation = geometry.kernel[1], geometry.stride[1], geometry.padding[1], geometry.dilation[1]
    return sum(any((s + padding - k * dilation) % stride == 0 for k in range(kernel)) for s in range(stride))


def direct_layout(geometry: Geometry, tile: DirectTile, dtype: str):
    """(cp, span, th_max, shared bytes) of conv_direct with `tile`, or None
    where a row has more H taps than the kernel holds, a stride along W over
    DIRECT_MAX_STRIDE_W, or a tile's input rows more values than its threads
    fetch (256 * DIRECT_FETCH).

    CP (columns per phase slot) is 4 * TN * k, so that a unit of a warp's
    4 column threads stays in one slot; k is chosen for the best product of
    two efficiencies: the units' (k per slot with a W tap) share of the last
    round dealt to the 8 warps, and the output columns' share of the tiles
    covering them (with the output tile within DIRECT_STAGE_BYTES, and the
    tile's input rows within what its threads fetch)."""
    th_max = direct_h_taps(geometry)
    if th_max > DIRECT_MAX_H_TAPS or geometry.stride[1] > DIRECT_MAX_STRIDE_W:
        return None
    slots = direct_w_slots(geometry)
    acc = 8 if dtype == "float64" else 4
    kernel_w, stride_w, pad_w, dil_w = geometry.kernel[1], geometry.stride[1], geometry.padding[1], geometry.dilation[1]
    out_w = geometry.out_size[1]
    channels = geometry.in_channels_per_group

    def span_of(bw):
        return (bw - 1 + pad_w) // stride_w - (pad_w - (kernel_w - 1) * dil_w) // stride_w + 1

    best, best_score = None, -1.0
    for k in range(1, DIRECT_MAX_SLOT_GROUPS + 1):
        cp = 4 * tile.tn * k
        bw = stride_w * cp
        if th_max * channels * span_of(bw) > DIRECT_THREADS * DIRECT_FETCH:
            break
        if k > 1 and tile.bm * (bw + 1) * acc > DIRECT_STAGE_BYTES:
            break
        units = slots * k
        balance = units / (-(-units // DIRECT_WARPS) * DIRECT_WARPS) if units else 1.0
        score = balance * out_w / (-(-out_w // bw) * bw)
        if score > best_score + 1e-9:
            best, best_score = cp, score
    if best is None:
        return None
    bw = stride_w * best
    span = span_of(bw)
    shared = DIRECT_HEADER_BYTES + acc * (th_max * kernel_w * channels * tile.bm + th_max * channels * span + tile.bm * (bw + 1))
    return best, span, th_max, shared


def direct_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """conv_direct's builds for one dtype and index type."""
    return [("conv_direct.cu", direct_name(dtype, index, t)) for t in DIRECT_TILES]


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of conv_direct.cu the library can launch."""
    return instantiation_loop(trailing=(direct_instantiations,))
