#include "private_files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>

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

// The directory of `path`, opened for *at() calls; -1 with errno set.
int open_directory(const std::string& dir) {
  return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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

std::string check_replaceable(const std::string& path) {
  const auto [dir, name] = split_path(path);
  UniqueFd dir_fd(open_directory(dir));
  if (!dir_fd.valid()) return fmt::format("its directory: {}", detail::errno_text(errno));
  std::string why;
  if (!writable_regular_or_absent(dir_fd.get(), name, why)) return why;
  if (::faccessat(dir_fd.get(), ".", W_OK, 0) != 0) {
    return fmt::format("its directory: {}", detail::errno_text(errno));
  }
  return "";
}

std::string replace_file(const std::string& path, std::string_view text) {
  const auto [dir, name] = split_path(path);
  UniqueFd dir_fd(open_directory(dir));
  if (!dir_fd.valid()) return fmt::format("its directory: {}", detail::errno_text(errno));
  std::string why;
  if (!writable_regular_or_absent(dir_fd.get(), name, why)) return why;
  std::string temp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    temp = name + ".tmp." + random_suffix();
    fd = ::openat(dir_fd.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0644);
    if (fd < 0 && errno != EEXIST) return detail::errno_text(errno);
  }
  if (fd < 0) return detail::errno_text(EEXIST);
  bool ok = ::fchmod(fd, 0644) == 0;
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

std::FILE* open_no_follow(const std::string& path, bool append) {
  const auto [dir, name] = split_path(path);
  UniqueFd dir_fd(open_directory(dir));
  if (!dir_fd.valid()) return nullptr;
  // O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader.
  UniqueFd fd(::openat(dir_fd.get(), name.c_str(),
                       O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644));
  if (!fd.valid()) return nullptr;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return nullptr;
  if (!S_ISREG(st.st_mode)) {
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
