// Crash-safety of the store's file primitives: whole-file replacement, missing vs corrupt reads,
// exclusive creation and torn JSON-lines tails.
#include "core/store/atomic_file.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <string>

#include "core/store/jsonl_file.hpp"
#include "core/store/store_error.hpp"
#include "tests/support/files.hpp"
#include "tests/support/temp_dir.hpp"

namespace store = cohort::core::store;
using nlohmann::json;

namespace {

// Names in `dir` starting with '.' (temp files).
int hidden_entries(const std::filesystem::path& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string()[0] == '.') ++n;
  return n;
}

}  // namespace

TEST_CASE("An atomic write replaces the file whole and leaves no temp file behind",
          "[core][store]") {
  cohort::test::temp_dir dir("store-atomic");
  auto path = dir.path() / "state.json";
  store::write_json_atomic(path, json{{"v", 1}});
  store::write_json_atomic(path, json{{"v", 2}});
  REQUIRE(store::read_json(path) == json{{"v", 2}});
  CHECK(hidden_entries(dir.path()) == 0);
}

TEST_CASE("An atomic write honours the requested file mode", "[core][store]") {
  cohort::test::temp_dir dir("store-atomic");
  auto path = dir.path() / "credentials.json";
  store::write_file_atomic(path, "{}", 0600);
  auto perms = std::filesystem::status(path).permissions();
  CHECK((perms & std::filesystem::perms::group_read) == std::filesystem::perms::none);
  CHECK((perms & std::filesystem::perms::others_read) == std::filesystem::perms::none);
}

TEST_CASE("A temp file left by a crash before the rename does not change what readers see",
          "[core][store]") {
  cohort::test::temp_dir dir("store-atomic");
  auto path = dir.path() / "state.json";
  store::write_json_atomic(path, json{{"v", "old"}});
  cohort::test::write_file(store::temp_path_for(path), "{\"v\": \"new, half writ");
  CHECK(store::read_json(path) == json{{"v", "old"}});
  store::write_json_atomic(path, json{{"v", "newer"}});
  CHECK(store::read_json(path) == json{{"v", "newer"}});
}

TEST_CASE("A writer killed at any moment leaves either the old or the new file, never a mix",
          "[core][store]") {
  cohort::test::temp_dir dir("store-atomic");
  auto path = dir.path() / "big.json";
  store::write_json_atomic(path, json{{"fill", std::string(1 << 20, 'a')}});
  for (int round = 0; round < 5; ++round) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(ready[0]);
      try {
        for (int i = 0;; ++i) {
          store::write_json_atomic(path, json{{"fill", std::string(1 << 20, char('b' + i % 20))}});
          if (i == 2) (void)!::write(ready[1], "x", 1);  // killed somewhere in a later write
        }
      } catch (...) {
      }
      ::_exit(1);
    }
    ::close(ready[1]);
    char byte;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    auto value = store::read_json(path);
    REQUIRE(value);
    auto fill = (*value)["fill"].get<std::string>();
    REQUIRE(fill.size() == (1u << 20));
    CHECK(fill.find_first_not_of(fill[0]) == std::string::npos);
  }
}

TEST_CASE("Reading a missing file gives nothing, not an error", "[core][store]") {
  cohort::test::temp_dir dir("store-atomic");
  CHECK_FALSE(store::read_json(dir.path() / "absent.json"));
  CHECK_FALSE(store::read_file(dir.path() / "absent.json"));
}

TEST_CASE("Reading a corrupt JSON file is refused with an error naming the file", "[core][store]") {
  cohort::test::temp_dir dir("store-atomic");
  auto path = dir.path() / "state.json";
  for (std::string text : {"{\"v\": 1", "", "not json at all", "{\"v\": 1} trailing"}) {
    cohort::test::write_file(path, text);
    try {
      store::read_json(path);
      FAIL("corrupt file was accepted: " << text);
    } catch (const store::store_error& e) {
      CHECK(e.kind() == store::store_error_kind::corrupt);
      CHECK(e.path() == path.string());
      CHECK_THAT(e.what(), Catch::Contains(path.string()) && Catch::Contains("not valid JSON"));
    }
  }
}

TEST_CASE("An exclusive create succeeds once and never overwrites", "[core][store]") {
  cohort::test::temp_dir dir("store-atomic");
  auto path = dir.path() / "7";
  CHECK(store::create_exclusive(path, "first"));
  CHECK_FALSE(store::create_exclusive(path, "second"));
  CHECK(cohort::test::read_file(path) == "first");
  CHECK(hidden_entries(dir.path()) == 0);
}

TEST_CASE("A JSON-lines file skips a torn last line and the next append cuts it off",
          "[core][store]") {
  cohort::test::temp_dir dir("store-jsonl");
  auto path = dir.path() / "events.jsonl";
  store::append_json_lines(path, {json{{"n", 1}}, json{{"n", 2}}}, true);
  cohort::test::write_file(path, cohort::test::read_file(path) + "{\"n\": 3, \"torn");
  REQUIRE(store::read_json_lines(path).size() == 2);
  CHECK(store::last_json_line(path) == json{{"n", 2}});
  store::append_json_lines(path, {json{{"n", 4}}}, false);
  auto lines = store::read_json_lines(path);
  REQUIRE(lines.size() == 3);
  CHECK(lines[2] == json{{"n", 4}});
  CHECK(cohort::test::read_file(path).find("torn") == std::string::npos);
}

TEST_CASE("A JSON-lines file with a damaged complete line is refused naming file and line",
          "[core][store]") {
  cohort::test::temp_dir dir("store-jsonl");
  auto path = dir.path() / "events.jsonl";
  cohort::test::write_file(path, "{\"n\": 1}\ngarbage\n{\"n\": 3}\n");
  try {
    store::read_json_lines(path);
    FAIL("damaged line was accepted");
  } catch (const store::store_error& e) {
    CHECK(e.kind() == store::store_error_kind::corrupt);
    CHECK_THAT(e.what(), Catch::Contains(path.string()) && Catch::Contains("line 2"));
  }
}

TEST_CASE("A JSON-lines file stores invalid UTF-8 output without failing", "[core][store]") {
  cohort::test::temp_dir dir("store-jsonl");
  auto path = dir.path() / "logs.jsonl";
  store::append_json_lines(path, {json{{"line", std::string("bad \xff\xfe bytes")}}}, false);
  auto lines = store::read_json_lines(path);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0]["line"].get<std::string>(), Catch::StartsWith("bad "));
}
