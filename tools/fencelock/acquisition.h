// Connecting and taking the lock for `fencelock run`, interruptible by
// SIGINT/SIGTERM/SIGHUP/SIGQUIT.
//
// Client::connect() and Client::acquire() block; they run on a worker thread while the calling
// thread waits in poll() on the SignalChannel and a completion eventfd. A cancelling signal fires
// AcquireOptions::stop, so a waiting acquire() returns kCancelled and leaves nothing held.
//
// Thread-safety: call from the thread that opened the SignalChannel.
#pragma once

#include <functional>
#include <optional>
#include <stop_token>
#include <string>

#include "fencelock/client.h"
#include "signals.h"

namespace fencelock::cli {

struct Acquisition {
  std::optional<Result<Client>> client;  // empty only if a descriptor could not be opened
  std::optional<Result<Lease>> lease;    // empty when connect failed or a signal came first
  int interrupted_by = 0;                // the cancelling signal, 0 if none arrived
};

// If interrupted_by != 0 and a lease was granted anyway (the signal raced the grant), the caller
// still owns that lease and must release it.
// Runs `work` on a worker thread while this thread waits for it and for signals; a cancelling
// signal fires the stop token `work` gets. Returns the first cancelling signal (0 if none) once
// `work` has returned.
int run_cancellable(SignalChannel& signals, const std::function<void(std::stop_token)>& work);

Acquisition connect_and_acquire(const std::string& uri, bool json, const LockKey& key,
                                AcquireOptions options, SignalChannel& signals);

}  // namespace fencelock::cli
