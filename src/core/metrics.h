// Metrics: the live counters behind Client::metrics() (fencelock/metrics.h), owned by ClientCore.
//
// Every record_* call is a handful of relaxed atomic increments: no lock, no allocation, so the
// acquire, release and renewal paths can record unconditionally. Relaxed order is enough because
// a snapshot promises no consistency across values (see fencelock/metrics.h).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "fencelock/metrics.h"
#include "fencelock/status.h"

namespace fencelock::detail {

// A Prometheus label value as the text exposition format requires: backslash, double quote and
// newline escaped (the Client's metrics and fencelock run's --metrics file).
std::string escape_label(std::string_view value);

// One latency histogram. Buckets are kept non-cumulative (one increment per observation) and
// summed up by snapshot(); the count is their total, so count == +Inf bucket in every snapshot.
class Histogram {
 public:
  void observe(std::chrono::steady_clock::duration elapsed) noexcept;
  LatencyHistogram snapshot() const noexcept;

  // Index of the first bucket whose bound is >= `elapsed`; kBounds.size() for the +Inf bucket.
  static std::size_t bucket_index(std::chrono::nanoseconds elapsed) noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, LatencyHistogram::kBounds.size() + 1> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

class Metrics {
 public:
  using Duration = std::chrono::steady_clock::duration;

  // One Client::acquire() call that ended with `code`; `waited`: AcquireOptions::wait > 0;
  // `contended`: it found the key held before it was granted.
  void record_acquire(Code code, bool waited, Duration elapsed, bool contended) noexcept;
  // One release sent to the servers.
  void record_release(Code code, Duration elapsed) noexcept;
  // One renewal round: its duration and, per lease in it, whether the renewal was confirmed.
  void record_renew_round(Duration elapsed, std::uint64_t renewed, std::uint64_t failed) noexcept;
  // One lease whose lost() fired for a reason other than its release.
  void record_loss() noexcept;

  MetricsSnapshot snapshot() const noexcept;

 private:
  static void add(std::atomic<std::uint64_t>& counter, std::uint64_t n = 1) noexcept {
    counter.fetch_add(n, std::memory_order_relaxed);
  }

  std::atomic<std::uint64_t> acquisitions_{0};
  std::array<std::atomic<std::uint64_t>, kCodeCount> acquire_results_{};  // by Code; kOk: grants
  std::atomic<std::uint64_t> timeouts_{0};
  std::atomic<std::uint64_t> contended_grants_{0};
  std::atomic<std::uint64_t> release_unavailable_{0};
  std::atomic<std::uint64_t> releases_{0};
  std::atomic<std::uint64_t> release_failures_{0};
  std::atomic<std::uint64_t> losses_{0};
  std::atomic<std::uint64_t> renewals_{0};
  std::atomic<std::uint64_t> renewal_failures_{0};
  Histogram acquire_latency_;
  Histogram wait_latency_;
  Histogram release_latency_;
  Histogram renew_latency_;
};

}  // namespace fencelock::detail
