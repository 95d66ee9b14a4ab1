"""What the CUDA kernels are and how each problem is cut up for them.

Pure Python with no CuPy import, so the polyphase tables and the list of
kernel instantiations can be checked (and compiled by NVRTC) on a machine
without a GPU.  ``_cuda.py`` launches what this module describes.

The descriptions live beside the kernels: one module per kernel file, of
its stem (cupyconv/kernels/conv_fold.py for conv_fold.cu, ...), and
kernels/common.py and kernels/phases.py (the polyphase and window records)
for what several files share.  This module re-exports all their names and
lists every instantiation (all_instantiations).  _cuda.py looks each name
up here when it runs, so a setting patched on this module changes what
_cuda reads; the kernel modules' functions read their own module's names,
so a setting one of them reads (GROUPED_TILES in grouped_backward_applies,
say) is patched in its home module too.
"""

# Re-exports, grouped and ordered as their modules define them.
# ruff: noqa: F401, I001

from __future__ import annotations

from .kernels import (
    conv_direct, conv_fold, conv_gemm, conv_nhwc, conv_tf32, conv_tiny, conv_wgmma, conv_window, depthwise, grad_input_overlap,
    grad_input_phase, grad_input_taps, grad_weight, grad_weight_overlap, grad_weight_nhwc, grad_weight_phase, grad_weight_taps,
    grad_weight_tf32, grad_weight_window, grouped_backward, grouped_forward, pack_weight, phase_gather,
)
from .kernels.common import (
    CUDA_TYPE, ITEMSIZE, INDEX_TYPES, INT32_LIMIT, Tile, MmaTile, MMA_TILES, MMA_TUNE_TILES, pick_tile, index_type,
    _is_1d, _axes, _INCLUDE, source, SM90A_FILES, phase_table_array, pack_gemm_weight, WINDOW_DTYPES, WGMMA_THREADS,
    RESIDENT_COPY_BYTES, resident_copy_bytes, OVERLAP_DTYPES, GROUPED_DTYPES, TapsTile, GRAD_INPUT_TAPS_VECTORS,
    GRAD_INPUT_TAPS_MIN_TAPS, GRAD_INPUT_TAPS_MIN_ROWS, _taps_vector, instantiation_loop,
)
from .kernels.phases import (
    forward_axis_phases, grad_input_axis_phase, forward_phases, grad_input_phases, _flatten, FOLD_DILATED,
    window_records, window_dense_taps, window_kernel_w, window_column_range, window_col_tiles, FILL_STEP, fill_record,
)
from .kernels.conv_direct import (
    DirectTile, DIRECT_TILES, DIRECT_THREADS, DIRECT_MAX_H_TAPS, DIRECT_STAGE_BYTES, DIRECT_MAX_SLOT_GROUPS,
    DIRECT_HEADER_BYTES, DIRECT_MAX_STRIDE_W, DIRECT_WARPS, DIRECT_FETCH, DIRECT_MAX_TILES_PER_BLOCK,
    DIRECT_HEURISTIC_ROWS, DIRECT_MIN_BLOCKS_PER_SM, direct_heuristic, direct_name, direct_tiles_per_block,
    pack_direct_weight, direct_h_taps, direct_w_slots, direct_layout,
)
from .kernels.conv_fold import (
    FOLD_THREADS, FOLD_BLOCK_THREADS, FOLD_CLUSTER, FOLD_STRIDE, FOLD_ROWS, FOLD_TAPS, FOLD_BN, FOLD_BK, FOLD_STAGES,
    FOLD_STAGE_BYTES, FOLD_OUT_BYTES, FOLD_BARRIERS, FOLD_BOX, FOLD_DTYPES, fold_name, PACK_FOLD_CI,
    pack_fold_weight_name, fold_channels_padded, fold_shared_bytes,
)
from .kernels.conv_gemm import GEMM_TILES, GEMM_TUNE_TILES, gemm_name, mma_name, gemm_weight_strides
from .kernels.conv_tf32 import (
    CONV_TF32_TAPS, CONV_TF32_POSITIONS, CONV_TF32_ROWS, CONV_TF32_SLICE, CONV_TF32_BUFFERS, CONV_TF32_MAX_TASKS,
    CONV_TF32_ATOM, conv_tf32_name, conv_tf32_layout, CONV_TF32_STREAM_TAPS, CONV_TF32_STREAM_COLS,
    CONV_TF32_STREAM_BUFFERS, CONV_TF32_STREAM_LINE, CONV_TF32_STREAM_MAX_FOLD, conv_tf32_stream_name,
    conv_tf32_stream_layout, CONV_TF32_MULTICAST_FOLDS, CONV_TF32_MULTICAST_STAGES, CONV_TF32_MULTICAST_COLS,
    CONV_TF32_MULTICAST_THREADS, CONV_TF32_MULTICAST_ROW, conv_tf32_multicast_name, conv_tf32_multicast_shared,
)
from .kernels.conv_tiny import TINY_THREADS, tiny_name
from .kernels.conv_wgmma import (
    WgmmaTile, WGMMA_TILES, WGMMA_CHUNKS, WGMMA_STAGES, WGMMA_MAX_TASKS, wgmma_name, WGMMA_X3_CHAIN, wgmma_x3_name,
    WGMMA_X3_STAGES, wgmma_heuristic, wgmma_layout, resident_name, RESIDENT_VARIANTS, FILL_ROWS, fill_stage_bytes,
    RESIDENT_RAW_BUFFERS, RESIDENT_WINDOW_BUFFERS, RESIDENT_PART_BYTES, _resident_buffers, resident_layout,
    SPLIT_THREADS, SPLIT_STAGES, SPLIT_RAW, SPLIT_PART_BYTES, SPLIT_TILE, SPLIT_DTYPES, split_name, split_layout,
    GradWeightWgmmaTile, GRAD_WEIGHT_WGMMA_TILES, GRAD_WEIGHT_WGMMA_DTYPES, GRAD_WEIGHT_WGMMA_POSITIONS,
    GRAD_WEIGHT_WGMMA_AHEAD, GRAD_WEIGHT_WGMMA_RAW_BUFFERS, GRAD_WEIGHT_WGMMA_X_BUFFERS, GRAD_WEIGHT_WGMMA_ROWS,
    GRAD_WEIGHT_WGMMA_SPLIT_CI, grad_weight_wgmma_ahead, grad_weight_wgmma_name, grad_weight_wgmma_layout,
)
from .kernels.window import WINDOW_MIN_ROWS
from .kernels.conv_window import (
    WindowTile, WINDOW_TILES, WINDOW_TUNE_TILES, WINDOW_MAX_VECTORS, WINDOW_MAX_VECTORS_WIDE,
    window_name, WINDOW_FILL_PASSES, window_layout,
)
from .kernels.depthwise import (
    DEPTHWISE_OUTS, DEPTHWISE_THREADS, DEPTHWISE_WARP_CHUNKS, DEPTHWISE_MIN_WARPS_PER_SM, depthwise_warp_chunks,
    DEPTHWISE_TAPS_W, depthwise_name, depthwise_taps_w, depthwise_first_taps, depthwise_tap_step,
    DEPTHWISE_BACKWARD_TAPS, DEPTHWISE_BACKWARD_THREADS, depthwise_backward_name, depthwise_backward_taps,
)
from .kernels.grad_input_overlap import (
    OVERLAP_THREADS, OVERLAP_BM, OVERLAP_BN, OVERLAP_CB, OVERLAP_STAGES, OVERLAP_STAGE_BYTES, OVERLAP_B_TAIL,
    OVERLAP_SHARED, OVERLAP_TF32_CB, OVERLAP_TF32_STAGES, OVERLAP_TF32_STAGE_BYTES, OVERLAP_TF32_SHARED, overlap_layout,
    grad_input_overlap_name, pack_overlap_weight_name, GRAD_INPUT_MULTICAST_STAGES, GRAD_INPUT_MULTICAST_COLS,
    GRAD_INPUT_MULTICAST_POSITIONS, GRAD_INPUT_MULTICAST_CO, GRAD_INPUT_MULTICAST_SPAN, GRAD_INPUT_MULTICAST_SPANS,
    GRAD_INPUT_MULTICAST_THREADS, _GIM_STAGE, GRAD_INPUT_MULTICAST_SHARED, grad_input_multicast_name,
    PACK_MULTICAST_WEIGHT, gm_tap,
)
from .kernels.grad_input_phase import (
    GRAD_INPUT_PHASE_POSITIONS, GRAD_INPUT_PHASE_CHANNELS, GRAD_INPUT_PHASE_STAGE_CHANNELS, GRAD_INPUT_PHASE_WEIGHT_ROW,
    GRAD_INPUT_PHASE_STAGES, GRAD_INPUT_PHASE_THREADS, GRAD_INPUT_PHASE_PASSES, grad_input_phase_name,
    grad_input_phase_layout,
)
from .kernels.grad_input_taps import (
    GRAD_INPUT_TAPS_TILES, GRAD_INPUT_TAPS_DTYPES, grad_input_taps_name, grad_input_taps_vector,
)
from .kernels.grad_weight import (
    GRAD_WEIGHT_TILES, BIAS_THREADS, REDUCE_THREADS, grad_weight_name, grad_weight_mma_name, grad_bias_name,
    sum_splits_name,
)
from .kernels.grad_weight_overlap import (
    GRAD_WEIGHT_OVERLAP_THREADS, GRAD_WEIGHT_OVERLAP_CO, GRAD_WEIGHT_OVERLAP_BN, GRAD_WEIGHT_OVERLAP_P,
    GRAD_WEIGHT_OVERLAP_STAGES, GRAD_WEIGHT_OVERLAP_SHARED, GRAD_WEIGHT_OVERLAP_COPIES, grad_weight_overlap_name,
    GRAD_WEIGHT_MULTICAST_STAGES, GRAD_WEIGHT_MULTICAST_CO, GRAD_WEIGHT_MULTICAST_COLS, GRAD_WEIGHT_MULTICAST_P,
    GRAD_WEIGHT_MULTICAST_SPAN, GRAD_WEIGHT_MULTICAST_SPANS, GRAD_WEIGHT_MULTICAST_THREADS, _GWM_STAGE,
    GRAD_WEIGHT_MULTICAST_SHARED, ROUND_TF32_COPY, grad_weight_multicast_name,
)
from .kernels.grad_weight_phase import (
    GRAD_WEIGHT_PHASE_TAPS, GRAD_WEIGHT_PHASE_POSITIONS, GRAD_WEIGHT_PHASE_X_ROW, GRAD_WEIGHT_PHASE_CHANNELS,
    GRAD_WEIGHT_PHASE_COLUMNS, GRAD_WEIGHT_PHASE_STAGES, GRAD_WEIGHT_PHASE_THREADS, GRAD_WEIGHT_PHASE_PASSES,
    grad_weight_phase_name, grad_weight_phase_layout, GRAD_PHASE_FUSED_TAPS, GRAD_PHASE_FUSED_THREADS,
    GRAD_PHASE_FUSED_WEIGHT_ROW, grad_phase_fused_layout,
)
from .kernels.grad_weight_taps import (
    GRAD_WEIGHT_TAPS_TILES, GRAD_WEIGHT_TAPS_DTYPES, grad_weight_taps_stage, grad_weight_taps_name,
    grad_weight_taps_shared, grad_weight_taps_vector,
)
from .kernels.grad_weight_tf32 import (
    GRAD_WEIGHT_TF32_TAPS, GRAD_WEIGHT_TF32_FOLD_MAX_KERNEL, GRAD_WEIGHT_TF32_PASSES, GRAD_WEIGHT_TF32_POSITIONS,
    GRAD_WEIGHT_TF32_ROWS, GRAD_WEIGHT_TF32_COLUMNS, GRAD_WEIGHT_TF32_BUFFERS, GRAD_WEIGHT_TF32_CHAIN,
    grad_weight_tf32_name, GradWeightTf32Layout, grad_weight_tf32_layout,
)
from .kernels.grad_weight_window import (
    GradWeightWindowTile, GRAD_WEIGHT_WINDOW_TILES, GRAD_WEIGHT_WINDOW_DTYPES, GRAD_WEIGHT_WINDOW_MIN_CHANNELS,
    GRAD_WEIGHT_WINDOW_SLICE, GRAD_WEIGHT_WINDOW_COLUMNS, grad_weight_window_name, grad_weight_window_layout,
)
from .kernels.grouped_backward import (
    GROUPED_CHANNELS, GROUPED_THREADS, GROUPED_MAX_TAPS, GROUPED_X_PAD, GROUPED_MAX_SPLIT_SUM, GROUPED_TILES,
    GROUPED_MAX_SHARED, GROUPED_PIPE_CHANNELS, grouped_backward_name, grouped_backward_pipes, grouped_backward_applies,
    grouped_backward_layout,
)
from .kernels.grouped_forward import (
    GROUPED_FORWARD_THREADS, GROUPED_FORWARD_WARPS, GROUPED_FORWARD_ACC, GROUPED_FORWARD_MAX_J,
    GROUPED_FORWARD_OUT_CHANNELS, GROUPED_FORWARD_STRIDES, GROUPED_FORWARD_MAX_CHANNELS, GROUPED_FORWARD_MAX_TAPS,
    GROUPED_FORWARD_MAX_SHARED, grouped_forward_name, grouped_forward_tile, grouped_forward_taps,
    grouped_forward_layout, grouped_forward_applies,
)
from .kernels.pack_weight import (
    window_channels_padded, PACK_THREADS, PACK_MAX_BLOCKS, PACK_TILE, pack_weight_name, pack_direct_weight_name,
    pack_window_weight,
)
from .kernels.phase_gather import PHASE_BACKWARD_DTYPES, GATHER_THREADS, GATHER_ELEMS, phase_gather_name


