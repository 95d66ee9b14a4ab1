"""The benchmark's arithmetic and outputs, without a GPU: floors against the
anchors the forward-performance issue lists, the Markdown table and the plot."""

from __future__ import annotations

import pathlib

import pytest

from cupyconv import bench

# Floors in ms from the issue's table (H100: copy 2.96 TB/s, TF32 404 TFLOP/s,
# FP16 748, float32-accurate counted as three TF32 products).
ANCHORS = {
    "P1": (0.64, 0.54, 0.27),
    "P2": (3.06, 1.45, 0.73),
    "P3": (0.18, 0.18, 0.09),
    "P4": (0.45, 0.45, 0.23),
    "P5": (0.29, 0.29, 0.14),
    "X1": (0.27, 0.27, 0.14),
    "X2": (2.04, 0.68, 0.37),
    "X3": (0.26, 0.10, 0.05),
}


@pytest.mark.parametrize("problem_id", sorted(ANCHORS))
def test_floors_match_the_issue_anchors(problem_id):
    problem = bench.PROBLEMS[problem_id]
    computed = [bench.floor_seconds(problem, d, p) * 1e3 for d, p in (("float32", "highest"), ("float32", "tf32"), ("float16", "highest"))]
    for value, anchor in zip(computed, ANCHORS[problem_id]):
        assert value == pytest.approx(anchor, rel=0.06, abs=0.006)


def test_floors_take_the_gpus_copy_bandwidth():
    """An H200's floors take its own copy bandwidth (4.20 TB/s, perf notes
    v54), other GPUs the H100's: memory-bound floors fall with it,
    compute-bound ones stay."""
    h200 = bench.copy_bandwidth("NVIDIA H200")
    assert h200 == 4.20e12
    assert bench.copy_bandwidth("NVIDIA H100 80GB HBM3") == bench.copy_bandwidth("NVIDIA A100-SXM4-40GB") == bench.COPY_BANDWIDTH
    assert bench.copy_bandwidth("NVIDIA GH200 480GB") == bench.COPY_BANDWIDTH  # another part, not measured here
    memory_bound, compute_bound = bench.PROBLEMS["X1"], bench.PROBLEMS["X2"]
    for floor in (bench.floor_seconds, bench.backward_floor_seconds):
        assert floor(memory_bound, "float16", "highest", h200) == pytest.approx(floor(memory_bound, "float16", "highest") * 2.96 / 4.20)
        assert floor(compute_bound, "float16", "highest", h200) == floor(compute_bound, "float16", "highest")


def _rows():
    rows = []
    for mode in ("highest", "float16"):
        dtype, precision = bench.MODES[mode]
        for i, problem_id in enumerate(("P1", "X4")):
            problem = bench.PROBLEMS[problem_id]
            floor = bench.floor_seconds(problem, dtype, precision) * 1e3
            rows.append(bench.Row(problem, dtype, precision, floor * (2 + i), floor * 3, floor, 100.0, 1.0, 1e-7, 2e-7))
    return rows


