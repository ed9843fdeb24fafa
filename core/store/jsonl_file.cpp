// JSON-lines files (see jsonl_file.hpp).
#include "core/store/jsonl_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "core/store/atomic_file.hpp"
#include "core/store/posix_io.hpp"
#include "core/store/store_error.hpp"

namespace cohort::core::store {

namespace {

constexpr std::size_t scan_chunk = 4096;

// Offset just past the last '\n' at or before `end` (0 if none).
std::uint64_t end_of_last_line(int fd, std::uint64_t end, const std::filesystem::path& path) {
  while (end > 0) {
    std::uint64_t start = end > scan_chunk ? end - scan_chunk : 0;
    auto chunk = pread_some(fd, start, static_cast<std::size_t>(end - start), path);
    auto pos = chunk.rfind('\n');
    if (pos != std::string::npos) return start + pos + 1;
    end = start;
  }
  return 0;
}

nlohmann::json parse_line(const std::filesystem::path& path, const std::string& line,
                          const std::string& where) {
  auto value = nlohmann::json::parse(line, nullptr, false);
  if (value.is_discarded() || !value.is_object())
    throw store_error(store_error_kind::corrupt, path.string(),
                      path.string() + " " + where +
                          " is not a JSON object; the file was damaged or edited outside "
                          "cohort: repair or remove that line");
  return value;
}

}  // namespace

std::uint64_t append_json_lines(const std::filesystem::path& path,
                                const std::vector<nlohmann::json>& values, bool sync) {
  std::string text;
  for (const auto& v : values)
    text += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
  auto fd = open_or_throw(path, O_RDWR | O_APPEND | O_CREAT, store_file_mode);
  auto size = file_size(fd.get(), path);
  bool created = size == 0;
  if (size > 0 && pread_some(fd.get(), size - 1, 1, path) != "\n") {
    auto keep = end_of_last_line(fd.get(), size, path);
    if (::ftruncate(fd.get(), static_cast<off_t>(keep)) != 0)
      throw_errno("cannot cut the torn last line of", path);
  }
  write_all(fd.get(), text, path);
  auto after = file_size(fd.get(), path);
  if (sync) fsync_or_throw(fd.get(), path);
  fd.close_checked(path);
  if (sync && created) fsync_dir(path.parent_path());
  return after;
}

std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& path) {
  std::vector<nlohmann::json> out;
  auto text = read_file(path);
  if (!text) return out;
  std::size_t begin = 0, line_number = 0;
  for (;;) {
    auto end = text->find('\n', begin);
    if (end == std::string::npos) break;  // no newline: torn by a crash, skipped
    ++line_number;
    if (end > begin)
      out.push_back(parse_line(path, text->substr(begin, end - begin),
                               "line " + std::to_string(line_number)));
    begin = end + 1;
  }
  return out;
}

std::optional<nlohmann::json> last_json_line(const std::filesystem::path& path) {
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (raw < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_errno("cannot open", path);
  }
  unique_fd fd(raw);
  auto end = end_of_last_line(fd.get(), file_size(fd.get(), path), path);
  if (end == 0) return std::nullopt;
  auto start = end_of_last_line(fd.get(), end - 1, path);
  auto line = pread_some(fd.get(), start, static_cast<std::size_t>(end - 1 - start), path);
  if (line.empty()) return std::nullopt;
  return parse_line(path, line, "last line");
}

}  // namespace cohort::core::store
