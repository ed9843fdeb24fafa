// cohort-bench's parts that need no cluster: node counts, the spec of a run, what it reads back
// from a run directory (medians after warmup, memory peaks) and the CSV it appends to.
#include <catch2/catch.hpp>

#include <fstream>

#include "config/hostfile.hpp"
#include "core/train/memory_status.hpp"
#include "tests/support/temp_dir.hpp"
#include "tools/bench.hpp"

using namespace cohort;
using cohort::tools::run_status;

TEST_CASE("node counts come from --counts within the node list, else as powers of two and the whole list",
          "[tools]") {
  CHECK(tools::parse_node_counts("1,2,4", 4) == std::vector<int>{1, 2, 4});
  CHECK(tools::default_node_counts(1) == std::vector<int>{1});
  CHECK(tools::default_node_counts(4) == std::vector<int>{1, 2, 4});
  CHECK(tools::default_node_counts(6) == std::vector<int>{1, 2, 4, 6});
  for (const char* bad : {"1,3", "0", "1,,2", "two", "1,", "2.5"}) {
    INFO(bad);
    try {
      tools::parse_node_counts(bad, 2);
      FAIL("accepted");
    } catch (const config::spec_error& e) {
      CHECK(e.path() == "--counts");
      CHECK_THAT(e.what(), Catch::Contains("node counts from 1 to 2"));
    }
  }
}

TEST_CASE("a run's spec keeps the job on the first nodes of the list with one worker per slot", "[tools]") {
  config::job_spec base = config::parse_job_spec(
      R"({"name": "b", "scaling": {"num_workers": 8, "min_workers": 2}, "train": {"max_steps": 4},
          "run": {"storage_path": "/tmp/runs"}})");
  const auto hosts = config::parse_hostfile("n1 slots=2\nn2 slots=3\nn3\n", "nodes.txt");
  const auto spec = tools::bench_spec(base, hosts, 2, "b-2n-x", 5);
  CHECK(spec.name == "b-2n-x");
  CHECK(spec.scaling.nodes == std::vector<std::string>{"n1", "n2"});
  CHECK(spec.scaling.num_workers == 5);
  CHECK(spec.scaling.min_workers == 0);
  CHECK(spec.scaling.strategy == config::placement_strategy::spread);
  CHECK(spec.run.memory_status_every_s == 5);
  base.run.memory_status_every_s = 0.5;  // the spec's own sampling period stays
  CHECK(tools::bench_spec(base, hosts, 3, "b-3n-x", 5).run.memory_status_every_s == 0.5);
  // The spec it makes is one the parser accepts.
  CHECK(config::parse_job_spec(config::to_json_text(spec)).scaling.nodes == spec.scaling.nodes);
}

TEST_CASE("run names carry the node count and the stamp, fit a job name and skip run directories that exist",
          "[tools]") {
  test::temp_dir tmp;
  CHECK(tools::bench_run_name("gpt", 4, "20261127T081500", tmp.str()) == "gpt-4n-20261127T081500");
  tmp.write("gpt-4n-20261127T081500/metrics.jsonl", "");
  CHECK(tools::bench_run_name("gpt", 4, "20261127T081500", tmp.str()) == "gpt-4n-20261127T081500-2");
  const auto long_name = tools::bench_run_name(std::string(128, 'a'), 16, "20261127T081500", tmp.str());
  CHECK(long_name.size() <= 120);
  CHECK_THAT(long_name, Catch::EndsWith("-16n-20261127T081500"));
}

TEST_CASE(
    "a burn-in cuts the node list in its order into disjoint groups and says the nodes left over; a "
    "group size outside 1 to the list's length is refused naming the option",
    "[tools]") {
  std::vector<config::host_entry> hosts;
  for (int i = 1; i <= 5; ++i) hosts.push_back({"n" + std::to_string(i), i == 2 ? 2 : 1, i});
  const auto names = [](const std::vector<config::host_entry>& group) {
    std::vector<std::string> out;
    for (const auto& h : group) out.push_back(h.name);
    return out;
  };
  auto cut = tools::make_node_groups(hosts, 2);
  REQUIRE(cut.groups.size() == 2);
  CHECK(names(cut.groups[0]) == std::vector<std::string>{"n1", "n2"});
  CHECK(names(cut.groups[1]) == std::vector<std::string>{"n3", "n4"});
  CHECK(names(cut.left_over) == std::vector<std::string>{"n5"});
  CHECK(tools::bench_spec(config::job_spec{}, cut.groups[0], 2, "g1", 5).scaling.num_workers == 3);
  cut = tools::make_node_groups(hosts, 5);
  CHECK(cut.groups.size() == 1);
  CHECK(cut.left_over.empty());
  CHECK(tools::make_node_groups(hosts, 1).groups.size() == 5);
  CHECK_THROWS_WITH(tools::make_node_groups(hosts, 6),
                    Catch::Contains("--group-size") && Catch::Contains("got 6; allowed: 1 to 5"));
  CHECK_THROWS_WITH(tools::make_node_groups(hosts, 0), Catch::Contains("got 0"));
}

TEST_CASE("a burn-in's run names carry the group", "[tools]") {
  test::temp_dir tmp;
  CHECK(tools::bench_group_run_name("opt", 3, 2, "20261128T220000", tmp.str()) ==
        "opt-g3-2n-20261128T220000");
}

