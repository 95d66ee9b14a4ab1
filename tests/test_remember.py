"""Remembered calls (settings.use_remembered_forward, use_remembered_backward) without a GPU:
how a recording maps each launch's pointers onto the call's arrays, its
temporaries and the constants, when it refuses to remember, and the module
watch that forgets recordings when a setting changes.  tests/gpu/test_remembered.py
replays recordings of every routed kernel on the GPU."""

from __future__ import annotations

from types import SimpleNamespace

import numpy
import pytest

pytest.importorskip("cupy")

from cupyconv import _launch, _remember, settings


def _array(pointer, nbytes, shape=(1,), dtype=numpy.float32, contiguous=True):
    """What _replay_of reads of a CuPy array: its pointer, size, shape, dtype, layout and device."""
    flags = SimpleNamespace(c_contiguous=contiguous)
    return SimpleNamespace(data=SimpleNamespace(ptr=pointer, device_id=0), nbytes=nbytes, shape=shape, dtype=dtype, flags=flags)


def _recorder(launches, allocations):
    """A _Recorder's state: launches as (packed, arrays), allocations as
    (pointer, size, launches made before it)."""
    return SimpleNamespace(launches=launches, allocations=allocations, plans=[])


X, W, B, Y = _array(0x10000, 4096), _array(0x20000, 1024), _array(0x30000, 64), _array(0x40000, 65536, shape=(2, 8, 1024))


def test_replay_maps_every_pointer():
    """Arrays of the call become (name, byte offset), pool allocations
    temporaries (a view at its offset), memoized tables constants."""
    table = _array(0x90000, 256)
    _remember._CONSTANT_POINTERS.add(table.data.ptr)
    try:
        workspace = _array(0x50000, 8192)
        view = _array(0x50000 + 512, 1024)  # a view into the workspace
        first, second = object(), object()
        recorder = _recorder(
            [(first, (W, workspace)), (second, (_array(X.data.ptr + 256, 8), view, None, B, Y, table))],
            [(0x50000, 8192, 0)],
        )
        replay = _remember._replay_of("key", {}, recorder, (X, W, B), (Y,), settings=7)
    finally:
        _remember._CONSTANT_POINTERS.discard(table.data.ptr)
    assert replay is not None
    assert replay.steps == [
        (first, (("i", 1, 0), ("t", 0, 0))),
        (second, (("i", 0, 256), ("t", 0, 512), None, ("i", 2, 0), ("o", 0, 0), ("c", table.data.ptr))),
    ]
    assert replay.temporaries == [8192] and replay.constants == [table]
    assert (replay.outputs, replay.device, replay.settings) == ([(Y.shape, Y.dtype)], 0, 7)
    assert replay.alignment == (0, 0, 0)


def test_replay_follows_reused_blocks():
    """A pool block freed and handed out again within the call is two
    temporaries: each launch reads the allocation that was live when it ran."""
    small, large = _array(0x50000, 512), _array(0x50000, 4096)
    a, b, c = object(), object(), object()
    recorder = _recorder(
        [(a, (X, small)), (b, (small, Y)), (c, (large, Y))],
        [(0x50000, 512, 0), (0x50000, 4096, 2)],  # the second made after two launches
    )
    replay = _remember._replay_of("key", {}, recorder, (X, W, None), (Y,), settings=0)
    assert [slots for _, slots in replay.steps] == [(("i", 0, 0), ("t", 0, 0)), (("t", 0, 0), ("o", 0, 0)), (("t", 1, 0), ("o", 0, 0))]
    assert replay.temporaries == [512, 4096]
    assert replay.alignment == (0, 0, None)


