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
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/comm/store_auth.hpp"
#include "core/store/posix_io.hpp"

namespace cohort::actors {

using nlohmann::json;

std::string worker_setup_to_json(const worker_setup& s) {
  return json{{"job_id", s.job_id},   {"spec_json", s.spec_json}, {"rank", s.rank},
              {"world_size", s.world_size}, {"attempt", s.attempt}, {"node", s.node},
              {"store_address", s.store_address}, {"node_address", s.node_address},
              {"gpus", s.gpus}, {"store_secret", s.store_secret}}
      .dump();
}

namespace {

// v as a T when it is a JSON integer that T holds; nullopt otherwise. (get<T>() casts a float or
// an integer out of T's range, undefined behaviour for a float past it: found by fuzzing.)
template <typename T>
std::optional<T> as_integer(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(u);
  }
  if (!v.is_number_integer()) return std::nullopt;
  const auto i = v.get<std::int64_t>();
  if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max()) return std::nullopt;
  return static_cast<T>(i);
}

// An integer field of a control line (absent: `absent`); a malformed one throws json's
// out_of_range, which parse_control_line turns into "not a control line".
template <typename T>
T integer_field(const json& j, const char* name, std::optional<T> absent = std::nullopt) {
  if (!j.contains(name)) {
    if (absent) return *absent;
    throw std::out_of_range(name);
  }
  const auto v = as_integer<T>(j.at(name));
  if (!v) throw std::out_of_range(name);
  return *v;
}

}  // namespace

worker_setup worker_setup_from_json(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::invalid_argument(std::string(worker_setup_variable) + " is not a JSON object");
  auto field = [&](const char* name) -> const json& {
    if (!j.contains(name)) throw std::invalid_argument(std::string("worker setup lacks ") + name);
    return j.at(name);
  };
  auto int_field = [&](const char* name) {
    const auto v = as_integer<std::int32_t>(field(name));
    if (!v) throw std::invalid_argument(std::string("worker setup's ") + name + " is not a 32-bit integer");
    return *v;
  };
  worker_setup s;
  try {
    s.job_id = field("job_id").get<std::string>();
    s.spec_json = field("spec_json").get<std::string>();
    s.rank = int_field("rank");
    s.world_size = int_field("world_size");
    s.attempt = int_field("attempt");
    s.node = field("node").get<std::string>();
    s.store_address = field("store_address").get<std::string>();
    s.node_address = field("node_address").get<std::string>();
    if (!field("gpus").is_array()) throw std::invalid_argument("worker setup's gpus is not an array");
    for (const auto& g : field("gpus")) {
      const auto v = as_integer<std::int32_t>(g);
      if (!v) throw std::invalid_argument("worker setup's gpus holds something other than GPU indices");
      s.gpus.push_back(*v);
    }
    s.store_secret = field("store_secret").get<std::string>();
  } catch (const json::type_error& e) {
    throw std::invalid_argument(std::string("worker setup has a mistyped field: ") + e.what());
  }
  return s;
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

std::string progress_line(const progress_report& r) {
  return json{{"type", "progress"}, {"job_id", r.job_id}, {"rank", r.rank}, {"step", r.step},
              {"total_steps", r.total_steps}, {"loss", r.loss}, {"lr", r.lr},
              {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s}, {"mfu", r.mfu},
              {"checkpoint_step", r.checkpoint_step}, {"held_before_step", r.held_before_step}}
      .dump();
}

std::string heartbeat_line(std::int64_t step, double collective_wait_s) {
  return json{{"type", "heartbeat"}, {"step", step}, {"collective_wait_s", collective_wait_s}}.dump();
}

std::string finished_line(bool ok, const std::string& reason, failure_kind kind) {
  return json{{"type", "finished"}, {"ok", ok}, {"reason", reason}, {"kind", to_string(kind)}}.dump();
}

std::optional<worker_control> parse_control_line(const std::string& line) {
  auto j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string())
    return std::nullopt;
  try {
    worker_control c;
    if (j["type"] == "progress") {
      c.type = worker_control::kind::progress;
      auto& r = c.progress;
      r.job_id = j.at("job_id").get<std::string>();
      r.rank = integer_field<std::int32_t>(j, "rank");
      r.step = integer_field<std::int64_t>(j, "step");
      r.total_steps = integer_field<std::int64_t>(j, "total_steps");
      r.loss = j.at("loss").get<double>();
      r.lr = j.at("lr").get<double>();
      r.grad_norm = j.at("grad_norm").get<double>();
      r.tokens_per_s = j.at("tokens_per_s").get<double>();
      r.mfu = j.at("mfu").get<double>();
      r.checkpoint_step = integer_field<std::int64_t>(j, "checkpoint_step", std::int64_t{0});
      r.held_before_step = integer_field<std::int64_t>(j, "held_before_step", std::int64_t{0});
      return c;
    }
    if (j["type"] == "heartbeat") {
      c.type = worker_control::kind::heartbeat;
      c.step = integer_field<std::int64_t>(j, "step");
      c.collective_wait_s = j.at("collective_wait_s").get<double>();
      return c;
    }
    if (j["type"] == "finished") {
      c.type = worker_control::kind::finished;
      c.ok = j.at("ok").get<bool>();
      c.reason = j.at("reason").get<std::string>();
      c.kind = failure_kind_from_string(j.value("kind", std::string()));
      return c;
    }
  } catch (const json::exception&) {
  } catch (const std::out_of_range&) {
  }
  return std::nullopt;
}

}  // namespace cohort::actors
