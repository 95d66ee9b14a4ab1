"""The zoo suite of `python -m cupyconv bench` (`--suite zoo`): 44
transposed-convolution layers of published models, each row naming its
model, with a bias unless the model's layer has none; and what the bench's
suites share: selecting problems, the suite table with both torch times and
geometric means, the rows as JSON, the progress line.

The zoo's layers (the zoo issue's table; C_in -> C_out, weight (C_in,
C_out / groups, *K)): vocoders and codecs (BigVGAN-v2, HiFi-GAN, DAC,
WaveGAN, WaveGlow, DiffWave), source separation (Demucs v2, SepFormer,
DPRNN), image generators and decoders (pix2pix, SNGAN, CycleGAN, U-Net,
nnU-Net, StyleGAN2, DCGAN, LapSRN, ENet, RED-Net), heads (Mask R-CNN,
SimpleBaselines, FCN-8s), and depthwise, stride-1 and asymmetric layers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from typing import List

from .bench import DEFAULT_PROBLEMS, PROBLEMS, Problem, Row, mode_label


def _z(number, source, batch, channels, kernel, size, stride, padding, output_padding, groups, bias=True) -> Problem:
    """One zoo row as the issue writes it: channels "C_in->C_out", kernel and
    size an int (1D) or a pair (2D)."""
    in_channels, out_channels = (int(c) for c in channels.split("->"))
    kernel = kernel if isinstance(kernel, tuple) else (kernel,)
    size = size if isinstance(size, tuple) else (size,)
    return Problem(f"Z{number}", len(kernel), batch, in_channels, out_channels, kernel, size, stride, padding, output_padding,
                   groups=groups, source=source, bias=bias)  # fmt: skip


_ROWS = [
    # source, batch, C_in->C_out, kernel, input size, stride, padding, output_padding, groups
    ("BigVGAN-v2 24 kHz, up 1", 4, "1536->768", 8, 256, 4, 2, 0, 1),
    ("BigVGAN-v2, up 2", 4, "768->384", 8, 1024, 4, 2, 0, 1),
    ("BigVGAN-v2, up 3", 4, "384->192", 4, 4096, 2, 1, 0, 1),
    ("BigVGAN-v2, up 6", 4, "48->24", 4, 32768, 2, 1, 0, 1),
    ("HiFi-GAN V3, up 1", 16, "256->128", 16, 32, 8, 4, 0, 1),
    ("HiFi-GAN V3, up 3", 16, "64->32", 8, 2048, 4, 2, 0, 1),
    ("DAC 44 kHz decoder, up 1", 8, "1536->768", 16, 33, 8, 4, 0, 1),
    ("DAC decoder, up 4", 8, "192->96", 4, 8448, 2, 1, 0, 1),
    ("Demucs v2 decoder 6", 4, "2048->1024", 8, 107, 4, 0, 0, 1),
    ("Demucs v2 decoder 3", 4, "256->128", 8, 6890, 4, 0, 0, 1),
    ("Demucs v2 decoder 1", 4, "64->8", 8, 110250, 4, 0, 0, 1),
    ("SepFormer decoder", 2, "256->1", 16, 4000, 8, 0, 0, 1),
    ("DPRNN decoder", 4, "64->1", 2, 32000, 1, 0, 0, 1),
    ("WaveGAN generator 1", 64, "1024->512", 25, 16, 4, 11, 1, 1),
    ("WaveGAN generator 5", 64, "64->1", 25, 4096, 4, 11, 1, 1),
    ("WaveGlow mel upsampler", 4, "80->80", 1024, 63, 256, 0, 0, 1),
    ("HiFi-GAN V1 inference, long", 1, "512->256", 16, 2000, 8, 4, 0, 1),
    ("depthwise 1D upsampler", 8, "512->512", 4, 1024, 2, 1, 0, 512),
    ("pix2pix U-Net, up 2", 16, "1024->512", (4, 4), (8, 8), 2, 1, 0, 1),
    ("pix2pix U-Net, up 5", 16, "512->128", (4, 4), (32, 32), 2, 1, 0, 1),
    ("pix2pix U-Net, out", 16, "128->3", (4, 4), (128, 128), 2, 1, 0, 1),
    ("SNGAN STL-10, up 1", 64, "512->256", (4, 4), (6, 6), 2, 1, 0, 1),
    ("SNGAN STL-10, up 3", 64, "128->64", (4, 4), (24, 24), 2, 1, 0, 1),
    ("CycleGAN generator, up 1", 4, "256->128", (3, 3), (64, 64), 2, 1, 1, 1),
    ("CycleGAN generator, up 2", 4, "128->64", (3, 3), (128, 128), 2, 1, 1, 1),
    ("U-Net, up 2", 4, "512->256", (2, 2), (32, 32), 2, 0, 0, 1),
    ("U-Net, high resolution", 16, "64->32", (2, 2), (256, 256), 2, 0, 0, 1),
    ("nnU-Net 2D decoder", 12, "320->256", (2, 2), (16, 16), 2, 0, 0, 1),
    ("Mask R-CNN mask head (RoIs as batch)", 256, "256->256", (2, 2), (14, 14), 2, 0, 0, 1),
    ("SimpleBaselines pose head, 1", 32, "2048->256", (4, 4), (8, 6), 2, 1, 0, 1),
    ("SimpleBaselines pose head, 3", 32, "256->256", (4, 4), (32, 24), 2, 1, 0, 1),
    ("FCN-8s, 2x", 4, "21->21", (4, 4), (16, 16), 2, 0, 0, 1, False),
    ("FCN-8s, 8x", 4, "21->21", (16, 16), (70, 70), 8, 0, 0, 1, False),
    ("StyleGAN2 modulated upsampling (groups = batch 4)", 1, "1024->1024", (3, 3), (64, 64), 2, 0, 0, 4),
    ("LapSRN image branch", 16, "1->1", (4, 4), (128, 128), 2, 1, 0, 1),
    ("LapSRN feature branch", 16, "64->64", (4, 4), (64, 64), 2, 1, 0, 1),
    ("DiffWave spectrogram upsampler", 16, "1->1", (3, 32), (80, 200), (1, 16), (1, 8), 0, 1),
    ("depthwise 2D upsampling", 16, "96->96", (3, 3), (56, 56), 2, 1, 1, 96),
    ("ENet decoder bottleneck", 8, "16->16", (3, 3), (64, 128), 2, 1, 1, 1),
    ("ENet full-resolution output", 8, "16->19", (3, 3), (256, 512), 2, 1, 1, 1),
    ("DCGAN-64 latent projection", 128, "100->512", (4, 4), (1, 1), 1, 0, 0, 1),
    ("RED-Net deconvolution (stride 1)", 16, "64->64", (3, 3), (256, 256), 1, 1, 0, 1),
    ("stride-1 5x5 decoder, large image", 4, "32->32", (5, 5), (512, 512), 1, 2, 0, 1),
    ("stride-1 asymmetric 1x7 / 7x1 pair (factorised decoders)", 8, "128->128", (1, 7), (128, 128), 1, (0, 3), 0, 1),
]
ZOO = {p.id: p for p in (_z(n, *row) for n, row in enumerate(_ROWS, 1))}

# The halves, for device calls that must be shorter (the first half is the
# 1D layers and four 2D ones).  Splitting by mode is the better split where a
# call is too long: the kernels cupyconv compiles on a fresh machine differ
# by dtype, so `--modes highest,tf32` and `--modes float16,bfloat16` share the
# compiles between two calls evenly (56 and 55 kernels), where the halves by
# problem compile 93 and 52.
ZOO1 = {i: ZOO[i] for i in list(ZOO)[:22]}
ZOO2 = {i: ZOO[i] for i in list(ZOO)[22:]}
SUITES = {"problems": PROBLEMS, "zoo": ZOO, "zoo1": ZOO1, "zoo2": ZOO2}
ALL = {**PROBLEMS, **ZOO}  # every problem by id (the ids of the suites are distinct)


def list_problems() -> str:
    """A line per problem of every suite: its id, its definition, the
    keyword arguments it passes and, for the zoo, its model; each suite
    under a heading line.  The default run is DEFAULT_PROBLEMS."""
    lines = []
    for suite, heading in (("problems", "the benchmark problems (--suite problems, the default; default run P1-P5)"),
                           ("zoo", "layers of published models, each with its model (--suite zoo; halves zoo1 = Z1-Z22, zoo2 = Z23-Z44)")):  # fmt: skip
        lines.append(f"# {suite}: {heading}")
        for problem in SUITES[suite].values():
            default = " (default)" if problem.id in DEFAULT_PROBLEMS else ""
            kwargs = ", ".join(f"{k}={v}" for k, v in problem.kwargs.items())
            line = (f"{problem.id}{default}: {problem.describe()}; input {(problem.batch, problem.in_channels) + problem.size}, "
                    f"weight {(problem.in_channels, problem.out_channels // problem.groups) + problem.kernel}, {kwargs}")  # fmt: skip
            if problem.source:
                line += f", bias={problem.bias}; from {problem.source}"
            lines.append(line)
    return "\n".join(lines)


def add_arguments(parser) -> None:
    """The options of the suites (bench.main adds the rest)."""
    parser.add_argument("--suite", choices=tuple(SUITES), default="problems",
                        help="the problems to run: 'problems' (P1-P5, X1-X5) or 'zoo' (Z1-Z44, 44 layers of published models, "
                        "each row naming its model, biases on; halves zoo1 = Z1-Z22 and zoo2 = Z23-Z44).  It sets what "
                        "--problems defaults to (P1-P5; the whole zoo) and what --problems all means; the zoo's table "
                        "shows both torch times and geometric means.  The whole zoo in the four modes, forward and backward, "
                        "is estimated (not yet measured) at 3-5 minutes on an H200, half of it compiling about 110 kernels on "
                        "a fresh machine; to keep device calls short, split it by mode (--modes highest,tf32 then --modes float16,bfloat16, each with "
                        "--json, then --from-json to make one table) or by zoo1 and zoo2 (default: %(default)s)")  # fmt: skip
    parser.add_argument("--direction", choices=("forward", "backward", "both"),
                        help="forward pass, backward pass (grad_input, grad_weight, and grad_bias where the problem has a bias), "
                        "or both in one table (default: forward; --backward is --direction backward)")  # fmt: skip
    parser.add_argument("--json", metavar="FILE",
                        help="also write every row as JSON (problem, mode, direction, times, floor, errors, which torch setting won, "
                        "the environment), rewritten after each mode and direction, so a call cut off keeps what finished; "
                        "cupyconv.bench_zoo.load_json reads it")  # fmt: skip
    parser.add_argument("--from-json", nargs="+", metavar="FILE",
                        help="run nothing: make the table (and --markdown, --json, --plot) from the rows of earlier --json files, "
                        "e.g. a suite split over device calls; needs no GPU")  # fmt: skip


def select(parser, args) -> List[Problem]:
    """The problems --suite and --problems name: --problems takes ids of any
    suite, or 'all' (the whole of --suite); without it, --suite's default."""
    suite = SUITES[args.suite]
    if args.problems is None:
        return [PROBLEMS[i] for i in DEFAULT_PROBLEMS] if args.suite == "problems" else list(suite.values())
    if args.problems.strip() == "all":
        return list(suite.values())
    ids = [p.strip() for p in args.problems.split(",") if p.strip()]
    unknown = [i for i in ids if i not in ALL]
    if unknown or not ids:
        parser.error(f"unknown problem ids {unknown}; choose from {', '.join(PROBLEMS)}, Z1-Z{len(ZOO)} or 'all'")
    return [ALL[i] for i in ids]


