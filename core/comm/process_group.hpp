// The collective interface (as c10d's ProcessGroup): one group of world_size ranks, each rank
// holding one instance. Every call enqueues the operation and returns a work handle; operations
// run in call order, which must be the same on every rank. abort() makes every pending and
// future operation fail fast, on this rank and (by closing connections) on its peers.
// Destroying a group without abort() first waits for its queued operations.
#pragma once

#include "core/comm/store.hpp"
#include "core/comm/work.hpp"

#include <ATen/core/Tensor.h>

#include <memory>

namespace cohort::core::comm {

enum class reduce_op { sum, avg, max, min };
enum class backend_kind { gloo, nccl };

const char* to_string(reduce_op op);
const char* to_string(backend_kind backend);
// Parses "gloo" / "nccl"; throws comm_error (invalid_argument) naming the text otherwise.
backend_kind parse_backend(const std::string& text);

struct group_options {
  backend_kind backend = backend_kind::gloo;
  int rank = 0;
  int world_size = 1;
  // The rendezvous store and the prefix of every key this group writes: give each job attempt
  // and each group its own ("job-7/attempt-2/dp/").
  std::shared_ptr<store> rendezvous;
  std::string key_prefix;
  // Bounds rendezvous, every operation and every wait.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  // Gloo: the address this rank's transport binds and advertises (or an interface name,
  // which wins when set).
  std::string gloo_hostname = "127.0.0.1";
  std::string gloo_interface;
  // Gloo: the attempt's secret (store_auth.hpp; a job's ranks get the rendezvous store's). When
  // set, the two ends of every pair prove to each other that they hold it (a challenge each way,
  // then pair_proof) right after connecting, before the group is returned: a process that
  // connected in a peer's place, having read the pair's address off the network, fails the
  // group (comm_error peer_failure naming the pair) before any tensor moves. Empty: no proof.
  std::string peer_secret;
  // NCCL: the CUDA device of this rank (-1 = the current device).
  int cuda_device = -1;
};

class process_group {
 public:
  virtual ~process_group() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual backend_kind backend() const = 0;

  // In place over the whole tensor. avg needs a floating dtype.
  virtual std::shared_ptr<work> all_reduce(at::Tensor tensor, reduce_op op) = 0;
  // input (size() * n) flat -> output (n): output = reduction over ranks of input's chunk rank().
  virtual std::shared_ptr<work> reduce_scatter(at::Tensor input, at::Tensor output, reduce_op op) = 0;
  // input (n) -> output (size() * n): chunk r of output = rank r's input.
  virtual std::shared_ptr<work> all_gather(at::Tensor input, at::Tensor output) = 0;
  // In place: every rank's tensor becomes root's.
  virtual std::shared_ptr<work> broadcast(at::Tensor tensor, int root) = 0;
  virtual std::shared_ptr<work> barrier() = 0;

  // Fails every pending and future operation with comm_error (aborted) carrying reason, and
  // tears the connections down so peers fail too instead of hanging. Safe from any thread,
  // idempotent; the group cannot be used again (build a new one).
  virtual void abort(const std::string& reason) = 0;
  virtual bool is_aborted() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
};

// Builds and connects this rank's member of a group: blocks until every rank has joined, and
// throws comm_error (timeout) when one does not within options.timeout, or (invalid_argument)
// for bad options, or for nccl in a build without CUDA.
std::unique_ptr<process_group> make_process_group(const group_options& options);

}  // namespace cohort::core::comm