TEST_CASE("throughput is the median over the steps after the warmup, samples/s from the global batch and "
          "step time",
          "[tools]") {
  test::temp_dir tmp;
  tmp.write("run/metrics.jsonl",
            R"({"step": 1, "tokens_per_s": 10, "step_s": 10.0}
{"step": 2, "tokens_per_s": 20, "step_s": 8.0, "mfu": 0.5}
{"step": 3, "tokens_per_s": 300, "step_s": 2.0, "mfu": 0.1}
{"step": 4, "tokens_per_s": 100, "step_s": 4.0, "mfu": 0.3}
{"step": 5, "tokens_per_s": 200, "step_s": 1.0, "mfu": 0.2}
)");
  const auto t = tools::read_run_throughput(tmp.path("run"), 8, 1);
  CHECK(t.steps == 4);
  REQUIRE(t.samples_per_s);
  CHECK(*t.samples_per_s == Approx(3.0));  // 8 / {8, 2, 4, 1} = {1, 4, 2, 8}: median (2 + 4) / 2
  CHECK(*t.tokens_per_s == Approx(150));
  CHECK(*t.mfu == Approx(0.25));
  const auto none = tools::read_run_throughput(tmp.path("run"), 8, 5);
  CHECK(none.steps == 0);
  CHECK_FALSE(none.samples_per_s);
  CHECK_FALSE(tools::read_run_throughput(tmp.path("missing"), 8, 0).tokens_per_s);
  tmp.write("bad/metrics.jsonl", "{\"step\": 1}\nnot json\n");
  CHECK_THROWS_WITH(tools::read_run_throughput(tmp.path("bad"), 8, 0),
                    Catch::Contains(tmp.path("bad") + "/metrics.jsonl:2"));
}

TEST_CASE("memory peaks are the largest over the ranks, GPU only where a rank logged GPU columns", "[tools]") {
  test::temp_dir tmp;
  const std::string header = std::string(core::train::memory_csv_header) + "\n";
  tmp.write("run/memory/rank-0.csv", header + "1.0,1,100,150,,,\n2.0,2,120,170,,,\n");
  tmp.write("run/memory/rank-1.csv", header + "1.0,1,300,310,,,\n");
  auto peaks = tools::read_run_memory_peaks(tmp.path("run"));
  CHECK(peaks.host_bytes == 310);
  CHECK_FALSE(peaks.gpu_bytes);
  tmp.write("gpu/memory/rank-0.csv", header + "1.0,1,100,150,10,20,40\n");
  tmp.write("gpu/memory/rank-1.csv", header + "1.0,1,100,150,30,35,60\n");
  CHECK(tools::read_run_memory_peaks(tmp.path("gpu")).gpu_bytes == 60);
  CHECK_FALSE(tools::read_run_memory_peaks(tmp.path("nothing")).host_bytes);
  tmp.write("broken/memory/rank-0.csv", "what\n");
  CHECK_THROWS_AS(tools::read_run_memory_peaks(tmp.path("broken")), tools::bench_error);
}

TEST_CASE("the CSV gets its header once, rows with empty cells for what was not measured, and refuses a "
          "file that is not one",
          "[tools]") {
  test::temp_dir tmp;
  const auto csv = tmp.path("bench.csv");
  tools::bench_row ok;
  ok.nodes = 2;
  ok.workers = 4;
  ok.job_id = "job-1";
  ok.run_name = "b-2n-x";
  ok.status = run_status::ok;
  ok.throughput.steps = 3;
  ok.throughput.samples_per_s = 12.5;
  ok.throughput.tokens_per_s = 200;
  ok.memory.host_bytes = 1024;
  ok.min_samples_per_s = 10;
  CHECK(ok.passed());
  tools::bench_row slow = ok;
  slow.throughput.samples_per_s = 9.5;
  CHECK_FALSE(slow.passed());
  tools::bench_row late;
  late.nodes = 1;
  late.workers = 1;
  late.job_id = "job-2";
  late.run_name = "b-1n-x";
  late.status = run_status::timeout;
  late.reason = "did not end within 5 s; \"stopped\"";
  CHECK_FALSE(late.passed());
  { tools::open_bench_csv(csv) << tools::bench_csv_line(ok) << '\n'; }
  { tools::open_bench_csv(csv) << tools::bench_csv_line(late) << '\n'; }
  late.group = 3;
  late.node_names = {"n5", "n6"};
  { tools::open_bench_csv(csv) << tools::bench_csv_line(late) << '\n'; }
  CHECK(
      test::read_file(csv) ==
      std::string(tools::bench_csv_header) + "\n" +
          "2,4,job-1,b-2n-x,ok,3,12.5,200,,1024,,10,pass,\"\",,\"\"\n" +
          "1,1,job-2,b-1n-x,timeout,0,,,,,,0,fail,\"did not end within 5 s; \"\"stopped\"\"\",,\"\"\n" +
          "1,1,job-2,b-1n-x,timeout,0,,,,,,0,fail,\"did not end within 5 s; \"\"stopped\"\"\",3,\"n5 n6\"\n");
  const auto other = tmp.write("other.csv", "a,b\n1,2\n");
  CHECK_THROWS_WITH(tools::open_bench_csv(other), Catch::Contains(other) && Catch::Contains("not cohort-bench's header"));
}
