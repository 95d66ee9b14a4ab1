"""Launching kernels: compiling them (NVRTC through ``cupy.RawModule``, one
name expression per template instantiation, memoized per device; CuPy's
on-disk cache keeps the code across processes), the device facts plans are
made for, and running a launch on the current device and stream with its
arguments packed once.  The autotuner's timing of tile candidates is here
too: it times launches."""

from __future__ import annotations

import contextlib
import functools
import struct
import threading
from typing import NamedTuple

import cupy
import numpy

from . import settings
from .kernels import common

_S = settings.current  # the routing settings in force

try:  # CuPy's holder of a scalar kernel argument: a launch passes it as is
    from cupy._core._scalar import CScalar as _CScalar
except ImportError:  # pragma: no cover - a CuPy without it converts NumPy scalars itself, per launch
    _CScalar = None

_launch_kernel = cupy.cuda.driver.launchKernel


def _i32(value: int):
    """A kernel's int argument.  Plans build these once: a NumPy scalar would
    be converted to CuPy's CScalar on every launch, about 0.2 us each (a
    launch has up to 20 of them, and a tiny call little else)."""
    return _CScalar(numpy.int32(value)) if _CScalar is not None else numpy.int32(value)


def _i64(value: int):
    """A kernel's long long argument (see _i32)."""
    return _CScalar(numpy.int64(value)) if _CScalar is not None else numpy.int64(value)


@cupy.memoize(for_each_device=True)
def _function(filename: str, name: str):
    options = ("-std=c++17",)
    if filename in common.SM90A_FILES and _device_compute_capability() == 90:
        # wgmma needs the arch-specific target; NVRTC takes it over the plain
        # -arch=sm_90 CuPy appends.
        options += ("-arch=sm_90a",)
    module = cupy.RawModule(code=common.source(filename), options=options, name_expressions=(name,))
    return module.get_function(name)


@cupy.memoize(for_each_device=True)
def _device_multiprocessors() -> int:
    return cupy.cuda.Device().attributes["MultiProcessorCount"]


def _multiprocessors() -> int:
    """The multiprocessors to plan for (settings.multiprocessors, or the device's)."""
    return _S().multiprocessors or _device_multiprocessors()


def _index_type(*element_counts: int) -> str:
    """common.index_type, or the settings' index_type where one is forced."""
    return _S().index_type or common.index_type(*element_counts)


@cupy.memoize(for_each_device=True)
def _phase_table(flat):
    table = cupy.asarray(common.phase_table_array(flat))
    # The upload is ordered on the current stream only; the memoized table may
    # later be read from other streams, so wait for it once, here.
    cupy.cuda.get_current_stream().synchronize()
    _CONSTANT_POINTERS.add(table.data.ptr)  # never rewritten: a remembered call may keep it (_Recorder)
    return table


def _blocks_for(count: int) -> int:
    if count > common.INT32_LIMIT:
        raise ValueError(f"problem too large: {count} thread blocks exceed the grid limit")
    return count


class _Launch(NamedTuple):
    file: str
    name: str
    blocks: int
    threads: int
    scalars: tuple
    shared: int = 0  # dynamic shared memory, bytes


@cupy.memoize(for_each_device=True)
def _device_compute_capability() -> int:
    return int(cupy.cuda.Device().compute_capability)


def _compute_capability() -> int:
    """The compute capability to plan for (settings.compute_capability, or the device's)."""
    return _S().compute_capability or _device_compute_capability()


@cupy.memoize(for_each_device=True)
def _device_max_shared() -> int:
    return cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]


def _max_shared() -> int:
    """The dynamic shared memory a block may have, to plan for (settings.max_shared, or the device's)."""
    return _S().max_shared or _device_max_shared()


@cupy.memoize(for_each_device=True)
def _function_with_shared(filename: str, name: str):
    """_function's kernel, allowed the device's largest dynamic shared memory."""
    function = _function(filename, name)
    function.max_dynamic_shared_size_bytes = _device_max_shared()
    return function


def _kernel_function(plan: _Launch):
    """The compiled kernel of a plan (allowed the device's largest dynamic
    shared memory where the plan uses any)."""
    return _function_with_shared(plan.file, plan.name) if plan.shared else _function(plan.file, plan.name)


