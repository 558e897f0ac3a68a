// `eacgm gmm` reads CSV files a user gives: any bytes either parse to a finite numeric matrix
// or throw eacgm::Error with a message; nothing else.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "detect/csv_matrix.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    eacgm::detect::NumericTable t = eacgm::detect::parse_numeric_csv(text, "fuzz.csv");
    if (!t.column_names.empty() && t.column_names.size() != size_t(t.values.cols())) std::abort();
    if (!t.values.allFinite()) std::abort();
  } catch (const eacgm::Error& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
