// The link between a node and its worker process, both ways: worker_command frames down,
// reassembled from any pieces and applied to run_signals by the worker's reader thread; the
// process's progress, heartbeats, logged lines and final word up, reassembled by the node's worker actor and
// passed on to the trainer stamped with the process's rank; a malformed frame in either
// direction breaks the link with a reason, and up it fails that worker alone.
#include <sys/socket.h>
#include <unistd.h>

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <optional>

#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/worker_process_actor.hpp"
#include "actors/wire_protocol.hpp"
#include "actors/worker_process_link.hpp"
#include "tests/actors/job_specs.hpp"
#include "tests/support/final_word.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::actors;
using cohort::core::train::run_signals;

namespace {

worker_command command(worker_command_kind kind, std::int64_t n) {
  return worker_command{"job-0001", 2, kind, n};
}

// The first frame of either direction.
const std::string hello = link_frame(link_hello{worker_link_version});

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
  cohort::test::final_word<std::optional<std::string>> end;
  std::optional<std::string>& error = end.value;
  std::function<void(const std::optional<std::string>&)> handler() {
    return [this](const std::optional<std::string>& e) { end.set(e); };
  }
  bool wait() { return end.wait(); }
};

}  // namespace

TEST_CASE("command frames are reassembled from single bytes into the commands sent", "[actors][link]") {
  const std::string bytes = hello + link_frame(command(worker_command_kind::checkpoint, 1)) +
                            link_frame(command(worker_command_kind::release, 3)) +
                            link_frame(command(worker_command_kind::stop, 0));
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
  const std::string frame = link_frame(cmd);
  const std::string wire = make_wire_codec()->encode(cmd);
  REQUIRE(frame.size() == 4 + wire.size());
  CHECK(frame.substr(4) == wire);
  CHECK(static_cast<unsigned char>(frame[3]) == wire.size());
}

