// Progress display for followed jobs (see progress_printer.hpp).
#include "tools/progress_printer.hpp"

#include <cstdio>
#include <string>

namespace cohort::tools {

namespace {

std::string bar(std::int64_t step, std::int64_t total, int width) {
  int filled = total > 0 ? static_cast<int>(width * step / total) : 0;
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

}  // namespace

void progress_printer::clear_bar() {
  if (bar_shown_) out_ << "\r\033[K";
  bar_shown_ = false;
}

void progress_printer::on_event(const actors::job_event& e) {
  const auto& r = e.record;
  if (!e.line.empty()) {
    clear_bar();
    out_ << e.line << "\n";
  } else if (r.state != last_state_ && last_step_ < 0) {
    clear_bar();
    out_ << to_string(r.state) << ": " << r.reason << "\n";
  }
  last_state_ = r.state;
  if (r.step == last_step_ || r.total_steps <= 0 || r.step <= 0) {
    out_.flush();
    return;
  }
  last_step_ = r.step;
  char figures[96];
  std::snprintf(figures, sizeof figures, " step %lld/%lld loss %.6g",
                static_cast<long long>(r.step), static_cast<long long>(r.total_steps), r.loss);
  if (terminal_) {
    out_ << "\r\033[K" << bar(r.step, r.total_steps, 30) << figures;
    bar_shown_ = true;
  } else {
    out_ << figures + 1 << "\n";
  }
  out_.flush();
}

void progress_printer::finish(const actors::job_record& last) {
  clear_bar();
  out_ << "job " << last.id << " (" << last.name << ") " << to_string(last.state) << ": "
       << last.reason << " [attempts " << last.attempts << "]\n";
  out_.flush();
}

}  // namespace cohort::tools
