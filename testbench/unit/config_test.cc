// Options of `wafersim fabric`: parsing, ranges, INI files, precedence and usage errors.
// Every error here is caught before the SystemC model is elaborated, and each test makes at
// most one run_fabric_command call.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "app/fabric_cmd.h"
#include "app/options.h"
#include "test_support.h"

namespace wafersim {
namespace {

using Args = std::vector<std::string>;

struct CmdResult {
  int rc;
  std::string out, err;
};

// One CLI run with stats redirected into the test's scratch directory.
CmdResult run_cmd(Args args) {
  args.push_back("--stats.out");
  args.push_back(test::test_tmp_dir() + "/out");
  std::ostringstream out, err;
  const int rc = run_fabric_command(args, out, err);
  return {rc, out.str(), err.str()};
}

TEST(ConfigCli, UnknownOptionIsUsageErrorNamingIt) {
  const CmdResult r = run_cmd({"--fabric.widht", "16"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("fabric.widht"), std::string::npos) << r.err;
}

// A value outside its documented range: a usage error whose message names the key.
struct RangeCase {
  Args args;
  std::string key;
};

void PrintTo(const RangeCase& c, std::ostream* os) {
  for (const auto& a : c.args) *os << a << ' ';
}

class ConfigRange : public testing::TestWithParam<RangeCase> {};

TEST_P(ConfigRange, OutOfRangeValueIsUsageErrorNamingKey) {
  const CmdResult r = run_cmd(GetParam().args);
  EXPECT_EQ(r.rc, kExitUsage) << r.err;
  EXPECT_NE(r.err.find(GetParam().key), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Values, ConfigRange,
    testing::Values(RangeCase{{"--fabric.width", "0"}, "fabric.width"},
                    RangeCase{{"--fabric.height", "5000"}, "fabric.height"},
                    RangeCase{{"--router.colors", "33"}, "router.colors"},
                    RangeCase{{"--router.colors", "0"}, "router.colors"},
                    RangeCase{{"--router.buffer_depth", "0"}, "router.buffer_depth"},
                    RangeCase{{"--router.hop_latency", "0"}, "router.hop_latency"},
                    RangeCase{{"--traffic.rate", "2"}, "traffic.rate"},
                    RangeCase{{"--traffic.rate", "0"}, "traffic.rate"},
                    RangeCase{{"--traffic.drain_prob", "0"}, "traffic.drain_prob"},
                    RangeCase{{"--traffic.stall_prob", "1"}, "traffic.stall_prob"},
                    RangeCase{{"--sim.threads", "0"}, "sim.threads"},
                    RangeCase{{"--sim.threaded_visits", "-1"}, "sim.threaded_visits"},
                    RangeCase{{"--sim.visit_order", "sideways"}, "sim.visit_order"},
                    RangeCase{{"--sim.watchdog_cycles", "3"}, "sim.watchdog_cycles"}),
    [](const testing::TestParamInfo<RangeCase>& info) {
      std::string n = info.param.key + "_" + std::to_string(info.index);
      for (char& c : n) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return n;
    });

TEST(ConfigCli, NonNumericValueIsUsageError) {
  const CmdResult r = run_cmd({"--fabric.width", "wide"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("fabric.width"), std::string::npos) << r.err;
}

TEST(ConfigIni, LineWithoutEqualsIsUsageErrorNamingFile) {
  const std::string ini = test::test_tmp_dir() + "/bad_syntax.ini";
  test::write_text(ini, "[fabric]\nwidth = 16\nthis line has no equals sign\n");
  const CmdResult r = run_cmd({"--config", ini});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find(ini), std::string::npos) << r.err;
}

TEST(ConfigIni, UnknownKeyIsUsageErrorNamingFileAndKey) {
  const std::string ini = test::test_tmp_dir() + "/unknown_key.ini";
  test::write_text(ini, "[fabric]\nwidth = 16\nbogus_key = 3\n");
  const CmdResult r = run_cmd({"--config", ini});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find(ini), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bogus_key"), std::string::npos) << r.err;
}

TEST(ConfigIni, OutOfRangeValueInFileIsUsageError) {
  const std::string ini = test::test_tmp_dir() + "/range.ini";
  test::write_text(ini, "[router]\ncolors = 40\n");
  const CmdResult r = run_cmd({"--config", ini});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("router.colors"), std::string::npos) << r.err;
}

TEST(ConfigIni, MissingFileIsUsageErrorNamingIt) {
  const std::string ini = test::test_tmp_dir() + "/does_not_exist.ini";
  const CmdResult r = run_cmd({"--config", ini});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find(ini), std::string::npos) << r.err;
}

TEST(ConfigIni, CommandLineOverridesFileAndResolvedIniHasFinalValues) {
  const std::string ini = test::test_tmp_dir() + "/base.ini";
  test::write_text(ini,
                   "# base settings\n"
                   "[fabric]\nwidth = 20\nheight = 10\n"
                   "[router]\nbuffer_depth = 6\nhop_latency = 3\n"
                   "[traffic]\npattern = reduce\n");
  FabricRunConfig cfg;
  std::ostringstream out;
  ASSERT_TRUE(parse_fabric_options({"--config", ini, "--fabric.width", "12", "--router.hop_latency", "2"}, &cfg, out));
  // Command line wins ...
  EXPECT_EQ(cfg.hw.fabric.width, 12);
  EXPECT_EQ(cfg.hw.router.hop_latency, 2);
  // ... the file fills what the command line does not set ...
  EXPECT_EQ(cfg.hw.fabric.height, 10);
  EXPECT_EQ(cfg.hw.router.buffer_depth, 6);
  EXPECT_EQ(cfg.traffic.pattern, "reduce");
  // ... and defaults fill the rest.
  EXPECT_EQ(cfg.hw.router.colors, RouterConfig{}.colors);
  EXPECT_EQ(cfg.config_file, ini);

  const std::string& r = cfg.resolved_ini;
  const auto fabric = r.find("[fabric]"), router = r.find("[router]"), traffic = r.find("[traffic]");
  ASSERT_NE(fabric, std::string::npos) << r;
  ASSERT_NE(router, std::string::npos) << r;
  ASSERT_NE(traffic, std::string::npos) << r;
  auto in_section = [&](size_t section, const std::string& line) {
    const size_t at = r.find("\n" + line + "\n", section);
    const size_t next = r.find("\n[", section + 1);
    return at != std::string::npos && (next == std::string::npos || at < next);
  };
  EXPECT_TRUE(in_section(fabric, "width = 12")) << r;
  EXPECT_TRUE(in_section(fabric, "height = 10")) << r;
  EXPECT_TRUE(in_section(router, "buffer_depth = 6")) << r;
  EXPECT_TRUE(in_section(router, "hop_latency = 2")) << r;
  EXPECT_TRUE(in_section(traffic, "pattern = reduce")) << r;
  EXPECT_EQ(r.find("width = 20"), std::string::npos) << r;
  EXPECT_EQ(r.find("hop_latency = 3"), std::string::npos) << r;
}

TEST(ConfigIni, ResolvedIniParsesBackToTheSameConfig) {
  FabricRunConfig first;
  std::ostringstream out;
  ASSERT_TRUE(parse_fabric_options({"--fabric.width", "33", "--sim.visit_order", "shuffle", "--traffic.rate", "0.25",
                                    "--io.channel_gbps", "6.8"},
                                   &first, out));
  const std::string ini = test::test_tmp_dir() + "/resolved.ini";
  test::write_text(ini, first.resolved_ini);
  FabricRunConfig second;
  ASSERT_TRUE(parse_fabric_options({"--config", ini}, &second, out));
  EXPECT_EQ(second.hw.fabric.width, 33);
  EXPECT_EQ(second.hw.sim.visit_order, VisitOrder::kShuffle);
  EXPECT_DOUBLE_EQ(second.traffic.rate, 0.25);
  EXPECT_DOUBLE_EQ(second.hw.io.channel_gbps, 6.8);
  EXPECT_EQ(second.resolved_ini, first.resolved_ini);
}

TEST(ConfigCli, TraceVcdWithoutRegionIsUsageError) {
  const std::string dir = test::test_tmp_dir();
  const CmdResult r = run_cmd({"--fabric.width", "8", "--fabric.height", "8", "--trace.vcd", dir + "/t.vcd"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("trace.region"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/t.vcd"));
}

TEST(ConfigCli, TraceRegionOutsideFabricIsUsageError) {
  const CmdResult r = run_cmd({"--fabric.width", "8", "--fabric.height", "8", "--trace.vcd",
                               test::test_tmp_dir() + "/t.vcd", "--trace.region", "0:8,0:1"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("trace.region"), std::string::npos) << r.err;
}

TEST(ConfigCli, UnknownTrafficPatternIsUsageErrorListingChoices) {
  const CmdResult r = run_cmd({"--traffic.pattern", "zigzag"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("zigzag"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("traffic.pattern"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("neighbour"), std::string::npos) << r.err;  // the valid choices are listed
}

TEST(ConfigCli, HelpReturnsOkAndListsOptions) {
  const CmdResult r = run_cmd({"--help"});
  EXPECT_EQ(r.rc, kExitOk);
  for (const char* opt : {"--config", "--fabric.width", "--router.colors", "--io.channel_gbps", "--sim.threads",
                          "--sim.watchdog_cycles", "--traffic.pattern", "--stats.out", "--trace.vcd", "--trace.region"}) {
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt << " missing from help:\n" << r.out;
  }
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(ConfigParse, HelpMakesParseReturnFalse) {
  FabricRunConfig cfg;
  std::ostringstream out;
  EXPECT_FALSE(parse_fabric_options({"-h"}, &cfg, out));
  EXPECT_NE(out.str().find("--fabric.height"), std::string::npos);
}

TEST(ConfigParse, DefaultsAreTheWse2Figures) {
  FabricRunConfig cfg;
  std::ostringstream out;
  ASSERT_TRUE(parse_fabric_options({}, &cfg, out));
  EXPECT_EQ(cfg.hw.fabric.width, 757);
  EXPECT_EQ(cfg.hw.fabric.height, 996);
  EXPECT_EQ(cfg.hw.router.colors, 24);
  EXPECT_EQ(cfg.hw.sim.threads, 1);
  EXPECT_EQ(cfg.hw.sim.visit_order, VisitOrder::kForward);
  EXPECT_EQ(cfg.traffic.pattern, "random");
}

// -o is --stats.out, as -o is the output directory of train, compile and kernel.
TEST(ConfigParse, ShortOutputOptionIsStatsOut) {
  FabricRunConfig cfg;
  std::ostringstream out;
  ASSERT_TRUE(parse_fabric_options({"-o", "there"}, &cfg, out));
  EXPECT_EQ(cfg.stats.out, "there");
  RunConfig run;
  ASSERT_TRUE(parse_run_options({"prog", "-o", "here"}, &run, out));
  EXPECT_EQ(run.stats.out, "here");
}

TEST(ConfigParse, ErrorsAreConfigErrors) {
  FabricRunConfig cfg;
  std::ostringstream out;
  EXPECT_THROW(parse_fabric_options({"--no-such-option"}, &cfg, out), ConfigError);
  FabricRunConfig cfg2;
  EXPECT_THROW(parse_fabric_options({"--router.ramp_latency", "65"}, &cfg2, out), ConfigError);
}

// What the option parser itself lets through: a negative number for an unsigned option (it
// would wrap around), a value that is not a finite number, a stray argument, a directory for
// the INI file; each a ConfigError naming the option, on the command line and in an INI file.
std::string parse_error(const Args& args) {
  FabricRunConfig cfg;
  std::ostringstream out;
  try {
    parse_fabric_options(args, &cfg, out);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigParse, NegativeUnsignedValuesAreRejected) {
  for (const char* key : {"--sim.seed", "--sim.cycles", "--sim.watchdog_cycles", "--traffic.count", "--stats.warmup",
                          "--stats.interval"}) {
    const std::string e = parse_error({key, "-1"});
    EXPECT_NE(e.find(std::string(key + 2) + " must not be negative, got -1"), std::string::npos) << key << ": " << e;
  }
  EXPECT_NE(parse_error({"--sim.seed=-7"}).find("sim.seed must not be negative"), std::string::npos);
  const std::string ini = test::test_tmp_dir() + "/neg.ini";
  test::write_text(ini, "[sim]\nseed = -3\n");
  const std::string e = parse_error({"--config", ini});
  EXPECT_NE(e.find("neg.ini': sim.seed must not be negative, got -3"), std::string::npos) << e;
  EXPECT_EQ(parse_error({"--sim.seed", "5", "--traffic.hotspot_channel", "-1"}), "");  // signed options keep -1
}

// Boost.Program_options fills in its messages by replacing placeholders such as %value% until
// none is left: a value or an option name holding its own placeholder made the parser loop
// forever, on the command line and in INI files (found by fuzz_ini). Such text is a usage
// error of its own.
TEST(ConfigParse, PlaceholderTextIsUsageErrorNotAHang) {
  CmdResult r = run_cmd({"--fabric.width", "%value%"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("'%value%'"), std::string::npos) << r.err;
  r = run_cmd({"--%canonical_option%", "1"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("'%canonical_option%'"), std::string::npos) << r.err;
  const std::string ini = test::test_tmp_dir() + "/placeholder.ini";
  test::write_text(ini, "[fabric]\nwidth = 16\nheight = argument ('%value%')16\n");
  r = run_cmd({"--config", ini});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("config file '" + ini + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'%value%'"), std::string::npos) << r.err;
  // A bool's value is lowercased before the parser reports it: '%VALUE%' too (it hung).
  std::ostringstream help;
  RunConfig rc;
  try {
    parse_run_options({"program-dir", "--core.lazy", "fal %VaLuE%"}, &rc, help);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'%VaLuE%'"), std::string::npos) << e.what();
  }
  // A lone percent sign is just text.
  r = run_cmd({"--fabric.width", "16%"});
  EXPECT_EQ(r.err.find("placeholder"), std::string::npos) << r.err;
}

TEST(ConfigParse, NonFiniteNumbersAreRejected) {
  EXPECT_NE(parse_error({"--fabric.clock_mhz", "nan"}).find("fabric.clock_mhz must be a finite number, got nan"),
            std::string::npos);
  EXPECT_NE(parse_error({"--io.channel_gbps", "nan"}).find("io.channel_gbps must be a finite number"), std::string::npos);
  EXPECT_NE(parse_error({"--traffic.rate", "inf"}).find("traffic.rate must be a finite number"), std::string::npos);
  const std::string ini = test::test_tmp_dir() + "/nan.ini";
  test::write_text(ini, "[io]\nchannel_gbps = nan\n");
  EXPECT_NE(parse_error({"--config", ini}).find("io.channel_gbps must be a finite number"), std::string::npos);
}

TEST(ConfigParse, StrayArgumentsAndDirectoriesAreRejected) {
  EXPECT_NE(parse_error({"routes.txt"}).find("unexpected argument 'routes.txt'"), std::string::npos);
  EXPECT_NE(parse_error({"--config", test::test_tmp_dir()}).find("is not a regular file"), std::string::npos);
  EXPECT_NE(parse_error({"--traffic.hotspot_channel", "-5"}).find("traffic.hotspot_channel must be -1"), std::string::npos);
}

TEST(ConfigParse, TraceFileMustBeWritableFile) {
  const std::string dir = test::test_tmp_dir();
  EXPECT_NE(parse_error({"--trace.vcd", dir + "/", "--trace.region", "0:1,0:1"}).find("names a directory"), std::string::npos);
  EXPECT_NE(parse_error({"--trace.vcd", dir, "--trace.region", "0:1,0:1"}).find("names a directory"), std::string::npos);
  test::write_text(dir + "/plain", "x");
  EXPECT_NE(parse_error({"--trace.vcd", dir + "/plain/t.vcd", "--trace.region", "0:1,0:1"}).find("cannot write trace.vcd"),
            std::string::npos);
  EXPECT_EQ(parse_error({"--trace.vcd", dir + "/new/t.vcd", "--trace.region", "0:1,0:1"}), "");  // its directory is made
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/new"));
}

TEST(ConfigStructs, HwConfigValidateNamesTheKey) {
  HwConfig c;
  c.io.queue_depth = 0;
  try {
    c.validate();
    FAIL() << "io.queue_depth = 0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("io.queue_depth"), std::string::npos) << e.what();
  }
  HwConfig ok;
  EXPECT_NO_THROW(ok.validate());
  EXPECT_THROW(parse_visit_order("backward"), ConfigError);
  EXPECT_EQ(parse_visit_order(visit_order_name(VisitOrder::kReverse)), VisitOrder::kReverse);
}

}  // namespace
}  // namespace wafersim
