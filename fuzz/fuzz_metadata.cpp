// Holder metadata: the caller's text checked by the one rule (core/holder_metadata.h), the value
// etcd stores and reads back (etcd/etcd_keys.h: encode_value, decode_value on any bytes a server
// holds), and `fencelock status` / `list` rendering whatever a server returned
// (tools/fencelock/holder_format.h).
// Properties: no crash (deep nesting included: corpus/fuzz_metadata/deep_nesting overflowed the
// stack before) and no exception; accepted metadata is a JSON object nested at most
// kMaxMetadataNesting deep that survives encode_value/decode_value; human output holds no terminal
// control byte but its newlines.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/holder_metadata.h"
#include "etcd/etcd_keys.h"
#include "fuzz_check.h"
#include "holder_format.h"

namespace {

using nlohmann::json;

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_utf8(const std::string& text) {
  try {
    (void)json(text).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// No C0 control but '\n', no DEL: what terminal_safe() promises for the bytes it escapes.
void check_terminal_safe(const std::string& out) {
  FUZZ_CHECK(!out.empty() && out.back() == '\n');
  for (char c : out) {
    const auto u = static_cast<unsigned char>(c);
    FUZZ_CHECK(c == '\n' || (u >= 0x20 && u != 0x7f));
  }
}

void check_etcd_value(const std::string& metadata) {
  using namespace fencelock::detail::etcd;
  const std::string stored = encode_value("1a2b3c4d", metadata);
  const DecodedValue back = decode_value(stored);
  FUZZ_CHECK(back.owner_prefix == "1a2b3c4d");
  const json parsed =
      fencelock::detail::json_nesting_within(metadata, fencelock::detail::kMaxMetadataNesting)
          ? json::parse(metadata, nullptr, /*allow_exceptions=*/false)
          : json(json::value_t::discarded);
  if (!parsed.is_discarded() && !parsed.is_string()) {
    FUZZ_CHECK(back.metadata == dump(parsed));
  } else if (parsed.is_discarded() && is_utf8(metadata)) {
    FUZZ_CHECK(back.metadata == metadata);
  }
  (void)decode_value(metadata);  // a value written by another client: any bytes
}

void check_rendering(const std::string& text) {
  auto key = fencelock::LockKey::make(text);
  if (!key.ok()) key = fencelock::LockKey::make("k");
  fencelock::HolderInfo holder{*key, text.substr(0, 8), std::nullopt,
                               std::chrono::milliseconds(static_cast<long long>(text.size())),
                               text};
  if (!text.empty()) holder.token = fencelock::FencingToken(text.size());
  check_terminal_safe(fencelock::cli::status_text(text, holder));
  check_terminal_safe(fencelock::cli::status_text(text, std::nullopt));
  check_terminal_safe(fencelock::cli::list_table({holder, holder}));
  (void)dump(fencelock::cli::status_json(text, holder));
  (void)dump(fencelock::cli::holder_json(holder));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const fencelock::Status valid = fencelock::detail::validate_holder_metadata(text);
  if (valid.ok()) {
    const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    FUZZ_CHECK(!parsed.is_discarded() && parsed.is_object());
    FUZZ_CHECK(
        fencelock::detail::json_nesting_within(text, fencelock::detail::kMaxMetadataNesting));
  } else {
    FUZZ_CHECK(valid.code() == fencelock::Code::kInvalidArgument);
  }
  check_etcd_value(text);
  check_rendering(text);
  return 0;
}
