// What both store backends (directory_store, etcd_store) do to the records they are given: a
// record must be a JSON object, and a log line is cut to its cap without splitting a character.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace cohort::core::store {

// Throws store_error (invalid) naming `what` when `value` is not a JSON object.
void require_object(const char* what, const nlohmann::json& value);

// Cuts `text` to at most `cap` bytes without splitting a UTF-8 sequence.
void cut_utf8(std::string& text, std::size_t cap);

}  // namespace cohort::core::store
