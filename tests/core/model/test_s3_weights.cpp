// A Hugging Face model directory in S3 (a real s3rver behind a proxy that records each request and
// injects failures): its small files are copied, its safetensors read by range only, the same
// values as the local copy; a transient 500 is retried, a lasting one, a truncated object and an
// object replaced while loading are refused naming the object.
#include <filesystem>
#include <memory>
#include <set>

#include "core/model/hf_files.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/model_error.hpp"
#include "core/model/weight_source.hpp"
#include "tests/core/model/model_test_support.hpp"
#include "tests/support/s3_fault_proxy.hpp"
#include "tests/support/s3_server.hpp"
#include "tests/support/temp_dir.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort::core::model;
using cohort::test::temp_dir;
namespace fs = std::filesystem;
namespace storage = cohort::core::storage;

namespace {

// The test server behind a fault proxy, with a client that goes through the proxy.
struct s3_rig {
  cohort::test::s3_server server;
  cohort::test::s3_fault_proxy proxy{server.port()};
  std::shared_ptr<const storage::s3_client> client = make_client();
  temp_dir cache;

  std::shared_ptr<const storage::s3_client> make_client() {
    auto c = server.config();
    c.endpoint = proxy.endpoint();
    return std::make_shared<const storage::s3_client>(c);
  }
  // Uploads every file of `dir` (not its subdirectories) under `prefix`.
  void upload(const std::string& dir, const std::string& prefix) {
    for (const auto& f : fs::directory_iterator(dir))
      if (f.is_regular_file())
        client->put_object(server.bucket(), prefix + "/" + f.path().filename().string(),
                           cohort::test::read_file(f.path().string()));
  }
  storage::s3_url url(const std::string& prefix) const { return {server.bucket(), prefix}; }
  hf_files fetch(const std::string& prefix, std::uint64_t range_bytes = std::uint64_t{16} << 20) {
    return fetch_hf_files(client, url(prefix), cache.path(prefix), range_bytes);
  }
};

decoder meta_model(const std::string& dir) {
  return decoder(read_config(dir), torch::TensorOptions().dtype(torch::kFloat).device(torch::kMeta));
}

std::vector<torch::Tensor> read_all(const weight_source& src, const std::vector<hf_parameter>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) {
    auto t = torch::empty({p.tensor.numel()}, torch::kFloat);
    src.read(p.name, 0, t);
    out.push_back(t);
  }
  return out;
}

bool is_weights_get(const cohort::test::s3_fault_proxy::exchange& e) {
  return e.request_line.rfind("GET ", 0) == 0 &&
         e.request_line.find(".safetensors HTTP/") != std::string::npos;
}

}  // namespace

TEST_CASE("a model directory in S3 gives the same weights as its local copy, its weights read by range only",
          "[core][model][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_rig rig;
  // gptj: four shards and an index; qwen2: F16 and BF16 tensors.
  for (const std::string family : {"gptj", "qwen2"}) {
    INFO(family);
    const std::string local = cohort::test::local_fixture(family);
    rig.upload(local, "models/" + family);
    // Beside it, what is never fetched: other weight formats and files in subdirectories.
    rig.client->put_object(rig.server.bucket(), "models/" + family + "/pytorch_model.bin", "not read");
    rig.client->put_object(rig.server.bucket(), "models/" + family + "/original/params.json", "{}");
    rig.proxy.clear();
    const hf_files files = rig.fetch("models/" + family, 4096);  // many ranges per tensor, in parallel
    CHECK(files.where == "s3://cohort-test/models/" + family);
    CHECK(fs::exists(files.dir + "/config.json"));
    CHECK(fs::exists(files.dir + "/generation_config.json"));
    CHECK(fs::exists(files.dir + "/model.safetensors.index.json") ==
          fs::exists(local + "/model.safetensors.index.json"));
    for (const auto& f : fs::directory_iterator(files.dir)) {
      INFO(f.path());
      CHECK(f.path().extension() != ".safetensors");
      CHECK(f.path().extension() != ".bin");
    }
    CHECK_FALSE(fs::exists(files.dir + "/original"));

    const auto meta = meta_model(local);
    const auto params = meta->hf_parameters();
    const auto want = read_all(*open_hf_weights(local, params), params);
    const auto got = read_all(*open_hf_weights(files, params), params);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO(params[i].name);
      CHECK(torch::equal(got[i], want[i]));
    }
    std::set<std::string> requested;
    for (const auto& e : rig.proxy.exchanges()) {
      requested.insert(e.request_line.substr(0, e.request_line.rfind(' ')));
      if (!is_weights_get(e)) continue;
      INFO(e.request_line);
      CHECK(e.status == 206);
      CHECK(!e.range.empty());
      CHECK(e.body_bytes <= 4096);
    }
    for (const auto& r : requested) {
      CHECK(r.find("pytorch_model.bin") == std::string::npos);
      CHECK(r.find("original") == std::string::npos);
    }
    if (family == "gptj") {
      // The same prefix without its index (one file now): the cached index of the listing before goes.
      rig.client->delete_object(rig.server.bucket(), "models/gptj/model.safetensors.index.json");
      CHECK_FALSE(fs::exists(rig.fetch("models/gptj").dir + "/model.safetensors.index.json"));
    }
  }
}

