"""Outputs bit for bit, before and after a change that should move none: run
with one tree's cupyconv on PYTHONPATH, it records a digest of every output of
the routing snapshot's default-settings calls (tests/routing_snapshot.py's
pool, five modes, forward and five backward masks) on random inputs fixed by
seed; `compare` lists the calls whose digests differ.

    PYTHONPATH=old python scripts/compare_outputs.py record old.json
    PYTHONPATH=.   python scripts/compare_outputs.py record new.json
    python scripts/compare_outputs.py compare old.json new.json

SHARD=k/n records every n-th case from the k-th (compare takes glob patterns).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


def record(path: str) -> None:
    import cupy
    import ml_dtypes
    import numpy
    import routing_snapshot

    import cupyconv
    from cupyconv import _geometry, bench

    print("cupyconv from", os.path.dirname(cupyconv.__file__))
    digests, started = {}, time.time()
    shard, shards = (int(v) for v in os.environ.get("SHARD", "0/1").split("/"))  # SHARD=k/n: every n-th case from the k-th
    for position, (name, case) in enumerate(sorted(routing_snapshot.pool().items())):
        if position % shards != shard:
            continue
        if name.startswith("index64") or name in bench.PROBLEMS:  # 4 GB arrays, full-size problems: the reliability tests' and the bench's
            continue
        rng = numpy.random.default_rng(sum(map(ord, name)))
        x, w, b = case.arrays(rng)
        shape = _geometry.make_geometry(case.dims, x.shape, w.shape, None, case.stride, case.padding, case.output_padding, case.groups,
                                        case.dilation).output_shape  # fmt: skip
        gy = rng.standard_normal(shape)
        for dtype, precision in routing_snapshot.MODES:
            dt = numpy.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else numpy.dtype(dtype)
            gpu = [None if a is None else cupy.asarray(a.astype(numpy.float32)).astype(dt) for a in (x, w, b, gy)]
            forward = cupyconv.conv_transpose1d if case.dims == 1 else cupyconv.conv_transpose2d
            backward = cupyconv.conv_transpose1d_backward if case.dims == 1 else cupyconv.conv_transpose2d_backward
            for op in routing_snapshot.OPS:
                key = f"{name}|{dtype}{'' if precision is None else '-' + precision}|{op}"
                try:
                    if op == "forward":
                        results = (forward(gpu[0], gpu[1], gpu[2], **case.kwargs, precision=precision),)
                    else:
                        results = backward(gpu[3], gpu[0], gpu[1], **case.kwargs, output_mask=routing_snapshot.MASKS[op], precision=precision)
                    digests[key] = [None if r is None else hashlib.sha256(cupy.asnumpy(r).tobytes()).hexdigest()[:20] for r in results]
                except Exception as error:  # noqa: BLE001 (recorded: both trees should raise the same)
                    digests[key] = f"{type(error).__name__}: {error}"
    with open(path, "w") as f:
        json.dump(digests, f, sort_keys=True)
    print(f"{len(digests)} calls recorded in {time.time() - started:.0f} s")


def _load(pattern: str) -> dict:
    import glob

    merged = {}
    for path in sorted(glob.glob(pattern)):
        merged.update(json.load(open(path)))
    return merged


def compare(a: str, b: str) -> int:
    """a, b: files or glob patterns (shards)."""
    old, new = _load(a), _load(b)
    differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    for k in differ[:30]:
        print(f"{k}: {old.get(k)} -> {new.get(k)}")
    print(f"{len(set(old) | set(new))} calls, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
