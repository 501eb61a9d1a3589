// Progress of a long CLI run (torture, bench) on stderr: on a terminal one line rewritten in
// place (percent, rate, ETA), at most a few times a second; otherwise a plain line at every
// tenth of the way, so that logs stay short.
//
// Thread-safety: one Progress per run, used from one thread.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace fencelock::cli {

class Progress {
 public:
  // `what` starts every line ("torture", "bench"). Silent when `enabled` is false (--json).
  Progress(std::string what, bool enabled);

  // `fraction` done in [0, 1]; `rate` (e.g. "120 ops/s") and `detail` are shown as given.
  void update(double fraction, std::string_view rate, std::string_view detail = {});
  // Ends the rewritten line (terminal only).
  void finish();

 private:
  std::string what_;
  bool enabled_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_shown_{};
  int last_tenth_ = -1;
  bool open_line_ = false;
};

}  // namespace fencelock::cli
