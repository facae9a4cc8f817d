// Synthetic traffic for the demo, the tests and the benchmarks: programs static per-color routes
// (no destination addresses) and attaches TrafficAgents at the ramps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hw/fabric.h"
#include "hw/traffic_agent.h"

namespace wafersim {

// An inclusive rectangle of PEs, written "x0:x1,y0:y1" on the command line.
struct Region {
  int x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  bool contains(int x, int y) const { return x >= x0 && x <= x1 && y >= y0 && y <= y1; }
  int width() const { return x1 - x0 + 1; }
  int height() const { return y1 - y0 + 1; }
};
Region parse_region(const std::string& text, int width, int height, const char* key);  // "" = all

struct TrafficConfig {
  std::string pattern = "random";  // neighbour, row-broadcast, column-broadcast, reduce, random, hotspot, mixed, file
  double rate = 1.0;               // wavelets per cycle each source offers
  int hops = 8;                    // neighbour: hops East and North
  int flows = 64;                  // random: flows to place
  uint64_t count = 0;              // wavelets per flow; 0 = unbounded
  double drain_prob = 1.0;         // receivers take an arrival with this chance per cycle
  double stall_prob = 0.0;         // senders hold back with this chance per cycle
  std::string region;              // PEs that take part; "" = the whole fabric
  int hotspot_channel = -1;        // East channel the hotspot drains into; -1 = the middle one
  bool record = false;             // agents keep every arrival (for scoreboards)
  std::string routes;              // file: route file to program (see docs/fabric.md)
  double host_memory_gb = 0;       // what a pattern routing every PE may take; 0 = 80 % of this machine's memory
  void validate() const;
};

// What was programmed: flows placed, flows that found no free color, colors used.
struct TrafficPlan {
  std::string pattern;
  int flows = 0;
  int skipped = 0;
  int colors_used = 0;
};

// Collects routes (OR-ing the ports of several paths that share a (PE, color), as trees and
// merges do) and agents, then programs the fabric in one go.
class TrafficBuilder {
 public:
  TrafficBuilder(Fabric& fabric, const TrafficAgentOptions& opts);
  void route(int x, int y, int color, uint8_t rx, uint8_t tx);
  void route(int x, int y, int color, const ColorRoute& full);  // replaces, with switch positions
  // Routes a path of PEs (consecutive neighbours). The first PE takes the flow from its ramp;
  // the last sends it to `exit_port` (the ramp, or off the edge into an I/O channel).
  void path(const std::vector<std::pair<int, int>>& pes, int color, int exit_port);
  TrafficAgent& agent(int x, int y);
  void apply();

 private:
  Fabric& m_fabric;
  TrafficAgentOptions m_opts;
  std::map<std::pair<uint32_t, int>, ColorRoute> m_routes;  // ordered: deterministic programming
  std::map<uint32_t, std::unique_ptr<TrafficAgent>> m_agents;
};

std::vector<std::pair<int, int>> xy_path(int sx, int sy, int dx, int dy);

TrafficPlan program_traffic(Fabric& fabric, const TrafficConfig& cfg);

// Reads a route file into `b`:
//   # comment
//   route X Y COLOR RX TX [RX TX ...]   one (RX, TX) pair per switch position; ports as N+S+E+W+R or -
//   flow X Y COLOR [RATE [COUNT [CTRL_EVERY]]]   a source at that PE's ramp
// A ramp in a route's TX gets a receiving endpoint. Errors name file:line.
int read_route_file(const std::string& path, TrafficBuilder& b, const Fabric& fabric, double default_rate,
                    uint64_t default_count);

}  // namespace wafersim
