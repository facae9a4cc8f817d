// What the fuzz targets of testbench/fuzz share: a scratch directory for the APIs that take a
// path, inputs that carry two files, and the abort that turns an unexpected outcome into a
// finding libFuzzer keeps (docs/fuzzing.md).
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     const std::string path = fuzz::write_scratch("model.onnx", data, size);
//     ...
//     if (rc == kExitRuntime) fuzz::fail("unexpected exception: " + err.str());
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace wafersim::fuzz {

// This process's scratch directory, made on first use and removed at a normal exit:
// $WAFERSIM_FUZZ_TMPDIR/fuzz-PID (the replay tests put it in the build tree), else under
// /dev/shm (tmpfs: no disk traffic per execution), else under /tmp.
const std::string& scratch_dir();

// Writes the bytes to scratch_dir()/name (replacing the file) and returns its path.
std::string write_scratch(const std::string& name, const uint8_t* data, size_t size);
std::string write_scratch(const std::string& name, const std::string& content);

// An input carrying two files (samples and labels): a 4-byte little-endian length N, then N
// bytes of the first file (fewer if the input ends), then the second file. Inputs shorter than
// 4 bytes are two empty files. testbench/fuzz/make_seeds.py writes seeds so.
std::pair<std::string, std::string> split_two(const uint8_t* data, size_t size);

// The outcome of an input (a rejection's message, "accepted"), printed to stderr only when
// WAFERSIM_FUZZ_VERBOSE is set: to see what a corpus exercises (replay binary) or why.
void outcome(const std::string& what);

// A finding: prints `what` to stderr and aborts, so that libFuzzer saves the input as a crash
// (and a replay test fails).
[[noreturn]] void fail(const std::string& what);

}  // namespace wafersim::fuzz