TEST_CASE("frames that are not commands break the link and nothing after them is read", "[actors][link]") {
  SECTION("a body that does not decode") {
    command_frame_reader reader;
    const std::string good = link_frame(command(worker_command_kind::release, 1));
    std::string bad = link_frame(command(worker_command_kind::release, 2));
    bad.back() = '\xc1';  // msgpack's never-used byte, in place of n
    const std::string after = link_frame(command(worker_command_kind::release, 3));
    const std::string all = hello + good + bad + after;
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
  SECTION("a frame of the other direction: what a worker process reports") {
    command_frame_reader reader;
    const std::string bytes = hello + link_frame(process_heartbeat{3, -1});
    auto r = reader.feed(bytes.data(), bytes.size());
    CHECK(r.commands.empty());
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("type id 70 (process_heartbeat)") &&
                             Catch::Contains("does not take"));
  }
  SECTION("another wire message") {
    command_frame_reader reader;
    const std::string frame = make_wire_codec()->encode(stop_attempt{"job-0001", 2, "stop", 1});
    std::string bytes = hello + std::string(4, '\0');
    bytes[hello.size() + 3] = static_cast<char>(frame.size());
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
  link.write(hello + link_frame(command(worker_command_kind::checkpoint, 1)));
  const std::string two = link_frame(command(worker_command_kind::release, 1)) +
                          link_frame(command(worker_command_kind::preempt, 2));
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
  link.write(hello + link_frame(command(worker_command_kind::release, 1)) + garbage +
             link_frame(command(worker_command_kind::stop, 0)));
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

namespace {

process_progress progress(std::int64_t step) {
  process_progress p;
  p.step = step;
  p.total_steps = 40;
  p.loss = 1.25;
  p.lr = 1e-3;
  p.grad_norm = 0.5;
  p.tokens_per_s = 1234.5;
  p.mfu = 0.25;
  p.checkpoint_step = 6;
  p.held_before_step = 8;
  p.eval_step = step;
  p.eval_loss = 2.0;
  p.eval_perplexity = 7.5;
  return p;
}

// The setup of rank 3 of job-0007 in its attempt 2 (0-based).
worker_setup rank3_of_job7() {
  worker_setup setup;
  setup.job_id = "job-0007";
  setup.rank = 3;
  setup.attempt = 2;
  return setup;
}

// What a worker process writes over a run: two steps, heartbeats between them, its final word.
std::string a_run_of_frames() {
  return hello + link_frame(process_heartbeat{0, -1}) + link_frame(progress(1)) +
         link_frame(process_heartbeat{1, 2.5}) + link_frame(progress(2)) +
         link_frame(process_finished{false, "the data set is gone", failure_kind::bad_input});
}

// Checks that `got` is what a_run_of_frames() wrote.
void check_a_run(const std::vector<process_message>& got) {
  REQUIRE(got.size() == 5);
  REQUIRE(std::holds_alternative<process_heartbeat>(got[0]));
  CHECK(std::get<process_heartbeat>(got[0]).collective_wait_s < 0);
  REQUIRE(std::holds_alternative<process_progress>(got[1]));
  const auto& p = std::get<process_progress>(got[1]);
  CHECK(p.step == 1);
  CHECK(p.total_steps == 40);
  CHECK(p.loss == 1.25);
  CHECK(p.lr == 1e-3);
  CHECK(p.grad_norm == 0.5);
  CHECK(p.tokens_per_s == 1234.5);
  CHECK(p.mfu == 0.25);
  CHECK(p.checkpoint_step == 6);
  CHECK(p.held_before_step == 8);
  CHECK(p.eval_step == 1);
  CHECK(p.eval_loss == 2.0);
  CHECK(p.eval_perplexity == 7.5);
  REQUIRE(std::holds_alternative<process_heartbeat>(got[2]));
  CHECK(std::get<process_heartbeat>(got[2]).step == 1);
  CHECK(std::get<process_heartbeat>(got[2]).collective_wait_s == 2.5);
  REQUIRE(std::holds_alternative<process_progress>(got[3]));
  CHECK(std::get<process_progress>(got[3]).step == 2);
  REQUIRE(std::holds_alternative<process_finished>(got[4]));
  const auto& end = std::get<process_finished>(got[4]);
  CHECK_FALSE(end.ok);
  CHECK(end.reason == "the data set is gone");
  CHECK(end.kind == failure_kind::bad_input);
}

}  // namespace

TEST_CASE("a worker process's frames fed to its node byte by byte come out as the messages sent",
          "[actors][link]") {
  const std::string bytes = a_run_of_frames();
  process_frame_reader reader;
  std::vector<process_message> got;
  for (char b : bytes) {
    auto r = reader.feed(&b, 1);
    REQUIRE_FALSE(r.error);
    got.insert(got.end(), r.messages.begin(), r.messages.end());
  }
  check_a_run(got);
}

TEST_CASE("a worker process's frames split in two at any byte come out the same", "[actors][link]") {
  const std::string bytes = a_run_of_frames();
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    process_frame_reader reader;
    auto first = reader.feed(bytes.data(), cut);
    auto second = reader.feed(bytes.data() + cut, bytes.size() - cut);
    REQUIRE_FALSE(first.error);
    REQUIRE_FALSE(second.error);
    first.messages.insert(first.messages.end(), second.messages.begin(), second.messages.end());
    check_a_run(first.messages);
  }
}

TEST_CASE("a final word longer than the link carries is cut, not refused", "[actors][link]") {
  const std::string long_reason(100000, 'x');
  const std::string bytes =
      hello + link_frame(process_finished{false, long_reason, failure_kind::retryable});
  process_frame_reader reader;
  auto r = reader.feed(bytes.data(), bytes.size());
  REQUIRE_FALSE(r.error);
  REQUIRE(r.messages.size() == 1);
  const auto& reason = std::get<process_finished>(r.messages[0]).reason;
  CHECK(reason.size() < long_reason.size());
  CHECK(reason.size() > 1000);
  CHECK_THAT(reason, Catch::EndsWith("..."));
}

TEST_CASE("malformed frames from a worker process break its link with the reason, and nothing after "
          "them is read",
          "[actors][link]") {
  const std::string good = hello + link_frame(process_heartbeat{4, -1});
  const std::string after = link_frame(process_finished{true, "", failure_kind::retryable});
  std::string undecodable = link_frame(process_heartbeat{5, -1});
  undecodable.back() = '\xc1';  // msgpack's never-used byte, in place of collective_wait_s
  struct bad_frame {
    const char* what;
    std::string bytes;
    std::string why;  // in the reason
  };
  const std::vector<bad_frame> cases = {
      {"a body that does not decode", undecodable, "a malformed frame ("},
      {"a truncated envelope", std::string("\x00\x00\x00\x03", 4) + "\x93\x01\xff", "a malformed frame ("},
      {"a length over the link's limit", std::string("\x00\x01\x00\x01", 4),
       "a frame of 65537 bytes, over the link's limit of 65536"},
      {"a command, which only goes the other way", link_frame(command(worker_command_kind::stop, 0)),
       "type id 68 (worker_command), which this end of the link does not take"},
      // Its first four bytes, '{"ty', read as a length.
      {"a JSON control line, as a worker of an earlier build wrote",
       R"({"type": "finished", "ok": true, "reason": ""})" "\n", "over the link's limit"},
  };
  for (const auto& bad : cases) {
    INFO(bad.what);
    process_frame_reader reader;
    const std::string all = good + bad.bytes + after;
    auto r = reader.feed(all.data(), all.size());
    REQUIRE(r.messages.size() == 1);
    CHECK(std::get<process_heartbeat>(r.messages[0]).step == 4);
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains(bad.why));
    auto again = reader.feed(after.data(), after.size());
    CHECK(again.messages.empty());
    CHECK(again.error == r.error);
  }
}

