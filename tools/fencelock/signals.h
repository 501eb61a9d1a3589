// The signals `fencelock run` handles, received through a signalfd so that the supervision loop
// can wait for "a signal arrived", "the command exited" and "the lease was lost" in one poll().
//
// The signals are blocked in the thread that opens the channel, before any other thread exists,
// so every thread fencelock (or the library) starts inherits the block and none of them is ever
// interrupted; the command gets the original mask back before exec.
//
// Thread-safety: open() must run before other threads start; drain() from one thread.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>

#include <vector>

#include "fencelock/status.h"
#include "unique_fd.h"

namespace fencelock::cli {

// Forwarded to the command while it runs; they cancel a pending acquisition before it starts.
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// True for the signals that stop fencelock while it is still waiting for the lock.
bool cancels_acquisition(int signo);

// "SIGTERM" for SIGTERM (falls back to "signal N").
const char* signal_name(int signo);

class SignalChannel {
 public:
  // Blocks kForwardedSignals and SIGCHLD in the calling thread and opens a non-blocking signalfd
  // for them. kInternal if the signalfd cannot be opened.
  // REQUIRES: no other thread of this process has been started yet.
  static Result<SignalChannel> open();

  int fd() const { return fd_.get(); }
  // The mask the process had before open(): what the command must start with.
  const sigset_t& original_mask() const { return original_mask_; }

  // Every signal delivered since the last call, in arrival order; empty if none.
  std::vector<signalfd_siginfo> drain();

 private:
  SignalChannel(UniqueFd fd, const sigset_t& original)
      : fd_(std::move(fd)), original_mask_(original) {}
  UniqueFd fd_;
  sigset_t original_mask_;
};

}  // namespace fencelock::cli
