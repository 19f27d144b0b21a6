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
    wavefront: int = Field(description="threads per wavefront (warp)")
    lds_bytes_per_workgroup: int = Field(description="shared memory (LDS) one block may use")


H200 = Gpu(
    name="H200", arch="sm_90", hbm_bytes_per_s=4.8e12, bf16_flops_per_s=990e12,
    fp32_flops_per_s=67e12, wavefront=32, lds_bytes_per_workgroup=227 * 1024,
)
MI300X = Gpu(
    name="MI300X", arch="gfx942", hbm_bytes_per_s=5.3e12, bf16_flops_per_s=1307e12,
    fp32_flops_per_s=163.4e12, wavefront=64, lds_bytes_per_workgroup=64 * 1024,
)
MI355X = Gpu(
    name="MI355X", arch="gfx950", hbm_bytes_per_s=8.0e12, bf16_flops_per_s=2500e12,
    fp32_flops_per_s=157.3e12, wavefront=64, lds_bytes_per_workgroup=160 * 1024,
)

ROOFLINE_GPUS = (H200, MI300X)


def bounds_us(gpu: Gpu, bytes_moved: float, flops: float) -> tuple[float, float]:
    """Memory-bound and compute-bound lower limits, in microseconds."""
    return bytes_moved / gpu.hbm_bytes_per_s * 1e6, flops / gpu.bf16_flops_per_s * 1e6
