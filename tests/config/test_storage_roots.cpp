// Storage roots (cluster-head --storage-root): a job's paths on disk must resolve, symlinks and
// ".." included, to under one of the roots; paths that do not exist yet are judged by their
// nearest existing ancestor.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "config/job_spec.hpp"
#include "config/storage_roots.hpp"
#include "tests/config/spec_test_support.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::config;
using cohort::config::testing::expect_spec_error;
namespace fs = std::filesystem;

namespace {

// A job whose every path lies under `dir`.
job_spec job_under(const fs::path& dir) {
  job_spec spec;
  spec.name = "job";
  spec.run.storage_path = (dir / "runs").string();
  spec.data.train = (dir / "data" / "train").string();
  spec.data.eval = (dir / "data" / "eval").string();
  spec.model.hf_dir = (dir / "model").string();
  return spec;
}

}  // namespace

TEST_CASE("a path is within a root when the root's components are a prefix of its own",
          "[config]") {
  CHECK(is_within("/srv/cohort", "/srv/cohort"));
  CHECK(is_within("/srv/cohort/runs/a", "/srv/cohort"));
  CHECK(is_within("/srv/cohort/runs", "/srv/cohort/"));
  CHECK(is_within("/anything", "/"));
  CHECK_FALSE(is_within("/srv/cohort2", "/srv/cohort"));
  CHECK_FALSE(is_within("/srv", "/srv/cohort"));
  CHECK_FALSE(is_within("/", "/srv/cohort"));
}

TEST_CASE("a path that does not exist yet resolves through its nearest existing ancestor",
          "[config]") {
  cohort::test::temp_dir dir;
  const fs::path root = fs::canonical(dir.path());
  fs::create_directories(root / "real");
  fs::create_directory_symlink(root / "real", root / "link");
  CHECK(resolve_through_existing((root / "link" / "new" / "deeper").string(), "run.storage_path") ==
        root / "real" / "new" / "deeper");
  CHECK(resolve_through_existing((root / "missing" / ".." / ".." / "x").string(), "f") ==
        root.parent_path() / "x");
  CHECK(resolve_through_existing((root / "real" / "..").string(), "f") == root);
}

TEST_CASE("a relative path or a dangling symlink is refused naming the field", "[config]") {
  cohort::test::temp_dir dir;
  const fs::path root = fs::canonical(dir.path());
  const auto relative = expect_spec_error([] { resolve_through_existing("runs/x", "run.storage_path"); });
  CHECK(relative.path() == "run.storage_path");
  CHECK_THAT(relative.what(), Catch::Contains("\"runs/x\" is relative"));
  fs::create_directory_symlink(root / "nowhere", root / "dangling");
  const auto dangling = expect_spec_error(
      [&] { resolve_through_existing((root / "dangling" / "runs").string(), "data.train"); });
  CHECK(dangling.path() == "data.train");
  CHECK_THAT(dangling.what(), Catch::Contains("dangling"));
}

TEST_CASE("a job whose paths all lie under a storage root passes, and no roots restrict nothing",
          "[config]") {
  cohort::test::temp_dir dir;
  const auto roots = canonical_storage_roots({dir.str()});
  CHECK_NOTHROW(check_storage_roots(job_under(dir.path()), roots));
  job_spec anywhere = job_under("/");
  anywhere.run.storage_path = "/";
  CHECK_NOTHROW(check_storage_roots(anywhere, {}));
}

TEST_CASE("storage_path \"/\" is refused naming the field, the path and the allowed roots",
          "[config]") {
  cohort::test::temp_dir a, b;
  const auto roots = canonical_storage_roots({a.str(), b.str()});
  job_spec spec = job_under(a.path());
  spec.run.storage_path = "/";
  const auto e = expect_spec_error([&] { check_storage_roots(spec, roots); });
  CHECK(e.path() == "run.storage_path");
  CHECK_THAT(e.what(), Catch::Contains("\"/\" is outside the cluster's storage roots (" +
                                       roots[0].string() + ", " + roots[1].string() + ")"));
}

