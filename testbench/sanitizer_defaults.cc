// Runtime options of the sanitized build (-DWAFERSIM_SANITIZE=ON), compiled into each of its
// executables, so that the tests and the wafersim binary they start (directly, through bash or
// through Python) run with the same options however they are started. ASAN_OPTIONS,
// UBSAN_OPTIONS and LSAN_OPTIONS in the environment still override any of them
// (docs/testing.md). Not in ctest's ENVIRONMENT: gtest_discover_tests passes PROPERTIES on as
// one flat list, and an ENVIRONMENT of more than one variable does not survive that.
//
// exitcode=86: a report must not look like one of wafersim's own exit codes (0, 1, 2, 3, 130,
// 143). The tests check those, so a report in a child process fails the test that started it.
//
// detect_stack_use_after_return=0 (GCC's default, stated because it must stay so): Debian's
// libsystemc 2.3.4 tells ASan about its QuickThreads stack switches, but calls
// __sanitizer_start_switch_fiber with a null fake_stack_save, which makes ASan drop the fake
// stack of the context it leaves. With fake stacks on, the locals they hold vanish at the first
// switch to an SC_THREAD: the WsTrainer on run_ws_train's stack (app/ws_train.cc) reads as zeros
// from WsTrainer::chief(), an "invalid vptr" report on a correct program.

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
