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

from . import _autotune, _chunks, _geometry, _remember, settings
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
from ._plan import Device, Plan, Problem, Step, Sub, Table
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


def forward(x, weight, bias, geometry: Geometry, precision: str, out=None, fast_key=None, remember_small=None, remember_into=None):
    """conv_transpose on CuPy arrays; returns the output in the user's shape
    (written into `out` when given).  The kernel is the first family of the
    registry's forward list that takes the problem (python -m cupyconv
    explain shows which and why).  A call with `fast_key` may be remembered
    (_remember.FAST_FORWARD, or with `out` into `remember_into`: the torch
    adapter's table, whose replays launch into its tensors); one into `out`
    that runs as one small launch on the arrays as given hands
    `remember_small` its _FastForward."""
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
        remember = s.use_remembered_forward and fast_key is not None and (out is None or remember_into is not None)
        if remember and all(a is b for a, b in zip((x, weight, bias), given)):  # no copies were made
            table = _remember.FAST_FORWARD if out is None else remember_into
            _remember.remember(fast_key, table, lambda: (_run_pass(p, arrays), (y,))[1], (x, weight, bias))
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
    for k, buffer in enumerate(plan.buffers):
        bound[f"t{k}"] = cupy.empty(buffer.shape, dtype=buffer.dtype)
    for step in plan.steps:
        if isinstance(step, Sub):
            _run_pass(step.problem, {mine: bound[theirs] for mine, theirs in step.roles})
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


