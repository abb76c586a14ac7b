#include "plot_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>

namespace rotor::cli {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr const char* kDash[] = {"", "7,4", "2,3", "9,3,2,3"};
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

// 1, 2 or 5 x 10^k nearest above (up) or below `v` > 0.
double Nice125(double v, bool up) {
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  const double m = v / p;
  if (up) return (m <= 1 + 1e-9 ? 1 : m <= 2 + 1e-9 ? 2 : m <= 5 + 1e-9 ? 5 : 10) * p;
  return (m >= 5 - 1e-9 ? 5 : m >= 2 - 1e-9 ? 2 : 1) * p;
}

// Maps data to pixels.
struct Axis {
  double lo, hi;  // data range
  double p0, p1;  // pixel range
  bool log;
  double operator()(double v) const {
    const double t =
        log ? (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
};

}  // namespace

std::vector<double> LinearTicks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  // The 1, 2 or 5 x 10^k step closest (in ratio) to an even split.
  const double raw = (hi - lo) / std::max(target, 1);
  const double up = Nice125(raw, true), down = Nice125(raw, false);
  const double step = up / raw < raw / down ? up : down;
  std::vector<double> ticks;
  const int64_t k0 = static_cast<int64_t>(std::floor(lo / step + 1e-9));
  const int64_t k1 = static_cast<int64_t>(std::ceil(hi / step - 1e-9));
  for (int64_t k = k0; k <= k1; ++k) ticks.push_back(k * step);
  return ticks;
}

std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> ticks;
  if (!(lo > 0) || !(hi > lo)) return {lo};
  const int d0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int d1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  const bool fine = d1 - d0 <= 4;
  for (int d = d0; d <= d1; ++d)
    for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
      const double v = m * std::pow(10.0, d);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
    }
  return ticks;
}

std::string TickLabel(double v) {
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) return fmt::format("{:g}", v);
  std::string s = fmt::format("{:.3f}", v);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string RenderSvgPlot(const PlotOptions& o, std::span<const PlotSeries> series) {
  const double left = 80, right = 250, top = 50, bottom = 62;
  const double W = o.width, H = o.height;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  for (const PlotSeries& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      const double y = s.y[i];
      if (!std::isfinite(y) || (o.log_y && y <= 0)) continue;
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1;
  if (!std::isfinite(y_lo)) y_lo = 1, y_hi = 10;
  x_lo = std::min(x_lo, 0.0);
  if (std::isfinite(o.x_max)) x_hi = std::max(x_hi, o.x_max);
  // Linear axes begin and end on a tick.
  std::vector<double> x_ticks = LinearTicks(x_lo, x_hi, 8);
  x_lo = x_ticks.front();
  x_hi = std::max(x_hi, x_ticks.back());
  std::vector<double> y_ticks;
  if (o.log_y) {
    y_lo = Nice125(y_lo, false);
    y_hi = Nice125(y_hi, true);
    if (y_hi <= y_lo) y_hi = y_lo * 2;
    y_ticks = LogTicks(y_lo, y_hi);
  } else {
    if (y_hi <= y_lo) y_hi = y_lo + 1;
    y_ticks = LinearTicks(y_lo, y_hi, 8);
    y_lo = y_ticks.front();
    y_hi = std::max(y_hi, y_ticks.back());
  }
  const Axis ax{x_lo, x_hi, left, W - right, false};
  const Axis ay{y_lo, y_hi, H - bottom, top, o.log_y};

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"{2}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      o.width, o.height, kFont);
  svg += fmt::format(
      "<clipPath id=\"plot\"><rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
      "height=\"{:.1f}\"/></clipPath>\n",
      left, top, W - right - left, H - bottom - top);
  svg +=
      fmt::format("<text x=\"{:.1f}\" y=\"28\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
                  W / 2, Escape(o.title));
  // Grid and ticks.
  for (double v : x_ticks) {
    const double px = ax(v);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>\n"
        "<line x1=\"{0:.1f}\" y1=\"{2:.1f}\" x2=\"{0:.1f}\" y2=\"{3:.1f}\" stroke=\"black\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{4:.1f}\" font-size=\"12\" text-anchor=\"middle\">{5}</text>\n",
        px, top, H - bottom, H - bottom + 5, H - bottom + 19, TickLabel(v));
  }
  for (double v : y_ticks) {
    const double py = ay(v);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{2:.1f}\" x2=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/>\n"
        "<line x1=\"{3:.1f}\" y1=\"{2:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n"
        "<text x=\"{4:.1f}\" y=\"{5:.1f}\" font-size=\"12\" text-anchor=\"end\">{6}</text>\n",
        left, W - right, py, left - 5, left - 8, py + 4, TickLabel(v));
  }
  svg += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      left, top, W - right - left, H - bottom - top);
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"13\" text-anchor=\"middle\">{}</text>\n",
      (left + W - right) / 2, H - 18, Escape(o.x_label));
  svg += fmt::format(
      "<text transform=\"translate(22,{:.1f}) rotate(-90)\" font-size=\"13\" "
      "text-anchor=\"middle\">{}</text>\n",
      (top + H - bottom) / 2, Escape(o.y_label));
  for (const PlotMarker& m : o.markers) {
    if (m.x < x_lo || m.x > x_hi) continue;
    const double px = ax(m.x);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#555\" "
        "stroke-dasharray=\"4,4\"/>\n<text x=\"{3:.1f}\" y=\"{4:.1f}\" font-size=\"11\" "
        "fill=\"#555\">{5}</text>\n",
        px, top, H - bottom, px + 4, top + 14, Escape(m.label));
  }
  // Lines, clipped to the plot area; values off the axis are drawn at its top.
  for (size_t si = 0; si < series.size(); ++si) {
    const PlotSeries& s = series[si];
    const std::string color = s.color.empty() ? kPalette[si % std::size(kPalette)] : s.color;
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i) {
      double y = s.y[i];
      if (!std::isfinite(y) || (o.log_y && y <= 0)) y = y_hi;
      points += fmt::format("{:.1f},{:.1f} ", ax(s.x[i]), ay(std::clamp(y, y_lo, y_hi)));
    }
    svg += fmt::format(
        "<polyline clip-path=\"url(#plot)\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" "
        "stroke-dasharray=\"{}\" points=\"{}\"/>\n",
        color, kDash[s.dash % std::size(kDash)], points);
  }
  // Legend, right of the plot.
  const double lx = W - right + 16;
  for (size_t si = 0; si < series.size(); ++si) {
    const PlotSeries& s = series[si];
    const std::string color = s.color.empty() ? kPalette[si % std::size(kPalette)] : s.color;
    const double ly = top + 10 + 20.0 * si;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2.2\" stroke-dasharray=\"{4}\"/>\n<text x=\"{5:.1f}\" y=\"{6:.1f}\" "
        "font-size=\"12\">{7}</text>\n",
        lx, ly, lx + 30, color, kDash[s.dash % std::size(kDash)], lx + 38, ly + 4, Escape(s.label));
  }
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

}  // namespace rotor::cli
