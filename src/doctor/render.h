// Printing a doctor Report: a table with one mark per (host, check) cell,
// the pair matrices, then one line per failure or warning with its fix; or
// the same verdicts as one JSON document. Pure; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "doctor/report.h"

namespace hpct::doctor {

// The mark of a host's cell in a per-host column: the worst row of that
// check about the host (pairwise rows count for the host they go *to*, where
// a firewall would drop them). "ok", "warn", "FAIL", or "-" (not checked).
std::string cell_mark(const Report& r, const std::string& host, const std::string& check);

std::string render_table(const Report& r);

// {"ready", "exit_code", "quick", "elapsed_s", "ports", "hosts", "checks",
//  "cells": {host: {check: status}}, "rows": [...], "facts", "matrices"}
nlohmann::json render_json(const Report& r);

}  // namespace hpct::doctor
