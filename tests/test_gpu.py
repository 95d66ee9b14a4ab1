"""The CUDA kernels on CuPy arrays, against a float64 oracle (the NumPy
reference on the same, already rounded, inputs).

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
"""

from __future__ import annotations

import collections
import contextlib
import functools

import numpy
import pytest
from gpu_available import HAVE_GPU, cupy
from oracle import (
    MODES,
    check_accuracy,
    exact_backward,
    exact_forward,
    ideal_tf32_errors,
    numpy_dtype,
)
from sweep import (
    CASES,
    FILL_CASES,
    FOLD_CASES,
    GRAD_INPUT_TAPS_CASES,
    GRAD_WEIGHT_PHASE_CASES,
    GRAD_WEIGHT_TAPS_CASES,
    GRAD_WEIGHT_TF32_CASES,
    GRAD_WEIGHT_WINDOW_CASES,
    GROUPED_BACKWARD_CASES,
    GROUPED_FORWARD_CASES,
    PHASE_BACKWARD_CASES,
    WINDOW_CASES,
    Case,
    relative_error,
)

import cupyconv
import cupyconv.settings
from cupyconv import _geometry, _kernels, reference

if HAVE_GPU:
    import cupyconv._remember  # (cupyconv._remember.FAST_FORWARD below: the remembered calls' tables)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")]

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


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward(case, mode):
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


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", CASES + LARGE_CASES, ids=str)
def test_backward(case, mode):
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


PACKED_CASES = [c for c in CASES + LARGE_CASES if c.name in ("1d_vocoder", "2d_groups_dilation", "1d_wide_channels", "2d_per_axis", "1d_grouped_long")]


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", PACKED_CASES, ids=str)
def test_packed_weight(case, mode, settings_override):
    """conv_gemm reading the packed weight copy (large problems do) on small ones."""
    settings_override(pack_min_output=0)
    _no_direct(settings_override)
    test_forward(case, mode)
    test_backward(case, mode)


def _tile_modes():
    """(mode, tile) for every tile the autotuner may pick: CUDA-core tiles in
    float32 "highest", tensor-core tiles in tf32 and float16."""
    for tile in _kernels.GEMM_TUNE_TILES:
        yield ("float32", "highest"), tile
    for tile in _kernels.MMA_TUNE_TILES:
        yield ("float32", "tf32"), tile
        yield ("float16", "highest"), tile


@pytest.mark.parametrize("mode, tile", list(_tile_modes()), ids=lambda v: "-".join(map(str, v)))
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_wide_channels", "2d_groups_dilation")], ids=str)
def test_every_tile(case, mode, tile, settings_override):
    """Each candidate the autotuner times gives correct results (wherever it applies)."""
    settings_override(float32_highest="simt")  # float32 "highest" tests the CUDA-core tiles
    _no_direct(settings_override)
    families = ("conv_mma", "conv_gemm", "grad_weight_mma", "grad_weight_partial")
    settings_override(small_forward_max_output=0, tile=tuple((name, tile) for name in families))
    served = settings_override.observe_plans()
    test_forward(case, mode)
    test_backward(case, mode)
    assert any(p.op == "forward" and plan.tile == tile for p, plan in served), [(p.op, plan.family, plan.tile) for p, plan in served]


@pytest.mark.parametrize("case", [c for c in CASES + LARGE_CASES if c.name in ("1d_wide_channels", "2d_wide_channels", "1d_grouped_long")], ids=str)
def test_float32_highest_as_3xtf32_in_conv_mma_and_grad_weight_mma(case, settings_override):
    """float32 "highest" on the general tensor-core kernels (conv_mma,
    grad_weight_mma), for the passes that sum enough products to take 3xTF32:
    under 1e-5 and within twice torch's error, like the CUDA-core kernels."""
    from cupyconv.kernels import rules

    served = settings_override.observe_plans()
    test_forward(case, ("float32", "highest"))
    test_backward(case, ("float32", "highest"))
    taken = [(p.op, plan.family, rules._problem_passes(p)) for p, plan in served if p.op in ("forward", "grad_input", "grad_weight")]
    assert any(family in ("conv_mma", "grad_weight_mma") and passes == 3 for _, family, passes in taken), taken


