// Files the tool writes where other users may have planted names: `--metrics FILE`, the torture's
// `--work-dir`. A name planted there as a symlink must never redirect a write (fencelock often
// runs as root), so no write follows one:
//   - replace_file() writes a fresh temporary file made by mkstemp (O_EXCL: never an existing
//     name) in the target's directory, then renames it over the target (rename replaces a
//     symlink, it does not follow it);
//   - open_no_follow() opens with O_NOFOLLOW: a symlink in the last component is an error (ELOOP).
//
// Thread-safety: the functions share no state.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace fencelock::cli {

// Writes `text` to `path` through a temporary file in its directory and a rename; the file is
// created 0644. Returns "" on success, else the reason (strerror); nothing is left behind on
// failure.
std::string replace_file(const std::string& path, std::string_view text);

// Opens `path` for writing (`append`: at its end; otherwise truncated), creating it 0644, never
// through a symlink. nullptr with errno set on failure.
std::FILE* open_no_follow(const std::string& path, bool append);

}  // namespace fencelock::cli
