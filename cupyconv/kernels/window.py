"""window.cuh on the host: the 1D window kernels' problem (phase records,
fold, channels, shapes), their scalar arguments, and the rule every window
family shares (_WindowGroup; _Hopper for the wgmma ones)."""

from __future__ import annotations

from .. import settings
from .._geometry import Geometry
from .._launch import _blocks_for, _i32
from .._plan import Family
from .common import ITEMSIZE, WINDOW_DTYPES
from .pack_weight import window_channels_padded
from .phases import (
    FILL_STEP,
    fill_record,
    window_col_tiles,
    window_kernel_w,
    window_records,
)
from .rules import _gemm_rows, _problem_passes

_S = settings.current  # the routing settings in force

WINDOW_MIN_ROWS = 32  # fewer GEMM rows stay on conv_mma (the window's tiles would be mostly padding)



def _window_problem(geometry: Geometry, pass_name: str, dtype: str, row_unit: int = 16, fill: bool = False):
    """What the 1D window kernels (conv_window, conv_wgmma, conv_wgmma_resident)
    need of a pass: (phase records, fold, reduction channels, output
    channels, source shape, output shape), or None where they do not apply
    (not 1D, grad_input with a stride, too few GEMM rows, source rows that are
    not a whole number of `row_unit` bytes: 16 but for conv_wgmma_resident
    and conv_wgmma_x3, whose copies may be smaller).  With `fill`, conv_wgmma_resident's fill:
    the one record of fill_record, no fold."""
    if fill:
        record = fill_record(geometry, pass_name)
        found = None if record is None else (record, 1)
    else:
        found = window_records(geometry, pass_name)
    if found is None:
        return None
    flat, fold = found
    if any(step != 1 for step in flat[4::9]):  # grad_input with a stride: its window would be stride times longer
        return None
    if pass_name == "forward":
        red_channels, out_channels = geometry.in_channels_per_group, geometry.out_channels_per_group
        source4, out4 = geometry.input_shape4, geometry.output_shape4
    else:
        red_channels, out_channels = geometry.out_channels_per_group, geometry.in_channels_per_group
        source4, out4 = geometry.output_shape4, geometry.input_shape4
    if out_channels * fold < WINDOW_MIN_ROWS or source4[3] * ITEMSIZE[dtype] % row_unit:
        return None
    return flat, fold, red_channels, out_channels, source4, out4


def _window_columns(problem, fill: bool) -> int:
    """The window kernels' GEMM columns: the longest phase's, or with `fill`
    (its one phase) every output's."""
    flat, *_, out4 = problem
    return -(-out4[3] // FILL_STEP) if fill else max(flat[0::9])


def _window_scalars(geometry: Geometry, pass_name: str, dtype: str, problem, tile, max_taps: int, vectors: int, stride: int, fill: bool = False):
    """(blocks, scalar arguments) of conv_window or conv_wgmma (their
    arguments differ only in what `stride` measures); with `fill`, of their
    fill builds (the weight packed unfolded, columns covering every output)."""
    flat, fold, red_channels, out_channels, source4, out4 = problem
    num_phases = len(flat) // 9
    m_tiles = -(-(out_channels * fold) // tile.bm)
    if fill:
        col_tiles = -(-_window_columns(problem, fill) // tile.bn)
    else:  # per row tile where the fold is deep (window.cuh's window_block)
        col_tiles = max(1, window_col_tiles(flat, fold, tile.bm, tile.bn, out4[3]))
    kernel_w = geometry.kernel[1] if fill else window_kernel_w(geometry, pass_name)
    batch = source4[0]
    blocks = _blocks_for(num_phases * m_tiles * col_tiles * batch * geometry.groups)
    scalars = (
        _i32(num_phases), _i32(fold.bit_length() - 1), _i32(batch), _i32(geometry.groups),
        _i32(red_channels), _i32(window_channels_padded(red_channels, dtype)), _i32(out_channels),
        _i32(source4[3]), _i32(out4[3]), _i32(kernel_w),
        _i32(max_taps), _i32(vectors), _i32(stride), _i32(m_tiles), _i32(col_tiles),
    )  # fmt: skip
    return blocks, scalars


class _WindowGroup(Family):
    """The 1D window kernels' common rule (_window): a tensor-core pass of a
    dtype they take, an output of window_min_output or more, phases of
    window_min_columns positions a sample or more, a 16-byte aligned source."""

    ops = ("forward", "grad_input")

    def window_reject(self, p):
        passes = _problem_passes(p)
        if not passes or p.dtype not in WINDOW_DTYPES:
            return "not on tensor cores"
        if p.output_size < _S().window_min_output:
            return "output below window_min_output"
        records = window_records(p.geometry, p.op)
        if records is not None and max(records[0][0::9]) < _S().window_min_columns:
            # a phase's columns are its output positions in one sample: a kernel
            # longer than a short input (a 1D generator's first layer) leaves few
            return "a phase's positions a sample below window_min_columns (tiles mostly padding)"
        if not p.aligned("source", 16):
            return "source not 16-byte aligned"
        return None

    @staticmethod
    def rows(p):
        return _gemm_rows(p.geometry, p.op) * (window_records(p.geometry, p.op) or (None, 1))[1]

    @staticmethod
    def bias(p):
        return "bias" if p.op == "forward" else None


class _Hopper(_WindowGroup):
    """conv_wgmma_tf32, conv_wgmma_split, conv_wgmma_resident and conv_wgmma:
    one product a pair on compute capability 9.0 (use_wgmma)."""

    def hopper_reject(self, p):
        reason = self.window_reject(p)
        if reason:
            return reason
        if not _S().use_wgmma or _problem_passes(p) != 1 or p.device.compute_capability != 90:
            return "not one product a pair on compute capability 9.0 (use_wgmma)"
        return None
