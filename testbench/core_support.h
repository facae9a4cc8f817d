// Test rig for PE cores: assemble programs, place them on a small fabric, route colors, run
// until the cores halt, and read their SRAM.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "firmware/assembler.h"
#include "hw/pe_core.h"
#include "test_support.h"

namespace wafersim::test {

class CoreRig {
 public:
  explicit CoreRig(int width, int height = 1) : m_hw(small_config(width, height)) {}
  HwConfig& hw() { return m_hw; }  // change before the first add()

  PeCore* add(int x, int y, const std::string& src) {
    if (!m_f) m_f = std::make_unique<Fabric>(m_hw);
    AsmTarget t;
    t.sram_bytes = static_cast<uint32_t>(m_hw.core.sram_kb) * 1024;
    t.colors = m_hw.router.colors;
    t.dsd_regs = m_hw.core.dsd_regs;
    t.cb16_bias = m_hw.core.cb16_bias;
    const PeImage img = assemble(src, "pe_" + std::to_string(x) + "_" + std::to_string(y) + ".s", t);
    auto core = std::make_unique<PeCore>(m_hw.core, img, pe_id(*m_f, x, y), Fabric::pe_name(x, y));
    PeCore* p = core.get();
    m_f->attach_agent(x, y, std::move(core));
    m_images.push_back(img);
    m_cores.push_back(p);
    return p;
  }
  void route(int x, int y, int color, uint8_t rx, uint8_t tx) {
    if (!m_f) m_f = std::make_unique<Fabric>(m_hw);
    m_f->set_route(x, y, color, ColorRoute::simple(rx, tx));
  }
  Fabric& fabric() { return *m_f; }

  // Steps until every core has halted; returns the cycle in which the last one halted.
  uint64_t run_until_halted(uint64_t limit = 100000) {
    for (uint64_t i = 0; i < limit; ++i) {
      m_f->step();
      bool all = true;
      for (PeCore* c : m_cores) all = all && c->halted();
      if (all) return m_f->cycle() - 1;
    }
    ADD_FAILURE() << "cores did not halt within " << limit << " cycles";
    return limit;
  }
  // The cycle in which `core` halted (steps until it does).
  uint64_t halt_cycle(PeCore* core, uint64_t limit = 100000) {
    for (uint64_t i = 0; i < limit && !core->halted(); ++i) m_f->step();
    EXPECT_TRUE(core->halted());
    return m_f->cycle() - 1;
  }

  uint32_t addr(PeCore* core, const std::string& sym) const {
    for (size_t i = 0; i < m_cores.size(); ++i) {
      if (m_cores[i] == core) {
        const Symbol* s = m_images[i].find(sym);
        if (!s) ADD_FAILURE() << "no symbol " << sym;
        return s ? s->addr : 0;
      }
    }
    ADD_FAILURE() << "unknown core";
    return 0;
  }
  template <typename T>
  std::vector<T> read(PeCore* core, const std::string& sym, size_t n) const {
    std::vector<T> v(n);
    core->read_bytes(addr(core, sym), v.data(), static_cast<uint32_t>(n * sizeof(T)));
    return v;
  }
  std::vector<float> read_f32(PeCore* core, const std::string& sym, size_t n) const { return read<float>(core, sym, n); }
  uint32_t read_u32(PeCore* core, const std::string& sym, size_t i = 0) const { return read<uint32_t>(core, sym, i + 1)[i]; }

 private:
  HwConfig m_hw;
  std::unique_ptr<Fabric> m_f;
  std::vector<PeImage> m_images;
  std::vector<PeCore*> m_cores;
};

}  // namespace wafersim::test
