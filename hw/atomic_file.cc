#include "hw/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

namespace wafersim {

void write_file_atomic(const std::string& path, const std::string& content, bool durable) {
  const std::string tmp = path + ".tmp";
  // A failed write leaves no partial .tmp behind (a full disk is the usual cause).
  auto fail = [&](const std::string& what) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(what + ": " + std::strerror(e));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;  // nothing was created: leave whatever is at that path alone
    throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(e));
  }
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      errno = e;
      fail("cannot write " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  // Durable: on the disk before the rename, so that a power loss leaves the old file or the new.
  if (durable && ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    fail("cannot write " + tmp);
  }
  if (::close(fd) != 0) fail("cannot write " + tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp + " to " + path);
  if (!durable) return;
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // the rename itself (best effort: some file systems refuse a directory fsync)
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace wafersim
