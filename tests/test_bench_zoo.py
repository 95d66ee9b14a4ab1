"""The zoo suite of the bench (cupyconv/bench_zoo.py), without a GPU: its
rows against the issue's table and torch's shape rules, the suite table and
its geometric means, the JSON rows, --list, the refusals, and the run
functions' bias plumbing on a NumPy stand-in for CuPy."""

from __future__ import annotations

import json
import math
import pathlib
import re
import sys
import types

import numpy
import pytest

from cupyconv import _geometry, bench, bench_zoo

# The zoo issue's table, as it was written (1D: kernel and input are single
# numbers; 2D: pairs; "(no bias)" marks bias off).
ISSUE_TABLE = """
Z1 BigVGAN-v2 24 kHz, up 1 | N4 | 1536->768 | K8 | L256 | s4 p2 op0 g1
Z2 BigVGAN-v2, up 2 | 4 | 768->384 | 8 | 1024 | 4 2 0 1
Z3 BigVGAN-v2, up 3 | 4 | 384->192 | 4 | 4096 | 2 1 0 1
Z4 BigVGAN-v2, up 6 | 4 | 48->24 | 4 | 32768 | 2 1 0 1
Z5 HiFi-GAN V3, up 1 | 16 | 256->128 | 16 | 32 | 8 4 0 1
Z6 HiFi-GAN V3, up 3 | 16 | 64->32 | 8 | 2048 | 4 2 0 1
Z7 DAC 44 kHz decoder, up 1 | 8 | 1536->768 | 16 | 33 | 8 4 0 1
Z8 DAC decoder, up 4 | 8 | 192->96 | 4 | 8448 | 2 1 0 1
Z9 Demucs v2 decoder 6 | 4 | 2048->1024 | 8 | 107 | 4 0 0 1
Z10 Demucs v2 decoder 3 | 4 | 256->128 | 8 | 6890 | 4 0 0 1
Z11 Demucs v2 decoder 1 | 4 | 64->8 | 8 | 110250 | 4 0 0 1
Z12 SepFormer decoder | 2 | 256->1 | 16 | 4000 | 8 0 0 1
Z13 DPRNN decoder | 4 | 64->1 | 2 | 32000 | 1 0 0 1
Z14 WaveGAN generator 1 | 64 | 1024->512 | 25 | 16 | 4 11 1 1
Z15 WaveGAN generator 5 | 64 | 64->1 | 25 | 4096 | 4 11 1 1
Z16 WaveGlow mel upsampler | 4 | 80->80 | 1024 | 63 | 256 0 0 1
Z17 HiFi-GAN V1 inference, long | 1 | 512->256 | 16 | 2000 | 8 4 0 1
Z18 depthwise 1D upsampler | 8 | 512->512 | 4 | 1024 | 2 1 0 512
Z19 pix2pix U-Net, up 2 | 16 | 1024->512 | 4x4 | 8x8 | 2 1 0 1
Z20 pix2pix U-Net, up 5 | 16 | 512->128 | 4x4 | 32x32 | 2 1 0 1
Z21 pix2pix U-Net, out | 16 | 128->3 | 4x4 | 128x128 | 2 1 0 1
Z22 SNGAN STL-10, up 1 | 64 | 512->256 | 4x4 | 6x6 | 2 1 0 1
Z23 SNGAN STL-10, up 3 | 64 | 128->64 | 4x4 | 24x24 | 2 1 0 1
Z24 CycleGAN generator, up 1 | 4 | 256->128 | 3x3 | 64x64 | 2 1 1 1
Z25 CycleGAN generator, up 2 | 4 | 128->64 | 3x3 | 128x128 | 2 1 1 1
Z26 U-Net, up 2 | 4 | 512->256 | 2x2 | 32x32 | 2 0 0 1
Z27 U-Net, high resolution | 16 | 64->32 | 2x2 | 256x256 | 2 0 0 1
Z28 nnU-Net 2D decoder | 12 | 320->256 | 2x2 | 16x16 | 2 0 0 1
Z29 Mask R-CNN mask head (RoIs as batch) | 256 | 256->256 | 2x2 | 14x14 | 2 0 0 1
Z30 SimpleBaselines pose head, 1 | 32 | 2048->256 | 4x4 | 8x6 | 2 1 0 1
Z31 SimpleBaselines pose head, 3 | 32 | 256->256 | 4x4 | 32x24 | 2 1 0 1
Z32 FCN-8s, 2x (no bias) | 4 | 21->21 | 4x4 | 16x16 | 2 0 0 1
Z33 FCN-8s, 8x (no bias) | 4 | 21->21 | 16x16 | 70x70 | 8 0 0 1
Z34 StyleGAN2 modulated upsampling (groups = batch 4) | 1 | 1024->1024 | 3x3 | 64x64 | 2 0 0 4
Z35 LapSRN image branch | 16 | 1->1 | 4x4 | 128x128 | 2 1 0 1
Z36 LapSRN feature branch | 16 | 64->64 | 4x4 | 64x64 | 2 1 0 1
Z37 DiffWave spectrogram upsampler | 16 | 1->1 | 3x32 | 80x200 | s(1,16) p(1,8) op0 g1
Z38 depthwise 2D upsampling | 16 | 96->96 | 3x3 | 56x56 | 2 1 1 96
Z39 ENet decoder bottleneck | 8 | 16->16 | 3x3 | 64x128 | 2 1 1 1
Z40 ENet full-resolution output | 8 | 16->19 | 3x3 | 256x512 | 2 1 1 1
Z41 DCGAN-64 latent projection | 128 | 100->512 | 4x4 | 1x1 | 1 0 0 1
Z42 RED-Net deconvolution (stride 1) | 16 | 64->64 | 3x3 | 256x256 | 1 1 0 1
Z43 stride-1 5x5 decoder, large image | 4 | 32->32 | 5x5 | 512x512 | 1 2 0 1
Z44 stride-1 asymmetric 1x7 / 7x1 pair (factorised decoders) | 8 | 128->128 | 1x7 | 128x128 | 1 p(0,3) 0 1
"""


