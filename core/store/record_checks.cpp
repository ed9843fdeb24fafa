// Record checks both store backends share (record_checks.hpp).
#include "core/store/record_checks.hpp"

#include "core/store/store_error.hpp"

namespace cohort::core::store {

void require_object(const char* what, const nlohmann::json& value) {
  if (!value.is_object())
    throw store_error(store_error_kind::invalid, "",
                      std::string(what) + " must be a JSON object, got " + value.type_name());
}

void cut_utf8(std::string& text, std::size_t cap) {
  std::size_t cut = cap;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
}

}  // namespace cohort::core::store
