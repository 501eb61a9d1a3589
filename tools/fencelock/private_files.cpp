#include "private_files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/errno_text.h"
#include "unique_fd.h"

namespace fencelock::cli {
namespace {

// `path` split into its directory ("." when it has none) and its last component.
std::pair<std::string, std::string> split_path(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// What a non-regular file is, for messages.
std::string_view kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string refusal(mode_t mode) {
  return fmt::format(
      "it is {}; fencelock writes only regular files, never through a link: name "
      "a regular file (or a new name) in a directory you trust",
      kind_of(mode));
}

// Opens the directory `dir` for *at() calls (O_PATH), checking on the way that no other user can
// change where it leads: every directory passed through is owned by root or by this user and is
// writable by nobody else unless sticky (like /tmp), and every symlink passed through is owned by
// root or by this user. Each step opens one component below the last with O_NOFOLLOW, so what is
// checked is what is used. -1 with `why` set on failure.
int open_trusted_directory(const std::string& dir, std::string& why, bool create = false) {
  const uid_t me = ::geteuid();
  const gid_t my_group = ::getegid();
  std::vector<std::string> todo;  // components left, last first
  auto push_path = [&](std::string_view text) {
    std::vector<std::string> parts;
    std::size_t at = 0;
    while (at <= text.size()) {
      const std::size_t slash = text.find('/', at);
      const std::string_view part =
          text.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
      if (!part.empty() && part != ".") parts.emplace_back(part);
      if (slash == std::string_view::npos) break;
      at = slash + 1;
    }
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  auto trusted = [&](const struct stat& st, const std::string& name) {
    if (st.st_uid != 0 && st.st_uid != me) {
      why = fmt::format(
          "'{}' on the way belongs to another user (uid {}), who could redirect "
          "the write",
          name, st.st_uid);
      return false;
    }
    const bool sticky = (st.st_mode & S_ISVTX) != 0;
    if (S_ISDIR(st.st_mode) && !sticky &&
        ((st.st_mode & S_IWOTH) != 0 ||
         ((st.st_mode & S_IWGRP) != 0 && st.st_gid != 0 && st.st_gid != my_group))) {
      why = fmt::format(
          "the directory '{}' on the way is writable by other users (and not "
          "sticky), who could redirect the write",
          name);
      return false;
    }
    return true;
  };
  UniqueFd fd(::open(dir.starts_with('/') ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  push_path(dir);
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    why = detail::errno_text(errno);
    return -1;
  }
  if (!trusted(st, dir.starts_with('/') ? "/" : ".")) return -1;
  for (int links = 0; !todo.empty();) {
    const std::string name = todo.back();
    todo.pop_back();
    if (::fstatat(fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 &&
        (errno != ENOENT || !create ||
         (::mkdirat(fd.get(), name.c_str(), 0700) != 0 && errno != EEXIST) ||
         ::fstatat(fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)) {
      why = fmt::format("'{}': {}", name, detail::errno_text(errno));
      return -1;
    }
    if (S_ISLNK(st.st_mode)) {
      if (!trusted(st, name)) return -1;
      if (++links > 40) {
        why = "too many symbolic links on the way";
        return -1;
      }
      std::string target(4096, '\0');
      const ssize_t n = ::readlinkat(fd.get(), name.c_str(), target.data(), target.size());
      if (n <= 0 || static_cast<std::size_t>(n) >= target.size()) {
        why = fmt::format("'{}': cannot read the link", name);
        return -1;
      }
      target.resize(static_cast<std::size_t>(n));
      if (target.starts_with('/')) fd.reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
      push_path(target);
      continue;
    }
    UniqueFd next(::openat(fd.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid() || ::fstat(next.get(), &st) != 0) {
      why = fmt::format("'{}': {}", name, detail::errno_text(errno));
      return -1;
    }
    if (!trusted(st, name)) return -1;
    fd = std::move(next);
  }
  return fd.release();
}

bool writable_regular_or_absent(int dir_fd, const std::string& name, std::string& why) {
  if (name.empty() || name == "." || name == "..") {
    why = "the path names no file";
    return false;
  }
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) {
      why = refusal(st.st_mode);
      return false;
    }
  } else if (errno != ENOENT) {
    why = detail::errno_text(errno);
    return false;
  }
  return true;
}

std::string random_suffix() {
  std::uint64_t bits = 0;
  if (::getrandom(&bits, sizeof bits, 0) != static_cast<ssize_t>(sizeof bits)) {
    bits = static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ULL ^
           static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&bits));
  }
  return fmt::format("{:012x}", bits & 0xffffffffffffULL);
}

}  // namespace

std::string make_trusted_directory(const std::string& path) {
  std::string why;
  UniqueFd fd(open_trusted_directory(path, why, /*create=*/true));
  if (!fd.valid()) return why;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return detail::errno_text(errno);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return "it is writable by other users, who could plant names in it before fencelock writes "
           "them; use a directory only you can write";
  }
  return "";
}

std::string check_replaceable(const std::string& path) {
  const auto [dir, name] = split_path(path);
  std::string why;
  UniqueFd dir_fd(open_trusted_directory(dir, why));
  if (!dir_fd.valid()) return fmt::format("its directory: {}", why);
  if (!writable_regular_or_absent(dir_fd.get(), name, why)) return why;
  if (::faccessat(dir_fd.get(), ".", W_OK, 0) != 0) {
    return fmt::format("its directory: {}", detail::errno_text(errno));
  }
  return "";
}

std::string replace_file(const std::string& path, std::string_view text) {
  const auto [dir, name] = split_path(path);
  std::string why;
  UniqueFd dir_fd(open_trusted_directory(dir, why));
  if (!dir_fd.valid()) return fmt::format("its directory: {}", why);
  if (!writable_regular_or_absent(dir_fd.get(), name, why)) return why;
  // The new file keeps the mode of one of this user's it replaces (a 0600 file stays 0600), never
  // another user's (a planted 0666 file would make root's file writable by all); else 0644.
  mode_t mode = 0644;
  if (struct stat old{}; ::fstatat(dir_fd.get(), name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0 &&
                         old.st_uid == ::geteuid())
    mode = old.st_mode & 0755;
  std::string temp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    temp = name + ".tmp." + random_suffix();
    fd = ::openat(dir_fd.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0644);
    if (fd < 0 && errno != EEXIST) return detail::errno_text(errno);
  }
  if (fd < 0) return detail::errno_text(EEXIST);
  bool ok = ::fchmod(fd, mode) == 0;
  int error = errno;
  for (std::size_t done = 0; ok && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      error = errno;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = errno;
  }
  if (ok && ::renameat(dir_fd.get(), temp.c_str(), dir_fd.get(), name.c_str()) != 0) {
    ok = false;
    error = errno;
  }
  if (ok) return "";
  ::unlinkat(dir_fd.get(), temp.c_str(), 0);
  return detail::errno_text(error);
}

std::optional<std::string> read_own_file(const std::string& path, std::size_t max_bytes) {
  const auto [dir, name] = split_path(path);
  std::string why;
  UniqueFd dir_fd(open_trusted_directory(dir, why));
  if (!dir_fd.valid()) return std::nullopt;
  UniqueFd fd(::openat(dir_fd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
      st.st_uid != ::geteuid())
    return std::nullopt;
  std::string text;
  char buffer[4096];
  while (text.size() < max_bytes) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

std::FILE* open_no_follow(const std::string& path, bool append) {
  const auto [dir, name] = split_path(path);
  std::string why;
  UniqueFd dir_fd(open_trusted_directory(dir, why));
  if (!dir_fd.valid()) {
    errno = EACCES;
    return nullptr;
  }
  // O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader.
  UniqueFd fd(::openat(dir_fd.get(), name.c_str(),
                       O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644));
  if (!fd.valid()) return nullptr;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return nullptr;
  // Only a regular file of this user's, and no hard link to another name: a link planted in a
  // shared directory would make the write land in the file it names.
  if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != ::geteuid()) {
    errno = EINVAL;
    return nullptr;
  }
  if (::fcntl(fd.get(), F_SETFL, append ? O_APPEND : 0) != 0) return nullptr;
  if (!append && ::ftruncate(fd.get(), 0) != 0) return nullptr;
  std::FILE* file = ::fdopen(fd.get(), append ? "a" : "w");
  if (file != nullptr) (void)fd.release();
  return file;
}

}  // namespace fencelock::cli
