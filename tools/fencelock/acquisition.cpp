#include "acquisition.h"

#include <poll.h>
#include <sys/eventfd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stop_token>
#include <thread>

#include <fmt/format.h>

#include "unique_fd.h"

namespace fencelock::cli {

Acquisition connect_and_acquire(const std::string& uri, const LockKey& key, AcquireOptions options,
                                SignalChannel& signals) {
  Acquisition out;
  UniqueFd done(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!done.valid()) {
    out.client.emplace(
        Status(Code::kInternal, fmt::format("cannot open an eventfd: {}", std::strerror(errno))));
    return out;
  }
  std::stop_source stop;
  options.stop = stop.get_token();

  // Writes only to out.client and out.lease, which this thread reads after join().
  std::thread worker([&] {
    out.client.emplace(Client::connect(uri));
    if (out.client->ok() && !stop.stop_requested()) {
      out.lease.emplace(out.client->value().acquire(key, options));
    }
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
  out.interrupted_by = interrupted_by;
  return out;
}

}  // namespace fencelock::cli
