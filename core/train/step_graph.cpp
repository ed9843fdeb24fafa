// step_graph: a micro-batch's forward and backward as CUDA graphs (see step_graph.hpp).
#include "core/train/step_graph.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/torch.h>

#ifdef COHORT_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace cohort::core::train {

torch::Tensor step_graph::loss_scale(const torch::Tensor& like, double scale) {
  return torch::scalar_tensor(scale, torch::TensorOptions().dtype(torch::kFloat).device(like.device()));
}

#ifdef COHORT_WITH_CUDA

namespace {

// One captured micro-batch: its graph and the tensors it wrote at capture (the loss, and the
// gradients the first micro-batch's graph allocated).
struct captured_pass {
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  torch::Tensor loss;
};

}  // namespace

struct step_graph::state {
  pass f;
  std::vector<torch::Tensor> params;
  std::optional<c10::cuda::CUDAStream> side;  // the warm-up's and the captures' stream (set: warming up)
  bool warmed = false;                        // the warm-up step is over
  bool step_eager = false;                    // this step's ids are not of the graphs' shapes
  torch::Tensor ids, labels, scale;           // the graphs' inputs
  captured_pass first, later;                 // micro-batch 0's graph; a later one's
  std::vector<torch::Tensor> grads;           // first's gradients, per param (undefined: none)

  // `f` on `side` after the current stream's work, the current stream then waiting for it. What
  // it allocates is freed later after use on the current stream; the side stream runs nothing
  // but captures afterwards, whose allocations come from the graphs' own pool, so no later work
  // of the side stream can reuse those blocks early.
  torch::Tensor run_on_side(const torch::Tensor& ids_in, const torch::Tensor& labels_in, double s) {
    const auto device = ids_in.device().index();
    if (!side) side = c10::cuda::getStreamFromPool(false, device);
    const auto current = c10::cuda::getCurrentCUDAStream(device);
    at::cuda::CUDAEvent ready, done;
    ready.record(current);
    ready.block(*side);
    torch::Tensor loss;
    {
      c10::cuda::CUDAStreamGuard guard(*side);
      loss = f(ids_in, labels_in, loss_scale(ids_in, s));
    }
    done.record(*side);
    done.block(current);
    return loss;
  }

  // Captures `f` on the side stream into `into` (nothing runs), its allocations in the pool of
  // `first` (when it has one) or a new one.
  void capture(captured_pass& into, const char* which) {
    // A later micro-batch's graph shares first's pool: replayed after it, never beside it.
    const auto pool = &into != &first ? first.graph->pool() : decltype(first.graph->pool()){0, 0};
    into.graph = std::make_unique<at::cuda::CUDAGraph>();
    try {
      c10::cuda::CUDAStreamGuard guard(*side);
      // Thread-local: other threads of the process (memory status, data) may call the CUDA
      // runtime meanwhile; the autograd engine's thread launches onto the captured stream.
      into.graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      into.loss = f(ids, labels, scale);
      into.graph->capture_end();
    } catch (const std::exception& e) {
      into = captured_pass{};
      throw std::runtime_error(std::string("train.cuda_graph: capturing ") + which +
                               " micro-batch's forward and backward as a CUDA graph failed (" + e.what() +
                               "); set train.cuda_graph to false to run the step without a graph");
    }
  }

  // The graphs' inputs shaped as the step's, the eager steps' cached blocks released, micro-batch
  // 0's graph captured (the params' gradients undefined: the graph allocates them).
  void capture_first(const torch::Tensor& ids_in, const torch::Tensor& labels_in) {
    for (const auto& p : params)
      if (p.grad().defined())
        throw std::logic_error("step_graph: a gradient is defined before the step's first micro-batch");
    ids = torch::empty_like(ids_in);
    labels = torch::empty_like(labels_in);
    scale = loss_scale(ids_in, 0.0);
    // The graphs' pool must find the device memory that the eager steps' cache holds.
    c10::cuda::CUDACachingAllocator::emptyCache();
    capture(first, "the first");
    grads.clear();
    for (const auto& p : params) grads.push_back(p.grad());
  }

  torch::Tensor replay(captured_pass& pass, const torch::Tensor& ids_in, const torch::Tensor& labels_in,
                       double s) {
    ids.copy_(ids_in, /*non_blocking=*/true);
    labels.copy_(labels_in, /*non_blocking=*/true);
    scale.fill_(s);
    pass.graph->replay();
    // The gradients are first's, wherever the reduction of the last step left the params' .grad.
    for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i];
    return pass.loss;
  }
};

step_graph::step_graph(pass f, std::vector<torch::Tensor> params) : s_(std::make_unique<state>()) {
  s_->f = std::move(f);
  s_->params = std::move(params);
}

step_graph::~step_graph() = default;

torch::Tensor step_graph::run(const torch::Tensor& ids, const torch::Tensor& labels, double scale,
                              int micro_batch) {
  auto& s = *s_;
  if (!ids.is_cuda()) return s.f(ids, labels, loss_scale(ids, scale));
  if (!s.warmed) {  // the first step, every micro-batch of it, on the side stream
    if (micro_batch > 0 || !s.side) return s.run_on_side(ids, labels, scale);
    s.warmed = true;
  }
  if (micro_batch == 0)
    s.step_eager = s.first.graph && (ids.sizes() != s.ids.sizes() || labels.sizes() != s.labels.sizes());
  if (s.step_eager) return s.f(ids, labels, loss_scale(ids, scale));  // shapes the graphs do not have
  if (!s.first.graph) s.capture_first(ids, labels);
  if (micro_batch == 0) return s.replay(s.first, ids, labels, scale);
  if (!s.later.graph) s.capture(s.later, "a later");  // the gradients first's, added to
  return s.replay(s.later, ids, labels, scale);
}

bool step_graph::captured() const { return s_->first.graph != nullptr; }

#else  // no CUDA: the pass itself

struct step_graph::state {
  pass f;
};

step_graph::step_graph(pass f, std::vector<torch::Tensor>) : s_(std::make_unique<state>()) {
  s_->f = std::move(f);
}

step_graph::~step_graph() = default;

torch::Tensor step_graph::run(const torch::Tensor& ids, const torch::Tensor& labels, double scale, int) {
  return s_->f(ids, labels, loss_scale(ids, scale));
}

bool step_graph::captured() const { return false; }

#endif

}  // namespace cohort::core::train
