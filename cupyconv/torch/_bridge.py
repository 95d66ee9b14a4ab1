"""torch tensors in, cupyconv's CUDA kernels, torch tensors out.

Zero-copy through DLPack: the inputs and the outputs (plain torch tensors,
allocated here) are seen by the kernels as CuPy views.  While cupyconv runs,
CuPy's current device is the tensors' device, its current stream is torch's
current stream on that device (so no work ever lands on another stream
behind torch's back, and the DLPack exchanges need no synchronisation), and
its allocator, for the kernels' workspaces, is torch's caching allocator (so
all memory is torch's, counted and reused by torch, none held in a second
pool).

bfloat16 crosses DLPack as int16 bits, viewed as bfloat16 on the CuPy side:
that works whatever DLPack dtype support the installed CuPy has.
"""

import contextlib
import functools

import cupy
import ml_dtypes
import numpy
import torch
import torch.utils.dlpack

from .. import _cuda, _remember

_BFLOAT16 = numpy.dtype(ml_dtypes.bfloat16)


class _StreamHandle:
    """A bare cudaStream_t speaking the CUDA stream protocol."""

    def __init__(self, pointer: int):
        self.pointer = pointer

    def __cuda_stream__(self):
        return (0, self.pointer)


@functools.lru_cache(maxsize=64)
def _cupy_stream(pointer: int, device_index: int):
    """CuPy's handle on one torch stream (by its cudaStream_t); made while
    CuPy's current device is the stream's device."""
    if hasattr(cupy.cuda.Stream, "from_external"):  # CuPy >= 14 (ExternalStream is deprecated there)
        return cupy.cuda.Stream.from_external(_StreamHandle(pointer))
    return cupy.cuda.ExternalStream(pointer, device_index)


def _scratch(device: torch.device, size: int) -> torch.Tensor:
    """`size` bytes of workspace from torch's caching allocator, on torch's
    current stream."""
    return torch.empty(size, dtype=torch.uint8, device=device)


def _torch_malloc(device: torch.device, size: int):
    """A CuPy allocator drawing from torch's caching allocator: a uint8 tensor,
    kept alive by the CuPy memory that wraps it.  A call being recorded
    (_cuda's remembered calls) is told of it, as CuPy's pool would tell it."""
    block = _scratch(device, size)
    _cuda.note_allocation(block.data_ptr(), size)
    memory = cupy.cuda.UnownedMemory(block.data_ptr(), size, block, device_id=device.index)
    return cupy.cuda.MemoryPointer(memory, 0)


@functools.lru_cache(maxsize=64)
def _allocator(device_index: int):
    return functools.partial(_torch_malloc, torch.device("cuda", device_index))


