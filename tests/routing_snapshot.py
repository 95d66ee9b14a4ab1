"""The routing snapshot: every launch cupyconv makes for a pool of calls, on a
described sm_80 and sm_90 device, recorded on the CPU (tests/fake_cupy.py).

A refactor of the kernel choice should move none of it: the same kernels
(names and a digest of their source and compile options), grids, blocks,
shared memory, scalar arguments, and arrays in each launch's slots (the
call's inputs and outputs by name, temporaries by first use with their
sizes, constant tables by digest), for every benchmark problem (full size
and scaled to batch 1), every case list of tests/sweep.py and issue 62's two
vocoder layers, in five modes, forward and five backward masks, under the
default settings and four routing variants.

    python tests/routing_snapshot.py record DEVICE FILE   # sm_80 or sm_90; FILE: JSON
    python tests/routing_snapshot.py compare DEVICE FILE  # differences, exit 1 if any

tests/test_routing_snapshot.py compares against tests/data/routing-<device>.json.gz.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

MODES = [("float32", "highest"), ("float32", "tf32"), ("float16", None), ("bfloat16", None), ("float64", None)]
MASKS = {
    "backward": (True, True, True), "grad_input_weight": (True, True, False), "grad_input": (True, False, False),
    "grad_weight": (False, True, False), "grad_bias": (False, False, True),
}  # fmt: skip
OPS = ("forward",) + tuple(MASKS)

# Routing variants, as settings (cupyconv.settings.Settings fields and their values).
LIFTED = {
    "pack_min_output": 0, "window_min_output": 0, "window_min_columns": 0, "direct_min_output": 0, "grouped_forward_min_output": 0, "small_forward_max_output": 0,
    "tiny_max_output": 0, "phase_backward_min_output": 0, "grouped_min_input": 0, "wgmma_min_taps": 0,
}  # fmt: skip
HOPPER_OFF = {
    "use_wgmma": False, "use_resident": False, "use_split": False, "use_conv_tf32": False, "use_conv_tf32_stream": False,
    "use_conv_tf32_multicast": False, "use_fold": False, "use_wgmma_x3": False, "use_grad_input_overlap": False,
    "use_grad_input_multicast": False, "use_grad_weight_wgmma": False, "use_grad_weight_overlap": False,
    "use_grad_weight_multicast": False, "use_grad_weight_tf32": False, "use_window_fill": False, "use_grad_phase_fused": False,
}  # fmt: skip
VARIANTS = {
    "default": {},
    "lifted": LIFTED,
    "fallbacks": {**LIFTED, **HOPPER_OFF},
    "simt": {**LIFTED, "float32_highest": "simt"},
    "no_fill": {**LIFTED, "use_fill": False, "use_split": False, "use_grad_input_multicast": False, "use_grad_weight_multicast": False},
    "misaligned": {},  # the default settings, every array one element past a 512-byte boundary
}


def pool():
    """name -> sweep.Case: the benchmark problems (full size, and at batch 1
    scaled to about 2**18 outputs), the sweep's case lists, two vocoder layers,
    two calls past 2**31 elements."""
    sys.path.insert(0, HERE)
    import sweep

    from cupyconv import bench

    cases = []
    for name in sorted(dir(sweep)):
        if name.endswith("CASES"):
            cases += getattr(sweep, name)
    for p in bench.PROBLEMS.values():
        cases.append(sweep.Case(p.id, p.dims, p.batch, p.in_channels, p.out_channels, p.kernel, p.size, p.stride, p.padding,
                                p.output_padding, p.dilation, p.groups))  # fmt: skip
        geometry = p.geometry()
        per_position = p.out_channels * geometry.out_size[0] * geometry.out_size[1] / p.size[-1]
        length = max(1, min(p.size[-1], int((1 << 18) / per_position) + 1))
        cases.append(dataclasses.replace(cases[-1], name=f"{p.id}_scaled", batch=1, size=p.size[:-1] + (length,)))
    cases += [
        sweep.Case("vocoder_512_256", 1, 2, 512, 256, (16,), (32,), stride=8, padding=4),
        sweep.Case("vocoder_256_128", 1, 2, 256, 128, (16,), (256,), stride=8, padding=4),
        # past 2**31 elements (64-bit index builds), in arrays whose rows fit in int
        sweep.Case("index64_input", 1, 2, 64, 32, (3,), ((1 << 24) + 3,)),
        sweep.Case("index64_output", 1, 1, 32, 64, (4,), ((1 << 24) + 1,), stride=2, padding=1),
    ]
    unique = {}
    for case in cases:
        unique.setdefault(case.name, case)
    return unique


# --- the seam: how this process observes launches and steers settings.
# Everything that names cupyconv's internals is here.


def _hook_launches(events):
    """Records every launch made through the launch seam into `events` (the
    small forward calls' single launches are recorded by the stand-in's
    RawKernel); returns the block that does it."""
    from cupyconv import _launch

    def observe(plan, arrays):
        if isinstance(plan, _launch._Launch):
            events.append(("launch", _launch._kernel_function(plan), plan.blocks, plan.threads, plan.shared, tuple(arrays) + tuple(plan.scalars)))

    return _launch.watch_launches(observe)


def _forget_calls():
    from cupyconv import _remember

    _remember.FAST_FORWARD.clear()  # small calls remembered whole


def _instantiations():
    """Every (file, kernel) the library can compile, with a digest of the file's source."""
    from cupyconv import _kernels

    digests = {}
    for filename, _ in _kernels.all_instantiations():
        digests.setdefault(filename, hashlib.sha256(_kernels.source(filename).encode()).hexdigest()[:16])
    return sorted([filename, name, digests[filename]] for filename, name in _kernels.all_instantiations())


