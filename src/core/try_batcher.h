// TryBatcher: the tries of a Client's asynchronous acquisitions that come due together go to the
// backend as one call (BatchedTries::try_acquire_many; one by one for a backend without it): on
// Redis, one write per instance for all of them instead of one round trip each, one after another,
// on an engine thread. Under load the batches grow with the load (core/batcher.h: after 10,000
// releases at once, the 10,000 tries that follow go out in about twenty writes per instance).
// ReleaseBatcher does the same for Lease::release_async (BatchedReleases::release_many).
//
// Thread-safety: submit() may be called from any thread; batches run on the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/backend.h"
#include "core/batcher.h"
#include "core/engine.h"

namespace fencelock::detail {

// A GrantRequest whose parts it owns.
struct TryRequest {
  LockKey key;
  OwnerId owner;
  milliseconds ttl;
  std::string metadata;
  milliseconds queue_for;
  std::uint64_t ticket;
  milliseconds budget;  // the try's, from when it is sent (a batch takes the least of its tries')
};

class TryBatcher final : public Batcher<TryRequest, TryResult> {
 public:
  using Request = TryRequest;

  // REQUIRES: `backend` and the engine outlive every batch (the pending tries' callbacks keep
  // their Client alive).
  TryBatcher(Backend& backend, std::function<Engine&()> engine)
      : Batcher(std::move(engine)), backend_(backend) {}

 private:
  std::vector<TryResult> run(const std::vector<TryRequest>& batch) override;
  TryResult failed(const std::string& why) const override;

  Backend& backend_;
};

// ReleaseBatcher: the releases of a Client's leases released with Lease::release_async that
// come due together go to the backend as one call (BatchedReleases::release_many; one by one,
// each with its own budget, for a backend without it).
struct ReleaseItem {
  ReleaseRequest request;
  milliseconds budget;  // from when it is sent (a batch takes the least of its releases')
};

class ReleaseBatcher final : public Batcher<ReleaseItem, Status> {
 public:
  // REQUIRES: as TryBatcher's.
  ReleaseBatcher(Backend& backend, std::function<Engine&()> engine)
      : Batcher(std::move(engine)), backend_(backend) {}

 private:
  std::vector<Status> run(const std::vector<ReleaseItem>& batch) override;
  Status failed(const std::string& why) const override;

  Backend& backend_;
};

}  // namespace fencelock::detail