@pytest.mark.parametrize("tile", _kernels.MMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", [c for c in CASES + LARGE_CASES if c.name in ("1d_wide_channels", "1d_grouped_long")], ids=str)
def test_every_3xtf32_tile(case, tile, settings_override):
    """conv_mma's and grad_weight_mma's 3xTF32 with each of their tiles
    (1d_wide_channels: forward and grad_input; 1d_grouped_long: grad_weight)."""
    from cupyconv.kernels import rules

    settings_override(small_forward_max_output=0, tile=(("conv_mma", tile), ("grad_weight_mma", tile)))
    served = settings_override.observe_plans()
    test_forward(case, ("float32", "highest"))
    test_backward(case, ("float32", "highest"))
    assert any(
        plan.family in ("conv_mma", "grad_weight_mma") and plan.tile == tile and rules._problem_passes(p) == 3 for p, plan in served
    ), [(p.op, plan.family, plan.tile) for p, plan in served]


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
    override(window_min_output=0)
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


def _spy(monkeypatch, override, name, record):
    """Run the old dispatcher <name>'s families (conv_window's or
    grad_weight_window's, ...: _families) on small problems too (_lift);
    returns a list of record(problem) for the passes they served."""
    _lift(override, name)
    return _served(override, _families(name), lambda p, plan: record(p))


def _spy_window(monkeypatch, override):
    """The passes (forward, grad_input) conv_window ran (conv_wgmma and
    conv_wgmma_x3 kept off, so that on Hopper too every mode reaches conv_window; and
    grad_input_phase off at stride 1, where it is routed ahead of both)."""
    override(use_wgmma=False)
    override(use_wgmma_x3=False)
    override(grad_input_phase_stride_one=False)
    return _spy(monkeypatch, override, "_window", lambda p: p.op)


def _is_hopper() -> bool:
    from cupyconv import _cuda

    return _cuda._compute_capability() == 90


def _spy_wgmma(monkeypatch, override):
    """The passes (forward, grad_input) conv_wgmma ran (wherever it fits, not
    only where its routing rule sends it; conv_wgmma_resident, conv_wgmma_tf32
    and, at stride 1, grad_input_phase off)."""
    override(use_resident=False)
    override(use_conv_tf32=False)
    override(grad_input_phase_stride_one=False)
    override(wgmma_max_rows=1 << 30)
    override(wgmma_min_taps=0)
    return _spy(monkeypatch, override, "_wgmma", lambda p: p.op)


def _spy_resident(monkeypatch, override, multiprocessors=None):
    """The passes (forward, grad_input) conv_wgmma_resident ran (wherever it
    fits; conv_wgmma_tf32, routed ahead of it in "tf32", kept off).  With
    `multiprocessors`, its grid is sized for that many, so that each block
    works through many (image, column tile) items.  float32
    grad_input at stride 1 stays off grad_input_phase, which is routed ahead
    of it where one tile of input channels covers a group.  conv_wgmma_split,
    routed ahead of it in 16-bit, is kept off (_spy_split turns it on)."""
    override(use_resident=True)
    override(use_resident_anywhere=True)
    override(use_split=False)
    override(use_conv_tf32=False)
    override(grad_input_phase_stride_one=False)
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _spy(monkeypatch, override, "_resident", lambda p: p.op)


def _force_tile(monkeypatch, override, family, tile):
    """Make `family` run with `tile` where it is one of its tiles
    (settings.tile; forward passes off the remembered small launch, which
    takes the heuristic tile); returns the list of times it did (observe_plans)."""
    override(tile=(family, tile))
    override(small_forward_max_output=0)
    if family != "conv_direct":
        _no_direct(override)
    return _Served(override.observe_plans(), lambda p, plan: plan.family == family and plan.tile in (tile, (tile, "fill")), lambda p, plan: tile)


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", WINDOW_CASES + [c for c in CASES if c.name in ("1d_vocoder", "1d_fold_s4_p6")], ids=str)
def test_window_kernel(case, mode, monkeypatch, settings_override):
    """conv_window's forward pass and grad_input, where it applies."""
    ran = _spy_window(monkeypatch, settings_override)
    test_forward(case, mode)
    test_backward(case, mode)
    if case in WINDOW_CASES:
        assert "forward" in ran, "conv_window did not run the forward pass"


@pytest.mark.parametrize("tile", _kernels.WINDOW_TUNE_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "highest"), ("float32", "tf32"), ("bfloat16", "highest")], ids=["float32", "tf32", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_s1_d3", "1d_win_fold8", "1d_win_fold32")], ids=str)
def test_every_window_tile(case, mode, tile, monkeypatch, settings_override):
    ran, picked = _spy_window(monkeypatch, settings_override), _force_tile(monkeypatch, settings_override, "conv_window", tile)
    test_forward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_fold8", "1d_win_s2_d2")], ids=str)
def test_window_64_bit_index(case, monkeypatch, settings_override):
    ran = _spy_window(monkeypatch, settings_override)
    settings_override(index_type="long long")
    test_forward(case, ("float16", "highest"))
    assert ran


# The wgmma kernels run the modes with one product per pair (not float32
# "highest").  Each test below runs for both: conv_wgmma (wherever it fits)
# and conv_wgmma_resident (wherever it fits; with a grid sized for 2
# multiprocessors in the tile and index tests, so that blocks take several
# items).
WGMMA_MODES = [m for m in TENSOR_CORE_MODES if m != ("float32", "highest")]
WGMMA_KERNELS = ["conv_wgmma", "conv_wgmma_resident"]
_ON_HOPPER_ONLY = "the wgmma kernels run on compute capability 9.0 only"


def _spy_wgmma_kernel(monkeypatch, override, kernel, multiprocessors=None):
    return _spy_resident(monkeypatch, override, multiprocessors) if kernel == "conv_wgmma_resident" else _spy_wgmma(monkeypatch, override)


@pytest.mark.parametrize("kernel", WGMMA_KERNELS)
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", WINDOW_CASES + [c for c in CASES if c.name in ("1d_vocoder", "1d_fold_s4_p6")], ids=str)
def test_wgmma_kernel(case, mode, kernel, monkeypatch, settings_override):
    """A wgmma kernel's forward pass and grad_input, where it applies."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_kernel(monkeypatch, settings_override, kernel)
    test_forward(case, mode)
    test_backward(case, mode)
    if case in WINDOW_CASES:
        assert "forward" in ran, f"{kernel} did not run the forward pass"


@pytest.mark.parametrize("kernel", WGMMA_KERNELS)
@pytest.mark.parametrize("tile", _kernels.WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_s1_d3", "1d_win_fold8", "1d_win_fold32")], ids=str)
def test_every_wgmma_tile(case, mode, tile, kernel, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran, picked = _spy_wgmma_kernel(monkeypatch, settings_override, kernel, 2), _force_tile(monkeypatch, settings_override, kernel, tile)
    test_forward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("kernel", WGMMA_KERNELS)
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_fold8", "1d_win_s2_d2")], ids=str)
def test_wgmma_64_bit_index(case, kernel, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_kernel(monkeypatch, settings_override, kernel, 2)
    settings_override(index_type="long long")
    test_forward(case, ("bfloat16", "highest"))
    assert ran


def _spy_wgmma_x3(monkeypatch, override):
    """The passes (forward, grad_input) conv_wgmma_x3 ran (wherever it fits,
    not only where its routing rule sends it; grad_input_phase off at stride 1)."""
    override(use_wgmma_x3=True)
    override(use_wgmma_x3_anywhere=True)
    override(grad_input_phase_stride_one=False)
    return _spy(monkeypatch, override, "_wgmma_x3", lambda p: p.op)


@pytest.mark.parametrize("case", WINDOW_CASES + [c for c in CASES if c.name in ("1d_vocoder", "1d_fold_s4_p6")], ids=str)
def test_wgmma_x3_kernel(case, monkeypatch, settings_override):
    """conv_wgmma_x3 (float32 "highest" as 3xTF32 on wgmma): the forward pass
    and grad_input, where it applies, under 1e-5 and within twice torch's
    error against float64, in poisoned memory."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_x3(monkeypatch, settings_override)
    test_forward(case, ("float32", "highest"))
    test_backward(case, ("float32", "highest"))
    if case in WINDOW_CASES:
        assert "forward" in ran, "conv_wgmma_x3 did not run the forward pass"


@pytest.mark.parametrize("tile", _kernels.WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_s1_d3", "1d_win_fold8", "1d_win_fold32")], ids=str)
def test_every_wgmma_x3_tile(case, tile, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran, picked = _spy_wgmma_x3(monkeypatch, settings_override), _force_tile(monkeypatch, settings_override, "conv_wgmma_x3", tile)
    test_forward(case, ("float32", "highest"))
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("case", [c for c in WINDOW_CASES if c.name in ("1d_win_fold8", "1d_win_s2_d2")], ids=str)
def test_wgmma_x3_64_bit_index(case, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_x3(monkeypatch, settings_override)
    settings_override(index_type="long long")
    test_forward(case, ("float32", "highest"))
    assert ran


# Longer rows and more images than WINDOW_CASES: tens of (image, column tile)
# items, some phases' last tiles ragged, a bias-only phase (stride 2,
# dilation 2), groups; and stride-1 rows of 1034 outputs (2 more than a
# multiple of 8), whose whole tiles take the fast epilogue with every row
# alignment (64 and 128 output channels: both tiles).
_MANY_ITEMS_CASES = [
    Case("1d_res_s1_d3", 1, 3, 40, 72, (5,), (1000,), padding=2, dilation=3),
    Case("1d_res_s1_rows64", 1, 2, 64, 64, (3,), (1032,)),
    Case("1d_res_s1_rows128", 1, 2, 32, 128, (3,), (1032,)),
    Case("1d_res_fold8", 1, 5, 48, 40, (16,), (232,), stride=8, padding=4),
    Case("1d_res_s2_d2", 1, 4, 32, 36, (3,), (600,), stride=2, padding=1, dilation=2),
    Case("1d_res_g2", 1, 3, 64, 64, (5,), (520,), stride=2, padding=1, output_padding=1, groups=2),
]


@pytest.mark.parametrize("multiprocessors", [1, 3])
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", WINDOW_CASES + _MANY_ITEMS_CASES + FILL_CASES, ids=str)
def test_resident_many_items_per_block(case, mode, multiprocessors, monkeypatch, settings_override):
    """A grid far smaller than the work: each block runs the window pipeline
    across many items (and, with 3, items not in step between blocks)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_resident(monkeypatch, settings_override, multiprocessors)
    test_forward(case, mode)
    assert "forward" in ran


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


@pytest.mark.parametrize("tile", _kernels.WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", FILL_CASES + [c for c in WINDOW_CASES if c.name in ("1d_win_s2_d2", "1d_win_s2_d4_op3")], ids=str)
def test_resident_fill(case, mode, tile, monkeypatch, settings_override):
    """conv_wgmma_resident's fill (stride 2, dilation a multiple of it) on
    each tile, against float64 in poisoned memory: whole tiles of every row
    alignment, tiles cut by the rows' and the output's ends."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_resident(monkeypatch, settings_override, 3)
    picked = _force_tile(monkeypatch, settings_override, "conv_wgmma_resident", tile)
    keys = _spy_fill(settings_override)
    test_forward(case, mode)
    assert "forward" in ran and picked == [tile] and keys and keys[-1][-1] == "fill", (ran, picked, keys)


@pytest.mark.parametrize("case", [c for c in FILL_CASES if c.name in ("1d_fill_s2_d2", "1d_fill_g2_p0")], ids=str)
def test_resident_fill_64_bit_index(case, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran, keys = _spy_resident(monkeypatch, settings_override, 2), _spy_fill(settings_override)
    settings_override(index_type="long long")
    test_forward(case, ("float16", "highest"))
    assert "forward" in ran and keys[-1][-1] == "fill" and keys[-1][2] == "long long"


@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
def test_fill_not_routed_past_one_row_tile(mode, settings_override):
    """Where the fill applies but the output channels (256) exceed a row
    tile, the pass takes the routes it took before the fill (the dilated
    fold), no fill build, and is right."""
    ran = settings_override.observe_launches()
    dtype = numpy_dtype(mode[0])
    rng = numpy.random.default_rng(34)
    x = rng.standard_normal((1, 32, 4096)).astype(dtype)
    w = rng.standard_normal((32, 256, 3)).astype(dtype)
    kwargs = dict(stride=2, padding=1, dilation=2)
    y = cupyconv.conv_transpose1d(_to_gpu(x, dtype), _to_gpu(w, dtype), **kwargs, precision=mode[1])
    convolutions = [name for name in ran if not name.startswith("pack_")]  # pack_window_weight<..., true> rounds to TF32
    assert convolutions and not any(name.endswith(", true>") for name in convolutions), ran
    oracle = reference.conv_transpose1d(x.astype(numpy.float64), w.astype(numpy.float64), **kwargs)
    limit = {"float32": 2e-3, "float16": 2e-3, "bfloat16": 2e-2}[mode[0]]
    assert relative_error(cupy.asnumpy(y).astype(numpy.float64), oracle) < limit


@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
def test_resident_without_fill_folds(mode, monkeypatch, settings_override):
    """With use_fill off, the same problems take conv_wgmma_resident's
    folded route (the dilated kernel made dense), still right."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(use_fill=False)
    ran, keys = _spy_resident(monkeypatch, settings_override, 3), _spy_fill(settings_override)
    test_forward(FILL_CASES[0], mode)
    assert "forward" in ran and keys and all(key[-1] != "fill" for key in keys)


def _spy_window_fill(monkeypatch, override):
    """Run conv_window's fill on small problems too; returns the keys
    conv_window's tile choice was asked for (ending in "fill" where the
    fill ran)."""
    override(window_min_output=0)
    override(use_window_fill=True)
    return _spy_fill(override, "conv_window")


@pytest.mark.parametrize("tile", _kernels.WINDOW_TUNE_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", FILL_CASES + [c for c in WINDOW_CASES if c.name in ("1d_win_s2_d2", "1d_win_s2_d4_op3")], ids=str)
def test_window_fill(case, tile, monkeypatch, settings_override):
    """conv_window's fill (float32 "highest" as 3xTF32) on every tile,
    against float64 in poisoned memory (under 1e-5)."""
    picked = _force_tile(monkeypatch, settings_override, "conv_window_fill", tile)
    keys = _spy_window_fill(monkeypatch, settings_override)
    test_forward(case, ("float32", "highest"))
    assert picked == [tile] and keys and keys[-1][-1] == "fill", (picked, keys)


# conv_fold: on Hopper only; grids of one block (every tile in turn, across
# row tiles), of a few (blocks that start inside a row compute the tile
# before for its carry) and of one block a multiprocessor.
FOLD_MODES = [("float16", "highest"), ("bfloat16", "highest")]


def _spy_fold(override, blocks=None):
    """The names of the kernels launched from here on (observe_launches),
    conv_fold on small problems too (_lift) with a grid of `blocks` (None:
    one block a multiprocessor)."""
    override(fold_blocks=blocks)
    _lift(override, "_fold")
    return override.observe_launches()


def _folds(names) -> int:
    """How many of `names` are conv_fold's (one a forward pass it served)."""
    return sum(name.startswith("conv_fold<") for name in names)


@pytest.mark.parametrize("blocks", [None, 1, 3, 5])
@pytest.mark.parametrize("mode", FOLD_MODES, ids=["-".join(m) for m in FOLD_MODES])
@pytest.mark.parametrize("case", FOLD_CASES + [c for c in WINDOW_CASES if c.name == "1d_win_fold8"], ids=str)
def test_fold_kernel(case, mode, blocks, settings_override):
    """conv_fold's forward pass against float64 in poisoned memory."""
    if not _is_hopper():
        pytest.skip("conv_fold runs on compute capability 9.0 only")
    ran = _spy_fold(settings_override, blocks)
    test_forward(case, mode)
    assert _folds(ran) == 1, ("conv_fold did not run", ran)


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("mode", FOLD_MODES, ids=["-".join(m) for m in FOLD_MODES])
def test_fold_weight_as_given(mode, raw, settings_override):
    """Kernels of 16 taps: conv_fold reads the weight as given (no
    pack_fold_weight launch) or, with use_fold_raw_weight off, packed;
    ragged input and output channels."""
    if not _is_hopper():
        pytest.skip("conv_fold runs on compute capability 9.0 only")
    names = _spy_fold(settings_override, 3)
    settings_override(use_fold_raw_weight=raw)
    for case in FOLD_CASES[:2]:
        test_forward(case, mode)
    assert _folds(names) == 2, names
    assert sum(name.startswith("pack_fold_weight") for name in names) == (0 if raw else 2), names


def test_fold_unaligned_weight_is_packed(settings_override):
    """A weight 2 bytes off a 16-byte boundary goes through pack_fold_weight,
    and gives the aligned (as given) weight's output bit for bit."""
    if not _is_hopper():
        pytest.skip("conv_fold runs on compute capability 9.0 only")
    names = _spy_fold(settings_override, 5)
    case = FOLD_CASES[1]
    rng = numpy.random.default_rng(41)
    x, w, b = (_to_gpu(a, numpy.float16) for a in case.arrays(rng, numpy.float16))
    shifted = cupy.empty(w.size + 1, dtype=w.dtype)[1:].reshape(w.shape)
    shifted[...] = w
    assert shifted.data.ptr % 16 == 2 and shifted.flags.c_contiguous
    aligned = cupyconv.conv_transpose1d(x, w, b, **case.kwargs)
    packed = cupyconv.conv_transpose1d(x, shifted, b, **case.kwargs)
    assert _folds(names) == 2 and [n.startswith("pack_fold_weight") for n in names] == [False, True, False], names
    assert bool(cupy.array_equal(aligned.view(numpy.uint16), packed.view(numpy.uint16)))


def test_fold_64_bit_index(settings_override):
    if not _is_hopper():
        pytest.skip("conv_fold runs on compute capability 9.0 only")
    ran = _spy_fold(settings_override, 3)
    settings_override(index_type="long long")
    test_forward(FOLD_CASES[1], ("bfloat16", "highest"))
    assert _folds(ran), ran


def test_fold_rules_out(settings_override):
    """Rows that are not whole 16-byte vectors, float32, other strides and
    dilations keep the other kernels (and are right)."""
    cases = [
        Case("fold_odd_rows", 1, 2, 64, 16, (16,), (250,), stride=8, padding=4),
        Case("fold_s4", 1, 2, 64, 16, (8,), (256,), stride=4, padding=2),
        Case("fold_d2", 1, 2, 64, 16, (16,), (256,), stride=8, padding=4, dilation=2),
        Case("fold_k17", 1, 2, 64, 16, (17,), (256,), stride=8, padding=4),
    ]
    ran = _spy_fold(settings_override)
    for case, mode in [(c, ("float16", "highest")) for c in cases] + [(FOLD_CASES[0], ("float32", "tf32"))]:
        test_forward(case, mode)
        assert not _folds(ran), (case, mode)


def test_window_fill_64_bit_index(monkeypatch, settings_override):
    keys = _spy_window_fill(monkeypatch, settings_override)
    settings_override(index_type="long long")
    test_forward(FILL_CASES[0], ("float32", "highest"))
    assert keys[-1][-1] == "fill" and keys[-1][2] == "long long"


def test_window_fill_routing(settings_override):
    """A P4-like float32 "highest" forward pass takes conv_window's fill with
    no threshold changed (conv_direct with use_window_fill off), right
    either way."""
    ran = settings_override.observe_launches()
    rng = numpy.random.default_rng(33)
    x = rng.standard_normal((1, 32, 16384)).astype(numpy.float32)
    w = rng.standard_normal((32, 64, 3)).astype(numpy.float32)
    b = rng.standard_normal(64).astype(numpy.float32)
    kwargs = dict(stride=2, padding=1, dilation=2)
    oracle = reference.conv_transpose1d(x.astype(numpy.float64), w.astype(numpy.float64), b.astype(numpy.float64), **kwargs)
    for on, expected in ((True, "conv_window<float, int, 64, 128, 2, 4, 3, true>"), (False, "conv_direct<float, int,")):
        settings_override(use_window_fill=on)
        ran.clear()
        y = cupyconv.conv_transpose1d(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b), **kwargs, precision="highest")
        kernels = [name for name in ran if not name.startswith("pack_")]  # the packed weight first
        assert len(kernels) == 1 and kernels[0].startswith(expected), ran
        assert relative_error(cupy.asnumpy(y).astype(numpy.float64), oracle) < 1e-5


# Source rows that are not whole 16-byte vectors: conv_wgmma_resident copies
# them in 8- or 4-byte pieces (_kernels.resident_copy_bytes).  Copy sizes of
# (the forward input's rows, grad_input's grad_output rows), 16-bit then
# float32: a (4, 16; 8, 16), b (8, 4; 16, 8), c (none, 4; 4, 8: odd 16-bit
# inputs stay off it), d (8, none; 16, 4; 128 output channels).  Padding, so
# that copies in it are zero-filled; ragged last tiles.
_ROW_COPY_CASES = [
    Case("1d_rows_a", 1, 2, 40, 64, (5,), (1002,), padding=1, dilation=2),
    Case("1d_rows_b", 1, 2, 32, 40, (5,), (1004,), padding=1, bias=False),
    Case("1d_rows_c", 1, 3, 48, 36, (4,), (1001,), dilation=3),
    Case("1d_rows_d", 1, 2, 64, 128, (4,), (996,), padding=3, output_padding=1, dilation=2),
]


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("mode", WGMMA_MODES, ids=["-".join(m) for m in WGMMA_MODES])
@pytest.mark.parametrize("case", _ROW_COPY_CASES, ids=str)
def test_resident_row_copies(case, mode, multiprocessors, monkeypatch, settings_override):
    """conv_wgmma_resident's forward pass and grad_input on source rows of
    every copy size, against float64; and that it ran exactly the passes
    whose rows a copy size divides, with that size."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_resident(monkeypatch, settings_override, multiprocessors)
    names = settings_override.observe_launches()
    test_forward(case, mode)
    test_backward(case, mode)
    (in_w,) = case.size
    out_w = in_w - 1 - 2 * case.padding + case.dilation * (case.kernel[0] - 1) + case.output_padding + 1
    expected = [(p, _kernels.resident_copy_bytes(w, mode[0])) for p, w in (("forward", in_w), ("grad_input", out_w))]
    expected = [(p, copy) for p, copy in expected if copy is not None]
    assert any(copy < 16 for _, copy in expected)
    assert ran == [p for p, _ in expected]
    copies = [int(n.rstrip(">").split(",")[-1]) for n in names if n.startswith("conv_wgmma_resident<")]
    assert copies == [copy for _, copy in expected]



# conv_wgmma_split (16-bit, 128 x 128 tiles, one stride-1 phase, no fold):
# P2's shape on short rows (4 channel slices; the forward input's rows 4-byte
# copies, grad_output's 16-byte ones), output channels that leave rows of the
# tile empty (72, 96: the warps past them write one by one or not at all),
# groups, 5 slices (the largest weight tile that fits), a last slice part
# padding (100 channels), 8-byte copies with an odd output row (every tile
# written one by one) and no bias, a dilation.  Ragged last column tiles.
_SPLIT_CASES = [
    Case("1d_split_p2", 1, 3, 128, 128, (3,), (1030,)),
    Case("1d_split_rows72_d3", 1, 2, 40, 72, (5,), (1000,), padding=2, dilation=3),
    Case("1d_split_g2", 1, 2, 192, 192, (4,), (520,), padding=1, groups=2),
    Case("1d_split_c160", 1, 2, 160, 128, (3,), (600,)),
    Case("1d_split_c100", 1, 2, 100, 96, (3,), (800,), padding=1),
    Case("1d_split_odd_rows", 1, 2, 64, 128, (2,), (1004,), bias=False),
]
SPLIT_MODES = [m for m in WGMMA_MODES if m[0] in _kernels.SPLIT_DTYPES]


def _spy_split(monkeypatch, override, multiprocessors=None):
    """The names of the kernels launched from here on (observe_launches:
    conv_wgmma_split's builds among them), conv_wgmma_split on wherever
    conv_wgmma_resident would run with its tile (_spy_resident)."""
    _spy_resident(monkeypatch, override, multiprocessors)
    override(use_split=True)
    return override.observe_launches()


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("mode", SPLIT_MODES, ids=["-".join(m) for m in SPLIT_MODES])
@pytest.mark.parametrize("case", _SPLIT_CASES, ids=str)
def test_split_kernel(case, mode, multiprocessors, monkeypatch, settings_override):
    """conv_wgmma_split's forward pass (and grad_input, where it takes it)
    against float64, within twice torch's error, in poisoned memory; with 3
    multiprocessors' grid each block cycles its window buffers over many
    items."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_split(monkeypatch, settings_override, multiprocessors)
    test_forward(case, mode)
    assert any(n.startswith("conv_wgmma_split<") for n in names), "conv_wgmma_split did not run the forward pass"
    test_backward(case, mode)


@pytest.mark.parametrize("mode", SPLIT_MODES, ids=["-".join(m) for m in SPLIT_MODES])
@pytest.mark.parametrize("case", _SPLIT_CASES, ids=str)
def test_split_matches_resident(case, mode, monkeypatch, settings_override):
    """conv_wgmma_split's outputs are bitwise conv_wgmma_resident's: the same
    MMAs in the same order, the same rounding."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_split(monkeypatch, settings_override, 3)
    rng = numpy.random.default_rng(22)
    dtype = numpy_dtype(mode[0])
    x, w, b = (_to_gpu(a, dtype) for a in case.arrays(rng, dtype))
    outputs, ran = [], []
    for split in (True, False):
        settings_override(use_split=split)
        names.clear()
        outputs.append(cupy.asnumpy(cupyconv.conv_transpose1d(x, w, b, **case.kwargs)))
        ran.append([n.split("<")[0] for n in names if n.startswith("conv_wgmma_")])
    assert ran == [["conv_wgmma_split"], ["conv_wgmma_resident"]]
    assert outputs[0].tobytes() == outputs[1].tobytes()


@pytest.mark.parametrize("case", [c for c in _SPLIT_CASES if c.name in ("1d_split_p2", "1d_split_rows72_d3")], ids=str)
def test_split_64_bit_index(case, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_split(monkeypatch, settings_override, 3)
    settings_override(index_type="long long")
    test_forward(case, ("bfloat16", "highest"))
    assert any(n.startswith("conv_wgmma_split<") and "long long" in n for n in names)


@pytest.mark.parametrize("case", _ROW_COPY_CASES, ids=str)
def test_wgmma_x3_row_copies(case, monkeypatch, settings_override):
    """conv_wgmma_x3's forward pass and grad_input on float32 source rows of
    every load size (16, 8 and 4 bytes: _ROW_COPY_CASES), under 1e-5 against
    float64 in poisoned memory; and that it ran both passes, each with the
    load size its rows allow."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_wgmma_x3(monkeypatch, settings_override)
    names = settings_override.observe_launches()
    test_forward(case, ("float32", "highest"))
    test_backward(case, ("float32", "highest"))
    (in_w,) = case.size
    out_w = in_w - 1 - 2 * case.padding + case.dilation * (case.kernel[0] - 1) + case.output_padding + 1
    assert ran == ["forward", "grad_input"]
    copies = [int(n.rstrip(">").split(",")[-1]) for n in names if n.startswith("conv_wgmma_x3<")]
    assert copies == [_kernels.resident_copy_bytes(w, "float32") for w in (in_w, out_w)]


# P1- and P2-like grad_input (batch 1) under the default thresholds: their
# grad_output rows (L + 12 and L + 2 elements) are not whole 16-byte vectors
# in 16-bit; conv_wgmma_resident (P1) and conv_wgmma_split (P2: 128 rows)
# copy them in 8- and 4-byte pieces.  P2's float32 rows (L + 2) are not
# either: "highest" takes conv_wgmma_x3 in 8-byte pieces, "tf32"
# conv_wgmma_tf32 (whole vectors from the aligned one below each window; copy
# None: it has no copy size).
_GRAD_INPUT_ROUTES = [
    (dict(x=(1, 32, 16384), w=(32, 64, 5), dilation=3), dtype, "conv_wgmma_resident", 8) for dtype in ("float16", "bfloat16")
] + [
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), dtype, "conv_wgmma_split", 4) for dtype in ("float16", "bfloat16")
] + [
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float32", "tf32"), "conv_wgmma_tf32", None),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float32", "highest"), "conv_wgmma_x3", 8),
]


