"""Remembered calls: a call's launches recorded once checked and replayed on
later calls of the same signature, so that a call costs little more host
time than its launches.  This module owns the tables of remembered calls;
cupyconv._api looks a call up in them before any checks."""

from __future__ import annotations

import math
from typing import NamedTuple

import cupy
import numpy

from . import _autotune, settings
from ._launch import _CONSTANT_POINTERS, _RECORDING, _PackedArguments, _tuned

_S = settings.current
_SETTINGS = settings._STATE  # ["version"]: moves on with every change of the settings
ndarray = cupy.ndarray  # what _api takes for a GPU array
FAST_FORWARD: dict = {}  # _api._fast_key -> _FastForward or _Replay
FAST_BACKWARD: dict = {}  # _api._fast_backward_key -> _Replay

_launch_kernel = cupy.cuda.driver.launchKernel
_get_device = cupy.cuda.runtime.getDevice
_ndarray = cupy.ndarray
_alloc = cupy.cuda.alloc
_get_current_stream = cupy.cuda.get_current_stream
_get_allocator = cupy.cuda.get_allocator


class _Bound(NamedTuple):
    """A launch with everything but the call's arrays in place."""

    name: str
    function: object
    grid: tuple
    block: tuple
    tail: tuple  # the phase table, then the scalars
    shared: int
    plan: object = None  # the Plan it launches (observe_plans)


class _FastForward:
    """A small forward launch that takes only the call's pointers
    (FAST_FORWARD): its arguments packed once (_PackedArguments), the
    call takes its output (the spare, or a new array) and launches.  It
    returns None, and the caller takes the checked path, where the current
    device is not the arrays', a setting of this module or _kernels has
    changed since (_SETTINGS: the plan read _S().float32_highest,
    _S().tf32x3_min_products and the size limits), or autotuning is on."""

    def __init__(self, bound: _Bound, shape: tuple, dtype, device: int):
        self.packed = _PackedArguments(bound.function, bound.grid[0], bound.block[0], bound.shared, 4, bound.tail)
        self.shape, self.dtype, self.device, self.settings = shape, dtype, device, _SETTINGS["version"]
        self.keep_spare = math.prod(shape) * numpy.dtype(dtype).itemsize <= _S().spare_output_max_bytes and not self.packed.maps
        self.spare = None  # (the next output, the stream and the allocator it was made under)

    def usable(self) -> bool:
        return _get_device() == self.device and _SETTINGS["version"] == self.settings and not _autotune.enabled()

    def launch_pointers(self, x: int, weight: int, bias: int, y: int, stream: int) -> None:
        """The launch on raw addresses (bias 0 for none) on `stream`, for
        a caller that checked usable() and allocated y itself (the torch
        adapter, with torch's tensors and current stream)."""
        self.packed.launch_pointers((x, weight, bias, y), stream)

    def launch_raw(self, inputs, outputs, allocate, stream: int) -> bool:
        """_Replay.launch_raw's form of launch_pointers (a small launch takes
        no workspace)."""
        if not self.usable():
            return False
        self.packed.launch_pointers(tuple(inputs) + tuple(outputs), stream)
        return True

    def __call__(self, x, weight, bias):
        if _get_device() != self.device or _SETTINGS["version"] != self.settings or _autotune.enabled():  # (usable(), inline)
            return None
        if not self.keep_spare:
            y = _ndarray(self.shape, self.dtype)
            self.packed.launch((x, weight, bias, y))
            return y
        packed, stream, allocator = self.packed, _get_current_stream().ptr, _get_allocator()
        with packed.lock:
            spare, self.spare = self.spare, None
            y = spare[0] if spare is not None and spare[1] == stream and spare[2] is allocator else _ndarray(self.shape, self.dtype)
            # launch_pointers' two steps, inline: a spare-keeping launch has no
            # tensor maps, and the stream is already at hand
            packed.fill(packed.values, 0, x.data.ptr, weight.data.ptr, 0 if bias is None else bias.data.ptr, y.data.ptr)
            _launch_kernel(packed.pointer, packed.grid, 1, 1, packed.block, 1, 1, packed.shared, stream, packed.params_pointer, 0)
        self.spare = (_ndarray(self.shape, self.dtype), stream, allocator)
        return y


def _remember_fast(key, bound: _Bound, y) -> None:
    """Puts a small forward launch into FAST_FORWARD under the call's
    key (None: the call does not qualify)."""
    if key is None or _RECORDING.observers:
        return
    if len(FAST_FORWARD) >= 1024:
        FAST_FORWARD.clear()
    FAST_FORWARD[key] = _FastForward(bound, y.shape, y.dtype, y.data.device_id)


