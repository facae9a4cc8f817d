// A fixed team of host threads that run one job per call.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace wafersim {

// Thread 0 is the caller; threads 1..n-1 are workers kept for the pool's lifetime.
//
//   WorkerPool pool(2);
//   pool.run([&](int t) { step_stripe(t); });   // returns when every thread's part is done
//
// A job is a cycle of the fabric (microseconds or less), so the hand-offs spin rather than
// sleep, and each is one store to a cache line of its own that one other thread reads: the
// caller publishes a job number, each worker answers with the number it finished. That is two
// line transfers per worker and job, against several for a shared counting barrier. After a
// few thousand spins a waiting thread yields the processor (a loaded machine).
class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return m_threads; }
  void run(const std::function<void(int)>& job);

 private:
  struct alignas(64) Flag {
    std::atomic<uint64_t> value{0};
  };
  void worker(int t);

  const int m_threads;
  const std::function<void(int)>* m_job = nullptr;
  uint64_t m_jobs = 0;                // jobs published so far (the caller's own count)
  Flag m_go;                          // the number of the job to run (m_jobs); kStop to end
  std::unique_ptr<Flag[]> m_done;     // per worker, the number of the last job it finished
  std::vector<std::thread> m_workers;
  static constexpr uint64_t kStop = ~uint64_t{0};
};

}  // namespace wafersim
