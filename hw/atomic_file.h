// Writes a file so that readers see either the old or the complete new content, never a part.
#pragma once

#include <string>

namespace wafersim {

// Writes to "<path>.tmp", then renames over `path`. Throws std::runtime_error naming the path.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace wafersim