def directions(parser, args) -> List[bool]:
    """The directions to run, as Row.backward values."""
    if args.backward and args.direction not in (None, "backward"):
        parser.error(f"--backward is --direction backward: it contradicts --direction {args.direction}")
    direction = "backward" if args.backward else args.direction or "forward"
    return {"forward": [False], "backward": [True], "both": [False, True]}[direction]


def suite_table(problems) -> bool:
    """Whether the run's table is the suite table (a zoo problem among them)
    rather than bench.format_table's."""
    return any(p.id not in PROBLEMS for p in problems)


def gpu_only(args, problems) -> List[str]:
    """What of the selection needs a GPU (the suites other than the
    benchmark problems have no CPU demo), as the refusal names it."""
    if args.suite != "problems":
        return [f"--suite {args.suite}"]
    return ["--problems with zoo ids"] if suite_table(problems) else []


def progress(problems, label: str):
    """The problems in turn, with a progress line on stderr naming each
    (tqdm's; off where stderr is not a terminal, or as TQDM_DISABLE says)."""
    from tqdm import tqdm

    # An explicit disable=None would override TQDM_DISABLE: tqdm's environment only sets defaults.
    settings = {} if "TQDM_DISABLE" in os.environ else {"disable": None}
    bar = tqdm(problems, desc=label, unit="problem", file=sys.stderr, leave=False, **settings)
    for problem in bar:
        bar.set_postfix_str(problem.id)
        yield problem


