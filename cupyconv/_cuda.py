"""The GPU path: launches the kernels of cupyconv/kernels on CuPy arrays.

Imported only when a CuPy array is passed (``import cupyconv`` works without
CuPy).  Kernels compile on first use through ``cupy.RawModule`` with one
name expression per template instantiation, memoized per device; CuPy's
on-disk cache keeps the compiled code across processes.  Every launch runs on
the arrays' device and CuPy's current stream.
"""

from __future__ import annotations

import hashlib
import math
import types

import cupy
import numpy

from . import _autotune, _chunks, _geometry, _kernels, _remember, settings
from ._geometry import Geometry
from ._launch import (
    _RECORDING,
    _compute_capability,
    _device_signature,
    _gpu_seconds,
    _kernel_function,
    _launch,
    _max_shared,
    _multiprocessors,
    _phase_table,
    _tuned,
    observe_launches,  # noqa: F401 (the tests' entry points, re-exported)
    observe_plans,  # noqa: F401
)  # fmt: skip
from ._plan import Copy, Device, Plan, Problem, Step, Sub, Table
from ._registry import _candidates, _choose
from ._remember import _Bound, _FastForward, _remember_fast, note_allocation  # noqa: F401 (note_allocation: the adapter's)
from .kernels.conv_tiny import _tiny_routed

_S = settings.current  # the routing settings in force
_SETTINGS = settings._STATE  # ["version"]: moves on with every change of the settings


def _contiguous4(array, shape4):
    return cupy.ascontiguousarray(array).reshape(shape4)


def _output(out, shape, dtype):
    """A fresh array of `shape`, or the caller's viewed in it (C-contiguous,
    of the right size and dtype: the torch adapter passes torch-allocated
    outputs)."""
    if out is None:
        return cupy.empty(shape, dtype=dtype)
    if out.dtype != dtype or out.size != math.prod(shape) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {numpy.dtype(dtype).name} array of shape {shape}, got {out.shape} {out.dtype}")
    return out.reshape(shape)


# Launch plans: everything about a launch that depends only on the geometry,
# dtype, index type and (for split reductions) the multiprocessor count,
# computed once; a call then only packs its arrays.


# float32 "highest": "3xtf32" runs it as 3xTF32 on tensor cores where the pass
# sums at least _S().tf32x3_min_products products per output, and on CUDA cores
# (FFMA) elsewhere; "simt" runs it on CUDA cores everywhere.
# 3xTF32 (mma.cuh, MmaOp<float, 3>) sums each k-step's three products apart
# and adds them with FADD, so its error grows with the sum's length like
# FFMA's.  But a float's 24 bits do not fit in two 11-bit TF32 parts: each
# product keeps an error of up to a few 2^-22, which FFMA's exact products do
# not have.  On short sums FFMA is the more accurate (H100: cuDNN errs 4e-8 to
# 6e-8 on the GPU sweep's sums of 3 to 60 products, 3xTF32 1e-7 to 1.7e-7);
# on long ones 3xTF32 is as accurate or more (the benchmark problems' sums of
# 160 products and more: 1.1e-7 to 2.2e-7 against cuDNN's 1.5e-7 to 4.1e-7).


# conv_gemm reads the weight packed (groups, KH*KW, C, M) when the output has
# at least this many elements: one copy of the weight per call, so that a
# warp's weight loads are consecutive instead of KH*KW (forward) or
# C_out/groups*KH*KW (grad_input) elements apart.  Below it the copy's launch
# would cost more than it saves.


# conv_window (the 1D tensor-core kernel that stages each channel slice's
# input once for all taps) runs where it applies and the output has at least
# this many elements; smaller problems keep conv_mma, which needs no padded
# weight copy.


# conv_wgmma (wgmma, Hopper's warpgroup tensor cores) takes the passes
# conv_window would run with one product per pair (tf32, float16, bfloat16) on
# compute capability 9.0, where it fits and where it measured faster (H100,
# scripts/wgmma_compare.py, perf notes v12): GEMMs of at most _S().wgmma_max_rows
# rows (its 64 x 256 tile) whose blocks do either one channel slice or at
# least _S().wgmma_min_taps taps per slice.  P1 (5 taps) and P4 in 16-bit (one
# slice, before its dilated kernel folded) gained 10-25%; P4 in tf32 (two
# slices of 3 taps), and every problem with more rows (P2, X2, X3: 128 x 128
# tiles), lose 5-30%.  P4 now folds into 128 rows (_kernels.FOLD_DILATED):
# conv_window 0.78-0.81 ms in 16-bit, conv_wgmma 128 x 128 0.84-0.85, the
# unfolded conv_wgmma 0.77-0.78 (perf notes v15).  False keeps conv_window
# everywhere.


