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



def test_pack_weight_constants_match_the_host():
    """pack_weight.cu's grid-stride loops step by PACK_THREADS a block: the
    host must launch blocks of that many threads."""
    import re

    found = dict(re.findall(r"constexpr int (PACK_\w+) = (\d+);", _kernels.source("pack_weight.cu")))
    assert int(found["PACK_THREADS"]) == _kernels.PACK_THREADS
    assert int(found["PACK_TILE"]) == _kernels.PACK_TILE and _kernels.PACK_THREADS % _kernels.PACK_TILE == 0


def test_conv_tiny_constants_match_the_host():
    """conv_tiny.cu's launch bounds and grid-stride step are TINY_THREADS a
    block: the host (_cuda._tiny_plan) must launch blocks of that many."""
    import re

    found = dict(re.findall(r"constexpr int (TINY_\w+) = (\d+);", _kernels.source("conv_tiny.cu")))
    assert int(found["TINY_THREADS"]) == _kernels.TINY_THREADS


def _compile_sm_90a(filename, names):
    """Compiles `names` from `filename` for sm_90a with ptxas's report:
    (the log, {lowered name: name}); a failed compile fails the test."""
    program = nvrtc.createProgram(_kernels.source(filename), filename, [], [])
    try:
        for name in names:
            nvrtc.addNameExpression(program, name)
        try:
            nvrtc.compileProgram(program, ["--gpu-architecture=sm_90a", "-std=c++17", "-Xptxas=-v"])
        except nvrtc.NVRTCError as error:
            pytest.fail(f"{filename} failed to compile for sm_90a: {error}\n{nvrtc.getProgramLog(program)}")
        return nvrtc.getProgramLog(program), {nvrtc.getLoweredName(program, name): name for name in names}
    finally:
        nvrtc.destroyProgram(program)


def _spill_stores(log):
    """{lowered entry name: bytes of spill stores} from ptxas's report."""
    import re

    return {m: int(s) for m, s in re.findall(r"Compiling entry function '(\w+)'.*?(\d+) bytes spill stores", log, re.S)}


def test_wgmma_compiles_for_sm_90a_without_spills():
    """conv_wgmma, conv_wgmma_resident and grad_weight_wgmma are built for
    sm_90a on Hopper (their wgmma instructions exist only there).  Their
    32-bit-index instantiations keep the accumulators and the window's loads
    in registers: a spill in the main loop would also make ptxas put fences
    between the asynchronous MMAs.  None of them spills: conv_wgmma (two
    blocks), conv_wgmma_resident (its 128-register two-block builds too,
    since step k + 2's item stopped being worked out by division every step
    and the 16-bit transpose became ldmatrix/stmatrix: perf notes v22),
    grad_weight_wgmma, conv_wgmma_x3 (one block, two accumulator sets) and
    conv_wgmma_split.  And no wgmma in the file is serialized (C7510, C7514,
    C7520): conv_wgmma_split's consumers had every one serialized (C7520, a
    compiler-inserted warpgroup.arrive in a path ptxas took as divergent)
    until a barrier of their own came before each slice's MMAs (perf notes
    v55)."""
    names = [name for filename, name in _kernels.all_instantiations() if filename == "conv_wgmma.cu"]
    per_index = len(_kernels.WGMMA_TILES) + 2 * len(_kernels.RESIDENT_VARIANTS) * len(_kernels.RESIDENT_COPY_BYTES)  # and the fill builds
    grad_weight = len(_kernels.GRAD_WEIGHT_WGMMA_TILES) * len(_kernels.RESIDENT_COPY_BYTES) * len(_kernels.GRAD_WEIGHT_WGMMA_DTYPES)
    x3 = len(_kernels.WGMMA_TILES) * len(_kernels.RESIDENT_COPY_BYTES)  # conv_wgmma_x3 (float32 only), each load size
    split = len(_kernels.SPLIT_DTYPES) * len(_kernels.RESIDENT_COPY_BYTES)  # conv_wgmma_split (16-bit), each copy size
    assert len(names) == 2 * (per_index * len(_kernels.WINDOW_DTYPES) + x3 + grad_weight + split)
    log, lowered = _compile_sm_90a("conv_wgmma.cu", names)
    assert "C7514" not in log and "C7510" not in log and "C7520" not in log and "serialized" not in log, log
    reports = _spill_stores(log)
    assert set(reports) == set(lowered)
    two_block = {_kernels.resident_name(d, i, t, 2, c) for d in _kernels.WINDOW_DTYPES for i in _kernels.INDEX_TYPES
                 for t, b in _kernels.RESIDENT_VARIANTS if b == 2 for c in _kernels.RESIDENT_COPY_BYTES}  # fmt: skip
    assert two_block <= set(names)
    spilled = [(lowered[m], spill) for m, spill in reports.items() if spill > 0 and ", int," in lowered[m]]
    assert not spilled, f"spills: {spilled}"


