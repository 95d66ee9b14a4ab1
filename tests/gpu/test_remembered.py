"""Remembered calls: the small forward launch remembered per signature, and
the recorded replays of forward and backward calls
(settings.use_remembered_forward, use_remembered_backward) on every route:
bitwise the checked path's, keyed on what they read, and forgotten when a
setting or autotuning changes."""

from __future__ import annotations

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from helpers import _fast_calls, _grads_equal, _ops, _to_gpu, poisoned_allocations
from oracle import MODES, numpy_dtype
from sweep import CASES, Case

import cupyconv
import cupyconv.settings

if HAVE_GPU:
    import cupyconv._remember  # (cupyconv._remember.FAST_FORWARD below: the remembered calls' tables)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]


@pytest.mark.parametrize("mode", [("float32", "highest"), ("float32", "tf32"), ("float16", "highest")], ids=["highest", "tf32", "float16"])
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_vocoder", "2d_depthwise", "2d_groups_dilation")], ids=str)
def test_small_forward_is_one_remembered_launch(case, mode, monkeypatch, settings_override):
    """A small forward pass is planned once per signature: a repeated call
    finds its launch remembered, and gives bitwise the result of the full
    dispatch (which runs with autotuning on, the remembered launch then off).
    conv_tiny off: it takes the small launch with autotuning on too
    (test_tiny_routes)."""
    from cupyconv import _autotune, _cuda

    settings_override(tiny_max_output=0)
    dtype_name, precision = mode
    dtype = numpy_dtype(dtype_name)
    rng = numpy.random.default_rng(26)
    x, w, b = (_to_gpu(a, dtype) for a in case.arrays(rng, dtype))
    fn = _ops(case).forward
    cupyconv._remember.FAST_FORWARD.clear()  # both calls take the checked path (the first plans, the second finds the plan)
    y_first = fn(x, w, b, **case.kwargs, precision=precision)
    assert y_first.size < cupyconv.settings.current().small_forward_max_output
    cupyconv._remember.FAST_FORWARD.clear()
    before = _cuda._small_forward_launch.cache_info()
    with poisoned_allocations():
        y = fn(x, w, b, **case.kwargs, precision=precision)
    after = _cuda._small_forward_launch.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    monkeypatch.setattr(_autotune, "enabled", lambda: True)
    monkeypatch.setattr(_cuda, "_tuned_choice", _untuned_choice)  # autotuning on, the rules' family and tile
    with poisoned_allocations():
        y_full = fn(x, w, b, **case.kwargs, precision=precision)
    assert _cuda._small_forward_launch.cache_info() == after
    assert cupy.array_equal(y, y_full) and cupy.array_equal(y, y_first)


def _untuned_choice(p, arrays):
    """_cuda._tuned_choice's answer were the rules to win: their family and its heuristic tile."""
    from cupyconv import _registry, settings

    family = _registry._choose(p, settings.current())
    return family, family.heuristic(p)