# conv_wgmma_resident takes the passes conv_wgmma would (one product per
# pair, compute capability 9.0) where it measured faster (H100,
# scripts/wgmma_compare.py, perf notes v13): one phase (a stride-1
# correlation: P1, P2; fold 1, consecutive outputs) whose GEMM rows fit one
# row tile, so that each window is read by one block; in float32 (TF32) up to
# _S().resident_tf32_row_tiles row tiles, whose blocks each read the same windows
# (P2: 128 rows in 64-row tiles, its 128-row weight tile too large): P2's
# forward pass 3.41 -> 3.12 ms against conv_window, and its grad_input, whose
# rows conv_window cannot take (65538 floats, not whole 16-byte vectors),
# 6.2 ms on conv_mma before (perf notes v25; v13 measured it slower, before
# v22's instruction cut).  Not where phases interleave their outputs or fold
# (X2, X3; P4's dilated fold, which its fill below replaces): slower there.
# False keeps it off; _S().use_resident_anywhere lifts the rule (tests,
# comparisons).

# conv_wgmma_resident's fill (_kernels.fill_record) takes the forward passes
# of stride 2 whose dilation is even (P4), in the modes conv_wgmma_resident
# runs, where the output channels fit one row tile: the tapped phase alone,
# as a stride-1 correlation of 64 GEMM rows, its epilogue writing the bias
# between the sums.  Where it applies it comes before the routes above (the
# dilated fold: 128 rows, twice the MMAs).  Measured in perf notes v17.
# False keeps it off.


# conv_wgmma_split (conv_wgmma.cu: a producer warpgroup copies and
# transposes the window while two consumer warpgroups issue the MMAs and
# store) takes the 16-bit passes conv_wgmma_resident would run on its 128 x
# 128 tile where they are one stride-1 correlation with no fold (P2's forward
# pass and grad_input), ahead of it (_resident_plan with `split`): perf notes
# v55.  With autotuning on it still runs where it applies (it has one tile).
# False keeps it off.


# conv_wgmma_tf32 (conv_tf32.cu) takes the float32 "tf32" passes that are one
# stride-1 correlation (the forward pass of a stride-1 problem, its
# grad_input) with a build for their taps, on compute capability 9.0, ahead
# of conv_wgmma_resident, where their output channels are more than
# _S().conv_tf32_min_rows a group: there conv_wgmma_resident's 128-row weight
# tile does not fit (P2), and it splits the rows over two blocks that each
# transpose the same windows: P2's forward pass 3.16 -> 2.25-2.45 ms, its
# grad_input 2.86 -> 2.3-2.5 (perf notes v28).  Where it declines (5 or more
# taps, a weight tile over the shared memory), conv_wgmma_resident's
# _S().resident_tf32_row_tiles rule still applies.  False keeps it off; "anywhere"
# lifts the row rule (tests, comparisons).
#
# Its FOLD builds take a forward pass that folds (window_records: the stride
# divides the kernel, dilation 1) into one record whose fold is at least
# _S().conv_tf32_min_fold: X3 (fold 256, 4 taps), whose conv_window ran
# mma.sync tiles that each read a 128 KB weight tile for 128 columns (perf
# notes v34).  The block keeps its 128 (channel, sub-phase) rows' weight, 4
# taps x 64 channels, and streams the input.  "anywhere" lifts this rule too.


# conv_tf32_stream (conv_tf32.cu) takes the float32 forward passes in "tf32"
# (passes 1) and "highest" (passes 3, float32-accurate 3xTF32) that fold into
# one record (a stride that divides the kernel, dilation 1) with a fold of 2
# to CONV_TF32_STREAM_MAX_FOLD and 2 taps a sub-phase, on compute capability
# 9.0, where conv_wgmma_tf32's FOLD weight tile does not fit in shared
# memory: X2, a vocoder's upsampling layer (512 channels x 2 taps x 128
# columns of weight, 512 KB), whose conv_window (TF32) and conv_wgmma_x3
# (3xTF32) it replaces.  False keeps it off; "anywhere" lifts the rule
# (tests, comparisons).


# conv_tf32_multicast (conv_tf32.cu) runs the TF32 passes conv_tf32_stream
# takes where its fold is one of _kernels.CONV_TF32_MULTICAST_FOLDS, the
# source rows are whole 16-byte vectors (its tensor map's strides) and the
# window box reads no other group's channels (one group, or channels a
# multiple of the slice): blocks in clusters of two share each stage's
# weight, copied by TMA (perf notes v47).  False keeps conv_tf32_stream.