def test_replay_of_a_backward_call():
    """Outputs made in the call (the gradients, None where masked) are
    outputs of the replay, not temporaries; a workspace stays a temporary."""
    gy, gi, gw = _array(0x60000, 65536), _array(0x70000, 4096, shape=(2, 4, 128)), _array(0x80000, 1024, shape=(4, 8, 8))
    workspace = _array(0x90000, 2048)
    a, b, c = object(), object(), object()
    recorder = _recorder(
        [(a, (gy, W, gi)), (b, (gy, X, workspace)), (c, (workspace, gw))],
        [(0x70000, 4096, 0), (0x90000, 2048, 1), (0x80000, 1024, 1)],
    )
    table = {}
    replay = _remember._replay_of("key", table, recorder, (gy, X, W), (gi, gw, None), settings=0)
    assert [slots for _, slots in replay.steps] == [
        (("i", 0, 0), ("i", 2, 0), ("o", 0, 0)),
        (("i", 0, 0), ("i", 1, 0), ("t", 0, 0)),
        (("t", 0, 0), ("o", 1, 0)),
    ]
    assert replay.temporaries == [2048] and replay.table is table
    assert replay.outputs == [(gi.shape, gi.dtype), (gw.shape, gw.dtype), None]
    # each made just before the first launch that takes it, none left for after the last
    assert replay.fresh == [(("o", 0),), (("t", 0),), (("o", 1),)] and replay.rest == ()


def test_replay_allocates_before_first_use():
    """A temporary taken by two launches is made once, before the first; an
    output no launch takes is made after the last."""
    workspace = _array(0x50000, 8192)
    a, b = object(), object()
    recorder = _recorder([(a, (X, workspace, workspace)), (b, (workspace, Y))], [(0x50000, 8192, 0)])
    replay = _remember._replay_of("key", {}, recorder, (X, W, B), (Y, _array(0x60000, 64, shape=(16,))), settings=0)
    assert replay.fresh == [(("t", 0),), (("o", 0),)]
    assert replay.rest == (("o", 1),)


class _Launches:
    """A _PackedArguments stand-in: the pointers of each launch."""

    def __init__(self):
        self.calls, self.streams = [], []

    def launch_pointers(self, pointers, stream=None):
        self.calls.append(list(pointers))
        self.streams.append(stream)


def _replaying(monkeypatch):
    """_cuda's device, arrays and pool memory as stand-ins: each array or
    temporary made is at the next of 0xA0000, 0xB0000, ... (in `made`)."""
    from cupyconv import _autotune

    made = []

    def address():
        made.append(0xA0000 + 0x10000 * len(made))
        return made[-1]

    monkeypatch.setattr(_remember, "_get_device", lambda: 0)
    monkeypatch.setattr(_remember, "_ndarray", lambda shape, dtype: _array(address(), 0, shape=shape, dtype=dtype))
    monkeypatch.setattr(_remember, "_alloc", lambda size: SimpleNamespace(ptr=address(), size=size))
    monkeypatch.setattr(_autotune, "enabled", lambda: False)
    return made


def test_replay_call_fills_each_launch(monkeypatch):
    """A replay called with new arrays gives each launch their pointers at
    the recorded offsets, the temporaries' and outputs' made for the call,
    nulls and constants as recorded, and returns the outputs; an input off
    its recorded alignment gets None and nothing launched."""
    table = _array(0x90000, 256)
    first, second = _Launches(), _Launches()
    workspace, view = _array(0x50000, 8192), _array(0x50000 + 512, 1024)
    recorder = _recorder(
        [(first, (W, workspace)), (second, (_array(X.data.ptr + 256, 8), view, None, B, Y, table))],
        [(0x50000, 8192, 0)],
    )
    _remember._CONSTANT_POINTERS.add(table.data.ptr)
    try:
        replay = _remember._replay_of("key", {}, recorder, (X, W, B), (Y,), settings=0)
    finally:
        _remember._CONSTANT_POINTERS.discard(table.data.ptr)
    made = _replaying(monkeypatch)
    replay.settings = _remember._SETTINGS["version"]  # (the stand-ins above moved it on)
    x, w, b = _array(0x1000000, 4096), _array(0x2000100, 1024), _array(0x3000000, 64)
    y = replay(x, w, b)
    workspace, output = made  # the workspace before the first launch, the output before the second
    assert first.calls == [[w.data.ptr, workspace]]
    assert second.calls == [[x.data.ptr + 256, workspace + 512, 0, b.data.ptr, output, table.data.ptr]]
    assert y.data.ptr == output and (y.shape, y.dtype) == (Y.shape, Y.dtype)
    assert replay(_array(0x1000010, 4096), w, b) is None and len(first.calls) == 1
    assert replay(x, w, None) is None and len(first.calls) == 1  # recorded with a bias


