"""The model suite of `bench --models`.  Without a GPU: each model's shapes
at full scale (on the meta device) against its paper, the converted model
against the unconverted one on the CPU (where the adapter runs torch's own
operators, so torch's model is the oracle), the timing rounds, the report and
the refusals.  On a GPU: the whole suite at a tiny scale, whose graphed
training steps must give the eager steps' losses."""

from __future__ import annotations

import copy
import os

import pytest

torch = pytest.importorskip("torch")

from gpu_available import HAVE_GPU

from cupyconv import bench, bench_models, models

HAVE_CUDA = HAVE_GPU and torch.cuda.is_available()
if os.environ.get("CUPYCONV_REQUIRE_GPU") == "1" and not HAVE_CUDA:
    raise RuntimeError("CUPYCONV_REQUIRE_GPU=1 but torch sees no CUDA GPU")

TINY = 1 / 16


def _runnable(name):
    reason = bench_models.unavailable(name)
    if reason is not None:
        pytest.skip(reason)
    return bench_models.MODELS[name]


# Output shapes at the papers' training sizes, and the transposed
# convolutions that convert() swaps.
SHAPES = {
    "hifigan": ((16, 1, 8192), 4),  # 256 samples a mel frame, 32 frames
    "dcgan": ((128, 3, 64, 64), 5),
    "pix2pix": ((16, 3, 256, 256), 8),
    "hdemucs": ((4, 4, 2, 4 * 44100), 9),  # 4 sources of the stereo mixture
}


@pytest.mark.parametrize("name", list(bench_models.MODELS))
def test_full_scale_shapes(name):
    spec = _runnable(name)
    shape, transposed = SHAPES[name]
    inputs, target = spec.batch(torch.device("meta"), torch.Generator().manual_seed(0), 1.0)
    assert tuple(target.shape) == shape
    if name == "hdemucs":
        # torch.istft has no meta kernel: the full-width model on a short clip keeps its length.
        torch.manual_seed(0)
        model = spec.build(1.0)
        with torch.no_grad():
            assert tuple(model(torch.randn(1, 2, 8192)).shape) == (1, 4, 2, 8192)
    else:
        with torch.device("meta"):
            model = spec.build(1.0)
        assert tuple(model(*inputs).shape) == shape
    assert sum(isinstance(m, (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d)) for m in model.modules()) == transposed


def test_hifigan_matches_its_paper():
    """V1's 13.92M parameters (Kong et al. 2020, Table 1; weight norm's
    gains, left out here, are 0.2% of them) and 256 output samples a mel
    frame, here over 10 s at 22,050 Hz."""
    spec = bench_models.MODELS["hifigan"]
    with torch.device("meta"):
        model = spec.build(1.0)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(13.92e6, rel=2e-3)
    (mel,) = spec.inference(torch.device("meta"), torch.Generator(), 1.0)
    assert tuple(mel.shape) == (1, 80, 862)
    assert tuple(model(mel).shape) == (1, 1, 256 * 862)


def test_unet_has_the_papers_layers():
    """pix2pix's encoder C64-C128-C256-C512 x5 down to 1x1, BatchNorm on all
    but the first and the innermost, dropout in the three innermost decoder
    blocks, and biases only where no BatchNorm follows."""
    model = models.UNetGenerator()
    convs = [block[-2] if isinstance(block[-1], torch.nn.BatchNorm2d) else block[-1] for block in model.down]
    assert [c.out_channels for c in convs] == [64, 128, 256, 512, 512, 512, 512, 512]
    assert [isinstance(block[-1], torch.nn.BatchNorm2d) for block in model.down] == [False] + [True] * 6 + [False]
    assert [any(isinstance(m, torch.nn.Dropout) for m in block) for block in model.up] == [True] * 3 + [False] * 5
    for block in list(model.down) + list(model.up):
        conv = next(m for m in block if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)))
        assert (conv.bias is None) == any(isinstance(m, torch.nn.BatchNorm2d) for m in block)


@pytest.mark.parametrize("name", list(bench_models.MODELS))
def test_converted_model_matches_torch_on_the_cpu(name):
    """A tiny model's forward and backward through cupyconv.torch.convert
    against the unconverted model (same seed for dropout)."""
    spec = _runnable(name)
    torch.manual_seed(0)
    model = spec.build(TINY)
    inputs, target = spec.batch(torch.device("cpu"), torch.Generator().manual_seed(0), TINY)
    results = []
    for candidate in (model, _convert(copy.deepcopy(model))):
        torch.manual_seed(1)
        output = candidate(*inputs)
        spec.loss(output, target).backward()
        results.append((output, [p.grad for p in candidate.parameters()]))
    (expected, expected_grads), (output, grads) = results
    torch.testing.assert_close(output, expected)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad)


def _convert(model):
    import cupyconv.torch

    converted = cupyconv.torch.convert(model)
    assert any(type(m).__module__.startswith("cupyconv") for m in converted.modules())
    return converted


