// The rendezvous stores: the same contract for memory, file and TCP stores, the TCP server's
// robustness against malformed frames and vanishing clients, and its authentication: the attacks
// of issue 13 (an unauthenticated client reading and writing keys, tampered, replayed and
// reordered frames, oversized values) each refused, counted and without effect on the store.
#include "core/comm/comm_error.hpp"
#include "core/comm/file_store.hpp"
#include "core/comm/memory_store.hpp"
#include "core/comm/store_auth.hpp"
#include "core/comm/tcp_store.hpp"
#include "core/comm/tcp_store_server.hpp"
#include "core/comm/tcp_store_wire.hpp"

#include "tests/support/catch_torch.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

using namespace cohort::core::comm;
using namespace std::chrono_literals;

namespace {

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("cohort-comm-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// One store of each kind, plus whatever keeps it alive (the TCP server, the directory).
struct store_under_test {
  std::string kind;
  std::unique_ptr<tcp_store_server> server;
  std::unique_ptr<temp_dir> dir;
  std::function<std::shared_ptr<store>()> connect;  // a fresh client (TCP) or the same store
};

store_under_test make_store(const std::string& kind) {
  store_under_test s;
  s.kind = kind;
  if (kind == "memory") {
    auto shared = std::make_shared<memory_store>();
    s.connect = [shared] { return shared; };
  } else if (kind == "file") {
    s.dir = std::make_unique<temp_dir>();
    const auto path = s.dir->path;
    s.connect = [path] { return std::make_shared<file_store>(path); };
  } else {
    const std::string secret = make_store_secret();
    s.server = std::make_unique<tcp_store_server>("127.0.0.1", 0, secret);
    const auto port = s.server->port();
    s.connect = [port, secret] { return std::make_shared<tcp_store>("127.0.0.1", port, secret, 5s); };
  }
  return s;
}

comm_errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const comm_error& e) {
    return e.code();
  }
  FAIL("expected a comm_error");
  return comm_errc::backend_failure;
}

int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// True when the server closed fd (recv sees EOF or a reset) within the timeout.
bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, 0) <= 0;
}

// Everything the server sends on fd until it closes it (EOF or reset); fails the test if the
// server keeps it open for 5 s.
std::string read_until_closed(int fd) {
  std::string got;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<std::size_t>(n));
  }
}

// Reads one frame body (length-prefixed) from fd, waiting up to 5 s for its bytes.
std::string read_frame(int fd) {
  const auto read_exact = [&](std::size_t n) {
    std::string out;
    while (out.size() < n) {
      pollfd p{fd, POLLIN, 0};
      REQUIRE(::poll(&p, 1, 5000) == 1);
      char buf[4096];
      const ssize_t got = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
      REQUIRE(got > 0);
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  };
  const std::string header = read_exact(4);
  return read_exact(wire::read_u32_at(header.data()));
}

void send_bytes(int fd, const std::string& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}

// A client speaking the wire protocol by hand: it authenticates with `secret`, then sends what
// a test makes it send (sealed properly, or tampered, replayed, reordered).
struct raw_client {
  int fd = -1;
  std::optional<wire::session> session;
  raw_client(std::uint16_t port, const std::string& secret) : fd(raw_connect(port)) {
    const std::string hello = read_frame(fd);
    REQUIRE(hello.size() == wire::hello_bytes);
    REQUIRE(static_cast<std::uint8_t>(hello[0]) == wire::protocol_version);
    const auto* server_nonce = reinterpret_cast<const unsigned char*>(hello.data() + 1);
    unsigned char client_nonce[wire::nonce_bytes];
    unsigned char proof[wire::tag_bytes];
    wire::random_nonce(client_nonce);
    wire::client_proof(secret, server_nonce, client_nonce, proof);
    send_bytes(fd, wire::frame(std::string(reinterpret_cast<const char*>(client_nonce), wire::nonce_bytes) +
                               std::string(reinterpret_cast<const char*>(proof), wire::tag_bytes)));
    session.emplace(secret, server_nonce, client_nonce, wire::session::side::client);
    std::string welcome = read_frame(fd);
    REQUIRE(session->open(welcome.data(), welcome.size()));
  }
  ~raw_client() { ::close(fd); }
  // Sends a sealed request and returns the reply's status byte.
  std::uint8_t call(const std::string& payload) {
    send_bytes(fd, session->seal(payload));
    std::string reply = read_frame(fd);
    REQUIRE(session->open(reply.data(), reply.size()));
    return static_cast<std::uint8_t>(reply[0]);
  }
};

std::string set_request(const std::string& key, const std::string& value) {
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::set));
  wire::put_str(p, key);
  wire::put_str(p, value);
  return p;
}

}  // namespace

