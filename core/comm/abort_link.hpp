// A weak link from work handles back to their group, so that a wait() that times out can abort
// the group even while the group is being destroyed (detach() makes the link inert). Internal.
#pragma once

#include <mutex>
#include <string>

namespace cohort::core::comm {

class process_group;

class abort_link {
 public:
  explicit abort_link(process_group* group) : group_(group) {}
  void abort(const std::string& reason);
  void detach();

 private:
  std::mutex mutex_;
  process_group* group_;
};

}  // namespace cohort::core::comm
