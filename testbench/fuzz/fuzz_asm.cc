// Fuzz target: PE assembly text through the assembler (firmware/assembler.h), as `wafersim run`
// assembles a program's images/NAME.s. An AsmError is the documented rejection. An image that
// assembles must also survive both round trips the project promises: disassemble_image's text
// assembles to the identical image, and the binary image format (write_image, read_image)
// reads back the identical image.
#include <sstream>

#include "firmware/assembler.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wafersim;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const AsmTarget target;  // the default core: 48 KB SRAM, 24 colors, 44 descriptor registers
  PeImage img;
  try {
    img = assemble(text, "fuzz.s", target);
  } catch (const AsmError& e) {
    fuzz::outcome(e.what());
    return 0;
  }
  const std::string dis = disassemble_image(img);
  PeImage again;
  try {
    again = assemble(dis, "disassembled.s", target);
  } catch (const AsmError& e) {
    fuzz::fail(std::string("the disassembly does not assemble: ") + e.what() + "\n" + dis);
  }
  if (!(again == img)) fuzz::fail("the disassembly assembles to a different image:\n" + dis);
  std::stringstream bin;
  write_image(img, bin);
  PeImage read;
  try {
    read = read_image(bin, "fuzz.wsimg");
  } catch (const std::runtime_error& e) {
    fuzz::fail(std::string("the binary image does not read back: ") + e.what());
  }
  if (!(read == img)) fuzz::fail("the binary image reads back as a different image");
  fuzz::outcome("assembled: " + std::to_string(img.code.size()) + " instructions");
  return 0;
}
