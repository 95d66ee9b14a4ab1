"""The PyTorch adapter's behaviour: the operator, autograd, torch.compile,
autocast, the modules, convert() and errors, each against torch itself.

Every test runs on the CPU (where the adapter's operator computes with
torch's own convolution, so the registration, autograd wiring, fake
implementation and argument handling are all checked in CI) and, where torch
sees a GPU, on CUDA (cupyconv's kernels; marked gpu).  Both operator paths
run: the torch.library custom op and the autograd.Function that plain eager
calls take (torch < 2.4's operator).  Accuracy sweeps on the GPU are in
test_torch_gpu.py.
"""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys

import numpy
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import cupyconv.torch as ct  # noqa: E402
from cupyconv.torch import _functional  # noqa: E402

from sweep import CASES, relative_error  # noqa: E402

HAVE_CUDA = torch.cuda.is_available()
if os.environ.get("CUPYCONV_REQUIRE_GPU") == "1" and not HAVE_CUDA:
    raise RuntimeError("CUPYCONV_REQUIRE_GPU=1 but torch sees no CUDA GPU")

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU")])]
PATHS = ["custom_op", "function"]


@pytest.fixture(params=PATHS)
def path(request):
    """Run the test through the custom op (eager calls too: the eager path
    off), then through the autograd.Function that plain eager calls take
    (and torch < 2.4 always)."""
    if request.param == "custom_op" and not _functional.HAS_CUSTOM_OP:
        pytest.skip("torch.library.custom_op needs torch >= 2.4")
    with _functional.operator_route(request.param):
        yield request.param


@pytest.fixture(autouse=True)
def _no_tf32():
    """Compare float32 against torch with TF32 off on both sides."""
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = previous


def _functions(dims):
    if dims == 1:
        return ct.conv_transpose1d, F.conv_transpose1d
    return ct.conv_transpose2d, F.conv_transpose2d


def _tensors(case, device, dtype=torch.float64, seed=0):
    x, w, b = case.arrays(numpy.random.default_rng(seed))
    t = lambda a: None if a is None else torch.from_numpy(a).to(device, dtype).requires_grad_()  # noqa: E731
    return t(x), t(w), t(b)


def _grads(fn, x, w, b, kwargs, gy=None):
    y = fn(x, w, b, **kwargs)
    if gy is None:
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(y.device, y.dtype)
    inputs = [t for t in (x, w, b) if t is not None]
    return y, torch.autograd.grad(y, inputs, gy), gy


# --------------------------------------------------------------------------
# The functional interface


def test_import_cupyconv_does_not_import_torch():
    code = "import sys, cupyconv; assert 'torch' not in sys.modules, 'cupyconv imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_torch(case, device, path):
    """Forward and every gradient, float64, every sweep configuration."""
    ours, theirs = _functions(case.dims)
    x, w, b = _tensors(case, device)
    y, grads, gy = _grads(ours, x, w, b, case.kwargs)
    y_ref, grads_ref, _ = _grads(theirs, x, w, b, case.kwargs, gy)
    assert y.shape == y_ref.shape and y.dtype == y_ref.dtype and y.device == y_ref.device
    assert relative_error(y.detach().cpu().numpy(), y_ref.detach().cpu().numpy()) < 1e-13
    for grad, grad_ref in zip(grads, grads_ref):
        assert grad.shape == grad_ref.shape
        assert relative_error(grad.cpu().numpy(), grad_ref.cpu().numpy()) < 1e-13


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_s3_d2_p2_op1", "1d_unbatched", "1d_no_bias_g4", "2d_per_axis", "2d_groups_dilation")], ids=str)
def test_gradcheck(case, device, path):
    ours, _ = _functions(case.dims)
    x, w, b = _tensors(case, device)
    inputs = tuple(t for t in (x, w, b) if t is not None)
    fn = lambda *ts: ours(*ts, **case.kwargs) if b is not None else ours(*ts, None, **case.kwargs)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_s3_d2_p2_op1", "1d_unbatched", "1d_no_bias_g4", "2d_per_axis", "2d_groups_dilation")], ids=str)