def test_sides_alternate_in_rounds(monkeypatch):
    """As bench._medians_ms: ROUNDS rounds, the sides' order reversed every
    other round, warm-up before a side's first round and one step before
    each later one; the step time is the events' over the round's steps, the
    host time the clock's to the last call's return."""
    log = []

    class Event:
        def __init__(self, enable_timing):
            pass

        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return 12.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    sides = [(lambda: log.append("a"), bench_models.contextlib.nullcontext), (lambda: log.append("b"), bench_models.contextlib.nullcontext)]
    times = bench_models._time(sides, warmup=2, repeat=8)
    per_round = 8 // bench.ROUNDS
    first = ["a"] * (2 + per_round) + ["b"] * (2 + per_round)
    later = ["b"] * (1 + per_round) + ["a"] * (1 + per_round)
    assert log == first + later + later[::-1] + later
    assert [step for step, _ in times] == [12.0 / per_round] * 2
    assert all(host >= 0 for _, host in times)


def _row(section, **times):
    return bench_models.ModelRow(section, "dcgan", "tf32", **times)


def test_report_tables():
    check = bench_models.LossCheck(2e-6, 1e-4)
    rows = [
        _row("training", torch_default_ms=12.0, torch_benchmark_ms=8.0, ours_ms=4.0, torch_host_ms=1.0, ours_host_ms=3.9,
             torch_gpu_ms=7.6, ours_gpu_ms=2.0),
        _row("graphed", torch_benchmark_ms=7.0, ours_ms=3.5, torch_check=check, ours_check=bench_models.LossCheck(3e-3, 1e-3)),
        _row("graphed", torch_check=check, ours_check=bench_models.LossCheck(None, 1e-3), notes=["converted capture: RuntimeError: x|y"]),
        bench_models.ModelRow("skipped", "hdemucs", "-", notes=["torchaudio is not importable"]),
    ]  # fmt: skip
    text = bench_models.format_report(rows, "GPU Test", warmup=5, repeat=20)
    lines = text.splitlines()
    assert "GPU Test" in lines and "Skipped hdemucs: torchaudio is not importable" in lines
    assert "| dcgan | tf32 | 12.00 / 8.000 | 4.000 | 2.00x | 1.000 / 3.900 | 7.600 / 2.000 | 95% / 50% |  |" in lines
    assert "| dcgan | tf32 | 7.000 | 3.500 | 2.00x | - / - | - / - | - / - | pass (2.0e-06) / FAIL (3.0e-03) |  |" in lines
    assert "| dcgan | tf32 | - | - | - | - / - | - / - | - / - | pass (2.0e-06) / - | converted capture: RuntimeError: x/y |" in lines
    assert [line for line in lines if line.startswith("## ")] == ["## Training steps", "## Graphed training steps (torch.cuda.graph)"]
    assert "- dcgan: DCGAN generator" in text and "- hdemucs: Hybrid Demucs" in text


def test_names_are_checked():
    assert bench_models.model_names("all") == bench_models.model_names(None) == list(bench_models.MODELS)
    assert bench_models.model_names("pix2pix, hifigan") == ["pix2pix", "hifigan"]
    with pytest.raises(ValueError, match="unknown models"):
        bench_models.model_names("hifigan,wavenet")
    assert bench_models.mode_names("highest,bfloat16,tf32") == ["float32", "bf16", "tf32"]
    with pytest.raises(ValueError, match="float16"):
        bench_models.mode_names("float16")


def test_hdemucs_is_skipped_without_torchaudio():
    if bench_models.unavailable("hdemucs") is None:
        pytest.skip("torchaudio is installed here")
    rows, text = bench_models.run_models(["hdemucs"], list(bench_models.MODES), warmup=1, repeat=1)
    assert [(row.section, row.model) for row in rows] == [("skipped", "hdemucs")]
    assert "torchaudio" in rows[0].notes[0]
    assert "Skipped hdemucs: torchaudio is not importable" in text


def test_models_option_needs_a_gpu(capsys):
    if bench._gpu_available():
        pytest.skip("a GPU is here: --models runs the suite")
    with pytest.raises(SystemExit) as exit:
        bench.main(["--models", "dcgan"])
    assert exit.value.code == 2
    assert "--models needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU")
def test_tiny_suite_on_a_gpu():
    """Every model in every mode at 1/16 scale: each section times every
    side, and each graphed training step replays the eager step's losses.
    The converted model must capture wherever torch's does (torchaudio's
    HDemucs makes its STFT window on the host each call, which a capture may
    refuse); the models defined here must capture on both sides."""
    rows, text = bench_models.run_models(list(bench_models.MODELS), list(bench_models.MODES), warmup=2, repeat=4, scale=TINY)
    ran = [row for row in rows if row.section != "skipped"]
    expected = {(name, mode, section) for name in bench_models.MODELS if bench_models.unavailable(name) is None
                for mode in bench_models.MODES for section in ("training", "graphed")}  # fmt: skip
    expected |= {("hifigan", mode, "inference") for mode in bench_models.MODES}
    assert {(row.model, row.mode, row.section) for row in ran} == expected, text
    for row in ran:
        if row.section == "graphed":
            if row.model != "hdemucs" or row.torch_check.passed:
                assert row.torch_check.passed and row.ours_check.passed, text
                assert not row.notes, text
        else:
            assert not row.notes, text
            assert None not in (row.torch_default_ms, row.torch_benchmark_ms, row.ours_ms, row.ours_host_ms, row.ours_gpu_ms), text
        if row.ours_check is not None and row.ours_check.passed:
            assert row.ours_ms is not None and row.ours_gpu_ms is not None, text
