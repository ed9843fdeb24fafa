// Which lines of the running attempts' output a head has stored, so the lines a trainer sends
// again (to every head that adopts it, until acknowledged: see attempt_state.hpp) are stored
// once. Lines are numbered per attempt by their trainer (log_line::seq, from 1) and arrive in
// order from it, so the highest number stored says what was. A head that takes over learns the
// numbers from the store's lines ("attempt" and "attempt_seq"; the store's own "seq" counts every
// line of the job and is not the trainer's). Plain and single-threaded: the head actor owns it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "actors/messages.hpp"

namespace cohort::actors {

class log_sequence {
 public:
  // A line of job `job_id` as the store keeps it (written by this or an earlier head).
  void restore(const std::string& job_id, const nlohmann::json& stored_line) {
    if (!stored_line.is_object()) return;
    const auto seq = stored_line.value("attempt_seq", std::uint64_t{0});
    if (seq == 0) return;
    auto& highest = highest_[{job_id, stored_line.value("attempt", std::int32_t{-1})}];
    if (seq > highest) highest = seq;
  }
  // Whether `line` is still to be stored: a line outside the sequence (seq 0) always is.
  bool is_new(const log_line& line) const { return line.seq == 0 || line.seq > highest(line.job_id, line.attempt); }
  void stored(const log_line& line) {
    if (line.seq == 0) return;
    auto& highest = highest_[{line.job_id, line.attempt}];
    if (line.seq > highest) highest = line.seq;
  }
  // The highest number stored of the attempt's lines (0: none).
  std::uint64_t highest(const std::string& job_id, std::int32_t attempt) const {
    auto it = highest_.find({job_id, attempt});
    return it == highest_.end() ? 0 : it->second;
  }
  // The attempt ended: its trainer sends no more.
  void forget(const std::string& job_id, std::int32_t attempt) { highest_.erase({job_id, attempt}); }

  // The fields of a stored line that restore() reads back.
  static nlohmann::json stored_fields(const log_line& line) {
    return {{"attempt", line.attempt}, {"attempt_seq", line.seq}};
  }

 private:
  std::map<std::pair<std::string, std::int32_t>, std::uint64_t> highest_;
};

}  // namespace cohort::actors
