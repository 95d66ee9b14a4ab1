"""The functional adapter: argument handling, the operator and its autograd.

Layers, outermost first:

* ``conv_transpose1d/2d`` (public): torch's signature.  They check argument
  types, turn int-or-tuple arguments into lists, apply autocast the way torch's
  own conv_transpose does, pick the float32 precision from
  ``torch.backends.cudnn.allow_tf32``, and call the operator.
* the operator ``cupyconv::conv_transpose`` (a ``torch.library.custom_op`` on
  torch >= 2.4, else ``_Function``) and its backward operator
  ``cupyconv::conv_transpose_backward`` (else ``_BackwardFunction``), whose
  own autograd formula (``_second_order``) is written with the two operators,
  so gradients of any order work.  Their implementations validate the
  shapes (raising before anything runs), then run cupyconv's kernels on CUDA
  tensors of a supported dtype (``_bridge``) and torch's own operator on
  anything else.  Calls under torch.func or forward-mode AD take
  ``_TransformFunction``, which has batching rules and forward-mode
  formulas (``_transforms``), on any torch.
"""

import contextlib
import operator
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .. import _api, _geometry
from . import _transforms

try:  # torch's own test (DDE-safe on symbolic shapes), where it has one
    from torch._prims_common import suggest_memory_format as _suggest_memory_format
except ImportError:  # pragma: no cover - an older torch
    _suggest_memory_format = None

__all__ = ["conv_transpose1d", "conv_transpose2d", "ArgumentError"]

# torch.library.custom_op (with register_fake and register_autograd) arrived in
# torch 2.4; older torch runs the autograd.Function below.  Tests flip
# the route (operator_route) to exercise the fallback on a new torch too.
HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")
_use_custom_op = HAS_CUSTOM_OP

_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class ArgumentError(RuntimeError, ValueError):
    """A bad argument value or shape.  It is a RuntimeError, the type torch's
    own convolutions raise, and a ValueError, the type cupyconv raises."""


# --------------------------------------------------------------------------
# Argument handling shared by every layer.


def _int(function: str, name: str, value) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{function}(): {name} must be an int, got bool")
    if isinstance(value, int):
        return value
    try:
        return operator.index(value)  # NumPy integers and the like
    except TypeError:
        raise TypeError(f"{function}(): {name} must be an int, got {type(value).__name__}") from None


def _int_list(function: str, name: str, value, n: int) -> List[int]:
    """An int or a sequence of n ints, as a list of n ints (torch's rules)."""
    if isinstance(value, (tuple, list)):
        values = [_int(function, name, v) for v in value]
        if len(values) != n:
            raise ArgumentError(
                f"{function}(): expected {name} to be a single integer value or a list of {n} values "
                f"to match the convolution dimensions, but got {name}={values}"
            )
        return values
    return [_int(function, name, value)] * n


def _check_tensor(function: str, name: str, value, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, torch.Tensor):
        kind = "a Tensor or None" if optional else "a Tensor"
        raise TypeError(f"{function}(): {name} must be {kind}, got {type(value).__name__}")


def _check_same(input: torch.Tensor, named: Sequence[Tuple[str, Optional[torch.Tensor]]]) -> None:
    for name, tensor in named:
        if tensor is None:
            continue
        if tensor.device != input.device:
            raise ArgumentError(f"{name} is on {tensor.device} but input is on {input.device}: put them on one device")
        if tensor.dtype != input.dtype:
            raise ArgumentError(f"{name} has dtype {tensor.dtype} but input has dtype {input.dtype}: they must match")


# Real (eager) calls take geometry_of, which remembers make_geometry's
# answers for plain int arguments and shapes.  Fake tensors may carry symbolic
# sizes, which do not hash, so the fake implementations call make_geometry.