@pytest.mark.parametrize("mode", [("float32", "highest"), ("float32", "tf32"), ("bfloat16", "highest")], ids=["highest", "tf32", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_fast_forward_matches_checked_path(case, mode, monkeypatch):
    """A repeated small call with the same signature goes from _api straight
    to its remembered launch (its arguments packed once, cuLaunchKernel) and
    writes every output: bitwise the checked path's result, in poisoned
    memory, on the default stream and on another one."""

    dtype_name, precision = mode
    dtype = numpy_dtype(dtype_name)
    rng = numpy.random.default_rng(28)
    x, w, b = (_to_gpu(a, dtype) for a in case.arrays(rng, dtype))
    fn = _ops(case).forward
    cupyconv._remember.FAST_FORWARD.clear()
    answered = _fast_calls(monkeypatch)
    with poisoned_allocations():
        y_checked = fn(x, w, b, **case.kwargs, precision=precision)
    s = cupyconv.settings.current()
    if not 0 < y_checked.size < min(s.small_forward_max_output, s.window_min_output, s.pack_min_output):
        assert not cupyconv._remember.FAST_FORWARD  # empty and large calls are planned each time
        return
    assert len(cupyconv._remember.FAST_FORWARD) == 1
    with poisoned_allocations():
        y_fast = fn(x, w, b, **case.kwargs, precision=precision)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            y_stream = fn(x, w, b, **case.kwargs, precision=precision)
        stream.synchronize()
    assert answered == [True, True]
    assert y_fast.shape == y_checked.shape and y_fast.dtype == y_checked.dtype
    assert cupy.array_equal(y_fast, y_checked) and cupy.array_equal(y_stream, y_checked)


def test_fast_forward_keys():
    """What the remembered launch is keyed on: a call that differs in an
    array's strides, dtype or presence, or in an argument's type, takes the
    checked path (and raises where that rejects it)."""

    rng = numpy.random.default_rng(29)
    x = cupy.asarray(rng.standard_normal((2, 4, 9)), dtype=numpy.float32)
    w = cupy.asarray(rng.standard_normal((4, 3, 3)), dtype=numpy.float32)
    b = cupy.asarray(rng.standard_normal(3), dtype=numpy.float32)
    cupyconv._remember.FAST_FORWARD.clear()
    y = cupyconv.conv_transpose1d(x, w, b, stride=2)
    assert cupy.array_equal(cupyconv.conv_transpose1d(x, w, b, stride=2), y) and len(cupyconv._remember.FAST_FORWARD) == 1
    # a strided view of the same shape: copied on the checked path, not read as if contiguous
    wide = cupy.asarray(rng.standard_normal((2, 4, 18)), dtype=numpy.float32)
    wide[:, :, ::2] = x
    assert cupy.array_equal(cupyconv.conv_transpose1d(wide[:, :, ::2], w, b, stride=2), y)
    assert cupy.array_equal(cupyconv.conv_transpose1d(wide[:, :, ::2], w, b, stride=2), y)
    # an argument equal to a remembered one but of another type is still rejected
    with pytest.raises(TypeError, match="stride"):
        cupyconv.conv_transpose1d(x, w, b, stride=2.0)
    with pytest.raises(TypeError, match="dtype"):
        cupyconv.conv_transpose1d(x, w.astype(numpy.float64), b, stride=2)
    with pytest.raises(ValueError, match="precision"):
        cupyconv.conv_transpose1d(x, w, b, stride=2, precision="TF32")
    with pytest.raises(TypeError, match="bias"):
        cupyconv.conv_transpose1d(x, w, cupy.asnumpy(b), stride=2)
    # no bias: its own launch, the bias pointer null
    y_plain = cupyconv.conv_transpose1d(x, w, stride=2)
    assert cupy.array_equal(cupyconv.conv_transpose1d(x, w, stride=2), y_plain)
    assert cupy.allclose(y_plain + b[:, None], y, rtol=1e-6, atol=1e-6)


def test_fast_forward_follows_settings(monkeypatch, settings_override):
    """A remembered launch stands aside when a setting its plan read changes
    (here 3xTF32's product threshold, and autotuning), so the checked path
    plans afresh."""
    from cupyconv import _autotune, _cuda

    rng = numpy.random.default_rng(30)
    x = cupy.asarray(rng.standard_normal((1, 16, 40)), dtype=numpy.float32)
    w = cupy.asarray(rng.standard_normal((16, 8, 9)), dtype=numpy.float32)
    cupyconv._remember.FAST_FORWARD.clear()
    answered = _fast_calls(monkeypatch)
    y = cupyconv.conv_transpose1d(x, w)
    cupyconv.conv_transpose1d(x, w)
    assert answered == [True]
    settings_override(tf32x3_min_products=1 << 30)  # float32 "highest" on CUDA cores
    before = _cuda._small_forward_launch.cache_info().misses
    y_cuda_cores = cupyconv.conv_transpose1d(x, w)
    assert answered == [True, False] and _cuda._small_forward_launch.cache_info().misses == before + 1
    assert cupy.allclose(y_cuda_cores, y, rtol=1e-5, atol=1e-5)
    monkeypatch.undo()
    settings_override.undo()
    answered = _fast_calls(monkeypatch)
    monkeypatch.setattr(_autotune, "enabled", lambda: True)
    monkeypatch.setattr(_cuda, "_tuned_choice", _untuned_choice)  # autotuning on, the rules' family and tile
    assert cupy.array_equal(cupyconv.conv_transpose1d(x, w), y) and answered == [False]


def test_fast_forward_spare_output(monkeypatch):
    """A remembered small call launches into the output allocated at the end
    of the call before it (the spare), where that was made on the same
    stream under the same allocator; on another stream or under another
    allocator it allocates afresh.  Every call's output is its own memory,
    every element written (poisoned memory throughout)."""

    rng = numpy.random.default_rng(31)
    x = cupy.asarray(rng.standard_normal((2, 4, 9)), dtype=numpy.float32)
    w = cupy.asarray(rng.standard_normal((4, 3, 3)), dtype=numpy.float32)
    b = cupy.asarray(rng.standard_normal(3), dtype=numpy.float32)
    call = lambda: cupyconv.conv_transpose1d(x, w, b, stride=2)
    cupyconv._remember.FAST_FORWARD.clear()
    answered = _fast_calls(monkeypatch)
    with poisoned_allocations():
        y_checked = call()
        (fast,) = cupyconv._remember.FAST_FORWARD.values()
        assert fast.keep_spare and fast.spare is None
        outputs, spares = [], []
        for _ in range(3):
            outputs.append(call())
            spares.append(fast.spare[0])
        assert [y is s for y, s in zip(outputs[1:], spares)] == [True, True]  # the spare of the call before
        assert len({y.data.ptr for y in outputs + [spares[-1], y_checked]}) == 5
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            y_stream = call()
        stream.synchronize()
        assert y_stream is not spares[-1]
        y_default = call()  # the spare was made on `stream`
        assert y_default is not fast.spare[0] and y_default is not spares[-1]
        made_under = fast.spare[0]
    with poisoned_allocations():  # another allocator
        y_other = call()
        assert y_other is not made_under
    assert answered == [True] * 6
    for y in outputs + [y_stream, y_default, y_other]:
        assert cupy.array_equal(y, y_checked)


def test_fast_forward_without_spare(monkeypatch, settings_override):
    """Outputs over settings.spare_output_max_bytes get no spare: each call
    allocates its own output before the launch."""

    settings_override(spare_output_max_bytes=0)
    rng = numpy.random.default_rng(32)
    x = cupy.asarray(rng.standard_normal((1, 4, 5)), dtype=numpy.float32)
    w = cupy.asarray(rng.standard_normal((4, 8, 3)), dtype=numpy.float32)
    cupyconv._remember.FAST_FORWARD.clear()
    answered = _fast_calls(monkeypatch)
    with poisoned_allocations():
        y_checked = cupyconv.conv_transpose1d(x, w)
        ys = [cupyconv.conv_transpose1d(x, w) for _ in range(2)]
    (fast,) = cupyconv._remember.FAST_FORWARD.values()
    assert not fast.keep_spare and fast.spare is None and answered == [True, True]
    assert all(cupy.array_equal(y, y_checked) for y in ys)


# The remembered forward call (settings.use_remembered_forward): the bench
# problems at a smaller batch or length, so that each reaches its route
# (conv_window and its fill, conv_wgmma, conv_fold, the grouped and depthwise
# kernels, conv_direct, conv_gemm) past the small-call path.
REMEMBERED_CASES = [
    Case("rem_p1", 1, 2, 32, 64, (5,), (4096,), dilation=3),
    Case("rem_p2", 1, 1, 128, 128, (3,), (4096,)),
    Case("rem_p3", 1, 2, 64, 32, (5,), (4096,), stride=2, padding=1, output_padding=1, groups=4),
    Case("rem_p4", 1, 2, 32, 64, (3,), (4096,), stride=2, padding=1, dilation=2),
    Case("rem_p5", 2, 2, 32, 64, (3, 3), (16, 32), stride=5, padding=1, dilation=2),
    Case("rem_x1", 1, 2, 256, 256, (4,), (1024,), stride=2, padding=1, groups=256),
    Case("rem_x2", 1, 1, 512, 256, (16,), (512,), stride=8, padding=4),
    Case("rem_x3", 1, 1, 64, 64, (1024,), (512,), stride=256, padding=384),
    Case("rem_unbatched", 1, None, 32, 64, (3,), (4096,), stride=2, padding=1, dilation=2, bias=False),
]


def _remember_spies(monkeypatch):
    """The names of the kernels _cuda._launch ran."""
    from cupyconv import _cuda

    launched, launch = [], _cuda._launch
    monkeypatch.setattr(_cuda, "_launch", lambda plan, arrays: (launched.append(plan.name), launch(plan, arrays))[1])
    return launched


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", REMEMBERED_CASES, ids=str)
def test_remembered_forward_replays_routes(case, mode, monkeypatch):
    """The third call of a signature checks a recording of the second; from
    the fourth on the call replays it without a launch through _launch.  On
    fresh inputs, in poisoned memory (output and temporaries), on the
    default stream and on another one, the replay gives bitwise what the
    checked path gives.  Every route is remembered (the packed GEMM
    weight too: a kernel of its own)."""
    from cupyconv import _remember

    dtype_name, precision = mode
    dtype = numpy_dtype(dtype_name)
    rng = numpy.random.default_rng(31)
    x, w, b = (_to_gpu(a, dtype) for a in case.arrays(rng, dtype))
    fn = _ops(case).forward
    launched = _remember_spies(monkeypatch)
    cupyconv._remember.FAST_FORWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    first = fn(x, w, b, **case.kwargs, precision=precision)
    assert first.size >= cupyconv.settings.current().small_forward_max_output
    names = list(launched)
    for _ in range(2):
        assert cupy.array_equal(fn(x, w, b, **case.kwargs, precision=precision), first)
    assert launched == names * 3
    (key,) = cupyconv._remember.FAST_FORWARD
    assert isinstance(cupyconv._remember.FAST_FORWARD[key], _remember._Replay)
    del launched[:]
    x2, w2, b2 = (_to_gpu(a, dtype) for a in case.arrays(numpy.random.default_rng(32), dtype))
    with poisoned_allocations():
        replayed = fn(x2, w2, b2, **case.kwargs, precision=precision)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            on_stream = fn(x2, w2, b2, **case.kwargs, precision=precision)
        stream.synchronize()
    assert not launched  # replayed: no launch went through _launch
    replay = cupyconv._remember.FAST_FORWARD.pop(key)
    with poisoned_allocations():
        checked = fn(x2, w2, b2, **case.kwargs, precision=precision)
    assert launched == names and not cupyconv._remember.FAST_FORWARD
    assert replayed.shape == checked.shape == first.shape and replayed.dtype == checked.dtype
    assert not bool(cupy.isnan(checked.astype(numpy.float32)).any())
    assert cupy.array_equal(replayed, checked) and cupy.array_equal(on_stream, checked)
    assert not cupy.array_equal(checked, first)  # fresh inputs, a fresh result
    # an input one element past an aligned block (same shape and strides, so
    # the same key): the replay stands aside and the checked path takes the
    # call (which may route it to a kernel without 16-byte loads)
    cupyconv._remember.FAST_FORWARD[key] = replay
    flat = cupy.empty(x2.size + 4, dtype=x2.dtype)
    shifted = flat[1 : 1 + x2.size].reshape(x2.shape)
    shifted[...] = x2
    del launched[:]
    moved = fn(shifted, w2, b2, **case.kwargs, precision=precision).astype(numpy.float64)
    assert launched  # the checked path ran
    assert cupyconv._remember.FAST_FORWARD.get(key) is replay
    reference64 = checked.astype(numpy.float64)
    assert float(abs(moved - reference64).max()) <= 1e-2 * float(abs(reference64).max())


def test_remembered_forward_follows_settings(monkeypatch, settings_override):
    """A replay recorded before a setting changed (here use_window_fill, as a
    user or a test sets it) forgets itself: the next calls take the checked
    path, which routes by the new setting, and a new recording is made."""
    from cupyconv import _remember

    case = next(c for c in REMEMBERED_CASES if c.name == "rem_p4")
    x, w, b = (_to_gpu(a, numpy.float16) for a in case.arrays(numpy.random.default_rng(33), numpy.float16))
    cupyconv._remember.FAST_FORWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    y = cupyconv.conv_transpose1d(x, w, b, **case.kwargs)
    for _ in range(2):  # recorded, then checked
        cupyconv.conv_transpose1d(x, w, b, **case.kwargs)
    (key,) = cupyconv._remember.FAST_FORWARD
    launched = _remember_spies(monkeypatch)
    settings_override(use_window_fill=not cupyconv.settings.current().use_window_fill)
    other = cupyconv.conv_transpose1d(x, w, b, **case.kwargs)
    assert launched and key not in cupyconv._remember.FAST_FORWARD
    assert cupy.allclose(other.astype(numpy.float32), y.astype(numpy.float32), rtol=2e-2, atol=2e-2)
    for _ in range(2):
        assert cupy.array_equal(cupyconv.conv_transpose1d(x, w, b, **case.kwargs), other)
    assert isinstance(cupyconv._remember.FAST_FORWARD.get(key), _remember._Replay)
    count = len(launched)
    assert cupy.array_equal(cupyconv.conv_transpose1d(x, w, b, **case.kwargs), other) and len(launched) == count


def test_remembered_calls_under_autotuning(monkeypatch, tmp_path):
    """With autotuning on, the first call of a signature tunes its tiles, the
    second records the tuned launches and the third checks them; from the
    fourth the call replays them (forward and backward), in poisoned memory
    bitwise the checked path's.  Turning autotuning off forgets the
    recordings."""
    from cupyconv import _autotune, _remember

    monkeypatch.setenv("CUPYCONV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_autotune, "_enabled", True)
    case = next(c for c in REMEMBERED_CASES if c.name == "rem_p4")
    rng = numpy.random.default_rng(34)
    x, w, b = (_to_gpu(a, numpy.float16) for a in case.arrays(rng, numpy.float16))
    cupyconv._remember.FAST_FORWARD.clear()
    cupyconv._remember.FAST_BACKWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    ys = [cupyconv.conv_transpose1d(x, w, b, **case.kwargs) for _ in range(3)]
    gy = cupy.asarray(rng.standard_normal(ys[0].shape), dtype=numpy.float16)
    grads = [cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs) for _ in range(3)]
    (forward_key,), (backward_key,) = cupyconv._remember.FAST_FORWARD, cupyconv._remember.FAST_BACKWARD
    for table, key in ((cupyconv._remember.FAST_FORWARD, forward_key), (cupyconv._remember.FAST_BACKWARD, backward_key)):
        assert isinstance(table[key], _remember._Replay) and table[key].autotune
    answered = _fast_calls(monkeypatch, _remember._Replay)
    with poisoned_allocations():
        y = cupyconv.conv_transpose1d(x, w, b, **case.kwargs)
        g = cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs)
        cupy.cuda.get_current_stream().synchronize()
    assert answered == [True, True]
    assert all(cupy.array_equal(y, other) for other in ys) and all(_grads_equal(g, other) for other in grads)
    monkeypatch.setattr(_autotune, "_enabled", False)
    cupyconv.conv_transpose1d(x, w, b, **case.kwargs)
    cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs)
    assert answered == [True, True, False, False]
    assert forward_key not in cupyconv._remember.FAST_FORWARD and backward_key not in cupyconv._remember.FAST_BACKWARD


