#include "core/backend.h"

#include <fmt/format.h>

namespace fencelock::detail {

Status too_many_locks(std::size_t max_locks, std::string_view prefix) {
  return Status(
      Code::kInvalidArgument,
      fmt::format("more than {} locks match {}: narrow the prefix, or raise the bound "
                  "(ListOptions::max_locks, fencelock list --max-locks)",
                  max_locks,
                  prefix.empty() ? std::string("(every lock)")
                                 : fmt::format("the prefix '{}'", prefix.substr(0, 100))));
}

Status list_out_of_time(std::size_t pages, std::size_t found) {
  return Status(Code::kDeadlineExceeded,
                fmt::format("the listing did not finish in time ({} pages read, {} locks found "
                            "so far): a large key space, a slow server, or one whose listing "
                            "never ends; narrow the prefix or allow more time "
                            "(ListOptions::timeout, fencelock list --timeout)",
                            pages, found));
}

}  // namespace fencelock::detail
