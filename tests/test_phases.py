"""The polyphase tables the GPU kernel runs on, checked without a GPU.

`interpret` evaluates conv_gemm's formula (kernels/conv_gemm.cu) in NumPy from
the very tables, weight strides and channel counts that _cuda.py passes to the
kernel, and counts how often each output element is written.  torch on the
CPU is the oracle.
"""

from __future__ import annotations

import math

import numpy
import pytest

from cupyconv import _geometry, _kernels

from sweep import CASES, FILL_CASES, GRAD_INPUT_TAPS_CASES, GRAD_WEIGHT_PHASE_CASES, GRAD_WEIGHT_TAPS_CASES, GRAD_WEIGHT_TF32_CASES, GRAD_WEIGHT_WINDOW_CASES, GROUPED_FORWARD_CASES, PHASE_BACKWARD_CASES, WINDOW_CASES, Case

torch = pytest.importorskip("torch")
F = torch.nn.functional


def interpret(source4, weight, out_shape4, flat, phases_h, phases_w, groups, red_channels, out_channels, w_strides, kernel_w):
    """out[n, g*M + m, oh, ow] = sum_{taps, c} weight[A(g, m, c, kh, kw)] * in[n, g*C + c, ih, iw]"""
    records = numpy.asarray(flat).reshape(-1, 9)
    w_flat = weight.reshape(-1)
    out = numpy.zeros(out_shape4)
    writes = numpy.zeros(out_shape4, dtype=numpy.int64)
    batch, _, in_h, in_w = source4.shape
    group_stride, m_stride, c_stride, tap_stride = w_strides
    m = numpy.arange(out_channels)[:, None]
    c = numpy.arange(red_channels)[None, :]
    for phase in range(phases_h * phases_w):
        ph, pw = records[phase // phases_w], records[phases_h + phase % phases_w]
        count_h, out_base_h, out_step_h, in_base_h, in_step_h, first_h, step_h, taps_h, tap_in_h = ph
        count_w, out_base_w, out_step_w, in_base_w, in_step_w, first_w, step_w, taps_w, tap_in_w = pw
        if count_h == 0 or count_w == 0:
            continue
        qh, qw = numpy.arange(count_h), numpy.arange(count_w)
        oh, ow = out_base_h + qh * out_step_h, out_base_w + qw * out_step_w
        for g in range(groups):
            acc = numpy.zeros((batch, out_channels, count_h, count_w))
            for th in range(taps_h):
                for tw in range(taps_w):
                    kh, kw = first_h + th * step_h, first_w + tw * step_w
                    ih = in_base_h + qh * in_step_h + th * tap_in_h
                    iw = in_base_w + qw * in_step_w + tw * tap_in_w
                    valid = ((ih >= 0) & (ih < in_h))[:, None] & ((iw >= 0) & (iw < in_w))[None, :]
                    window = source4[:, g * red_channels : (g + 1) * red_channels][:, :, ih.clip(0, in_h - 1)][..., iw.clip(0, in_w - 1)]
                    window = window * valid
                    a = w_flat[g * group_stride + m * m_stride + c * c_stride + (kh * kernel_w + kw) * tap_stride]  # (M, C)
                    acc += numpy.einsum("mc,nchw->nmhw", a, window)
            channels = slice(g * out_channels, (g + 1) * out_channels)
            out[:, channels][:, :, oh[:, None], ow[None, :]] = acc
            writes[:, channels][:, :, oh[:, None], ow[None, :]] += 1
    return out, writes


def _torch_grads(x, w, gy, geometry):
    """(grad_input, grad_weight) of conv_transpose on the CPU in float64, in
    the geometry's 4D shapes: the oracle the interpreters are held to."""
    xt = torch.tensor(x.reshape(geometry.input_shape4), requires_grad=True)
    wt = torch.tensor(w.reshape(geometry.weight_shape4), requires_grad=True)
    k = geometry
    y = F.conv_transpose2d(xt, wt, stride=k.stride, padding=k.padding, output_padding=k.output_padding, groups=k.groups, dilation=k.dilation)
    y.backward(torch.from_numpy(gy))
    return xt.grad.numpy(), wt.grad.numpy()


def _geometry_of(case):
    lead = () if case.batch is None else (case.batch,)
    geometry = _geometry.make_geometry(
        case.dims, lead + (case.in_channels,) + case.size,
        (case.in_channels, case.out_channels // case.groups) + case.kernel, None,
        case.stride, case.padding, case.output_padding, case.groups, case.dilation,
    )  # fmt: skip
    return geometry


def _weight(w, geometry, pass_name, packed):
    """The weight as conv_gemm reads it, and its strides."""
    strides = _kernels.gemm_weight_strides(geometry, pass_name, packed)
    return (numpy.ascontiguousarray(_kernels.pack_gemm_weight(w, geometry, pass_name)) if packed else w), strides


@pytest.mark.parametrize("packed", [False, True], ids=["as_given", "packed"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_tables_compute_conv_transpose(case, packed):
    rng = numpy.random.default_rng(10)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    flat, phases_h, phases_w = _kernels.forward_phases(geometry)
    a, strides = _weight(w, geometry, "forward", packed)
    out, writes = interpret(
        x.reshape(geometry.input_shape4), a, geometry.output_shape4, flat, phases_h, phases_w, geometry.groups,
        geometry.in_channels_per_group, geometry.out_channels_per_group,
        strides, geometry.kernel[1],
    )  # fmt: skip
    fn = F.conv_transpose1d if case.dims == 1 else F.conv_transpose2d
    expected = fn(torch.from_numpy(x), torch.from_numpy(w), **case.kwargs).numpy().reshape(geometry.output_shape4)
    assert (writes == 1).all(), "every output element is written by exactly one phase"
    numpy.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("packed", [False, True], ids=["as_given", "packed"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_grad_input_table_computes_the_correlation(case, packed):
    rng = numpy.random.default_rng(11)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    gy = rng.standard_normal(geometry.output_shape4)
    flat, phases_h, phases_w = _kernels.grad_input_phases(geometry)
    a, strides = _weight(w, geometry, "grad_input", packed)
    out, writes = interpret(
        gy, a, geometry.input_shape4, flat, phases_h, phases_w, geometry.groups,
        geometry.out_channels_per_group, geometry.in_channels_per_group,
        strides, geometry.kernel[1],
    )  # fmt: skip
    assert (writes == 1).all()
    numpy.testing.assert_allclose(out, _torch_grads(x, w, gy, geometry)[0], rtol=1e-12, atol=1e-12)


def test_each_tap_reaches_exactly_one_phase():
    for stride in range(1, 9):
        for dilation in range(1, 7):
            for kernel in (1, 2, 3, 5, 8, 17):
                records = _kernels.forward_axis_phases(10, kernel, stride, 0, dilation, 30)
                taps = sorted(first + t * step for _, _, _, _, _, first, step, count, _ in records for t in range(count))
                assert taps == list(range(kernel)), (stride, dilation, kernel)


# --- the depthwise stencil (kernels/depthwise.cu) -------------------------------


def taps_reaching(o, pad, stride, dil, kernel, in_size, first_taps, tap_step):
    """depthwise.cu's taps_reaching, line for line (integer division of
    exact multiples, so C's truncation and Python's floor agree)."""
    shifted = o + pad
    first = first_taps[shifted % stride]
    count = 0
    if first < kernel:
        step_in = tap_step * dil // stride
        ih = _exact_div(shifted - first * dil, stride)
        if ih >= in_size:
            skip = (ih - in_size + step_in) // step_in
            first += skip * tap_step
            ih -= skip * step_in
        if first < kernel and ih >= 0:
            count = min((kernel - 1 - first) // tap_step + 1, ih // step_in + 1)
    return first, count


def _exact_div(a, b):
    assert a % b == 0
    return a // b


def interpret_depthwise(x4, w, geometry):
    """out[n, co, oh, ow] from the taps depthwise.cu visits; also how many
    times each (output, tap) pair is visited."""
    table = _kernels.depthwise_first_taps(geometry)
    (kh_, kw_), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    step_h, step_w = _kernels.depthwise_tap_step(sh, dh), _kernels.depthwise_tap_step(sw, dw)
    in_h, in_w = geometry.in_size
    batch, channels_out, out_h, out_w = geometry.output_shape4
    multiplier = geometry.out_channels_per_group
    w3 = w.reshape(channels_out, kh_, kw_)
    out = numpy.zeros(geometry.output_shape4)
    visits = numpy.zeros(geometry.output_shape4 + (kh_, kw_), dtype=numpy.int64)
    first_w, off_w = table[sh : sh + sw], table[sh + sw :]
    iw_step = step_w * dw // sw
    channels = numpy.arange(channels_out)
    for oh in range(out_h):
        first_h, count_h = taps_reaching(oh, ph, sh, dh, kh_, in_h, table[:sh], step_h)
        for ow in range(out_w):
            q, r = divmod(ow + pw, sw)  # the kernel follows these by additions
            for a in range(count_h):
                kh = first_h + a * step_h
                ih = _exact_div(oh + ph - kh * dh, sh)
                assert 0 <= ih < in_h
                kw, iw = first_w[r], q - off_w[r]
                while kw < kw_ and iw >= 0:
                    if iw < in_w:
                        assert iw * sw == ow + pw - kw * dw
                        out[:, :, oh, ow] += w3[channels, kh, kw] * x4[:, channels // multiplier, ih, iw]
                        visits[:, :, oh, ow, kh, kw] += 1
                    kw, iw = kw + step_w, iw - iw_step
    return out, visits


_DEPTHWISE = [c for c in CASES if c.in_channels == c.groups]


@pytest.mark.parametrize("case", _DEPTHWISE, ids=str)
def test_depthwise_taps_compute_conv_transpose(case):
    rng = numpy.random.default_rng(11)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    assert geometry.in_channels_per_group == 1
    out, visits = interpret_depthwise(x.reshape(geometry.input_shape4), w, geometry)
    fn = F.conv_transpose1d if case.dims == 1 else F.conv_transpose2d
    expected = fn(torch.from_numpy(x), torch.from_numpy(w), **case.kwargs).numpy().reshape(geometry.output_shape4)
    assert visits.max() <= 1, "no (output, tap) pair is visited twice"
    numpy.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


# --- the 1D window kernel (kernels/conv_window.cu) -----------------------------


def interpret_window(source4, packed, out_shape4, flat, fold, groups, channels, out_channels, tile, dtype):
    """conv_window's index arithmetic, block by block: the columns each row
    tile computes (window.cuh's window_block: all of them, or where the fold
    is deep only those its sub-phases write, in the column tiles the host's
    grid has), the window each (phase, row tile, column tile) loads (its
    first position, aligned down, and its length from window_layout), the B
    word each column and tap reads inside it, the packed-weight row of each
    (channel, sub-phase, tap), and the output each row and column writes.
    Also asserts that every read falls inside the window the host sized."""
    vec = 16 // numpy.dtype(dtype).itemsize
    max_taps, vectors, _, _ = _kernels.window_layout(flat, tile, dtype)
    batch, _, _, in_w = source4.shape
    out_w = out_shape4[3]
    col_tiles = _kernels.window_col_tiles(flat, fold, tile.bm, tile.bn, out_w)
    out = numpy.zeros(out_shape4)
    writes = numpy.zeros(out_shape4, dtype=numpy.int64)
    rows = out_channels * fold
    for record in numpy.asarray(flat).reshape(-1, 9):
        count, out_base, out_step, in_base, in_step, tap_first, tap_step, taps, tap_in_step = (int(v) for v in record)
        assert taps <= max_taps and in_step == 1
        span = (taps - 1) * abs(tap_in_step) if taps else 0
        for m0 in range(0, rows, tile.bm):
            m = numpy.arange(m0, min(m0 + tile.bm, rows))
            co, r = m // fold, m % fold
            first, end = _kernels.window_column_range(record, fold, tile.bm, out_w, m0 % fold)
            for q0 in range(first, first + col_tiles * tile.bn, tile.bn):
                if q0 >= end:
                    break
                lo = in_base + q0 - (span if tap_in_step < 0 else 0)
                start = (lo // vec) * vec  # floor_to
                head = lo - start
                positions = start + numpy.arange(vectors * vec)
                inside = (positions >= 0) & (positions < in_w)
                win = source4[:, :, 0, positions.clip(0, in_w - 1)] * inside  # (batch, G*C, window)
                cols = numpy.arange(tile.bn)
                q = q0 + cols
                acc = numpy.zeros((batch, groups, len(m), tile.bn))
                for t in range(taps):
                    shift = (taps - 1 - t) * -tap_in_step if tap_in_step < 0 else t * tap_in_step
                    words = head + cols + shift
                    assert words.min() >= 0 and words.max() < vectors * vec, "a B read outside the window"
                    k = tap_first + r + t * tap_step
                    assert k.max() < packed.shape[1]
                    for g in range(groups):
                        a = packed[g, k, co, :channels]  # (rows, C)
                        b = win[:, g * channels : (g + 1) * channels][:, :, words]  # (batch, C, cols)
                        acc[:, g] += numpy.einsum("mc,ncq->nmq", a, b)
                _scatter_window_tile(out, writes, acc, q, co, r, count, out_base, out_step, groups, out_channels)
    return out, writes


def _scatter_window_tile(out, writes, acc, q, co, r, count, out_base, out_step, groups, out_channels):
    """The window kernels' epilogue: tile entry (row m, column q) of acc
    (batch, groups, rows, cols) goes to output channel co[m] at o = out_base +
    q * out_step + r[m], where q < count and o is inside the row."""
    out_w = out.shape[3]
    o = out_base + q[None, :] * out_step + r[:, None]  # (rows, cols)
    valid = (q[None, :] < count) & (o >= 0) & (o < out_w)
    for g in range(groups):
        for mm, qq in zip(*numpy.nonzero(valid)):
            channel = g * out_channels + co[mm]
            out[:, channel, 0, o[mm, qq]] = acc[:, g, mm, qq]
            writes[:, channel, 0, o[mm, qq]] += 1


_WINDOW_CASES = [c for c in CASES if c.dims == 1 and c.in_channels != c.groups] + WINDOW_CASES
# narrow columns (several column tiles even on small cases), and the widest default tile
_WINDOW_TILES = [_kernels.WindowTile(32, 16, 1, 1), _kernels.WINDOW_TILES[-1]]


@pytest.mark.parametrize("tile", _WINDOW_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", _WINDOW_CASES, ids=str)
def test_window_forward_computes_conv_transpose(case, dtype, tile):
    rng = numpy.random.default_rng(12)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    flat, fold = _kernels.window_records(geometry, "forward")
    packed = numpy.ascontiguousarray(_kernels.pack_window_weight(w, geometry, "forward"))
    out, writes = interpret_window(
        x.reshape(geometry.input_shape4), packed, geometry.output_shape4, flat, fold, geometry.groups,
        geometry.in_channels_per_group, geometry.out_channels_per_group, tile, dtype,
    )  # fmt: skip
    expected = F.conv_transpose1d(torch.from_numpy(x), torch.from_numpy(w), **case.kwargs).numpy().reshape(geometry.output_shape4)
    assert (writes == 1).all(), "every output element is written exactly once"
    numpy.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tile", _WINDOW_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", [c for c in _WINDOW_CASES if c.stride == 1], ids=str)  # conv_window's grad_input: stride 1
def test_window_grad_input_computes_the_correlation(case, dtype, tile):
    rng = numpy.random.default_rng(13)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    gy = rng.standard_normal(geometry.output_shape4)
    flat, fold = _kernels.window_records(geometry, "grad_input")
    packed = numpy.ascontiguousarray(_kernels.pack_window_weight(w, geometry, "grad_input"))
    out, writes = interpret_window(
        gy, packed, geometry.input_shape4, flat, fold, geometry.groups,
        geometry.out_channels_per_group, geometry.in_channels_per_group, tile, dtype,
    )  # fmt: skip
    assert (writes == 1).all()
    numpy.testing.assert_allclose(out, _torch_grads(x, w, gy, geometry)[0], rtol=1e-12, atol=1e-12)


def test_window_folds_the_phases_it_can():
    def fold(**kwargs):
        g = _geometry.make_geometry(1, (2, 8, 64), (8, 4, kwargs.pop("k")), None, kwargs.get("s", 1), kwargs.get("p", 0), 0, 1, kwargs.get("d", 1))
        return _kernels.window_records(g, "forward")[1]

    assert fold(k=16, s=8, p=4) == 8  # the vocoder shape (X2)
    assert fold(k=4, s=2, p=1) == 2
    assert fold(k=5, s=2) == 1  # 2 does not divide 5
    assert fold(k=6, s=3) == 1  # not a power of two
    assert fold(k=3, s=2, d=3) == 1  # dilated, the dilation odd: taps on both phases
    assert fold(k=3, s=4, d=4) == 1  # dilated, stride 4: three phases of bias only, not folded
    # stride 2, even dilation: every tap on one phase; the dilated kernel folds
    # as a dense one of span d * (k - 1) + 1, rounded up to a multiple of 2
    assert fold(k=4, s=2, d=2) == 2
    g = _geometry.make_geometry(1, (2, 8, 64), (8, 4, 3), None, 2, 1, 0, 1, 4)
    assert _kernels.window_kernel_w(g, "forward") == 10 and _kernels.window_kernel_w(g, "grad_input") == 3
    w = numpy.arange(8 * 4 * 3, dtype=numpy.float64).reshape(8, 4, 3)
    packed = _kernels.pack_window_weight(w, g, "forward")  # (groups, taps, M, C)
    assert packed.shape == (1, 10, 4, 8)
    numpy.testing.assert_array_equal(packed[0, [0, 4, 8]], w.transpose(2, 1, 0))
    assert not packed[0, [1, 2, 3, 5, 6, 7, 9]].any()


def interpret_grad_weight_window(x4, gy4, geometry, tile, dtype, per_split):
    """grad_weight_window's arithmetic, block by block and slice by slice:
    the window each slice stages (the vector path where grad_output rows are
    whole 16-byte vectors, else the element path, with the swizzled byte
    offsets the kernel writes), the window bytes each tap's B fragment reads
    back, A from x, and the workspace slab each block writes.  Unwritten
    window bytes are NaN, so a read the loads did not cover poisons the
    result; reads past the host's window_rows fail an assertion."""
    itemsize = numpy.dtype(dtype).itemsize
    vec, bl, bj = 16 // itemsize, 64 // itemsize, 128 // itemsize
    window_rows, _ = _kernels.grad_weight_window_layout(geometry, tile, dtype)
    batch, _, _, in_w = x4.shape
    out_w = gy4.shape[3]
    channels, out_channels, groups = geometry.in_channels_per_group, geometry.out_channels_per_group, geometry.groups
    kernel, stride, padding, dilation = geometry.kernel[1], geometry.stride[1], geometry.padding[1], geometry.dilation[1]
    shift = stride.bit_length() - 1
    slices_per_image = -(-in_w // bl)
    slices = batch * slices_per_image
    splits = -(-slices // per_split)
    gy_flat = gy4.reshape(-1)
    workspace = numpy.full((splits, groups * channels, out_channels, kernel), numpy.nan)

    def slot(row, col):  # the window byte offset of (row, column) / itemsize
        chunk = (col >> 3) ^ ((row >> shift) & 7)
        return (row * 128 + chunk * 16 + (col & 7) * 2) // 2

    for group in range(groups):
        for split in range(splits):
            for chunk in range(-(-kernel // tile.taps)):
                k0 = chunk * tile.taps
                taps = min(tile.taps, kernel - k0)
                head = (k0 * dilation - padding) % vec
                for j0 in range(0, out_channels, bj):
                    for m0 in range(0, channels, tile.bm):
                        acc = numpy.zeros((tile.bm, bj, taps))
                        for sl in range(split * per_split, min(slices, (split + 1) * per_split)):
                            n, l0 = sl // slices_per_image, (sl % slices_per_image) * bl
                            o0 = l0 * stride + k0 * dilation - padding - head
                            assert o0 % vec == 0 or out_w % vec
                            window = numpy.full(window_rows * 128 // itemsize, numpy.nan)
                            image = (n * groups + group) * out_channels
                            if out_w % vec == 0:  # vector path: whole vectors at rows v * VEC
                                for v in range(window_rows // vec):
                                    o = o0 + v * vec
                                    for jl in range(bj):
                                        j = j0 + jl
                                        inside = 0 <= o < out_w and j < out_channels
                                        for e in range(vec):
                                            window[slot(v * vec + e, jl)] = gy_flat[(image + j) * out_w + o + e] if inside else 0.0
                            else:  # element path: aligned vectors of each row, scattered
                                for jl in range(bj):
                                    j = j0 + jl
                                    row_base = (image + j) * out_w
                                    origin = row_base + o0
                                    first = (origin // vec) * vec
                                    for v in range(window_rows // vec + 1):
                                        at = first + v * vec
                                        row0 = at - origin
                                        if row0 >= window_rows:
                                            continue
                                        for e in range(vec):
                                            row, o = row0 + e, at + e - row_base
                                            if 0 <= row < window_rows:
                                                window[slot(row, jl)] = gy_flat[at + e] if j < out_channels and 0 <= o < out_w else 0.0
                            ci = m0 + numpy.arange(tile.bm)
                            ll = l0 + numpy.arange(bl)
                            a = numpy.zeros((tile.bm, bl))
                            ok_c, ok_l = ci < channels, ll < in_w
                            a[numpy.ix_(ok_c, ok_l)] = x4[n, group * channels + ci[ok_c]][:, 0, ll[ok_l]]
                            for t in range(taps):
                                rows = numpy.arange(bl) * stride + t * dilation + head  # B rows of positions l0 + kk
                                assert rows.max() < window_rows, "a B read outside the window"
                                b = window[[[slot(int(r), jl) for jl in range(bj)] for r in rows]]  # (bl, bj)
                                acc[:, :, t] += a @ b
                        for mi in range(tile.bm):
                            for jl in range(bj):
                                if m0 + mi < channels and j0 + jl < out_channels:
                                    workspace[split, group * channels + m0 + mi, j0 + jl, k0 : k0 + taps] = acc[mi, jl]
    assert not numpy.isnan(workspace).any(), "every workspace entry is written"
    return workspace.sum(axis=0)


@pytest.mark.parametrize("tile", _kernels.GRAD_WEIGHT_WINDOW_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("per_split", [2, 5])
@pytest.mark.parametrize("case", GRAD_WEIGHT_WINDOW_CASES, ids=str)
def test_grad_weight_window_computes_grad_weight(case, per_split, tile):
    rng = numpy.random.default_rng(14)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    gy = rng.standard_normal(geometry.output_shape4)
    x4 = x.reshape(geometry.input_shape4)
    got = interpret_grad_weight_window(x4, gy, geometry, tile, "float16", per_split)
    numpy.testing.assert_allclose(got, _torch_grads(x, w, gy, geometry)[1].reshape(got.shape), rtol=1e-12, atol=1e-12)


def test_grad_weight_window_applies_where_documented():
    def layout(size=64, k=3, s=1, d=1, ci=32, co=32, g=1, dtype="float16"):
        geometry = _geometry.make_geometry(1, (2, ci, size), (ci, co // g, k), None, s, 0, 0, g, d)
        return _kernels.grad_weight_window_layout(geometry, _kernels.GRAD_WEIGHT_WINDOW_TILES[0], dtype)

    assert layout() is not None
    # the vocoder's stride: 31 * 8 + 7 + 1 rows, up to 7 of alignment, whole vectors; two stages
    assert layout(s=8, k=16) == (264, 2 * (32 * 80 + 264 * 128))
    assert layout(s=3) is None  # not a power of two
    assert layout(size=60) is None  # rows of 120 bytes
    assert layout(dtype="bfloat16") is not None and layout(dtype="float32") is None  # 16-bit types only
    assert layout(ci=8) is None and layout(co=8) is None  # too few channels for the tiles
    assert layout(ci=64, co=64, g=4) is not None and layout(ci=64, co=32, g=4) is None


def interpret_grad_weight_phase(x4, gy4, geometry, per_split):
    """grad_weight_phase's arithmetic, block by block and item by item: the
    x rows and the window of phase positions G[m] = gy[m * s - p] each item
    stages (the copies the kernel's loads make, zeros where they are not
    valid), the window columns each tap's B fragments read back, and the
    workspace slab each block writes.  Window slots the loads do not write
    are NaN, so a read they did not cover poisons the result; reads past
    the host's window fail an assertion."""
    taps, step, window, row, _ = _kernels.grad_weight_phase_layout(geometry)
    positions, bm, bn = _kernels.GRAD_WEIGHT_PHASE_POSITIONS, _kernels.GRAD_WEIGHT_PHASE_CHANNELS, _kernels.GRAD_WEIGHT_PHASE_COLUMNS
    assert row >= window and row % 8 == 4
    batch, _, _, in_w = x4.shape
    out_w = gy4.shape[3]
    channels, out_channels, groups = geometry.in_channels_per_group, geometry.out_channels_per_group, geometry.groups
    kernel, stride, padding = geometry.kernel[1], geometry.stride[1], geometry.padding[1]
    per_image = -(-in_w // positions)
    items = batch * per_image
    splits = -(-items // per_split)
    workspace = numpy.full((splits, groups * channels, out_channels, kernel), numpy.nan)
    for split in range(splits):
        for group in range(groups):
            for chunk in range(-(-kernel // taps)):
                k0 = chunk * taps
                for j0 in range(0, out_channels, bn):
                    for ci0 in range(0, channels, bm):
                        acc = numpy.zeros((bm, bn, taps))
                        for item in range(split * per_split, min(items, (split + 1) * per_split)):
                            n, l0 = item // per_image, (item % per_image) * positions
                            xs = numpy.zeros((bm, positions))
                            ci, ll = ci0 + numpy.arange(bm), l0 + numpy.arange(positions)
                            ok_c, ok_l = ci < channels, ll < in_w
                            xs[numpy.ix_(ok_c, ok_l)] = x4[n, group * channels + ci[ok_c]][:, 0, ll[ok_l]]
                            gs = numpy.full((bn, row), numpy.nan)
                            o = (l0 + k0 * step + numpy.arange(window)) * stride - padding
                            ok_o = (o >= 0) & (o < out_w)
                            for r in range(bn):
                                j = j0 + r
                                gs[r, :window] = 0.0
                                if j < out_channels:
                                    gs[r, :window][ok_o] = gy4[n, group * out_channels + j, 0, o[ok_o]]
                            for t in range(taps):
                                cols = numpy.arange(positions) + t * step
                                assert cols.max() < window, "a B read outside the window"
                                acc[:, :, t] += xs @ gs[:, cols].T
                        for t in range(taps):
                            if k0 + t >= kernel:
                                continue
                            for mi in range(bm):
                                if ci0 + mi < channels:
                                    cols = slice(j0, min(out_channels, j0 + bn))
                                    workspace[split, group * channels + ci0 + mi, cols, k0 + t] = acc[mi, : cols.stop - j0, t]
    assert not numpy.isnan(workspace).any(), "every workspace entry is written"
    return workspace.sum(axis=0)


@pytest.mark.parametrize("per_split", [1, 4])
@pytest.mark.parametrize("case", GRAD_WEIGHT_PHASE_CASES, ids=str)
def test_grad_weight_phase_computes_grad_weight(case, per_split):
    rng = numpy.random.default_rng(15)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    gy = rng.standard_normal(geometry.output_shape4)
    got = interpret_grad_weight_phase(x.reshape(geometry.input_shape4), gy, geometry, per_split)
    numpy.testing.assert_allclose(got, _torch_grads(x, w, gy, geometry)[1].reshape(got.shape), rtol=1e-12, atol=1e-12)


def test_grad_weight_phase_applies_where_documented():
    def layout(k=3, s=1, d=1, size=64):
        geometry = _geometry.make_geometry(1, (2, 32, size), (32, 64, k), None, s, 0, 0, 1, d)
        return _kernels.grad_weight_phase_layout(geometry)

    stage = lambda row: 4 * (32 * 68 + 64 * row)  # noqa: E731
    # P1 (5 taps, dilation 3): a window of 64 + 4 * 3 positions, rows of 76 floats, three stages
    assert layout(k=5, d=3) == (5, 3, 76, 76, 3 * stage(76))
    # P4 (stride 2, dilation 2): one phase position between taps; rows rounded up to 4 mod 8
    assert layout(k=3, s=2, d=2) == (3, 1, 66, 68, 3 * stage(68))
    assert layout(k=3, s=2, d=3) is None and layout(k=2, s=4, d=2) is None  # taps on two phases
    assert layout(k=1, s=4) == (1, 0, 64, 68, 3 * stage(68))  # one tap: one phase at any stride
    assert layout(k=12, d=2)[:2] == (8, 2)  # chunks of 8 taps
    geometry = _geometry.make_geometry(2, (2, 32, 8, 8), (32, 64, 3, 3), None, 1, 0, 0, 1, 1)
    assert _kernels.grad_weight_phase_layout(geometry) is None  # 1D only


def interpret_grad_input_phase(gy4, w, geometry):
    """grad_input_phase's arithmetic, block by block and stage by stage: the
    weight slice and the window of phase positions G[m] = gy[m * s - p]
    each stage copies (zeros where the copies are not valid; unwritten
    window slots NaN), the window columns each tap's B fragments read (reads
    past the host's window fail an assertion), and the outputs each block
    writes (counted: every one exactly once)."""
    step, window, row, _ = _kernels.grad_input_phase_layout(geometry)
    positions, bm, jc = _kernels.GRAD_INPUT_PHASE_POSITIONS, _kernels.GRAD_INPUT_PHASE_CHANNELS, _kernels.GRAD_INPUT_PHASE_STAGE_CHANNELS
    assert row >= window and row % 32 in (8, 24)
    batch, _, _, out_w = gy4.shape
    in_w = geometry.input_shape4[3]
    channels, out_channels, groups = geometry.in_channels_per_group, geometry.out_channels_per_group, geometry.groups
    kernel, stride, padding = geometry.kernel[1], geometry.stride[1], geometry.padding[1]
    w3 = w.reshape(groups * channels, out_channels, kernel)
    out = numpy.zeros(geometry.input_shape4)
    writes = numpy.zeros(geometry.input_shape4, dtype=numpy.int64)
    for n in range(batch):
        for group in range(groups):
            for ci0 in range(0, channels, bm):
                for l0 in range(0, in_w, positions):
                    acc = numpy.zeros((bm, positions))
                    for j0 in range(0, out_channels, jc):
                        ws = numpy.zeros((kernel, bm, jc))
                        ci, jj = ci0 + numpy.arange(bm), j0 + numpy.arange(jc)
                        ok_c, ok_j = ci < channels, jj < out_channels
                        ws[:, ok_c[:, None] & ok_j[None, :]] = w3[group * channels + ci[ok_c]][:, jj[ok_j]].transpose(2, 0, 1).reshape(kernel, -1)
                        gs = numpy.full((jc, row), numpy.nan)
                        o = (l0 + numpy.arange(window)) * stride - padding
                        ok_o = (o >= 0) & (o < out_w)
                        for r in range(jc):
                            gs[r, :window] = 0.0
                            if j0 + r < out_channels:
                                gs[r, :window][ok_o] = gy4[n, group * out_channels + j0 + r, 0, o[ok_o]]
                        for k in range(kernel):
                            cols = numpy.arange(positions) + k * step
                            assert cols.max() < window, "a B read outside the window"
                            acc += ws[k] @ gs[:, cols]
                    ci = ci0 + numpy.arange(bm)
                    ll = l0 + numpy.arange(positions)
                    ok_c, ok_l = ci < channels, ll < in_w
                    rows = group * channels + ci[ok_c]
                    out[n, rows, 0, ll[ok_l][0] : ll[ok_l][-1] + 1] = acc[numpy.ix_(ok_c, ok_l)]
                    writes[n, rows, 0, ll[ok_l][0] : ll[ok_l][-1] + 1] += 1
    assert (writes == 1).all(), "every output written once"
    return out


@pytest.mark.parametrize("case", GRAD_WEIGHT_PHASE_CASES, ids=str)
def test_grad_input_phase_computes_grad_input(case):
    rng = numpy.random.default_rng(16)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    gy = rng.standard_normal(geometry.output_shape4)
    got = interpret_grad_input_phase(gy, w, geometry)
    numpy.testing.assert_allclose(got, _torch_grads(x, w, gy, geometry)[0], rtol=1e-12, atol=1e-12)


def test_grad_phase_fused_applies_where_documented():
    def layout(ci=32, co=64, k=3, s=2, d=2, groups=1):
        geometry = _geometry.make_geometry(1, (2, ci, 1000), (ci, co // groups, k), None, s, 0, 0, groups, d)
        return _kernels.grad_phase_fused_layout(geometry)

    def stages(row):
        return 3 * 4 * (32 * 68 + 64 * row)

    def weight(taps):
        return 4 * taps * 2 * 32 * 68 + 8 * 1024
    assert layout() == (3, 1, 66, 68, stages(68) + weight(3))  # P4: grad_weight_phase's stages and the resident weight
    assert layout(k=1, s=4, d=1) == (1, 0, 64, 68, stages(68) + weight(1))
    assert layout(k=5, s=1, d=3) is None  # 5 taps (P1)
    assert layout(ci=40) is None and layout(co=72) is None  # two tiles either way
    assert layout(ci=64, co=128, groups=2) == layout()  # one tile a group
    assert layout(d=3) is None  # taps on two phases


def test_grad_input_phase_applies_where_documented():
    def layout(k=3, s=1, d=1):
        geometry = _geometry.make_geometry(1, (2, 32, 1000), (32, 64, k), None, s, 0, 0, 1, d)
        return _kernels.grad_input_phase_layout(geometry)

    stage = lambda k, row: 4 * (k * 32 * 12 + 8 * row)  # noqa: E731
    assert layout(k=3, s=2, d=2) == (1, 514, 520, 4 * stage(3, 520))  # P4: rows of 8 mod 32 floats
    assert layout(k=5, d=3) == (3, 524, 536, 4 * stage(5, 536))  # P1: 24 mod 32
    assert layout(k=3, s=2, d=3) is None and layout(k=1, s=4) == (0, 512, 520, 4 * stage(1, 520))


def interpret_grad_input_taps(gy4, w, geometry, tile, dtype, vector, per_split):
    """grad_input_taps's arithmetic, block by block and stage by stage: each
    thread's vector slot walks k = j*K + t the way the kernel advances it
    (a running (j, t), one 128-byte stage at a time), loads the A and B
    vectors the kernel's cp.async copies would (zeros where it zero-fills),
    from the column table the kernel builds, into stages poisoned with NaN;
    the products of each stage go to the split's workspace slab, which
    sum_splits adds in order.  Every grad_input entry must be written by
    exactly one block per split."""
    itemsize = _kernels.ITEMSIZE[dtype]
    kc, ve = 128 // itemsize, vector // itemsize
    per_row = 128 // vector
    batch, _, _, in_w = geometry.input_shape4
    out_w = geometry.output_shape4[3]
    rows, out_channels, groups = geometry.in_channels_per_group, geometry.out_channels_per_group, geometry.groups
    kernel, stride, padding = geometry.kernel[1], geometry.stride[1], geometry.padding[1]
    reduction = out_channels * kernel
    chunks = -(-reduction // kc)
    splits = -(-chunks // per_split)
    columns = batch * in_w
    gy_flat, w_flat = gy4.reshape(-1), w.reshape(-1)
    workspace = numpy.full((splits,) + geometry.input_shape4, numpy.nan)
    writes = numpy.zeros((splits,) + geometry.input_shape4, dtype=numpy.int64)
    for split in range(splits):
        begin = split * per_split
        count = min(per_split, chunks - begin)
        for group in range(groups):
            for c0 in range(0, columns, tile.bn):
                col = c0 + numpy.arange(tile.bn)
                n, l = col // in_w, col % in_w
                col_base = (n * groups + group) * out_channels * out_w + l * stride - padding
                col_pos = numpy.where(col < columns, l * stride - padding, -(1 << 30))
                for m0 in range(0, rows, tile.bm):
                    acc = numpy.zeros((tile.bm, tile.bn))
                    a_rows = rows - m0  # rows r < a_rows are valid
                    a_src = (group * rows + min(m0, rows - 1)) * reduction
                    state = []
                    for vec in range(per_row):
                        k = begin * kc + vec * ve
                        state.append([k, k // kernel, k % kernel])
                    step_j, step_t = kc // kernel, kc % kernel
                    for _ in range(count):
                        a = numpy.full((tile.bm, kc), numpy.nan)
                        b = numpy.full((tile.bn, kc), numpy.nan)
                        for vec in range(per_row):
                            k, j, t = state[vec]
                            lanes = slice(vec * ve, (vec + 1) * ve)
                            for r in range(tile.bm):
                                ok = k < reduction and r < a_rows
                                a[r, lanes] = w_flat[a_src + r * reduction + k : a_src + r * reduction + k + ve] if ok else 0.0
                            for r in range(tile.bn):
                                pos = col_pos[r] + t
                                ok = j < out_channels and 0 <= pos < out_w
                                at = col_base[r] + j * out_w + t
                                if ok:
                                    assert pos + ve <= out_w and at % ve == 0, "a vector leaves its row or is misaligned"
                                b[r, lanes] = gy_flat[at : at + ve] if ok else 0.0
                            state[vec] = [k + kc, j + step_j, t + step_t]
                            if state[vec][2] >= kernel:
                                state[vec][1] += 1
                                state[vec][2] -= kernel
                        acc += a @ b.T
                    m = m0 + numpy.arange(tile.bm)
                    ok_m, ok_c = m < rows, col < columns
                    mm, cc = numpy.meshgrid(m[ok_m], col[ok_c], indexing="ij")
                    nn, ll = cc // in_w, cc % in_w
                    workspace[split, nn, group * rows + mm, 0, ll] = acc[numpy.ix_(ok_m, ok_c)]
                    writes[split, nn, group * rows + mm, 0, ll] += 1
    assert (writes == 1).all(), "every grad_input entry is written once per split"
    return workspace.sum(axis=0)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("per_split", [3, 1000])
@pytest.mark.parametrize("case", GRAD_INPUT_TAPS_CASES, ids=str)
def test_grad_input_taps_computes_grad_input(case, per_split, dtype):
    rng = numpy.random.default_rng(15)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    vector = _kernels.grad_input_taps_vector(geometry, dtype)
    assert vector is not None, "the case is meant for grad_input_taps"
    gy = rng.standard_normal(geometry.output_shape4)
    tile = _kernels.pick_tile(_kernels.GRAD_INPUT_TAPS_TILES, geometry.in_channels_per_group)
    got = interpret_grad_input_taps(gy, w, geometry, tile, dtype, vector, per_split)
    numpy.testing.assert_allclose(got, _torch_grads(x, w, gy, geometry)[0], rtol=1e-12, atol=1e-12)


def test_grad_input_taps_applies_where_documented():
    def vector(size=64, k=16, s=8, p=4, op=0, d=1, ci=32, co=32, g=1, dtype="float16"):
        geometry = _geometry.make_geometry(1, (2, ci, size), (ci, co // g, k), None, s, p, op, g, d)
        return _kernels.grad_input_taps_vector(geometry, dtype)

    assert vector() == 8  # the vocoder: padding 4 is half a 16-byte vector of float16
    assert vector(dtype="float32") == 16 and vector(dtype="bfloat16") == 8
    assert vector(k=1024, s=256, p=384) == 16  # X3
    assert vector(p=2) is None and vector(p=2, dtype="float32") == 8
    assert vector(op=2) is None  # grad_output rows of 4-byte multiples only
    assert vector(s=1, p=0) is None  # stride 1 is conv_window's
    assert vector(d=2) is None  # taps not contiguous
    assert vector(k=4, s=4, p=0) is None  # too few taps
    assert vector(ci=8) is None and vector(ci=32, g=4) is None and vector(ci=64, g=4) == 8  # input channels per group
    assert vector(dtype="float64") is None


def interpret_grad_weight_taps(x4, gy4, geometry, tile, dtype, vector, per_split):
    """grad_weight_taps's arithmetic, block by block and stage by stage: the
    stage's first position (n, l) advanced as the kernel does, each thread's
    A vector (its rows of x) and B vectors (its column vector q = j*K + t at
    each of its positions), zeros where the kernel zero-fills, into stages
    poisoned with NaN; the products go to the split's workspace slab."""
    itemsize = _kernels.ITEMSIZE[dtype]
    bk, bn, ve = _kernels.grad_weight_taps_stage(dtype), tile.bn, vector // itemsize
    a_per_row, b_per_row = bk * itemsize // vector, bn * itemsize // vector
    batch, _, _, in_w = geometry.input_shape4
    out_w = geometry.output_shape4[3]
    rows, out_channels, groups = geometry.in_channels_per_group, geometry.out_channels_per_group, geometry.groups
    kernel, stride, padding = geometry.kernel[1], geometry.stride[1], geometry.padding[1]
    columns = out_channels * kernel
    chunks = -(-(batch * in_w) // bk)
    splits = -(-chunks // per_split)
    x_flat, gy_flat = x4.reshape(-1), gy4.reshape(-1)
    shape = (splits, groups * rows, columns)
    workspace = numpy.full(shape, numpy.nan)
    writes = numpy.zeros(shape, dtype=numpy.int64)

    def position(c_n, c_l, offset):  # at most one image ahead
        l = c_l + offset
        return (c_n + 1, l - in_w) if l >= in_w else (c_n, l)

    for split in range(splits):
        begin = split * per_split
        count = min(per_split, chunks - begin)
        for group in range(groups):
            for q0 in range(0, columns, bn):
                for m0 in range(0, rows, tile.bm):
                    acc = numpy.zeros((tile.bm, bn))
                    c_n, c_l = divmod(begin * bk, in_w)
                    for _ in range(count):
                        a = numpy.full((tile.bm, bk), numpy.nan)
                        b = numpy.full((bk, bn), numpy.nan)
                        for a_vec in range(a_per_row):
                            n, l = position(c_n, c_l, a_vec * ve)
                            assert l + ve <= in_w
                            for r in range(tile.bm):
                                ci = m0 + r
                                ok = n < batch and ci < rows
                                at = ((n * groups + group) * rows + ci) * in_w + l
                                a[r, a_vec * ve : (a_vec + 1) * ve] = x_flat[at : at + ve] if ok else 0.0
                        for b_vec in range(b_per_row):
                            q = q0 + b_vec * ve
                            j, t = divmod(q, kernel)
                            for r in range(bk):
                                n, l = position(c_n, c_l, r)
                                pos = l * stride - padding + t
                                ok = q < columns and n < batch and 0 <= pos < out_w
                                at = ((n * groups + group) * out_channels + j) * out_w + pos
                                if ok:
                                    assert pos + ve <= out_w and at % ve == 0, "a vector leaves its row or is misaligned"
                                b[r, b_vec * ve : (b_vec + 1) * ve] = gy_flat[at : at + ve] if ok else 0.0
                        acc += a @ b
                        c_l += bk
                        if c_l >= in_w:
                            c_n, c_l = c_n + 1, c_l - in_w
                    m = m0 + numpy.arange(tile.bm)
                    q = q0 + numpy.arange(bn)
                    ok_m, ok_q = m < rows, q < columns
                    workspace[split, group * rows + m[ok_m][:, None], q[ok_q][None, :]] = acc[numpy.ix_(ok_m, ok_q)]
                    writes[split, group * rows + m[ok_m][:, None], q[ok_q][None, :]] += 1
    assert (writes == 1).all(), "every grad_weight entry is written once per split"
    return workspace.sum(axis=0)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("tile", _kernels.GRAD_WEIGHT_TAPS_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("per_split", [2, 1000])
@pytest.mark.parametrize("case", GRAD_WEIGHT_TAPS_CASES, ids=str)
def test_grad_weight_taps_computes_grad_weight(case, per_split, tile, dtype):
    rng = numpy.random.default_rng(16)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    vector = _kernels.grad_weight_taps_vector(geometry, dtype)
    assert vector is not None, "the case is meant for grad_weight_taps"
    gy = rng.standard_normal(geometry.output_shape4)
    x4 = x.reshape(geometry.input_shape4)
    got = interpret_grad_weight_taps(x4, gy, geometry, tile, dtype, vector, per_split)
    numpy.testing.assert_allclose(got, _torch_grads(x, w, gy, geometry)[1].reshape(got.shape), rtol=1e-12, atol=1e-12)


def test_grad_weight_taps_applies_where_documented():
    def vector(size=64, k=16, s=8, p=4, dtype="float16"):
        geometry = _geometry.make_geometry(1, (2, 32, size), (32, 32, k), None, s, p, 0, 1, 1)
        return _kernels.grad_weight_taps_vector(geometry, dtype)

    assert vector() == 8 and vector(dtype="bfloat16") == 8
    assert vector(size=512, k=1024, s=256, p=384) == 16  # X3
    assert vector(size=63) is None and vector(size=32, dtype="float32") == 16  # a stage is 128 bytes
    assert vector(size=68) == 8 and vector(size=66) is None  # x rows of whole vectors
    assert vector(dtype="float32") == 16 and vector(dtype="float64") is None


UNPADDED_CASES = [c for c in CASES if not numpy.any(c.padding) and not numpy.any(c.output_padding) and c.batch != 0]


@pytest.mark.parametrize("case", UNPADDED_CASES, ids=str)
def test_products_per_output_counts_the_products(case):
    """rules._products_per_output, which sends float32 "highest" to 3xTF32 or
    to FFMA, is the mean number of products each output of a pass sums: what
    the pass gives on all-ones arrays, where no product falls in padding."""
    from cupyconv.kernels import rules

    g = _geometry_of(case)
    x, w, gy = numpy.ones(g.input_shape4), numpy.ones(g.weight_shape4), numpy.ones(g.output_shape4)
    k = g
    y = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=k.stride, padding=k.padding, output_padding=k.output_padding, groups=k.groups, dilation=k.dilation)
    grad_input, grad_weight = _torch_grads(x, w, gy, g)
    for pass_name, counts in (("forward", y.numpy()), ("grad_input", grad_input), ("grad_weight", grad_weight)):
        assert rules._products_per_output(g, pass_name) == pytest.approx(counts.mean()), pass_name


def test_float32_highest_takes_3xtf32_on_long_sums_only():
    """On sm_80 and later, float32 "highest" multiplies on tensor cores (3xTF32)
    where a pass sums settings.tf32x3_min_products products or more, on CUDA
    cores below that, and always on CUDA cores with float32_highest "simt"."""
    from cupyconv import settings
    from cupyconv.kernels import rules

    long = _geometry.make_geometry(1, (2, 64, 100), (64, 32, 5), None, 1, 0, 0, 1, 1)  # about 308 / 160 / 200 products per output
    short = _geometry.make_geometry(1, (2, 8, 30), (8, 4, 3), None, 1, 0, 0, 1, 1)  # about 22 / 12 / 60
    with settings.override(compute_capability=90):
        for pass_name in ("forward", "grad_input", "grad_weight"):
            assert rules._passes("float32", "highest", long, pass_name) == 3, pass_name
            assert rules._passes("float32", "highest", short, pass_name) == 0, pass_name
            assert rules._passes("float32", "tf32", short, pass_name) == 1, pass_name
            assert rules._passes("float16", "highest", short, pass_name) == 1, pass_name
            assert rules._passes("float64", "highest", long, pass_name) == 0, pass_name
    with settings.override(compute_capability=90, float32_highest="simt"):
        assert rules._passes("float32", "highest", long, "forward") == 0
    with settings.override(compute_capability=75):
        assert rules._passes("float16", "highest", long, "forward") == 0


@pytest.mark.parametrize("rows, row_chunks", [(1, 1), (3, 11), (4096, 256), (48, 11), (100000, 3)])
def test_depthwise_runs_of_chunks_cover_each_chunk_once(rows, row_chunks):
    """depthwise_forward's warps (work -> row, chunks [first, end)) cover every
    chunk of every row once, with the runs depthwise_warp_chunks picks; runs
    shrink only while the grid is short of warps."""
    multiprocessors = 132
    warp_chunks = _kernels.depthwise_warp_chunks(rows, row_chunks, multiprocessors)
    assert 1 <= warp_chunks <= min(_kernels.DEPTHWISE_WARP_CHUNKS, row_chunks)
    row_warps = -(-row_chunks // warp_chunks)
    if warp_chunks < min(_kernels.DEPTHWISE_WARP_CHUNKS, row_chunks):
        assert rows * -(-row_chunks // (2 * warp_chunks)) < _kernels.DEPTHWISE_MIN_WARPS_PER_SM * multiprocessors
    seen = numpy.zeros((min(rows, 64), row_chunks), dtype=int)
    for work in range(min(rows, 64) * row_warps):
        row, first = divmod(work, row_warps)
        first *= warp_chunks
        seen[row, first : min(first + warp_chunks, row_chunks)] += 1
    assert (seen == 1).all()


def _divide(a, d):
    """conv_direct.cu's divide(a, d, magic_for(d)): the high word of a times
    2^32 / d rounded up."""
    assert 0 <= a and a * d < 2**32
    return a if d == 1 else (a * ((2**32 - 1) // d + 1)) >> 32


def test_direct_multiply_high_division_is_exact_where_the_kernel_uses_it():
    """e / span and q / C for every e, span, C up to 2048 (what the host
    allows: th_max * C * span <= 2048), with 2048 exactly on the edge."""
    a = numpy.arange(2049, dtype=numpy.uint64)
    for d in range(1, 2049):
        magic = numpy.uint64((2**32 - 1) // d + 1)
        q = a if d == 1 else (a * magic) >> numpy.uint64(32)
        assert (q == a // numpy.uint64(d)).all(), d


def interpret_direct(x4, w, bias, geometry, tile, dtype, per_block):
    """conv_direct (kernels/conv_direct.cu) block by block in NumPy: each
    block's row class, its H taps, their first input rows and staged weight
    (from the packed copy), the slots with W taps, its run of tiles, each
    tile's input rows through the per-thread codes (zero outside the input),
    the sums' units dealt to the 8 warps, and the in-order write of the tile
    from a stage zeroed once per block.  Asserts that every read stays inside
    what was staged, that each tile writes every column of the slots with
    taps exactly once, and that the other columns stay zero."""
    cp, span, th_max, _ = _kernels.direct_layout(geometry, tile, dtype)
    batch, _, in_h, in_w = x4.shape
    _, _, out_h, out_w = geometry.output_shape4
    C, M, G = geometry.in_channels_per_group, geometry.out_channels_per_group, geometry.groups
    (KH, KW), (sh, sw), (ph, pw), (dh, dw) = geometry.kernel, geometry.stride, geometry.padding, geometry.dilation
    bw, bm, tn = sw * cp, tile.bm, tile.tn
    threads, warps = _kernels.DIRECT_THREADS, _kernels.DIRECT_WARPS
    assert cp % (4 * tn) == 0, "a unit of a warp's 4 column threads stays in one slot"
    assert th_max * C * span <= threads * _kernels.DIRECT_FETCH and C <= 2048 and span <= 2048, "the fetch codes' fields"
    assert sw <= _kernels.DIRECT_MAX_STRIDE_W
    w_tiles, m_tiles = -(-out_w // bw), -(-M // bm)
    view = _kernels.pack_direct_weight(w, geometry)
    packed = numpy.zeros(view.shape[:4] + (m_tiles * bm,))
    packed[..., :M] = view
    chunks = -(-(-(-out_h // sh) * w_tiles) // per_block)
    slots = [s for s in range(sw) if any((s + pw - kw * dw) % sw == 0 for kw in range(KW))]
    assert len(slots) == _kernels.direct_w_slots(geometry)
    quads = cp // (4 * tn)
    gcd = math.gcd(sw, dw)
    tap_step, tap_shift = sw // gcd, dw // gcd
    first_tap = {}  # slot: (kw0, q0), as the kernel's header lists them
    for s in slots:
        kw0 = min(kw for kw in range(KW) if (s + pw - kw * dw) % sw == 0)
        first_tap[s] = (kw0, (s + pw - kw0 * dw) // sw)
    iw_base = (pw - (KW - 1) * dw) // sw
    column_tapped = numpy.isin(numpy.arange(bw) % sw, slots)
    out = numpy.full(geometry.output_shape4, numpy.nan)
    writes = numpy.zeros(geometry.output_shape4, dtype=numpy.int64)
    for block in range(chunks * sh * m_tiles * batch * G):
        block, chunk = divmod(block, chunks)
        block, row_class = divmod(block, sh)
        block, m_tile = divmod(block, m_tiles)
        g, n = divmod(block, batch)
        class_rows = (out_h - 1 - row_class) // sh + 1 if row_class < out_h else 0
        first, end = chunk * per_block, min((chunk + 1) * per_block, class_rows * w_tiles)
        m0 = m_tile * bm
        live = min(bm, M - m0)
        kh_list = [kh for kh in range(KH) if (row_class + ph - kh * dh) % sh == 0][:th_max]
        ih0 = [(row_class + ph - kh * dh) // sh for kh in kh_list]
        ws = packed[g][kh_list][:, :, :, m0 : m0 + bm]  # (t, kw, c, m)
        codes = []  # (t, c, u) of each element a thread fetches, by the kernel's multiply-high divisions
        for e in range(len(kh_list) * C * span):
            q = _divide(e, span)
            t = _divide(q, C)
            assert (q, t) == (e // span, q // C)
            codes.append((t, q - t * C, e - q * span))
        units = len(slots) * quads if kh_list else 0
        stage = numpy.zeros((bm, bw))
        for f in range(first, end):
            row = f // w_tiles
            oh, ow0 = row_class + sh * row, (f % w_tiles) * bw
            assert ow0 % sw == 0, "slot s holds the outputs ow = s (mod stride_w)"
            iw_lo = (ow0 + pw - (KW - 1) * dw) // sw
            assert iw_lo == (f % w_tiles) * cp + iw_base
            xs = numpy.zeros((len(kh_list), C, span))
            for t, c, u in codes:
                ih, iw = ih0[t] + row, iw_lo + u
                assert ih * sh == oh + ph - kh_list[t] * dh, "the class's rows are stride_h apart"
                if 0 <= ih < in_h and 0 <= iw < in_w:
                    xs[t, c, u] = x4[n, g * C + c, ih, iw]
            fresh = numpy.zeros(bw, dtype=bool)
            for warp in range(warps):
                for unit in range(warp, units, warps):
                    slot = slots[unit // quads]
                    for col_t in range(4):
                        j0 = (unit % quads) * 4 * tn + col_t * tn
                        ow_first = ow0 + slot + sw * j0
                        acc = numpy.zeros((bm, tn))
                        kw0, q0 = first_tap[slot]
                        taps = [(kw, j0 + q0 - iw_base - k * tap_shift) for k, kw in enumerate(range(kw0, KW, tap_step))]
                        expected = [(kw, (ow_first + pw - kw * dw) // sw - iw_lo) for kw in range(KW) if (ow_first + pw - kw * dw) % sw == 0]
                        assert taps == expected, "a slot's W taps and input columns, stepped"
                        for t in range(len(kh_list)):
                            for kw, u0 in taps:
                                assert 0 <= u0 and u0 + tn <= span, "reads stay inside the staged input"
                                acc += ws[t, kw].T @ xs[t, :, u0 : u0 + tn]
                        columns = slot + sw * (j0 + numpy.arange(tn))
                        assert (columns < bw).all() and not fresh[columns].any()
                        stage[:, columns] = acc
                        fresh[columns] = True
            assert (fresh == (column_tapped if units else False)).all(), "each tile writes the tapped slots' columns once"
            assert (stage[:, ~column_tapped] == 0).all(), "the other slots stay zero"
            cols = min(bw, out_w - ow0)
            channels = slice(g * M + m0, g * M + m0 + live)
            out[n, channels, oh, ow0 : ow0 + cols] = stage[:live, :cols] + (bias[channels, None] if bias is not None else 0)
            writes[n, channels, oh, ow0 : ow0 + cols] += 1
    return out, writes


_DIRECT_CASES = CASES + [c for c in WINDOW_CASES if c.name in ("1d_win_s2_d2", "1d_win_fold32")]


@pytest.mark.parametrize("per_block", [1, 3])
@pytest.mark.parametrize("tile", _kernels.DIRECT_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", _DIRECT_CASES, ids=str)
def test_direct_forward_computes_conv_transpose(case, tile, per_block):
    rng = numpy.random.default_rng(14)
    x, w, b = case.arrays(rng)
    geometry = _geometry_of(case)
    if _kernels.direct_layout(geometry, tile, "float32") is None:
        pytest.skip("conv_direct does not take this case (too many H taps, or input rows longer than a tile fetches)")
    out, writes = interpret_direct(x.reshape(geometry.input_shape4), w, b, geometry, tile, "float32", per_block)
    fn = F.conv_transpose1d if case.dims == 1 else F.conv_transpose2d
    bt = None if b is None else torch.from_numpy(b)
    expected = fn(torch.from_numpy(x), torch.from_numpy(w), bt, **case.kwargs).numpy().reshape(geometry.output_shape4)
    assert (writes == 1).all(), "every output element is written exactly once"
    numpy.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_direct_layout_keeps_warps_in_one_phase_and_the_tile_in_budget():
    """CP is a multiple of a warp's 4 * TN columns for every stride, the
    output tile stays within DIRECT_STAGE_BYTES (CP = 4 * TN at least), and
    the benchmark problems P4 and P5 get the tiles the notes describe."""
    for stride in range(1, 12):
        for tile in _kernels.DIRECT_TILES:
            g = _geometry.make_geometry(1, (2, 8, 300), (8, 16, 3), None, stride, 1, 0, 1, 2)
            cp, span, th_max, shared = _kernels.direct_layout(g, tile, "float32")
            assert cp % (4 * tile.tn) == 0 and th_max == 1
            assert cp == 4 * tile.tn or tile.bm * (stride * cp + 1) * 4 <= _kernels.DIRECT_STAGE_BYTES
            assert span >= (stride * cp) // stride
    p5 = _geometry.make_geometry(2, (16, 32, 64, 128), (32, 64, 3, 3), None, 5, 1, 0, 1, 2)
    cp, span, th_max, shared = _kernels.direct_layout(p5, _kernels.DirectTile(64, 4), "float32")
    assert (cp, span, th_max) == (32, 34, 1)  # 3 slots with taps: 6 units for 8 warps, 638 of 640 columns
    assert shared == _kernels.DIRECT_HEADER_BYTES + 4 * (th_max * 3 * 32 * 64 + th_max * 32 * span + 64 * (5 * cp + 1))
    p4 = _geometry.make_geometry(1, (16, 32, 131072), (32, 64, 3), None, 2, 1, 0, 1, 2)
    assert _kernels.direct_layout(p4, _kernels.DirectTile(64, 4), "float32")[:3] == (48, 51, 1)


# --- grouped_forward (kernels/grouped_forward.cu) ------------------------------


def interpret_grouped_forward(x3, w, bias, geometry):
    """grouped_forward's blocks in NumPy, from the tap table, tile and layout
    _cuda passes: each block stages x over [j0 - halo, j0 + TILE), sums every
    phase's taps for its steps, and writes outputs q - p of q in [S * j0,
    S * (j0 + TILE)).  Returns the output and how often each element was
    written; asserts every staged read lies in the staged rows and the sums fit
    the staging area."""
    batch, _, in_w = x3.shape
    channels, out_channels, groups = geometry.in_channels_per_group, geometry.out_channels_per_group, geometry.groups
    stride, padding, out_w = geometry.stride[1], geometry.padding[1], geometry.out_size[1]
    _, tile = _kernels.grouped_forward_tile(out_channels, stride)
    halo, x_row, tiles, _ = _kernels.grouped_forward_layout(geometry)
    assert x_row >= tile + halo and max(channels * x_row, out_channels * stride * tile) * 4 <= _kernels.grouped_forward_layout(geometry)[3]
    table = _kernels.grouped_forward_taps(geometry)
    starts, entries = table[: stride + 1], numpy.asarray(table[stride + 1 :]).reshape(-1, 2)
    out = numpy.zeros((batch, groups * out_channels, out_w))
    writes = numpy.zeros(out.shape, dtype=numpy.int64)
    steps = numpy.arange(tile)
    for n in range(batch):
        for g in range(groups):
            rows = slice(g * channels, (g + 1) * channels)
            for t in range(tiles):
                j0 = t * tile
                at = j0 - halo + numpy.arange(tile + halo)
                staged = numpy.where((at >= 0) & (at < in_w), x3[n][rows][:, at.clip(0, in_w - 1)], 0.0)  # (C, TILE + halo)
                sums = numpy.zeros((out_channels, tile * stride))
                for r in range(stride):
                    for k, a in entries[starts[r] : starts[r + 1]]:
                        read = halo - a + steps
                        assert read.min() >= 0 and read.max() < tile + halo
                        sums[:, r::stride] += w[rows, :, k].T @ staged[:, read]
                o = stride * j0 - padding + numpy.arange(tile * stride)
                keep = (o >= 0) & (o < out_w)
                channels_out = slice(g * out_channels, (g + 1) * out_channels)
                out[n][channels_out][:, o[keep]] = sums[:, keep] + (bias[channels_out, None] if bias is not None else 0)
                writes[n][channels_out][:, o[keep]] += 1
    return out, writes


@pytest.mark.parametrize("case", GROUPED_FORWARD_CASES + [c for c in CASES if c.dims == 1], ids=str)
def test_grouped_forward_computes_conv_transpose(case):
    rng = numpy.random.default_rng(32)
    x, w, b = case.arrays(rng)
    geometry = _geometry_of(case)
    if not _kernels.grouped_forward_applies(geometry, "float32"):
        pytest.skip("grouped_forward does not take this case")
    out, writes = interpret_grouped_forward(x.reshape(geometry.input_shape4[:2] + geometry.input_shape4[3:]), w, b, geometry)
    bt = None if b is None else torch.from_numpy(b)
    expected = F.conv_transpose1d(torch.from_numpy(x), torch.from_numpy(w), bt, **case.kwargs).numpy().reshape(out.shape)
    assert (writes == 1).all(), "every output element is written exactly once"
    numpy.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_grouped_forward_takes_p3_in_budget():
    """P3 (16 input, 8 output channels a group, stride 2): 4 steps a thread,
    512 a block, within GROUPED_FORWARD_MAX_SHARED; 16 x 16 x 16 taps too."""
    p3 = _geometry.make_geometry(1, (16, 64, 65536), (64, 8, 5), None, 2, 1, 1, 4, 1)
    assert _kernels.grouped_forward_tile(8, 2) == (4, 512)
    assert _kernels.grouped_forward_layout(p3) == (2, 516, 129, 4 * (656 + 16 * 516))  # 65538 steps
    assert _kernels.grouped_forward_applies(p3, "bfloat16")
    widest = _geometry.make_geometry(1, (1, 16, 4096), (16, 16, 16), None, 1, 0, 0, 1, 1)
    assert _kernels.grouped_forward_applies(widest, "float32")


# --- the backward pass's phase rewrite (_cuda._phase_backward_geometry) -------


@pytest.mark.parametrize("case", PHASE_BACKWARD_CASES + [c for c in CASES + WINDOW_CASES if c.dims == 1], ids=str)
def test_phase_rewrite_gives_the_gradients(case):
    """Where the dilation is a multiple of the stride, grad_input and
    grad_weight are those of the stride-1 problem on the gathered phase of
    grad_output (the very gather _cuda runs, on NumPy arrays)."""
    from cupyconv.kernels import phase_gather

    geometry = _geometry_of(case)
    phase = phase_gather._phase_backward_geometry(geometry)
    if phase is None:
        assert case.dims != 1 or case.stride == 1 or case.dilation % case.stride, case
        pytest.skip("the rewrite does not apply")
    sub = phase[0]
    rng = numpy.random.default_rng(33)
    x, w, _ = case.arrays(rng)
    gy = rng.standard_normal(geometry.output_shape)
    xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    F.conv_transpose1d(xt, wt, **case.kwargs).backward(torch.from_numpy(gy))
    sub_gy = phase_gather._phase_grad_output(gy.reshape(geometry.output_shape4), geometry, *phase).reshape(sub.output_shape)
    assert sub.stride == (1, 1)
    xs, ws = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    kwargs = dict(padding=sub.padding[1], output_padding=sub.output_padding[1], groups=sub.groups, dilation=sub.dilation[1])
    F.conv_transpose1d(xs, ws, **kwargs).backward(torch.from_numpy(sub_gy))
    numpy.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    numpy.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_phase_rewrite_keeps_p4_rows_whole():
    """P4 (stride 2, padding 1, dilation 2): padding 1 at stride 1, rows of
    131072 outputs (whole 16-byte vectors in every dtype), starting at
    output 1."""
    from cupyconv.kernels import phase_gather

    p4 = _geometry.make_geometry(1, (16, 32, 131072), (32, 64, 3), None, 2, 1, 0, 1, 2)
    sub, lo, hi, first = phase_gather._phase_backward_geometry(p4)
    assert (sub.stride, sub.padding, sub.dilation, sub.out_size, lo, hi, first) == ((1, 1), (0, 1), (1, 1), (1, 131072), 0, 131072, 1)


# --- the Hopper window kernel (kernels/conv_wgmma.cu) --------------------------


def _core_matrix_read(memory, start, leading, stride, rows, k_bytes, itemsize):
    """What wgmma reads through a K-major, unswizzled shared-memory descriptor
    (PTX ISA, "Shared Memory Matrix Layout"): row i, byte b of its k range at
    start + (i // 8) * stride + (i % 8) * 16 + (b // 16) * leading + b % 16.
    `memory` holds one value per element; returns (rows, k) values and the
    byte addresses read."""
    i = numpy.arange(rows)[:, None]
    b = numpy.arange(0, k_bytes, itemsize)[None, :]
    address = start + (i // 8) * stride + (i % 8) * 16 + (b // 16) * leading + b % 16
    assert (address % itemsize == 0).all()
    return memory[address // itemsize], address


def interpret_wgmma(source4, packed, out_shape4, flat, fold, groups, channels, out_channels, tile, dtype):
    """conv_wgmma's data movement, slice by slice: the bytes each thread's
    copies put in a stage buffer (A in core matrices, the window transposed),
    then what each warpgroup's wgmma reads through its descriptors (start,
    leading and stride offsets as the kernel builds them), then the epilogue.
    Asserts that every descriptor read stays inside what this slice wrote:
    A inside its taps, B inside the positions the window holds."""
    itemsize = _kernels.ITEMSIZE[dtype]
    vec = 16 // itemsize
    chunks = _kernels.WGMMA_CHUNKS
    bk = chunks * vec
    k_bytes = 32  # one wgmma: k16 (16-bit) or k8 (TF32)
    max_taps, vectors, chunk_stride, shared = _kernels.wgmma_layout(flat, tile, dtype)
    a_tap = tile.bm * chunks * 16
    a_bytes = max_taps * a_tap
    stage_bytes = -(-(a_bytes + chunks * chunk_stride) // 128) * 128
    assert _kernels.WGMMA_STAGES * stage_bytes <= shared and tile.bm * (tile.bn + 8) * 4 <= shared
    assert vectors * chunks <= _kernels.WGMMA_MAX_TASKS[itemsize] * _kernels.WGMMA_THREADS
    batch, _, _, in_w = source4.shape
    out = numpy.zeros(out_shape4)
    writes = numpy.zeros(out_shape4, dtype=numpy.int64)
    rows = out_channels * fold
    channels_padded = packed.shape[3]
    wg_m = tile.bm // 64
    warpgroups = [((wg if wg_m == 2 else 0) * 64, (wg if wg_m == 1 else 0) * 128) for wg in range(2)]
    for record in numpy.asarray(flat).reshape(-1, 9):
        count, out_base, out_step, in_base, in_step, tap_first, tap_step, taps, tap_in_step = (int(v) for v in record)
        assert taps <= max_taps and in_step == 1
        span = (taps - 1) * abs(tap_in_step) if taps else 0
        slices = -(-channels // bk) if taps else 0
        for m0 in range(0, rows, tile.bm):
            m = m0 + numpy.arange(tile.bm)
            co, r = m // fold, m % fold
            for q0 in range(0, count, tile.bn):
                lo = in_base + q0 - (span if tap_in_step < 0 else 0)
                first = (lo // vec) * vec  # floor_to
                head = lo - first
                acc = numpy.zeros((batch, groups, tile.bm, tile.bn))
                for n in range(batch):
                    for g in range(groups):
                        for s in range(slices):
                            c0 = s * bk
                            memory = numpy.full(stage_bytes // itemsize, numpy.nan)
                            written = numpy.zeros(stage_bytes // itemsize, dtype=bool)
                            for row in range(tile.bm):  # A: (row, chunk) copies, every tap
                                for chunk in range(chunks):
                                    for t in range(taps):
                                        dst = t * a_tap + (row // 8) * chunks * 128 + chunk * 128 + (row % 8) * 16
                                        c = c0 + chunk * vec + numpy.arange(vec)
                                        values = numpy.zeros(vec)
                                        if m[row] < rows and c0 + chunk * vec < channels_padded:
                                            values = packed[g, tap_first + r[row] + t * tap_step, co[row], c]
                                        memory[dst // itemsize : dst // itemsize + vec] = values
                                        written[dst // itemsize : dst // itemsize + vec] = True
                            for chunk in range(chunks):  # the window: task (chunk, v), VEC positions x VEC channels
                                for v in range(vectors):
                                    positions = first + v * vec + numpy.arange(vec)
                                    c = c0 + chunk * vec + numpy.arange(vec)
                                    inside = (positions >= 0) & (positions < in_w)
                                    block = numpy.zeros((vec, vec))  # (position, channel)
                                    if inside.all():
                                        block = source4[n, g * channels + c.clip(0, channels - 1), 0][:, positions].T * (c < channels)
                                    for pos in range(vec):
                                        dst = a_bytes + chunk * chunk_stride + (v * vec + pos) * 16
                                        assert dst + 16 <= a_bytes + chunks * chunk_stride
                                        memory[dst // itemsize : dst // itemsize + vec] = block[pos]
                                        written[dst // itemsize : dst // itemsize + vec] = True
                            for wm, wn in warpgroups:
                                for t in range(taps):
                                    shift = (taps - 1 - t) * -tap_in_step if tap_in_step < 0 else t * tap_in_step
                                    for ks in range(chunks // 2):
                                        a, a_read = _core_matrix_read(
                                            memory, (wm // 8) * chunks * 128 + t * a_tap + ks * 256, 128, chunks * 128, 64, k_bytes, itemsize)
                                        b, b_read = _core_matrix_read(
                                            memory, a_bytes + (head + wn + shift) * 16 + 2 * ks * chunk_stride, chunk_stride, 128, 128, k_bytes, itemsize)
                                        assert (a_read < (t + 1) * a_tap).all() and (a_read >= t * a_tap).all()
                                        assert (b_read >= a_bytes).all() and written[b_read // itemsize].all(), "a B read outside the window"
                                        acc[n, g, wm : wm + 64, wn : wn + 128] += a @ b.T
                q = q0 + numpy.arange(tile.bn)
                keep = m < rows
                _scatter_window_tile(out, writes, acc[:, :, keep], q, co[keep], r[keep], count, out_base, out_step, groups, out_channels)
    return out, writes


def interpret_fill(source4, packed, bias, out_shape4, flat, groups, channels, out_channels, tile, dtype):
    """conv_wgmma_resident's fill (conv_wgmma.cu, store_fill_part): each
    (image, group, row tile, column tile) item's sums over its one phase
    (tap t of column q reads input in_base + q + t * tap_in_step), then each
    warp's 16 x 128 part as the kernel writes it: FILL_ROWS rows at a time
    staged (output o at element lead + o of a staged row), then where the
    tile is whole, row by row, each aligned 16-byte vector of the row taken
    from the two staged vectors it straddles and written whole (the two at a
    row's ends element by element), else every output that exists element
    by element.  The output
    is taken to start on a 16-byte boundary (CuPy's allocations do).
    Asserts that whole-vector stores are aligned and that every read of the
    staged rows is inside them and of a staged element."""
    count, out_base, out_step, in_base, in_step, tap_first, tap_step, taps, tap_in_step = (int(v) for v in flat)
    assert out_step == _kernels.FILL_STEP and in_step == 1 and tap_first == 0 and tap_step == 1 and 0 <= out_base < out_step
    step, itemsize = out_step, _kernels.ITEMSIZE[dtype]
    vec, rows_at_once = 16 // itemsize, _kernels.FILL_ROWS[itemsize]
    outs_per_row, lead = step * 128, 16 // itemsize
    stage_row = outs_per_row + 16
    assert 8 * rows_at_once * stage_row * itemsize == _kernels.fill_stage_bytes(dtype) <= _kernels.RESIDENT_PART_BYTES
    batch, _, _, in_w = source4.shape
    out_w = out_shape4[3]
    out = numpy.full(out_shape4, numpy.nan).reshape(-1)
    writes = numpy.zeros(out.size, dtype=numpy.int64)

    def write(index, value):
        assert not numpy.isnan(value), "an unstaged element"
        out[index] = value
        writes[index] += 1

    wg_m = tile.bm // 64
    warpgroups = [((wg if wg_m == 2 else 0) * 64, (wg if wg_m == 1 else 0) * 128) for wg in range(2)]
    columns = -(-out_w // step)
    for n in range(batch):
        for g in range(groups):
            for m0 in range(0, out_channels, tile.bm):
                m = m0 + numpy.arange(tile.bm)
                weights = numpy.where((m < out_channels)[None, :, None], packed[g][:, m.clip(0, out_channels - 1), :channels], 0.0)
                for q0 in range(0, columns, tile.bn):
                    q = q0 + numpy.arange(tile.bn)
                    acc = numpy.zeros((tile.bm, tile.bn))
                    for t in range(taps):
                        position = in_base + q + t * tap_in_step
                        inside = (position >= 0) & (position < in_w)
                        acc += weights[t] @ numpy.where(inside, source4[n, g * channels : (g + 1) * channels, 0][:, position.clip(0, in_w - 1)], 0.0)
                    whole = m0 + tile.bm <= out_channels and step * (q0 + tile.bn) <= out_w
                    for wm, wn in warpgroups:
                        for w in range(4):
                            row0, o_first = m0 + wm + 16 * w, step * (q0 + wn)
                            rows, outs = out_channels - row0, out_w - o_first
                            b = [bias[g * out_channels + row0 + r] if bias is not None and r < rows else 0.0 for r in range(16)]
                            start = [((n * groups + g) * out_channels + row0 + r) * out_w + o_first for r in range(16)]  # a row's first output
                            values = numpy.repeat(numpy.asarray(b)[:, None], outs_per_row, axis=1)
                            values[:, out_base::step] += acc[wm + 16 * w : wm + 16 * w + 16, wn : wn + 128]
                            for first_row in range(0, 16, rows_at_once):
                                staged = numpy.full((rows_at_once, stage_row), numpy.nan)
                                staged[:, lead : lead + outs_per_row] = values[first_row : first_row + rows_at_once]
                                if not whole:
                                    for r in range(rows_at_once):
                                        if first_row + r < rows:
                                            for o in range(min(outs, outs_per_row)):
                                                write(start[first_row + r] + o, staged[r, lead + o])
                                    continue
                                for r in range(rows_at_once):
                                    a = start[first_row + r] % vec
                                    for v in range(outs_per_row // vec + (a > 0)):
                                        first = vec * v - a
                                        straddled = (v, v + 1) if a else (v + 1,)  # the staged vectors read
                                        assert lead == vec and vec * (straddled[-1] + 1) <= stage_row
                                        source = staged[r, lead + first : lead + first + vec]
                                        whole_vector = first >= 0 and first + vec <= outs_per_row
                                        assert not whole_vector or (start[first_row + r] + first) % vec == 0
                                        for e in range(max(0, -first), min(vec, outs_per_row - first)):
                                            write(start[first_row + r] + first + e, source[e])
    return out.reshape(out_shape4), writes.reshape(out_shape4)


_FILL_MODEL_CASES = FILL_CASES + [c for c in WINDOW_CASES if _kernels.fill_record(_geometry_of(c), "forward") is not None]


@pytest.mark.parametrize("tile", _kernels.WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", _FILL_MODEL_CASES, ids=str)
def test_fill_computes_conv_transpose(case, dtype, tile):
    """conv_wgmma_resident's fill writes every output once: the sums of its
    one phase and the bias between them."""
    rng = numpy.random.default_rng(16)
    x, w, b = case.arrays(rng)
    geometry = _geometry_of(case)
    flat = _kernels.fill_record(geometry, "forward")
    packed = _kernels.pack_window_weight(w, geometry, "forward", fold=False)
    assert packed.shape[1] == case.kernel[0]
    out, writes = interpret_fill(
        x.reshape(geometry.input_shape4), packed, b, geometry.output_shape4, flat, geometry.groups,
        geometry.in_channels_per_group, geometry.out_channels_per_group, tile, dtype,
    )  # fmt: skip
    bias = None if b is None else torch.from_numpy(b)
    expected = F.conv_transpose1d(torch.from_numpy(x), torch.from_numpy(w), bias, **case.kwargs).numpy().reshape(geometry.output_shape4)
    assert (writes == 1).all(), "every output element is written exactly once"
    numpy.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_fill_applies_where_documented():
    """Stride 2 with a dilation that is a multiple of it (P4), forward only;
    not stride 2 with an odd dilation, not stride 4, not 2D."""
    make = lambda **k: _geometry.make_geometry(1, (2, 32, 100), (32, 64, 3), None, k.get("s", 2), k.get("p", 1), 0, 1, k.get("d", 2))  # noqa: E731
    p4 = make()
    assert _kernels.fill_record(p4, "forward") is not None and _kernels.fill_record(p4, "grad_input") is None
    assert _kernels.fill_record(make(d=6, p=4), "forward") is not None
    assert _kernels.fill_record(make(d=3), "forward") is None and _kernels.fill_record(make(s=4, d=4), "forward") is None
    assert _kernels.fill_record(_geometry.make_geometry(2, (2, 32, 8, 100), (32, 64, 3, 3), None, 2, 1, 0, 1, 2), "forward") is None


def _padded_window_weight(w, geometry, pass_name, dtype):
    """The packed weight as the host gives conv_wgmma: (groups, KW, M, C) with
    C padded with zeros to 16 bytes."""
    view = _kernels.pack_window_weight(w, geometry, pass_name)
    packed = numpy.zeros(view.shape[:3] + (_kernels.window_channels_padded(view.shape[3], dtype),))
    packed[..., : view.shape[3]] = view
    return packed


_WGMMA_CASES = [c for c in WINDOW_CASES if c.name in ("1d_win_s1_d3", "1d_win_fold8", "1d_win_fold4_pad", "1d_win_s2_k5_g2", "1d_win_k9_d4")]


@pytest.mark.parametrize("tile", _kernels.WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", _WGMMA_CASES, ids=str)
def test_wgmma_forward_computes_conv_transpose(case, dtype, tile):
    rng = numpy.random.default_rng(14)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    flat, fold = _kernels.window_records(geometry, "forward")
    packed = _padded_window_weight(w, geometry, "forward", dtype)
    out, writes = interpret_wgmma(
        x.reshape(geometry.input_shape4), packed, geometry.output_shape4, flat, fold, geometry.groups,
        geometry.in_channels_per_group, geometry.out_channels_per_group, tile, dtype,
    )  # fmt: skip
    expected = F.conv_transpose1d(torch.from_numpy(x), torch.from_numpy(w), **case.kwargs).numpy().reshape(geometry.output_shape4)
    assert (writes == 1).all(), "every output element is written exactly once"
    numpy.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def _wgmma_grad_input_cases():
    """(case, dtype) pairs whose grad_input the host routes to the window
    kernels: stride 1, grad_output rows of whole 16-byte vectors."""
    for case in _WGMMA_CASES + [c for c in CASES if c.dims == 1 and c.in_channels != c.groups]:
        geometry = _geometry_of(case)
        for dtype in ("float32", "float16"):
            if case.stride == 1 and geometry.output_shape4[3] * _kernels.ITEMSIZE[dtype] % 16 == 0:
                yield pytest.param(case, dtype, id=f"{case}-{dtype}")


@pytest.mark.parametrize("case, dtype", list(_wgmma_grad_input_cases()))
def test_wgmma_grad_input_computes_the_correlation(case, dtype):
    rng = numpy.random.default_rng(15)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    gy = rng.standard_normal(geometry.output_shape4)
    flat, fold = _kernels.window_records(geometry, "grad_input")
    packed = _padded_window_weight(w, geometry, "grad_input", dtype)
    out, writes = interpret_wgmma(
        gy, packed, geometry.input_shape4, flat, fold, geometry.groups,
        geometry.out_channels_per_group, geometry.in_channels_per_group, _kernels.WGMMA_TILES[1], dtype,
    )  # fmt: skip
    assert (writes == 1).all()
    numpy.testing.assert_allclose(out, _torch_grads(x, w, gy, geometry)[0], rtol=1e-12, atol=1e-12)


def test_conv_tf32_plans():
    """conv_wgmma_tf32's plans on the host (no GPU): P2's passes fit the
    H100's 232,448 bytes of shared memory with one block per multiprocessor;
    X3's folded forward pass takes a FOLD build, one block for each of its
    128 tiles; what it has no build, record or room
    for gets no plan (5 taps, a stride that does not fold, a weight tile over
    the shared memory, rows too long for its 32-bit copy offsets)."""
    from cupyconv.kernels import conv_tf32

    def plan(x_shape, w_shape, pass_name="forward", **kwargs):
        kw = dict(stride=1, padding=0, output_padding=0, groups=1, dilation=1) | kwargs
        g = _geometry.make_geometry(1, x_shape, w_shape, None, kw["stride"], kw["padding"], kw["output_padding"], kw["groups"], kw["dilation"])
        return conv_tf32._conv_tf32_plan(g, pass_name, "int", 132, 232448)

    for pass_name in ("forward", "grad_input"):
        launch, flat = plan((64, 128, 65536), (128, 128, 3), pass_name)
        assert launch.name == _kernels.conv_tf32_name("int", 3)
        assert launch.blocks == 132 and launch.shared == 231936 and len(flat) == 9
    assert plan((4, 128, 4096), (128, 128, 5)) is None
    launch, flat = plan((8, 64, 512), (64, 64, 1024), stride=256, padding=384)  # X3
    assert launch.name == _kernels.conv_tf32_name("int", 4, True) and len(flat) == 9
    assert launch.blocks == 128 and launch.shared == 166400
    assert plan((4, 128, 4096), (128, 128, 4), stride=2, padding=1)[0].name == _kernels.conv_tf32_name("int", 2, True)
    assert plan((4, 128, 4096), (128, 128, 5), stride=2, padding=1) is None
    assert plan((4, 256, 4096), (256, 128, 3)) is None
    assert plan((1, 128, 1 << 27), (128, 128, 3)) is None


def test_grad_weight_tf32_plans():
    """grad_weight_wgmma_tf32's plans on the host (no GPU): tap mode for
    stride 1 (P2: 128 output channels a block, an accumulator a tap), fold
    mode for strides (X2: 8 output channels x 16 taps a block, the stride in
    the window); no plan for odd input rows, stride-1 kernels over its tap
    builds, or strided ones over its fold limit."""
    from cupyconv.kernels import grad_weight_tf32

    def plan(x_shape, w_shape, passes=3, **kwargs):
        kw = dict(stride=1, padding=0, output_padding=0, groups=1, dilation=1) | kwargs
        g = _geometry.make_geometry(1, x_shape, w_shape, None, kw["stride"], kw["padding"], kw["output_padding"], kw["groups"], kw["dilation"])
        return grad_weight_tf32._grad_weight_tf32_plan(g, "int", passes, 132, 232448)

    launch, workspace, _ = plan((64, 128, 65536), (128, 128, 3), padding=1)
    assert launch.name == _kernels.grad_weight_tf32_name("int", 3, 3, 16) and launch.name.endswith(", false>")  # out 65536
    assert launch.blocks == 132 and workspace[1:] == (128, 128, 1, 3)
    for passes in (1, 3):
        launch, workspace, _ = plan((16, 512, 4096), (512, 256, 16), passes, stride=8, padding=4)
        assert launch.name == _kernels.grad_weight_tf32_name("int", 1, passes, 16, True) and launch.name.endswith(", true>")
        assert launch.blocks == 256 and workspace == (1, 512, 256, 1, 16)  # 32 co tiles x 8 ci tiles
        layout = _kernels.grad_weight_tf32_layout(_geometry.make_geometry(1, (16, 512, 4096), (512, 256, 16), None, 8, 4, 0, 1, 1), "float32", passes)
        assert layout.fold and layout.tile_co == 8 and layout.vectors == 130  # 8 * 63 + 16 positions
        assert launch.shared == layout.shared <= 232448
    assert plan((4, 128, 4098), (128, 128, 3)) is None
    assert plan((4, 128, 4096), (128, 128, 5)) is None
    assert plan((4, 128, 4096), (128, 64, 65), stride=8) is None
    assert plan((4, 128, 4096), (128, 64, 64), stride=8) is not None


def interpret_grad_weight_tf32(x4, gy4, geometry, passes, per_split):
    """grad_weight_wgmma_tf32's indexing, block by block and item by item, in
    float64 (no TF32 rounding): its host layout (grad_weight_tf32_layout),
    each window row copied in COPY-byte pieces from window_first = step * l0 -
    padding - shift0 into raw buffers poisoned with NaN (zeros where the
    kernel zero-fills), each A element read where the kernel's fragment loads
    read it (tap mode: row r, column shift0 + t * dilation + c; fold mode:
    output channel r // K's row, column shift0 + (r % K) * dilation + stride *
    c, rows past the tile's taps reading row 0), never past the copied part
    of its row; the x tile zero-filled past the row; each block's sums
    stored where its epilogue stores them, once per split."""
    layout = _kernels.grad_weight_tf32_layout(geometry, "float32", passes)
    assert layout is not None
    rows, columns, positions = _kernels.GRAD_WEIGHT_TF32_ROWS, _kernels.GRAD_WEIGHT_TF32_COLUMNS, _kernels.GRAD_WEIGHT_TF32_POSITIONS
    batch, _, _, in_w = geometry.input_shape4
    out_w = geometry.output_shape4[3]
    channels, out_channels, groups = geometry.in_channels_per_group, geometry.out_channels_per_group, geometry.groups
    kernel, stride, padding, dilation = geometry.kernel[1], geometry.stride[1], geometry.padding[1], geometry.dilation[1]
    fold, tile_co = layout.fold, layout.tile_co
    step = stride if fold else 1
    unit = layout.copy // 4
    copies = layout.vectors * (16 // layout.copy)
    filled, raw_floats = layout.vectors * 4, layout.raw_row // 4
    assert copies * unit == filled <= raw_floats
    shift0 = (4 - padding % 4) % 4
    chunks = -(-in_w // positions)
    items = batch * chunks
    splits = -(-items // per_split)
    co_tiles, ci_tiles = -(-out_channels // tile_co), -(-channels // columns)
    workspace = numpy.full((splits, groups * channels, out_channels, kernel), numpy.nan)
    writes = numpy.zeros(workspace.shape, dtype=numpy.int64)
    r = numpy.arange(rows)
    c = numpy.arange(positions)
    if fold:
        live = r < tile_co * kernel
        r_read = numpy.where(live, r, 0)
        row_co, row_tap = r_read // kernel, r_read % kernel
        # [row, tap (one: the taps are rows), column] offsets into the raw buffer
        reads = (row_co * raw_floats + shift0 + row_tap * dilation)[:, None, None] + step * c[None, None, :]
        in_row = (shift0 + row_tap * dilation)[:, None, None] + step * c[None, None, :]
    else:
        live = numpy.ones(rows, dtype=bool)
        t = numpy.arange(kernel)
        reads = (r * raw_floats + shift0)[:, None, None] + (t * dilation)[None, :, None] + c[None, None, :]
        in_row = numpy.broadcast_to(shift0 + (t * dilation)[None, :, None] + c[None, None, :], reads.shape)
    assert in_row.max() < filled, "a fragment load reads past its row's copies"
    for split in range(splits):
        first = split * per_split
        steps = max(0, min(items, first + per_split) - first)
        for group in range(groups):
            for co_tile in range(co_tiles):
                for ci_tile in range(ci_tiles):
                    acc = numpy.zeros((rows, reads.shape[1], columns))
                    for k in range(steps):
                        n, l0 = divmod(first + k, chunks)
                        l0 *= positions
                        window_first = step * l0 - padding - shift0
                        assert window_first % 4 == 0
                        raw = numpy.full(tile_co * raw_floats, numpy.nan)
                        for row in range(tile_co):
                            co = co_tile * tile_co + row
                            for u in range(copies):
                                l = window_first + u * unit
                                at = row * raw_floats + u * unit
                                if co < out_channels and 0 <= l < out_w:
                                    assert l + unit <= out_w, "a copy leaves its row"
                                    raw[at : at + unit] = gy4[n, group * out_channels + co, 0, l : l + unit]
                                else:
                                    raw[at : at + unit] = 0.0
                        a = raw[reads]  # (rows, taps, positions)
                        x_tile = numpy.zeros((columns, positions))
                        ci = ci_tile * columns + numpy.arange(columns)
                        ok_ci = ci < channels
                        width = min(positions, in_w - l0)
                        x_tile[ok_ci, :width] = x4[n, group * channels + ci[ok_ci], 0, l0 : l0 + width]
                        acc += numpy.einsum("rtp,jp->rtj", a, x_tile)
                    ci = ci_tile * columns + numpy.arange(columns)
                    for row in numpy.flatnonzero(live):
                        for tap in range(reads.shape[1]):
                            co = co_tile * tile_co + (row // kernel if fold else row)
                            t_out = row % kernel if fold else tap
                            if co >= out_channels:
                                continue
                            ok = ci < channels
                            workspace[split, group * channels + ci[ok], co, t_out] = acc[row, tap, ok]
                            writes[split, group * channels + ci[ok], co, t_out] += 1
    assert (writes == 1).all(), "every grad_weight entry is written once per split"
    return workspace.sum(axis=0)


@pytest.mark.parametrize("per_split", [3, 1000])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TF32_CASES if c.name != "gwt_odd_rows"], ids=str)
def test_grad_weight_tf32_computes_grad_weight(case, per_split):
    """grad_weight_wgmma_tf32's layout and indexing (interpreted) give
    grad_weight on every case of its GPU tests, split and unsplit."""
    rng = numpy.random.default_rng(17)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    gy = rng.standard_normal(geometry.output_shape4)
    got = interpret_grad_weight_tf32(x.reshape(geometry.input_shape4), gy, geometry, 3, per_split)
    numpy.testing.assert_allclose(got, _torch_grads(x, w, gy, geometry)[1].reshape(got.shape), rtol=1e-12, atol=1e-12)


# Fold-mode geometries beyond the GPU cases: one tap (rows are channels, the
# stride in the window), a stride above the kernel, dilations, a kernel of
# 64 taps (two output channels a block), paddings past the window's first
# vector, output paddings.
FOLD_GEOMETRIES = [
    Case("fold_k1_s4", 1, 2, 64, 70, (1,), (72,), stride=4, output_padding=3),
    Case("fold_s5_k3", 1, 1, 66, 64, (3,), (96,), stride=5, padding=2, output_padding=1),
    Case("fold_s3_d3", 1, 2, 64, 80, (7,), (68,), stride=3, padding=9, dilation=3, output_padding=2),
    Case("fold_k64_s16", 1, 1, 64, 65, (64,), (80,), stride=16, padding=24),
    Case("fold_s2_k2_g2", 1, None, 128, 192, (2,), (132,), stride=2, padding=1, output_padding=1, groups=2),
]


@pytest.mark.parametrize("case", FOLD_GEOMETRIES, ids=str)
def test_grad_weight_tf32_fold_geometries(case):
    """Fold mode's layout and indexing (interpreted) on geometries its GPU
    tests do not cover."""
    rng = numpy.random.default_rng(18)
    x, w, _ = case.arrays(rng)
    geometry = _geometry_of(case)
    assert _kernels.grad_weight_tf32_layout(geometry, "float32", 1).fold
    gy = rng.standard_normal(geometry.output_shape4)
    got = interpret_grad_weight_tf32(x.reshape(geometry.input_shape4), gy, geometry, 1, 2)
    numpy.testing.assert_allclose(got, _torch_grads(x, w, gy, geometry)[1].reshape(got.shape), rtol=1e-12, atol=1e-12)
