// Holder metadata (AcquireOptions::metadata) and the JSON that carries it, on every backend and in
// the CLI (pure: no I/O).
//
// nlohmann::json parses iteratively but copies and serializes recursively, one stack frame per
// level of nesting: a 40 KB value of nested arrays overflows the stack (fuzz/fuzz_metadata.cpp
// found it). Metadata is a caller's or a server's text, so its nesting is bounded before it is
// parsed: the one rule refuses deeper metadata, and readers of stored values take a deeper one
// as text that is not JSON.
#pragma once

#include <cstddef>
#include <string_view>

#include "fencelock/status.h"

namespace fencelock::detail {

// The deepest nesting of arrays and objects holder metadata may have ({"a":1} is 1).
inline constexpr std::size_t kMaxMetadataNesting = 32;

// True when the arrays and objects of `json_text` nest at most `max_depth` deep (brackets inside
// strings do not count). Any text is accepted; JSON that does not parse is the parser's to refuse.
bool json_nesting_within(std::string_view json_text, std::size_t max_depth);

// OK when `metadata` is a JSON object in UTF-8 nested at most kMaxMetadataNesting deep;
// kInvalidArgument otherwise. (An empty text is the caller's: it means "the process's default
// metadata".)
Status validate_holder_metadata(std::string_view metadata);

}  // namespace fencelock::detail
