#include "mistyped.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "terminal_text.h"

namespace fencelock::cli {
namespace {

const KnownOption* find_option(const std::vector<KnownOption>& options, std::string_view name) {
  for (const KnownOption& option : options) {
    if (std::find(option.names.begin(), option.names.end(), name) != option.names.end())
      return &option;
  }
  return nullptr;
}

std::vector<std::string> spellings(const std::vector<KnownOption>& options) {
  std::vector<std::string> out;
  for (const KnownOption& option : options) {
    out.insert(out.end(), option.names.begin(), option.names.end());
  }
  return out;
}

// "-5s", "-1": a (negative) value, not an option.
bool looks_like_number(std::string_view word) {
  return word.size() >= 2 && word[0] == '-' &&
         ((word[1] >= '0' && word[1] <= '9') || word[1] == '.');
}

std::string unknown_option(std::string_view word, std::string_view where,
                           const std::vector<KnownOption>& options, std::string_view help) {
  const std::string name(word.substr(0, word.find('=')));
  std::string text = fmt::format("unknown option '{}'{}", terminal_safe(name), where);
  if (auto near = closest(name, spellings(options)))
    text += fmt::format(" (did you mean '{}'?)", *near);
  return text + fmt::format("; see '{}'", help);
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance, three rows.
  std::vector<std::size_t> before(b.size() + 1), last(b.size() + 1), row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) last[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({last[j] + 1, row[j - 1] + 1, last[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], before[j - 2] + 1);
    }
    before.swap(last);
    last.swap(row);
  }
  return last[b.size()];
}

std::optional<std::string> closest(std::string_view word,
                                   const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 3;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance && 2 * distance < word.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::optional<std::string> unknown_word(const std::vector<KnownCommand>& commands,
                                        const std::vector<KnownOption>& global_options,
                                        const std::vector<std::string>& args) {
  if (args.empty()) return std::nullopt;
  const std::string& first = args[0];
  if (first.starts_with('-')) {
    if (find_option(global_options, first.substr(0, first.find('='))) != nullptr)
      return std::nullopt;
    for (const KnownCommand& command : commands) {
      if (!command.hidden && find_option(command.options, first.substr(0, first.find('='))))
        return fmt::format(
            "the option '{}' goes after the command (fencelock COMMAND {} ...); "
            "see 'fencelock --help'",
            terminal_safe(first), terminal_safe(first));
    }
    return unknown_option(first, "", global_options, "fencelock --help");
  }
  const KnownCommand* command = nullptr;
  std::vector<std::string> names;
  for (const KnownCommand& known : commands) {
    if (known.name == first) command = &known;
    if (!known.hidden) names.push_back(known.name);
  }
  if (command == nullptr) {
    std::string text = fmt::format("unknown command '{}'", terminal_safe(first));
    if (auto near = closest(first, names)) text += fmt::format(" (did you mean '{}'?)", *near);
    return text +
           fmt::format("; the commands are {}; see 'fencelock --help'", fmt::join(names, ", "));
  }
  const std::string where = fmt::format(" for '{}'", command->name);
  const std::string help = fmt::format("fencelock {} --help", command->name);
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") break;  // CMD and its arguments
    if (word.size() < 2 || word[0] != '-' || looks_like_number(word)) continue;
    const std::string name = word.substr(0, word.find('='));
    const KnownOption* option = find_option(command->options, name);
    if (option == nullptr) option = find_option(global_options, name);
    if (option == nullptr && word[1] != '-' && word.size() > 2) {
      // Short flags given together ("-qh"): each letter one of them; the last may take a value.
      const KnownOption* last = nullptr;
      for (std::size_t c = 1; c < word.size(); ++c) {
        const std::string flag = std::string("-") + word[c];
        last = find_option(command->options, flag);
        if (last == nullptr) last = find_option(global_options, flag);
        if (last == nullptr) break;
        if (last->takes_value) break;  // the rest of the word is its value
      }
      option = last;
      if (option != nullptr && option->takes_value) continue;
    }
    if (option == nullptr) return unknown_option(word, where, command->options, help);
    if (option->takes_value && name.size() == word.size()) ++i;  // its value follows
  }
  return std::nullopt;
}

}  // namespace fencelock::cli
