// EdgeBridge: the link between a CS-2's host side (12 x 100 GbE) and the wafer's edge I/O
// channels, as a loosely timed TLM-2.0 target. A WRITE turns its payload into wavelets and feeds
// them to one channel; a READ collects wavelets that the fabric sent to one channel.
//
// Address map (bits not listed must be 0, else TLM_ADDRESS_ERROR_RESPONSE):
//   bits [4:0]   wavelet color
//   bits [15:8]  channel index on its edge (Fabric::channel numbering, north to south)
//   bit  16      edge: 0 West, 1 East                   address(side, channel, color) builds it
// One address is one stream: a channel carries one color per bridge address. Data are 32-bit
// little-endian payload words, one wavelet each (byte 4i is bits [7:0] of word i); data
// wavelets only (the control bit is 0 on WRITE and not visible on READ). The streaming width
// may be anything that is a whole number of words or >= the length: every word goes to the
// same stream anyway.
//
// Timing. b_transport first syncs: it waits out the caller's annotated delay (so callers must be
// SC_THREADs) and starts at that time, `start`. The wafer's fabric is stepped by a Wafer module
// on a clock of `clock_period` in the same simulation; the bridge never steps it. The bridge
// acts between fabric cycles: a timed wait ends in the first delta of its time step, before the
// Wafer's SC_METHOD on that clock edge, so at an edge the bridge sees every earlier cycle
// completed and not yet the one the edge steps (a WRITE at the edge of cycle k can be taken in k).
// - WRITE of B bytes: the words are offered to the channel in order, one try_inject each; when
//   the channel refuses (its host-side queue of io.queue_depth wavelets is full because the
//   wafer backs up), the bridge waits one clock period and offers the same word again. A word is
//   accepted when it enters that queue, not when it enters the fabric; the last queue_depth
//   words may still be in the queue when the WRITE completes.
// - READ of B bytes: the bridge takes B / 4 wavelets from the channel in arrival order
//   (try_receive), polling once per clock period while none is there.
// - Both end at
//     end = max(start + link_time(B), time the last wavelet was accepted / taken)
//     link_time(B) = latency_ns + B * 8 / link_gbps   (ns, rounded once to the time resolution)
//   b_transport returns (kernel time) once the channel work is done, i.e. at the second term,
//   and annotates the rest, end - now, in `delay` (loosely timed: the caller waits it out or
//   keeps it as its local time offset). So sc_time_stamp() + delay == end on return.
//   The link time only bounds the completion: the channel sees the words as soon as it takes
//   them (not paced to the link rate), and transactions do not share link bandwidth (each gets
//   link_gbps, as in MemoryX).
// - Transactions on one channel and direction are served one after another in call order (a
//   later caller waits inside b_transport, and its `start` is when its turn comes), so the words
//   of two WRITEs never interleave. WRITEs and READs of a channel use different queues and
//   overlap freely.
// - Stall limit: when a WRITE's channel has refused, or a READ has found nothing, for
//   stall_limit_cycles periods in a row, the transaction ends with
//   TLM_GENERIC_ERROR_RESPONSE and SC_REPORT_WARNING (type "wafersim/edge_bridge") naming the
//   channel, the color and how many words had moved. Those words stay moved (a WRITE's are in
//   the channel, a READ's are in the data array).
//
// Errors (the payload's response status, never an exception; last_error() says why):
//   TLM_COMMAND_ERROR_RESPONSE      a command other than READ or WRITE
//   TLM_BYTE_ENABLE_ERROR_RESPONSE  byte enables
//   TLM_BURST_ERROR_RESPONSE        length 0 or not a multiple of 4; a streaming width that
//                                   splits a word
//   TLM_ADDRESS_ERROR_RESPONSE      reserved address bits set; no such channel on that edge; a
//                                   WRITE whose color the edge router does not route in from the
//                                   channel, a READ whose color it does not route out to it
//   TLM_GENERIC_ERROR_RESPONSE      no data pointer; the stall limit; a READ that receives a
//                                   wavelet of another color (it is dropped: one address is one
//                                   stream; the words before it are in the data array)
// These checks take no time: a rejected call returns at once with its delay unchanged. Each
// error response also raises SC_REPORT_WARNING.
//
//   EdgeBridgeConfig cfg;                                 // 1.2 Tb/s, 1 us
//   sc_clock clk("clk", clock_period(hw.fabric.clock_mhz));
//   Wafer wafer("wafer", fabric, cycles, nullptr);  wafer.clk(clk);
//   EdgeBridge bridge("bridge", fabric, cfg, clk.period());
//   host.socket.bind(bridge.socket);
//   ... WRITE 4 * n bytes to EdgeBridge::address(kWest, 0, color) from an SC_THREAD ...
// stats(): bytes in and out, transactions, stall and starve cycles, busy time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/simple_target_socket.h>

