// Test helper: reads a timeline file (docs/observability.md, "Timeline") as JSON. A file that a
// killed process left unterminated gets its closing "]" first, as the docs tell users to do.
#pragma once

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace edl::test {

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The events of the file; *closed tells whether the writer had closed the array itself.
inline nlohmann::json read_timeline(const std::string& path, bool* closed = nullptr) {
  std::string text = read_text(path);
  size_t end = text.find_last_not_of(" \n\r\t");
  const bool was_closed = end != std::string::npos && text[end] == ']';
  if (closed) *closed = was_closed;
  if (!was_closed) text += "\n]";
  return nlohmann::json::parse(text);
}

// Events named `name` (any phase other than metadata).
inline std::vector<nlohmann::json> events_named(const nlohmann::json& all, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& e : all)
    if (e.value("name", "") == name && e.value("ph", "") != "M") out.push_back(e);
  return out;
}

// The metadata event named `name` (null when absent).
inline nlohmann::json metadata(const nlohmann::json& all, const std::string& name) {
  for (const auto& e : all)
    if (e.value("name", "") == name && e.value("ph", "") == "M") return e;
  return nullptr;
}

inline std::string temp_path(const std::string& what) {
  return "/tmp/edl_timeline_" + what + "_" + std::to_string(::getpid()) + ".json";
}

}  // namespace edl::test
