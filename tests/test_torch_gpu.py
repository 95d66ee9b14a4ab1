"""The PyTorch adapter on a GPU: accuracy over the whole sweep in every dtype,
streams, memory and devices.

Accuracy is judged as in the GPU suite (tests/gpu/helpers.py): against the longdouble oracle, within
twice torch's own error on the same inputs in the same dtype and TF32 setting
(never asked to beat one unit roundoff; with TF32 on, twice the larger of
torch's and an ideal TF32 computation's), and float32 with TF32 off under 1e-5.
Every allocation the adapter makes is filled with 0xFF bytes (NaN) first, so
an output element no kernel writes fails.
"""

from __future__ import annotations

import os

import numpy
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from oracle import MODES, check_accuracy, exact_backward, exact_forward, ideal_tf32_errors, numpy_dtype, round_tf32  # noqa: E402
from sweep import CASES, relative_error  # noqa: E402

HAVE_CUDA = torch.cuda.is_available()
if os.environ.get("CUPYCONV_REQUIRE_GPU") == "1" and not HAVE_CUDA:
    raise RuntimeError("CUPYCONV_REQUIRE_GPU=1 but torch sees no CUDA GPU")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU")]

if HAVE_CUDA:
    import cupy

    import cupyconv.torch as ct
    from cupyconv.torch import _bridge


@pytest.fixture
def poisoned(monkeypatch):
    """Fill every output and workspace the adapter allocates with 0xFF bytes
    (NaN in every float dtype) on the current stream."""
    scratch, empty = _bridge._scratch, _bridge._empty

    def poisoned_scratch(device, size):  # workspaces, through CuPy's allocator or a remembered call's
        return scratch(device, size).fill_(0xFF)

    def poisoned_empty(shape, like):
        tensor = empty(shape, like)
        tensor.view(torch.uint8).fill_(0xFF)
        return tensor

    monkeypatch.setattr(_bridge, "_scratch", poisoned_scratch)
    monkeypatch.setattr(_bridge, "_empty", poisoned_empty)


@pytest.fixture
def tf32():
    """Set torch's cuDNN TF32 flag (which the adapter follows) for one test."""
    previous = torch.backends.cudnn.allow_tf32
    yield lambda on: setattr(torch.backends.cudnn, "allow_tf32", on)
    torch.backends.cudnn.allow_tf32 = previous


def _functions(case):
    return (ct.conv_transpose1d, F.conv_transpose1d) if case.dims == 1 else (ct.conv_transpose2d, F.conv_transpose2d)


def _cuda(array, dtype, grad=False):
    if array is None:
        return None
    tensor = torch.from_numpy(array).to("cuda", getattr(torch, dtype))
    return tensor.requires_grad_() if grad else tensor


def _check(actual, oracle, dtype, precision, torch_error, what):
    assert actual.dtype == getattr(torch, dtype) and tuple(actual.shape) == oracle.shape, what
    check_accuracy(actual.detach().double().cpu().numpy(), oracle, dtype, precision, torch_error, what)


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_and_gradients(case, mode, poisoned, tf32):
    dtype, precision = mode
    tf32(precision == "tf32")
    rng = numpy.random.default_rng(30)
    x, w, b = case.arrays(rng, numpy_dtype(dtype))
    oracle = exact_forward(case, x, w, b)
    gy = rng.standard_normal(oracle.shape).astype(numpy_dtype(dtype)).astype(numpy.float64)
    oracles = exact_backward(case, gy, x, w)
    ours, theirs = _functions(case)
    results = {}
    for name, fn in (("ours", ours), ("torch", theirs)):
        xt, wt, bt = _cuda(x, dtype, True), _cuda(w, dtype, True), _cuda(b, dtype, True)
        y = fn(xt, wt, bt, **case.kwargs)
        grads = torch.autograd.grad(y, [xt, wt] + ([bt] if bt is not None else []), _cuda(gy, dtype))
        results[name] = (y, grads)
    torch.cuda.synchronize()
    y, grads = results["ours"]
    y_ref, grads_ref = results["torch"]
    torch_errors = [relative_error(y_ref.detach().double().cpu().numpy(), oracle)]
    torch_errors += [relative_error(g.double().cpu().numpy(), o) for g, o in zip(grads_ref, oracles)]
    if precision == "tf32":  # see oracle.ideal_tf32_errors
        torch_errors = [max(e, t) for e, t in zip(torch_errors, ideal_tf32_errors(case, x, w, b, gy))]
    _check(y, oracle, dtype, precision, torch_errors[0], "output")
    for what, grad, grad_oracle, error in zip(("grad_input", "grad_weight", "grad_bias"), grads, oracles, torch_errors[1:]):
        _check(grad, grad_oracle, dtype, precision, error, what)


