// step_profiler: libtorch's Kineto profiler around stretches of run.profile_steps, summarized.
#include "core/train/step_profiler.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/version.h>

namespace cohort::core::train {
namespace {

constexpr std::size_t max_operations = 40, max_gaps = 15, max_name = 100;

std::int64_t unix_ns_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A kernel's or operator's name without its return type and cohort's kernel namespace.
std::string short_name(std::string name) {
  for (const std::string prefix : {"void ", "cohort::core::model::kernels::(anonymous namespace)::"})
    if (name.rfind(prefix, 0) == 0) name.erase(0, prefix.size());
  return name.substr(0, max_name);
}

struct total {
  double ns = 0;
  std::int64_t calls = 0;
};

// Longest first, at most `limit`.
std::vector<std::pair<std::string, total>> longest(const std::map<std::string, total>& by_name,
                                                   std::size_t limit) {
  std::vector<std::pair<std::string, total>> sorted(by_name.begin(), by_name.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second.ns != b.second.ns ? a.second.ns > b.second.ns : a.first < b.first;
  });
  if (sorted.size() > limit) sorted.resize(limit);
  return sorted;
}

// The spans cut to [from, to], in order of their start; empty ones dropped.
std::vector<profiled_span> clip(std::vector<profiled_span> spans, std::int64_t from, std::int64_t to) {
  std::vector<profiled_span> kept;
  for (auto& s : spans) {
    s.start_ns = std::max(s.start_ns, from);
    s.end_ns = std::min(s.end_ns, to);
    if (s.end_ns > s.start_ns) kept.push_back(std::move(s));
  }
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return kept;
}

// Each stretch no span covers, by the names of what the device finished last and what it then
// started; returns the idle total.
double idle_gaps(const std::vector<profiled_span>& spans, std::int64_t from, std::int64_t to,
                 std::map<std::string, total>& gaps) {
  double idle = 0;
  std::int64_t covered = from;  // everything before is busy or counted
  std::string before = "(steps start)";
  const auto add = [&](std::int64_t until, const std::string& next) {
    if (until <= covered) return;
    idle += static_cast<double>(until - covered);
    auto& g = gaps[before + " -> " + next];
    g.ns += static_cast<double>(until - covered);
    ++g.calls;
  };
  for (const auto& s : spans) {
    add(s.start_ns, s.name);
    if (s.end_ns > covered) {
      covered = s.end_ns;
      before = s.name;
    }
  }
  add(to, "(steps end)");
  return idle;
}

}  // namespace

profile_summary summarize_profile(std::vector<profiled_span> spans, std::int64_t from_ns, std::int64_t to_ns,
                                  std::int64_t first_step, std::int64_t last_step) {
  if (to_ns < from_ns || last_step < first_step)
    throw std::invalid_argument("summarize_profile: the window or the steps run backwards");
  for (auto& s : spans) s.name = short_name(std::move(s.name));
  spans = clip(std::move(spans), from_ns, to_ns);
  const double steps = static_cast<double>(last_step - first_step + 1);
  profile_summary out;
  out.first_step = first_step;
  out.last_step = last_step;
  out.window_ms = static_cast<double>(to_ns - from_ns) / 1e6;

  std::map<std::string, total> operations, gaps;
  double all_ns = 0;
  for (const auto& s : spans) {
    auto& t = operations[s.name];
    t.ns += static_cast<double>(s.end_ns - s.start_ns);
    ++t.calls;
    all_ns += static_cast<double>(s.end_ns - s.start_ns);
  }
  const double idle_ns = idle_gaps(spans, from_ns, to_ns, gaps);
  out.idle_ms_per_step = idle_ns / 1e6 / steps;
  out.busy_ms_per_step = out.window_ms / steps - out.idle_ms_per_step;
  out.idle_share = out.window_ms > 0 ? idle_ns / 1e6 / out.window_ms : 0;
  for (const auto& [name, t] : longest(operations, max_operations))
    out.operations.push_back(
        {name, static_cast<double>(t.calls) / steps, t.ns / 1e6 / steps, all_ns > 0 ? t.ns / all_ns : 0});
  for (const auto& [between, t] : longest(gaps, max_gaps))
    out.idle_gaps.push_back({between, static_cast<double>(t.calls) / steps, t.ns / 1e6 / steps});
  return out;
}

