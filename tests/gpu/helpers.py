"""What the GPU tests (tests/gpu/test_*.py) share.  They run the CUDA kernels
on CuPy arrays, against a float64 oracle (the NumPy reference on the same,
already rounded, inputs).

Skipped where there is no GPU; with CUPYCONV_REQUIRE_GPU=1 (the device script
sets it) a missing GPU fails instead of skipping.  Every allocation made
during a call is filled with 0xFF bytes first, a NaN in every dtype, so an
output element no kernel writes fails the test.

Tolerances: float32 "highest" stays under 1e-5 relative (Frobenius) error;
every mode stays within twice torch's own error on the same inputs, in the
same dtype and TF32 setting, and is never asked to beat one unit roundoff of
its dtype (the error of a correctly rounded result).  With precision "tf32"
the yardstick is the larger of torch's error and that of an ideal TF32
computation (oracle.ideal_tf32_errors): cuDNN runs small problems in plain
float32 even when TF32 is allowed.

Each test module holds the tests of one kernel family or of a few related
ones (test_conv_window.py, test_taps.py, ...; test_forward.py and
test_backward.py sweep every case through the default routes), forcing its
families through the public settings (the settings_override fixture of
tests/conftest.py: cupyconv.settings.override, observe_plans and
observe_launches).  This module holds what more than one of them uses:
check_forward, check_backward and check_backward_deterministic (the checks
of those two sweeps, which the family tests run on the families they force),
poisoned memory, the spies on the passes a family ran, and the cases and
modes they share.

Test modules import it as a plain module (``from helpers import ...``), as
they import gpu_available, oracle and sweep from tests/: without __init__.py
files pytest puts each test module's folder on sys.path and imports it by its
base name, so a module here must not share a name with one in tests/
(test_phases.py, test_remember.py, test_autotune.py, ...).
"""

from __future__ import annotations

import collections
import contextlib

import numpy
from gpu_available import cupy
from oracle import (
    MODES,
    check_accuracy,
    exact_backward,
    exact_forward,
    ideal_tf32_errors,
    numpy_dtype,
)
from sweep import Case, relative_error

import cupyconv
import cupyconv.settings
from cupyconv import reference

try:
    import torch

    HAVE_TORCH_CUDA = torch.cuda.is_available()
except Exception:
    torch, HAVE_TORCH_CUDA = None, False


Ops = collections.namedtuple("Ops", "forward backward ref_forward ref_backward")


# GPU-only cases, large enough that the split reductions cut every channel
# into several splits and each thread walks several positions across rows.
LARGE_CASES = [
    Case("1d_dw_long", 1, 3, 8, 16, (4,), (700,), stride=2, padding=1, groups=8),
    Case("2d_dw_large", 2, 2, 6, 6, (3, 3), (40, 50), stride=2, padding=1, dilation=(1, 2), groups=6),
    Case("1d_grouped_long", 1, 2, 24, 48, (5,), (900,), stride=3, padding=2, groups=3),
]


def _ops(case) -> Ops:
    """cupyconv's and the reference's functions for the case's dimensionality."""
    if case.dims == 1:
        return Ops(cupyconv.conv_transpose1d, cupyconv.conv_transpose1d_backward, reference.conv_transpose1d, reference.conv_transpose1d_backward)
    return Ops(cupyconv.conv_transpose2d, cupyconv.conv_transpose2d_backward, reference.conv_transpose2d, reference.conv_transpose2d_backward)


@contextlib.contextmanager
def poisoned_allocations():
    """Route CuPy allocations through a pool whose blocks are filled with
    0xFF bytes (NaN in every float dtype) on the current stream."""
    pool = cupy.cuda.MemoryPool()

    def malloc(size):
        memory = pool.malloc(size)
        if size:
            cupy.cuda.runtime.memsetAsync(memory.ptr, 0xFF, size, cupy.cuda.get_current_stream().ptr)
        return memory

    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(malloc)
    try:
        yield
    finally:
        cupy.cuda.set_allocator(previous)


def _to_gpu(array, dtype):
    return None if array is None else cupy.asarray(array.astype(dtype))


def _torch_error(case, dtype_name, precision, x, w, b, oracle):
    """torch's own relative error on these inputs (cuDNN, same dtype and TF32 setting)."""
    if not HAVE_TORCH_CUDA:
        return 0.0
    tdtype = getattr(torch, dtype_name)
    t = lambda a: None if a is None else torch.from_numpy(a).to("cuda", tdtype)  # noqa: E731
    fn = torch.nn.functional.conv_transpose1d if case.dims == 1 else torch.nn.functional.conv_transpose2d
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        y = fn(t(x), t(w), t(b), **case.kwargs)
    finally:
        torch.backends.cudnn.allow_tf32 = previous
    return relative_error(y.double().cpu().numpy(), oracle)