def test_gradgradcheck(case, device, path):
    """Double backward (the backward operator's own autograd formula)
    against finite differences of the backward, float64."""
    ours, _ = _functions(case.dims)
    x, w, b = _tensors(case, device)
    inputs = tuple(t for t in (x, w, b) if t is not None)

    def fn(*ts):
        return ours(*ts, **case.kwargs) if b is not None else ours(*ts, None, **case.kwargs)

    assert torch.autograd.gradgradcheck(fn, inputs)


def _second_grads(fn, x, w, b, kwargs, wanted, create_graph=False):
    """Gradients of a function of the first gradients (grad_output made a
    leaf): the seconds of (x, w, grad_output), None where none reached."""
    y = fn(x, w, b, **kwargs)
    gen = torch.Generator().manual_seed(2)

    def rand(t):
        return torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.device, t.dtype)

    gy = rand(y).requires_grad_()
    names, leaves = zip(*[(n, t) for n, t in zip("xwb", (x, w, b)) if t is not None and t.requires_grad])
    firsts = dict(zip(names, torch.autograd.grad(y, leaves, gy, create_graph=True)))
    # a nonlinear function of each wanted first gradient
    terms = [(firsts[n].sin() * rand(firsts[n])).sum() if n != "b" else firsts[n].pow(3).sum() for n in wanted]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    targets = [t for t in (x, w, gy) if t.requires_grad]
    return torch.autograd.grad(total, targets, allow_unused=True, create_graph=create_graph), targets


def _assert_same_gradient(got, expected):
    """Equal to float64 rounding; None (no gradient reached) stands for
    zeros: on an empty batch torch's graph gives None where ours gives a zero
    gradient of the weight."""
    if got is None or expected is None:
        other = expected if got is None else got
        assert other is None or not other.any()
        return
    assert got.shape == expected.shape
    assert relative_error(got.cpu().numpy(), expected.cpu().numpy()) < 1e-13


# every sweep case with each choice of first gradients a loss reads (those it has)
DOUBLE_BACKWARD = [(c, w if c.bias else w.replace("b", "")) for c in CASES for w in ("xwb", "x", "w", "b") if c.bias or w != "b"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case, wanted", DOUBLE_BACKWARD, ids=lambda v: v if isinstance(v, str) else str(v))
def test_double_backward_matches_torch(case, wanted, device, path):
    """Second derivatives through the first gradients (a gradient penalty,
    say) against torch's own double backward, float64, every sweep
    configuration; `wanted` picks which first gradients the loss reads, so
    gradients reach some of the backward's outputs and not others."""
    ours, theirs = _functions(case.dims)
    seconds = []
    for fn in (ours, theirs):
        x, w, b = _tensors(case, device)
        grads, _ = _second_grads(fn, x, w, b, case.kwargs, wanted)
        seconds.append(grads)
    for got, expected in zip(*seconds):
        _assert_same_gradient(got, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("1d_s6_d4", "2d_groups_dilation")], ids=str)