TEST_CASE("the node stamps what a worker process reports with the process's job, attempt and rank",
          "[actors][link]") {
  const auto setup = rank3_of_job7();
  const auto p = stamped(setup, progress(9));
  CHECK(p.job_id == "job-0007");
  CHECK(p.rank == 3);
  CHECK(p.attempt == 2);
  CHECK(p.step == 9);
  CHECK(p.loss == 1.25);
  CHECK(p.held_before_step == 8);
  CHECK(p.eval_step == 9);
  CHECK(p.eval_loss == 2.0);
  CHECK(p.eval_perplexity == 7.5);
  const auto beat = stamped(setup, process_heartbeat{9, 0.5});
  CHECK(beat.job_id == "job-0007");
  CHECK(beat.rank == 3);
  CHECK(beat.attempt == 2);
  CHECK(beat.step == 9);
  CHECK(beat.collective_wait_s == 0.5);
}

namespace {

// A node's worker actor (process_workers) running `script` as the worker process of rank 1,
// with a test actor as its trainer that collects what the actor tells it, up to worker_finished.
struct worker_process_run {
  cohort::test::temp_dir dir{"worker-link"};
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<progress_report> progress;
  std::vector<rank_heartbeat> heartbeats;
  // Lines and progress in the order the trainer got them: "line: TEXT" and "step N".
  std::vector<std::string> lines_and_steps;
  std::optional<worker_finished> finished;
  std::string node_wrote;  // the first bytes the process read from fd 4: the node's hello

  explicit worker_process_run(const std::string& frames, const std::string& after_frames) {
    const std::string frames_file = dir.write("frames", frames);
    const std::string captured = dir.path("from-node");
    const std::string program =
        dir.write("worker.sh", "#!/bin/sh\nhead -c " + std::to_string(hello.size()) + " <&4 > '" +
                                   captured + "'\ncat '" + frames_file + "' >&3\n" + after_frames + "\n");
    REQUIRE(::chmod(program.c_str(), 0700) == 0);
    worker_setup setup;
    setup.job_id = "job-0003";
    setup.spec = cohort::config::parse_job_spec(cohort::test::linear_regression_job({}));
    setup.rank = 1;
    setup.world_size = 2;
    setup.attempt = 4;
    setup.node = "n1";
    caf::scoped_actor trainer{sys};
    const auto trainer_handle = caf::actor_cast<caf::actor>(trainer);
    auto spawn = process_workers(program, {}, 0);
    auto node = sys.spawn([=](caf::event_based_actor* self) -> caf::behavior {
      self->set_exit_handler([](caf::exit_msg&) {});  // a failed worker does not take the node
      spawn(self, setup, trainer_handle);
      return {[](const std::string&) {}};
    });
    bool done = false;
    trainer->receive_while([&] { return !done; })(
        [&](const worker_started& s) { CHECK(s.rank == 1); },
        [&](const progress_report& p) {
          progress.push_back(p);
          lines_and_steps.push_back("step " + std::to_string(p.step));
        },
        [&](const rank_heartbeat& h) { heartbeats.push_back(h); },
        [&](const log_line& l) {
          CHECK(l.rank == 1);
          lines_and_steps.push_back("line: " + l.text);
        },
        [&](const worker_finished& f) {
          finished = f;
          done = true;
        },
        caf::after(std::chrono::seconds(60)) >> [&] { done = true; });
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    node_wrote = cohort::test::read_file(captured);
  }
};

}  // namespace

