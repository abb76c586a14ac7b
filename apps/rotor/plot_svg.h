// A small SVG line-chart writer: one line per series, labelled axes with
// ticks, an optional log-scale y axis, a legend, vertical markers.
#pragma once

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace rotor::cli {

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

std::string RenderSvgPlot(const PlotOptions& options, std::span<const PlotSeries> series);
Status WriteSvgPlot(const std::string& path, const PlotOptions& options,
                    std::span<const PlotSeries> series);

}  // namespace rotor::cli
