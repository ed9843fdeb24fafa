// A progress line on stderr for long builds (see progress_bar.hpp).
#include "core/data/build/progress_bar.hpp"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace cohort::core::data {

progress_bar::progress_bar(std::uint64_t total_bytes, bool enabled)
    : total_(total_bytes), enabled_(enabled), tty_(::isatty(2) == 1),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

void progress_bar::update(std::uint64_t bytes_done, std::int64_t tokens_done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(30000))) return;
  last_ = now;
  draw(bytes_done, tokens_done, false);
}

void progress_bar::finish(std::uint64_t bytes_done, std::int64_t tokens_done) {
  if (enabled_) draw(bytes_done, tokens_done, true);
}

void progress_bar::draw(std::uint64_t bytes_done, std::int64_t tokens_done, bool final) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ > 0 ? static_cast<double>(bytes_done) / static_cast<double>(total_) : 1.0;
  const int width = 30;
  const int filled = static_cast<int>(frac * width + 0.5);
  std::string bar(static_cast<std::size_t>(filled > width ? width : filled), '#');
  bar.resize(width, '.');
  const double mbps = secs > 0 ? static_cast<double>(bytes_done) / 1e6 / secs : 0.0;
  const double ktps = secs > 0 ? static_cast<double>(tokens_done) / 1e3 / secs : 0.0;
  const double eta = frac > 0 && frac < 1 ? secs * (1 - frac) / frac : 0.0;
  std::fprintf(stderr, "%s[%s] %5.1f%%  %.1f MB/s  %.0fk tok/s  %lld tokens  %s%.0fs%s", tty_ ? "\r" : "",
               bar.c_str(), frac * 100, mbps, ktps, static_cast<long long>(tokens_done), final ? "done in " : "ETA ",
               final ? secs : eta, (final || !tty_) ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace cohort::core::data
