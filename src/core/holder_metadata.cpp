#include "core/holder_metadata.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fencelock::detail {

bool json_nesting_within(std::string_view json_text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < json_text.size(); ++i) {
    const char c = json_text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

Status validate_holder_metadata(std::string_view metadata) {
  if (!json_nesting_within(metadata, kMaxMetadataNesting)) {
    return Status(Code::kInvalidArgument,
                  fmt::format("holder metadata nests deeper than {} levels", kMaxMetadataNesting));
  }
  auto parsed = nlohmann::json::parse(metadata, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Status(Code::kInvalidArgument,
                  "holder metadata must be a JSON object in UTF-8, e.g. {\"job\":\"nightly\"}");
  }
  return Status::Ok();
}

}  // namespace fencelock::detail
