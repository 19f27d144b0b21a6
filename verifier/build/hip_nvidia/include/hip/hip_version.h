// hipevolve HIP-on-NVIDIA layer: the HIP version this layer presents.
// The API surface it covers (see ../../COVERAGE.md) follows HIP 6.x, so code that tests
// HIP_VERSION for 6.x features takes the same branches here as on a current ROCm.
#ifndef HIPEVOLVE_HIP_VERSION_H
#define HIPEVOLVE_HIP_VERSION_H

#define HIP_VERSION_MAJOR 6
#define HIP_VERSION_MINOR 4
#define HIP_VERSION_PATCH 0
#define HIP_VERSION_GITHASH ""
#define HIP_VERSION_BUILD_ID 0
#define HIP_VERSION_BUILD_NAME "hipevolve-nvidia-layer"
#define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)

#endif