def test_replay_call_of_a_backward_call(monkeypatch):
    """A replay with outputs that no launch takes (made after the last) and
    a masked output (None) returns them all in order."""
    gy, gi, gw = _array(0x60000, 65536), _array(0x70000, 4096, shape=(2, 4, 128)), _array(0x80000, 1024, shape=(4, 8, 8))
    a = _Launches()
    recorder = _recorder([(a, (gy, W, gi))], [(0x70000, 4096, 0)])
    replay = _remember._replay_of("key", {}, recorder, (gy, X, W), (gi, None, gw), settings=0)
    made = _replaying(monkeypatch)
    replay.settings = _remember._SETTINGS["version"]
    grads = replay(gy, X, W)
    assert a.calls == [[gy.data.ptr, W.data.ptr, made[0]]]
    assert [g is None or g.data.ptr for g in grads] == [made[0], True, made[1]]
    assert (grads[2].shape, grads[2].dtype) == (gw.shape, gw.dtype)


def test_replay_launch_raw(monkeypatch):
    """launch_raw (the torch adapter's replays) gives each launch the
    caller's addresses: inputs at their recorded offsets, the outputs it was
    handed, its workspaces in one block from its allocator (each at a
    512-byte boundary), all on the stream it names.  An input off its recorded
    alignment, a null input where the recording had one (or the reverse), an
    output off a 256-byte boundary, another device or other settings launch
    nothing and return False (other settings also drop the replay)."""
    gy, gi, gw = _array(0x60000, 65536), _array(0x70000, 4096, shape=(2, 4, 128)), _array(0x80000, 1024, shape=(4, 8, 8))
    workspace, small = _array(0x90000, 2000), _array(0xA0000, 100)
    a, b = _Launches(), _Launches()
    recorder = _recorder(
        [(a, (_array(gy.data.ptr + 512, 8), W, gi, small)), (b, (X, workspace, gw, _array(small.data.ptr + 16, 8)))],
        [(0xA0000, 100, 0), (0x90000, 2000, 1)],
    )
    table = {}
    replay = _remember._replay_of("key", table, recorder, (gy, X, W), (gi, gw, None), settings=0)
    table["key"] = replay
    _replaying(monkeypatch)
    replay.settings = _remember._SETTINGS["version"]
    allocated = []

    def allocate(size):
        allocated.append(size)
        return 0xE00000 + 0x1000 * len(allocated)

    inputs, outputs = (0x1000000, 0x2000000, 0x3000000), (0x4000000, 0x5000000, 0)
    assert replay.launch_raw(inputs, outputs, allocate, 99)
    assert allocated == [512 + 2048]  # the small one first (first taken), then the workspace
    assert a.calls == [[inputs[0] + 512, inputs[2], outputs[0], 0xE01000]] and a.streams == [99]
    assert b.calls == [[inputs[1], 0xE01000 + 512, outputs[1], 0xE01000 + 16]] and b.streams == [99]
    for bad_inputs, bad_outputs in (
        ((0x1000010, 0x2000000, 0x3000000), outputs),
        ((0x1000000, 0, 0x3000000), outputs),
        (inputs, (0x4000000, 0x5000008, 0)),
    ):
        assert not replay.launch_raw(bad_inputs, bad_outputs, allocate, 99)
    monkeypatch.setattr(_remember, "_get_device", lambda: 1)
    replay.settings = _remember._SETTINGS["version"]
    assert not replay.launch_raw(inputs, outputs, allocate, 99)
    assert len(a.calls) == 1 and len(b.calls) == 1 and len(allocated) == 1 and table == {"key": replay}
    monkeypatch.setattr(_remember, "_get_device", lambda: 0)
    with settings.override(wgmma_min_taps=5):  # (moves the settings on)
        assert not replay.launch_raw(inputs, outputs, allocate, 99) and not table and len(a.calls) == 1


def test_allocations_from_another_allocator_are_recorded():
    """note_allocation (the torch adapter's allocator) adds to the recording
    of the call running on this thread, after the launches made so far, and
    does nothing where none is being recorded."""
    _remember.note_allocation(0x5000, 64)
    with _remember._Recorder() as recorder:
        recorder.launches.append(object())
        _remember.note_allocation(0x6000, 128)
    assert recorder.allocations == [(0x6000, 128, 1)]


