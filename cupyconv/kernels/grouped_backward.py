"""grouped_backward.cu on the host: its builds, the problems it takes and its
shared-memory layout.
"""

from __future__ import annotations

from .._geometry import Geometry
from .common import CUDA_TYPE, GROUPED_DTYPES, _axes, _is_1d, instantiation_loop

# grouped_backward (grouped_backward.cu): 1D problems with few channels per
# group, grad_input and grad_weight in one pass on CUDA cores.
GROUPED_CHANNELS = (4, 8, 16)  # its CG: input channels per group
GROUPED_THREADS = 256
GROUPED_MAX_TAPS = 8
GROUPED_X_PAD = 4
GROUPED_MAX_SPLIT_SUM = 256  # products a lane sums in float within a split
GROUPED_TILES = (512, 256, 128, 64)  # input positions per item, the longest that fits taken
GROUPED_MAX_SHARED = 100 * 1024  # two blocks a multiprocessor
GROUPED_PIPE_CHANNELS = (8, 16)  # C of the pipelined float32 build (PIPE: two cp.async staging buffers)


def grouped_backward_name(dtype: str, index: str, channels: int, taps: int, pipe: bool = False) -> str:
    return f"grouped_backward<{CUDA_TYPE[dtype]}, {index}, {channels}, {taps}{', true' if pipe else ''}>"


def grouped_backward_pipes(geometry: Geometry, dtype: str) -> bool:
    """Whether the pipelined build (PIPE) can take this grouped_backward
    problem: float32 (its cp.async copies are floats, with no conversion), C
    in GROUPED_PIPE_CHANNELS (grad_input's threads take C / 2 channels, four
    at a time) and the shortest item's two staging buffers in
    GROUPED_MAX_SHARED."""
    return (
        dtype == "float32"
        and geometry.in_channels_per_group in GROUPED_PIPE_CHANNELS
        and grouped_backward_layout(geometry, GROUPED_TILES[-1], True, True, 2)[3] <= GROUPED_MAX_SHARED
    )


def grouped_backward_applies(geometry: Geometry, dtype: str) -> bool:
    """Whether grouped_backward can run this problem: 1D, C input channels a
    group in GROUPED_CHANNELS and M output channels with C / 4 * M <= 32 (a
    warp's lanes own grad_weight's (channel quad, output channel) pairs), up
    to GROUPED_MAX_TAPS taps, and a stride short enough that the shortest
    item's staging fits in GROUPED_MAX_SHARED."""
    if dtype not in GROUPED_DTYPES or not _is_1d(geometry):
        return False
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    span = (max(GROUPED_TILES) - 1) * stride + (kernel - 1) * dilation + 1  # the kernel divides positions below 2**20 by the stride in float
    if not (channels in GROUPED_CHANNELS and channels // 4 * out_channels <= 32 and kernel <= GROUPED_MAX_TAPS and span < 1 << 20):
        return False
    return grouped_backward_layout(geometry, GROUPED_TILES[-1], True, True)[3] <= GROUPED_MAX_SHARED  # the shortest item fits


def grouped_backward_layout(geometry: Geometry, tile: int, want_input: bool, want_weight: bool, buffers: int = 1) -> tuple[int, int, int, int]:
    """(span, phase_row, m_row, shared-memory bytes) of grouped_backward with
    `tile` input positions per item: the weight ([m][k][c], for grad_input),
    then `buffers` staging buffers (two for the pipelined build) of
    grad_output's span of positions split into `stride` phases of phase_row
    floats, m_row floats per output channel (1 more than a multiple of 32, so
    that the lanes' output channels fall in distinct banks), and the
    transposed x (for grad_weight); at least the final reduction's 32 x 4 x
    taps doubles."""
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
    span = (tile - 1) * stride + (kernel - 1) * dilation + 1
    phase_row = -(-span // stride)
    m_row = stride * phase_row + (1 - stride * phase_row) % 32
    x_floats = channels * (tile + GROUPED_X_PAD) if buffers == 2 else tile * (channels + GROUPED_X_PAD)  # pipelined: rows of positions
    staging = -(-out_channels * m_row // 4) * 4 + (x_floats if want_weight else 0)
    floats = (out_channels * kernel * channels if want_input else 0) + buffers * staging
    reduction = 32 * 4 * kernel * 8 if want_weight else 0
    return span, phase_row, m_row, max(4 * floats, reduction)


def grouped_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grouped_backward's builds for one dtype and index type, by channels
    and taps, and for float32 the pipelined ones."""
    names = []
    if dtype in GROUPED_DTYPES:
        names += [
            ("grouped_backward.cu", grouped_backward_name(dtype, index, c, t))
            for c in GROUPED_CHANNELS
            for t in range(1, GROUPED_MAX_TAPS + 1)
        ]
        if dtype == "float32":
            names += [
                ("grouped_backward.cu", grouped_backward_name(dtype, index, c, t, True))
                for c in GROUPED_PIPE_CHANNELS
                for t in range(1, GROUPED_MAX_TAPS + 1)
            ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grouped_backward.cu the library can launch."""
    return instantiation_loop(trailing=(grouped_instantiations,))