def test_conv_fold_compiles_for_sm_90a_asynchronous():
    """conv_fold keeps its MMAs asynchronous: ptxas serializes every wgmma
    (warning C7514) where other instructions read an accumulator set it
    cannot prove retired, as an epilogue after a wait_group 1 in the k-block
    loop did (perf notes v23), or inserts a wait of its own (C7517) where a
    path it cannot rule out reads them, as a wait behind a second `if
    (!empty)` did in the ping-pong build (v49).  And nothing spills."""
    names = [name for filename, name in _kernels.all_instantiations() if filename == "conv_fold.cu"]
    kernels = [name for name in names if name.startswith("conv_fold<")]
    assert len(kernels) == len(_kernels.FOLD_DTYPES) * len(_kernels.INDEX_TYPES)
    log, lowered = _compile_sm_90a("conv_fold.cu", names)
    assert "C7514" not in log and "C7517" not in log and "serialized" not in log, log
    reports = _spill_stores(log)
    fold = {m for m, name in lowered.items() if name in kernels}
    assert fold <= set(reports) and all(reports[m] == 0 for m in fold), reports


def _check_asynchronous_without_spills(filename, names):
    """Every one of `names` built for sm_90a with no spills and no wgmma that
    ptxas serialized (warnings C7510, C7514: it fences MMAs whose registers it
    cannot prove retired)."""
    log, lowered = _compile_sm_90a(filename, names)
    assert "C7514" not in log and "C7510" not in log and "serialized" not in log, log
    reports = _spill_stores(log)
    assert set(reports) == set(lowered)
    spilled = [(lowered[m], spill) for m, spill in reports.items() if spill > 0]
    assert not spilled, f"spills: {spilled}"


def test_grad_weight_tf32_compiles_for_sm_90a_without_spills():
    """grad_weight_wgmma_tf32 (built for sm_90a, tap and fold modes) keeps its
    accumulators, the fresh group accumulator and the register-held A
    fragments of a group in registers: no spills, no serialized wgmma; and
    the host's copies of its constants."""
    import re

    text = _kernels.source("grad_weight_tf32.cu")
    found = dict(re.findall(r"constexpr int (GWT_\w+) = (\d+);", text))
    assert int(found["GWT_THREADS"]) == _kernels.WGMMA_THREADS
    assert int(found["GWT_POSITIONS"]) == _kernels.GRAD_WEIGHT_TF32_POSITIONS
    assert int(found["GWT_ROWS"]) == _kernels.GRAD_WEIGHT_TF32_ROWS
    assert int(found["GWT_COLUMNS"]) == _kernels.GRAD_WEIGHT_TF32_COLUMNS
    assert "GWT_BUFFERS = GWT_AHEAD + 1;" in text and int(found["GWT_AHEAD"]) + 1 == _kernels.GRAD_WEIGHT_TF32_BUFFERS
    names = [name for filename, name in _kernels.all_instantiations() if filename == "grad_weight_tf32.cu"]
    builds = len(_kernels.GRAD_WEIGHT_TF32_TAPS) + 1  # tap mode's, and fold mode's one
    per_index = builds * len(_kernels.GRAD_WEIGHT_TF32_PASSES) * len(_kernels.RESIDENT_COPY_BYTES)
    assert len(names) == len(_kernels.INDEX_TYPES) * per_index
    _check_asynchronous_without_spills("grad_weight_tf32.cu", names)


