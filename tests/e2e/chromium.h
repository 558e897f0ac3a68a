// Headless Chromium for end-to-end tests of the pages eacgm writes (report --html): each page
// checks itself after drawing into #eacgm-selfcheck; these helpers dump the DOM, read that and
// the page's data, keep a screenshot under build/test-artifacts/html/, and check what every
// page must be.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e_util.h"

namespace e2e {

inline const std::string kChromium = "/usr/bin/chromium";

struct Rendered {
  std::string dom, log;
  nlohmann::json check;  // the page's self-check
  nlohmann::json data;   // the data the page drew
};

inline std::string html_unescape(std::string s) {
  for (auto [from, to] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}})
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += std::strlen(to))
      s.replace(at, std::strlen(from), to);
  return s;
}

// Chromium as the machine allows (root: no sandbox; no network: nothing of Google's fetched),
// in a profile of its own, bounded by `timeout`, which ends its whole process group.
inline RunResult chromium(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/usr/bin/timeout",
                                "-k",
                                "5",
                                "60",
                                kChromium,
                                "--headless",
                                "--no-sandbox",
                                "--disable-gpu",
                                "--disable-quic",
                                "--no-first-run",
                                "--disable-background-networking",
                                "--disable-component-update",
                                "--disable-sync",
                                "--user-data-dir=" + dir + "/chromium-profile",
                                "--virtual-time-budget=20000",
                                "--enable-logging=stderr",
                                "--v=0"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {}, 80);
}

inline Rendered render(const std::string& page, const std::string& name) {
  Rendered r;
  std::string dir = std::filesystem::path(page).parent_path().string();
  auto dumped = chromium(dir, {"--dump-dom", "file://" + page});
  EXPECT_EQ(dumped.exit_code, 0) << dumped.err;
  r.dom = dumped.out;
  r.log = dumped.err;
  // (std::regex recurses per character: no good on a 1.5 MB page)
  auto element = [&](const std::string& open) {
    size_t at = r.dom.find(open);
    if (at == std::string::npos) return std::string();
    at += open.size();
    return r.dom.substr(at, r.dom.find('<', at) - at);
  };
  r.check = nlohmann::json::parse(
      html_unescape(element("<pre id=\"eacgm-selfcheck\" hidden=\"\">")), nullptr, false);
  r.data = nlohmann::json::parse(element("<script type=\"application/json\" id=\"eacgm-data\">"),
                                 nullptr, false);
  // the screenshot, kept as the test's artifact
  std::string artifacts = std::string(EACGM_ARTIFACT_DIR) + "/html";
  std::filesystem::create_directories(artifacts);
  auto shot = chromium(dir, {"--window-size=1300,5000", "--hide-scrollbars",
                             "--screenshot=" + artifacts + "/" + name + ".png", "file://" + page});
  EXPECT_EQ(shot.exit_code, 0) << shot.err;
  EXPECT_TRUE(std::filesystem::exists(artifacts + "/" + name + ".png"));
  std::filesystem::copy_file(page, artifacts + "/" + name + ".html",
                             std::filesystem::copy_options::overwrite_existing);
  printf("page and screenshot: %s/%s.{html,png}\n", artifacts.c_str(), name.c_str());
  return r;
}

// What every page must be: drawn, without a JavaScript error, each chart named in `charts` with
// marks in its plot, every anomaly of the table drawn where the table says.
inline void expect_drawn(const Rendered& r, const std::vector<std::string>& charts) {
  ASSERT_TRUE(r.check.is_object()) << "no self-check in the page: it did not finish drawing\n"
                                   << r.log.substr(0, 4000);
  EXPECT_TRUE(r.check.at("errors").empty()) << r.check.at("errors").dump();
  EXPECT_EQ(r.log.find("Uncaught"), std::string::npos) << r.log.substr(0, 4000);
  for (const auto& id : charts) {
    ASSERT_TRUE(r.check.at("charts").contains(id)) << "no chart " << id << ": " << r.check.dump();
    // Lines, areas, bars and heat cells ink far more than 100 pixels of a plot. The anomalies'
    // timeline holds only their crosses, and a recording with a single anomaly has one: 58
    // pixels (the demo beside a busy loop, where only the noisy neighbour stood out); each
    // anomaly's own mark is checked below.
    int least = id == "timeline" ? 40 : 100;
    EXPECT_GT(r.check.at("charts").at(id).at("inked").get<int>(), least)
        << "chart " << id << " has no marks: " << r.check.dump();
  }
  const auto& a = r.check.at("anomalies");
  EXPECT_EQ(a.at("drawn"), a.at("checked")) << a.dump();
}

inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

// The reason a test of a page cannot run here, or "".
inline std::string chromium_missing() {
  return access(kChromium.c_str(), X_OK) == 0
             ? ""
             : "chromium is not installed (scripts/setup.sh installs it)";
}

}  // namespace e2e
