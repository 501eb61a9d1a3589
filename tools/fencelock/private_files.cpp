#include "private_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "core/errno_text.h"

namespace fencelock::cli {

std::string replace_file(const std::string& path, std::string_view text) {
  std::vector<char> temp(path.begin(), path.end());
  for (char c : std::string_view(".tmp.XXXXXX")) temp.push_back(c);
  temp.push_back('\0');
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return detail::errno_text(errno);
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
  if (ok && ::rename(temp.data(), path.c_str()) != 0) {
    ok = false;
    error = errno;
  }
  if (ok) return "";
  ::unlink(temp.data());
  return detail::errno_text(error);
}

std::FILE* open_no_follow(const std::string& path, bool append) {
  const int fd =
      ::open(path.c_str(),
             O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) return nullptr;
  std::FILE* file = ::fdopen(fd, append ? "a" : "w");
  if (file == nullptr) {
    const int error = errno;
    ::close(fd);
    errno = error;
  }
  return file;
}

}  // namespace fencelock::cli
