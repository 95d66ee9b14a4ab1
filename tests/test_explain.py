"""python -m cupyconv explain and the generated routing table, on the CPU
(the plans are made for a described device; CuPy must import, no GPU needed)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("cupy")

from cupyconv import _explain, _registry  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-m", "cupyconv", *args], capture_output=True, text=True, env=env, check=False, timeout=300)


def test_explain_lists_every_family_of_each_pass_in_order():
    text = _explain.explain(1, (16, 512, 4096), (512, 256, 16), stride=8, padding=4, dtype="float16", backward=True)
    lines = text.splitlines()
    for op in ("grad_weight", "grad_input"):
        start = next(k for k, line in enumerate(lines) if line.startswith(op + " "))
        names = [line.split(":")[0].strip() for line in lines[start + 1 : start + 1 + len(_registry.REGISTRY[op])]]
        assert names == [family.name for family in _registry.REGISTRY[op]], op
    assert any(line.startswith("  grad_weight_overlap: chosen, floor ~") and line.endswith(" us") for line in lines)
    assert any(line.startswith("  grad_input_overlap: chosen, floor ~") for line in lines)
    assert all(": rejected: " not in line or line.split(": rejected: ")[1] for line in lines)  # every rejection says why
    assert any(line.strip().startswith("grad_input_overlap<half_t, int>:") for line in lines)  # the plan's launches


def test_explain_follows_the_described_device():
    on_hopper = _explain.chosen(1, (16, 512, 4096), (512, 256, 16), stride=8, padding=4, dtype="float16", device="sm_90")
    on_ampere = _explain.chosen(1, (16, 512, 4096), (512, 256, 16), stride=8, padding=4, dtype="float16", device="sm_80")
    assert on_hopper == ["forward: conv_fold"] and on_ampere != on_hopper


def test_explain_command_line():
    result = _run("explain", "--problem", "X2", "--dtype", "float16")
    assert result.returncode == 0, result.stderr
    assert "conv_fold: chosen" in result.stdout
    result = _run("explain", "--input", "2,8,16", "--weight", "8,4,3", "--stride", "2", "--precision", "tf32", "--backward")
    assert result.returncode == 0, result.stderr
    assert "grad_bias: chosen" in result.stdout
    bad = _run("explain", "--input", "2,8,16", "--weight", "8,4,3", "--stride", "0")
    assert bad.returncode == 2 and "stride must be positive" in bad.stderr


def test_routing_table_is_current():
    """docs/routing.md (the only copy of the routing table) is what scripts/routing_table.py makes today."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "routing_table.py"), "--check"], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_settings_families_forces_a_family_and_keeps_the_fallbacks():
    from cupyconv import settings

    shapes = (1, (16, 512, 4096), (512, 256, 16))
    kwargs = dict(stride=8, padding=4, dtype="float16")
    with settings.override(families=("conv_window",)):
        assert _explain.chosen(*shapes, **kwargs) == ["forward: conv_window"]
    with settings.override(families=()):
        assert _explain.chosen(*shapes, **kwargs) == ["forward: conv_mma"]
        assert _explain.chosen(*shapes, **kwargs, backward=True) == ["grad_weight: grad_weight_mma", "grad_input: conv_mma", "grad_bias: grad_bias"]


def test_explain_an_empty_batch_backward():
    assert "zeros" in _explain.explain(1, (0, 4, 16), (4, 4, 3), stride=2, backward=True)
    assert _explain.chosen(1, (0, 4, 16), (4, 4, 3), stride=2, backward=True) == []


def test_override_blocks_end_with_their_own_changes_only():
    """Blocks that do not nest (two threads' overrides) each take back only
    their own changes: the defaults come back when both have ended."""
    from cupyconv import settings

    first, second = settings.override(use_fold=False), settings.override(wgmma_min_taps=3)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # (the one entered first ends first)
    assert settings.current().use_fold and settings.current().wgmma_min_taps == 3
    second.__exit__(None, None, None)
    assert settings.current() == settings.Settings()


def test_memory_bound_calls_keep_channels_first_families(settings_override):
    """Below nhwc_min_products the layout changes cost more than the GEMM saves."""
    shapes = (2, (8, 16, 64, 128), (16, 16, 3, 3))
    kwargs = dict(stride=2, padding=1, output_padding=1, dtype="bfloat16")
    assert not any("nhwc" in f for f in _explain.chosen(*shapes, **kwargs, backward=True) + _explain.chosen(*shapes, **kwargs))
    settings_override(nhwc_min_products=0)
    assert "forward: conv_nhwc" in _explain.chosen(*shapes, **kwargs)