# every case and mode with the whole mask; partial masks on three cases in
# every dtype's first mode (float32 "highest", float64, float16, bfloat16)
REMEMBER_BACKWARD_PARAMS = [(c, m, (True, True, True)) for c in REMEMBERED_CASES for m in MODES] + [
    (c, m, mask)
    for c in REMEMBERED_CASES if c.name in ("rem_p2", "rem_x2", "rem_p4")
    for m in MODES if m[1] == "highest"
    for mask in ((True, False, False), (False, True, True))
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "mode", "mask"), REMEMBER_BACKWARD_PARAMS, ids=[f"{c}-{'-'.join(m)}-{''.join('1' if e else '0' for e in k)}" for c, m, k in REMEMBER_BACKWARD_PARAMS]
)
def test_remembered_backward_replays_routes(case, mode, mask, monkeypatch):
    """As test_remembered_forward_replays_routes for the backward pass: the
    fourth call of a signature replays the recording of the second, checked
    on the third; on fresh inputs, in poisoned memory, on two streams, its
    gradients (None where masked) are bitwise the checked path's."""
    from cupyconv import _remember

    dtype_name, precision = mode
    dtype = numpy_dtype(dtype_name)
    fn = _ops(case).backward

    def inputs(seed):
        rng = numpy.random.default_rng(seed)
        x, w, _ = case.arrays(rng, dtype)
        gy = rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape)
        return _to_gpu(gy, dtype), _to_gpu(x, dtype), _to_gpu(w, dtype)

    gy, x, w = inputs(34)
    launched = _remember_spies(monkeypatch)
    cupyconv._remember.FAST_BACKWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    first = fn(gy, x, w, **case.kwargs, output_mask=mask, precision=precision)
    assert [g is not None for g in first] == list(mask)
    names = list(launched)
    for _ in range(2):
        assert _grads_equal(fn(gy, x, w, **case.kwargs, output_mask=mask, precision=precision), first)
    assert launched == names * 3
    (key,) = cupyconv._remember.FAST_BACKWARD
    assert isinstance(cupyconv._remember.FAST_BACKWARD[key], _remember._Replay)
    del launched[:]
    gy2, x2, w2 = inputs(35)
    with poisoned_allocations():
        replayed = fn(gy2, x2, w2, **case.kwargs, output_mask=mask, precision=precision)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            on_stream = fn(gy2, x2, w2, **case.kwargs, output_mask=mask, precision=precision)
        stream.synchronize()
    assert not launched  # replayed: no launch went through _launch
    cupyconv._remember.FAST_BACKWARD.pop(key)
    with poisoned_allocations():
        checked = fn(gy2, x2, w2, **case.kwargs, output_mask=mask, precision=precision)
    assert launched == names and not cupyconv._remember.FAST_BACKWARD
    assert isinstance(replayed, tuple) and len(replayed) == 3
    for r, c, f in zip(replayed, checked, first):
        if c is not None:
            assert r.shape == c.shape == f.shape and r.dtype == c.dtype
            assert not bool(cupy.isnan(c.astype(numpy.float32)).any())
            assert not cupy.array_equal(c, f)  # fresh inputs, a fresh result
    assert _grads_equal(replayed, checked) and _grads_equal(on_stream, checked)