nlohmann::json to_json(const profile_summary& s) {
  auto ops = nlohmann::json::array();
  for (const auto& o : s.operations)
    ops.push_back({{"name", o.name},
                   {"calls_per_step", o.calls_per_step},
                   {"ms_per_step", o.ms_per_step},
                   {"share", o.share}});
  auto gaps = nlohmann::json::array();
  for (const auto& g : s.idle_gaps)
    gaps.push_back(
        {{"between", g.between}, {"gaps_per_step", g.gaps_per_step}, {"ms_per_step", g.ms_per_step}});
  return {{"first_step", s.first_step},
          {"last_step", s.last_step},
          {"window_ms", s.window_ms},
          {"busy_ms_per_step", s.busy_ms_per_step},
          {"idle_ms_per_step", s.idle_ms_per_step},
          {"idle_share", s.idle_share},
          {"operations", std::move(ops)},
          {"idle_gaps", std::move(gaps)}};
}

std::string describe(const profile_summary& s, const std::string& device_name) {
  char head[256];
  std::snprintf(head, sizeof head, "the %s was busy %.1f ms and idle %.1f ms a step (%.1f%% of %.1f ms)",
                device_name.c_str(), s.busy_ms_per_step, s.idle_ms_per_step, 100 * s.idle_share,
                s.busy_ms_per_step + s.idle_ms_per_step);
  std::string line = head;
  for (std::size_t i = 0; i < s.operations.size() && i < 3; ++i) {
    char part[64];
    std::snprintf(part, sizeof part, " (%.0f%%)", 100 * s.operations[i].share);
    line += (i == 0 ? "; longest: " : ", ") + s.operations[i].name.substr(0, 60) + part;
  }
  return line;
}

nlohmann::json chrome_trace(const std::vector<profiled_span>& spans, std::int64_t from_ns,
                            const std::string& device_name) {
  auto events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", device_name}}}});
  for (const auto& s : spans)
    events.push_back({{"name", s.name},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", 0},
                      {"ts", static_cast<double>(s.start_ns - from_ns) / 1e3},
                      {"dur", static_cast<double>(s.end_ns - s.start_ns) / 1e3}});
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

// ---- Recording ----

namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

std::atomic<bool> profiler_taken{false};  // libtorch's profiler is one per process

std::set<ActivityType> activities_for(bool cuda) {
  return cuda ? std::set<ActivityType>{ActivityType::CUDA} : std::set<ActivityType>{ActivityType::CPU};
}

// The spans the profiler recorded on the device profiled (kernels and copies, or host operators).
std::vector<profiled_span> spans_of(const prof::ProfilerResult& result, bool cuda) {
  const auto device = cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  std::vector<profiled_span> spans;
  for (const auto& e : result.events()) {
    if (e.deviceType() != device) continue;
#if TORCH_VERSION_MAJOR >= 2
    const auto start = static_cast<std::int64_t>(e.startNs());
    const auto duration = static_cast<std::int64_t>(e.durationNs());
#else
    const auto start = static_cast<std::int64_t>(e.startUs()) * 1000;
    const auto duration = static_cast<std::int64_t>(e.durationUs()) * 1000;
#endif
    spans.push_back({start, start + duration, e.name()});
  }
  return spans;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump() << '\n';
  out.close();
  if (!out) throw std::runtime_error("run.profile_steps: cannot write " + path);
}

}  // namespace

device_recorder::~device_recorder() {
  if (!recording_) return;
  try {
    prof::disableProfiler();
  } catch (...) {  // a destructor must not throw; the profiler is left as libtorch leaves it
  }
  profiler_taken = false;
}

bool device_recorder::start(bool cuda) {
  if (recording_ || profiler_taken.exchange(true)) return false;
  cuda_ = cuda;
  if (cuda_) torch::cuda::synchronize();  // the window starts with nothing earlier queued
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  prof::prepareProfiler(config, activities_for(cuda_));
  prof::enableProfiler(config, activities_for(cuda_));
  recording_ = true;
  from_ns_ = unix_ns_now();
  return true;
}