# conv_fold (perf notes v23, v44) takes the 16-bit forward passes of stride 8
# with 9 to 16 taps, dilation 1 and one group on compute capability 9.0 (X2, a
# vocoder's upsampling layer): one GEMM over (output channel, tap) rows and
# the input as stored, the two taps of each phase folded in its epilogue; the
# input read through a TMA tensor map by clusters of two blocks, one k-block
# for both.  Inputs whose rows are not whole 16-byte vectors, or whose
# channels' weight tile does not fit in shared memory, keep the other
# kernels.  False keeps it off; _S().fold_blocks (tests) sets its grid in place of
# one block a multiprocessor (rounded down to whole clusters, at least one).
# A kernel of 16 taps (X2's) whose weight is 16-byte aligned is read by
# conv_fold as given, each row tile's weight transposed into shared memory
# as a run starts (conv_fold.cu's raw_weight), without pack_fold_weight's
# launch and buffer (perf notes v45).  False packs every weight.


# conv_window's fill takes the float32 "highest" forward passes that
# conv_wgmma_resident's fill takes in the other modes (stride 2, a dilation
# that is a multiple of it: P4), as 3xTF32 on tensor cores: one phase of 64
# GEMM rows, where conv_direct (FFMA) or the dilated fold (128 rows) would
# run.  Ahead of conv_direct on sums under _S().tf32x3_min_products too (P4: 96
# products an output); measured in perf notes v17.  False keeps it off.


# grad_input_taps and grad_weight_taps split a reduction into pieces of at
# least this many 128-byte stages, and only while the blocks fit on the GPU at
# once (two per multiprocessor: their launch bounds and shared memory).


# grad_input_overlap (grad_input_overlap.cu, perf notes v32) takes the 16-bit
# grad_input of 1D problems of stride 8 with 9 to 16 taps, dilation 1 and
# one group (X2) on compute capability 9.0: one wgmma k-step per output
# channel, its B operand grad_output's row read as overlapping core
# matrices.  X2's 16-bit grad_input 1.38-1.42 -> 0.76-0.81 ms against
# grad_input_taps, the same error (H100, perf notes v32); warp-specialized
# (a producer warpgroup, two consumers, mbarriers) 0.75-0.86 -> 0.45-0.48
# (v37); six output channels a k-block and the weight as the MMAs' register
# operand, 4-6% more (v43).  Its float build takes float32 "tf32" (one pass)
# there too (v40).
# Routed ahead of grad_input_taps; False keeps it off (the taps kernels'
# tests do).


# grad_input_multicast (grad_input_overlap.cu, perf notes v48) takes the
# float32 "tf32" grad_input that grad_input_overlap's float build would:
# clusters of two blocks share each stage's weight (TMA multicast) and the
# grad_output stretch is the MMAs' register operand, rounded as it loads.
# Its tensor map over grad_output needs rows of whole 16-byte quads (the
# overlap rule's out_w % 4 and 16-byte alignment).  False keeps
# grad_input_overlap's float build.


# grad_input_phase takes float32 1D grad_input on tensor cores where every
# tap lands on one phase of grad_output and the stride is above 1 (perf
# notes v18: P4), and at stride 1 where one tile of input channels covers a
# group (_S().grad_input_phase_stride_one: each grad_output element read by one
# block, in 16-byte copies; perf notes v19: P1); True takes every stride-1
# problem, False none.  _S().use_grad_input_phase False keeps the other kernels;
# "anywhere" lifts the size and stride rules (tests).


# conv_direct runs the forward pass where an output sums at most this many
# products on average and the output has at least _S().direct_min_output
# elements: there the passes are bound by writing the output, and conv_direct
# writes it once, in order, where the polyphase GEMMs write one strided
# lattice per phase.  Smaller outputs keep the small-call launch (no packed
# weight copy).  The limit is by what the GEMMs would run on: against the
# tensor-core GEMMs (float16, bfloat16, float32 "tf32") conv_direct wins on
# P5 (11.5 products: 0.52-0.58 ms against 0.83-1.64) and loses or ties on P4
# (48: 1.66 ms against 0.84-1.61); against float32's CUDA-core GEMM ("highest"
# below _S().tf32x3_min_products) it also wins on P4 (1.59-1.66 ms against
# 1.76-1.85), where its tiles' rows are full (_S().direct_full_rows output channels
# per group; P3's 8 leave half of a 16-row tile idle; P4 itself now takes
# conv_window's fill, _window_fill, ahead of conv_direct).  float64 and GPUs
# before sm_80 keep 16, the limit measured there (P5 float64: 1.22-1.45 ms
# against 2.87).  Measured on H100, perf notes v10 and v11.


