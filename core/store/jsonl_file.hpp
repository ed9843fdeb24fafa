// Append-only JSON-lines files of the store (a job's events and logs). One object per line; a
// crash can only tear the last line, which readers skip and the next append cuts off. Stateless;
// one writer per file at a time (the leader head), any number of readers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cohort::core::store {

// Appends each value as one line in a single write(2). With `sync`, fsyncs before returning.
// A torn last line left by an earlier crash is cut off first. Returns the file's size after.
std::uint64_t append_json_lines(const std::filesystem::path& path,
                                const std::vector<nlohmann::json>& values, bool sync);

// Every complete line, parsed; empty when the file does not exist. A torn last line (no
// newline) is skipped; a complete line that is not a JSON object throws store_error(corrupt)
// naming the path and the line number.
std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& path);

// The last complete line, parsed; nullopt when the file is missing or has none.
std::optional<nlohmann::json> last_json_line(const std::filesystem::path& path);

}  // namespace cohort::core::store