def test_conv_tf32_compiles_for_sm_90a_without_spills():
    """conv_wgmma_tf32, conv_tf32_stream and conv_tf32_multicast (built for sm_90a) keep their
    accumulators and both register sets of A fragments in registers: no spills, no serialized
    wgmma (ptxas serialized every one while a path into a stage could leave
    that stage's own register set in flight); and the host's copies of its
    constants."""
    import re

    text = _kernels.source("conv_tf32.cu")
    found = dict(re.findall(r"constexpr int (CT_\w+) = (\d+);", text))
    assert int(found["CT_THREADS"]) == _kernels.WGMMA_THREADS
    for name in ("POSITIONS", "ROWS", "SLICE", "MAX_TASKS"):
        assert int(found[f"CT_{name}"]) == getattr(_kernels, f"CONV_TF32_{name}"), name
    assert "CT_BUFFERS = CT_AHEAD + 1;" in text and int(found["CT_AHEAD"]) + 1 == _kernels.CONV_TF32_BUFFERS
    assert "CT_ATOM = CT_ROWS * 128;" in text and _kernels.CONV_TF32_ATOM == _kernels.CONV_TF32_ROWS * 128
    names = [name for filename, name in _kernels.all_instantiations() if filename == "conv_tf32.cu"]
    resident = [name for name in names if name.startswith("conv_wgmma_tf32<")]
    assert len(resident) == len(_kernels.INDEX_TYPES) * len(_kernels.CONV_TF32_TAPS) * 2  # and each FOLD build
    assert sum(name.endswith(", true>") for name in resident) == len(resident) // 2
    # conv_tf32_stream: TF32 and 3xTF32 builds; conv_tf32_multicast: a build a fold
    multicast = [name for name in names if name.startswith("conv_tf32_multicast<")]
    assert len(multicast) == len(_kernels.INDEX_TYPES) * len(_kernels.CONV_TF32_MULTICAST_FOLDS)
    assert len(names) - len(resident) - len(multicast) == len(_kernels.INDEX_TYPES) * len(_kernels.CONV_TF32_STREAM_TAPS) * 2
    found = dict(re.findall(r"constexpr int (CS_\w+) = (\d+);", text))
    assert "CS_BUFFERS = CS_AHEAD + 2;" in text and int(found["CS_AHEAD"]) + 2 == _kernels.CONV_TF32_STREAM_BUFFERS
    assert "CS_LINE = CT_SLICE * 4;" in text and _kernels.CONV_TF32_STREAM_LINE == _kernels.CONV_TF32_SLICE * 4
    assert "cs_cols() { return PASSES == 1 ? 256 : 128; }" in text and _kernels.CONV_TF32_STREAM_COLS == {1: 256, 3: 128}
    found = dict(re.findall(r"constexpr int (CM_\w+) = (\d+);", text))
    assert int(found["CM_STAGES"]) == _kernels.CONV_TF32_MULTICAST_STAGES and int(found["CM_COLS"]) == _kernels.CONV_TF32_MULTICAST_COLS
    assert "CM_CONSUMERS = CT_THREADS;" in text and "__launch_bounds__(CM_CONSUMERS + 128, 1)" in text
    assert "CM_TILE = CM_COLS * CS_LINE;" in text and int(found["CM_TAPS"]) == 2
    assert int(found["CM_ROW"]) == _kernels.CONV_TF32_MULTICAST_ROW
    _check_asynchronous_without_spills("conv_tf32.cu", names)