# grouped_forward: large 1D forward passes with few channels a group (P3), on
# CUDA cores.  Tests set _S().use_grouped_forward to "anywhere" to lift the size
# rule, or False to keep the GEMMs.


# A forward pass whose output has fewer elements than this (and than
# _S().window_min_output and _S().pack_min_output: no padded or packed weight copy) is
# one launch whose plan depends only on the call's signature; with autotuning
# off, that launch is remembered whole (_small_forward_launch), so a tiny call
# costs little more than an allocation and a kernel launch.


# conv_tiny runs the small forward passes whose output has at most
# _S().tiny_max_output elements, each summing at most _S().tiny_max_products products
# on average, in every dtype and mode (FMA in the accumulator type, so
# float32 "tf32" as accurate as "highest"), with autotuning on or off: one
# thread an output, no tiles.  conv_gemm's and conv_mma's smallest tiles and
# depthwise_forward take longer there (H100, remembered calls timed whole:
# X4 12.9 against 13.0 us, 27.5 against 34.8 at 16384 outputs of 192
# products, 28.3 against 46.8 at 2400 of 512; perf notes v50).  Both limits
# are the largest measured.


def forward(x, weight, bias, geometry: Geometry, precision: str, out=None, fast_key=None, remember_small=None):
    """conv_transpose on CuPy arrays; returns the output in the user's shape
    (written into `out` when given).  The kernel is the first family of the
    registry's forward list that takes the problem (python -m cupyconv
    explain shows which and why).  A call with `fast_key` may be remembered
    (_remember.FAST_FORWARD); one into `out` that runs as one small launch on
    the arrays as given hands `remember_small` its _FastForward (the torch
    adapter's remembered calls)."""
    with x.device:
        # the kernels see pointers only: the output is made in the user's shape
        y = _output(out, geometry.output_shape, x.dtype)
        if not y.size:
            return y
        axis = _chunks.long_axis(geometry)
        if axis is not None:  # rows longer than the kernels' int lengths: as pieces of ordinary problems
            run = lambda sub, piece: forward(piece, weight, bias, sub, precision)  # noqa: E731
            _chunks.forward_by_pieces(cupy, x.reshape(geometry.input_shape4), y.reshape(geometry.output_shape4), geometry, axis, run)
            return y
        given = (x, weight, bias)
        x = cupy.ascontiguousarray(x)
        weight = cupy.ascontiguousarray(weight)
        bias = cupy.ascontiguousarray(bias) if bias is not None else None
        dtype = _geometry.dtype_name(x.dtype)
        p = _problem("forward", geometry, dtype, precision, (("source", x), ("weight", weight), ("bias", bias), ("out", y)))
        s = _S()
        small = y.size < min(s.small_forward_max_output, s.window_min_output, s.pack_min_output)
        tiny = small and _tiny_routed(geometry, y.size)  # conv_tiny has no tiles to tune
        bound = _small_forward_launch(s, p, x.device.id) if tiny or (small and not _autotune.enabled()) else None
        if bound is not None:
            bound.function(bound.grid, bound.block, (x, weight, bias, y) + bound.tail, shared_mem=bound.shared)
            for observe in _RECORDING.observers:
                observe(bound, (x, weight, bias, y))
            for served in _RECORDING.plan_observers:
                served.append((p, bound.plan))
            if all(a is b for a, b in zip((x, weight, bias), given)):  # no copies were made, as a remembered launch takes none
                if out is None:
                    _remember_fast(fast_key, bound, y)
                elif remember_small is not None:
                    remember_small(_FastForward(bound, y.shape, y.dtype, y.data.device_id))
            return y
        arrays = {"source": x.reshape(geometry.input_shape4), "weight": weight, "bias": bias, "out": y.reshape(geometry.output_shape4)}
        remember = s.use_remembered_forward and fast_key is not None and out is None
        if remember and all(a is b for a, b in zip((x, weight, bias), given)):  # no copies were made
            _remember.remember(fast_key, _remember.FAST_FORWARD, lambda: (_run_pass(p, arrays), (y,))[1], (x, weight, bias))
        else:
            _run_pass(p, arrays)
        return y


