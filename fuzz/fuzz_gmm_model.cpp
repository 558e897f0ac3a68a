// Model files (`gmm score --model`, `detect --model`) may be edited or corrupted: any bytes either
// load as a model that scores samples to numbers (never NaN for finite input) or are refused
// with eacgm::Error; a parse error of the JSON itself is refused the same way by the callers.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "detect/detector.h"
#include "detect/gmm.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    auto format = j.is_object() ? j.find("format") : j.end();
    if (format != j.end() && format->is_string() && *format == "eacgm-detector") {
      eacgm::detect::detector_from_json(j);  // detect --model: the groups' models as below
      return 0;
    }
    std::vector<std::string> names;
    eacgm::detect::GaussianMixture m = eacgm::detect::model_from_json(j, &names);
    if (m.n_features() <= 0 || m.n_features() > 64 || m.n_components() > 64) return 0;
    Eigen::MatrixXd x = Eigen::MatrixXd::Zero(3, m.n_features());
    x.row(1).setOnes();
    x.row(2).setConstant(-1e6);
    auto s = eacgm::detect::score_gmm(m, x);
    for (Eigen::Index i = 0; i < x.rows(); ++i)
      if (std::isnan(s.component_log_density(i))) std::abort();
  } catch (const eacgm::Error&) {
  } catch (const nlohmann::json::exception&) {
    std::abort();  // a model file's wrong types must become eacgm::Error, with the file's name
  }
  return 0;
}
