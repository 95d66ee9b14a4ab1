"""`python -m cupyconv bench`: cupyconv against torch (cuDNN) on the benchmark problems.

Both run in the same process on the same inputs; times are medians of CUDA
event timings after warm-up (cupyx.profiler.benchmark), taken in rounds that
alternate between the two (ROUNDS), so their ratio holds even where absolute
times drift on a shared machine.  The floor of a problem
is the larger of its bytes (input, weight and output, each moved once) over
the GPU's copy bandwidth (COPY_BANDWIDTHS; an H100's where the GPU is not
listed) and its FLOPs over the tensor-core rate of its precision
(float32 "highest" counted as three TF32 products: 3xTF32).  Errors are
relative Frobenius errors against float64: torch's cuDNN in float64 on the
upcast inputs when torch is there, else the NumPy reference on the first batch
element.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import platform
import sys
import time
from typing import List, Optional, Union

import numpy

from . import _autotune, _geometry
from .bench_plot import figure, plot  # noqa: F401 (bench.figure and bench.plot: the notebooks', the CLI's)

# Measured H100 ceilings (DESIGN.md): copy bandwidth (bytes read and written
# a second), tensor-core rates (FLOP/s).  The H200 is the same chip with faster
# memory: its copy measured 4.20 TB/s, its GEMM rates the H100's (757 and 788
# TFLOP/s float16 and bfloat16, 401 TF32, 50 FP32: perf notes v54), so only
# its copy bandwidth differs.  Other GPUs are held to the H100's ceilings.
COPY_BANDWIDTH = 2.96e12
COPY_BANDWIDTHS = {"H200": 4.20e12}  # by a whole word of the GPU's name ("NVIDIA H200"; not GH200's)
RATES = {("float32", "highest"): 404e12 / 3, ("float32", "tf32"): 404e12, "float16": 748e12, "bfloat16": 748e12, "float64": 67e12}


@dataclasses.dataclass(frozen=True)
class Problem:
    id: str
    dims: int
    batch: int
    in_channels: int
    out_channels: int
    kernel: tuple
    size: tuple
    stride: Union[int, tuple] = 1  # stride, padding, output_padding and dilation: an int or one per axis
    padding: Union[int, tuple] = 0
    output_padding: Union[int, tuple] = 0
    dilation: Union[int, tuple] = 1
    groups: int = 1
    source: str = ""  # the model the layer comes from (the zoo's problems)
    bias: bool = False  # the forward pass adds a bias, the backward pass gives grad_bias too

    @property
    def kwargs(self):
        return dict(stride=self.stride, padding=self.padding, output_padding=self.output_padding, groups=self.groups, dilation=self.dilation)

    def describe(self) -> str:
        k = "x".join(map(str, self.kernel))
        s = "x".join(map(str, self.size))
        parts = [f"{self.dims}D N{self.batch} Ci{self.in_channels} Co{self.out_channels} K{k} L{s}"]
        for name, value in (("s", self.stride), ("p", self.padding), ("op", self.output_padding), ("d", self.dilation), ("g", self.groups)):
            value = value[0] if isinstance(value, tuple) and len(set(value)) == 1 else value  # (2, 2) reads s2, (1, 16) s1x16
            if value != (0 if name in ("p", "op") else 1):
                parts.append(f"{name}{'x'.join(map(str, value)) if isinstance(value, tuple) else value}")
        return " ".join(parts + ["bias"] * self.bias)

    def geometry(self) -> _geometry.Geometry:
        return _geometry.make_geometry(
            self.dims, (self.batch, self.in_channels) + self.size,
            (self.in_channels, self.out_channels // self.groups) + self.kernel, (self.out_channels,) if self.bias else None,
            self.stride, self.padding, self.output_padding, self.groups, self.dilation,
        )  # fmt: skip


PROBLEMS = {
    p.id: p
    for p in [
        Problem("P1", 1, 32, 32, 64, (5,), (131072,), dilation=3),
        Problem("P2", 1, 64, 128, 128, (3,), (65536,)),
        Problem("P3", 1, 16, 64, 32, (5,), (65536,), stride=2, padding=1, output_padding=1, groups=4),
        Problem("P4", 1, 16, 32, 64, (3,), (131072,), stride=2, padding=1, dilation=2),
        Problem("P5", 2, 16, 32, 64, (3, 3), (64, 128), stride=5, padding=1, dilation=2),
        Problem("X1", 1, 16, 256, 256, (4,), (16384,), stride=2, padding=1, groups=256),
        Problem("X2", 1, 16, 512, 256, (16,), (4096,), stride=8, padding=4),
        Problem("X3", 1, 8, 64, 64, (1024,), (512,), stride=256, padding=384),
        Problem("X4", 1, 1, 4, 8, (3,), (5,)),
        Problem("X5", 2, 16, 128, 128, (4, 4), (128, 128), stride=2, padding=1, groups=128),
    ]
}
DEFAULT_PROBLEMS = ("P1", "P2", "P3", "P4", "P5")


def copy_bandwidth(gpu_name: str) -> float:
    """The copy bandwidth the floors take on a GPU of this name."""
    words = gpu_name.split()
    for word, bandwidth in COPY_BANDWIDTHS.items():
        if word in words:
            return bandwidth
    return COPY_BANDWIDTH


def _floor(dtype: str, precision: str, elements, flops, copy: float) -> float:
    """The larger of moving `elements` once at `copy` bytes a second and
    computing `flops` at the mode's rate."""
    itemsize = 2 if dtype in ("float16", "bfloat16") else numpy.dtype(dtype).itemsize
    rate = RATES[(dtype, precision)] if dtype == "float32" else RATES[dtype]
    return max(float(elements) * itemsize / copy, flops / rate)


