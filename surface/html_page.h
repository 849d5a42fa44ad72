// HtmlPage: one self-contained HTML page of text, tables and charts, which `accumcheck report` and `accumcheck
// gallery` write and a browser opens with no network.
//
// Charts are Chart.js 3 (Debian's libjs-chart.js, the single UMD file chart.min.js) configurations, written as JSON
// and drawn into a canvas by the library, which the page carries inline. Chart.js rather than a drawing of our own:
// axes, ticks, legends and scales are what a kept library already does; rather than Vega: Debian ships Vega only as
// 31 modules to load in dependency order (some need d3 packages), Chart.js as one file. Each chart is drawn without
// animation, then the page records on its canvas what the browser drew: `data-drawn-points` (the elements Chart.js
// laid out over every dataset) and `data-painted-pixels` (pixels the canvas holds that are not transparent), so a
// test in a real browser reads the rendered figure from the DOM (properties/surface/report_browser_test.sh), not
// only the HTML we wrote.
//
// Every string given to the page is text and is escaped; nothing a user's file holds becomes markup or script.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace accumcheck::surface {

// Where Chart.js is read from: $ACCUMCHECK_CHART_JS when set, else Debian's
// /usr/share/javascript/chart.js/chart.min.js. Throws std::invalid_argument naming the path and the package that
// provides it when the file is missing.
std::filesystem::path chart_js_path();

// "&", "<", ">", '"' and "'" as entities.
std::string html_escape(std::string_view text);

// A cell of a table: text, optionally marked as a verdict (class "verdict-<kind>": affected, fail, pass, ...).
struct HtmlCell {
  std::string text;
  std::string kind;  // empty: plain text
};

class HtmlPage {
 public:
  explicit HtmlPage(std::string title);

  void heading(int level, std::string_view text, std::string_view id = {});  // level 2..4 (the title is the h1)
  void paragraph(std::string_view text);
  // A one-line verdict in a coloured box: kind is "fail", "pass", "affected", "not affected", "cannot tell", ...
  // (as a class, "not affected" is "verdict-not-affected").
  void verdict(std::string_view kind, std::string_view text);
  void table(const std::vector<std::string>& header, const std::vector<std::vector<HtmlCell>>& rows);
  void code(std::string_view text);  // preformatted, e.g. a command to paste
  void list(const std::vector<std::string>& items);
  // A Chart.js configuration ({"type", "data", "options"}); `id` names the canvas ("chart-<id>"), the caption
  // says what the figure shows. The page sets animation off and responsive off on every chart.
  void chart(std::string_view id, std::string_view caption, nlohmann::json config, int width = 720, int height = 320);
  // Opens and closes a <section> with an id, for pages of several parts (the gallery).
  void begin_section(std::string_view id);
  void end_section();

  // The whole page, with Chart.js read from chart_js_path() inlined once when the page has a chart.
  std::string render() const;

 private:
  std::string title_;
  std::string body_;
  std::vector<std::pair<std::string, nlohmann::json>> charts_;  // canvas id, configuration
};

}  // namespace accumcheck::surface
