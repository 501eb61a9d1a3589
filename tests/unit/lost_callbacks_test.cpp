// Specification: when many leases are lost together, every lost() fires by its valid_until(),
// however long their on_lost() callbacks take (fencelock/lease.h): the callbacks run after the
// whole batch has been signalled. Client on memory:// (in process, no I/O); renewals are stopped
// with the Renewer's test hook, as if every server stopped answering at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "core/client_core.h"
#include "fencelock/client.h"

namespace fencelock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Before: on_lost() callbacks ran inside each lease's signal, so 20,000 callbacks of 10 us each
// made the later leases' lost() fire up to 0.37 s after their validity.
TEST(LostCallbacks, SlowCallbacksNeverDelayTheSignalsOfLeasesLostWithThem) {
#if FENCELOCK_TEST_INSTRUMENTED
  constexpr int kLeases = 4'000;  // ASan or TSan: firing costs several times more
#else
  constexpr int kLeases = 20'000;
#endif
  auto client = Client::connect("memory://lost-callbacks-test");
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  std::vector<Lease> leases;
  leases.reserve(kLeases);
  for (int i = 0; i < kLeases; ++i) {
    auto lease = client->acquire(*LockKey::make("cb/" + std::to_string(i)), {.ttl = 3s});
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    leases.push_back(std::move(*lease));
  }
  // Once renewed together (in step), renewals stop: they come due together.
  auto& renewer = detail::ClientAccess::core(*client).renewer();
  const auto renewed_by = Clock::now() + 10s;
  while (renewer.rounds() == 0 && Clock::now() < renewed_by) std::this_thread::sleep_for(10ms);
  ASSERT_GT(renewer.rounds(), 0u) << "never renewed";
  renewer.pause_renewals_for_testing(true);

  std::atomic<int> signalled{0};
  std::atomic<int> late{0};
  std::atomic<int> callbacks{0};
  std::vector<std::unique_ptr<std::stop_callback<std::function<void()>>>> probes;
  probes.reserve(kLeases);
  for (Lease& lease : leases) {
    // The signal itself, recorded as it fires (a flag-setting stop callback, as lease.h asks).
    probes.push_back(std::make_unique<std::stop_callback<std::function<void()>>>(
        lease.lost(), std::function<void()>([&, state = &lease] {
          // Read as it fires: a renewal round in flight when renewals stopped may still have
          // moved the validity.
          if (Clock::now() > state->valid_until()) late.fetch_add(1);
          signalled.fetch_add(1);
        })));
    lease.on_lost([&] {  // 10 us of work
      const auto busy_until = Clock::now() + 10us;
      while (Clock::now() < busy_until) {
      }
      callbacks.fetch_add(1);
    });
  }
  const auto bound = Clock::now() + 30s;
  while (callbacks.load() < kLeases && Clock::now() < bound) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(callbacks.load(), kLeases) << "some on_lost() callbacks never ran";
  EXPECT_EQ(signalled.load(), kLeases);
  EXPECT_EQ(late.load(), 0) << "lost() fired after valid_until()";
  probes.clear();
}

}  // namespace
}  // namespace fencelock
