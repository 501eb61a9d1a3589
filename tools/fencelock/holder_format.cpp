#include "holder_format.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "core/duration.h"
#include "core/holder_metadata.h"
#include "terminal_text.h"

namespace fencelock::cli {
namespace {

nlohmann::json parsed_metadata(const std::string& text) {
  if (text.empty()) return nullptr;
  // A server's text: nested deeper than metadata may be, it is shown as text (parsed, it would
  // be copied and dumped recursively; core/holder_metadata.h).
  if (!detail::json_nesting_within(text, detail::kMaxMetadataNesting)) return text;
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return text;
  return parsed;
}

std::string value_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// One metadata field as text, "-" when absent.
std::string metadata_field(const nlohmann::json& meta, const std::string& name) {
  if (!meta.is_object() || !meta.contains(name)) return "-";
  return value_text(meta.at(name));
}

std::string ttl_text(const HolderInfo& holder) {
  if (holder.session_bound) return "none: held while its session lives (PostgreSQL advisory lock)";
  return detail::format_duration(holder.ttl_remaining);
}

std::string token_text(const HolderInfo& holder) {
  return holder.token ? fmt::format("{}", holder.token->value()) : "unknown";
}

// "host=a pid=7 program=x": the metadata object flattened for a human.
std::string metadata_text(const nlohmann::json& meta) {
  if (meta.is_null()) return "-";
  if (!meta.is_object()) return value_text(meta);
  std::string out;
  for (const auto& item : meta.items()) {
    if (!out.empty()) out += ' ';
    out += item.key() + "=" + value_text(item.value());
  }
  return out.empty() ? "-" : out;
}

}  // namespace

nlohmann::json holder_json(const HolderInfo& holder) {
  nlohmann::json out = {{"key", holder.key.str()},
                        {"held", true},
                        {"owner", holder.owner_prefix},
                        {"token", nullptr},
                        {"ttl_ms", holder.ttl_remaining.count()},
                        {"holder", parsed_metadata(holder.metadata)}};
  if (holder.token) out["token"] = holder.token->value();
  if (holder.session_bound) {
    out["ttl_ms"] = nullptr;
    out["session_bound"] = true;
  }
  return out;
}

nlohmann::json status_json(const std::string& key, const std::optional<HolderInfo>& holder) {
  if (!holder) return {{"key", key}, {"held", false}};
  nlohmann::json out = holder_json(*holder);
  out["key"] = key;
  return out;
}

std::string status_text(const std::string& raw_key, const std::optional<HolderInfo>& holder) {
  const std::string key = terminal_safe(raw_key);
  if (!holder) return fmt::format("{}: free\n", key);
  return fmt::format(
      "{}: held\n"
      "  owner   {}\n"
      "  token   {}\n"
      "  ttl     {}\n"
      "  holder  {}\n",
      key, terminal_safe(holder->owner_prefix), token_text(*holder), ttl_text(*holder),
      terminal_safe(metadata_text(parsed_metadata(holder->metadata))));
}

std::string list_table(const std::vector<HolderInfo>& holders) {
  using Row = std::array<std::string, 6>;
  std::vector<Row> rows = {{"KEY", "OWNER", "TOKEN", "TTL", "HOST", "PID"}};
  for (const HolderInfo& h : holders) {
    nlohmann::json meta = parsed_metadata(h.metadata);
    rows.push_back({terminal_safe(h.key.str()), terminal_safe(h.owner_prefix), token_text(h),
                    h.session_bound ? std::string("session") : ttl_text(h),
                    terminal_safe(metadata_field(meta, "host")),
                    terminal_safe(metadata_field(meta, "pid"))});
  }
  std::array<std::size_t, 6> width{};
  for (const Row& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const Row& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += i + 1 < row.size() ? fmt::format("{:<{}}  ", row[i], width[i]) : row[i];
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace fencelock::cli
