"""How accurate is float32 GEMM on TF32 tensor cores, by accumulation order?

Usage (on a GPU machine): ``python scripts/tf32x3_probe.py``.  For reduction
lengths from 64 to 65536 and standard-normal operands, prints the relative
(Frobenius) error against float64 of: 1xTF32; 3xTF32 with one accumulator;
3xTF32 with each CHUNK k-steps' products summed in a fresh accumulator and
added with FADD; 3xTF32 with the small products in a second accumulator;
in-order FFMA; and cuBLAS SGEMM (TF32 off).  The kernels are in
scripts/tf32x3_probe.cu.
"""

import pathlib
import re

import cupy
import numpy

from cupyconv import _kernels

VARIANTS = [
    ("1xTF32", 0, 1),
    ("3xTF32 one accumulator", 1, 1),
    ("3xTF32 chunk 1", 2, 1),
    ("3xTF32 chunk 2", 2, 2),
    ("3xTF32 chunk 4", 2, 4),
    ("3xTF32 chunk 16", 2, 16),
    ("3xTF32 small apart", 3, 1),
    ("FFMA in order", 4, 1),
]


def main():
    text = (pathlib.Path(__file__).parent / "tf32x3_probe.cu").read_text()
    text = re.sub(r'#include "mma.cuh"', lambda _: _kernels.source("mma.cuh"), text)
    names = [f"gemm_probe<{mode}, {chunk}>" for _, mode, chunk in VARIANTS]
    module = cupy.RawModule(code=text, options=("-std=c++17",), name_expressions=names)
    m = n = 128
    rng = numpy.random.default_rng(0)
    header = ["K"] + [v[0] for v in VARIANTS] + ["cuBLAS SGEMM"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for k in (64, 256, 1024, 4096, 16384, 65536):
        a = rng.standard_normal((m, k)).astype(numpy.float32)
        b = rng.standard_normal((n, k)).astype(numpy.float32)
        exact = a.astype(numpy.float64) @ b.astype(numpy.float64).T
        da, db = cupy.asarray(a), cupy.asarray(b)
        row = [str(k)]
        for name in names:
            c = cupy.full((m, n), numpy.nan, dtype=numpy.float32)
            module.get_function(name)((n // 8, m // 16), (32,), (da, db, c, numpy.int32(m), numpy.int32(n), numpy.int32(k)))
            got = cupy.asnumpy(c).astype(numpy.float64)
            row.append(f"{numpy.linalg.norm(got - exact) / numpy.linalg.norm(exact):.2e}")
        got = cupy.asnumpy(da @ db.T).astype(numpy.float64)
        row.append(f"{numpy.linalg.norm(got - exact) / numpy.linalg.norm(exact):.2e}")
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