def _tf32_errors(case, x, w, b, gy=None):
    """ideal_tf32_errors, with a stand-in grad_output for forward-only use."""
    if gy is None:
        gy = numpy.ones(exact_forward(case, x, w, b).shape)
    return ideal_tf32_errors(case, x, w, b, gy)


def _check(actual, oracle, dtype_name, precision, torch_error, what):
    assert isinstance(actual, cupy.ndarray), what
    assert actual.dtype == numpy_dtype(dtype_name) and actual.shape == oracle.shape, what
    check_accuracy(cupy.asnumpy(actual).astype(numpy.float64), oracle, dtype_name, precision, torch_error, what)


def check_forward(case, mode):
    """The forward pass of `case` in `mode` (dtype name, precision) against
    float64, in poisoned memory, with the tolerances above."""
    dtype_name, precision = mode
    dtype = numpy_dtype(dtype_name)
    rng = numpy.random.default_rng(20)
    x, w, b = case.arrays(rng, dtype)
    oracle = exact_forward(case, x, w, b)
    fn = _ops(case).forward
    with poisoned_allocations():
        y = fn(_to_gpu(x, dtype), _to_gpu(w, dtype), _to_gpu(b, dtype), **case.kwargs, precision=precision)
        cupy.cuda.get_current_stream().synchronize()
    reference_error = _torch_error(case, dtype_name, precision, x, w, b, oracle)
    if precision == "tf32":
        reference_error = max(reference_error, _tf32_errors(case, x, w, b)[0])
    _check(y, oracle, dtype_name, precision, reference_error, "output")


def _torch_backward_errors(case, dtype_name, precision, x, w, gy, oracles):
    if not HAVE_TORCH_CUDA:
        return (0.0, 0.0, 0.0)
    tdtype = getattr(torch, dtype_name)
    xt = torch.from_numpy(x).to("cuda", tdtype).requires_grad_()
    wt = torch.from_numpy(w).to("cuda", tdtype).requires_grad_()
    bt = torch.zeros(case.out_channels, device="cuda", dtype=tdtype, requires_grad=True)
    fn = torch.nn.functional.conv_transpose1d if case.dims == 1 else torch.nn.functional.conv_transpose2d
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        y = fn(xt, wt, bt, **case.kwargs)
        grads = torch.autograd.grad(y, (xt, wt, bt), torch.from_numpy(gy).to("cuda", tdtype))
    finally:
        torch.backends.cudnn.allow_tf32 = previous
    return tuple(relative_error(g.double().cpu().numpy(), o) for g, o in zip(grads, oracles))


def check_backward(case, mode):
    """The three gradients of `case` in `mode` against float64, in poisoned
    memory, with the tolerances above."""
    dtype_name, precision = mode
    dtype = numpy_dtype(dtype_name)
    rng = numpy.random.default_rng(21)
    x, w, _ = case.arrays(rng, dtype)
    out_shape = _ops(case).ref_forward(x, w, **case.kwargs).shape
    gy = rng.standard_normal(out_shape).astype(dtype).astype(numpy.float64)
    oracles = exact_backward(case, gy, x, w)
    torch_errors = _torch_backward_errors(case, dtype_name, precision, x, w, gy, oracles)
    backward = _ops(case).backward
    with poisoned_allocations():
        grads = backward(_to_gpu(gy, dtype), _to_gpu(x, dtype), _to_gpu(w, dtype), **case.kwargs, precision=precision)
        cupy.cuda.get_current_stream().synchronize()
    if precision == "tf32":
        torch_errors = [max(e, t) for e, t in zip(torch_errors, _tf32_errors(case, x, w, None, gy)[1:])]
    for name, grad, oracle, torch_error in zip(("grad_input", "grad_weight", "grad_bias"), grads, oracles, torch_errors):
        _check(grad, oracle, dtype_name, precision, torch_error, name)


# The modes the tensor-core kernels run: float32 "highest" included, as 3xTF32
# where the kernel has it (conv_window, grad_input_taps, grad_weight_taps).
TENSOR_CORE_MODES = [m for m in MODES if m[0] != "float64"]


def _no_direct(override):
    """Keep conv_direct, grouped_forward, conv_window's fill and conv_tiny
    off, so that the forward pass of a case with few products per output
    reaches the kernel a test is after (`override`: the settings_override
    fixture)."""
    override(
        direct_max_products_tensor_cores=-1, direct_max_products_cuda_cores=-1, direct_max_products_full_rows=-1,
        use_grouped_forward=False, use_window_fill=False, tiny_max_output=0,
    )  # fmt: skip


