"""How fast can a tiny forward call (X4: N1 Ci4 Co8 K3 L5, float32) be from
Python?  Times, as the bench does (cupyx.profiler.benchmark: CUDA events
around each call, rounds alternating between the sides, one process):

* torch's conv_transpose1d (TF32 off) and cupyconv's remembered call;
* the events alone around a call that does nothing;
* cuLaunchKernel of the call's prepared launch alone (its arguments packed,
  its output given): what any Python launcher pays;
* the leanest Python call we could write: type checks, the call's key and
  its lookup, the device, settings and stream checks, the arguments filled
  and the launch, with a new output (cupy.ndarray) -- or with no output made
  at all, one array reused (not a valid call: what is left once allocation
  is free).

Run on a GPU: ``PYTHONPATH=. python scripts/x4_floor.py [--repeat N]``.
Every lean side's output is checked bitwise against cupyconv's first.  The
numbers are in perf notes v54.
"""

from __future__ import annotations

import argparse
import statistics

import cupy
import numpy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=800, help="timed calls a side (in 4 rounds)")
    args = parser.parse_args()

    import torch
    from cupyx.profiler import benchmark

    import cupyconv
    import cupyconv.settings
    from cupyconv import _api, _autotune, _launch, _remember, bench

    problem = bench.PROBLEMS["X4"]
    _, x, w = bench._inputs(problem)
    kwargs = problem.kwargs
    ours = lambda: cupyconv.conv_transpose1d(x, w, **kwargs, precision="highest")  # noqa: E731
    for _ in range(6):  # checked, recorded, remembered
        ours()
    key = _api._fast_key(1, x, w, None, *kwargs.values(), "highest")
    fast = _remember.FAST_FORWARD[key]
    packed = fast.packed
    ndarray, launch = cupy.ndarray, _launch._launch_kernel
    get_device, get_stream = cupy.cuda.runtime.getDevice, cupy.cuda.get_current_stream
    settings_version = cupyconv.settings.version
    reused = cupy.empty(fast.shape, fast.dtype)

    def lean(allocate: bool):
        table, settings = {key: fast}, fast.settings

        def call(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *, precision=None):
            if (
                type(input) is ndarray and type(weight) is ndarray and (bias is None or type(bias) is ndarray)
                and type(stride) is int and type(padding) is int and type(output_padding) is int
                and type(groups) is int and type(dilation) is int
            ):  # fmt: skip
                # _api._fast_key's key, written inline: a call layer is what is being measured
                b = None if bias is None else (bias.shape, bias.strides, bias.dtype, bias.data.device_id)
                found = table.get((
                    1, input.shape, input.strides, input.dtype, input.data.device_id,
                    weight.shape, weight.strides, weight.dtype, weight.data.device_id, b,
                    stride, padding, output_padding, groups, dilation, precision,
                ))  # fmt: skip
                if found is not None and get_device() == found.device and settings_version() == settings and not _autotune.enabled():
                    stream = get_stream().ptr
                    y = ndarray(found.shape, found.dtype) if allocate else reused
                    packed.fill(packed.values, 0, input.data.ptr, weight.data.ptr, 0 if bias is None else bias.data.ptr, y.data.ptr)
                    launch(packed.pointer, packed.grid, 1, 1, packed.block, 1, 1, packed.shared, stream, packed.params_pointer, 0)
                    return y
            raise AssertionError("not the remembered signature")

        return lambda: call(x, w, **kwargs, precision="highest")

    xt, wt = bench._as_torch(torch, x), bench._as_torch(torch, w)
    sides = {
        "torch": lambda: torch.nn.functional.conv_transpose1d(xt, wt, **kwargs),
        "cupyconv": ours,
        "events alone": lambda: None,
        "prepared launch": lambda: launch(
            packed.pointer, packed.grid, 1, 1, packed.block, 1, 1, packed.shared, get_stream().ptr, packed.params_pointer, 0
        ),
        "lean, new output": lean(True),
        "lean, no output made": lean(False),
    }
    expected = cupy.asnumpy(ours())
    for name in ("lean, new output", "lean, no output made"):
        assert numpy.array_equal(cupy.asnumpy(sides[name]()), expected), name
    torch.backends.cudnn.allow_tf32 = False
    names = list(sides)
    samples = {name: [] for name in names}
    for r in range(4):
        for name in names if r % 2 == 0 else names[::-1]:
            samples[name] += list(benchmark(sides[name], n_warmup=10, n_repeat=max(1, args.repeat // 4)).gpu_times[0] * 1e6)
    torch_us = statistics.median(samples["torch"])
    print(f"{'side':22s} {'median us':>9s} {'mean us':>8s} {'torch / side':>12s}")
    for name in names:
        median = statistics.median(samples[name])
        print(f"{name:22s} {median:9.2f} {statistics.fmean(samples[name]):8.2f} {torch_us / median:12.2f}")


if __name__ == "__main__":
    main()