def test_images_past_32_bits_of_positions_keep_the_64_bit_families():
    """transpose_nhwc counts an image's positions in an int: a 46800 x 46800
    output (float16, 4.4 GB) is conv_mma's and grad_weight_mma's, whose
    64-bit builds index it."""
    shapes = (2, (1, 64, 7800, 7800), (64, 8, 12, 12))
    kwargs = dict(stride=6, padding=3, dtype="float16")
    chosen = _explain.chosen(*shapes, **kwargs) + _explain.chosen(*shapes, **kwargs, backward=True)
    assert chosen == ["forward: conv_mma", "grad_weight: grad_weight_mma", "grad_input: conv_mma", "grad_bias: grad_bias"], chosen


def test_short_inputs_keep_off_the_window_kernels(settings_override):
    """A kernel longer than its input (WaveGAN's first layer: L 16, kernel 25,
    stride 4) leaves 16 output positions a phase, under window_min_columns:
    the window kernels' tiles would be mostly padding."""
    shapes = (1, (64, 1024, 16), (1024, 512, 25))
    kwargs = dict(stride=4, padding=11, output_padding=1, dtype="bfloat16")
    assert _explain.chosen(*shapes, **kwargs) == ["forward: conv_nhwc"]
    assert "conv_window: rejected: a phase's positions a sample below window_min_columns" in _explain.explain(*shapes, **kwargs)
    settings_override(window_min_columns=16)
    assert _explain.chosen(*shapes, **kwargs) == ["forward: conv_window"]


def _launches(text):
    return [line.split("<")[0].strip() for line in text.splitlines() if "<" in line and " x " in line]


def test_idle_grids_split_grad_input_reductions(settings_override):
    """DCGAN's latent projection (1x1 input): grad_input's GEMM is one 128 x
    128 tile with 512 slices of reduction; conv_mma_split spreads it over
    the multiprocessors and sum_splits adds the partials.  A grid that fills
    the GPU is not split; use_gemm_split turns it off."""
    latent = (2, (128, 100, 1, 1), (100, 512, 4, 4))
    text = _explain.explain(*latent, dtype="bfloat16", backward=True)
    grad_input = text[text.index("grad_input bfloat16") :]
    assert _launches(grad_input)[:2] == ["conv_mma_split", "sum_splits"], grad_input
    assert "conv_mma_split<bfloat16_t, int, 128, 128, 16, 4, 2, 1>: 128 x 256" in grad_input  # 1 block -> 128 splits
    wide = (2, (64, 256, 64, 64), (256, 128, 4, 4))  # 64 x 64 inputs: thousands of blocks
    text = _explain.explain(*wide, stride=2, padding=1, dtype="float32", precision="highest", backward=True)
    assert "conv_mma<float, int, 128, 128, 16, 4, 2, 3>: 4096 x 256" in text and "conv_mma_split" not in text
    settings_override(use_gemm_split=False)
    grad_input = _explain.explain(*latent, dtype="bfloat16", backward=True)
    assert "conv_mma_split" not in grad_input and "conv_mma<bfloat16_t, int, 128, 128, 16, 4, 2, 1>: 1 x 256" in grad_input


def test_floor_estimates_count_the_grid_fill_and_the_temporaries(settings_override):
    """Family.cost (cupyconv._cost): a grid of one block on 132
    multiprocessors shows in the floor, and so do a plan's temporaries."""
    from cupyconv import _geometry, settings

    g = _geometry.make_geometry(2, (128, 100, 1, 1), (100, 512, 4, 4), None, 1, 0, 0, 1, 1)
    conv_mma = next(f for f in _registry.REGISTRY["grad_input"] if f.name == "conv_mma")

    def floor():
        with _explain._described("sm_90"):
            p = next(q for q in _explain.problems(g, "bfloat16", "highest", True) if q.op == "grad_input")
            return conv_mma.cost(p, conv_mma.heuristic(p))

    split = floor()
    settings_override(use_gemm_split=False)
    assert floor() > 4 * split  # 1 block of 132: the compute floor 132 times longer
    assert settings.current().use_gemm_split is False


def test_explain_estimates_every_call_of_the_benchmarks():
    from cupyconv.bench import PROBLEMS
    from cupyconv.bench_zoo import ZOO

    for problem in list(PROBLEMS.values()) + list(ZOO.values()):
        shapes = (problem.dims, (problem.batch, problem.in_channels, *problem.size), (problem.in_channels, problem.out_channels // problem.groups, *problem.kernel))
        kwargs = dict(stride=problem.stride, padding=problem.padding, output_padding=problem.output_padding, groups=problem.groups, dilation=problem.dilation)
        for dtype, precision in (("float32", "highest"), ("float32", "tf32"), ("bfloat16", None), ("float64", None)):
            for backward in (False, True):
                for device in ("sm_80", "sm_90"):
                    text = _explain.explain(*shapes, **kwargs, dtype=dtype, precision=precision, backward=backward, device=device)
                    assert all(" us" in line for line in text.splitlines() if ": chosen" in line or ": takes it too" in line), text