@pytest.mark.parametrize(
    ("recorder", "outputs"),
    [
        (_recorder([(object(), (X, _array(0x70000, 16), Y))], []), (Y,)),  # an array the call did not make (a cached copy)
        (_recorder([(object(), (X, _array(0x50000, 16), Y))], [(0x50000, 16, 1)]), (Y,)),  # allocated only after the launch
        (_recorder([], []), (Y,)),  # nothing launched
        # an output that is part of a larger block made in the call (the replay would allocate it alone)
        (_recorder([(object(), (X, _array(0x50000, 64)))], [(0x50000, 128, 0)]), (_array(0x50000, 64),)),
        (_recorder([(object(), (X, _array(0x50040, 64)))], [(0x50000, 128, 0)]), (_array(0x50040, 64),)),
        (_recorder([(object(), (X, Y))], []), (_array(Y.data.ptr, Y.nbytes, contiguous=False),)),  # not contiguous
    ],
    ids=["foreign", "later", "empty", "output-head", "output-inside", "output-strided"],
)
def test_replay_refused(recorder, outputs):
    assert _remember._replay_of("key", {}, recorder, (X, W, B), outputs, settings=0) is None


def test_alignment_is_part_of_the_recording():
    """A replay recorded with aligned arrays stands aside for an input that
    sits elsewhere within 256 bytes (the routes choose 16-byte loads by it)."""
    assert _remember._alignment((_array(0x10004, 16), W, None)) == (4, 0, None)
    assert _remember._alignment((X, _array(0x20100, 16), _array(0x30010, 16))) == (0, 0, 16)


def test_settings_forget_recordings(monkeypatch):
    """A change of the settings (cupyconv.settings.override) moves their
    version on; a replay made under other settings drops itself from its
    table and returns None, so the call takes the checked path."""
    from cupyconv import settings

    replay = _remember._Replay("k", _remember.FAST_BACKWARD, [], [], [None], 0, [], settings.version(), (0, 0, None))
    monkeypatch.setitem(_remember.FAST_BACKWARD, "k", replay)
    monkeypatch.setitem(_remember._REMEMBER_SEEN, "k", 3)
    before = settings.version()
    with settings.override(use_window_fill=not settings.current().use_window_fill):
        assert settings.version() == before + 1
        assert replay(X, W, None) is None
    assert settings.version() == before + 2
    assert "k" not in _remember.FAST_BACKWARD and "k" not in _remember._REMEMBER_SEEN


def test_override_takes_setting_names_only():
    from cupyconv import settings

    with pytest.raises(TypeError, match="use_no_such_kernel"):
        with settings.override(use_no_such_kernel=True):
            pass


def test_autotuning_switched_forgets_recordings(monkeypatch):
    """A replay recorded with autotuning off drops itself when autotuning is
    on (its tiles are the heuristic's), and one recorded with it on when it
    is off, so the call takes the checked path and is recorded afresh."""
    from cupyconv import _autotune

    for recorded in (False, True):
        replay = _remember._Replay("k", _remember.FAST_BACKWARD, [], [], [None], 0, [], _remember._SETTINGS["version"], (0, 0, None), recorded)
        monkeypatch.setitem(_remember.FAST_BACKWARD, "k", replay)
        monkeypatch.setitem(_remember._REMEMBER_SEEN, "k", 3)
        monkeypatch.setattr(_autotune, "enabled", lambda recorded=recorded: not recorded)
        assert replay(X, W, None) is None
        assert "k" not in _remember.FAST_BACKWARD and "k" not in _remember._REMEMBER_SEEN


def test_a_call_that_tuned_is_not_recorded(monkeypatch):
    """Where the autotuner timed tiles during the call due to be recorded
    (autotuning turned on after the first call), nothing is recorded and the
    next call is the one recorded."""
    calls = []

    def run():  # the checked path, tuning a tile as it goes
        calls.append(1)
        _remember._tuned[("test", len(calls))] = "tile"
        return (Y,)

    monkeypatch.setattr(_remember, "_tuned", {})
    monkeypatch.setattr(_remember, "_get_current_stream", lambda: SimpleNamespace(is_capturing=lambda: False))
    monkeypatch.setitem(_remember._REMEMBER_SEEN, "k", 1)
    table = {}
    assert _remember.remember("k", table, run, (X, W, None)) == (Y,)
    assert _remember._REMEMBER_SEEN["k"] == 1 and "k" not in _remember._REMEMBER_CANDIDATES and not table


