"""`python -m cupyconv bench --models`: whole training steps of real
architectures, torch against the same model through ``cupyconv.torch.convert``.

Each model is defined here with torch.nn from its paper (no weights: a
benchmark needs none), except HDemucs, which is torchaudio's.  A training step
is forward, loss, backward, an Adam step and ``zero_grad(set_to_none=True)``;
it runs eagerly, and captured whole in a CUDA graph.  The vocoder also runs
forward only under ``torch.inference_mode()``.  Three sides run on one model
state: torch with cuDNN's default (``cudnn.benchmark = False``), torch with
``cudnn.benchmark = True``, and the converted model, with
``cudnn.benchmark = True`` (cuDNN still runs its other layers, and that is
their best case).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from . import bench

from .models import MODELS, ModelSpec  # noqa: F401 (ModelSpec: the suite's entries)

# Mode name -> (TF32 on, autocast dtype); bench's own mode names are aliases.
MODES = {"float32": (False, None), "tf32": (True, None), "bf16": (False, torch.bfloat16)}
MODE_ALIASES = {"highest": "float32", "bfloat16": "bf16"}

# The relative difference a graphed step's loss may have from the eager
# step's, in each mode's precision: room for nondeterministic kernels (atomics
# in cuDNN's backward) over CHECK_STEPS Adam steps; a replay that reads or
# writes the wrong tensors moves the loss by far more.
LOSS_RTOL = {"float32": 1e-4, "tf32": 1e-3, "bf16": 1e-2}
CHECK_STEPS = 3  # eager steps (the capture's warm-up) that the replays must match


def model_names(text: str | None) -> list:
    """The models `--models` names: comma-separated, or 'all' (or nothing)."""
    if text is None or text.strip() in ("", "all"):
        return list(MODELS)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        raise ValueError(f"--models: unknown models {unknown}; choose from {list(MODELS)} or 'all'")
    return names


def mode_names(text: str | None) -> list:
    """The modes `--modes` names for the model suite (bench's highest and
    bfloat16 read as float32 and bf16), or all of them."""
    if text is None or text.strip() in ("", "all"):
        return list(MODES)
    names = [MODE_ALIASES.get(name.strip(), name.strip()) for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODES]
    if unknown:
        raise ValueError(f"--modes with --models takes {list(MODES)} (or highest, bfloat16) or 'all', got {unknown}")
    return names


def unavailable(name: str) -> str | None:
    """Why model `name` cannot run here, or None."""
    for module in MODELS[name].requires:
        try:
            __import__(module)
        except Exception as error:  # noqa: BLE001  (ImportError, or a torchaudio built for another torch)
            return f"{module} is not importable ({type(error).__name__}: {error})"
    return None


# --------------------------------------------------------------------------
# Results.


@dataclasses.dataclass
class LossCheck:
    """Graphed replays' losses against eager steps from the same state."""

    difference: float | None  # the largest relative difference over the steps compared
    rtol: float

    @property
    def passed(self) -> bool:
        return self.difference is not None and self.difference <= self.rtol


@dataclasses.dataclass
class ModelRow:
    """One model in one mode in one section ("training", "graphed" or
    "inference"); times in ms per step, None where a side did not run."""

    section: str
    model: str
    mode: str
    torch_default_ms: float | None = None  # not run in the graphed section
    torch_benchmark_ms: float | None = None
    ours_ms: float | None = None
    torch_host_ms: float | None = None  # torch's faster setting's
    ours_host_ms: float | None = None
    torch_gpu_ms: float | None = None
    ours_gpu_ms: float | None = None
    torch_check: LossCheck | None = None  # graphed only
    ours_check: LossCheck | None = None
    notes: list = dataclasses.field(default_factory=list)  # errors, or why the model was skipped

    @property
    def torch_ms(self) -> float | None:
        times = [t for t in (self.torch_default_ms, self.torch_benchmark_ms) if t is not None]
        return min(times) if times else None

    @property
    def speedup(self) -> float | None:
        return self.torch_ms / self.ours_ms if self.torch_ms and self.ours_ms else None