def _issue_rows():
    """id -> the Problem fields the issue's line gives."""
    rows = {}
    for line in ISSUE_TABLE.strip().splitlines():
        name, batch, channels, kernel, size, params = (cell.strip() for cell in line.split("|"))
        zid, source = name.split(" ", 1)
        bias = not source.endswith(" (no bias)")
        source = source.removesuffix(" (no bias)")
        in_channels, out_channels = (int(c) for c in channels.split("->"))

        def numbers(text):
            return tuple(int(v) for v in re.sub(r"^[NKL]", "", text).split("x"))

        def value(token):
            values = tuple(int(v) for v in re.findall(r"\d+", token))
            return values[0] if len(values) == 1 else values

        stride, padding, output_padding, groups = (value(t) for t in re.findall(r"\([\d,]+\)|\d+", params))
        kernel, size = numbers(kernel), numbers(size)
        rows[zid] = dict(id=zid, dims=len(kernel), batch=int(batch.lstrip("N")), in_channels=in_channels, out_channels=out_channels,
                         kernel=kernel, size=size, stride=stride, padding=padding, output_padding=output_padding, dilation=1,
                         groups=groups, source=source, bias=bias)  # fmt: skip
    return rows


def test_the_zoo_is_the_issues_table():
    expected = _issue_rows()
    assert list(bench_zoo.ZOO) == [f"Z{n}" for n in range(1, 45)] == list(expected)
    for zid, problem in bench_zoo.ZOO.items():
        fields = {f: getattr(problem, f) for f in expected[zid]}
        assert fields == expected[zid], zid
    assert [p.id for p in bench_zoo.ZOO.values() if not p.bias] == ["Z32", "Z33"]
    assert bench_zoo.ZOO["Z37"].stride == (1, 16) and bench_zoo.ZOO["Z37"].padding == (1, 8)
    assert bench_zoo.ZOO["Z44"].padding == (0, 3) and bench_zoo.ZOO["Z44"].stride == 1