@pytest.mark.parametrize("problem, mode, kernel, copy", _GRAD_INPUT_ROUTES, ids=str)
def test_resident_grad_input_routing(problem, mode, kernel, copy, settings_override):
    """On Hopper, P1- and P2-like grad_input take `kernel` with the copy size
    their rows allow (nowhere else a wgmma kernel); the result against
    float64 either way."""
    dtype, precision = (mode, None) if isinstance(mode, str) else mode
    names = settings_override.observe_launches()
    problem = dict(problem)
    x_shape, w_shape = problem.pop("x"), problem.pop("w")
    case = Case("p", 1, 1, w_shape[0], w_shape[1], (w_shape[2],), (x_shape[2],), **problem)
    rng = numpy.random.default_rng(33)
    x, w, _ = case.arrays(rng, numpy_dtype(dtype))
    out_w = x_shape[2] + problem.get("dilation", 1) * (w_shape[2] - 1)
    gy = rng.standard_normal((1, w_shape[1], out_w)).astype(numpy_dtype(dtype)).astype(numpy.float64)
    gx, _, _ = cupyconv.conv_transpose1d_backward(
        _to_gpu(gy, numpy_dtype(dtype)), _to_gpu(x, numpy_dtype(dtype)), _to_gpu(w, numpy_dtype(dtype)), **problem,
        output_mask=(True, False, False), precision=precision,
    )  # fmt: skip
    wgmma = [n for n in names if n.startswith("conv_wgmma")]
    if _is_hopper() and copy is None:
        assert wgmma == [_kernels.conv_tf32_name("int", w_shape[2])], names
    elif _is_hopper():
        prefix = f"{kernel}<int," if kernel == "conv_wgmma_x3" else f"{kernel}<{_kernels.CUDA_TYPE[dtype]}, int,"
        assert len(wgmma) == 1 and wgmma[0].startswith(prefix), names
        assert wgmma[0].endswith(f", {copy}>"), names
    else:
        assert wgmma == [], names
    oracle = exact_backward(case, gy, x, w)[0]
    limit = {"float32": 2e-3 if precision == "tf32" else 1e-5, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    assert relative_error(cupy.asnumpy(gx).astype(numpy.float64), oracle) < limit


# conv_wgmma_tf32: float32 "tf32", one stride-1 phase (forward and
# grad_input), 2 to 4 taps.  Source rows of every alignment (forward: the
# input's width; grad_input: the output's, in brackets), so that rows start
# at every offset from a vector and windows straddle row starts; padding
# beyond a vector, dilation (the taps' reach), output padding, channel tails
# in the slices and in the 128-channel tile, two tiles, groups, rows shorter
# than a vector, rows ending inside an item.
CONV_TF32_CASES = [
    Case("ct_p2like", 1, 2, 128, 128, (3,), (1000,)),  # 1000 (1002)
    Case("ct_tails_d3", 1, 3, 72, 80, (3,), (1001,), padding=6, dilation=3),  # 1001 (995)
    Case("ct_two_tiles", 1, 2, 64, 160, (2,), (301,), padding=1, output_padding=1, dilation=2),  # 301 (302)
    Case("ct_g2", 1, 2, 128, 192, (3,), (263,), padding=1, groups=2, bias=False),  # 263 (263)
    Case("ct_short_rows", 1, 9, 64, 72, (4,), (3,), padding=1),  # 3 (4)
    Case("ct_d2_pad", 1, 2, 128, 96, (3,), (390,), padding=2, dilation=2),  # 390 (390): the largest weight tile, 4 x 3 atoms
]


def _spy_conv_tf32(monkeypatch, override, multiprocessors=None):
    """The passes (forward, grad_input) conv_wgmma_tf32 ran (any number of
    rows; grad_input_phase off at stride 1).  With `multiprocessors`, its
    grid is sized for that many, so that each block works through many
    items."""
    override(use_conv_tf32="anywhere")
    override(grad_input_phase_stride_one=False)
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _spy(monkeypatch, override, "_conv_tf32", lambda p: p.op)


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("case", CONV_TF32_CASES, ids=str)
def test_conv_tf32_kernel(case, multiprocessors, monkeypatch, settings_override):
    """conv_wgmma_tf32's forward pass and grad_input in "tf32" against
    float64, with the usual tolerance, in poisoned memory: both passes run on
    it (on Hopper)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_conv_tf32(monkeypatch, settings_override, multiprocessors)
    test_forward(case, ("float32", "tf32"))
    test_backward(case, ("float32", "tf32"))
    assert ran == ["forward", "grad_input"]


@pytest.mark.parametrize("case", [c for c in CONV_TF32_CASES if c.name in ("ct_tails_d3", "ct_g2")], ids=str)
def test_conv_tf32_64_bit_index(case, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_conv_tf32(monkeypatch, settings_override, 3)
    settings_override(index_type="long long")
    test_forward(case, ("float32", "tf32"))
    test_backward(case, ("float32", "tf32"))
    assert ran == ["forward", "grad_input"]


# conv_wgmma_tf32's FOLD builds: forward passes whose stride divides the
# kernel (dilation 1), 2 to 4 taps a sub-phase.  An X3-like fold of 256 (tiles
# of one channel's sub-phases, their columns trimmed at both ends, several
# items a tile), a fold of 128 with 3 taps, channel tails and an odd padding
# (every output pair misaligned: single stores), folds below a tile (a tile
# spans channels; the last one partial) with groups, an unbatched call and
# output padding, and P4's dilated fold.
CONV_TF32_FOLD_CASES = [
    Case("ctf_x3like", 1, 2, 64, 3, (1024,), (300,), stride=256, padding=384),
    Case("ctf_f128_odd", 1, 2, 40, 2, (384,), (150,), stride=128, padding=101, output_padding=5),
    Case("ctf_f4_g2", 1, 2, 48, 50, (8,), (500,), stride=4, padding=3, groups=2),
    Case("ctf_f2_unbatched", 1, None, 33, 70, (8,), (333,), stride=2, padding=1, output_padding=1),
    Case("ctf_p4like", 1, 2, 32, 64, (3,), (300,), stride=2, padding=1, dilation=2),  # the dilated fold (FOLD_DILATED)
]


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("case", CONV_TF32_FOLD_CASES, ids=str)
def test_conv_tf32_fold(case, multiprocessors, monkeypatch, settings_override):
    """conv_wgmma_tf32's FOLD builds' forward pass in "tf32" against float64,
    with the usual tolerance, in poisoned memory (on Hopper; the rule lifted,
    so that small folds run it too)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_conv_tf32(monkeypatch, settings_override, multiprocessors)
    names = settings_override.observe_launches()
    test_forward(case, ("float32", "tf32"))
    assert ran == ["forward"]
    ours = [n for n in names if n.startswith("conv_wgmma_tf32")]
    assert len(ours) == 1 and ours[0].endswith(", true>"), names


def test_conv_tf32_fold_rule(monkeypatch, settings_override):
    """By default the FOLD builds take folds of settings.conv_tf32_min_fold or
    more (X3) and leave smaller ones (P4's 2, X2's 8) to the other kernels."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy(monkeypatch, settings_override, "_conv_tf32", lambda p: p.geometry.stride[1])
    for case in CONV_TF32_FOLD_CASES:
        test_forward(case, ("float32", "tf32"))
    assert ran == [c.stride for c in CONV_TF32_FOLD_CASES if c.stride >= cupyconv.settings.current().conv_tf32_min_fold]
    assert len(ran) == 2  # (P4's fold of 2 is not among them)


# conv_tf32_stream: float32 forward passes in "tf32" and "highest" that fold
# into one record with 2 taps a sub-phase (kernel = 2 x stride), with sums of
# at least settings.tf32x3_min_products products (64 channels a group or more), so that
# "highest" takes 3xTF32 by the default rule.  An X2-like fold of 8 with a
# channel tail in the slices and a partial second tile of (channel,
# sub-phase) columns, a fold of 2 (unbatched, output padding, source rows of
# odd width, one channel past the slices), groups with a fold of 4 and no
# bias, a fold of 64 (two channels a tile), an odd padding (every output
# pair misaligned: single stores) and a column tail in the last item.
CONV_TF32_STREAM_CASES = [
    Case("cts_x2like", 1, 2, 72, 20, (16,), (300,), stride=8, padding=4),
    Case("cts_f2_unbatched", 1, None, 65, 70, (4,), (333,), stride=2, padding=1, output_padding=1),
    Case("cts_f4_g2", 1, 2, 144, 50, (8,), (500,), stride=4, padding=3, groups=2, bias=False),
    Case("cts_f64", 1, 2, 80, 3, (128,), (40,), stride=64, padding=10),
    Case("cts_odd_pad", 1, 3, 80, 16, (16,), (257,), stride=8, padding=3),
]


def _lift_conv_tf32_stream(override, multiprocessors=None):
    """conv_tf32_stream's rule lifted (any channel count: the resident FOLD
    tile would fit these), on small problems too (_lift)."""
    _lift(override, "_conv_tf32_stream")
    override(tf32x3_min_products=128)  # the default rule (_lift lowers it)
    override(use_conv_tf32_stream="anywhere")
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)


def _spy_conv_tf32_stream(override, multiprocessors=None):
    """The names of the kernels the calls from here on launch
    (observe_launches), conv_tf32_stream's rule lifted (_lift_conv_tf32_stream)."""
    _lift_conv_tf32_stream(override, multiprocessors)
    return override.observe_launches()


@pytest.mark.parametrize("multiprocessors", [None, 3])
@pytest.mark.parametrize("precision", ["tf32", "highest"])
@pytest.mark.parametrize("case", CONV_TF32_STREAM_CASES, ids=str)
def test_conv_tf32_stream(case, precision, multiprocessors, settings_override):
    """conv_tf32_stream's forward pass in "tf32" (TF32) and "highest"
    (3xTF32) against float64, with the usual tolerances, in poisoned memory:
    the kernel ran, the build of the mode's passes (on Hopper).
    (conv_tf32_multicast, which takes most TF32 passes, is off here.)"""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(use_conv_tf32_multicast=False)
    names = _spy_conv_tf32_stream(settings_override, multiprocessors)
    test_forward(case, ("float32", precision))
    ours = [n for n in names if n.startswith("conv_tf32_stream")]
    assert ours == [_kernels.conv_tf32_stream_name("int", 2, 1 if precision == "tf32" else 3)], names


@pytest.mark.parametrize("precision", ["tf32", "highest"])
def test_conv_tf32_stream_64_bit_index(precision, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(use_conv_tf32_multicast=False)
    names = _spy_conv_tf32_stream(settings_override, 3)
    settings_override(index_type="long long")
    test_forward(CONV_TF32_STREAM_CASES[0], ("float32", precision))
    assert [n for n in names if n.startswith("conv_tf32_stream")] == [_kernels.conv_tf32_stream_name("long long", 2, 1 if precision == "tf32" else 3)]


# conv_tf32_multicast: the TF32 passes of conv_tf32_stream's cases with a
# fold of 4 to 32 and source rows of whole 16-byte vectors.  An X2-like fold
# of 8 with a channel tail in the slices, a partial tile of (channel,
# sub-phase) columns and an odd count of items (a cluster's second block
# runs its pair's first window and stores nothing); two groups of 32
# channels with a fold of 4 and no bias; unbatched with output padding, a
# fold of 16; a fold of 32 (8 channels a tile); an odd padding (every output
# vector misaligned: single stores) with 3 items; and channels in one slice.
CONV_TF32_MULTICAST_CASES = [
    Case("cm_x2like", 1, 3, 72, 20, (16,), (300,), stride=8, padding=4),
    Case("cm_f4_g2", 1, 2, 64, 100, (8,), (500,), stride=4, padding=3, groups=2, bias=False),
    Case("cm_f16_unbatched", 1, None, 40, 20, (32,), (64,), stride=16, padding=5, output_padding=3),
    Case("cm_f32", 1, 2, 24, 10, (64,), (40,), stride=32, padding=7),
    Case("cm_odd_pad", 1, 1, 48, 16, (16,), (260,), stride=8, padding=3),
    Case("cm_one_slice", 1, 2, 12, 40, (16,), (128,), stride=8, padding=0),
]


@pytest.mark.parametrize("multiprocessors", [None, 2, 12])
@pytest.mark.parametrize("case", CONV_TF32_MULTICAST_CASES, ids=str)
def test_conv_tf32_multicast(case, multiprocessors, settings_override):
    """conv_tf32_multicast's forward pass in "tf32" against float64, with the
    usual tolerances, in poisoned memory, on grids of one cluster (every unit
    in turn: the buffers' phases wrap many times), of six (12
    multiprocessors) and the device's: the kernel ran, its fold's build (on
    Hopper)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_conv_tf32_stream(settings_override, multiprocessors)
    test_forward(case, ("float32", "tf32"))
    ours = [n for n in names if n.startswith("conv_tf32")]
    assert ours == [_kernels.conv_tf32_multicast_name("int", case.stride)], names


def test_conv_tf32_multicast_64_bit_index(settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_conv_tf32_stream(settings_override, 2)
    settings_override(index_type="long long")
    test_forward(CONV_TF32_MULTICAST_CASES[0], ("float32", "tf32"))
    assert [n for n in names if n.startswith("conv_tf32")] == [_kernels.conv_tf32_multicast_name("long long", 8)]


@pytest.mark.parametrize(
    "case",
    [
        Case("cm_no_f2", 1, 2, 32, 20, (4,), (200,), stride=2, padding=1),  # a fold of 2
        Case("cm_no_f64", 1, 2, 32, 3, (128,), (40,), stride=64, padding=10),  # a fold of 64
        Case("cm_no_row", 1, 2, 32, 20, (16,), (301,), stride=8, padding=4),  # rows not whole 16-byte vectors
        Case("cm_no_groups", 1, 2, 40, 20, (8,), (200,), stride=4, padding=1, groups=2),  # 20 channels a group
    ],
    ids=str,
)
def test_conv_tf32_multicast_declines(case, settings_override):
    """What conv_tf32_multicast has no build or tensor map for goes to
    conv_tf32_stream, right either way."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    names = _spy_conv_tf32_stream(settings_override)
    test_forward(case, ("float32", "tf32"))
    assert [n for n in names if n.startswith("conv_tf32")] == [_kernels.conv_tf32_stream_name("int", 2, 1)], names


def test_conv_tf32_multicast_repeats_bitwise(monkeypatch, settings_override):
    """Runs of the same call give the same bits, and from the fourth call on
    the remembered replay (a new output and a new packed weight: both tensor
    maps rewritten) answers, in poisoned memory, with the checked path's."""
    from cupyconv import _remember
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    from cupyconv import _cuda

    _lift_conv_tf32_stream(settings_override)
    # a spy on _launch, not observe_launches: that would turn remembered calls off
    names, original = [], _cuda._launch
    monkeypatch.setattr(_cuda, "_launch", lambda plan, arrays: names.append(plan.name) or original(plan, arrays))
    case = CONV_TF32_MULTICAST_CASES[0]
    x, w, b = (cupy.asarray(a.astype(numpy.float32)) for a in case.arrays(numpy.random.default_rng(5), numpy.float32))
    cupyconv._remember.FAST_FORWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    runs = [cupyconv.conv_transpose1d(x, w, b, **case.kwargs, precision="tf32") for _ in range(3)]
    assert names.count(_kernels.conv_tf32_multicast_name("int", 8)) == 3
    answered = _fast_calls(monkeypatch, _remember._Replay)
    with poisoned_allocations():
        runs += [cupyconv.conv_transpose1d(x, w, b, **case.kwargs, precision="tf32") for _ in range(2)]
        cupy.cuda.get_current_stream().synchronize()
    assert answered == [True, True]
    assert all(bool((r == runs[0]).all()) for r in runs[1:])


def test_conv_tf32_stream_rule(monkeypatch, settings_override):
    """By default conv_tf32_stream takes the folds whose resident FOLD tile
    does not fit (256 channels x 2 taps: X2-like), in both float32 tensor-core
    modes, and leaves those whose tile fits (64 channels) and 16-bit types
    to the other kernels; the result against float64 either way."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy(monkeypatch, settings_override, "_conv_tf32_stream", lambda p: p.geometry.in_channels)
    settings_override(tf32x3_min_products=128)
    wide = Case("cts_wide", 1, 1, 256, 16, (16,), (200,), stride=8, padding=4)
    narrow = Case("cts_narrow", 1, 1, 64, 16, (16,), (200,), stride=8, padding=4)
    for case in (wide, narrow):
        for mode in (("float32", "tf32"), ("float32", "highest"), ("float16", "highest")):
            test_forward(case, mode)
    assert ran == [256, 256]
    assert cupyconv.settings.current().use_conv_tf32_stream is True


def test_conv_tf32_is_not_for_other_problems(monkeypatch, settings_override):
    """conv_wgmma_tf32 declines what it has no build or record for: float32
    "highest", 16-bit types, strided passes that do not fold (a stride that
    does not divide the kernel), 1 or 5 taps (a phase); grad_input
    of a strided pass; the result against float64 either way."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_conv_tf32(monkeypatch, settings_override)
    cases = [
        (CONV_TF32_CASES[0], ("float32", "highest")),
        (CONV_TF32_CASES[0], ("float16", "highest")),
        (Case("ct_s2", 1, 2, 32, 136, (5,), (200,), stride=2, padding=1), ("float32", "tf32")),
        (Case("ct_s2_k10", 1, 2, 32, 136, (10,), (200,), stride=2), ("float32", "tf32")),
        (Case("ct_k1", 1, 2, 32, 136, (1,), (200,)), ("float32", "tf32")),
        (Case("ct_k5", 1, 2, 32, 136, (5,), (200,)), ("float32", "tf32")),
    ]
    for case, mode in cases:
        test_forward(case, mode)
        test_backward(case, mode)
    assert ran == []


# grad_weight_wgmma: 16-bit, stride 1, input rows of whole 16-byte vectors,
# up to 8 taps; grad_output rows of every copy size (the id's out width),
# padding both sides, channel tails in both tiles, groups, rows of positions
# that end inside a 128-position item, several splits.
GRAD_WEIGHT_WGMMA_CASES = [
    Case("gww_p1like", 1, 3, 32, 64, (5,), (1000,), dilation=3),  # out 1012: 8-byte copies
    Case("gww_p2like", 1, 2, 128, 128, (3,), (1000,)),  # out 1002: 4-byte copies, 2 x 2 tiles
    Case("gww_tails_pad", 1, 2, 40, 72, (4,), (520,), padding=2, dilation=2),  # out 522: 4-byte copies
    Case("gww_g2", 1, 2, 64, 48, (4,), (264,), padding=3, dilation=2, groups=2, bias=False),  # out 264: 16-byte copies
    Case("gww_k8", 1, 3, 24, 40, (8,), (400,), padding=5, dilation=2),  # out 404
    Case("gww_k4_op", 1, 2, 96, 20, (4,), (136,), padding=1, output_padding=1, dilation=2),  # out 141: 16-bit odd, off
]


def _spy_grad_weight_wgmma(monkeypatch, override):
    return _spy(monkeypatch, override, "_grad_weight_wgmma", lambda p: p.geometry)


@pytest.mark.parametrize("mode", [("float16", "highest"), ("bfloat16", "highest")], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", GRAD_WEIGHT_WGMMA_CASES, ids=str)
def test_grad_weight_wgmma_kernel(case, mode, monkeypatch, settings_override):
    """grad_weight_wgmma's gradients against float64 (the usual tolerances),
    where it applies: everywhere on Hopper but odd 16-bit grad_output rows."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_wgmma(monkeypatch, settings_override)
    test_backward(case, mode)
    assert bool(ran) == (case.name != "gww_k4_op")


@pytest.mark.parametrize("tile", _kernels.GRAD_WEIGHT_WGMMA_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WGMMA_CASES if c.name in ("gww_p2like", "gww_tails_pad", "gww_g2")], ids=str)
def test_every_grad_weight_wgmma_tile(case, tile, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran, picked = _spy_grad_weight_wgmma(monkeypatch, settings_override), _force_tile(monkeypatch, settings_override, "grad_weight_wgmma", tile)
    test_backward(case, ("float16", "highest"))
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WGMMA_CASES if c.name in ("gww_p1like", "gww_g2")], ids=str)
def test_grad_weight_wgmma_64_bit_index(case, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_wgmma(monkeypatch, settings_override)
    settings_override(index_type="long long")
    test_backward(case, ("bfloat16", "highest"))
    assert ran


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WGMMA_CASES if c.name in ("gww_p1like", "gww_p2like", "gww_g2")], ids=str)
def test_grad_weight_wgmma_is_bitwise_deterministic(case, dtype, monkeypatch, settings_override):
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_wgmma(monkeypatch, settings_override)
    test_backward_is_bitwise_deterministic(case, (dtype, "highest"))
    assert ran


def _spy_grad_weight_window(monkeypatch, override):
    """The calls grad_weight_window served (with grad_weight_taps and
    grad_weight_wgmma, which go first where they apply, turned off)."""
    override(use_grad_weight_taps=False)
    override(use_grad_weight_wgmma=False)
    return _spy(monkeypatch, override, "_grad_weight_window", lambda p: p.geometry)  # the geometry


SIXTEEN_BIT_MODES = [m for m in MODES if m[0] in ("float16", "bfloat16")]


@pytest.mark.parametrize("mode", SIXTEEN_BIT_MODES, ids=["-".join(m) for m in SIXTEEN_BIT_MODES])
@pytest.mark.parametrize("case", GRAD_WEIGHT_WINDOW_CASES, ids=str)
def test_grad_weight_window_kernel(case, mode, monkeypatch, settings_override):
    """grad_weight_window's gradients against float64, with the usual tolerances."""
    ran = _spy_grad_weight_window(monkeypatch, settings_override)
    test_backward(case, mode)
    assert ran, "grad_weight_window did not run"


@pytest.mark.parametrize("tile", _kernels.GRAD_WEIGHT_WINDOW_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float16", "highest"), ("bfloat16", "highest")], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WINDOW_CASES if c.name in ("gw_fold8", "gw_k9_d4", "gw_s2_g2")], ids=str)
def test_every_grad_weight_window_tile(case, mode, tile, monkeypatch, settings_override):
    ran, picked = _spy_grad_weight_window(monkeypatch, settings_override), _force_tile(monkeypatch, settings_override, "grad_weight_window", tile)
    test_backward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WINDOW_CASES if c.name in ("gw_fold8", "gw_s2_d2_ragged")], ids=str)
def test_grad_weight_window_64_bit_index(case, monkeypatch, settings_override):
    ran = _spy_grad_weight_window(monkeypatch, settings_override)
    settings_override(index_type="long long")
    test_backward(case, ("bfloat16", "highest"))
    assert ran


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_WINDOW_CASES if c.name in ("gw_fold8", "gw_s2_g2", "gw_s4_p7")], ids=str)
def test_grad_weight_window_is_bitwise_deterministic(case, dtype, monkeypatch, settings_override):
    ran = _spy_grad_weight_window(monkeypatch, settings_override)
    test_backward_is_bitwise_deterministic(case, (dtype, "highest"))
    assert ran