def _lift(override, name):
    """The settings under which _cuda.<name> (conv_window's or
    grad_weight_window's dispatcher, ...) runs on small problems too."""
    override(window_min_output=0, window_min_columns=0)
    override(tf32x3_min_products=0)  # float32 "highest": their 3xTF32 on short sums too
    override(use_fold=name == "_fold")  # routed ahead of the window kernels (stride 8, 16-bit)
    override(use_grad_input_overlap=False)  # routed ahead of grad_input_taps (stride 8, 16-bit and "tf32")
    override(use_grad_weight_overlap=False)  # routed ahead of grad_weight_taps (stride 8, 16-bit)
    _no_direct(override)


# The old dispatchers of _cuda by the plan families (Plan.family) they could run.
_DISPATCHER_FAMILIES = {
    "_window": ("conv_tf32_stream", "conv_wgmma_tf32", "conv_wgmma_split", "conv_wgmma_resident", "conv_wgmma", "conv_wgmma_x3", "conv_window"),
    "_wgmma": ("conv_wgmma",),
    "_resident": ("conv_wgmma_split", "conv_wgmma_resident"),
    "_wgmma_x3": ("conv_wgmma_x3",),
    "_conv_tf32": ("conv_wgmma_tf32",),
    "_conv_tf32_stream": ("conv_tf32_stream",),
    "_grad_input_overlap": ("grad_input_overlap", "grad_input_multicast"),
    "_grad_weight_overlap": ("grad_weight_overlap", "grad_weight_multicast"),
    "_grad_weight_tf32": ("grad_weight_wgmma_tf32", "grad_weight_wgmma_tf32 (3xTF32)"),
    "_window_fill": ("conv_window_fill",),
}


def _families(name) -> tuple:
    """The plan families the old dispatcher `name` ran (others: the family of its name)."""
    return _DISPATCHER_FAMILIES.get(name, (name.lstrip("_"),))


class _Served:
    """A live view of an observe_plans() list: record(problem, plan) for each
    pass it observed (autotuner timings, whose problem is None, left out) that
    keep(problem, plan) takes, read afresh each time; behaves as a list
    (in, ==, len, indexing, iteration) and clear() forgets what came before."""

    def __init__(self, observed, keep, record):
        self._observed, self._keep, self._record, self._start = observed, keep, record, 0

    def _items(self) -> list:
        return [self._record(p, plan) for p, plan in self._observed[self._start :] if p is not None and self._keep(p, plan)]

    def clear(self) -> None:
        self._start = len(self._observed)

    def __iter__(self):
        return iter(self._items())

    def __len__(self):
        return len(self._items())

    def __getitem__(self, index):
        return self._items()[index]

    def __contains__(self, item):
        return item in self._items()

    def __eq__(self, other):
        return self._items() == list(other)

    def __bool__(self):
        return bool(self._items())

    def __repr__(self):
        return repr(self._items())


def _served(override, families, record=lambda p, plan: p.op) -> _Served:
    """record(problem, plan) for the passes the plan families `families` ran from here on."""
    return _Served(override.observe_plans(), lambda p, plan: plan.family in families, record)


def _spy(override, name, record):
    """Run the old dispatcher <name>'s families (conv_window's or
    grad_weight_window's, ...: _families) on small problems too (_lift);
    returns a list of record(problem) for the passes they served."""
    _lift(override, name)
    return _served(override, _families(name), lambda p, plan: record(p))


def _is_hopper() -> bool:
    from cupyconv import _cuda

    return _cuda._compute_capability() == 90


def _force_tile(override, family, tile):
    """Make `family` run with `tile` where it is one of its tiles
    (settings.tile; forward passes off the remembered small launch, which
    takes the heuristic tile); returns the list of times it did (observe_plans)."""
    override(tile=(family, tile))
    override(small_forward_max_output=0)
    if family != "conv_direct":
        _no_direct(override)
    return _Served(override.observe_plans(), lambda p, plan: plan.family == family and plan.tile in (tile, (tile, "fill")), lambda p, plan: tile)


_ON_HOPPER_ONLY = "the wgmma kernels run on compute capability 9.0 only"


def _fill_key(p, plan) -> tuple:
    """(family, pass, index type, "fill" or None) of a pass conv_wgmma_resident or conv_window ran."""
    names = [step.launch.name for step in plan.steps if hasattr(step, "launch")]
    index = "long long" if any("long long" in name for name in names) else "int"
    fill = plan.family == "conv_window_fill" or (isinstance(plan.tile, tuple) and plan.tile[-1:] == ("fill",))
    return (plan.family, p.op, index, "fill" if fill else None)


def _spy_fill(override, family="conv_wgmma_resident"):
    """_fill_key of each pass `family` (with "conv_window": its fill build
    too) ran: ending in "fill" where its fill ran."""
    families = ("conv_window", "conv_window_fill") if family == "conv_window" else (family,)
    return _served(override, families, _fill_key)