std::int64_t device_recorder::settled_now() const {
  if (cuda_) torch::cuda::synchronize();
  return unix_ns_now();
}

device_recorder::recorded device_recorder::stop() {
  if (!recording_) throw std::logic_error("device_recorder::stop without a recording");
  const std::int64_t to_ns = settled_now();
  const auto result = prof::disableProfiler();
  recording_ = false;
  profiler_taken = false;
  return {spans_of(*result, cuda_), from_ns_, to_ns};
}

step_profiler::step_profiler(std::vector<std::int64_t> steps, std::string run_dir, int rank, bool cuda)
    : steps_(std::move(steps)), run_dir_(std::move(run_dir)), rank_(rank), cuda_(cuda) {}

std::string step_profiler::path_stem(const std::string& run_dir, int rank, std::int64_t first,
                                     std::int64_t last) {
  return run_dir + "/profile/rank-" + std::to_string(rank) + "-steps-" + std::to_string(first) + "-" +
         std::to_string(last);
}

std::string step_profiler::before_step(std::int64_t step) {
  if (recorder_.recording()) {
    // The stretch starts: so does the window, once the step before has left the device.
    if (step == first_) window_from_ns_ = recorder_.settled_now();
    return "";
  }
  const auto stretch_at = [&](std::int64_t first) {  // the stretch that starts at `first`, if one does
    const auto at = std::find(steps_.begin(), steps_.end(), first);
    return at != steps_.end() && (at == steps_.begin() || *(at - 1) != first - 1) ? at : steps_.end();
  };
  // A stretch that starts at the next step starts recording now, so that the profiler's own
  // start-up falls in this step; one that starts here (the run's first step here, or a resumed
  // run's) starts now. A stretch another rank's profiler kept from starting is not tried again.
  auto at = stretch_at(step + 1);
  if (at == steps_.end()) at = stretch_at(step);
  if (at == steps_.end() || *at == refused_) return "";  // a refused stretch is said once
  auto last = at;
  while (last + 1 != steps_.end() && *(last + 1) == *last + 1) ++last;
  if (!recorder_.start(cuda_)) {
    refused_ = *at;
    return "rank " + std::to_string(rank_) + " cannot profile steps " + std::to_string(*at) + "-" +
           std::to_string(*last) + ": another rank of this process is profiling (run.profile_steps)";
  }
  first_ = *at;
  last_ = *last;
  window_from_ns_ = 0;  // early: set as the stretch's first step starts; else the recording's start
  return "";
}

std::string step_profiler::after_step(std::int64_t step) {
  if (!recorder_.recording() || step != last_) return "";
  auto r = recorder_.stop();
  // The stretch's spans only: those of the step it started in end before the window.
  const auto from_ns = std::max(r.from_ns, window_from_ns_);
  r.spans.erase(std::remove_if(r.spans.begin(), r.spans.end(),
                               [&](const profiled_span& s) { return s.end_ns <= from_ns; }),
                r.spans.end());
  for (auto& s : r.spans) s.start_ns = std::max(s.start_ns, from_ns);
  const std::string device_name = cuda_ ? "GPU" : "CPU";
  const auto summary = summarize_profile(r.spans, from_ns, r.to_ns, first_, last_);
  const auto stem = path_stem(run_dir_, rank_, first_, last_);
  std::error_code ec;
  std::filesystem::create_directories(run_dir_ + "/profile", ec);
  if (ec)
    throw std::runtime_error("run.profile_steps: cannot create " + run_dir_ + "/profile: " + ec.message());
  write_json(stem + ".json", to_json(summary));
  write_json(stem + ".trace.json", chrome_trace(r.spans, from_ns, device_name));
  return "rank " + std::to_string(rank_) + " profiled steps " + std::to_string(first_) + "-" +
         std::to_string(last_) + ": " + describe(summary, device_name) + "; " +
         std::filesystem::path(stem).filename().string() + ".json";
}

}  // namespace cohort::core::train