def test_the_halves_split_the_zoo_and_the_ids_are_distinct():
    assert list(bench_zoo.ZOO1) + list(bench_zoo.ZOO2) == list(bench_zoo.ZOO)
    assert len(bench_zoo.ZOO1) == len(bench_zoo.ZOO2) == 22
    assert not set(bench.PROBLEMS) & set(bench_zoo.ZOO)
    assert bench_zoo.SUITES["problems"] is bench.PROBLEMS and bench_zoo.SUITES["zoo"] is bench_zoo.ZOO
    assert not any(p.bias or p.source for p in bench.PROBLEMS.values())  # the old rows do not change


@pytest.mark.parametrize("problem", list(bench_zoo.ZOO.values()), ids=list(bench_zoo.ZOO))
def test_zoo_geometries_are_valid_and_match_torch(problem):
    g = problem.geometry()  # raises nothing
    pairs = lambda v: v if isinstance(v, tuple) else (v,) * problem.dims  # noqa: E731
    expected = tuple(
        _geometry.output_size(n, k, s, p, op, d)
        for n, k, s, p, op, d in zip(problem.size, problem.kernel, pairs(problem.stride), pairs(problem.padding),
                                     pairs(problem.output_padding), pairs(problem.dilation))
    )  # fmt: skip
    assert g.output_shape == (problem.batch, problem.out_channels) + expected
    assert all(n > 0 for n in expected)
    torch = pytest.importorskip("torch")
    x = torch.empty((problem.batch, problem.in_channels) + problem.size, device="meta")
    w = torch.empty((problem.in_channels, problem.out_channels // problem.groups) + problem.kernel, device="meta")
    b = torch.empty((problem.out_channels,), device="meta") if problem.bias else None
    fn = torch.nn.functional.conv_transpose1d if problem.dims == 1 else torch.nn.functional.conv_transpose2d
    assert tuple(fn(x, w, b, **problem.kwargs).shape) == g.output_shape


def test_describe_spells_tuples_and_the_bias():
    zoo = bench_zoo.ZOO
    assert zoo["Z37"].describe() == "2D N16 Ci1 Co1 K3x32 L80x200 s1x16 p1x8 bias"
    assert zoo["Z44"].describe() == "2D N8 Ci128 Co128 K1x7 L128x128 p0x3 bias"
    assert zoo["Z32"].describe() == "2D N4 Ci21 Co21 K4x4 L16x16 s2"
    assert zoo["Z1"].describe() == "1D N4 Ci1536 Co768 K8 L256 s4 p2 bias"
    same = bench.Problem("T", 2, 1, 4, 4, (3, 3), (8, 8), stride=(2, 2), padding=(0, 0), output_padding=(1, 1), dilation=(1, 1))
    assert same.describe() == "2D N1 Ci4 Co4 K3x3 L8x8 s2 op1"
    assert bench.PROBLEMS["P3"].describe() == "1D N16 Ci64 Co32 K5 L65536 s2 p1 op1 g4"


def test_the_floors_count_the_bias():
    problem = bench_zoo.ZOO["Z35"]  # 1 -> 1 channel: memory-bound, so the bias's bytes show
    without = bench.dataclasses.replace(problem, bias=False)
    for floor in (bench.floor_seconds, bench.backward_floor_seconds):
        assert floor(problem, "float32", "tf32") - floor(without, "float32", "tf32") == pytest.approx(4 / bench.COPY_BANDWIDTH)
    assert problem.geometry() == without.geometry()  # the bias changes no size


def _row(problem_id, mode, ours, default, benchmark, backward=False):
    problem = bench_zoo.ALL[problem_id]
    dtype, precision = bench.MODES[mode]
    torch_ms = None if default is None else min(default, benchmark)
    floor = (bench.backward_floor_seconds if backward else bench.floor_seconds)(problem, dtype, precision) * 1e3
    return bench.Row(problem, dtype, precision, ours, torch_ms, floor, 100.0, 1.0, 1e-7, None if default is None else 2e-7, backward,
                     None if default is None else benchmark < default, default, benchmark)  # fmt: skip


def _suite_rows():
    return [
        _row("Z1", "highest", 0.5, 1.0, 2.0),
        _row("Z19", "highest", 2.0, 1.5, 1.0),
        _row("Z1", "highest", 1.0, 4.0, 2.0, backward=True),
        _row("Z37", "float16", 0.1, 0.4, 0.8),
    ]


def test_the_suite_table_and_its_geometric_means():
    rows = _suite_rows()
    text = bench_zoo.format_suite_table(rows)
    lines = text.splitlines()
    assert lines[0] == ("| id | model | problem | mode | cupyconv ms | torch default ms | torch benchmark ms | speed-up | floor ms | "
                        "% of floor | error | torch error |")  # fmt: skip
    assert lines[2].startswith("| Z1 | BigVGAN-v2 24 kHz, up 1 | 1D N4 Ci1536 Co768 K8 L256 s4 p2 bias | float32 highest | 0.500 | 1.000 | 2.000 | 2.00x |")
    assert lines[3].startswith("| Z19 | pix2pix U-Net, up 2 | 2D N16 Ci1024 Co512 K4x4 L8x8 s2 p1 bias | float32 highest | 2.000 | 1.500 | 1.000 | 0.50x |")
    assert "| float32 highest, backward | 1.000 | 4.000 | 2.000 | 2.00x |" in lines[4]
    assert lines[5].startswith("| Z37 | DiffWave spectrogram upsampler | 2D N16 Ci1 Co1 K3x32 L80x200 s1x16 p1x8 bias | float16 |")
    assert all(len(line.strip("|").split("|")) == 12 for line in lines[:6])

    means = bench_zoo.geometric_means(rows)
    assert [(m["dtype"], m["precision"], m["backward"], m["rows"]) for m in means] == [
        ("float32", "highest", False, 2), ("float32", "highest", True, 1), ("float16", "highest", False, 1)]  # fmt: skip
    forward = means[0]
    assert forward["speedup"] == pytest.approx(math.sqrt(2.0 * 0.5))  # against the faster: 1.0 / 0.5 and 1.0 / 2.0
    assert forward["speedup_default"] == pytest.approx(math.sqrt(2.0 * 0.75))
    assert forward["floor_fraction"] == pytest.approx(math.sqrt(rows[0].floor_ms / 0.5 * rows[1].floor_ms / 2.0))
    assert forward["torch_floor_fraction"] == pytest.approx(math.sqrt(rows[0].floor_ms / 1.0 * rows[1].floor_ms / 1.0))
    assert forward["wins"] == 1
    summary = [line for line in lines if line.startswith("geometric mean")]
    assert summary[0].startswith("geometric mean, float32 highest, forward (2 rows): 1.00x against the faster torch, 1.22x against cuDNN's default;")
    assert summary[0].endswith("cupyconv faster on 1 of 2")
    assert summary[1].startswith("geometric mean, float32 highest, backward (1 rows): 2.00x against the faster torch, 4.00x")
    assert len(summary) == 3


def test_suite_rows_without_torch_format():
    rows = [_row("Z2", "tf32", 0.5, None, None)]
    text = bench_zoo.format_suite_table(rows)
    assert "| float32 tf32 | 0.500 | - | - | - |" in text
    assert "cupyconv" in text.splitlines()[-1] and "(torch not timed)" in text.splitlines()[-1]


def test_the_suite_table_is_not_read_back_as_the_problem_table(tmp_path):
    """load_markdown reads the 12-column P/X tables; a suite table (12
    columns too) gives it no rows."""
    path = tmp_path / "zoo.md"
    path.write_text("GPU Test\n\n" + bench_zoo.format_suite_table(_suite_rows()) + "\n")
    assert bench.load_markdown(str(path)) == ("GPU Test", [])


def test_the_kept_zoo_run_is_in_benchmarks_md():
    """docs/data/zoo.json is the whole zoo in the four modes, both
    directions; its table (docs/data/zoo.md, as --from-json makes it) is in
    BENCHMARKS.md with its geometric means."""
    root = pathlib.Path(__file__).resolve().parent.parent
    environment, rows = bench_zoo.load_json(str(root / "docs" / "data" / "zoo.json"), with_environment=True)
    assert len(rows) == len(bench_zoo.ZOO) * len(bench.ALL_MODES) * 2
    assert [r.problem for r in rows[: len(bench_zoo.ZOO)]] == list(bench_zoo.ZOO.values())
    table = bench_zoo.format_suite_table(rows)
    assert (root / "docs" / "data" / "zoo.md").read_text(encoding="utf-8") == environment + "\n\n" + table + "\n"
    assert environment + "\n\n" + table in (root / "BENCHMARKS.md").read_text(encoding="utf-8")


def test_json_round_trip(tmp_path):
    rows = _suite_rows() + [bench.Row(bench.PROBLEMS["P1"], "float32", "highest", 1.0, 2.0, 0.5, 10.0, 1.0, 1e-7, 2e-7)]
    path = tmp_path / "rows.json"
    bench_zoo.write_json(str(path), rows, "GPU Test GPU, CuPy 0")
    data = json.loads(path.read_text())
    assert data["environment"] == "GPU Test GPU, CuPy 0"
    first = data["rows"][0]
    assert first["problem"]["id"] == "Z1" and first["problem"]["source"] == "BigVGAN-v2 24 kHz, up 1" and first["problem"]["bias"] is True
    assert (first["mode"], first["direction"], first["torch_default_ms"], first["torch_benchmark_ms"], first["torch_benchmark"]) == (
        "float32 highest", "forward", 1.0, 2.0, False)  # fmt: skip
    assert data["rows"][2]["direction"] == "backward" and data["rows"][1]["torch_faster"] == "benchmark"
    assert first["torch_faster"] == "default" and data["rows"][4]["torch_faster"] is None
    assert data["cupyconv"] == __import__("cupyconv").__version__
    loaded = bench_zoo.load_json(str(path))
    assert loaded == rows  # problems rebuilt with their tuples
    assert loaded[3].problem.stride == (1, 16) and loaded[3].problem == bench_zoo.ZOO["Z37"]
    environment, again = bench_zoo.load_json(str(path), with_environment=True)
    assert environment == "GPU Test GPU, CuPy 0" and again == rows


def test_list_shows_every_suite_with_the_models(capsys):
    assert bench.main(["--list"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if not line.startswith("# ")]
    assert [line.split(":")[0].split(" ")[0] for line in lines] == list(bench.PROBLEMS) + list(bench_zoo.ZOO)
    for problem in bench_zoo.ZOO.values():
        line = next(line for line in lines if line.startswith(problem.id + ":"))
        assert line.endswith(f"bias={problem.bias}; from {problem.source}")
    assert "Z37: 2D N16 Ci1 Co1 K3x32 L80x200 s1x16 p1x8 bias; input (16, 1, 80, 200), weight (1, 1, 3, 32), stride=(1, 16)," in out
    assert sum(line.startswith("# ") for line in out.splitlines()) == 2


def _args(argv):
    """bench.main's parsed arguments, and its parser (main parses, so its
    parser is rebuilt here through the same add_arguments)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--problems")
    parser.add_argument("--backward", action="store_true")
    bench_zoo.add_arguments(parser)
    return parser, parser.parse_args(argv)


@pytest.mark.parametrize("argv, expected", [
    ([], list(bench.DEFAULT_PROBLEMS)),
    (["--problems", "all"], list(bench.PROBLEMS)),
    (["--suite", "zoo"], list(bench_zoo.ZOO)),
    (["--suite", "zoo", "--problems", "all"], list(bench_zoo.ZOO)),
    (["--suite", "zoo1"], [f"Z{n}" for n in range(1, 23)]),
    (["--suite", "zoo2", "--problems", "all"], [f"Z{n}" for n in range(23, 45)]),
    (["--suite", "zoo", "--problems", "Z1,Z19"], ["Z1", "Z19"]),
    (["--problems", "Z1, Z19,P2"], ["Z1", "Z19", "P2"]),
])  # fmt: skip
def test_selection(argv, expected):
    parser, args = _args(argv)
    assert [p.id for p in bench_zoo.select(parser, args)] == expected


def test_directions():
    for argv, expected in (([], [False]), (["--backward"], [True]), (["--direction", "both"], [False, True]),
                           (["--direction", "backward", "--backward"], [True])):  # fmt: skip
        assert bench_zoo.directions(*_args(argv)) == expected
    with pytest.raises(SystemExit):
        bench_zoo.directions(*_args(["--backward", "--direction", "both"]))


@pytest.mark.parametrize("argv, named", [
    (["--suite", "zoo"], "--suite zoo needs a CUDA GPU"),
    (["--suite", "zoo1", "--problems", "Z1"], "--suite zoo1 needs a CUDA GPU"),
    (["--problems", "Z1,Z19"], "--problems with zoo ids needs a CUDA GPU"),
    (["--suite", "zoo", "--json", "out.json"], "--json, --suite zoo need a CUDA GPU"),
])  # fmt: skip
def test_the_zoo_is_refused_without_a_gpu(argv, named, capsys):
    if bench._gpu_available():
        pytest.skip("a GPU is here: the zoo runs")
    with pytest.raises(SystemExit) as exit:
        bench.main(argv)
    assert exit.value.code == 2
    assert named in capsys.readouterr().err


def test_unknown_ids_are_refused(capsys):
    with pytest.raises(SystemExit) as exit:
        bench.main(["--problems", "Z45"])
    assert exit.value.code == 2
    assert "unknown problem ids ['Z45']" in capsys.readouterr().err


def test_from_json_makes_one_table_without_a_gpu(tmp_path, capsys):
    """A suite split over device calls: the calls' --json files make one
    table, --markdown, --json and --plot, on a machine without a GPU."""
    rows = _suite_rows()
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    bench_zoo.write_json(str(first), rows[:2], "GPU Test, call 1")
    bench_zoo.write_json(str(second), rows[2:], "GPU Test, call 2")
    argv = ["--from-json", str(first), str(second), "--markdown", str(tmp_path / "zoo.md"), "--json", str(tmp_path / "all.json")]
    plotting = True
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        plotting = False
    if plotting:
        argv += ["--plot", str(tmp_path / "zoo.png")]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert out == bench_zoo.format_suite_table(rows) + "\n"
    assert (tmp_path / "zoo.md").read_text() == "GPU Test, call 1 | GPU Test, call 2\n\n" + bench_zoo.format_suite_table(rows) + "\n"
    assert bench_zoo.load_json(str(tmp_path / "all.json")) == rows
    if plotting:
        assert (tmp_path / "zoo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _pyplot():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def test_the_floor_chart_has_a_panel_per_mode_and_direction():
    plt = _pyplot()
    fig = bench.figure(_suite_rows(), kind="floor")
    try:  # a row of panels per mode, a column per direction; float16 has no backward panel
        assert [ax.get_title() for ax in fig.axes] == ["float32 highest", "float32 highest, backward", "float16"]
    finally:
        plt.close(fig)


def test_a_suites_chart_is_its_speedups_on_a_log_axis():
    """The zoo's rows reach a few percent of their floors, so their chart is
    the speed-up: a panel per mode, a bar per row and direction from 1.0 to
    torch ms / cupyconv ms on a log axis, the geometric means in the title,
    2D problems on a band."""
    plt = _pyplot()
    from cupyconv import bench_plot

    rows = _suite_rows()
    assert bench_plot.default_kind(rows) == "speedup"
    assert bench_plot.default_kind(_problem_rows()) == "floor"
    untimed = [_row("Z2", "tf32", 0.5, None, None)]
    assert bench_plot.default_kind(untimed) == "floor"  # nothing to divide by
    with pytest.raises(ValueError):
        bench_plot.speedup_figure(untimed)
    with pytest.raises(ValueError):
        bench.figure(rows, kind="bars")
    fig = bench.figure(rows)
    try:
        highest, half = fig.axes
        assert highest.get_yscale() == half.get_yscale() == "log"
        assert highest.get_title() == ("float32 highest: geometric mean forward 1.00x, faster on 1 of 2; "
                                       "backward 2.00x, faster on 1 of 1")  # fmt: skip
        assert half.get_title() == "float16: geometric mean forward 4.00x, faster on 1 of 1"
        assert [t.get_text() for t in highest.get_xticklabels()] == ["Z1", "Z19"]
        bars = [(round(b.get_x() + b.get_width() / 2, 3), round(b.get_y() + b.get_height(), 6)) for c in highest.containers for b in c]
        assert bars == [(-0.2, 2.0), (0.8, 0.5), (0.2, 2.0)]  # (x, top): Z1 and Z19 forward, then Z1 backward
        assert all(b.get_y() == 1.0 for c in highest.containers for b in c)  # from the 1.0 line, down where torch is faster
        assert 1.0 in [line.get_ydata()[0] for line in highest.get_lines()]
        bands = [p for p in highest.patches if not any(p in c for c in highest.containers)]
        assert len(bands) == 1  # Z19, the 2D problem (Z37 is float16's)
    finally:
        plt.close(fig)


def _problem_rows():
    return [bench.Row(bench.PROBLEMS["P1"], "float32", "highest", 1.0, 2.0, 0.5, 10.0, 1.0, 1e-7, 2e-7)]


def test_progress_yields_every_problem(monkeypatch, capsys):
    problems = list(bench_zoo.ZOO.values())[:3]
    assert list(bench_zoo.progress(problems, "float32 highest, forward")) == problems
    assert capsys.readouterr().out == ""  # (stderr only, and off where it is not a terminal)


# --- the run functions on a NumPy stand-in for CuPy: the bias reaches both
# sides, grad_bias is asked for and compared, both torch times are kept.


class _Rng:
    def __init__(self, seed):
        self.rng = numpy.random.default_rng(seed)

    def standard_normal(self, shape, dtype):
        return self.rng.standard_normal(shape).astype(dtype)

    def uniform(self, low, high, size, dtype):
        return self.rng.uniform(low, high, size).astype(dtype)


def _fake_cupy():
    cupy = types.ModuleType("cupy")
    cupy.random = types.SimpleNamespace(default_rng=_Rng)
    cupy.asnumpy = numpy.asarray
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    cupy.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceProperties=lambda device: {"name": b"NVIDIA H200"}),
        Device=lambda: types.SimpleNamespace(id=0),
    )  # fmt: skip
    return cupy


@pytest.mark.parametrize("backward", [False, True])
def test_the_run_functions_pass_the_bias(backward, monkeypatch):
    torch = pytest.importorskip("torch")
    import cupyconv

    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    timed = []

    def medians(sides, warmup, repeat):
        for fn, context in sides:
            with context():
                timed.append(fn())
        return [1.0, 3.0, 2.0]

    monkeypatch.setattr(bench, "_medians_ms", medians)
    masks = []
    for name in ("conv_transpose1d_backward", "conv_transpose2d_backward"):
        real = getattr(cupyconv, name)

        def spy(*args, real=real, **kwargs):
            masks.append(kwargs["output_mask"])
            return real(*args, **kwargs)

        monkeypatch.setattr(cupyconv, name, spy)

    problems = [
        bench.Problem("T1", 1, 2, 4, 6, (4,), (9,), stride=2, padding=1, source="a test layer", bias=True),
        bench.Problem("T2", 2, 2, 4, 6, (3, 5), (5, 4), stride=(1, 3), padding=(1, 2), output_padding=(0, 1), groups=2, bias=True),
        bench.Problem("T3", 1, 2, 4, 6, (3,), (7,)),  # no bias
    ]
    if backward:
        rows = bench.run_gpu_backward(problems, "float32", "highest", 1, 4)
        assert masks == [(True, True, True)] * 4 + [(True, True, False)] * 2  # (each timed once here, then run for the errors)
        assert [len(t) for t in timed[1::3]] == [3, 3, 2]  # torch's gradients: input, weight and bias where there is one
    else:
        rows = bench.run_gpu(problems, "float32", "highest", 1, 4, use_torch=True)
        assert [tuple(t.shape) for t in timed[1::3]] == [p.geometry().output_shape for p in problems]
    for row, problem in zip(rows, problems):
        assert row.problem is problem and row.backward is backward
        assert (row.ours_ms, row.torch_ms, row.torch_benchmark, row.torch_default_ms, row.torch_benchmark_ms) == (1.0, 2.0, True, 3.0, 2.0)
        # Errors against float64 that would be of order one if a side missed the bias (or grad_bias were compared with grad_weight).
        assert row.ours_error < 1e-6 and row.torch_error < 1e-6
        floor = bench.backward_floor_seconds if backward else bench.floor_seconds
        assert row.floor_ms == pytest.approx(floor(problem, "float32", "highest", 4.20e12) * 1e3)
