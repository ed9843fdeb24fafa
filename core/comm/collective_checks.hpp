// Argument checks every backend applies before enqueuing a collective, so that bad tensors are
// refused on the calling thread with a message naming the operation, rank and what is allowed.
#pragma once

#include "core/comm/process_group.hpp"

namespace cohort::core::comm {

// `where` is e.g. "gloo rank 1 all_reduce". expected: at::kCPU or at::kCUDA.
void check_tensor(const at::Tensor& t, const std::string& where, const char* name,
                  c10::DeviceType expected);
void check_reduce(const at::Tensor& t, reduce_op op, const std::string& where);
void check_reduce_scatter(const at::Tensor& input, const at::Tensor& output, int world_size,
                          const std::string& where);
void check_all_gather(const at::Tensor& input, const at::Tensor& output, int world_size,
                      const std::string& where);
void check_root(int root, int world_size, const std::string& where);

}  // namespace cohort::core::comm
