// Which lines of the running attempts' output a head has stored, so the lines a trainer sends
// again (to every head that adopts it, until acknowledged: see attempt_state.hpp) are stored
// once, and none is acknowledged before it is stored. Lines are numbered per attempt by their
// trainer (log_line::seq, from 1) but need not arrive in order: lines a trainer sent while its
// link was down are lost on the way while later ones get through, and come again only when the
// trainer reintroduces itself. So a head keeps, per attempt, the number through which every line
// is stored (the one it acknowledges: a trainer forgets the lines up to an acknowledged number)
// and the numbers stored past a gap. A line also says the oldest line its trainer still keeps
// (log_line::kept_from): the lines before it were acknowledged or dropped, so none of them is
// waited for. A head that takes over learns the numbers from the store's lines ("attempt",
// "attempt_seq" and "kept_from"; the store's own "seq" counts every line of the job and is not
// the trainer's). Plain and single-threaded: the head actor owns it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
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
    log_line line{job_id, 0, "", 0, ""};
    line.attempt = stored_line.value("attempt", std::int32_t{-1});
    line.seq = stored_line.value("attempt_seq", std::uint64_t{0});
    line.kept_from = stored_line.value("kept_from", std::uint64_t{0});
    stored(line);
  }
  // Whether `line` is still to be stored: a line outside the sequence (seq 0) always is.
  bool is_new(const log_line& line) const {
    if (line.seq == 0) return true;
    auto it = attempts_.find({line.job_id, line.attempt});
    if (it == attempts_.end()) return true;
    return line.seq > it->second.through && it->second.past_gap.count(line.seq) == 0;
  }
  // The number to acknowledge once `line` is stored too (see through()).
  std::uint64_t through_after(const log_line& line) const {
    auto it = attempts_.find({line.job_id, line.attempt});
    std::uint64_t through = it == attempts_.end() ? 0 : it->second.through;
    if (line.kept_from > 0) through = std::max(through, line.kept_from - 1);
    const auto stored_already = [&](std::uint64_t seq) {
      return seq == line.seq || (it != attempts_.end() && it->second.past_gap.count(seq) != 0);
    };
    while (stored_already(through + 1)) ++through;
    return through;
  }
  void stored(const log_line& line) {
    if (line.seq == 0) return;
    const auto through = through_after(line);
    auto& stored = attempts_[{line.job_id, line.attempt}];
    stored.through = through;
    if (line.seq > through) stored.past_gap.insert(line.seq);
    stored.past_gap.erase(stored.past_gap.begin(), stored.past_gap.upper_bound(through));
  }
  // The number through which every line of the attempt is stored, or was given up by its trainer
  // (0: none): what a head acknowledges.
  std::uint64_t through(const std::string& job_id, std::int32_t attempt) const {
    auto it = attempts_.find({job_id, attempt});
    return it == attempts_.end() ? 0 : it->second.through;
  }
  // The attempt ended: its trainer sends no more.
  void forget(const std::string& job_id, std::int32_t attempt) { attempts_.erase({job_id, attempt}); }

  // The fields of a stored line that restore() reads back.
  static nlohmann::json stored_fields(const log_line& line) {
    return {{"attempt", line.attempt}, {"attempt_seq", line.seq}, {"kept_from", line.kept_from}};
  }

 private:
  struct attempt_lines {
    std::uint64_t through = 0;
    std::set<std::uint64_t> past_gap;  // stored, above `through`
  };
  std::map<std::pair<std::string, std::int32_t>, attempt_lines> attempts_;
};

}  // namespace cohort::actors
