// Line charts for `rotor perplexity --plot`: one line per series, labelled
// axes with ticks, an optional log-scale y axis, a legend, vertical markers.
//
// LayoutPlot() turns the data into a figure of drawing primitives in pixel
// coordinates (grid, axes, ticks, labels, lines, legend); the SVG and PNG
// writers only draw those primitives, so both formats show the same chart.
#pragma once

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace rotor::eval {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;  // same length; non-finite or non-positive (log) y are drawn at the top
  std::string color;         // "#rrggbb"; empty = from the palette by index
  int dash = 0;              // 0 solid, 1 dashed, 2 dotted, 3 dash-dot
};

struct PlotMarker {
  double x = 0;
  std::string label;
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_y = false;
  double x_max = NAN;               // the x axis reaches at least this far (NAN: the data's extent)
  std::vector<PlotMarker> markers;  // vertical dashed lines
  int width = 960;
  int height = 560;
};

// Round tick values from at or below lo to at or above hi: about `target`
// steps of 1, 2 or 5 x 10^k.
std::vector<double> LinearTicks(double lo, double hi, int target);
// Ticks of a log axis over [lo, hi] (lo > 0): 1, 2, 5 x 10^k when the range
// spans few decades, else the decades.
std::vector<double> LogTicks(double lo, double hi);
// A tick label: "0.5", "20", "5000", "1e+06".
std::string TickLabel(double v);

// Drawing primitives, in pixels (origin top left), in painting order.
struct PlotPoint {
  double x, y;
};
struct PlotPath {
  std::vector<PlotPoint> points;  // a polyline
  std::string color;              // "#rrggbb"
  double width = 1;
  int dash = 0;                   // as PlotSeries::dash
  bool clip = false;              // clipped to the plot area
  bool fill = false;              // closed and filled (width 0: no outline)
};
struct PlotText {
  double x, y;                    // anchor point on the baseline
  std::string text;               // UTF-8, unescaped
  double size = 12;               // pixels
  enum class Anchor { kStart, kMiddle, kEnd } anchor = Anchor::kStart;
  bool vertical = false;          // rotated 90 degrees counter-clockwise about (x, y)
  std::string color = "#000000";
};
struct PlotItem {
  bool is_text = false;
  PlotPath path;                  // if !is_text
  PlotText text;                  // if is_text
};
struct PlotFigure {
  int width = 0, height = 0;
  double clip_x = 0, clip_y = 0, clip_w = 0, clip_h = 0;  // the plot area
  std::vector<PlotItem> items;
};

PlotFigure LayoutPlot(const PlotOptions& options, std::span<const PlotSeries> series);
// "#rrggbb" -> components in [0, 1] (black if malformed).
void ParseColor(const std::string& hex, double rgb[3]);
// Dash pattern of a PlotSeries::dash value, in pixels ({} = solid).
std::vector<double> DashPattern(int dash);

std::string RenderSvgPlot(const PlotOptions& options, std::span<const PlotSeries> series);
Status WriteSvgPlot(const std::string& path, const PlotOptions& options,
                    std::span<const PlotSeries> series);
// PNG through cairo (antialiased, DejaVu Sans or the system's sans-serif).
Status WritePngPlot(const std::string& path, const PlotOptions& options,
                    std::span<const PlotSeries> series);
// By the path's extension: ".svg" or ".png" (case-insensitive); any other is an error.
Status WritePlot(const std::string& path, const PlotOptions& options,
                 std::span<const PlotSeries> series);

}  // namespace rotor::eval