def _geometry_of(input, weight, bias, stride, padding, output_padding, groups, dilation, fake=False) -> _geometry.Geometry:
    """cupyconv's checks of every shape and size, raising ArgumentError."""
    make = _geometry.make_geometry if fake else _geometry.geometry_of
    try:
        return make(
            len(stride), tuple(input.shape), tuple(weight.shape), None if bias is None else tuple(bias.shape),
            tuple(stride), tuple(padding), tuple(output_padding), groups, tuple(dilation),
        )  # fmt: skip
    except ValueError as error:
        raise ArgumentError(str(error)) from None


def _is_channels_last(t: torch.Tensor) -> bool:
    if t.is_contiguous() and not t.is_contiguous(memory_format=torch.channels_last):
        return False  # (every call on plain tensors: two C++ flag reads, not the stride walk below)
    if _suggest_memory_format is not None:
        return _suggest_memory_format(t) == torch.channels_last
    return _api.channels_last(tuple(t.shape), t.stride())


def _memory_format(input: torch.Tensor, weight: torch.Tensor) -> torch.memory_format:
    """torch's memory format for conv_transpose2d's output and its gradients:
    channels_last where the input or the weight is, but for float64 on CUDA
    (cuDNN's cudnn_conv_suggest_memory_format; torch's CPU path keeps it)."""
    if input.dim() != 4 or (input.is_cuda and input.dtype == torch.float64):
        return torch.contiguous_format
    return torch.channels_last if _is_channels_last(input) or _is_channels_last(weight) else torch.contiguous_format


def _runs_on_kernels(input: torch.Tensor) -> bool:
    return input.is_cuda and input.dtype in _KERNEL_DTYPES


# --------------------------------------------------------------------------
# The implementations behind the operators (custom_op or autograd.Function).