def backward(
    grad_output, x, weight, geometry: Geometry, output_mask, precision: str, out=(None, None, None), fast_key=None, remember_into=None
):
    """(grad_input, grad_weight, grad_bias) on CuPy arrays, None where masked;
    each written into the matching entry of `out` when that is given.

    Depthwise problems with up to 16 taps per input channel (multiplier x
    kernel) get grad_input and grad_weight from one pass of
    depthwise_backward, large 1D problems with few channels a group (see
    _kernels.grouped_backward_applies) from one pass of grouped_backward.
    16-bit 1D problems of stride 8 with 9 to 16 taps run grad_input_overlap
    and grad_weight_overlap on Hopper (float32 "tf32": their TF32 builds).  Large strided 1D problems with
    contiguous taps run
    grad_input_taps and grad_weight_taps on tensor cores; large float32
    strided 1D problems whose taps land on one phase of grad_output run
    grad_input_phase (and in "tf32", with one channel tile each way and up
    to 3 taps, grad_weight_phase's GX build makes both gradients in one
    pass).  Others run
    grad_input as a GEMM (conv_gemm/conv_mma, or the window kernels for large
    stride-1 1D problems on tensor cores: on Hopper conv_wgmma_tf32 or
    conv_wgmma_resident where routed) and grad_weight as a split-K GEMM (on tensor cores where the
    forward pass uses them; on Hopper grad_weight_wgmma for large stride-1 1D
    float16/bfloat16 problems of up to 8 taps; grad_weight_window for large
    1D float16/bfloat16 problems with a power-of-two stride;
    grad_weight_phase for large float32 1D problems whose taps land on one
    phase of grad_output).  float32 "highest" runs the taps kernels,
    conv_window and grad_weight_phase as 3xTF32, the other kernels on CUDA
    cores.  grad_bias is its own split reduction.  A call with `fast_key`
    (_api._fast_backward_key) may be remembered (_S().use_remembered_backward)
    into _remember.FAST_BACKWARD, or with `out` into `remember_into` (the torch
    adapter's table, whose replays launch into its tensors: _Replay.launch_raw)."""
    axis = _chunks.long_axis(geometry)
    if axis is not None:
        with grad_output.device:
            return _backward_by_pieces(grad_output, x, weight, geometry, axis, output_mask, precision, out)
    remember = (
        _S().use_remembered_backward and fast_key is not None and (remember_into is not None or not any(o is not None for o in out))
        and grad_output.flags.c_contiguous and x.flags.c_contiguous and weight.flags.c_contiguous
    )  # fmt: skip
    with grad_output.device:
        if remember:  # no copies are made of contiguous inputs
            table = _remember.FAST_BACKWARD if remember_into is None else remember_into
            return tuple(_remember.remember(fast_key, table, lambda: _backward(grad_output, x, weight, geometry, output_mask, precision, out), (grad_output, x, weight)))
        return _backward(grad_output, x, weight, geometry, output_mask, precision, out)


def _backward_by_pieces(grad_output, x, weight, geometry: Geometry, axis: int, output_mask, precision: str, out):
    """backward of a problem with rows longer than the kernels' int lengths
    (_chunks); grad_bias's kernel takes any row length."""
    want_input, want_weight, want_bias = output_mask
    gy4 = grad_output.reshape(geometry.output_shape4)
    grad_input = grad_weight = grad_bias = None
    if want_input or want_weight:
        grad_input = _output(out[0], geometry.input_shape4, gy4.dtype) if want_input else None

        def run(sub, gy_piece, x_piece, wanted):
            x_piece = x_piece if x_piece is not None else cupy.empty(sub.input_shape4, dtype=gy4.dtype)  # read by no kernel
            return _backward(gy_piece, x_piece, weight, sub, wanted + (False,), precision, (None, None, None))[:2]

        summed = _chunks.backward_by_pieces(cupy, gy4, x.reshape(geometry.input_shape4), geometry, axis, (want_input, want_weight), run, grad_input)
        if want_input:
            grad_input = grad_input.reshape(geometry.user_shape(geometry.input_shape4))
        if want_weight:
            grad_weight = _output(out[1], geometry.weight_shape4, gy4.dtype)
            grad_weight[...] = summed.reshape(geometry.weight_shape4)
            grad_weight = grad_weight.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    if want_bias:
        grad_bias = _backward(gy4, x, weight, geometry, (False, False, True), precision, (None, None, out[2]))[2]
    return grad_input, grad_weight, grad_bias


def _empty_batch_backward(geometry: Geometry, dtype, output_mask, out):
    shapes = (geometry.input_shape4, geometry.weight_shape4, (geometry.out_channels,))
    grads = []
    for wanted, shape, given in zip(output_mask, shapes, out):
        grad = _output(given, shape, dtype) if wanted else None
        if grad is not None:
            grad.fill(0)
        grads.append(grad)
    grad_input, grad_weight, grad_bias = grads
    if grad_input is not None:
        grad_input = grad_input.reshape(geometry.user_shape(geometry.input_shape4))
    if grad_weight is not None:
        grad_weight = grad_weight.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    return grad_input, grad_weight, grad_bias


