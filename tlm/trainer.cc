#include "tlm/trainer.h"

#include <cstring>
#include <map>
#include <stdexcept>

#include "hw/config.h"
#include "hw/pe_core.h"

namespace wafersim::tlm {

using compiler::Compiled;
using compiler::LayerPlan;

Trainer::Trainer(const HwConfig& hw, const Compiled& c, const Dataset& data, const Normalize& norm, uint64_t seed,
                 long long first_step)
    : m_c(c), m_step(first_step), m_first_step(first_step) {
  m_enqueued = first_step * c.plan.batch;
  if (static_cast<int>(data.features) != c.plan.layers.front().in) {
    throw ConfigError("the dataset has " + std::to_string(data.features) + " features per sample, the model's input " +
                      std::to_string(c.plan.layers.front().in));
  }
  if (data.classes > c.plan.layers.back().out) {
    throw ConfigError("the dataset has labels up to " + std::to_string(data.classes - 1) + ", the model only " +
                      std::to_string(c.plan.layers.back().out) + " classes");
  }
  if (data.count == 0) throw ConfigError("the dataset is empty");
  m_fabric = std::make_unique<Fabric>(hw);
  m_loaded = load_program(*m_fabric, c.program);
  for (size_t i = 0; i < m_loaded.cores.size(); ++i) {
    for (const Symbol& s : m_loaded.images[i]->symbols) {
      if (s.name == "nupd") m_counters.emplace_back(m_loaded.cores[i], s.addr);
      if (s.name == "drain") m_drain_flags.emplace_back(m_loaded.cores[i], s.addr);
    }
  }
  // Each copy's input rows and labels on its own channels (replicas: sample i of a minibatch
  // to copy i % replicas).
  auto route_of = [&](int r) {
    InputRoute route;
    const LayerPlan& l0 = c.plan.layers.front();
    const compiler::CopyNets& nets = c.routing.copies[static_cast<size_t>(r)];
    for (int a = 0; a < l0.p_in; ++a) {
      route.slices.push_back({c.plan.channel(c.plan.row_channel[static_cast<size_t>(a)], r),
                              c.routing.color(nets.layers[0].xin[static_cast<size_t>(a)]), l0.in_off[static_cast<size_t>(a)],
                              l0.in_len(a)});
    }
    route.label_channel = c.plan.channel(c.plan.loss_channel, r);
    route.label_color = c.routing.color(nets.label);
    return route;
  };
  InputRoute route = route_of(0);
  route.batch = c.plan.batch;
  for (int r = 1; r < c.plan.replicas; ++r) route.copies.push_back(route_of(r));
  m_worker = std::make_unique<InputWorker>(data, route, norm, seed);
  for (int r = 0; r < c.plan.replicas; ++r) {
    m_loss_out.push_back(m_fabric->channel(kWest, c.plan.channel(c.plan.loss_channel, r)));
    m_loss_out.back()->set_auto_drain(false);
  }
  m_limit = static_cast<uint64_t>(50 * c.plan.cycles_per_batch()) + 100000;
  // Let every core run its init task first, so that each minibatch, the first included, starts
  // from the same idle state (a resumed run then repeats the uninterrupted one's cycle counts).
  auto busy = [&] {
    for (const PeCore* core : m_loaded.cores) {
      if (core->running_task() >= 0) return true;
    }
    return false;
  };
  do {
    m_fabric->step();
  } while (busy() && m_fabric->cycle() < 100000);
}

bool Trainer::all_updated(long long n) {
  // Counters only grow: resume the scan at the first PE that was behind last time.
  for (; m_poll < m_counters.size(); ++m_poll) {
    float v;
    m_counters[m_poll].first->read_bytes(m_counters[m_poll].second, &v, 4);
    if (static_cast<long long>(v) < n) return false;
  }
  return true;
}

StepResult Trainer::step(bool drain) {
  const int batch = m_c.plan.batch;
  const int F = m_c.plan.lookahead();
  const long long done = m_step - m_first_step;  // counters restart at 0 on a fresh load
  if (F > 0 && m_drain_written != (drain ? 1 : 0)) {
    // The host's drain command: every PE reads it when its minibatch's last gradient has
    // passed, which is after this write (the previous step ended with every update done).
    m_drain_written = drain ? 1 : 0;
    for (auto& [core, addr] : m_drain_flags) core->write_bytes(addr, &m_drain_written, 4);
  }
  const long long end = (m_step + 1) * batch + (F > 0 && !drain ? F : 0);
  if (end > m_enqueued) {
    m_worker->enqueue(m_enqueued, end - m_enqueued);
    m_enqueued = end;
  }
  const int R = m_c.plan.replicas;
  m_poll = 0;
  StepResult r;
  std::vector<std::vector<float>> got(static_cast<size_t>(R));  // each copy's losses, in its sample order
  got[0] = std::move(m_carry);
  m_carry.clear();
  size_t back = got[0].size();
  const uint64_t start = m_fabric->cycle();
  for (;;) {
    m_worker->pump(*m_fabric);
    if (m_stepper) m_stepper();
    else m_fabric->step();
    Wavelet w;
    for (int k = 0; k < R; ++k) {
      while (m_loss_out[static_cast<size_t>(k)]->try_receive(&w)) {
        float v;
        std::memcpy(&v, &w.payload, 4);
        got[static_cast<size_t>(k)].push_back(v);
        ++back;
      }
    }
    // A step that leaves the next minibatch's first samples on the wafer ends at its last update.
    if (static_cast<int>(back) >= batch && all_updated(done + 1) &&
        ((F > 0 && !drain) || m_fabric->in_flight() == 0)) {
      break;
    }
    if (m_fabric->cycle() - start > m_limit) {
      throw std::runtime_error("minibatch " + std::to_string(m_step + 1) + " did not finish within " +
                               std::to_string(m_limit) + " cycles (" + std::to_string(back) + " of " +
                               std::to_string(batch) + " losses back): the wafer is stuck");
    }
  }
  if (R == 1) {
    r.losses = std::move(got[0]);
    m_carry.assign(r.losses.begin() + batch, r.losses.end());
    r.losses.resize(static_cast<size_t>(batch));
  } else {
    for (int i = 0; i < batch; ++i) r.losses.push_back(got[static_cast<size_t>(i % R)][static_cast<size_t>(i / R)]);
  }
  m_pending = F > 0 && !drain;
  double sum = 0;
  for (float v : r.losses) sum += v;
  r.mean_loss = sum / static_cast<double>(r.losses.size());
  r.cycles = m_fabric->cycle() - start;
  r.step = ++m_step;
  return r;
}

compiler::ModelState Trainer::read_state() const {
  const auto outs = read_outputs(*m_fabric, m_c.program);
  std::map<std::string, const std::vector<float>*> by;
  for (const auto& o : outs) by[o.name] = &o.values;
  compiler::ModelState s;
  s.step = m_step;
  for (const LayerPlan& l : m_c.plan.layers) {
    const size_t nw = l.conv.on ? static_cast<size_t>(l.conv.co) * l.conv.taps() : static_cast<size_t>(l.in) * l.out;
    const size_t nb = l.conv.on ? static_cast<size_t>(l.conv.co) : static_cast<size_t>(l.out);
    std::vector<float> w(nw), v(w.size()), b(nb), vb(b.size());
    for (int a = 0; a < l.p_in; ++a) {
      for (int bb = 0; bb < l.p_out; ++bb) {
        const auto& tw = *by.at(compiler::out_w(l.index, a, bb));
        const auto& tv = *by.at(compiler::out_v(l.index, a, bb));
        for (size_t i = 0; i < tw.size(); ++i) {  // the tile's layout: LayerPlan::weight_index
          w[l.weight_index(a, bb, static_cast<long>(i))] = tw[i];
          v[l.weight_index(a, bb, static_cast<long>(i))] = tv[i];
        }
      }
    }
    for (int bb = 0; bb < l.p_out; ++bb) {
      const auto& tb = *by.at(compiler::out_b(l.index, bb));
      const auto& tvb = *by.at(compiler::out_vb(l.index, bb));
      for (int o = 0; o < l.bias_count(bb); ++o) {
        b[static_cast<size_t>(l.bias_first(bb) + o)] = tb[static_cast<size_t>(o)];
        vb[static_cast<size_t>(l.bias_first(bb) + o)] = tvb[static_cast<size_t>(o)];
      }
    }
    s.w.push_back(std::move(w));
    s.v.push_back(std::move(v));
    s.b.push_back(std::move(b));
    s.vb.push_back(std::move(vb));
    auto ln = [&](const char* what) {
      auto it = by.find(compiler::out_ln(what, l.index));
      return it == by.end() ? std::vector<float>{} : *it->second;
    };
    s.lg.push_back(ln("g"));
    s.lb.push_back(ln("b"));
    s.lvg.push_back(ln("vg"));
    s.lvb.push_back(ln("vb"));
  }
  return s;
}

std::vector<uint64_t> Trainer::layer_busy() const {
  m_fabric->settle_agents();
  std::vector<uint64_t> busy(m_c.plan.layers.size(), 0);
  for (const LayerPlan& l : m_c.plan.layers) {
    auto add = [&](std::pair<int, int> xy0) {
      for (int r = 0; r < m_c.plan.replicas; ++r) {
        const auto xy = m_c.plan.at(xy0, r);
        if (const auto* core = m_fabric->agent_as<PeCore>(xy.first, xy.second)) busy[static_cast<size_t>(l.index)] += core->stats().busy;
      }
    };
    for (int a = 0; a < l.p_in; ++a) {
      for (int b = 0; b < l.p_out; ++b) add(l.tile_xy(a, b));
    }
    for (int b = 0; b < l.p_out; ++b) add(l.root_xy(b));
  }
  return busy;
}

}  // namespace wafersim::tlm