def test_remembered_backward_keys(monkeypatch, settings_override):
    """A backward call is remembered under its arrays' shapes, strides and
    dtypes, its arguments and its output_mask: another mask, a strided input
    or a mask that is not bools takes the checked path; the torch adapter's
    calls (outputs given) are never remembered."""
    from cupyconv import _remember

    case = next(c for c in REMEMBERED_CASES if c.name == "rem_p4")
    rng = numpy.random.default_rng(36)
    x, w, _ = (_to_gpu(a, numpy.float32) for a in case.arrays(rng, numpy.float32))
    gy = cupy.asarray(rng.standard_normal(cupyconv.conv_transpose1d(x, w, **case.kwargs).shape), dtype=numpy.float32)
    cupyconv._remember.FAST_BACKWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    grads = cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs)
    for _ in range(2):  # recorded, then checked
        cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs)
    (key,) = cupyconv._remember.FAST_BACKWARD
    launched = _remember_spies(monkeypatch)
    settings_override(tiny_max_output=cupyconv.settings.current().tiny_max_output)  # a new setting: the recording is made again
    for _ in range(4):
        assert _grads_equal(cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs), grads)
    count = len(launched)  # three checked calls; the fourth replayed
    assert count and count % 3 == 0 and isinstance(cupyconv._remember.FAST_BACKWARD.get(key), _remember._Replay)
    assert _grads_equal(cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs), grads) and len(launched) == count
    # a mask of ints: checked every time (and not under the bools' key)
    for _ in range(4):
        assert _grads_equal(cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs, output_mask=(1, 1, 1)), grads)
    assert len(launched) == count + 4 * (count // 3) and list(cupyconv._remember.FAST_BACKWARD) == [key]
    # a strided grad_output of the same shape: its own key, copied on the checked path
    wide = cupy.empty(gy.shape[:-1] + (2 * gy.shape[-1],), dtype=gy.dtype)
    wide[..., ::2] = gy
    for _ in range(4):
        assert _grads_equal(cupyconv.conv_transpose1d_backward(wide[..., ::2], x, w, **case.kwargs), grads)
    assert list(cupyconv._remember.FAST_BACKWARD) == [key]
    # another mask: its own recording
    for _ in range(4):
        g = cupyconv.conv_transpose1d_backward(gy, x, w, **case.kwargs, output_mask=(False, False, True))
        assert g[0] is None and g[1] is None and cupy.array_equal(g[2], grads[2])
    assert len(cupyconv._remember.FAST_BACKWARD) == 2
