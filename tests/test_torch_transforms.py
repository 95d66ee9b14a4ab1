"""torch.func transforms (vmap, grad, jacrev, jacfwd, jvp, hessian) and
forward-mode AD through the PyTorch adapter, each against torch's own
convolution under the same transform, float64.

On the CPU the adapter's implementations compute with torch's convolution,
which would take functorch's wrapped tensors as they come; so every test
spies on the implementations and fails if a wrapped tensor reaches them (on
CUDA the bridge would hand the kernels a wrapper's memory).  The batching
rules are also checked directly, every combination of batched operands
against a loop over the samples, through _TransformBackwardFunction and
the custom op.
"""

from __future__ import annotations

import copy
import itertools

import numpy
import pytest

torch = pytest.importorskip("torch")
import torch.autograd.forward_ad as fwAD  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import func  # noqa: E402

import cupyconv.torch as ct  # noqa: E402
from cupyconv.torch import _functional, _transforms  # noqa: E402

from sweep import CASES, relative_error  # noqa: E402
from test_torch import DEVICES, HAVE_CUDA  # noqa: E402

CASE_NAMES = ("1d_s3_d2_p2_op1", "1d_unbatched", "1d_no_bias_g4", "2d_per_axis", "2d_groups_dilation", "2d_unbatched")
TRANSFORM_CASES = [c for c in CASES if c.name in CASE_NAMES]
SAMPLES = 3


@pytest.fixture(autouse=True)
def implementations(monkeypatch):
    """Spies on the implementations behind the autograd.Functions: the names of the calls
    made, each checked to hold no functorch-wrapped tensor."""
    calls = []

    def spy(name):
        real = getattr(_functional, name)

        def call(*arguments):
            for argument in arguments:
                if isinstance(argument, torch.Tensor):
                    assert not torch._C._functorch.is_functorch_wrapped_tensor(argument), f"{name} got a wrapped tensor"
                    assert not _functional._is_legacy_batched(argument), f"{name} got a legacy BatchedTensor"
            calls.append(name)
            return real(*arguments)

        return call

    for name in ("_forward_impl", "_backward_impl"):
        monkeypatch.setattr(_functional, name, spy(name))
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield calls
    torch.backends.cudnn.allow_tf32 = previous


@pytest.fixture(params=["custom_op", "function"])
def operator_path(request):
    """Transforms take _TransformFunction on both: with the custom op registered (and
    the eager path off), and as on torch < 2.4."""
    if request.param == "custom_op" and not _functional.HAS_CUSTOM_OP:
        pytest.skip("torch.library.custom_op needs torch >= 2.4")
    with _functional.operator_route(request.param):
        yield request.param


@pytest.fixture(params=["eager", "custom_op", "function"])
def route(request):
    """Where a graph made outside the transforms puts its node: the eager
    path's _Function (the default), the custom op (the eager path off), or
    _Function as on torch < 2.4."""
    if request.param != "function" and not _functional.HAS_CUSTOM_OP:
        pytest.skip("torch.library.custom_op needs torch >= 2.4")
    with _functional.operator_route(request.param):
        yield request.param


def _functions(dims):
    return (ct.conv_transpose1d, F.conv_transpose1d) if dims == 1 else (ct.conv_transpose2d, F.conv_transpose2d)


def _tensors(case, device, dtype=torch.float64, seed=0):
    x, w, b = case.arrays(numpy.random.default_rng(seed))
    t = lambda a: None if a is None else torch.from_numpy(a).to(device, dtype)  # noqa: E731
    return t(x), t(w), t(b)


def _samples(case, device, dtype=torch.float64):
    """SAMPLES independent draws of (input, weight, bias), each stacked in front."""
    draws = [_tensors(case, device, dtype, seed) for seed in range(SAMPLES)]
    return tuple(None if parts[0] is None else torch.stack(parts) for parts in zip(*draws))


def _close(got, expected, tolerance=1e-13):
    got, expected = (t.detach().cpu().numpy() for t in (got, expected))
    assert got.shape == expected.shape
    assert relative_error(got, expected) < tolerance


def _tree_close(got, expected, tolerance=1e-13):
    got, expected = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(expected)
    assert len(got) == len(expected) > 0
    for g, e in zip(got, expected):
        _close(g, e, tolerance)


# --------------------------------------------------------------------------
# The batching rules, every combination, against a loop over the samples


IN_DIMS = [dims for dims in itertools.product((None, 0), repeat=3) if dims != (None, None, None)]


def _take(tensor, dim, i):
    return tensor if tensor is None or dim is None else tensor.select(dim, i)


def _place(tensor, dim):
    """A batched operand with its vmapped dimension moved from the front to `dim`."""
    return tensor if tensor is None or dim in (None, 0) else tensor.movedim(0, dim).contiguous()


