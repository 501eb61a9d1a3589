// Mistyped commands and options, found before CLI11 parses the arguments: CLI11 reports an
// unknown option as an argument it did not expect (`run --tll 5s` said "The following argument
// was not expected: true") and an unknown command as "A subcommand is required". Here the
// unknown word is named, with the closest known one when one is close.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fencelock::cli {

// One known option: its spellings ("--ttl", "-q") and whether it takes a value.
struct KnownOption {
  std::vector<std::string> names;
  bool takes_value = false;
};

struct KnownCommand {
  std::string name;
  std::vector<KnownOption> options;
  bool hidden = false;  // accepted, never suggested
};

// The edit distance between `a` and `b` (insertions, deletions, substitutions and swaps of two
// neighbours each count 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if one is close enough to be a likely typo (distance at most
// 2, and less than half the word's length).
std::optional<std::string> closest(std::string_view word,
                                   const std::vector<std::string>& candidates);

// Why `args` (argv without the program name) holds an unknown command or option, or nullopt if
// every command and option word is known (other mistakes are left to CLI11). Words after "--"
// belong to CMD; a word that follows an option taking a value is that value.
std::optional<std::string> unknown_word(const std::vector<KnownCommand>& commands,
                                        const std::vector<KnownOption>& global_options,
                                        const std::vector<std::string>& args);

}  // namespace fencelock::cli