def test_conv_fold_constants_match_the_host():
    import re

    found = dict(re.findall(r"constexpr int ((?:PACK_)?FOLD_\w+) = (\d+);", _kernels.source("conv_fold.cu")))
    for name in ("FOLD_THREADS", "FOLD_STRIDE", "FOLD_ROWS", "FOLD_BN", "FOLD_BK", "FOLD_STAGES", "PACK_FOLD_CI"):
        assert int(found[name]) == getattr(_kernels, name), name
    text = _kernels.source("conv_fold.cu")
    assert "FOLD_STAGE_BYTES = FOLD_BK * FOLD_BN * 2;" in text and _kernels.FOLD_STAGE_BYTES == _kernels.FOLD_BK * _kernels.FOLD_BN * 2
    assert "FOLD_BARRIERS = 2 * FOLD_STAGES;" in text and _kernels.FOLD_BARRIERS == 2 * _kernels.FOLD_STAGES
    # the block: the consumers and a producer warpgroup; clusters of two; the
    # buffers' halves are the tensor map's boxes of 64 positions x FOLD_BK channels
    assert "__launch_bounds__(FOLD_THREADS + 128, 1)" in text and _kernels.FOLD_BLOCK_THREADS == _kernels.FOLD_THREADS + 128
    assert "__cluster_dims__(2, 1, 1)" in text and _kernels.FOLD_CLUSTER == 2
    assert _kernels.FOLD_BOX == (64, _kernels.FOLD_BK, 1) and 2 * 64 == _kernels.FOLD_BN
    assert "FOLD_OUT_BYTES = FOLD_STRIDE * FOLD_BN * 2 + 32;" in text
    assert _kernels.FOLD_OUT_BYTES == _kernels.FOLD_STRIDE * _kernels.FOLD_BN * 2 + 32
    assert _kernels.FOLD_ROWS == 8 * _kernels.FOLD_TAPS and _kernels.FOLD_TAPS == 2 * _kernels.FOLD_STRIDE


def test_wgmma_constants_match_the_host():
    import re

    text = _kernels.source("conv_wgmma.cu")
    found = dict(re.findall(r"constexpr int (WGMMA_\w+) = (\d+);", text))
    assert int(found["WGMMA_THREADS"]) == _kernels.WGMMA_THREADS
    assert int(found["WGMMA_STAGES"]) == _kernels.WGMMA_STAGES
    assert int(found["WGMMA_X3_STAGES"]) == _kernels.WGMMA_X3_STAGES
    assert int(found["WGMMA_CHUNKS"]) == _kernels.WGMMA_CHUNKS
    assert "return sizeof(T) == 4 ? 2 : 1;" in text and _kernels.WGMMA_MAX_TASKS == {4: 2, 2: 1}
    assert int(re.search(r"constexpr int FILL_STEP = (\d+);", text).group(1)) == _kernels.FILL_STEP
    assert "fill_rows() { return sizeof(T) == 2 ? 8 : 4; }" in text and _kernels.FILL_ROWS == {2: 8, 4: 4}
    assert "fill_stage_row() { return FILL_STEP * 128 + 16; }" in text and "fill_lead() { return 16 / static_cast<int>(sizeof(T)); }" in text
    assert all(_kernels.fill_stage_bytes(d) <= _kernels.RESIDENT_PART_BYTES for d in _kernels.WINDOW_DTYPES)
    found = dict(re.findall(r"constexpr int (GW_\w+) = (\d+);", text))
    assert int(found["GW_POSITIONS"]) == _kernels.GRAD_WEIGHT_WGMMA_POSITIONS
    assert int(found["GW_AHEAD"]) == _kernels.GRAD_WEIGHT_WGMMA_AHEAD
    assert "GW_RAW_BUFFERS = GW_AHEAD + 1;" in text and "GW_X_BUFFERS = GW_AHEAD + 2;" in text


def test_grouped_backward_constants_match_the_host():
    import re

    text = _kernels.source("grouped_backward.cu")
    found = dict(re.findall(r"constexpr int (GROUPED_\w+) = (\d+);", text))
    assert int(found["GROUPED_THREADS"]) == _kernels.GROUPED_THREADS
    assert int(found["GROUPED_MAX_TAPS"]) == _kernels.GROUPED_MAX_TAPS
    assert int(found["GROUPED_X_PAD"]) == _kernels.GROUPED_X_PAD
    assert int(found["GROUPED_MAX_SPLIT_SUM"]) == _kernels.GROUPED_MAX_SPLIT_SUM
    assert all(tile % 64 == 0 for tile in _kernels.GROUPED_TILES)  # the kernel's items: halves of whole warps, eighths per warp


