// A command for `fencelock run` tests that writes until it is killed: `monotonic_writer FILE`
// appends "pid N" once, then a line with the CLOCK_MONOTONIC time in nanoseconds, taken just
// before each write, every millisecond or so. A test compares the last line with the lease's
// deadline on the same clock.
//
// `monotonic_writer --hop FILE` moves to a new pid after every write, without pausing: it forks,
// the parent exits at once and the child, in a session of its own, writes next (work that a scan of
// /proc followed by kill(pid) never catches, since the pid it read has moved on by the time the
// signal is sent). It ignores SIGTERM: only SIGKILL (or SIGSTOP) ends it.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

// Writes "pid N", then a timestamp a line until a write fails (its exit code then).
int write_forever(int fd, bool hop) {
  char line[64];
  int n = std::snprintf(line, sizeof line, "pid %d\n", static_cast<int>(::getpid()));
  if (::write(fd, line, static_cast<size_t>(n)) != n) return 74;
  for (;;) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    n = std::snprintf(line, sizeof line, "%lld\n",
                      static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec);
    if (::write(fd, line, static_cast<size_t>(n)) != n) return 74;
    if (!hop) {
      const timespec pause{0, 1'000'000};
      ::nanosleep(&pause, nullptr);
    } else {
      const pid_t child = ::fork();
      if (child < 0) return 71;
      if (child > 0) _exit(0);
      ::setsid();
    }
  }
}

int main(int argc, char** argv) {
  const bool hop = argc == 3 && std::strcmp(argv[1], "--hop") == 0;
  const bool thread = argc == 3 && std::strcmp(argv[1], "--thread") == 0;
  if (argc != 2 && !hop && !thread) {
    std::fputs("usage: monotonic_writer [--hop | --thread] FILE\n", stderr);
    return 64;
  }
  const char* file = argv[argc - 1];
  if (hop) {
    std::signal(SIGTERM, SIG_IGN);
    // A process of some size (as an interpreter is) spends its life in fork() copying its page
    // tables, so its pid moves on about every millisecond.
    static std::vector<char> ballast(std::size_t{32} << 20, 1);
    ballast[0] = ballast.back();
  }
  const int fd = ::open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(file);
    return 73;
  }
  if (thread) {
    std::thread([fd] { std::_Exit(write_forever(fd, false)); }).detach();
    ::pthread_exit(nullptr);
  }
  return write_forever(fd, hop);
}
