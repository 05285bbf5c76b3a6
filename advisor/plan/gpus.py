"""The GPU registry: one record per GPU (datasheet figures, links, sources, and the CUDA device names it matches),
read by the plan (``hardware.gpu``), the performance model and the trial. Adding a GPU is adding one record.

The alternatives: a table per consumer (the plan's peaks, the trial's name matching and the README's sources once
lived apart, and a GB200 device matched the B200 row) or a measured profile per cluster (exact, needs the cluster).

>>> gpu("B200").memory_gib, match_device("NVIDIA GB200"), match_device("NVIDIA B300 SXM6 AC"), match_device("Tesla T4")
(179.1, 'GB200', 'B300', None)
>>> unknown_gpu("b200")[:44]
"unknown GPU 'b200' (did you mean 'B200'?); k"
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field

# One record per GPU, as the plan's hardware.gpu names it (the names of the shared MB performance CSV's `system`
# column):
# memory_gib: usable memory (nvidia-smi for the GPUs measured here; the datasheet's GB in GiB for the others);
# bf16/fp8/fp4_tflops: dense tensor-core peaks (datasheets quote FP8, FP4 and BF16 "with sparsity": half of that),
# None where the GPU has no such tensor cores; hbm_tbps: HBM bandwidth; nvlink_gbps: NVLink per GPU and direction
# (half the bidirectional figure NVIDIA quotes); nics_per_node x nic_gbps (GB/s per NIC, 400 Gb/s = 50) serve
# gpus_per_node GPUs, rail-aligned (one NIC per GPU in every system here); nvlink_domain: GPUs one NVLink switch
# fabric joins (8 on HGX/DGX boards, 72 in an NVL72 rack); sms: streaming multiprocessors (GEMM waves);
# compute_capability: what Transformer Engine checks a recipe against (transformer_engine/pytorch/quantization.py).
# host_gbps: one GPU's link to host memory per direction, GB/s, which CPU offloading of activations crosses: PCIe
# Gen4 x16 (32) on DGX A100, Gen5 x16 (64) on DGX H100/H200/B200 and on DGX B300 (its Xeon 6 hosts run Gen5), and on
# GB200/GB300 the Grace CPU's NVLink-C2C, 900 GB/s both ways for the superchip's two GPUs: 225 each way per GPU.
# host_memory_gib: the node's host (CPU) memory as shipped, GiB (DIMMs and LPDDR5X come in binary sizes: a "2 TB"
# DGX is 2048 GiB), which Megatron-Bridge's offline preparation holds every tokenized sample in (advisor/prepare/
# resources.py, trap mb-6125): per DGX system (8 GPUs), per compute tray on NVL72 (2 Grace CPUs, 4 GPUs).


@dataclass(frozen=True, kw_only=True)
class GpuRecord:
    name: str
    memory_gib: float
    bf16_tflops: float
    fp8_tflops: float | None
    fp4_tflops: float | None
    hbm_tbps: float
    nvlink_gbps: float
    nics_per_node: int
    nic_gbps: float
    gpus_per_node: int
    nvlink_domain: int
    sms: int
    compute_capability: float
    host_gbps: float
    host_memory_gib: float
    source: str = field(repr=False)
    # CUDA device names (torch.cuda.get_device_name) this record describes: regular expressions, matched in the
    # registry's order, upper case; word boundaries keep "GB200" off B200 and "GH200" off H200
    device_patterns: tuple[str, ...] = ()
    device_example: str = ""  # one real device name, checked by a test to match

    def row(self) -> dict:
        """The figures as the plan's hardware table holds them (no name, source or patterns)."""
        d = asdict(self)
        for k in ("name", "source", "device_patterns", "device_example"):
            d.pop(k)
        return d


