// What a node runs, and its leaving: the trainers and workers it started (linked to it, so they
// end with it), which job and rank each worker serves (the embedded cluster's failure drills aim
// at them), and the drain: once told to leave, the node quits when its last child has gone, or
// after the longest run.failure.preemption_grace_s of its jobs (or the notice's deadline when that
// comes first) plus drain_margin. Plain and single-threaded (the node actor owns it); `Handle` is
// what the node commands (caf::actor), `Key` what an exit or down names (caf::actor_addr), so
// tests use plain values.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::actors {

// How long a draining node waits past the longest run.failure.preemption_grace_s of its jobs.
constexpr std::chrono::seconds drain_margin{15};

template <class Handle, class Key>
class node_children {
 public:
  // A trainer started for a job whose preemption grace is `grace_s`: a child, told when the node
  // is welcomed by a new leader, and the job's target of a trainer drill.
  void add_trainer(const Key& key, const std::string& job_id, const Handle& handle, double grace_s) {
    note_grace(grace_s);
    children_[key] = child{handle, true, job_id, -1};
    trainer_of_job_[job_id] = handle;
  }
  // A worker started for rank `rank` of a job: a child, and the target of a worker drill until
  // its down.
  void add_worker(const Key& key, const std::string& job_id, std::int32_t rank, const Handle& handle,
                  double grace_s) {
    note_grace(grace_s);
    children_[key] = child{handle, false, job_id, rank};
    workers_[key] = child{handle, false, job_id, rank};
  }

  // What an exit that reached the node means: a child of it ended (`stay`, or `quit` when the node
  // drains and that was its last), or it is not a child's (the node is told to exit).
  enum class exit_verdict { stay, quit, not_a_child };
  exit_verdict on_exit(const Key& key) {
    if (children_.erase(key) == 0) return exit_verdict::not_a_child;
    return draining_ && children_.empty() ? exit_verdict::quit : exit_verdict::stay;
  }
  // A worker went down: no drill aims at it any more.
  void on_down(const Key& key) { workers_.erase(key); }

  // The live trainers (a node welcomed by a new leader has each say hello again).
  std::vector<Handle> trainers() const {
    std::vector<Handle> out;
    for (const auto& [key, c] : children_)
      if (c.trainer) out.push_back(c.handle);
    return out;
  }
  // The job's trainer for a drill, forgotten as its target.
  std::optional<Handle> take_trainer(const std::string& job_id) {
    auto it = trainer_of_job_.find(job_id);
    if (it == trainer_of_job_.end()) return std::nullopt;
    auto handle = it->second;
    trainer_of_job_.erase(it);
    return handle;
  }
  // The worker of the job's rank for a drill, while it is up.
  std::optional<Handle> worker(const std::string& job_id, std::int32_t rank) const {
    for (const auto& [key, w] : workers_)
      if (w.job_id == job_id && w.rank == rank) return w.handle;
    return std::nullopt;
  }

  // What a node told to leave does: quit now (no child left), or wait for its children at most
  // `wait` (the longest grace of its jobs, or `until_deadline` when sooner, plus drain_margin).
  struct drain_plan {
    bool quit_now = false;
    std::chrono::milliseconds wait{0};
  };
  // The plan the first time; nullopt when the node drains already.
  std::optional<drain_plan> begin_drain(std::optional<std::chrono::milliseconds> until_deadline) {
    if (draining_) return std::nullopt;
    draining_ = true;
    drain_plan plan;
    plan.quit_now = children_.empty();
    auto wait = std::chrono::milliseconds(static_cast<std::int64_t>(longest_grace_s_ * 1000));
    if (until_deadline) wait = std::clamp(*until_deadline, std::chrono::milliseconds(0), wait);
    plan.wait = wait + drain_margin;
    return plan;
  }
  bool draining() const { return draining_; }
  std::size_t size() const { return children_.size(); }

 private:
  struct child {
    Handle handle;
    bool trainer = false;
    std::string job_id;
    std::int32_t rank = -1;  // a worker's
  };
  void note_grace(double grace_s) { longest_grace_s_ = std::max(longest_grace_s_, grace_s); }

  std::map<Key, child> children_;  // until their exit arrives
  std::map<Key, child> workers_;   // until their down arrives
  std::map<std::string, Handle> trainer_of_job_;
  double longest_grace_s_ = 0;
  bool draining_ = false;
};

}  // namespace cohort::actors