def _apply(settings: dict):
    """Puts `settings` (the variant's, cupyconv.settings fields) in force;
    returns what undoes it."""
    import cupyconv.settings

    block = cupyconv.settings.override(**settings)
    block.__enter__()
    return lambda: block.__exit__(None, None, None)


# --- the trace of one call


def _scalar(value, fake):
    import numpy

    if isinstance(value, fake.ndarray):
        return None  # (an array: the caller names it)
    if isinstance(value, numpy.generic):
        return f"{value.dtype.name}:{value.item()}"
    if isinstance(value, tuple):  # a tensor map's description
        return ["map"] + [list(v) if isinstance(v, tuple) else v for v in value]
    if isinstance(value, (int, float, bool)):
        return f"{type(value).__name__}:{value}"
    raise TypeError(f"unexpected launch argument {value!r}")


def trace(events, named: dict, fake) -> dict:
    """The call's events with every array by its role: named[memory] for the
    call's inputs and outputs, "const:<digest>" for constant tables, "tN" for
    temporaries numbered by first use (their byte sizes in "temps")."""
    temps, roles = [], {}

    def role(array):
        if array is None:
            return None
        memory = array.data.mem
        if memory in named:
            name = named[memory]
        elif memory.constant is not None:
            name = "const:" + hashlib.sha256(memory.constant.tobytes() + str(memory.constant.dtype).encode()).hexdigest()[:12]
        else:
            if memory not in roles:
                roles[memory] = f"t{len(temps)}"
                temps.append(memory.size)
            name = roles[memory]
        return name if array.data.offset == 0 else f"{name}+{array.data.offset}"

    out = []
    for event in events:
        kind = event[0]
        if kind == "launch":
            _, function, grid, block, shared, arguments = event
            cells = [role(a) if isinstance(a, fake.ndarray) or a is None else _scalar(a, fake) for a in arguments]
            out.append(["launch", function.name, function.code, grid, block, shared, cells])
        elif kind == "copy":
            out.append(["copy", role(event[1]), role(event[2])])
        elif kind == "fill":
            out.append(["fill", role(event[1]), float(event[2])])
        elif kind == "memset":
            out.append(["memset", role(fake.ndarray((event[4],), "uint8", memptr=fake.cuda.MemoryPointer(event[1], event[2]))), event[3]])
    return {"events": out, "temps": temps}