_REMEMBER_SEEN: dict = {}  # key -> checked calls so far (1: record the next, 2: check the recording)


_REMEMBER_CANDIDATES: dict = {}  # key -> the recording to check


class _Recorder(cupy.cuda.MemoryHook):
    """Collects the launches (_launch) and the memory-pool allocations of one
    call on this thread."""

    name = "cupyconv_recorder"

    def __init__(self):
        self.launches, self.allocations = [], []
        self.plans = []  # (problem, plan) of every pass the call runs (as observe_plans sees them)

    def malloc_postprocess(self, **kwargs):  # (pointer, size, launches made before it)
        self.allocations.append((kwargs["mem_ptr"], kwargs["size"], len(self.launches)))

    def __enter__(self):
        entered = super().__enter__()  # (first: where it raises, nothing of this thread's is left installed)
        _RECORDING.recorder = self
        _RECORDING.plan_observers = _RECORDING.plan_observers + (self.plans,)
        return entered

    def __exit__(self, *args):
        _RECORDING.recorder = None
        _RECORDING.plan_observers = tuple(o for o in _RECORDING.plan_observers if o is not self.plans)
        return super().__exit__(*args)


def note_allocation(pointer: int, size: int) -> None:
    """Tells the call being recorded on this thread, if any, of memory that
    an allocator other than CuPy's pool handed out (the torch adapter's: CuPy's
    memory hooks see the pool's alone), so that its launches can be replayed."""
    recorder = _RECORDING.recorder
    if recorder is not None:
        recorder.allocations.append((pointer, size, len(recorder.launches)))


def _alignment(arrays) -> tuple:
    """Where the arrays sit within 256 bytes (routes read inputs with
    16-byte loads where they are aligned so)."""
    return tuple(None if a is None else a.data.ptr % 256 for a in arrays)


