"""grad_input_phase.cu on the host: its sizes as the kernel has them, name and
layout.
"""

from __future__ import annotations

from .._geometry import Geometry
from .common import _axes, _is_1d, instantiation_loop

# grad_input_phase (grad_input_phase.cu): float32 1D grad_input on TF32
# tensor cores (one pass or 3xTF32) where every tap lands on one phase of
# grad_output, read straight from grad_output.  Blocks of 32 input channels x
# 512 positions, stages of 8 output channels with every tap.
GRAD_INPUT_PHASE_POSITIONS = 512  # its GIP_L
GRAD_INPUT_PHASE_CHANNELS = 32  # its GIP_BM
GRAD_INPUT_PHASE_STAGE_CHANNELS = 8  # its GIP_J
GRAD_INPUT_PHASE_WEIGHT_ROW = 12  # its GIP_WROW
GRAD_INPUT_PHASE_STAGES = 4  # its GIP_STAGES
GRAD_INPUT_PHASE_THREADS = 256  # its GIP_THREADS
GRAD_INPUT_PHASE_PASSES = (1, 3)


def grad_input_phase_name(index: str, passes: int) -> str:
    return f"grad_input_phase<float, {index}, {passes}>"


def grad_input_phase_layout(geometry: Geometry):
    """(step, window, row, shared bytes) of grad_input_phase, or None where it
    does not apply (not 1D, taps on more than one phase, positions past int).
    step = d / s; window = 512 + (K - 1) * step phase positions a stage
    reads; row = window rounded up to 8 mod 16 floats (conflict-free B
    reads).  Four stages of the weight (K x 32 rows of 12 floats) and the
    window (8 rows)."""
    if not _is_1d(geometry):
        return None
    in_w, kernel, stride, _, dilation, out_w = _axes(geometry)[1]
    if kernel > 1 and dilation % stride:
        return None
    step = dilation // stride if kernel > 1 else 0
    window = GRAD_INPUT_PHASE_POSITIONS + (kernel - 1) * step
    if max(in_w, out_w) >= 2**30 or (in_w + window) * stride + dilation * kernel >= 2**30:
        return None  # the kernel counts positions and phase indices in int
    row = window + (8 - window) % 16
    weight = kernel * GRAD_INPUT_PHASE_CHANNELS * GRAD_INPUT_PHASE_WEIGHT_ROW
    return step, window, row, 4 * GRAD_INPUT_PHASE_STAGES * (weight + GRAD_INPUT_PHASE_STAGE_CHANNELS * row)


def phase_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_input_phase's builds (float32), by passes."""
    names = []
    if dtype == "float32":
        names += [("grad_input_phase.cu", grad_input_phase_name(index, passes)) for passes in GRAD_INPUT_PHASE_PASSES]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_input_phase.cu the library can launch."""
    return instantiation_loop(trailing=(phase_instantiations,))
