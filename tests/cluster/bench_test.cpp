// cohort-bench against a real cluster (cluster-head and two cluster-workers on 127.0.0.1): a tiny
// Llama spec over 1 and 2 nodes of a hostfile gives ok rows, a run held before a step (so it can
// never end) gives a timeout row, and bad node lists are refused naming file and line.
#include <catch2/catch.hpp>

#include <sstream>

#include "tests/cluster/cluster_harness.hpp"
#include "tests/core/train/tiny_data.hpp"
#include "tests/support/files.hpp"

using namespace std::chrono_literals;
using cohort::test::test_cluster;
using json = nlohmann::json;

namespace {

// A causal_lm job of 6 logged steps of a tiny Llama, one CPU per worker (cohort-bench sets the
// workers and nodes).
std::string tiny_llama_job(const std::string& name, const std::string& data, const std::string& storage) {
  return R"({"name": ")" + name + R"(", "workload": "causal_lm",
    "model": {"config": )" + cohort::test::tiny_llama_config() + R"(, "init_seed": 7},
    "data": {"train": ")" + data + R"("},
    "scaling": {"num_workers": 1, "resources_per_worker": {"CPU": 1}},
    "train": {"seq_len": 16, "micro_batch_size": 2, "grad_accum": 2, "max_steps": 6, "lr": 0.01, "seed": 3},
    "run": {"storage_path": ")" + storage + R"("}})";
}

// The CSV as rows of cells by header name (cells may be quoted, with "" for a quote).
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::istringstream in(cohort::test::read_file(path));
  const auto split = [](const std::string& line) {
    std::vector<std::string> cells(1);
    bool quoted = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') cells.back() += '"', ++i;
      else if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) cells.emplace_back();
      else cells.back() += c;
    }
    return cells;
  };
  std::string line;
  std::getline(in, line);
  const auto header = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const auto cells = split(line);
    REQUIRE(cells.size() == header.size());
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST_CASE("cohort-bench writes an ok row with samples/s per node count, and a run that cannot end in "
          "time is stopped and written as a timeout row",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  c.start_worker("n1", 1);
  c.start_worker("n2", 1);
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  const auto runs = c.dir().str() + "/runs";
  const auto nodes = c.dir().write("nodes.txt", "# the bench's nodes, in order\nn1 slots=1\nn2\n");
  const auto csv = c.dir().path("bench.csv");

  auto r = c.run("cohort-bench",
                 {"--nodes", nodes, "--spec", c.write_job(tiny_llama_job("tiny", data, runs)), "--counts", "1,2",
                  "--timeout-s", "400", "--min-samples-per-s", "0.001", "--csv", csv},
                 {}, 900s);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto rows = read_csv(csv);
  REQUIRE(rows.size() == 2);
  for (int i = 0; i < 2; ++i) {
    const auto& row = rows[static_cast<std::size_t>(i)];
    INFO("row " << i << ": " << json(row).dump());
    CHECK(row.at("nodes") == std::to_string(i + 1));
    CHECK(row.at("workers") == std::to_string(i + 1));
    CHECK(row.at("status") == "ok");
    CHECK_THAT(row.at("run"), Catch::StartsWith("tiny-" + std::to_string(i + 1) + "n-"));
    CHECK(row.at("steps") == "4");  // 6 steps, the first 2 the warmup
    CHECK(std::stod(row.at("samples_per_s")) > 0);
    CHECK(std::stod(row.at("tokens_per_s")) > 0);
    CHECK(row.at("mfu").empty());  // CPU
    CHECK(std::stod(row.at("peak_host_bytes")) > 0);
    CHECK(row.at("peak_gpu_bytes").empty());
    CHECK(row.at("pass") == "pass");
    // The job ran on the first i + 1 nodes of the list, one rank each.
    const auto status = c.status(row.at("job"));
    CHECK(status["state"] == "SUCCEEDED");
    CHECK(status["rank_nodes"] == (i == 0 ? json{"n1"} : json{"n1", "n2"}));
  }

  // Held before step 3 until released, which nobody does: it can never end within the timeout.
  auto held = json::parse(tiny_llama_job("held", data, runs));
  held["run"]["hold_before_step"] = 3;
  r = c.run("cohort-bench", {"--nodes", nodes, "--spec", c.write_job(held.dump()), "--counts", "2",
                             "--timeout-s", "20", "--csv", csv},
            {}, 600s);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("2 nodes: timeout"));
  rows = read_csv(csv);
  REQUIRE(rows.size() == 3);  // appended below the first two
  const auto& late = rows[2];
  INFO(json(late).dump());
  CHECK(late.at("status") == "timeout");
  CHECK(late.at("workers") == "2");
  CHECK(late.at("pass") == "fail");
  CHECK_THAT(late.at("reason"), Catch::Contains("did not end within 20 s") && Catch::Contains("stopped"));
  CHECK(late.at("samples_per_s").empty());  // steps 1 and 2 are the warmup; none after
  CHECK(c.status(late.at("job"))["state"] == "STOPPED");
}

