// A command for `fencelock run` tests that writes until it is killed: `monotonic_writer FILE`
// appends "pid N" once, then a line with the CLOCK_MONOTONIC time in nanoseconds, taken just
// before each write, every millisecond or so. A test compares the last line with the lease's
// deadline on the same clock.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: monotonic_writer FILE\n", stderr);
    return 64;
  }
  const int fd = ::open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(argv[1]);
    return 73;
  }
  char line[64];
  int n = std::snprintf(line, sizeof line, "pid %d\n", static_cast<int>(::getpid()));
  if (::write(fd, line, static_cast<size_t>(n)) != n) return 74;
  for (;;) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    n = std::snprintf(line, sizeof line, "%lld\n",
                      static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec);
    if (::write(fd, line, static_cast<size_t>(n)) != n) return 74;
    const timespec pause{0, 1'000'000};
    ::nanosleep(&pause, nullptr);
  }
}