def _second_derivatives(fn, case, x, w, b, gy, directions):
    """Derivatives in (input, weight, grad_output) of <grad_input, r_x> +
    <grad_weight, r_w> (+ <grad_bias, r_b>), the first gradients taken with
    create_graph: every term of the double backward."""
    y = fn(x, w, b, **case.kwargs)
    leaves = [t for t in (x, w, b) if t is not None]
    firsts = torch.autograd.grad(y, leaves, gy, create_graph=True)
    total = sum((g * r).sum() for g, r in zip(firsts, directions))
    return torch.autograd.grad(total, [x, w, gy])


@pytest.mark.parametrize("mode", [m for m in MODES if m[0] != "float64"], ids=lambda m: "-".join(m))
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_s3_d2_p2_op1", "1d_depthwise", "1d_unbatched", "1d_vocoder", "1d_wide_channels", "2d_groups_dilation", "2d_wide_channels")], ids=str)
def test_double_backward_accuracy(case, mode, poisoned, tf32):
    """Second derivatives (the backward operator's autograd) in each 16- and
    32-bit mode against torch's own double backward in float64 on the CPU
    on the same rounded inputs, within twice torch's error on the GPU in the
    same mode (float64 is compared with torch in test_torch.py)."""
    dtype, precision = mode
    tf32(precision == "tf32")
    rng = numpy.random.default_rng(32)
    x, w, b = case.arrays(rng, numpy_dtype(dtype))
    y_shape = exact_forward(case, x, w, b).shape

    def rounded(shape):  # random values the dtype holds exactly
        return rng.standard_normal(shape).astype(numpy_dtype(dtype)).astype(numpy.float64)

    gy = rounded(y_shape)
    directions = [rounded(x.shape), rounded(w.shape)] + ([rounded(b.shape)] if b is not None else [])
    ours, theirs = _functions(case)

    def on_cpu(arrays):  # torch's double backward in float64 on the CPU
        xc, wc, bc, gc = (None if a is None else torch.from_numpy(a).requires_grad_() for a in arrays[:4])
        return [d.numpy() for d in _second_derivatives(theirs, case, xc, wc, bc, gc, [torch.from_numpy(r) for r in arrays[4:]])]

    oracles = on_cpu([x, w, b, gy] + directions)
    results = {}
    for name, fn in (("ours", ours), ("torch", theirs)):
        xt, wt, bt, gt = _cuda(x, dtype, True), _cuda(w, dtype, True), _cuda(b, dtype, True), _cuda(gy, dtype, True)
        results[name] = _second_derivatives(fn, case, xt, wt, bt, gt, [_cuda(r, dtype) for r in directions])
    torch.cuda.synchronize()
    torch_errors = [relative_error(d.double().cpu().numpy(), o) for d, o in zip(results["torch"], oracles)]
    if precision == "tf32":  # every multiplied operand rounded to TF32, all else exact (oracle.ideal_tf32_errors)
        ideal = on_cpu([round_tf32(a) if a is not None else None for a in [x, w, b, gy] + directions])
        torch_errors = [max(e, relative_error(i, o)) for e, i, o in zip(torch_errors, ideal, oracles)]
    for what, got, oracle, error in zip(("input", "weight", "grad_output"), results["ours"], oracles, torch_errors):
        _check(got, oracle, dtype, precision, error, f"second derivative in {what}")


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_wide_channels", "2d_groups_dilation")], ids=str)
def test_gradients_are_bitwise_deterministic(case):
    x, w, b = case.arrays(numpy.random.default_rng(31), numpy.float32)
    ours, _ = _functions(case)
    runs = []
    for _ in range(4):
        xt, wt, bt = _cuda(x, "float32", True), _cuda(w, "float32", True), _cuda(b, "float32", True)
        y = ours(xt, wt, bt, **case.kwargs)
        runs.append(torch.autograd.grad(y, [xt, wt, bt], torch.ones_like(y)))
    for run in runs[1:]:
        for a, b_ in zip(runs[0], run):
            assert torch.equal(a, b_)


