// terminal_safe(): what the CLI prints of backend text on a terminal (tools/fencelock/
// terminal_text.h).
#include "terminal_text.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mistyped.h"
#include "reporter.h"

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

// json_line(): lossless for any bytes. Valid UTF-8 is kept as it is (controls escaped), each byte
// outside valid UTF-8 becomes \udcXX, so that two names differing in such a byte stay apart.
TEST(JsonLine, BytesOutsideValidUtf8AreEscapedOneByOneAndStayDistinct) {
  EXPECT_EQ(json_line(nlohmann::json{{"key", "a\xff"}}), R"({"key":"a\udcff"})");
  EXPECT_EQ(json_line(nlohmann::json{{"key", "a\xfe"}}), R"({"key":"a\udcfe"})");
  EXPECT_EQ(json_line(nlohmann::json("Z\xc3\xbcrich \xf0\x9f\x94\x92")),
            "\"Z\xc3\xbcrich \xf0\x9f\x94\x92\"");
  EXPECT_EQ(json_line(nlohmann::json("\xc0\xaf")), R"("\udcc0\udcaf")");            // overlong '/'
  EXPECT_EQ(json_line(nlohmann::json("\xed\xa0\x80")), R"("\udced\udca0\udc80")");  // a surrogate
  EXPECT_EQ(json_line(nlohmann::json("\xe2\x9c")), R"("\udce2\udc9c")");            // cut short
  EXPECT_EQ(json_line(nlohmann::json("\xf4\x90\x80\x80")),
            R"("\udcf4\udc90\udc80\udc80")");  // above U+10FFFF
  EXPECT_EQ(json_line(nlohmann::json(std::string("q\"b\\n\n\x01\x1b\0", 9))),
            R"("q\"b\\n\n\u0001\u001b\u0000")");
}

TEST(JsonLine, ValidUtf8ReadsBackAndOtherValuesAreAsNlohmannWritesThem) {
  const nlohmann::json value = {{"key", "jobs/\xe2\x9c\x93\n"},
                                {"token", 18446744073709551615ULL},
                                {"held", true},
                                {"holder", nullptr},
                                {"list", {1, "two", 3.5}}};
  EXPECT_EQ(nlohmann::json::parse(json_line(value)), value);
}

TEST(Mistyped, EditDistanceCountsASwapOfNeighboursAsOne) {
  EXPECT_EQ(edit_distance("--ttl", "--ttl"), 0u);
  EXPECT_EQ(edit_distance("--tll", "--ttl"), 1u);
  EXPECT_EQ(edit_distance("stauts", "status"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(closest("--jsn", {"--json", "--backend"}), "--json");
  EXPECT_EQ(closest("--frobnicate", {"--json", "--backend"}), std::nullopt);
  EXPECT_EQ(closest("ab", {"xy"}), std::nullopt) << "two edits of a two-letter word is no typo";
}

TEST(Mistyped, UnknownWordsAreNamedAndValuesAndCommandArgumentsAreNot) {
  const std::vector<KnownOption> global = {{{"--help", "-h"}, false}, {{"--version"}, false}};
  const std::vector<KnownCommand> commands = {
      {"run",
       {{{"--ttl"}, true}, {{"--wait"}, true}, {{"--json"}, false}, {{"-q", "--quiet"}, false}},
       false},
      {"status", {{{"--json"}, false}}, false},
      {"torture-worker", {{{"--id"}, true}}, true}};
  EXPECT_EQ(unknown_word(commands, global, {}), std::nullopt);
  EXPECT_EQ(unknown_word(commands, global,
                         {"run", "--ttl", "5s", "--wait", "-1s", "k", "--", "x", "--tll"}),
            std::nullopt);
  EXPECT_EQ(unknown_word(commands, global, {"run", "--ttl=5s", "-q", "k"}), std::nullopt);
  EXPECT_EQ(unknown_word(commands, global, {"run", "-qh"}), std::nullopt) << "flags together";
  EXPECT_EQ(unknown_word(commands, global, {"run", "-qq", "k"}), std::nullopt);
  EXPECT_NE(unknown_word(commands, global, {"run", "-qz", "k"}), std::nullopt);
  EXPECT_EQ(unknown_word(commands, global, {"--version"}), std::nullopt);
  EXPECT_EQ(unknown_word(commands, global, {"run", "--tll", "5s"}),
            "unknown option '--tll' for 'run' (did you mean '--ttl'?); see 'fencelock run --help'");
  EXPECT_EQ(unknown_word(commands, global, {"run", "--tll=5s"}),
            "unknown option '--tll' for 'run' (did you mean '--ttl'?); see 'fencelock run --help'");
  const auto command = unknown_word(commands, global, {"stauts"});
  ASSERT_TRUE(command.has_value());
  EXPECT_EQ(command->find("unknown command 'stauts' (did you mean 'status'?)"), 0u) << *command;
  EXPECT_EQ(command->find("torture-worker"), std::string::npos) << "a hidden command is listed";
  EXPECT_NE(unknown_word(commands, global, {"--json", "status"})->find("goes after the command"),
            std::string::npos);
  const auto escaped = unknown_word(commands, global, {"status", "--x\x1b[2J"});
  ASSERT_TRUE(escaped.has_value());
  EXPECT_NE(escaped->find("'--x\\x1b[2J'"), std::string::npos) << *escaped;
}

}  // namespace
}  // namespace fencelock::cli