def record(device: str) -> dict:
    """call id -> trace, for every call of the pool on `device`; and under
    "__instantiations__" every kernel the library can compile."""
    sys.path.insert(0, HERE)
    import fake_cupy

    fake = fake_cupy.install(device)
    os.environ["CUPYCONV_AUTOTUNE"] = "0"
    import ml_dtypes
    import numpy

    import cupyconv
    from cupyconv import _geometry

    hook = _hook_launches(fake_cupy.EVENTS)
    hook.__enter__()  # (kept referenced: a dropped block would close)
    cases = pool()
    result = {"__instantiations__": _instantiations()}
    for variant, settings in VARIANTS.items():
        undo = _apply(settings)
        try:
            for name, case in sorted(cases.items()):
                for dtype, precision in MODES:
                    dt = numpy.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else numpy.dtype(dtype)
                    for op in OPS:
                        call = f"{name}|{dtype}{'' if precision is None else '-' + precision}|{op}|{variant}"
                        result[call] = _run(fake, fake_cupy, cupyconv, _geometry, case, dt, precision, op, variant == "misaligned")
        finally:
            undo()
    hook.__exit__(None, None, None)
    return result


def _run(fake, fake_cupy, cupyconv, _geometry, case, dtype, precision, op, misaligned=False):
    def array(shape):
        if not misaligned:
            return fake.empty(shape, dtype)
        base = fake.empty((1 + fake_cupy.math.prod(shape),), dtype)
        return fake.ndarray(shape, dtype, memptr=fake_cupy.MemoryPointer(base.data.mem, base.itemsize))

    lead = () if case.batch is None else (case.batch,)
    x = array(lead + (case.in_channels,) + case.size)
    w = array((case.in_channels, case.out_channels // case.groups) + case.kernel)
    b = array((case.out_channels,)) if case.bias else None
    named = {x.data.mem: "x", w.data.mem: "weight"}
    if b is not None:
        named[b.data.mem] = "bias"
    forward = cupyconv.conv_transpose1d if case.dims == 1 else cupyconv.conv_transpose2d
    backward = cupyconv.conv_transpose1d_backward if case.dims == 1 else cupyconv.conv_transpose2d_backward
    with fake_cupy.recording() as events:
        try:
            if op == "forward":
                del events[:]
                results = (forward(x, w, b, **case.kwargs, precision=precision),)
            else:
                shape = _geometry.make_geometry(case.dims, x.shape, w.shape, None, case.stride, case.padding, case.output_padding,
                                                case.groups, case.dilation).output_shape  # fmt: skip
                gy = array(shape)
                named[gy.data.mem] = "grad_output"
                del events[:]
                results = backward(gy, x, w, **case.kwargs, output_mask=MASKS[op], precision=precision)
        except Exception as error:  # noqa: BLE001 (recorded: a refactor should raise the same)
            return {"error": f"{type(error).__name__}: {error}"}
        finally:
            _forget_calls()
        for k, r in enumerate(results):
            if r is not None and r.data.mem not in named:
                named[r.data.mem] = f"out{k}"
        t = trace(events, named, fake)
        t["results"] = [None if r is None else [list(r.shape), named.get(r.data.mem)] for r in results]
        return t


def load(path: str) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def differences(expected: dict, actual: dict, limit: int = 20):
    """Lines describing the calls whose traces differ, each at its first
    differing event (at most `limit` calls)."""
    lines, count = [], 0
    for call in sorted(set(expected) | set(actual)):
        a, b = expected.get(call), actual.get(call)
        if a == b:
            continue
        count += 1
        if len(lines) < limit:
            where = ""
            if a and b and "events" in a and "events" in b:
                k = next((k for k, (x, y) in enumerate(zip(a["events"], b["events"])) if x != y), min(len(a["events"]), len(b["events"])))
                where = f" (event {k})"
                a = a["events"][k] if k < len(a["events"]) else {"temps": a["temps"], "results": a["results"]}
                b = b["events"][k] if k < len(b["events"]) else {"temps": b["temps"], "results": b["results"]}
            lines.append(f"{call}{where}:\n  expected {json.dumps(a)[:900]}\n  actual   {json.dumps(b)[:900]}")
    if count > len(lines):
        lines.append(f"... {count} calls differ in all")
    return lines


def main(argv):
    command, device, path = argv
    result = record(device)
    if command == "record":
        with gzip.open(path, "wt") as f:
            json.dump(result, f, sort_keys=True, separators=(",", ":"))
        print(f"{len(result)} calls recorded for {device} into {path}")
        return 0
    lines = differences(load(path), result)
    print("\n".join(lines) if lines else f"{len(result)} calls: the same launches as {path}")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