def test_a_recording_keeps_the_plans_it_ran(monkeypatch):
    """The recorded call's passes (problem, plan), as observe_plans would
    see them, go with its replay; an observe_plans block open around it
    still sees them too."""
    packed = object()

    def run():  # the checked path: _cuda._run's report of a pass, then its launch
        for served in _launch._RECORDING.plan_observers:
            served.append(("problem", "plan"))
        _launch._RECORDING.recorder.launches.append((packed, (X, W, Y)))
        return (Y,)

    monkeypatch.setattr(_remember, "_get_current_stream", lambda: SimpleNamespace(is_capturing=lambda: False))
    monkeypatch.setitem(_remember._REMEMBER_SEEN, "k", 1)
    outer = []
    monkeypatch.setattr(_launch._RECORDING, "plan_observers", (outer,))
    assert _remember.remember("k", {}, run, (X, W, None)) == (Y,)
    replay = _remember._REMEMBER_CANDIDATES.pop("k")
    assert replay.plans == (("problem", "plan"),) and outer == [("problem", "plan")]
    assert _launch._RECORDING.plan_observers == (outer,)  # the recorder's list is gone with it


@pytest.mark.parametrize("seen", [0, 1, 2])
def test_a_call_being_captured_is_not_counted(monkeypatch, seen):
    """On a stream being captured into a CUDA graph a call runs the checked
    path alone: it neither records, nor checks a recording (which waits for
    the GPU), nor counts."""
    calls = []
    monkeypatch.setattr(_remember, "_get_current_stream", lambda: SimpleNamespace(is_capturing=lambda: True))
    monkeypatch.setattr(_remember, "_Recorder", None)  # a recording would fail
    if seen:
        monkeypatch.setitem(_remember._REMEMBER_SEEN, "k", seen)
    table = {}
    assert _remember.remember("k", table, lambda: calls.append(1) or (Y,), (X, W, None)) == (Y,)
    assert calls == [1] and _remember._REMEMBER_SEEN.get("k", 0) == seen and not table


def test_a_full_table_forgets_its_counts(monkeypatch):
    """A full table of recordings is emptied for a new one, and the counts
    of the signatures it held go with it: each is recorded again on its
    second call after (before, their counts stayed at 3 and they ran the
    checked path until the count table itself filled)."""
    monkeypatch.setattr(_remember, "_REMEMBER_SEEN", {"other": 2})
    table = {("old", k): object() for k in range(1024)}
    _remember._REMEMBER_SEEN.update({key: 3 for key in table})
    replay = object()
    _remember._keep(table, "new", replay)
    assert table == {"new": replay} and _remember._REMEMBER_SEEN == {"other": 2}
    _remember._keep(table, ("old", 0), replay)
    assert len(table) == 2 and _remember._REMEMBER_SEEN == {"other": 2}
    calls = []
    monkeypatch.setattr(_remember, "_get_current_stream", lambda: SimpleNamespace(is_capturing=lambda: False))
    _remember.remember(("old", 5), table, lambda: calls.append(1) or (Y,), (X, W, None))
    assert calls == [1] and _remember._REMEMBER_SEEN[("old", 5)] == 1  # the next call records


