// terminal_safe(): what the CLI prints of backend text on a terminal (tools/fencelock/
// terminal_text.h).
#include "terminal_text.h"

#include <gtest/gtest.h>

#include <string>

namespace fencelock::cli {
namespace {

TEST(TerminalSafe, PrintableTextAndValidUtf8PassUnchanged) {
  EXPECT_EQ(terminal_safe("jobs/nightly host=a pid=7"), "jobs/nightly host=a pid=7");
  EXPECT_EQ(terminal_safe("Zürich \xe2\x9c\x93 \xf0\x9f\x94\x92"),
            "Zürich \xe2\x9c\x93 \xf0\x9f\x94\x92");
}

TEST(TerminalSafe, ControlsBecomeVisibleEscapes) {
  EXPECT_EQ(terminal_safe("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(terminal_safe("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07");
  EXPECT_EQ(terminal_safe("\x1b[2J"), "\\x1b[2J");
  EXPECT_EQ(terminal_safe(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(terminal_safe("\x7f"), "\\x7f");
  EXPECT_EQ(terminal_safe("back\\slash"), "back\\\\slash");  // escapes stay unambiguous
}

TEST(TerminalSafe, C1ControlsAndInvalidUtf8AreEscapedBytewise) {
  EXPECT_EQ(terminal_safe("\xc2\x9b"
                          "31m"),
            "\\xc2\\x9b31m");  // CSI as U+009B
  EXPECT_EQ(terminal_safe("\x9b"
                          "31m"),
            "\\x9b31m");  // CSI as a raw 8-bit byte
  EXPECT_EQ(terminal_safe("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(terminal_safe("\xe2\x9c"), "\\xe2\\x9c");           // truncated sequence
  EXPECT_EQ(terminal_safe("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(terminal_safe("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
}

}  // namespace
}  // namespace fencelock::cli
