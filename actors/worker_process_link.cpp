// The worker-process link: the setup as JSON, then codec frames both ways (see worker_process_link.hpp).
#include "actors/worker_process_link.hpp"

#include <fcntl.h>
#include <poll.h>
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
#include <system_error>

#include <nlohmann/json.hpp>

#include "config/s3_url.hpp"
#include "core/comm/store_auth.hpp"
#include "core/store/posix_io.hpp"
#include "net/codec.hpp"
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
  auto env = setup.spec.runtime_env.env_vars;
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
  ctx.spec = setup.spec;
  ctx.job_id = setup.job_id;
  ctx.rank = setup.rank;
  ctx.world_size = setup.world_size;
  ctx.attempt = setup.attempt;
  ctx.node = setup.node;
  ctx.store_address = setup.store_address;
  ctx.store_secret = core::comm::store_secret_from_hex(
      setup.store_secret, "worker setup of rank " + std::to_string(setup.rank) + " of job " + setup.job_id);
  ctx.node_address = setup.node_address;
  if (config::is_s3_url(ctx.spec.run.storage_path)) ctx.remote_run = ctx.spec.run.storage_path + "/" + ctx.spec.name;
  ctx.run_dir = config::local_run_dir(ctx.spec.name, ctx.spec.run.storage_path, ctx.spec.run.local_dir);
  return ctx;
}

process_progress progress_of(const core::train::step_report& r) {
  process_progress out;
  out.step = r.step;
  out.total_steps = r.total_steps;
  out.loss = r.loss;
  out.lr = r.lr;
  out.grad_norm = r.grad_norm;
  out.tokens_per_s = r.tokens_per_s;
  out.mfu = r.mfu;
  out.checkpoint_step = r.checkpoint_step;
  out.held_before_step = r.held_before_step;
  out.no_emergency_save = r.no_emergency_save;
  if (r.evaluated) {
    out.eval_step = r.step;
    out.eval_loss = r.eval_loss;
    out.eval_perplexity = r.eval_perplexity;
  }
  return out;
}

progress_report stamped(const worker_setup& setup, const process_progress& p) {
  progress_report out;
  static_cast<step_progress&>(out) = p;
  out.job_id = setup.job_id;
  out.rank = setup.rank;
  out.attempt = setup.attempt;
  return out;
}

rank_heartbeat stamped(const worker_setup& setup, const process_heartbeat& beat) {
  return rank_heartbeat{setup.job_id, setup.attempt, setup.rank, beat.step, beat.collective_wait_s, beat.activity};
}

namespace {

// The link's codec: its own messages only, in frames far smaller than the wire's.
const net::wire_codec& link_codec() {
  static const net::wire_codec codec = [] {
    net::frame_limits limits;
    limits.max_frame_bytes = 64u << 10;
    limits.max_container_elements = 16;
    limits.max_string_bytes = 16u << 10;
    limits.max_bin_bytes = 0;
    limits.max_depth = 4;
    return net::wire_codec(worker_link_messages{}, limits);
  }();
  return codec;
}

constexpr std::size_t length_bytes = 4;

template <class T>
std::string framed(const T& message) {
  const std::string frame = link_codec().encode(message);
  const auto n = static_cast<std::uint32_t>(frame.size());
  std::string out;
  out.reserve(length_bytes + frame.size());
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
  return out + frame;
}

// The largest prefix of `text` of at most `max` bytes that ends at a UTF-8 character's boundary
// (its size; `max` when no character crosses it).
std::size_t utf8_cut(const std::string& text, std::size_t max) {
  if (text.size() <= max) return text.size();
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return cut > 0 ? cut : max;  // not UTF-8 at all: cut anywhere rather than loop
}

// A reason (an exception's text, say) is cut to what the link's codec carries in a string.
process_finished within_limits(process_finished end) {
  const std::size_t max = link_codec().limits().max_string_bytes;
  if (end.reason.size() > max) end.reason = end.reason.substr(0, utf8_cut(end.reason, max - 3)) + "...";
  return end;
}

void raise_to(std::atomic<std::int64_t>& count, std::int64_t n) {
  std::int64_t seen = count.load();
  while (seen < n && !count.compare_exchange_weak(seen, n)) {
  }
}

// "a frame of type id 69 (process_progress)"
std::string frame_of_type(const net::decoded_frame& decoded) {
  const auto id = decoded.type_id.value_or(0);
  const char* name = link_codec().type_name(id);
  return "a frame of type id " + std::to_string(id) + (name ? std::string(" (") + name + ")" : "");
}

}  // namespace

std::string link_frame(const link_hello& hello) { return framed(hello); }
std::string link_frame(const worker_command& command) { return framed(command); }
std::string link_frame(const process_progress& progress) { return framed(progress); }
std::string link_frame(const process_heartbeat& beat) { return framed(beat); }
std::string link_frame(const process_finished& end) { return framed(within_limits(end)); }

std::string link_frames(const process_log& text) {
  const std::size_t max = link_codec().limits().max_string_bytes;
  std::string out;
  std::size_t at = 0;
  for (bool more = true; more;) {
    const std::size_t end = text.line.find('\n', at);
    more = end != std::string::npos;
    std::string line = text.line.substr(at, more ? end - at : std::string::npos);
    at = end + 1;
    for (bool first = true; first || !line.empty(); first = false) {
      const std::size_t cut = utf8_cut(line, max);
      out += framed(process_log{line.substr(0, cut)});
      line.erase(0, cut);
    }
  }
  return out;
}

