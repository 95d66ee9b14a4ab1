"""Registers, shared memory and spills of kernel instantiations, with no GPU.

Usage: ``python scripts/ptxas_report.py [SUBSTRING ...] [--arch sm_90]``.
Compiles each matching instantiation of ``_kernels.all_instantiations()`` to
PTX with NVRTC (CuPy's binding) and assembles it with ``ptxas -v`` from the
CUDA toolkit (found next to ``nvcc`` or through $CUDA_HOME).  One line per
kernel; a non-zero spill is flagged with "SPILL"; ptxas's warnings, and its
wgmma notes (C75xx: an injected warpgroup.arrive, a serialized wgmma), are
printed as they come.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

from cupy_backends.cuda.libs import nvrtc

from cupyconv import _kernels


def _ptxas() -> str:
    for candidate in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/usr/local/cuda-13.0", "/usr/local/cuda-12"):
        path = os.path.join(candidate, "bin", "ptxas")
        if candidate and os.path.exists(path):
            return path
    found = shutil.which("ptxas")
    if found is None:
        sys.exit("ptxas not found: set CUDA_HOME")
    return found


def _ptx(filename: str, names, arch: str) -> str:
    program = nvrtc.createProgram(_kernels.source(filename), filename, [], [])
    try:
        for name in names:
            nvrtc.addNameExpression(program, name)
        nvrtc.compileProgram(program, [f"--gpu-architecture=compute_{arch[3:]}", "-std=c++17"])
        lowered = {nvrtc.getLoweredName(program, name): name for name in names}
        ptx = nvrtc.getPTX(program)
        return (ptx.decode() if isinstance(ptx, bytes) else ptx).rstrip("\x00"), lowered
    finally:
        nvrtc.destroyProgram(program)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="keep instantiations whose name contains one of these")
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args(argv)
    grouped = collections.defaultdict(list)
    for filename, name in _kernels.all_instantiations():
        if not args.patterns or any(p in name for p in args.patterns):
            grouped[filename].append(name)
    ptxas = _ptxas()
    spills = 0
    for filename, names in sorted(grouped.items()):
        ptx, lowered = _ptx(filename, names, args.arch)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "k.ptx")
            with open(path, "w") as f:
                f.write(ptx)
            result = subprocess.run([ptxas, f"-arch={args.arch}", "-v", path, "-o", os.devnull], capture_output=True, text=True)
        if result.returncode:
            print(result.stderr)
            return 1
        current = None
        for line in result.stderr.splitlines():
            if "warning" in line.lower() or "(C75" in line:  # e.g. wgmma serialized (warnings C7510, C7514; info C7520)
                print(line)
                continue
            m = re.search(r"Compiling entry function '(\S+)'", line)
            if m:
                current = lowered.get(m.group(1), m.group(1))
                continue
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and current:
                spill = int(m.group(1)) + int(m.group(2))
                spills += spill > 0
                stores_loads = f"spill {m.group(1)}/{m.group(2)} B" + ("  SPILL" if spill else "")
                continue
            m = re.search(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?", line)
            if m and current:  # (kernels with only dynamic shared memory print no smem)
                print(f"{current:80s} regs {m.group(1):>3s}  smem {m.group(2) or '0':>6s}  {stores_loads}")
                current = None
    return 1 if spills else 0


if __name__ == "__main__":
    sys.exit(main())
