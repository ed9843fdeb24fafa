// data_bench: builds a generated text corpus of at least --gb GB of tokens into token shards and
// prints build throughput, cold and warm read throughput beside dd on the same files, and the
// latency of resuming a loader at step 0 versus step 1,000,000. Deletes what it wrote unless --keep.
// The large corpus is tokenized byte-level (one token per byte, ByT5-style) so the number measures
// the pipeline (reading, threads, packing, shard writing, checksums); with --tokenizer, a further
// --sample-mb of the same text is built end to end with that tokenizer.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <random>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/data/batch_loader.hpp"
#include "core/data/build/builder.hpp"
#include "core/data/dataset.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "tools/command_line.hpp"

namespace fs = std::filesystem;
namespace cd = cohort::core::data;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// Deterministic pseudo-English: a lexicon of syllable words drawn with a Zipf-like skew.
class text_generator {
 public:
  explicit text_generator(std::uint64_t seed) : rng_(seed) {
    static const char* syllables[] = {"ka", "lo", "mi", "ne", "ru", "sta", "ther", "in", "an", "or", "pe", "tion",
                                      "al", "be", "com", "de", "ex", "ing", "ly", "pro", "re", "ver", "wa", "zu"};
    std::uniform_int_distribution<int> n_syl(1, 4), syl(0, 23);
    for (int i = 0; i < 30000; ++i) {
      std::string w;
      for (int s = n_syl(rng_); s > 0; --s) w += syllables[syl(rng_)];
      lexicon_.push_back(w);
    }
  }
  // Appends roughly `bytes` bytes of sentences and paragraphs.
  void append(std::string& out, std::size_t bytes) {
    std::uniform_real_distribution<double> u(0, 1);
    const std::size_t target = out.size() + bytes;
    int words_in_sentence = 0;
    while (out.size() < target) {
      const auto idx = static_cast<std::size_t>(std::pow(u(rng_), 3.0) * static_cast<double>(lexicon_.size()));
      std::string w = lexicon_[std::min(idx, lexicon_.size() - 1)];
      if (words_in_sentence == 0) w[0] = static_cast<char>(w[0] - 'a' + 'A');
      out += w;
      if (++words_in_sentence > 8 && u(rng_) < 0.15) {
        out += u(rng_) < 0.1 ? ".\n\n" : ". ";
        words_in_sentence = 0;
      } else {
        out += u(rng_) < 0.05 ? ", " : " ";
      }
    }
  }

 private:
  std::mt19937_64 rng_;
  std::vector<std::string> lexicon_;
};

