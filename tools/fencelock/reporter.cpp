#include "reporter.h"

#include <cstdio>

#include <fmt/format.h>

#include "terminal_text.h"

namespace fencelock::cli {
namespace {

// Library messages are one line by contract; this keeps the CLI's "one line per problem" promise
// even if one is not.
std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

void write_stderr_line(std::string_view line) {
  std::fputs(fmt::format("{}\n", line).c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace

namespace {

// The length of the valid UTF-8 sequence at text[i] (1-4), or 0 when the byte there does not
// start one (overlong forms, surrogates and code points above U+10FFFF are not valid).
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

// A JSON string literal for `text`, lossless for any bytes: valid UTF-8 is written as it is
// (control characters escaped), and each byte that is not part of valid UTF-8 as \udcXX, the
// lone low surrogate that Python's surrogateescape error handler maps back to byte 0xXX.
void append_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = utf8_sequence(text, i);
    if (n == 0) {
      out += fmt::format("\\udc{:02x}", c);
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(text, i, n);
      i += n;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

void append_json(std::string& out, const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ',';
        first = false;
        append_string(out, key);
        out += ':';
        append_json(out, item);
      }
      out += '}';
      break;
    }
    case nlohmann::json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ',';
        first = false;
        append_json(out, item);
      }
      out += ']';
      break;
    }
    case nlohmann::json::value_t::string:
      append_string(out, value.get_ref<const std::string&>());
      break;
    default:
      out += value.dump();
  }
}

}  // namespace

std::string json_line(const nlohmann::json& value) {
  std::string out;
  append_json(out, value);
  return out;
}

int Reporter::fail(int exit_code, std::string_view error_name, std::string_view message,
                   nlohmann::json fields) const {
  if (json_) {
    fields["error"] = std::string(error_name);
    fields["message"] = one_line(message);
    fields["exit_code"] = exit_code;
    write_stderr_line(json_line(fields));
  } else {
    write_stderr_line("fencelock: " + terminal_safe(message));
  }
  return exit_code;
}

void Reporter::note(std::string_view message) const {
  if (!json_) write_stderr_line("fencelock: " + terminal_safe(message));
}

}  // namespace fencelock::cli
