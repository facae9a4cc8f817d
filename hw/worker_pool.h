// A fixed team of host threads that run one job per call, with a barrier usable inside the job.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace wafersim {

// Sense-counting barrier that spins briefly, then yields: cycles are short (microseconds), so
// sleeping on a condition variable would cost more than the work.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : m_n(n), m_count(n) {}
  void wait();

 private:
  const int m_n;
  std::atomic<int> m_count;
  std::atomic<uint32_t> m_generation{0};
};

// Thread 0 is the caller; threads 1..n-1 are workers kept for the pool's lifetime.
//
//   WorkerPool pool(2);
//   pool.run([&](int t) { evaluate(t); pool.barrier(); commit(t); });
class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return m_threads; }
  void run(const std::function<void(int)>& job);
  void barrier() { m_mid.wait(); }

 private:
  void worker(int t);

  const int m_threads;
  SpinBarrier m_start, m_mid, m_end;
  const std::function<void(int)>* m_job = nullptr;
  bool m_stop = false;
  std::vector<std::thread> m_workers;
};

}  // namespace wafersim
