// libFuzzer target for the worker link (actors/worker_process_link.hpp): the frames a worker
// process writes to its node and the commands a node writes to it (a crashed or hostile process
// writes anything), fed whole and in two pieces, and the setup a worker reads. Frames are taken
// or the link is broken with a reason, a setup read or refused with std::invalid_argument, never
// a crash.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "actors/worker_process_link.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  cohort::actors::process_frame_reader whole;
  const auto all = whole.feed(text.data(), text.size());
  cohort::actors::process_frame_reader split;
  const std::size_t half = size / 2;
  const auto first = split.feed(text.data(), half);
  const auto second = split.feed(text.data() + half, size - half);
  if (first.messages.size() + second.messages.size() != all.messages.size()) std::abort();
  if (all.error && all.error->empty()) std::abort();
  cohort::actors::command_frame_reader commands;
  const auto got = commands.feed(text.data(), text.size());
  if (got.error && got.error->empty()) std::abort();
  try {
    const auto setup = cohort::actors::worker_setup_from_json(text);
    (void)cohort::actors::worker_setup_to_json(setup);
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
