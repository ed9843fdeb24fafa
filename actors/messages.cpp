// The few functions messages.hpp declares: job states as text.
#include "actors/messages.hpp"

namespace cohort::actors {

const char* to_string(job_state s) {
  switch (s) {
    case job_state::pending: return "PENDING";
    case job_state::running: return "RUNNING";
    case job_state::restarting: return "RESTARTING";
    case job_state::succeeded: return "SUCCEEDED";
    case job_state::failed: return "FAILED";
    case job_state::stopped: return "STOPPED";
  }
  return "UNKNOWN";
}

bool is_terminal(job_state s) {
  return s == job_state::succeeded || s == job_state::failed || s == job_state::stopped;
}

}  // namespace cohort::actors