def test_grouped_forward_and_gather_constants_match_the_host():
    """grouped_forward's tile (J, TILE) and phase_gather's block shape as the
    host sizes grids and shared memory for them."""
    import re

    text = _kernels.source("grouped_forward.cu")
    found = dict(re.findall(r"constexpr int (GROUPED_FORWARD_\w+) = (\d+);", text))
    assert int(found["GROUPED_FORWARD_THREADS"]) == _kernels.GROUPED_FORWARD_THREADS
    assert int(found["GROUPED_FORWARD_ACC"]) == _kernels.GROUPED_FORWARD_ACC
    assert int(found["GROUPED_FORWARD_MAX_J"]) == _kernels.GROUPED_FORWARD_MAX_J
    assert "GROUPED_FORWARD_WARPS = GROUPED_FORWARD_THREADS / 32;" in text
    assert "TILE = 32 * J * GROUPED_FORWARD_WARPS;" in text
    text = _kernels.source("phase_gather.cu")
    found = dict(re.findall(r"constexpr int (GATHER_\w+) = (\d+);", text))
    assert int(found["GATHER_THREADS"]) == _kernels.GATHER_THREADS and int(found["GATHER_ELEMS"]) == _kernels.GATHER_ELEMS


def _spill_bytes(filename: str, names, arch: str) -> dict:
    """{instantiation: spill-store bytes} as ptxas reports them for `arch`
    (every name must have its report)."""
    import re

    program = nvrtc.createProgram(_kernels.source(filename), filename, [], [])
    try:
        for name in names:
            nvrtc.addNameExpression(program, name)
        nvrtc.compileProgram(program, [f"--gpu-architecture={arch}", "-std=c++17", "-Xptxas=-v"])
        log = nvrtc.getProgramLog(program)
        lowered = {nvrtc.getLoweredName(program, name): name for name in names}
    finally:
        nvrtc.destroyProgram(program)
    reports = dict(re.findall(r"Compiling entry function '(\w+)'.*?(\d+) bytes spill stores", log, re.S))
    assert set(reports) == set(lowered)
    return {lowered[m]: int(b) for m, b in reports.items()}


# grad_weight_phase's 32-bit builds spill at most one register: a
# loop-invariant value stored before the main loop and reloaded by the
# copies (the 5-tap 3xTF32 build on sm_90: a thread's first window column;
# checked in its SASS: no local loads or stores among the MMAs).
GRAD_WEIGHT_PHASE_SPILL = 4


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_grad_weight_phase_constants_and_spills(arch):
    """The host's copies of grad_weight_phase's constants, and its 32-bit
    builds' accumulators in registers (two blocks a multiprocessor up to 5
    taps, and the GX builds' 512 threads: 128 registers)."""
    import re

    text = _kernels.source("grad_weight_phase.cu")
    found = dict(re.findall(r"constexpr int (GWP_\w+) = (\d+);", text))
    assert int(found["GWP_P"]) == _kernels.GRAD_WEIGHT_PHASE_POSITIONS
    assert "GWP_XS = GWP_P + 4;" in text and _kernels.GRAD_WEIGHT_PHASE_X_ROW == _kernels.GRAD_WEIGHT_PHASE_POSITIONS + 4
    assert int(found["GWP_BM"]) == _kernels.GRAD_WEIGHT_PHASE_CHANNELS
    assert int(found["GWP_BN"]) == _kernels.GRAD_WEIGHT_PHASE_COLUMNS
    assert int(found["GWP_STAGES"]) == _kernels.GRAD_WEIGHT_PHASE_STAGES
    assert int(found["GWP_THREADS"]) == _kernels.GRAD_WEIGHT_PHASE_THREADS
    names = [n for f, n in _kernels.all_instantiations() if f == "grad_weight_phase.cu" and ", int," in n]
    assert len(names) == (len(_kernels.GRAD_WEIGHT_PHASE_TAPS) + len(_kernels.GRAD_PHASE_FUSED_TAPS)) * len(_kernels.GRAD_WEIGHT_PHASE_PASSES)
    assert "GWP_WROW = GWP_BN + 4;" in text and _kernels.GRAD_PHASE_FUSED_WEIGHT_ROW == _kernels.GRAD_WEIGHT_PHASE_COLUMNS + 4
    assert "2 * GWP_THREADS" in text and _kernels.GRAD_PHASE_FUSED_THREADS == 2 * _kernels.GRAD_WEIGHT_PHASE_THREADS
    spilled = [(name, b) for name, b in _spill_bytes("grad_weight_phase.cu", names, arch).items() if b > GRAD_WEIGHT_PHASE_SPILL]
    assert not spilled, f"spills: {spilled}"


