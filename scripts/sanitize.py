"""compute-sanitizer's driver (scripts/sanitize.sh runs it): every kernel the
library launches, on calls chosen by what the routing itself launches.

``select`` runs a pool of calls natively -- the test sweep's cases and the
benchmark problems scaled down, in every dtype and precision, forward and
each backward mask, under routing variants (the defaults; the size rules
lifted so small problems reach the large-problem kernels; the Hopper kernels
turned off so their fallbacks run; 64-bit indices; float32 "highest" on CUDA
cores; autotuning on, which times every candidate tile) -- and keeps each
call that launched a kernel no call before it had.  A new kernel family is
covered as soon as some pool call routes to it; ``select`` prints the
instantiations of the library (_kernels.all_instantiations) that no call
reached.  ``run`` replays the kept calls (the forward passes and full
backward passes five times, so that remembered calls record, check and
replay), in the process compute-sanitizer watches.  A call on which the
sanitizer stops a kernel leaves the CUDA context unusable, so every later
call of that process fails: run in several parts, a failure costs less.

    python scripts/sanitize.py select --shard 0/4 --out logs/selected-0.json
    python scripts/sanitize.py run logs/selected-*.json --part 0/2
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import os
import sys
import tempfile
import time

import numpy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import cupy  # noqa: E402

import cupyconv  # noqa: E402
from cupyconv import _geometry, _kernels, _launch, bench, settings  # noqa: E402

import sweep  # noqa: E402

MODES = [("float64", "highest"), ("float32", "highest"), ("float32", "tf32"), ("float16", "highest"), ("bfloat16", "highest")]
OPS = ["forward", "backward", "grad_input", "grad_weight", "grad_bias"]
MASKS = {"backward": (True, True, True), "grad_input": (True, False, False), "grad_weight": (False, True, False), "grad_bias": (False, False, True)}

# Routing variants: cupyconv.settings fields (each change moves the settings
# version on, which drops cached replays), put in force for a call and
# restored after it; "autotune" turns autotuning on for the call.
LIFTED = dict(
    pack_min_output=0, window_min_output=0, direct_min_output=0, grouped_forward_min_output=0, small_forward_max_output=0,
    tiny_max_output=0, phase_backward_min_output=0, grouped_min_input=0, wgmma_min_taps=0,
    use_resident_anywhere=True, use_wgmma_x3_anywhere=True, use_phase_backward="anywhere", use_grouped_forward="anywhere",
    use_grad_weight_phase="anywhere", use_grad_phase_fused="anywhere", use_grad_input_phase="anywhere",
    use_conv_tf32="anywhere", use_conv_tf32_stream="anywhere",
)  # fmt: skip
HOPPER_OFF = dict(
    use_wgmma=False, use_resident=False, use_split=False, use_conv_tf32=False, use_conv_tf32_stream=False,
    use_conv_tf32_multicast=False, use_fold=False, use_wgmma_x3=False, use_grad_input_overlap=False,
    use_grad_input_multicast=False, use_grad_weight_wgmma=False, use_grad_weight_overlap=False,
    use_grad_weight_multicast=False, use_grad_weight_tf32=False, use_window_fill=False, use_grad_phase_fused=False,
)  # fmt: skip
INDEX64 = {"index_type": "long long"}  # the 64-bit-index builds for every call
VARIANTS = {
    "default": {},
    "lifted": LIFTED,
    "nhwc": {**LIFTED, "nhwc_min_products": 0, "nhwc_min_products_tf32": 0, "nhwc_min_output": 0},  # conv_nhwc, grad_weight_nhwc on small calls
    "fallbacks": {**LIFTED, **HOPPER_OFF},
    "fallbacks_default": HOPPER_OFF,
    "simt": {**LIFTED, "float32_highest": "simt"},
    "no_fill": {**LIFTED, "use_fill": False, "use_split": False, "use_grad_input_multicast": False, "use_grad_weight_multicast": False},
    "index64": INDEX64,
    "index64_lifted": {**LIFTED, **INDEX64},
    "index64_no_multicast": {**LIFTED, "use_grad_input_multicast": False, "use_grad_weight_multicast": False, "use_conv_tf32_multicast": False, **INDEX64},
    "autotune": {"autotune": True},
}


@dataclasses.dataclass(frozen=True)
class Call:
    case: str
    dtype: str
    precision: str
    op: str
    variant: str


def _scaled(problem, outputs=1 << 18):
    """A benchmark problem at batch 1 and a length that gives about
    `outputs` output elements (large enough for the large-problem rules)."""
    geometry = problem.geometry()
    per_position = problem.out_channels * geometry.out_size[0] * geometry.out_size[1] / problem.size[-1]
    length = max(1, min(problem.size[-1], int(outputs / per_position) + 1))
    size = problem.size[:-1] + (length,)
    return sweep.Case(
        f"{problem.id}_scaled", problem.dims, 1, problem.in_channels, problem.out_channels, problem.kernel, size,
        problem.stride, problem.padding, problem.output_padding, problem.dilation, problem.groups,
    )  # fmt: skip


# Issue 62's layers (float16 grad_input_overlap's shared read), at batch 2.
LAYERS = [
    sweep.Case("vocoder_512_256", 1, 2, 512, 256, (16,), (32,), stride=8, padding=4),
    sweep.Case("vocoder_256_128", 1, 2, 256, 128, (16,), (256,), stride=8, padding=4),
]


TUNED = {f"{p}_scaled" for p in bench.PROBLEMS} | {case.name for case in LAYERS}


def pool():
    cases = []
    for name in dir(sweep):
        if name.endswith("CASES"):
            cases += getattr(sweep, name)
    cases += [_scaled(p) for p in bench.PROBLEMS.values()] + LAYERS
    unique = {}
    for case in cases:
        unique.setdefault(case.name, case)
    return unique


@contextlib.contextmanager
def variant(name):
    changes = dict(VARIANTS[name])
    autotune = changes.pop("autotune", False)
    with settings.override(**changes):
        try:
            if autotune:
                cupyconv.set_autotune(True)
            yield
        finally:
            cupyconv.set_autotune(None)


def _arrays(case, dtype):
    rng = numpy.random.default_rng(0)
    x, w, b = case.arrays(rng)
    cast = lambda a: None if a is None else cupy.asarray(a.astype(numpy.float32)).astype(dtype)  # noqa: E731
    return cast(x), cast(w), cast(b)


def run_call(call: Call, cases, repeats: int = 1) -> None:
    case = cases[call.case]
    if call.dtype == "bfloat16":
        import ml_dtypes

        dtype = numpy.dtype(ml_dtypes.bfloat16)
    else:
        dtype = numpy.dtype(call.dtype)
    x, w, b = _arrays(case, dtype)
    forward = cupyconv.conv_transpose1d if case.dims == 1 else cupyconv.conv_transpose2d
    backward = cupyconv.conv_transpose1d_backward if case.dims == 1 else cupyconv.conv_transpose2d_backward
    precision = None if call.precision == "highest" else call.precision
    with variant(call.variant):
        for _ in range(repeats):
            if call.op == "forward":
                results = (forward(x, w, b, **case.kwargs, precision=precision),)
            else:
                shape = _geometry.make_geometry(case.dims, x.shape, w.shape, None, case.stride, case.padding, case.output_padding,
                                                case.groups, case.dilation).output_shape  # fmt: skip
                gy = cupy.asarray(numpy.random.default_rng(1).standard_normal(shape).astype(numpy.float32)).astype(x.dtype)
                results = backward(gy, x, w, **case.kwargs, output_mask=MASKS[call.op], precision=precision)
            for r in results:
                if r is not None and r.size and not bool(cupy.isfinite(r.astype(cupy.float32)).all()):
                    raise AssertionError(f"{call}: non-finite output")
        cupy.cuda.Device().synchronize()


def select(shard: int, shards: int, out: str) -> None:
    cases = pool()
    fetched = []
    original = _launch._function

    def recording(filename, name):
        fetched.append(name)
        return original(filename, name)

    _launch._function = recording
    os.environ["CUPYCONV_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupyconv-sanitize-")  # the autotuner's cache: start empty
    calls = [
        Call(name, dtype, precision, op, v)
        for v in VARIANTS
        for name in sorted(cases)
        for dtype, precision in MODES
        for op in OPS
        if v != "autotune" or (op in ("forward", "backward") and name in TUNED)  # tuning times every candidate: fewer calls
    ]  # fmt: skip
    kept, seen, failures, started = [], set(), [], time.time()
    for k, call in enumerate(calls):
        if k % shards != shard:
            continue
        del fetched[:]
        try:
            run_call(call, cases)
        except Exception as error:  # a failing call is reported, the rest go on
            failures.append(f"{call}: {type(error).__name__}: {error}"[:400])
            continue
        new = sorted(set(fetched) - seen)
        if new:
            seen.update(new)
            kept.append({"call": dataclasses.asdict(call), "kernels": new})
    with open(out, "w") as f:
        json.dump({"kept": kept, "failures": failures, "seconds": time.time() - started}, f, indent=1)
    print(f"shard {shard}/{shards}: {len(kept)} calls kept, {len(seen)} kernels, {len(failures)} failures, {time.time() - started:.0f} s")


def _load(paths):
    kept, failures = [], []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        kept += data["kept"]
        failures += data["failures"]
    # drop calls whose kernels an earlier kept call (of any shard) already ran
    seen, calls = set(), []
    for entry in sorted(kept, key=lambda e: -len(e["kernels"])):
        new = set(entry["kernels"]) - seen
        if new:
            seen |= new
            calls.append(entry)
    return calls, seen, failures


def coverage(paths) -> None:
    calls, seen, failures = _load(paths)
    groups = {}
    for filename, name in _kernels.all_instantiations():
        template, _, arguments = name.partition("<")
        key = (template, ",".join(a.strip() for a in arguments.rstrip(">").split(",")[:2]))
        groups.setdefault(key, [0, 0])
        groups[key][1] += 1
        groups[key][0] += name in seen
    missing = sorted(f"{t}<{a}> ({n} of {total})" for (t, a), (n, total) in groups.items() if n == 0)
    print(f"{len(calls)} calls run {len(seen)} distinct kernels; {sum(1 for v in groups.values() if v[0])} of {len(groups)} "
          f"(kernel, first template arguments) groups of _kernels.all_instantiations() reached")  # fmt: skip
    if missing:
        print("groups no call reached: " + "; ".join(missing))
    for failure in failures:
        print("FAILED " + failure)


def run(paths, part: int, parts: int, repeats: int) -> None:
    calls, seen, failures = _load(paths)
    cases = pool()
    os.environ["CUPYCONV_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupyconv-sanitize-")
    started, count = time.time(), 0
    for k, entry in enumerate(calls):
        if k % parts != part:
            continue
        call = Call(**entry["call"])
        replayed = call.variant in ("default", "lifted") and call.op in ("forward", "backward")
        run_call(call, cases, repeats if replayed else 1)
        count += 1
    print(f"part {part}/{parts}: {count} calls, {time.time() - started:.0f} s")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("select")
    p.add_argument("--shard", default="0/1")
    p.add_argument("--out", required=True)
    p = sub.add_parser("coverage")
    p.add_argument("paths", nargs="+")
    p = sub.add_parser("run")
    p.add_argument("paths", nargs="+")
    p.add_argument("--part", default="0/1")
    p.add_argument("--repeats", type=int, default=5, help="runs of the default variants' forward and backward calls (5: remembered calls record, check and replay)")
    args = parser.parse_args(argv)
    if args.command == "select":
        shard, shards = map(int, args.shard.split("/"))
        select(shard, shards, args.out)
    elif args.command == "coverage":
        coverage([p for pattern in args.paths for p in sorted(glob.glob(pattern))])
    else:
        part, parts = map(int, args.part.split("/"))
        run([p for pattern in args.paths for p in sorted(glob.glob(pattern))], part, parts, args.repeats)


if __name__ == "__main__":
    main()
