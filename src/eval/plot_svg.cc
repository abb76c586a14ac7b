// The SVG writer: draws a PlotFigure's primitives as SVG elements.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "eval/plot.h"

namespace rotor::eval {
namespace {

constexpr const char* kFont = "DejaVu Sans, Arial, Helvetica, sans-serif";

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string DashAttr(int dash) {
  std::string s;
  for (double d : DashPattern(dash)) s += fmt::format("{}{:g}", s.empty() ? "" : ",", d);
  return s.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", s);
}

std::string SvgPath(const PlotPath& p) {
  std::string points;
  for (const PlotPoint& q : p.points) points += fmt::format("{:.1f},{:.1f} ", q.x, q.y);
  if (!points.empty()) points.pop_back();
  return fmt::format("<polyline{} fill=\"{}\" stroke=\"{}\" stroke-width=\"{:g}\"{} points=\"{}\"/>\n",
                     p.clip ? " clip-path=\"url(#plot)\"" : "", p.fill ? p.color : "none",
                     p.width > 0 ? p.color : "none", p.width, DashAttr(p.dash), points);
}

std::string SvgText(const PlotText& t) {
  const char* anchor = t.anchor == PlotText::Anchor::kMiddle ? "middle"
                       : t.anchor == PlotText::Anchor::kEnd  ? "end"
                                                             : "start";
  const std::string place =
      t.vertical ? fmt::format("transform=\"translate({:.1f},{:.1f}) rotate(-90)\"", t.x, t.y)
                 : fmt::format("x=\"{:.1f}\" y=\"{:.1f}\"", t.x, t.y);
  const std::string fill = t.color == "#000000" ? "" : fmt::format(" fill=\"{}\"", t.color);
  return fmt::format("<text {} font-size=\"{:g}\" text-anchor=\"{}\"{}>{}</text>\n", place, t.size,
                     anchor, fill, Escape(t.text));
}

}  // namespace

std::string RenderSvgPlot(const PlotOptions& options, std::span<const PlotSeries> series) {
  const PlotFigure f = LayoutPlot(options, series);
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"{2}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      f.width, f.height, kFont);
  svg += fmt::format(
      "<clipPath id=\"plot\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
      "height=\"{:.1f}\"/></clipPath>\n",
      f.clip_x, f.clip_y, f.clip_w, f.clip_h);
  for (const PlotItem& it : f.items) svg += it.is_text ? SvgText(it.text) : SvgPath(it.path);
  svg += "</svg>\n";
  return svg;
}

Status WriteSvgPlot(const std::string& path, const PlotOptions& options,
                    std::span<const PlotSeries> series) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return Errorf("cannot create '{}': {}", path, std::strerror(errno));
  out << RenderSvgPlot(options, series);
  out.close();
  if (!out) return Errorf("cannot write '{}'", path);
  return Status::Ok();
}

}  // namespace rotor::eval
