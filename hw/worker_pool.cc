#include "hw/worker_pool.h"

namespace wafersim {

void SpinBarrier::wait() {
  const uint32_t gen = m_generation.load(std::memory_order_acquire);
  if (m_count.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    m_count.store(m_n, std::memory_order_relaxed);
    m_generation.fetch_add(1, std::memory_order_release);
    return;
  }
  for (int spins = 0; m_generation.load(std::memory_order_acquire) == gen; ++spins) {
    if (spins > 2000) std::this_thread::yield();
  }
}

WorkerPool::WorkerPool(int threads)
    : m_threads(threads), m_start(threads), m_mid(threads), m_end(threads) {
  for (int t = 1; t < threads; ++t) m_workers.emplace_back([this, t] { worker(t); });
}

WorkerPool::~WorkerPool() {
  m_stop = true;
  if (m_threads > 1) m_start.wait();
  for (auto& w : m_workers) w.join();
}

void WorkerPool::run(const std::function<void(int)>& job) {
  if (m_threads == 1) {
    job(0);
    return;
  }
  m_job = &job;
  m_start.wait();
  job(0);
  m_end.wait();
}

void WorkerPool::worker(int t) {
  for (;;) {
    m_start.wait();
    if (m_stop) return;
    (*m_job)(t);
    m_end.wait();
  }
}

}  // namespace wafersim
