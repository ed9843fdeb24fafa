// The head's job histories and Prometheus text exposition (see head_metrics.hpp).
#include "actors/head_metrics.hpp"

#include <cstdio>
#include <sstream>

namespace cohort::actors {
namespace {

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void sample(const char* name, const std::vector<std::pair<std::string, std::string>>& labels, double v) {
    out_ << name;
    if (!labels.empty()) {
      out_ << "{";
      for (std::size_t i = 0; i < labels.size(); ++i)
        out_ << (i ? "," : "") << labels[i].first << "=\"" << escape(labels[i].second) << "\"";
      out_ << "}";
    }
    out_ << " " << number(v) << "\n";
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

}  // namespace

void add_history_point(std::vector<progress_report>& points, const progress_report& report) {
  if (report.step <= 0 || report.held_before_step > 0) return;
  while (!points.empty() && points.back().step >= report.step) points.pop_back();
  points.push_back(report);
  if (points.size() <= max_history_points) return;
  std::vector<progress_report> kept;
  kept.reserve(points.size() / 2 + 1);
  for (std::size_t i = 0; i < points.size(); i += 2) kept.push_back(points[i]);
  if (kept.back().step != points.back().step) kept.push_back(points.back());  // the newest stays
  points = std::move(kept);
}

std::string prometheus_text(const metrics_snapshot& s) {
  exposition e;
  e.family("cohort_head_epoch", "gauge", "Lease epoch of the leading head.");
  e.sample("cohort_head_epoch", {}, static_cast<double>(s.epoch));

  e.family("cohort_nodes", "gauge", "Registered nodes, by drain state (\"\" schedulable).");
  std::map<std::string, int> by_drain{{"", 0}, {"drained", 0}, {"preempted", 0}};
  for (const auto& n : s.list.nodes) ++by_drain[n.drain_state];
  for (const auto& [state, count] : by_drain) e.sample("cohort_nodes", {{"drain_state", state}}, count);
  e.family("cohort_node_resource", "gauge", "Total resources a node offers.");
  for (const auto& n : s.list.nodes)
    for (const auto& [resource, amount] : n.resources)
      e.sample("cohort_node_resource", {{"node", n.name}, {"resource", resource}}, amount);
  e.family("cohort_node_gpu_memory_bytes", "gauge", "Memory of the node's smallest offered GPU.");
  for (const auto& n : s.list.nodes)
    e.sample("cohort_node_gpu_memory_bytes", {{"node", n.name}}, static_cast<double>(n.gpu_memory_bytes));

  e.family("cohort_jobs", "gauge", "Jobs by state.");
  std::map<job_state, int> by_state;
  for (auto st = static_cast<int>(job_state::pending); st <= static_cast<int>(job_state::stopped); ++st)
    by_state[static_cast<job_state>(st)] = 0;
  for (const auto& j : s.list.jobs) ++by_state[j.state];
  for (const auto& [state, count] : by_state) e.sample("cohort_jobs", {{"state", to_string(state)}}, count);

  const auto per_job = [&](const char* name, const char* help, auto value) {
    e.family(name, "gauge", help);
    for (const auto& j : s.list.jobs) e.sample(name, {{"job", j.id}, {"name", j.name}}, value(j));
  };
  e.family("cohort_job_state", "gauge", "1 for the job's current state.");
  for (const auto& j : s.list.jobs)
    e.sample("cohort_job_state", {{"job", j.id}, {"name", j.name}, {"state", to_string(j.state)}}, 1);
  per_job("cohort_job_attempts", "Attempts started.", [](const job_record& j) { return j.attempts; });
  per_job("cohort_job_failures", "Failed attempts counted against max_failures.",
          [](const job_record& j) { return static_cast<double>(j.failures.size()); });
  per_job("cohort_job_preemptions", "Attempts ended by a preemption.", [](const job_record& j) { return j.preemptions; });
  per_job("cohort_job_resizes", "Attempts ended to grow back onto more workers.",
          [](const job_record& j) { return j.resizes; });
  per_job("cohort_job_workers", "Ranks of the current placement.",
          [](const job_record& j) { return static_cast<double>(j.rank_nodes.size()); });
  per_job("cohort_train_step", "Newest step reported.", [](const job_record& j) { return static_cast<double>(j.step); });
  per_job("cohort_train_total_steps", "Steps the job runs.",
          [](const job_record& j) { return static_cast<double>(j.total_steps); });
  per_job("cohort_train_checkpoint_step", "Newest committed checkpoint's step (0: none).",
          [](const job_record& j) { return static_cast<double>(j.checkpoint_step); });

  const auto per_report = [&](const char* name, const char* help, double progress_report::*field) {
    e.family(name, "gauge", help);
    for (const auto& j : s.list.jobs) {
      const auto it = s.progress.find(j.id);
      if (it != s.progress.end()) e.sample(name, {{"job", j.id}, {"name", j.name}}, it->second.*field);
    }
  };
  per_report("cohort_train_loss", "Training loss of the newest logged step.", &progress_report::loss);
  per_report("cohort_train_lr", "Learning rate of the newest logged step.", &progress_report::lr);
  per_report("cohort_train_grad_norm", "Gradient norm before clipping, newest logged step.",
             &progress_report::grad_norm);
  per_report("cohort_train_tokens_per_second", "Tokens per second of the newest logged step, all ranks.",
             &progress_report::tokens_per_s);
  per_report("cohort_train_mfu", "Model FLOPs utilisation of the newest logged step (GPUs).", &progress_report::mfu);
  return e.str();
}

}  // namespace cohort::actors