TEST_CASE("each data and model path outside the roots is refused by its field", "[config]") {
  cohort::test::temp_dir dir;
  const auto roots = canonical_storage_roots({dir.str()});
  const fs::path root = roots[0];
  SECTION("data.train through a symlink that leads out") {
    fs::create_directory_symlink("/etc", root / "etc-link");
    job_spec spec = job_under(root);
    spec.data.train = (root / "etc-link").string();
    const auto e = expect_spec_error([&] { check_storage_roots(spec, roots); });
    CHECK(e.path() == "data.train");
    CHECK_THAT(e.what(), Catch::Contains("(resolves to \"/etc\")"));
  }
  SECTION("data.eval through ..") {
    job_spec spec = job_under(root);
    spec.data.eval = (root / ".." / "elsewhere").string();
    CHECK(expect_spec_error([&] { check_storage_roots(spec, roots); }).path() == "data.eval");
  }
  SECTION("model.hf_dir") {
    job_spec spec = job_under(root);
    spec.model.hf_dir = "/usr/share";
    CHECK(expect_spec_error([&] { check_storage_roots(spec, roots); }).path() == "model.hf_dir");
  }
  SECTION("model.config") {
    job_spec spec = job_under(root);
    spec.model.hf_dir.clear();
    spec.model.config_file = "/etc/passwd";
    CHECK(expect_spec_error([&] { check_storage_roots(spec, roots); }).path() == "model.config");
  }
  SECTION("model.added_tokens") {
    job_spec spec = job_under(root);
    spec.model.added_tokens = "/etc/tokens.json";
    CHECK(expect_spec_error([&] { check_storage_roots(spec, roots); }).path() == "model.added_tokens");
  }
  SECTION("a name \"..\" that takes the run directory out of a storage path at the root") {
    job_spec spec = job_under(root);
    spec.run.storage_path = root.string();
    spec.name = "..";
    const auto e = expect_spec_error([&] { check_storage_roots(spec, roots); });
    CHECK(e.path() == "name");
    CHECK_THAT(e.what(), Catch::Contains("the run directory"));
  }
}

TEST_CASE("a storage root that is relative, missing or a file is refused naming it", "[config]") {
  cohort::test::temp_dir dir;
  const auto file = dir.write("file", "x");
  for (const std::string& bad : {std::string("relative/dir"), dir.path("missing"), file}) {
    INFO(bad);
    try {
      canonical_storage_roots({dir.str(), bad});
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("--storage-root \"" + bad + "\""));
    }
  }
}

TEST_CASE("an s3:// storage path is not on disk and passes the roots, but its run.local_dir must lie under one",
          "[config]") {
  cohort::test::temp_dir dir;
  const auto roots = canonical_storage_roots({dir.str()});
  job_spec spec = job_under(dir.path());
  spec.run.storage_path = "s3://bucket/runs";
  CHECK_NOTHROW(check_storage_roots(spec, roots));
  spec.run.local_dir = (dir.path() / "local").string();
  CHECK_NOTHROW(check_storage_roots(spec, roots));
  spec.run.local_dir = "/var/tmp";
  const auto e = expect_spec_error([&] { check_storage_roots(spec, roots); });
  CHECK(e.path() == "run.local_dir");
  CHECK_THAT(e.what(), Catch::Contains("is outside the cluster's storage roots"));
}

TEST_CASE("data.train and model.hf_dir in S3 pass the roots, but data.cache_dir must lie under one",
          "[config]") {
  cohort::test::temp_dir dir;
  const auto roots = canonical_storage_roots({dir.str()});
  job_spec spec = job_under(dir.path());
  spec.data.train = "s3://bucket/sets/a";
  spec.model.hf_dir = "s3://bucket/models/b";
  CHECK_NOTHROW(check_storage_roots(spec, roots));
  spec.data.cache_dir = "/var/tmp/cache";
  const auto e = expect_spec_error([&] { check_storage_roots(spec, roots); });
  CHECK(e.path() == "data.cache_dir");
}
