// The command link from a node to its worker process: worker_command frames reassembled from any
// pieces, applied to run_signals by the worker's reader thread, and a malformed frame reported.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>

#include <catch2/catch.hpp>

#include "actors/wire_protocol.hpp"
#include "actors/worker_process_link.hpp"

using namespace cohort::actors;
using cohort::core::train::run_signals;

namespace {

worker_command command(worker_command_kind kind, std::int64_t n) {
  return worker_command{"job-0001", 2, kind, n};
}

// A socket pair as the node makes it: [0] the worker's end, [1] the node's.
struct link_pair {
  int fds[2];
  link_pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0); }
  ~link_pair() {
    if (fds[1] >= 0) ::close(fds[1]);
  }
  void write(const std::string& bytes) { REQUIRE(::write(fds[1], bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size())); }
  void close_node_end() {
    ::close(fds[1]);
    fds[1] = -1;
  }
};

// The reader's one call of on_end, waited for.
struct link_end {
  std::mutex m;
  std::condition_variable cv;
  bool ended = false;
  std::optional<std::string> error;
  std::function<void(const std::optional<std::string>&)> handler() {
    return [this](const std::optional<std::string>& e) {
      std::lock_guard<std::mutex> lock(m);
      error = e;
      ended = true;
      cv.notify_all();
    };
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_for(lock, std::chrono::seconds(20), [this] { return ended; });
  }
};

}  // namespace

TEST_CASE("command frames are reassembled from single bytes into the commands sent", "[actors][link]") {
  const std::string bytes = command_frame(command(worker_command_kind::checkpoint, 1)) +
                            command_frame(command(worker_command_kind::release, 3)) +
                            command_frame(command(worker_command_kind::stop, 0));
  command_frame_reader reader;
  std::vector<worker_command> got;
  for (char b : bytes) {
    auto r = reader.feed(&b, 1);
    REQUIRE_FALSE(r.error);
    got.insert(got.end(), r.commands.begin(), r.commands.end());
  }
  REQUIRE(got.size() == 3);
  CHECK(got[0].job_id == "job-0001");
  CHECK(got[0].attempt == 2);
  CHECK(got[0].kind == worker_command_kind::checkpoint);
  CHECK(got[0].n == 1);
  CHECK(got[1].kind == worker_command_kind::release);
  CHECK(got[1].n == 3);
  CHECK(got[2].kind == worker_command_kind::stop);
}

TEST_CASE("a command frame is the wire's frame of the same message behind its length", "[actors][link]") {
  const auto cmd = command(worker_command_kind::preempt, 4);
  const std::string frame = command_frame(cmd);
  const std::string wire = make_wire_codec()->encode(cmd);
  REQUIRE(frame.size() == 4 + wire.size());
  CHECK(frame.substr(4) == wire);
  CHECK(static_cast<unsigned char>(frame[3]) == wire.size());
}

TEST_CASE("frames that are not commands break the link and nothing after them is read", "[actors][link]") {
  SECTION("a body that does not decode") {
    command_frame_reader reader;
    const std::string good = command_frame(command(worker_command_kind::release, 1));
    std::string bad = command_frame(command(worker_command_kind::release, 2));
    bad.back() = '\xc1';  // msgpack's never-used byte, in place of n
    const std::string after = command_frame(command(worker_command_kind::release, 3));
    const std::string all = good + bad + after;
    auto r = reader.feed(all.data(), all.size());
    REQUIRE(r.commands.size() == 1);
    CHECK(r.commands[0].n == 1);
    REQUIRE(r.error);
    auto again = reader.feed(after.data(), after.size());
    CHECK(again.commands.empty());
    CHECK(again.error == r.error);
  }
  SECTION("a length over the link's limit") {
    command_frame_reader reader;
    const std::string huge("\x7f\xff\xff\xff", 4);
    auto r = reader.feed(huge.data(), huge.size());
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("over the link's limit"));
  }
  SECTION("another wire message") {
    command_frame_reader reader;
    const std::string frame = make_wire_codec()->encode(stop_attempt{"job-0001", 2, "stop", 1});
    std::string bytes(4, '\0');
    bytes[3] = static_cast<char>(frame.size());
    REQUIRE(frame.size() < 256);
    bytes += frame;
    auto r = reader.feed(bytes.data(), bytes.size());
    CHECK(r.commands.empty());
    REQUIRE(r.error);
  }
}

TEST_CASE("commands apply as totals: told twice or out of order, the largest count stays", "[actors][link]") {
  run_signals s;
  apply_command(command(worker_command_kind::release, 2), s);
  apply_command(command(worker_command_kind::release, 1), s);
  CHECK(s.releases == 2);
  apply_command(command(worker_command_kind::checkpoint, 1), s);
  CHECK(s.checkpoint_requests == 1);
  CHECK_FALSE(s.preempted);
  apply_command(command(worker_command_kind::preempt, 2), s);
  CHECK(s.preempted);
  CHECK(s.checkpoint_requests == 2);
  CHECK_FALSE(s.cancelled);
  apply_command(command(worker_command_kind::stop, 0), s);
  CHECK(s.cancelled);
}

TEST_CASE("the worker's reader thread applies every frame the node writes until the node closes the link",
          "[actors][link]") {
  link_pair link;
  run_signals s;
  link_end end;
  command_link_reader reader(link.fds[0], s, end.handler());
  link.write(command_frame(command(worker_command_kind::checkpoint, 1)));
  const std::string two = command_frame(command(worker_command_kind::release, 1)) +
                          command_frame(command(worker_command_kind::preempt, 2));
  link.write(two.substr(0, 7));  // a frame split across writes
  link.write(two.substr(7));
  link.close_node_end();
  REQUIRE(end.wait());
  CHECK_FALSE(end.error);
  CHECK(s.checkpoint_requests == 2);
  CHECK(s.releases == 1);
  CHECK(s.preempted);
  CHECK_FALSE(s.cancelled);
}

TEST_CASE("the worker's reader thread reports a malformed frame once and reads nothing after it",
          "[actors][link]") {
  link_pair link;
  run_signals s;
  link_end end;
  command_link_reader reader(link.fds[0], s, end.handler());
  // Three bytes: [1, -1, and nothing more]: a truncated envelope.
  const std::string garbage = std::string("\x00\x00\x00\x03", 4) + "\x93\x01\xff";
  link.write(command_frame(command(worker_command_kind::release, 1)) + garbage +
             command_frame(command(worker_command_kind::stop, 0)));
  REQUIRE(end.wait());
  REQUIRE(end.error);
  CHECK_FALSE(end.error->empty());
  CHECK(s.releases == 1);
  CHECK_FALSE(s.cancelled);  // the stop after the bad frame was never read
}

TEST_CASE("the reader thread of a worker whose link is still open ends with its destructor",
          "[actors][link]") {
  link_pair link;
  run_signals s;
  std::atomic<bool> called{false};
  {
    command_link_reader reader(link.fds[0], s, [&](const std::optional<std::string>&) { called = true; });
  }
  CHECK_FALSE(called);
}