# The backward pass of a 1D problem whose dilation is a multiple of its stride
# (P4: stride 2, dilation 2): every tap lands on one phase of the output, so
# grad_input and grad_weight read only outputs o = s * t' + offset.  Gathered
# into a contiguous array (one strided copy), those are the grad_output of a
# stride-1 problem with dilation d / s and padding ceil(p / s), which the
# stride-1 kernels run (wgmma and window kernels, whole 16-byte rows).  Tests
# set _S().use_phase_backward to "anywhere" to lift the size rule.


# grouped_backward takes both passes of large 1D problems with few channels a
# group (_kernels.grouped_backward_applies; P3) in float32 (every precision),
# float16 and bfloat16: one read of grad_output and x on CUDA cores, where the
# GEMMs' tensor-core tiles would be mostly padding.  False keeps the GEMMs.
# float32 problems with 8 or 16 channels a group take the pipelined build
# (_kernels.grouped_backward_pipes: two cp.async staging buffers); False keeps
# the one-buffer build.


# grad_weight_wgmma takes 16-bit stride-1 1D grad_weight on compute
# capability 9.0 where it applies (perf notes v14: P1, P2).  False keeps
# grad_weight_window there.


# grad_weight_overlap (grad_weight_overlap.cu, perf notes v33) takes the
# 16-bit grad_weight of the problems grad_input_overlap takes (stride 8, 9
# to 16 taps, dilation 1, one group, 1D) on compute capability 9.0: grad_output's
# rows read in place as the A operand of rows (output channel, phase).
# Warp-specialized like grad_input_overlap, one tap a consumer warpgroup over
# 256 input channels: X2's 16-bit grad_weight 0.65-0.88 -> 0.51-0.64 ms
# (H100, perf notes v37).  Its float32 "tf32" problems go to
# grad_weight_multicast (below); its float build is gone (perf notes v57).


# grad_weight_multicast (grad_weight_overlap.cu, perf notes v48) takes the
# float32 "tf32" grad_weight that grad_weight_overlap's float build would,
# where padding and grad_output's rows are whole 16-byte quads (its tensor
# map's boxes): x rounded to TF32 once into a copy, whose tiles clusters of
# two output-channel tiles share (TMA multicast), and grad_output's stretch
# as the MMAs' register operand.  False keeps grad_weight_overlap's build.


# grad_weight_wgmma_tf32 takes float32 1D grad_weight in both tensor-core
# modes on compute capability 9.0 where it applies and a group has at least
# _S().grad_weight_tf32_min_channels input and output channels (its block is 128
# rows -- output channels, or in fold mode (strides) (output channel, tap)
# pairs -- x 64 input channels): stride 1 in tap mode, ahead of
# grad_weight_phase; strided in fold mode, ahead of grad_weight_taps in
# 3xTF32 only (H100, ms, fold against taps: X2 3.99-4.12 against 5.89-6.02
# in "highest", 2.74-2.79 against 2.45-2.50 in "tf32"; where taps does not
# apply, fold beat grad_weight_mma in both modes; perf notes v29).  False
# keeps grad_weight_taps, grad_weight_phase or grad_weight_mma there.


# grad_weight_phase takes float32 1D grad_weight on tensor cores where every
# tap lands on one phase of grad_output (perf notes v18: P1, P4), for groups
# of at least 16 input and output channels that fit in at most
# (_S().grad_weight_phase_max_tiles_tf32 if passes == 1 else _S().grad_weight_phase_max_tiles_3xtf32) of its channel tiles.  With more (P2:
# 4 x 2 tiles) it re-reads x for every tile of output channels and
# grad_output for every tile of input channels: in 3xTF32 that measured
# slower than grad_weight_mma (P2 9.95 ms against 9.31), in TF32 faster (6.18
# against 6.65; perf notes v26).  False keeps grad_weight_mma there;
# "anywhere" lifts the size and channel rules (tests).


# Where both gradients would run the phase kernels (grad_input_phase and
# grad_weight_phase) and a group fits one tile of each (32 input channels, 64
# output channels, up to 3 taps), one launch of grad_weight_phase's GX build
# computes both from each staged window, reading grad_output once instead of
# twice.  Routed in "tf32" at strides above 1, where the two kernels read
# every sector of grad_output for half of its elements: P4 1.04 -> 0.81 ms.
# In "highest" (P4 1.24-1.26 against 1.22-1.25) and at stride 1 (P1 "tf32"
# 1.46 against 2.06, with 5 taps) its one block of 16 warps a
# multiprocessor, half of them on each GEMM in step, gained nothing or lost
# (perf notes v35).  False runs the two kernels; "anywhere" lifts the size,
# channel, mode and stride rules (tests).