TEST_CASE("a stamped report crosses the wire with every figure the worker process reported",
          "[actors][link]") {
  const auto setup = rank3_of_job7();
  const auto sent = progress(9);
  const auto codec = make_wire_codec();
  const std::string frame = codec->encode(stamped(setup, sent));
  const auto decoded = codec->decode(frame.data(), frame.size());
  REQUIRE(decoded.ok());
  REQUIRE(decoded.message.match_element<progress_report>(0));
  const auto& got = decoded.message.get_as<progress_report>(0);
  CHECK(got.job_id == "job-0007");
  CHECK(got.rank == 3);
  CHECK(got.attempt == 2);
  const step_progress& figures = got;
  CHECK(figures.step == sent.step);
  CHECK(figures.total_steps == sent.total_steps);
  CHECK(figures.loss == sent.loss);
  CHECK(figures.lr == sent.lr);
  CHECK(figures.grad_norm == sent.grad_norm);
  CHECK(figures.tokens_per_s == sent.tokens_per_s);
  CHECK(figures.mfu == sent.mfu);
  CHECK(figures.checkpoint_step == sent.checkpoint_step);
  CHECK(figures.held_before_step == sent.held_before_step);
  CHECK(figures.eval_step == sent.eval_step);
  CHECK(figures.eval_loss == sent.eval_loss);
  CHECK(figures.eval_perplexity == sent.eval_perplexity);
}

TEST_CASE("a worker process's frames reach the trainer as progress and heartbeats of its rank, and "
          "its final word as how it finished",
          "[actors][link]") {
  worker_process_run run(hello + link_frame(process_heartbeat{0, -1}) + link_frame(progress(1)) +
                             link_frame(process_heartbeat{1, 2.5}) +
                             link_frame(process_finished{true, "", failure_kind::retryable}),
                         "exit 0");
  REQUIRE(run.finished);
  CHECK(run.finished->ok);
  CHECK(run.node_wrote == hello);
  CHECK(run.finished->job_id == "job-0003");
  CHECK(run.finished->rank == 1);
  CHECK(run.finished->attempt == 4);
  REQUIRE(run.progress.size() == 1);
  CHECK(run.progress[0].job_id == "job-0003");
  CHECK(run.progress[0].rank == 1);
  CHECK(run.progress[0].attempt == 4);
  CHECK(run.progress[0].step == 1);
  REQUIRE(run.heartbeats.size() == 2);
  CHECK(run.heartbeats[1].rank == 1);
  CHECK(run.heartbeats[1].step == 1);
  CHECK(run.heartbeats[1].collective_wait_s == 2.5);
}

TEST_CASE(
    "a line the workload logged reaches the trainer before the report its process wrote "
    "after it",
    "[actors][link]") {
  // As rank 0 that declines an emergency checkpoint: it logs why, then reports (and the report
  // ends the attempt).
  worker_process_run run(hello + link_frames(process_log{"preempted: no emergency checkpoint"}) +
                             link_frame(progress(1)) + link_frames(process_log{"after step 1"}) +
                             link_frame(process_finished{true, "", failure_kind::retryable}),
                         "exit 0");
  REQUIRE(run.finished);
  CHECK(run.finished->ok);
  CHECK(run.lines_and_steps ==
        std::vector<std::string>{"line: preempted: no emergency checkpoint", "step 1", "line: after step 1"});
}

TEST_CASE(
    "a logged text goes on the link as its lines, each cut where a frame's string ends, and "
    "nothing of it is lost",
    "[actors][link]") {
  // 20,000 two-byte characters (40,000 bytes): more than two of the link's 16 KiB strings.
  std::string long_line;
  for (int i = 0; i < 20000; ++i) long_line += "\xc3\xa9";  // é
  const std::string text = "first\n" + long_line + "\n\nlast";
  const std::string bytes = hello + link_frames(process_log{text});
  process_frame_reader reader;
  auto r = reader.feed(bytes.data(), bytes.size());
  REQUIRE_FALSE(r.error);
  std::vector<std::string> got;
  for (const auto& m : r.messages) got.push_back(std::get<process_log>(m).line);
  REQUIRE(got.size() == 6);  // first, three pieces of the long line, an empty line, last
  CHECK(got[0] == "first");
  CHECK(got[1] + got[2] + got[3] == long_line);
  for (std::size_t i = 1; i <= 3; ++i) {
    CHECK(got[i].size() <= 16u * 1024);
    CHECK(got[i].size() % 2 == 0);  // cut between characters, never inside one
  }
  CHECK(got[4].empty());
  CHECK(got[5] == "last");
  const std::string empty = hello + link_frames(process_log{""});
  process_frame_reader empty_reader;
  auto one = empty_reader.feed(empty.data(), empty.size());
  REQUIRE(one.messages.size() == 1);
  CHECK(std::get<process_log>(one.messages[0]).line.empty());
}