def _spy_grad_weight_phase(monkeypatch, override, multiprocessors=None):
    """The geometries grad_weight_phase served (small problems too); with
    `multiprocessors`, its splits are sized for that many (problems carry it)."""
    override(use_grad_weight_phase="anywhere")
    override(use_grad_phase_fused=False)  # grad_weight_phase itself, not its GX build
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _spy(monkeypatch, override, "_grad_weight_phase", lambda p: p.geometry)  # the geometry


FLOAT32_MODES = [("float32", "highest"), ("float32", "tf32")]


@pytest.mark.parametrize("mode", FLOAT32_MODES, ids=["highest", "tf32"])
@pytest.mark.parametrize("case", GRAD_WEIGHT_PHASE_CASES, ids=str)
def test_grad_weight_phase_kernel(case, mode, monkeypatch, settings_override):
    """grad_weight_phase's gradients (3xTF32 and TF32) against float64, with
    the usual tolerances, in poisoned memory."""
    ran = _spy_grad_weight_phase(monkeypatch, settings_override)
    test_backward(case, mode)
    assert ran, "grad_weight_phase did not run"


@pytest.mark.parametrize("multiprocessors", [1, 4096], ids=["long_splits", "one_item_splits"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_PHASE_CASES if c.name in ("gwp_p4like", "gwp_tails_g2", "gwp_k12")], ids=str)
def test_grad_weight_phase_splits_and_64_bit_index(case, multiprocessors, monkeypatch, settings_override):
    """Blocks that sum many items, or one each, with 64-bit indices."""
    ran = _spy_grad_weight_phase(monkeypatch, settings_override, multiprocessors)
    settings_override(index_type="long long")
    test_backward(case, ("float32", "highest"))
    assert ran


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


@pytest.mark.parametrize("precision", ["highest", "tf32"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_PHASE_CASES if c.name in ("gwp_p1like", "gwp_tails_g2")], ids=str)
def test_grad_weight_phase_is_bitwise_deterministic(case, precision, monkeypatch, settings_override):
    """Several splits summed by sum_splits in order: the same bits on every run."""
    ran = _spy_grad_weight_phase(monkeypatch, settings_override)
    _check_float32_grad_weight_repeats(case, precision)
    assert ran


def _spy_grad_input_phase(monkeypatch, override):
    """The geometries grad_input_phase served (small problems and stride 1 too)."""
    override(use_grad_input_phase="anywhere")
    override(use_grad_phase_fused=False)  # grad_input_phase itself
    return _spy(monkeypatch, override, "_grad_input_phase", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", FLOAT32_MODES, ids=["highest", "tf32"])
@pytest.mark.parametrize("case", GRAD_WEIGHT_PHASE_CASES, ids=str)
def test_grad_input_phase_kernel(case, mode, monkeypatch, settings_override):
    """grad_input_phase's gradients (3xTF32 and TF32) against float64, with
    the usual tolerances, in poisoned memory (on grad_weight_phase's cases:
    the same one-phase problems)."""
    ran = _spy_grad_input_phase(monkeypatch, settings_override)
    test_backward(case, mode)
    assert ran, "grad_input_phase did not run"


@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_PHASE_CASES if c.name in ("gwp_p4like", "gwp_tails_g2")], ids=str)
def test_grad_input_phase_64_bit_index(case, monkeypatch, settings_override):
    ran = _spy_grad_input_phase(monkeypatch, settings_override)
    settings_override(index_type="long long")
    test_backward(case, ("float32", "highest"))
    assert ran


def _check_phase_routing(monkeypatch, override, dispatcher, output_mask, shapes, seed):
    """Each (case, expected) of `shapes` runs the backward pass (output_mask)
    in both float32 tensor-core modes and float16 at the default size rule;
    _cuda.<dispatcher> must serve it exactly where expected in float32."""
    ran = _spy(monkeypatch, override, dispatcher, lambda p: p.geometry)
    override(window_min_output=cupyconv.settings.current().pack_min_output)  # the default size rule (_spy lowers it)
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


# grad_weight_phase's GX build (grad_input and grad_weight in one pass): the
# phase cases whose groups fit one tile each way with up to 3 taps (stride 1
# with vectors and channel tails, P4's fold, one tap at stride 4, no batch,
# two groups).
GRAD_PHASE_FUSED_CASES = [c for c in GRAD_WEIGHT_PHASE_CASES if c.name in ("gwp_p4like", "gwp_k1_s4", "gwp_unbatched", "gwp_tails_vec", "gwp_g2_one_tile")]


def _spy_grad_phase_fused(monkeypatch, override, multiprocessors=None):
    """The geometries grad_weight_phase's GX build served (small problems
    too); with `multiprocessors`, its splits are sized for that many."""
    override(use_grad_phase_fused="anywhere")
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _spy(monkeypatch, override, "_grad_phase_fused", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", FLOAT32_MODES, ids=["highest", "tf32"])
@pytest.mark.parametrize("case", GRAD_PHASE_FUSED_CASES, ids=str)
def test_grad_phase_fused_kernel(case, mode, monkeypatch, settings_override):
    """Both gradients from grad_weight_phase's GX build (3xTF32 and TF32)
    against float64, with the usual tolerances, in poisoned memory."""
    ran = _spy_grad_phase_fused(monkeypatch, settings_override)
    test_backward(case, mode)
    assert ran, "the GX build did not run"


@pytest.mark.parametrize("multiprocessors", [1, 4096], ids=["long_splits", "one_item_splits"])
@pytest.mark.parametrize("case", [c for c in GRAD_PHASE_FUSED_CASES if c.name in ("gwp_p4like", "gwp_unbatched")], ids=str)
def test_grad_phase_fused_splits_and_64_bit_index(case, multiprocessors, monkeypatch, settings_override):
    ran = _spy_grad_phase_fused(monkeypatch, settings_override, multiprocessors)
    settings_override(index_type="long long")
    test_backward(case, ("float32", "highest"))
    assert ran


@pytest.mark.parametrize("precision", ["highest", "tf32"])
@pytest.mark.parametrize("case", [c for c in GRAD_PHASE_FUSED_CASES if c.name in ("gwp_p4like", "gwp_tails_vec")], ids=str)
def test_grad_phase_fused_is_bitwise_deterministic(case, precision, monkeypatch, settings_override):
    """Both gradients of the GX build (grad_weight's splits summed in order,
    grad_input's halves added in a fixed order): the same bits on every run."""
    rng = numpy.random.default_rng(29)
    x, w, _ = case.arrays(rng, numpy.float32)
    gy = cupy.asarray(rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(numpy.float32))
    xg, wg = cupy.asarray(x.astype(numpy.float32)), cupy.asarray(w.astype(numpy.float32))
    ran = _spy_grad_phase_fused(monkeypatch, settings_override)
    def both():
        grads = _ops(case).backward(gy, xg, wg, **case.kwargs, output_mask=(True, True, False), precision=precision)[:2]
        return [cupy.asnumpy(a).tobytes() for a in grads]

    first = both()
    assert ran
    for _ in range(4):
        assert both() == first


def test_grad_phase_fused_routing(settings_override):
    """Both gradients of a float32 P4-like problem take the GX build in
    "tf32" only; P1 (stride 1, 5 taps), one gradient alone and P2 do not,
    and 16-bit types take their phase rewrite before it is asked."""
    served = settings_override.observe_plans()
    for case, dtype, mask, expected in [
        (_PHASE_P4, "float32", (True, True, False), {"tf32": True, "highest": False}),
        (_PHASE_P4, "float32", (True, False, False), {"tf32": None, "highest": None}),
        (_PHASE_P1, "float32", (True, True, False), {"tf32": False, "highest": False}),
        (_PHASE_P2, "float32", (True, True, False), {"tf32": False, "highest": False}),
        (_PHASE_P4, "float16", (True, True, False), {"highest": None}),  # the 16-bit phase rewrite comes first
    ]:
        rng = numpy.random.default_rng(5)
        x, w, _ = case.arrays(rng, numpy.float32)
        xg, wg = cupy.asarray(x.astype(dtype)), cupy.asarray(w.astype(dtype))
        gy = cupy.ones(_ops(case).ref_forward(x, w, **case.kwargs).shape, dtype=dtype)
        for precision, want in expected.items():
            served.clear()
            _ops(case).backward(gy, xg, wg, **case.kwargs, output_mask=mask, precision=precision)
            joint = [plan.family for p, plan in served if p.op == "backward"]
            # True: it ran; False: asked (both gradients, no joint family before it) and declined; None: not asked
            got = True if "grad_phase_fused" in joint else None if joint or mask[:2] != (True, True) else False
            assert got == want, (case.name, dtype, mask, precision, [(p.op, plan.family) for p, plan in served])


def test_grad_input_phase_routing(monkeypatch, settings_override):
    """float32 P4-like problems (stride 2) and stride-1 problems with one tile
    of input channels a group (P1) take grad_input_phase in both tensor-core
    modes; wider stride-1 groups (P2), 16-bit types and a dilation that is
    not a multiple of the stride do not."""
    shapes = [
        (_PHASE_P4, True),
        (_PHASE_P1, True),
        (Case("p2", 1, 2, 128, 128, (3,), (1024,), padding=1), False),
        (_PHASE_S2_D3, False),
    ]
    _check_phase_routing(monkeypatch, settings_override, "_grad_input_phase", (True, False, False), shapes, 6)


_PHASE_P2 = Case("p2", 1, 2, 128, 128, (3,), (1024,), padding=1)


def test_grad_weight_phase_routing(monkeypatch, settings_override):
    """float32 P1- and P4-like problems take grad_weight_phase in both
    tensor-core modes, P2's 4 x 2 channel tiles in "tf32" only where
    grad_weight_wgmma_tf32 does not take them (before Hopper); 16-bit ones, a
    dilation that is not a multiple of the stride and few channels do not."""
    shapes = [
        (_PHASE_P1, True),
        (_PHASE_P4, True),
        (_PHASE_S2_D3, False),
        (Case("c8", 1, 2, 8, 64, (3,), (4096,), padding=1), False),
        (_PHASE_P2, False if _is_hopper() else ("tf32",)),
    ]
    _check_phase_routing(monkeypatch, settings_override, "_grad_weight_phase", (False, True, False), shapes, 5)


def _spy_grad_weight_tf32(monkeypatch, override, multiprocessors=None):
    """The geometries grad_weight_wgmma_tf32 served (small problems too, and
    with grad_weight_taps, which goes first in TF32 where it applies, turned
    off: X2-like shapes); with `multiprocessors`, its splits are sized for
    that many."""
    override(use_grad_weight_taps=False)
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)  # (a problem carries it: plans are made for it)
    return _spy(monkeypatch, override, "_grad_weight_tf32", lambda p: p.geometry)


@pytest.mark.parametrize("mode", FLOAT32_MODES, ids=["highest", "tf32"])
@pytest.mark.parametrize("case", GRAD_WEIGHT_TF32_CASES, ids=str)
def test_grad_weight_tf32_kernel(case, mode, monkeypatch, settings_override):
    """grad_weight_wgmma_tf32's gradients (3xTF32 and TF32) against float64,
    with the usual tolerances, in poisoned memory, where it applies: on
    Hopper, but not to input rows that are not whole 16-byte vectors."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_tf32(monkeypatch, settings_override)
    test_backward(case, mode)
    assert bool(ran) == (case.name != "gwt_odd_rows")


@pytest.mark.parametrize("multiprocessors", [1, 4096], ids=["long_splits", "one_item_splits"])
@pytest.mark.parametrize(
    "case", [c for c in GRAD_WEIGHT_TF32_CASES if c.name in ("gwt_p2like", "gwt_tails_pad", "gwt_g2", "gwt_fold_x2like", "gwt_fold_tails")], ids=str
)
def test_grad_weight_tf32_splits_and_64_bit_index(case, multiprocessors, monkeypatch, settings_override):
    """Blocks that sum many items, or one each, with 64-bit indices."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_tf32(monkeypatch, settings_override, multiprocessors)
    settings_override(index_type="long long")
    test_backward(case, ("float32", "highest"))
    assert ran


@pytest.mark.parametrize("precision", ["highest", "tf32"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TF32_CASES if c.name in ("gwt_p2like", "gwt_g2", "gwt_fold_g2")], ids=str)
def test_grad_weight_tf32_is_bitwise_deterministic(case, precision, monkeypatch, settings_override):
    """Several splits summed by sum_splits in order: the same bits on every run."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_grad_weight_tf32(monkeypatch, settings_override)
    _check_float32_grad_weight_repeats(case, precision)
    assert ran


def test_grad_weight_tf32_routing(monkeypatch, settings_override):
    """On Hopper, float32 P2-like problems (stride 1, 128 channels) take
    grad_weight_wgmma_tf32 in both tensor-core modes at the default size
    rule, X2-like ones (stride 8, 16 taps) in "highest" only (ahead of
    grad_weight_taps, which keeps "tf32"), H4-like ones (stride 2, where
    grad_weight_taps does not apply) in both; P1- and P4-like ones (32 input
    channels) and 16-bit types do not."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    shapes = [
        (_PHASE_P2, True),
        (Case("x2", 1, 2, 128, 64, (16,), (512,), stride=8, padding=4), ("highest",)),
        (Case("h4", 1, 2, 128, 64, (4,), (4096,), stride=2, padding=1), True),
        (_PHASE_P1, False),
        (_PHASE_P4, False),
    ]
    _check_phase_routing(monkeypatch, settings_override, "_grad_weight_tf32", (False, True, False), shapes, 7)