def test_table_has_a_line_per_row():
    table = bench.format_table(_rows()).splitlines()
    assert table[0].startswith("| id | problem | dtype | cupyconv ms | torch ms | speed-up")
    assert len(table) == 2 + 4
    assert "| P1 | 1D N32 Ci32 Co64 K5 L131072 d3 | float32 highest |" in table[2]
    assert "| 1.50x |" in table[2] and "| 50% |" in table[2]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "floors.png"
    bench.plot(_rows(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_modes_are_refused():
    with pytest.raises(SystemExit):
        bench.main(["--modes", "float8"])


def test_markdown_round_trip(tmp_path):
    rows = _rows()
    path = tmp_path / "bench.md"
    path.write_text("GPU Test GPU, CuPy 0\n\n" + bench.format_table(rows) + "\n")
    environment, loaded = bench.load_markdown(str(path))
    assert environment == "GPU Test GPU, CuPy 0"
    assert [(r.problem.id, r.dtype, r.precision) for r in loaded] == [(r.problem.id, r.dtype, r.precision) for r in rows]
    for a, b in zip(loaded, rows):
        assert a.ours_ms == pytest.approx(b.ours_ms, rel=1e-3, abs=1e-3) and a.torch_ms == pytest.approx(b.torch_ms, rel=1e-3, abs=1e-3)


def test_benchmarks_md_opens_with_the_kept_problems_run():
    """BENCHMARKS.md's first tables are docs/data/problems.json's rows (the
    run notebook 03 shows where there is no GPU): load_markdown reads its
    forward table back, and both tables are the JSON's, as the bench prints
    them."""
    from cupyconv import bench_zoo

    root = pathlib.Path(__file__).parent.parent
    text = (root / "BENCHMARKS.md").read_text(encoding="utf-8")
    kept_environment, kept = bench_zoo.load_json(str(root / "docs" / "data" / "problems.json"), with_environment=True)
    assert len(kept) == 2 * len(bench.PROBLEMS) * len(bench.ALL_MODES)  # forward and backward, every mode
    environment, rows = bench.load_markdown(str(root / "BENCHMARKS.md"))
    assert environment == kept_environment and environment.startswith("GPU NVIDIA H200")
    forward = [r for r in kept if not r.backward]
    assert [(r.problem.id, r.dtype, r.precision) for r in rows] == [(r.problem.id, r.dtype, r.precision) for r in forward]
    for a, b in zip(rows, forward):
        assert a.ours_ms == pytest.approx(b.ours_ms, abs=5e-4) and a.torch_ms == pytest.approx(b.torch_ms, abs=5e-4)
    for direction in (False, True):
        assert bench.format_table([r for r in kept if r.backward is direction]) in text


# Backward floors from the backward-performance issue's table (fp32-accurate, TF32).
BACKWARD_ANCHORS = {
    "P1": (1.28, 0.73),
    "P2": (6.12, 2.18),
    "P3": (0.27, 0.27),
    "P4": (0.54, 0.54),
    "X1": (0.36, 0.36),
    "X2": (4.08, 1.36),
    "X3": (0.51, 0.17),
}


@pytest.mark.parametrize("problem_id", sorted(BACKWARD_ANCHORS))
def test_backward_floors_match_the_issue_anchors(problem_id):
    problem = bench.PROBLEMS[problem_id]
    for precision, anchor in zip(("highest", "tf32"), BACKWARD_ANCHORS[problem_id]):
        assert bench.backward_floor_seconds(problem, "float32", precision) * 1e3 == pytest.approx(anchor, rel=0.06, abs=0.006)


def test_backward_rows_are_labelled_and_not_read_back_as_forward(tmp_path):
    rows = _rows()
    rows[0].backward = True
    table = bench.format_table(rows)
    assert "| float32 highest, backward |" in table
    path = tmp_path / "bench.md"
    path.write_text(table + "\n")
    assert len(bench.load_markdown(str(path))[1]) == len(rows) - 1


def test_sides_are_timed_in_alternating_rounds(monkeypatch):
    """Each side's timed calls come in ROUNDS rounds, cupyconv and torch in
    turn (the order reversed every other round), a side's context around
    its own rounds only; the medians are over all of a side's calls."""
    import contextlib
    from types import SimpleNamespace

    cupyx_profiler = pytest.importorskip("cupyx.profiler")
    log, inside = [], []

    def benchmark(fn, n_warmup, n_repeat):
        name = fn()
        log.append((name, n_warmup, n_repeat, bool(inside)))
        times = {"ours": 0.001, "theirs": 0.003}[name]
        return SimpleNamespace(gpu_times=[[times * (1 + k) for k in range(n_repeat)]])

    class Context:
        def __enter__(self):
            inside.append(1)

        def __exit__(self, *exc):
            inside.pop()

    monkeypatch.setattr(cupyx_profiler, "benchmark", benchmark)
    ours, theirs = bench._medians_ms([(lambda: "ours", contextlib.nullcontext), (lambda: "theirs", Context)], 5, 20)
    assert bench.ROUNDS == 4
    assert [entry[0] for entry in log] == ["ours", "theirs", "theirs", "ours", "ours", "theirs", "theirs", "ours"]
    assert [entry[1] for entry in log] == [5, 5, 1, 1, 1, 1, 1, 1]  # warm-up before each side's first round, then one
    assert all(entry[2] == 5 for entry in log)
    assert all(entry[3] == (entry[0] == "theirs") for entry in log)
    assert ours == pytest.approx(1.0 * 3) and theirs == pytest.approx(3.0 * 3)  # medians of 1..5 ms x 1 and x 3, four rounds each



def test_version_and_list(capsys):
    from cupyconv import __main__, __version__

    assert __main__.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"cupyconv {__version__}"
    assert bench.main(["--list"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("# ")]  # (the suites' headings)
    assert [line.split(":")[0].split(" ")[0] for line in lines][: len(bench.PROBLEMS)] == list(bench.PROBLEMS)
    assert lines[0].startswith("P1 (default): 1D N32 Ci32 Co64 K5 L131072 d3; input (32, 32, 131072), weight (32, 64, 5), ")


@pytest.mark.parametrize("option", [["--markdown", "out.md"], ["--plot", "out.png"], ["--backward"], ["--adapter"], ["--autotune"],
                                    ["--json", "out.json"], ["--direction", "both"]])  # fmt: skip
def test_gpu_options_are_refused_without_a_gpu(option, capsys):
    """Without a GPU, options that only the GPU run serves exit non-zero with
    a message, rather than writing nothing."""
    if option[0] == "--plot":
        pytest.importorskip("matplotlib")
    if bench._gpu_available():
        pytest.skip("a GPU is here: these options run the benchmark")
    with pytest.raises(SystemExit) as exit:
        bench.main(option)
    assert exit.value.code != 0
    assert f"{option[0]} needs a CUDA GPU" in capsys.readouterr().err


def test_torch_is_timed_both_ways_and_the_faster_kept(monkeypatch):
    """torch runs under cuDNN's default and with cudnn.benchmark = True in the
    same rounds, its TF32 flag as the mode asks; the faster is the one
    compared, and the flags are restored after."""
    import torch

    seen = []

    def medians(sides, warmup, repeat):
        for _, context in sides[1:]:
            with context():
                seen.append((torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32))
        return [1.0, 3.0, 2.0]

    before = torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32
    monkeypatch.setattr(bench, "_medians_ms", medians)
    # (ours, the faster torch, whether benchmark was the faster, torch's default, torch's benchmark)
    assert bench._faster_torch(None, None, True, torch, 1, 4) == (1.0, 2.0, True, 3.0, 2.0)
    assert seen == [(False, True), (True, True)]
    seen.clear()
    monkeypatch.setattr(bench, "_medians_ms", lambda sides, warmup, repeat: (medians(sides, warmup, repeat), [1.0, 2.0, 3.0])[1])
    assert bench._faster_torch(None, None, False, torch, 1, 4) == (1.0, 2.0, False, 2.0, 3.0)
    assert seen == [(False, False), (True, False)]
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32) == before


def test_from_json_refuses_the_options_that_run_on_a_gpu(tmp_path, capsys):
    for option in ("--adapter", "--autotune"):
        with pytest.raises(SystemExit) as exit:
            bench.main(["--from-json", str(tmp_path / "saved.json"), option])
        assert exit.value.code == 2 and option in capsys.readouterr().err
    assert not bench._autotune.enabled()  # a refused command turns nothing on