TEST_CASE("a malformed frame from a worker process fails that worker with the reason and kills its "
          "process, whatever it says after it",
          "[actors][link]") {
  // After the bad frame: a final word of success (never read), then the process waits to be
  // killed.
  const std::string garbage = std::string("\x00\x00\x00\x03", 4) + "\x93\x01\xff";
  worker_process_run run(hello + link_frame(process_heartbeat{7, -1}) + garbage +
                             link_frame(process_finished{true, "", failure_kind::retryable}),
                         "exec sleep 600");
  REQUIRE(run.finished);
  CHECK_FALSE(run.finished->ok);
  CHECK(run.finished->kind == failure_kind::retryable);
  CHECK(run.finished->rank == 1);
  CHECK_THAT(run.finished->reason, Catch::Contains("of rank 1 on node n1 broke its report link (fd 3)") &&
                                       Catch::Contains("a malformed frame") &&
                                       Catch::Contains("the process was killed"));
  REQUIRE(run.heartbeats.size() == 1);  // what came before the bad frame was taken
  CHECK(run.heartbeats[0].step == 7);
}

TEST_CASE("the hello's bytes stay what every version reads: length 5, then [1, 72, [version]]",
          "[actors][link]") {
  // A later build must still read an earlier one's hello to name both versions.
  CHECK(link_frame(link_hello{2}) == std::string("\x00\x00\x00\x05\x93\x01\x48\x91\x02", 9));
}

TEST_CASE("either end refuses a link that opens with another version, naming both, or with anything "
          "but link_hello",
          "[actors][link]") {
  const std::string newer = link_frame(link_hello{worker_link_version + 1});
  const std::string after_newer = link_frame(process_heartbeat{1, -1});
  SECTION("the node, reading a worker process of another version") {
    process_frame_reader reader;
    const std::string bytes = newer + after_newer;
    auto r = reader.feed(bytes.data(), bytes.size());
    CHECK(r.messages.empty());
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("version " + std::to_string(worker_link_version + 1)) &&
                             Catch::Contains("this end version " + std::to_string(worker_link_version)) &&
                             Catch::Contains("same build"));
  }
  SECTION("the worker, reading a node of another version") {
    command_frame_reader reader;
    const std::string bytes = newer + link_frame(command(worker_command_kind::stop, 0));
    auto r = reader.feed(bytes.data(), bytes.size());
    CHECK(r.commands.empty());
    CHECK_FALSE(reader.opened());
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("same build"));
  }
  SECTION("a link that opens with a message, not the hello") {
    process_frame_reader reader;
    auto r = reader.feed(after_newer.data(), after_newer.size());
    CHECK(r.messages.empty());
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("opened with a frame of type id 70 (process_heartbeat), not link_hello"));
  }
  SECTION("a second hello") {
    command_frame_reader reader;
    const std::string bytes = hello + hello;
    auto r = reader.feed(bytes.data(), bytes.size());
    CHECK(reader.opened());
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("(link_hello), which this end of the link does not take"));
  }
}

TEST_CASE("the worker waits for its node's hello before it runs, and a node of another version is "
          "refused before any command applies",
          "[actors][link]") {
  SECTION("the hello of this version opens the link") {
    link_pair link;
    run_signals s;
    command_link_reader reader(link.fds[0], s, {});
    link.write(hello);
    CHECK_FALSE(reader.wait_for_hello());
    link.write(link_frame(command(worker_command_kind::release, 1)));
    link.close_node_end();
  }
  SECTION("another version breaks it, and the stop after it is never applied") {
    link_pair link;
    run_signals s;
    link_end end;
    command_link_reader reader(link.fds[0], s, end.handler());
    link.write(link_frame(link_hello{worker_link_version + 1}) +
               link_frame(command(worker_command_kind::stop, 0)));
    const auto broken = reader.wait_for_hello();
    REQUIRE(broken);
    CHECK_THAT(*broken, Catch::Contains("same build"));
    REQUIRE(end.wait());
    CHECK(end.error == broken);
    CHECK_FALSE(s.cancelled);
  }
  SECTION("a node that closes the link without a hello leaves the worker without one") {
    link_pair link;
    run_signals s;
    command_link_reader reader(link.fds[0], s, {});
    link.close_node_end();
    CHECK_FALSE(reader.wait_for_hello());
  }
}

TEST_CASE("a worker process of another link version fails its worker, naming both versions",
          "[actors][link]") {
  worker_process_run run(link_frame(link_hello{worker_link_version + 1}) +
                             link_frame(process_finished{true, "", failure_kind::retryable}),
                         "exec sleep 600");
  REQUIRE(run.finished);
  CHECK_FALSE(run.finished->ok);
  CHECK_THAT(run.finished->reason,
             Catch::Contains("broke its report link (fd 3): the peer speaks version " +
                             std::to_string(worker_link_version + 1)) &&
                 Catch::Contains("cohort-worker and cluster-worker must come from the same build"));
}
