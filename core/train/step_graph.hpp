// step_graph: a micro-batch's forward and backward captured as CUDA graphs and replayed
// (torch.cuda.graph's whole-network capture, for the training engine's step).
//
// A small model's step on a fast GPU is bound by the host: each of its thousands of kernels is
// launched by the host, and where a kernel is shorter than its launch the GPU waits (GPT-2 124M
// on an H200: 6 ms idle in a 34 ms step). Replayed as a graph, a micro-batch's forward, loss
// and backward are one launch.
//
// Contract:
// - `pass` computes a micro-batch's summed loss from (ids, labels) and runs its backward of
//   loss × scale (scale: a 0-dim fp32 tensor on the device), leaving the gradients in the .grad
//   of `params`, which hold them nowhere else (none is defined when the step's first micro-batch
//   starts: the optimizer's reduction takes them, zero_optimizer::reduce_grads). It must read
//   nothing back from the device, and every tensor it reads besides its arguments must keep its
//   storage from call to call (the weights, tables computed once).
// - The same pass, the same shapes, the same kernels in the same order as a call without a graph:
//   the gradients and the loss are bitwise the same.
// - run(): the first step (micro-batch 0 on) runs `pass` eagerly on the side stream that later
//   captures (the libraries' lazy set-up: handles, workspaces, attention plans, outside any
//   capture). The second step's first micro-batch captures the first micro-batch's graph (the
//   gradients written), its second, with several micro-batches, a later one's (the gradients
//   added to the first's; capturing runs nothing), and from then on each micro-batch copies its
//   ids, labels and scale into the graphs' inputs and replays one of them on the current stream.
//   A step whose ids have another shape than the captured ones runs eagerly.
// - The graphs' memory (a micro-batch's activations and the gradients) lies in a pool of their
//   own, held while the graphs live: the eager steps' cached blocks are released before the
//   capture so that the device's memory is not held twice.
// - Without CUDA (or on the CPU) run() calls `pass` and nothing more.
// - A capture that fails (an operation the pass runs cannot be captured) throws, naming
//   train.cuda_graph.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <torch/types.h>

namespace cohort::core::train {

class step_graph {
 public:
  using pass = std::function<torch::Tensor(const torch::Tensor& ids, const torch::Tensor& labels,
                                           const torch::Tensor& scale)>;

  // `params`: every tensor whose .grad `pass` may write (frozen ones are left alone).
  step_graph(pass f, std::vector<torch::Tensor> params);
  ~step_graph();
  step_graph(const step_graph&) = delete;
  step_graph& operator=(const step_graph&) = delete;

  // Micro-batch `micro_batch` (0 first) of a step: its summed loss, 0-dim on the device (valid
  // until the next call), its gradients added into (micro-batch 0: written to) the params' .grad.
  torch::Tensor run(const torch::Tensor& ids, const torch::Tensor& labels, double scale, int micro_batch);

  // Whether later micro-batches replay a graph.
  bool captured() const;

  // `scale` as the pass takes it: a 0-dim fp32 tensor on `like`'s device (for a call of the pass
  // without a step_graph).
  static torch::Tensor loss_scale(const torch::Tensor& like, double scale);

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace cohort::core::train
