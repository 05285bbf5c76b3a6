"""Step time from a per-layer, per-step performance model (kernels, collectives, pipeline, data parallel).

``hardware`` the GPU and its links, ``kernels`` GEMMs, attention and memory-bound work on one GPU, ``collectives``
NCCL-style transfers, ``gemms`` the GEMM shapes of a layer, ``step`` the assembly into one step and its breakdown,
``calibration`` the efficiency constants and the published runs they are fitted on.
"""