namespace wafersim {
class EdgeChannel;
class Fabric;
}  // namespace wafersim

namespace wafersim::tlm {

struct EdgeBridgeConfig {
  double link_gbps = 1200;   // a CS-2's 12 x 100 GbE
  double latency_ns = 1000;  // host to wafer edge, per transaction (not published: grade U)
  uint64_t stall_limit_cycles = 1000000;  // clock periods without progress before an error response
  void validate() const;                  // throws ConfigError
};

struct EdgeBridgeStats {
  uint64_t bytes_in = 0;       // host -> wafer: words the channels accepted, x 4
  uint64_t bytes_out = 0;      // wafer -> host: words READs took, x 4
  uint64_t transactions = 0;   // transactions completed with TLM_OK_RESPONSE
  uint64_t errors = 0;         // transactions answered with an error response
  uint64_t stall_cycles = 0;   // WRITE: periods waited because a channel refused (backpressure)
  uint64_t starve_cycles = 0;  // READ: periods waited for a wavelet to arrive
  sc_core::sc_time busy;       // simulated time with a transaction in progress, start to end
                               // (overlaps counted once, merged in the order transfers finish)
};

class EdgeBridge : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<EdgeBridge> socket;

  // Validates cfg; throws ConfigError for a clock period of 0 too.
  EdgeBridge(sc_core::sc_module_name name, Fabric& fabric, const EdgeBridgeConfig& cfg,
             sc_core::sc_time clock_period);
  ~EdgeBridge() override;

  // The address of a stream: side kWest or kEast, channel index 0..255, color 0..31.
  static uint64_t address(int side, int channel, int color);
  // latency_ns + bytes * 8 / link_gbps.
  sc_core::sc_time link_time(uint64_t bytes) const;
  static double link_ns(const EdgeBridgeConfig& cfg, uint64_t bytes);  // the same, without a module

  const EdgeBridgeConfig& config() const { return m_cfg; }
  sc_core::sc_time clock_period() const { return m_period; }
  const EdgeBridgeStats& stats() const { return m_stats; }
  void reset_stats() {
    m_stats = EdgeBridgeStats();
    m_busy_until = sc_core::SC_ZERO_TIME;
  }
  const std::string& last_error() const { return m_last_error; }

  void b_transport(::tlm::tlm_generic_payload& trans, sc_core::sc_time& delay);

 private:
  struct Lane;    // one channel and direction: serves its transactions in call order
  struct Stream;  // a decoded address

  ::tlm::tlm_response_status check(const ::tlm::tlm_generic_payload& trans, Stream* s,
                                   std::string* why);
  bool write_words(::tlm::tlm_generic_payload& trans, const Stream& s, uint64_t* moved);
  bool read_words(::tlm::tlm_generic_payload& trans, const Stream& s, uint64_t* moved);
  void fail(::tlm::tlm_generic_payload& trans, ::tlm::tlm_response_status status,
            const std::string& why);
  void mark_busy(const sc_core::sc_time& start, const sc_core::sc_time& end);

  Fabric& m_fabric;
  const EdgeBridgeConfig m_cfg;
  const sc_core::sc_time m_period;
  std::vector<std::unique_ptr<Lane>> m_lanes;  // by (side, channel, direction)
  EdgeBridgeStats m_stats;
  sc_core::sc_time m_busy_until;
  std::string m_last_error;
};

}  // namespace wafersim::tlm