@contextlib.contextmanager
def _taps_min_chunks(override, min_chunks):
    """The taps kernels' reductions split into pieces of at least min_chunks
    stages (their cached plans re-made on entry and exit; the setting stays
    until the test ends)."""
    from cupyconv.kernels import grad_input_taps

    override(grad_input_taps_min_chunks=min_chunks)
    grad_input_taps._taps_plan.cache_clear()
    try:
        yield
    finally:
        grad_input_taps._taps_plan.cache_clear()


def _spy_grad_input_taps(monkeypatch, override):
    """The calls grad_input_taps served."""
    return _spy(monkeypatch, override, "_grad_input_taps", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", GRAD_INPUT_TAPS_CASES + [c for c in CASES if c.name == "1d_vocoder"], ids=str)
def test_grad_input_taps_kernel(case, mode, monkeypatch, settings_override):
    """grad_input_taps's gradients against float64, with the usual tolerances;
    gi_long's reduction is split across blocks (sum_splits adds the partials)."""
    ran = _spy_grad_input_taps(monkeypatch, settings_override)
    test_backward(case, mode)
    assert ran, "grad_input_taps did not run"


@pytest.mark.parametrize("tile", _kernels.GRAD_INPUT_TAPS_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "highest"), ("float32", "tf32"), ("float16", "highest")], ids=["float32", "tf32", "float16"])
@pytest.mark.parametrize("case", [c for c in GRAD_INPUT_TAPS_CASES if c.name in ("gi_fold8", "gi_g2_op4", "gi_long")], ids=str)
def test_every_grad_input_taps_tile(case, mode, tile, monkeypatch, settings_override):
    ran, picked = _spy_grad_input_taps(monkeypatch, settings_override), _force_tile(monkeypatch, settings_override, "grad_input_taps", tile)
    test_backward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("min_chunks", [1, 10**6], ids=["split", "unsplit"])
@pytest.mark.parametrize("case", [c for c in GRAD_INPUT_TAPS_CASES if c.name in ("gi_k64_s16", "gi_unbatched")], ids=str)
def test_grad_input_taps_split_and_64_bit_index(case, min_chunks, monkeypatch, settings_override):
    """Splits of one stage each (every block a partial), or none, with 64-bit indices."""
    ran = _spy_grad_input_taps(monkeypatch, settings_override)
    settings_override(index_type="long long")
    with _taps_min_chunks(settings_override, min_chunks):
        test_backward(case, ("bfloat16", "highest"))
    assert ran


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_INPUT_TAPS_CASES if c.name in ("gi_long", "gi_g2_op4")], ids=str)
def test_grad_input_taps_is_bitwise_deterministic(case, dtype, monkeypatch, settings_override):
    ran = _spy_grad_input_taps(monkeypatch, settings_override)
    test_backward_is_bitwise_deterministic(case, (dtype, "highest"))
    assert ran


def _spy_grad_weight_taps(monkeypatch, override):
    """The calls grad_weight_taps served."""
    return _spy(monkeypatch, override, "_grad_weight_taps", lambda p: p.geometry)  # the geometry


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", GRAD_WEIGHT_TAPS_CASES, ids=str)
def test_grad_weight_taps_kernel(case, mode, monkeypatch, settings_override):
    """grad_weight_taps's gradients against float64, with the usual tolerances."""
    ran = _spy_grad_weight_taps(monkeypatch, settings_override)
    test_backward(case, mode)
    assert ran, "grad_weight_taps did not run"


@pytest.mark.parametrize("tile", _kernels.GRAD_WEIGHT_TAPS_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "highest"), ("float32", "tf32"), ("bfloat16", "highest")], ids=["float32", "tf32", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TAPS_CASES if c.name in ("gwt_fold8", "gwt_g2_op4", "gwt_k64_s16")], ids=str)
def test_every_grad_weight_taps_tile(case, mode, tile, monkeypatch, settings_override):
    ran, picked = _spy_grad_weight_taps(monkeypatch, settings_override), _force_tile(monkeypatch, settings_override, "grad_weight_taps", tile)
    test_backward(case, mode)
    assert ran and picked, "the tile under test did not run"


@pytest.mark.parametrize("min_chunks", [1, 10**6], ids=["split", "unsplit"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TAPS_CASES if c.name in ("gwt_long", "gwt_unbatched")], ids=str)
def test_grad_weight_taps_split_and_64_bit_index(case, min_chunks, monkeypatch, settings_override):
    """Splits of one stage each (every block a partial), or none, with 64-bit indices."""
    ran = _spy_grad_weight_taps(monkeypatch, settings_override)
    settings_override(index_type="long long")
    with _taps_min_chunks(settings_override, min_chunks):
        test_backward(case, ("float16", "highest"))
    assert ran


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in GRAD_WEIGHT_TAPS_CASES if c.name in ("gwt_long", "gwt_g2_op4")], ids=str)
def test_grad_weight_taps_is_bitwise_deterministic(case, dtype, monkeypatch, settings_override):
    ran = _spy_grad_weight_taps(monkeypatch, settings_override)
    with _taps_min_chunks(settings_override, 1):  # split, so that sum_splits's order is under test
        test_backward_is_bitwise_deterministic(case, (dtype, "highest"))
    assert ran


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_s2_p1_op1", "2d_s5_d2", "1d_wide_channels")], ids=str)
def test_non_default_stream(case):
    rng = numpy.random.default_rng(22)
    x, w, b = case.arrays(rng, numpy.float32)
    oracle = _ops(case).ref_forward(x, w, b, **case.kwargs)
    fn = _ops(case).forward
    backward = _ops(case).backward
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream, poisoned_allocations():
        xg, wg, bg = _to_gpu(x, numpy.float32), _to_gpu(w, numpy.float32), _to_gpu(b, numpy.float32)
        y = fn(xg, wg, bg, **case.kwargs)
        grads = backward(cupy.ones_like(y), xg, wg, **case.kwargs)
        stream.synchronize()
    assert relative_error(cupy.asnumpy(y), oracle) < 1e-5
    expected = _ops(case).ref_backward(
        numpy.ones(oracle.shape), x, w, **case.kwargs
    )
    for grad, oracle_grad in zip(grads, expected):
        assert relative_error(cupy.asnumpy(grad), oracle_grad) < 1e-5


DETERMINISM_CASES = [c for c in CASES + LARGE_CASES if c.name in ("1d_wide_channels", "2d_groups_dilation", "1d_vocoder", "1d_dw_long", "2d_dw_large")]


@pytest.mark.parametrize("mode", [("float32", "highest"), ("float16", "highest")], ids=["float32", "float16"])
@pytest.mark.parametrize("case", DETERMINISM_CASES, ids=str)
def test_backward_is_bitwise_deterministic(case, mode):
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


def _spy_grouped_backward(monkeypatch, override, tiles=None, multiprocessors=None):
    """The geometries grouped_backward served (small problems too).  With
    `tiles`, its items are that many input positions or fewer (its cached
    plans re-made); with `multiprocessors`, its splits are sized for that
    many (problems carry it), so that blocks take several items."""
    from cupyconv import _registry
    from cupyconv.kernels import grouped_backward

    override(grouped_min_input=0)
    if tiles is not None:
        monkeypatch.setattr(grouped_backward, "GROUPED_TILES", tiles)  # read by its plans, grouped_backward_applies and _pipes
        monkeypatch.setattr(grouped_backward, "_grouped_backward_plan", functools.lru_cache(maxsize=None)(grouped_backward._grouped_backward_plan.__wrapped__))
        _registry._choose.cache_clear()  # (whether it applies depends on the tiles)
    if multiprocessors is not None:
        override(multiprocessors=multiprocessors)
    return _served(override, ("grouped_backward",), lambda p, plan: p.geometry)


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", GROUPED_BACKWARD_CASES, ids=str)
def test_grouped_backward_kernel(case, mode, monkeypatch, settings_override):
    """grouped_backward's gradients against float64 (float32 "highest" under
    1e-5, the others within twice torch's error)."""
    ran = _spy_grouped_backward(monkeypatch, settings_override)
    test_backward(case, mode)
    assert ran, "grouped_backward did not run"


@pytest.mark.parametrize("tiles, multiprocessors", [((64,), 1), ((128,), 3), ((512,), 2)], ids=["64-1", "128-3", "512-2"])
@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name in ("gb_p3", "gb_c8_s3_d2", "gb_unbatched")], ids=str)
def test_grouped_backward_items(case, tiles, multiprocessors, monkeypatch, settings_override):
    """Short items and few multiprocessors: blocks walk many items, items
    end inside a row and at an image's end."""
    ran = _spy_grouped_backward(monkeypatch, settings_override, tiles, multiprocessors)
    test_backward(case, ("float32", "highest"))
    test_backward(case, ("bfloat16", "highest"))
    assert ran


@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name in ("gb_p3", "gb_c4_m32")], ids=str)
def test_grouped_backward_output_mask(case, monkeypatch, settings_override):
    """grad_input alone and grad_weight alone (smaller staging, no weight or
    no x) give the bits of the full pass."""
    ran = _spy_grouped_backward(monkeypatch, settings_override)
    rng = numpy.random.default_rng(25)
    x, w, _ = case.arrays(rng, numpy.float32)
    out_shape = _ops(case).ref_forward(x, w, **case.kwargs).shape
    gy, xg, wg = (cupy.asarray(a.astype(numpy.float32)) for a in (rng.standard_normal(out_shape), x, w))
    backward = _ops(case).backward
    full = backward(gy, xg, wg, **case.kwargs, output_mask=(True, True, False))
    with poisoned_allocations():
        alone = [backward(gy, xg, wg, **case.kwargs, output_mask=mask)[i] for i, mask in enumerate(((True, False, False), (False, True, False)))]
    for a, b in zip(full[:2], alone):
        assert cupy.asnumpy(a).tobytes() == cupy.asnumpy(b).tobytes()
    assert len(ran) == 3


@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name in ("gb_p3", "gb_c8_s3_d2")], ids=str)
def test_grouped_backward_64_bit_index(case, monkeypatch, settings_override):
    ran = _spy_grouped_backward(monkeypatch, settings_override)
    settings_override(index_type="long long")
    test_backward(case, ("float16", "highest"))
    test_backward(case, ("float32", "highest"))  # the pipelined build
    assert ran


@pytest.mark.parametrize("pipe", [True, False], ids=["pipelined", "one-buffer"])
@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name != "gb_c4_m32"], ids=str)
def test_grouped_backward_float32_builds(case, pipe, monkeypatch, settings_override):
    """float32 with 8 or 16 channels a group runs the pipelined build (two
    cp.async staging buffers, grad_input's channels in two parts) unless
    grouped_pipe is off, then the one-buffer build: both against float64 in
    both float32 modes, and the launched names show which ran."""
    settings_override(grouped_pipe=pipe)
    ran = _spy_grouped_backward(monkeypatch, settings_override)
    launched = settings_override.observe_launches()
    for mode in (("float32", "highest"), ("float32", "tf32")):
        test_backward(case, mode)
    assert ran and all(_kernels.grouped_backward_pipes(geometry, "float32") for geometry in ran)
    builds = [name for name in launched if name.startswith("grouped_backward<")]
    assert builds and all(name.endswith(", true>") == pipe for name in builds)


@pytest.mark.parametrize("mode", [("float32", "highest"), ("float16", "highest")], ids=["float32", "float16"])
@pytest.mark.parametrize("case", [c for c in GROUPED_BACKWARD_CASES if c.name in ("gb_p3", "gb_unbatched")], ids=str)
def test_grouped_backward_is_bitwise_deterministic(case, mode, monkeypatch, settings_override):
    ran = _spy_grouped_backward(monkeypatch, settings_override, multiprocessors=3)
    test_backward_is_bitwise_deterministic(case, mode)
    assert ran