# grad_input_phase's 32-bit 3xTF32 builds spill up to 48 bytes, in the
# copies of each stage (the SASS has no local loads or stores among the
# MMAs; the stepped and 16-byte window copies, which made P1's stride-1
# grad_input 10% faster than conv_window, took the limit from 32 to 48);
# the one-pass builds spill nothing.
GRAD_INPUT_PHASE_SPILL = {1: 0, 3: 48}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_grad_input_phase_constants_and_spills(arch):
    import re

    text = _kernels.source("grad_input_phase.cu")
    found = dict(re.findall(r"constexpr int (GIP_\w+) = (\d+);", text))
    assert int(found["GIP_L"]) == _kernels.GRAD_INPUT_PHASE_POSITIONS
    assert int(found["GIP_BM"]) == _kernels.GRAD_INPUT_PHASE_CHANNELS
    assert int(found["GIP_J"]) == _kernels.GRAD_INPUT_PHASE_STAGE_CHANNELS
    assert int(found["GIP_WROW"]) == _kernels.GRAD_INPUT_PHASE_WEIGHT_ROW
    assert int(found["GIP_STAGES"]) == _kernels.GRAD_INPUT_PHASE_STAGES
    assert int(found["GIP_THREADS"]) == _kernels.GRAD_INPUT_PHASE_THREADS
    names = {_kernels.grad_input_phase_name("int", passes): passes for passes in _kernels.GRAD_INPUT_PHASE_PASSES}
    spilled = [(name, b) for name, b in _spill_bytes("grad_input_phase.cu", names, arch).items() if b > GRAD_INPUT_PHASE_SPILL[names[name]]]
    assert not spilled, f"spills: {spilled}"


def test_grad_input_overlap_compiles_for_sm_90a_without_spills():
    """grad_input_overlap (built for sm_90a) keeps its 128 accumulators in
    registers with its MMAs asynchronous; and the host's copies of its
    constants."""
    import re

    text = _kernels.source("grad_input_overlap.cu")
    found = dict(re.findall(r"constexpr int (GI_\w+) = (\d+);", text))
    for name in ("THREADS", "BM", "BN", "CB", "STAGES", "TF32_CB", "TF32_STAGES"):
        assert int(found[f"GI_{name}"]) == getattr(_kernels, f"OVERLAP_{name}"), name
    assert "GI_PLANE = (GI_BN + 1) * 16;" in text
    assert "A_BYTES = TF32 ? GI_BM * 16 * static_cast<int>(sizeof(T)) : 0;" in text
    assert "B_BYTES = TF32 ? 2 * GI_PLANE : (8 * GI_BN + 8) * 2 + 16;" in text
    assert "STAGE_BYTES = CB * (A_BYTES + B_BYTES);" in text and "B_EXTENT = TF32 ? 16 + GI_BN * 8 * 4 : GI_BN * 16 * 2;" in text
    assert "BARRIERS = STAGES * STAGE_BYTES + (B_EXTENT > B_BYTES ? B_EXTENT - B_BYTES : 0);" in text
    assert "SHARED = BARRIERS + STAGES * 16;" in text
    assert _kernels.overlap_layout("float16") == (_kernels.OVERLAP_CB, _kernels.OVERLAP_SHARED)
    assert _kernels.overlap_layout("float32") == (_kernels.OVERLAP_TF32_CB, _kernels.OVERLAP_TF32_SHARED)
    assert _kernels.OVERLAP_SHARED == 8 * 6 * 4128 + 4064 + 128 and _kernels.OVERLAP_TF32_SHARED == 6 * 2 * (8192 + 8224) + 96
    names = [name for filename, name in _kernels.all_instantiations() if filename == "grad_input_overlap.cu"]
    kernels = [name for name in names if name.startswith("grad_input_overlap<")]
    assert len(kernels) == (len(_kernels.OVERLAP_DTYPES) + 1) * len(_kernels.INDEX_TYPES)  # and float (TF32)
    assert sum(name.startswith("pack_overlap_weight<") for name in names) == len(_kernels.OVERLAP_DTYPES) + 1
    _check_asynchronous_without_spills("grad_input_overlap.cu", kernels)


