"""The CUDA kernels (*.cu, *.cuh) and, beside each kernel file, the module of
the same stem that describes it on the host: its tiles, its sizes as the
kernel has them, its template instantiations' names, its shared-memory
layouts and the instantiations the library can launch (conv_fold.py for
conv_fold.cu, ...).  common.py holds what several kernel files share,
phases.py the polyphase tables and the window kernels' records.

Pure Python with no CuPy import; cupyconv._kernels re-exports these names
for cupyconv._cuda, which launches what they describe.
"""