def test_packed_arguments_fill_the_pointer_slots(monkeypatch):
    """A packed launch writes its pointers into the slots ahead of the
    scalars it was made with, and hands cuLaunchKernel the buffer's address
    list; a launch with the wrong number of pointers raises before it."""
    import ctypes
    import struct

    launches = []
    monkeypatch.setattr(_launch, "_launch_kernel", lambda *args: launches.append(args))
    monkeypatch.setattr(_launch.cupy.cuda, "get_current_stream", lambda: SimpleNamespace(ptr=77))
    packed = _launch._PackedArguments(SimpleNamespace(kernel=SimpleNamespace(ptr=5)), 3, 128, 64, 3, (numpy.int32(-7), numpy.float32(1.5)))
    pointers = [0x7F0000001000, 0, 0x7F00000FF000 + 6]
    packed.launch_pointers(pointers)
    ((function, grid, _, _, block, _, _, shared, stream, params, extra),) = launches
    assert (function, grid, block, shared, stream, params, extra) == (5, 3, 128, 64, 77, packed.params_pointer, 0)
    slots = [int(a) for a in packed.params]
    assert [ctypes.c_uint64.from_address(a).value for a in slots[:3]] == pointers
    assert ctypes.c_int32.from_address(slots[3]).value == -7 and ctypes.c_float.from_address(slots[4]).value == 1.5
    packed.launch_pointers([1, 2, 3])
    assert [ctypes.c_uint64.from_address(a).value for a in slots[:3]] == [1, 2, 3] and len(launches) == 2
    with pytest.raises(struct.error):
        packed.launch_pointers([1, 2])
    assert len(launches) == 2


def test_packed_arguments_rewrite_each_tensor_map_for_its_array(monkeypatch):
    """A launch with two tensor maps (conv_tf32_multicast's: the source's and
    the packed weight's) hands the kernel each map's address in its slot and
    rewrites a map only when the array it describes moves."""
    writes = []
    monkeypatch.setattr(_launch, "_launch_kernel", lambda *args: None)
    monkeypatch.setattr(_launch.cupy.cuda, "get_current_stream", lambda: SimpleNamespace(ptr=0))
    monkeypatch.setattr(_launch._MapSlot, "write", lambda self, pointer: writes.append((self.spec.array, pointer)) or setattr(self, "written", pointer))
    first = _launch._TensorMap(dims=(8,), strides=(), box=(8,))
    second = _launch._TensorMap(dims=(4,), strides=(), box=(4,), array=1)
    packed = _launch._PackedArguments(SimpleNamespace(kernel=SimpleNamespace(ptr=5)), 2, 384, 0, 3, (first, second, numpy.int32(3)))
    assert [int(packed.params[3 + i]) for i in range(2)] == [slot.address for slot, _ in packed.maps]
    assert [array for _, array in packed.maps] == [0, 1]
    packed.launch_pointers([0x1000, 0x2000, 0x3000])
    packed.launch_pointers([0x1000, 0x2400, 0x3100])
    packed.launch_pointers([0x1800, 0x2400, 0x3100])
    assert writes == [(0, 0x1000), (1, 0x2000), (1, 0x2400), (0, 0x1800)]


def test_replay_run_poisons_what_it_makes(monkeypatch):
    """run() (the third call's check) launches on the inputs as given and,
    with poison, fills each output and temporary with 0xFF bytes once,
    before the launch that takes it; an output no launch takes too."""
    poisoned, made = [], []

    def memory(size):
        pointer = 0xA0000 + 0x10000 * len(made)
        made.append(pointer)
        return SimpleNamespace(ptr=pointer, memset_async=lambda value, n: poisoned.append((pointer, value, n, len(first.calls))))

    monkeypatch.setattr(_remember, "_ndarray", lambda shape, dtype: SimpleNamespace(data=memory(64), nbytes=64, shape=shape, dtype=dtype))
    monkeypatch.setattr(_remember, "_alloc", memory)
    first = _Launches()
    workspace = _array(0x50000, 8192)
    recorder = _recorder([(first, (X, workspace, Y))], [(0x50000, 8192, 0)])
    replay = _remember._replay_of("key", {}, recorder, (X, W, B), (Y, _array(0x60000, 64, shape=(16,))), settings=0)
    outputs = replay.run((X, W, None), poison=True)
    workspace, output, rest = made  # before the launch: its workspace and output (in slot order); after it: the other output
    assert first.calls == [[X.data.ptr, workspace, output]]
    assert poisoned == [(workspace, 255, 8192, 0), (output, 255, 64, 0), (rest, 255, 64, 1)]
    assert [o.data.ptr for o in outputs] == [output, rest]
    del poisoned[:], made[:]
    replay.run((X, W, None))
    assert not poisoned and len(first.calls) == 2
