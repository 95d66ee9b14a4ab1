"""Every kernel instantiation the library can launch compiles with NVRTC for
Ampere (sm_80) and Hopper (sm_90).  NVRTC needs no GPU: this runs in CI
through CuPy's NVRTC binding and the nvidia-cuda-nvrtc wheel."""

from __future__ import annotations

import collections

import pytest

from cupyconv import _kernels

nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs CuPy and an NVRTC library")


def _by_file():
    grouped = collections.defaultdict(list)
    for filename, name in _kernels.all_instantiations():
        grouped[filename].append(name)
    return sorted(grouped.items())


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("filename, names", _by_file(), ids=[f for f, _ in _by_file()])
def test_every_instantiation_compiles(arch, filename, names):
    program = nvrtc.createProgram(_kernels.source(filename), filename, [], [])
    try:
        for name in names:
            nvrtc.addNameExpression(program, name)
        try:
            nvrtc.compileProgram(program, [f"--gpu-architecture={arch}", "-std=c++17"])
        except nvrtc.NVRTCError as error:
            pytest.fail(f"{filename} failed to compile for {arch}: {error}\n{nvrtc.getProgramLog(program)}")
        for name in names:
            assert nvrtc.getLoweredName(program, name)
        assert len(nvrtc.getCUBIN(program)) > 0
    finally:
        nvrtc.destroyProgram(program)


def test_sources_inline_their_headers():
    text = _kernels.source("conv_gemm.cu")
    assert "#include" not in text and "struct AxisPhase" in text


def test_conv_direct_constants_match_the_host():
    """The sizes conv_direct.cu and _kernels.direct_layout must agree on."""
    import re

    text = _kernels.source("conv_direct.cu")
    found = dict(re.findall(r"constexpr int (DIRECT_\w+) = (\d+);", text))
    assert int(found["DIRECT_HEADER_BYTES"]) == _kernels.DIRECT_HEADER_BYTES
    assert int(found["DIRECT_FETCH"]) == _kernels.DIRECT_FETCH
    assert "int* s_ih0 = s_kh + 16;" in text and "int* s_nth = s_ih0 + 16;" in text and _kernels.DIRECT_MAX_H_TAPS == 16
    assert int(found["DIRECT_MAX_STRIDE_W"]) == _kernels.DIRECT_MAX_STRIDE_W
    assert _kernels.DIRECT_HEADER_BYTES >= 4 * (16 + 16 + 2 + _kernels.DIRECT_MAX_STRIDE_W) and _kernels.DIRECT_HEADER_BYTES % 16 == 0
