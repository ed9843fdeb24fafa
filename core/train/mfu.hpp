// Model FLOPs utilisation (MFU) of a training run: the FLOPs a decoder's training step needs per
// token (6N + 12·L·d·T, as PaLM's appendix B counts them) against the dense bf16 tensor-core peak
// of the GPUs it runs on. No torch here.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::core::train {

// 6·params + 12·layers·hidden·seq_len: forward and backward of the weights plus attention scores.
double flops_per_token(std::int64_t params, std::int64_t layers, std::int64_t hidden,
                       std::int64_t seq_len);

// Dense bf16 peak in FLOP/s for a CUDA device name as the driver reports it ("NVIDIA H100 80GB
// HBM3", "NVIDIA H200"): NVIDIA's datasheet figure without sparsity; 0 for a card not listed.
double peak_bf16_flops(const std::string& device_name);

// The name of CUDA device `index`; "" in a build without CUDA or for a device that is not there.
std::string cuda_device_name(int index);

// tokens_per_s · flops_per_token / (peak_per_device · world_size); 0 when the peak is 0 (CPU, an
// unknown card) or nothing was measured.
double mfu(double tokens_per_s, double flops_per_token, double peak_per_device, int world_size);

}  // namespace cohort::core::train
