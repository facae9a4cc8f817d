// Fabric statistics: a JSON summary and per-PE CSV matrices (rows = y, columns = x) for heatmaps.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "hw/fabric.h"

namespace wafersim {

nlohmann::json fabric_stats_json(const Fabric& fabric);

// Writes stats.json and pe_*.csv into `dir` (which must exist), each atomically.
void write_fabric_stats(const Fabric& fabric, const std::string& dir);

}  // namespace wafersim