def _forward_impl(input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
    _check_same(input, (("weight", weight), ("bias", bias)))
    geometry = _geometry_of(input, weight, bias, stride, padding, output_padding, groups, dilation)
    if not _runs_on_kernels(input):
        return _torch_forward(input, weight, bias, stride, padding, output_padding, groups, dilation, precision)
    from . import _bridge

    # The kernels write channels first; a channels-last call's output is made so after
    return _bridge.forward(input, weight, bias, geometry, precision).contiguous(memory_format=_memory_format(input, weight))


def _torch_forward(input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
    """torch's own operator (precision: torch's settings decide)."""
    torch_op = F.conv_transpose1d if len(stride) == 1 else F.conv_transpose2d
    return torch_op(input, weight, bias, stride, padding, output_padding, groups, dilation)


def _forward_fake(input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
    _check_same(input, (("weight", weight), ("bias", bias)))
    geometry = _geometry_of(input, weight, bias, stride, padding, output_padding, groups, dilation, fake=True)
    return torch.empty(geometry.output_shape, dtype=input.dtype, device=input.device, memory_format=_memory_format(input, weight))


def _torch_backward(grad_output, input, weight, geometry, stride, padding, output_padding, groups, dilation, output_mask):
    """torch's own gradients (aten.convolution_backward wants a batch axis)."""
    batched = geometry.batched
    gy = grad_output if batched else grad_output.unsqueeze(0)
    x = input if batched else input.unsqueeze(0)
    bias_sizes = [geometry.out_channels] if output_mask[2] else None
    grad_input, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
        gy, x, weight, bias_sizes, stride, padding, dilation, True, output_padding, groups, list(output_mask)
    )
    if grad_input is not None and not batched:
        grad_input = grad_input.squeeze(0)
    return grad_input, grad_weight, grad_bias


def _backward_impl(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision):
    """(grad_input, grad_weight, grad_bias); a masked gradient is an empty tensor
    (an operator's outputs cannot be None)."""
    _check_same(input, (("grad_output", grad_output), ("weight", weight)))
    geometry = _geometry_of(input, weight, None, stride, padding, output_padding, groups, dilation)
    _check_grad_output(geometry, grad_output)
    mask = tuple(bool(m) for m in output_mask)
    if _runs_on_kernels(input):
        from . import _bridge

        grads = _bridge.backward(grad_output, input, weight, geometry, mask, precision)
        layout = _memory_format(input, weight)
        grads = tuple(g.contiguous(memory_format=layout) if g is not None and g.dim() == 4 else g for g in grads)
    else:
        grads = _torch_backward(grad_output, input, weight, geometry, stride, padding, output_padding, groups, dilation, mask)
    return tuple(grad if grad is not None else grad_output.new_empty(0) for grad in grads)


def _backward_fake(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision):
    _check_same(input, (("grad_output", grad_output), ("weight", weight)))
    geometry = _geometry_of(input, weight, None, stride, padding, output_padding, groups, dilation, fake=True)
    _check_grad_output(geometry, grad_output)
    shapes = (input.shape, weight.shape, (geometry.out_channels,))
    layout = _memory_format(input, weight)
    return tuple(
        torch.empty(shape if wanted else (0,), dtype=grad_output.dtype, device=grad_output.device, memory_format=layout if wanted and len(shape) == 4 else torch.contiguous_format)
        for shape, wanted in zip(shapes, output_mask)
    )  # fmt: skip


def _check_grad_output(geometry, grad_output) -> None:
    try:
        _geometry.check_grad_output(geometry, tuple(grad_output.shape))
    except ValueError as error:
        raise ArgumentError(str(error)) from None


def _output_mask(ctx, has_bias: bool) -> List[bool]:
    needs = ctx.needs_input_grad
    return [bool(needs[0]), bool(needs[1]), bool(has_bias and needs[2])]


def _gradients(grads, mask, n_inputs: int):
    """The backward result for autograd: None where a gradient was not wanted."""
    return tuple(grad if wanted else None for grad, wanted in zip(grads, mask)) + (None,) * (n_inputs - 3)


def _second_order(needs, grad_output, input, weight, arguments, mask, precision, grad_grads, forward, backward):
    """The backward operator's own gradients (double backward), in terms of
    the two operators, so that they are differentiable again.

    The backward's outputs are linear in grad_output and each bilinear with
    the other input: grad_input = A_W^T gy, <grad_weight, V> = <gy, A_V x>,
    grad_bias = gy summed over all but the channel axis, where A_W is the
    forward pass with weight W.  With gg_input, gg_weight and gg_bias the
    gradients arriving at those outputs (None: none arrived, or masked):

    * grad_output's: forward(gg_input, W, bias=gg_bias) + forward(x, gg_weight)
    * input's: grad_input of the forward pass with weight gg_weight
    * weight's: grad_weight of the forward pass with input gg_input

    `needs` says which of (grad_output, input, weight) want one."""
    gg_input, gg_weight, gg_bias = (g if wanted and g is not None else None for g, wanted in zip(grad_grads, mask))
    d_grad_output = d_input = d_weight = None
    if needs[0]:
        # the forward pass's tangent, gg_* taking the tangents' place
        d_grad_output = _transforms.forward_tangent(
            forward, input, weight, gg_input, gg_weight, gg_bias, arguments, precision, grad_output.shape
        )
    if needs[1] and gg_weight is not None:
        d_input = backward(grad_output, input, gg_weight, *arguments, [True, False, False], precision)[0]
    if needs[2] and gg_input is not None:
        d_weight = backward(grad_output, gg_input, weight, *arguments, [False, True, False], precision)[1]
    return d_grad_output, d_input, d_weight


# --------------------------------------------------------------------------
# The operators.

_FORWARD_SCHEMA = (
    "(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] output_padding, "
    "int groups, int[] dilation, str precision) -> Tensor"
)
_BACKWARD_SCHEMA = (
    "(Tensor grad_output, Tensor input, Tensor weight, int[] stride, int[] padding, int[] output_padding, "
    "int groups, int[] dilation, bool[] output_mask, str precision) -> (Tensor, Tensor, Tensor)"
)

if HAS_CUSTOM_OP:
    _backward_op = torch.library.custom_op(
        "cupyconv::conv_transpose_backward", _backward_impl, mutates_args=(), schema=_BACKWARD_SCHEMA
    )
    _backward_op.register_fake(_backward_fake)

    _forward_op = torch.library.custom_op("cupyconv::conv_transpose", _forward_impl, mutates_args=(), schema=_FORWARD_SCHEMA)
    _forward_op.register_fake(_forward_fake)

    def _setup_context(ctx, inputs, output):
        _save_forward(ctx, *inputs)

    def _backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        mask = _output_mask(ctx, ctx.has_bias)
        grads = _backward_op(grad_output, input, weight, *ctx.arguments, mask, ctx.precision)
        return _gradients(grads, mask, 9)

    _forward_op.register_autograd(_backward, setup_context=_setup_context)

    def _setup_backward_context(ctx, inputs, output):
        _save_backward(ctx, *inputs)

    def _double_backward(ctx, grad_input_grad, grad_weight_grad, grad_bias_grad):
        grad_output, input, weight = ctx.saved_tensors
        grads = _second_order(
            ctx.needs_input_grad[:3], grad_output, input, weight, ctx.arguments, ctx.output_mask, ctx.precision,
            (grad_input_grad, grad_weight_grad, grad_bias_grad), _forward_op, _backward_op,
        )  # fmt: skip
        return grads + (None,) * 7

    _backward_op.register_autograd(_double_backward, setup_context=_setup_backward_context)

    # vmap of the operators (torch.compile's path, and the custom op's
    # backward under vmap; eager calls under torch.func take
    # _TransformFunction): one call over the vmapped dimension, not torch's
    # fallback of one call a sample
    def _forward_vmap(info, in_dims, *arguments):
        return _transforms.forward_rule(_forward_op, info.batch_size, in_dims, *arguments)

    def _backward_vmap(info, in_dims, *arguments):
        return _transforms.backward_rule(_backward_op, info.batch_size, in_dims, *arguments)

    if hasattr(_forward_op, "register_vmap"):  # torch >= 2.5
        _forward_op.register_vmap(_forward_vmap)
        _backward_op.register_vmap(_backward_vmap)


# torch.autograd.grad(..., is_grads_batched=True) runs backward passes under
# torch's legacy vmap, whose BatchedTensors Python code sees with one
# sample's shape and which have no memory of their own to hand the kernels.
# On those the backward passes compute with torch's own convolution, which
# that vmap can run.
_is_legacy_batched = getattr(torch._C._functorch, "is_legacy_batchedtensor", lambda tensor: False)


def _legacy_batched(*tensors) -> bool:
    return any(tensor is not None and _is_legacy_batched(tensor) for tensor in tensors)


def _torch_backward_operator(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision):
    geometry = _geometry_of(input, weight, None, stride, padding, output_padding, groups, dilation)
    grads = _torch_backward(grad_output, input, weight, geometry, stride, padding, output_padding, groups, dilation, output_mask)
    return tuple(grad if grad is not None else grad_output.new_empty(0) for grad in grads)


# Two pairs of autograd.Functions run the implementations.  _Function and
# _BackwardFunction, forward(ctx, ...) as on every torch since 1.x: torch <
# 2.4's operator and the eager path's where a gradient is wanted.  Their
# _Transform twins, with setup_context, batching rules (vmap) and
# forward-mode formulas (jvp; _transforms has both): every call under
# torch.func transforms or forward-mode AD, on any torch.  torch.func takes
# only an autograd.Function with setup_context, which the custom op's
# generated one lacks (pytorch/pytorch#168393), and the custom op has no
# forward-mode formula.  The plain pair stays for its cost: an apply() with
# setup_context binds its arguments through inspect.signature every call
# (on the CPU here with torch 2.13, 114 us a call around the same 25-us
# implementation, against the plain pair's 42).


def _save_forward(ctx, input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
    ctx.save_for_backward(input, weight)
    ctx.arguments = (stride, padding, output_padding, groups, dilation)
    ctx.precision = precision
    ctx.has_bias = bias is not None


def _forward_gradients(ctx, grad_output, backward_function):
    """The forward operator's gradients: through the transform pair under
    torch.func (vmap over torch.autograd.grad reaches a plain node's backward
    too); differentiable, through backward_function's node, where grad mode
    is on (create_graph=True)."""
    input, weight = ctx.saved_tensors
    mask = _output_mask(ctx, ctx.has_bias)
    arguments = (grad_output, input, weight, *ctx.arguments, mask, ctx.precision)
    if _legacy_batched(grad_output):
        grads = _torch_backward_operator(*arguments)
    elif _transformed():
        grads = _TransformBackwardFunction.apply(*arguments)
    elif torch.is_grad_enabled():
        grads = backward_function.apply(*arguments)
    else:
        grads = _backward_impl(*arguments)
    return _gradients(grads, mask, 9)


def _save_backward(ctx, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision):
    ctx.save_for_backward(grad_output, input, weight)
    ctx.arguments = (stride, padding, output_padding, groups, dilation)
    ctx.output_mask = tuple(bool(m) for m in output_mask)
    ctx.precision = precision
    ctx.set_materialize_grads(False)  # None for an output no gradient reached: its terms are skipped


def _backward_gradients(ctx, grad_grads, forward_function, backward_function):
    """The backward operator's gradients (double backward)."""
    grad_output, input, weight = ctx.saved_tensors
    if _legacy_batched(*grad_grads):
        operators = (_torch_forward, _torch_backward_operator)
    elif _transformed():
        operators = (_TransformFunction.apply, _TransformBackwardFunction.apply)
    else:
        operators = (forward_function.apply, backward_function.apply)
    grads = _second_order(
        ctx.needs_input_grad[:3], grad_output, input, weight, ctx.arguments, ctx.output_mask, ctx.precision,
        grad_grads, *operators,
    )  # fmt: skip
    return grads + (None,) * 7


class _Function(torch.autograd.Function):
    """The forward operator as an autograd.Function."""

    @staticmethod
    def forward(ctx, input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
        _save_forward(ctx, input, weight, bias, stride, padding, output_padding, groups, dilation, precision)
        return _forward_impl(input, weight, bias, stride, padding, output_padding, groups, dilation, precision)

    @staticmethod
    def backward(ctx, grad_output):
        return _forward_gradients(ctx, grad_output, _BackwardFunction)


class _BackwardFunction(torch.autograd.Function):
    """The backward operator as an autograd.Function, differentiable (double
    backward) as the custom op is."""

    @staticmethod
    def forward(ctx, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision):
        _save_backward(ctx, grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision)
        return _backward_impl(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision)

    @staticmethod
    def backward(ctx, grad_input_grad, grad_weight_grad, grad_bias_grad):
        return _backward_gradients(ctx, (grad_input_grad, grad_weight_grad, grad_bias_grad), _Function, _BackwardFunction)


class _TransformFunction(torch.autograd.Function):
    """_Function for torch.func transforms and forward-mode AD."""

    @staticmethod
    def forward(input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
        return _forward_impl(input, weight, bias, stride, padding, output_padding, groups, dilation, precision)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save_forward(ctx, *inputs)
        ctx.save_for_forward(inputs[0], inputs[1])
        ctx.shape = output.shape
        ctx.set_materialize_grads(False)  # None for a tangent that is zero: its term is skipped

    @staticmethod
    def backward(ctx, grad_output):
        if grad_output is None:  # grads are not materialized (see setup_context)
            return (None,) * 9
        return _forward_gradients(ctx, grad_output, _TransformBackwardFunction)

    @staticmethod
    def jvp(ctx, input_tangent, weight_tangent, bias_tangent, *_):
        input, weight = ctx.saved_tensors
        return _transforms.forward_tangent(
            _rule_forward, input, weight, input_tangent, weight_tangent, bias_tangent,
            ctx.arguments, ctx.precision, ctx.shape,
        )  # fmt: skip

    @staticmethod
    def vmap(info, in_dims, *arguments):
        return _transforms.forward_rule(_rule_forward, info.batch_size, in_dims, *arguments)


class _TransformBackwardFunction(torch.autograd.Function):
    """_BackwardFunction for torch.func transforms and forward-mode AD."""

    @staticmethod
    def forward(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision):
        return _backward_impl(grad_output, input, weight, stride, padding, output_padding, groups, dilation, output_mask, precision)

    @staticmethod
    def setup_context(ctx, inputs, outputs):
        _save_backward(ctx, *inputs)
        ctx.save_for_forward(*inputs[:3])
        ctx.shapes = tuple(output.shape for output in outputs)

    @staticmethod
    def backward(ctx, grad_input_grad, grad_weight_grad, grad_bias_grad):
        grad_grads = (grad_input_grad, grad_weight_grad, grad_bias_grad)
        return _backward_gradients(ctx, grad_grads, _TransformFunction, _TransformBackwardFunction)

    @staticmethod
    def jvp(ctx, grad_output_tangent, input_tangent, weight_tangent, *_):
        grad_output, input, weight = ctx.saved_tensors
        return _transforms.backward_tangents(
            _rule_backward, grad_output, input, weight, grad_output_tangent, input_tangent,
            weight_tangent, ctx.arguments, ctx.output_mask, ctx.precision, ctx.shapes,
        )  # fmt: skip

    @staticmethod
    def vmap(info, in_dims, *arguments):
        return _transforms.backward_rule(_rule_backward, info.batch_size, in_dims, *arguments)


# --------------------------------------------------------------------------
# Autocast, as torch applies it to its own conv_transpose ("lower precision"
# list): floating tensors other than float64 are cast to the autocast dtype.


def _autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        if device_type in ("cuda", "cpu") and torch.is_autocast_enabled(device_type):
            return torch.get_autocast_dtype(device_type)
        return None
    if device_type == "cuda" and torch.is_autocast_enabled():
        return torch.get_autocast_gpu_dtype()
    if device_type == "cpu" and torch.is_autocast_cpu_enabled():
        return torch.get_autocast_cpu_dtype()
    return None


def _autocast(tensors, device_type: str):
    dtype = _autocast_dtype(device_type)
    if dtype is None:
        return tensors
    return tuple(
        t.to(dtype) if t is not None and t.is_floating_point() and t.dtype != torch.float64 and t.device.type == device_type else t
        for t in tensors
    )


# --------------------------------------------------------------------------
# The eager path.  Through the operator, a call pays for torch's dispatch of
# a torch.library.custom_op (its Python autograd kernel, the redispatch, the
# alias check: 58 of a no-grad call's 80 us on the CPU here with torch 2.13,
# most of the difference to torch's own 9 us; pytorch/pytorch#176592), which
# plain eager calls do not need.  There the public functions run the
# implementation directly where no gradient is wanted, and through _Function
# (an autograd node of autograd's own, torch < 2.4's operator) where one is.
# The operator is for what needs it: torch.compile and export, jit tracing,
# tensor subclasses (fake and functional tensors among them), dispatch and
# function modes, and the profiler (whose traces then show the operator).
# torch.func transforms and forward-mode AD take _TransformFunction, which
# has their rules (the custom op has none that torch.func.grad can use).
# False: the operator wherever it can serve.
EAGER_FAST_PATH = True
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)

ROUTES = ("eager", "custom_op", "function")


@contextlib.contextmanager
def operator_route(route: str):
    """Calls in the block take one route (tests): "eager", the default (the
    operator where it is needed, plain eager calls past it); "custom_op", the
    operator wherever it can serve; "function", the autograd.Function of
    torch < 2.4.  Process-wide, as the flags it sets."""
    global _use_custom_op, EAGER_FAST_PATH
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    if route != "function" and not HAS_CUSTOM_OP:
        raise ValueError(f"route {route!r} needs torch.library.custom_op (torch >= 2.4)")
    saved = _use_custom_op, EAGER_FAST_PATH
    _use_custom_op, EAGER_FAST_PATH = route != "function", route != "custom_op"
    try:
        yield
    finally:
        _use_custom_op, EAGER_FAST_PATH = saved


def _needs_operator(input, weight, bias) -> bool:
    """Whether a call must take the custom op: a tensor subclass, compiling
    or exporting, jit tracing, a dispatch or function mode."""
    if type(input) not in _PLAIN_TYPES or type(weight) not in _PLAIN_TYPES or (bias is not None and type(bias) not in _PLAIN_TYPES):
        return True
    return bool(
        torch.compiler.is_compiling() or torch.jit.is_tracing()
        or torch._C._len_torch_dispatch_stack() or torch._C._len_torch_function_stack()
    )  # fmt: skip


def _transformed() -> bool:
    """Whether torch.func transforms (vmap, grad, jvp, ...) or forward-mode
    AD (dual tensors) are active."""
    return torch._C._are_functorch_transforms_active() or torch.autograd.forward_ad._current_level >= 0


def _wants_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(tensor is not None and tensor.requires_grad for tensor in tensors)


def _rule_forward(input, weight, bias, *arguments):
    """The forward pass as the transforms' rules call it, one level down:
    through _TransformFunction where transforms are still active, _Function
    where a gradient is wanted, else the implementation."""
    if _transformed():
        return _TransformFunction.apply(input, weight, bias, *arguments)
    if _wants_grad(input, weight, bias):
        return _Function.apply(input, weight, bias, *arguments)
    return _forward_impl(input, weight, bias, *arguments)


def _rule_backward(grad_output, input, weight, *arguments):
    """The backward pass as _rule_forward."""
    if _transformed():
        return _TransformBackwardFunction.apply(grad_output, input, weight, *arguments)
    if _wants_grad(grad_output, input, weight):
        return _BackwardFunction.apply(grad_output, input, weight, *arguments)
    return _backward_impl(grad_output, input, weight, *arguments)


def _conv_transpose(function, dims, input, weight, bias, stride, padding, output_padding, groups, dilation):
    _check_tensor(function, "input", input)
    _check_tensor(function, "weight", weight)
    _check_tensor(function, "bias", bias, optional=True)
    stride = _int_list(function, "stride", stride, dims)
    padding = _int_list(function, "padding", padding, dims)
    output_padding = _int_list(function, "output_padding", output_padding, dims)
    dilation = _int_list(function, "dilation", dilation, dims)
    groups = _int(function, "groups", groups)
    input, weight, bias = _autocast((input, weight, bias), input.device.type)
    tf32 = input.dtype == torch.float32 and input.is_cuda and torch.backends.cudnn.allow_tf32
    precision = "tf32" if tf32 else "highest"
    arguments = (input, weight, bias, stride, padding, output_padding, groups, dilation, precision)
    transformed = _transformed()
    if _use_custom_op and (
        _needs_operator(input, weight, bias)
        or not (transformed or (EAGER_FAST_PATH and not torch.autograd.profiler._is_profiler_enabled))
    ):
        return torch.ops.cupyconv.conv_transpose(*arguments)
    if transformed:
        return _TransformFunction.apply(*arguments)
    if _wants_grad(input, weight, bias):
        return _Function.apply(*arguments)
    return _forward_impl(*arguments)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose1d`` on cupyconv's kernels: input
    (N, C_in, L) or (C_in, L), weight (C_in, C_out // groups, K), bias (C_out,)."""
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose2d`` on cupyconv's kernels: input
    (N, C_in, H, W) or (C_in, H, W), weight (C_in, C_out // groups, KH, KW)."""
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups, dilation)