def _grouped_forward_takes(case) -> bool:
    lead = () if case.batch is None else (case.batch,)
    geometry = _geometry.make_geometry(
        case.dims, lead + (case.in_channels,) + case.size, (case.in_channels, case.out_channels // case.groups) + case.kernel, None,
        case.stride, case.padding, case.output_padding, case.groups, case.dilation,
    )  # fmt: skip
    return _kernels.grouped_forward_applies(geometry, "float32")


def _spy_grouped_forward(monkeypatch, override):
    """The geometries grouped_forward served, small problems included (the
    size rule lifted, no remembered small launch)."""
    override(use_grouped_forward="anywhere")
    override(small_forward_max_output=0)
    return _served(override, ("grouped_forward",), lambda p, plan: p.geometry)


@pytest.mark.parametrize("mode", TENSOR_CORE_MODES, ids=["-".join(m) for m in TENSOR_CORE_MODES])
@pytest.mark.parametrize("case", GROUPED_FORWARD_CASES + [c for c in CASES + LARGE_CASES if _grouped_forward_takes(c)], ids=str)
def test_grouped_forward_kernel(case, mode, monkeypatch, settings_override):
    """grouped_forward's output against float64 (float32 "highest" under
    1e-5, the others within twice torch's error), every element written
    (poisoned memory)."""
    ran = _spy_grouped_forward(monkeypatch, settings_override)
    test_forward(case, mode)
    assert ran, "grouped_forward did not run"


@pytest.mark.parametrize("case", [c for c in GROUPED_FORWARD_CASES if c.name in ("gf_p3", "gf_c2_m16_s3")], ids=str)
def test_grouped_forward_64_bit_index(case, monkeypatch, settings_override):
    ran = _spy_grouped_forward(monkeypatch, settings_override)
    settings_override(index_type="long long")
    test_forward(case, ("bfloat16", "highest"))
    assert ran


def test_grouped_forward_routing():
    """P3's shape takes grouped_forward in every mode but float64; wider
    groups, other output-channel counts, long strides, 2D problems and small
    outputs keep the other kernels."""
    from cupyconv.kernels import grouped_forward

    def routed(x_shape, w_shape, dtype="float32", dims=1, precision="highest", **kwargs):
        geometry = _geometry.make_geometry(
            dims, x_shape, w_shape, None, kwargs.get("stride", 1), kwargs.get("padding", 0), kwargs.get("output_padding", 0), kwargs.get("groups", 1), 1
        )  # fmt: skip
        return grouped_forward._grouped_forward_routed(geometry, dtype, precision)

    p3 = dict(stride=2, padding=1, output_padding=1, groups=4)
    assert all(routed((16, 64, 65536), (64, 8, 5), dtype, **p3) for dtype in ("float32", "float16", "bfloat16"))
    assert routed((16, 64, 65536), (64, 8, 5), precision="tf32", **p3)
    assert not routed((16, 64, 65536), (64, 8, 5), "float64", **p3)
    # 16 output channels a group at stride 4: float32 "highest" only
    assert routed((16, 64, 16384), (64, 16, 8), stride=4, groups=4)
    assert not any(routed((16, 64, 16384), (64, 16, 8), d, precision=p, stride=4, groups=4) for d, p in (("float32", "tf32"), ("float16", "highest")))
    assert not routed((1, 64, 128), (64, 8, 5), **p3)  # 8192 outputs
    assert not routed((4, 128, 4096), (128, 8, 5), stride=2, groups=4)  # 32 channels a group
    assert not routed((4, 64, 4096), (64, 6, 5), **p3)  # 6 output channels a group
    assert not routed((4, 64, 4096), (64, 8, 5), stride=5, groups=4)
    assert not routed((4, 64, 4096), (64, 8, 17), **p3)  # 17 taps
    assert not routed((4, 64, 4096), (64, 8, 1), stride=2, groups=64)  # depthwise: its stencil
    assert not routed((4, 64, 64, 64), (64, 8, 3, 3), dims=2, stride=2, groups=4)


def _spy_phase_backward(monkeypatch, override):
    """The geometries whose backward pass ran as a stride-1 problem on one
    phase of grad_output (small problems included)."""
    override(use_phase_backward="anywhere")
    return _served(override, ("phase_backward",), lambda p, plan: p.geometry)


PHASE_MODES = [("float16", "highest"), ("bfloat16", "highest")]


@pytest.mark.parametrize("mode", PHASE_MODES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", PHASE_BACKWARD_CASES + [c for c in CASES + WINDOW_CASES if c.name in ("1d_big_padding", "1d_win_s2_d4_op3")], ids=str)
def test_phase_backward(case, mode, monkeypatch, settings_override):
    """The backward pass as a stride-1 problem on grad_output's one phase
    (float16 and bfloat16): gradients against float64 within twice torch's
    error, poisoned outputs."""
    ran = _spy_phase_backward(monkeypatch, settings_override)
    test_backward(case, mode)
    assert ran, "the phase rewrite did not run"


@pytest.mark.parametrize("index", ["int", "long long"])
@pytest.mark.parametrize("case", PHASE_BACKWARD_CASES + [c for c in CASES if c.name == "1d_big_padding"], ids=str)
def test_phase_gather(case, index, monkeypatch):
    """phase_gather gives bitwise the NumPy gather of the rewrite (zeros at
    the ends included), in poisoned memory, with both index types."""
    from cupyconv.kernels import phase_gather

    from cupyconv.kernels import common

    monkeypatch.setattr(common, "index_type", lambda *counts: index)  # (what _launch._index_type reads)
    lead = () if case.batch is None else (case.batch,)
    geometry = _geometry.make_geometry(
        1, lead + (case.in_channels,) + case.size, (case.in_channels, case.out_channels // case.groups) + case.kernel, None,
        case.stride, case.padding, case.output_padding, case.groups, case.dilation,
    )  # fmt: skip
    phase = phase_gather._phase_backward_geometry(geometry)
    gy = numpy.random.default_rng(35).standard_normal(geometry.output_shape4).astype(numpy.float16)
    expected = phase_gather._phase_grad_output(gy, geometry, *phase)
    with poisoned_allocations():
        gathered = phase_gather._phase_grad_output(cupy.asarray(gy), geometry, *phase)
    assert gathered.shape == expected.shape and cupy.asnumpy(gathered).tobytes() == expected.tobytes()


def test_phase_backward_output_mask_and_routing(monkeypatch, settings_override):
    """grad_input alone and grad_weight alone give the bits of the full pass;
    P4's shape takes the rewrite, small problems and stride 2 with dilation 3
    do not."""
    from cupyconv.kernels import phase_gather

    case = PHASE_BACKWARD_CASES[0]
    ran = _spy_phase_backward(monkeypatch, settings_override)
    rng = numpy.random.default_rng(34)
    x, w, _ = case.arrays(rng, numpy.float16)
    out_shape = _ops(case).ref_forward(x, w, **case.kwargs).shape
    gy, xg, wg = (cupy.asarray(a.astype(numpy.float16)) for a in (rng.standard_normal(out_shape), x, w))
    backward = _ops(case).backward
    full = backward(gy, xg, wg, **case.kwargs)
    with poisoned_allocations():
        alone = [backward(gy, xg, wg, **case.kwargs, output_mask=mask)[i] for i, mask in enumerate(((True, False, False), (False, True, False)))]
    for a, b in zip(full[:2], alone):
        assert cupy.asnumpy(a).tobytes() == cupy.asnumpy(b).tobytes()
    assert len(ran) == 3
    monkeypatch.undo()
    settings_override.undo()

    def routed(x_shape, w_shape, stride, padding, dilation, dtype="float16"):
        geometry = _geometry.make_geometry(1, x_shape, w_shape, None, stride, padding, 0, 1, dilation)
        return phase_gather._phase_backward_routed(geometry, dtype) is not None

    assert routed((16, 32, 131072), (32, 64, 3), 2, 1, 2) and routed((16, 32, 131072), (32, 64, 3), 2, 1, 2, "bfloat16")
    assert not routed((16, 32, 131072), (32, 64, 3), 2, 1, 2, "float32")  # the copy costs more than it saves
    assert not routed((1, 32, 256), (32, 64, 3), 2, 1, 2)  # 64 x 513 outputs
    assert not routed((16, 32, 131072), (32, 64, 3), 2, 1, 3)


def test_grouped_backward_routing():
    """P3's shape takes grouped_backward in every mode but float64; wider
    groups, 2D problems and small inputs keep the GEMMs."""
    from cupyconv.kernels import grouped_backward

    def routed(x_shape, w_shape, dtype="float32", dims=1, **kwargs):
        geometry = _geometry.make_geometry(dims, x_shape, w_shape, None, kwargs.get("stride", 1), kwargs.get("padding", 0), 0, kwargs.get("groups", 1), 1)
        return grouped_backward._grouped_backward_routed(geometry, dtype)

    p3 = dict(stride=2, padding=1, groups=4)
    assert all(routed((4, 64, 4096), (64, 8, 5), dtype, **p3) for dtype in ("float32", "float16", "bfloat16"))
    assert not routed((4, 64, 4096), (64, 8, 5), "float64", **p3)
    assert not routed((4, 64, 128), (64, 8, 5), **p3)  # 2**15 input elements
    assert not routed((4, 128, 4096), (128, 8, 5), stride=2, groups=4)  # 32 channels a group
    assert not routed((4, 64, 4096), (64, 16, 5), **p3)  # 16 output channels a group: 4 * 16 > 32 lanes
    assert not routed((4, 64, 4096), (64, 8, 9), **p3)  # 9 taps
    assert not routed((4, 64, 64, 64), (64, 8, 3, 3), dims=2, stride=2, groups=4)


@pytest.mark.parametrize("case", [c for c in CASES + LARGE_CASES if c.name in ("1d_s3_d2_p2_op1", "2d_per_axis", "1d_wide_channels", "1d_dw_long")], ids=str)
def test_64_bit_index_kernels(case, settings_override):
    """The long long instantiations (used past 2**31 elements) on small data."""
    settings_override(index_type="long long")
    rng = numpy.random.default_rng(24)
    x, w, b = case.arrays(rng, numpy.float32)
    oracle = _ops(case).ref_forward(x, w, b, **case.kwargs)
    fn = _ops(case).forward
    with poisoned_allocations():
        y = fn(_to_gpu(x, numpy.float32), _to_gpu(w, numpy.float32), _to_gpu(b, numpy.float32), **case.kwargs)
        gy = cupy.asarray(rng.standard_normal(oracle.shape).astype(numpy.float32))
        backward = _ops(case).backward
        grads = backward(gy, _to_gpu(x, numpy.float32), _to_gpu(w, numpy.float32), **case.kwargs)
    assert relative_error(cupy.asnumpy(y), oracle) < 1e-5
    expected = _ops(case).ref_backward(
        cupy.asnumpy(gy).astype(numpy.float64), x, w, **case.kwargs
    )
    for grad, oracle_grad in zip(grads, expected):
        assert relative_error(cupy.asnumpy(grad), oracle_grad) < 1e-5


@pytest.fixture
def depthwise_chunk_runs(monkeypatch, settings_override):
    """depthwise_forward with every warp walking runs of up to 3 chunks of a
    row (the grid-size rule off, so small problems do too); the plans are
    made afresh before and after.  Returns the chunks per warp each plan took."""
    from cupyconv import _cuda
    from cupyconv.kernels import depthwise as depthwise_kernels

    monkeypatch.setattr(depthwise_kernels, "DEPTHWISE_WARP_CHUNKS", 3)  # read by depthwise_warp_chunks
    settings_override(tiny_max_output=0)  # so that the small cases reach depthwise_forward
    monkeypatch.setattr(depthwise_kernels, "DEPTHWISE_MIN_WARPS_PER_SM", 0)
    taken, original = [], depthwise_kernels.depthwise_warp_chunks
    monkeypatch.setattr(depthwise_kernels, "depthwise_warp_chunks", lambda *args: taken.append(original(*args)) or taken[-1])
    caches = (depthwise_kernels._depthwise_plan, _cuda._small_forward_launch)
    for cache in caches:
        cache.cache_clear()
    yield taken
    for cache in caches:
        cache.cache_clear()


# Depthwise problems whose output rows span 5 and 11 chunks of 128: runs of 3
# chunks per warp, the last one cut short by the row's end.
DEPTHWISE_LONG_ROWS = [
    LARGE_CASES[0],
    Case("2d_dw_wide", 2, 2, 3, 3, (3, 5), (4, 300), stride=(1, 2), padding=(1, 2), groups=3),
]


@pytest.mark.parametrize("mode", [("float32", "highest"), ("float16", "highest"), ("float64", "highest")], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("case", DEPTHWISE_LONG_ROWS, ids=str)
def test_depthwise_forward_in_runs_of_chunks(case, mode, depthwise_chunk_runs):
    """A warp of depthwise_forward does one row's setup for several chunks of
    it (big problems); every output is still written once, right."""
    test_forward(case, mode)
    assert depthwise_chunk_runs == [3], depthwise_chunk_runs


def _tf32_model(bits, ties_to_even: bool):
    """Finite floats (as uint32 bits) rounded to TF32 (10 mantissa bits) to
    nearest, the low 13 bits cleared."""
    low, base = bits & 0x1FFF, bits & ~numpy.uint32(0x1FFF)
    tie_up = (base & 0x2000) != 0 if ties_to_even else numpy.ones(bits.shape, bool)
    up = (low > 0x1000) | ((low == 0x1000) & tie_up)
    return numpy.where(up, base + numpy.uint32(0x2000), base).astype(numpy.uint32)


def test_to_tf32_rounds_to_nearest():
    """mma.cuh's to_tf32, which makes every TF32 and 3xTF32 operand: the float
    rounded to nearest TF32 with the low 13 bits zero (3xTF32's low part is
    the float minus that), ties to even on sm_90 (cvt.rn) and away from zero
    before (cvt.rna); infinities stay, NaN stays NaN."""
    from cupyconv import _cuda

    code = _kernels.source("mma.cuh") + """
extern "C" __global__ void round_tf32(const float* x, unsigned* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = to_tf32(x[i]);
}
"""
    kernel = cupy.RawModule(code=code, options=("-std=c++17",)).get_function("round_tf32")
    rng = numpy.random.default_rng(27)
    finite = [
        (rng.standard_normal(20000) * numpy.exp2(rng.integers(-140, 120, 20000))).astype(numpy.float32).view(numpy.uint32),
        (rng.integers(0, 1 << 18, 4000, dtype=numpy.uint32) << 13) | 0x1000,  # exact ties, both parities, both signs
        numpy.array([0, 0x80000000, 1, 0x1000, 0x3000, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FF000, 0x7F7FEFFF], numpy.uint32),  # zeros, subnormals, overflow
    ]
    finite = numpy.concatenate(finite).astype(numpy.uint32)
    finite = finite[(finite >> 23) & 0xFF != 0xFF]  # drop the NaN and infinity patterns
    special = numpy.array([0x7F800000, 0xFF800000, 0x7FFFFFFF, 0x7FC00000, 0xFFFFFFFF, 0x7F800001], numpy.uint32)
    x = cupy.asarray(numpy.concatenate([finite, special]).view(numpy.float32))
    y = cupy.empty(x.size, dtype=numpy.uint32)
    kernel(((x.size + 255) // 256,), (256,), (x, y, numpy.int32(x.size)))
    y = cupy.asnumpy(y)
    expected = _tf32_model(finite, ties_to_even=_cuda._compute_capability() >= 90)
    wrong = numpy.flatnonzero(y[: finite.size] != expected)
    assert wrong.size == 0, [(hex(finite[i]), hex(y[i]), hex(expected[i])) for i in wrong[:8]]
    rounded = y[finite.size :].view(numpy.float32)
    assert list(rounded[:2]) == [numpy.inf, -numpy.inf] and numpy.isnan(rounded[2:]).all(), [hex(v) for v in y[finite.size :]]


@pytest.mark.parametrize(
    "shapes",
    [
        dict(x=(2, 6, 40), w=(6, 5, 3), groups=2),  # channels padded (3 of 4 or 8), two groups
        dict(x=(2, 16, 40), w=(16, 8, 3), stride=2, padding=1, dilation=2),  # the forward pass folds the dilated kernel
        dict(x=(1, 8, 40), w=(8, 24, 8), stride=4, padding=2),  # dense taps, the kernel a multiple of the stride
        dict(x=(1, 12, 40), w=(12, 8, 5), stride=3, dilation=2, groups=4),
        dict(x=(1, 40, 8), w=(40, 70, 80)),  # several tiles of taps, rows and channels (the kernel's 32 x 32)
        dict(x=(1, 36, 8), w=(36, 20, 30), stride=2, padding=1, dilation=4),  # a dilated fold whose taps span tiles
    ],
    ids=["groups_pad", "dilated_fold", "dense", "stride3", "tiles", "dilated_tiles"],
)
@pytest.mark.parametrize("dtype,round_tf32", [("float32", False), ("float32", True), ("float32", "split"), ("float16", False), ("bfloat16", False)])
def test_window_weight_pack(shapes, dtype, round_tf32):
    """pack_window_weight (the window kernels' weight in one launch) against
    _kernels.pack_window_weight in NumPy, channels padded with zeros, float
    rounded to TF32 as to_tf32 rounds on sm_90 (ties to even; Inf and NaN
    kept), or split for 3xTF32 ("split": that rounding, then the remainder
    rounded the same way, as MmaOp<float, 3> splits): bitwise, for both
    passes, folded or not, in poisoned memory."""
    from cupyconv.kernels import pack_weight

    kwargs = {k: v for k, v in shapes.items() if k not in ("x", "w")}
    geometry = _geometry.make_geometry(1, shapes["x"], shapes["w"], None, kwargs.get("stride", 1), kwargs.get("padding", 0), 0,
                                       kwargs.get("groups", 1), kwargs.get("dilation", 1))  # fmt: skip
    rng = numpy.random.default_rng(31)
    w = rng.standard_normal(shapes["w"]).astype(numpy_dtype(dtype))
    if dtype == "float32":  # ties of both parities, infinities and NaN
        bits = w.reshape(-1).view(numpy.uint32)
        bits[:6] = (bits[:6] & ~numpy.uint32(0x1FFF)) | 0x1000
        bits[6:9] = [0x7F800000, 0xFF800000, 0x7FC00001]
    wide = numpy.uint32 if dtype == "float32" else numpy.uint16
    for pass_name in ("forward", "grad_input"):
        for fold in (True, False):
            expected = numpy.ascontiguousarray(_kernels.pack_window_weight(w, geometry, pass_name, fold))
            padded = _kernels.window_channels_padded(expected.shape[3], dtype)
            expected = numpy.concatenate([expected, numpy.zeros(expected.shape[:3] + (padded - expected.shape[3],), expected.dtype)], axis=3)
            expected = expected.view(wide)
            if round_tf32:
                finite = (expected >> 23) & 0xFF != 0xFF
                hi = numpy.where(finite, _tf32_model(expected, ties_to_even=True), expected)
                if round_tf32 == "split":
                    with numpy.errstate(invalid="ignore", over="ignore"):
                        rest = (expected.view(numpy.float32) - hi.view(numpy.float32)).view(numpy.uint32)
                    lo = numpy.where((rest >> 23) & 0xFF != 0xFF, _tf32_model(rest, ties_to_even=True), rest)
                    expected = numpy.stack([hi, lo])
                else:
                    expected = hi
            with poisoned_allocations():
                packed = pack_weight._window_weight(cupy.asarray(w), geometry, pass_name, dtype, fold, round_tf32 is True, round_tf32 == "split")
                got = cupy.asnumpy(packed).view(wide)
            assert got.shape == expected.shape, (pass_name, fold, got.shape, expected.shape)
            differ = got != expected
            if round_tf32 == "split":  # lo of Inf or NaN: a NaN (the GPU's subtraction gives its own NaN bits)
                differ[1] &= ~(numpy.isnan(got[1].view(numpy.float32)) & numpy.isnan(expected[1].view(numpy.float32)))
            wrong = numpy.argwhere(differ)
            assert wrong.size == 0, (pass_name, fold, [(tuple(i), hex(got[tuple(i)]), hex(expected[tuple(i)])) for i in wrong[:6]])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_direct_weight_pack(dtype):
    """pack_direct_weight (conv_direct's weight in one launch) against
    _kernels.pack_direct_weight in NumPy, converted to the accumulator type
    and padded with zeros to each tile's rows: bitwise, in poisoned memory."""
    from cupyconv import _launch
    from cupyconv.kernels import conv_direct

    geometry = _geometry.make_geometry(2, (2, 6, 9, 10), (6, 20, 3, 2), None, (2, 3), (1, 0), 0, 2, (1, 2))
    w = numpy.random.default_rng(35).standard_normal((6, 20, 3, 2)).astype(numpy_dtype(dtype))
    acc = numpy.float64 if dtype == "float64" else numpy.float32
    view = _kernels.pack_direct_weight(w, geometry).astype(acc)
    for tile in _kernels.DIRECT_TILES:
        m_pad = -(-view.shape[4] // tile.bm) * tile.bm
        expected = numpy.concatenate([view, numpy.zeros(view.shape[:4] + (m_pad - view.shape[4],), acc)], axis=4)
        with poisoned_allocations():
            plan, shape = conv_direct._direct_weight_plan(geometry, dtype, tile.bm)
            packed = cupy.empty(shape, dtype=acc)
            _launch._launch(plan, (cupy.asarray(w), packed))
            got = cupy.asnumpy(packed)
        assert got.dtype == acc and got.shape == expected.shape, (tile, got.dtype, got.shape, expected.shape)
        assert (got.view(numpy.uint8) == expected.view(numpy.uint8)).all(), tile


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


def _spy_tiny(monkeypatch):
    """The geometries conv_tiny's plans are made for (a list that fills as
    calls plan), with the small launches' caches cleared so that each new
    signature plans afresh."""
    from cupyconv import _cuda
    from cupyconv.kernels import conv_tiny

    made, original = [], conv_tiny._tiny_plan.__wrapped__
    monkeypatch.setattr(conv_tiny, "_tiny_plan", lambda *args: made.append(args[0]) or original(*args))
    _cuda._small_forward_launch.cache_clear()
    cupyconv._remember.FAST_FORWARD.clear()
    return made


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_past_tiny(case, mode, monkeypatch, settings_override):
    """The small forward passes on the kernels they take with conv_tiny off
    (conv_gemm, conv_mma, depthwise_forward)."""
    settings_override(tiny_max_output=0)
    made = _spy_tiny(monkeypatch)
    test_forward(case, mode)
    assert not made


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_basic", "1d_groups2_s2", "2d_per_axis", "2d_dw_per_axis")], ids=str)
def test_tiny_routes(case, mode, monkeypatch):
    """conv_tiny takes the small passes under both of its limits, with
    autotuning on too (it has no tiles: the same launch, the same bits) and
    with 64-bit indices; a pass over either limit goes past it."""
    from cupyconv import _autotune
    from cupyconv.kernels import rules

    made = _spy_tiny(monkeypatch)
    test_forward(case, mode)
    assert made
    dtype = numpy_dtype(mode[0])
    x, w, b = (_to_gpu(a, dtype) for a in case.arrays(numpy.random.default_rng(33), dtype))
    fn = _ops(case).forward
    y = fn(x, w, b, **case.kwargs, precision=mode[1])
    with monkeypatch.context() as m:
        m.setattr(_autotune, "enabled", lambda: True)
        m.setattr(_autotune, "choose", lambda signature, *args, **kwargs: pytest.fail(f"{signature} tuned"))
        assert cupy.array_equal(fn(x, w, b, **case.kwargs, precision=mode[1]), y)
    with cupyconv.settings.override(index_type="long long"):
        count = len(made)
        test_forward(case, mode)
        assert len(made) == count + 1
    geometry = _geometry.geometry_of(case.dims, x.shape, w.shape, b.shape, case.stride, case.padding, case.output_padding, case.groups, case.dilation)
    for name, value in (("tiny_max_output", y.size - 1), ("tiny_max_products", rules._products_per_output(geometry, "forward") - 1e-9)):
        with cupyconv.settings.override(**{name: value}):
            count = len(made)
            test_forward(case, mode)
            assert len(made) == count, name


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
    """(names of the kernels _cuda._launch ran, calls of the packed GEMM
    weight, which a recording cannot replay)."""
    from cupyconv import _cuda

    launched, packs = [], []
    launch, pack = _cuda._launch, _kernels.pack_gemm_weight
    monkeypatch.setattr(_cuda, "_launch", lambda plan, arrays: (launched.append(plan.name), launch(plan, arrays))[1])
    monkeypatch.setattr(_kernels, "pack_gemm_weight", lambda *args: (packs.append(1), pack(*args))[1])
    return launched, packs


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", REMEMBERED_CASES, ids=str)
def test_remembered_forward_replays_routes(case, mode, monkeypatch):
    """The third call of a signature checks a recording of the second; from
    the fourth on the call replays it without a launch through _launch.  On
    fresh inputs, in poisoned memory (output and temporaries), on the
    default stream and on another one, the replay gives bitwise what the
    checked path gives.  Only the packed GEMM weight (CuPy operations) keeps a
    call from being remembered."""
    from cupyconv import _remember

    dtype_name, precision = mode
    dtype = numpy_dtype(dtype_name)
    rng = numpy.random.default_rng(31)
    x, w, b = (_to_gpu(a, dtype) for a in case.arrays(rng, dtype))
    fn = _ops(case).forward
    launched, packs = _remember_spies(monkeypatch)
    cupyconv._remember.FAST_FORWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    first = fn(x, w, b, **case.kwargs, precision=precision)
    assert first.size >= cupyconv.settings.current().small_forward_max_output
    names = list(launched)
    for _ in range(2):
        assert cupy.array_equal(fn(x, w, b, **case.kwargs, precision=precision), first)
    assert launched == names * 3
    if packs:
        assert not cupyconv._remember.FAST_FORWARD  # the packed GEMM weight: every call checked
        return
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
    launched, _ = _remember_spies(monkeypatch)
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


def _grads_equal(a, b) -> bool:
    return all((x is None) == (y is None) and (x is None or bool(cupy.array_equal(x, y))) for x, y in zip(a, b))


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
    launched, packs = _remember_spies(monkeypatch)
    cupyconv._remember.FAST_BACKWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    first = fn(gy, x, w, **case.kwargs, output_mask=mask, precision=precision)
    assert [g is not None for g in first] == list(mask)
    names = list(launched)
    for _ in range(2):
        assert _grads_equal(fn(gy, x, w, **case.kwargs, output_mask=mask, precision=precision), first)
    assert launched == names * 3
    if packs:
        assert not cupyconv._remember.FAST_BACKWARD  # the packed GEMM weight: every call checked
        return
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
    launched, _ = _remember_spies(monkeypatch)
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


# grad_input_overlap: X2-like problems with a row tile, column tiles and
# k-blocks that end short, a kernel under 16 taps, padding 0 and 8, an
# output_padding, an unbatched call, and 3 output channels (two float
# k-blocks, fewer than the float build's rounding lag: only its rounding
# after the loop).  Rows of grad_input of 4 positions or more (staged) and
# of 2 mod 4 (stored from the accumulators).
OVERLAP_CASES = [
    Case("ov_x2", 1, 2, 256, 128, (16,), (600,), stride=8, padding=4),
    Case("ov_short", 1, 3, 200, 30, (12,), (130,), stride=8, padding=0),
    Case("ov_pad8_op4", 1, 1, 64, 40, (16,), (258,), stride=8, padding=8, output_padding=4, bias=False),
    Case("ov_unbatched", 1, None, 96, 72, (12,), (64,), stride=8, padding=4),
    Case("ov_few", 1, 2, 64, 3, (16,), (300,), stride=8, padding=4),
]
OVERLAP_MODES = [("float16", "highest"), ("bfloat16", "highest"), ("float32", "tf32")]


@pytest.mark.parametrize("mode", OVERLAP_MODES, ids=["float16", "bfloat16", "tf32"])
@pytest.mark.parametrize("case", OVERLAP_CASES, ids=str)
def test_grad_input_overlap(case, mode, settings_override):
    """grad_input_overlap (forced on) against float64, within twice torch's
    error (test_backward), and the kernel ran."""
    from cupyconv import _cuda

    if _cuda._compute_capability() != 90:
        pytest.skip("grad_input_overlap is built for compute capability 9.0 only")
    settings_override(use_grad_input_overlap=True)
    settings_override(use_grad_input_multicast=False)  # (float's own build: test_grad_input_multicast takes the default)
    ran = settings_override.observe_launches()
    test_backward(case, mode)
    assert any(name.startswith("grad_input_overlap<") for name in ran), ran


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


@pytest.mark.parametrize("multiprocessors", [None, 2, 12])
@pytest.mark.parametrize("case", OVERLAP_CASES, ids=str)
def test_grad_input_multicast(case, multiprocessors, monkeypatch, settings_override):
    """grad_input_multicast, which takes the float32 "tf32" grad_input of
    these problems, against float64 within twice torch's error
    (test_backward), in poisoned memory, on grids of one cluster (every unit
    in turn: the buffers' phases wrap many times), of six and the device's;
    it ran, and grad_input_overlap did not."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_launches(monkeypatch, settings_override, multiprocessors)
    test_backward(case, ("float32", "tf32"))
    names = [name for name, _ in ran]
    assert names.count(_kernels.grad_input_multicast_name("int")) == 1 and names.count(_kernels.PACK_MULTICAST_WEIGHT) == 1, names
    assert not any(name.startswith("grad_input_overlap<") for name in names), names
    if multiprocessors is not None:
        (blocks,) = [b for name, b in ran if name.startswith("grad_input_multicast<")]
        assert blocks % 2 == 0 and blocks <= multiprocessors  # whole clusters, one a unit at most


def test_grad_input_multicast_64_bit_index(monkeypatch, settings_override):
    """The build with 64-bit indices (taken where an array passes 2**31 elements)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(index_type="long long")
    ran = _spy_launches(monkeypatch, settings_override, 4)
    test_backward(OVERLAP_CASES[0], ("float32", "tf32"))
    assert _kernels.grad_input_multicast_name("long long") in [name for name, _ in ran], ran


def test_grad_input_multicast_repeats_bitwise(monkeypatch, settings_override):
    """Runs of the same backward call give the same bits, and from the
    fourth call on the remembered replay (new arrays: both tensor maps
    rewritten) answers, in poisoned memory, with the checked path's; a
    weight one element off a 16-byte boundary (pack_multicast_weight's
    element-by-element reads) gives the same grad_input."""
    from cupyconv import _remember

    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    case = OVERLAP_CASES[0]
    rng = numpy.random.default_rng(41)
    x, w, _ = (cupy.asarray(a.astype(numpy.float32)) if a is not None else None for a in case.arrays(rng, numpy.float32))
    gy = cupy.asarray(rng.standard_normal(cupyconv.conv_transpose1d(x, w, **case.kwargs).shape).astype(numpy.float32))
    ran = _spy_launches(monkeypatch, settings_override)
    cupyconv._remember.FAST_BACKWARD.clear()
    _remember._REMEMBER_SEEN.clear()
    run = lambda weight: cupyconv.conv_transpose1d_backward(gy, x, weight, **case.kwargs, precision="tf32")
    grads = [run(w) for _ in range(3)]
    assert [name for name, _ in ran].count(_kernels.grad_input_multicast_name("int")) == 3, ran
    answered = _fast_calls(monkeypatch, _remember._Replay)
    with poisoned_allocations():
        grads += [run(w) for _ in range(2)]
        cupy.cuda.get_current_stream().synchronize()
    assert answered == [True, True]
    assert all(_grads_equal(g, grads[0]) for g in grads[1:])
    shifted = cupy.empty(w.size + 1, dtype=w.dtype)[1:].reshape(w.shape)
    shifted[...] = w
    assert shifted.data.ptr % 16 == 4
    assert cupy.array_equal(run(shifted)[0], grads[0][0])


@pytest.mark.parametrize("mode", [("bfloat16", "highest"), ("float32", "tf32")], ids=["bfloat16", "tf32"])
def test_grad_input_overlap_64_bit_index(mode, settings_override):
    """The builds with 64-bit indices (taken where an array passes 2**31 elements)."""
    from cupyconv import _cuda

    if _cuda._compute_capability() != 90:
        pytest.skip("grad_input_overlap is built for compute capability 9.0 only")
    settings_override(use_grad_input_overlap=True)
    settings_override(use_grad_input_multicast=False)
    settings_override(index_type="long long")
    ran = settings_override.observe_launches()
    test_backward(OVERLAP_CASES[1], mode)
    assert any(name.startswith("grad_input_overlap<") and name.endswith("long long>") for name in ran), ran


@pytest.mark.parametrize("mode", [("float16", "highest"), ("float32", "tf32")], ids=["float16", "tf32"])
def test_pack_overlap_weight_reads_any_alignment(mode, settings_override):
    """pack_overlap_weight reads a 16-tap row as 16-byte vectors where it
    lies on a 16-byte boundary, else element by element: a weight one
    element off that boundary gives grad_input bit for bit."""
    from cupyconv import _cuda

    if _cuda._compute_capability() != 90:
        pytest.skip("grad_input_overlap is built for compute capability 9.0 only")
    settings_override(use_grad_input_overlap=True)
    settings_override(use_grad_input_multicast=False)  # (float: the overlap build's pack; test_grad_input_multicast_repeats_bitwise reads pack_multicast_weight's)
    dtype, precision = numpy.dtype(mode[0]), mode[1]
    case = OVERLAP_CASES[0]
    rng = numpy.random.default_rng(24)
    x, w, _ = case.arrays(rng, dtype)
    gy = cupy.asarray(rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(dtype))
    xg, wg = cupy.asarray(x.astype(dtype)), cupy.asarray(w.astype(dtype))
    shifted = cupy.empty(wg.size + 1, dtype=wg.dtype)[1:].reshape(wg.shape)
    shifted[...] = wg
    assert shifted.data.ptr % 16 == dtype.itemsize
    ran = settings_override.observe_launches()
    run = lambda weight: cupyconv.conv_transpose1d_backward(gy, xg, weight, **case.kwargs, output_mask=(True, False, False), precision=precision)[0]  # noqa: E731
    assert cupy.asnumpy(run(shifted)).tobytes() == cupy.asnumpy(run(wg)).tobytes()
    assert sum(name.startswith("pack_overlap_weight<") for name in ran) == 2, ran
    assert sum(name.startswith("grad_input_overlap<") for name in ran) == 2, ran


def test_grad_input_overlap_declines():
    """Problems outside its rule (a row length of grad_output not a multiple
    of 4, stride 4) keep the other kernels."""
    from cupyconv import _geometry
    from cupyconv.kernels import grad_input_overlap

    for shape in [(1, (2, 16, 64), (16, 8, 9), 8, 4), (1, (2, 16, 64), (16, 8, 16), 4, 4)]:
        dims, xs, ws, stride, padding = shape
        g = _geometry.make_geometry(dims, xs, ws, None, stride, padding, 0, 1, 1)
        fake = cupy.empty(8, dtype=numpy.float16)
        assert not grad_input_overlap._grad_input_overlap_applies(g, "float16", fake.data.ptr % 256, fake.data.ptr % 256)
    # float: "tf32" only (3xTF32 is not built), and grad_output 16-byte aligned
    g = _geometry.make_geometry(1, (2, 16, 64), (16, 8, 16), None, 8, 4, 0, 1, 1)
    aligned = cupy.empty(64, dtype=numpy.float32)
    assert grad_input_overlap._grad_input_overlap_applies(g, "float32", aligned.data.ptr % 256, aligned.data.ptr % 256, 1)
    assert not grad_input_overlap._grad_input_overlap_applies(g, "float32", aligned.data.ptr % 256, aligned.data.ptr % 256, 3)
    assert not grad_input_overlap._grad_input_overlap_applies(g, "float32", aligned[2:].data.ptr % 256, aligned.data.ptr % 256, 1)
    assert not grad_input_overlap._grad_input_overlap_applies(g, "float64", aligned.data.ptr % 256, aligned.data.ptr % 256, 1)


# grad_weight_overlap: X2-like problems with an item (64 positions) that
# ends short, input- and output-channel tiles that end short, 12 taps (taps
# 12-15 computed and dropped), 16-byte copies (padding 8, rows of whole
# vectors) and 8-byte ones (padding 4, or an output_padding of 4), several
# splits of the reduction, an unbatched call, and whole channel tiles
# (copies without bounds for the items inside the rows).
GRAD_WEIGHT_OVERLAP_CASES = [
    (Case("gwo_x2", 1, 2, 256, 128, (16,), (600,), stride=8, padding=4), 8),
    (Case("gwo_tails", 1, 3, 200, 30, (12,), (136,), stride=8, padding=0), 8),
    (Case("gwo_pad8", 1, 2, 64, 40, (16,), (256,), stride=8, padding=8, bias=False), 16),
    (Case("gwo_pad8_op4", 1, 1, 64, 40, (16,), (256,), stride=8, padding=8, output_padding=4), 8),
    (Case("gwo_splits", 1, 4, 128, 32, (16,), (2048,), stride=8, padding=4), 8),
    (Case("gwo_unbatched", 1, None, 96, 72, (12,), (64,), stride=8, padding=4), 8),
    (Case("gwo_whole_tiles", 1, 2, 256, 16, (16,), (512,), stride=8, padding=4), 8),
]


@pytest.mark.parametrize("mode", [m for m in OVERLAP_MODES if m[0] != "float32"], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(("case", "copy"), GRAD_WEIGHT_OVERLAP_CASES, ids=[str(c) for c, _ in GRAD_WEIGHT_OVERLAP_CASES])
def test_grad_weight_overlap(case, copy, mode, monkeypatch):
    """grad_weight_overlap (routed) against float64, within twice torch's
    error (test_backward), with the copy size and the splits expected, its
    float partials summed by sum_splits' float build; and bitwise the same
    on a second run.  (float32 "tf32": test_grad_weight_multicast.)"""
    from cupyconv import _cuda

    if _cuda._compute_capability() != 90:
        pytest.skip("grad_weight_overlap is built for compute capability 9.0 only")
    ran, launch = [], _cuda._launch
    monkeypatch.setattr(_cuda, "_launch", lambda plan, arrays: (ran.append((plan.name, plan.blocks)), launch(plan, arrays))[1])
    test_backward(case, mode)
    names = [name for name, _ in ran if name.startswith("grad_weight_overlap<")]
    assert names and all(name.endswith(f", {copy}>") for name in names), ran
    float_sums = f"sum_splits<{_kernels.CUDA_TYPE[mode[0]]}, float>"  # (grad_bias's sums take the double build)
    assert [name for name, _ in ran if name == float_sums] == [float_sums] * len(names), ran
    if case.name == "gwo_splits":  # 4 x 1 tiles (8 output channels x 256 input channels) and 128 items: 8 splits
        assert [blocks for name, blocks in ran if name.startswith("grad_weight_overlap<")] == [32]
    dtype = numpy_dtype(mode[0])
    rng = numpy.random.default_rng(5)
    x, w, _ = case.arrays(rng, dtype)
    gy = rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(dtype)
    args = (_to_gpu(gy, dtype), _to_gpu(x, dtype), _to_gpu(w, dtype))
    first, again = (_ops(case).backward(*args, **case.kwargs, output_mask=(False, True, False))[1] for _ in range(2))
    assert cupy.array_equal(first, again)


@pytest.mark.parametrize("multiprocessors", [None, 4])
@pytest.mark.parametrize("case", [c for c, _ in GRAD_WEIGHT_OVERLAP_CASES], ids=str)
def test_grad_weight_multicast(case, multiprocessors, monkeypatch, settings_override):
    """grad_weight_multicast, which takes the float32 "tf32" grad_weight of
    these problems, against float64 within twice torch's error
    (test_backward), in poisoned memory (its rounded copy of x, its float
    partials summed by sum_splits' float build), on the device's clusters
    and on two (the splits then fewer and longer); and bitwise the same on a
    second run."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    ran = _spy_launches(monkeypatch, settings_override, multiprocessors)
    test_backward(case, ("float32", "tf32"))
    names = [name for name, _ in ran]
    ours = [name for name in names if name.startswith("grad_weight_multicast<")]
    assert ours == [_kernels.grad_weight_multicast_name("int")] and names.count(_kernels.ROUND_TF32_COPY) == 1, names
    assert not any(name.startswith("grad_weight_overlap<") for name in names), names
    assert names[names.index(ours[0]) + 1] == "sum_splits<float, float>", names
    if multiprocessors is not None:
        (blocks,) = [b for name, b in ran if name in ours]
        pairs = -(-case.out_channels // 16) * -(-case.in_channels // 256)
        assert blocks == 2 * pairs  # one split where the tiles fill the clusters
    rng = numpy.random.default_rng(5)
    x, w, _ = case.arrays(rng, numpy.float32)
    gy = rng.standard_normal(_ops(case).ref_forward(x, w, **case.kwargs).shape).astype(numpy.float32)
    args = (_to_gpu(gy, numpy.float32), _to_gpu(x, numpy.float32), _to_gpu(w, numpy.float32))
    first, again = (_ops(case).backward(*args, **case.kwargs, output_mask=(False, True, False), precision="tf32")[1] for _ in range(2))
    assert cupy.array_equal(first, again)


def test_grad_weight_multicast_64_bit_index(monkeypatch, settings_override):
    """The build with 64-bit indices (taken where an array passes 2**31 elements)."""
    if not _is_hopper():
        pytest.skip(_ON_HOPPER_ONLY)
    settings_override(index_type="long long")
    ran = _spy_launches(monkeypatch, settings_override)
    test_backward(GRAD_WEIGHT_OVERLAP_CASES[4][0], ("float32", "tf32"))
    assert _kernels.grad_weight_multicast_name("long long") in [name for name, _ in ran], ran


def test_grad_weight_overlap_declines():
    """Problems outside its rule keep the other kernels: input rows not a
    multiple of 8, stride 4, 8 taps, two groups, grad_output rows of odd
    length at padding 4."""
    from cupyconv import _geometry
    from cupyconv.kernels import grad_weight_overlap

    aligned = cupy.empty(64, dtype=numpy.float16)
    for dims, xs, ws, stride, padding, groups in [
        (1, (2, 16, 68), (16, 8, 16), 8, 4, 1),
        (1, (2, 16, 64), (16, 8, 16), 4, 4, 1),
        (1, (2, 16, 64), (16, 8, 8), 8, 4, 1),
        (1, (2, 16, 64), (16, 8, 16), 8, 4, 2),
        (1, (2, 16, 64), (16, 8, 13), 8, 2, 1),
    ]:
        g = _geometry.make_geometry(dims, xs, ws, None, stride, padding, 0, groups, 1)
        assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float16", aligned.data.ptr % 256, aligned.data.ptr % 256)
    g = _geometry.make_geometry(1, (2, 16, 64), (16, 8, 16), None, 8, 4, 0, 1, 1)
    assert grad_weight_overlap._grad_weight_overlap_copy(g, "float16", aligned.data.ptr % 256, aligned.data.ptr % 256) == 8
    assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float16", aligned.data.ptr % 256, aligned[1:].data.ptr % 256)  # x not 16-byte aligned
    # float ("tf32"; the caller routes one pass only): 16-byte copies, x rows of whole 16 bytes
    assert grad_weight_overlap._grad_weight_overlap_copy(g, "float32", aligned.data.ptr % 256, aligned.data.ptr % 256) == 16
    assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float32", aligned[4:].data.ptr % 256, aligned.data.ptr % 256)  # grad_output 8 bytes off
    g = _geometry.make_geometry(1, (2, 16, 66), (16, 8, 16), None, 8, 4, 0, 1, 1)
    assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float32", aligned.data.ptr % 256, aligned.data.ptr % 256)
    assert not grad_weight_overlap._grad_weight_overlap_copy(g, "float64", aligned.data.ptr % 256, aligned.data.ptr % 256)


# conv_direct, forced onto every case (small calls included): a row tail of
# channels in each tile, a long row (several column tiles), strides 1 to 6,
# groups, no bias, a 2D P5-like stride-5 problem and a P4-like 1D one.
DIRECT_CASES = CASES + LARGE_CASES + [
    Case("2d_s5_d2_tall", 2, 2, 8, 40, (3, 3), (12, 70), stride=5, padding=1, dilation=2),
    Case("1d_s2_d2_long", 1, 2, 12, 70, (3,), (700,), stride=2, padding=1, dilation=2, bias=False),
    Case("1d_s3_k7_g3", 1, 2, 9, 12, (7,), (300,), stride=3, padding=4, output_padding=2, groups=3),
]


def _spy_direct(override):
    """conv_direct on every forward pass, small ones included; returns the
    names of the kernels launched from here on (observe_launches)."""
    override(direct_max_products_tensor_cores=10**9, direct_max_products_cuda_cores=10**9, direct_max_products_full_rows=10**9)
    override(direct_min_output=0)
    override(small_forward_max_output=0)
    override(use_grouped_forward=False)
    override(use_window_fill=False)
    return override.observe_launches()


def _directs(names) -> list:
    """The conv_direct launches among `names` (one a forward pass it served)."""
    return [name for name in names if name.startswith("conv_direct<")]


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", DIRECT_CASES, ids=str)
def test_direct_kernel(case, mode, settings_override):
    """conv_direct's forward pass in every dtype and mode, against float64."""
    ran = _spy_direct(settings_override)
    test_forward(case, mode)
    if case.batch != 0 and case.in_channels != case.groups:  # empty outputs launch nothing; depthwise has its stencil
        assert _directs(ran), "conv_direct did not run"


@pytest.fixture
def direct_tiles_per_block(monkeypatch):
    """Sets the tiles each conv_direct block walks; its plans are made afresh
    before and after."""
    from cupyconv.kernels import conv_direct

    plans = conv_direct._direct_plan  # the cached function, before any spy wraps it

    def use(per_block):
        monkeypatch.setattr(conv_direct, "direct_tiles_per_block", lambda tiles, multiprocessors: per_block)  # (read by _direct_plan)
        plans.cache_clear()

    yield use
    plans.cache_clear()


@pytest.mark.parametrize("per_block", [1, 3])
@pytest.mark.parametrize("mode", [("float32", "highest"), ("bfloat16", "highest")], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", [c for c in DIRECT_CASES if c.name in ("2d_s5_d2_tall", "1d_s2_d2_long", "2d_per_axis", "1d_s3_k7_g3")], ids=str)
def test_direct_blocks_of_several_tiles(case, mode, per_block, settings_override, direct_tiles_per_block):
    """Blocks of 1 tile and of 3 (runs that cross rows and end mid-class)."""
    ran = _spy_direct(settings_override)
    direct_tiles_per_block(per_block)
    test_forward(case, mode)
    assert _directs(ran)


@pytest.mark.parametrize("tile", _kernels.DIRECT_TILES, ids=lambda t: "-".join(map(str, t)))
@pytest.mark.parametrize("mode", [("float32", "highest"), ("float16", "highest"), ("float64", "highest")], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("case", [c for c in DIRECT_CASES if c.name in ("1d_mid_channels", "2d_s5_d2_tall", "1d_s3_k7_g3")], ids=str)
def test_every_direct_tile(case, mode, tile, monkeypatch, settings_override):
    ran, picked = _spy_direct(settings_override), _force_tile(monkeypatch, settings_override, "conv_direct", tile)
    test_forward(case, mode)
    assert _directs(ran) and picked, "the tile under test did not run"


# (problem, mode, conv_direct expected) under the default thresholds: P5's
# shape (11.5 products per output) in every mode; P4's (48) in none (float32
# "highest" takes conv_window's fill: test_window_fill_routing; the others
# the tensor-core kernels); P3's (40, 8 output channels per group) not.
_ROUTES = [
    (dict(dims=2, x=(1, 32, 64, 128), w=(32, 64, 3, 3), stride=5, padding=1, dilation=2), mode, True)
    for mode in (("float32", "highest"), ("float32", "tf32"), ("float16", "highest"), ("bfloat16", "highest"), ("float64", "highest"))
] + [
    (dict(dims=1, x=(1, 32, 8192), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float32", "highest"), False),
    (dict(dims=1, x=(1, 32, 8192), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float32", "tf32"), False),
    (dict(dims=1, x=(1, 32, 8192), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float16", "highest"), False),
    (dict(dims=1, x=(2, 64, 8192), w=(64, 8, 5), stride=2, padding=1, output_padding=1, groups=4), ("float32", "highest"), False),
]


@pytest.mark.parametrize("problem, mode, expected", _ROUTES, ids=lambda v: v if isinstance(v, bool) else str(v))
def test_direct_routing(problem, mode, expected, settings_override):
    """Which benchmark-like shapes take conv_direct with no threshold
    changed, and that the result is right either way."""
    served = settings_override.observe_plans()
    problem = dict(problem)
    dims, x_shape, w_shape = problem.pop("dims"), problem.pop("x"), problem.pop("w")
    dtype = numpy_dtype(mode[0])
    rng = numpy.random.default_rng(31)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    fn = cupyconv.conv_transpose1d if dims == 1 else cupyconv.conv_transpose2d
    y = fn(_to_gpu(x, dtype), _to_gpu(w, dtype), **problem, precision=mode[1])
    assert any(plan.family == "conv_direct" for _, plan in served) == expected, [plan.family for _, plan in served]
    oracle = (reference.conv_transpose1d if dims == 1 else reference.conv_transpose2d)(x.astype(numpy.float64), w.astype(numpy.float64), **problem)
    limit = {"float64": 1e-12, "float32": 1e-5 if mode[1] == "highest" else 2e-3, "float16": 2e-3, "bfloat16": 2e-2}[mode[0]]
    assert relative_error(cupy.asnumpy(y).astype(numpy.float64), oracle) < limit


# Benchmark-like shapes (batch 1) under the default thresholds, and the wgmma
# kernel each takes: conv_wgmma_resident for one-phase passes whose rows fit
# one row tile (P1-like in every mode) and, through its fill, for P4-like
# ones (stride 2, dilation 2) in tf32 and 16-bit; conv_wgmma_split for
# P2-like ones in 16-bit (128 rows: conv_wgmma_resident's 128 x 128 tile);
# conv_wgmma_tf32 for P2-like ones in tf32.  float32 "highest" takes
# conv_wgmma_x3 where its row rule sends it (P1-, P2-like; not X3-like,
# 16384 rows, nor P4-like, whose fill runs on conv_window).  X2-like takes
# conv_fold in 16-bit, conv_tf32_multicast in "tf32" and conv_tf32_stream in
# "highest".
_WGMMA_ROUTES = [
    (dict(x=(1, 32, 16384), w=(32, 64, 5), dilation=3), mode, "conv_wgmma_resident")
    for mode in (("float32", "tf32"), ("float16", "highest"), ("bfloat16", "highest"))
] + [
    (dict(x=(1, 32, 16384), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float16", "highest"), "conv_wgmma_resident"),
    (dict(x=(1, 32, 16384), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float32", "tf32"), "conv_wgmma_resident"),
    (dict(x=(1, 32, 16384), w=(32, 64, 3), stride=2, padding=1, dilation=2), ("float32", "highest"), None),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float16", "highest"), "conv_wgmma_split"),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("bfloat16", "highest"), "conv_wgmma_split"),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float32", "tf32"), "conv_wgmma_tf32"),
    (dict(x=(1, 32, 16384), w=(32, 64, 5), dilation=3), ("float32", "highest"), "conv_wgmma_x3"),
    (dict(x=(1, 128, 8192), w=(128, 128, 3)), ("float32", "highest"), "conv_wgmma_x3"),
    (dict(x=(1, 512, 512), w=(512, 256, 16), stride=8, padding=4), ("float32", "highest"), "conv_tf32_stream"),
    (dict(x=(1, 512, 512), w=(512, 256, 16), stride=8, padding=4), ("float16", "highest"), "conv_fold"),
    (dict(x=(1, 512, 512), w=(512, 256, 16), stride=8, padding=4), ("bfloat16", "highest"), "conv_fold"),
    (dict(x=(1, 512, 512), w=(512, 256, 16), stride=8, padding=4), ("float32", "tf32"), "conv_tf32_multicast"),
    (dict(x=(1, 64, 64), w=(64, 64, 1024), stride=256, padding=384), ("float32", "highest"), None),
]


@pytest.mark.parametrize("problem, mode, expected", _WGMMA_ROUTES, ids=lambda v: v if isinstance(v, bool) else str(v))
def test_wgmma_routing(problem, mode, expected, settings_override):
    """Which benchmark-like 1D shapes take which wgmma kernel with no
    threshold changed (on Hopper; nowhere else), and that the result is right
    either way."""
    names = settings_override.observe_launches()
    problem = dict(problem)
    x_shape, w_shape = problem.pop("x"), problem.pop("w")
    dtype = numpy_dtype(mode[0])
    rng = numpy.random.default_rng(32)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    y = cupyconv.conv_transpose1d(_to_gpu(x, dtype), _to_gpu(w, dtype), **problem, precision=mode[1])
    ran = [name.split("<")[0] for name in names]
    wgmma = [name for name in ran if name.startswith(("conv_wgmma", "conv_fold", "conv_tf32_stream", "conv_tf32_multicast"))]
    assert wgmma == ([expected] if expected and _is_hopper() else []), ran
    oracle = reference.conv_transpose1d(x.astype(numpy.float64), w.astype(numpy.float64), **problem)
    limit = {"float32": 1e-5 if mode[1] == "highest" else 2e-3, "float16": 2e-3, "bfloat16": 2e-2}[mode[0]]
    assert relative_error(cupy.asnumpy(y).astype(numpy.float64), oracle) < limit


@pytest.mark.parametrize("case", [c for c in DIRECT_CASES if c.name in ("2d_s5_d2_tall", "1d_s3_k7_g3")], ids=str)
def test_direct_64_bit_index(case, settings_override):
    ran = _spy_direct(settings_override)
    settings_override(index_type="long long")
    test_forward(case, ("float32", "highest"))
    assert _directs(ran)


def test_non_contiguous_gpu_input():
    rng = numpy.random.default_rng(25)
    x = cupy.asarray(rng.standard_normal((3, 10, 5)).astype(numpy.float32)).transpose(0, 2, 1)
    w = cupy.asarray(rng.standard_normal((5, 4, 3)).astype(numpy.float32))[:, :, ::-1]
    y = cupyconv.conv_transpose1d(x, w, stride=2, padding=1)
    expected = reference.conv_transpose1d(cupy.asnumpy(x).astype(numpy.float64), cupy.asnumpy(w).astype(numpy.float64), stride=2, padding=1)
    assert relative_error(cupy.asnumpy(y), expected) < 1e-5


def test_gpu_argument_errors():
    x = cupy.ones((2, 4, 7), dtype=numpy.float32)
    w = cupy.ones((4, 3, 3), dtype=numpy.float32)
    with pytest.raises(TypeError, match="weight is a numpy.ndarray but input is a cupy.ndarray"):
        cupyconv.conv_transpose1d(x, cupy.asnumpy(w))
    with pytest.raises(TypeError, match="bias is a numpy.ndarray"):
        cupyconv.conv_transpose1d(x, w, numpy.ones(3, numpy.float32))
    with pytest.raises(ValueError, match="output_padding"):
        cupyconv.conv_transpose1d(x, w, stride=2, output_padding=2)
    assert cupyconv.conv_transpose1d(x, w, stride=2).shape == (2, 3, 15)


@pytest.mark.skipif(not HAVE_GPU or cupy.cuda.runtime.getDeviceCount() < 2, reason="needs two GPUs")
def test_arrays_on_different_gpus_are_refused():
    x = cupy.ones((2, 4, 7), dtype=numpy.float32)
    with cupy.cuda.Device(1):
        w = cupy.ones((4, 3, 3), dtype=numpy.float32)
        y = cupyconv.conv_transpose1d(cupy.asarray(x), w)  # both on GPU 1 works there
        assert y.device.id == 1
    with pytest.raises(ValueError, match="weight is on GPU 1 but input is on GPU 0"):
        cupyconv.conv_transpose1d(x, w)
