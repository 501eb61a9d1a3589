#include "core/try_batcher.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/wait_loop.h"

namespace fencelock::detail {

std::vector<TryResult> TryBatcher::run(const std::vector<TryRequest>& batch) {
  std::vector<GrantRequest> requests;
  requests.reserve(batch.size());
  milliseconds budget = milliseconds::max();
  for (const TryRequest& r : batch) {
    budget = std::min(budget, r.budget);
    requests.push_back(GrantRequest{r.key, r.owner, r.ttl, r.metadata, r.queue_for, r.ticket});
  }
  BatchedTries* batched = backend_.batched_tries();
  return batched != nullptr ? batched->try_acquire_many(requests, budget)
                            : try_one_by_one(backend_, requests, budget);
}

TryResult TryBatcher::failed(const std::string& why) const {
  return TryResult{Status(Code::kInternal, why), std::nullopt, milliseconds(0)};
}

std::vector<Status> ReleaseBatcher::run(const std::vector<ReleaseItem>& batch) {
  std::vector<Status> out;
  out.reserve(batch.size());
  BatchedReleases* batched = backend_.batched_releases();
  if (batched == nullptr || batch.size() == 1) {
    for (const ReleaseItem& item : batch) {
      const ReleaseRequest& r = item.request;
      out.push_back(backend_.release_grant(r.key, r.owner, r.backend_key, r.ttl,
                                           deadline_after(Clock::now(), item.budget)));
    }
    return out;
  }
  std::vector<ReleaseRequest> requests;
  requests.reserve(batch.size());
  milliseconds budget = milliseconds::max();
  for (const ReleaseItem& item : batch) {
    budget = std::min(budget, item.budget);
    requests.push_back(item.request);
  }
  return batched->release_many(requests, budget);
}

Status ReleaseBatcher::failed(const std::string& why) const { return Status(Code::kInternal, why); }

}  // namespace fencelock::detail