def _backward(grad_output, x, weight, geometry: Geometry, output_mask, precision: str, out):
    """backward's checked path, on grad_output's device: the joint families
    (both gradients in one pass) where one takes the call, then grad_weight,
    grad_input and grad_bias each from its own priority list."""
    want_input, want_weight, want_bias = output_mask
    if not geometry.batch:  # an empty batch: sums over nothing, and no kernel grid to launch
        return _empty_batch_backward(geometry, grad_output.dtype, output_mask, out)
    gy4 = _contiguous4(grad_output, geometry.output_shape4)
    dtype = _geometry.dtype_name(gy4.dtype)
    weight = cupy.ascontiguousarray(weight)
    x4 = None
    grad_input = _output(out[0], geometry.input_shape4, gy4.dtype) if want_input else None
    grad_weight = _output(out[1], geometry.weight_shape4, gy4.dtype) if want_weight else None
    if want_input or want_weight:
        x4 = _contiguous4(x, geometry.input_shape4)
        p = _problem(
            "backward", geometry, dtype, precision,
            (("grad_output", gy4), ("x", x4), ("weight", weight), ("grad_input", grad_input), ("grad_weight", grad_weight)),
            (want_input, want_weight),
        )  # fmt: skip
        family = _choose(p, _S())
        if family is not None:
            _run(family.plan(p, None), {"grad_output": gy4, "x": x4, "weight": weight, "grad_input": grad_input, "grad_weight": grad_weight}, p)
            want_input = want_weight = False
    # grad_weight first: its main kernel needs nothing made in the call, so the
    # GPU starts on it at once, and grad_input's weight pack and launches are
    # queued while it runs
    if want_weight and grad_weight.size:
        p = _problem("grad_weight", geometry, dtype, precision, (("x", x4), ("grad_output", gy4), ("out", grad_weight)))
        _run_pass(p, {"x": x4, "grad_output": gy4, "out": grad_weight})
    if want_input and grad_input.size:
        p = _problem("grad_input", geometry, dtype, precision, (("source", gy4), ("weight", weight), ("out", grad_input)))
        _run_pass(p, {"source": gy4, "weight": weight, "out": grad_input})
    grad_bias = None
    if want_bias:
        grad_bias = _output(out[2], (geometry.out_channels,), gy4.dtype)
        if grad_bias.size:  # (an empty batch never comes here: _empty_batch_backward)
            p = _problem("grad_bias", geometry, dtype, precision, (("grad_output", gy4), ("out", grad_bias)))
            _run_pass(p, {"grad_output": gy4, "out": grad_bias})
    if grad_input is not None:
        grad_input = grad_input.reshape(geometry.user_shape(geometry.input_shape4))
    if grad_weight is not None:
        grad_weight = grad_weight.reshape(geometry.user_shape(geometry.weight_shape4, is_weight=True))
    return grad_input, grad_weight, grad_bias


# --- the kernel families (cupyconv._plan.Family), in the order of the routing
# rules above.  Each family's reject() holds every condition of its rule;
# plan() builds the launches of its runner, each array by its role: the
# pass's "source" (forward: x; grad_input: grad_output), "weight", "bias",
# "out", or for grad_weight "x" and "grad_output"; temporaries "t<k>".


# --- both gradients in one pass ("backward" problems; `wants` says which):
# roles "grad_output", "x", "weight", "grad_input", "grad_weight".


def _device() -> Device:
    return Device(_compute_capability(), _multiprocessors(), _max_shared())


def _problem(op: str, geometry: Geometry, dtype: str, precision: str, arrays, wants=(True, True)) -> Problem:
    alignment = tuple((role, None if a is None else a.data.ptr % 256) for role, a in arrays)
    return Problem(op, geometry, dtype, precision, _device(), alignment, wants)


def _run(plan: Plan, arrays: dict, p: Problem = None) -> None:
    """The plan's steps on `arrays` (role -> array), its buffers allocated
    first; `p`, the problem it was made for, is handed to observe_plans()."""
    for served in _RECORDING.plan_observers:
        served.append((p, plan))
    bound = dict(arrays)
    copies = {step.dest for step in plan.steps if isinstance(step, Copy)}
    for k, buffer in enumerate(plan.buffers):
        if f"t{k}" not in copies:
            bound[f"t{k}"] = cupy.empty(buffer.shape, dtype=buffer.dtype)
    for step in plan.steps:
        if isinstance(step, Sub):
            _run_pass(step.problem, {mine: bound[theirs] for mine, theirs in step.roles})
        elif isinstance(step, Copy):
            bound[step.dest] = cupy.ascontiguousarray(_kernels.pack_gemm_weight(bound[step.source], step.geometry, step.pass_name))
            if _RECORDING.recorder is not None:  # CuPy operations, not launches: a recording would miss them
                _RECORDING.recorder.unsafe = True
        else:
            _launch(step.launch, tuple(None if a is None else _phase_table(a.flat) if isinstance(a, Table) else bound[a] for a in step.args))


