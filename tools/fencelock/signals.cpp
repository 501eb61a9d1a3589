#include "signals.h"

#include <cerrno>

#include <fmt/format.h>

#include "core/errno_text.h"

namespace fencelock::cli {

bool cancels_acquisition(int signo) {
  return signo == SIGINT || signo == SIGTERM || signo == SIGHUP || signo == SIGQUIT;
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGKILL:
      return "SIGKILL";
    case SIGCHLD:
      return "SIGCHLD";
    default:
      return "signal";
  }
}

Result<SignalChannel> SignalChannel::open() {
  sigset_t watched;
  sigemptyset(&watched);
  for (int signo : kForwardedSignals) sigaddset(&watched, signo);
  sigaddset(&watched, SIGCHLD);
  sigset_t original;
  if (int err = pthread_sigmask(SIG_BLOCK, &watched, &original); err != 0) {
    return Status(Code::kInternal,
                  fmt::format("cannot block signals: {}", detail::errno_text(err)));
  }
  UniqueFd fd(signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd.valid()) {
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &original, nullptr);
    return Status(Code::kInternal,
                  fmt::format("cannot open a signalfd: {}", detail::errno_text(err)));
  }
  return SignalChannel(std::move(fd), original);
}

std::vector<signalfd_siginfo> SignalChannel::drain() {
  std::vector<signalfd_siginfo> out;
  signalfd_siginfo info;
  for (;;) {
    ssize_t n = ::read(fd_.get(), &info, sizeof info);
    if (n == static_cast<ssize_t>(sizeof info)) {
      out.push_back(info);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return out;  // EAGAIN: nothing more pending
  }
}

}  // namespace fencelock::cli
