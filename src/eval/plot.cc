// Chart layout: data -> axes, ticks and drawing primitives in pixels.
#include "eval/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>

namespace rotor::eval {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

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

class Builder {
 public:
  explicit Builder(PlotFigure& f) : f_(f) {}
  void Line(double x0, double y0, double x1, double y1, const std::string& color,
            double width = 1, int dash = 0) {
    PlotItem it;
    it.path = PlotPath{{{x0, y0}, {x1, y1}}, color, width, dash, false, false};
    f_.items.push_back(std::move(it));
  }
  void Path(PlotPath p) {
    PlotItem it;
    it.path = std::move(p);
    f_.items.push_back(std::move(it));
  }
  void Text(double x, double y, std::string text, double size,
            PlotText::Anchor anchor = PlotText::Anchor::kStart, bool vertical = false,
            std::string color = "#000000") {
    PlotItem it;
    it.is_text = true;
    it.text = PlotText{x, y, std::move(text), size, anchor, vertical, std::move(color)};
    f_.items.push_back(std::move(it));
  }

 private:
  PlotFigure& f_;
};

std::string SeriesColor(const PlotSeries& s, size_t index) {
  return s.color.empty() ? kPalette[index % std::size(kPalette)] : s.color;
}

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

void ParseColor(const std::string& hex, double rgb[3]) {
  rgb[0] = rgb[1] = rgb[2] = 0;
  if (hex.size() != 7 || hex[0] != '#') return;
  for (int i = 0; i < 3; ++i) {
    char* end = nullptr;
    const std::string part = hex.substr(1 + 2 * i, 2);
    const long v = std::strtol(part.c_str(), &end, 16);
    if (end != part.c_str() + 2) return;
    rgb[i] = v / 255.0;
  }
}

std::vector<double> DashPattern(int dash) {
  switch (dash % 4) {
    case 1:
      return {7, 4};
    case 2:
      return {2, 3};
    case 3:
      return {9, 3, 2, 3};
    default:
      return {};
  }
}

PlotFigure LayoutPlot(const PlotOptions& o, std::span<const PlotSeries> series) {
  const double left = 80, right = 250, top = 50, bottom = 62;
  const double W = o.width, H = o.height;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  for (const PlotSeries& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
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
  if (x_hi <= x_lo) x_hi = x_lo + 1;
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

  PlotFigure f;
  f.width = o.width;
  f.height = o.height;
  f.clip_x = left, f.clip_y = top, f.clip_w = W - right - left, f.clip_h = H - bottom - top;
  Builder b(f);
  using A = PlotText::Anchor;
  b.Text(W / 2, 28, o.title, 15, A::kMiddle);
  // Grid and ticks.
  for (double v : x_ticks) {
    const double px = ax(v);
    b.Line(px, top, px, H - bottom, "#e4e4e4");
    b.Line(px, H - bottom, px, H - bottom + 5, "#000000");
    b.Text(px, H - bottom + 19, TickLabel(v), 12, A::kMiddle);
  }
  for (double v : y_ticks) {
    const double py = ay(v);
    b.Line(left, py, W - right, py, "#e4e4e4");
    b.Line(left - 5, py, left, py, "#000000");
    b.Text(left - 8, py + 4, TickLabel(v), 12, A::kEnd);
  }
  b.Path(PlotPath{{{left, top}, {W - right, top}, {W - right, H - bottom}, {left, H - bottom},
                   {left, top}},
                  "#000000", 1, 0, false, false});
  b.Text((left + W - right) / 2, H - 18, o.x_label, 13, A::kMiddle);
  b.Text(22, (top + H - bottom) / 2, o.y_label, 13, A::kMiddle, /*vertical=*/true);
  for (const PlotMarker& m : o.markers) {
    if (m.x < x_lo || m.x > x_hi) continue;
    const double px = ax(m.x);
    b.Path(PlotPath{{{px, top}, {px, H - bottom}}, "#555555", 1, 1, false, false});
    b.Text(px + 4, top + 14, m.label, 11, A::kStart, false, "#555555");
  }
  // Lines, clipped to the plot area; values off the axis are drawn at its top.
  for (size_t si = 0; si < series.size(); ++si) {
    const PlotSeries& s = series[si];
    PlotPath p{{}, SeriesColor(s, si), 1.8, s.dash, true, false};
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      double y = s.y[i];
      if (!std::isfinite(y) || (o.log_y && y <= 0)) y = y_hi;
      p.points.push_back({ax(s.x[i]), ay(std::clamp(y, y_lo, y_hi))});
    }
    b.Path(std::move(p));
  }
  // Legend, right of the plot.
  const double lx = W - right + 16;
  for (size_t si = 0; si < series.size(); ++si) {
    const PlotSeries& s = series[si];
    const double ly = top + 10 + 20.0 * si;
    b.Line(lx, ly, lx + 30, ly, SeriesColor(s, si), 2.2, s.dash);
    b.Text(lx + 38, ly + 4, s.label, 12);
  }
  return f;
}

Status WritePlot(const std::string& path, const PlotOptions& options,
                 std::span<const PlotSeries> series) {
  std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".svg") return WriteSvgPlot(path, options, series);
  if (ext == ".png") return WritePngPlot(path, options, series);
  return Errorf("plot '{}': unknown format (name the file .svg or .png)", path);
}

}  // namespace rotor::eval
