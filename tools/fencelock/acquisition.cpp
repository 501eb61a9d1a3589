#include "acquisition.h"

#include <poll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>
#include <stop_token>
#include <thread>

#include "connect_warnings.h"
#include "unique_fd.h"

namespace fencelock::cli {

int run_cancellable(SignalChannel& signals, const std::function<void(std::stop_token)>& work) {
  UniqueFd done(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  std::stop_source stop;
  if (!done.valid()) {  // no way to wait for both: run uncancellable rather than not at all
    work(stop.get_token());
    return 0;
  }
  std::thread worker([&] {
    work(stop.get_token());
    std::uint64_t one = 1;
    ssize_t ignored = ::write(done.get(), &one, sizeof one);
    (void)ignored;
  });
  int interrupted_by = 0;
  for (bool finished = false; !finished;) {
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {done.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;  // cannot happen with valid descriptors; join() below still waits for the worker
    }
    if (fds[0].revents & POLLIN) {
      for (const signalfd_siginfo& info : signals.drain()) {
        int signo = static_cast<int>(info.ssi_signo);
        if (cancels_acquisition(signo) && interrupted_by == 0) {
          interrupted_by = signo;
          stop.request_stop();
        }
      }
    }
    finished = (fds[1].revents & POLLIN) != 0;
  }
  worker.join();
  return interrupted_by;
}

Acquisition connect_and_acquire(const std::string& uri, bool json, const LockKey& key,
                                AcquireOptions options, SignalChannel& signals) {
  Acquisition out;
  out.interrupted_by = run_cancellable(signals, [&](std::stop_token stop) {
    // Writes only to out.client and out.lease, which the caller reads after the join.
    options.stop = stop;
    // Through the acquisition too: what its rounds find (an instance that answered with an
    // error, a fencing counter far ahead of its server's clock) reaches the operator. No lease
    // exists yet, so no loss can be reported twice.
    ConnectWarnings warnings(json);
    out.client.emplace(Client::connect(uri));
    if (out.client->ok() && !stop.stop_requested()) {
      out.lease.emplace(out.client->value().acquire(key, options));
    }
  });
  return out;
}

}  // namespace fencelock::cli
