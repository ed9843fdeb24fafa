// Tests of the learning-rate schedules.
#include "tests/support/catch_torch.hpp"

#include <cmath>

#include "core/train/lr_schedule.hpp"

using namespace cohort;
using core::train::learning_rate;

TEST_CASE("warmup rises linearly from 0, then cosine decays to min_lr_ratio × lr", "[core][train]") {
  config::train_spec t;
  t.lr = 1.0;
  t.warmup_steps = 4;
  t.schedule = config::lr_schedule::cosine;
  t.min_lr_ratio = 0.1;
  CHECK(learning_rate(t, 0, 14) == 0.0);
  CHECK(learning_rate(t, 2, 14) == Approx(0.5));
  CHECK(learning_rate(t, 4, 14) == Approx(1.0));
  CHECK(learning_rate(t, 9, 14) == Approx(0.1 + 0.9 * 0.5));
  CHECK(learning_rate(t, 14, 14) == Approx(0.1));
}

TEST_CASE("linear decay falls in a straight line; constant stays at lr after warmup", "[core][train]") {
  config::train_spec t;
  t.lr = 2.0;
  t.schedule = config::lr_schedule::linear;
  CHECK(learning_rate(t, 0, 10) == Approx(2.0));
  CHECK(learning_rate(t, 5, 10) == Approx(1.0));
  CHECK(learning_rate(t, 10, 10) == Approx(0.0).margin(1e-12));
  t.schedule = config::lr_schedule::constant;
  t.warmup_steps = 2;
  CHECK(learning_rate(t, 1, 10) == Approx(1.0));
  CHECK(learning_rate(t, 7, 10) == Approx(2.0));
}
