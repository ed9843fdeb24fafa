// The rendezvous stores: the same contract for memory, file and TCP stores, and the TCP
// server's robustness against malformed frames and vanishing clients.
#include "core/comm/comm_error.hpp"
#include "core/comm/file_store.hpp"
#include "core/comm/memory_store.hpp"
#include "core/comm/tcp_store.hpp"
#include "core/comm/tcp_store_server.hpp"
#include "core/comm/tcp_store_wire.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
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
    s.server = std::make_unique<tcp_store_server>("127.0.0.1", 0);
    const auto port = s.server->port();
    s.connect = [port] { return std::make_shared<tcp_store>("127.0.0.1", port, 5s); };
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

TEST_CASE("the TCP store server survives malformed frames and keeps serving others",
          "[core][comm][store]") {
  tcp_store_server server("127.0.0.1", 0);
  tcp_store good("127.0.0.1", server.port(), 5s);
  good.set("k", "v");

  std::vector<std::string> garbage;
  {
    std::string huge;
    wire::put_u32(huge, 0xffffffffu);  // length beyond every bound
    garbage.push_back(huge);
  }
  {
    std::string p;
    wire::put_u8(p, 99);  // unknown op
    garbage.push_back(wire::frame(p));
  }
  {
    std::string p;
    wire::put_u8(p, static_cast<std::uint8_t>(wire::op::set));
    wire::put_u32(p, 1000);  // key length past the frame's end
    p += "short";
    garbage.push_back(wire::frame(p));
  }
  {
    std::string p;
    wire::put_u8(p, static_cast<std::uint8_t>(wire::op::get));
    wire::put_str(p, "k");  // no timeout field
    garbage.push_back(wire::frame(p));
  }
  garbage.push_back(wire::frame(""));  // empty frame

  for (const auto& bytes : garbage) {
    const int fd = raw_connect(server.port());
    REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
    CHECK(closed_by_peer(fd, 5s));
    ::close(fd);
    CHECK(good.get("k", 1s) == "v");
  }
  good.set("k2", "still alive");
  CHECK(good.get("k2", 1s) == "still alive");
}

TEST_CASE("a TCP client that vanishes while waiting does not disturb the server",
          "[core][comm][store]") {
  tcp_store_server server("127.0.0.1", 0);
  tcp_store good("127.0.0.1", server.port(), 5s);
  good.set("probe", "1");  // good is now connected
  const int fd = raw_connect(server.port());
  std::string p;
  wire::put_u8(p, static_cast<std::uint8_t>(wire::op::get));
  wire::put_str(p, "never");
  wire::put_u64(p, 60000);
  const std::string f = wire::frame(p);
  REQUIRE(::send(fd, f.data(), f.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(f.size()));
  const auto wait_for_clients = [&](std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (server.client_count() != n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    return server.client_count() == n;
  };
  REQUIRE(wait_for_clients(2));
  ::close(fd);  // the server notices the hang-up on its own
  CHECK(wait_for_clients(1));
  CHECK(server.client_count() == 1);
  good.set("never", "now set");  // would write to the vanished waiter: must not hurt
  CHECK(good.get("never", 1s) == "now set");
}

TEST_CASE("a TCP store client reports an unreachable server", "[core][comm][store]") {
  std::uint16_t port = 0;
  {
    tcp_store_server server("127.0.0.1", 0);
    port = server.port();
  }  // closed again: nothing listens there now
  CHECK(code_of([&] { tcp_store("127.0.0.1", port, 200ms); }) == comm_errc::store_failure);
}
