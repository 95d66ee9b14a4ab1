"""The polyphase tables (common.cuh's AxisPhase records) and the phase records
the window kernels (window.cuh: conv_window, conv_wgmma.cu's and
conv_tf32.cu's kernels) build on them: the fold of the forward pass's phases
into the GEMM's rows, its packed kernel's taps, the column tiles of a record
and the fill's one record.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import numpy

from .._geometry import Geometry
from .common import INT32_LIMIT, _axes, _is_1d

# --- polyphase tables ---------------------------------------------------------
# One AxisPhase record (common.cuh) is 9 int32 values:
# (count, out_base, out_step, in_base, in_step, tap_first, tap_step, tap_count, tap_in_step)


def forward_axis_phases(in_size: int, kernel: int, stride: int, padding: int, dilation: int, out_size: int):
    """The polyphase decomposition of one axis of the forward pass.

    Output o = q*stride + r - padding belongs to phase r.  Tap k reaches phase r
    iff k*dilation = r (mod stride): with g = gcd(stride, dilation) that needs
    g | r, and then the taps are k0, k0 + stride/g, ... where k0 solves
    k*(dilation/g) = r/g (mod stride/g).  Tap k reads input q - (k*dilation - r)/stride,
    so consecutive taps step back dilation/g input positions.
    """
    g = math.gcd(stride, dilation)
    tap_step = stride // g
    inverse = pow(dilation // g, -1, tap_step) if tap_step > 1 else 0
    records = []
    for r in range(stride):
        q_min = -((r - padding) // stride)  # ceil((padding - r) / stride)
        q_max = (out_size - 1 + padding - r) // stride
        count = max(0, q_max - q_min + 1)
        out_base = q_min * stride + r - padding
        tap_count, tap_first, in_base, tap_in_step = 0, 0, 0, 0
        if r % g == 0:
            tap_first = ((r // g) * inverse) % tap_step
            if tap_first < kernel:
                tap_count = (kernel - 1 - tap_first) // tap_step + 1
                first_offset = (tap_first * dilation - r) // stride  # exact
                in_base = q_min - first_offset
                tap_in_step = -(dilation // g)
        records.append((count, out_base, stride, in_base, 1, tap_first, tap_step, tap_count, tap_in_step))
    return records


def grad_input_axis_phase(in_size: int, kernel: int, stride: int, padding: int, dilation: int):
    """grad_input[l] reads grad_output[l*stride - padding + k*dilation] for every tap."""
    return [(in_size, 0, 1, -padding, stride, 0, 1, kernel, dilation)]


@functools.lru_cache(maxsize=1024)
def forward_phases(geometry: Geometry) -> tuple[tuple[int, ...], int, int]:
    """(flattened records for H then W, phases along H, phases along W)."""
    (h, w) = [forward_axis_phases(*axis) for axis in _axes(geometry)]
    return _flatten(h + w), len(h), len(w)


@functools.lru_cache(maxsize=1024)
def grad_input_phases(geometry: Geometry) -> tuple[tuple[int, ...], int, int]:
    (h, w) = [grad_input_axis_phase(*axis[:5]) for axis in _axes(geometry)]
    return _flatten(h + w), 1, 1


def _flatten(records) -> tuple[int, ...]:
    flat = tuple(int(v) for record in records for v in record)
    if any(abs(v) > INT32_LIMIT for v in flat):
        raise ValueError("a spatial size or offset does not fit in 32 bits")
    return flat


# The forward pass also folds where the stride is 2 and the dilation even: then
# every tap lands on one phase and the other phase is bias only (P4), so that
# the phases' outputs would interleave, one written by blocks with no MMAs.
# Folded, the dilated kernel becomes a dense one with zero taps in between
# (and a zero tap at the end to make its length even): twice the MMAs, but
# whole runs of consecutive outputs.  False folds only dense kernels.
FOLD_DILATED = True


@functools.lru_cache(maxsize=1024)
def window_records(geometry: Geometry, pass_name: str):
    """conv_window's phase records along W and its fold, or None where the
    problem is not 1D (the H axis must be trivial).

    The forward pass folds its phases into the GEMM's rows when the dilation
    is 1, the stride s is a power of two and divides the kernel: phase r then
    has taps r, r + s, ... each reading input q - t, so one record serves all
    s phases, with tap_first 0 (the kernel adds r) and columns q covering
    every phase's range.  Otherwise one record per phase, as conv_gemm's."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if pass_name == "grad_input":
        return _flatten(grad_input_axis_phase(in_w, kernel, stride, padding, dilation)), 1
    if pass_name != "forward":
        raise ValueError(f"unknown pass {pass_name!r}")
    dense = window_dense_taps(geometry, pass_name)
    if dense:
        q_lo = -((stride - 1 - padding) // stride)  # the smallest q of any phase: ceil((padding - stride + 1) / stride)
        q_hi = (out_w - 1 + padding) // stride  # the largest (phase 0's)
        count = max(0, q_hi - q_lo + 1)
        return _flatten([(count, q_lo * stride - padding, stride, q_lo, 1, 0, stride, dense // stride, -1)]), stride
    return _flatten(forward_axis_phases(in_w, kernel, stride, padding, dilation, out_w)), 1


def window_dense_taps(geometry: Geometry, pass_name: str) -> int:
    """How many taps the window kernels' packed weight has along W when the
    forward pass folds its phases (see window_records), else 0: the kernel
    itself when the dilation is 1 and the stride s (a power of two) divides
    it; where FOLD_DILATED applies, the dilated kernel's span rounded up to a
    multiple of s, with zero taps where no tap of the kernel falls."""
    if pass_name != "forward" or not _is_1d(geometry):
        return 0
    _, kernel, stride, _, dilation, _ = _axes(geometry)[1]
    if stride & (stride - 1):
        return 0
    if dilation == 1 and kernel % stride == 0:
        return kernel
    if FOLD_DILATED and stride == 2 and dilation % 2 == 0 and kernel > 1:
        span = dilation * (kernel - 1) + 1
        return -(-span // stride) * stride
    return 0


def window_kernel_w(geometry: Geometry, pass_name: str) -> int:
    """The packed weight's taps along W (pack_window_weight)."""
    return window_dense_taps(geometry, pass_name) or geometry.kernel[1]


def window_column_range(record, fold: int, bm: int, out_w: int, r0: int) -> tuple[int, int]:
    """(first, end) of the columns a window kernel's row tile computes for one
    phase record (window.cuh's window_block): every column, but where the
    fold has at least `bm` rows per output channel, so that the tile is the
    sub-phases r0 .. r0 + bm - 1 of one channel: then only the columns where
    one of them writes inside the output (column q of sub-phase r writes
    out_base + q * out_step + r)."""
    count, out_base, out_step = (int(v) for v in record[:3])
    if fold == 1 or bm > fold:
        return 0, count
    first = max(0, -((out_base + r0 + bm - 1) // out_step))
    return first, min(count, (out_w - 1 - out_base - r0) // out_step + 1)


def window_col_tiles(flat: tuple[int, ...], fold: int, bm: int, bn: int, out_w: int) -> int:
    """Column tiles of the window kernels' grid: the most any (phase, row
    tile) needs (window_column_range)."""
    r0s = range(0, fold, bm) if 1 < fold and bm <= fold else (0,)
    return max(
        -(-(end - first) // bn)
        for record in numpy.asarray(flat).reshape(-1, 9)
        for first, end in (window_column_range(record, fold, bm, out_w, r0) for r0 in r0s)
    )


# The fill (perf notes v17; conv_wgmma_resident's and conv_window's): a
# forward pass of stride FILL_STEP whose dilation is a multiple of it has
# every tap on one phase and the others bias only (P4).  The kernel then runs
# that phase alone, as a stride-1 correlation, and its epilogue writes every
# output: the sums and, between them, the bias, in whole 16-byte vectors.
FILL_STEP = 2  # conv_wgmma.cu's FILL_STEP


@functools.lru_cache(maxsize=1024)
def fill_record(geometry: Geometry, pass_name: str) -> Optional[tuple[int, ...]]:
    """The one phase record of the fill (conv_wgmma_resident's and
    conv_window's), or None where it does not apply: the forward pass of a 1D problem of stride FILL_STEP and
    a dilation that is a multiple of it.  Every tap then lands on phase 0 of
    forward_axis_phases, whose outputs start at out_base in [0, stride): its
    column q is output out_base + stride * q (tap t reading input in_base + q
    - t * dilation / stride), and the outputs between are bias only."""
    if pass_name != "forward" or not _is_1d(geometry):
        return None
    in_w, kernel, stride, padding, dilation, out_w = _axes(geometry)[1]
    if stride != FILL_STEP or dilation % stride:
        return None
    records = [record for record in forward_axis_phases(in_w, kernel, stride, padding, dilation, out_w) if record[7]]
    assert len(records) == 1 and 0 <= records[0][1] < stride, records  # phase 0, every tap
    return _flatten(records)
