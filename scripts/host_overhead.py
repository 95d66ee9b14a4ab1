"""Where the host time of a tiny call goes (X4: N1 Ci4 Co8 K3 L5).

Run on a GPU: ``PYTHONPATH=. python scripts/host_overhead.py [--profile]``.
Prints the per-call host time of cupyconv.conv_transpose1d (CuPy arrays) and
of the torch adapter next to torch's, the costs of the CuPy primitives one
call is made of, and with --profile the top entries of cProfile over many
calls.  On a problem this small the GPU waits on the host: these host times
are what the benchmark's event timings of X4 measure.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import cupy
import ml_dtypes
import numpy


def per_call_us(fn, n: int = 3000) -> float:
    """Median over 5 rounds of n back-to-back calls' host time per call, the
    stream synchronised after each round."""
    for _ in range(200):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        cupy.cuda.get_current_stream().synchronize()
        rounds.append((time.perf_counter() - start) / n * 1e6)
    return float(numpy.median(rounds))


def enter_device(array) -> None:
    with array.device:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile the cupyconv call")
    args = parser.parse_args()

    import torch

    import cupyconv
    from cupyconv import _cuda, _geometry

    rng = numpy.random.default_rng(0)
    rows = []
    for dtype in ("float32", "float16"):
        x = cupy.asarray(rng.standard_normal((1, 4, 5)), dtype=dtype)
        w = cupy.asarray(rng.standard_normal((4, 8, 3)), dtype=dtype)
        b = cupy.asarray(rng.standard_normal(8), dtype=dtype)
        tx, tw, tb = (torch.from_dlpack(a) for a in (x, w, b))
        rows.append((f"cupyconv.conv_transpose1d {dtype}", per_call_us(lambda: cupyconv.conv_transpose1d(x, w, b))))
        rows.append((f"torch F.conv_transpose1d {dtype}", per_call_us(lambda: torch.nn.functional.conv_transpose1d(tx, tw, tb))))
    import cupyconv.torch as ct

    tx, tw, tb = (t.float() for t in (tx, tw, tb))
    rows.append(("cupyconv.torch.conv_transpose1d float32", per_call_us(lambda: ct.conv_transpose1d(tx, tw, tb))))

    x = cupy.asarray(rng.standard_normal((1, 4, 5)), dtype="float32")
    w = cupy.asarray(rng.standard_normal((4, 8, 3)), dtype="float32")
    geometry = _geometry.make_geometry(1, x.shape, w.shape, (8,), 1, 0, 0, 1, 1)
    out = cupy.empty((1, 8, 7), dtype="float32")
    kernel = cupy.ElementwiseKernel("float32 a", "float32 b", "b = a", "host_overhead_copy")
    raw = cupy.RawKernel("extern \"C\" __global__ void k(const float* a, float* b, int n) { }", "k")
    raw20 = cupy.RawKernel(
        "extern \"C\" __global__ void k20(const float* a, const float* b, const float* c, float* d, const int* t, "
        + ", ".join(f"int s{i}" for i in range(15)) + ", long long l0, long long l1, long long l2, long long l3) { }",
        "k20",
    )
    ints = tuple(numpy.int32(i) for i in range(15)) + tuple(numpy.int64(i) for i in range(4))
    plain = tuple(range(15)) + (0, 1, 2, 3)
    table = cupy.zeros(16, dtype=numpy.int32)
    rows += [
        ("make_geometry", per_call_us(lambda: _geometry.make_geometry(1, x.shape, w.shape, (8,), 1, 0, 0, 1, 1))),
        ("check_arrays", per_call_us(lambda: _geometry.check_arrays([("input", x), ("weight", w), ("bias", None)]))),
        ("cupy.empty((1,8,7))", per_call_us(lambda: cupy.empty((1, 8, 7), dtype=numpy.float32))),
        ("cupy.ascontiguousarray(contiguous)", per_call_us(lambda: cupy.ascontiguousarray(x))),
        ("array.reshape", per_call_us(lambda: x.reshape(1, 4, 1, 5))),
        ("with array.device", per_call_us(lambda: enter_device(x))),
        ("array.flags.c_contiguous", per_call_us(lambda: x.flags.c_contiguous)),
        ("RawKernel launch, 3 args", per_call_us(lambda: raw((1,), (32,), (x, out, numpy.int32(3))))),
        ("RawKernel launch, 24 args (numpy scalars)", per_call_us(lambda: raw20((1,), (32,), (x, w, None, out, table) + ints))),
        ("RawKernel launch, 24 args (python ints)", per_call_us(lambda: raw20((1,), (32,), (x, w, None, out, table) + plain))),
        ("ElementwiseKernel launch", per_call_us(lambda: kernel(x, out.ravel()[:20].reshape(1, 4, 5)))),
        ("_cuda.forward (validated geometry)", per_call_us(lambda: _cuda.forward(x, w, None, geometry, "highest"))),
    ]
    # the pieces of today's small forward path, and the least any CuPy call can do
    from cupyconv import _autotune, _kernels, settings

    index = _kernels.index_type(x.size, 56, w.size)
    tiny = _cuda._tiny_routed(geometry, 56)  # as forward() decides
    bound = _cuda._small_forward_launch(settings.current(), geometry, "float32", index, "highest", 0, tiny)
    numpy_tail = (bound.tail[0],) + tuple(numpy.int32(1) for _ in bound.tail[1:])

    def least():
        y = cupy.empty((1, 8, 7), dtype=numpy.float32)
        bound.function(bound.grid, bound.block, (x, w, None, y) + bound.tail)

    rows += [
        ("_autotune.enabled()", per_call_us(_autotune.enabled)),
        ("geometry_of", per_call_us(lambda: _geometry.geometry_of(1, x.shape, w.shape, None, 1, 0, 0, 1, 1))),
        ("_small_forward_launch lookup", per_call_us(lambda: _cuda._small_forward_launch(
            settings.current(), geometry, "float32", index, "highest", 0, tiny))),
        ("x.device.id", per_call_us(lambda: x.device.id)),
        ("cupy.ndarray(shape, dtype)", per_call_us(lambda: cupy.ndarray((1, 8, 7), numpy.float32))),
        ("bound launch, CScalar arguments", per_call_us(lambda: bound.function(bound.grid, bound.block, (x, w, None, out) + bound.tail))),
        ("bound launch, NumPy scalar arguments", per_call_us(lambda: bound.function(bound.grid, bound.block, (x, w, None, out) + numpy_tail))),
        ("least: cupy.empty + bound launch", per_call_us(least)),
    ]
    # the remembered launch of _api._FAST_FORWARD and its pieces
    from cupyconv import _api

    for _ in range(3):
        cupyconv.conv_transpose1d(x, w)
    key = _api._fast_key(1, x, w, None, 1, 0, 0, 1, 1, None)
    fast = _api._FAST_FORWARD[key]
    packed = fast.packed
    rows += [
        ("_api._fast_key", per_call_us(lambda: _api._fast_key(1, x, w, None, 1, 0, 0, 1, 1, None))),
        ("_FAST_FORWARD lookup", per_call_us(lambda: _api._FAST_FORWARD.get(key))),
        ("_FastForward call (allocate + launch)", per_call_us(lambda: fast(x, w, None))),
        ("cupy.cuda.runtime.getDevice()", per_call_us(cupy.cuda.runtime.getDevice)),
        ("cupy.cuda.get_current_stream().ptr", per_call_us(lambda: cupy.cuda.get_current_stream().ptr)),
        ("launchKernel, packed arguments", per_call_us(lambda: cupy.cuda.driver.launchKernel(
            packed.pointer, packed.grid, 1, 1, packed.block, 1, 1, packed.shared, 0, packed.params_pointer, 0))),
    ]
    width = max(len(name) for name, _ in rows)
    print("host time per call (us), median of 5 rounds of 3000 calls")
    for name, us in rows:
        print(f"  {name:<{width}}  {us:8.2f}")

    # the benchmark's measure: CUDA events around each call (the GPU waits on
    # the host, so this is host time plus the kernel), median of 200
    from cupyx.profiler import benchmark

    print("events around one call (us), median of 200 (cupyx.profiler.benchmark), as `bench` times X4")
    for dtype, precision, tf32 in (("float32", "highest", False), ("float32", "tf32", True), ("float16", "highest", False), ("bfloat16", "highest", False)):
        cdtype = numpy.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else numpy.dtype(dtype)
        x = cupy.asarray(rng.standard_normal((1, 4, 5)).astype(cdtype))
        w = cupy.asarray(rng.standard_normal((4, 8, 3)).astype(cdtype))
        tx, tw = torch.from_dlpack(x.view(numpy.int16) if dtype == "bfloat16" else x), torch.from_dlpack(w.view(numpy.int16) if dtype == "bfloat16" else w)
        if dtype == "bfloat16":
            tx, tw = tx.view(torch.bfloat16), tw.view(torch.bfloat16)
        torch.backends.cudnn.allow_tf32 = tf32
        ours = benchmark(lambda: cupyconv.conv_transpose1d(x, w, precision=precision), n_warmup=50, n_repeat=200)
        theirs = benchmark(lambda: torch.nn.functional.conv_transpose1d(tx, tw), n_warmup=50, n_repeat=200)
        o, t = numpy.median(ours.gpu_times[0]) * 1e6, numpy.median(theirs.gpu_times[0]) * 1e6
        if dtype == "float32" and precision == "highest":
            floor = benchmark(least, n_warmup=50, n_repeat=200)
            print(f"  least (cupy.empty + bound launch): {numpy.median(floor.gpu_times[0]) * 1e6:6.1f} (host {numpy.median(floor.cpu_times) * 1e6:5.1f})")
        print(f"  {dtype} {precision}: cupyconv {o:6.1f} (host {numpy.median(ours.cpu_times) * 1e6:5.1f}), torch {t:6.1f}: {t / o:.2f}x")
    torch.backends.cudnn.allow_tf32 = True

    if args.profile:
        for name, call in (
            ("cupyconv.conv_transpose1d", lambda: cupyconv.conv_transpose1d(x, w)),
            ("cupyconv.torch forward+backward", lambda: torch.autograd.backward(ct.conv_transpose1d(ax, aw, ab), agy)),
        ):
            ax = torch.randn(1, 4, 5, device="cuda", requires_grad=True)
            aw = torch.randn(4, 8, 3, device="cuda", requires_grad=True)
            ab = torch.randn(8, device="cuda", requires_grad=True)
            agy = torch.randn(1, 8, 7, device="cuda")
            x = cupy.asarray(rng.standard_normal((1, 4, 5)), dtype="float32")
            w = cupy.asarray(rng.standard_normal((4, 8, 3)), dtype="float32")
            for _ in range(100):
                call()
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(2000):
                call()
            profiler.disable()
            print(f"--- cProfile, 2000 calls of {name}")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
