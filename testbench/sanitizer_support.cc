// What the sanitized build (-DWAFERSIM_SANITIZE=ON) adds to each of its executables (the test
// executables and wafersim): the sanitizers' runtime options, and a correction of libsystemc's
// stack-switch annotations. docs/testing.md says how the build is run.
#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

// The options are compiled in, so that the tests and the wafersim binary they start (directly,
// through bash or through Python) run with the same ones however they are started;
// ASAN_OPTIONS, UBSAN_OPTIONS and LSAN_OPTIONS in the environment still override any of them.
// Not in ctest's ENVIRONMENT: gtest_discover_tests passes PROPERTIES on as one flat list, and an
// ENVIRONMENT of more than one variable does not survive that.
//
// exitcode=86: a report must not look like one of wafersim's own exit codes (0, 1, 2, 3, 130,
// 143). The tests check those, so a report in a child process fails the test that started it.
//
// detect_stack_use_after_return=0 (GCC's default, stated because it must stay so): libsystemc
// calls __sanitizer_start_switch_fiber with a null fake_stack_save, which makes ASan drop the
// fake stack of the context it leaves. With fake stacks on, the locals they hold vanish at the
// first switch to an SC_THREAD: the WsTrainer on run_ws_train's stack (app/ws_train.cc) reads as
// zeros from WsTrainer::chief(), an "invalid vptr" report on a correct program.
extern "C" __attribute__((visibility("default"), used)) const char* __asan_default_options() {
  return "halt_on_error=1:detect_leaks=1:exitcode=86:detect_stack_use_after_return=0:"
         "check_initialization_order=1:strict_string_checks=1";
}

extern "C" __attribute__((visibility("default"), used)) const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1:exitcode=86";
}

extern "C" __attribute__((visibility("default"), used)) const char* __lsan_default_options() {
  return "exitcode=86";
}

// Debian's libsystemc 2.3.4 tells ASan about each QuickThreads switch (sc_cor_pkg_qt::yield),
// passing the stack of the coroutine it switches to. The main coroutine, the thread that called
// sc_start, has no stack of its own there (null, size 0), so after the first switch back to it
// ASan takes the thread's stack to be [0, 0). From then on every exception thrown on that thread
// skips unpoisoning the frames it unwinds ("ASan is ignoring requested __asan_handle_no_return"),
// and the stale poison gives false reports later: the first was a stack-use-after-scope inside
// ASan's own sigaltstack call when HealthCheck::loss threw after a weight-streaming run
// (TrainHealth.NonFiniteFromOptionsOrTheModelStopsTheRun). libsystemc looks the annotation up
// when it is called, so this definition, in the executable, comes before the runtime's: it
// passes the calling thread's real stack for the main coroutine and hands everything else on.
// An ASan report cannot be suppressed by file, and a suppressed one would leave the poison.
extern "C" __attribute__((visibility("default"), used)) void __sanitizer_start_switch_fiber(void** fake_stack_save,
                                                                                           const void* bottom,
                                                                                           size_t size) {
  using Fn = void (*)(void**, const void*, size_t);
  static const Fn next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "__sanitizer_start_switch_fiber"));
  if (!next) {
    std::fputs("sanitizer_support: no __sanitizer_start_switch_fiber after this one\n", stderr);
    std::abort();
  }
  if (!bottom && size == 0) {  // to the main coroutine: the thread's own stack
    thread_local void* addr = nullptr;  // looked up once: glibc reads /proc/self/maps for it
    thread_local size_t bytes = 0;
    if (bytes == 0) {
      pthread_attr_t attr;
      if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &addr, &bytes);
        pthread_attr_destroy(&attr);
      }
    }
    bottom = addr;
    size = bytes;
  }
  next(fake_stack_save, bottom, size);
}