def _forward_in_dims(case):
    """Every combination of batched operands (a vmapped dimension inside
    the tensors too); without a bias, those with input or weight batched."""
    combinations = IN_DIMS + [(1, None, None), (1, 2, 1)]
    if case.bias:
        return combinations
    return list(dict.fromkeys(dims[:2] + (None,) for dims in combinations if dims[:2] != (None, None)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("case", "in_dims"), [(case, dims) for case in TRANSFORM_CASES for dims in _forward_in_dims(case)], ids=str
)
def test_forward_batching_rule(case, in_dims, device, operator_path, implementations):
    """vmap of the forward pass: one call of the implementation for every
    sample, each sample's result torch's."""
    ours, theirs = _functions(case.dims)
    stacked = _samples(case, device)
    single = _tensors(case, device, seed=SAMPLES)
    operands = [_place(s, d) if d is not None else u for s, u, d in zip(stacked, single, in_dims)]
    got = func.vmap(lambda x, w, b: ours(x, w, b, **case.kwargs), in_dims=in_dims)(*operands)
    expected = torch.stack([theirs(*(_take(t, d, i) for t, d in zip(operands, in_dims)), **case.kwargs) for i in range(SAMPLES)])
    _close(got, expected)
    assert implementations == ["_forward_impl"]


MASKS = [(True, True, True), (True, False, False), (False, True, False), (False, False, True), (False, True, True)]


def _reference_backward(case, grad_output, input, weight, mask):
    _, theirs = _functions(case.dims)
    x, w = input.detach().requires_grad_(), weight.detach().requires_grad_()
    b = torch.zeros(weight.shape[1] * case.groups, dtype=weight.dtype, device=weight.device, requires_grad=True)
    grads = torch.autograd.grad(theirs(x, w, b, **case.kwargs), (x, w, b), grad_output)
    return tuple(g if wanted else None for g, wanted in zip(grads, mask))


def _arguments(case):
    k = case.kwargs
    n = case.dims
    as_list = lambda v: list(v) if isinstance(v, tuple) else [v] * n  # noqa: E731
    return (as_list(k["stride"]), as_list(k["padding"]), as_list(k["output_padding"]), k["groups"], as_list(k["dilation"]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("in_dims", IN_DIMS, ids=str)
@pytest.mark.parametrize("case", [c for c in TRANSFORM_CASES if c.name in ("1d_s3_d2_p2_op1", "1d_unbatched", "2d_groups_dilation")], ids=str)
@pytest.mark.parametrize("operator", ["function", "custom_op"])
def test_backward_batching_rule(case, in_dims, mask, device, operator, implementations, monkeypatch):
    """vmap of the backward operator (as jacrev and per-sample gradients
    use it), every combination of batched grad_output, input and weight and
    of wanted gradients, against torch's gradients sample by sample.  At
    most two calls of the implementation (grad_input's fold and grad_weight's)."""
    if operator == "custom_op" and not _functional.HAS_CUSTOM_OP:
        pytest.skip("torch.library.custom_op needs torch >= 2.4")
    rules = []
    real_rule = _transforms.backward_rule
    monkeypatch.setattr(_transforms, "backward_rule", lambda *a: rules.append(1) or real_rule(*a))
    stacked_x, stacked_w, _ = _samples(case, device)
    x, w, _ = _tensors(case, device, seed=SAMPLES)
    y = _functions(case.dims)[1](x, w, None, **case.kwargs)
    gen = torch.Generator().manual_seed(5)
    stacked_gy = torch.randn((SAMPLES,) + y.shape, generator=gen, dtype=torch.float64).to(device)
    gy = stacked_gy[0].clone()
    operands = [s if d is not None else u for s, u, d in zip((stacked_gy, stacked_x, stacked_w), (gy, x, w), in_dims)]
    op = _functional._TransformBackwardFunction.apply if operator == "function" else torch.ops.cupyconv.conv_transpose_backward
    arguments = _arguments(case)
    got = func.vmap(lambda gy, x, w: op(gy, x, w, *arguments, list(mask), "highest"), in_dims=in_dims)(*operands)
    for i in range(SAMPLES):
        expected = _reference_backward(case, *(_take(t, d, i) for t, d in zip(operands, in_dims)), mask)
        for g, e, wanted in zip(got, expected, mask):
            if wanted:
                _close(g[i], e)
            else:
                assert g.numel() == 0
    assert rules == [1]
    if operator == "function":
        assert 1 <= len(implementations) <= 2 and set(implementations) == {"_backward_impl"}


# --------------------------------------------------------------------------
# The transforms users compose, against torch's convolution under the same


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TRANSFORM_CASES, ids=str)
def test_func_transforms_match_torch(case, device, operator_path):
    """grad, jacrev, jacfwd, jvp, vjp and hessian of a loss through the
    adapter, with respect to every operand."""
    ours, theirs = _functions(case.dims)
    x, w, b = _tensors(case, device)
    gen = torch.Generator().manual_seed(3)

    def loss(conv):
        def f(x, w, b):
            y = conv(x, w, b, **case.kwargs)
            weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).reshape(y.shape)
            return (torch.tanh(y) * weights).sum()

        return f

    argnums = (0, 1, 2) if b is not None else (0, 1)
    for transform in (
        lambda f: func.grad(f, argnums=argnums)(x, w, b),
        lambda f: func.jacrev(lambda x, w, b: f(x, w, b).reshape(1), argnums=argnums)(x, w, b),
        lambda f: func.jacfwd(lambda x, w, b: f(x, w, b).reshape(1), argnums=argnums)(x, w, b),
        lambda f: func.hessian(f, argnums=argnums)(x, w, b),
        lambda f: func.jacfwd(func.grad(f, argnums=0), argnums=1)(x, w, b),
    ):
        _tree_close(transform(loss(ours)), transform(loss(theirs)), 1e-12)
    tangents = tuple(torch.randn(t.shape, generator=gen, dtype=t.dtype).to(device) for t in (x, w, b) if t is not None)
    primals = tuple(t for t in (x, w, b) if t is not None)
    conv = lambda conv: (lambda *ts: conv(*ts, **case.kwargs) if b is not None else conv(*ts, None, **case.kwargs))  # noqa: E731
    _tree_close(func.jvp(conv(ours), primals, tangents), func.jvp(conv(theirs), primals, tangents))
    out, pullback = func.vjp(conv(ours), *primals)
    _, pullback_ref = func.vjp(conv(theirs), *primals)
    probe = torch.randn(out.shape, generator=gen, dtype=out.dtype).to(device)
    _tree_close(pullback(probe), pullback_ref(probe))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TRANSFORM_CASES, ids=str)
