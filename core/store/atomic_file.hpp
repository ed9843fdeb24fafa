// Crash-safe file primitives of the cluster store: whole-file replacement (temp file in the same
// directory, fsync, rename, fsync directory), reads that tell "missing" from "corrupt", and an
// exclusive create that is atomic on local disks and on NFS. Stateless; safe from any thread.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace cohort::core::store {

namespace fs = std::filesystem;

// A fresh, unique temp name next to `target` (".<name>.tmp.<pid>.<random>"). A crash can leave
// such files behind; every listing of the store skips names starting with '.'.
fs::path temp_path_for(const fs::path& target);

// Store files are their owner's alone (0600, in 0700 directories): job specs, logs and the
// leader record may hold what other users of a shared disk must not read.
inline constexpr unsigned store_file_mode = 0600;
inline constexpr unsigned store_dir_mode = 0700;

// Replaces `path` with `content` so that a reader (or a restart after a crash, power loss
// included) sees either the old file or the new one, never a mix. Throws store_error(io).
void write_file_atomic(const fs::path& path, std::string_view content,
                       unsigned mode = store_file_mode);
void write_json_atomic(const fs::path& path, const nlohmann::json& value,
                       unsigned mode = store_file_mode);

// The file's bytes, or nullopt when it does not exist. Throws store_error(io) on other errors.
std::optional<std::string> read_file(const fs::path& path);
// The parsed file, or nullopt when it does not exist. A file that is not valid JSON throws
// store_error(corrupt) naming the path and the parse error.
std::optional<nlohmann::json> read_json(const fs::path& path);
// Parses `text` read from `path`; throws store_error(corrupt) naming the path on a parse error.
nlohmann::json parse_json(const fs::path& path, std::string_view text);

// Creates `path` holding `content` only if no file of that name exists; returns false if one does.
// The file appears complete (written to a temp file, fsynced, then link(2)ed into place); the
// winner is decided by the file system, also between hosts on NFS (see open(2), O_EXCL on NFS:
// link, then check the temp file's link count, which also covers a lost NFS reply to link).
bool create_exclusive(const fs::path& path, std::string_view content);

// Makes `dir` (and parents) exist, and fsyncs the parent so the new entry survives a crash.
void ensure_dir(const fs::path& dir);
// fsync(2) of a directory: makes renames and creations inside it durable.
void fsync_dir(const fs::path& dir);

}  // namespace cohort::core::store
