// Text from the backends (lock names, holder metadata, election values, server messages) as it
// may be shown on an operator's terminal: no byte in it can act as a terminal control.
//
// Policy (docs/CLI.md, "Human output"): every C0 control byte (0x00-0x1F), DEL (0x7F), every C1
// control (U+0080-U+009F) and every byte that is not part of valid UTF-8 is written as a visible
// escape: \n, \r, \t, \\ for a backslash, \xNN otherwise. Printable ASCII and valid UTF-8 outside
// C1 pass unchanged. JSON output needs none of this (its encoder escapes control characters).
#pragma once

#include <string>
#include <string_view>

namespace fencelock::cli {

std::string terminal_safe(std::string_view text);

}  // namespace fencelock::cli