def test_third_order_matches_torch(case, device, path):
    """The double backward is made of the two operators, so it differentiates
    again: third derivatives against torch's (whose own third derivative
    fails with output_padding: "output_padding is not supported for
    non-transposed convolutions", torch 2.11-2.13)."""
    ours, theirs = _functions(case.dims)
    thirds = []
    for fn in (ours, theirs):
        x, w, b = _tensors(case, device)
        seconds, targets = _second_grads(fn, x, w, b, case.kwargs, "xwb", create_graph=True)
        total = sum((s * s).sum() for s in seconds if s is not None)
        thirds.append(torch.autograd.grad(total, targets, allow_unused=True))
    for got, expected in zip(*thirds):
        _assert_same_gradient(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_third_order_gradgradcheck(device, path):
    """Third derivatives with output_padding, where torch has none to compare
    with: gradgradcheck of the first gradients as a function of (input,
    weight, grad_output), float64."""
    case = next(c for c in CASES if c.name == "1d_unbatched")
    x, w, _ = _tensors(case, device)
    gy = torch.randn(ct.conv_transpose1d(x, w, **case.kwargs).shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    gy = gy.to(device).requires_grad_()

    def first_gradients(x, w, gy):
        return torch.autograd.grad(ct.conv_transpose1d(x, w, **case.kwargs), (x, w), gy, create_graph=True)

    assert torch.autograd.gradgradcheck(first_gradients, (x, w, gy))


@pytest.mark.parametrize("device", DEVICES)
def test_only_the_needed_gradients(device, path):
    case = next(c for c in CASES if c.name == "1d_s2_p1_op1")
    x, w, b = _tensors(case, device)
    x.requires_grad_(False)
    y = ct.conv_transpose1d(x, w, b, **case.kwargs)
    y.sum().backward()  # an expanded (stride 0) grad_output
    assert x.grad is None and w.grad is not None and b.grad is not None
    w2 = w.detach().clone().requires_grad_()
    F.conv_transpose1d(x, w2, b.detach(), **case.kwargs).sum().backward()
    assert relative_error(w.grad.cpu().numpy(), w2.grad.cpu().numpy()) < 1e-13


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_inputs(device, path):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 11, 6, generator=gen, dtype=torch.float64).to(device).transpose(1, 2)  # (3, 6, 11), strided
    w = torch.randn(3, 6, 4, generator=gen, dtype=torch.float64).to(device).transpose(0, 1)  # (6, 3, 4)
    assert not x.is_contiguous() and not w.is_contiguous()
    y = ct.conv_transpose1d(x, w, stride=2, padding=1)
    y_ref = F.conv_transpose1d(x, w, stride=2, padding=1)
    assert relative_error(y.cpu().numpy(), y_ref.cpu().numpy()) < 1e-13


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    if not hasattr(torch.library, "opcheck"):
        pytest.skip("torch.library.opcheck needs torch >= 2.4")
    for case in [c for c in CASES if c.name in ("1d_s2_p1_op1", "1d_unbatched", "2d_per_axis", "2d_groups_dilation")]:
        x, w, b = _tensors(case, device)
        n = case.dims
        as_list = lambda v: list(v) if isinstance(v, tuple) else [v] * n  # noqa: E731
        args = [as_list(case.stride), as_list(case.padding), as_list(case.output_padding), case.groups, as_list(case.dilation)]
        torch.library.opcheck(torch.ops.cupyconv.conv_transpose.default, (x, w, b, *args, "highest"))
        y = F.conv_transpose1d(x, w, b, **case.kwargs) if n == 1 else F.conv_transpose2d(x, w, b, **case.kwargs)
        gy = torch.randn_like(y).requires_grad_()  # the backward operator is differentiable too
        for mask in ([True, True, True], [False, True, False]):
            torch.library.opcheck(torch.ops.cupyconv.conv_transpose_backward.default, (gy, x, w, *args, mask, "highest"))


class _Passthrough(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _FunctionPassthrough(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Subclass(torch.Tensor):
    pass


@pytest.mark.parametrize("device", DEVICES)
def test_eager_calls_skip_the_operator(device, monkeypatch):
    """Plain eager calls run the implementation (no gradient wanted) or
    _Function (one wanted), not the custom op's dispatch; a dispatch or
    function mode, the profiler, a tensor subclass, jit tracing or
    EAGER_FAST_PATH = False take the operator; vmap takes _TransformFunction
    (one call for every sample; test_torch_transforms.py has the
    transforms).  Each gives torch's result."""
    if not _functional.HAS_CUSTOM_OP:
        pytest.skip("torch < 2.4 has no custom op: every call takes _Function")
    # the operator holds the implementation it was registered with; the
    # eager path and _Function call the module's, spied on here
    eager_calls = []
    real = _functional._forward_impl
    monkeypatch.setattr(_functional, "_forward_impl", lambda *a: eager_calls.append(1) or real(*a))
    x, w, b = (t.detach() for t in _tensors(CASES[0], device))
    kwargs = CASES[0].kwargs
    expected = F.conv_transpose1d(x, w, b, **kwargs)

    def run(*tensors):
        y = ct.conv_transpose1d(*tensors, **kwargs)
        assert relative_error(y.detach().cpu().numpy(), expected.detach().cpu().numpy()) < 1e-13
        return y

    run(x, w, b)
    assert run(x, w.requires_grad_(), b).grad_fn.name() == "_FunctionBackward"
    with torch.no_grad():
        assert run(x, w, b).grad_fn is None
    w.requires_grad_(False)
    assert len(eager_calls) == 3
    for context in (_Passthrough(), _FunctionPassthrough(), torch.profiler.profile()):
        with context:
            run(x, w, b)
    run(x.as_subclass(_Subclass), w, b)
    assert len(eager_calls) == 3
    batched = torch.func.vmap(lambda x: ct.conv_transpose1d(x, w, b, **kwargs))(torch.stack([x, 2 * x]))
    assert relative_error(batched.cpu().numpy(), torch.stack([expected, 2 * expected - b.reshape(-1, 1)]).cpu().numpy()) < 1e-13
    assert len(eager_calls) == 4
    traced = torch.jit.trace(lambda x: ct.conv_transpose1d(x, w, b, **kwargs), (x,), check_trace=False)
    assert "cupyconv::conv_transpose" in str(traced.graph)
    with _functional.operator_route("custom_op"):
        run(x, w, b)
    assert len(eager_calls) == 4


# --------------------------------------------------------------------------
# torch.compile and autocast


class _Decoder(nn.Module):
    """A small upsampling decoder: three transposed convolutions."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose1d(8, 16, 4, stride=2, padding=1),
            nn.Tanh(),
            nn.ConvTranspose1d(16, 8, 5, stride=3, padding=2, output_padding=1, groups=2),
            nn.Tanh(),
            nn.ConvTranspose1d(8, 1, 3, padding=1, dilation=2, bias=False),
        )

    def forward(self, x):
        return self.net(x)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    if not _functional.HAS_CUSTOM_OP:
        pytest.skip("graph-break-free tracing needs the custom op (torch >= 2.4)")
    torch.manual_seed(0)
    model = ct.convert(_Decoder()).to(device)
    x = torch.randn(2, 8, 13, device=device)
    compiled = torch.compile(model, fullgraph=True)
    y = compiled(x)
    y.square().mean().backward()
    compiled_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y_eager = model(x)
    y_eager.square().mean().backward()
    assert relative_error(y.detach().cpu().numpy(), y_eager.detach().cpu().numpy()) < 1e-6
    for grad, p in zip(compiled_grads, model.parameters()):
        assert relative_error(grad.cpu().numpy(), p.grad.cpu().numpy()) < 1e-5


@pytest.mark.parametrize(
    "device, dtype",
    [("cpu", torch.bfloat16)] + [pytest.param("cuda", d, marks=DEVICES[1].marks) for d in (torch.float16, torch.bfloat16)],
)
def test_autocast(device, dtype, path):
    """Like torch's own conv_transpose under autocast: computed in the autocast
    dtype from float32 parameters, gradients back in float32."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 6, 9, generator=gen).to(device)
    w = torch.randn(6, 4, 3, generator=gen).to(device).requires_grad_()
    b = torch.randn(4, generator=gen).to(device).requires_grad_()
    with torch.autocast(device, dtype=dtype):
        y = ct.conv_transpose1d(x, w, b, stride=2)
        y_ref = F.conv_transpose1d(x, w, b, stride=2)
    assert y.dtype == y_ref.dtype == dtype
    y.float().sum().backward()
    assert w.grad.dtype == torch.float32 and b.grad.dtype == torch.float32
    exact = F.conv_transpose1d(x.double(), w.detach().double(), b.detach().double(), stride=2)
    error = relative_error(y.float().detach().cpu().numpy(), exact.cpu().numpy())
    error_ref = relative_error(y_ref.float().detach().cpu().numpy(), exact.cpu().numpy())
    assert error <= max(2 * error_ref, 2.0**-8)
    with torch.autocast(device, dtype=dtype):  # float64 is left alone, as torch does
        assert ct.conv_transpose1d(x.double(), w.double()).dtype == torch.float64


# --------------------------------------------------------------------------
# Modules and convert()


@pytest.mark.parametrize(
    "theirs_cls, ours_cls, kwargs",
    [
        (nn.ConvTranspose1d, ct.ConvTranspose1d, dict(in_channels=4, out_channels=6, kernel_size=5, stride=2, padding=1, output_padding=1, groups=2)),
        (nn.ConvTranspose2d, ct.ConvTranspose2d, dict(in_channels=3, out_channels=4, kernel_size=(3, 2), stride=(2, 1), dilation=2, bias=False)),
    ],
)
def test_module_is_a_drop_in(theirs_cls, ours_cls, kwargs):
    torch.manual_seed(5)
    theirs = theirs_cls(**kwargs)
    torch.manual_seed(5)
    ours = ours_cls(**kwargs)
    assert isinstance(ours, theirs_cls)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for key, value in theirs.state_dict().items():  # same initialisation from the same seed
        assert torch.equal(ours.state_dict()[key], value)
    # A checkpoint from torch's module loads into ours and back.
    buffer = io.BytesIO()
    torch.save(theirs.state_dict(), buffer)
    buffer.seek(0)
    fresh = ours_cls(**kwargs)
    fresh.load_state_dict(torch.load(buffer))
    back = theirs_cls(**kwargs)
    back.load_state_dict(fresh.state_dict())
    x = torch.randn((2, kwargs["in_channels"]) + (7,) * (2 if theirs_cls is nn.ConvTranspose2d else 1))
    assert torch.equal(fresh(x), theirs(x)) and torch.equal(back(x), theirs(x))


@pytest.mark.parametrize("device", DEVICES)
def test_module_output_size(device, path):
    torch.manual_seed(6)
    theirs = nn.ConvTranspose2d(3, 4, 3, stride=(2, 3), padding=1).to(device).double()
    ours = ct.convert(copy.deepcopy(theirs))
    x = torch.randn(1, 3, 5, 6, device=device, dtype=torch.float64)
    for output_size in ([9, 16], [10, 18], (1, 4, 10, 17), torch.Size([10, 16])):
        y, y_ref = ours(x, output_size=output_size), theirs(x, output_size=output_size)
        assert y.shape == y_ref.shape
        assert relative_error(y.detach().cpu().numpy(), y_ref.detach().cpu().numpy()) < 1e-13
    for bad in ([8, 16], [11, 16], [10]):  # too small, too large, wrong length: torch's own messages
        with pytest.raises(ValueError) as theirs_error:
            theirs(x, output_size=bad)
        with pytest.raises(ValueError) as ours_error:
            ours(x, output_size=bad)
        assert str(ours_error.value) == str(theirs_error.value)


class _CustomForward(nn.ConvTranspose1d):
    def forward(self, input, output_size=None):
        return super().forward(input, output_size) * 2


class _Plain(nn.ConvTranspose1d):
    """A subclass that keeps torch's forward."""


@pytest.mark.parametrize("device", DEVICES)
def test_convert(device, path):
    torch.manual_seed(7)
    model = nn.Sequential(
        _Decoder(),
        nn.Upsample(scale_factor=1),
        nn.Sequential(nn.ConvTranspose2d(1, 2, 3, stride=2)),
        _CustomForward(2, 2, 3),
        _Plain(2, 2, 3),
        torch.nn.utils.parametrizations.weight_norm(nn.ConvTranspose1d(2, 2, 3, stride=2)),
    ).to(device)
    reference = copy.deepcopy(model)
    params_before = [id(p) for p in model.parameters()]
    modules_before = [id(m) for m in model.modules()]
    optimizer = torch.optim.Adam(model.parameters())
    assert ct.convert(model) is model
    assert [id(p) for p in model.parameters()] == params_before and [id(m) for m in model.modules()] == modules_before
    converted = [m for m in model.modules() if isinstance(m, (ct.ConvTranspose1d, ct.ConvTranspose2d))]
    assert len(converted) == 3 + 1 + 1 + 1  # the decoder's three, the 2D one, _Plain and the weight-normed one
    assert not isinstance(model[3], ct.ConvTranspose1d)  # its own forward: left alone
    assert isinstance(model[4], _Plain) and isinstance(model[5], nn.ConvTranspose1d)
    assert torch.nn.utils.parametrize.is_parametrized(model[5], "weight")
    assert ct.convert(model) is model and type(model[4]) is type(ct.convert(model)[4])  # idempotent
    # The converted model computes what torch's does, and trains with the same optimizer.
    x1 = torch.randn(2, 8, 5, device=device)
    y, y_ref = model[0](x1), reference[0](x1)
    assert relative_error(y.detach().cpu().numpy(), y_ref.detach().cpu().numpy()) < 1e-5
    x2 = torch.randn(2, 2, 9, device=device)
    for i in (4, 5):
        assert relative_error(model[i](x2).detach().cpu().numpy(), reference[i](x2).detach().cpu().numpy()) < 1e-5
    y.square().mean().backward()
    optimizer.step()


# --------------------------------------------------------------------------
# Training parity


def _train(model, device, steps=50):
    """Fit one fixed batch to fixed smooth targets with Adam; the losses."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(4, 8, 16, generator=gen).to(device)
    length = model(x).shape[-1]
    phase = torch.rand(4, 1, generator=gen).to(device) * 6
    target = torch.sin(torch.linspace(0, 12, length, device=device) + phase)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = (model(x).squeeze(1) - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return numpy.array(losses)


@pytest.mark.parametrize("device", DEVICES)
def test_training_matches_torch(device, path):
    """50 Adam steps of a small decoder from one seed, float32, TF32 off:
    the adapter's loss curve is torch's, to float32 accuracy."""
    torch.manual_seed(9)
    theirs = _Decoder().to(device)
    ours = ct.convert(copy.deepcopy(theirs))
    losses_theirs = _train(theirs, device)
    losses_ours = _train(ours, device)
    assert losses_theirs[-1] < 0.5 * losses_theirs[0]  # it does learn
    assert numpy.allclose(losses_ours, losses_theirs, rtol=1e-4, atol=0), numpy.abs(losses_ours / losses_theirs - 1).max()


# --------------------------------------------------------------------------
# Errors: the same exception types as torch's own, before anything runs


_BAD_CALLS = [
    ("stride 0", dict(stride=0)),
    ("negative padding", dict(padding=-1)),
    ("negative dilation", dict(dilation=0)),
    ("output_padding too big", dict(stride=2, output_padding=2)),
    ("stride of the wrong length", dict(stride=(1, 2))),
    ("groups not dividing", dict(groups=3)),
    ("groups 0", dict(groups=0)),
    ("float stride", dict(stride=1.5)),
    ("string padding", dict(padding="same")),
    ("float groups", dict(groups=2.0)),
    ("bias of the wrong size", dict(bias=torch.zeros(5))),
    ("bias of the wrong dtype", dict(bias=torch.zeros(3, dtype=torch.float64))),
    ("weight of the wrong rank", dict(weight=torch.zeros(4, 3))),
    ("weight of the wrong dtype", dict(weight=torch.zeros(4, 3, 3, dtype=torch.float64))),
    ("channels mismatch", dict(weight=torch.zeros(5, 3, 3))),
    ("input of the wrong rank", dict(input=torch.zeros(2, 2, 4, 7))),
    ("input not a tensor", dict(input=numpy.zeros((2, 4, 7), dtype=numpy.float32))),
    ("weight not a tensor", dict(weight=[[1.0]])),
    ("output too small", dict(input=torch.zeros(2, 4, 1), padding=2)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, change", _BAD_CALLS, ids=[n for n, _ in _BAD_CALLS])
def test_errors_match_torch(name, change, device, path):
    arguments = dict(input=torch.zeros(2, 4, 7), weight=torch.zeros(4, 3, 3), bias=None)
    arguments.update(change)
    arguments = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in arguments.items()}
    with pytest.raises(Exception) as theirs:
        F.conv_transpose1d(**arguments)
    with pytest.raises(Exception) as ours:
        ct.conv_transpose1d(**arguments)
    assert isinstance(ours.value, type(theirs.value)), f"torch raised {theirs.value!r}, we raised {ours.value!r}"
    assert str(ours.value)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU")
def test_mixed_devices_are_refused(path):
    x, w = torch.zeros(2, 4, 7, device="cuda"), torch.zeros(4, 3, 3)
    with pytest.raises(RuntimeError):
        F.conv_transpose1d(x, w)
    with pytest.raises(RuntimeError, match="weight is on cpu but input is on cuda"):
        ct.conv_transpose1d(x, w)


def test_other_dtypes_go_to_torch(path):
    """dtypes the kernels do not cover (complex, say) get torch's own result."""
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(2, 3, 5, generator=gen, dtype=torch.complex64)
    w = torch.randn(3, 2, 3, generator=gen, dtype=torch.complex64)
    assert torch.equal(ct.conv_transpose1d(x, w, stride=2), F.conv_transpose1d(x, w, stride=2))


def _format(t) -> str:
    if t.is_contiguous():
        return "contiguous"
    return "channels_last" if t.is_contiguous(memory_format=torch.channels_last) else "strided"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("layouts", [("contiguous", "contiguous"), ("channels_last", "contiguous"), ("contiguous", "channels_last"), ("channels_last", "channels_last")], ids="-".join)
def test_memory_format_follows_torch(layouts, dtype, device, path):
    """The output and every gradient come back in the memory format torch's
    own conv_transpose2d gives them, for channels-first, channels-last and
    mixed inputs, with the same values."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 5, 6, generator=generator, dtype=torch.float64).to(device, dtype)
    w = torch.randn(8, 16, 3, 3, generator=generator, dtype=torch.float64).to(device, dtype)
    b = torch.randn(16, generator=generator, dtype=torch.float64).to(device, dtype)
    if layouts[0] == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    if layouts[1] == "channels_last":
        w = w.to(memory_format=torch.channels_last)
    kwargs = dict(stride=2, padding=1, output_padding=1)
    results = []
    for fn in (ct.conv_transpose2d, F.conv_transpose2d):
        xs, ws, bs = (t.detach().clone(memory_format=torch.preserve_format).requires_grad_() for t in (x, w, b))
        y = fn(xs, ws, bs, **kwargs)
        gy = torch.ones_like(y)  # (the output's own format, as autograd's would be)
        grads = torch.autograd.grad(y, (xs, ws, bs), gy)
        results.append((y, grads))
    (y, grads), (y_ref, grads_ref) = results
    assert [_format(t) for t in (y,) + grads] == [_format(t) for t in (y_ref,) + grads_ref]
    tolerance = 1e-2 if dtype == torch.bfloat16 else 1e-4 if dtype == torch.float32 else 1e-12
    for ours, theirs in zip((y,) + grads, (y_ref,) + grads_ref):
        assert relative_error(ours.detach().double().cpu().numpy(), theirs.detach().double().cpu().numpy()) < tolerance


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("layouts", [("contiguous", "contiguous"), ("channels_last", "contiguous"), ("contiguous", "channels_last")], ids="-".join)
def test_fake_memory_format_is_the_real_ones(layouts, device):
    """Under FakeTensorMode (torch.compile's tracing) the operators' outputs
    have the strides the real calls give (on the CPU: torch's own; on CUDA:
    torch's cuDNN rule), so compiled graphs see the layout they will get."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(2, 8, 5, 6, device=device)
        w = torch.empty(8, 16, 3, 3, device=device)
        if layouts[0] == "channels_last":
            x = x.to(memory_format=torch.channels_last)
        if layouts[1] == "channels_last":
            w = w.to(memory_format=torch.channels_last)
        y = _functional._forward_fake(x, w, None, [2, 2], [1, 1], [1, 1], 1, [1, 1], "highest")
        grads = _functional._backward_fake(torch.empty_like(y), x, w, [2, 2], [1, 1], [1, 1], 1, [1, 1], [True, True, True], "highest")
    expected = "contiguous" if layouts == ("contiguous", "contiguous") else "channels_last"
    assert [_format(t) for t in (y,) + grads[:2]] == [expected] * 3 and grads[2].dim() == 1
    if device == "cpu":
        xr, wr = (torch.randn(t.shape).to(memory_format=torch.channels_last if layout == "channels_last" else torch.contiguous_format) for t, layout in zip((x, w), layouts))
        y_real = F.conv_transpose2d(xr, wr, stride=2, padding=1, output_padding=1)
        assert y_real.stride() == y.stride()