def floor_seconds(problem: Problem, dtype: str, precision: str, copy: float = COPY_BANDWIDTH) -> float:
    g = problem.geometry()
    elements = numpy.prod(g.input_shape4) + numpy.prod(g.weight_shape4) + numpy.prod(g.output_shape4) + problem.bias * problem.out_channels
    return _floor(dtype, precision, elements, g.flops, copy)


def backward_floor_seconds(problem: Problem, dtype: str, precision: str, copy: float = COPY_BANDWIDTH) -> float:
    """grad_input and grad_weight (and grad_bias): grad_output and input read
    once, grad_input (and the small weight and bias tensors) written once, or
    twice the forward's FLOPs (grad_bias's sums are not counted)."""
    g = problem.geometry()
    elements = 2 * numpy.prod(g.input_shape4) + 2 * numpy.prod(g.weight_shape4) + numpy.prod(g.output_shape4) + problem.bias * problem.out_channels
    return _floor(dtype, precision, elements, 2 * g.flops, copy)


@dataclasses.dataclass
class Row:
    problem: Problem
    dtype: str
    precision: str
    ours_ms: float
    torch_ms: Optional[float]
    floor_ms: float
    gbps: float
    tflops: float
    ours_error: float
    torch_error: Optional[float]
    backward: bool = False  # grad_input and grad_weight (and grad_bias) rather than the forward pass
    torch_benchmark: Optional[bool] = None  # torch_ms is with cudnn.benchmark = True (else cuDNN's default)
    torch_default_ms: Optional[float] = None  # torch under cuDNN's default; torch_ms is the faster of the two
    torch_benchmark_ms: Optional[float] = None  # torch with cudnn.benchmark = True


def _relative_error(actual, expected) -> float:
    actual = numpy.asarray(actual, dtype=numpy.float64)
    expected = numpy.asarray(expected, dtype=numpy.float64)
    return float(numpy.linalg.norm(actual - expected) / max(numpy.linalg.norm(expected), 1e-300))


# Each side's `repeat` timed calls come in ROUNDS rounds that alternate
# between cupyconv and torch (the order reversed every other round), and the
# median is taken over all of a side's calls.  With each side timed in one
# batch, a slow spell of the shared machine that lasted one batch moved one
# side's median alone: 2 of about 90 rows in a device call read 20-25% slow
# for cupyconv (X3 "highest" forward 0.967 ms against 0.75-0.79 in the next
# call's A/B and the calls before; perf notes v46).
ROUNDS = 4


