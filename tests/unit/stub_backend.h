// StubBackend: a Backend whose every call answers "not in this fake" (or nothing to do), for unit
// tests whose fakes override only the calls they are about.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend.h"

namespace fencelock::detail::testing {

class StubBackend : public Backend {
 public:
  static Status not_in_this_fake() { return Status(Code::kInternal, "not in this fake"); }

  milliseconds min_ttl() const override { return milliseconds(1); }
  TryResult try_acquire(const GrantRequest&, Clock::time_point) override {
    return TryResult{not_in_this_fake(), std::nullopt, milliseconds(0)};
  }
  std::vector<RenewOutcome> renew_all(std::span<const RenewItem> items,
                                      Clock::time_point) override {
    return std::vector<RenewOutcome>(items.size());
  }
  Status release(const LockKey&, const OwnerId&, Clock::time_point) override {
    return Status::Ok();
  }
  Result<std::optional<HolderRow>> inspect(const LockKey&, Clock::time_point) override {
    return not_in_this_fake();
  }
  Result<std::vector<HolderRow>> list(std::string_view, const ListBounds&) override {
    return not_in_this_fake();
  }
  std::string describe() const override { return "fake://"; }
};

}  // namespace fencelock::detail::testing
