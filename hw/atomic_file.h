// Writes a file so that readers see either the old or the complete new content, never a part.
#pragma once

#include <string>

namespace wafersim {

// Writes "<path>.tmp" and renames it over `path`, so that a killed process leaves the old
// content or the new. `durable` (checkpoints) also syncs the file to the disk before the rename
// and the directory after it, so that a power loss does too (an fsync costs milliseconds; the
// stats and reports, rewritten often, do without). Throws std::runtime_error naming the path.
void write_file_atomic(const std::string& path, const std::string& content, bool durable = false);

}  // namespace wafersim
