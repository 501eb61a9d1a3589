// The stories `fencelock demo` tells (tools/fencelock/demo_command.cpp prints them and the closing
// table): the narration of a torture run's first pause on a real backend, and the same story in
// one process on memory://. Here, not in the command, so that unit tests (tests/unit/
// demo_story_test.cpp, also run under TSan) check each line against a known history and run the
// in-process story's lost() callback under the race detector.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fencelock/status.h"
#include "torture/checker.h"
#include "torture/events.h"

namespace fencelock::torture {

// One backend's line of the demo's closing table.
struct DemoOutcome {
  std::uint64_t tokens = 0;
  std::uint64_t stale_rejected = 0;  // stale reads and writes the fence refused
  std::uint64_t overlaps = 0;
  std::optional<double> lost_delay_ms;  // the paused worker's lost() after its validity ended
  bool taken_over = false;              // another worker was granted during the pause
  Verdict verdict = Verdict::kInconclusive;
  std::vector<std::string> violations;
  std::vector<std::string> inconclusive;
};

using Say = std::function<void(const std::string& line)>;

// Narrates the first pause of `record` (what the paused worker held and had done, who was granted
// during the pause, when its lost() fired, what the fence did with its first read or write after
// it woke); the numbers come from `report` (check() of the same record). `ttl`: the workers'.
DemoOutcome tell_pause(const RunRecord& record, const Report& report, std::chrono::nanoseconds ttl,
                       const Say& say);

// The story on memory:// `uri` in this process: two Clients share one lock table, a FenceGate
// guards a register. Worker 1 takes the lock with `ttl` and no renewal (a paused process renews
// nothing) and reads; worker 2 waits for the lock, is granted after the lease ended, and writes;
// worker 1 writes with its stale token. SAFE when the fence refused only that write, the tokens
// grew, lost() fired and the grants did not overlap. An error when a Client cannot connect or a
// grant fails (kInternal-worthy: memory:// has no server to be down).
Result<DemoOutcome> memory_story(const std::string& uri, std::chrono::milliseconds ttl,
                                 const Say& say);

}  // namespace fencelock::torture