FLOAT32_MODES = [("float32", "highest"), ("float32", "tf32")]


def _check_float32_grad_weight_repeats(case, precision):
    """float32 grad_weight alone (output_mask) in `precision`: the same bits on
    six runs."""
    rng = numpy.random.default_rng(23)
    x, w, _ = case.arrays(rng, numpy.float32)
    gy = cupy.asarray(rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(numpy.float32))
    xg, wg = cupy.asarray(x.astype(numpy.float32)), cupy.asarray(w.astype(numpy.float32))
    run = lambda: cupy.asnumpy(_ops(case).backward(gy, xg, wg, **case.kwargs, output_mask=(False, True, False), precision=precision)[1])  # noqa: E731
    first = run()
    for _ in range(5):
        assert run().tobytes() == first.tobytes()


def _check_phase_routing(override, dispatcher, output_mask, shapes, seed):
    """Each (case, expected) of `shapes` runs the backward pass (output_mask)
    in both float32 tensor-core modes and float16 at the default size rule;
    _cuda.<dispatcher> must serve it exactly where expected in float32."""
    ran = _spy(override, dispatcher, lambda p: p.geometry)
    override(window_min_output=cupyconv.settings.current().pack_min_output)  # the default size rule (_spy lowers it)
    override(window_min_columns=cupyconv.settings.Settings().window_min_columns)
    rng = numpy.random.default_rng(seed)
    for case, expected in shapes:
        x, w, _ = case.arrays(rng, numpy.float32)
        gy = rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape)
        for dtype, precision in FLOAT32_MODES + [("float16", "highest")]:
            ran.clear()
            dt = numpy_dtype(dtype)
            _ops(case).backward(cupy.asarray(gy.astype(dt)), cupy.asarray(x.astype(dt)), cupy.asarray(w.astype(dt)), **case.kwargs,
                                output_mask=output_mask, precision=precision)  # fmt: skip
            wanted = expected if isinstance(expected, bool) else precision in expected  # or the precisions routed
            assert bool(ran) == (wanted and dtype == "float32"), (case.name, dtype, precision)


_PHASE_P1 = Case("p1", 1, 2, 32, 64, (5,), (2048,), dilation=3)
_PHASE_P4 = Case("p4", 1, 2, 32, 64, (3,), (2048,), stride=2, padding=1, dilation=2)
_PHASE_S2_D3 = Case("s2_d3", 1, 2, 32, 64, (3,), (2048,), stride=2, padding=1, dilation=3)
_PHASE_P2 = Case("p2", 1, 2, 128, 128, (3,), (1024,), padding=1)


def check_backward_deterministic(case, mode):
    """The backward pass of `case` in `mode`: the same bits on six runs."""
    rng = numpy.random.default_rng(23)
    dtype = numpy_dtype(mode[0])
    x, w, _ = case.arrays(rng, dtype)
    out_shape = _ops(case).ref_forward(x, w, **case.kwargs).shape
    gy = cupy.asarray(rng.standard_normal(out_shape).astype(dtype))
    xg, wg = cupy.asarray(x.astype(dtype)), cupy.asarray(w.astype(dtype))
    backward = _ops(case).backward
    first = [cupy.asnumpy(g) for g in backward(gy, xg, wg, **case.kwargs)]
    for _ in range(5):
        again = [cupy.asnumpy(g) for g in backward(gy, xg, wg, **case.kwargs)]
        for a, b in zip(first, again):
            assert a.tobytes() == b.tobytes()


def _fast_calls(monkeypatch, remembered=None):
    """Whether each call of a remembered call (`remembered`, by default
    _cuda._FastForward: the small launches of cupyconv._remember.FAST_FORWARD) answered."""
    from cupyconv import _cuda

    remembered = remembered or _cuda._FastForward
    answered, original = [], remembered.__call__

    def spy(self, *arrays):
        y = original(self, *arrays)
        answered.append(y is not None)
        return y

    monkeypatch.setattr(remembered, "__call__", spy)
    return answered


def _grads_equal(a, b) -> bool:
    return all((x is None) == (y is None) and (x is None or bool(cupy.array_equal(x, y))) for x, y in zip(a, b))


OVERLAP_MODES = [("float16", "highest"), ("bfloat16", "highest"), ("float32", "tf32")]


def _spy_launches(monkeypatch, override, multiprocessors=None):
    """(name, blocks) of each launch from here on, with the device's
    multiprocessor count taken as `multiprocessors` where given.  (A spy on
    _launch: observe_launches gives names only.)"""
    from cupyconv import _cuda

    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    ran, launch = [], _cuda._launch
    monkeypatch.setattr(_cuda, "_launch", lambda plan, arrays: (ran.append((plan.name, plan.blocks)), launch(plan, arrays))[1])
    return ran