GPUS: tuple[GpuRecord, ...] = (
    GpuRecord(
        name='A100-40GB',
        memory_gib=40.0,
        bf16_tflops=312.0,
        fp8_tflops=None,
        fp4_tflops=None,
        hbm_tbps=1.555,
        nvlink_gbps=300.0,
        nics_per_node=8,
        nic_gbps=25.0,
        gpus_per_node=8,
        nvlink_domain=8,
        sms=108,
        compute_capability=8.0,
        host_gbps=32.0,
        host_memory_gib=1024.0,
        device_patterns=(r'\bA100\b.*\b40GB\b',),
        device_example='NVIDIA A100-SXM4-40GB',
        source=(
            'NVIDIA A100 datasheet (2021): 312 TFLOP/s BF16 dense, 40 GB HBM2 at 1,555 GB/s, NVLink 600 GB/s;'
            ' DGX A100 user guide: 8 x 200 Gb/s HDR InfiniBand; DGX A100 datasheet (2020): 1 TB of system memory in the'
            ' 320 GB (40 GB GPU) system'
        ),
    ),
    GpuRecord(
        name='A100-80GB',
        memory_gib=80.0,
        bf16_tflops=312.0,
        fp8_tflops=None,
        fp4_tflops=None,
        hbm_tbps=2.039,
        nvlink_gbps=300.0,
        nics_per_node=8,
        nic_gbps=25.0,
        gpus_per_node=8,
        nvlink_domain=8,
        sms=108,
        compute_capability=8.0,
        host_gbps=32.0,
        host_memory_gib=2048.0,
        device_patterns=(r'\bA100\b',),
        device_example='NVIDIA A100-SXM4-80GB',
        source=(
            'NVIDIA A100 datasheet (2021): 80 GB HBM2e at 2,039 GB/s; DGX A100 datasheet (2020): 2 TB of system'
            ' memory in the 640 GB (80 GB GPU) system; otherwise as A100-40GB'
        ),
    ),
    GpuRecord(
        name='H100-80GB',
        memory_gib=79.6,
        bf16_tflops=989.0,
        fp8_tflops=1979.0,
        fp4_tflops=None,
        hbm_tbps=3.35,
        nvlink_gbps=450.0,
        nics_per_node=8,
        nic_gbps=50.0,
        gpus_per_node=8,
        nvlink_domain=8,
        sms=132,
        compute_capability=9.0,
        host_gbps=64.0,
        host_memory_gib=2048.0,
        device_patterns=(r'\bH100\b',),
        device_example='NVIDIA H100 80GB HBM3',
        source=(
            'NVIDIA H100 datasheet (2023), SXM: 1,979 / 3,958 TFLOP/s BF16 / FP8 with sparsity, 80 GB HBM3 at'
            ' 3.35 TB/s, NVLink 900 GB/s; DGX H100 user guide: 8 x 400 Gb/s ConnectX-7; DGX BasePOD reference'
            ' architecture (core components): 2 TB of DDR5 system memory in DGX H100 and H200'
        ),
    ),
    GpuRecord(
        name='H200-141GB',
        memory_gib=140.4,
        bf16_tflops=989.0,
        fp8_tflops=1979.0,
        fp4_tflops=None,
        hbm_tbps=4.8,
        nvlink_gbps=450.0,
        nics_per_node=8,
        nic_gbps=50.0,
        gpus_per_node=8,
        nvlink_domain=8,
        sms=132,
        compute_capability=9.0,
        host_gbps=64.0,
        host_memory_gib=2048.0,
        device_patterns=(r'\bH200\b',),
        device_example='NVIDIA H200',
        source=(
            "NVIDIA H200 datasheet (2024): H100's tensor cores, 141 GB HBM3e at 4.8 TB/s; DGX H200: 8 x 400 "
            'Gb/s ConnectX-7, 2 TB of DDR5 system memory (DGX BasePOD reference architecture)'
        ),
    ),
    GpuRecord(
        name='B200',
        memory_gib=179.1,
        bf16_tflops=2250.0,
        fp8_tflops=4500.0,
        fp4_tflops=9000.0,
        hbm_tbps=8.0,
        nvlink_gbps=900.0,
        nics_per_node=8,
        nic_gbps=50.0,
        gpus_per_node=8,
        nvlink_domain=8,
        sms=148,
        compute_capability=10.0,
        host_gbps=64.0,
        host_memory_gib=2048.0,
        device_patterns=(r'\bB200\b',),
        device_example='NVIDIA B200',
        source=(
            'NVIDIA DGX B200 datasheet (2025): 72 / 144 PFLOP/s FP8 / FP4 with sparsity for 8 GPUs, 1,440 GB '
            'HBM3e at 64 TB/s, NVLink 1.8 TB/s per GPU, 8 x 400 Gb/s ConnectX-7; DGX B200 user guide: system memory'
            ' 2 TB in 32 DIMMs (upgradable to 4 TB)'
        ),
    ),
    GpuRecord(
        name='B300',
        memory_gib=268.2,
        bf16_tflops=2250.0,
        fp8_tflops=4500.0,
        fp4_tflops=13500.0,
        hbm_tbps=8.0,
        nvlink_gbps=900.0,
        nics_per_node=8,
        nic_gbps=100.0,
        gpus_per_node=8,
        nvlink_domain=8,
        sms=160,
        compute_capability=10.3,
        host_gbps=64.0,
        host_memory_gib=2048.0,
        device_patterns=(r'\bB300\b',),
        device_example='NVIDIA B300 SXM6 AC',
        source=(
            'NVIDIA HGX B300 datasheet (2025), per 8 GPUs: 108 PFLOP/s FP4 dense, 72 FP8 and 36 BF16 with '
            'sparsity, 2.3 TB HBM3e, NVLink 1.8 TB/s per GPU; DGX B300: 8 x 800 Gb/s ConnectX-8; system memory taken'
            " as DGX B200's 2 TB (not checked in DGX B300's guide)"
        ),
    ),
    GpuRecord(
        name='GB200',
        memory_gib=173.2,
        bf16_tflops=2500.0,
        fp8_tflops=5000.0,
        fp4_tflops=10000.0,
        hbm_tbps=8.0,
        nvlink_gbps=900.0,
        nics_per_node=4,
        nic_gbps=50.0,
        gpus_per_node=4,
        nvlink_domain=72,
        sms=148,
        compute_capability=10.0,
        host_gbps=225.0,
        host_memory_gib=960.0,
        device_patterns=(r'\bGB200\b',),
        device_example='NVIDIA GB200',
        source=(
            'NVIDIA GB200 NVL72 datasheet (2024), per 72 GPUs: 1,440 / 720 / 360 PFLOP/s FP4 / FP8 / BF16 '
            'with sparsity, 13.4 TB HBM3e at 576 TB/s, NVLink 130 TB/s; compute trays of 4 GPUs with 4 x 400 '
            'Gb/s ConnectX-7; GB200 superchip: one Grace CPU and two GPUs over NVLink-C2C, 900 GB/s '
            'bidirectional; each Grace with 480 GB LPDDR5X (17 TB in the rack): 960 per tray of two'
        ),
    ),
    GpuRecord(
        name='GB300',
        memory_gib=268.2,
        bf16_tflops=2500.0,
        fp8_tflops=5000.0,
        fp4_tflops=15000.0,
        hbm_tbps=8.0,
        nvlink_gbps=900.0,
        nics_per_node=4,
        nic_gbps=100.0,
        gpus_per_node=4,
        nvlink_domain=72,
        sms=160,
        compute_capability=10.3,
        host_gbps=225.0,
        host_memory_gib=960.0,
        device_patterns=(r'\bGB300\b',),
        device_example='NVIDIA GB300',
        source=(
            'NVIDIA GB300 NVL72 datasheet (2025), per 72 GPUs: 1,080 PFLOP/s FP4 dense, 720 / 360 FP8 / BF16 '
            'with sparsity, 20 TB HBM3e at 576 TB/s, NVLink 130 TB/s, 72 x 800 Gb/s ConnectX-8; Grace CPU to '
            'its two GPUs over NVLink-C2C, 900 GB/s bidirectional; each Grace with 480 GB LPDDR5X: 960 per tray of '
            'two'
        ),
    ),
)
BY_NAME: dict[str, GpuRecord] = {g.name: g for g in GPUS}