def test_grad_input_multicast_compiles_for_sm_90a_without_spills():
    """grad_input_multicast (built for sm_90a) keeps its accumulators and both
    fragment sets in registers with its MMAs asynchronous; the host's copies
    of its constants; and the tap order of its packed weight, the same on
    both sides."""
    import re

    text = _kernels.source("grad_input_overlap.cu")
    found = dict(re.findall(r"constexpr int (GM_\w+) = (\d+);", text))
    for name in ("STAGES", "COLS", "POSITIONS", "CO", "SPAN", "SPANS", "THREADS"):
        assert int(found[f"GM_{name}"]) == getattr(_kernels, f"GRAD_INPUT_MULTICAST_{name}"), name
    assert "GM_BOX = GM_CO * GM_SPAN * 4;" in text and "GM_WINDOW = GM_SPANS * GM_BOX;" in text
    assert "GM_STAGE = (GM_CO * GM_TILE + GM_WINDOW + 1023) & ~1023;" in text and "GM_TILE = GM_COLS * 64;" in text
    assert "GM_SHARED = GM_STAGES * GM_STAGE + 2 * GM_STAGES * 8;" in text
    assert _kernels.GRAD_INPUT_MULTICAST_SHARED == 5 * 41984 + 80
    # the boxes cover an item's stretch of each channel, 8 x 128 + 8 floats, from 16-byte starts
    span, spans = _kernels.GRAD_INPUT_MULTICAST_SPAN, _kernels.GRAD_INPUT_MULTICAST_SPANS
    assert span * spans >= 8 * _kernels.GRAD_INPUT_MULTICAST_POSITIONS + 8 and span * 4 % 16 == 0 and span <= 256
    taps = [_kernels.gm_tap(j) for j in range(16)]
    assert sorted(taps) == list(range(16)) and taps[:8] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert "(j & 8) + ((j & 7) < 4 ? 2 * (j & 3) : 2 * (j & 3) + 1)" in text
    names = [name for filename, name in _kernels.all_instantiations() if filename == "grad_input_overlap.cu"]
    kernels = [name for name in names if name.startswith("grad_input_multicast<")]
    assert kernels == [_kernels.grad_input_multicast_name(index) for index in _kernels.INDEX_TYPES]
    assert names.count(_kernels.PACK_MULTICAST_WEIGHT) == 1
    _check_asynchronous_without_spills("grad_input_overlap.cu", kernels + [_kernels.PACK_MULTICAST_WEIGHT])


