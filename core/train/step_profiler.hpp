// run.profile_steps: a rank records what its device does during chosen steps, with the profiler
// libtorch carries (Kineto: on a GPU its kernels and copies, the host left untraced so that it
// runs as it does unprofiled; on a CPU the host's torch operators), and writes for each stretch
// of consecutive listed steps
//   <run>/profile/rank-R-steps-A-B.json        where the time went, per step (profile_summary)
//   <run>/profile/rank-R-steps-A-B.trace.json  every span, in the Chrome trace format (Perfetto,
//                                              chrome://tracing)
// and one log line. A step profiled is timed as usual; the summary's window is the host's time
// from the first step's start to the last one's end, so the device's idle time counts whatever
// kept it waiting (the host's update, data, logging, launches). Both ends wait for the device's
// queued work first: the window holds the stretch's work alone, not the tail of the step before
// (a GPU runs a step's update after the host has moved on; counted, it made every "per step"
// figure a part of a step too large). The recording starts a step before the stretch where there
// is one, so that what starting the profiler costs falls outside the window; that step's spans
// are not reported.
//
// libtorch's profiler is one per process: with ranks as threads of one process (the actor tests)
// the first rank to start profiles and the others say they cannot. Used by the rank's thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::core::train {

// One operation the device ran: [start_ns, end_ns) on the host's clock (Unix time).
struct profiled_span {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::string name;
};

struct profile_summary {
  std::int64_t first_step = 0, last_step = 0;
  double window_ms = 0;         // the host's time over the steps
  double busy_ms_per_step = 0;  // time with at least one operation running
  double idle_ms_per_step = 0;  // window / steps - busy
  double idle_share = 0;        // idle / (window / steps)
  struct operation {
    std::string name;
    double calls_per_step = 0, ms_per_step = 0, share = 0;  // share of all operations' time
  };
  std::vector<operation> operations;  // the longest first, at most 40
  struct gap {
    std::string between;  // "A -> B": the operation the device finished last and the one it waited for
    double gaps_per_step = 0, ms_per_step = 0;
  };
  std::vector<gap> idle_gaps;  // the longest first, at most 15
};

// What `spans` say about the steps [first_step, last_step] run in the window [from_ns, to_ns]:
// spans are cut to the window; idle is the window's time no span covers (overlapping spans, as of
// two streams or of nested host operators, count once); a gap at the window's start or end is
// named after "(steps start)" / "(steps end)". A name is shortened to its kernel's or operator's
// name (no return type, no cohort kernel namespace), at most 100 characters.
profile_summary summarize_profile(std::vector<profiled_span> spans, std::int64_t from_ns, std::int64_t to_ns,
                                  std::int64_t first_step, std::int64_t last_step);
nlohmann::json to_json(const profile_summary& s);
// "the GPU was busy 412.3 ms and idle 51.2 ms a step (11.0% of 463.5 ms); longest: NAME (31%), ..."
std::string describe(const profile_summary& s, const std::string& device_name);

// The Chrome trace format's JSON of `spans` (times in microseconds since the window's start).
nlohmann::json chrome_trace(const std::vector<profiled_span>& spans, std::int64_t from_ns,
                            const std::string& device_name);

// libtorch's profiler between start() and stop(): what the device did, on the host's clock.
class device_recorder {
 public:
  device_recorder() = default;
  ~device_recorder();  // stops a recording still running, its spans dropped
  device_recorder(const device_recorder&) = delete;
  device_recorder& operator=(const device_recorder&) = delete;

  // Waits for the device's queued work, then records the GPU's kernels and copies (`cuda`) or
  // the host's torch operators. False when another recorder of this process records.
  bool start(bool cuda);
  struct recorded {
    std::vector<profiled_span> spans;
    std::int64_t from_ns = 0, to_ns = 0;  // start() to stop(), the device's queued work done
  };
  recorded stop();  // start() must have returned true
  bool recording() const { return recording_; }
  // Waits for the device's queued work (a GPU's; nothing on a CPU) and returns the host's clock
  // then (Unix ns): the edge of a window that holds nothing queued before it.
  std::int64_t settled_now() const;

 private:
  bool recording_ = false;
  bool cuda_ = false;
  std::int64_t from_ns_ = 0;
};

// The steps of run.profile_steps on one rank.
class step_profiler {
 public:
  // `steps`: strictly increasing 1-based steps (run.profile_steps); `cuda`: the rank computes on
  // a GPU (profile its kernels and copies) or on the CPU (its torch operators).
  step_profiler(std::vector<std::int64_t> steps, std::string run_dir, int rank, bool cuda);

  // Before 1-based step `step` runs: starts recording when a stretch of listed steps begins at the
  // next step (the profiler's start-up then falls in this step, which is not reported), or begins
  // here and was not started a step early; opens the stretch's window when it begins here.
  // Returns a line to log when the profiler cannot start, once a stretch ("" otherwise).
  std::string before_step(std::int64_t step);
  // After step `step` ran (its device work finished, as a step's loss is read): when it ends the
  // stretch being recorded, stops, writes the stretch's two files and returns its log line; else "".
  // Throws std::runtime_error naming the file when it cannot write one.
  std::string after_step(std::int64_t step);

  // <run_dir>/profile/rank-R-steps-A-B (add ".json" or ".trace.json").
  static std::string path_stem(const std::string& run_dir, int rank, std::int64_t first, std::int64_t last);

 private:
  std::vector<std::int64_t> steps_;
  std::string run_dir_;
  int rank_;
  bool cuda_;
  device_recorder recorder_;
  std::int64_t first_ = 0, last_ = 0;  // the stretch being recorded
  std::int64_t window_from_ns_ = 0;    // its first step's start when recorded a step early; else 0
  std::int64_t refused_ = 0;           // the first step of the stretch last refused a recording
};

}  // namespace cohort::core::train
