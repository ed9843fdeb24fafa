// Builds a token-shard dataset from text or jsonl (see builder.hpp).
#include "core/data/build/builder.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/data/build/input_reader.hpp"
#include "core/data/build/progress_bar.hpp"
#include "core/data/build/sample_packer.hpp"
#include "core/data/build/sft_template.hpp"
#include "core/data/shard_writer.hpp"
#include "core/data/special_tokens_file.hpp"

namespace cohort::core::data {
namespace {

using nlohmann::json;

struct encoded_chunk {
  std::vector<encoded_record> records;
  std::uint64_t bytes = 0;
  std::exception_ptr error;
};

// A seq2seq record's source or target: its template, the length it must fit and how.
struct seq2seq_side {
  std::unique_ptr<sft_template> tmpl;
  std::int64_t len = 0;
  const char* len_option = "";  // "--source-len" / "--target-len"
  const char* name = "";        // "source" / "target"
};

// What a worker needs to turn one raw record into token ids.
struct record_encoder {
  const tokenizer::tokenizer& tok;
  input_kind kind;
  const std::string& field;
  const sft_template* tmpl;
  const std::vector<input_file>& files;
  const seq2seq_side* source = nullptr;  // seq2seq: both set
  const seq2seq_side* target = nullptr;
  const std::string& over_long;
  std::size_t special = 0;  // ids the post-processor adds to one sequence
  bool pairs = false;       // reward-model pairs: "prompt" (optional), "chosen", "rejected"

  // A pairs record's string field `name`; `optional`: "" when absent.
  std::string pair_text(const json& j, const std::string& where, const char* name, bool optional) const {
    const auto it = j.find(name);
    if (it == j.end()) {
      if (optional) return "";
      throw data_error(where + ": missing field \"" + name +
                       "\"; a pairs record (--pairs) needs string fields \"chosen\" and \"rejected\" "
                       "(and may have \"prompt\")");
    }
    if (!it->is_string()) throw data_error(where + ": field \"" + name + "\" must be a string");
    return it->get<std::string>();
  }

  encoded_record encode_pair(const json& j, const std::string& where) const {
    if (!j.is_object()) throw data_error(where + ": expected a JSON object per line");
    const std::string prompt = pair_text(j, where, "prompt", true);
    encoded_record out;
    out.ids = tok.encode(prompt + pair_text(j, where, "chosen", false));
    out.target_ids = tok.encode(prompt + pair_text(j, where, "rejected", false));
    return out;
  }

  // One side's text as ids fitted to its length, special tokens included; false: skip the record.
  bool fit(const seq2seq_side& side, const json& j, const std::string& where, std::vector<std::int32_t>& out,
           std::int64_t& cut) const {
    auto ids = tok.encode(side.tmpl->render_text(j, where));
    const auto room = static_cast<std::size_t>(side.len) - special;
    if (ids.size() > room) {
      if (over_long == "error")
        throw data_error(where + ": the " + side.name + " is " + std::to_string(ids.size() + special) +
                         " tokens, over " + side.len_option + " " + std::to_string(side.len) + "; raise " +
                         side.len_option + " or pass --over-long truncate or --over-long skip");
      if (over_long == "skip") return false;
      cut = static_cast<std::int64_t>(ids.size() - room);
      ids.resize(room);
    }
    out = tok.post_process(ids);
    return true;
  }

