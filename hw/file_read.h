// Reads a user's input file whole, refusing what is not a regular file (a directory, /dev/zero, a
// pipe, a socket) and what exceeds a size bound, so that no input path can hang the process or
// fill its memory.
//
//   std::string bytes, why;
//   if (!read_regular_file(path, kMaxModelBytes, &bytes, &why)) throw CompileError(path + ": " + why);
#pragma once

#include <cstdint>
#include <string>

namespace wafersim {

// "" when `path` names a regular file (after symlinks); otherwise why not, as a phrase that
// follows the path in a message: "cannot open (No such file or directory)", "is a directory, not
// a file", "is not a regular file (a device, pipe or socket)".
std::string regular_file_problem(const std::string& path);

// Reads the regular file `path` into *bytes. False, with *why set as above or to "is larger than
// N bytes" or "cannot open (...)", for anything else. A FIFO is never opened for reading, so
// it cannot block.
bool read_regular_file(const std::string& path, uint64_t max_bytes, std::string* bytes, std::string* why);

}  // namespace wafersim
