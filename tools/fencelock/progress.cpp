#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace fencelock::cli {

Progress::Progress(std::string what, bool enabled)
    : what_(std::move(what)),
      enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(double fraction, std::string_view rate, std::string_view detail) {
  if (!enabled_) return;
  fraction = std::clamp(fraction, 0.0, 1.0);
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const std::string eta =
      fraction > 0.01 ? fmt::format("ETA {:.0f} s", elapsed * (1 - fraction) / fraction) : "ETA ?";
  const std::string line = fmt::format("{}: {:3.0f}%  {}  {}{}{}", what_, 100 * fraction, rate, eta,
                                       detail.empty() ? "" : "  ", detail);
  if (tty_) {
    if (now - last_shown_ < std::chrono::milliseconds(250) && fraction < 1) return;
    last_shown_ = now;
    std::fputs(("\r\033[K" + line).c_str(), stderr);
    open_line_ = true;
  } else {
    const int tenth = static_cast<int>(fraction * 10);
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
    std::fputs((line + "\n").c_str(), stderr);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && tty_ && open_line_) std::fputs("\n", stderr);
  open_line_ = false;
}

}  // namespace fencelock::cli