def _error_text(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 200 else text[:197] + "..."


# --------------------------------------------------------------------------
# Running on a GPU.


@contextlib.contextmanager
def _settings(mode: str, benchmark: bool):
    """cuDNN's benchmark flag and the TF32 flags of cuDNN and matmul (which
    the adapter follows) for one side, restored after."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    previous = cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32
    tf32 = MODES[mode][0]
    cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = benchmark, tf32, tf32
    try:
        yield
    finally:
        cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = previous


def _autocast(mode: str):
    dtype = MODES[mode][1]
    # No cast cache: a captured graph must not keep casts of the weights made before an update.
    return torch.autocast("cuda", dtype, cache_enabled=False) if dtype is not None else contextlib.nullcontext()


def _training_step(model, optimizer, inputs, target, loss_fn, mode):
    def step():
        optimizer.zero_grad(set_to_none=True)
        with _autocast(mode):
            loss = loss_fn(model(*inputs), target)
        loss.backward()
        optimizer.step()
        return loss

    return step


def _inference_step(model, inputs, mode):
    def step():
        with torch.inference_mode(), _autocast(mode):
            return model(*inputs)

    return step


def _time(sides, warmup: int, repeat: int, rounds: int = bench.ROUNDS):
    """(step ms, host ms) of each side, (step, context) pairs, as medians
    over `rounds` rounds that alternate between the sides, the order
    reversed every other round (bench._medians_ms's scheme).  A round times
    ceil(repeat / rounds) back-to-back steps: CUDA events around them give
    the step time, the host's clock from the synchronisation before them to
    the return of the last call the host time.  `warmup` untimed steps come
    before a side's first round, one before each later round."""
    per_round = max(1, -(-repeat // rounds))
    steps, hosts = [[] for _ in sides], [[] for _ in sides]
    for r in range(rounds):
        for k in range(len(sides)) if r % 2 == 0 else reversed(range(len(sides))):
            step, context = sides[k]
            with context():
                for _ in range(warmup if r == 0 else 1):
                    step()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                began = time.perf_counter()
                start.record()
                for _ in range(per_round):
                    step()
                issued = time.perf_counter()
                end.record()
                end.synchronize()
            steps[k].append(start.elapsed_time(end) / per_round)
            hosts[k].append((issued - began) * 1e3 / per_round)
    return [(statistics.median(s), statistics.median(h)) for s, h in zip(steps, hosts)]


def _gpu_ms(step, context, count: int) -> float | None:
    """The GPU's time per step: the durations of every kernel, copy and set
    that CUPTI records over `count` steps (CuPy's kernels too: CUPTI sees the
    whole process), summed, over `count`; None if it recorded none."""
    from torch.profiler import ProfilerActivity, profile

    with context():
        step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            for _ in range(count):
                step()
            torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    # GPU-side ranges of torch's annotations span kernels already counted (torch's own tables leave them out).
    device = [e for e in profiler.events() if e.device_type == cuda and not getattr(e, "is_user_annotation", False)]
    total_us = sum(event.time_range.elapsed_us() for event in device)
    return total_us / 1e3 / count if total_us > 0 else None


def _fill_times(row, sides, warmup, repeat) -> None:
    """Time `sides` into `row`: a dict from "torch_default" (optional),
    "torch_benchmark" and "ours" to (step, context), the step None where
    that side failed; then profile the faster torch side and the converted
    one."""
    running = {name: side for name, side in sides.items() if side[0] is not None}
    times = dict(zip(running, _time(list(running.values()), warmup, repeat)))
    for name, (step_ms, _) in times.items():
        setattr(row, f"{name}_ms", step_ms)
    torch_names = [name for name in times if name != "ours"]
    faster = min(torch_names, key=lambda name: times[name][0]) if torch_names else None
    count = max(1, min(5, -(-repeat // bench.ROUNDS)))
    for name, prefix in ((faster, "torch"), ("ours", "ours")):
        if name in times:
            setattr(row, f"{prefix}_host_ms", times[name][1])
            setattr(row, f"{prefix}_gpu_ms", _gpu_ms(*running[name], count))


def _copy(base):
    """A deep copy of `base` whose RNNs (HDemucs's LSTMs) have their weights
    in one block again, as cuDNN wants them (a copy makes them separate)."""
    model = copy.deepcopy(base)
    for module in model.modules():
        if isinstance(module, nn.RNNBase):
            module.flatten_parameters()
    return model


def _sides(mode, base, make_step):
    """{side: (step, context)} of torch with cuDNN's default, torch with
    cudnn.benchmark and the converted model, each on its own copy of `base`."""
    import cupyconv.torch

    sides = {}
    for name, benchmark in (("torch_default", False), ("torch_benchmark", True), ("ours", True)):
        model = _copy(base)
        if name == "ours":
            cupyconv.torch.convert(model)
        sides[name] = (make_step(model), functools.partial(_settings, mode, benchmark))
    return sides


def _restore(model, optimizer, initial) -> None:
    """`model` back to the `initial` state dict and Adam's state to its start
    (zeros), in place: a captured graph keeps reading the same tensors."""
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(initial[name])
        for state in optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    value.zero_()


class _Graphed:
    """A captured training step: calling it replays the graph.  It holds
    the model and optimizer whose tensors the graph reads and writes."""

    def __init__(self, graph, model, optimizer, loss):
        self.graph, self.model, self.optimizer, self.loss = graph, model, optimizer, loss

    def __call__(self):
        self.graph.replay()


def _capture(model, inputs, target, loss_fn, mode, initial, seed):
    """(graphed step, loss check) of the whole training step of `model`,
    captured as torch's notes on whole-network capture show: warm-up on a
    side stream, static inputs, capturable Adam, grads None before the
    capture.  The warm-up is CHECK_STEPS eager steps from the initial state
    and RNG seed (for dropout); after the capture the model, Adam and the
    seed go back to where they began, and the replays must give the same
    losses."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, capturable=True)
    eager = _training_step(model, optimizer, inputs, target, loss_fn, mode)
    torch.cuda.manual_seed(seed)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        expected = [eager().detach().clone() for _ in range(CHECK_STEPS)]
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        with _autocast(mode):
            loss = loss_fn(model(*inputs), target)
        loss.backward()
        optimizer.step()
    _restore(model, optimizer, initial)
    torch.cuda.manual_seed(seed)
    got = []
    for _ in range(CHECK_STEPS):
        graph.replay()
        got.append(loss.detach().clone())
    differences = [abs(g.item() - e.item()) / max(abs(e.item()), 1e-30) for g, e in zip(got, expected)]
    difference = max(differences) if all(math.isfinite(d) for d in differences) else math.inf  # a non-finite loss fails
    return _Graphed(graph, model, optimizer, loss), LossCheck(difference, LOSS_RTOL[mode])


def _run_training(name, spec, mode, warmup, repeat, scale, seed, device):
    row = ModelRow("training", name, mode)
    base, inputs, target = _prepare(spec, scale, seed, device)

    def make_step(model):
        return _training_step(model, torch.optim.Adam(model.parameters(), lr=1e-4), inputs, target, spec.loss, mode)

    _fill_times(row, _sides(mode, base, make_step), warmup, repeat)
    return row


def _run_graphed(name, spec, mode, warmup, repeat, scale, seed, device):
    import cupyconv.torch

    row = ModelRow("graphed", name, mode)
    base, inputs, target = _prepare(spec, scale, seed, device)
    initial = {key: value.detach().clone() for key, value in base.state_dict().items()}
    context = functools.partial(_settings, mode, True)
    sides = {}
    for side in ("torch_benchmark", "ours"):
        model = _copy(base)
        if side == "ours":
            cupyconv.torch.convert(model)
        try:
            with context():
                graphed, check = _capture(model, inputs, target, spec.loss, mode, initial, seed)
        except Exception as error:  # noqa: BLE001  (a capture that fails is reported, and the suite goes on)
            row.notes.append(f"{'converted' if side == 'ours' else 'torch'} capture: {_error_text(error)}")
            graphed, check = None, LossCheck(None, LOSS_RTOL[mode])
            del model
            _synchronize_quietly()
        setattr(row, "ours_check" if side == "ours" else "torch_check", check)
        sides[side] = (graphed, context)
    _fill_times(row, sides, warmup, repeat)
    return row


def _run_inference(name, spec, mode, warmup, repeat, scale, seed, device):
    row = ModelRow("inference", name, mode)
    base, _, _ = _prepare(spec, scale, seed, device)
    base.eval()
    inputs = spec.inference(device, torch.Generator(device=device).manual_seed(seed + 1), scale)
    _fill_times(row, _sides(mode, base, lambda model: _inference_step(model, inputs, mode)), warmup, repeat)
    return row


def _prepare(spec, scale, seed, device):
    """The model (built on the CPU from `seed`, then moved) and its batch."""
    torch.manual_seed(seed)
    base = spec.build(scale).to(device)
    inputs, target = spec.batch(device, torch.Generator(device=device).manual_seed(seed), scale)
    return base, inputs, target


def _synchronize_quietly() -> None:
    with contextlib.suppress(Exception):  # the error is reported where it arose
        torch.cuda.synchronize()


def _free() -> None:
    gc.collect()
    if torch.cuda.is_available():
        _synchronize_quietly()
        torch.cuda.empty_cache()


def _start_cupti() -> None:
    """Profile one kernel, so that CUPTI is set up before any graph is
    captured: it may otherwise trace a replay as one launch, not its kernels."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]):
        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()


def _progress(total: int):
    """A progress bar on stderr (tqdm's, where it is installed) with a
    `step(label)` method, and a `close()`."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None

    class Progress:
        def __init__(self):
            self.done = 0
            self.bar = tqdm(total=total, file=sys.stderr, desc="model suite", leave=False) if tqdm is not None else None

        def step(self, label: str) -> None:
            if self.bar is not None:
                self.bar.set_postfix_str(label)
            else:
                print(f"[{self.done + 1}/{total}] {label}", file=sys.stderr, flush=True)

        def advance(self) -> None:
            self.done += 1
            if self.bar is not None:
                self.bar.update(1)

        def close(self) -> None:
            if self.bar is not None:
                self.bar.close()

    return Progress()


def run_models(names, modes, warmup: int, repeat: int, graphs: bool = True, scale: float = 1.0, seed: int = 0):
    """(rows, report) of the model suite on the current CUDA device: for
    each model and mode a training row, a graphed training row (if
    `graphs`) and, for models that have one, an inference row; `warmup`
    untimed and `repeat` timed steps a side.  Models that cannot run here
    get a row saying why; a section that raises gets a row with the error."""
    device = torch.device("cuda")
    rows, tasks = [], []
    for name in names:
        spec = MODELS[name]
        reason = unavailable(name)
        if reason is not None:
            rows.append(ModelRow("skipped", name, "-", notes=[reason]))
            continue
        for mode in modes:
            tasks.append((name, mode, "training", _run_training))
            if graphs:
                tasks.append((name, mode, "graphed", _run_graphed))
            if spec.inference is not None:
                tasks.append((name, mode, "inference", _run_inference))
    if tasks:
        _start_cupti()
    progress = _progress(len(tasks))
    try:
        for name, mode, section, run in tasks:
            progress.step(f"{name} {mode} {section}")
            try:
                rows.append(run(name, MODELS[name], mode, warmup, repeat, scale, seed, device))
            except Exception as error:  # noqa: BLE001  (one model's failure, out of memory say, does not end the suite)
                rows.append(ModelRow(section, name, mode, notes=[_error_text(error)]))
            _free()
            progress.advance()
    finally:
        progress.close()
    return rows, format_report(rows, describe_environment(), warmup, repeat, scale)


# --------------------------------------------------------------------------
# The report.


def describe_environment() -> str:
    """The GPU, torch, cuDNN, CuPy and cupyconv (its git describe where it
    runs from a checkout)."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    parts = [f"GPU {gpu}", f"torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()})"]
    try:
        import cupy

        parts.append(f"CuPy {cupy.__version__}")
    except ImportError:
        parts.append("CuPy not installed")
    parts += [f"cupyconv {_describe()}", f"Python {platform.python_version()}"]
    return ", ".join(parts)


def _describe() -> str:
    from . import __version__

    root = Path(__file__).resolve().parent.parent
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return __version__
    text = described.stdout.strip()
    return f"{__version__} ({text})" if described.returncode == 0 and text else __version__


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}" if value < 10 else f"{value:.2f}"


def _pair(a: float | None, b: float | None) -> str:
    return f"{_ms(a)} / {_ms(b)}"


def _busy(gpu: float | None, step: float | None) -> str:
    return "-" if gpu is None or not step else f"{100 * gpu / step:.0f}%"


def _check(check: LossCheck | None) -> str:
    if check is None or check.difference is None:
        return "-"
    return f"{'pass' if check.passed else 'FAIL'} ({check.difference:.1e})"


def format_report(rows, environment: str, warmup: int, repeat: int, scale: float = 1.0) -> str:
    """The Markdown report: what the columns mean, the models, then a table
    per section."""
    per_round = max(1, -(-repeat // bench.ROUNDS))
    lines = [
        "# Model suite: torch against cupyconv.torch.convert",
        "",
        environment,
        "",
        (
            f"Step ms: CUDA events around {per_round} back-to-back steps, per step, median of {bench.ROUNDS} rounds that alternate "
            f"between the sides (the order reversed every other round), after {warmup} untimed steps. torch runs with cuDNN's "
            "default (cudnn.benchmark = False) and with cudnn.benchmark = True; the converted model runs with cudnn.benchmark = True "
            "(cuDNN still runs its other layers). Speed-up: the faster torch setting's step over the converted one's. "
            "Host ms: the host's clock from a synchronisation to the return of the last of those steps' calls, per step; where "
            "the GPU is the bottleneck the launch queue fills and the host waits, so it approaches the step time. GPU ms: the "
            "durations of every kernel, copy and set torch.profiler (CUPTI) records over a few steps, CuPy's included, per step. "
            "GPU busy: GPU ms over step ms, near 100% where the GPU bounds the step; well below it, with host ms near the step "
            "time, the host does. torch's host, GPU and busy columns are its faster setting's."
        ),
        "",
        "Modes: float32 (TF32 off in cuDNN and matmul), tf32 (on), bf16 (torch.autocast bfloat16, TF32 off). A training step: "
        "forward, loss, backward, Adam (lr 1e-4) step, zero_grad(set_to_none=True). Graphed: that step captured whole with "
        "torch.cuda.graph (capturable Adam, static inputs), torch with cudnn.benchmark = True against the converted model; "
        f"loss check: the first {CHECK_STEPS} replays' losses against {CHECK_STEPS} eager steps of the same model from the same "
        "state and RNG seed, largest relative difference, within "
        + ", ".join(f"{rtol:.0e} ({mode})" for mode, rtol in LOSS_RTOL.items())
        + ". Inference: forward only under torch.inference_mode().",
        "",
    ]
    if scale != 1:
        lines += [f"Scale {scale:g}: widths and batches (and 1-D lengths) are scaled from the sizes below.", ""]
    lines.append("Models:")
    for name, spec in MODELS.items():
        if not any(row.model == name for row in rows):
            continue
        lines.append(f"- {name}: {spec.source}; {spec.size}" + (f"; inference: {spec.inference_size}" if spec.inference else ""))
    lines.append("")
    skipped = [row for row in rows if row.section == "skipped"]
    for row in skipped:
        lines.append(f"Skipped {row.model}: {'; '.join(row.notes)}")
    if skipped:
        lines.append("")
    titles = {"training": "Training steps", "graphed": "Graphed training steps (torch.cuda.graph)", "inference": "Inference"}
    for section, title in titles.items():
        section_rows = [row for row in rows if row.section == section]
        if not section_rows:
            continue
        graphed = section == "graphed"
        header = ["model", "mode", "torch ms (benchmark)" if graphed else "torch ms (default / benchmark)", "converted ms", "speed-up",
                  "host ms (torch / converted)", "GPU ms (torch / converted)", "GPU busy (torch / converted)"]  # fmt: skip
        if graphed:
            header.append("loss check (torch / converted)")
        header.append("notes")
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in section_rows:
            torch_ms = _ms(row.torch_benchmark_ms) if graphed else _pair(row.torch_default_ms, row.torch_benchmark_ms)
            cells = [row.model, row.mode, torch_ms, _ms(row.ours_ms), f"{row.speedup:.2f}x" if row.speedup else "-",
                     _pair(row.torch_host_ms, row.ours_host_ms), _pair(row.torch_gpu_ms, row.ours_gpu_ms),
                     f"{_busy(row.torch_gpu_ms, row.torch_ms)} / {_busy(row.ours_gpu_ms, row.ours_ms)}"]  # fmt: skip
            if graphed:
                cells.append(f"{_check(row.torch_check)} / {_check(row.ours_check)}")
            cells.append("; ".join(row.notes).replace("|", "/"))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(parser, args) -> int:
    """`bench --models`: the report printed (and written to --markdown);
    bench's parser reports bad arguments."""
    try:
        names, modes = model_names(args.models), mode_names(args.modes)
    except ValueError as error:
        parser.error(str(error))
    if not torch.cuda.is_available():
        parser.error("--models needs torch with CUDA, and torch sees no CUDA GPU here")
    text = run_models(names, modes, args.warmup, args.repeat)[1]
    print(text, end="")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    return 0
