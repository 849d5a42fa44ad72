// HtmlPage: text, tables and Chart.js charts in one self-contained page (surface/html_page.h).
#include "surface/html_page.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace accumcheck::surface {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path chart_js_path() {
  const char* env = std::getenv("ACCUMCHECK_CHART_JS");
  const fs::path path = env && *env ? fs::path(env) : fs::path("/usr/share/javascript/chart.js/chart.min.js");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw std::invalid_argument("the page's charts need Chart.js at " + path.string() +
                                ", which is missing: install Debian's libjs-chart.js (scripts/install-deps.sh does), or "
                                "point ACCUMCHECK_CHART_JS at a chart.min.js of Chart.js 3");
  return path;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// A verdict word as a CSS class: "not affected" -> "not-affected" (letters and digits kept, anything else '-').
std::string class_name(std::string_view kind) {
  std::string out;
  for (const char c : kind) out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : '-';
  return out;
}

// JSON inside a <script> element: "</" would end the element early, so every '<' is written as \u003c, which
// JSON.parse and JavaScript read as the same character.
std::string script_safe_json(const json& j) {
  const std::string text = j.dump();
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) throw std::invalid_argument("cannot read " + path.string());
  return text.str();
}

constexpr std::string_view kStyle = R"(
body { font-family: "DejaVu Sans", Arial, sans-serif; max-width: 1000px; margin: 24px auto; padding: 0 16px; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; } h3 { margin-top: 1.2em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
pre { background: #f6f6f6; border: 1px solid #ddd; padding: 8px; overflow-x: auto; font-size: 0.9em; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #555; max-width: 720px; }
.verdict { padding: 8px 12px; border-radius: 4px; font-weight: bold; margin: 0.8em 0; }
.verdict-fail, .verdict-affected, .verdict-target-fault { background: #fde2e1; border: 1px solid #d9534f; }
.verdict-pass, .verdict-not-affected, .verdict-clean { background: #e3f4e1; border: 1px solid #4cae4c; }
.verdict-cannot-tell, .verdict-cannot-run, .verdict-unchecked { background: #fff4d6; border: 1px solid #e0a800; }
td.verdict-fail, td.verdict-affected, td.verdict-target-fault { background: #fde2e1; }
td.verdict-pass, td.verdict-not-affected, td.verdict-clean { background: #e3f4e1; }
td.verdict-cannot-tell, td.verdict-cannot-run, td.verdict-unchecked { background: #fff4d6; }
)";

// Draws every chart, then records on each canvas what was drawn (html_page.h says why).
constexpr std::string_view kDrawScript = R"(
(function () {
  var charts = JSON.parse(document.getElementById('accumcheck-charts').textContent);
  charts.forEach(function (c) {
    var canvas = document.getElementById(c.id);
    try {
      var chart = new Chart(canvas.getContext('2d'), c.config);
      var points = 0;
      for (var d = 0; d < chart.data.datasets.length; d++) points += chart.getDatasetMeta(d).data.length;
      var pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      var painted = 0;
      for (var i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) painted++;
      canvas.setAttribute('data-drawn-points', String(points));
      canvas.setAttribute('data-painted-pixels', String(painted));
    } catch (e) {
      canvas.setAttribute('data-chart-error', String(e));
    }
  });
  document.body.setAttribute('data-charts-drawn', String(charts.length));
})();
)";

}  // namespace

HtmlPage::HtmlPage(std::string title) : title_(std::move(title)) {}

void HtmlPage::heading(int level, std::string_view text, std::string_view id) {
  level = std::clamp(level, 2, 4);
  body_ += fmt::format("<h{0}{1}>{2}</h{0}>\n", level, id.empty() ? "" : fmt::format(" id=\"{}\"", html_escape(id)),
                       html_escape(text));
}

void HtmlPage::paragraph(std::string_view text) { body_ += "<p>" + html_escape(text) + "</p>\n"; }

void HtmlPage::verdict(std::string_view kind, std::string_view text) {
  body_ += fmt::format("<div class=\"verdict verdict-{}\" data-verdict=\"{}\">{}</div>\n", class_name(kind), html_escape(kind),
                       html_escape(text));
}

void HtmlPage::table(const std::vector<std::string>& header, const std::vector<std::vector<HtmlCell>>& rows) {
  body_ += "<table>\n<tr>";
  for (const auto& h : header) body_ += "<th>" + html_escape(h) + "</th>";
  body_ += "</tr>\n";
  for (const auto& row : rows) {
    body_ += "<tr>";
    for (const auto& cell : row)
      body_ += cell.kind.empty() ? "<td>" + html_escape(cell.text) + "</td>"
                                 : fmt::format("<td class=\"verdict-{}\">{}</td>", class_name(cell.kind), html_escape(cell.text));
    body_ += "</tr>\n";
  }
  body_ += "</table>\n";
}

void HtmlPage::code(std::string_view text) { body_ += "<pre>" + html_escape(text) + "</pre>\n"; }

void HtmlPage::list(const std::vector<std::string>& items) {
  body_ += "<ul>\n";
  for (const auto& item : items) body_ += "<li>" + html_escape(item) + "</li>\n";
  body_ += "</ul>\n";
}

void HtmlPage::chart(std::string_view id, std::string_view caption, json config, int width, int height) {
  const std::string canvas_id = "chart-" + std::string(id);
  json& options = config["options"];
  if (!options.is_object()) options = json::object();
  options["animation"] = false;
  options["responsive"] = false;
  body_ += fmt::format("<figure><canvas id=\"{}\" width=\"{}\" height=\"{}\"></canvas><figcaption>{}</figcaption></figure>\n",
                       html_escape(canvas_id), width, height, html_escape(caption));
  charts_.emplace_back(canvas_id, std::move(config));
}

void HtmlPage::begin_section(std::string_view id) { body_ += fmt::format("<section id=\"{}\">\n", html_escape(id)); }
void HtmlPage::end_section() { body_ += "</section>\n"; }

std::string HtmlPage::render() const {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + html_escape(title_) +
                    "</title>\n<style>" + std::string(kStyle) + "</style>\n";
  if (!charts_.empty()) {
    std::string library = read_file(chart_js_path());
    // The library must not close its own <script> element early; its minified text holds no "</script" (checked).
    if (library.find("</script") != std::string::npos)
      throw std::invalid_argument("Chart.js at " + chart_js_path().string() + " holds \"</script\" and cannot be inlined");
    out += "<script>\n" + library + "\n</script>\n";
  }
  out += "</head>\n<body>\n<h1>" + html_escape(title_) + "</h1>\n" + body_;
  if (!charts_.empty()) {
    json charts = json::array();
    for (const auto& [id, config] : charts_) charts.push_back({{"id", id}, {"config", config}});
    out += "<script type=\"application/json\" id=\"accumcheck-charts\">" + script_safe_json(charts) + "</script>\n";
    out += "<script>" + std::string(kDrawScript) + "</script>\n";
  }
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace accumcheck::surface
