"""grad_weight_overlap.cu on the host: grad_weight_overlap, grad_weight_multicast
and round_tf32_copy: sizes as the kernels have them, names.
"""

from __future__ import annotations

from .common import CUDA_TYPE, INDEX_TYPES, OVERLAP_DTYPES, instantiation_loop

# grad_weight_overlap.cu (perf notes v33): grad_weight of the same problems,
# grad_output's rows read in place as the M-major A operand of rows
# (output channel, phase).
GRAD_WEIGHT_OVERLAP_THREADS = 384  # two consumer warpgroups and a producer
GRAD_WEIGHT_OVERLAP_CO = 8  # output channels a block
GRAD_WEIGHT_OVERLAP_BN = 256  # input channels a block
GRAD_WEIGHT_OVERLAP_P = 64  # positions an item
GRAD_WEIGHT_OVERLAP_STAGES = 5
GRAD_WEIGHT_OVERLAP_SHARED = GRAD_WEIGHT_OVERLAP_STAGES * (
    GRAD_WEIGHT_OVERLAP_BN * GRAD_WEIGHT_OVERLAP_P * 2 + GRAD_WEIGHT_OVERLAP_CO * ((GRAD_WEIGHT_OVERLAP_P + 1) * 16 + 16) + 16
)  # the buffers, then their mbarriers (full, empty)
GRAD_WEIGHT_OVERLAP_COPIES = (16, 8)  # bytes a grad_output copy


def grad_weight_overlap_name(dtype: str, index: str, copy: int) -> str:
    return f"grad_weight_overlap<{CUDA_TYPE[dtype]}, {index}, {copy}>"


# grad_weight_multicast (grad_weight_overlap.cu, perf notes v48): the float32
# "tf32" grad_weight of the same problems with grad_input_multicast's
# pipeline: x rounded to TF32 once (round_tf32_copy), its tiles shared by
# clusters of two output-channel tiles (TMA multicast), grad_output's
# stretch as the MMAs' register operand.  Stages of 1024-byte-aligned
# buffers: x's tile (GRAD_WEIGHT_MULTICAST_COLS rows of 128 bytes), then
# the stretch (GRAD_WEIGHT_MULTICAST_SPANS boxes of GRAD_WEIGHT_MULTICAST_SPAN
# floats x GRAD_WEIGHT_MULTICAST_CO channels), then the barriers.
GRAD_WEIGHT_MULTICAST_STAGES = 5
GRAD_WEIGHT_MULTICAST_CO = 8  # output channels a block
GRAD_WEIGHT_MULTICAST_COLS = 256  # input channels a tile
GRAD_WEIGHT_MULTICAST_P = 32  # positions an item
GRAD_WEIGHT_MULTICAST_SPAN = 132
GRAD_WEIGHT_MULTICAST_SPANS = 2
GRAD_WEIGHT_MULTICAST_THREADS = 384
_GWM_STAGE = -(-(GRAD_WEIGHT_MULTICAST_COLS * GRAD_WEIGHT_MULTICAST_P * 4 + GRAD_WEIGHT_MULTICAST_SPANS * GRAD_WEIGHT_MULTICAST_CO * GRAD_WEIGHT_MULTICAST_SPAN * 4) // 1024) * 1024
GRAD_WEIGHT_MULTICAST_SHARED = GRAD_WEIGHT_MULTICAST_STAGES * _GWM_STAGE + 2 * GRAD_WEIGHT_MULTICAST_STAGES * 8
ROUND_TF32_COPY = "round_tf32_copy<float>"


def grad_weight_multicast_name(index: str) -> str:
    return f"grad_weight_multicast<{index}>"


def multicast_instantiations(dtype: str, index: str, passes: int) -> list[tuple[str, str]]:
    """float32's builds (passes 1): grad_weight_multicast and round_tf32_copy
    (listed with the index type int)."""
    names = []
    if dtype == "float32" and passes == 1:
        names.append(("grad_weight_overlap.cu", grad_weight_multicast_name(index)))
        names += [("grad_weight_overlap.cu", ROUND_TF32_COPY)] if index == INDEX_TYPES[0] else []
    return names


def overlap_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """grad_weight_overlap's 16-bit builds, by grad_output copy size."""
    names = []
    if dtype in OVERLAP_DTYPES:
        names += [("grad_weight_overlap.cu", grad_weight_overlap_name(dtype, index, c)) for c in GRAD_WEIGHT_OVERLAP_COPIES]
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of grad_weight_overlap.cu the library can launch."""
    return instantiation_loop(passes=(multicast_instantiations,), trailing=(overlap_instantiations,))
