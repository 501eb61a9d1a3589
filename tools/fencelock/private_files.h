// Files the tool writes where other users may have planted names: `--metrics FILE`, the torture's
// `--work-dir`. fencelock often runs as root, so a name planted there must never redirect a write:
//   - the directory is reached one component at a time (openat with O_NOFOLLOW), and every
//     directory on the way must belong to root or this user and be writable by nobody else
//     unless sticky (like /tmp), every symlink on the way must belong to root or this user: no
//     other user can then swap a directory on the way for a link (an attack replaced a root-only
//     file through a directory symlink planted in a directory of its own);
//   - the file is reached through that directory's descriptor (openat, renameat), its last
//     component is never followed when it is a symlink, and only regular files are written:
//   - replace_file() writes a fresh temporary file in the target's directory (O_CREAT | O_EXCL |
//     O_NOFOLLOW: never an existing name) and renames it over the target. An existing target that
//     is not a regular file (a symlink, FIFO, device, socket or directory) is refused before
//     anything is written; one that becomes such a name in between is replaced by the rename,
//     which never writes through it; the new file keeps the replaced one's mode (else 0644);
//   - open_no_follow() opens with O_NOFOLLOW and O_NONBLOCK (a FIFO with no reader cannot block
//     it) and refuses what is not a regular file of this user's with one link (a hard link
//     planted in a shared directory names another file).
//
// Thread-safety: the functions share no state.
#pragma once

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace fencelock::cli {

// Creates the directory `path` and its missing parents (0700) the way replace_file() reaches a
// directory (no component another user controls), and requires it to be writable by this user
// only. "" on success, else why not.
std::string make_trusted_directory(const std::string& path);

// "" if `path` may be written by replace_file(): it does not exist or is a regular file, and its
// directory exists and is writable; else why not, in words ("is a symbolic link; ...").
std::string check_replaceable(const std::string& path);

// Writes `text` to `path` through a temporary file in its directory and a rename; the file is
// created 0644. Returns "" on success, else the reason; nothing is left behind on failure.
std::string replace_file(const std::string& path, std::string_view text);

// The contents of `path` (at most `max_bytes`) if it is a regular file of this user's with one
// link, reached as replace_file() reaches it; nullopt otherwise. For carrying a value over from
// a file this tool wrote, never from one another user planted.
std::optional<std::string> read_own_file(const std::string& path, std::size_t max_bytes);

// Opens `path` for writing (`append`: at its end; otherwise truncated), creating it 0644, never
// through a symlink and never anything but a regular file. nullptr with errno set on failure
// (ELOOP: a symlink; EINVAL: not a regular file).
std::FILE* open_no_follow(const std::string& path, bool append);

}  // namespace fencelock::cli
