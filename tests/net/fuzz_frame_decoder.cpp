// libFuzzer target for the frame decoder: any byte string must decode or be refused without a
// crash, and whatever decodes must re-encode to a frame that decodes to the same bytes again.
// With COHORT_FUZZ_SEEDS=DIR set, it first writes a few valid frames into DIR as a seed corpus.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "net/codec.hpp"
#include "tests/net/example_messages.hpp"

using namespace cohort::net;

namespace {

const wire_codec& codec() {
  static const wire_codec c{test::example_types{}};
  return c;
}

void write_seed(const std::string& dir, const std::string& name, const std::string& frame) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(frame.data(), static_cast<std::streamsize>(frame.size()));
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("COHORT_FUZZ_SEEDS")) {
    write_seed(dir, "everything_full", codec().encode(test::full_example()));
    write_seed(dir, "everything_empty", codec().encode(test::everything{}));
    write_seed(dir, "ping", codec().encode(test::ping{12, "node-7"}));
    write_seed(dir, "small", codec().encode(test::small{8080, test::color::green}));
    write_seed(dir, "wire_error", codec().encode(wire_error{frame_error::bad_body, 3, "x"}));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  decoded_frame d = codec().decode(data, size);
  if (!d.ok()) {
    if (d.error == frame_error::none || d.detail.empty() || !d.message.empty())
      std::abort(); // a refusal must say why and carry no message
    return 0;
  }
  if (!d.type_id || d.message.size() != 1)
    std::abort();
  const std::string once = codec().encode(d.message);
  decoded_frame again = codec().decode(once.data(), once.size());
  if (!again.ok() || codec().encode(again.message) != once)
    std::abort();
  return 0;
}
