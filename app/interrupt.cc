#include "app/interrupt.h"

#include <csignal>
#include <cstring>

#include <unistd.h>

namespace wafersim {
namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_int, g_old_term;

extern "C" void on_interrupt(int sig) {
  if (g_signal) {  // the second one: at once, as if there were no handler
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  const char msg[] = "\nwafersim: interrupted; stopping after the step in progress and writing the results "
                     "(interrupt again to quit at once)\n";
  const ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);  // async-signal-safe
  (void)ignored;
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

bool InterruptGuard::requested() { return g_signal != 0; }
int InterruptGuard::signal_number() { return static_cast<int>(g_signal); }

}  // namespace wafersim
