// Weight gradients written where the optimizer reduces them from (Megatron-LM's gradient
// accumulation fusion). An optimizer that reduces each unit's gradients from one fp32 buffer of
// the unit registers a sink; in their backward the fused path's GEMMs (concat_linear) ask the
// sinks for the fp32 tensor that takes their weights' gradient and write it there from the GEMM
// itself (an fp32 output from compute-dtype inputs), returning no gradient to autograd. The
// weights' .grad then stays empty, and the optimizer's reduction reads the buffer as it is, where
// it would widen every compute-dtype gradient into it (14 ms a step of the 7B shape on 2 GPUs).
//
// The sinks are process-wide: the backward runs on autograd's device threads, not on the thread
// that owns the optimizer, and several optimizers may be registered at once (a test's ranks are
// threads of one process), each answering for its own weights only. Thread-safe.
#pragma once

#include <torch/types.h>

namespace cohort::core::model {

struct weight_grad_target {
  torch::Tensor grad;       // fp32, the weights' shape; undefined: no sink holds the weights
  bool accumulate = false;  // add to `grad` (a gradient of them is already there) or overwrite it
};

class weight_grad_sink {
 public:
  virtual ~weight_grad_sink() = default;
  // For `weights`, a 2-D contiguous tensor (one parameter, or several parameters' adjacent rows
  // viewed as one): where their gradient goes, or an undefined grad when they are not wholly
  // this sink's. The sink counts the weights' gradient as written from then on.
  virtual weight_grad_target target_of(const torch::Tensor& weights) = 0;
};

// Registers / unregisters a sink (its owner unregisters it before it goes).
void add_weight_grad_sink(weight_grad_sink* sink);
void remove_weight_grad_sink(weight_grad_sink* sink);
// The target of the first registered sink that holds `weights`; an undefined grad when none does.
weight_grad_target weight_grad_target_of(const torch::Tensor& weights);

}  // namespace cohort::core::model
