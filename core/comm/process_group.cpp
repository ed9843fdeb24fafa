// The collective interface (as c10d's ProcessGroup) (see process_group.hpp).
#include "core/comm/process_group.hpp"

#include "core/comm/abort_link.hpp"
#include "core/comm/collective_checks.hpp"
#include "core/comm/comm_error.hpp"
#include "core/comm/gloo_process_group.hpp"
#ifdef COHORT_WITH_NCCL
#include "core/comm/nccl_process_group.hpp"
#endif

#include <c10/util/Exception.h>

namespace cohort::core::comm {

const char* to_string(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::avg: return "avg";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
  }
  return "unknown";
}

const char* to_string(backend_kind backend) {
  return backend == backend_kind::gloo ? "gloo" : "nccl";
}

backend_kind parse_backend(const std::string& text) {
  if (text == "gloo") return backend_kind::gloo;
  if (text == "nccl") return backend_kind::nccl;
  throw comm_error(comm_errc::invalid_argument,
                   "backend '" + text + "' is not known (allowed: gloo, nccl)");
}

void abort_link::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (group_) group_->abort(reason);
}

void abort_link::detach() {
  std::lock_guard<std::mutex> lock(mutex_);
  group_ = nullptr;
}

namespace {
[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw comm_error(comm_errc::invalid_argument, where + ": " + what);
}
}  // namespace

void check_tensor(const at::Tensor& t, const std::string& where, const char* name,
                  c10::DeviceType expected) {
  if (!t.defined()) refuse(where, std::string(name) + " is an undefined tensor");
  if (t.device().type() != expected)
    refuse(where, std::string(name) + " is on " + t.device().str() + "; this backend takes " +
                      c10::DeviceTypeName(expected, true) + " tensors");
  if (!t.is_contiguous())
    refuse(where, std::string(name) + " must be contiguous (call .contiguous() first)");
  if (t.is_sparse()) refuse(where, std::string(name) + " must be dense");
}

void check_reduce(const at::Tensor& t, reduce_op op, const std::string& where) {
  const auto s = t.scalar_type();
  const bool floating = at::isFloatingType(s);
  const bool integral = s == at::kLong || s == at::kInt;
  if (!floating && !integral)
    refuse(where, std::string("dtype ") + c10::toString(s) +
                      " cannot be reduced (allowed: float32, float64, bfloat16, float16, int32, int64)");
  if (op == reduce_op::avg && !floating)
    refuse(where, std::string("avg needs a floating dtype, got ") + c10::toString(s));
}

void check_reduce_scatter(const at::Tensor& input, const at::Tensor& output, int world_size,
                          const std::string& where) {
  if (input.scalar_type() != output.scalar_type())
    refuse(where, std::string("input dtype ") + c10::toString(input.scalar_type()) +
                      " differs from output dtype " + c10::toString(output.scalar_type()));
  if (input.numel() != output.numel() * world_size)
    refuse(where, "input has " + std::to_string(input.numel()) + " elements but must have exactly "
                      "world_size (" + std::to_string(world_size) + ") x output (" +
                      std::to_string(output.numel()) +
                      ") elements: uneven chunks are not supported, pad the flat tensor");
}

void check_all_gather(const at::Tensor& input, const at::Tensor& output, int world_size,
                      const std::string& where) {
  if (input.scalar_type() != output.scalar_type())
    refuse(where, std::string("input dtype ") + c10::toString(input.scalar_type()) +
                      " differs from output dtype " + c10::toString(output.scalar_type()));
  if (output.numel() != input.numel() * world_size)
    refuse(where, "output has " + std::to_string(output.numel()) + " elements but must have "
                      "exactly world_size (" + std::to_string(world_size) + ") x input (" +
                      std::to_string(input.numel()) + ") elements: uneven chunks are not supported");
}

void check_root(int root, int world_size, const std::string& where) {
  if (root < 0 || root >= world_size)
    refuse(where, "root " + std::to_string(root) + " is outside 0.." + std::to_string(world_size - 1));
}

std::unique_ptr<process_group> make_process_group(const group_options& options) {
  const std::string where = std::string(to_string(options.backend)) + " group";
  if (options.world_size < 1)
    refuse(where, "world_size must be >= 1, got " + std::to_string(options.world_size));
  if (options.rank < 0 || options.rank >= options.world_size)
    refuse(where, "rank " + std::to_string(options.rank) + " is outside 0.." +
                      std::to_string(options.world_size - 1));
  if (!options.rendezvous) refuse(where, "no rendezvous store given");
  if (options.timeout.count() <= 0)
    refuse(where, "timeout must be positive, got " + std::to_string(options.timeout.count()) + " ms");
  if (options.backend == backend_kind::gloo) return std::make_unique<gloo_process_group>(options);
#ifdef COHORT_WITH_NCCL
  return std::make_unique<nccl_process_group>(options);
#else
  refuse(where, "this build of cohort has no CUDA/NCCL support (configure with COHORT_CUDA=ON "
                "against a CUDA libtorch), use backend gloo");
#endif
}

}  // namespace cohort::core::comm
