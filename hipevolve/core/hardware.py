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


# Gpu(name, arch, HBM bytes/s, dense bf16 FLOP/s, fp32 vector FLOP/s), from the datasheets.
H200 = Gpu("H200", "sm_90", 4.8e12, 990e12, 67e12)
MI300X = Gpu("MI300X", "gfx942", 5.3e12, 1307e12, 163.4e12)

ROOFLINE_GPUS = (H200, MI300X)

# The GPUs a judge may find itself on: its roofline gate and shares use the card it runs on (a
# kernel on an MI355X may beat MI300X's bound honestly; on an H100, H200's bound is too lax).
H100 = Gpu("H100", "sm_90", 3.35e12, 989e12, 67e12)
H100_PCIE = Gpu("H100 PCIe", "sm_90", 2.0e12, 756e12, 51e12)
H100_NVL = Gpu("H100 NVL", "sm_90", 3.9e12, 835e12, 60e12)
MI325X = replace(MI300X, name="MI325X", hbm_bytes_per_s=6.0e12)
MI350X = Gpu("MI350X", "gfx950", 8.0e12, 2307e12, 144.2e12)
MI355X = Gpu("MI355X", "gfx950", 8.0e12, 2516e12, 157.3e12)
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