TEST_CASE("every store sets, gets, adds, checks and removes keys", "[core][comm][store]") {
  auto kind = GENERATE(as<std::string>{}, "memory", "file", "tcp");
  auto s = make_store(kind);
  auto st = s.connect();
  INFO("store " << kind);

  st->set("a", std::string("\0binary\xff", 8));
  CHECK(st->get("a", 1s) == std::string("\0binary\xff", 8));
  st->set("a", "replaced");
  CHECK(st->get("a", 1s) == "replaced");
  CHECK(st->add("counter", 5) == 5);
  CHECK(st->add("counter", -2) == 3);
  CHECK(st->get("counter", 1s) == "3");
  CHECK(st->check({"a", "counter"}));
  CHECK_FALSE(st->check({"a", "missing"}));
  CHECK(st->remove("a"));
  CHECK_FALSE(st->remove("a"));
  CHECK_FALSE(st->check({"a"}));
  st->set("text", "abc");
  CHECK(code_of([&] { st->add("text", 1); }) == comm_errc::store_failure);
}

TEST_CASE("a get on a missing key times out with an error naming the key", "[core][comm][store]") {
  auto kind = GENERATE(as<std::string>{}, "memory", "file", "tcp");
  auto s = make_store(kind);
  auto st = s.connect();
  const auto start = std::chrono::steady_clock::now();
  try {
    st->get("nobody/sets/this", 200ms);
    FAIL("get returned");
  } catch (const comm_error& e) {
    CHECK(e.code() == comm_errc::timeout);
    CHECK_THAT(e.what(), Catch::Contains("nobody/sets/this"));
  }
  CHECK(std::chrono::steady_clock::now() - start >= 200ms);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("a waiting get wakes when another thread sets the key", "[core][comm][store]") {
  auto kind = GENERATE(as<std::string>{}, "memory", "file", "tcp");
  auto s = make_store(kind);
  auto reader = s.connect();
  auto writer = s.connect();
  std::string got;
  std::thread t([&] { got = reader->get("late", 10s); });
  writer->set("late", "here");
  t.join();
  CHECK(got == "here");
}

TEST_CASE("concurrent adds from many threads are atomic and a store barrier releases everyone",
          "[core][comm][store]") {
  auto kind = GENERATE(as<std::string>{}, "memory", "file", "tcp");
  auto s = make_store(kind);
  constexpr int threads = 4;
  constexpr int adds = 50;
  std::vector<std::thread> pool;
  std::atomic<int> errors{0};
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&] {
      try {
        auto st = s.connect();
        for (int k = 0; k < adds; ++k) st->add("n", 1);
        store_barrier(*st, "after-adds", threads, 10s);
        if (st->get("n", 1s) != std::to_string(threads * adds)) ++errors;
      } catch (...) {
        ++errors;
      }
    });
  for (auto& t : pool) t.join();
  CHECK(errors == 0);
}

TEST_CASE("a store barrier that not everyone reaches reports how many arrived", "[core][comm][store]") {
  auto st = std::make_shared<memory_store>();
  try {
    store_barrier(*st, "half", 2, 100ms);
    FAIL("barrier returned");
  } catch (const comm_error& e) {
    CHECK(e.code() == comm_errc::timeout);
    CHECK_THAT(e.what(), Catch::Contains("only 1 of 2"));
  }
}

TEST_CASE("a prefix store keeps attempts apart", "[core][comm][store]") {
  auto base = std::make_shared<memory_store>();
  prefix_store a(base, "job/attempt-1/");
  prefix_store b(base, "job/attempt-2/");
  a.set("addr", "one");
  CHECK_FALSE(b.check({"addr"}));
  CHECK(base->get("job/attempt-1/addr", 1s) == "one");
  CHECK(code_of([&] { b.get("addr", 50ms); }) == comm_errc::timeout);
}

TEST_CASE("stores refuse empty and oversized keys", "[core][comm][store]") {
  auto kind = GENERATE(as<std::string>{}, "memory", "file", "tcp");
  auto s = make_store(kind);
  auto st = s.connect();
  CHECK(code_of([&] { st->set("", "x"); }) == comm_errc::invalid_argument);
  CHECK(code_of([&] { st->set(std::string(max_store_key_bytes + 1, 'k'), "x"); }) ==
        comm_errc::invalid_argument);
}

