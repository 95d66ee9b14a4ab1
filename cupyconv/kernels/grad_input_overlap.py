"""grad_input_overlap.cu on the host: grad_input_overlap (16-bit and TF32),
grad_input_multicast and their weight packing: sizes as the kernels have
them, names, layouts.
"""

from __future__ import annotations

from .common import CUDA_TYPE, INDEX_TYPES, OVERLAP_DTYPES, instantiation_loop

# grad_input_overlap.cu (perf notes v32): grad_input of stride-8 1D 16-bit
# problems of 9 to 16 taps, one wgmma k-step per output channel, B read as
# overlapping core matrices of grad_output's rows.
OVERLAP_THREADS = 384  # two consumer warpgroups and a producer
OVERLAP_BM = 128  # input channels a block
OVERLAP_BN = 256  # input positions a block
OVERLAP_CB = 6  # output channels a k-block
OVERLAP_STAGES = 8
OVERLAP_STAGE_BYTES = OVERLAP_CB * ((8 * OVERLAP_BN + 8) * 2 + 16)  # B's stretches (A from registers, perf notes v43)
# room past the last buffer for its B operand's extent as N x K elements (GiLayout::BARRIERS)
OVERLAP_B_TAIL = OVERLAP_BN * 16 * 2 - ((8 * OVERLAP_BN + 8) * 2 + 16)
OVERLAP_SHARED = OVERLAP_STAGES * OVERLAP_STAGE_BYTES + OVERLAP_B_TAIL + OVERLAP_STAGES * 16  # the buffers, then their mbarriers (full, empty)
# Its float build (TF32, perf notes v40): two k8 steps an output channel, the
# stretch in two planes of 16-byte chunks, rounded in place by the producer.
OVERLAP_TF32_CB = 2  # output channels a k-block
OVERLAP_TF32_STAGES = 6
OVERLAP_TF32_STAGE_BYTES = OVERLAP_TF32_CB * (OVERLAP_BM * 64 + 2 * (OVERLAP_BN + 1) * 16)
OVERLAP_TF32_SHARED = OVERLAP_TF32_STAGES * OVERLAP_TF32_STAGE_BYTES + OVERLAP_TF32_STAGES * 16


def overlap_layout(dtype: str) -> tuple[int, int]:
    """(output channels a k-block, shared-memory bytes) of grad_input_overlap's build for dtype."""
    return (OVERLAP_TF32_CB, OVERLAP_TF32_SHARED) if dtype == "float32" else (OVERLAP_CB, OVERLAP_SHARED)


def grad_input_overlap_name(dtype: str, index: str) -> str:
    return f"grad_input_overlap<{CUDA_TYPE[dtype]}, {index}>"


def pack_overlap_weight_name(dtype: str) -> str:
    return f"pack_overlap_weight<{CUDA_TYPE[dtype]}>"


# grad_input_multicast (grad_input_overlap.cu, perf notes v48): the float32
# "tf32" grad_input of the same problems, conv_tf32_multicast's design:
# clusters of two blocks share each stage's weight (TMA multicast), the
# grad_output stretch is the MMAs' register operand.  GRAD_INPUT_MULTICAST_STAGES
# buffers of 1024-byte-aligned stages: GRAD_INPUT_MULTICAST_CO output
# channels' weight tiles (GRAD_INPUT_MULTICAST_COLS rows of 16 taps), then
# the window (GRAD_INPUT_MULTICAST_SPANS boxes of GRAD_INPUT_MULTICAST_SPAN
# floats x the stage's channels), then the barriers.
GRAD_INPUT_MULTICAST_STAGES = 5
GRAD_INPUT_MULTICAST_COLS = 256  # input channels a tile
GRAD_INPUT_MULTICAST_POSITIONS = 128  # input positions an item
GRAD_INPUT_MULTICAST_CO = 2  # output channels a stage
GRAD_INPUT_MULTICAST_SPAN = 176  # floats of a window box's rows
GRAD_INPUT_MULTICAST_SPANS = 6  # window boxes a stage
GRAD_INPUT_MULTICAST_THREADS = 384
_GIM_STAGE = -(-(GRAD_INPUT_MULTICAST_CO * (GRAD_INPUT_MULTICAST_COLS * 64 + GRAD_INPUT_MULTICAST_SPANS * GRAD_INPUT_MULTICAST_SPAN * 4)) // 1024) * 1024
GRAD_INPUT_MULTICAST_SHARED = GRAD_INPUT_MULTICAST_STAGES * _GIM_STAGE + 2 * GRAD_INPUT_MULTICAST_STAGES * 8


def grad_input_multicast_name(index: str) -> str:
    return f"grad_input_multicast<{index}>"


PACK_MULTICAST_WEIGHT = "pack_multicast_weight<float>"


def gm_tap(j: int) -> int:
    """The tap at column j of pack_multicast_weight's 16 (grad_input_overlap.cu's gm_tap)."""
    return (j & 8) + (2 * (j & 3) if (j & 7) < 4 else 2 * (j & 3) + 1)


def tf32_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """float32's builds (passes 1): grad_input_overlap's TF32 build, its
    weight packing (listed with the index type int) and grad_input_multicast."""
    names = []
    if dtype == "float32" and passes == 1:
        names.append(("grad_input_overlap.cu", grad_input_overlap_name(dtype, index)))
        names += [("grad_input_overlap.cu", pack_overlap_weight_name(dtype))] if index == INDEX_TYPES[0] else []
        names.append(("grad_input_overlap.cu", grad_input_multicast_name(index)))
    return names


def pack_multicast_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """pack_multicast_weight (float32, listed with the index type int and passes 1)."""
    names = []
    if dtype == "float32" and passes == 1 and index == INDEX_TYPES[0]:
        names.append(("grad_input_overlap.cu", PACK_MULTICAST_WEIGHT))
    return names


def overlap_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_input_overlap's 16-bit builds and their weight packing (listed
    with the index type int)."""
    names = []
    if dtype in OVERLAP_DTYPES:
        names.append(("grad_input_overlap.cu", grad_input_overlap_name(dtype, index)))
        names += [("grad_input_overlap.cu", pack_overlap_weight_name(dtype))] if index == INDEX_TYPES[0] else []
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_input_overlap.cu the library can launch."""
    return instantiation_loop(passes=(tf32_instantiations, pack_multicast_instantiations), trailing=(overlap_instantiations,))
