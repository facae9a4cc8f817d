// GoogleTest entry point for the SystemC-linked test executables.
#include <cstdlib>

#include <gtest/gtest.h>
#include <systemc>

// libsystemc's own main() needs an sc_main to link; ours replaces that main and never calls it.
int sc_main(int, char**) { return 0; }

int main(int argc, char** argv) {
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