TEST_CASE("opening a model in S3 fetches each weight file's header, and reading a slice fetches that slice",
          "[core][model][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_rig rig;
  const std::string local = cohort::test::local_fixture("mistral");
  rig.upload(local, "models/mistral");
  const hf_files files = rig.fetch("models/mistral");
  rig.proxy.clear();
  const auto meta = meta_model(local);
  const auto source = open_hf_weights(files, meta->hf_parameters());
  auto opened = rig.proxy.exchanges();
  REQUIRE(opened.size() == 2);  // the header's length, then the header
  CHECK(opened[0].range == "bytes=0-7");
  CHECK(opened[0].body_bytes == 8);
  CHECK(opened[1].range.rfind("bytes=8-", 0) == 0);

  rig.proxy.clear();
  const std::string name = meta->hf_parameters().front().name;
  auto slice = torch::empty({200}, torch::kFloat);
  source->read(name, 100, slice);
  const auto read = rig.proxy.exchanges();
  REQUIRE(read.size() == 1);
  CHECK(read[0].body_bytes == 200 * 4);  // mistral's fixture is F32
  auto whole = torch::empty({meta->hf_parameters().front().tensor.numel()}, torch::kFloat);
  open_hf_weights(local, meta->hf_parameters())->read(name, 0, whole);
  CHECK(torch::equal(slice, whole.narrow(0, 100, 200)));
}

TEST_CASE("a transient S3 failure while reading weights is retried, a lasting one names the object",
          "[core][model][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_rig rig;
  const std::string local = cohort::test::local_fixture("mistral");
  rig.upload(local, "models/mistral");
  const hf_files files = rig.fetch("models/mistral", 1024);
  const auto meta = meta_model(local);
  const auto params = meta->hf_parameters();
  const auto source = open_hf_weights(files, params);
  const auto want = read_all(*open_hf_weights(local, params), params);

  rig.proxy.fail_next(1, "GET /cohort-test/models/mistral/model.safetensors");
  CHECK(torch::equal(read_all(*source, params).front(), want.front()));
  CHECK(rig.proxy.failures_served() == 1);

  rig.proxy.fail_next(1000, "GET /cohort-test/models/mistral/model.safetensors");
  auto out = torch::empty({params.front().tensor.numel()}, torch::kFloat);
  CHECK_THROWS_WITH(source->read(params.front().name, 0, out),
                    Catch::Contains("s3://cohort-test/models/mistral/model.safetensors") &&
                        Catch::Contains("no success after 4 attempts") &&
                        Catch::Contains("500 InternalError"));
}

TEST_CASE(
    "a truncated weight object, one replaced while loading and a prefix without a model are refused, named",
    "[core][model][s3]") {
  COHORT_NEED_S3_SERVER();
  s3_rig rig;
  const std::string local = cohort::test::local_fixture("mistral");
  const auto meta = meta_model(local);
  const std::string bytes = cohort::test::read_file(local + "/model.safetensors");

  rig.upload(local, "models/cut");
  rig.client->put_object(rig.server.bucket(), "models/cut/model.safetensors",
                         bytes.substr(0, bytes.size() - 100));
  CHECK_THROWS_WITH(
      open_hf_weights(rig.fetch("models/cut"), meta->hf_parameters()),
      Catch::Contains("s3://cohort-test/models/cut/model.safetensors") && Catch::Contains("truncated"));

  rig.upload(local, "models/replaced");
  const auto source = open_hf_weights(rig.fetch("models/replaced"), meta->hf_parameters());
  std::string changed = bytes;
  changed.back() = static_cast<char>(changed.back() ^ 1);
  rig.client->put_object(rig.server.bucket(), "models/replaced/model.safetensors", changed);
  auto out = torch::empty({meta->hf_parameters().front().tensor.numel()}, torch::kFloat);
  CHECK_THROWS_WITH(source->read(meta->hf_parameters().front().name, 0, out),
                    Catch::Contains("s3://cohort-test/models/replaced/model.safetensors") &&
                        Catch::Contains("the object changed"));

  rig.client->put_object(rig.server.bucket(), "models/empty/README.md", "nothing here");
  CHECK_THROWS_WITH(rig.fetch("models/empty"),
                    Catch::Contains("s3://cohort-test/models/empty") && Catch::Contains("no config.json"));
  CHECK_THROWS_WITH(rig.fetch("models/none"),
                    Catch::Contains("s3://cohort-test/models/none") && Catch::Contains("no config.json"));
}