def test_batched_grad_outputs(case, route, device, implementations):
    """torch.autograd.grad(..., is_grads_batched=True) runs the backward
    under torch's legacy vmap: through _Function (the eager path, and
    torch < 2.4) the backward computes with torch's convolution, which that
    vmap runs; the custom op's backward, by that vmap's loop over the
    samples.  First and second order."""
    ours, theirs = _functions(case.dims)
    x, w, b = (t if t is None else t.requires_grad_() for t in _tensors(case, device))
    inputs = tuple(t for t in (x, w, b) if t is not None)
    y, y_ref = ours(x, w, b, **case.kwargs), theirs(x, w, b, **case.kwargs)
    probes = torch.randn((SAMPLES,) + y.shape, generator=torch.Generator().manual_seed(7), dtype=y.dtype).to(device)
    got = torch.autograd.grad(y, inputs, probes, is_grads_batched=True)
    _tree_close(got, torch.autograd.grad(y_ref, inputs, probes, is_grads_batched=True))
    assert (y.grad_fn.name() == "_FunctionBackward") == (route != "custom_op")
    # second order: batched probes reach the backward's own backward
    gen = torch.Generator().manual_seed(8)
    gy = torch.randn(y.shape, generator=gen, dtype=y.dtype).to(device).requires_grad_()
    probes = tuple(torch.randn((SAMPLES,) + t.shape, generator=gen, dtype=t.dtype).to(device) for t in (x, w))
    seconds = []
    for conv in (ours, theirs):
        firsts = torch.autograd.grad(conv(x, w, b, **case.kwargs), (x, w), gy, create_graph=True)
        seconds.append(torch.autograd.grad(firsts, (x, w, gy), probes, is_grads_batched=True, allow_unused=True))
    for got, expected in zip(*seconds):
        assert (got is None) == (expected is None)
        if got is not None:
            _close(got, expected)
    # the first-order backward with create_graph=True, not batched, runs ours
    assert implementations == ([] if route == "custom_op" else ["_forward_impl", "_forward_impl", "_backward_impl"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TRANSFORM_CASES, ids=str)
def test_vmap_over_autograd_grad(case, route, device, implementations):
    """vmap over torch.autograd.grad of a graph made outside it: the node
    made there (the eager path's _Function, the custom op's) runs its
    backward under vmap, first and second order."""
    ours, theirs = _functions(case.dims)
    x, w, b = (t if t is None else t.requires_grad_() for t in _tensors(case, device))
    inputs = tuple(t for t in (x, w, b) if t is not None)
    gen = torch.Generator().manual_seed(9)
    results = []

    def vmapped_grad(outputs, inputs, probes):
        return func.vmap(lambda v: torch.autograd.grad(outputs, inputs, v, retain_graph=True))(probes)

    for conv in (ours, theirs):
        y = conv(x, w, b, **case.kwargs)
        probes = torch.randn((SAMPLES,) + y.shape, generator=gen.manual_seed(9), dtype=y.dtype).to(device)
        firsts = vmapped_grad(y, inputs, probes)
        gy = probes[0].clone().requires_grad_()
        g_w = torch.autograd.grad(y, w, gy, create_graph=True)[0]
        probes = torch.randn((SAMPLES,) + g_w.shape, generator=gen.manual_seed(10), dtype=y.dtype).to(device)
        results.append((firsts, vmapped_grad(g_w, (x, gy), probes)))
    _tree_close(results[0], results[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TRANSFORM_CASES, ids=str)
def test_per_sample_gradients(case, device, operator_path, implementations):
    """vmap(grad(...)): each sample's gradients of every operand, as with
    torch's convolution (what differential-privacy training computes)."""
    ours, theirs = _functions(case.dims)
    stacked_x, _, _ = _samples(case, device)
    _, w, b = _tensors(case, device)

    def loss(conv):
        def f(w, b, x):
            y = conv(x, w, b, **case.kwargs)
            return (y**2).sum()

        return f

    per_sample = lambda f: func.vmap(func.grad(f, argnums=(0, 1, 2) if b is not None else (0, 2)), in_dims=(None, None, 0))  # noqa: E731
    operands = (w, b, stacked_x)
    _tree_close(per_sample(loss(ours))(*operands), per_sample(loss(theirs))(*operands))
    assert implementations.count("_forward_impl") == 1


@pytest.mark.parametrize("device", DEVICES)
def test_model_ensemble(device, operator_path, implementations):
    """A stack of models (torch.func.stack_module_state) run and differentiated
    by vmap over their parameters: the weights batched, the input shared."""
    models = [nn_model().to(device, torch.float64) for _ in range(SAMPLES)]
    ours = [ct.convert(copy.deepcopy(m)) for m in models]
    x = torch.randn(2, 4, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(4)).to(device)

    def run(models):
        params, buffers = func.stack_module_state(models)
        base = models[0]

        def loss(params, buffers):
            return func.functional_call(base, (params, buffers), (x,)).square().sum()

        return func.vmap(func.grad_and_value(loss))(params, buffers)

    got, expected = run(ours), run(models)
    _tree_close(got, expected)
    assert implementations.count("_forward_impl") == 2  # one call for each layer, every model at once


def nn_model():
    from torch import nn

    return nn.Sequential(nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1), nn.Tanh(), nn.ConvTranspose1d(6, 2, 4, groups=2))


# --------------------------------------------------------------------------
# Forward-mode AD (dual tensors) outside torch.func


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TRANSFORM_CASES, ids=str)
def test_forward_mode_ad(case, device, operator_path):
    """A tangent on any operand gives torch's tangent (before, the
    operator's output had none and the eager path's on CUDA none either)."""
    ours, theirs = _functions(case.dims)
    x, w, b = _tensors(case, device)
    gen = torch.Generator().manual_seed(6)
    for which in range(3 if b is not None else 2):
        tangent = torch.randn([x, w, b][which].shape, generator=gen, dtype=torch.float64).to(device)
        results = []
        for conv in (ours, theirs):
            with fwAD.dual_level():
                operands = [x, w, b]
                operands[which] = fwAD.make_dual(operands[which], tangent)
                y = conv(*operands, **case.kwargs)
                results.append(fwAD.unpack_dual(y))
        assert results[0].tangent is not None
        _close(results[0].primal, results[1].primal)
        _close(results[0].tangent, results[1].tangent)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_vmap_low_precision(dtype, implementations):
    """The grouped fold in the tensor-core dtypes: a batched weight and
    per-sample weight gradients against float64, as accurate as the
    project's bar (float32 "highest": under 1e-5; 16-bit: within twice the
    error of torch's layer under the same transform)."""
    case = next(c for c in CASES if c.name == "1d_mid_channels")
    stacked_x, stacked_w, _ = _samples(case, "cuda", dtype)
    _, _, b = _tensors(case, "cuda", dtype)
    operands = (stacked_x, stacked_w)

    def forward(conv, bias):
        return func.vmap(lambda x, w: conv(x, w, bias, **case.kwargs))

    def gradients(conv, bias):
        return func.vmap(func.grad(lambda w, x: conv(x, w, bias, **case.kwargs).float().square().sum()))

    for transform, arguments in ((forward, operands), (gradients, operands[::-1])):
        reference = transform(F.conv_transpose1d, b.double())(*(t.double() for t in arguments))
        ours = relative_error(transform(ct.conv_transpose1d, b)(*arguments).double().cpu().numpy(), reference.cpu().numpy())
        if dtype == torch.float32:
            assert ours < 1e-5
        else:
            theirs = relative_error(transform(F.conv_transpose1d, b)(*arguments).double().cpu().numpy(), reference.cpu().numpy())
            assert ours <= 2 * theirs
