"""grad_weight_phase.cu on the host: grad_weight_phase and its GX builds
(grad_input too): sizes as the kernel has them, names, layouts.
"""

from __future__ import annotations

from .._geometry import Geometry
from .common import _axes, _is_1d, instantiation_loop

# grad_weight_phase (grad_weight_phase.cu): float32 1D grad_weight on TF32
# tensor cores (one pass or 3xTF32) where every tap lands on one phase of
# grad_output (stride 1, a dilation that is a multiple of the stride, or one
# tap), read straight from grad_output.  Blocks of 32 input x 64 output
# channels x TAPS taps, items of 64 positions, three stages.
GRAD_WEIGHT_PHASE_TAPS = (1, 3, 5, 8)  # its TAPS: the smallest covering the kernel, else chunks of 8
GRAD_WEIGHT_PHASE_POSITIONS = 64  # its GWP_P
GRAD_WEIGHT_PHASE_X_ROW = GRAD_WEIGHT_PHASE_POSITIONS + 4  # its GWP_XS
GRAD_WEIGHT_PHASE_CHANNELS = 32  # its GWP_BM: input channels a block
GRAD_WEIGHT_PHASE_COLUMNS = 64  # its GWP_BN: output channels a block
GRAD_WEIGHT_PHASE_STAGES = 3  # its GWP_STAGES
GRAD_WEIGHT_PHASE_THREADS = 256  # its GWP_THREADS
GRAD_WEIGHT_PHASE_PASSES = (1, 3)


def grad_weight_phase_name(index: str, taps: int, passes: int, gx: bool = False) -> str:
    return f"grad_weight_phase<float, {index}, {taps}, {passes}{', true' if gx else ''}>"


def grad_weight_phase_layout(geometry: Geometry):
    """(taps, step, window, row, shared bytes) of grad_weight_phase, or None
    where it does not apply (not 1D, or taps on more than one phase: a
    dilation that is not a multiple of a stride above 1 with two or more
    taps; positions past int).

    step = d / s phase positions between taps; window = the positions one
    item's (position, tap) pairs read, 64 + (taps - 1) * step; row = window
    rounded up to 4 mod 8 floats (conflict-free B reads).  Shared memory:
    three stages of x (32 rows of 68 floats) and the window (64 rows), or
    the warps' partial sums at the end (taps * 8 KB), whichever is larger."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, _, dilation, out_w = _axes(geometry)[1]
    if kernel > 1 and dilation % stride:
        return None
    if max(in_w, out_w) >= 2**30 or (in_w + GRAD_WEIGHT_PHASE_POSITIONS) * stride + dilation * kernel >= 2**30:
        return None  # the kernel counts positions and phase indices in int
    taps = next((t for t in GRAD_WEIGHT_PHASE_TAPS if t >= kernel), GRAD_WEIGHT_PHASE_TAPS[-1])
    step = dilation // stride if kernel > 1 else 0
    window = GRAD_WEIGHT_PHASE_POSITIONS + (taps - 1) * step
    row = window + (4 - window) % 8
    stage = 4 * (GRAD_WEIGHT_PHASE_CHANNELS * GRAD_WEIGHT_PHASE_X_ROW + GRAD_WEIGHT_PHASE_COLUMNS * row)
    return taps, step, window, row, max(GRAD_WEIGHT_PHASE_STAGES * stage, taps * 8 * 1024)


# grad_weight_phase's GX builds (grad_phase_fused_layout): grad_input from
# the same staged windows, by 8 more warps, with the weight resident in
# shared memory as TF32 hi and lo parts, [TAPS][2][32][68] floats.
GRAD_PHASE_FUSED_TAPS = (1, 3)
GRAD_PHASE_FUSED_THREADS = 2 * GRAD_WEIGHT_PHASE_THREADS
GRAD_PHASE_FUSED_WEIGHT_ROW = GRAD_WEIGHT_PHASE_COLUMNS + 4  # its GWP_WROW


def grad_phase_fused_layout(geometry: Geometry):
    """(taps, step, window, row, shared bytes) of grad_weight_phase's GX
    build, which also writes grad_input, or None where it does not apply:
    where grad_weight_phase does not, or a group has more than one channel
    tile either way (32 input, 64 output channels) or more than 3 taps (one
    chunk; the 5-tap builds spilled in their MMA loops).  Shared memory:
    grad_weight_phase's stages, the resident weight (taps x 2 x 32 rows of
    68 floats) and 8 KB where half of the grad_input warps leave their sums
    for the other half."""
    layout = grad_weight_phase_layout(geometry)
    if layout is None:
        return None
    taps, step, window, row, _ = layout
    if taps not in GRAD_PHASE_FUSED_TAPS or geometry.kernel[1] > taps:
        return None
    if geometry.in_channels_per_group > GRAD_WEIGHT_PHASE_CHANNELS or geometry.out_channels_per_group > GRAD_WEIGHT_PHASE_COLUMNS:
        return None
    weight = 4 * taps * 2 * GRAD_WEIGHT_PHASE_CHANNELS * GRAD_PHASE_FUSED_WEIGHT_ROW + 8 * 1024  # and the grad_input halves
    stages = 4 * GRAD_WEIGHT_PHASE_STAGES * (GRAD_WEIGHT_PHASE_CHANNELS * GRAD_WEIGHT_PHASE_X_ROW + GRAD_WEIGHT_PHASE_COLUMNS * row)
    return taps, step, window, row, max(stages, taps * 8 * 1024) + weight


def phase_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_phase's builds (float32): without and with GX, by taps
    and passes."""
    names = []
    if dtype == "float32":
        names += [
            ("grad_weight_phase.cu", grad_weight_phase_name(index, taps, passes, gx))
            for gx in (False, True)
            for taps in (GRAD_PHASE_FUSED_TAPS if gx else GRAD_WEIGHT_PHASE_TAPS)
            for passes in GRAD_WEIGHT_PHASE_PASSES
        ]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight_phase.cu the library can launch."""
    return instantiation_loop(trailing=(phase_instantiations,))