TEST_CASE("store addresses parse as HOST:PORT and bad ones are named", "[core][comm][store]") {
  CHECK(parse_host_port("127.0.0.1:29500").host == "127.0.0.1");
  CHECK(parse_host_port("127.0.0.1:29500").port == 29500);
  CHECK(parse_host_port("[::1]:80").host == "::1");
  for (const char* bad : {"nohost", ":80", "h:0", "h:70000", "h:x1"}) {
    INFO(bad);
    CHECK(code_of([&] { parse_host_port(bad); }) == comm_errc::invalid_argument);
  }
}

TEST_CASE("the TCP store server drops an authenticated client's malformed frames and keeps serving others",
          "[core][comm][store]") {
  const std::string secret = make_store_secret();
  tcp_store_server server("127.0.0.1", 0, secret);
  tcp_store good("127.0.0.1", server.port(), secret, 5s);
  good.set("k", "v");

  std::vector<std::string> payloads;  // sealed properly: only their content is wrong
  {
    std::string p;
    wire::put_u8(p, 99);  // unknown op
    payloads.push_back(p);
  }
  {
    std::string p;
    wire::put_u8(p, static_cast<std::uint8_t>(wire::op::set));
    wire::put_u32(p, 1000);  // key length past the frame's end
    p += "short";
    payloads.push_back(p);
  }
  {
    std::string p;
    wire::put_u8(p, static_cast<std::uint8_t>(wire::op::get));
    wire::put_str(p, "k");  // no timeout field
    payloads.push_back(p);
  }
  {
    std::string p;
    wire::put_u8(p, static_cast<std::uint8_t>(wire::op::check));
    wire::put_u32(p, 1u << 30);  // a count past max_check_keys: refused before any allocation
    payloads.push_back(p);
  }
  payloads.push_back(set_request("k", "v") + "trailing");
  payloads.push_back("");  // no op at all

  std::uint64_t dropped = 0;
  for (const auto& payload : payloads) {
    raw_client bad(server.port(), secret);
    send_bytes(bad.fd, bad.session->seal(payload));
    CHECK(closed_by_peer(bad.fd, 5s));
    CHECK(server.dropped_count() == ++dropped);
    CHECK(good.get("k", 1s) == "v");
  }
  {
    raw_client bad(server.port(), secret);
    std::string huge;
    wire::put_u32(huge, 0xffffffffu);  // length beyond every bound
    send_bytes(bad.fd, huge);
    CHECK(closed_by_peer(bad.fd, 5s));
    CHECK(server.dropped_count() == ++dropped);
  }
  CHECK(server.refused_count() == 0);
  good.set("k2", "still alive");
  CHECK(good.get("k2", 1s) == "still alive");
}

