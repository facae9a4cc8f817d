// How long one hand-off between two host threads takes on this machine: the caller and a
// worker pass a counter back and forth through two cache lines, as WorkerPool does twice per
// simulated cycle with --sim.threads 2 (publish the cycle, answer that it is done). Below that
// round trip per cycle, a second thread cannot pay for itself. Prints one JSON line.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace {
struct alignas(64) Flag {
  std::atomic<uint64_t> value{0};
};
Flag g_go, g_done;
}  // namespace

int main(int argc, char** argv) {
  uint64_t rounds = 2000000;
  if (argc == 3 && std::string(argv[1]) == "--rounds") {
    rounds = std::stoull(argv[2]);
  } else if (argc != 1) {
    std::cerr << "usage: handoff_latency [--rounds N]\n";
    return 2;
  }
  std::thread worker([rounds] {
    for (uint64_t i = 1; i <= rounds; ++i) {
      while (g_go.value.load(std::memory_order_acquire) != i) {
      }
      g_done.value.store(i, std::memory_order_release);
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 1; i <= rounds; ++i) {
    g_go.value.store(i, std::memory_order_release);
    while (g_done.value.load(std::memory_order_acquire) != i) {
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  worker.join();
  const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(rounds);
  std::cout << nlohmann::json{{"rounds", rounds}, {"round_trip_ns", ns}}.dump() << std::endl;
  return 0;
}
