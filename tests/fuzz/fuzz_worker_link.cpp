// libFuzzer target for the worker link (actors/worker_process_link.hpp): the control lines a
// worker process writes to its node (a crashed or hostile worker writes anything) and the setup
// a worker reads. A control line is taken or ignored, a setup read or refused with
// std::invalid_argument, never a crash.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "actors/worker_process_link.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)cohort::actors::parse_control_line(text);
  try {
    const auto setup = cohort::actors::worker_setup_from_json(text);
    (void)cohort::actors::worker_setup_to_json(setup);
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