def all_instantiations() -> list[tuple[str, str]]:
    """Every (source file, template instantiation) the library can launch:
    each kernel module's instantiations(), its parts taken in this order
    within one loop (kernels.common.instantiation_loop)."""
    return instantiation_loop(
        leading=(conv_gemm.gemm_instantiations,),
        passes=(
            pack_weight.window_pack_instantiations,
            conv_window.window_instantiations,
            conv_tf32.stream_instantiations,
            conv_wgmma.wgmma_instantiations,
            conv_tf32.tf32_instantiations,
            conv_wgmma.resident_instantiations,
            grad_input_overlap.tf32_instantiations,
            grad_weight_overlap.multicast_instantiations,
            grad_input_overlap.pack_multicast_instantiations,
            grad_input_taps.taps_instantiations,
            grad_weight_taps.taps_instantiations,
        ),
        trailing=(
            grad_weight_window.window_instantiations,
            conv_fold.fold_instantiations,
            grad_input_overlap.overlap_instantiations,
            grad_weight_overlap.overlap_instantiations,
            conv_wgmma.grad_weight_wgmma_instantiations,
            conv_tiny.tiny_instantiations,
            grad_weight.partial_instantiations,
            grad_weight_tf32.tf32_instantiations,
            grad_weight.mma_instantiations,
            grad_weight_phase.phase_instantiations,
            grad_input_phase.phase_instantiations,
            conv_direct.direct_instantiations,
            pack_weight.direct_pack_instantiations,
            pack_weight.gemm_pack_instantiations,
            depthwise.depthwise_instantiations,
            grouped_backward.grouped_instantiations,
            grouped_forward.grouped_forward_instantiations,
            phase_gather.gather_instantiations,
            conv_nhwc.nhwc_instantiations,
            grad_weight_nhwc.nhwc_instantiations,
        ),
        per_dtype=(grad_weight.reduction_instantiations,),
    )