class _Replay:
    """A recorded call (see _S().use_remembered_forward): `steps` are
    (_PackedArguments, slots) with a slot per array argument: None (a null
    pointer), ("i", input, byte offset), ("o", output, byte offset), ("t",
    temporary, byte offset) or ("c", pointer).  `outputs`: (shape, dtype) of
    each output, None where the call returned None.  Called with the inputs
    (forward: x, weight, bias; backward: grad_output, x, weight), it returns
    the outputs (forward: the one), or None where the current device, a
    setting (_SETTINGS), autotuning (on or off) or the inputs' alignment is
    not as recorded."""

    def __init__(
        self, key, table: dict, steps, temporaries, outputs, device: int, constants, settings: int, alignment, autotune: bool = False, plans=()
    ):
        self.key, self.table, self.steps, self.temporaries, self.outputs = key, table, steps, temporaries, outputs
        self.plans = tuple(plans)  # (problem, plan) of each pass recorded: what the launches were made from
        self.device, self.constants, self.settings, self.alignment = device, constants, settings, alignment  # constants: kept alive
        self.autotune = autotune  # recorded with autotuning on: the tuned tiles' launches
        # each output and temporary is allocated just before the first launch
        # that takes it (the GPU starts on the first launch while the host
        # makes the rest); the outputs no launch takes, after the last
        made, self.fresh = set(), []
        for _, slots in steps:
            fresh = tuple(dict.fromkeys((slot[0], slot[1]) for slot in slots if slot is not None and slot[0] in "ot" and (slot[0], slot[1]) not in made))
            made.update(fresh)
            self.fresh.append(fresh)
        self.rest = tuple(("o", k) for k, o in enumerate(outputs) if o is not None and ("o", k) not in made)
        # what __call__ runs, with every lookup it can do once done here: a
        # call's pointers sit in one list (the inputs, then the outputs, the
        # temporaries, and a 0), and each launch's are (index, byte offset)
        # pairs into it (a constant: the 0 plus its address)
        inputs = len(self.alignment)
        index = {("o", k): inputs + k for k in range(len(outputs))}
        index.update({("t", k): inputs + len(outputs) + k for k in range(len(temporaries))})
        zero = inputs + len(outputs) + len(temporaries)
        self.blank = [0] * (zero + 1)

        def reference(slot):
            if slot is None:
                return zero, 0
            if slot[0] == "c":
                return zero, slot[1]
            return (slot[1] if slot[0] == "i" else index[slot[0], slot[1]]), slot[2]

        def making(fresh):
            return tuple((kind == "o", k, index[kind, k], outputs[k] if kind == "o" else temporaries[k]) for kind, k in fresh)

        self.plan = tuple((packed, making(fresh), tuple(reference(slot) for slot in slots)) for (packed, slots), fresh in zip(steps, self.fresh))
        self.after = making(self.rest)
        # launch_raw's temporaries: one block, each at a 512-byte boundary (as
        # CuPy's pool and torch's allocator place allocations)
        offsets, end = [], 0
        for size in temporaries:
            offsets.append(end)
            end += -(-max(size, 1) // 512) * 512
        self.raw_temporaries = (inputs + len(outputs), tuple(offsets), end)  # (the first's index in a call's pointers, offsets, bytes)

    def run(self, inputs, poison: bool = False):
        """The launches on `inputs` (no checks); with `poison`, each output
        and temporary is filled with 0xFF bytes first (NaN in every float
        type), so what no launch writes shows."""
        pointers = self.blank[:]
        for k, a in enumerate(inputs):
            if a is not None:
                pointers[k] = a.data.ptr
        return self._launch(pointers, poison)

    def _launch(self, pointers: list, poison: bool = False) -> list:
        """Each launch of the plan on `pointers` (the inputs' filled in), its
        outputs and temporaries made just before it; the outputs."""
        outputs = [None] * len(self.outputs)
        temporaries = [None] * len(self.temporaries)  # pool memory, kept until the launches that take it are queued
        for packed, making, references in self.plan:
            for output, k, at, what in making:
                if output:  # (cupy.empty took 3-7 us more a call than cupy.ndarray on the H100 machines' hosts, perf notes v45)
                    a = outputs[k] = _ndarray(*what)
                    memory, size = a.data, a.nbytes
                else:  # a temporary is pool memory alone (cheaper to make than an array)
                    memory = temporaries[k] = _alloc(what)
                    size = what
                if poison and size:
                    memory.memset_async(255, size)
                pointers[at] = memory.ptr
            packed.launch_pointers([pointers[at] + offset for at, offset in references])
        for _, k, _, what in self.after:  # outputs no launch takes
            a = outputs[k] = _ndarray(*what)
            if poison and a.nbytes:
                a.data.memset_async(255, a.nbytes)
        return outputs

    def launch_raw(self, inputs, outputs, allocate, stream: int) -> bool:
        """The launches on raw addresses, for a caller with no CuPy arrays
        (the torch adapter): `inputs` (0 for None), `outputs` (the caller's
        memory, 0 where the recorded call returned None), the temporaries in
        one block from `allocate(size)` (its address; the caller keeps the
        memory until the launches are queued), on `stream`.  False, with
        nothing launched, where __call__ would return None or an output is
        not aligned as a whole allocation is."""
        if not self._current():
            return False
        pointers = self.blank[:]
        for k, (pointer, alignment) in enumerate(zip(inputs, self.alignment)):
            if (pointer == 0) != (alignment is None) or (pointer and pointer % 256 != alignment):
                return False
            pointers[k] = pointer
        for k, pointer in enumerate(outputs, start=len(self.alignment)):
            if pointer % 256:
                return False
            pointers[k] = pointer
        first, offsets, size = self.raw_temporaries
        if size:
            block = allocate(size)
            for k, offset in enumerate(offsets, start=first):
                pointers[k] = block + offset
        for packed, _, references in self.plan:
            packed.launch_pointers([pointers[at] + offset for at, offset in references], stream)
        return True

    def _current(self) -> bool:
        """Whether the recording runs here: made under the present settings
        and autotuning (else it is forgotten, to be recorded again) and for
        the current device."""
        if _SETTINGS["version"] != self.settings or _autotune.enabled() != self.autotune:
            self.table.pop(self.key, None)
            _REMEMBER_SEEN.pop(self.key, None)
            return False
        return _get_device() == self.device

    def describe(self) -> list:
        """What the replay runs: each recorded pass's problem and plan
        (Plan.describe's lines), as python -m cupyconv explain shows them."""
        lines = []
        for p, plan in self.plans:
            lines.append(p.describe())
            lines.append(f"  plan: {plan.family}" + ("" if plan.tile is None else f", tile {plan.tile}"))
            lines += [f"    {line}" for line in plan.describe()]
        return lines

    def __call__(self, *inputs):
        # run(inputs) with the checks of a remembered call, its pointers read
        # and their alignment checked in one pass (perf notes v46: the host's
        # time before the launch is GPU time in a timed call)
        if not self._current():
            return None
        pointers = self.blank[:]
        for k, (a, alignment) in enumerate(zip(inputs, self.alignment)):
            if a is None:
                if alignment is not None:
                    return None
            else:
                pointer = pointers[k] = a.data.ptr
                if pointer % 256 != alignment:
                    return None
        outputs = self._launch(pointers)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _replay_of(key, table: dict, recorder: _Recorder, inputs, outputs, settings: int, autotune: bool = False):
    """The recorded call as a _Replay, or None where it cannot be replayed
    (see _S().use_remembered_forward)."""
    if not recorder.launches:
        return None
    ranges = [(kind, k, a.data.ptr, a.nbytes) for kind, arrays in (("o", outputs), ("i", inputs)) for k, a in enumerate(arrays) if a is not None]

    def allocation(pointer, before):  # the newest allocation made before launch `before` that holds the pointer (the pool reuses freed blocks)
        return next(
            (i for i in reversed(range(len(recorder.allocations)))
             if recorder.allocations[i][2] <= before and recorder.allocations[i][0] <= pointer < recorder.allocations[i][0] + max(recorder.allocations[i][1], 1)),
            None,
        )  # fmt: skip

    for a in outputs:  # an output made in the call must be its whole allocation (the replay allocates it alone)
        if a is None:
            continue
        if not a.flags.c_contiguous:
            return None
        made = allocation(a.data.ptr, len(recorder.launches))
        if made is not None and recorder.allocations[made][:2] != (a.data.ptr, a.nbytes):
            return None
    steps, constants, temporaries, used = [], [], [], {}  # used: allocation index -> temporary index
    for launch, (packed, arrays) in enumerate(recorder.launches):
        slots = []
        for a in arrays:
            if a is None:
                slots.append(None)
                continue
            pointer = a.data.ptr
            slot = next(((kind, k, pointer - start) for kind, k, start, size in ranges if start <= pointer < start + max(size, 1)), None)
            if slot is None:
                found = allocation(pointer, launch)
                if found is not None:
                    if found not in used:
                        used[found] = len(temporaries)
                        temporaries.append(recorder.allocations[found][1])
                    slot = ("t", used[found], pointer - recorder.allocations[found][0])
            if slot is None and pointer in _CONSTANT_POINTERS:
                slot = ("c", pointer)
                constants.append(a)
            if slot is None:
                return None
            slots.append(slot)
        steps.append((packed, tuple(slots)))
    shapes = [None if a is None else (a.shape, a.dtype) for a in outputs]
    device = next(a.data.device_id for a in inputs if a is not None)
    return _Replay(key, table, steps, temporaries, shapes, device, constants, settings, _alignment(inputs), autotune, recorder.plans)


def remember(key, table: dict, run, inputs):
    """Runs `run()` (the checked path; it returns the call's outputs),
    recording it or checking a recording of `key` on the calls where that is
    due, into `table` (see _S().use_remembered_forward).  Returns the outputs.
    A call on a stream being captured into a CUDA graph (torch.cuda.graph,
    CuPy's begin_capture) only runs: checking a recording waits for the GPU,
    which a capture forbids, so the calls before and after it count."""
    if _get_current_stream().is_capturing():
        return run()
    seen = _REMEMBER_SEEN.get(key, 0)
    if len(_REMEMBER_SEEN) >= 1024:
        _REMEMBER_SEEN.clear()
        _REMEMBER_CANDIDATES.clear()
    _REMEMBER_SEEN[key] = seen + 1
    if seen == 1:
        settings, autotune, tuned = _SETTINGS["version"], _autotune.enabled(), len(_tuned)
        with _Recorder() as recorder:
            outputs = run()
        if len(_tuned) != tuned:  # the autotuner timed tiles in this call (turned on since the first): record the next
            _REMEMBER_SEEN[key] = 1
            return outputs
        replay = _replay_of(key, table, recorder, inputs, outputs, settings, autotune)
        if replay is not None:
            _REMEMBER_CANDIDATES[key] = replay
        return outputs
    outputs = run()
    replay = _REMEMBER_CANDIDATES.pop(key, None)
    if (
        seen == 2 and replay is not None and replay.settings == _SETTINGS["version"] and replay.autotune == _autotune.enabled()
        and replay.alignment == _alignment(inputs)
    ):  # fmt: skip
        again = replay.run(inputs, poison=True)
        same = all(
            (a is None) == (b is None) and (a is None or bool(cupy.array_equal(a.view(numpy.uint8), b.view(numpy.uint8))))
            for a, b in zip(again, outputs)
        )  # fmt: skip
        if same:
            _keep(table, key, replay)
    return outputs


def _keep(table: dict, key, replay) -> None:
    """Puts a checked recording into its table.  A full table (1024) is
    emptied first, and its keys' counts with it, so that those signatures
    are recorded again when they come back."""
    if len(table) >= 1024:
        for dropped in table:
            _REMEMBER_SEEN.pop(dropped, None)
        table.clear()
    table[key] = replay