def direction_label(row: Row) -> str:
    return "backward" if row.backward else "forward"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_suite_table(rows: List[Row]) -> str:
    """The suite table: a line per row with its model, both torch times and
    the speed-up against the faster, then a geometric-mean line per mode
    and direction."""
    header = ["id", "model", "problem", "mode", "cupyconv ms", "torch default ms", "torch benchmark ms", "speed-up", "floor ms",
              "% of floor", "error", "torch error"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        mode = mode_label(r.dtype, r.precision) + (", backward" if r.backward else "")
        speedup = f"{r.torch_ms / r.ours_ms:.2f}x" if r.torch_ms is not None else "-"
        torch_error = f"{r.torch_error:.1e}" if r.torch_error is not None else "-"
        cells = [r.problem.id, r.problem.source or "-", r.problem.describe(), mode, _ms(r.ours_ms), _ms(r.torch_default_ms),
                 _ms(r.torch_benchmark_ms), speedup, _ms(r.floor_ms), f"{100 * r.floor_ms / r.ours_ms:.0f}%", f"{r.ours_error:.1e}",
                 torch_error]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    notes = ["", "speed-up: torch's faster time (of cuDNN's default and cudnn.benchmark = True, timed in the same rounds) over "
             "cupyconv's.  backward: grad_input and grad_weight, and grad_bias where the problem has a bias.", ""]  # fmt: skip
    return "\n".join(lines + notes + [format_means(m) for m in geometric_means(rows)])


def _geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def geometric_means(rows: List[Row]) -> List[dict]:
    """Per (mode, direction), in the rows' order: the number of rows, the
    geometric means of the speed-up against the faster torch and against
    cuDNN's default, and of the fraction of the floor each side reaches
    (over the rows with a torch time), and how many rows cupyconv won."""
    groups = {}
    for r in rows:
        groups.setdefault((r.dtype, r.precision, r.backward), []).append(r)
    means = []
    for (dtype, precision, backward), group in groups.items():
        timed = [r for r in group if r.torch_ms is not None]
        default = [r for r in timed if r.torch_default_ms is not None]
        means.append({
            "dtype": dtype, "precision": precision, "backward": backward, "rows": len(group), "timed": len(timed),
            "speedup": _geomean([r.torch_ms / r.ours_ms for r in timed]),
            "speedup_default": _geomean([r.torch_default_ms / r.ours_ms for r in default]) if default else None,
            "floor_fraction": _geomean([r.floor_ms / r.ours_ms for r in group if r.floor_ms > 0]),
            "torch_floor_fraction": _geomean([r.floor_ms / r.torch_ms for r in timed if r.floor_ms > 0]),
            "wins": sum(r.torch_ms > r.ours_ms for r in timed),
        })  # fmt: skip
    return means


def format_means(m: dict) -> str:
    head = f"geometric mean, {mode_label(m['dtype'], m['precision'])}, {'backward' if m['backward'] else 'forward'} ({m['rows']} rows): "
    if not m["timed"]:
        return head + f"cupyconv {100 * m['floor_fraction']:.0f}% of the floor (torch not timed)"
    default = f", {m['speedup_default']:.2f}x against cuDNN's default" if m["speedup_default"] is not None else ""
    return (head + f"{m['speedup']:.2f}x against the faster torch{default}; cupyconv {100 * m['floor_fraction']:.0f}% of the floor, "
            f"torch {100 * m['torch_floor_fraction']:.0f}%; cupyconv faster on {m['wins']} of {m['timed']}")  # fmt: skip


def to_json(rows: List[Row], environment: str) -> dict:
    """The rows as JSON-ready data: every Row field (the problem's fields
    nested), with the mode's name, the direction and the faster torch
    setting ("default", "benchmark" or null) spelled out."""
    from . import __version__

    out = []
    for r in rows:
        fields = dataclasses.asdict(r)
        faster = None if r.torch_benchmark is None else "benchmark" if r.torch_benchmark else "default"
        fields.update(mode=mode_label(r.dtype, r.precision), direction=direction_label(r), torch_faster=faster)
        out.append(fields)
    return {"environment": environment, "cupyconv": __version__, "rows": out}


def write_json(path: str, rows: List[Row], environment: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(to_json(rows, environment), f, indent=1)
        f.write("\n")


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def load_json(path: str, with_environment: bool = False):
    """The rows a --json file holds (bench.Row objects, their problems
    rebuilt); with `with_environment`, (environment line, rows)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    names = {field.name for field in dataclasses.fields(Row)}
    rows = []
    for fields in data["rows"]:
        problem = Problem(**{k: _tuples(v) for k, v in fields["problem"].items()})
        rows.append(Row(**{**{k: v for k, v in fields.items() if k in names}, "problem": problem}))
    return (data.get("environment", ""), rows) if with_environment else rows


def merged(paths) -> tuple:
    """(environment line, rows) of several --json files: their rows in turn,
    their distinct environment lines joined by ' | '."""
    environments, rows = [], []
    for path in paths:
        environment, some = load_json(path, with_environment=True)
        rows += some
        if environment not in environments:
            environments.append(environment)
    return " | ".join(environments), rows


def run(parser, args, problems, modes, backwards) -> tuple:
    """(environment line, rows, problems) of bench.main's run: every mode
    and direction of `problems` on the GPU (the environment line printed
    first, the --json file rewritten after each mode and direction), or the
    rows of the --from-json files."""
    from . import bench

    if args.from_json:
        environment, rows = merged(args.from_json)
        return environment, rows, list(dict.fromkeys(r.problem for r in rows))
    if True in backwards and args.no_torch:
        parser.error("the backward pass compares with torch: drop --no-torch")
    environment, rows = bench._environment(), []
    print(environment)
    for dtype, precision in modes:
        for backward in backwards:
            if backward:
                rows += bench.run_gpu_backward(problems, dtype, precision, args.warmup, args.repeat)
            else:
                rows += bench.run_gpu(problems, dtype, precision, args.warmup, args.repeat, not args.no_torch)
            if args.json:  # a call cut off at its limit keeps what finished
                write_json(args.json, rows, environment)
    return environment, rows, problems
