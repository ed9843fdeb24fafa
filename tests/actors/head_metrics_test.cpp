// The head's job histories for the dashboard and its Prometheus exposition, without CAF.
#include <catch2/catch.hpp>

#include "actors/head_metrics.hpp"

using namespace cohort::actors;

namespace {

progress_report at(std::int64_t step, double loss = 1.0) {
  progress_report r;
  r.job_id = "job-0001";
  r.step = step;
  r.loss = loss;
  return r;
}

std::vector<std::int64_t> steps(const std::vector<progress_report>& points) {
  std::vector<std::int64_t> out;
  for (const auto& p : points) out.push_back(p.step);
  return out;
}

}  // namespace

TEST_CASE("a job's history keeps one point per logged step, the newest report of a step winning",
          "[actors][metrics]") {
  std::vector<progress_report> points;
  for (std::int64_t s : {1, 2, 3}) add_history_point(points, at(s));
  add_history_point(points, at(3, 0.5));  // released after a hold: step 3 again
  auto held = at(3);
  held.held_before_step = 4;
  add_history_point(points, held);
  add_history_point(points, at(0));
  CHECK(steps(points) == std::vector<std::int64_t>{1, 2, 3});
  CHECK(points.back().loss == 0.5);
}

TEST_CASE("an attempt resumed from an older checkpoint drops the history from its first step on",
          "[actors][metrics]") {
  std::vector<progress_report> points;
  for (std::int64_t s = 1; s <= 7; ++s) add_history_point(points, at(s));
  add_history_point(points, at(5, 2.0));  // resumed after the checkpoint of step 4
  CHECK(steps(points) == std::vector<std::int64_t>{1, 2, 3, 4, 5});
  CHECK(points.back().loss == 2.0);
}

TEST_CASE("a long run's history halves its resolution instead of growing past the bound",
          "[actors][metrics]") {
  std::vector<progress_report> points;
  const auto n = static_cast<std::int64_t>(max_history_points) * 3;
  for (std::int64_t s = 1; s <= n; ++s) add_history_point(points, at(s));
  CHECK(points.size() <= max_history_points);
  CHECK(points.size() >= max_history_points / 2);
  CHECK(points.front().step == 1);
  CHECK(points.back().step == n);
  for (std::size_t i = 1; i < points.size(); ++i) CHECK(points[i].step > points[i - 1].step);
}

TEST_CASE("the Prometheus text has a HELP and TYPE line per family and escapes label values",
          "[actors][metrics]") {
  metrics_snapshot s;
  s.epoch = 3;
  job_record j;
  j.id = "job-0001";
  j.name = "say \"hi\"\\now";
  j.state = job_state::running;
  j.step = 5;
  s.list.jobs.push_back(j);
  s.progress["job-0001"] = at(5, 0.25);
  const auto text = prometheus_text(s);
  CHECK_THAT(text, Catch::Contains("# HELP cohort_jobs ") && Catch::Contains("# TYPE cohort_jobs gauge\n"));
  CHECK_THAT(text, Catch::Contains("cohort_jobs{state=\"RUNNING\"} 1\n"));
  CHECK_THAT(text, Catch::Contains("cohort_jobs{state=\"PENDING\"} 0\n"));
  CHECK_THAT(text, Catch::Contains("cohort_train_loss{job=\"job-0001\",name=\"say \\\"hi\\\"\\\\now\"} 0.25\n"));
  CHECK_THAT(text, Catch::Contains("cohort_head_epoch 3\n"));
}