def gpu(name: str) -> GpuRecord:
    """The record named ``name`` (exactly as the registry spells it); KeyError otherwise."""
    return BY_NAME[name]


def match_device(device_name: str) -> str | None:
    """The record a CUDA device name describes, or None (no record: the step-time model has no figures for it).

    >>> match_device("NVIDIA H100 80GB HBM3"), match_device("NVIDIA A100-SXM4-40GB"), match_device("NVIDIA GH200 480GB")
    ('H100-80GB', 'A100-40GB', None)
    """
    upper = device_name.upper()
    for g in GPUS:
        if any(re.search(p, upper) for p in g.device_patterns):
            return g.name
    return None


def unknown_gpu(name: str) -> str:
    """One message for a GPU name the registry does not hold: the closest name (case and punctuation aside) and
    every known one. A near name is suggested, never taken: the user's value is not changed without a word."""
    folded = {re.sub(r"[^0-9a-z]", "", k.lower()): k for k in BY_NAME}
    key = re.sub(r"[^0-9a-z]", "", name.lower())
    near = folded.get(key) or next((v for k, v in folded.items() if k.startswith(key) and key), None)
    if near is None:
        close = difflib.get_close_matches(key, list(folded), n=1, cutoff=0.6)
        near = folded[close[0]] if close else None
    hint = f" (did you mean {near!r}?)" if near else ""
    return f"unknown GPU {name[:40]!r}{hint}; known: {', '.join(BY_NAME)}"


__all__ = ["BY_NAME", "GPUS", "GpuRecord", "gpu", "match_device", "unknown_gpu"]
