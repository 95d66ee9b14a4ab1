"""The configurations every correctness test sweeps (CPU and GPU alike)."""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import numpy


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    dims: int
    batch: Optional[int]  # None: unbatched input
    in_channels: int
    out_channels: int
    kernel: Tuple[int, ...]
    size: Tuple[int, ...]
    stride: object = 1
    padding: object = 0
    output_padding: object = 0
    dilation: object = 1
    groups: int = 1
    bias: bool = True

    @property
    def kwargs(self):
        return dict(
            stride=self.stride, padding=self.padding, output_padding=self.output_padding,
            groups=self.groups, dilation=self.dilation,
        )  # fmt: skip

    def arrays(self, rng: numpy.random.Generator, dtype=numpy.float64):
        """Random (input, weight, bias) in float64, rounded through `dtype`
        (so a low-precision run and its float64 oracle see the same numbers)."""
        lead = () if self.batch is None else (self.batch,)
        x = rng.standard_normal(lead + (self.in_channels,) + self.size)
        w = rng.standard_normal((self.in_channels, self.out_channels // self.groups) + self.kernel)
        w /= numpy.sqrt(self.in_channels // self.groups * numpy.prod(self.kernel))
        b = rng.standard_normal(self.out_channels) if self.bias else None
        cast = lambda a: None if a is None else a.astype(dtype).astype(numpy.float64)  # noqa: E731
        return cast(x), cast(w), cast(b)

    def __str__(self):
        return self.name


CASES = [
    # 1D
    Case("1d_basic", 1, 2, 4, 6, (3,), (7,)),
    Case("1d_s2_p1_op1", 1, 2, 4, 6, (5,), (9,), stride=2, padding=1, output_padding=1),
    Case("1d_s3_d2_p2_op1", 1, 2, 3, 5, (4,), (8,), stride=3, padding=2, output_padding=1, dilation=2),
    Case("1d_op_below_dilation", 1, 2, 4, 4, (3,), (6,), stride=1, output_padding=2, dilation=3),
    Case("1d_groups2_s2", 1, 3, 6, 4, (3,), (10,), stride=2, padding=1, groups=2),
    Case("1d_depthwise", 1, 2, 6, 6, (4,), (11,), stride=2, padding=1, groups=6),
    Case("1d_unbatched", 1, None, 5, 3, (3,), (9,), stride=2, padding=1, output_padding=1),
    Case("1d_empty_batch", 1, 0, 4, 6, (3,), (7,), stride=2),
    Case("1d_stride_above_kernel", 1, 2, 3, 4, (2,), (6,), stride=5, padding=1, output_padding=3),
    Case("1d_gcd_s4_d2", 1, 2, 4, 4, (5,), (7,), stride=4, padding=3, dilation=2, output_padding=1),
    Case("1d_s6_d4", 1, 2, 3, 5, (4,), (6,), stride=6, padding=2, dilation=4),
    Case("1d_k1", 1, 2, 8, 3, (1,), (9,), stride=3, bias=False),
    Case("1d_vocoder", 1, 2, 16, 8, (16,), (12,), stride=8, padding=4),
    Case("1d_fold_s4_p6", 1, 2, 5, 6, (8,), (10,), stride=4, padding=6, output_padding=2),
    Case("1d_wide_channels", 1, 3, 70, 130, (3,), (33,), padding=1, dilation=2),
    Case("1d_mid_channels", 1, 2, 24, 28, (3,), (19,), stride=2, padding=1),
    Case("1d_no_bias_g4", 1, 2, 16, 8, (5,), (20,), stride=2, padding=1, output_padding=1, groups=4, bias=False),
    Case("1d_big_padding", 1, 2, 3, 3, (5,), (9,), stride=2, padding=5, dilation=2),
    Case("1d_dw_multiplier", 1, 2, 3, 6, (5,), (9,), stride=3, padding=2, dilation=2, groups=3),
    Case("1d_dw_s4_d6", 1, 1, 2, 2, (7,), (6,), stride=4, padding=5, dilation=6, output_padding=3, groups=2),
    # 2D
    Case("2d_basic", 2, 2, 3, 4, (3, 3), (5, 6)),
    Case("2d_per_axis", 2, 2, 4, 6, (3, 2), (5, 4), stride=(2, 3), padding=(1, 0), output_padding=(1, 2)),
    Case("2d_s5_d2", 2, 2, 3, 5, (3, 3), (4, 5), stride=5, padding=1, dilation=2),
    Case("2d_groups_dilation", 2, 2, 4, 6, (2, 3), (6, 5), stride=(1, 2), padding=(1, 1), dilation=(2, 1), groups=2),
    Case("2d_depthwise", 2, 2, 4, 4, (4, 4), (6, 5), stride=2, padding=1, groups=4),
    Case("2d_dw_per_axis", 2, 1, 2, 4, (3, 5), (4, 3), stride=(2, 3), padding=(1, 4), dilation=(3, 2), groups=2),
    Case("2d_unbatched", 2, None, 3, 2, (3, 3), (4, 4), stride=2, padding=1, output_padding=1),
    Case("2d_op_below_dilation", 2, 1, 2, 3, (2, 2), (4, 3), stride=1, dilation=2, output_padding=1),
    Case("2d_empty_batch", 2, 0, 3, 4, (3, 3), (5, 5), stride=2),
    Case("2d_wide_channels", 2, 2, 40, 72, (3, 3), (9, 7), stride=2, padding=1, bias=False),
]

# 1D cases shaped for conv_window (widths of whole 16-byte vectors,
# 32 or more GEMM rows): channel tails (40, 33, odd for the 16-bit pairs),
# row tails, folds of 4, 8 and 32 (up to a tile's whole height of one
# channel), a phase that no tap reaches, groups, long dilated taps.
WINDOW_CASES = [
    Case("1d_win_s1_d3", 1, 2, 40, 64, (5,), (136,), padding=2, dilation=3),
    Case("1d_win_fold8", 1, 2, 48, 40, (16,), (64,), stride=8, padding=4),
    Case("1d_win_fold4_pad", 1, 1, 33, 12, (8,), (40,), stride=4, padding=6, output_padding=2),
    Case("1d_win_fold32", 1, 2, 16, 3, (64,), (16,), stride=32, padding=16, bias=False),
    # folds deep enough that a row tile is one channel's sub-phases, each
    # computing only the columns they write (window.cuh's window_block)
    Case("1d_win_fold128", 1, 2, 20, 3, (256,), (40,), stride=128, padding=100, output_padding=5),
    Case("1d_win_fold256", 1, 1, 24, 2, (512,), (256,), stride=256, padding=128),
    Case("1d_win_s2_d2", 1, 2, 32, 36, (3,), (72,), stride=2, padding=1, dilation=2),
    Case("1d_win_s2_d4_op3", 1, 2, 24, 40, (4,), (88,), stride=2, padding=5, output_padding=3, dilation=4),
    Case("1d_win_s2_k5_g2", 1, 2, 64, 64, (5,), (48,), stride=2, padding=1, output_padding=1, groups=2),
    Case("1d_win_k9_d4", 1, 1, 32, 32, (9,), (200,), padding=3, dilation=4),
]


# grad_weight_window: 1D, power-of-two stride, input rows of whole 16-byte
# vectors, at least 16 channels per group each way.  grad_output rows both
# aligned (the vector path) and not (the element path), channel tails in
# both tiles, several tap chunks, groups.
GRAD_WEIGHT_WINDOW_CASES = [
    Case("gw_s1_d3", 1, 2, 40, 72, (5,), (136,), padding=2, dilation=3),
    Case("gw_fold8", 1, 2, 48, 40, (16,), (64,), stride=8, padding=4),
    Case("gw_s2_d2_ragged", 1, 2, 32, 36, (3,), (72,), stride=2, padding=1, dilation=2),
    Case("gw_k9_d4", 1, 1, 32, 24, (9,), (200,), padding=3, dilation=4),
    Case("gw_s2_g2", 1, 2, 64, 64, (5,), (48,), stride=2, padding=1, output_padding=1, groups=2, bias=False),
    Case("gw_s4_p7", 1, 3, 24, 80, (6,), (40,), stride=4, padding=7, output_padding=3),
]


# grouped_backward: 1D, 4, 8 or 16 input channels a group with C / 4 * M <= 32
# output channels, up to 8 taps.  Strides (phases of staged grad_output), a
# dilation, paddings on both sides, items cut by the row's end, every
# channel count, a lone group, an unbatched input; inputs of 2**16 elements or
# more (the routing threshold) except where a test lowers it.
GROUPED_BACKWARD_CASES = [
    Case("gb_p3", 1, 2, 64, 32, (5,), (1200,), stride=2, padding=1, output_padding=1, groups=4),
    Case("gb_c8_s3_d2", 1, 3, 16, 8, (8,), (1500,), stride=3, padding=4, dilation=2, groups=2),
    Case("gb_c4_m32", 1, 2, 8, 64, (3,), (4100,), padding=1, groups=2, bias=False),
    Case("gb_c16_k1_s4", 1, 1, 16, 2, (1,), (5000,), stride=4, output_padding=3),
    Case("gb_unbatched", 1, None, 32, 16, (4,), (2049,), stride=2, padding=3, groups=4),
]

# grouped_forward (1D, 2-16 input and 4, 8 or 16 output channels a group,
# stride 1-4): several tiles of steps per row with taps reaching across tile
# ends, phases with no taps (stride 4, dilation 2), 16 taps, large padding.
GROUPED_FORWARD_CASES = [
    Case("gf_p3", 1, 2, 64, 32, (5,), (1200,), stride=2, padding=1, output_padding=1, groups=4),
    Case("gf_c8_m4_s1_d3", 1, 3, 16, 8, (7,), (1500,), padding=4, dilation=3, groups=2),
    Case("gf_c2_m16_s3", 1, 2, 4, 32, (4,), (700,), stride=3, padding=2, output_padding=2, groups=2),
    Case("gf_c16_m16_s4_d2", 1, 1, 16, 16, (6,), (900,), stride=4, padding=5, dilation=2, bias=False),
    Case("gf_c2_m4_k16", 1, 2, 6, 12, (16,), (600,), stride=2, padding=7, groups=3),
    Case("gf_unbatched", 1, None, 12, 24, (3,), (2100,), stride=2, groups=3),
]

# The backward pass's phase rewrite (a dilation that is a multiple of the
# stride: one phase of grad_output, a stride-1 problem): the tight padding
# ceil(p / s), padding 0 with zeros at both ends (where the tight one would
# need an output padding PyTorch rejects), dilation 3 after the rewrite with
# an output padding, groups, no batch.
PHASE_BACKWARD_CASES = [
    Case("pb_p4", 1, 2, 32, 16, (3,), (700,), stride=2, padding=1, dilation=2),
    Case("pb_pad0", 1, 2, 8, 4, (5,), (40,), stride=2, padding=3, output_padding=1, dilation=2),
    Case("pb_s3_d3_g3", 1, 3, 12, 12, (4,), (500,), stride=3, padding=4, dilation=3, groups=3),
    Case("pb_d6_unbatched", 1, None, 8, 8, (4,), (411,), stride=2, padding=7, output_padding=1, dilation=6, groups=4, bias=False),
]


# conv_wgmma_resident's fill (forward, 1D, stride 2, dilation a multiple of
# it): rows of 64 and 128 output channels (whole warps' parts, both tiles)
# and of 40 (the last row tile cut), the sums on odd outputs (out_base 1)
# and on even ones, odd and even output lengths (every row alignment), an
# output padding, a longer dilation, groups, no bias.
# conv_fold (stride 8, 9 to 16 taps, dilation 1, one group; 16-bit on
# Hopper): X2's shape with a last column tile of one output group (its
# carry), input channels past a k-block of 64, output channels past a row
# tile of 8, paddings that move the outputs' 16-byte alignment (odd output
# rows too), output_padding, fewer taps than 16, rows of several column
# tiles, no bias, an unbatched input.
FOLD_CASES = [
    Case("1d_fold_x2", 1, 2, 64, 16, (16,), (256,), stride=8, padding=4),
    Case("1d_fold_ragged", 1, 3, 72, 13, (16,), (136,), stride=8, padding=3, output_padding=5),
    Case("1d_fold_k9_p0", 1, 2, 40, 8, (9,), (64,), stride=8, bias=False),
    Case("1d_fold_k12_p7", 1, 1, 130, 24, (12,), (520,), stride=8, padding=7, output_padding=7),
    Case("1d_fold_p9_unbatched", 1, None, 64, 9, (16,), (200,), stride=8, padding=9),
    # 6 and 7 k-blocks of 64 channels: a tile's stores run between the next
    # tile's k-blocks 2 to 5 (conv_fold's store_chunk)
    Case("1d_fold_kb6", 1, 3, 384, 8, (16,), (200,), stride=8, padding=4),
    Case("1d_fold_kb7_p5", 1, 2, 392, 20, (14,), (304,), stride=8, padding=5, output_padding=3),
]

FILL_CASES = [
    Case("1d_fill_s2_d2", 1, 3, 32, 64, (3,), (700,), stride=2, padding=1, dilation=2),
    Case("1d_fill_d4_p3_op1", 1, 2, 24, 128, (4,), (520,), stride=2, padding=3, output_padding=1, dilation=4),
    Case("1d_fill_g2_p0", 1, 2, 64, 128, (3,), (640,), stride=2, dilation=2, groups=2, bias=False),
    Case("1d_fill_rows40_d6", 1, 2, 16, 40, (2,), (600,), stride=2, padding=4, dilation=6),
]


# grad_weight_phase (float32, 1D, every tap on one phase of grad_output):
# stride 1 with a dilation (5 taps), stride 2 with dilation 2 (P4), channel
# tails in both tiles with groups and one unused tap of the chunk, two chunks
# of 8 taps, exactly 8, one tap with stride 4, paddings past the first items,
# rows cut inside an item, no batch.  The 16-byte copies (stride 1, rows of
# whole vectors) run on gwp_p1like, gwp_tails_vec and on both chunks of
# gwp_k12_vec (whose x rows are not whole vectors), the 4-byte ones
# elsewhere.  Window columns with missing rows (copy_window_column): 16-byte
# in gwp_tails_vec (both kernels) and gwp_k12_vec (grad_weight_phase), 4-byte
# in gwp_tails_g2, gwp_k12 and gwp_unbatched.  gwp_g2_one_tile: groups of one
# channel tile each way (grad_weight_phase's GX build).
GRAD_WEIGHT_PHASE_CASES = [
    Case("gwp_p1like", 1, 3, 32, 64, (5,), (1000,), dilation=3),
    Case("gwp_p4like", 1, 2, 32, 64, (3,), (700,), stride=2, padding=1, dilation=2),
    Case("gwp_tails_g2", 1, 2, 80, 144, (4,), (300,), stride=3, padding=4, output_padding=2, dilation=3, groups=2),
    Case("gwp_k12", 1, 2, 16, 24, (12,), (260,), padding=5, dilation=2),
    Case("gwp_k12_vec", 1, 2, 16, 24, (12,), (262,), padding=4, dilation=2),
    Case("gwp_k8_s2_d4", 1, 2, 32, 64, (8,), (200,), stride=2, padding=7, dilation=4),
    Case("gwp_k1_s4", 1, 2, 24, 32, (1,), (400,), stride=4, output_padding=3),
    Case("gwp_unbatched", 1, None, 20, 36, (2,), (333,), stride=2, padding=3, dilation=4, bias=False),
    Case("gwp_tails_vec", 1, 2, 24, 20, (3,), (508,), padding=4, dilation=2),
    Case("gwp_g2_one_tile", 1, 2, 48, 40, (3,), (300,), stride=2, padding=1, dilation=2, groups=2),
]


# grad_weight_wgmma_tf32: float32, input rows of whole 16-byte vectors,
# groups of at least 64 input and output channels; tap mode stride 1 and up
# to 3 taps, fold mode strided; grad_output rows of every copy size (the
# comment's out width), padding, dilation, output padding, channel tails in
# both tiles, groups, rows of positions that end inside a 64-position item;
# in fold mode a warp's rows over one output channel (16 taps) or two, and
# rows past the tile's taps (K 5: 125 of 128).
GRAD_WEIGHT_TF32_CASES = [
    Case("gwt_p2like", 1, 2, 128, 128, (3,), (1000,)),  # out 1002: 8-byte copies, 1 x 2 tiles
    Case("gwt_tails_pad", 1, 3, 72, 136, (3,), (520,), padding=2, dilation=2),  # out 520: 16-byte copies, 2 x 2 tiles with tails
    Case("gwt_g2", 1, 2, 128, 192, (2,), (264,), padding=1, groups=2, bias=False),  # out 263: 4-byte copies
    Case("gwt_k1", 1, 2, 64, 64, (1,), (200,)),  # out 200
    Case("gwt_op", 1, 2, 64, 80, (3,), (136,), padding=1, output_padding=1, dilation=2),  # out 139
    Case("gwt_odd_rows", 1, 2, 64, 64, (3,), (130,)),  # input rows of 130 floats: not this kernel
    Case("gwt_fold_x2like", 1, 2, 64, 72, (16,), (200,), stride=8, padding=4),  # out 1600: 16-byte copies, 9 co tiles of 8
    Case("gwt_fold_tails", 1, 2, 72, 90, (5,), (136,), stride=2, padding=3, output_padding=1, dilation=2),  # out 274: 8-byte copies
    Case("gwt_fold_g2", 1, 2, 128, 128, (8,), (100,), stride=4, padding=2, output_padding=3, groups=2, bias=False),  # out 403: 4-byte
    Case("gwt_fold_h4like", 1, 2, 64, 64, (4,), (128,), stride=2, padding=1),  # out 256; an item's window ends on a vector's first float
]


def relative_error(actual, expected) -> float:
    """||actual - expected|| / ||expected|| in float64 (0 for empty arrays)."""
    actual = numpy.asarray(actual, dtype=numpy.float64)
    expected = numpy.asarray(expected, dtype=numpy.float64)
    if expected.size == 0:
        return 0.0
    return float(numpy.linalg.norm(actual - expected) / max(numpy.linalg.norm(expected), 1e-300))

# grad_input_taps: 1D, stride above 1, dilation 1, 8 or more taps, 16 or more
# input channels per group, the kernel, stride, padding and grad_output's row
# in whole vectors (8 bytes: the vocoder's padding 4 in 16-bit; 16 bytes
# otherwise).  Row, column and reduction tails, batch boundaries inside a
# column tile, groups, an unbatched input, and reductions long enough to split.
GRAD_INPUT_TAPS_CASES = [
    Case("gi_fold8", 1, 2, 48, 40, (16,), (64,), stride=8, padding=4),
    Case("gi_k64_s16", 1, 3, 24, 20, (64,), (40,), stride=16, padding=24),
    Case("gi_g2_op4", 1, 2, 64, 48, (8,), (33,), stride=8, output_padding=4, groups=2),
    Case("gi_unbatched", 1, None, 32, 16, (12,), (50,), stride=4, padding=4),
    Case("gi_long", 1, 2, 32, 64, (64,), (24,), stride=16, padding=24, bias=False),
]

# grad_weight_taps: grad_input_taps's conditions, and x rows of whole vectors
# at least one 64-position stage long.  Stages that run into the next image,
# column tails (q = j*K + t past M*K), row tails, groups, an unbatched input.
GRAD_WEIGHT_TAPS_CASES = [
    Case("gwt_fold8", 1, 2, 48, 40, (16,), (96,), stride=8, padding=4),
    Case("gwt_k64_s16", 1, 3, 24, 20, (64,), (72,), stride=16, padding=24),
    Case("gwt_g2_op4", 1, 2, 64, 48, (8,), (80,), stride=8, output_padding=4, groups=2),
    Case("gwt_unbatched", 1, None, 32, 16, (12,), (64,), stride=4, padding=4),
    Case("gwt_long", 1, 4, 32, 8, (32,), (256,), stride=8, padding=12, bias=False),
]
