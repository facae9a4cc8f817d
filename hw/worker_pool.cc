#include "hw/worker_pool.h"

#include <exception>

namespace wafersim {

namespace {

// Spins until pred() holds, yielding the processor after a while.
template <typename Pred>
void spin_until(Pred pred) {
  for (int spins = 0; !pred(); ++spins) {
    if (spins > 4000) std::this_thread::yield();
  }
}

}  // namespace

WorkerPool::WorkerPool(int threads) : m_threads(threads), m_done(new Flag[static_cast<size_t>(threads)]) {
  for (int t = 1; t < threads; ++t) m_workers.emplace_back([this, t] { worker(t); });
}

WorkerPool::~WorkerPool() {
  m_go.value.store(kStop, std::memory_order_release);
  for (auto& w : m_workers) w.join();
}

void WorkerPool::run(const std::function<void(int)>& job) {
  if (m_threads == 1) {
    job(0);
    return;
  }
  m_job = &job;
  const uint64_t n = ++m_jobs;
  m_go.value.store(n, std::memory_order_release);  // publishes m_job and what the caller wrote before
  std::exception_ptr failed;
  try {
    job(0);
  } catch (...) {
    failed = std::current_exception();  // the workers finish their part first
  }
  for (int t = 1; t < m_threads; ++t) {
    const std::atomic<uint64_t>& done = m_done[static_cast<size_t>(t)].value;
    spin_until([&] { return done.load(std::memory_order_acquire) == n; });
  }
  if (failed) std::rethrow_exception(failed);
}

void WorkerPool::worker(int t) {
  uint64_t last = 0;
  for (;;) {
    uint64_t n = 0;
    spin_until([&] { return (n = m_go.value.load(std::memory_order_acquire)) != last; });
    if (n == kStop) return;
    last = n;
    (*m_job)(t);
    m_done[static_cast<size_t>(t)].value.store(n, std::memory_order_release);
  }
}

}  // namespace wafersim
