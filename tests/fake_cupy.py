"""A stand-in for CuPy on a machine with no GPU, for the routing snapshot.

``install(device)`` puts modules named ``cupy``, ``cupy.cuda`` and
``cupyx.profiler`` into ``sys.modules`` (before cupyconv is imported, in a
process of their own: tests/routing_snapshot.py runs it as a subprocess).
Their arrays have shapes, dtypes, strides and addresses but no storage; the
device is a description (compute capability, multiprocessors, shared
memory); compiling a kernel only notes a digest of its source and options;
launching one, copying or filling an array appends an event to ``EVENTS``.
What cupyconv decides for a call -- which kernels, grids, blocks, shared
memory, scalar arguments, and which arrays each launch reads and writes --
is therefore observable on the CPU, and comparable before and after a
change that should move none of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import sys
import types

import numpy

# What the routing reads of a device.  sm_80: an A100 (80 GB); sm_90: an H200.
DEVICES = {
    "sm_80": {"compute_capability": "80", "name": "NVIDIA A100-SXM4-80GB", "MultiProcessorCount": 108, "MaxSharedMemoryPerBlockOptin": 166912},
    "sm_90": {"compute_capability": "90", "name": "NVIDIA H200", "MultiProcessorCount": 132, "MaxSharedMemoryPerBlockOptin": 232448},
}

EVENTS: list = []  # ("launch" | "copy" | "fill" | "memset" | "alloc", details...)
_STATE = {"device": None, "next": 1 << 32, "allocations": 0}


class Unsupported(RuntimeError):
    """The code under observation asked for something this stand-in does not do."""


class _Memory:
    """One allocation: an address range with no storage."""

    def __init__(self, size: int, constant=None):
        self.size = size
        self.ptr = _STATE["next"]
        _STATE["next"] += -(-max(size, 1) // 512) * 512 + 512  # 512-byte aligned, like CuPy's pool
        _STATE["allocations"] += 1
        self.number = _STATE["allocations"]
        self.constant = constant  # the host data of cupy.asarray(numpy array)
        EVENTS.append(("alloc", self))


class MemoryPointer:
    def __init__(self, memory: _Memory, offset: int = 0):
        self.mem, self.offset = memory, offset
        self.ptr = memory.ptr + offset
        self.device_id = 0

    def memset_async(self, value, size):
        EVENTS.append(("memset", self.mem, self.offset, value, size))


class Device:
    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)
        self._description = _STATE["device"]

    @property
    def attributes(self):
        return {k: v for k, v in self._description.items() if k[0].isupper()}

    @property
    def compute_capability(self):
        return self._description["compute_capability"]

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def _contiguous_strides(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class _Flags:
    def __init__(self, array):
        self.c_contiguous = array.size <= 1 or array.strides == _contiguous_strides(array.shape, array.itemsize) or any(n == 0 for n in array.shape)


class ndarray:
    """A CuPy-like array with no storage (its type's name and module make
    cupyconv take it for a cupy.ndarray)."""

    def __init__(self, shape, dtype=numpy.float32, memptr=None, strides=None):
        self.shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        self.dtype = numpy.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.itemsize
        self.ndim = len(self.shape)
        self.data = memptr if memptr is not None else MemoryPointer(_Memory(self.nbytes))
        self.strides = tuple(strides) if strides is not None else _contiguous_strides(self.shape, self.itemsize)
        self.flags = _Flags(self)
        self.device = Device(0)

    def _view(self, shape, strides, dtype=None):
        return ndarray(shape, self.dtype if dtype is None else dtype, memptr=self.data, strides=strides)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape {self.shape} into {shape}")
        source = self if self.flags.c_contiguous else ascontiguousarray(self)
        return source._view(shape, _contiguous_strides(shape, self.itemsize))

    def transpose(self, axes):
        return self._view(tuple(self.shape[a] for a in axes), tuple(self.strides[a] for a in axes))

    def view(self, dtype):
        dtype = numpy.dtype(dtype)
        if not self.flags.c_contiguous:
            raise Unsupported("view of a non-contiguous array")
        shape = self.shape[:-1] + (self.shape[-1] * self.itemsize // dtype.itemsize,) if self.shape else ()
        return ndarray(shape, dtype, memptr=self.data)

    def astype(self, dtype, copy=True):
        out = ndarray(self.shape, dtype)
        EVENTS.append(("copy", self, out))
        return out

    def fill(self, value):
        EVENTS.append(("fill", self, value))

    def __setitem__(self, key, value):
        raise Unsupported("array assignment")

    def __getitem__(self, key):
        raise Unsupported("array indexing")


def empty(shape, dtype=numpy.float32):
    return ndarray(shape, dtype)


def zeros(shape, dtype=numpy.float32):
    out = ndarray(shape, dtype)
    EVENTS.append(("fill", out, 0))
    return out


def ascontiguousarray(a, dtype=None):
    if a.flags.c_contiguous and (dtype is None or numpy.dtype(dtype) == a.dtype):
        return a
    out = ndarray(a.shape, a.dtype if dtype is None else dtype)
    EVENTS.append(("copy", a, out))
    return out


def asarray(a, dtype=None):
    if isinstance(a, ndarray):
        return a if dtype is None or numpy.dtype(dtype) == a.dtype else a.astype(dtype)
    host = numpy.asarray(a, dtype=dtype)
    return ndarray(host.shape, host.dtype, memptr=MemoryPointer(_Memory(host.nbytes, constant=host.copy())))


def array_equal(a, b):
    raise Unsupported("array_equal (a remembered call's check): the snapshot runs with remembering off")


def memoize(for_each_device=False):
    def decorate(function):
        cache = {}

        def wrapper(*args):
            key = (Device().id, args) if for_each_device else args
            if key not in cache:
                cache[key] = function(*args)
            return cache[key]

        wrapper.__wrapped__ = function
        return wrapper

    return decorate


class _Function:
    def __init__(self, ptr):
        self.ptr = ptr


class RawKernel:
    """A compiled kernel: its name and the digest of its module's source and
    options (the same digest, the same compiled code)."""

    def __init__(self, name: str, code_digest: str):
        self.name, self.code = name, code_digest
        self.kernel = _Function(id(self))
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem=0, **kwargs):
        grid = grid if isinstance(grid, tuple) else (grid,)
        block = block if isinstance(block, tuple) else (block,)
        EVENTS.append(("launch", self, grid[0], block[0], shared_mem, tuple(args)))


class RawModule:
    def __init__(self, code=None, options=(), name_expressions=(), **kwargs):
        self.digest = hashlib.sha256((code + "\0" + "\0".join(options)).encode()).hexdigest()[:16]
        self.names = tuple(name_expressions)

    def get_function(self, name):
        if name not in self.names:
            raise Unsupported(f"{name} is not among the module's name expressions")
        return RawKernel(name, self.digest)


class MemoryHook:
    name = "hook"

    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


class Stream:
    ptr = 0

    def is_capturing(self):
        return False

    def synchronize(self):
        pass


_STREAM = Stream()
_ALLOCATOR = object()


def _not_here(what):
    def refuse(*args, **kwargs):
        raise Unsupported(f"{what}: the routing snapshot records launches through the launch seam, not the driver")

    return refuse


class _DriverFunction:
    """A driver entry point that succeeds (its argtypes and restype settable)."""

    def __call__(self, *args):
        return 0


def _fake_libcuda():
    """ctypes.CDLL("libcuda.so.1") gives stand-ins for the tensor-map calls."""
    import ctypes

    real = ctypes.CDLL

    class Driver:
        cuTensorMapEncodeTiled = _DriverFunction()
        cuTensorMapReplaceAddress = _DriverFunction()

    ctypes.CDLL = lambda name, *args, **kwargs: Driver() if name == "libcuda.so.1" else real(name, *args, **kwargs)


def install(device: str) -> types.ModuleType:
    """Puts the stand-in into sys.modules as `cupy` for the described device."""
    _STATE["device"] = DEVICES[device]
    ndarray.__module__ = "cupy"  # what cupyconv's argument checks look at
    cupy = types.ModuleType("cupy")
    for name in ("ndarray", "empty", "zeros", "ascontiguousarray", "asarray", "array_equal", "memoize", "RawKernel", "RawModule"):
        setattr(cupy, name, globals()[name])
    cupy.__version__ = "0-fake"
    cuda = types.ModuleType("cupy.cuda")
    cuda.Device, cuda.MemoryHook, cuda.MemoryPointer = Device, MemoryHook, MemoryPointer
    cuda.alloc = lambda size: MemoryPointer(_Memory(size))
    cuda.get_current_stream = lambda: _STREAM
    cuda.get_allocator = lambda: _ALLOCATOR
    runtime = types.ModuleType("cupy.cuda.runtime")
    runtime.getDevice = lambda: 0
    runtime.getDeviceProperties = lambda device: {"name": _STATE["device"]["name"].encode()}
    runtime.getDeviceCount = lambda: 1
    driver = types.ModuleType("cupy.cuda.driver")
    driver.launchKernel = lambda *args: None  # (launches are recorded at the launch seam)
    cuda.runtime, cuda.driver = runtime, driver
    cupy.cuda = cuda
    cupyx = types.ModuleType("cupyx")
    profiler = types.ModuleType("cupyx.profiler")
    profiler.benchmark = _not_here("cupyx.profiler.benchmark (autotuning)")
    cupyx.profiler = profiler
    _fake_libcuda()
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.runtime": runtime, "cupy.cuda.driver": driver, "cupyx": cupyx, "cupyx.profiler": profiler})
    return cupy


@contextlib.contextmanager
def recording():
    """EVENTS emptied before and after the block."""
    del EVENTS[:]
    try:
        yield EVENTS
    finally:
        del EVENTS[:]
