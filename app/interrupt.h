// SIGINT and SIGTERM during a long run (`train`, `fabric`): the first one asks the run to stop
// after the step or cycle in progress and write what it has (checkpoint, losses, reports,
// stats), then exit with 128 + the signal; a second one ends the process at once.
//
//   InterruptGuard guard;                        // for the length of the run
//   while (more && !InterruptGuard::requested()) step();
//   if (InterruptGuard::requested()) return InterruptGuard::exit_code();
#pragma once

namespace wafersim {

class InterruptGuard {
 public:
  InterruptGuard();   // installs the handlers (and forgets an earlier request)
  ~InterruptGuard();  // restores the ones it replaced
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  static bool requested();
  static int signal_number();  // 0 when none came
  static int exit_code() { return 128 + signal_number(); }
};

}  // namespace wafersim