TEST_CASE("cohort-bench refuses a bad node list naming the file and line, and bad options naming them, before "
          "running anything",
          "[cluster]") {
  test_cluster c;
  c.start_head();
  c.start_worker("n1", 1);
  const auto job = c.write_job(tiny_llama_job("tiny", cohort::test::make_tiny_dataset(c.dir().str() + "/data"),
                                              c.dir().str() + "/runs"));
  const auto csv = c.dir().path("bench.csv");
  const auto bad = c.dir().write("bad-nodes.txt", "n1\nn2 slots=two\n");
  auto r = c.run("cohort-bench", {"--nodes", bad, "--spec", job, "--csv", csv});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(bad + ":2: slots=two for node n2 is not a number of workers"));
  const auto absent = c.dir().write("absent-nodes.txt", "n1\n\nn7\n");
  r = c.run("cohort-bench", {"--nodes", absent, "--spec", job, "--csv", csv});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(absent + ":3: node n7 is not in the cluster") && Catch::Contains("its nodes: n1"));
  r = c.run("cohort-bench", {"--nodes", absent, "--spec", job, "--counts", "1,4", "--csv", csv});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--counts: got \"4\""));
  r = c.run("cohort-bench", {"--nodes", absent, "--spec", job, "--timeout-s", "0", "--csv", csv});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--timeout-s got 0; allowed: seconds > 0"));
  CHECK(cohort::test::read_file(csv) ==
        "nodes,workers,job,run,status,steps,samples_per_s,tokens_per_s,mfu,"
        "peak_host_bytes,peak_gpu_bytes,min_samples_per_s,pass,reason,group,"
        "node_names\n");
  CHECK(c.submit({"list", "--json"}).out.find("\"jobs\":[]") != std::string::npos);
}

TEST_CASE(
    "a burn-in runs every group of the node list at once, a row each: the group with a broken node "
    "fails alone, named, the other passes, and the node left over is said",
    "[cluster]") {
  test_cluster c;
  c.start_head();
  for (const char* node : {"n1", "n2", "n3", "n4", "n5"})
    if (std::string(node) == "n3")  // it cannot start a rank: its worker program fails at once
      c.start_worker(node, 1, "", {"--worker-program", "/bin/false"});
    else
      c.start_worker(node, 1);
  const auto data = cohort::test::make_tiny_dataset(c.dir().str() + "/data");
  auto spec = json::parse(tiny_llama_job("burn", data, c.dir().str() + "/runs"));
  spec["run"]["failure"] = {{"max_failures", 0}};
  const auto nodes = c.dir().write("nodes.txt", "n1\nn2\nn3\nn4\nn5\n");
  const auto csv = c.dir().path("burn.csv");
  auto r = c.run("cohort-bench",
                 {"--nodes", nodes, "--spec", c.write_job(spec.dump()), "--group-size", "2", "--timeout-s",
                  "400", "--min-samples-per-s", "0.001", "--csv", csv},
                 {}, 900s);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("1 node left over after 2 groups of 2, run in no group: n5"));
  const auto rows = read_csv(csv);
  REQUIRE(rows.size() == 2);
  INFO(json(rows).dump());
  CHECK(rows[0].at("group") == "1");
  CHECK(rows[0].at("node_names") == "n1 n2");
  CHECK(rows[0].at("status") == "ok");
  CHECK(rows[0].at("pass") == "pass");
  CHECK(std::stod(rows[0].at("samples_per_s")) > 0);
  CHECK(rows[1].at("group") == "2");
  CHECK(rows[1].at("node_names") == "n3 n4");
  CHECK(rows[1].at("status") == "failed");
  CHECK(rows[1].at("pass") == "fail");
  CHECK_THAT(rows[1].at("reason"), Catch::Contains("on node n3"));
  // Both ran at once: the failing group ended while the other's job was still to finish, or
  // before; each job was placed on its own group only.
  CHECK(c.status(rows[0].at("job"))["rank_nodes"] == json{"n1", "n2"});
  CHECK(c.status(rows[1].at("job"))["rank_nodes"] == json{"n3", "n4"});
}
