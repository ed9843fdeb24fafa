// Streams builder input in bounded chunks: text files as newline-aligned pieces (a whole file is
// one document), jsonl files as lines. Runs on the builder's reader thread; holds one chunk at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace cohort::core::data {

enum class input_kind { text, jsonl };

struct input_file {
  std::string path;
  std::uint64_t bytes = 0;
};

// A file is used as it is; a directory is walked recursively in sorted path order for *.txt
// (kind text) or *.jsonl / *.json (kind jsonl). Throws data_error when nothing is found.
std::vector<input_file> list_inputs(const std::string& path, input_kind kind);
// text for .txt and other files, jsonl for .jsonl/.json files; for a directory, `fallback`.
input_kind input_kind_of(const std::string& path, input_kind fallback);

struct raw_record {
  std::string text;         // a piece of a text file, or one jsonl line
  std::uint32_t file = 0;   // index into the input list
  std::int64_t line = 0;    // jsonl: 1-based line number
  bool doc_end = false;     // text: last piece of its file; jsonl: always
};

struct raw_chunk {
  std::uint64_t seq = 0;
  std::vector<raw_record> records;
  std::uint64_t bytes = 0;  // input bytes consumed by this chunk
};

class chunk_reader {
 public:
  chunk_reader(std::vector<input_file> files, input_kind kind, std::size_t chunk_bytes);
  // Fills the next chunk; returns false at the end of the input.
  bool next(raw_chunk& out);

 private:
  bool open_next_file();
  bool read_text(raw_chunk& out);
  bool read_jsonl(raw_chunk& out);

  std::vector<input_file> files_;
  input_kind kind_;
  std::size_t chunk_bytes_;
  std::size_t file_index_ = 0;
  bool file_open_ = false;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, &std::fclose};
  std::string carry_;  // bytes read but not yet emitted
  bool eof_ = false;
  std::int64_t line_ = 0;
  std::uint64_t seq_ = 0;
};

}  // namespace cohort::core::data
