// Shows a followed job to a person: the lines the cluster reports (placement, state changes,
// worker output) and the training progress, as a redrawn bar on a terminal or one line per
// logged step otherwise.
#pragma once

#include <cstdint>
#include <ostream>

#include "actors/messages.hpp"

namespace cohort::tools {

class progress_printer {
 public:
  progress_printer(std::ostream& out, bool terminal) : out_(out), terminal_(terminal) {}
  void on_event(const actors::job_event& e);
  // The closing line: final state, reason, attempts.
  void finish(const actors::job_record& last);

 private:
  void clear_bar();
  std::ostream& out_;
  bool terminal_;
  bool bar_shown_ = false;
  std::int64_t last_step_ = -1;
  actors::job_state last_state_ = actors::job_state::pending;
};

}  // namespace cohort::tools