namespace detail {

std::optional<std::string> link_frames::feed(
    const char* data, std::size_t size, const std::function<bool(const caf::message&)>& take) noexcept {
  if (error_) return error_;
  std::size_t at = 0;
  try {
    pending_.append(data, size);
    while (pending_.size() - at >= length_bytes) {
      std::uint32_t n = 0;
      for (std::size_t i = 0; i < length_bytes; ++i)
        n = (n << 8) | static_cast<unsigned char>(pending_[at + i]);
      if (n > link_codec().limits().max_frame_bytes) {
        error_ = "a frame of " + std::to_string(n) + " bytes, over the link's limit of " +
                 std::to_string(link_codec().limits().max_frame_bytes);
        break;
      }
      if (pending_.size() - at - length_bytes < n) break;
      const auto decoded = link_codec().decode(pending_.data() + at + length_bytes, n);
      at += length_bytes + n;
      if (!decoded.ok()) {
        error_ = "a malformed frame (" + std::string(net::to_string(decoded.error)) + ": " +
                 decoded.detail + ")";
        break;
      }
      if (!opened_) {
        if (!decoded.message.match_element<link_hello>(0)) {
          error_ = "the link opened with " + frame_of_type(decoded) +
                   ", not link_hello (a peer of another build?)";
          break;
        }
        const auto version = decoded.message.get_as<link_hello>(0).version;
        if (version != worker_link_version) {
          error_ = "the peer speaks version " + std::to_string(version) +
                   " of the worker link and this end version " +
                   std::to_string(worker_link_version) +
                   ": cohort-worker and cluster-worker must come from the same build";
          break;
        }
        opened_ = true;
        continue;
      }
      if (decoded.message.match_element<net::wire_error>(0) || !take(decoded.message)) {
        error_ = frame_of_type(decoded) + ", which this end of the link does not take";
        break;
      }
    }
  } catch (const std::exception& e) {  // out of memory
    error_ = e.what();
  }
  if (error_)
    pending_.clear();
  else
    pending_.erase(0, at);
  return error_;
}

}  // namespace detail

command_frame_reader::result command_frame_reader::feed(const char* data, std::size_t size) noexcept {
  result out;
  out.error = frames_.feed(data, size, [&](const caf::message& m) {
    if (!m.match_element<worker_command>(0)) return false;
    out.commands.push_back(m.get_as<worker_command>(0));
    return true;
  });
  return out;
}

process_frame_reader::result process_frame_reader::feed(const char* data, std::size_t size) noexcept {
  result out;
  out.error = frames_.feed(data, size, [&](const caf::message& m) {
    if (m.match_element<process_progress>(0))
      out.messages.emplace_back(m.get_as<process_progress>(0));
    else if (m.match_element<process_heartbeat>(0))
      out.messages.emplace_back(m.get_as<process_heartbeat>(0));
    else if (m.match_element<process_log>(0))
      out.messages.emplace_back(m.get_as<process_log>(0));
    else if (m.match_element<process_finished>(0))
      out.messages.emplace_back(m.get_as<process_finished>(0));
    else
      return false;
    return true;
  });
  return out;
}

void apply_command(const worker_command& command, core::train::run_signals& signals) noexcept {
  switch (command.kind) {
    case worker_command_kind::checkpoint:
      raise_to(signals.checkpoint_requests, command.n);
      break;
    case worker_command_kind::release:
      raise_to(signals.releases, command.n);
      break;
    case worker_command_kind::preempt:
      signals.preempt_deadline_ms.store(command.deadline_ms);
      signals.preempted.store(true);  // before its request: rank 0 that takes it sees the mark
      raise_to(signals.checkpoint_requests, command.n);
      break;
    case worker_command_kind::stop:
      signals.cancelled.store(true);
      break;
  }
}

command_link_reader::command_link_reader(int fd, core::train::run_signals& signals,
                                         std::function<void(const std::optional<std::string>&)> on_end)
    : fd_(fd) {
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(fd_);
    throw std::system_error(err, std::generic_category(), "pipe for the command link's reader");
  }
  thread_ = std::thread([this, &signals, on_end = std::move(on_end)] {
    command_frame_reader frames;
    char buf[4096];
    for (;;) {
      pollfd pfd[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(pfd, 2, -1) < 0) {
        if (errno == EINTR) continue;
        settle(std::nullopt);
        return;
      }
      if (pfd[1].revents != 0) {  // the destructor
        settle(std::nullopt);
        return;
      }
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {  // the node closed its end (or fd_ is not open: no link)
        settle(std::nullopt);
        if (on_end) on_end(std::nullopt);
        return;
      }
      auto got = frames.feed(buf, static_cast<std::size_t>(n));
      if (frames.opened()) settle(std::nullopt);
      for (const auto& c : got.commands) apply_command(c, signals);
      if (got.error) {
        settle(got.error);
        if (on_end) on_end(got.error);
        return;
      }
    }
  });
}

void command_link_reader::settle(const std::optional<std::string>& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (settled_) return;
  settled_ = true;
  opening_error_ = error;
  opened_or_ended_.notify_all();
}

std::optional<std::string> command_link_reader::wait_for_hello() {
  std::unique_lock<std::mutex> lock(mutex_);
  opened_or_ended_.wait(lock, [this] { return settled_; });
  return opening_error_;
}

command_link_reader::~command_link_reader() {
  const char wake = 1;
  (void)!::write(wake_[1], &wake, 1);
  thread_.join();
  for (int fd : {fd_, wake_[0], wake_[1]}) ::close(fd);
}

}  // namespace cohort::actors
