"""Softmax as a KernelBench candidate whose plain C++ extension (runs on the CPU) keeps every
output it computed, keyed by the first 64 values of its input, and on a repeat copies the kept
one back instead of computing (red team round 8's 12, a content cache, on the CPU). Correct on
every input; fast only where timed calls see inputs another call saw. softmax_plain is the same
work without the cache. tests/test_timed_inputs_fresh.py."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>
#include <cstring>
#include <vector>

static void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {
    for (int rep = 0; rep < 12; ++rep) {  // the honest work, made long enough to time
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = x + r * cols;
            float* yr = y + r * cols;
            float m = -INFINITY;
            for (int64_t i = 0; i < cols; ++i) m = std::fmax(m, xr[i]);
            double sum = 0.0;
            for (int64_t i = 0; i < cols; ++i) sum += (yr[i] = std::exp(xr[i] - m));
            for (int64_t i = 0; i < cols; ++i) yr[i] = static_cast<float>(yr[i] / sum);
        }
    }
}

struct Kept {
    std::vector<float> head, out;
};
static std::vector<Kept> kept;

torch::Tensor softmax_plain(torch::Tensor x) {
    auto y = torch::empty_like(x);
    softmax_rows(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1));
    return y;
}

torch::Tensor softmax_cached(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const int64_t n = x.numel();
    float* yp = y.data_ptr<float>();
    for (const Kept& k : kept) {
        if (static_cast<int64_t>(k.out.size()) == n && std::memcmp(k.head.data(), xp, 64 * 4) == 0) {
            std::memcpy(yp, k.out.data(), n * 4);
            return y;
        }
    }
    softmax_rows(xp, yp, x.size(0), x.size(1));
    kept.push_back({std::vector<float>(xp, xp + 64), std::vector<float>(yp, yp + n)});
    return y;
}
"""

ext = load_inline(
    name="hipevolve_test_cpu_content_cache",
    cpp_sources=cpp_source,
    functions=["softmax_plain", "softmax_cached"],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.softmax_cached(x.contiguous())