TEST_CASE("a client without the store secret reads, writes and removes nothing, and is counted",
          "[core][comm][store][security]") {
  const std::string secret = make_store_secret();
  std::mutex mutex;
  std::vector<store_refusal> reports;
  tcp_store_server server("127.0.0.1", 0, secret, [&](const store_refusal& r) {
    std::lock_guard<std::mutex> lock(mutex);
    reports.push_back(r);
  });
  tcp_store worker("127.0.0.1", server.port(), secret, 5s);
  // What a job's store holds: Gloo addresses, the resume choice, a counter.
  worker.set("job-1/attempt-0/dp/gloo/0", "10.1.2.3:41234 gloo-address-of-rank-0");
  worker.set("job-1/attempt-0/ckpt/resume", R"({"dir":"/runs/x/checkpoints/step-00000100"})");
  worker.add("job-1/attempt-0/dp/barrier/arrived", 1);

  // The attacker of issue 13 speaks the store's old, unauthenticated protocol: each request in
  // a connection of its own, as one frame, before reading anything.
  const auto key_op = [](wire::op o, const std::string& key) {
    std::string p;
    wire::put_u8(p, static_cast<std::uint8_t>(o));
    wire::put_str(p, key);
    return p;
  };
  std::vector<std::string> attacks;
  {
    std::string p = key_op(wire::op::get, "job-1/attempt-0/dp/gloo/0");
    wire::put_u64(p, 1000);
    attacks.push_back(p);
    p = key_op(wire::op::get, "job-1/attempt-0/ckpt/resume");
    wire::put_u64(p, 1000);
    attacks.push_back(p);
  }
  attacks.push_back(set_request("job-1/attempt-0/ckpt/request", "1"));
  attacks.push_back(set_request("job-1/attempt-0/ckpt/resume", R"({"dir":"/tmp/evil"})"));
  {
    std::string p = key_op(wire::op::add, "job-1/attempt-0/dp/barrier/arrived");
    wire::put_u64(p, 5);
    attacks.push_back(p);
  }
  attacks.push_back(key_op(wire::op::remove, "job-1/attempt-0/dp/gloo/0"));
  {
    std::string p;
    wire::put_u8(p, static_cast<std::uint8_t>(wire::op::check));
    wire::put_u32(p, 1);
    wire::put_str(p, "job-1/attempt-0/dp/gloo/0");
    attacks.push_back(p);
  }
  // A 60 MB value announced by an unauthenticated client: refused at its length.
  {
    std::string p;
    wire::put_u32(p, 60u << 20);
    attacks.push_back(p);
  }

  std::uint64_t refused = 0;
  for (const auto& payload : attacks) {
    const int fd = raw_connect(server.port());
    send_bytes(fd, payload.size() == 4 ? payload + std::string(60000, 'x') : wire::frame(payload));
    const std::string got = read_until_closed(fd);
    ::close(fd);
    // The greeting (version and nonce) at most, never an answer.
    CHECK(got.size() <= 4 + wire::hello_bytes);
    CHECK(got.find("gloo-address") == std::string::npos);
    CHECK(got.find("step-00000100") == std::string::npos);
    CHECK(server.refused_count() == ++refused);
  }
  // A client of the current protocol with another secret fails its proof.
  try {
    tcp_store("127.0.0.1", server.port(), make_store_secret(), 5s);
    FAIL("a client with the wrong secret connected");
  } catch (const comm_error& e) {
    CHECK(e.code() == comm_errc::store_failure);
    CHECK_THAT(e.what(), Catch::Contains("refused this client's proof"));
  }
  CHECK(server.refused_count() == ++refused);
  CHECK(server.dropped_count() == 0);

  // Nothing changed.
  CHECK(worker.get("job-1/attempt-0/dp/gloo/0", 1s) == "10.1.2.3:41234 gloo-address-of-rank-0");
  CHECK(worker.get("job-1/attempt-0/ckpt/resume", 1s) == R"({"dir":"/runs/x/checkpoints/step-00000100"})");
  CHECK_FALSE(worker.check({"job-1/attempt-0/ckpt/request"}));
  CHECK(worker.add("job-1/attempt-0/dp/barrier/arrived", 0) == 1);
  std::lock_guard<std::mutex> lock(mutex);
  REQUIRE(reports.size() == refused);
  CHECK_FALSE(reports.front().authenticated);
  CHECK_THAT(reports.front().peer, Catch::StartsWith("127.0.0.1:"));
  CHECK_THAT(reports.front().reason, Catch::Contains("authentication was due"));
  CHECK_THAT(reports.back().reason, Catch::Contains("wrong authentication proof"));
}

TEST_CASE("a tampered, replayed or reordered frame drops its client and changes nothing",
          "[core][comm][store][security]") {
  const std::string secret = make_store_secret();
  tcp_store_server server("127.0.0.1", 0, secret);
  tcp_store worker("127.0.0.1", server.port(), secret, 5s);
  worker.set("ckpt/step-00000100/rank-1", "the true report");

  {  // altered in flight: one byte of the value
    raw_client c(server.port(), secret);
    std::string f = c.session->seal(set_request("ckpt/step-00000100/rank-1", "the true report"));
    f[f.size() - wire::tag_bytes - 1] ^= 1;
    send_bytes(c.fd, f);
    CHECK(closed_by_peer(c.fd, 5s));
  }
  CHECK(server.dropped_count() == 1);
  {  // replayed: a frame the server already took, sent again on the same connection
    raw_client c(server.port(), secret);
    const std::string f = c.session->seal(set_request("counter-key", "1"));
    send_bytes(c.fd, f);
    std::string reply = read_frame(c.fd);
    CHECK(c.session->open(reply.data(), reply.size()));
    worker.set("counter-key", "2");
    send_bytes(c.fd, f);
    CHECK(closed_by_peer(c.fd, 5s));
  }
  CHECK(server.dropped_count() == 2);
  CHECK(worker.get("counter-key", 1s) == "2");
  {  // reordered: the second frame sent first
    raw_client c(server.port(), secret);
    const std::string first = c.session->seal(set_request("order", "first"));
    const std::string second = c.session->seal(set_request("order", "second"));
    send_bytes(c.fd, second);
    CHECK(closed_by_peer(c.fd, 5s));
  }
  CHECK(server.dropped_count() == 3);
  {  // replayed on another connection: its nonces make the session key another
    raw_client a(server.port(), secret);
    const std::string f = a.session->seal(set_request("ckpt/step-00000100/rank-1", "forged"));
    raw_client b(server.port(), secret);
    send_bytes(b.fd, f);
    CHECK(closed_by_peer(b.fd, 5s));
  }
  CHECK(server.dropped_count() == 4);
  CHECK(worker.get("ckpt/step-00000100/rank-1", 1s) == "the true report");
  CHECK_FALSE(worker.check({"order"}));
}

