#include "hw/file_read.h"

#include <cerrno>
#include <algorithm>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace wafersim {
namespace {

std::string stat_problem(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "is a directory, not a file";
  if (!S_ISREG(st.st_mode)) return "is not a regular file (a device, pipe or socket)";
  return "";
}

std::string errno_problem(int e) {
  return std::string("cannot open (") + std::strerror(e) + ")";
}

}  // namespace

std::string regular_file_problem(const std::string& path) {
  struct stat st {};
  if (path.empty()) return "is an empty path";
  if (::stat(path.c_str(), &st) != 0) return errno_problem(errno);
  return stat_problem(st);
}

bool read_regular_file(const std::string& path, uint64_t max_bytes, std::string* bytes, std::string* why) {
  // stat first: opening a FIFO for reading would wait for a writer.
  *why = regular_file_problem(path);
  if (!why->empty()) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = errno_problem(errno);
    return false;
  }
  struct stat st {};
  // The file may have been replaced between the two looks: the open one is what counts.
  if (::fstat(fd, &st) != 0 || !(*why = stat_problem(st)).empty()) {
    if (why->empty()) *why = errno_problem(errno);
    ::close(fd);
    return false;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    *why = "is larger than " + std::to_string(max_bytes) + " bytes (" + std::to_string(size) + ")";
    ::close(fd);
    return false;
  }
  bytes->clear();
  bytes->resize(static_cast<size_t>(size) + 1);  // one byte more: a file that grew shows it
  size_t done = 0;
  while (true) {
    if (done == bytes->size()) {
      if (done > max_bytes) break;
      bytes->resize(static_cast<size_t>(std::min<uint64_t>(max_bytes + 1, done + (done >> 1) + 4096)));
    }
    const ssize_t n = ::read(fd, bytes->data() + done, bytes->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = errno_problem(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done > max_bytes) {
    *why = "is larger than " + std::to_string(max_bytes) + " bytes (it grew while it was read)";
    ::close(fd);
    return false;
  }
  ::close(fd);
  bytes->resize(done);
  return true;
}

}  // namespace wafersim
