"""phase_gather.cu on the host: its dtypes, block and name."""

from __future__ import annotations

from .common import CUDA_TYPE, instantiation_loop

# phase_gather (phase_gather.cu): one phase of grad_output's rows gathered
# for the backward pass's phase rewrite (16-bit types only: in float32 the
# copy costs more than the stride-1 kernels save).
PHASE_BACKWARD_DTYPES = ("float16", "bfloat16")
GATHER_THREADS = 256
GATHER_ELEMS = 8


def phase_gather_name(dtype: str, index: str) -> str:
    return f"phase_gather<{CUDA_TYPE[dtype]}, {index}>"


def gather_instantiations(dtype: str, index: str) -> list[tuple[str, str]]:
    """phase_gather's build for one dtype and index type."""
    names = []
    if dtype in PHASE_BACKWARD_DTYPES:
        names.append(("phase_gather.cu", phase_gather_name(dtype, index)))
    return names


def instantiations() -> list[tuple[str, str]]:
    """This file's part of _kernels.all_instantiations(), in its order:
    every (file, name) of phase_gather.cu the library can launch."""
    return instantiation_loop(trailing=(gather_instantiations,))
