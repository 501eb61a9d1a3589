// ClientCore with a fake backend: what it does with a grant, whatever the backend did to get it.
#include "core/client_core.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "stub_backend.h"

namespace fencelock::detail {
namespace {

using namespace std::chrono_literals;

// Grants every try with a validity that `valid_for` says (negative: already over when handed
// back, as after a slow try or a long batch), and records the releases.
class GrantingBackend final : public testing::StubBackend {
 public:
  explicit GrantingBackend(milliseconds valid_for) : valid_for_(valid_for) {}
  TryResult try_acquire(const GrantRequest&, Clock::time_point) override {
    return TryResult{Status::Ok(), Grant{FencingToken(7), Clock::now() + valid_for_, "value-1"},
                     0ms};
  }
  Status release_grant(const LockKey& key, const OwnerId&, const std::string& backend_key,
                       milliseconds, Clock::time_point) override {
    MutexLock lock(mu_);
    released_.push_back(key.str() + "/" + backend_key);
    return Status::Ok();
  }
  std::vector<std::string> released() const {
    MutexLock lock(mu_);
    return released_;
  }

 private:
  const milliseconds valid_for_;
  mutable Mutex mu_;
  std::vector<std::string> released_ FENCELOCK_GUARDED_BY(mu_);
};

// A grant whose validity is over by the time it is handed back is never a lease (its lost()
// could not come before its validity ended): the acquisition fails and the grant is released.
// Seen in review: 20 ms leases handed back after a batch of tries, already expired.
TEST(ClientCore, AGrantHandedBackAfterItsValidityIsReleasedAndTheAcquisitionFails) {
  auto backend = std::make_unique<GrantingBackend>(-5ms);
  GrantingBackend& fake = *backend;
  auto core = std::make_shared<ClientCore>(std::move(backend), ClientOptions{});
  auto lease = core->acquire(*LockKey::make("late"), AcquireOptions{.ttl = 1s});
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.code(), Code::kDeadlineExceeded) << lease.status().to_string();
  EXPECT_NE(lease.status().message().find("longer than the lease's validity"), std::string::npos)
      << lease.status().message();
  EXPECT_EQ(fake.released(), std::vector<std::string>{"late/value-1"});
}

TEST(ClientCore, AGrantStillValidWhenHandedBackIsALease) {
  auto backend = std::make_unique<GrantingBackend>(1000ms);
  GrantingBackend& fake = *backend;
  auto core = std::make_shared<ClientCore>(std::move(backend), ClientOptions{});
  auto lease = core->acquire(*LockKey::make("timely"), AcquireOptions{.ttl = 1s, .renew = false});
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_EQ((*lease)->token.value(), 7u);
  EXPECT_TRUE(fake.released().empty());
  // As Lease does when it goes: the renewer lets go of the state (else its watchdog would hold
  // the state, and with it the core, past this test, and drop the core on its own thread).
  core->renewer().remove(lease->get());
}

}  // namespace
}  // namespace fencelock::detail
