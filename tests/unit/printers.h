// gtest printers for fencelock values, so that failed expectations name codes and tokens
// ("invalid argument", "token 7") instead of dumping their bytes. Test-only.
#pragma once

#include <ostream>

#include "core/uri.h"
#include "fencelock/status.h"
#include "fencelock/types.h"

namespace fencelock {

inline void PrintTo(Code code, std::ostream* os) { *os << code_name(code); }
inline void PrintTo(const Status& status, std::ostream* os) { *os << status.to_string(); }
inline void PrintTo(FencingToken token, std::ostream* os) { *os << "token " << token.value(); }

namespace detail {
inline void PrintTo(const Endpoint& ep, std::ostream* os) { *os << ep.host << " port " << ep.port; }
}  // namespace detail

}  // namespace fencelock