def _medians_ms(sides, warmup: int, repeat: int, rounds: int = ROUNDS) -> List[float]:
    """Median GPU time (ms) of each side: (function, context) pairs, the
    function timed by cupyx.profiler.benchmark inside `context()` (torch's
    TF32 setting), `warmup` untimed calls before its first round and one
    before each later round."""
    from cupyx.profiler import benchmark

    per_round = max(1, -(-repeat // rounds))
    samples = [[] for _ in sides]
    for r in range(rounds):
        for k in range(len(sides)) if r % 2 == 0 else reversed(range(len(sides))):
            fn, context = sides[k]
            with context():
                samples[k].extend(benchmark(fn, n_warmup=warmup if r == 0 else 1, n_repeat=per_round).gpu_times[0])
    return [float(numpy.median(s)) * 1e3 for s in samples]


def _tf32(torch, on: bool, benchmark: bool = False):
    """A context with torch's cuDNN TF32 setting `on` and cudnn.benchmark as
    given, both restored after."""

    @contextlib.contextmanager
    def context():
        cudnn = torch.backends.cudnn
        previous = cudnn.allow_tf32, cudnn.benchmark
        cudnn.allow_tf32, cudnn.benchmark = on, benchmark
        try:
            yield
        finally:
            cudnn.allow_tf32, cudnn.benchmark = previous

    return context


def _faster_torch(ours, theirs, tf32_on: bool, torch, warmup: int, repeat: int):
    """(ours ms, torch ms, whether cudnn.benchmark was the faster, torch's
    default ms, torch's benchmark ms) with torch timed both under cuDNN's
    default and with cudnn.benchmark = True, in the same alternating rounds:
    a user who cares about speed runs the faster, torch ms."""
    sides = [(ours, contextlib.nullcontext), (theirs, _tf32(torch, tf32_on)), (theirs, _tf32(torch, tf32_on, benchmark=True))]
    ours_ms, default_ms, benchmark_ms = _medians_ms(sides, warmup, repeat)
    return ours_ms, min(default_ms, benchmark_ms), benchmark_ms < default_ms, default_ms, benchmark_ms


def _inputs(problem: Problem):
    """(generator, input, weight, bias or None) in float32 on the GPU, the
    same on every run: a standard normal input and torch's default weight
    initialisation range (the bias drawn last, leaving the others as before)."""
    import cupy

    rng = cupy.random.default_rng(0)
    x = rng.standard_normal((problem.batch, problem.in_channels) + problem.size, dtype=numpy.float32)
    bound = 1.0 / numpy.sqrt(problem.in_channels // problem.groups * numpy.prod(problem.kernel))
    w = rng.uniform(-bound, bound, (problem.in_channels, problem.out_channels // problem.groups) + problem.kernel, dtype=numpy.float32)
    return rng, x, w, rng.uniform(-bound, bound, (problem.out_channels,), dtype=numpy.float32) if problem.bias else None


def run_gpu(problems: List[Problem], dtype: str, precision: str, warmup: int, repeat: int, use_torch: bool) -> List[Row]:
    import cupy

    import cupyconv

    from .bench_zoo import progress

    copy = copy_bandwidth(_gpu_name())
    torch = None
    if use_torch:
        try:
            import torch

            if not torch.cuda.is_available():
                torch = None
        except ImportError:
            torch = None
    rows = []
    for problem in progress(problems, f"{mode_label(dtype, precision)}, forward"):
        g = problem.geometry()
        _, x, w, b = _inputs(problem)
        x, w, b = (None if a is None else a.astype(_cupy_dtype(dtype)) for a in (x, w, b))
        fn = cupyconv.conv_transpose1d if problem.dims == 1 else cupyconv.conv_transpose2d
        ours = lambda: fn(x, w, b, **problem.kwargs, precision=precision)  # noqa: E731

        torch_ms = torch_error = None
        both = (None, None, None)  # which torch setting was the faster, and each one's time
        if torch is not None:
            tfn = torch.nn.functional.conv_transpose1d if problem.dims == 1 else torch.nn.functional.conv_transpose2d
            xt, wt, bt = (None if a is None else _as_torch(torch, a) for a in (x, w, b))
            theirs = lambda: tfn(xt, wt, bt, **problem.kwargs)  # noqa: E731
            ours_ms, torch_ms, *both = _faster_torch(ours, theirs, precision == "tf32", torch, warmup, repeat)
            with _tf32(torch, precision == "tf32", benchmark=both[0])():  # the error of the setting timed
                yt = theirs()
            y = ours()
            exact = tfn(xt.double(), wt.double(), None if bt is None else bt.double(), **problem.kwargs)
            ours_error = _torch_relative_error(torch, _as_torch(torch, y), exact)
            torch_error = _torch_relative_error(torch, yt, exact)
            exact = yt = xt = wt = bt = None  # freed (rebound: ruff's F821 reads a del as undefined names in the lambdas)
        else:
            from . import reference

            (ours_ms,) = _medians_ms([(ours, contextlib.nullcontext)], warmup, repeat)
            y = ours()
            first = slice(0, 1)
            exact = reference.forward(
                cupy.asnumpy(x[first]).astype(numpy.float64).reshape((1,) + g.input_shape4[1:]),
                cupy.asnumpy(w).astype(numpy.float64).reshape(g.weight_shape4), None if b is None else cupy.asnumpy(b).astype(numpy.float64),
                dataclasses.replace(g, batch=1),
            )  # fmt: skip
            ours_error = _relative_error(cupy.asnumpy(y[first]).astype(numpy.float64).reshape(exact.shape), exact)
        itemsize = x.dtype.itemsize
        moved = (x.size + w.size + y.size + (0 if b is None else b.size)) * itemsize
        rows.append(
            Row(problem, dtype, precision, ours_ms, torch_ms, floor_seconds(problem, dtype, precision, copy) * 1e3,
                moved / ours_ms / 1e6, g.flops / ours_ms / 1e9, ours_error, torch_error, False, *both)
        )  # fmt: skip
        x = w = b = y = None
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def run_gpu_backward(problems: List[Problem], dtype: str, precision: str, warmup: int, repeat: int) -> List[Row]:
    """grad_input and grad_weight, and grad_bias where the problem has a bias,
    cupyconv's backward against torch.autograd.grad on a retained graph;
    errors against torch in float64 (the largest of the gradients' relative
    errors)."""
    import cupy
    import torch

    import cupyconv

    from .bench_zoo import progress

    copy = copy_bandwidth(_gpu_name())
    rows = []
    for problem in progress(problems, f"{mode_label(dtype, precision)}, backward"):
        g = problem.geometry()
        rng, x, w, b = _inputs(problem)
        gy = rng.standard_normal(g.output_shape, dtype=numpy.float32)
        x, w, b, gy = (None if a is None else a.astype(_cupy_dtype(dtype)) for a in (x, w, b, gy))
        fn = cupyconv.conv_transpose1d_backward if problem.dims == 1 else cupyconv.conv_transpose2d_backward
        mask = (True, True, problem.bias)
        ours = lambda: fn(gy, x, w, **problem.kwargs, output_mask=mask, precision=precision)  # noqa: E731

        tfn = torch.nn.functional.conv_transpose1d if problem.dims == 1 else torch.nn.functional.conv_transpose2d
        gyt = _as_torch(torch, gy)
        tf32 = _tf32(torch, precision == "tf32")
        with tf32():  # torch's leaves: input, weight and bias (cupyconv's backward needs no bias)
            leaves = [_as_torch(torch, a).clone().requires_grad_() for a in (x, w, b) if a is not None]
            yt = tfn(*leaves, **problem.kwargs)
        theirs = lambda: torch.autograd.grad(yt, leaves, gyt, retain_graph=True)  # noqa: E731
        ours_ms, torch_ms, *both = _faster_torch(ours, theirs, precision == "tf32", torch, warmup, repeat)
        grads = [a for a, wanted in zip(ours(), mask) if wanted]
        with _tf32(torch, precision == "tf32", benchmark=both[0])():  # the error of the setting timed
            torch_grads = theirs()
        leaves64 = [a.detach().double().requires_grad_() for a in leaves]
        exact = torch.autograd.grad(tfn(*leaves64, **problem.kwargs), leaves64, gyt.double())
        ours_error = max(_torch_relative_error(torch, _as_torch(torch, a), e) for a, e in zip(grads, exact))
        torch_error = max(_torch_relative_error(torch, a, e) for a, e in zip(torch_grads, exact))
        itemsize = x.dtype.itemsize
        moved = (2 * x.size + 2 * w.size + gy.size + (problem.out_channels if problem.bias else 0)) * itemsize
        rows.append(
            Row(problem, dtype, precision, ours_ms, torch_ms, backward_floor_seconds(problem, dtype, precision, copy) * 1e3,
                moved / ours_ms / 1e6, 2 * g.flops / ours_ms / 1e9, ours_error, torch_error, True, *both)
        )  # fmt: skip
        x = w = b = gy = grads = leaves = gyt = yt = torch_grads = exact = leaves64 = None  # (freed before the pool is emptied)
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _as_torch(torch, array):
    """A zero-copy torch view of a CuPy array (bfloat16 crosses DLPack as int16 bits)."""
    if array.dtype == _cupy_dtype("bfloat16"):
        return torch.from_dlpack(array.view(numpy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(array)


def _torch_relative_error(torch, actual, exact) -> float:
    return float(torch.linalg.vector_norm(actual.double() - exact) / torch.linalg.vector_norm(exact))


def _cupy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return numpy.dtype(ml_dtypes.bfloat16)
    return numpy.dtype(name)


def format_table(rows: List[Row]) -> str:
    header = ["id", "problem", "dtype", "cupyconv ms", "torch ms", "speed-up", "GB/s", "TFLOP/s", "floor ms", "% of floor", "error", "torch error"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        mode = mode_label(r.dtype, r.precision) + (", backward" if r.backward else "")
        torch_ms = f"{r.torch_ms:.3f}" if r.torch_ms is not None else "-"
        speedup = f"{r.torch_ms / r.ours_ms:.2f}x" if r.torch_ms is not None else "-"
        torch_error = f"{r.torch_error:.1e}" if r.torch_error is not None else "-"
        cells = [r.problem.id, r.problem.describe(), mode, f"{r.ours_ms:.3f}", torch_ms, speedup, f"{r.gbps:.0f}", f"{r.tflops:.1f}",
                 f"{r.floor_ms:.3f}", f"{100 * r.floor_ms / r.ours_ms:.0f}%", f"{r.ours_error:.1e}", torch_error]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_cpu_demo() -> str:
    """No GPU: run the NumPy path on a small problem and compare with torch if present."""
    from . import conv_transpose1d

    rng = numpy.random.default_rng(0)
    problem = Problem("P1-small", 1, 2, 8, 16, (5,), (2048,), dilation=3)
    x = rng.standard_normal((problem.batch, problem.in_channels) + problem.size).astype(numpy.float32)
    w = rng.standard_normal((problem.in_channels, problem.out_channels) + problem.kernel).astype(numpy.float32)
    start = time.perf_counter()
    y = conv_transpose1d(x, w, **problem.kwargs)
    elapsed = (time.perf_counter() - start) * 1e3
    line = f"{problem.describe()}: NumPy reference {elapsed:.2f} ms, output {y.shape}"
    try:
        import torch

        exact = torch.nn.functional.conv_transpose1d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), **problem.kwargs)
        line += f", relative error vs torch float64 {_relative_error(y, exact.numpy()):.1e}"
    except ImportError:
        pass
    return line


def adapter_overhead(repeat: int) -> str:
    """The torch adapter's cost per call on a tiny problem (X4's shape), where
    launch and Python overheads are all there is: forward+backward through
    cupyconv.torch and through torch, host (wall) and GPU time per call,
    median of `repeat` calls after warm-up (cupyx.profiler.benchmark)."""
    import torch
    from cupyx.profiler import benchmark

    import cupyconv.torch as ct

    shape = "N1 Ci4 Co8 K3 L5"
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 5, generator=gen).cuda().requires_grad_()
    w = torch.randn(4, 8, 3, generator=gen).cuda().requires_grad_()
    b = torch.randn(8, generator=gen).cuda().requires_grad_()
    gy = torch.randn(1, 8, 7, generator=gen).cuda()
    lines = [f"torch adapter overhead, {shape}, float32, median of {repeat} calls (us per call)",
             "| path | forward host | forward GPU | forward+backward host | forward+backward GPU |", "|---|---|---|---|---|"]  # fmt: skip
    for name, fn in (("cupyconv.torch", ct.conv_transpose1d), ("torch", torch.nn.functional.conv_transpose1d)):

        def forward():
            with torch.no_grad():
                fn(x, w, b)

        def both():
            torch.autograd.backward(fn(x, w, b), gy)

        cells = []
        for step in (forward, both):
            result = benchmark(step, n_warmup=20, n_repeat=repeat)
            cells += [f"{numpy.median(result.cpu_times) * 1e6:.1f}", f"{numpy.median(result.gpu_times[0]) * 1e6:.1f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# Benchmark modes by name: (dtype, float32 precision); torch runs the same
# dtype with cuDNN's TF32 flag set to match.
MODES = {
    "highest": ("float32", "highest"),
    "tf32": ("float32", "tf32"),
    "float16": ("float16", "highest"),
    "bfloat16": ("bfloat16", "highest"),
    "float64": ("float64", "highest"),
}
ALL_MODES = ("highest", "tf32", "float16", "bfloat16")


def mode_label(dtype: str, precision: str) -> str:
    return f"float32 {precision}" if dtype == "float32" else dtype



def load_markdown(path: str):
    """(environment line, rows) from a table that `--markdown` wrote (or
    BENCHMARKS.md, whose first section holds one): the results kept for
    machines without a GPU.  Reading stops at the first heading after the
    table, so later sections (autotuned, backward) are not mixed in."""
    environment, rows = "", []
    labels = {mode_label(*m): m for m in MODES.values()}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") and rows:
                break
            if line.startswith("GPU ") and not environment:
                environment = line.strip()
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 12 or cells[0] not in PROBLEMS or cells[2] not in labels:
                continue
            number = lambda text: None if text == "-" else float(text)  # noqa: E731
            dtype, precision = labels[cells[2]]
            rows.append(Row(PROBLEMS[cells[0]], dtype, precision, float(cells[3]), number(cells[4]), float(cells[8]),
                            float(cells[6]), float(cells[7]), float(cells[10]), number(cells[11])))  # fmt: skip
    return environment, rows


def _gpu_name() -> str:
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else name


def _environment() -> str:
    import cupy

    name = _gpu_name()
    parts = [f"GPU {name}", f"CuPy {cupy.__version__}", f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}", f"Python {platform.python_version()}"]
    try:
        import torch

        parts.append(f"torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()})")
    except ImportError:
        parts.append("torch not installed")
    if _autotune.enabled():
        parts.append("tile configurations autotuned")
    parts.append(f"floors at a copy bandwidth of {copy_bandwidth(name) / 1e12:.2f} TB/s")
    return ", ".join(parts)


def _gpu_available() -> bool:
    try:
        import cupy

        return cupy.is_available()
    except Exception:
        return False


def main(argv=None) -> int:
    from . import bench_zoo

    parser = argparse.ArgumentParser(
        prog="python -m cupyconv bench",
        description="Time cupyconv's transposed convolution against torch (cuDNN) on the benchmark problems or the zoo, "
        "in one process: median of CUDA-event timings after warm-up, achieved GB/s and TFLOP/s, the fraction of the "
        "roofline floor reached, and the relative error against float64.  Without a GPU it says so and runs the "
        "NumPy path on a small problem.",
    )
    parser.add_argument("--problems", help=f"comma-separated ids of any suite ({', '.join(PROBLEMS)}, Z1-Z{len(bench_zoo.ZOO)}), "
                        f"or 'all' (the whole of --suite) (default: {','.join(DEFAULT_PROBLEMS)}, or the whole of --suite)")  # fmt: skip
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16", "float64"))
    parser.add_argument("--precision", default="highest", choices=("highest", "tf32"), help="float32 mode (torch's TF32 setting follows it)")
    parser.add_argument("--modes", help=f"comma-separated from {', '.join(MODES)}, or 'all' ({', '.join(ALL_MODES)}): "
                        "one table over every mode; overrides --dtype and --precision")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=20, help=f"timed runs a side (rounded up to a multiple of {ROUNDS}: {ROUNDS} rounds alternating with torch's); the median is reported (default: %(default)s)")
    parser.add_argument("--no-torch", action="store_true", help="time cupyconv alone")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table to FILE")
    parser.add_argument("--backward", action="store_true",
                        help="time grad_input + grad_weight (+ grad_bias where the problem has a bias) against torch.autograd.grad "
                        "instead of the forward pass (needs torch)")  # fmt: skip
    parser.add_argument("--plot", metavar="FILE", help="also draw a chart (PNG): the fraction of the floor each side reaches, "
                        "or, for a suite with zoo rows, each row's speed-up over torch on a log axis")  # fmt: skip
    parser.add_argument("--adapter", action="store_true",
                        help="also time the torch adapter against torch on a tiny problem (per-call overhead)")  # fmt: skip
    parser.add_argument("--autotune", action="store_true",
                        help="tune cupyconv's tile configurations first (as CUPYCONV_AUTOTUNE=1): the warm-up times the "
                        "candidates once per problem and the cache file remembers the winners")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="print every suite's problems with their definitions (and models), and exit")
    bench_zoo.add_arguments(parser)
    parser.add_argument("--models", nargs="?", const="all", metavar="NAMES",
                        help="instead of the problems, time whole training steps of real models (comma-separated from hifigan, dcgan, "
                        "pix2pix, hdemucs, or 'all', the default): torch against cupyconv.torch.convert, eager and CUDA-graphed "
                        "(see cupyconv/bench_models.py); --modes picks from float32, tf32, bf16; --warmup and --repeat count steps")  # fmt: skip
    args = parser.parse_args(argv)
    if args.list:
        print(bench_zoo.list_problems())
        return 0
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            parser.error("--plot needs matplotlib: pip install matplotlib")
    problems, backwards = bench_zoo.select(parser, args), bench_zoo.directions(parser, args)
    if args.modes and args.models is None:
        names = list(ALL_MODES) if args.modes == "all" else [m.strip() for m in args.modes.split(",") if m.strip()]
        if not names or any(m not in MODES for m in names):
            parser.error(f"--modes takes names from {list(MODES)} or 'all', got {args.modes!r}")
        modes = [MODES[m] for m in names]
    else:
        modes = [(args.dtype, args.precision)]

    if args.from_json and (args.adapter or args.autotune):
        parser.error("--from-json builds tables from saved runs: --adapter and --autotune run on a GPU, drop them")
    if not args.from_json and not _gpu_available():
        gpu_only = [f"--{name}" for name in ("markdown", "plot", "backward", "adapter", "autotune", "models", "json", "direction") if getattr(args, name)]
        gpu_only += bench_zoo.gpu_only(args, problems)
        if gpu_only:
            parser.error(f"{', '.join(gpu_only)} need{'s' if len(gpu_only) == 1 else ''} a CUDA GPU, and none is available here (or CuPy is not installed)")
        print("No CUDA GPU is available (or CuPy is not installed): the GPU benchmark cannot run here.")
        print("Running the NumPy reference path on a small problem instead.")
        print(run_cpu_demo())
        return 0
    if args.autotune:  # (after the checks: a refused command leaves the process as it was)
        _autotune.set_enabled(True)

    if args.models is not None:
        from . import bench_models

        return bench_models.main(parser, args)
    environment, rows, problems = bench_zoo.run(parser, args, problems, modes, backwards)
    table = bench_zoo.format_suite_table(rows) if bench_zoo.suite_table(problems) else format_table(rows)
    if not bench_zoo.suite_table(problems) and any(r.torch_benchmark is not None for r in rows):
        faster = [f"{r.problem.id} {mode_label(r.dtype, r.precision)}{', backward' * r.backward}" for r in rows if r.torch_benchmark]
        table += ("\n\ntorch ms: the faster of cuDNN's default and cudnn.benchmark = True, each timed in the same rounds; "
                  f"benchmark was the faster on {', '.join(faster) if faster else 'none'}.")  # fmt: skip
    if args.adapter:
        table += "\n\n" + adapter_overhead(max(args.repeat, 200))
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(environment + "\n\n" + table + "\n")
    if args.json:
        bench_zoo.write_json(args.json, rows, environment)
    if args.plot:  # last: the table is out whatever drawing does
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