class _TensorMap(NamedTuple):
    """A kernel argument: the tiled TMA tensor map (CUtensorMap, 128 bytes) of
    the launch's array number `array` (the first by default), which the
    launch writes for that array's address.  dims and box innermost first;
    strides in bytes, of the outer dimensions; data_type, swizzle: the
    driver's CUtensorMapDataType and CUtensorMapSwizzle.  Elements outside
    the dims load as zeros."""

    dims: tuple
    strides: tuple
    box: tuple
    data_type: int = 1  # CU_TENSOR_MAP_DATA_TYPE_UINT16 (16-bit elements copied as bits)
    swizzle: int = 3  # CU_TENSOR_MAP_SWIZZLE_128B
    array: int = 0


@functools.lru_cache(maxsize=1)
def _libcuda():
    """The driver's cuTensorMapEncodeTiled and cuTensorMapReplaceAddress
    (CuPy does not wrap them), through ctypes."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    encode, replace = cuda.cuTensorMapEncodeTiled, cuda.cuTensorMapReplaceAddress
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    encode.restype = replace.restype = ctypes.c_int
    encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p] + [ctypes.c_int] * 4
    replace.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return ctypes, encode, replace


class _MapSlot:
    """A _TensorMap argument's 128 bytes, 64-byte aligned as the driver wants
    them, and the address they were last written for."""

    def __init__(self, spec: _TensorMap):
        self.spec = spec
        self.buffer = numpy.zeros(24, dtype=numpy.uint64)
        self.offset = (-self.buffer.ctypes.data) % 64 // 8
        self.address = self.buffer.ctypes.data + 8 * self.offset
        self.written = None  # the array address the map holds

    def write(self, pointer: int) -> None:
        ctypes, encode, replace = _libcuda()
        if self.written is None:
            spec, rank = self.spec, len(self.spec.dims)
            result = encode(
                self.address, spec.data_type, rank, pointer,
                (ctypes.c_uint64 * rank)(*spec.dims), (ctypes.c_uint64 * max(rank - 1, 1))(*spec.strides),
                (ctypes.c_uint32 * rank)(*spec.box), (ctypes.c_uint32 * rank)(*([1] * rank)),
                0, spec.swizzle, 2, 0,  # no interleave; the swizzle; L2 promotion of 128 bytes; zeros outside
            )  # fmt: skip
        else:
            result = replace(self.address, pointer)
        if result != 0:
            raise RuntimeError(f"cupyconv: the driver refused a tensor map ({self.spec}): CUresult {result}")
        self.written = pointer


class _PackedArguments:
    """A kernel launch whose arguments sit in one buffer made once: `pointers`
    slots that each launch writes (its arrays' addresses, 0 for None), then
    the fixed `tail` (arrays kept alive, scalars, and _TensorMaps, each
    rewritten when the address of the array it describes changes).  CuPy's kernel
    call builds one argument holder per argument on every launch (6 us for
    the 24 of conv_gemm's on the H100 host, CScalars included); launch()
    writes the pointers and hands the buffer to cuLaunchKernel
    (cupy.cuda.driver.launchKernel) on the current stream."""

    def __init__(self, function, grid: int, block: int, shared: int, pointers: int, tail: tuple):
        self.function = function.kernel  # the device's compiled Function (cupy.RawKernel.kernel), kept alive
        self.pointer = self.function.ptr
        self.grid, self.block, self.shared = grid, block, shared
        self.tail = tail
        self.maps = []  # (_MapSlot, the launch array it describes)
        # every argument in an 8-byte slot (little-endian: a 4-byte int in its
        # low half); the driver copies each at the kernel's parameter size
        self.values = numpy.zeros(pointers + len(tail), dtype=numpy.uint64)
        for slot, argument in enumerate(tail, start=pointers):
            if isinstance(argument, _TensorMap):
                self.maps.append((_MapSlot(argument), argument.array, slot))
            elif isinstance(argument, cupy.ndarray):
                self.values[slot] = argument.data.ptr
            else:
                value = numpy.asarray(argument.value if _CScalar is not None and isinstance(argument, _CScalar) else argument)
                if value.dtype.itemsize > 8 or value.dtype.kind not in "iuf":
                    raise TypeError(f"unexpected kernel argument {argument!r}")
                self.values[slot : slot + 1].view(value.dtype)[0] = value
        base = self.values.ctypes.data
        self.params = numpy.array([base + 8 * slot for slot in range(len(self.values))], dtype=numpy.uint64)
        for map_slot, _, slot in self.maps:
            self.params[slot] = map_slot.address
        self.maps = tuple((map_slot, array) for map_slot, array, _ in self.maps)
        self.params_pointer = self.params.ctypes.data
        self.fill = struct.Struct(f"<{pointers}Q").pack_into  # the pointer slots in one call (values is a writable buffer)
        self.lock = threading.Lock()  # one launch at a time writes the slots

    def launch(self, arrays) -> None:
        self.launch_pointers([0 if array is None else array.data.ptr for array in arrays])

    def launch_pointers(self, pointers, stream=None) -> None:
        """The launch on these addresses, on `stream` (a cudaStream_t;
        None: CuPy's current stream)."""
        with self.lock:
            self.fill(self.values, 0, *pointers)
            for map_slot, array in self.maps:
                if map_slot.written != pointers[array]:
                    map_slot.write(pointers[array])
            if stream is None:
                stream = cupy.cuda.get_current_stream().ptr
            _launch_kernel(self.pointer, self.grid, 1, 1, self.block, 1, 1, self.shared, stream, self.params_pointer, 0)


# (id(plan), device) -> (plan, its _PackedArguments): plans are remembered by
# the lru_caches that make them; the entry keeps its plan alive, and a plan
# made anew under a reused id is told apart by identity.
_PACKED: dict = {}


class _Recording(threading.local):
    recorder = None  # the _Recorder of this thread's call being recorded (forward or backward), if any
    observers = ()  # the callbacks of watch_launches() blocks open on this thread
    plan_observers = ()  # the lists of observe_plans() blocks open on this thread


_RECORDING = _Recording()


_CONSTANT_POINTERS: set = set()  # device arrays made once and never rewritten (the memoized phase tables)


def _launch(plan: _Launch, arrays: tuple) -> None:
    """Runs `plan` on the current device and stream, its arrays (None: a null
    pointer) ahead of its scalars."""
    key = (id(plan), cupy.cuda.runtime.getDevice())
    entry = _PACKED.get(key)
    if entry is None or entry[0] is not plan:
        if len(_PACKED) >= 4096:
            _PACKED.clear()
        entry = _PACKED[key] = (plan, _PackedArguments(_kernel_function(plan), plan.blocks, plan.threads, plan.shared, len(arrays), plan.scalars))
    entry[1].launch(arrays)
    recorder = _RECORDING.recorder
    if recorder is not None:
        recorder.launches.append((entry[1], arrays))
    for observe in _RECORDING.observers:
        observe(plan, arrays)


@contextlib.contextmanager
def observe_launches():
    """The names of the kernels this thread launches in the block, in order:
    the entry point for tests that check which family a call took.  Calls
    remembered before the block are forgotten (the settings version moves
    on) and none is remembered in it, so every call takes the checked path."""
    names = []
    with watch_launches(lambda plan, arrays: names.append(plan.name)):
        yield names


@contextlib.contextmanager
def observe_plans():
    """(problem, plan) for every pass this thread runs in the block, in order:
    which family served which pass, with which tile (tests).  Remembered
    calls are off in the block, as in observe_launches."""
    served = []
    _RECORDING.plan_observers = _RECORDING.plan_observers + (served,)
    try:
        with settings.override(use_remembered_forward=False, use_remembered_backward=False):
            yield served
    finally:
        _RECORDING.plan_observers = tuple(o for o in _RECORDING.plan_observers if o is not served)


@contextlib.contextmanager
def watch_launches(observe):
    """observe(plan, arrays) for every launch this thread makes in the block
    (the routing snapshot's hook; observe_launches' for tests), with
    remembered calls off as in observe_launches."""
    _RECORDING.observers = _RECORDING.observers + (observe,)
    try:
        with settings.override(use_remembered_forward=False, use_remembered_backward=False):
            yield
    finally:
        _RECORDING.observers = tuple(o for o in _RECORDING.observers if o is not observe)


@cupy.memoize(for_each_device=True)
def _device_signature() -> str:
    properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = properties["name"]
    return f"{name.decode() if isinstance(name, bytes) else name} sm_{_device_compute_capability()}"


def _gpu_seconds(run) -> float:
    """Median GPU time of run() on the current stream (cupyx.profiler.benchmark)."""
    from cupyx.profiler import benchmark

    result = benchmark(run, n_repeat=10, n_warmup=2, max_duration=2.0)
    return float(numpy.median(result.gpu_times[0]))


_tuned = {}  # (device, "families", key, settings) -> (family, tile): this process's tuned choices, so a tuned call costs one lookup