  encoded_record operator()(const raw_record& raw) const {
    encoded_record out;
    out.doc_end = raw.doc_end;
    if (kind == input_kind::text) {
      out.ids = tok.encode(raw.text);
      return out;
    }
    const std::string where = files[raw.file].path + ":" + std::to_string(raw.line);
    json j;
    try {
      j = json::parse(raw.text);
    } catch (const json::exception& e) {
      throw data_error(where + ": invalid JSON (" + std::string(e.what()) + ")");
    }
    if (kind == input_kind::jsonl && pairs) return encode_pair(j, where);
    if (source != nullptr) {
      out.skip = !fit(*source, j, where, out.ids, out.source_cut) ||
                 !fit(*target, j, where, out.target_ids, out.target_cut);
      return out;
    }
    if (tmpl != nullptr) {
      const auto r = tmpl->render(j, where);
      out.ids = tok.encode(r.prompt);
      out.prompt_tokens = out.ids.size();
      const auto completion = tok.encode(r.completion);
      out.ids.insert(out.ids.end(), completion.begin(), completion.end());
      return out;
    }
    if (!j.is_object()) throw data_error(where + ": expected a JSON object per line");
    const auto it = j.find(field);
    if (it == j.end()) throw data_error(where + ": missing field \"" + field + "\" given by --field");
    if (!it->is_string()) throw data_error(where + ": field \"" + field + "\" must be a string");
    out.ids = tok.encode(it->get_ref<const std::string&>());
    return out;
  }
};

// The reader -> workers -> in-order writer pipeline state, guarded by one mutex.
struct pipeline {
  std::mutex m;
  std::condition_variable cv;
  std::deque<raw_chunk> todo;
  std::map<std::uint64_t, encoded_chunk> done;
  std::uint64_t produced = 0;
  std::uint64_t consumed = 0;
  std::size_t max_in_flight = 8;
  bool reader_done = false;
  bool abort = false;
  std::exception_ptr reader_error;
};

void run_reader(pipeline& p, chunk_reader& reader) {
  try {
    for (;;) {
      raw_chunk chunk;
      if (!reader.next(chunk)) break;
      std::unique_lock<std::mutex> lock(p.m);
      p.cv.wait(lock, [&] { return p.abort || p.produced - p.consumed < p.max_in_flight; });
      if (p.abort) return;
      p.todo.push_back(std::move(chunk));
      ++p.produced;
      p.cv.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(p.m);
    p.reader_error = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(p.m);
  p.reader_done = true;
  p.cv.notify_all();
}

void run_worker(pipeline& p, const record_encoder& encode) {
  for (;;) {
    raw_chunk chunk;
    {
      std::unique_lock<std::mutex> lock(p.m);
      p.cv.wait(lock, [&] { return p.abort || !p.todo.empty() || p.reader_done; });
      if (p.abort || p.todo.empty()) return;
      chunk = std::move(p.todo.front());
      p.todo.pop_front();
    }
    encoded_chunk out;
    out.bytes = chunk.bytes;
    try {
      out.records.reserve(chunk.records.size());
      for (const auto& r : chunk.records) out.records.push_back(encode(r));
    } catch (...) {
      out.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(p.m);
    p.done.emplace(chunk.seq, std::move(out));
    p.cv.notify_all();
  }
}

struct checked_options {
  input_kind kind;
  sample_kind samples;
  sample_layout layout;
};

// Samples of `samples` kind made from jsonl records, unpacked; plain-text input is refused with
// `what` (which options need jsonl).
checked_options jsonl_records(const build_options& o, sample_kind samples, const std::string& what) {
  checked_options c;
  c.kind = input_kind_of(o.input, input_kind::jsonl);
  if (c.kind != input_kind::jsonl) throw data_error("--input " + o.input + " is plain text: " + what);
  c.samples = samples;
  c.layout = sample_layout::pad;
  return c;
}

// --pairs: jsonl records, one sample per side, no template or field.
checked_options check_pairs(const build_options& o) {
  if (!o.template_text.empty() || !o.field.empty())
    throw data_error(
        "--pairs reads each record's \"chosen\" and \"rejected\" (and \"prompt\"); it excludes "
        "--template and --field");
  if (o.layout == "pack") throw data_error("--pack does not apply to --pairs: each text is one sample");
  if (o.seq_len < 2) throw data_error("--seq-len must be >= 2, got " + std::to_string(o.seq_len));
  return jsonl_records(o, sample_kind::pairs, "--pairs reads .jsonl input only");
}

checked_options check(const build_options& o) {
  if (o.input.empty()) throw data_error("--input is required");
  if (o.out_dir.empty()) throw data_error("--out is required");
  std::error_code ec;
  if (!std::filesystem::exists(o.input, ec)) throw data_error("--input " + o.input + ": no such file or directory");
  if (o.shard_tokens < 1) throw data_error("shard_tokens must be >= 1");
  checked_options c;
  if (!o.template_source.empty() || !o.template_target.empty()) {
    if (o.template_source.empty() || o.template_target.empty())
      throw data_error("seq2seq data needs both --template-source and --template-target");
    if (!o.template_text.empty() || !o.field.empty())
      throw data_error("--template-source/--template-target (seq2seq) exclude --template and --field");
    if (o.seq_len < 1) throw data_error("--source-len must be >= 1, got " + std::to_string(o.seq_len));
    if (o.target_len < 1) throw data_error("--target-len must be >= 1, got " + std::to_string(o.target_len));
    if (o.over_long != "truncate" && o.over_long != "skip" && o.over_long != "error")
      throw data_error("--over-long \"" + o.over_long + "\" is not one of truncate, skip, error");
    if (o.layout == "pack") throw data_error("--pack does not apply to seq2seq data: each record is one sample");
    return jsonl_records(o, sample_kind::seq2seq, "seq2seq templates apply to .jsonl input only");
  }
  if (o.target_len != 0) throw data_error("--target-len applies to seq2seq data (--template-source/--template-target)");
  if (o.pairs) return check_pairs(o);
  if (o.seq_len < 2) throw data_error("--seq-len must be >= 2, got " + std::to_string(o.seq_len));
  if (!o.template_text.empty() && !o.field.empty())
    throw data_error("--template and --field exclude each other: --template builds SFT samples from jsonl, "
                     "--field pretraining text from a jsonl field");
  if (o.layout != "" && o.layout != "pack" && o.layout != "pad")
    throw data_error("layout \"" + o.layout + "\" is not one of pack, pad");
  const bool wants_jsonl = !o.template_text.empty() || !o.field.empty();
  c.kind = input_kind_of(o.input, wants_jsonl ? input_kind::jsonl : input_kind::text);
  if (c.kind == input_kind::jsonl && !wants_jsonl)
    throw data_error("--input " + o.input + " is jsonl: give --field NAME (pretraining text) or --template T (SFT)");
  if (c.kind == input_kind::text && wants_jsonl)
    throw data_error("--input " + o.input + " is plain text: --template and --field apply to .jsonl input only");
  c.samples = o.template_text.empty() ? sample_kind::pretrain : sample_kind::sft;
  if (o.layout.empty()) {
    c.layout = c.samples == sample_kind::pretrain ? sample_layout::pack : sample_layout::pad;
  } else {
    c.layout = o.layout == "pack" ? sample_layout::pack : sample_layout::pad;
  }
  return c;
}

const char* kind_name(sample_kind k) {
  switch (k) {
    case sample_kind::pretrain:
      return "pretrain";
    case sample_kind::sft:
      return "sft";
    case sample_kind::seq2seq:
      return "seq2seq";
    case sample_kind::pairs:
      return "pairs";
  }
  return "?";
}

}  // namespace

build_report build_dataset(const build_options& options, tokenizer::tokenizer& tok) {
  const auto start = std::chrono::steady_clock::now();
  const checked_options c = check(options);
  std::unique_ptr<sft_template> tmpl;
  if (c.samples == sample_kind::sft) tmpl = std::make_unique<sft_template>(options.template_text);
  manifest m;
  if (!options.special_tokens_file.empty()) {
    m.special_tokens = read_special_tokens_file(options.special_tokens_file, "--special-tokens");
    for (const auto id : tok.add_special_tokens(m.special_tokens)) m.special_token_ids.push_back(id);
  }
  const auto eos = tok.eos_id();
  if (!eos) throw data_error("tokenizer " + options.tokenizer_path + " has no EOS token; documents cannot be delimited");
  const auto bos = tok.bos_id();
  const auto files = list_inputs(options.input, c.kind);
  std::uint64_t total_bytes = 0;
  for (const auto& f : files) total_bytes += f.bytes;

  seq2seq_side source, target;
  std::size_t special = 0;
  if (c.samples == sample_kind::seq2seq) {
    source = {std::make_unique<sft_template>(options.template_source, "--template-source"), options.seq_len,
              "--source-len", "source"};
    target = {std::make_unique<sft_template>(options.template_target, "--template-target"), options.target_len,
              "--target-len", "target"};
    special = tok.post_process({}).size();
    for (const auto* side : {&source, &target})
      if (side->len <= static_cast<std::int64_t>(special))
        throw data_error(std::string(side->len_option) + " " + std::to_string(side->len) +
                         " leaves no room for text: the tokenizer's post-processor adds " + std::to_string(special) +
                         " special tokens");
    seq2seq_info info;
    info.target_len = options.target_len;
    info.target_template = options.template_target;
    info.over_long = options.over_long;
    m.seq2seq = info;
  }
  m.kind = kind_name(c.samples);
  m.layout = c.layout == sample_layout::pack ? "pack" : "pad";
  m.tokenizer_identity = tok.identity();
  m.tokenizer_path = options.tokenizer_path;
  m.seq_len = options.seq_len;
  m.eos_id = *eos;
  // GPT-2 style tokenizers (BOS == EOS) get no BOS; seq2seq texts get what the post-processor adds.
  if (bos && *bos != *eos && c.samples != sample_kind::seq2seq) m.bos_id = *bos;
  m.pad_id = tok.pad_id().value_or(*eos);
  m.source_input = options.input;
  m.source_template = c.samples == sample_kind::seq2seq ? options.template_source : options.template_text;
  m.source_field = options.field;

  prepare_output_dir(options.out_dir);
  shard_writer_options wo;
  wo.vocab_size = tok.vocab_size();
  wo.token_bytes = token_bytes_for_vocab(wo.vocab_size);
  wo.loss_mask = c.samples == sample_kind::sft;
  wo.target = c.samples == sample_kind::seq2seq;
  wo.shard_tokens = options.shard_tokens;
  shard_writer writer(options.out_dir, wo);
  packer_config pc;
  pc.kind = c.samples;
  pc.layout = c.layout;
  pc.seq_len = options.seq_len;
  if (m.bos_id) pc.bos_id = static_cast<std::int32_t>(*m.bos_id);
  pc.eos_id = *eos;
  sample_packer packer(writer, pc);

  chunk_reader reader(files, c.kind, options.chunk_bytes);
  const bool pairs = c.samples == sample_kind::seq2seq;
  const record_encoder encode{tok,
                              c.kind,
                              options.field,
                              tmpl.get(),
                              files,
                              pairs ? &source : nullptr,
                              pairs ? &target : nullptr,
                              options.over_long,
                              special,
                              c.samples == sample_kind::pairs};
  const int threads = options.threads > 0 ? options.threads
                                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  pipeline p;
  p.max_in_flight = static_cast<std::size_t>(2 * threads + 2);
  std::vector<std::thread> pool;
  pool.emplace_back(run_reader, std::ref(p), std::ref(reader));
  for (int i = 0; i < threads; ++i) pool.emplace_back(run_worker, std::ref(p), std::cref(encode));
  const auto stop = [&] {
    {
      std::lock_guard<std::mutex> lock(p.m);
      p.abort = true;
      p.cv.notify_all();
    }
    for (auto& t : pool) t.join();
    pool.clear();
  };

  progress_bar bar(total_bytes, options.progress);
  std::uint64_t bytes_done = 0;
  try {
    for (std::uint64_t seq = 0;; ++seq) {
      encoded_chunk chunk;
      {
        std::unique_lock<std::mutex> lock(p.m);
        p.cv.wait(lock, [&] { return p.done.count(seq) > 0 || (p.reader_done && seq >= p.produced); });
        auto it = p.done.find(seq);
        if (it == p.done.end()) {
          if (p.reader_error) std::rethrow_exception(p.reader_error);
          break;
        }
        chunk = std::move(it->second);
        p.done.erase(it);
        ++p.consumed;
        p.cv.notify_all();
      }
      if (chunk.error) std::rethrow_exception(chunk.error);
      for (const auto& r : chunk.records) packer.add(r);
      bytes_done += chunk.bytes;
      bar.update(bytes_done, writer.tokens());
    }
    stop();
    packer.finish();
  } catch (...) {
    stop();
    throw;
  }
  bar.finish(bytes_done, writer.tokens());

  m.records = packer.records();
  m.truncated_samples = packer.truncated_samples();
  m.truncated_tokens = packer.truncated_tokens();
  if (m.seq2seq) {
    m.seq2seq->truncated_samples = packer.truncated_target_samples();
    m.seq2seq->truncated_tokens = packer.truncated_target_tokens();
    m.seq2seq->skipped_samples = packer.skipped_samples();
  }
  build_report report;
  report.result = writer.finish(m);
  report.input_bytes = total_bytes;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace cohort::core::data
