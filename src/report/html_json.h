// Numbers for the JSON of `eacgm report --html`: short, and null where they are not finite.
#pragma once
#include <cmath>
#include <nlohmann/json.hpp>

namespace eacgm {

// Rounded to `digits` decimals as the decimal it stands for: an integer divided by a power of
// ten is the double nearest that decimal, which JSON then prints short ("12.345", not
// "12.345000000000001"). Not finite: null (a damaged recording's NaN draws nothing).
inline nlohmann::json rounded(double v, int digits = 3) {
  if (!std::isfinite(v)) return nullptr;
  double scale = std::pow(10.0, digits);
  if (std::fabs(v) * scale >= 9e15) return v;
  return std::round(v * scale) / scale;
}

}  // namespace eacgm
