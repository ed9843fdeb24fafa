// JSON of the worker-process link (see worker_process_link.hpp).
#include "actors/worker_process_link.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/comm/store_auth.hpp"
#include "core/store/posix_io.hpp"
#include "net/json_inspector.hpp"

namespace cohort::actors {

using nlohmann::json;

std::string worker_setup_to_json(const worker_setup& s) { return net::to_json_view(s).dump(); }


worker_setup worker_setup_from_json(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::invalid_argument(std::string(worker_setup_variable) + " is not a JSON object");
  return net::from_json_view<worker_setup>(j);
}

worker_setup_file::worker_setup_file(const worker_setup& setup) {
  std::string name = (std::filesystem::temp_directory_path() / "cohort-worker-setup-XXXXXX").string();
  core::store::unique_fd fd(::mkstemp(name.data()));  // mode 0600
  if (!fd.valid()) core::store::throw_errno("cannot create", name);
  path_ = name;
  try {
    core::store::write_all(fd.get(), worker_setup_to_json(setup), path_);
    fd.close_checked(path_);
  } catch (...) {
    ::unlink(path_.c_str());
    throw;
  }
}

worker_setup_file::~worker_setup_file() { ::unlink(path_.c_str()); }  // ENOENT: the worker did

worker_setup read_worker_setup() {
  if (const char* file = std::getenv(worker_setup_file_variable)) {
    std::ifstream in(file, std::ios::binary);
    if (!in)
      throw std::invalid_argument(std::string("cannot read the setup file ") + file + " ($" +
                                  worker_setup_file_variable + ")");
    std::ostringstream text;
    text << in.rdbuf();
    ::unlink(file);
    return worker_setup_from_json(text.str());
  }
  if (const char* text = std::getenv(worker_setup_variable)) return worker_setup_from_json(text);
  throw std::invalid_argument(std::string("neither $") + worker_setup_file_variable + " nor $" +
                              worker_setup_variable + " is set (cohort-worker is started by "
                              "cluster-worker)");
}

std::map<std::string, std::string> worker_environment(const worker_setup& setup,
                                                      const std::string& setup_file,
                                                      const std::vector<std::string>& node_gpu_ids,
                                                      std::int32_t node_gpu_count) {
  auto env = config::parse_job_spec(setup.spec_json).runtime_env.env_vars;
  std::string visible;
  for (const auto index : setup.gpus) {
    if (index < 0 || index >= node_gpu_count)
      throw std::invalid_argument("rank " + std::to_string(setup.rank) + " of job " + setup.job_id +
                                  " was assigned GPU index " + std::to_string(index) + " but node " +
                                  setup.node + " offers " + std::to_string(node_gpu_count) + " GPUs");
    const auto i = static_cast<std::size_t>(index);
    visible += (visible.empty() ? "" : ",") +
               (i < node_gpu_ids.size() ? node_gpu_ids[i] : std::to_string(index));
  }
  env["CUDA_VISIBLE_DEVICES"] = visible;
  env[worker_setup_file_variable] = setup_file;
  return env;
}

core::train::worker_context worker_context_for(const worker_setup& setup) {
  core::train::worker_context ctx;
  ctx.spec = config::parse_job_spec(setup.spec_json);
  ctx.job_id = setup.job_id;
  ctx.rank = setup.rank;
  ctx.world_size = setup.world_size;
  ctx.attempt = setup.attempt;
  ctx.node = setup.node;
  ctx.store_address = setup.store_address;
  ctx.store_secret = core::comm::store_secret_from_hex(
      setup.store_secret, "worker setup of rank " + std::to_string(setup.rank) + " of job " + setup.job_id);
  ctx.node_address = setup.node_address;
  ctx.run_dir = ctx.spec.run.storage_path + "/" + ctx.spec.name;
  return ctx;
}

namespace {

// A control line: the message's JSON view with "type" (text that is not UTF-8, say in a reason,
// is replaced rather than refused).
template <class T>
std::string control_line(const char* type, const T& message) {
  auto j = net::to_json_view(message);
  j["type"] = type;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

progress_report progress_of(const worker_setup& setup, const core::train::step_report& r) {
  progress_report out;
  out.job_id = setup.job_id;
  out.rank = setup.rank;
  out.attempt = setup.attempt;
  out.step = r.step;
  out.total_steps = r.total_steps;
  out.loss = r.loss;
  out.lr = r.lr;
  out.grad_norm = r.grad_norm;
  out.tokens_per_s = r.tokens_per_s;
  out.mfu = r.mfu;
  out.checkpoint_step = r.checkpoint_step;
  out.held_before_step = r.held_before_step;
  return out;
}

std::string progress_line(const progress_report& r) { return control_line("progress", r); }

std::string heartbeat_line(std::int64_t step, double collective_wait_s) {
  rank_heartbeat beat;
  beat.step = step;
  beat.collective_wait_s = collective_wait_s;
  return control_line("heartbeat", beat);
}

std::string finished_line(bool ok, const std::string& reason, failure_kind kind) {
  worker_finished end;
  end.ok = ok;
  end.reason = reason;
  end.kind = kind;
  return control_line("finished", end);
}

std::optional<worker_control> parse_control_line(const std::string& line) {
  auto j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string())
    return std::nullopt;
  try {
    worker_control c;
    if (j["type"] == "progress") {
      c.type = worker_control::kind::progress;
      c.progress = net::from_json_view<progress_report>(j);
      return c;
    }
    if (j["type"] == "heartbeat") {
      c.type = worker_control::kind::heartbeat;
      const auto beat = net::from_json_view<rank_heartbeat>(j);
      c.step = beat.step;
      c.collective_wait_s = beat.collective_wait_s;
      return c;
    }
    if (j["type"] == "finished") {
      c.type = worker_control::kind::finished;
      const auto end = net::from_json_view<worker_finished>(j);
      c.ok = end.ok;
      c.reason = end.reason;
      c.kind = end.kind;
      return c;
    }
  } catch (const net::json_error&) {
  }
  return std::nullopt;
}

}  // namespace cohort::actors