# torch's raw current-stream getter (what Triton launches on) skips the
# torch.cuda.Stream object that torch.cuda.current_stream builds on every call.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(device_index: int) -> int:
    """torch's current cudaStream_t on the device."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream  # pragma: no cover - a torch without it


@contextlib.contextmanager
def _on_torch_stream(device: torch.device):
    index = device.index
    with cupy.cuda.Device(index), _cupy_stream(_current_stream(index), index), cupy.cuda.using_allocator(_allocator(index)):
        yield


def to_cupy(tensor: torch.Tensor):
    # Autograd is torch's business, outside this call: export the data alone.
    # contiguous() is a no-op unless strided (an expanded grad_output, say).
    tensor = tensor.detach().contiguous()
    bfloat16 = tensor.dtype == torch.bfloat16
    if bfloat16:
        tensor = tensor.view(torch.int16)
    # torch.utils.dlpack.to_dlpack: the capsule without a stream exchange (both
    # sides are on the same stream, so none is needed) and without the checks
    # of Tensor.__dlpack__'s Python layer (about 2 us a tensor).
    array = cupy.from_dlpack(torch.utils.dlpack.to_dlpack(tensor))
    return array.view(_BFLOAT16) if bfloat16 else array


def _empty(shape, like: torch.Tensor) -> torch.Tensor:
    """An output tensor (on torch's current stream)."""
    return torch.empty(shape, dtype=like.dtype, device=like.device)


# Remembered calls, as in cupyconv's own (settings.use_remembered_forward): a
# call with contiguous tensors whose launches are remembered runs them on
# the tensors' addresses, on torch's current stream, into tensors (and
# workspaces) from torch's allocator, with no DLPack exchange and no change of
# CuPy's device, stream or allocator (most of a call's host time otherwise,
# perf notes v52).  Keys: (geometry, dtype, device index, precision, and
# whether a bias is given or the output mask); the geometry is the one
# _geometry.geometry_of made for the call's shapes and arguments.  Forward:
# a small pass that runs as one launch is taken from its first call (a
# _FastForward); every other route, forward and backward, that _cuda can
# record is recorded on a signature's second call, checked bit for bit on its
# third and replayed from its fourth (a cupyconv._remember._Replay).  Both
# launch through launch_raw.
_FAST_FORWARD: dict = {}
_FAST_BACKWARD: dict = {}


def _contiguous(a, b, c) -> bool:
    return a.is_contiguous() and b.is_contiguous() and (c is None or c.is_contiguous())


def _replayed(remembered, inputs, outputs, device: torch.device) -> bool:
    """Whether the remembered call ran on the tensors' addresses (its
    workspaces from torch's allocator, kept until the launches are queued)."""
    workspaces = []

    def allocate(size: int) -> int:
        workspaces.append(_scratch(device, size))
        return workspaces[-1].data_ptr()

    return remembered.launch_raw(inputs, outputs, allocate, _current_stream(device.index))


def forward(input, weight, bias, geometry, precision: str) -> torch.Tensor:
    # The output is an ordinary torch tensor that the kernels write into.
    output = _empty(geometry.output_shape, input)
    key = (geometry, input.dtype, input.get_device(), precision, bias is None)
    contiguous = _contiguous(input, weight, bias)
    remembered = _FAST_FORWARD.get(key)
    if remembered is not None and contiguous:
        inputs = (input.data_ptr(), weight.data_ptr(), 0 if bias is None else bias.data_ptr())
        if _replayed(remembered, inputs, (output.data_ptr(),), input.device):
            return output
    remember = None
    if contiguous:

        def remember(fast):  # (a full table forgets its signatures' counts too: they are recorded again)
            _remember._keep(_FAST_FORWARD, key, fast)

    with _on_torch_stream(input.device):
        x, w = to_cupy(input), to_cupy(weight)
        b = None if bias is None else to_cupy(bias)
        _cuda.forward(
            x, w, b, geometry, precision, out=to_cupy(output), remember_small=remember,
            fast_key=key if contiguous else None, remember_into=_FAST_FORWARD,
        )  # fmt: skip
        return output


def backward(grad_output, input, weight, geometry, output_mask, precision: str):
    want_input, want_weight, want_bias = output_mask
    grads = (
        _empty(input.shape, input) if want_input else None,
        _empty(weight.shape, input) if want_weight else None,
        _empty((geometry.out_channels,), input) if want_bias else None,
    )
    key = (geometry, input.dtype, input.get_device(), precision, output_mask)
    contiguous = _contiguous(grad_output, input, weight)
    replay = _FAST_BACKWARD.get(key)
    if replay is not None and contiguous:
        inputs = (grad_output.data_ptr(), input.data_ptr(), weight.data_ptr())
        if _replayed(replay, inputs, tuple(0 if g is None else g.data_ptr() for g in grads), input.device):
            return grads
    with _on_torch_stream(input.device):
        # input and weight both, whichever gradients are wanted: the routes
        # that make both in one pass (depthwise_backward, grouped_backward)
        # read the sizes of both and the weight for grad_weight alone
        gy, x, w = to_cupy(grad_output), to_cupy(input), to_cupy(weight)
        out = tuple(None if g is None else to_cupy(g) for g in grads)
        _cuda.backward(gy, x, w, geometry, output_mask, precision, out=out, fast_key=key if contiguous else None, remember_into=_FAST_BACKWARD)
        return grads