// Drops a file's clean pages from the page cache so the next read comes from disk.
void evict(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

std::vector<fs::path> files_with(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

double dd_seconds(const std::vector<fs::path>& files) {
  const auto t = clock_type::now();
  for (const auto& f : files) {
    const std::string cmd = "dd if='" + f.string() + "' of=/dev/null bs=4M status=none";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("dd failed on " + f.string());
  }
  return seconds_since(t);
}

// Reads every sample in index order through the mmap reader; returns seconds.
double read_all_seconds(const std::string& dir, std::int64_t& tokens_read) {
  const auto t = clock_type::now();
  cd::dataset ds(dir);
  std::vector<std::int64_t> buf(static_cast<std::size_t>(ds.seq_len()));
  std::int64_t sum = 0;
  tokens_read = 0;
  for (std::int64_t i = 0; i < ds.size(); ++i) {
    const auto n = ds.read_sample(i, buf.data(), nullptr, ds.seq_len());
    tokens_read += n;
    sum += buf[0];
  }
  if (sum < 0) std::puts("");  // keeps the loop from being optimised away
  return seconds_since(t);
}

// One token per byte (3..258), PAD 0, BOS 1, EOS 2: the cheapest real tokenization.
class byte_level_tokenizer : public cohort::core::tokenizer::tokenizer {
 public:
  using token_id = cohort::core::tokenizer::token_id;
  std::vector<token_id> encode(const std::string& text) const override {
    std::vector<token_id> out(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) out[i] = 3 + static_cast<unsigned char>(text[i]);
    return out;
  }
  std::string decode(const std::vector<token_id>& ids) const override {
    std::string out;
    for (auto id : ids)
      if (id >= 3 && id < 259) out += static_cast<char>(id - 3);
    return out;
  }
  std::int64_t vocab_size() const override { return 259; }
  std::optional<token_id> bos_id() const override { return 1; }
  std::optional<token_id> eos_id() const override { return 2; }
  std::optional<token_id> pad_id() const override { return 0; }
  std::vector<token_id> add_special_tokens(const std::vector<std::string>&) override {
    throw cohort::core::tokenizer::tokenizer_error("byte-level benchmark tokenizer: special tokens are not supported");
  }
  std::optional<token_id> token_to_id(const std::string& token) const override {
    if (token.size() == 1) return 3 + static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }
  std::string identity() const override { return "byte-level"; }
};

void write_corpus(text_generator& gen, const fs::path& dir, double bytes) {
  fs::create_directories(dir);
  std::uint64_t written = 0;
  for (int part = 0; static_cast<double>(written) < bytes; ++part) {
    std::string chunk;
    gen.append(chunk, std::min<std::size_t>(64 << 20, static_cast<std::size_t>(bytes - static_cast<double>(written)) + 1));
    char name[32];
    std::snprintf(name, sizeof name, "part-%04d.txt", part);
    std::FILE* f = std::fopen((dir / name).c_str(), "wb");
    if (f == nullptr || std::fwrite(chunk.data(), 1, chunk.size(), f) != chunk.size())
      throw std::runtime_error("cannot write the corpus under " + dir.string());
    std::fclose(f);
    written += chunk.size();
  }
}

void print_build(const char* what, const cd::build_report& r, int threads) {
  const auto& m = r.result;
  std::printf("build (%s): %lld tokens (%.2f GB as %s) in %lld samples, %zu shards, %.1fs: %.1f MB/s of text, "
              "%.2fM tokens/s (%d threads)\n",
              what, static_cast<long long>(m.tokens), static_cast<double>(m.tokens) * m.token_bytes / 1e9,
              cd::token_dtype_name(m.token_bytes).c_str(), static_cast<long long>(m.samples), m.shards.size(), r.seconds,
              static_cast<double>(r.input_bytes) / 1e6 / r.seconds, static_cast<double>(m.tokens) / 1e6 / r.seconds,
              threads);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::string tokenizer_path, work;
  double gb = 1.0;
  double sample_mb = 20;
  int threads = 0;
  std::int64_t seq_len = 2048;
  bool keep = false;
  po::options_description desc("data_bench options");
  desc.add_options()("help,h", "show this help")("tokenizer", po::value(&tokenizer_path),
                                                  "also build --sample-mb of text with this tokenizer file")(
      "sample-mb", po::value(&sample_mb), "megabytes of text for the --tokenizer build (default 20)")(
      "work", po::value(&work)->required(), "scratch directory (corpus + dataset; removed afterwards)")(
      "gb", po::value(&gb), "gigabytes of token data to build (default 1.0)")(
      "threads", po::value(&threads), "tokenizer threads (default: all cores)")(
      "seq-len", po::value(&seq_len), "sequence length (default 2048)")("keep", po::bool_switch(&keep),
                                                                         "keep the corpus and dataset");
  po::variables_map vm;
  if (auto done = cohort::tools::read_command_line("data_bench", argc, argv, desc, vm)) return *done;
  try {
    const fs::path root(work), corpus = root / "corpus", out = root / "dataset";
    const int used_threads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
    text_generator gen(12345);

    // 1. Corpus: gb GB of uint16 byte-level tokens is gb/2 GB of text.
    auto t = clock_type::now();
    write_corpus(gen, corpus, gb * 1e9 / 2 * 1.01);
    std::printf("corpus: generated text for %.2f GB of tokens in %.1fs\n", gb, seconds_since(t));

    // 2. Build the large corpus (byte-level), then a sample end to end with the real tokenizer.
    cd::build_options o;
    o.input = corpus.string();
    o.tokenizer_path = "byte-level";
    o.out_dir = out.string();
    o.seq_len = seq_len;
    o.threads = threads;
    byte_level_tokenizer bytes_tok;
    const auto report = cd::build_dataset(o, bytes_tok);
    print_build("byte-level tokens, pipeline-bound", report, used_threads);
    const auto m = report.result;
    fs::remove_all(corpus);
    if (!tokenizer_path.empty()) {
      auto tok = cohort::core::tokenizer::load_tokenizer(tokenizer_path);
      const fs::path sample_corpus = root / "sample", sample_out = root / "sample-dataset";
      write_corpus(gen, sample_corpus, sample_mb * 1e6);
      cd::build_options so = o;
      so.input = sample_corpus.string();
      so.tokenizer_path = tokenizer_path;
      so.out_dir = sample_out.string();
      const auto sample_report = cd::build_dataset(so, *tok);
      print_build(("end to end with " + fs::path(tokenizer_path).filename().string() + ", tokenizer-bound").c_str(),
                  sample_report, used_threads);
      fs::remove_all(sample_corpus);
      fs::remove_all(sample_out);
    }

    // 3. Reads: dd versus the mmap reader, from disk (pages evicted) and from the page cache.
    const auto token_files = files_with(out, ".tokens");
    std::vector<fs::path> all_files = token_files;
    for (const auto& f : files_with(out, ".index")) all_files.push_back(f);
    const double tokens = static_cast<double>(m.tokens);
    for (const char* state : {"cold", "warm"}) {
      const bool cold = std::string(state) == "cold";
      if (cold) for (const auto& f : all_files) evict(f);
      const double dd = dd_seconds(token_files);
      if (cold) for (const auto& f : all_files) evict(f);
      std::int64_t read = 0;
      const double rd = read_all_seconds(out.string(), read);
      std::printf("read (%s cache): reader %.1fM tokens/s (%.0f MB/s) | dd %.1fM tokens/s (%.0f MB/s)\n", state,
                  static_cast<double>(read) / 1e6 / rd, static_cast<double>(read) * m.token_bytes / 1e6 / rd,
                  tokens / 1e6 / dd, tokens * m.token_bytes / 1e6 / dd);
    }

    // 4. Shuffled micro-batches through the engine interface (warm).
    auto ds = std::make_shared<const cd::dataset>(out.string());
    cd::loader_options lo;
    lo.geometry = {1, 8, 1};
    lo.seed = 1;
    {
      cd::batch_loader loader(ds, lo);
      cd::micro_batch mb;
      const std::int64_t batches = std::min<std::int64_t>(loader.steps_per_epoch(), 20000);
      t = clock_type::now();
      for (std::int64_t i = 0; i < batches; ++i) loader.next(mb);
      const double s = seconds_since(t);
      std::printf("shuffled micro-batches (B=8, T=%lld, warm): %.1fM tokens/s\n", static_cast<long long>(seq_len),
                  static_cast<double>(batches * 8 * seq_len) / 1e6 / s);
    }

    // 5. Resume latency: open the dataset, build a loader, seek, read the first micro-batch.
    lo.geometry = {8, 4, 2};
    lo.rank = 3;
    const std::int64_t steps_per_epoch = cd::sampler(ds->size(), lo.geometry.global_batch(), 0).steps_per_epoch();
    for (std::int64_t step : {std::int64_t{0}, std::int64_t{1000000}}) {
      std::vector<double> open_us, seek_us;
      for (int rep = 0; rep < 50; ++rep) {
        auto t0 = clock_type::now();
        auto d = std::make_shared<const cd::dataset>(out.string());
        const double open_s = seconds_since(t0);
        auto t1 = clock_type::now();
        cd::batch_loader loader(d, lo);
        loader.seek(step);
        cd::micro_batch mb;
        loader.next(mb);
        seek_us.push_back(seconds_since(t1) * 1e6);
        open_us.push_back(open_s * 1e6);
      }
      std::printf("resume at step %lld (epoch %lld): open %.0f us + seek and first micro-batch (B=4) %.0f us (median of 50)\n",
                  static_cast<long long>(step), static_cast<long long>(step / steps_per_epoch),
                  median(open_us), median(seek_us));
    }
    if (!keep) fs::remove_all(root);
  } catch (const std::exception& e) {
    std::cerr << "data_bench: " << e.what() << "\n";
    if (!keep) fs::remove_all(work);
    return 1;
  }
  return 0;
}
