"""Peak rates of the GPUs hipevolve reports against, for roofline bounds.

Datasheet figures (see ../shared/GDN.md): dense bf16 with matrix cores, HBM bandwidth.
"""

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Gpu:
    """One GPU's peak rates. A plain dataclass: the judge reads it, and imports no pydantic."""

    name: str
    arch: str  # gfx target or CUDA compute capability
    hbm_bytes_per_s: float  # peak HBM bandwidth, bytes per second
    bf16_flops_per_s: float  # peak dense bf16 matrix rate, FLOP per second
    fp32_flops_per_s: float  # peak fp32 vector rate, FLOP per second


H200 = Gpu(
    name="H200", arch="sm_90", hbm_bytes_per_s=4.8e12, bf16_flops_per_s=990e12,
    fp32_flops_per_s=67e12,
)
MI300X = Gpu(
    name="MI300X", arch="gfx942", hbm_bytes_per_s=5.3e12, bf16_flops_per_s=1307e12,
    fp32_flops_per_s=163.4e12,
)

ROOFLINE_GPUS = (H200, MI300X)

# The GPUs a judge may find itself on: its roofline gate and shares use the card it runs on (a
# kernel on an MI355X may beat MI300X's bound honestly; on an H100, H200's bound is too lax).
H100 = Gpu(
    name="H100", arch="sm_90", hbm_bytes_per_s=3.35e12, bf16_flops_per_s=989e12,
    fp32_flops_per_s=67e12,
)
H100_PCIE = Gpu(
    name="H100 PCIe", arch="sm_90", hbm_bytes_per_s=2.0e12, bf16_flops_per_s=756e12,
    fp32_flops_per_s=51e12,
)
H100_NVL = Gpu(
    name="H100 NVL", arch="sm_90", hbm_bytes_per_s=3.9e12, bf16_flops_per_s=835e12,
    fp32_flops_per_s=60e12,
)
MI325X = replace(MI300X, name="MI325X", hbm_bytes_per_s=6.0e12)
MI350X = Gpu(
    name="MI350X", arch="gfx950", hbm_bytes_per_s=8.0e12, bf16_flops_per_s=2307e12,
    fp32_flops_per_s=144.2e12,
)
MI355X = Gpu(
    name="MI355X", arch="gfx950", hbm_bytes_per_s=8.0e12, bf16_flops_per_s=2516e12,
    fp32_flops_per_s=157.3e12,
)
# Most specific first: PyTorch names a card "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe",
# "AMD Instinct MI300X" and so on. A variant missing here would take its family's figures: add
# each one with more bandwidth than its family, or its honest kernels could be flagged suspect.
KNOWN_GPUS = (H100_PCIE, H100_NVL, H100, H200, MI325X, MI300X, MI355X, MI350X)


def by_device_name(device_name: str) -> Gpu | None:
    """The known GPU a device name (torch.cuda.get_device_name) names, or None."""
    words = device_name.upper().replace("-", " ").split()
    for gpu in KNOWN_GPUS:
        if all(w in words for w in gpu.name.upper().split()):
            return gpu
    return None


def bounds_us(gpu: Gpu, bytes_moved: float, flops: float) -> tuple[float, float]:
    """Memory-bound and compute-bound lower limits, in microseconds."""
    return bytes_moved / gpu.hbm_bytes_per_s * 1e6, flops / gpu.bf16_flops_per_s * 1e6