# (name, dims, batch, in, out, kernel, size, kwargs, the _cuda route whose one
# pass makes both gradients: depthwise_backward takes up to 16 taps a channel,
# multiplier x kernel)
FUSED_ROUTES = [
    ("depthwise_1d", 1, 2, 6, 6, (4,), (11,), {"stride": 2, "padding": 1, "groups": 6}, "_depthwise_backward"),
    ("depthwise_2d", 2, 2, 4, 8, (2, 3), (6, 5), {"stride": 2, "padding": 1, "groups": 4}, "_depthwise_backward"),
    ("grouped_1d", 1, 2, 16, 8, (3,), (4096,), {"stride": 2, "padding": 1, "groups": 4}, "_grouped_backward"),
]


@pytest.mark.parametrize("wanted", ["input", "weight"])
@pytest.mark.parametrize("route", FUSED_ROUTES, ids=lambda r: r[0])
def test_one_gradient_on_the_fused_routes(route, wanted, monkeypatch, poisoned, tf32):
    """A frozen weight (grad_input alone) or a frozen input (grad_weight
    alone) on the routes that make both gradients in one pass: the adapter
    hands them both arrays (it once passed None for the one not wanted, and
    CuPy's ascontiguousarray(None) crashed the process)."""
    from cupyconv import _cuda

    _, dims, batch, cin, cout, kernel, size, kwargs, target = route
    tf32(False)
    family = target.lstrip("_")  # depthwise_backward, grouped_backward: the joint families
    # a spy on the plan runner, not observe_plans(): autograd runs the backward on a thread of its own
    taken, run = [], _cuda._run
    monkeypatch.setattr(_cuda, "_run", lambda plan, arrays, p=None: (taken.append((p, plan)), run(plan, arrays, p))[1])
    gen = torch.Generator().manual_seed(33)
    x = torch.randn((batch, cin) + size, generator=gen, dtype=torch.float64)
    w = torch.randn((cin, cout // kwargs["groups"]) + kernel, generator=gen, dtype=torch.float64)
    ours = ct.conv_transpose1d if dims == 1 else ct.conv_transpose2d
    exact = (F.conv_transpose1d if dims == 1 else F.conv_transpose2d)(x, w, **kwargs)
    gy = torch.randn(exact.shape, generator=gen, dtype=torch.float64)
    leaf = x if wanted == "input" else w
    leaf.requires_grad_()
    expected = torch.autograd.grad((F.conv_transpose1d if dims == 1 else F.conv_transpose2d)(x, w, **kwargs), leaf, gy)[0]
    xt, wt = x.detach().float().cuda(), w.detach().float().cuda()
    (xt if wanted == "input" else wt).requires_grad_()
    got = torch.autograd.grad(ours(xt, wt, **kwargs), xt if wanted == "input" else wt, gy.float().cuda())[0]
    assert [p.wants for p, plan in taken if plan.family == family] == [(wanted == "input", wanted == "weight")]
    assert relative_error(got.double().cpu().numpy(), expected.numpy()) < 1e-5


def test_runs_on_torchs_current_stream(monkeypatch):
    """Forward and backward launch on the stream torch has current (the
    autograd engine makes the forward's stream current for backward)."""
    from cupyconv import _cuda

    monkeypatch.setattr(_bridge, "_FAST_FORWARD", {})  # the forward pass checked, not a remembered launch
    seen = []
    for name in ("forward", "backward"):
        real = getattr(_cuda, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen.append((_name, cupy.cuda.get_current_stream().ptr, cupy.cuda.Device().id))
            return _real(*args, **kwargs)

        monkeypatch.setattr(_cuda, name, spy)
    stream = torch.cuda.Stream()
    x = torch.randn(2, 4, 9, device="cuda", requires_grad=True)
    w = torch.randn(4, 3, 3, device="cuda", requires_grad=True)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = ct.conv_transpose1d(x, w, stride=2)
        y.sum().backward()
    stream.synchronize()
    assert seen == [("forward", stream.cuda_stream, 0), ("backward", stream.cuda_stream, 0)]
    assert torch.cuda.current_stream().cuda_stream != stream.cuda_stream


SMALL_FORWARDS = {
    "tiny": ((2, 4, 9), (4, 6, 3)),  # conv_tiny
    "gemm": ((1, 64, 6), (64, 8, 4)),  # 256 products an output: past conv_tiny, a small GEMM tile
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("route", SMALL_FORWARDS)
def test_remembered_small_forward(route, dtype, monkeypatch, poisoned, tf32, settings_override):
    """A small forward pass (one launch) is checked once, then launched on the
    tensors' addresses (_bridge._FAST_FORWARD): on torch's current stream,
    into a torch tensor (poisoned), bit for bit the checked call's output.
    A call without the bias, with a non-contiguous input, or after a setting
    changed takes the checked path."""
    from cupyconv import _cuda, settings
    from cupyconv import _launch, _remember

    tf32(False)
    checked, streams = [], []
    check, launch = _cuda.forward, _launch._launch_kernel
    monkeypatch.setattr(_cuda, "forward", lambda *a, **k: checked.append(1) or check(*a, **k))
    for module in (_launch, _remember):  # packed launches, and the remembered small call's inline one
        monkeypatch.setattr(module, "_launch_kernel", lambda *a: streams.append(a[8]) or launch(*a))
    monkeypatch.setattr(_bridge, "_FAST_FORWARD", {})
    x_shape, w_shape = SMALL_FORWARDS[route]
    generator = torch.Generator(device="cuda").manual_seed(0)
    x, w, b = (torch.randn(shape, device="cuda", generator=generator).to(getattr(torch, dtype)) for shape in (x_shape, w_shape, w_shape[1:2]))
    first = ct.conv_transpose1d(x, w, b, stride=2)
    assert len(checked) == 1 and len(_bridge._FAST_FORWARD) == 1
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        streams.clear()
        second = ct.conv_transpose1d(x, w, b, stride=2)
    stream.synchronize()
    assert len(checked) == 1 and streams == [stream.cuda_stream]
    assert not torch.isnan(first).any() and torch.equal(first, second)
    expected = F.conv_transpose1d(x.double(), w.double(), b.double(), stride=2)
    assert relative_error(second.double().cpu().numpy(), expected.cpu().numpy()) < 1e-2
    ct.conv_transpose1d(x, w, None, stride=2)
    assert len(checked) == 2 and len(_bridge._FAST_FORWARD) == 2
    strided = x.transpose(1, 2).contiguous().transpose(1, 2)
    assert not strided.is_contiguous() and torch.equal(ct.conv_transpose1d(strided, w, b, stride=2), first)
    assert len(checked) == 3 and len(_bridge._FAST_FORWARD) == 2
    settings_override(tiny_max_output=settings.current().tiny_max_output)  # any setting: the remembered launches are stale
    assert torch.equal(ct.conv_transpose1d(x, w, b, stride=2), first) and len(checked) == 4


FORWARDS = {
    "packed_gemm": ((8, 64, 16, 16), (64, 32, 4, 4), {"stride": 2, "padding": 1}),  # pack_gemm_weight, then conv_mma or conv_gemm; 16-bit: conv_nhwc
    "window": ((2, 64, 512), (64, 32, 16), {"stride": 8, "padding": 4}),  # conv_fold (16-bit on Hopper) or a window kernel
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("route", FORWARDS)
def test_remembered_forward(route, dtype, monkeypatch, poisoned, tf32):
    """A forward pass past the small ones is checked on a signature's first
    three calls (the second recorded, the third checking the recording) and
    replayed from the fourth on the tensors' addresses (_bridge._FAST_FORWARD),
    its workspaces from torch's allocator (poisoned), on torch's current
    stream: bit for bit the checked calls' output.  A call without the bias
    is another signature; a non-contiguous input takes the checked path."""
    from cupyconv import _cuda, _launch, _remember

    tf32(False)
    checked, streams = [], []
    check, launch = _cuda.forward, _launch._launch_kernel
    monkeypatch.setattr(_cuda, "forward", lambda *a, **k: checked.append(1) or check(*a, **k))
    monkeypatch.setattr(_launch, "_launch_kernel", lambda *a: streams.append(a[8]) or launch(*a))
    monkeypatch.setattr(_bridge, "_FAST_FORWARD", {})
    monkeypatch.setattr(_remember, "_REMEMBER_SEEN", {})  # (a key another test counted would not be recorded again)
    x_shape, w_shape, kwargs = FORWARDS[route]
    fn = ct.conv_transpose1d if len(x_shape) == 3 else ct.conv_transpose2d
    generator = torch.Generator(device="cuda").manual_seed(0)
    x, w, b = (torch.randn(shape, device="cuda", generator=generator).to(getattr(torch, dtype)) for shape in (x_shape, w_shape, w_shape[1:2]))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    outputs = []
    for call in range(5):
        with torch.cuda.stream(stream):
            streams.clear()
            outputs.append(fn(x, w, b, **kwargs))
        stream.synchronize()
        assert len(checked) == min(call + 1, 3)
        assert streams and set(streams) == {stream.cuda_stream}
    (replay,) = _bridge._FAST_FORWARD.values()
    # packed_gemm: the packing launch into a workspace, then conv_mma (float32, float64), or
    # conv_nhwc's four launches (16-bit): workspaces either way
    assert route != "packed_gemm" or (len(replay.steps) == (4 if dtype in ("float16", "bfloat16") else 2) and replay.temporaries)
    for output in outputs:
        assert not torch.isnan(output).any() and torch.equal(output, outputs[0])
    exact = (F.conv_transpose1d if len(x_shape) == 3 else F.conv_transpose2d)(x.double(), w.double(), b.double(), **kwargs)
    assert relative_error(outputs[-1].double().cpu().numpy(), exact.cpu().numpy()) < 1e-2
    without_bias = [fn(x, w, None, **kwargs) for _ in range(4)]
    assert len(checked) == 6 and len(_bridge._FAST_FORWARD) == 2
    assert all(torch.equal(y, without_bias[0]) for y in without_bias)
    strided = x.transpose(1, 2).contiguous().transpose(1, 2)
    assert torch.equal(fn(strided, w, b, **kwargs), outputs[0]) and len(checked) == 7


BACKWARDS = {
    "tiny": ((2, 4, 9), (4, 6, 3), {"stride": 2}),
    "gemm": ((4, 32, 64), (32, 16, 4), {"stride": 2, "padding": 1}),  # grad_weight split over blocks: a workspace
    "depthwise": ((2, 8, 40), (8, 1, 4), {"stride": 2, "groups": 8}),  # depthwise_backward: both in one pass
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("route", BACKWARDS)
def test_remembered_backward(route, dtype, monkeypatch, poisoned, tf32):
    """A backward pass through the adapter is checked on a signature's first
    three calls (the second recorded, the third checking the recording) and
    replayed from the fourth on the tensors' addresses
    (_bridge._FAST_BACKWARD), workspaces from torch's allocator (poisoned),
    on the stream autograd makes current: bit for bit the checked calls'
    gradients.  Another output mask is another signature."""
    from cupyconv import _cuda
    from cupyconv import _launch, _remember

    tf32(False)
    checked, streams = [], []
    check, launch = _cuda.backward, _launch._launch_kernel
    monkeypatch.setattr(_cuda, "backward", lambda *a, **k: checked.append(1) or check(*a, **k))
    monkeypatch.setattr(_launch, "_launch_kernel", lambda *a: streams.append(a[8]) or launch(*a))
    monkeypatch.setattr(_bridge, "_FAST_BACKWARD", {})
    monkeypatch.setattr(_remember, "_REMEMBER_SEEN", {})  # (a key another test counted would not be recorded again)
    x_shape, w_shape, kwargs = BACKWARDS[route]
    generator = torch.Generator(device="cuda").manual_seed(0)
    x, w, b = (torch.randn(shape, device="cuda", generator=generator).to(getattr(torch, dtype)) for shape in (x_shape, w_shape, (w_shape[1] * kwargs.get("groups", 1),)))
    gy = torch.randn(ct.conv_transpose1d(x, w, b, **kwargs).shape, device="cuda", generator=generator).to(x.dtype)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    leaves = [t.requires_grad_() for t in (x, w, b)]
    results = []
    for call in range(5):
        with torch.cuda.stream(stream):
            streams.clear()
            results.append(torch.autograd.grad(ct.conv_transpose1d(x, w, b, **kwargs), leaves, gy))
        stream.synchronize()
        assert len(checked) == min(call + 1, 3)
        assert set(streams) == {stream.cuda_stream}
    (replay,) = _bridge._FAST_BACKWARD.values()
    assert route != "gemm" or replay.temporaries  # a workspace made by the replay
    for grads in results:
        for grad, first in zip(grads, results[0]):
            assert not torch.isnan(grad).any() and torch.equal(grad, first)
    exact = [t.detach().double().requires_grad_() for t in leaves]  # (the oracle's own leaves: float64 gradients)
    expected = torch.autograd.grad(F.conv_transpose1d(*exact, **kwargs), exact, gy.double())
    for grad, reference in zip(results[-1], expected):
        assert relative_error(grad.double().cpu().numpy(), reference.cpu().numpy()) < 1e-2
    x.requires_grad_(False)
    grad_weights = [torch.autograd.grad(ct.conv_transpose1d(x, w, None, **kwargs), [w], gy)[0] for _ in range(4)]
    assert len(checked) == 6 and len(_bridge._FAST_BACKWARD) == 2
    assert all(not torch.isnan(g).any() and torch.equal(g, grad_weights[0]) for g in grad_weights)
    assert relative_error(grad_weights[-1].double().cpu().numpy(), expected[1].cpu().numpy()) < 1e-2


@pytest.mark.parametrize("warmup", [1, 2, 3, 4])
def test_cuda_graph_capture(warmup, monkeypatch, tf32):
    """Forward and backward through the adapter captured in a CUDA graph
    (torch.cuda.graph) after `warmup` eager calls of the signature, so that
    the capture lands on the call that would record the backward, check the
    recording (which waits for the GPU: a capture forbids it) or replay it;
    the graph replayed on new values gives torch's results on them, and
    eager calls after the capture go on to remember the backward."""
    from cupyconv import _remember

    tf32(False)
    for name in ("_FAST_FORWARD", "_FAST_BACKWARD"):
        monkeypatch.setattr(_bridge, name, {})
    monkeypatch.setattr(_remember, "_REMEMBER_SEEN", {})
    monkeypatch.setattr(_remember, "_REMEMBER_CANDIDATES", {})
    generator = torch.Generator(device="cuda").manual_seed(warmup)
    x, w, b = (torch.randn(shape, device="cuda", generator=generator).requires_grad_() for shape in ((2, 4, 9), (4, 6, 3), (6,)))
    gy = torch.randn(2, 6, 19, device="cuda", generator=generator)

    def step():
        y = ct.conv_transpose1d(x, w, b, stride=2)
        return (y,) + torch.autograd.grad(y, (x, w, b), gy)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for _ in range(2):
        with torch.no_grad():
            for tensor in (x, w, b, gy):
                tensor.copy_(torch.randn(tensor.shape, device="cuda", generator=generator))
        graph.replay()
        torch.cuda.synchronize()
        exact = [t.detach().double().requires_grad_() for t in (x, w, b)]
        y = F.conv_transpose1d(*exact, stride=2)
        for got, expected in zip(captured, (y,) + torch.autograd.grad(y, exact, gy.double())):
            assert relative_error(got.detach().double().cpu().numpy(), expected.detach().cpu().numpy()) < 1e-5
    for _ in range(4):
        step()
    assert len(_bridge._FAST_BACKWARD) == 1


def test_waits_for_work_queued_before_it_on_the_stream(tf32):
    """An input still being written on a busy non-default stream: the kernels,
    queued behind it on that stream, read the finished values."""
    tf32(False)
    stream = torch.cuda.Stream()
    source = torch.randn(8, 64, 4096, device="cuda")
    w = torch.randn(64, 32, 4, device="cuda")
    expected = F.conv_transpose1d(source.double(), w.double(), stride=2)
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        stale = torch.full_like(source, float("nan"))  # leave NaN in the block the input will reuse
        del stale
        torch.cuda._sleep(200_000_000)  # keep the stream busy for a while
        x = source * 1.0  # written only once the sleep ends
        y = ct.conv_transpose1d(x, w, stride=2)
    stream.synchronize()
    assert not torch.isnan(y).any()
    assert relative_error(y.cpu().numpy(), expected.cpu().numpy()) < 1e-5


def test_memory_comes_from_torchs_allocator():
    x = torch.randn(4, 32, 2048, device="cuda")
    w = torch.randn(32, 16, 3, device="cuda", requires_grad=True)
    ct.conv_transpose1d(x, w, stride=2).sum().backward()  # compile and cache first
    torch.cuda.synchronize()
    pool = cupy.get_default_memory_pool()
    cupy_before, torch_before = pool.used_bytes(), torch.cuda.memory_allocated()
    y = ct.conv_transpose1d(x, w, stride=2)
    assert torch.cuda.memory_allocated() - torch_before >= y.numel() * y.element_size()
    del y
    assert torch.cuda.memory_allocated() == torch_before
    assert pool.used_bytes() == cupy_before  # nothing left in CuPy's own pool


def test_half_and_bfloat16_cross_dlpack_as_views():
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(2, 4, 8, device="cuda").to(dtype)
        array = _bridge.to_cupy(x)
        assert array.data.ptr == x.data_ptr() and array.shape == tuple(x.shape) and array.dtype.itemsize == 2
        assert numpy.array_equal(cupy.asnumpy(array).astype(numpy.float32), x.float().cpu().numpy())


@pytest.mark.skipif(not HAVE_CUDA or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_gpu(tf32):
    tf32(False)
    with torch.cuda.device(0):
        x = torch.randn(2, 4, 9, device="cuda:1", requires_grad=True)
        w = torch.randn(4, 3, 3, device="cuda:1", requires_grad=True)
        y = ct.conv_transpose1d(x, w, stride=2)
        assert y.device == torch.device("cuda:1")
        # the second call finds the first's remembered launch (device 1's
        # kernel) while device 0 is current: it takes the checked path
        assert torch.equal(ct.conv_transpose1d(x.detach(), w.detach(), stride=2), y)
        y.sum().backward()
        assert x.grad.device == torch.device("cuda:1")
        expected = F.conv_transpose1d(x.detach().cpu().double(), w.detach().cpu().double(), stride=2)
        assert relative_error(y.detach().cpu().numpy(), expected.numpy()) < 1e-5


def test_bench_rows_on_the_gpu():
    """`python -m cupyconv bench`'s rows on a GPU (the tiny X4, forward and
    backward, "tf32"): both sides timed in alternating rounds, errors
    against float64 within the mode's, and torch's TF32 setting as it was."""
    from cupyconv import bench

    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        rows = bench.run_gpu([bench.PROBLEMS["X4"]], "float32", "tf32", 1, 4, True)
        rows += bench.run_gpu_backward([bench.PROBLEMS["X4"]], "float32", "tf32", 1, 4)
        assert torch.backends.cudnn.allow_tf32 is False
    finally:
        torch.backends.cudnn.allow_tf32 = previous
    for row in rows:
        assert row.ours_ms > 0 and row.torch_ms > 0
        assert row.ours_error < 1e-3 and row.torch_error < 1e-3
