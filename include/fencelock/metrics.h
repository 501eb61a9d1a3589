// fencelock/metrics.h: what one Client has done, as counters and latency histograms.
//
//   auto client = fencelock::Client::connect("redis://127.0.0.1:6379");
//   ...
//   std::string text = fencelock::to_prometheus(client->metrics(), client->describe());
//
// Every Client (with all its copies and Leases) counts its acquisitions, releases, renewals and
// losses from the moment it connects; counters only grow and are never reset. Client::metrics()
// returns a MetricsSnapshot: a plain value copied out of the live counters. to_prometheus() turns
// a snapshot into the Prometheus text exposition format (version 0.0.4), ready for a scrape
// endpoint or node_exporter's textfile collector. docs/OBSERVABILITY.md lists every metric.
//
// Recording costs a few relaxed atomic increments per operation: no lock, no allocation.
//
// Thread-safety: Client::metrics() may be called from any thread at any time. Each value in a
// snapshot is read atomically, but a snapshot taken while operations run is not one instant
// across values (a grant may be counted in grants but not yet in the acquire histogram). Within
// one histogram, `count` always equals the +Inf bucket. MetricsSnapshot is a plain value.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fencelock/status.h"

namespace fencelock {

// Latency distribution over fixed log-scale buckets (1-2.5-5 steps from 100 us to 60 s), the
// same for every histogram so that they can be compared and aggregated across processes.
struct LatencyHistogram {
  static constexpr std::array<std::chrono::microseconds, 18> kBounds = {
      std::chrono::microseconds(100),        std::chrono::microseconds(250),
      std::chrono::microseconds(500),        std::chrono::microseconds(1'000),
      std::chrono::microseconds(2'500),      std::chrono::microseconds(5'000),
      std::chrono::microseconds(10'000),     std::chrono::microseconds(25'000),
      std::chrono::microseconds(50'000),     std::chrono::microseconds(100'000),
      std::chrono::microseconds(250'000),    std::chrono::microseconds(500'000),
      std::chrono::microseconds(1'000'000),  std::chrono::microseconds(2'500'000),
      std::chrono::microseconds(5'000'000),  std::chrono::microseconds(10'000'000),
      std::chrono::microseconds(30'000'000), std::chrono::microseconds(60'000'000)};

  // Number of observations.
  std::uint64_t count = 0;
  // Sum of all observed durations.
  std::chrono::nanoseconds sum{0};
  // Cumulative, as in Prometheus: buckets[i] is the number of observations <= kBounds[i]. The
  // implicit +Inf bucket is `count`.
  std::array<std::uint64_t, kBounds.size()> buckets{};
};

// Number of Code values (status.h), for per-code counters indexed by static_cast<size_t>(code).
inline constexpr std::size_t kCodeCount = static_cast<std::size_t>(Code::kAborted) + 1;

struct MetricsSnapshot {
  // Client::acquire() calls (and election campaigns), whatever their outcome.
  std::uint64_t acquisitions = 0;
  // Acquisitions that returned a Lease.
  std::uint64_t grants = 0;
  // Acquisitions that ended kLocked: the key was held (by another owner, or by another thread of
  // this process) for the whole wait. A waiter granted after the holder released is not counted.
  std::uint64_t contended = 0;
  // The subset of `contended` that waited (AcquireOptions::wait > 0) and ran out of time.
  std::uint64_t timeouts = 0;
  // Acquisitions that returned a Lease after finding the key held: they waited behind another
  // holder (another process, or another thread of this one) and were granted at its release.
  std::uint64_t contended_grants = 0;
  // Acquisitions that ended kCancelled (AcquireOptions::stop fired).
  std::uint64_t cancellations = 0;
  // kUnavailable results (no quorum, servers unreachable) of acquisitions and releases.
  std::uint64_t quorum_failures = 0;
  // Failed acquisitions by status code (index: static_cast<size_t>(Code)); kOk stays 0.
  std::array<std::uint64_t, kCodeCount> acquire_errors{};

  // Releases sent to the servers: Lease::release() and the Lease destructor's best-effort
  // release (not when ClientOptions::release_timeout is 0).
  std::uint64_t releases = 0;
  // Releases that returned an error (the lock then expires by its TTL).
  std::uint64_t release_failures = 0;

  // Leases whose lost() fired for a reason other than their release: a renewal was rejected, or
  // validity ran out before one was confirmed (including leases taken with renew = false).
  std::uint64_t losses = 0;
  // Per lease and renewal round: renewals the backend confirmed.
  std::uint64_t renewals = 0;
  // Per lease and renewal round: renewals rejected or not confirmed (servers slow or unreachable;
  // such a lease is retried until its validity ends).
  std::uint64_t renewal_failures = 0;

  // Connections to a server opened again after one to the same place broke or was refused
  // (Redis command connections, PostgreSQL connections and sessions), or etcd calls that
  // succeeded after failing over or reconnecting. Counted once per recovery, not per retry
  // while the server stays down; a call that only timed out is not a reconnect.
  std::uint64_t reconnects = 0;

  // Client::acquire() calls, from the call to its return, whatever the outcome.
  LatencyHistogram acquire_latency;
  // Acquisitions that were allowed to wait (AcquireOptions::wait > 0): time until they returned
  // (granted, timed out, cancelled or failed). The time a waiter spent waiting for the lock.
  LatencyHistogram wait_latency;
  // Releases sent to the servers (as counted in `releases`).
  LatencyHistogram release_latency;
  // Renewal rounds: one batched backend call that renews every due lease of this Client.
  LatencyHistogram renew_latency;
};

// The snapshot in the Prometheus text exposition format: one "# HELP" and "# TYPE" line per
// metric, then its samples, every sample labelled backend="<client_label>" (escaped as the
// format requires). Pass Client::describe() as the label: it never holds a password. Metric
// names start with "fencelock_"; counters end in "_total", histograms in "_seconds".
std::string to_prometheus(const MetricsSnapshot& snapshot, std::string_view client_label);

}  // namespace fencelock
