#include "fencelock/election.h"

#include "core/client_core.h"

namespace fencelock {

Result<Election> Election::make(const Client& client, std::string_view name) {
  auto key = LockKey::make(name);
  if (!key.ok()) return Status(Code::kInvalidArgument, "election name: " + key.status().message());
  Client copy = client;
  if (detail::ClientAccess::core(copy).backend().elections() == nullptr) {
    return Status(Code::kInvalidArgument,
                  "leader elections need an etcd:// backend; " + copy.describe() + " has none");
  }
  return Election(std::move(copy), std::move(*key));
}

Result<Leadership> Election::campaign(std::string_view value, const CampaignOptions& options) {
  AcquireOptions acquire{.ttl = options.ttl,
                         .wait = options.wait,
                         .renew = true,
                         .stop = options.stop,
                         .metadata = std::string(value)};
  auto state = detail::ClientAccess::core(client_).acquire(name_, acquire, /*campaign=*/true);
  if (!state.ok()) return state.status();
  return Leadership(client_, name_.str(), Lease(std::move(*state)));
}

Result<std::optional<LeaderInfo>> Election::leader() {
  detail::ClientCore& core = detail::ClientAccess::core(client_);
  return core.backend().elections()->leader(name_,
                                            detail::request_deadline(core.options().io_timeout));
}

Status Election::observe(const std::function<void(const std::optional<LeaderInfo>&)>& on_change,
                         std::stop_token stop) {
  return detail::ClientAccess::core(client_).backend().elections()->observe(name_, on_change, stop);
}

Status Leadership::proclaim(std::string_view value) {
  if (lease_.is_lost()) return Status(Code::kLocked, "not the leader any more (leadership lost)");
  detail::ClientCore& core = detail::ClientAccess::core(client_);
  const auto deadline = detail::Clock::now() + core.options().io_timeout * 3;
  return core.backend().elections()->proclaim(lease_.key(), lease_.owner(), value, deadline);
}

}  // namespace fencelock
