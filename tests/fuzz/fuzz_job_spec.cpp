// libFuzzer target for the job spec parser (config/job_spec.hpp), which the head runs on what any
// authenticated client submits: any bytes must parse or be refused with std::invalid_argument
// naming why, without a crash (deep nesting, huge numbers, odd UTF-8 included), and a spec that
// parses must print to JSON that parses to the same JSON again.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "config/job_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto spec = cohort::config::parse_job_spec(text, "/fuzz");
    const std::string once = cohort::config::to_json_text(spec);
    if (cohort::config::to_json_text(cohort::config::parse_job_spec(once, "/fuzz")) != once) std::abort();
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
