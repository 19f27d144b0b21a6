"""Peak rates of the GPUs hipevolve reports against, for roofline bounds.

Datasheet figures (see ../shared/GDN.md): dense bf16 with matrix cores, HBM bandwidth.
"""

from pydantic import BaseModel, ConfigDict, Field


class Gpu(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    arch: str = Field(description="gfx target or CUDA compute capability")
    hbm_bytes_per_s: float = Field(description="peak HBM bandwidth, bytes per second")
    bf16_flops_per_s: float = Field(description="peak dense bf16 matrix rate, FLOP per second")
    fp32_flops_per_s: float = Field(description="peak fp32 vector rate, FLOP per second")


H200 = Gpu(
    name="H200", arch="sm_90", hbm_bytes_per_s=4.8e12, bf16_flops_per_s=990e12,
    fp32_flops_per_s=67e12,
)
MI300X = Gpu(
    name="MI300X", arch="gfx942", hbm_bytes_per_s=5.3e12, bf16_flops_per_s=1307e12,
    fp32_flops_per_s=163.4e12,
)

ROOFLINE_GPUS = (H200, MI300X)


def bounds_us(gpu: Gpu, bytes_moved: float, flops: float) -> tuple[float, float]:
    """Memory-bound and compute-bound lower limits, in microseconds."""
    return bytes_moved / gpu.hbm_bytes_per_s * 1e6, flops / gpu.bf16_flops_per_s * 1e6
