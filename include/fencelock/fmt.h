// fencelock/fmt.h: {fmt} formatters for fencelock's value types, for programs that use {fmt}
// (fencelock's own headers do not include it). FencingToken formats as its decimal value and
// takes the integer format specs ("{}", "{:>8}", "{:x}"); Status as Status::to_string().
//
//   #include <fencelock/fmt.h>
//   fmt::print("granted token {}: {}\n", lease->token(), status);
#pragma once

#include <cstdint>

#include <fmt/format.h>

#include "fencelock/status.h"
#include "fencelock/types.h"

template <>
struct fmt::formatter<fencelock::FencingToken> : fmt::formatter<std::uint64_t> {
  template <class Context>
  auto format(fencelock::FencingToken token, Context& context) const {
    return fmt::formatter<std::uint64_t>::format(token.value(), context);
  }
};

template <>
struct fmt::formatter<fencelock::Status> : fmt::formatter<fmt::string_view> {
  template <class Context>
  auto format(const fencelock::Status& status, Context& context) const {
    return fmt::formatter<fmt::string_view>::format(status.to_string(), context);
  }
};
