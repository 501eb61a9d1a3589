// fencelock/options.h: options for connecting a Client and for one acquisition.
//
// Options are aggregates; every field's comment states its default and what 0 means.
#pragma once

#include <chrono>
#include <cstddef>
#include <stop_token>
#include <string>

namespace fencelock {

// The longest TTL or timeout: 596 hours (24.8 days), the longest that every backend can represent
// (PostgreSQL's lock_timeout is a 32-bit count of milliseconds). A longer TTL is kInvalidArgument,
// a longer ClientOptions duration fails connect(), and the CLI refuses every longer duration when
// it parses it. A wait may be longer (milliseconds::max(): until granted or stopped).
inline constexpr std::chrono::milliseconds kMaxDuration{596LL * 3600 * 1000};

struct AcquireOptions {
  // Lease time to live. Default 10 s. Must be > 0 and at least the backend's minimum
  // (Redis: 10 ms; see docs/PROTOCOLS.md) and at most kMaxDuration. The lease stays valid this long
  // after each successful acquire/renew, less the clock-drift allowance.
  std::chrono::milliseconds ttl{10'000};
  // How long to wait for a held lock. Default 0: try once and return kLocked if held.
  // Negative is kInvalidArgument. Any longer wait is fine: the deadline saturates.
  std::chrono::milliseconds wait{0};
  // Renew automatically every ttl/3 while the Lease lives. Default true. When false the lease
  // simply expires at valid_until() and lost() fires then.
  bool renew = true;
  // Cancels a waiting acquisition (result kCancelled, nothing held). Default: never.
  std::stop_token stop;
  // Free-form holder metadata (JSON object text) shown by inspect()/list(). Default empty: the
  // client fills in {"host":..,"pid":..,"program":..}.
  std::string metadata;
  // Shared (reader) lock: any number of shared holders at once, excluding exclusive ones.
  // Default false. Only PostgreSQL advisory mode supports it (pg_advisory_lock_shared); other
  // backends reject it with kInvalidArgument. Shared holders get tokens like any grant.
  bool shared = false;
};

// Bounds of one Client::list call. A server whose listing never ends (a SCAN cursor that never
// returns to 0) or a key space far larger than wanted must not hold the caller or its memory.
struct ListOptions {
  // The whole call, every page of every server included. Default 10 s. Must be > 0 and at most
  // kMaxDuration (else kInvalidArgument). Past it: kDeadlineExceeded.
  std::chrono::milliseconds timeout{10'000};
  // The most locks the call may return; more match: kInvalidArgument (narrow the prefix, or
  // raise this). Default 100,000. Must be > 0.
  std::size_t max_locks = 100'000;
};

// Every duration here must lie in [0, kMaxDuration] (connect() fails with kInvalidArgument).
struct ClientOptions {
  // Time allowed to open one server connection. Default 1 s.
  std::chrono::milliseconds connect_timeout{1'000};
  // Time allowed for one request to one server. Default 1 s. Acquisition additionally caps it at
  // ttl/10 (at least 50 ms) so that a slow instance cannot eat the lease's validity; on Redlock,
  // once a majority of instances has answered a call, the others get only a short grace from
  // then (ttl/20 within [5 ms, 100 ms] for acquisitions, 100 ms for releases, a quarter of the
  // shortest TTL for a renewal round; at least as long as the majority took).
  std::chrono::milliseconds io_timeout{1'000};
  // Clock-drift allowance, as a fraction of the TTL, subtracted from every validity (Redlock
  // spec). It bounds the *relative* drift: how much faster a server's clock may run than the
  // client's. Default 0.01; a further 2 ms is always subtracted. If each clock may drift 1 % on
  // its own (in opposite directions), set 0.02.
  double drift_factor = 0.01;
  // How long a Lease destructor may spend releasing. Default 500 ms; 0 skips the release and
  // leaves the lock to expire.
  std::chrono::milliseconds release_timeout{500};
};

}  // namespace fencelock