def test_grad_weight_multicast_compiles_for_sm_90a_without_spills():
    """grad_weight_multicast (built for sm_90a) keeps its accumulators and
    both fragment sets in registers with its MMAs asynchronous; and the
    host's copies of its constants."""
    import re

    text = _kernels.source("grad_weight_overlap.cu")
    found = dict(re.findall(r"constexpr int (GWM_\w+) = (\d+);", text))
    for name in ("STAGES", "CO", "COLS", "P", "SPAN", "SPANS", "THREADS"):
        assert int(found[f"GWM_{name}"]) == getattr(_kernels, f"GRAD_WEIGHT_MULTICAST_{name}"), name
    assert "GWM_X = GWM_COLS * GWM_P * 4;" in text and "GWM_BOX = GWM_CO * GWM_SPAN * 4;" in text
    assert "GWM_STAGE = (GWM_X + GWM_SPANS * GWM_BOX + 1023) & ~1023;" in text
    assert "GWM_SHARED = GWM_STAGES * GWM_STAGE + 2 * GWM_STAGES * 8;" in text
    assert _kernels.GRAD_WEIGHT_MULTICAST_SHARED == 5 * 41984 + 80
    # the boxes cover an item's stretch of each channel, 8 x 32 + 8 floats, from 16-byte starts; x rows of 128 bytes
    span, spans = _kernels.GRAD_WEIGHT_MULTICAST_SPAN, _kernels.GRAD_WEIGHT_MULTICAST_SPANS
    assert span * spans >= 8 * _kernels.GRAD_WEIGHT_MULTICAST_P + 8 and span * 4 % 16 == 0 and span <= 256
    assert _kernels.GRAD_WEIGHT_MULTICAST_P * 4 == 128
    names = [name for filename, name in _kernels.all_instantiations() if filename == "grad_weight_overlap.cu"]
    kernels = [name for name in names if name.startswith("grad_weight_multicast<")]
    assert kernels == [_kernels.grad_weight_multicast_name(index) for index in _kernels.INDEX_TYPES]
    assert names.count(_kernels.ROUND_TF32_COPY) == 1
    _check_asynchronous_without_spills("grad_weight_overlap.cu", kernels + [_kernels.ROUND_TF32_COPY])


def test_grad_weight_overlap_compiles_for_sm_90a_without_spills():
    """grad_weight_overlap (built for sm_90a) keeps its two taps' 128
    accumulators in registers with its MMAs asynchronous; and the host's
    copies of its constants and shared-memory size."""
    import re

    text = _kernels.source("grad_weight_overlap.cu")
    found = dict(re.findall(r"constexpr int (GWO_\w+) = (\d+);", text))
    for name in ("THREADS", "CO", "BN", "P", "STAGES"):
        assert int(found[f"GWO_{name}"]) == getattr(_kernels, f"GRAD_WEIGHT_OVERLAP_{name}"), name
    assert "X_BYTES = GWO_BN * P * static_cast<int>(sizeof(T));" in text and "ROW_BYTES = (P + 1) * 8 * static_cast<int>(sizeof(T));" in text
    assert "CHUNK = ROW_BYTES + 16;" in text and "WINDOW_BYTES = GWO_CO * CHUNK;" in text
    assert "BARRIERS = GWO_STAGES * (X_BYTES + WINDOW_BYTES);" in text and "empty = full + GWO_STAGES * 8;" in text
    co, bn, stages = _kernels.GRAD_WEIGHT_OVERLAP_CO, _kernels.GRAD_WEIGHT_OVERLAP_BN, _kernels.GRAD_WEIGHT_OVERLAP_STAGES
    positions = _kernels.GRAD_WEIGHT_OVERLAP_P
    assert _kernels.GRAD_WEIGHT_OVERLAP_SHARED == stages * (bn * positions * 2 + co * ((positions + 1) * 8 * 2 + 16)) + stages * 16
    assert 'static_assert(sizeof(T) == 2, "16-bit builds only");' in text
    names = [name for filename, name in _kernels.all_instantiations() if filename == "grad_weight_overlap.cu" and name.startswith("grad_weight_overlap<")]
    copies = len(_kernels.GRAD_WEIGHT_OVERLAP_COPIES)
    assert len(names) == len(_kernels.OVERLAP_DTYPES) * copies * len(_kernels.INDEX_TYPES)
    _check_asynchronous_without_spills("grad_weight_overlap.cu", names)