TEST_CASE("an oversized value is refused by name and the server does not buffer it",
          "[core][comm][store][security]") {
  const std::string secret = make_store_secret();
  tcp_store_server server("127.0.0.1", 0, secret);
  tcp_store worker("127.0.0.1", server.port(), secret, 5s);
  worker.set("small", "v");
  const std::size_t held = server.held_bytes();

  try {
    worker.set("big", std::string(max_store_value_bytes + 1, 'x'));
    FAIL("an oversized value was sent");
  } catch (const comm_error& e) {
    CHECK(e.code() == comm_errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains("max_store_value_bytes"));
  }
  {  // An authenticated client announcing 60 MB: dropped at the length, before the bytes come.
    raw_client c(server.port(), secret);
    std::string f;
    wire::put_u32(f, 60u << 20);
    f += std::string(1 << 20, 'x');  // the first MiB of the value
    ::send(c.fd, f.data(), f.size(), MSG_NOSIGNAL);  // may fail part-way: the server hung up
    CHECK(closed_by_peer(c.fd, 5s));
  }
  CHECK(server.dropped_count() == 1);
  CHECK(worker.get("small", 1s) == "v");  // a round trip after the drop
  CHECK_FALSE(worker.check({"big"}));
  CHECK(server.held_bytes() == held);
  CHECK(server.buffered_bytes() < 4096);
}

TEST_CASE("a store refuses keys past max_store_keys, naming the limit", "[core][comm][store]") {
  bounded_values values;
  for (std::size_t i = 0; i < max_store_keys; ++i) values.put(std::to_string(i), "", "test");
  values.put("0", "replacing an existing key is fine", "test");
  try {
    values.put("one-too-many", "x", "test");
    FAIL("a key past the limit was stored");
  } catch (const comm_error& e) {
    CHECK(e.code() == comm_errc::invalid_argument);
    CHECK_THAT(e.what(), Catch::Contains("max_store_keys"));
  }
  CHECK(values.size() == max_store_keys);
  CHECK(values.erase("1"));
  values.put("one-too-many", "x", "test");
  CHECK(values.bytes() > 0);
}

TEST_CASE("a store secret travels as 64 hex digits and a malformed one is refused",
          "[core][comm][store]") {
  const std::string secret = make_store_secret();
  CHECK(secret.size() == store_secret_bytes);
  CHECK(make_store_secret() != secret);
  const std::string hex = store_secret_to_hex(secret);
  CHECK(hex.size() == 64);
  CHECK(store_secret_from_hex(hex, "test") == secret);
  for (const std::string& bad : {std::string(63, 'a'), std::string(64, 'g'), std::string(66, 'a'), std::string()}) {
    CHECK(code_of([&] { store_secret_from_hex(bad, "test"); }) == comm_errc::invalid_argument);
  }
  CHECK(code_of([&] { tcp_store_server("127.0.0.1", 0, "short"); }) == comm_errc::invalid_argument);
}

TEST_CASE("a TCP client that vanishes while waiting does not disturb the server",
          "[core][comm][store]") {
  const std::string secret = make_store_secret();
  tcp_store_server server("127.0.0.1", 0, secret);
  tcp_store good("127.0.0.1", server.port(), secret, 5s);
  good.set("probe", "1");  // good is now connected
  auto waiter = std::make_unique<raw_client>(server.port(), secret);
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::get));
  wire::put_str(p, "never");
  wire::put_u64(p, 60000);
  send_bytes(waiter->fd, waiter->session->seal(p));
  const auto wait_for_clients = [&](std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (server.client_count() != n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    return server.client_count() == n;
  };
  REQUIRE(wait_for_clients(2));
  waiter.reset();  // closes: the server notices the hang-up on its own
  CHECK(wait_for_clients(1));
  CHECK(server.client_count() == 1);
  good.set("never", "now set");  // would write to the vanished waiter: must not hurt
  CHECK(good.get("never", 1s) == "now set");
}

TEST_CASE("a TCP store client reports an unreachable server", "[core][comm][store]") {
  std::uint16_t port = 0;
  const std::string secret = make_store_secret();
  {
    tcp_store_server server("127.0.0.1", 0, secret);
    port = server.port();
  }  // closed again: nothing listens there now
  CHECK(code_of([&] { tcp_store("127.0.0.1", port, secret, 200ms); }) == comm_errc::store_failure);
}