def _run_pass(p: Problem, arrays: dict) -> None:
    """Chooses p's family and runs its plan with the family's heuristic tile;
    with autotuning on, the fastest of every (family, tile) candidate of the
    families that do not reject p, timed on these arrays once per device and
    signature and remembered on disk."""
    s = _S()
    if not _autotune.enabled():
        family = _choose(p, s)
        _run(family.plan(p, _tile(family, p, s)), arrays, p)
        return
    family, tile = _tuned_choice(p, arrays)
    _run(family.plan(p, tile), arrays, p)


def _tile(family, p: Problem, s):
    """The family's heuristic tile for p, or settings.tile's where it names
    this family and one of its candidates."""
    if s.tile is not None:
        for name, tile in (s.tile,) if isinstance(s.tile[0], str) else s.tile:
            if name == family.name and tile in family.tiles(p):
                return tile
    return family.heuristic(p)


def _tuned_choice(p: Problem, arrays: dict):
    candidates = _candidates(p)
    if len(candidates) == 1:
        return candidates[0]
    g = p.geometry
    s = _S()
    key = (p.op, p.dtype, p.precision, g, tuple((role, None if a is None else a % 16) for role, a in p.alignment), p.device)
    memo = (cupy.cuda.Device().id, "families", key, s)
    choice = _tuned.get(memo)
    if choice is None:
        # the settings are part of the signature: a choice among other settings' candidates is another choice
        changed = "" if s == settings.Settings() else hashlib.sha256(repr(s).encode()).hexdigest()[:16]
        signature = "|".join([_device_signature(), "families"] + [str(k) for k in key] + ([changed] if changed else []))
        observers = _RECORDING.observers, _RECORDING.plan_observers
        _RECORDING.observers = _RECORDING.plan_observers = ()  # the timing runs are not the call's launches
        try:
            choice = _tuned[memo] = _autotune.choose(
                signature, candidates, name=lambda c: f"{c[0].name}:{c[1]}", label=f"{p.op} {p.dtype}",
                time=lambda c: _gpu_seconds(lambda: _run(c[0].plan(p, c[1]), arrays)),
            )  # fmt: skip
        finally:
            _RECORDING.observers, _RECORDING.plan_observers = observers
    return choice


_SMALL_LAUNCHES: dict = {}  # (settings, problem, device) -> _Bound or None
_SMALL_COUNTS = [0, 0]  # hits, misses (tests read them as functools' cache_info)


def _small_forward_launch(s, p: Problem, device: int):
    """_small_launch(s, p), remembered per (settings, problem, device) where
    the settings did not change while it was made (as _registry._choose)."""
    key = (s, p, device)
    bound = _SMALL_LAUNCHES.get(key, _SMALL_LAUNCHES)
    if bound is not _SMALL_LAUNCHES:
        _SMALL_COUNTS[0] += 1
        return bound
    _SMALL_COUNTS[1] += 1
    version = settings.version()
    bound = _small_launch(s, p)
    if settings.version() == version and _S() is s:
        if len(_SMALL_LAUNCHES) >= 1024:
            _SMALL_LAUNCHES.clear()
        _SMALL_LAUNCHES[key] = bound
    return bound


_small_forward_launch.cache_clear = _SMALL_LAUNCHES.clear  # (tests: plans made afresh)
_small_forward_launch.cache_info = lambda: types.SimpleNamespace(hits=_SMALL_COUNTS[0], misses=_SMALL_COUNTS[1])


def _small_launch(s, p: Problem):
    """The one launch of a small forward call as a _Bound (its phase table and
    scalars in place), or None where its plan is not one launch on the call's
    arrays.  The settings `s` and `device` are part of the key."""
    family = _choose(p, s)
    plan = family.plan(p, _tile(family, p, s))
    if plan.buffers or len(plan.steps) != 1 or not isinstance(plan.steps[0], Step) or plan.steps[0].args[:4] != ("source", "weight", "bias", "out"):
        return None
    launch, extra = plan.steps[0].launch, plan.steps[0].args[4:]
    tail = tuple(_phase_table(a.flat) for a in extra)
    return _Bound(launch.name, _kernel_function(launch), (launch.blocks,), (launch.threads,), tail + launch.scalars, launch.shared, plan)


