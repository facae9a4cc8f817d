#include "fuzz_support.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace fs = std::filesystem;

// The project's libraries link libsystemc, whose main() needs an sc_main; the fuzzers' main is
// libFuzzer's (or replay_main.cc) and never calls it.
extern "C" int sc_main(int, char**) { return 0; }  // as sysc/kernel/sc_externs.h declares it

namespace wafersim::fuzz {
namespace {

std::string base_dir() {
  if (const char* d = std::getenv("WAFERSIM_FUZZ_TMPDIR"); d && *d) return d;
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return fs::temp_directory_path().string();
}

void remove_scratch() {
  std::error_code ec;
  fs::remove_all(scratch_dir(), ec);
}

}  // namespace

const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors.
  static const std::string* dir = [] {
    auto* d = new std::string(base_dir() + "/wafersim-fuzz-" + std::to_string(getpid()));
    fs::create_directories(*d);
    std::atexit(remove_scratch);
    return d;
  }();
  return *dir;
}

std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) fail("cannot write the scratch file " + path);
  return path;
}

std::string write_scratch(const std::string& name, const std::string& content) {
  return write_scratch(name, reinterpret_cast<const uint8_t*>(content.data()), content.size());
}

std::pair<std::string, std::string> split_two(const uint8_t* data, size_t size) {
  if (size < 4) return {};
  const size_t n = size_t{data[0]} | size_t{data[1]} << 8 | size_t{data[2]} << 16 | size_t{data[3]} << 24;
  const char* p = reinterpret_cast<const char*>(data) + 4;
  const size_t first = std::min(n, size - 4);
  return {std::string(p, first), std::string(p + first, size - 4 - first)};
}

void outcome(const std::string& what) {
  static const bool verbose = std::getenv("WAFERSIM_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::cerr << "  " << what << std::endl;
}

void fail(const std::string& what) {
  std::cerr << "fuzz finding: " << what << std::endl;
  std::abort();
}

}  // namespace wafersim::fuzz
