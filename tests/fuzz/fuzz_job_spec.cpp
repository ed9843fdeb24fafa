// libFuzzer target for the job spec parser (config/job_spec.hpp), which the head runs on what any
// authenticated client submits: any bytes must parse or be refused with config::spec_error naming
// where and why, without a crash (deep nesting, huge numbers, odd UTF-8 included), and a spec that
// parses must print to JSON that reads back to the same JSON.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/job_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto spec = cohort::config::parse_job_spec(text, "/fuzz");
    const std::string once = cohort::config::to_json_text(spec);
    // Read back as written (base "."; the default storage_path stays relative until
    // load_job_spec makes it absolute against the working directory).
    if (cohort::config::to_json_text(cohort::config::parse_job_spec(once, ".")) != once) std::abort();
  } catch (const cohort::config::spec_error& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
